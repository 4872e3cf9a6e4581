#!/usr/bin/env bash
# Builds the upstream ClusterNetworkPolicy conformance suite (the
# `conformance` package of the Go module sigs.k8s.io/network-policy-api,
# the release whose CRD deploy/kubernetes/crd holds) as a test binary,
# into a cache outside the work tree, once per machine:
#
#     /var/cache/xlane/k8s/network-policy-api-<version>/conformance.test
#
# The suite's module requires k8s.io/* v0.36 and controller-runtime: it is
# built in a module of its own (a temporary directory), never xlane's.
# scripts/k8s-conformance.sh calls it when XLANE_CONFORMANCE_FOCUS is
# network-policy-api (test/e2e TestKubernetesConformance runs the binary
# against the cluster). Prints the binary's path on stdout.
# XLANE_NETPOL_API_VERSION picks the release, XLANE_K8S_CACHE the cache
# root.
set -euo pipefail

export PATH=$PATH:/usr/local/go/bin
version=${XLANE_NETPOL_API_VERSION:-v0.3.0}
cache=${XLANE_K8S_CACHE:-/var/cache/xlane/k8s}
dir=$cache/network-policy-api-$version
bin=$dir/conformance.test
. "$(dirname "$0")/lib/once.sh"
once "$dir" "$bin" test -x "$bin"
echo "cnp-conformance: building sigs.k8s.io/network-policy-api@$version/conformance into $dir" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export GOFLAGS=-mod=mod GOWORK=off
go mod init xlane.test/cnpconformance >/dev/null 2>&1
printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/network-policy-api/conformance"\n' >tools.go
go get "sigs.k8s.io/network-policy-api@$version" >&2
go mod tidy >&2
go test -c -o "$bin.tmp" sigs.k8s.io/network-policy-api/conformance >&2
mv "$bin.tmp" "$bin"
echo "$bin"
