package measure

import (
	"math"
	"testing"
)

// Outputs captured on the development VM (Linux 6.18, iperf 3.12,
// sockperf 3.7, iptables 1.8.9 nf_tables).

// sockperf pp --tcp -i 10.99.0.3 -p 11111 -t 1 (veth pair between two netns).
const sockperfPP = "" +
	"sockperf: \x1b[2;35m== version #3.7-no.git == \x1b[0m\n" +
	"sockperf[CLIENT] send on:sockperf: using recvfrom() to block on socket(s)\n" +
	"\n" +
	"[ 0] IP = 10.99.0.3       PORT = 11111 # TCP\n" +
	"sockperf: Warmup stage (sending a few dummy messages)...\n" +
	"sockperf: Starting test...\n" +
	"sockperf: Test end (interrupted by timer)\n" +
	"sockperf: Test ended\n" +
	"sockperf: [Total Run] RunTime=1.000 sec; Warm up time=400 msec; SentMessages=59567; ReceivedMessages=59566\n" +
	"sockperf: ========= Printing statistics for Server No: 0\n" +
	"sockperf: [Valid Duration] RunTime=0.550 sec; SentMessages=32813; ReceivedMessages=32813\n" +
	"sockperf: \x1b[2;35m====> avg-latency=8.371 (std-dev=9.063)\x1b[0m\n" +
	"sockperf: # dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0\n" +
	"sockperf: Summary: Latency is 8.371 usec\n" +
	"sockperf: \x1b[2;35mTotal 32813 observations\x1b[0m; each percentile contains 328.13 observations\n" +
	"sockperf: ---> <MAX> observation = 1012.533\n" +
	"sockperf: ---> percentile 99.999 = 1012.533\n" +
	"sockperf: ---> percentile 99.990 =  366.204\n" +
	"sockperf: ---> percentile 99.900 =   48.267\n" +
	"sockperf: ---> percentile 99.000 =   25.187\n" +
	"sockperf: ---> percentile 90.000 =    8.332\n" +
	"sockperf: ---> percentile 75.000 =    8.067\n" +
	"sockperf: ---> percentile 50.000 =    7.831\n" +
	"sockperf: ---> percentile 25.000 =    7.581\n" +
	"sockperf: ---> <MIN> observation =    6.454\n"

// sockperf pp --tcp -i 127.0.0.1 -p 19999 -t 1 -m 64 --full-rtt (loopback,
// loaded machine).
const sockperfPPRTT = "" +
	"sockperf: \x1b[2;35m== version #3.7-no.git == \x1b[0m\n" +
	"sockperf[CLIENT] send on:sockperf: using recvfrom() to block on socket(s)\n" +
	"\n" +
	"[ 0] IP = 127.0.0.1       PORT = 19999 # TCP\n" +
	"sockperf: Warmup stage (sending a few dummy messages)...\n" +
	"sockperf: Starting test...\n" +
	"sockperf: Test end (interrupted by timer)\n" +
	"sockperf: Test ended\n" +
	"sockperf: [Total Run] RunTime=1.000 sec; Warm up time=400 msec; SentMessages=26153; ReceivedMessages=26152\n" +
	"sockperf: ========= Printing statistics for Server No: 0\n" +
	"sockperf: [Valid Duration] RunTime=0.550 sec; SentMessages=14656; ReceivedMessages=14656\n" +
	"sockperf: \x1b[2;35m====> avg-rtt=37.518 (std-dev=240.061)\x1b[0m\n" +
	"sockperf: # dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0\n" +
	"sockperf: Summary: Round trip is 37.518 usec\n" +
	"sockperf: \x1b[2;35mTotal 14656 observations\x1b[0m; each percentile contains 146.56 observations\n" +
	"sockperf: ---> <MAX> observation = 10625.911\n" +
	"sockperf: ---> percentile 99.999 = 10625.911\n" +
	"sockperf: ---> percentile 99.990 = 5914.025\n" +
	"sockperf: ---> percentile 99.900 = 4012.297\n" +
	"sockperf: ---> percentile 99.000 =  131.937\n" +
	"sockperf: ---> percentile 90.000 =   19.837\n" +
	"sockperf: ---> percentile 75.000 =   19.296\n" +
	"sockperf: ---> percentile 50.000 =   18.464\n" +
	"sockperf: ---> percentile 25.000 =   18.384\n" +
	"sockperf: ---> <MIN> observation =   18.174\n"

// sockperf pp against a port nobody listens on: exit status 0.
const sockperfRefused = "" +
	"sockperf: \x1b[2;35m== version #3.7-no.git == \x1b[0m\n" +
	"sockperf: ERROR: Can`t connect socket (errno=111 Connection refused)\n"

