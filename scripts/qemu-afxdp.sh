#!/usr/bin/env bash
# Builds a QEMU with the af-xdp network backend (-netdev af-xdp) and the
# libxdp it needs into a cache outside the work tree, once per machine:
#
#     scripts/qemu-afxdp.sh          # builds if needed, prints the binary
#
# Debian's QEMU packages (bookworm's 7.2, the 10.x builds of trixie and
# bookworm-backports) are compiled without af-xdp: it needs libxdp >= 1.4 and
# Debian 12 has 1.3.1. So this takes the source packages (xdp-tools for
# libxdp, qemu >= 10.1 for map-path=) from Debian's archive with a private apt
# configuration (its own source list, package lists and cache under a
# temporary directory: /etc/apt is not touched), builds libxdp and a QEMU with
# only x86_64-softmmu, TCG/KVM, virtio-net, 9p (the test guests share the
# host tree) and af-xdp, and installs both into
# ${XLANE_QEMU_AFXDP_CACHE:-/var/cache/xlane/qemu-afxdp}. BUILD-INFO there
# records the versions and how long the build took. Nothing here is
# committed; rm -rf the cache to build again.
#
# Exits non-zero if it cannot build: the tests that need this QEMU
# (make test-vm-afxdp) fail rather than skip.
set -euo pipefail

cache=${XLANE_QEMU_AFXDP_CACHE:-/var/cache/xlane/qemu-afxdp}
qemu=$cache/bin/qemu-system-x86_64

ready() {
	[ -x "$qemu" ] && [ -f "$cache/BUILD-INFO" ] &&
		"$qemu" -machine none -netdev help 2>/dev/null | grep -x af-xdp >/dev/null
}
if ready; then
	echo "$qemu"
	exit 0
fi

mkdir -p "$(dirname "$cache")"
exec 9>"$cache.lock"
flock 9 # another build on this machine: wait for it
if ready; then
	echo "$qemu"
	exit 0
fi

start=$(date +%s)
niceness=${XLANE_QEMU_AFXDP_NICE:-10} # 0 where nothing else runs (CI)
log() { echo "qemu-afxdp: $*" >&2; }

# Build tools from Debian 12 itself (already there on a machine that ran
# scripts/deps.sh, except the few only this build needs).
pkgs=(build-essential dpkg-dev pkg-config m4 ninja-build python3-venv
      libglib2.0-dev libattr1-dev libbpf-dev libelf-dev zlib1g-dev clang-19 llvm-19
      seabios ipxe-qemu qemu-system-data)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

work=$(mktemp -d /var/tmp/xlane-qemu-afxdp.XXXXXX)
trap 'rm -rf "$work"' EXIT

# A private apt: deb-src lines for the suites that carry the sources, its
# own lists and cache. The system's apt configuration stays as it was.
mkdir -p "$work/apt/sources" "$work/apt/lists/partial" "$work/apt/cache/archives/partial"
cat >"$work/apt/sources/src.sources" <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: sid trixie-backports trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
apt_opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$work/apt/sources"
          -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache"
          -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" -qq update

