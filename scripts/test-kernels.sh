#!/usr/bin/env bash
# make test-kernels: the kernel matrix. Runs the BPF unit tests, the
# feature probes, the daemon tests and the endpoint/datapath end-to-end tests
# on each kernel of test/vm/kernels.go inside QEMU (software emulation: no
# KVM here), and on the host kernel natively. Prints a table of results and
# timings; exits non-zero if any leg failed.
#
#   XLANE_KERNELS="6.1 6.12 host"   legs to run (default: all)
#   XLANE_VM_CACHE=DIR              kernel packages and images (default /var/cache/xlane/vm)
#   XLANE_E2E_BULK=BYTES            size of a checked TCP transfer in the guests (default 16 MiB)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
legs=${XLANE_KERNELS:-"6.1 6.12 host"}
units=(./internal/bpf ./internal/features ./internal/daemon ./internal/datapath)
e2e_run='^(TestDatapathModes|TestVethOnlyEndpoint|TestKernelFeatures|TestNetkitEndpoints|TestCLIBadInput|TestIdempotentDeletes|TestMultiNodeKernels)$'

# Static binaries: the guests run them from the host tree over 9p.
mkdir -p bin/static
CGO_ENABLED=0 go build -o bin/static/xlaned ./cmd/xlaned
CGO_ENABLED=0 go build -o bin/static/xlane ./cmd/xlane
go build -o bin/vmexec ./test/vm/vmexec
export XLANE_E2E_BIN=$PWD/bin/static

results=()
status=0
for leg in $legs; do
	start=$(date +%s)
	if [ "$leg" != host ]; then
		bin/vmexec -kernel "$leg" -fetch >/dev/null # download, verify, build the image once
		bulk=${XLANE_E2E_BULK:-$((16 << 20))}
	else
		bulk=${XLANE_E2E_BULK:-}
		# The guests get their leg's required modes from vmexec; the host
		# must run them all too (as in make test).
		export XLANE_REQUIRE_MODES=${XLANE_REQUIRE_MODES-tc,kernel,xdp,xdp-generic}
	fi
	echo "== kernel matrix: leg $leg"
	exec_cmd="$PWD/bin/vmexec -kernel $leg"
	rc=0
	# -short: the same cases on smaller inputs (rule sets of up to 200
	# rules instead of 2,000, a 50,000-prefix blocklist instead of
	# 1,000,000, the nftables differential on 2 rule sets instead of 5);
	# the host leg (make test) runs them whole.
	CGO_ENABLED=0 XLANE_E2E_BULK=$bulk go test -p 1 -count=1 -short -timeout 30m -exec "$exec_cmd" "${units[@]}" || rc=1
	CGO_ENABLED=0 XLANE_E2E_BULK=$bulk go test -p 1 -count=1 -timeout 30m -exec "$exec_cmd" -run "$e2e_run" ./test/e2e || rc=1
	secs=$(($(date +%s) - start))
	res=PASS
	[ $rc = 0 ] || { res=FAIL; status=1; }
	results+=("$(printf '%-6s %-4s %4dm%02ds' "$leg" "$res" $((secs / 60)) $((secs % 60)))")
done
echo
echo "== kernel matrix: leg, result, wall time"
printf '%s\n' "${results[@]}"
exit $status
