#!/usr/bin/env bash
# Builds the Kubernetes components the real-cluster tests run
# (kube-apiserver, kubelet, kube-controller-manager, kube-scheduler,
# kube-proxy) from the Go module k8s.io/kubernetes into a cache outside the
# work tree, once per machine, with xlane-etcd (scripts/k8s-etcd: etcd
# embedded, built in the same tree, whose go.mod requires etcd's server
# module):
#
#     /var/cache/xlane/k8s/<version>/bin/{kube-apiserver,kubelet,...,xlane-etcd}
#
# The module's go.mod replaces every k8s.io/* staging module with
# ./staging/src/k8s.io/..., which the module zip does not contain; the copy
# built here points those replaces at the published k8s.io/* v0.<minor>.<patch>
# modules instead (the same source, published from the same tag).
#
# Arguments name the binaries wanted (default: the six above); the
# services test needs kube-apiserver and xlane-etcd only. Three more are
# built only when named, for Kubernetes' own e2e suites
# (scripts/k8s-conformance.sh): e2e.test (`go test -c ./test/e2e`, the
# suites at the cluster's version), kubectl (which e2e.test runs for
# `kubectl exec` and friends), ginkgo (the CLI that runs e2e.test's specs
# in parallel processes; the version k8s.io/kubernetes' go.mod pins) and
# agnhost (test/images/agnhost, the e2e suites' test server, stamped with
# the version of the module's test/images/agnhost/VERSION, the image tag
# the e2e framework names). Prints the bin directory
# on stdout; everything else goes to stderr. XLANE_K8S_VERSION picks the
# release, XLANE_K8S_CACHE the cache root.
set -euo pipefail

export PATH=$PATH:/usr/local/go/bin
version=${XLANE_K8S_VERSION:-v1.34.4}
cache=${XLANE_K8S_CACHE:-/var/cache/xlane/k8s}
dir=$cache/$version
# The API server and etcd first: the services test needs only them.
bins=(kube-apiserver xlane-etcd kubelet kube-controller-manager kube-scheduler kube-proxy)
if (($#)); then
	bins=("$@")
fi
here=$(cd "$(dirname "$0")" && pwd)

have_all() {
	local b
	for b in "${bins[@]}"; do [[ -x $dir/bin/$b ]] || return 1; done
}

. "$(dirname "$0")/lib/once.sh"
once "$dir" "$dir/bin" have_all

echo "k8s-bins: building Kubernetes $version into $dir (takes minutes)" >&2
staging=v0.${version#v1.}

# The module source, read-only in the module cache: copy it to a build tree.
gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
[[ -d $gomod ]] || { echo "k8s-bins: download k8s.io/kubernetes@$version failed" >&2; exit 1; }
src=$dir/src
rm -rf "$src"
cp -r "$gomod" "$src"
chmod -R u+w "$src"

# replace k8s.io/api => ./staging/src/k8s.io/api  ->  k8s.io/api => k8s.io/api v0.34.4
sed -i -E "s#^(\s*)(k8s\.io/[A-Za-z0-9._/-]+) => \./staging/src/k8s\.io/[A-Za-z0-9._/-]+\$#\1\2 => \2 $staging#" "$src/go.mod"
if grep -q '=> ./staging' "$src/go.mod"; then
	echo "k8s-bins: replaces left pointing at ./staging:" >&2
	grep '=> ./staging' "$src/go.mod" >&2
	exit 1
fi

pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(cut -d. -f2 <<<"$version")"
ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$version"

mkdir -p "$dir/bin"
mkdir -p "$src/cmd/xlane-etcd"
sed '/^\/\/go:build ignore$/d' "$here/k8s-etcd/main.go" >"$src/cmd/xlane-etcd/main.go"
cd "$src"
# The module ships a go.work over ./staging: build the module alone.
rm -f go.work go.work.sum
export GOWORK=off
# -mod=mod: the published staging modules are not in the module's go.sum.
# The missing binaries are built by one `go build` (e2e.test, a test
# binary, by `go test -c` after it, on the same build cache): one load of
# the package graph, and the go command schedules every compile and link
# of them on all CPUs at once (a link no longer waits for the next
# binary's compiles). agnhost's version is the one -X that only its main
# package has. The binaries are moved into place whole once all are
# built: a build that fails or is interrupted leaves none half-written,
# and the next run builds the missing ones again (from the build cache,
# for what was compiled).
pkgs=()
test=0
for b in "${bins[@]}"; do
	[[ -x $dir/bin/$b ]] && continue
	case $b in
	e2e.test) test=1 ;;
	agnhost) pkgs+=(./test/images/agnhost) ;;
	ginkgo) pkgs+=(github.com/onsi/ginkgo/v2/ginkgo) ;;
	*) pkgs+=("./cmd/$b") ;;
	esac
done
new=$dir/bin/.new
rm -rf "$new"
mkdir -p "$new"
if ((${#pkgs[@]})); then
	echo "k8s-bins: go build ${pkgs[*]}" >&2
	GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath \
		-ldflags "$ldflags -X main.Version=$(cat test/images/agnhost/VERSION)" -o "$new/" "${pkgs[@]}"
fi
if ((test)); then
	echo "k8s-bins: go test -c ./test/e2e" >&2
	GOFLAGS=-mod=mod CGO_ENABLED=0 go test -c -trimpath -ldflags "$ldflags" -o "$new/e2e.test" ./test/e2e
fi
for f in "$new"/*; do
	[[ -e $f ]] && mv "$f" "$dir/bin/"
done
rmdir "$new"
rm -rf "$src"
echo "k8s-bins: done" >&2
echo "$dir/bin"
