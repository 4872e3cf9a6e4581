// Command docker is the Docker driver benchmark (part of `make bench`): two
// containers on Docker's own bridge network against two containers on an
// xlane network of each mode, all under one real dockerd, measured with
// iperf3 and sockperf, modes interleaved in one run, with same-run ratios.
//
//	go run ./bench/docker -out bench/results   # default: 3 reps, 5 s runs, ~5 min
//	go run ./bench/docker -quick               # 1 rep, 2 s runs
//
// It needs root, Debian's docker.io and busybox-static, iperf3, sockperf,
// taskset and nsenter. It builds xlaned, runs it and dockerd in a network
// namespace of its own (named xlbd-<random>-node; dockerd with its own
// data-root, exec-root, socket, pidfile and cgroup parent), and removes all
// of it on exit, ^C included. The tools run in the containers' network
// namespaces from the host (nsenter --net=/proc/PID/ns/net), so the image is
// a busybox made on the spot. It exits non-zero only when the harness fails.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/bench/internal/measure"
)

type options struct {
	harness.RunFlags
	modes []string
}

var xlaneModes = []string{"kernel", "tc", "xdp", "xdp-generic"}

func parseFlags() (options, error) {
	var o options
	var modes string
	o.Register(flag.CommandLine, harness.RunFlagsUsage{
		Quick:           "development run: 1 repetition of 2 s (unless -reps/-duration are given)",
		Reps:            "repetitions; each runs every test once per network, interleaved",
		Duration:        "length of each iperf3 and sockperf run (whole seconds)",
		DefaultDuration: 5 * time.Second,
		Out:             "directory for docker-<date>.json and docker-latest.md",
		DefaultOut:      "bench/results",
		KeepTmp:         "keep the temp dir (logs)",
	})
	flag.StringVar(&modes, "modes", "kernel,tc,xdp-generic,xdp", "xlane modes to compare with Docker's bridge, one network each")
	// flag.CommandLine exits on a bad flag (status 2) and on -h (status 0).
	if err := o.Parse(flag.CommandLine, os.Args[1:], map[string]string{"reps": "1", "duration": "2s"}); err != nil {
		return o, err
	}
	if o.Reps < 1 || o.Duration < time.Second {
		return o, errors.New("-reps must be >= 1 and -duration >= 1s")
	}
	var err error
	o.modes, err = harness.ParseChoices("modes", modes, xlaneModes)
	return o, err
}

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("bench docker: ")
	os.Exit(realMain())
}

func realMain() int {
	o, err := parseFlags()
	if err != nil {
		log.Print(err)
		return 2
	}
	for _, tool := range []string{"go", "dockerd", "containerd", "runc", "iperf3", "sockperf", "taskset", "nsenter", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			log.Printf("%s not found (scripts/deps.sh installs what the benchmarks need)", tool)
			return 1
		}
	}
	ctx, stop := harness.CancelOnSignal()
	defer stop()
	h := &host{opts: o, id: "xlbd-" + harness.RandomHex(3)}
	defer h.teardown()
	rep, err := h.benchmark(ctx)
	if err != nil {
		log.Printf("FAILED: %v (rerun with -keep-tmp -v for the logs)", err)
		return 1
	}
	md := rep.markdown()
	fmt.Print("\n" + md)
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		log.Print(err)
		return 1
	}
	js, _ := json.MarshalIndent(rep, "", "  ")
	stamp := rep.Started.UTC().Format("2006-01-02T150405Z")
	for name, data := range map[string][]byte{"docker-" + stamp + ".json": js, "docker-latest.md": []byte(md)} {
		if err := os.WriteFile(filepath.Join(o.Out, name), data, 0o644); err != nil {
			log.Print(err)
			return 1
		}
	}
	fmt.Printf("\nresults: %s\n", filepath.Join(o.Out, "docker-latest.md"))
	return 0
}

// host is the node namespace with xlaned and dockerd in it.
type host struct {
	opts    options
	id      string
	tmp     string
	netns   string
	pinDir  string
	spec    string
	driver  string
	procs   []*exec.Cmd // started by us, stopped by pid in reverse order
	dockerd *exec.Cmd
	image   string
}

func (h *host) nsPath() string { return "/var/run/netns/" + h.netns }

func (h *host) run(ctx context.Context, argv ...string) (string, error) {
	if harness.Verbose {
		log.Printf("$ %s", strings.Join(argv, " "))
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, tail(out.String(), 2000))
	}
	return out.String(), nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// inNode runs argv in the node namespace. nsenter, not ip netns exec,
