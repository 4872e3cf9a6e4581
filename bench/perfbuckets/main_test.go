package main

import (
	"strings"
	"testing"
)

// Four samples: the benchmark's client in a BPF program's FIB lookup and
// in a copy, softirq netfilter work interrupting another process, another
// job's iperf3 (not counted) and a compiler (not counted).
const script = `iperf3 100
	ffffffff81000001 fib_table_lookup+0x1a (vmlinux)
	ffffffff81000002 bpf_ipv4_fib_lookup+0x2 (vmlinux)
	ffffffff81000003 bpf_skb_fib_lookup+0x3 (vmlinux)
	ffffffffc0000004 bpf_prog_907cc03fa55a183c_overlay_forward+0x44 (bpf_prog_907cc03fa55a183c_overlay_forward)
	ffffffffc0000005 bpf_prog_1f8e810055031bad_xlane_from_endpoint+0x55 (bpf_prog_1f8e810055031bad_xlane_from_endpoint)
	ffffffff81000006 tcx_ingress+0x6 (vmlinux)

iperf3 100
	ffffffff81000007 _copy_from_iter+0x7 (vmlinux)
	ffffffff81000008 tcp_sendmsg_locked+0x8 (vmlinux)

compile 200
	ffffffff81000009 nf_conntrack_in+0x9 (vmlinux)
	ffffffff8100000a nf_hook_slow+0xa (vmlinux)
	ffffffff8100000b ip_rcv+0xb (vmlinux)
	ffffffff8100000c net_rx_action+0xc (vmlinux)
	ffffffff8100000d handle_softirqs+0xd (vmlinux)
	          4a0c1e runtime.mallocgc+0x1e (/usr/lib/go/pkg/tool/compile)

iperf3 300
	ffffffff8100000e _copy_to_iter+0xe (vmlinux)
	ffffffff8100000f tcp_recvmsg+0xf (vmlinux)

compile 200
	          4a0c1e runtime.mallocgc+0x1e (/usr/lib/go/pkg/tool/compile)
`

func TestCount(t *testing.T) {
	c, err := count(strings.NewReader(script), map[string]bool{"100": true})
	if err != nil {
		t.Fatal(err)
	}
	if c.total != 5 || c.datapath != 3 {
		t.Fatalf("total %d datapath %d, want 5 and 3", c.total, c.datapath)
	}
	want := map[string]int{bpfBucket: 1, "copies (user <-> skb)": 1, "netfilter/conntrack": 1}
	for b, n := range want {
		if c.buckets[b] != n {
			t.Errorf("bucket %q: %d, want %d (all: %v)", b, c.buckets[b], n, c.buckets)
		}
	}
	if c.helpers["FIB lookup (bpf_fib_lookup)"] != 1 {
		t.Errorf("helpers %v, want the FIB lookup", c.helpers)
	}
	// Without pids every sample with a network frame counts, another
	// job's iperf3 too.
	if c, _ := count(strings.NewReader(script), nil); c.datapath != 4 {
		t.Errorf("without pids: datapath %d, want 4", c.datapath)
	}
}

// A program frame is a JITed program's (bpf_prog_<16 hex>_<name>), not the
// verifier's bpf_prog_load.
func TestBucketVerifier(t *testing.T) {
	if b, _ := bucket([]string{"do_check", "bpf_check", "bpf_prog_load", "__sys_bpf"}); b == bpfBucket {
		t.Errorf("the verifier counted as a program")
	}
	if b, h := bucket([]string{"bpf_prog_1f8e810055031bad_xlane_from_endpoint"}); b != bpfBucket || h != "program code" {
		t.Errorf("got %q %q", b, h)
	}
}
