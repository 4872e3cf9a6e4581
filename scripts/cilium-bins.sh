#!/usr/bin/env bash
# Builds Cilium (bench/peers, docs/benchmarks.md) from the Go module
# github.com/cilium/cilium at a pinned release into a cache outside the work
# tree, once per machine and version:
#
#     /var/cache/xlane/cilium/<version>/bin/{cilium-agent,cilium-operator-generic,cilium-cni,cilium-dbg,clang}
#     /var/cache/xlane/cilium/<version>/bpf/    the agent's BPF C sources (its --bpf-dir... see below)
#
# The agent compiles its BPF programs at run time (bpf_lxc.c per endpoint,
# bpf_host.c per device, bpf_sock.c, bpf_overlay.c) with the `clang` on its
# PATH from the sources in <lib-dir>/bpf, as Cilium's image does: bin/clang
# is this machine's clang-19, and the script checks once that clang-19
# compiles every one of the agent's programs (make -C bpf, the objects in
# bpf/.check), so a compiler the agent cannot use fails here, not at the
# first pod. The CRDs come with the module: the operator registers the ones
# compiled into it (pkg/k8s/apis/cilium.io/client/crds).
#
# The module zip has no vendor/ directory: the copy is built in module mode
# against the proxy (go.sum is the release's). Built as Cilium's Makefiles
# build (Makefile.defs): CGO_ENABLED=0, -tags osusergo, the operator with
# ipam_provider_operator, the version stamped by -X. Prints the cache
# directory (the parent of bin/ and bpf/) on stdout; everything else goes to
# stderr. XLANE_CILIUM_VERSION picks the release, XLANE_CILIUM_CACHE the
# cache root.
set -euo pipefail

export PATH=$PATH:/usr/local/go/bin
version=${XLANE_CILIUM_VERSION:-v1.20.2}
cache=${XLANE_CILIUM_CACHE:-/var/cache/xlane/cilium}
dir=$cache/$version
bins=(cilium-agent cilium-operator-generic cilium-cni cilium-dbg)

have_all() {
	local b
	for b in "${bins[@]}" clang; do [[ -x $dir/bin/$b ]] || return 1; done
	[[ -f $dir/bpf/.check/ok ]]
}

. "$(dirname "$0")/lib/once.sh"
once "$dir" "$dir" have_all