// which remounts /sys and hides the cgroup mounts dockerd needs.
func (h *host) inNode(argv ...string) []string {
	return append([]string{"nsenter", "--net=" + h.nsPath(), "--"}, argv...)
}

// dockerCLI is docker.io's CLI (of the daemon's version) when there.
func dockerCLI() string {
	if _, err := os.Stat("/usr/bin/docker"); err == nil {
		return "/usr/bin/docker"
	}
	return "docker"
}

func (h *host) docker(ctx context.Context, args ...string) (string, error) {
	out, err := h.run(ctx, append([]string{dockerCLI(), "-H", "unix://" + filepath.Join(h.tmp, "docker.sock")}, args...)...)
	return strings.TrimSpace(out), err
}

func (h *host) start(name string, argv ...string) (*exec.Cmd, error) {
	f, err := os.Create(filepath.Join(h.tmp, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	h.procs = append(h.procs, cmd)
	return cmd, nil
}

func (h *host) setup(ctx context.Context) error {
	var err error
	if h.tmp, err = os.MkdirTemp("", h.id+"-"); err != nil {
		return err
	}
	bin := filepath.Join(h.tmp, "xlaned")
	if _, err := h.run(ctx, "go", "build", "-o", bin, "./cmd/xlaned"); err != nil {
		return err
	}
	h.netns = h.id + "-node"
	if _, err := h.run(ctx, "ip", "netns", "add", h.netns); err != nil {
		h.netns = ""
		return err
	}
	if _, err := h.run(ctx, h.inNode("ip", "link", "set", "lo", "up")...); err != nil {
		return err
	}
	h.pinDir = "/sys/fs/bpf/" + h.id
	plugin := filepath.Join(h.tmp, "xlane-docker.sock")
	api := filepath.Join(h.tmp, "xlane.sock")
	if _, err := h.start("xlaned", h.inNode(bin, "--state", filepath.Join(h.tmp, "state.db"), "--socket", api,
		"--pin-dir", h.pinDir, "--docker-plugin-socket", plugin, "--calibrate-at-start=false")...); err != nil {
		return err
	}
	if err := harness.WaitFor(ctx, "xlaned", 15*time.Second, nil, func() bool { _, err := os.Stat(plugin); return err == nil }); err != nil {
		return err
	}
	h.driver = strings.ReplaceAll(h.id, "-", "")
	h.spec = filepath.Join("/etc/docker/plugins", h.driver+".spec")
	os.MkdirAll(filepath.Dir(h.spec), 0o755)
	if err := os.WriteFile(h.spec, []byte("unix://"+plugin+"\n"), 0o644); err != nil {
		return err
	}
	h.dockerd, err = h.start("dockerd", h.inNode("dockerd", "--data-root", filepath.Join(h.tmp, "data"),
		"--exec-root", filepath.Join(h.tmp, "exec"), "-H", "unix://"+filepath.Join(h.tmp, "docker.sock"),
		"--pidfile", filepath.Join(h.tmp, "docker.pid"), "--cgroup-parent", h.id)...)
	if err != nil {
		return err
	}
	if err := harness.WaitFor(ctx, "dockerd", 60*time.Second, nil, func() bool { _, err := h.docker(ctx, "version"); return err == nil }); err != nil {
		return err
	}
	return h.importBusybox(ctx)
}

func (h *host) importBusybox(ctx context.Context) error {
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return fmt.Errorf("busybox-static: %w", err)
	}
	list, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox --list: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"bin/", "etc/", "tmp/", "proc/", "sys/", "dev/"} {
		tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755})
	}
	tw.WriteHeader(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bb))})
	tw.Write(bb)
	for _, a := range strings.Fields(string(list)) {
		if a != "busybox" {
			tw.WriteHeader(&tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777})
		}
	}
	tw.Close()
	h.image = "xlane-bench/busybox:1"
	cmd := exec.CommandContext(ctx, dockerCLI(), "-H", "unix://"+filepath.Join(h.tmp, "docker.sock"), "import", "-", h.image)
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("docker import: %w\n%s", err, out)
	}
	return nil
}

