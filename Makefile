# xlane — see README.md. Every target that needs packages installs them.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin
GO ?= go
BIN := bin

.PHONY: all deps generate check-generate fmt-bpf check-format build test test-unit test-e2e test-kernels demo bench clean

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
	$(GO) build -o $(BIN)/xlaned ./cmd/xlaned
	$(GO) build -o $(BIN)/xlane ./cmd/xlane
	$(GO) build -o $(BIN)/xlane-cni ./cmd/xlane-cni

# Everything, as root: BPF unit tests (prog.Run), package tests, end-to-end
# tests in network namespaces. -p 1: the e2e suites move real traffic and
# two cores are easily disturbed.
test: check-generate build
	$(GO) vet ./...
	$(GO) test -p 1 -count=1 -timeout 18m ./...

test-unit: deps
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /test/e2e)

test-e2e: build
	$(GO) test -p 1 -count=1 -timeout 15m -v ./test/e2e/...

# The kernel matrix (test/vm, docs/kernels.md): BPF unit tests, feature
# probes, daemon and endpoint/datapath end-to-end tests on Debian's 6.1 and
# 6.12 kernels under QEMU and on the host kernel; XLANE_KERNELS picks legs.
# About 40 minutes here (software emulation), which would push `make test`
# past 20: CI runs it as its own step.
test-kernels: check-generate
	@scripts/test-kernels.sh

demo: build
	@scripts/demo.sh

# The benchmarks (docs/benchmarks.md), one command each under bench/, results
# in bench/results; BENCH picks some, in order: make bench BENCH="fw nat".
# netkit runs in the kernel matrix's 6.12 guest (scripts/bench-netkit.sh).
# observe is the cost of metrics and the monitor on the tc path (bench/modes
# -observe); BASELINE=REF adds tc built from that git ref.
BENCHES := modes fw nat docker netkit accel scrape observe multinode
BENCH ?= $(BENCHES)
bench: build
	@for b in $(BENCH); do \
		case $$b in \
		netkit) scripts/bench-netkit.sh ;; \
		observe) echo "+ go run ./bench/modes -observe $(if $(BASELINE),-baseline $(BASELINE)) -out bench/results"; \
			$(GO) run ./bench/modes -observe $(if $(BASELINE),-baseline $(BASELINE)) -out bench/results ;; \
		modes|fw|nat|docker|accel|scrape|multinode) echo "+ go run ./bench/$$b -out bench/results"; $(GO) run ./bench/$$b -out bench/results ;; \
		*) echo "make bench: BENCH=$$b: want some of $(BENCHES)" >&2; exit 2 ;; \
		esac || exit 1; \
	done

clean:
	rm -rf $(BIN)