command -v clang-19 >/dev/null || { echo "cilium-bins: clang-19 missing (scripts/deps.sh installs it)" >&2; exit 1; }
echo "cilium-bins: building Cilium $version into $dir (takes many minutes)" >&2
gomod=$(go mod download -json "github.com/cilium/cilium@$version" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
[[ -d $gomod ]] || { echo "cilium-bins: download github.com/cilium/cilium@$version failed" >&2; exit 1; }

# The BPF sources the agent compiles from, and the compiler it runs.
mkdir -p "$dir/bin"
ln -sfn "$(command -v clang-19)" "$dir/bin/clang"
if [[ ! -f $dir/bpf/.check/ok ]]; then
	rm -rf "$dir/bpf.new"
	cp -r "$gomod/bpf" "$dir/bpf.new"
	chmod -R u+w "$dir/bpf.new"
	mkdir -p "$dir/bpf.new/.check"
	echo "cilium-bins: checking that clang-19 builds the agent's BPF programs" >&2
	for p in bpf_lxc bpf_host bpf_overlay bpf_sock bpf_xdp; do
		PATH=$dir/bin:$PATH clang -O2 --target=bpf -std=gnu99 -nostdinc -mcpu=v3 \
			-Wall -Wno-address-of-packed-member -Wno-unknown-warning-option \
			-Wno-gnu-variable-sized-type-not-at-end \
			-I"$dir/bpf.new" -I"$dir/bpf.new/include" -g \
			-c "$dir/bpf.new/$p.c" -o "$dir/bpf.new/.check/$p.o"
	done
	touch "$dir/bpf.new/.check/ok"
	rm -rf "$dir/bpf"
	mv "$dir/bpf.new" "$dir/bpf"
fi

src=$dir/src
rm -rf "$src"
cp -r "$gomod" "$src"
chmod -R u+w "$src"
cd "$src"
export GOWORK=off CGO_ENABLED=0
# Modules the release pins that a module proxy may not serve (the one
# here refuses both; proxy.golang.org serves them): each is replaced only
# when its pinned version cannot be downloaded.
#  - github.com/osrg/gobgp/v4 at a pseudo-version (a commit between
#    releases; "403: This module version is not available"): v4.8.0, the
#    next release (the BGP control plane is off in the benchmark's agents);
#  - sigs.k8s.io/mcs-api/controllers v0.5.2 (not listed at all), of which
#    Cilium uses one constant (DerivedServiceAnnotation): the module's
#    source at tag controllers/v0.5.0 from a git repository of
#    kubernetes-sigs/mcs-api, XLANE_CILIUM_MCS_API (a clone or its .git).
pinned() { sed -n "s#^\s*$1 \(v[^ ]*\).*#\1#p" go.mod | head -1; }
if ! go mod download "github.com/osrg/gobgp/v4@$(pinned github.com/osrg/gobgp/v4)" 2>/dev/null; then
	echo "cilium-bins: github.com/osrg/gobgp/v4@$(pinned github.com/osrg/gobgp/v4) not served: replaced by v4.8.0" >&2
	go mod edit -replace github.com/osrg/gobgp/v4=github.com/osrg/gobgp/v4@v4.8.0
fi
mcs=sigs.k8s.io/mcs-api/controllers
if ! go mod download "$mcs@$(pinned $mcs)" 2>/dev/null; then
	[[ -n ${XLANE_CILIUM_MCS_API:-} ]] || {
		echo "cilium-bins: $mcs@$(pinned $mcs) not served by the module proxy: set XLANE_CILIUM_MCS_API to a git clone of github.com/kubernetes-sigs/mcs-api" >&2
		exit 1
	}
	echo "cilium-bins: $mcs@$(pinned $mcs) not served: replaced by $XLANE_CILIUM_MCS_API at controllers/v0.5.0" >&2
	mkdir -p "$src/.mcs-api"
	git --git-dir="$(git -C "$XLANE_CILIUM_MCS_API" rev-parse --absolute-git-dir)" archive controllers/v0.5.0 controllers | tar -x -C "$src/.mcs-api"
	go mod edit -replace "$mcs=./.mcs-api/controllers"
fi
ldflags="-s -w -X github.com/cilium/cilium/pkg/version.ciliumVersion=${version#v}"
new=$dir/bin/.new
rm -rf "$new"
mkdir -p "$new"
pkgs=()
for b in cilium-agent cilium-cni cilium-dbg; do
	[[ -x $dir/bin/$b ]] && continue
	case $b in
	cilium-agent) pkgs+=(./daemon) ;;
	cilium-cni) pkgs+=(./plugins/cilium-cni) ;;
	cilium-dbg) pkgs+=(./cilium-dbg) ;;
	esac
done
# One go build for the three: the go command schedules all their compiles
# and links at once. -o dir/ names a binary after its package directory:
# ./daemon's is renamed.
if ((${#pkgs[@]})); then
	echo "cilium-bins: go build ${pkgs[*]}" >&2
	go build -mod=mod -trimpath -tags osusergo -ldflags "$ldflags" -o "$new/" "${pkgs[@]}"
	[[ -e $new/daemon ]] && mv "$new/daemon" "$new/cilium-agent"
	mv "$new"/* "$dir/bin/"
fi
if [[ ! -x $dir/bin/cilium-operator-generic ]]; then
	echo "cilium-bins: go build ./operator -> cilium-operator-generic" >&2
	go build -mod=mod -trimpath -tags osusergo,ipam_provider_operator -ldflags "$ldflags" -o "$new/cilium-operator-generic" ./operator
fi
for f in "$new"/*; do
	[[ -e $f ]] && mv "$f" "$dir/bin/"
done
rmdir "$new"
cd /
rm -rf "$src"
echo "cilium-bins: done" >&2
echo "$dir"