// iperf3 -c 10.99.0.3 -p 5201 -t 1 -P 2 -J
const iperf3P2 = `{
	"start":	{
		"connected":	[{
				"socket":	5,
				"local_host":	"10.99.0.2",
				"local_port":	57392,
				"remote_host":	"10.99.0.3",
				"remote_port":	5201
			}, {
				"socket":	7,
				"local_host":	"10.99.0.2",
				"local_port":	57400,
				"remote_host":	"10.99.0.3",
				"remote_port":	5201
			}],
		"version":	"iperf 3.12",
		"system_info":	"Linux vm 6.18.44-fc-v657 #1 SMP PREEMPT_DYNAMIC @0 x86_64",
		"timestamp":	{
			"time":	"Sat, 21 Nov 2026 21:36:55 GMT",
			"timesecs":	1795297015
		},
		"connecting_to":	{
			"host":	"10.99.0.3",
			"port":	5201
		},
		"cookie":	"uz2okqiuortlczlgkre25b52smmkthtgb63k",
		"tcp_mss_default":	1448,
		"target_bitrate":	0,
		"sock_bufsize":	0,
		"sndbuf_actual":	16384,
		"rcvbuf_actual":	131072,
		"sock_bufsize":	0,
		"sndbuf_actual":	16384,
		"rcvbuf_actual":	131072,
		"test_start":	{
			"protocol":	"TCP",
			"num_streams":	2,
			"blksize":	131072,
			"omit":	0,
			"duration":	1,
			"bytes":	0,
			"blocks":	0,
			"reverse":	0,
			"tos":	0,
			"target_bitrate":	0
		}
	},
	"intervals":	[{
			"streams":	[{
					"socket":	5,
					"start":	0,
					"end":	1.002224,
					"seconds":	1.0022239685058594,
					"bytes":	1285947392,
					"bits_per_second":	10264750653.825394,
					"retransmits":	3235,
					"snd_cwnd":	445984,
					"snd_wnd":	26202112,
					"rtt":	57,
					"rttvar":	71,
					"pmtu":	1500,
					"omitted":	false,
					"sender":	true
				}, {
					"socket":	7,
					"start":	0,
					"end":	1.002232,
					"seconds":	1.0022319555282593,
					"bytes":	1367080960,
					"bits_per_second":	10912291929.701523,
					"retransmits":	3533,
					"snd_cwnd":	1332160,
					"snd_wnd":	27233280,
					"rtt":	648,
					"rttvar":	613,
					"pmtu":	1500,
					"omitted":	false,
					"sender":	true
				}],
			"sum":	{
				"start":	0,
				"end":	1.002224,
				"seconds":	1.0022239685058594,
				"bytes":	2653028352,
				"bits_per_second":	21177129546.843315,
				"retransmits":	6768,
				"omitted":	false,
				"sender":	true
			}
		}],
	"end":	{
		"streams":	[{
				"sender":	{
					"socket":	5,
					"start":	0,
					"end":	1.002224,
					"seconds":	1.002224,
					"bytes":	1285947392,
					"bits_per_second":	10264750331.263271,
					"retransmits":	3235,
					"max_snd_cwnd":	445984,
					"max_snd_wnd":	26202112,
					"max_rtt":	57,
					"min_rtt":	57,
					"mean_rtt":	57,
					"sender":	true
				},
				"receiver":	{
					"socket":	5,
					"start":	0,
					"end":	1.002292,
					"seconds":	1.002224,
					"bytes":	1282014480,
					"bits_per_second":	10232662577.372662,
					"sender":	true
				}
			}, {
				"sender":	{
					"socket":	7,
					"start":	0,
					"end":	1.002224,
					"seconds":	1.002224,
					"bytes":	1367080960,
					"bits_per_second":	10912378550.104567,
					"retransmits":	3533,
					"max_snd_cwnd":	1332160,
					"max_snd_wnd":	27233280,
					"max_rtt":	648,
					"min_rtt":	648,
					"mean_rtt":	648,
					"sender":	true
				},
				"receiver":	{
					"socket":	7,
					"start":	0,
					"end":	1.002292,
					"seconds":	1.002224,
					"bytes":	1364917896,
					"bits_per_second":	10894373264.477818,
					"sender":	true
				}
			}],
		"sum_sent":	{
			"start":	0,
			"end":	1.002224,
			"seconds":	1.002224,
			"bytes":	2653028352,
			"bits_per_second":	21177128881.367836,
			"retransmits":	6768,
			"sender":	true
		},
		"sum_received":	{
			"start":	0,
			"end":	1.002292,
			"seconds":	1.002292,
			"bytes":	2646932376,
			"bits_per_second":	21127035841.850479,
			"sender":	true
		},
		"cpu_utilization_percent":	{
			"host_total":	91.845079678165632,
			"host_user":	0.3709267402289983,
			"host_system":	91.473854685398251,
			"remote_total":	47.2185556663005,
			"remote_user":	0.80085562948529532,
			"remote_system":	46.417799807044375
		},
		"sender_tcp_congestion":	"bbr",
		"receiver_tcp_congestion":	"bbr"
	}
}
`

