package main

// -profile: where the CPU of a connection goes, per mode. After the rate
// repetitions of the largest level, one more rate run per mode (not in the
// medians) under `perf record -a -g` (cpu-clock, 999 Hz per CPU); the
// samples of the bench's own processes (the client and the servers, this
// binary) and of ksoftirqd are bucketed by their call chain, innermost
// frame first: the first kernel frame that names a bucket decides (a
// memcpy under nf_nat_* is netfilter, a spin lock under try_to_wake_up
// is the scheduler), and a sample taken in user space is userspace.
//
// The proxy's share S of a connection's CPU bounds what any proxy can
// gain here: removing it entirely leaves 1−S of the CPU, so the rate (when
// CPU-bound) rises at most 1/(1−S)-fold.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xlane-dev/xlane/test/tools/connrate"
)

// Buckets, in the order of the table.
const (
	bucketBPF       = "BPF programs (bpf_prog_*)"
	bucketNF        = "netfilter: nft, iptables, conntrack, NAT (nf_*, nft_*, ipt_*)"
	bucketTCP       = "TCP/IP and sockets (tcp_*, ip_*, inet_*, sk_*, socket syscalls)"
	bucketSkb       = "veth, devices, skb (veth_*, netif_*, dev_*, skb_*, neigh_*)"
	bucketSched     = "scheduler and wakeups (schedule, try_to_wake_up, enqueue_*)"
	bucketUser      = "userspace: client and servers (Go)"
	bucketOtherKern = "other kernel (syscall entry, epoll, futex, files, memory)"
)

var buckets = []string{bucketBPF, bucketNF, bucketTCP, bucketSkb, bucketSched, bucketUser, bucketOtherKern}

// The kernel symbol prefixes of each bucket (bucketOf), checked in this
// order per frame.
var bucketPrefixes = []struct {
	bucket   string
	prefixes []string
}{
	{bucketBPF, []string{"bpf_prog_"}},
	{bucketNF, []string{"nf_", "nft_", "__nft_", "nfnetlink", "ipt_", "ip6t_", "xt_", "iptable_", "ip6table_", "ipv4_conntrack",
		"ipv6_conntrack", "ipv4_confirm", "ipv6_confirm", "nat_", "hash_conntrack"}},
	{bucketSched, []string{"schedule", "__schedule", "preempt_schedule", "try_to_wake_up", "ttwu_", "wake_up_", "__wake_up",
		"enqueue_", "dequeue_", "activate_task", "deactivate_task", "pick_next_", "__pick_", "pick_", "put_prev_", "set_next_",
		"finish_task_switch", "__switch_to", "switch_mm", "context_switch", "select_task_rq", "select_idle_", "update_curr",
		"update_load_avg", "update_rq_clock", "check_preempt", "resched_", "sched_", "psi_", "newidle_balance",
		"sched_balance", "load_balance", "wakeup_preempt", "__resched"}},
	{bucketTCP, []string{"tcp", "__tcp", "inet", "__inet", "ip_", "__ip_", "ipv4_", "ip4_", "ip_route", "fib", "__fib", "rt_",
		"dst_", "icmp", "raw_", "sk_", "__sk_", "sock_", "__sock", "sock", "lock_sock", "release_sock", "__release_sock",
		"reqsk_", "secure_tcp", "__sys_", "__x64_sys_socket", "__x64_sys_connect", "__x64_sys_accept", "__x64_sys_getsockopt",
		"__x64_sys_setsockopt", "__x64_sys_getsockname", "__x64_sys_getpeername", "__x64_sys_shutdown", "do_accept",
		"move_addr_to_", "__cgroup_bpf_run_filter_sock", "__cgroup_bpf_run_filter_sk"}},
	{bucketSkb, []string{"veth_", "netkit_", "netif_", "__netif_", "napi_", "__napi_", "net_rx_action", "process_backlog",
		"__dev_", "dev_", "skb_", "__skb_", "kfree_skb", "__kfree_skb", "consume_skb", "__consume_stateless_skb", "alloc_skb",
		"__alloc_skb", "build_skb", "__build_skb", "kmalloc_reserve", "pskb_", "__pskb_", "neigh_", "__neigh_", "sch_",
		"qdisc_", "tcx_", "eth_", "gro_", "__netdev_", "netdev_", "validate_xmit", "__copy_skb_header", "enqueue_to_backlog",
		"rps_", "__kfree_skb_defer", "skb_release", "__skb_datagram", "skb_do_redirect"}},
}

