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
#   XLANE_KERNELS_SERIAL=1          guest legs one after another (default: side by side)
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

# One leg: its tests, then a line "leg result time" in $outdir/$leg.result.
run_leg() {
	local leg=$1 start bulk rc=0 secs res
	start=$(date +%s)
	if [ "$leg" != host ]; then
		bulk=${XLANE_E2E_BULK:-$((16 << 20))}
	else
		bulk=${XLANE_E2E_BULK:-}
		# The guests get their leg's required modes from vmexec; the host
		# must run them all too (as in make test).
		export XLANE_REQUIRE_MODES=${XLANE_REQUIRE_MODES-tc,kernel,xdp,xdp-generic}
	fi
	echo "== kernel matrix: leg $leg"
	local exec_cmd="$PWD/bin/vmexec -kernel $leg"
	# -short: the same cases on smaller inputs (rule sets of up to 200
	# rules instead of 2,000, a 50,000-prefix blocklist instead of
	# 1,000,000, the nftables differential on 2 rule sets instead of 5);
	# the host leg (make test) runs them whole.
	CGO_ENABLED=0 XLANE_E2E_BULK=$bulk go test -p 1 -count=1 -short -timeout 30m -exec "$exec_cmd" "${units[@]}" || rc=1
	CGO_ENABLED=0 XLANE_E2E_BULK=$bulk go test -p 1 -count=1 -timeout 30m -exec "$exec_cmd" -run "$e2e_run" ./test/e2e || rc=1
	secs=$(($(date +%s) - start))
	res=PASS
	[ $rc = 0 ] || res=FAIL
	printf '%-6s %-4s %4dm%02ds\n' "$leg" "$res" $((secs / 60)) $((secs % 60)) >"$outdir/$leg.result"
}

# The guest legs run side by side: QEMU runs each guest's vCPUs on one host
# thread (tcg,thread=single, test/vm/qemu.go), so two guests use the two
# CPUs a leg alone leaves half idle. Their output goes to a log per leg,
# printed whole when the leg ends (XLANE_KERNELS_SERIAL=1: one after
# another, output live). The host leg runs last, alone: its tests time
# real traffic.
outdir=$(mktemp -d)
trap 'rm -rf "$outdir"' EXIT
guests=() host=
for leg in $legs; do
	if [ "$leg" = host ]; then host=1; else guests+=("$leg"); fi
done
for leg in "${guests[@]}"; do
	bin/vmexec -kernel "$leg" -fetch >/dev/null # download, verify, build the image once
done
if [ "${XLANE_KERNELS_SERIAL:-}" = 1 ] || [ ${#guests[@]} -le 1 ]; then
	for leg in "${guests[@]}"; do run_leg "$leg"; done
else
	pids=()
	for leg in "${guests[@]}"; do
		run_leg "$leg" >"$outdir/$leg.log" 2>&1 &
		pids+=($!)
		echo "== kernel matrix: leg $leg started (pid $!), its output follows when it ends"
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || true
		echo "== kernel matrix: output of leg ${guests[$i]}"
		cat "$outdir/${guests[$i]}.log"
	done
fi
[ -z "$host" ] || run_leg host

status=0
echo
echo "== kernel matrix: leg, result, wall time"
for leg in $legs; do
	if [ -f "$outdir/$leg.result" ]; then
		cat "$outdir/$leg.result"
		grep -q ' PASS ' "$outdir/$leg.result" || status=1
	else
		printf '%-6s %-4s (no result: the leg did not finish)\n' "$leg" FAIL
		status=1
	fi
done
exit $status
