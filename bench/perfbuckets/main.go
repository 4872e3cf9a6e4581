// Command perfbuckets sorts the samples of a system-wide perf profile of a
// network benchmark into buckets (BPF programs and their helpers,
// netfilter and conntrack, VXLAN and UDP tunnel, copies, TCP, ...) and
// prints each bucket's share of the datapath's samples, and of the BPF
// bucket which helper the programs spent it in.
//
//	perf record -F 999 -a -g -o p.data -- ip netns exec POD iperf3 -c ...
//	perf script -i p.data -F comm,pid,ip,sym | go run ./bench/perfbuckets -pids 123,456
//
// A sample is the datapath's when its process is one of -pids (the
// benchmark's client and server: their system calls and the softirq run on
// their way out), or when it is softirq network work (a network frame and a
// softirq frame in its stack) in any other process but another iperf3 or
// sockperf: the kernel runs softirq in whatever it interrupted. Without
// -pids every sample with a network frame counts (other jobs' network
// traffic too). Buckets go by the stack: any JITed program frame
// (bpf_prog_<tag>_<name>) makes a sample the BPF bucket's (the program and
// the helpers it called); the rest by the leaf function (the rules below).
// perf's cpu-clock (the only sampling event in a VM without a PMU) cannot
// sample with interrupts off: such time shows up at the point where they go
// back on (_raw_spin_unlock_irqrestore, handle_softirqs: the "locks, irq,
// scheduler" bucket).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"regexp"
	"sort"
	"strings"
)

// Bucket names.
const (
	bpfBucket   = "BPF programs + helpers"
	otherBucket = "other"
)

var (
	jitFrame  = regexp.MustCompile(`^bpf_prog_[0-9a-f]{16}_`)
	netFrame  = regexp.MustCompile(`^(net_rx_action|__netif_receive_skb|netif_receive|__dev_queue_xmit|dev_hard_start_xmit|tcp_|__tcp_|udp_|ip_|ip6_|vxlan_|veth_|bpf_prog_[0-9a-f]{16}_|napi_|process_backlog|skb_|br_|nf_|gro_cells)`)
	softFrame = regexp.MustCompile(`^(handle_softirqs|net_rx_action|__do_softirq|do_softirq|ksoftirqd)`)
	offset    = regexp.MustCompile(`\+0x[0-9a-f]+$`)
)

