#!/usr/bin/env bash
# Builds the stock Hubble CLI (and, when named, Hubble Relay) that the
# Hubble tests run against xlaned, from the Go module github.com/cilium/cilium
# (the CLI lives in its hubble/ directory since v1.17, Relay in
# hubble-relay/), unmodified, into a cache outside the work tree, once per
# machine:
#
#     /var/cache/xlane/hubble/<version>/bin/{hubble,hubble-relay}
#
# Arguments name the binaries wanted (default: hubble). Prints the bin
# directory on stdout; everything else goes to stderr.
# XLANE_HUBBLE_VERSION picks the release (it must be the version go.mod
# requires: the API xlaned serves), XLANE_HUBBLE_CACHE the cache root.
set -euo pipefail

export PATH=$PATH:/usr/local/go/bin
here=$(cd "$(dirname "$0")" && pwd)
version=${XLANE_HUBBLE_VERSION:-$(cd "$here/.." && go list -m -f '{{.Version}}' github.com/cilium/cilium)}
cache=${XLANE_HUBBLE_CACHE:-/var/cache/xlane/hubble}
dir=$cache/$version
bins=(hubble)
if (($#)); then
	bins=("$@")
fi

have_all() {
	local b
	for b in "${bins[@]}"; do [[ -x $dir/bin/$b ]] || return 1; done
}

. "$(dirname "$0")/lib/once.sh"
once "$dir" "$dir/bin" have_all

echo "hubble-bins: building ${bins[*]} of github.com/cilium/cilium $version into $dir (takes minutes)" >&2
# The module source, read-only in the module cache: copy it to a build tree.
gomod=$(go mod download -json "github.com/cilium/cilium@$version" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
[[ -d $gomod ]] || { echo "hubble-bins: download github.com/cilium/cilium@$version failed" >&2; exit 1; }
src=$dir/src
rm -rf "$src"
cp -r "$gomod" "$src"
chmod -R u+w "$src"
cd "$src"
export GOWORK=off
pkgs=()
for b in "${bins[@]}"; do
	[[ -x $dir/bin/$b ]] && continue
	case $b in
	hubble) pkgs+=(./hubble) ;;
	hubble-relay) pkgs+=(./hubble-relay) ;;
	*) echo "hubble-bins: unknown binary $b (hubble, hubble-relay)" >&2; exit 1 ;;
	esac
done
# The version stamps the release Makefiles set (hubble/Makefile,
# Makefile.defs), so `hubble version` and Relay's status say which.
ldflags="-s -w -X github.com/cilium/cilium/hubble/pkg.Version=$version"
ldflags+=" -X github.com/cilium/cilium/pkg/version.ciliumVersion=${version#v}"
new=$dir/bin/.new
rm -rf "$new"
mkdir -p "$new"
echo "hubble-bins: go build ${pkgs[*]}" >&2
# Nice: the build takes both cores for minutes.
GOFLAGS=-mod=mod CGO_ENABLED=0 nice -n 19 go build -trimpath -ldflags "$ldflags" -o "$new/" "${pkgs[@]}"
for f in "$new"/*; do
	[[ -e $f ]] && mv "$f" "$dir/bin/"
done
rmdir "$new"
rm -rf "$src"
echo "hubble-bins: done" >&2
echo "$dir/bin"
