// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * tc_endpoint.c - the `tc` datapath: tcx programs on the host side of every
 * endpoint's veth pair.
 *
 *   container netns            node netns
 *   +-----------+            +-----------------------------------------+
 *   |   eth0  --+--- veth ---+- xlXXXX  [tcx ingress: from_endpoint]   |
 *   +-----------+            |          [tcx egress:  to_endpoint]     |
 *                            +-----------------------------------------+
 *
 * Ingress on the host veth sees what the container sends. A packet for
 * another local endpoint goes straight into that endpoint's netns with
 * bpf_redirect_peer; anything else routable leaves through the FIB with
 * bpf_redirect / bpf_redirect_neigh; everything else (ARP, ND, traffic for
 * the node, TTL expiry, no route) goes to Linux unchanged. Linux is the slow
 * path, never a black hole. Egress only counts what Linux delivers.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#include "lib/abi.h"
#include "lib/maps.h"
#include "lib/metrics.h"
#include "lib/parse.h"
#include "lib/csum.h"
#include "lib/fib.h"
#include "lib/endpoint.h"

/* tcx and legacy cls_bpf both read -1 as "not mine, carry on": with tcx the
 * next program in the chain runs, and Linux gets the packet after the last. */
#define XL_TC_PASS TC_ACT_UNSPEC

/* Make sure the headers the parser reads are in the linear area. */
static __always_inline void tc_pull_headers(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u32 need = XL_PARSE_LEN;

	if (data + need <= data_end)
		return;
	if (skb->len < need)
		need = skb->len;
	bpf_skb_pull_data(skb, need);
}

static __always_inline int to_local_endpoint(struct __sk_buff *skb, struct pkt *p,
					     const struct endpoint_val *dst,
					     enum xl_reason *reason)
{
	__builtin_memcpy(p->eth->h_dest, dst->mac, ETH_ALEN);
	__builtin_memcpy(p->eth->h_source, dst->host_mac, ETH_ALEN);
	ep_forward_l3(p);
	metrics_count(dst->ifindex, XL_FWD_PEER, XL_DIR_INGRESS, skb->len);
	*reason = XL_FWD_PEER;
	return bpf_redirect_peer(dst->ifindex, 0);
}

static __always_inline int to_fib(struct __sk_buff *skb, struct pkt *p,
				  enum xl_reason *reason)
{
	struct bpf_fib_lookup fib;
	struct bpf_redir_neigh nh = {};
	long rc;

	fib_params_init(&fib, p, skb->ifindex);
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		/* Route and neighbour known: write L2 ourselves. */
		ep_forward_l3(p);
		__builtin_memcpy(p->eth->h_dest, fib.dmac, ETH_ALEN);
		__builtin_memcpy(p->eth->h_source, fib.smac, ETH_ALEN);
		*reason = XL_FWD_FIB;
		return bpf_redirect(fib.ifindex, 0);
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		/* Route known, neighbour not (yet): let the kernel's neighbour
		 * subsystem resolve and fill L2 for us. */
		ep_forward_l3(p);
		nh.nh_family = fib.family;
		if (fib.family == AF_INET)
			nh.ipv4_nh = fib.ipv4_dst;
		else
			__builtin_memcpy(nh.ipv6_nh, fib.ipv6_dst, 16);
		*reason = XL_FWD_NEIGH;
		return bpf_redirect_neigh(fib.ifindex, &nh, sizeof(nh), 0);
	case BPF_FIB_LKUP_RET_NOT_FWDED:
		*reason = XL_PASS_NOT_FWDED;
		return XL_TC_PASS;
	default:
		/* Blackhole, unreachable, prohibit, MTU, forwarding disabled:
		 * Linux does the right thing and sends the ICMP error. */
		*reason = XL_PASS_NO_ROUTE;
		return XL_TC_PASS;
	}
}

/* Stage verdicts in tc return codes. */
static __always_inline int tc_step(enum ep_step step)
{
	return step == EP_DROP ? TC_ACT_SHOT : XL_TC_PASS;
}

static __always_inline int from_endpoint(struct __sk_buff *skb, enum xl_reason *reason)
{
	struct endpoint_val *dst;
	enum ep_step step;
	struct pkt p = {};

	tc_pull_headers(skb);
	step = ep_parsed(parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end,
				  skb->len, &p), reason);
	if (step != EP_CONTINUE)
		return tc_step(step);
	step = ep_admit(&p, skb->ifindex, reason);
	if (step != EP_CONTINUE)
		return tc_step(step);
	dst = ep_local(&p);
	if (dst)
		return to_local_endpoint(skb, &p, dst, reason);
	return to_fib(skb, &p, reason);
}

SEC("tcx/ingress")
int xlane_from_endpoint(struct __sk_buff *skb)
{
	enum xl_reason reason = XL_PASS_NON_IP;
	__u32 len = skb->len;
	int ret;

	ret = from_endpoint(skb, &reason);
	/* The redirect helpers return TC_ACT_SHOT when they refuse. */
	if (reason <= XL_FWD_NEIGH && ret != TC_ACT_REDIRECT)
		reason = XL_DROP_REDIRECT;
	metrics_count(skb->ifindex, reason, XL_DIR_EGRESS, len);
	return ret;
}

SEC("tcx/egress")
int xlane_to_endpoint(struct __sk_buff *skb)
{
	metrics_count(skb->ifindex, XL_DELIVER, XL_DIR_INGRESS, skb->len);
	return XL_TC_PASS;
}

XL_ABI_BTF_ANCHORS;

char __license[] SEC("license") = "Dual BSD/GPL";
