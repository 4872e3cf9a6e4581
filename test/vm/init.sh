#!/bin/busybox sh
# /init of xlane's test VMs (see test/vm/doc.go). Mounts the host's root
# read-only over virtio-9p, gives it fresh proc/sys/dev/bpffs/cgroup2 and
# tmpfs on the places tests write to, chroots into it to run
# /run/xlvm/run.sh from the writable share, and powers off. The guest has
# no network device unless the caller gives it one (Cmd.QEMUArgs).
/bin/busybox mkdir -p /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

die() {
	echo "xlvm: $*"
	echo 125 > /out/rc 2>/dev/null
	sync
	poweroff -f
}

while read -r m; do
	insmod "/lib/modules/$m.ko" || echo "xlvm: insmod $m failed"
done < /modules

opts=trans=virtio,version=9p2000.L,msize=524288
mount -t 9p -o "$opts,ro,cache=loose" hostroot /host || die "mount host root"
mount -t 9p -o "$opts" out /out || die "mount result share"
# A second view of the host root: the tmpfs mounts below hide /tmp, /run,
# /var/tmp and /root, where a checkout (CI's, a worktree) may live; the
# paths the command needs (/out/keep: its directory, absolute paths in its
# environment) are bound back from here.
mkdir -p /lower
mount -o bind /host /lower || die "bind host root (second view)"

H=/host
mount -t proc proc $H/proc || die "mount proc"
mount -t sysfs sysfs $H/sys || die "mount sysfs"
mount -t devtmpfs devtmpfs $H/dev || die "mount devtmpfs"
mkdir -p $H/dev/pts $H/dev/shm
mount -t devpts devpts $H/dev/pts
mount -t tmpfs tmpfs $H/dev/shm
mount -t bpf bpf $H/sys/fs/bpf || die "mount bpffs"
mount -t cgroup2 cgroup2 $H/sys/fs/cgroup
mount -t tracefs tracefs $H/sys/kernel/tracing 2>/dev/null
mount -t debugfs debugfs $H/sys/kernel/debug 2>/dev/null
for d in tmp run var/tmp root; do
	mount -t tmpfs -o mode=1777 tmpfs "$H/$d" || die "mount tmpfs on /$d"
done
mkdir -p $H/run/xlvm $H/run/netns
mount -o bind /out $H/run/xlvm || die "bind result share"
if [ -f /out/keep ]; then
	while read -r p; do
		case "$p" in
		/run/xlvm | /run/xlvm/*) ;;
		/tmp/* | /run/* | /var/tmp/* | /root/*)
			[ -e "/lower$p" ] || continue
			mkdir -p "$H$p" && mount -o bind "/lower$p" "$H$p" || die "bind $p"
			;;
		esac
	done < /out/keep
fi
ip link set lo up

echo "xlvm: $(uname -r) up, running the command"
chroot $H /bin/sh /run/xlvm/run.sh
[ -e /out/rc ] || echo 125 > /out/rc
sync
poweroff -f
