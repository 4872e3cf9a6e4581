#!/usr/bin/env bash
# Runs Kubernetes' own network e2e suites against xlane (`make
# test-k8s-conformance`, docs/kubernetes.md): the sig-network Conformance
# specs and the NetworkPolicy suite, from e2e.test built at the cluster's
# version, on the two-node cluster of the cluster tests with xlane
# installed by its DaemonSet (test/e2e TestKubernetesConformance).
#
# Builds what is missing first, once per machine, each step timed:
# the Kubernetes binaries with e2e.test, kubectl, ginkgo and agnhost
# (scripts/k8s-bins.sh), CoreDNS (scripts/k8s-coredns.sh). The images are
# built and imported by the test. Results go to XLANE_CONFORMANCE_RESULTS
# (default /var/cache/xlane/conformance/<UTC time>): NAME.log (ginkgo's
# output), NAME.xml (JUnit), NAME.txt (one line per spec), timings.txt;
# with XLANE_CONFORMANCE_RECORD=1 the summaries are also copied to
# test/conformance/<version>/, the record of each suite release kept in
# the repository. XLANE_CONFORMANCE_PROCS (default 4) parallel ginkgo
# processes; XLANE_CONFORMANCE_FOCUS runs one focus instead of the suites,
# or, when it is network-policy-api, the upstream ClusterNetworkPolicy
# conformance suite (scripts/cnp-conformance.sh builds it; its report and
# summary with XLANE_CONFORMANCE_RECORD=1 go to
# test/conformance/network-policy-api/).
#
#     make test-k8s-conformance
#     XLANE_CONFORMANCE_FOCUS='\[sig-network\] DNS' make test-k8s-conformance
set -euo pipefail

export PATH=$PATH:/usr/local/go/bin
here=$(cd "$(dirname "$0")/.." && pwd)
version=${XLANE_K8S_VERSION:-v1.34.4}
results=${XLANE_CONFORMANCE_RESULTS:-/var/cache/xlane/conformance/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$results"
export XLANE_CONFORMANCE_RESULTS=$results

timed() {
	local what=$1 start=$SECONDS
	shift
	"$@"
	printf '%6ss  %s\n' $((SECONDS - start)) "$what" >>"$results/timings.txt"
}

timed "scripts/k8s-bins.sh (cluster binaries, e2e.test, kubectl, ginkgo, agnhost)" \
	"$here/scripts/k8s-bins.sh" kube-apiserver xlane-etcd kubelet kube-controller-manager kube-scheduler \
	kubectl agnhost ginkgo e2e.test >"$results/bins"
bins=$(cat "$results/bins")
rm "$results/bins"
timed "scripts/k8s-coredns.sh (CoreDNS)" "$here/scripts/k8s-coredns.sh" >/dev/null
# XLANE_CONFORMANCE_FOCUS=network-policy-api runs the upstream
# ClusterNetworkPolicy suite instead of Kubernetes' own.
if [[ ${XLANE_CONFORMANCE_FOCUS:-} == network-policy-api ]]; then
	timed "scripts/cnp-conformance.sh (the network-policy-api suite)" "$here/scripts/cnp-conformance.sh" >"$results/cnpbin"
	export XLANE_CNP_CONFORMANCE_BIN
	XLANE_CNP_CONFORMANCE_BIN=$(cat "$results/cnpbin")
	rm "$results/cnpbin"
fi

cd "$here"
set +e
XLANE_K8S_BIN=$bins go test -count=1 -timeout 170m -v -run '^TestKubernetesConformance$' ./test/e2e/ \
	2>&1 | tee "$results/go-test.log"
rc=${PIPESTATUS[0]}
set -e
if [[ ${XLANE_CONFORMANCE_RECORD:-} == 1 && ${XLANE_CONFORMANCE_FOCUS:-} == network-policy-api ]]; then
	rec=test/conformance/network-policy-api/${XLANE_NETPOL_API_VERSION:-v0.3.0}
	mkdir -p "$rec"
	cp "$results/network-policy-api.yaml" "$rec/xlane.yaml"
	cp "$results/network-policy-api.txt" "$results/timings.txt" "$rec/"
elif [[ ${XLANE_CONFORMANCE_RECORD:-} == 1 ]]; then
	mkdir -p "test/conformance/$version"
	for s in "$results"/*.txt; do
		[[ $(basename "$s") == timings.txt ]] && continue
		cp "$s" "test/conformance/$version/"
	done
	cp "$results/timings.txt" "test/conformance/$version/timings.txt"
fi
echo "k8s-conformance: results in $results" >&2
cat "$results/timings.txt" >&2
exit "$rc"