# fetch PKG MIN MAX: downloads and unpacks the newest source version of PKG
# in [MIN, MAX) whose files the archive still serves (the index can list
# versions whose files are gone); prints its directory.
fetch() {
	local pkg=$1 min=$2 max=$3 v
	for v in $(apt-cache "${apt_opts[@]}" madison "$pkg" | awk -F'|' '/Sources/ {gsub(/ /, "", $2); print $2}' |
		sort -u | sort -r -V); do
		dpkg --compare-versions "$v" ge "$min" && dpkg --compare-versions "$v" lt "$max" || continue
		mkdir -p "$work/src/$pkg"
		if (cd "$work/src/$pkg" && apt-get "${apt_opts[@]}" -qq source --download-only "$pkg=$v" >/dev/null 2>&1); then
			(cd "$work/src/$pkg" && dpkg-source --no-check -x ./*.dsc "$pkg" >/dev/null)
			log "$pkg $v"
			echo "$pkg $v" >>"$work/versions"
			return 0
		fi
		rm -rf "$work/src/$pkg"
	done
	log "no source of $pkg in [$min, $max) can be downloaded"
	return 1
}
fetch xdp-tools 1.4 2
fetch qemu 1:10.1 1:12

mkdir -p "$cache"
# libxdp only (the xdp-tools utilities are not needed), into the cache.
(
	cd "$work/src/xdp-tools/xdp-tools"
	export CC=gcc CLANG=clang-19 LLC=llc-19 PREFIX="$cache" LIBDIR="$cache/lib"
	nice -n "$niceness" ./configure >/dev/null
	nice -n "$niceness" make -j"$(nproc)" -C lib/libxdp >/dev/null
	make -C lib/libxdp install PREFIX="$cache" LIBDIR="$cache/lib" >/dev/null
)
log "libxdp built ($(($(date +%s) - start)) s so far)"

# QEMU: no default features and no default devices, then only what the
# tests' guests use (test/vm: q35 with an ISA serial console, virtio-net-pci,
# virtio-9p-pci; firmware from Debian's packages). No debug info: the
# binary is for running tests, and -g costs compile and link time.
(
	cd "$work/src/qemu/qemu"
	cat >configs/devices/x86_64-softmmu/xlane.mak <<-'EOF'
		CONFIG_Q35=y
		CONFIG_VIRTIO_PCI=y
		CONFIG_VIRTIO_NET=y
		CONFIG_VIRTIO_9P=y
		# The q35 ACPI code calls into CXL (hw/acpi/cxl.c) and QEMU 10.2's
		# CXL stubs lack what it calls: the link needs CXL itself, which
		# needs PXB and the CXL memory device, and its root port needs the
		# PCIe root port to start.
		CONFIG_PXB=y
		CONFIG_CXL=y
		CONFIG_CXL_MEM_DEVICE=y
		CONFIG_PCIE_PORT=y
	EOF
	mkdir build && cd build
	python3 -m venv "$work/venv"
	"$work/venv/bin/pip" install -q 'meson>=1.5,<2' >/dev/null
	PKG_CONFIG_PATH="$cache/lib/pkgconfig" nice -n "$niceness" ../configure \
		--prefix="$cache" --python="$work/venv/bin/python3" \
		--target-list=x86_64-softmmu --without-default-features \
		--without-default-devices --with-devices-x86_64=xlane \
		--enable-tcg --enable-kvm --enable-bpf --enable-af-xdp --enable-virtfs --enable-attr \
		--disable-debug-info --disable-docs --disable-werror --disable-download --disable-install-blobs \
		--firmwarepath=/usr/share/qemu:/usr/share/seabios:/usr/lib/ipxe/qemu \
		--extra-ldflags="-Wl,-rpath,$cache/lib" >"$work/configure.log" 2>&1 ||
		{ tail -40 "$work/configure.log" >&2; exit 1; }
	nice -n "$niceness" ninja -j"$(nproc)" qemu-system-x86_64 >"$work/build.log" 2>&1 ||
		{ tail -40 "$work/build.log" >&2; exit 1; }
	echo "$(grep -c '^\[' "$work/build.log" || true) build steps" >"$work/steps"
	install -D -m 0755 qemu-system-x86_64 "$qemu"
)
"$qemu" -machine none -netdev help | grep -x af-xdp >/dev/null || { log "$qemu has no af-xdp backend"; exit 1; }

secs=$(($(date +%s) - start))
times >"$work/times" # the builtin in this shell (in a pipe it would time a subshell)
{
	cat "$work/versions"
	echo "built $(date -u +%FT%TZ) in $secs s on $(nproc) cores (nice $niceness, load $(cut -d' ' -f1-3 /proc/loadavg) at the end)"
	echo "CPU time (user, system; this script, then its children): $(tr '\n' ' ' <"$work/times")"
	cat "$work/steps"
} >"$cache/BUILD-INFO"
log "done in $secs s: $qemu"
echo "$qemu"
