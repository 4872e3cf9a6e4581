// Command netkit compares xlane's two skb datapaths on one kernel, in one
// run: tc mode on veth endpoints (tcx programs on the host veth,
// bpf_redirect_peer) against netkit endpoints (the same pipeline as netkit
// programs in the device's transmit path). It runs where netkit exists: the
// kernel matrix's 6.12 guest (scripts/bench-netkit.sh).
//
// Both networks live under one xlaned in a node namespace; each has two
// container namespaces. Per repetition and device type, in alternating
// order:
//   - TCP: iperf3, one stream, container to container;
//   - 64-byte forwarding: pktgen (one kernel thread) sends 64-byte UDP
//     frames out of one container's eth0 to the other container, and the
//     rate that arrives there is counted on the receiving device.
//
// It prints medians and the netkit/veth ratio (in software emulation the
// absolute figures mean little; the same-run ratio is the result) and a
// JSON record. Everything it creates is removed, also on failure.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xlane-dev/xlane/bench/internal/measure"
)

type kind struct {
	name, device, subnet string
	src, dst             string // container namespaces
	dstIP, srcIP         string
	dstMAC               string // what the sender puts in its frames
}

type sample struct {
	Kind  string  `json:"kind"`
	Test  string  `json:"test"`
	Rep   int     `json:"rep"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

var (
	xlaned   = flag.String("xlaned", "bin/static/xlaned", "xlaned binary")
	xlaneBin = flag.String("xlane", "bin/static/xlane", "xlane binary")
	duration = flag.Duration("duration", 5*time.Second, "length of each measurement")
	reps     = flag.Int("reps", 3, "repetitions of each test per device type")
	jsonOut  = flag.String("json", "", "also write the samples and medians here")
)

const prefix = "xlbnk-"

func main() {
	flag.Parse()
	err := run()
	cleanup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench netkit:", err)
		os.Exit(1)
	}
}

var daemon *exec.Cmd

func sh(args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

func in(ns string, args ...string) []string {
	return append([]string{"nsenter", "--net=/var/run/netns/" + ns, "--"}, args...)
}

var socket string

func xl(out any, args ...string) error {
	o, err := sh(append([]string{*xlaneBin, "--socket", socket, "-o", "json"}, args...)...)
	if err != nil {
		return err
	}
	if out != nil {
		return json.Unmarshal([]byte(o), out)
	}
	return nil
}

func run() error {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return err
	}
	socket = filepath.Join(dir, "xlane.sock")
	node := prefix + "node"
	for _, ns := range []string{node, prefix + "v1", prefix + "v2", prefix + "k1", prefix + "k2"} {
		if _, err := sh("ip", "netns", "add", ns); err != nil {
			return err
		}
	}
	daemon = exec.Command("nsenter", "--net=/var/run/netns/"+node, "--", *xlaned,
		"--state", filepath.Join(dir, "state.db"), "--socket", socket, "--pin-dir", "/sys/fs/bpf/"+prefix+"pins",
		"--docker-plugin-socket", "", "--calibrate-at-start=false")
	daemon.Stderr = os.Stderr
	if err := daemon.Start(); err != nil {
		return err
	}
	for i := 0; ; i++ {
		if xl(nil, "status") == nil {
			break
		}
		if i > 100 {
			return errors.New("xlaned did not come up")
		}
		time.Sleep(100 * time.Millisecond)
	}
	kinds := []*kind{
		{name: "veth+tc", device: "veth", subnet: "10.91.0.0/24", src: prefix + "v1", dst: prefix + "v2"},
		{name: "netkit", device: "netkit", subnet: "10.92.0.0/24", src: prefix + "k1", dst: prefix + "k2"},
	}
	for _, k := range kinds {
		if err := xl(nil, "network", "create", k.device, "--subnet", k.subnet, "--mode", "tc", "--device", k.device, "--masquerade=false"); err != nil {
			return err
		}
		var a, b struct {
			IPs []string `json:"ips"`
		}
		if err := xl(&a, "endpoint", "add", k.device, "--netns", k.src); err != nil {
			return err
		}
		if err := xl(&b, "endpoint", "add", k.device, "--netns", k.dst); err != nil {
			return err
		}
		k.srcIP, k.dstIP = a.IPs[0], b.IPs[0]
		// The sender's frames carry its gateway's MAC, as its own stack
		// would (all zeros on netkit L3); the program rewrites them.
		if _, err := sh(in(k.src, "ping", "-c", "1", "-W", "2", k.dstIP)...); err != nil {
			return err
		}
		k.dstMAC = "00:00:00:00:00:00"
		if o, err := sh(in(k.src, "ip", "-j", "neigh", "show", "dev", "eth0")...); err == nil {
			var ns []struct {
				Dst    string `json:"dst"`
				LLAddr string `json:"lladdr"`
			}
			if json.Unmarshal([]byte(o), &ns) == nil {
				for _, n := range ns {
					if n.LLAddr != "" {
						k.dstMAC = n.LLAddr
					}
				}
			}
		}
	}

	// Warm up each path once (neighbour entries, conntrack, caches).
	for _, k := range kinds {
		if _, err := iperfFor(k, 1); err != nil {
			return fmt.Errorf("%s warm-up: %w", k.name, err)
		}
	}
	var samples []sample
	for rep := 1; rep <= *reps; rep++ {
		order := kinds
		if rep%2 == 0 {
			order = []*kind{kinds[1], kinds[0]}
		}
		for _, k := range order {
			c0 := cpuBusy()
			g, err := iperf(k)
			if err != nil {
				return fmt.Errorf("%s tcp: %w", k.name, err)
			}
			cpu := (cpuBusy() - c0) / (g * duration.Seconds()) // CPU-s per Gbit
			samples = append(samples, sample{k.name, "tcp", rep, g, "Gbit/s"}, sample{k.name, "tcp_cpu", rep, cpu, "CPU-s/Gbit"})
			fmt.Fprintf(os.Stderr, "rep %d %-8s TCP %.3f Gbit/s, %.2f CPU-s/Gbit\n", rep, k.name, g, cpu)
		}
		for _, k := range order {
			c0 := cpuBusy()
			sent, got, err := pktgen(k)
			if err != nil {
				return fmt.Errorf("%s pktgen: %w", k.name, err)
			}
			// µs of CPU (all CPUs, pktgen's thread included) per packet.
			cpu := (cpuBusy() - c0) / (got * 1e3 * duration.Seconds()) * 1e6
			samples = append(samples, sample{k.name, "pps64", rep, got, "kpps"}, sample{k.name, "pps64_sent", rep, sent, "kpps"},
				sample{k.name, "pps64_cpu", rep, cpu, "CPU-µs/packet"})
			fmt.Fprintf(os.Stderr, "rep %d %-8s 64B: sent %.1f kpps, arrived %.1f kpps, %.2f CPU-µs/packet\n", rep, k.name, sent, got, cpu)
		}
	}
	report(samples)
	return nil
}

func iperf(k *kind) (float64, error) { return iperfFor(k, int(duration.Seconds())) }

func iperfFor(k *kind, seconds int) (float64, error) {
	args := in(k.dst, "iperf3", "-s", "-1", "-B", k.dstIP, "-p", "5299")
	srv := exec.Command(args[0], args[1:]...)
	if err := srv.Start(); err != nil {
		return 0, err
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	time.Sleep(500 * time.Millisecond)
	secs := strconv.Itoa(seconds)
	o, err := sh(in(k.src, "iperf3", "-c", k.dstIP, "-p", "5299", "-t", secs, "-J")...)
	if err != nil {
		return 0, err
	}
	var r struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal([]byte(o), &r); err != nil {
		return 0, err
	}
	if r.End.SumReceived.BitsPerSecond == 0 {
		return 0, fmt.Errorf("iperf3 received nothing:\n%s", o)
	}
	return r.End.SumReceived.BitsPerSecond / 1e9, nil
}

func pgset(ns, file, cmd string) error {
	_, err := sh(in(ns, "sh", "-c", fmt.Sprintf("echo %q > /proc/net/pktgen/%s", cmd, file))...)
	return err
}

func rxPackets(ns string) (uint64, error) {
	o, err := sh(in(ns, "ip", "-s", "-j", "link", "show", "eth0")...)
	if err != nil {
		return 0, err
	}
	var ls []struct {
		Stats struct {
			Rx struct {
				Packets uint64 `json:"packets"`
			} `json:"rx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(o), &ls); err != nil || len(ls) == 0 {
		return 0, fmt.Errorf("ip -s -j link: %v", err)
	}
	return ls[0].Stats.Rx.Packets, nil
}