// leafRules bucket a sample without a BPF frame by its leaf function, the
// first match winning.
var leafRules = []struct {
	name string
	re   *regexp.Regexp
}{
	{"netfilter/conntrack", regexp.MustCompile(`^(nf_|nft_|ipt_|__nf_|hash_conntrack|ipv4_conntrack|iptable_)`)},
	{"VXLAN/UDP tunnel (encap, GSO, GRO, socket)", regexp.MustCompile(`^(vxlan|udp_tunnel|__skb_udp_tunnel|skb_udp_tunnel|udp4_gro|udp_gro|udp_gso|udp4_ufo|__udp4_lib|udp_rcv|udp_queue|udp_unicast|__udp|udp4_lib|udp_err|iptunnel|gro_cells|udp_sk|udp4|udp_)`)},
	{"checksum (software)", regexp.MustCompile(`^(csum_|do_csum|__skb_checksum|skb_checksum|__skb_csum|csum_partial|nf_ip_checksum)`)},
	{"copies (user <-> skb)", regexp.MustCompile(`^(_copy_from_iter|_copy_to_iter|copy_user|rep_movs|memcpy|__memcpy|__pi_memcpy|skb_copy|copy_page|__check_object_size|check_heap_object|simple_copy_to_iter|skb_do_copy|__virt_addr_valid)`)},
	{"GSO/GRO (generic, TCP)", regexp.MustCompile(`^(skb_segment|tcp_gso|__skb_gso|inet_gso|skb_mac_gso|tcp4_gso|__tcp4_gso|dev_gro|gro_|napi_gro|tcp_gro|tcp4_gro|inet_gro|skb_gro|__napi_gro|validate_xmit|skb_gso|__skb_gro|netif_skb_features|skb_network_protocol)`)},
	{"TCP, sockets, system calls", regexp.MustCompile(`^(do_select|core_sys_select|__select|select_estimate|fdget|tcp_|__tcp|tcp4|inet_|__inet|sk_|__sk_|sock_|release_sock|lock_sock|__release_sock|skb_entail|bictcp|cubictcp|__cgroup_bpf|minmax|__x64_sys_|__sys_|sys_|__fdget|fput|security_|aa_|apparmor|rw_verify|ksys_|vfs_|new_sync|do_syscall|entry_SYSCALL|syscall_|sockfd|__sock|x64_sys_call)`)},
	{"IP (routing, forwarding, input, output)", regexp.MustCompile(`^(ip_|__ip_|ipv4_|fib_|fib4|dst_|__dst|rt_|__mkroute|l3mdev|neigh_|__neigh|raw_local)`)},
	{"bridge", regexp.MustCompile(`^(br_|__br_|nbp_|fdb_)`)},
	{"veth, device, skb alloc and free", regexp.MustCompile(`^(veth_|__dev_|dev_|netif_|__netif|process_backlog|net_rx_action|napi_|__napi|skb_|__skb|kfree_skb|consume_skb|__kfree_skb|kmem_cache|__kmem_cache|kmalloc|__kmalloc|kfree|__alloc_skb|alloc_skb|__build_skb|build_skb|page_frag|__page_frag|__free_pages|__free_frozen|free_unref|__alloc_pages|__alloc_frozen|alloc_pages|get_page_from|rmqueue|__rmqueue|page_pool|eth_|__netdev|netdev_|sch_|tcx_|tcf_|__tcf|qdisc|pfifo|__qdisc|rps_|enqueue_to_backlog|folio|__folio|slab|___slab|__slab|put_page|get_page|get_netmem|mod_memcg|__mod_|memcg|obj_cgroup|refill_obj|__memcg|mem_cgroup|pskb_|___pskb|__pskb|kmalloc_reserve|kmem_|__refill|__metadata_dst|metadata_dst)`)},
	{"locks, irq, scheduler (and time spent with irqs off)", regexp.MustCompile(`^(_raw_spin|raw_spin|__raw_spin|queued_spin|native_queued|__pv_queued|schedule|__schedule|finish_task_switch|handle_softirqs|__irq_exit|irq_exit|do_softirq|__local_bh|local_bh|__do_softirq|try_to_wake|wake_up|__wake_up|ttwu|select_task|enqueue_task|dequeue_task|pick_next|update_|sched_|__update|psi_|irqentry|asm_|sysvec|native_|rcu_|__rcu|__call_rcu|preempt|_raw_read|_raw_write|mutex|__mutex|autoremove|prepare_to_wait|finish_wait|sk_wait|wait_woken|woken_wake|__cond_resched|__set_current|hrtimer|__hrtimer|timerqueue|clockevents|tick_|ktime_get|read_tsc|kvm_|pvclock|irq_|__sysvec|account_|cpuacct|cgroup_rstat|__cgroup_account|do_idle|cpuidle|default_idle)`)},
}

// helperRules name what a BPF sample's program spent it in, by the frames
// between the leaf and the innermost program frame.
var helperRules = []struct {
	name  string
	match func(chain []string) bool
}{
	{"FIB lookup (bpf_fib_lookup)", has("bpf_skb_fib_lookup")},
	{"pull/unclone (bpf_skb_pull_data)", has("bpf_skb_pull_data")},
	{"push outer headers (bpf_skb_adjust_room)", has("bpf_skb_adjust_room")},
	{"map lookups", has("__htab_map_lookup_elem", "lookup_nulls_elem_raw", "trie_lookup_elem", "htab_map_hash", "htab_lru_map_lookup_elem", "array_map_lookup_elem", "percpu_array_map_lookup_elem", "htab_percpu_map_lookup_elem")},
	{"ktime (conntrack timestamps)", func(c []string) bool { return anyHas(c, "ktime") }},
	{"checksum replace (NAT)", func(c []string) bool { return anyHas(c, "csum") }},
	{"bpf_check_mtu", has("bpf_skb_check_mtu")},
	{"program code", func(c []string) bool { return len(c) == 0 }},
}

func has(names ...string) func([]string) bool {
	return func(chain []string) bool {
		for _, f := range chain {
			for _, n := range names {
				if f == n {
					return true
				}
			}
		}
		return false
	}
}

func anyHas(chain []string, s string) bool {
	for _, f := range chain {
		if strings.Contains(f, s) {
			return true
		}
	}
	return false
}

