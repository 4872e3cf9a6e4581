// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * xdpgen.c - the benchmark's small-packet generator and its meters.
 *
 *   container A                       node                      container B
 *   +---------------------+          +-----------------+       +------------------+
 *   | BPF_PROG_RUN (live  |  XDP_TX  |                 |       | tcx ingress:     |
 *   | frames): xlb_gen -->+- eth0 ---+- host veth A -> +--...--+- eth0 xlb_count  |
 *   | writes the frame    |          |  datapath under |       |  (count, drop)   |
 *   +---------------------+          |  test           |       +------------------+
 *                                    +-----------------+
 *
 * xlb_gen runs under BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES inside
 * container A with ingress_ifindex = A's eth0. XDP_TX there is turned by
 * the kernel into a redirect to eth0 itself, so every frame is transmitted
 * out of A's eth0 into the host side of its veth pair, which is what a
 * container sending the packet would do (but with no socket cost).
 * Live-frame pages are recycled with whatever the datapath left in them
 * (rewritten MACs, a decremented TTL), so the program writes the whole
 * frame from the template on every run.
 *
 * With gen_verdict = XDP_PASS the frames become skbs received on A's eth0
 * instead, which xlb_bounce (tcx ingress there) redirects out of eth0: the
 * host veth then gets skbs, as from a container's socket.
 *
 * xlb_count, on tcx ingress of B's eth0, counts the generator's frames
 * (UDP, or TCP for benchmarks that send GSO segments) and their bytes (a
 * GSO packet counts once, with all its bytes) that made it through the node
 * and drops them there: the receiver builds the
 * skb a real container would need, but no socket cost dominates. It also
 * checks that the frame was routed (TTL decremented) and that the IPv4
 * header checksum is still right.
 *
 * The raw tracepoint programs attribute XDP drops: frames a devmap flush
 * could not hand to the target device (xdp:xdp_devmap_xmit, e.g. a full
 * veth ring) and failed redirects (xdp:xdp_redirect_err), keyed by device
 * name and error.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>
#include <stdbool.h>

#define XLB_FRAME_LEN 60 /* a 64-byte Ethernet frame without its FCS */

/* The frame to send, set by the bench before loading (8-byte words so the
 * copy below is eight loads and stores). Bytes past XLB_FRAME_LEN unused. */
volatile const __u64 gen_frame[8];

/* XDP_TX: the frame leaves through eth0 as an xdp_frame (ndo_xdp_xmit).
 * XDP_PASS: BPF_PROG_RUN turns it into an skb received on eth0, and
 * xlb_bounce on eth0's tcx ingress sends that skb out of eth0, as a
 * container's socket would (an skb, not a frame, reaches the host veth). */
volatile const __u32 gen_verdict = XDP_TX;

/* gen_flows > 1: frame k (per CPU) gets the UDP source port
 * gen_sport + k % gen_flows, so consecutive frames are different flows
 * (the UDP checksum field holds only the pseudo-header sum, which has no
 * ports). 0 or 1: every frame is gen_frame. */
volatile const __u32 gen_flows = 1;
volatile const __u16 gen_sport;

/* What xlb_count matches, in network byte order. */
volatile const __u32 match_saddr;
volatile const __u32 match_daddr;
volatile const __u16 match_dport;
volatile const __u8 match_sent_ttl;

enum xlb_counter {
	XLB_OFFERED = 0,    /* frames xlb_gen handed to XDP_TX */
	XLB_RECEIVED,	    /* generator frames that reached B's eth0 */
	XLB_ROUTED,	    /* ... of which with the TTL decremented */
	XLB_BAD_IPCSUM,	    /* ... of which with a wrong IPv4 header checksum */
	XLB_RECEIVED_BYTES, /* the bytes (skb->len) of the frames received */
	XLB_COUNTER_MAX,
};

/* xlb_counters: key = enum xlb_counter, value = count per CPU. Written by
 * xlb_gen and xlb_count, read by the bench. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, XLB_COUNTER_MAX);
} xlb_counters SEC(".maps");

/* xlb_gen_seq: the index of the next frame's flow (gen_flows), per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} xlb_gen_seq SEC(".maps");

static __always_inline void add(__u32 what, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&xlb_counters, &what);

	if (v)
		*v += n;
}

static __always_inline void count(__u32 what)
{
	add(what, 1);
}

SEC("xdp")
int xlb_gen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u64 *d = data;

	if (data + XLB_FRAME_LEN > end)
		return XDP_ABORTED;
	/* 7 words = 56 bytes, then the last 4. */
	d[0] = gen_frame[0];
	d[1] = gen_frame[1];
	d[2] = gen_frame[2];
	d[3] = gen_frame[3];
	d[4] = gen_frame[4];
	d[5] = gen_frame[5];
	d[6] = gen_frame[6];
	*(__u32 *)(data + 56) = (__u32)gen_frame[7];
	if (gen_flows > 1) {
		__u32 zero = 0, *seq = bpf_map_lookup_elem(&xlb_gen_seq, &zero);

		if (seq) {
			__u32 i = *seq;

			*seq = i + 1 >= gen_flows ? 0 : i + 1;
			/* Ethernet 14 + IPv4 20: the UDP source port. */
			*(__u16 *)(data + 34) = bpf_htons((__u16)(gen_sport + i));
		}
	}
	count(XLB_OFFERED);
	return gen_verdict;
}

