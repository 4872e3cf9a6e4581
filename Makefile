# xlane — see README.md. Every target that needs packages installs them.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin
GO ?= go
BIN := bin

# The build's identity (internal/version): xlane version, xlaned --version,
# xlane-cni --version, xlane status and xlane_build_info show it. Without
# git (a tarball) the values are empty and a plain build's VCS info, or
# "dev", stands in.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILD_DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
VERSION_PKG := github.com/xlane-dev/xlane/internal/version
# grpcnotrace: gRPC (the Hubble API, internal/hubble) without
# golang.org/x/net/trace, whose html/template makes the linker keep every
# exported method of every type: 93.8 MB of xlaned instead of 62.4 MB.
export GOFLAGS := $(shell $(GO) env GOFLAGS) -tags=grpcnotrace
LDFLAGS := -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT) -X $(VERSION_PKG).date=$(BUILD_DATE)

.PHONY: all print-ldflags deps generate check-generate fmt-bpf check-format build test test-scale test-unit test-e2e test-kernels test-vm-afxdp k8s-bins test-k8s test-k8s-cluster test-k8s-conformance cilium-bins test-cilium demo bench clean

all: build

deps:
	@scripts/deps.sh

# bpf2go output: the datapath (internal/bpf) and the benchmarks' packet
# generator (bench/gen), both committed and checked by check-generate.
generate: deps
	$(GO) generate ./internal/bpf/... ./bench/gen

check-generate: deps
	@scripts/check-generate.sh

