package main

import (
	"math"
	"strings"
	"testing"
)

// A sample's bucket: BPF programs own their helpers, netfilter its callees,
// softirq work nested in a task's code is the softirq's, user space is
// userspace, and otherwise the innermost named frame decides.
func TestBucketOf(t *testing.T) {
	k := func(syms ...string) []frame {
		var fs []frame
		for _, s := range syms {
			fs = append(fs, frame{sym: s, kernel: s != "[user]"})
		}
		return fs
	}
	for _, c := range []struct {
		frames []frame
		want   string
	}{
		{k("[user]"), bucketUser},
		{k("fib_table_lookup", "bpf_ipv4_fib_lookup", "bpf_prog_244605b93d09063d_uplink_route", "bpf_prog_9c_xlane_from_endpoint", "tcx_run", "__netif_receive_skb_core"), bucketBPF},
		{k("_raw_spin_lock", "ip_route_me_harder", "nf_nat_ipv4_local_fn", "nf_hook_slow", "__ip_local_out"), bucketNF},
		{k("_raw_spin_unlock_irqrestore", "try_to_wake_up", "sock_def_readable", "tcp_rcv_state_process"), bucketSched},
		{k("memcpy", "__alloc_skb", "tcp_connect"), bucketSkb},
		// A receive processed at a local_bh_enable inside nf code: the
		// receive path's, not netfilter's.
		{k("tcp_v4_rcv", "ip_local_deliver", "__netif_receive_skb_core", "process_backlog", "net_rx_action", "handle_softirqs",
			"__local_bh_enable_ip", "nf_conntrack_in", "nf_hook_slow"), bucketTCP},
		{k("entry_SYSCALL_64", "[user]"), bucketOtherKern},
	} {
		if got := bucketOf(c.frames); got != c.want {
			t.Errorf("%v: %q, want %q", c.frames, got, c.want)
		}
	}
}

// parseProfile counts the samples of the named processes (the comm
// truncated to 15 characters) and ksoftirqd, idle apart, others only in
// the total; a foreign event is refused.
func TestParseProfile(t *testing.T) {
	const script = `k8s-very-long-n 100    2000000 cpu-clock:ppp: 
	ffffffff81000010 nft_do_chain+0x10 ([kernel.kallsyms])
	ffffffff81000020 nf_hook_slow+0x20 ([kernel.kallsyms])

k8s-very-long-n 100    1000000 cpu-clock:ppp: 
	          4a2b3c runtime.futex (/tmp/k8s)

swapper     0    3000000 cpu-clock:ppp: 
	ffffffff81000030 default_idle ([kernel.kallsyms])

ksoftirqd/1    17    1000000 cpu-clock:ppp: 
	ffffffff81000040 veth_xmit ([kernel.kallsyms])

other helper 200    4000000 cpu-clock:ppp: 
	ffffffff81000050 tcp_v4_rcv ([kernel.kallsyms])

`
	p, err := parseProfile(strings.NewReader(script), "k8s-very-long-name")
	if err != nil {
		t.Fatal(err)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-6 }
	if !near(p.Ns, 4e6) || !near(p.AllNs, 11e6) || !near(p.IdleNs, 3e6) || !near(p.KsoftirqdNs, 1e6) {
		t.Fatalf("ns %v all %v idle %v ksoftirqd %v, want 4e6 11e6 3e6 1e6", p.Ns, p.AllNs, p.IdleNs, p.KsoftirqdNs)
	}
	if !near(p.NsBy[bucketNF], 2e6) || !near(p.NsBy[bucketUser], 1e6) || !near(p.NsBy[bucketSkb], 1e6) {
		t.Fatalf("by bucket %v", p.NsBy)
	}
	p.Result.OK = 10
	if !near(p.usPerConn(""), 400) || !near(p.share(bucketNF), 0.5) {
		t.Fatalf("µs/conn %v, nf share %v; want 400, 0.5", p.usPerConn(""), p.share(bucketNF))
	}
	_, err = parseProfile(strings.NewReader("k8s 1 1000 cycles:\n\tffffffff81000010 tcp_v4_rcv ([kernel.kallsyms])\n"), "k8s")
	if err == nil || !strings.Contains(err.Error(), "cpu-clock") {
		t.Fatalf("cycles: %v, want an error naming cpu-clock", err)
	}
}
