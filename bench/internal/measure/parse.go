package measure

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// IperfResult is what one iperf3 TCP client run (-J) measured.
type IperfResult struct {
	ReceivedBps float64 // end.sum_received.bits_per_second: goodput at the receiver
	SentBps     float64 // end.sum_sent.bits_per_second
	Retransmits int64   // end.sum_sent.retransmits
	Seconds     float64 // end.sum_received.seconds
	Streams     int     // start.test_start.num_streams
}

// ParseIperf3 parses the JSON report of `iperf3 -c ... -J`. iperf3 exits 0
// on some failures (e.g. "unable to connect to server"), so its "error"
// field is checked here.
func ParseIperf3(out []byte) (IperfResult, error) {
	var doc struct {
		Error string `json:"error"`
		Start struct {
			TestStart struct {
				NumStreams int `json:"num_streams"`
			} `json:"test_start"`
		} `json:"start"`
		End struct {
			SumSent struct {
				BitsPerSecond float64 `json:"bits_per_second"`
				Retransmits   int64   `json:"retransmits"`
			} `json:"sum_sent"`
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
				Seconds       float64 `json:"seconds"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return IperfResult{}, fmt.Errorf("iperf3 JSON: %w", err)
	}
	if doc.Error != "" {
		return IperfResult{}, fmt.Errorf("iperf3: %s", doc.Error)
	}
	r := IperfResult{
		ReceivedBps: doc.End.SumReceived.BitsPerSecond,
		SentBps:     doc.End.SumSent.BitsPerSecond,
		Retransmits: doc.End.SumSent.Retransmits,
		Seconds:     doc.End.SumReceived.Seconds,
		Streams:     doc.Start.TestStart.NumStreams,
	}
	if r.ReceivedBps <= 0 || r.Seconds <= 0 {
		return r, errors.New("iperf3: report has no received throughput (end.sum_received)")
	}
	return r, nil
}

// Latency is what one `sockperf ping-pong` run measured, in microseconds:
// half round trips (sockperf's default), or round trips with --full-rtt
// (RTT set).
type Latency struct {
	AvgUs, P50Us, P99Us float64
	Observations        int64
	RTT                 bool // the run printed round trips (avg-rtt)
	// PerSec is round trips a second over the valid duration (after
	// warm-up): ping-pong has one message in flight, so these are
	// TCP_RR's transactions a second.
	PerSec float64
}

var (
	ansiRE    = regexp.MustCompile(`\x1b\[[0-9;]*m`)
	avgRE     = regexp.MustCompile(`avg-(latency|rtt)=\s*([0-9.]+)`)
	validRE   = regexp.MustCompile(`\[Valid Duration\] RunTime=([0-9.]+) sec;.*ReceivedMessages=([0-9]+)`)
	pctRE     = regexp.MustCompile(`percentile\s+([0-9.]+)\s*=\s*([0-9.]+)`)
	obsRE     = regexp.MustCompile(`Total\s+([0-9]+)\s+observations`)
	sockErrRE = regexp.MustCompile(`(?m)^sockperf: ERROR: (.*)$`)
)

// ParseSockperf parses the report of `sockperf pp` (or ul). sockperf exits
// 0 even when it cannot connect, so a missing summary is an error.
func ParseSockperf(out string) (Latency, error) {
	out = ansiRE.ReplaceAllString(out, "")
	if m := sockErrRE.FindStringSubmatch(out); m != nil {
		return Latency{}, fmt.Errorf("sockperf: %s", strings.TrimSpace(m[1]))
	}
	var l Latency
	m := avgRE.FindStringSubmatch(out)
	if m == nil {
		return l, errors.New("sockperf: no avg-latency or avg-rtt in the output")
	}
	l.RTT = m[1] == "rtt"
	l.AvgUs, _ = strconv.ParseFloat(m[2], 64)
	if m := validRE.FindStringSubmatch(out); m != nil {
		secs, _ := strconv.ParseFloat(m[1], 64)
		n, _ := strconv.ParseFloat(m[2], 64)
		if secs > 0 {
			l.PerSec = n / secs
		}
	}
	have50, have99 := false, false
	for _, m := range pctRE.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		switch m[1] {
		case "50.000":
			l.P50Us, have50 = v, true
		case "99.000":
			l.P99Us, have99 = v, true
		}
	}
	if !have50 || !have99 {
		return l, errors.New("sockperf: percentiles 50 and 99 missing from the output")
	}
	if m := obsRE.FindStringSubmatch(out); m != nil {
		l.Observations, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if l.Observations == 0 {
		return l, errors.New("sockperf: no observations")
	}
	return l, nil
}

// CPUTimes is the aggregate "cpu" line of /proc/stat, in USER_HZ ticks.
type CPUTimes struct {
	Busy, Total uint64
}

// ParseProcStat reads the aggregate cpu line of /proc/stat. Busy is
// everything but idle and iowait (guest time is already in user).
func ParseProcStat(s string) (CPUTimes, error) {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || f[0] != "cpu" {
			continue
		}
		var t CPUTimes
		// user nice system idle iowait irq softirq steal guest guest_nice
		for i, v := range f[1:] {
			if i >= 8 { // guest and guest_nice are counted in user and nice
				break
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return CPUTimes{}, fmt.Errorf("/proc/stat: %q: %w", sc.Text(), err)
			}
			t.Total += n
			if i != 3 && i != 4 {
				t.Busy += n
			}
		}
		return t, nil
	}
	return CPUTimes{}, errors.New("/proc/stat: no aggregate cpu line")
}

// BusyFraction is the share of all CPUs' time that was busy between a and
// b (0..1; 1 means every core busy).
func BusyFraction(a, b CPUTimes) float64 {
	if b.Total <= a.Total {
		return 0
	}
	return float64(b.Busy-a.Busy) / float64(b.Total-a.Total)
}

// UserHZ is the unit of /proc/stat's times (USER_HZ, 100 on Linux).
const UserHZ = 100

// CPUSeconds is the CPU time all CPUs were busy between a and b.
func CPUSeconds(a, b CPUTimes) float64 {
	if b.Busy <= a.Busy {
		return 0
	}
	return float64(b.Busy-a.Busy) / UserHZ
}

// CPUPerGbit is the machine's busy CPU-seconds between a and b per Gbit
// moved in that time (gbit: Gbit/s times the seconds of the transfer):
// the benchmarks' "CPU-s/Gbit", CPU-seconds a second per Gbit/s. NaN when
// nothing moved. Whole machine: softirq work (where forwarding,
// encapsulation and the BPF programs run) is charged to no process or
// namespace, so only /proc/stat sees all of it, and other load on the
// machine with it (an upper bound).
func CPUPerGbit(a, b CPUTimes, gbit float64) float64 {
	if !(gbit > 0) {
		return math.NaN()
	}
	return CPUSeconds(a, b) / gbit
}

// RuleCounter is one rule of `iptables-save -c` with its counters.
type RuleCounter struct {
	Table, Chain, Rule string
	Packets, Bytes     uint64
}

// ParseIptablesSave reads the appended rules (-A) of `iptables-save -c`.
func ParseIptablesSave(s string) ([]RuleCounter, error) {
	var out []RuleCounter
	table := ""
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, "["):
			end := strings.Index(line, "]")
			if end < 0 {
				return nil, fmt.Errorf("iptables-save: %q: unterminated counters", line)
			}
			pk, by, ok := strings.Cut(line[1:end], ":")
			rest := strings.Fields(line[end+1:])
			if !ok || len(rest) < 2 || rest[0] != "-A" {
				return nil, fmt.Errorf("iptables-save: %q: want [packets:bytes] -A CHAIN ...", line)
			}
			r := RuleCounter{Table: table, Chain: rest[1], Rule: strings.Join(rest, " ")}
			var err1, err2 error
			r.Packets, err1 = strconv.ParseUint(pk, 10, 64)
			r.Bytes, err2 = strconv.ParseUint(by, 10, 64)
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("iptables-save: %q: %w", line, err)
			}
			out = append(out, r)
		}
	}
	return out, sc.Err()
}

// ForwardCounters is what the filter FORWARD chain saw.
type ForwardCounters struct {
	Packets, Bytes uint64 // into the chain: the busiest rule (Docker's first, -j DOCKER-USER, matches all)
	Established    uint64 // accepted by the conntrack RELATED,ESTABLISHED rules
}

func Forward(rules []RuleCounter) ForwardCounters {
	var f ForwardCounters
	for _, r := range rules {
		if r.Table != "filter" || r.Chain != "FORWARD" {
			continue
		}
		if r.Packets > f.Packets {
			f.Packets, f.Bytes = r.Packets, r.Bytes
		}
		if strings.Contains(r.Rule, "--ctstate RELATED,ESTABLISHED") {
			f.Established += r.Packets
		}
	}
	return f
}

// ParseEthtoolStats parses `ethtool -S dev`: "     name: value" lines.
func ParseEthtoolStats(s string) map[string]uint64 {
	out := map[string]uint64{}
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue // "NIC statistics:" header
		}
		out["ethtool "+strings.TrimSpace(k)] = n
	}
	return out
}

// ParseEthtoolFeatures parses `ethtool -k dev`: feature -> "on", "off",
// "off [fixed]", ...
func ParseEthtoolFeatures(s string) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ": ")
		if !ok || strings.HasPrefix(l, "Features for") {
			continue
		}
		out[k] = strings.TrimSpace(v)
	}
	return out
}

// ParseIPLinkStats reads the rx/tx error and drop counters of the one
// device in `ip -s -j link show dev X`.
func ParseIPLinkStats(s string) (map[string]uint64, error) {
	var links []struct {
		Stats64 struct {
			RX map[string]uint64 `json:"rx"`
			TX map[string]uint64 `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(s), &links); err != nil || len(links) != 1 {
		return nil, fmt.Errorf("ip -s -j link: want one device: %q: %v", s, err)
	}
	out := map[string]uint64{}
	for dir, m := range map[string]map[string]uint64{"rx": links[0].Stats64.RX, "tx": links[0].Stats64.TX} {
		for k, v := range m {
			out["link "+dir+"_"+k] = v
		}
	}
	return out, nil
}

// ParseSoftnetStat sums /proc/net/softnet_stat over the CPUs: backlog
// drops (column 2) and time squeezes (column 3), hexadecimal.
func ParseSoftnetStat(s string) map[string]uint64 {
	out := map[string]uint64{"backlog dropped": 0, "time_squeeze": 0}
	for _, l := range strings.Split(s, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		d, err1 := strconv.ParseUint(f[1], 16, 64)
		q, err2 := strconv.ParseUint(f[2], 16, 64)
		if err1 == nil && err2 == nil {
			out["backlog dropped"] += d
			out["time_squeeze"] += q
		}
	}
	return out
}

// ParseReasons reads the per-reason datapath counters of
// `xlane -o json endpoint inspect ID`: "direction/reason" -> packets;
// drop reasons get a "drop " prefix so they are told from the rest.
func ParseReasons(s string) (map[string]uint64, error) {
	var ep struct {
		Reasons []struct {
			Reason    string `json:"reason"`
			Direction string `json:"direction"`
			Drop      bool   `json:"drop"`
			Packets   uint64 `json:"packets"`
		} `json:"reasons"`
	}
	if err := json.Unmarshal([]byte(s), &ep); err != nil {
		return nil, fmt.Errorf("endpoint inspect -o json: %w", err)
	}
	out := map[string]uint64{}
	for _, r := range ep.Reasons {
		k := r.Direction + "/" + r.Reason
		if r.Drop {
			k = "drop " + k
		}
		out[k] += r.Packets
	}
	return out, nil
}

// ParseSNMP reads /proc/net/snmp (header line, value line per protocol)
// into "Proto:Field" -> value.
func ParseSNMP(s string) map[string]uint64 {
	out := map[string]uint64{}
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		h, v := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(h) != len(v) || len(h) == 0 || h[0] != v[0] {
			continue
		}
		proto := strings.TrimSuffix(h[0], ":")
		for j := 1; j < len(h); j++ {
			if n, err := strconv.ParseUint(v[j], 10, 64); err == nil {
				out[proto+":"+h[j]] = n
			}
		}
	}
	return out
}

func ParseFloat(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

func ReadCPU() (CPUTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPUTimes{}, err
	}
	return ParseProcStat(string(b))
}
