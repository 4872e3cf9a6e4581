// Package bench holds xlane's benchmarks, one command each, and what they
// share. `make bench` runs them all; `make bench BENCH="fw nat"` some. See
// docs/benchmarks.md for what each measures, how to rerun it and the latest
// figures; bench/results/CHANGELOG.md has a line per run and
// bench/results/notebook-2026-11.md the dated history until 2026-11-25.
//
//   - bench/modes: container to container on one node, a Docker-style
//     bridge against xlane's kernel, tc, xdp-generic and xdp modes (iperf3,
//     sockperf, 64-byte forwarding rate);
//   - bench/fw: the firewall's 64-byte drop rate against iptables, nftables
//     and a bare XDP_DROP ceiling;
//   - bench/nat: connections per second through services (xlane against
//     kube-proxy's iptables rules) and conntrack memory and GC cost;
//   - bench/docker: xlane networks against Docker's bridge under a real
//     dockerd;
//   - bench/netkit: tc mode on veth against netkit endpoints, in the kernel
//     matrix's 6.12 guest (scripts/bench-netkit.sh);
//   - bench/accel: socket acceleration on and off (loopback, container to
//     container, the transparent-proxy chain): sockperf ping-pong and iperf3
//     at the write-up's payload sizes, CPU per Gbit/s.
//   - bench/scrape: what a Prometheus scrape of xlaned's metrics endpoint
//     costs the daemon as endpoints and conntrack entries grow, one scrape
//     a second (bench/internal/scrape is that load, for other benchmarks
//     to run beside their traffic).
//   - bench/vm: what a VM's host device costs the node, without a guest:
//     a generator writes frames into KubeVirt's default (tap + bridge in a
//     launcher namespace), xlane's tap endpoint and the AF_XDP port as
//     QEMU would (tap writes with vnet headers, XSK TX), 64 B and 1514 B,
//     CPU per packet, ratios (docs/vm.md).
//   - bench/multinode: the write-up's two scenarios, xlane against Linux
//     in one run: one node's paths (l2, l3, l3 with NAT, NAT over VXLAN,
//     VLAN to VXLAN) and pod to pod across two nodes over VXLAN; iperf3
//     with CPU per Gbit, TCP_RR (sockperf), issue 16's targets
//     (docs/benchmarks.md); -hold builds its setups and waits, for
//     profiling one path by hand.
//   - bench/scale: cluster scale by simulation (not in the default set:
//     `make bench BENCH=scale`): one real xlaned in Kubernetes mode against
//     a real kube-apiserver, controller manager and kwok simulating 1,000
//     (or -nodes 5000) nodes, 30 pods each, 20,000 Services and 2,000
//     NetworkPolicies; cold start, churn with the API-write-to-BPF-map
//     delay read from the pinned maps, an API server restart (xlaned's
//     relists from the audit log) and an xlaned restart, with real
//     connections checked throughout; its -small form is TestScaleSmall
//     in make test.
//   - bench/perfbuckets: not a benchmark (not in `make bench`): sorts a
//     system-wide perf profile of a benchmark's traffic into buckets (BPF
//     programs and their helpers, netfilter, VXLAN, copies, TCP, ...) and
//     prints each one's share (bench/results/notebook-2026-11.md, "Where
//     the CPU goes").
//
// Shared code: bench/internal/harness (run lifetime, cleanup, commands in
// namespaces, flags, results, machine description), bench/internal/measure
// (tool-output parsers and statistics), bench/internal/rate (driving the
// generator) and bench/gen (the BPF generator and counters; its bpf2go
// output is rebuilt by `make generate` and checked by
// scripts/check-generate.sh).
//
// Results go to bench/results.
package bench