// teardown removes everything setup made, whatever state it is in.
func (h *host) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if h.dockerd != nil {
		if out, err := h.docker(ctx, "ps", "-aq"); err == nil && out != "" {
			h.docker(ctx, append([]string{"rm", "-f"}, strings.Fields(out)...)...)
		}
		if out, err := h.docker(ctx, "network", "ls", "-q", "--filter", "driver="+h.driver); err == nil && out != "" {
			h.docker(ctx, append([]string{"network", "rm"}, strings.Fields(out)...)...)
		}
	}
	for i := len(h.procs) - 1; i >= 0; i-- {
		p := h.procs[i]
		p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			p.Process.Kill()
			<-done
		}
	}
	if h.tmp != "" {
		// Leftovers of ours, by pid: processes in our cgroup parent and
		// processes naming our temp dir (containerd, shims).
		pids := map[int]bool{}
		files, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", h.id, "*", "cgroup.procs"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			for _, s := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(s); err == nil {
					pids[pid] = true
				}
			}
		}
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if pid, err := strconv.Atoi(e.Name()); err == nil {
				if b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline"); bytes.Contains(b, []byte(h.tmp)) {
					pids[pid] = true
				}
			}
		}
		for pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
			var mnts []string
			for _, l := range strings.Split(string(mi), "\n") {
				if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], h.tmp+"/") {
					mnts = append(mnts, f[4])
				}
			}
			for i := len(mnts) - 1; i >= 0; i-- {
				syscall.Unmount(mnts[i], syscall.MNT_DETACH)
			}
		}
		dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", h.id, "*"))
		for _, d := range dirs {
			os.Remove(d)
		}
		dirs, _ = filepath.Glob(filepath.Join("/sys/fs/cgroup/*", h.id))
		for _, d := range dirs {
			os.Remove(d)
		}
	}
	if h.spec != "" {
		os.Remove(h.spec)
	}
	if h.netns != "" {
		exec.Command("ip", "netns", "del", h.netns).Run()
	}
	if h.pinDir != "" {
		os.RemoveAll(h.pinDir)
	}
	if h.tmp != "" {
		if h.opts.KeepTmp {
			log.Printf("kept %s", h.tmp)
		} else {
			os.RemoveAll(h.tmp)
		}
	}
}

// network is a Docker network with a client and a server container.
type network struct {
	Name     string `json:"name"` // bridge, kernel, tc, ...
	Driver   string `json:"driver"`
	Subnet   string `json:"subnet"`
	client   string // /proc/PID/ns/net
	server   string
	serverIP string
}

func (h *host) network(ctx context.Context, i int, mode string) (*network, error) {
	n := &network{Name: mode, Driver: h.driver, Subnet: fmt.Sprintf("10.%d.0.0/24", 210+i)}
	args := []string{"network", "create", "--subnet", n.Subnet}
	if mode == "bridge" {
		n.Driver = "bridge"
		args = append(args, "-d", "bridge")
	} else {
		args = append(args, "-d", h.driver, "-o", "xlane.mode="+mode)
		if mode == "kernel" || mode == "xdp-generic" { // no NAT in these modes
			args = append(args, "-o", "com.docker.network.bridge.enable_ip_masquerade=false")
		}
	}
	name := h.id + "-" + mode
	if _, err := h.docker(ctx, append(args, name)...); err != nil {
		return nil, err
	}
	for _, role := range []string{"client", "server"} {
		ctr := name + "-" + role
		if _, err := h.docker(ctx, "run", "-d", "--name", ctr, "--network", name, h.image, "sleep", "1000000"); err != nil {
			return nil, err
		}
		pid, err := h.docker(ctx, "inspect", "-f", "{{.State.Pid}}", ctr)
		if err != nil {
			return nil, err
		}
		path := "/proc/" + pid + "/ns/net"
		if role == "client" {
			n.client = path
			continue
		}
		n.server = path
		if n.serverIP, err = h.docker(ctx, "inspect", "-f", "{{(index .NetworkSettings.Networks \""+name+"\").IPAddress}}", ctr); err != nil {
			return nil, err
		}
	}
	// Servers in the server container's namespace; sockperf's pinned to the
	// client's CPU (unpinned ping-pong latency is bimodal on this VM: see
	// the foundation benchmark's notes).
	if _, err := h.start(name+"-iperf3", "nsenter", "--net="+n.server, "--", "iperf3", "-s", "-B", n.serverIP, "-p", "5201"); err != nil {
		return nil, err
	}
	if _, err := h.start(name+"-sockperf", "nsenter", "--net="+n.server, "--", "taskset", "-c", "0", "sockperf", "sr", "--tcp", "-i", n.serverIP, "-p", "11111"); err != nil {
		return nil, err
	}
	return n, harness.WaitFor(ctx, name+" servers", 15*time.Second, nil, func() bool {
		_, err := h.run(ctx, "nsenter", "--net="+n.client, "--", "ping", "-c", "1", "-W", "1", n.serverIP)
		return err == nil
	})
}

