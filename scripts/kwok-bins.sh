#!/usr/bin/env bash
# Builds kwok, the controller of sigs.k8s.io/kwok that plays the kubelet
# of simulated nodes against a real API server (Node heartbeats, pod IPs
# from each Node's pod CIDR, pods Running and Ready, deletes finished),
# from its Go module into a cache outside the work tree, once per machine:
#
#     /var/cache/xlane/kwok/<version>/bin/kwok
#     /var/cache/xlane/kwok/<version>/bin/stages/*.yaml
#
# with the Stage objects of the module's kustomize/stage/fast set beside it
# (node-initialize, node-heartbeat-with-lease, pod-ready, pod-complete,
# pod-delete): kwok 0.8 has no stages built in and refuses to start
# without some (--config). bench/scale runs it against the cluster of
# scripts/k8s-bins.sh's kube-apiserver: `kwok --kubeconfig=...
# --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake
# --config STAGES` (no kwokctl, no cluster of its own). Prints the bin
# directory on stdout; everything else goes to stderr. XLANE_KWOK_VERSION
# picks the release, XLANE_KWOK_CACHE the cache root.
set -euo pipefail

export PATH=$PATH:/usr/local/go/bin
version=${XLANE_KWOK_VERSION:-v0.8.0}
cache=${XLANE_KWOK_CACHE:-/var/cache/xlane/kwok}
dir=$cache/$version

stages=(node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete)

have_all() {
	local s
	[[ -x $dir/bin/kwok ]] || return 1
	for s in "${stages[@]}"; do [[ -f $dir/bin/stages/$(basename "$s").yaml ]] || return 1; done
}

. "$(dirname "$0")/lib/once.sh"
once "$dir" "$dir/bin" have_all

# The module source, read-only in the module cache: copy it to a build tree.
gomod=$(go mod download -json "sigs.k8s.io/kwok@$version" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
[[ -d $gomod ]] || { echo "kwok-bins: download sigs.k8s.io/kwok@$version failed" >&2; exit 1; }
src=$dir/src
rm -rf "$src"
cp -r "$gomod" "$src"
chmod -R u+w "$src"
cd "$src"
export GOWORK=off
new=$dir/bin/.new
rm -rf "$new"
mkdir -p "$new/stages"
for s in "${stages[@]}"; do
	cp "kustomize/stage/$s.yaml" "$new/stages/"
done
if [[ ! -x $dir/bin/kwok ]]; then
	echo "kwok-bins: building sigs.k8s.io/kwok/cmd/kwok $version into $dir (takes minutes)" >&2
	# The version stamp of kwok's release Makefile (`kwok --version`).
	ldflags="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${version#v}"
	# Nice: the build takes both cores for a minute or two (13 minutes
	# at a load of 20).
	GOFLAGS=-mod=mod CGO_ENABLED=0 nice -n 19 go build -trimpath -ldflags "$ldflags" -o "$new/kwok" ./cmd/kwok
	mv "$new/kwok" "$dir/bin/kwok"
fi
rm -rf "$dir/bin/stages"
mv "$new/stages" "$dir/bin/stages"
rmdir "$new"
rm -rf "$src"
echo "kwok-bins: done" >&2
echo "$dir/bin"
