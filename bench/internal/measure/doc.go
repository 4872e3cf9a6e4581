// Package measure turns what the benchmarks' tools print into numbers and
// summarizes repetitions: parsers for iperf3 -J, sockperf, /proc/stat,
// /proc/net/snmp, softnet_stat, iptables-save -c, ethtool -S/-k, ip -j
// link and the xlane CLI's per-reason counters (parse.go), and the median
// and same-run ratio every report uses (stats.go).
//
// Everything here is a pure function of its input (ReadCPU aside, which
// reads /proc/stat), so the tests run on captured outputs without root.
package measure