// iperf3 -c 10.99.0.4 -t 1 -J --connect-timeout 1000 (no such host): exit status 0.
const iperf3Timeout = `{
	"start":	{
		"connected":	[],
		"version":	"iperf 3.12",
		"system_info":	"Linux vm 6.18.44-fc-v657 #1 SMP PREEMPT_DYNAMIC @0 x86_64"
	},
	"intervals":	[],
	"end":	{
	},
	"error":	"unable to connect to server: Connection timed out"
}
`

// head -3 /proc/stat
const procStat = `cpu  23949 0 39366 126776 618 0 7592 39 0 0
cpu0 11234 0 20162 63183 116 0 4502 15 0 0
cpu1 12714 0 19204 63593 502 0 3089 23 0 0
`

// iptables-save -c in the docker node netns during a TCP run.
const iptablesSave = `# Generated by iptables-save v1.8.9 (nf_tables) on Sat Nov 21 21:45:17 2026
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [2:80]
:DOCKER - [0:0]
:DOCKER-ISOLATION-STAGE-1 - [0:0]
:DOCKER-ISOLATION-STAGE-2 - [0:0]
:DOCKER-USER - [0:0]
[134696:3842034952] -A FORWARD -j DOCKER-USER
[134697:3842100164] -A FORWARD -j DOCKER-ISOLATION-STAGE-1
[134683:3842079836] -A FORWARD -o br-xlb1500 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
[6:1824] -A FORWARD -o br-xlb1500 -j DOCKER
[0:0] -A FORWARD -i br-xlb1500 ! -o br-xlb1500 -j ACCEPT
[6:1824] -A FORWARD -i br-xlb1500 -o br-xlb1500 -j ACCEPT
[6:9420] -A FORWARD -o br-xlb9000 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
[2:9084] -A FORWARD -o br-xlb9000 -j DOCKER
[0:0] -A FORWARD -i br-xlb9000 ! -o br-xlb9000 -j ACCEPT
[2:9084] -A FORWARD -i br-xlb9000 -o br-xlb9000 -j ACCEPT
[0:0] -A DOCKER-ISOLATION-STAGE-1 -i br-xlb1500 ! -o br-xlb1500 -j DOCKER-ISOLATION-STAGE-2
[0:0] -A DOCKER-ISOLATION-STAGE-1 -i br-xlb9000 ! -o br-xlb9000 -j DOCKER-ISOLATION-STAGE-2
[134699:3842230588] -A DOCKER-ISOLATION-STAGE-1 -j RETURN
[0:0] -A DOCKER-ISOLATION-STAGE-2 -o br-xlb1500 -j DROP
[0:0] -A DOCKER-ISOLATION-STAGE-2 -o br-xlb9000 -j DROP
[0:0] -A DOCKER-ISOLATION-STAGE-2 -j RETURN
[134700:3842295800] -A DOCKER-USER -j RETURN
COMMIT
# Completed on Sat Nov 21 21:45:17 2026
# Generated by iptables-save v1.8.9 (nf_tables) on Sat Nov 21 21:45:17 2026
*nat
:PREROUTING ACCEPT [8:10908]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [2:80]
:POSTROUTING ACCEPT [10:10988]
:DOCKER - [0:0]
[0:0] -A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
[0:0] -A OUTPUT ! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL -j DOCKER
[0:0] -A POSTROUTING -s 10.200.0.0/24 ! -o br-xlb1500 -j MASQUERADE
[0:0] -A POSTROUTING -s 10.200.1.0/24 ! -o br-xlb9000 -j MASQUERADE
[0:0] -A DOCKER -i br-xlb1500 -j RETURN
[0:0] -A DOCKER -i br-xlb9000 -j RETURN
COMMIT
# Completed on Sat Nov 21 21:45:17 2026
`

func TestParseSockperf(t *testing.T) {
	l, err := ParseSockperf(sockperfPP)
	if err != nil {
		t.Fatal(err)
	}
	want := Latency{AvgUs: 8.371, P50Us: 7.831, P99Us: 25.187, Observations: 32813, PerSec: 59660}
	l.PerSec = math.Round(l.PerSec) // 32813 / 0.550
	if l != want {
		t.Errorf("got %+v, want %+v", l, want)
	}
	// --full-rtt: round trips, "avg-rtt".
	l, err = ParseSockperf(sockperfPPRTT)
	if err != nil {
		t.Fatal(err)
	}
	want = Latency{AvgUs: 37.518, P50Us: 18.464, P99Us: 131.937, Observations: 14656, RTT: true, PerSec: 26647}
	l.PerSec = math.Round(l.PerSec) // 14656 / 0.550
	if l != want {
		t.Errorf("--full-rtt: got %+v, want %+v", l, want)
	}
	if _, err := ParseSockperf(sockperfRefused); err == nil || err.Error() != "sockperf: Can`t connect socket (errno=111 Connection refused)" {
		t.Errorf("refused: got error %v", err)
	}
	if _, err := ParseSockperf(""); err == nil {
		t.Error("empty output: no error")
	}
}

