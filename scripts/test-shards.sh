#!/usr/bin/env bash
# make test's go test, in two shards side by side (XLANE_TEST_SHARDS=1: one
# after the other, as before).
#
#   shard 1: every package but test/e2e, then test/e2e's tests outside
#            shard 2's families;
#   shard 2: test/e2e's families below (its output prefixed "e2e-2| ").
#
# Why: the end-to-end suite spends most of its time waiting on daemons,
# handshakes, timers and pings. `make test` on a quiet machine used 18 min
# of CPU in 21.8 min of wall time on 2 cores (2026-11-29, 11:31), and the
# suite has grown since. Every test makes its own names (namespaces, pins,
# sockets, cgroups), so tests run side by side the way helpers' sessions
# run theirs. The whole suite passed on 2026-11-30 at load average 12-27
# beside six other sessions' builds and tests (2,841 s serial there).
# Families that share a real daemon of the host's (dockerd, the VM's QEMU
# cache, the calibration's measurements) stay in one shard, in order.
#
# Measured: make test (build, vet and both shards) 1,003 s (16.7 min) on
# 2026-11-30 at 01:42, a 6.12 guest beside it for its first minutes; the
# shards ended 5 s apart (952 and 957 s). The same tests one after the
# other took 21.8 min on 2026-11-29 with fewer of them.
#
# Shard 2's families were chosen from that run's per-test times so that
# both shards end together: shard 2 about 1,640 s of that run, shard 1
# about 1,125 s plus the other packages. A new test lands in shard 1
# unless its name starts with a family below; nothing is left out, since
# shard 1 skips exactly what shard 2 runs.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
always_skip='^(TestKubernetes(Cluster|DaemonSet|Conformance|Hubble)|TestCiliumCluster|TestPeers|TestScaleSmall)$'
shard2='^Test(Docker|MultiNode|BGP|Encryption|Service|Calibrate|Accel|Proxy|VM|Hubble|Uplink|CNI)'
flags=(-count=1 -timeout 40m)

if [ "${XLANE_TEST_SHARDS:-2}" = 1 ]; then
	exec $GO test -p 1 "${flags[@]}" -skip "$always_skip" ./...
fi

rc2file=$(mktemp)
trap 'rm -f "$rc2file"' EXIT
start=$SECONDS
(
	s=$SECONDS rc=0
	$GO test "${flags[@]}" -run "$shard2" -skip "$always_skip" ./test/e2e/ 2>&1 || rc=$?
	echo "shard 2: rc $rc after $((SECONDS - s)) s"
	echo "$rc" >"$rc2file"
) | sed -u 's/^/e2e-2| /' &
shard2pid=$!

rc1=0
mapfile -t pkgs < <($GO list ./... | grep -v '/test/e2e$')
$GO test -p 1 "${flags[@]}" -skip "$always_skip" "${pkgs[@]}" || rc1=$?
$GO test "${flags[@]}" -skip "$always_skip|$shard2" ./test/e2e/ || rc1=$?
echo "shard 1: rc $rc1 after $((SECONDS - start)) s"

wait "$shard2pid"
rc2=$(cat "$rc2file")
echo "make test: shard 1 rc $rc1, shard 2 rc ${rc2:-?}, $((SECONDS - start)) s in all"
[ "$rc1" = 0 ] && [ "${rc2:-1}" = 0 ]