// pktgen sends 64-byte UDP frames from k.src's eth0 for the duration and
// returns the sent and arrived rates in kpps.
func pktgen(k *kind) (sent, arrived float64, err error) {
	for _, c := range []struct{ file, cmd string }{
		{"kpktgend_0", "rem_device_all"}, {"kpktgend_0", "add_device eth0"},
		{"eth0", "count 0"}, {"eth0", "pkt_size 64"}, {"eth0", "clone_skb 0"}, {"eth0", "burst 1"},
		{"eth0", "delay 0"}, {"eth0", "dst " + k.dstIP}, {"eth0", "src_min " + k.srcIP}, {"eth0", "src_max " + k.srcIP},
		{"eth0", "dst_mac " + k.dstMAC}, {"eth0", "udp_src_min 9"}, {"eth0", "udp_src_max 9"},
		{"eth0", "udp_dst_min 9"}, {"eth0", "udp_dst_max 9"},
	} {
		if err := pgset(k.src, c.file, c.cmd); err != nil {
			return 0, 0, err
		}
	}
	before, err := rxPackets(k.dst)
	if err != nil {
		return 0, 0, err
	}
	args := in(k.src, "sh", "-c", "echo start > /proc/net/pktgen/pgctrl")
	start := exec.Command(args[0], args[1:]...)
	if err := start.Start(); err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	time.Sleep(*duration)
	if err := pgset(k.src, "pgctrl", "stop"); err != nil {
		start.Process.Kill()
	}
	start.Wait()
	elapsed := time.Since(t0).Seconds()
	after, err := rxPackets(k.dst)
	if err != nil {
		return 0, 0, err
	}
	o, err := sh(in(k.src, "cat", "/proc/net/pktgen/eth0")...)
	if err != nil {
		return 0, 0, err
	}
	// "Result: OK: 5000123(c4999000+d1123) usec, 1234567 (64byte,0frags)"
	var nsent float64
	if i := strings.Index(o, "usec, "); i >= 0 {
		fs := strings.Fields(o[i+len("usec, "):])
		if len(fs) > 0 {
			nsent, _ = strconv.ParseFloat(fs[0], 64)
		}
	}
	return nsent / elapsed / 1e3, float64(after-before) / elapsed / 1e3, nil
}