// test is one measurement between a network's two containers.
type test struct {
	ID, Title string
	Metrics   []metric
	run       func(ctx context.Context, h *host, n *network, secs string) (map[string]float64, error)
}

type metric struct {
	Key, Label string
	Higher     bool // higher is better
}

var (
	avgRE = regexp.MustCompile(`avg-latency=\s*([0-9.]+)`)
	pctRE = regexp.MustCompile(`percentile\s+([0-9.]+)\s*=\s*([0-9.]+)`)
	ansi  = regexp.MustCompile(`\x1b\[[0-9;]*m`)
)

func iperf(streams int) func(context.Context, *host, *network, string) (map[string]float64, error) {
	return func(ctx context.Context, h *host, n *network, secs string) (map[string]float64, error) {
		out, err := h.run(ctx, "nsenter", "--net="+n.client, "--", "iperf3", "-c", n.serverIP, "-p", "5201",
			"-t", secs, "-P", strconv.Itoa(streams), "-J", "--connect-timeout", "3000")
		var doc struct {
			Error string `json:"error"`
			End   struct {
				SumSent struct {
					Retransmits float64 `json:"retransmits"`
				} `json:"sum_sent"`
				SumReceived struct {
					BitsPerSecond float64 `json:"bits_per_second"`
				} `json:"sum_received"`
			} `json:"end"`
		}
		if jerr := json.Unmarshal([]byte(out), &doc); jerr != nil || doc.Error != "" || doc.End.SumReceived.BitsPerSecond <= 0 {
			return nil, fmt.Errorf("iperf3 to %s (%s): %v %v %s", n.serverIP, n.Name, err, jerr, doc.Error)
		}
		return map[string]float64{"gbps": doc.End.SumReceived.BitsPerSecond / 1e9, "retransmits": doc.End.SumSent.Retransmits}, nil
	}
}

func pingPong(ctx context.Context, h *host, n *network, secs string) (map[string]float64, error) {
	out, err := h.run(ctx, "nsenter", "--net="+n.client, "--", "taskset", "-c", "0", "sockperf", "pp", "--tcp", "-i", n.serverIP, "-p", "11111", "-t", secs)
	if err != nil {
		return nil, err
	}
	out = ansi.ReplaceAllString(out, "")
	s := map[string]float64{}
	if m := avgRE.FindStringSubmatch(out); m != nil {
		s["avg_us"], _ = strconv.ParseFloat(m[1], 64)
	}
	for _, m := range pctRE.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		switch m[1] {
		case "50.000":
			s["p50_us"] = v
		case "99.000":
			s["p99_us"] = v
		}
	}
	if len(s) != 3 {
		return nil, fmt.Errorf("sockperf to %s (%s): no avg/p50/p99 in\n%s", n.serverIP, n.Name, tail(out, 1500))
	}
	return s, nil
}

var tests = []test{
	{ID: "tcp-1", Title: "TCP 1 stream (iperf3)", run: iperf(1),
		Metrics: []metric{{"gbps", "Gbit/s ↑", true}, {"retransmits", "retransmits ↓", false}}},
	{ID: "tcp-4", Title: "TCP 4 streams (iperf3)", run: iperf(4),
		Metrics: []metric{{"gbps", "Gbit/s ↑", true}, {"retransmits", "retransmits ↓", false}}},
	{ID: "latency", Title: "TCP ping-pong, same CPU (sockperf)", run: pingPong,
		Metrics: []metric{{"avg_us", "avg µs ↓", false}, {"p50_us", "p50 µs ↓", false}, {"p99_us", "p99 µs ↓", false}}},
}

// Report is what a run measured.
type Report struct {
	Started  time.Time                       `json:"started"`
	Finished time.Time                       `json:"finished"`
	Kernel   string                          `json:"kernel"`
	Docker   string                          `json:"docker"`
	LoadAvg  [2]string                       `json:"loadavg_start_end"`
	Reps     int                             `json:"repetitions"`
	Duration string                          `json:"duration"`
	Networks []*network                      `json:"networks"`
	Samples  map[string][]map[string]float64 `json:"samples"` // "test/network" -> one per repetition
}

