#!/usr/bin/env bash
# make test-kernels: the kernel matrix. Runs what depends on the kernel on
# each kernel of test/vm/kernels.go inside QEMU (software emulation: no
# KVM here), and on the host kernel natively: the BPF unit tests and the
# verifier's headroom, the feature probes, the attach code of each hook
# (tcx, legacy tc, XDP, netkit), a datapath end-to-end per mode and per
# attach point, the cross-node path, restart and reconcile where the kernel
# changes what they do. The control plane (validation, the store, rollback,
# the API) is the same on every kernel: `make test` runs all of it on the
# host, the guests do not run it again. Prints a table of results and
# timings; exits non-zero if any leg failed.
#
#   XLANE_KERNELS="6.1 6.12 host"   legs to run (default: all)
#   XLANE_VM_CACHE=DIR              kernel packages and images (default /var/cache/xlane/vm)
#   XLANE_E2E_BULK=BYTES            size of a checked TCP transfer in the guests (default 16 MiB)
#   XLANE_KERNELS_SERIAL=1          guest legs one after another (default: side by side)
#   XLANE_KERNELS_NICE=N            run the guests at nice N (.ci/run: 10, beside make test)
#   XLANE_KERNELS_TIMEOUT=D         go test -timeout of each package (default 30m; .ci/run: 80m,
#                                   its guests share the CPU with make test and builds)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
legs=${XLANE_KERNELS:-"6.1 6.12 host"}

# What each leg runs: per package (one guest boot each), all of it or the
# tests of it that depend on the kernel, each named with why it is here.
#
# internal/bpf: every BPF unit test (prog.Run tables on the kernel's
#   verifier and helpers, real devices) and TestVerifierHeadroom (each
#   program's verified instructions against the limit).
# internal/features: the probes (what the kernel has decides fallbacks).
# internal/datapath:
#   TestLegacyTCPinsPerDevice   cls_bpf filters on clsact, pinned per
#                               device: 6.1's tc attach point (its pins
#                               moved between devices before)
#   TestCTHoldSharedBackends    the conntrack GC's batch lookups and
#                               deletes on the kernel's hash map
# internal/daemon:
#   TestReconcile               re-attaches detached programs and removes
#                               a stale device's, as tcx links or filters
#   TestReconcileFailsPerEndpoint  one endpoint's failure leaves the others'
#                               programs (failed on 6.1: legacy tc pins)
# test/e2e:
#   TestDatapathModes           each mode end to end (kernel, tc on tcx or
#                               legacy tc, xdp, xdp-generic): ping, checked
#                               transfers, kill -9, restart, removal
#   TestKernelFeatures          fallbacks and refusals of missing features
#   TestNetkitEndpoints         netkit L3 and L2 (skips without netkit: 6.1)
#   TestMultiNodeKernels        two nodes: the uplink's tc and XDP programs,
#                               VXLAN in BPF and by the device
#   TestServiceLoadBalancer     the service attach points: DNAT in the
#                               endpoint's tc program, the uplink's, and the
#                               cgroup socket hooks (from the node)
#   TestEncryptionWireGuard     the kernel's WireGuard engine (the host has
#                               none: it runs the embedded one), the
#                               device outliving a kill -9
#   TestRestartWhateverEndpointState/veth/big-tcp-on
#                               BIG TCP as the kernel has it (6.1: IPv6
#                               only) after kill -9, and the health summary
# Left to make test (the host): TestCLIBadInput, TestIdempotentDeletes,
# TestVethOnlyEndpoint (the attach points of TestDatapathModes; which
# endpoint is a redirect target is the daemon's choice), the daemon's
# rollback, store, API and services tests, the datapath's service-table
# and clock tests: none reaches the kernel in a way that differs between
# kernels.
datapath_run='^(TestLegacyTCPinsPerDevice|TestCTHoldSharedBackends)$'
daemon_run='^(TestReconcile|TestReconcileFailsPerEndpoint)$'
e2e_run='^(TestDatapathModes|TestKernelFeatures|TestNetkitEndpoints|TestMultiNodeKernels|TestServiceLoadBalancer|TestRestartWhateverEndpointState|TestEncryptionWireGuard|TestEncryptionFallback)$'
# (-skip: top-level alternatives, each split at its slashes into levels)
e2e_skip='TestRestartWhateverEndpointState/^veth$/^big-tcp-off$|TestRestartWhateverEndpointState/^netkit$'
# The steps of a leg: name, packages, -run, -skip ("": none).
step_name=(bpf+features datapath daemon e2e)
step_pkgs=("./internal/bpf ./internal/features" ./internal/datapath ./internal/daemon ./test/e2e)
step_run=("" "$datapath_run" "$daemon_run" "$e2e_run")
step_skip=("" "" "" "$e2e_skip")

