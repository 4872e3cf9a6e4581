#!/usr/bin/env bash
# make demo: xlaned on its built-in defaults, one network, three container
# namespaces, ping and a TCP transfer between them, the counters, cleanup.
#
# The daemon runs in a namespace of its own (the demo "node"), so the demo
# never touches this machine's real interfaces, routes or sysctls.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/bin
node=xlane-demo-node
cs=(xlane-demo-c1 xlane-demo-c2 xlane-demo-c3)
state=/var/lib/xlane/state.db
pins=/sys/fs/bpf/xlane
daemon_pid=
fresh_state=0; [ -e "$state" ] || fresh_state=1
fresh_pins=0; [ -e "$pins" ] || fresh_pins=1

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
inns() { local ns=$1; shift; nsenter --net=/var/run/netns/"$ns" -- "$@"; }
xlane() { "$BIN/xlane" "$@"; }

cleanup() {
	set +e
	say "cleaning up"
	if [ -n "$daemon_pid" ]; then
		xlane network rm demo --force
		kill "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null
	fi
	for ns in "${cs[@]}" "$node"; do ip netns del "$ns" 2>/dev/null; done
	[ $fresh_state = 1 ] && rm -f "$state"
	[ $fresh_pins = 1 ] && rm -rf "$pins"
	echo "done: no namespaces, links, pins or daemon left"
}
trap cleanup EXIT
trap "exit 130" INT TERM

for ns in "$node" "${cs[@]}"; do
	if ip netns list | grep -qw "$ns"; then
		echo "demo: namespace $ns exists (an earlier demo still running?); remove it with: ip netns del $ns" >&2
		exit 1
	fi
done

say "a node namespace and three container namespaces"
for ns in "$node" "${cs[@]}"; do run ip netns add "$ns"; done

say "xlaned on its defaults (state $state, socket /run/xlane/xlane.sock, pins $pins)"
# nsenter execs xlaned, so $! is the daemon itself (a function would fork).
nsenter --net=/var/run/netns/"$node" -- "$BIN/xlaned" 2> >(sed 's/^/  [xlaned] /' >&2) &
daemon_pid=$!
for _ in $(seq 100); do xlane status >/dev/null 2>&1 && break; sleep 0.1; done
if ! kill -0 "$daemon_pid" 2>/dev/null; then
	daemon_pid=
	echo "demo: xlaned did not start (another xlaned on /run/xlane/xlane.sock? stop it first)" >&2
	exit 1
fi
run xlane status

say "a dual-stack network (mode auto: the fastest measured here, tc) and three endpoints"
run xlane network create demo --subnet 10.200.0.0/24 --subnet fd00:200::/64
for i in 1 2 3; do run xlane endpoint add demo --netns "${cs[$((i-1))]}" --id "c$i"; done

say "ping: c1 -> c2 (IPv4, IPv6), c1 -> the gateway on the node"
run inns "${cs[0]}" ping -c 2 -i 0.2 10.200.0.3
run inns "${cs[0]}" ping -c 2 -i 0.2 fd00:200::3
run inns "${cs[0]}" ping -c 1 10.200.0.1

say "TCP: 3 s of iperf3 from c1 to c3, through bpf_redirect_peer"
inns "${cs[2]}" iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
server_pid=$!
sleep 0.5
run inns "${cs[0]}" iperf3 -c 10.200.0.4 -p 5201 -t 3 -f g
wait "$server_pid"

say "endpoints with their counters"
run xlane endpoint ls
run xlane endpoint inspect c1