# The BPF C style (.clang-format); regenerate after formatting (the
# objects carry line numbers).
fmt-bpf: deps
	clang-format-19 -i bpf/*.c bpf/lib/*.h

check-format: deps
	@scripts/check-format.sh

build: deps
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/xlaned ./cmd/xlaned
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/xlane ./cmd/xlane
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/xlane-cni ./cmd/xlane-cni

# The -ldflags build uses (internal/version's test builds with them).
print-ldflags:
	@echo '$(LDFLAGS)'

# Everything, as root: BPF unit tests (prog.Run), package tests, end-to-end
# tests in network namespaces, in two shards side by side
# (scripts/test-shards.sh says how they are cut and why;
# XLANE_TEST_SHARDS=1 runs them one after the other). Within a shard -p 1:
# the e2e suites move real traffic and two cores are easily disturbed. TestKubernetes runs a real kube-apiserver:
# on a machine without it cached, scripts/k8s-bins.sh builds it first (and
# its etcd; many minutes, once). TestKubernetesScale runs with 3,000
# Services here (XLANE_K8S_SCALE; kube-apiserver 1.34's creates are
# quadratic in the Services: 10,000 take minutes of setup), with the
# issue's 10,000 in make test-k8s. bench/scale's TestScaleSmall (500 kwok
# nodes, 15,000 pods, 2,000 Services, churn, an API server and an xlaned
# restart; issue 32) is `make test-scale`, a step of CI's .ci/run after
# the kernel matrix (kwok built in CI's background): 3 min 21 s here,
# nearly quiet, 4 min 43 s at a load average of 14-20 (2026-11-30; 11.7
# min before the node sync in one transaction and kwok's 128 parallel pod
# stages). Not in make test: a first build of kwok takes ~13 min, which
# make test's 20 minutes cannot hold.
#
# The host kernel must run every datapath mode, as every leg of the kernel
# matrix must (test/vm/kernels.go): a mode the daemon or the BPF objects
# find unavailable here fails the tests that need it instead of skipping
# them, which would hide, say, a verifier refusal of the XDP programs.
# XLANE_REQUIRE_MODES= make test, on a kernel that cannot.
XLANE_REQUIRE_MODES ?= tc,kernel,xdp,xdp-generic
test: check-generate check-format build
	$(GO) vet ./...
	XLANE_REQUIRE_MODES=$(XLANE_REQUIRE_MODES) XLANE_K8S_SCALE=3000 XLANE_K8S_BIN=$$(scripts/k8s-bins.sh $(K8S_TEST_BINS)) XLANE_HUBBLE_BIN=$$(scripts/hubble-bins.sh hubble hubble-relay) GO=$(GO) scripts/test-shards.sh

# bench/scale's small form (issue 32): 500 kwok nodes, 15,000 pods, 2,000
# Services, churn and an API-server restart against a real API server and
# controller manager (kwok from scripts/kwok-bins.sh, built once: ~13 min).
SCALE_TEST = XLANE_E2E_BIN=$(CURDIR)/$(BIN) XLANE_K8S_BIN=$$(scripts/k8s-bins.sh kube-apiserver xlane-etcd kube-controller-manager) XLANE_KWOK_BIN=$$(scripts/kwok-bins.sh) $(GO) test -count=1 -timeout 20m $(SCALE_TEST_FLAGS) -run '^TestScaleSmall$$' ./bench/scale/
test-scale: SCALE_TEST_FLAGS = -v
test-scale: build
	$(SCALE_TEST)

test-unit: deps
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /test/e2e)

test-e2e: build
	XLANE_REQUIRE_MODES=$(XLANE_REQUIRE_MODES) $(GO) test -p 1 -count=1 -timeout 15m -v ./test/e2e/...

# The kernel matrix (test/vm, docs/kernels.md): what depends on the kernel
# (BPF unit tests, feature probes, attach and reconcile code, a datapath
# end-to-end per mode and attach point; scripts/test-kernels.sh names each
# test and why) on Debian's 6.1 and 6.12 kernels under QEMU and on the host
# kernel; XLANE_KERNELS picks legs. The 6.1 leg takes ~39 minutes of a core
# (software emulation): CI runs the guests beside make test (.ci/run).
test-kernels: check-generate
	@scripts/test-kernels.sh

# The AF_XDP VM port with a real guest (TestVMGuestAFXDP) and with one
# socket per queue (TestVMPortMultiQueue), docs/vm.md: builds
# a QEMU with af-xdp and its libxdp from Debian's sources into
# /var/cache/xlane/qemu-afxdp once per machine (scripts/qemu-afxdp.sh; 6.5
# minutes on 2 quiet cores, docs/vm.md), then runs the tests on it. Fails
# if either fails. `make test` runs the tests too where that cache exists,
# and skips them, saying so, where it does not. CI (.ci/run) runs this
# after `make test`: about 8 minutes from an empty cache on 2 quiet cores.
test-vm-afxdp: build
	q=$$(scripts/qemu-afxdp.sh) && XLANE_QEMU_AFXDP=$$q $(GO) test -count=1 -timeout 10m -v -run '^(TestVMGuestAFXDP|TestVMPortMultiQueue)$$' ./test/e2e/

# The Kubernetes components (kube-apiserver, kubelet, kube-controller-manager,
# kube-proxy, an embedded etcd) built from k8s.io/kubernetes into
# /var/cache/xlane/k8s once per machine (scripts/k8s-bins.sh; the first build
# takes many minutes, later runs only check).
# `make test` builds (once) only what TestKubernetes runs.
K8S_TEST_BINS := kube-apiserver xlane-etcd
k8s-bins: deps
	@scripts/k8s-bins.sh >/dev/null

# xlaned's Kubernetes mode against a real kube-apiserver (docs/kubernetes.md):
# TestKubernetes (~25 s once the binaries are cached; also part of `make
# test`) and TestKubernetesScale (10,000 Services, ~2 min, likewise).
test-k8s: build
	XLANE_K8S_BIN=$$(scripts/k8s-bins.sh $(K8S_TEST_BINS)) $(GO) test -count=1 -timeout 15m -v -run '^TestKubernetes(Scale|NetworkPolicy)?$$' ./test/e2e/

# Level 3 of issue 17 (docs/kubernetes.md): a real two-node cluster, each
# node a kubelet, containerd and xlaned (xlane-cni), with kube-apiserver,
# etcd and kube-controller-manager (TestKubernetesCluster), and the same
# with kube-scheduler where deploy/kubernetes installs xlane
# (TestKubernetesDaemonSet), and Hubble Relay over the cluster's xlaned
# (TestKubernetesHubble, docs/hubble.md); ~1, 1-3 and ~1 min once the binaries are
# cached (scripts/k8s-bins.sh builds the kubelet, the controller manager
# and the scheduler first where they are not). `make test` skips them: it
# would build those three more binaries on a machine without them.
K8S_CLUSTER_BINS := kube-apiserver xlane-etcd kubelet kube-controller-manager kube-scheduler
test-k8s-cluster: build
	XLANE_K8S_BIN=$$(scripts/k8s-bins.sh $(K8S_CLUSTER_BINS)) XLANE_HUBBLE_BIN=$$(scripts/hubble-bins.sh hubble hubble-relay) $(GO) test -count=1 -timeout 20m -v -run '^TestKubernetes(Cluster|DaemonSet|Hubble)$$' ./test/e2e/

# Kubernetes' own network e2e suites against xlane (issue 34,
# docs/kubernetes.md): the sig-network Conformance specs and the
# NetworkPolicy suite, e2e.test built from k8s.io/kubernetes at the
# cluster's version, on the DaemonSet cluster with CoreDNS
# (scripts/k8s-conformance.sh: TestKubernetesConformance; results under
# /var/cache/xlane/conformance). The first run builds e2e.test, kubectl,
# ginkgo, agnhost and CoreDNS beside the cluster binaries.
test-k8s-conformance: build
	@scripts/k8s-conformance.sh

# Cilium (github.com/cilium/cilium, XLANE_CILIUM_VERSION, default
# v1.20.2) built from its Go module into /var/cache/xlane/cilium once per
# machine (scripts/cilium-bins.sh: cilium-agent, cilium-operator-generic,
# cilium-cni, cilium-dbg, its BPF sources checked with clang-19), and
# TestCiliumCluster: Cilium as the CNI and kube-proxy replacement of the
# two-node cluster of test-k8s-cluster (test/e2e/cilium_test.go), native
# routing and VXLAN, pods talking on a node, across nodes and through a
# ClusterIP. bench/peers measures xlane against it.
cilium-bins: deps
	@scripts/cilium-bins.sh >/dev/null

test-cilium: build
	XLANE_K8S_BIN=$$(scripts/k8s-bins.sh $(K8S_PEERS_BINS)) XLANE_CILIUM_DIR=$$(scripts/cilium-bins.sh) $(GO) test -count=1 -timeout 20m -v -run '^TestCiliumCluster$$' ./test/e2e/

demo: build
	@scripts/demo.sh

# The benchmarks (docs/benchmarks.md), one command each under bench/, results
# in bench/results; BENCH picks some, in order: make bench BENCH="fw nat".
# netkit runs in the kernel matrix's 6.12 guest (scripts/bench-netkit.sh).
# observe is the cost of metrics and the monitor on the tc path (bench/modes
# -observe); BASELINE=REF adds tc built from that git ref. k8s is xlaned's
# Kubernetes mode against the real kube-proxy (iptables and nftables) on a
# real kube-apiserver (bench/k8s; the binaries from scripts/k8s-bins.sh,
# built once per machine where they are not cached).
# peers is xlane against Cilium on the same two-node Kubernetes cluster
# (test/e2e TestPeers, bench/peers; Cilium from scripts/cilium-bins.sh):
# not in the default set, it builds Cilium first on a machine without
# it. XLANE_PEERS_REPS, XLANE_PEERS_SECONDS and XLANE_PEERS_SETUPS change
# the run (bench/peers/peers.go).
# bgp is the BGP speaker against a real FRR (bench/bgp: service → route
# latency over 1,000 services, node loss, 10,000 routes against BIRD
# reading them from a file); not in the default set (FRR and BIRD).
# scale is cluster scale by simulation (bench/scale, issue 32): xlaned in
# Kubernetes mode against a real API server with 1,000 kwok nodes (kwok
# from scripts/kwok-bins.sh), 30,000 pods, 20,000 Services: not in the
# default set (it takes the machine for many minutes); `go run
# ./bench/scale -nodes 5000 -out bench/results` is the largest size.
BENCHES := modes fw nat docker netkit accel scrape observe multinode vm k8s
K8S_PEERS_BINS := kube-apiserver xlane-etcd kubelet kube-controller-manager
BENCH ?= $(BENCHES)
bench: build
	@for b in $(BENCH); do \
		case $$b in \
		netkit) scripts/bench-netkit.sh ;; \
		observe) echo "+ go run ./bench/modes -observe $(if $(BASELINE),-baseline $(BASELINE)) -out bench/results"; \
			$(GO) run ./bench/modes -observe $(if $(BASELINE),-baseline $(BASELINE)) -out bench/results ;; \
		peers) echo "+ go test -run '^TestPeers$$' ./test/e2e/ (bench/peers)"; \
			XLANE_K8S_BIN=$$(scripts/k8s-bins.sh $(K8S_PEERS_BINS)) XLANE_CILIUM_DIR=$$(scripts/cilium-bins.sh) \
			XLANE_PEERS_OUT=$(CURDIR)/bench/results $(GO) test -count=1 -timeout 180m -v -run '^TestPeers$$' ./test/e2e/ ;; \
		modes|fw|nat|docker|accel|scrape|multinode|vm|k8s|bgp|scale) echo "+ go run ./bench/$$b -out bench/results"; $(GO) run ./bench/$$b -out bench/results ;; \
		*) echo "make bench: BENCH=$$b: want some of $(BENCHES) peers bgp scale" >&2; exit 2 ;; \
		esac || exit 1; \
	done

clean:
	rm -rf $(BIN)