// cpuBusy returns the machine's busy CPU time in seconds (all CPUs, from
// /proc/stat: everything but idle and iowait).
func cpuBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var busy float64
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy / 100 // USER_HZ
}

func report(samples []sample) {
	med := map[string]map[string]float64{}
	for _, test := range []string{"tcp", "tcp_cpu", "pps64", "pps64_sent", "pps64_cpu"} {
		med[test] = map[string]float64{}
		for _, k := range []string{"veth+tc", "netkit"} {
			var xs []float64
			for _, s := range samples {
				if s.Test == test && s.Kind == k {
					xs = append(xs, s.Value)
				}
			}
			med[test][k] = measure.Median(xs)
		}
	}
	kernel, _ := sh("uname", "-r")
	fmt.Printf("kernel %s, %d repetitions x %s, medians\n\n", strings.TrimSpace(kernel), *reps, *duration)
	fmt.Println("| test | veth+tc | netkit | ratio of medians | median of paired ratios |")
	fmt.Println("|---|---:|---:|---:|---:|")
	// Each repetition measures both device types back to back: the ratio
	// within a repetition is the least disturbed by the machine's drift.
	paired := func(test string) float64 {
		var rs []float64
		for rep := 1; rep <= *reps; rep++ {
			var v, n float64
			for _, s := range samples {
				if s.Test == test && s.Rep == rep {
					if s.Kind == "veth+tc" {
						v = s.Value
					} else {
						n = s.Value
					}
				}
			}
			if v > 0 {
				rs = append(rs, n/v)
			}
		}
		return measure.Median(rs)
	}
	row := func(name, test, unit string) {
		v, n := med[test]["veth+tc"], med[test]["netkit"]
		ratio := 0.0
		if v > 0 {
			ratio = n / v
		}
		fmt.Printf("| %s | %.3f %s | %.3f %s | %.2fx | %.2fx |\n", name, v, unit, n, unit, ratio, paired(test))
	}
	row("TCP, 1 stream, container to container ↑", "tcp", "Gbit/s")
	row("TCP: CPU per Gbit ↓", "tcp_cpu", "CPU-s")
	row("64-byte UDP forwarded, arrived ↑", "pps64", "kpps")
	row("64-byte UDP offered by pktgen", "pps64_sent", "kpps")
	row("64-byte: CPU per packet ↓ (pktgen's thread included)", "pps64_cpu", "µs")
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(map[string]any{"kernel": strings.TrimSpace(kernel), "samples": samples, "medians": med}, "", "  ")
		os.WriteFile(*jsonOut, b, 0o644)
	}
}

// cleanup removes what run made: the daemon (by pid), the networks and
// their devices, the namespaces, the pins.
func cleanup() {
	if socket != "" && daemon != nil {
		xl(nil, "network", "rm", "veth", "netkit", "--force")
	}
	if daemon != nil && daemon.Process != nil {
		daemon.Process.Signal(syscall.SIGTERM)
		daemon.Wait()
	}
	for _, ns := range []string{"node", "v1", "v2", "k1", "k2"} {
		exec.Command("ip", "netns", "del", prefix+ns).Run()
	}
	os.RemoveAll("/sys/fs/bpf/" + prefix + "pins")
	if socket != "" {
		os.RemoveAll(filepath.Dir(socket))
	}
}