func (h *host) benchmark(ctx context.Context) (*Report, error) {
	rep := &Report{Started: time.Now(), Reps: h.opts.Reps, Duration: h.opts.Duration.String(), Samples: map[string][]map[string]float64{}}
	rep.LoadAvg[0] = harness.LoadAvg()
	rep.Kernel = harness.KernelRelease()
	log.Printf("setup: xlaned and dockerd in netns %s", h.id+"-node")
	if err := h.setup(ctx); err != nil {
		return nil, err
	}
	rep.Docker, _ = h.docker(ctx, "version", "-f", "{{.Server.Version}}")
	for i, mode := range append([]string{"bridge"}, h.opts.modes...) {
		n, err := h.network(ctx, i, mode)
		if err != nil {
			return nil, fmt.Errorf("network %s: %w", mode, err)
		}
		rep.Networks = append(rep.Networks, n)
	}
	secs := strconv.Itoa(int(h.opts.Duration.Round(time.Second) / time.Second))
	total, k := h.opts.Reps*len(tests)*len(rep.Networks), 0
	for r := 1; r <= h.opts.Reps; r++ {
		for _, t := range tests {
			for _, n := range rep.Networks {
				k++
				s, err := t.run(ctx, h, n, secs)
				if err != nil {
					return nil, err
				}
				key := t.ID + "/" + n.Name
				rep.Samples[key] = append(rep.Samples[key], s)
				log.Printf("[%d/%d] rep %d %-8s %-12s %v", k, total, r, t.ID, n.Name, brief(s))
			}
		}
	}
	rep.LoadAvg[1] = harness.LoadAvg()
	rep.Finished = time.Now()
	return rep, nil
}

func brief(s map[string]float64) string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%.2f ", k, s[k])
	}
	return b.String()
}

func (r *Report) median(test, net, key string) float64 {
	var xs []float64
	for _, s := range r.Samples[test+"/"+net] {
		xs = append(xs, s[key])
	}
	return measure.Median(xs)
}

func (r *Report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# xlane Docker driver benchmark\n\n")
	fmt.Fprintf(&b, "%s, two containers on one Docker network, one network per column, all under one dockerd. Generated by `go run ./bench/docker`.\n\n",
		r.Started.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "- kernel %s, Docker %s, loadavg %s at the start and %s at the end\n", r.Kernel, r.Docker, r.LoadAvg[0], r.LoadAvg[1])
	fmt.Fprintf(&b, "- %d repetition(s) of %s per measurement; per repetition and test the networks run in turn (interleaved)\n", r.Reps, r.Duration)
	fmt.Fprintf(&b, "- bridge: `docker network create -d bridge` (Linux bridge, veth, Docker's iptables rules); the others: `docker network create -d xlane -o xlane.mode=MODE` "+
		"(masquerade on as by default, except kernel, which has no NAT; xlaned without --uplink, so nothing is masqueraded between containers anyway)\n")
	fmt.Fprintf(&b, "- the tools run from the host in the containers' network namespaces; sockperf client and server pinned to CPU 0\n")
	if load1, _, _ := strings.Cut(r.LoadAvg[0], " "); measure.ParseFloat(load1) > 0.5*float64(runtime.NumCPU()) {
		fmt.Fprintf(&b, "- **other load ran alongside** (loadavg %s on %d CPUs at the start): expect noise; rerun on an idle machine\n", r.LoadAvg[0], runtime.NumCPU())
	}
	b.WriteString("\n")
	var names []string
	for _, n := range r.Networks {
		names = append(names, n.Name)
	}
	fmt.Fprintf(&b, "| test | metric | %s |", strings.Join(names, " | "))
	for _, n := range names[1:] {
		fmt.Fprintf(&b, " %s vs bridge |", n)
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---:|", 2*len(names)-1) + "\n")
	for _, t := range tests {
		for i, m := range t.Metrics {
			title := ""
			if i == 0 {
				title = t.Title
			}
			fmt.Fprintf(&b, "| %s | %s |", title, m.Label)
			base := r.median(t.ID, "bridge", m.Key)
			for _, n := range names {
				if m.Key == "retransmits" {
					fmt.Fprintf(&b, " %.0f |", r.median(t.ID, n, m.Key))
				} else {
					fmt.Fprintf(&b, " %.2f |", r.median(t.ID, n, m.Key))
				}
			}
			for _, n := range names[1:] {
				if base == 0 {
					b.WriteString(" - |")
					continue
				}
				fmt.Fprintf(&b, " %.2fx |", r.median(t.ID, n, m.Key)/base)
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\nMedians over the repetitions; ↑ higher is better, ↓ lower is better; \"x vs bridge\" = median(x) / median(bridge) from the same run.\n")
	return b.String()
}
