#!/usr/bin/env bash
# The base layer of the DaemonSet's image without a registry or Docker: what
# deploy/kubernetes/Dockerfile takes from debian:12-slim plus apt (a shell,
# coreutils, nft, iptables), taken from this machine's own Debian packages
# instead, as an uncompressed tar of a root file system:
#
#     /var/cache/xlane/image/rootfs-<key>.tar
#
# The packages are base-files, dash, coreutils, nftables and iptables with
# every package they depend on (Pre-Depends and Depends, the first installed alternative),
# each package's files as `dpkg-query -L` lists them (documentation, manual
# pages and locales left out), the alternatives iptables' postinst makes
# (/usr/sbin/iptables -> /etc/alternatives/iptables -> iptables-nft) and
# the merged-/usr links (/bin -> usr/bin, ...). The key is a hash of this
# script and the packages' versions: built once per machine and package
# upgrade (a few seconds). Before the tar is kept, the tree it came from
# runs `sh`, `cp`, `nft` and `iptables` in a chroot: a library missing from
# the closure fails here, not in a pod. Prints the tar's path on stdout.
# The test that runs the DaemonSet (test/e2e TestKubernetesDaemonSet) adds
# the static binaries as a second layer. XLANE_IMAGE_CACHE: the cache dir.
#
# Arguments, if any, name other packages than the five above (with their
# closure too), and XLANE_ROOTFS_CHECK a shell command the tree must run
# instead: Kubernetes' e2e suites' test images (scripts/k8s-conformance.sh)
# take their shell and tools (dig, curl, nc, ip) from here.
set -euo pipefail

cache=${XLANE_IMAGE_CACHE:-/var/cache/xlane/image}
want=(base-files dash coreutils nftables iptables)
check='cp --version && mv --version && nft --version && iptables --version && ip6tables --version'
if (($#)); then
	want=("$@")
	check=${XLANE_ROOTFS_CHECK:-true}
fi
alternatives=(iptables ip6tables iptables-restore iptables-save ip6tables-restore ip6tables-save nc netcat)

command -v dpkg-query >/dev/null || { echo "k8s-image-rootfs: no dpkg-query: this needs a Debian machine" >&2; exit 1; }

installed() { [[ $(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) == installed ]]; }

# The dependency closure.
declare -A seen=()
queue=("${want[@]}")
while ((${#queue[@]})); do
	p=${queue[0]}
	queue=("${queue[@]:1}")
	[[ -n ${seen[$p]:-} ]] && continue
	installed "$p" || { echo "k8s-image-rootfs: package $p is not installed" >&2; exit 1; }
	seen[$p]=1
	deps=$(dpkg-query -W -f='${Pre-Depends}, ${Depends}' "$p")
	IFS=',' read -ra items <<<"$deps"
	for it in "${items[@]}"; do
		[[ -z ${it// /} ]] && continue
		IFS='|' read -ra alts <<<"$it"
		for a in "${alts[@]}"; do
			name=${a%%(*}
			name=${name// /}
			name=${name%:any}
			if installed "$name"; then
				queue+=("$name")
				break
			fi
		done
	done
done
pkgs=$(printf '%s\n' "${!seen[@]}" | sort)
key=$( (cat "$0"; echo "$check"; dpkg-query -W -f='${Package} ${Version} ${Architecture}\n' $pkgs) | sha256sum | cut -c1-16)
out=$cache/rootfs-$key.tar
if [[ -s $out ]]; then
	echo "$out"
	exit 0
fi
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [[ -s $out ]]; then
	echo "$out"
	exit 0
fi

list=$(mktemp)
tree=$(mktemp -d)
trap 'rm -rf "$list" "$tree" "$out.tmp"' EXIT
{
	for p in $pkgs; do dpkg-query -L "$p"; done
	for a in "${alternatives[@]}"; do
		for f in /usr/sbin/$a /usr/bin/$a /etc/alternatives/$a; do
			[[ -L $f ]] && echo "$f"
		done
	done
} | grep -Ev '^/usr/share/(doc|man|info|locale|lintian|bug)(/|$)' | while read -r f; do
	# Canonical paths (/lib/x86_64-linux-gnu/libc.so.6 is
	# /usr/lib/x86_64-linux-gnu/libc.so.6 on a merged /usr): the image
	# gets the merged-/usr links themselves below.
	[[ -e $f || -L $f ]] || continue
	[[ $f == / || $f == /. ]] && continue
	d=$(realpath -e "$(dirname "$f")")
	b=$(basename "$f")
	if [[ -d $f && ! -L $f ]]; then
		p=$(realpath -e "$f")
		# Every directory on the way, so that each has its mode.
		while [[ $p != / ]]; do echo "${p#/}"; p=$(dirname "$p"); done
	else
		rel=${d#/}
		echo "${rel:+$rel/}$b"
	fi
done >"$list"
for l in bin sbin lib lib32 lib64 libx32; do
	[[ -L /$l ]] && echo "$l" >>"$list"
done
echo tmp >>"$list"
sort -u -o "$list" "$list"
# A link named (bin -> usr/bin) is archived as the link.
tar -C / --no-recursion --numeric-owner -cf "$out.tmp" -T "$list"

# The tree must run what the image is for.
tar -C "$tree" -xf "$out.tmp"
if ! chroot "$tree" /bin/sh -c "$check" >/dev/null; then
	echo "k8s-image-rootfs: the root file system does not run $check (a library missing?)" >&2
	exit 1
fi
mv "$out.tmp" "$out"
trap - EXIT
rm -rf "$list" "$tree"
echo "k8s-image-rootfs: $(du -h "$out" | cut -f1) in $out from $(wc -w <<<"$pkgs") packages" >&2
echo "$out"