# Every test named above must exist where it is named: one renamed or
# moved to another package would otherwise run nothing and pass.
check_selection() {
	local i t missing=0
	for i in "${!step_name[@]}"; do
		for t in $(sed -E 's/^\^\(//; s/\)\$$//; s/\|/ /g' <<<"${step_run[$i]}"); do
			if ! grep -qs "^func $t(t \*testing.T)" "${step_pkgs[$i]#./}"/*_test.go; then
				echo "test-kernels: $t is not in ${step_pkgs[$i]} (moved or renamed? update scripts/test-kernels.sh)" >&2
				missing=1
			fi
		done
	done
	return $missing
}
check_selection

# Static binaries: the guests run them from the host tree over 9p.
mkdir -p bin/static
CGO_ENABLED=0 go build -tags=grpcnotrace -o bin/static/xlaned ./cmd/xlaned
CGO_ENABLED=0 go build -o bin/static/xlane ./cmd/xlane
go build -o bin/vmexec ./test/vm/vmexec
export XLANE_E2E_BIN=$PWD/bin/static

nice_cmd=(env) # the guests' tests and QEMU at XLANE_KERNELS_NICE
[ -z "${XLANE_KERNELS_NICE:-}" ] || nice_cmd=(nice -n "$XLANE_KERNELS_NICE")

# REPLY: the user and system seconds of this shell's waited-for children
# (QEMU under vmexec under go test included). `times` runs in this shell:
# in a $(...) subshell it would count that subshell's.
children_cpu() {
	local f=$outdir/times.$BASHPID
	times >"$f"
	REPLY=$(sed -n 2p "$f" | awk '{ split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%d", u[1] * 60 + u[2] + s[1] * 60 + s[2] }')
}

fmt_secs() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# One leg: its steps, then a line per step and one for the leg (result,
# wall time, and the CPU time of its processes: the guest's QEMU, the test
# binaries, the compiler) in $outdir/$leg.result.
run_leg() {
	local leg=$1 start cpu0 bulk rc=0 secs res i s0 srun lines=() cpu
	start=$(date +%s)
	children_cpu
	cpu0=$REPLY
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
	for i in "${!step_name[@]}"; do
		s0=$(date +%s)
		srun=PASS
		# -short: the same cases on smaller inputs (rule sets of up to
		# 200 rules instead of 2,000, a 50,000-prefix blocklist instead
		# of 1,000,000, the nftables differential on 2 rule sets instead
		# of 5); the host leg (make test) runs them whole.
		# shellcheck disable=SC2086 # step_pkgs: a list
		CGO_ENABLED=0 XLANE_E2E_BULK=$bulk "${nice_cmd[@]}" go test -p 1 -count=1 -short -timeout "${XLANE_KERNELS_TIMEOUT:-30m}" -exec "$exec_cmd" \
			${step_run[$i]:+-run "${step_run[$i]}"} ${step_skip[$i]:+-skip "${step_skip[$i]}"} ${step_pkgs[$i]} || srun=FAIL
		[ $srun = PASS ] || rc=1
		lines+=("$(printf '%-6s %-14s %-4s %8s' "$leg" "${step_name[$i]}" "$srun" "$(fmt_secs $(($(date +%s) - s0)))")")
	done
	secs=$(($(date +%s) - start))
	res=PASS
	[ $rc = 0 ] || res=FAIL
	children_cpu
	cpu=$((REPLY - cpu0))
	{
		printf '%s\n' "${lines[@]}"
		printf '%-6s %-14s %-4s %8s  (CPU %s)\n' "$leg" "leg" "$res" "$(fmt_secs $secs)" "$(fmt_secs "$cpu")"
	} >"$outdir/$leg.result"
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
nice_cmd=(env) # the host leg times real traffic: never niced
[ -z "$host" ] || run_leg host

status=0
echo
echo "== kernel matrix: leg, step, result, wall time"
for leg in $legs; do
	if [ -f "$outdir/$leg.result" ]; then
		cat "$outdir/$leg.result"
		grep -q ' leg  *PASS ' "$outdir/$leg.result" || status=1
	else
		printf '%-6s %-14s %-4s (no result: the leg did not finish)\n' "$leg" leg FAIL
		status=1
	fi
done
exit $status
