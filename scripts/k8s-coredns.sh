#!/usr/bin/env bash
# Builds CoreDNS, the cluster DNS of Kubernetes' e2e suites
# (scripts/k8s-conformance.sh), from its Go module github.com/coredns/coredns
# at the version kubeadm v1.34 deploys (cmd/kubeadm/app/constants
# CoreDNSVersion), into a cache outside the work tree, once per machine:
#
#     /var/cache/xlane/k8s/coredns-<version>/coredns
#
# With the plugins a kubeadm cluster's Corefile names (errors, health,
# ready, kubernetes, prometheus left out, forward, cache, loop, reload,
# loadbalance) and hosts and log, in plugin.cfg's order: the cloud DNS
# plugins (route53, azure, clouddns) would add their SDKs to the build for
# nothing here. The main package is CoreDNS's own coremain.Run; the list of
# directives is the one thing it takes from outside (dnsserver.Directives),
# as CoreDNS documents for custom builds. The module's go.sum checks its
# dependencies; the checksum database is not reachable here, so CoreDNS's
# own zip is taken unverified (GONOSUMDB). Prints the binary's path on
# stdout. XLANE_COREDNS_VERSION picks the release, XLANE_K8S_CACHE the
# cache root.
set -euo pipefail

export PATH=$PATH:/usr/local/go/bin
version=${XLANE_COREDNS_VERSION:-v1.12.1}
cache=${XLANE_K8S_CACHE:-/var/cache/xlane/k8s}
dir=$cache/coredns-$version
bin=$dir/coredns
. "$(dirname "$0")/lib/once.sh"
once "$dir" "$bin" test -x "$bin"
echo "k8s-coredns: building CoreDNS $version into $dir" >&2
export GONOSUMDB=github.com/coredns/coredns GOFLAGS=-mod=mod GOWORK=off
mod=$(go mod download -json "github.com/coredns/coredns@$version" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
[[ -d $mod ]] || { echo "k8s-coredns: download github.com/coredns/coredns@$version failed" >&2; exit 1; }
src=$dir/src
rm -rf "$src"
mkdir -p "$src"
# CoreDNS's go.mod with its module renamed: the same requirements (and
# go.sum), plus CoreDNS itself.
sed "s#^module .*#module xlane.dev/coredns-build#" "$mod/go.mod" >"$src/go.mod"
cp "$mod/go.sum" "$src/go.sum"
chmod u+w "$src/go.mod" "$src/go.sum"
directives=(reload ready health errors log loadbalance cache hosts kubernetes loop forward)
{
	echo 'package main'
	echo
	echo 'import ('
	echo '	"github.com/coredns/coredns/core/dnsserver"'
	echo '	"github.com/coredns/coredns/coremain"'
	for d in "${directives[@]}"; do echo "	_ \"github.com/coredns/coredns/plugin/$d\""; done
	echo ')'
	echo
	printf 'func init() { dnsserver.Directives = []string{'
	printf '"%s", ' "${directives[@]}"
	echo '} }'
	echo
	echo 'func main() { coremain.Run() }'
} >"$src/main.go"
cd "$src"
go mod edit -require "github.com/coredns/coredns@$version"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$version" -o "$bin.new" .
mv "$bin.new" "$bin"
rm -rf "$src"
echo "k8s-coredns: done" >&2
echo "$bin"