static __always_inline bool is_ours(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	/* UDP's and TCP's destination ports are at the same offset. */
	struct udphdr *udp = data + sizeof(*eth) + sizeof(*ip);

	return (void *)(udp + 1) <= end && eth->h_proto == bpf_htons(ETH_P_IP) && ip->ihl == 5 &&
	       (ip->protocol == IPPROTO_UDP || ip->protocol == IPPROTO_TCP) &&
	       ip->saddr == match_saddr && ip->daddr == match_daddr && udp->dest == match_dport;
}

/* tcx ingress of the sender's eth0 (skb source): the generator's frames,
 * now skbs received on eth0, leave again through eth0's transmit path. */
SEC("tc")
int xlb_bounce(struct __sk_buff *skb)
{
	if (!is_ours(skb))
		return TC_ACT_UNSPEC;
	/* A flow hash now spares RPS on the host veth a flow dissection
	 * (the generator's cost, not the datapath's). */
	bpf_set_hash(skb, 0x9e3779b9);
	return bpf_redirect(skb->ifindex, 0);
}

SEC("tc")
int xlb_count(struct __sk_buff *skb)
{
	struct iphdr *ip = (void *)(long)skb->data + sizeof(struct ethhdr);
	__s64 sum;

	if (!is_ours(skb))
		return TC_ACT_UNSPEC; /* not ours: on to the stack */
	if ((void *)(ip + 1) > (void *)(long)skb->data_end)
		return TC_ACT_UNSPEC; /* checked by is_ours; for the verifier */
	count(XLB_RECEIVED);
	add(XLB_RECEIVED_BYTES, skb->len);
	if (ip->ttl < match_sent_ttl)
		count(XLB_ROUTED);
	sum = bpf_csum_diff(0, 0, (__be32 *)ip, sizeof(*ip), 0);
	if (sum >= 0) {
		__u32 s = (__u32)sum;

		s = (s & 0xffff) + (s >> 16);
		s = (s & 0xffff) + (s >> 16);
		if (s != 0xffff)
			count(XLB_BAD_IPCSUM);
	}
	return TC_ACT_SHOT;
}

/* Only the fields read here; CO-RE finds them in the running kernel. */
struct net_device {
	char name[16];
} __attribute__((preserve_access_index));

enum xlb_event {
	XLB_EV_DEVMAP_DROP = 0, /* frames a devmap flush failed to transmit */
	XLB_EV_REDIRECT_ERR,	/* failed XDP redirects */
};

struct xdp_err_key {
	char dev[16]; /* devmap: the target device; redirect_err: the ingress one */
	__u32 event;  /* enum xlb_event */
	__s32 err;
};

/* xlb_xdp_errs: key = (device, event, errno), value = frames. Written by
 * the tracepoint programs, read by the bench. Machine-wide while attached. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct xdp_err_key);
	__type(value, __u64);
	__uint(max_entries, 256);
} xlb_xdp_errs SEC(".maps");

static __always_inline void add_err(const struct net_device *dev, __u32 event, __s32 err, __u64 n)
{
	struct xdp_err_key k = { .event = event, .err = err };
	__u64 *v;

	bpf_core_read_str(k.dev, sizeof(k.dev), &dev->name);
	v = bpf_map_lookup_elem(&xlb_xdp_errs, &k);
	if (!v) {
		if (!bpf_map_update_elem(&xlb_xdp_errs, &k, &n, BPF_NOEXIST))
			return;
		/* Another CPU created it first: add to that entry. */
		v = bpf_map_lookup_elem(&xlb_xdp_errs, &k);
		if (!v)
			return;
	}
	__sync_fetch_and_add(v, n);
}

/* xdp_devmap_xmit(from_dev, to_dev, sent, drops, err) */
SEC("raw_tp/xdp_devmap_xmit")
int xlb_devmap_xmit(struct bpf_raw_tracepoint_args *ctx)
{
	int drops = (int)ctx->args[3];

	if (drops > 0)
		add_err((const struct net_device *)ctx->args[1], XLB_EV_DEVMAP_DROP,
			(int)ctx->args[4], drops);
	return 0;
}

/* xdp_redirect_err(dev, xdp, tgt, err, map_type, map_id, index) */
SEC("raw_tp/xdp_redirect_err")
int xlb_redirect_err(struct bpf_raw_tracepoint_args *ctx)
{
	add_err((const struct net_device *)ctx->args[0], XLB_EV_REDIRECT_ERR, (int)ctx->args[3], 1);
	return 0;
}

/* Keep the enums in BTF for bpf2go (-type) although no variable names them. */
const enum xlb_counter *xlb_btf_counter __attribute__((unused));
const enum xlb_event *xlb_btf_event __attribute__((unused));

char __license[] SEC("license") = "Dual BSD/GPL";