// sample is one perf script record: comm, pid, frames leaf first.
type sample struct {
	comm, pid string
	frames    []string
}

// readSamples parses `perf script -F comm,pid,ip,sym` with call chains:
// a header line ("comm pid"), then one indented "ip sym+off (dso)" line
// a frame, a blank line between samples.
func readSamples(r io.Reader, each func(sample)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var cur *sample
	flush := func() {
		if cur != nil {
			each(*cur)
			cur = nil
		}
	}
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if line[0] != '\t' && line[0] != ' ' {
			flush()
			f := strings.Fields(line)
			cur = &sample{comm: f[0]}
			if len(f) > 1 {
				cur.pid = f[1]
			}
			continue
		}
		if cur == nil {
			continue
		}
		f := strings.SplitN(strings.TrimSpace(line), " ", 2)
		sym := "?"
		if len(f) == 2 {
			sym = strings.TrimSpace(f[1])
		}
		if i := strings.Index(sym, " ("); i >= 0 {
			sym = sym[:i]
		}
		cur.frames = append(cur.frames, offset.ReplaceAllString(sym, ""))
	}
	flush()
	return sc.Err()
}

// counts is the outcome of a profile.
type counts struct {
	total, datapath int
	buckets         map[string]int
	helpers         map[string]int // of the BPF bucket
}

func matchAny(re *regexp.Regexp, frames []string) bool {
	for _, f := range frames {
		if re.MatchString(f) {
			return true
		}
	}
	return false
}

// isDatapath: see the package comment.
func isDatapath(s sample, pids map[string]bool) bool {
	if len(pids) == 0 {
		return matchAny(netFrame, s.frames)
	}
	if pids[s.pid] {
		return true
	}
	if s.comm == "iperf3" || s.comm == "sockperf" || !matchAny(netFrame, s.frames) {
		return false
	}
	return strings.HasPrefix(s.comm, "ksoftirqd") || matchAny(softFrame, s.frames)
}

// bucket returns a datapath sample's bucket and, in the BPF bucket, the
// helper's.
func bucket(frames []string) (string, string) {
	for i, f := range frames {
		if jitFrame.MatchString(f) {
			for _, h := range helperRules {
				if h.match(frames[:i]) {
					return bpfBucket, h.name
				}
			}
			return bpfBucket, "other helpers: " + frames[i-1]
		}
	}
	if len(frames) == 0 {
		return otherBucket, ""
	}
	for _, r := range leafRules {
		if r.re.MatchString(frames[0]) {
			return r.name, ""
		}
	}
	return otherBucket, ""
}

func count(r io.Reader, pids map[string]bool) (counts, error) {
	c := counts{buckets: map[string]int{}, helpers: map[string]int{}}
	err := readSamples(r, func(s sample) {
		c.total++
		if !isDatapath(s, pids) {
			return
		}
		c.datapath++
		b, h := bucket(s.frames)
		c.buckets[b]++
		if h != "" {
			c.helpers[h]++
		}
	})
	return c, err
}

func sorted(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

func (c counts) print(w io.Writer) {
	fmt.Fprintf(w, "%d samples, %d the datapath's\n", c.total, c.datapath)
	if c.datapath == 0 {
		return
	}
	for _, b := range sorted(c.buckets) {
		fmt.Fprintf(w, "%5.1f%%  %s\n", 100*float64(c.buckets[b])/float64(c.datapath), b)
	}
	if n := c.buckets[bpfBucket]; n > 0 {
		fmt.Fprintf(w, "of the BPF bucket (%d samples):\n", n)
		for _, h := range sorted(c.helpers) {
			fmt.Fprintf(w, "%5.1f%%  %s\n", 100*float64(c.helpers[h])/float64(n), h)
		}
	}
}

func main() {
	log.SetFlags(0)
	pidList := flag.String("pids", "", "comma-separated pids of the benchmark's processes (client, server); empty: every sample with a network frame")
	flag.Parse()
	pids := map[string]bool{}
	for _, p := range strings.Split(*pidList, ",") {
		if p = strings.TrimSpace(p); p != "" {
			pids[p] = true
		}
	}
	c, err := count(bufio.NewReader(os.Stdin), pids)
	if err != nil {
		log.Fatal(err)
	}
	c.print(os.Stdout)
}