// softirqEntry: frames where softirq work nested in a task's kernel code
// begins (at a local_bh_enable, an irq exit): what runs above one is the
// softirq's, not its caller's.
var softirqEntry = []string{"handle_softirqs", "__do_softirq", "do_softirq", "net_rx_action", "__local_bh_enable_ip",
	"irq_exit_rcu", "run_ksoftirqd"}

// bucketOf is the bucket of one sample's call chain (innermost frame
// first): userspace if taken in user space; else, within the innermost
// run of frames up to a softirq entry, BPF if a BPF program is on it (its
// helpers and the kernel functions they call are the program's cost),
// else netfilter if a netfilter function is (ip_route_me_harder under
// nf_nat is NAT's); else the bucket of the first frame that names one,
// from the leaf outwards (a spin lock under try_to_wake_up is the
// scheduler's), else other kernel.
func bucketOf(frames []frame) string {
	if len(frames) == 0 || !frames[0].kernel {
		return bucketUser
	}
	end := len(frames)
	for i, f := range frames {
		if !f.kernel || hasPrefix(f.sym, softirqEntry) {
			end = i
			break
		}
	}
	for _, f := range frames[:end] {
		if hasPrefix(f.sym, bucketPrefixes[0].prefixes) {
			return bucketBPF
		}
	}
	for _, f := range frames[:end] {
		if hasPrefix(f.sym, bucketPrefixes[1].prefixes) {
			return bucketNF
		}
	}
	for _, f := range frames {
		if !f.kernel {
			break
		}
		for _, bp := range bucketPrefixes {
			if hasPrefix(f.sym, bp.prefixes) {
				return bp.bucket
			}
		}
	}
	return bucketOtherKern
}

func hasPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

type frame struct {
	sym    string
	kernel bool
}

// profile is one mode's bucketed samples during its profiled rate run.
type profile struct {
	Mode   string          `json:"mode"`
	Result connrate.Result `json:"result"`
	// NsBy: bucket -> CPU ns (sum of the cpu-clock periods) of the bench's
	// processes and ksoftirqd.
	NsBy map[string]float64 `json:"ns_by_bucket"`
	// Ns: their total; KsoftirqdNs the part in ksoftirqd (which may also
	// carry other work's packets).
	Ns, KsoftirqdNs float64
	// AllNs, IdleNs: every CPU's sampled time during the recording, and
	// the idle part; the rest of AllNs − IdleNs − Ns is other work on the
	// machine (other helpers, the control plane).
	AllNs, IdleNs float64
	// TopLeaf: the hottest leaf symbols of the bench's samples with their
	// bucket ("sym [bucket] ns"), for the log and the JSON.
	TopLeaf []string `json:"top_leaf"`
}

// share is bucket's share of the bench's CPU.
func (p *profile) share(bucket string) float64 {
	if p == nil || p.Ns == 0 {
		return 0
	}
	return p.NsBy[bucket] / p.Ns
}

// usPerConn is bucket's (or, with "", everything's) CPU µs per connection.
func (p *profile) usPerConn(bucket string) float64 {
	if p == nil || p.Result.OK == 0 {
		return 0
	}
	ns := p.Ns
	if bucket != "" {
		ns = p.NsBy[bucket]
	}
	return ns / 1000 / float64(p.Result.OK)
}