func TestParseIperf3(t *testing.T) {
	r, err := ParseIperf3([]byte(iperf3P2))
	if err != nil {
		t.Fatal(err)
	}
	want := IperfResult{ReceivedBps: 21127035841.850479, SentBps: 21177128881.367836, Retransmits: 6768, Seconds: 1.002292, Streams: 2}
	if r != want {
		t.Errorf("got %+v, want %+v", r, want)
	}
	if _, err := ParseIperf3([]byte(iperf3Timeout)); err == nil || err.Error() != "iperf3: unable to connect to server: Connection timed out" {
		t.Errorf("timeout: got error %v", err)
	}
	if _, err := ParseIperf3([]byte("iperf3: error - unable to connect")); err == nil {
		t.Error("non-JSON output: no error")
	}
}

func TestParseProcStat(t *testing.T) {
	a, err := ParseProcStat(procStat)
	if err != nil {
		t.Fatal(err)
	}
	// busy = user+nice+system+irq+softirq+steal; total adds idle+iowait.
	want := CPUTimes{Busy: 23949 + 39366 + 7592 + 39, Total: 23949 + 39366 + 126776 + 618 + 7592 + 39}
	if a != want {
		t.Errorf("got %+v, want %+v", a, want)
	}
	b := CPUTimes{Busy: a.Busy + 150, Total: a.Total + 200}
	if f := BusyFraction(a, b); f != 0.75 {
		t.Errorf("BusyFraction = %v, want 0.75", f)
	}
	if f := BusyFraction(b, a); f != 0 {
		t.Errorf("BusyFraction backwards = %v, want 0", f)
	}
	if _, err := ParseProcStat("cpu0 1 2 3 4\n"); err == nil {
		t.Error("no aggregate line: no error")
	}
}

// 150 busy ticks (1.5 CPU-seconds) for 3 Gbit moved: 0.5 CPU-s/Gbit.
func TestCPUPerGbit(t *testing.T) {
	a := CPUTimes{Busy: 1000, Total: 4000}
	b := CPUTimes{Busy: 1150, Total: 4200}
	if s := CPUSeconds(a, b); s != 1.5 {
		t.Errorf("CPUSeconds = %v, want 1.5", s)
	}
	if c := CPUPerGbit(a, b, 3); c != 0.5 {
		t.Errorf("CPUPerGbit = %v, want 0.5", c)
	}
	if s := CPUSeconds(b, a); s != 0 {
		t.Errorf("CPUSeconds backwards = %v, want 0", s)
	}
	if c := CPUPerGbit(a, b, 0); !math.IsNaN(c) {
		t.Errorf("CPUPerGbit of nothing moved = %v, want NaN", c)
	}
}

func TestParseIptablesSave(t *testing.T) {
	rules, err := ParseIptablesSave(iptablesSave)
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 23 {
		t.Fatalf("got %d rules, want 23", len(rules))
	}
	first := RuleCounter{Table: "filter", Chain: "FORWARD", Rule: "-A FORWARD -j DOCKER-USER", Packets: 134696, Bytes: 3842034952}
	if rules[0] != first {
		t.Errorf("first rule %+v, want %+v", rules[0], first)
	}
	last := rules[len(rules)-1]
	if last.Table != "nat" || last.Chain != "DOCKER" || last.Packets != 0 {
		t.Errorf("last rule %+v", last)
	}
	// The counters are read rule by rule while traffic flows: the busiest wins.
	if fwd := Forward(rules); fwd.Packets != 134697 || fwd.Established != 134683+6 {
		t.Errorf("Forward = %+v", fwd)
	}
}

func TestMedianRatio(t *testing.T) {
	if m := Median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median odd = %v", m)
	}
	xs := []float64{4, 1, 3, 2}
	if m := Median(xs); m != 2.5 {
		t.Errorf("median even = %v", m)
	}
	if xs[0] != 4 {
		t.Error("Median sorted its input")
	}
	if !math.IsNaN(Median(nil)) {
		t.Error("median of nothing is not NaN")
	}
	if r := Ratio(3, 2); r != 1.5 {
		t.Errorf("Ratio(3, 2) = %v", r)
	}
	if !math.IsNaN(Ratio(1, 0)) || !math.IsNaN(Ratio(0, 1)) {
		t.Error("Ratio with zero is not NaN")
	}
}