// profiledLoad is one rate run of n under perf record -a -g, its
// sampling enabled through perf's control fifo only once perf is ready
// (its start, synthesizing every running task, takes seconds on a loaded
// machine) and disabled when the run ends; the samples of this binary's
// processes (comm) and ksoftirqd are bucketed.
func (n *k8sNode) profiledLoad(ctx context.Context, self, targets, dir, label string, d time.Duration, conc int) (*profile, error) {
	data := filepath.Join(dir, "perf-"+label+".data")
	ctlPath, ackPath := filepath.Join(dir, "perf-ctl"), filepath.Join(dir, "perf-ack")
	for _, f := range []string{ctlPath, ackPath} {
		os.Remove(f)
		if err := syscall.Mkfifo(f, 0o600); err != nil {
			return nil, fmt.Errorf("mkfifo %s: %w", f, err)
		}
	}
	// O_RDWR: neither open waits for perf to open its end.
	ctl, err := os.OpenFile(ctlPath, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	ackF, err := os.OpenFile(ackPath, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer ackF.Close()
	acks := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(ackF)
		for sc.Scan() {
			// perf writes "ack\n" with its string's NUL.
			acks <- strings.Trim(sc.Text(), "\x00 ")
		}
		close(acks)
	}()
	rec := exec.Command("perf", "record", "-a", "-g", "-e", "cpu-clock", "-F", "999", "-D", "-1",
		"--control", "fifo:"+ctlPath+","+ackPath, "-o", data)
	var recErr strings.Builder
	rec.Stdout, rec.Stderr = io.Discard, &recErr
	rec.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := rec.Start(); err != nil {
		return nil, fmt.Errorf("perf record: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- rec.Wait() }()
	stopRec := func() error {
		rec.Process.Signal(syscall.SIGINT)
		select {
		case err := <-exited:
			if _, serr := os.Stat(data); serr != nil {
				return fmt.Errorf("perf record: %v: %s", err, strings.TrimSpace(recErr.String()))
			}
			return nil
		case <-time.After(30 * time.Second):
			rec.Process.Kill()
			<-exited
			return fmt.Errorf("perf record (pid %d) ignored SIGINT for 30 s; killed", rec.Process.Pid)
		}
	}
	command := func(c string) error {
		if _, err := fmt.Fprintln(ctl, c); err != nil {
			return err
		}
		select {
		case a, ok := <-acks:
			if !ok || a != "ack" {
				return fmt.Errorf("perf record --control %s: %q", c, a)
			}
			return nil
		case err := <-exited:
			exited <- err
			return fmt.Errorf("perf record exited before %s: %v: %s", c, err, strings.TrimSpace(recErr.String()))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(60 * time.Second):
			return fmt.Errorf("perf record --control %s: no ack in 60 s", c)
		}
	}
	if err := command("enable"); err != nil {
		stopRec()
		return nil, err
	}
	res, err := n.load(ctx, self, targets, d, conc)
	if err == nil {
		err = command("disable")
	}
	if serr := stopRec(); err == nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	p, err := readProfile(ctx, data, filepath.Base(self))
	if err != nil {
		return nil, err
	}
	p.Mode, p.Result = label, res
	return p, nil
}

// readProfile buckets perf.data's samples of the processes named comm
// (truncated as the kernel does) and of ksoftirqd.
func readProfile(ctx context.Context, data, comm string) (*profile, error) {
	cmd := exec.CommandContext(ctx, "perf", "script", "-i", data, "-F", "comm,pid,period,event,ip,sym,dso")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p, perr := parseProfile(out, comm)
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("perf script -i %s: %w: %s", data, err, strings.TrimSpace(stderr.String()))
	}
	if perr != nil {
		return nil, fmt.Errorf("perf script -i %s: %w", data, perr)
	}
	if p.Ns == 0 {
		return nil, fmt.Errorf("perf script -i %s: no samples of %q", data, comm)
	}
	return p, nil
}

// parseProfile reads perf script's output (-F comm,pid,period,event,ip,sym,dso
// with call chains): a header line per sample, "COMM PID PERIOD EVENT:",
// then one "IP SYM (DSO)" line per frame, innermost first, then a blank line.
func parseProfile(r io.Reader, comm string) (*profile, error) {
	if len(comm) > 15 {
		comm = comm[:15] // TASK_COMM_LEN
	}
	p := &profile{NsBy: map[string]float64{}}
	leaf := map[string]float64{}
	leafBucket := map[string]string{}
	var (
		cur     []frame
		curComm string
		curNs   float64
		inside  bool
	)
	flush := func() {
		if !inside {
			return
		}
		inside = false
		p.AllNs += curNs
		switch {
		case curComm == "swapper" || strings.HasPrefix(curComm, "swapper/"):
			p.IdleNs += curNs
			return
		case curComm == comm:
		case strings.HasPrefix(curComm, "ksoftirqd/"):
			p.KsoftirqdNs += curNs
		default:
			return
		}
		b := bucketOf(cur)
		p.NsBy[b] += curNs
		p.Ns += curNs
		sym := "[user]"
		if len(cur) > 0 && cur[0].kernel {
			sym = cur[0].sym
		}
		leaf[sym] += curNs
		leafBucket[sym] = b
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if line[0] != ' ' && line[0] != '\t' || !inside {
			// A header: the comm may hold spaces; the last three fields
			// are the pid, the period and the event.
			flush()
			f := strings.Fields(line)
			if len(f) < 4 || !strings.HasSuffix(f[len(f)-1], ":") {
				return nil, fmt.Errorf("not a sample header: %q", line)
			}
			ns, err := strconv.ParseFloat(f[len(f)-2], 64)
			if err != nil {
				return nil, fmt.Errorf("period in %q: %w", line, err)
			}
			if ev := strings.TrimSuffix(f[len(f)-1], ":"); !strings.HasPrefix(ev, "cpu-clock") {
				return nil, fmt.Errorf("event %q, want cpu-clock (periods in ns)", ev)
			}
			curComm = strings.Join(f[:len(f)-3], " ")
			curNs, cur, inside = ns, cur[:0], true
			continue
		}
		// A frame: "ffffffff81234567 tcp_v4_rcv ([kernel.kallsyms])".
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		ip, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			return nil, fmt.Errorf("frame address in %q: %w", line, err)
		}
		sym := f[1]
		if i := strings.IndexByte(sym, '+'); i > 0 {
			sym = sym[:i]
		}
		cur = append(cur, frame{sym: sym, kernel: ip >= 0xffff800000000000})
	}
	flush()
	if err := sc.Err(); err != nil {
		return nil, err
	}
	syms := make([]string, 0, len(leaf))
	for s := range leaf {
		syms = append(syms, s)
	}
	slices.SortFunc(syms, func(a, b string) int {
		if leaf[a] != leaf[b] {
			if leaf[a] > leaf[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	for _, s := range syms[:min(len(syms), 25)] {
		p.TopLeaf = append(p.TopLeaf, fmt.Sprintf("%s [%s] %.1f%%", s, strings.SplitN(leafBucket[s], " (", 2)[0], 100*leaf[s]/p.Ns))
	}
	return p, nil
}

// directMode is the profile of xlane's client connecting to the
// backends' pod addresses (every endpoint of the same Services: the same
// servers, spread alike), no
// Service in the way: what per-packet work would be left if the Service
// were translated once at connect() (a socket-level load balancer in the
// pod, as Cilium's), the flow being then a plain pod-to-pod one.
const directMode = "xlane-direct"

// profileModes runs profiledLoad for every node (the largest level's
// targets) and, for xlane, once more to the backends directly; it logs
// what each found.
func profileModes(ctx context.Context, o options, self, targets, dir string, level int, nodes []*k8sNode, rep *report) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	type run struct {
		n              *k8sNode
		label, targets string
	}
	var runs []run
	for _, n := range nodes {
		runs = append(runs, run{n, n.mode, targets})
		if n.mode == "xlane" {
			var direct []string
			for i := range level {
				for _, b := range n.backendIPs {
					direct = append(direct, fmt.Sprintf("%s:%d", b, backendPort+i))
				}
			}
			f := filepath.Join(dir, "targets-direct")
			if err := writeLines(f, direct); err != nil {
				return err
			}
			runs = append(runs, run{n, directMode, f})
		}
	}
	for _, r := range runs {
		p, err := r.n.profiledLoad(ctx, self, r.targets, dir, r.label, o.Duration, o.conc)
		if err != nil {
			return fmt.Errorf("%s: profile: %w", r.label, err)
		}
		if p.Result.OK == 0 || p.Result.Failed > 0 {
			return fmt.Errorf("%s: profile: %d connections, %d failed %v", r.label, p.Result.OK, p.Result.Failed, p.Result.Errors)
		}
		rep.Profiles = append(rep.Profiles, p)
		log.Printf("profile %s: %.0f conn/s, %.1f µs CPU per connection (bench processes %.0f%% of the sampled CPU time, idle %.0f%%, other work %.0f%%)",
			r.label, p.Result.CPS, p.usPerConn(""), 100*p.Ns/p.AllNs, 100*p.IdleNs/p.AllNs, 100*(p.AllNs-p.IdleNs-p.Ns)/p.AllNs)
		for _, b := range buckets {
			log.Printf("  %5.1f%% %6.1f µs  %s", 100*p.share(b), p.usPerConn(b), b)
		}
		log.Printf("  hottest leaves: %s", strings.Join(p.TopLeaf, "; "))
	}
	return nil
}

// proxyShare is the share of mode's connection CPU a proxy could remove:
// netfilter, and for xlane its BPF programs too.
func proxyShare(p *profile) float64 {
	return p.share(bucketNF) + p.share(bucketBPF)
}

func profileMarkdown(w func(string, ...any), rep *report, o options) {
	if len(rep.Profiles) == 0 {
		return
	}
	last := o.levels[len(o.levels)-1]
	w("\nWhere a connection's CPU goes (-profile): one more rate run per mode at %d Services (%s, %d clients; not in the medians above) under `perf record -a -g -e cpu-clock -F 999`; the samples of the client's and the servers' processes and of ksoftirqd, bucketed by call chain, innermost named kernel frame first (bench/k8s/profile.go):\n\n", last, o.Duration, o.conc)
	head, sep := "| bucket |", "|---|"
	for _, p := range rep.Profiles {
		head += " " + short(p.Mode) + " % | µs/conn |"
		sep += "---:|---:|"
	}
	w("%s\n%s\n", head, sep)
	for _, b := range buckets {
		row := "| " + b + " |"
		for _, p := range rep.Profiles {
			row += fmt.Sprintf(" %.1f | %.1f |", 100*p.share(b), p.usPerConn(b))
		}
		w("%s\n", row)
	}
	row := "| **total** (conn/s during the profile) |"
	for _, p := range rep.Profiles {
		row += fmt.Sprintf(" 100 (%.0f) | %.1f |", p.Result.CPS, p.usPerConn(""))
	}
	w("%s\n", row)
	row = "| sampled CPU time: the bench's / idle / other work |"
	for _, p := range rep.Profiles {
		row += fmt.Sprintf(" %.0f / %.0f / %.0f %% | |", 100*p.Ns/p.AllNs, 100*p.IdleNs/p.AllNs, 100*(p.AllNs-p.IdleNs-p.Ns)/p.AllNs)
	}
	w("%s\n\n", row)
	byMode := map[string]*profile{}
	for _, p := range rep.Profiles {
		byMode[p.Mode] = p
	}
	for _, m := range []string{"kube-proxy-nftables", "kube-proxy-iptables"} {
		if p := byMode[m]; p != nil {
			s := proxyShare(p)
			w("- %s: the proxy's share (netfilter + BPF) is %.1f %% of a connection's CPU; a proxy costing nothing would give at most 1/(1−S) = %.2fx its rate (when the rate is CPU-bound).\n", short(m), 100*s, 1/(1-s))
		}
	}
	if x := byMode["xlane"]; x != nil {
		w("- xlane: its BPF programs %.1f %%, netfilter %.1f %% of a connection's CPU.\n", 100*x.share(bucketBPF), 100*x.share(bucketNF))
		if d := byMode[directMode]; d != nil && d.usPerConn("") > 0 {
			w("- %s, xlane's client to the backends' pod addresses (no Service, no NAT; what translating the Service once at connect() in the pod, a socket-level load balancer, would leave per packet): %.1f µs per connection, its BPF %.1f µs, against %.1f µs and %.1f µs through the ClusterIPs: such a balancer would give at most %.2fx xlane's rate here (when CPU-bound).\n",
				directMode, d.usPerConn(""), d.usPerConn(bucketBPF), x.usPerConn(""), x.usPerConn(bucketBPF), x.usPerConn("")/d.usPerConn(""))
		}
		for _, m := range []string{"kube-proxy-nftables", "kube-proxy-iptables"} {
			if p := byMode[m]; p != nil && x.usPerConn("") > 0 {
				w("- CPU per connection, %s ÷ xlane: %.2fx (%.1f µs vs %.1f µs).\n", short(m), p.usPerConn("")/x.usPerConn(""), p.usPerConn(""), x.usPerConn(""))
			}
		}
	}
}
