/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * skb_endpoint.h - the "from endpoint" pipeline of the programs that see
 * the container's packets as an skb: tcx on a host veth, and netkit's peer
 * program, which runs in the container device's transmit path. Both see
 * skb->ifindex = the host-side device and speak the same return codes
 * (TC_ACT_UNSPEC = TCX_NEXT = NETKIT_NEXT, TC_ACT_SHOT = NETKIT_DROP,
 * TC_ACT_REDIRECT = NETKIT_REDIRECT); they differ in how a packet reaches
 * a local endpoint (struct skb_cfg).
 */
#ifndef XLANE_SKB_ENDPOINT_H
#define XLANE_SKB_ENDPOINT_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <stdbool.h>
#include <bpf/bpf_helpers.h>

#include "abi.h"
#include "maps.h"
#include "metrics.h"
#include "parse.h"
#include "csum.h"
#include "fib.h"
#include "endpoint.h"

/* "Not mine, carry on": the next program of the chain runs (tcx), or the
 * packet goes on to Linux (netkit, legacy cls_bpf). */
#define XL_SKB_PASS TC_ACT_UNSPEC

struct skb_cfg {
	/*
	 * peer: reach a local endpoint with bpf_redirect_peer (straight into
	 * its namespace, no second pass through a backlog). Only allowed at tc
	 * ingress: the kernel drops a peer redirect from netkit's transmit
	 * path (measured on 6.12), so netkit programs redirect to the
	 * destination's host-side device instead, whose transmit hands the
	 * packet to the container (netkit: the primary program counts it;
	 * veth: tcx egress counts it).
	 */
	bool peer;
};

/* Make sure the headers the parser reads are in the linear area. */
static __always_inline void skb_pull_headers(struct __sk_buff *skb)
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

static __always_inline int skb_to_local_endpoint(struct __sk_buff *skb, struct pkt *p,
						 const struct skb_cfg *cfg,
						 const struct endpoint_val *dst,
						 enum xl_reason *reason)
{
	__builtin_memcpy(p->eth->h_dest, dst->mac, ETH_ALEN);
	__builtin_memcpy(p->eth->h_source, dst->host_mac, ETH_ALEN);
	ep_forward_l3(p);
	*reason = XL_FWD_PEER;
	if (!cfg->peer)
		return bpf_redirect(dst->ifindex, 0);
	/* The destination's host device never transmits a peer-redirected
	 * packet: count its delivery here. */
	metrics_count(dst->ifindex, XL_FWD_PEER, XL_DIR_INGRESS, skb->len);
	return bpf_redirect_peer(dst->ifindex, 0);
}

static __always_inline int skb_to_fib(struct __sk_buff *skb, struct pkt *p,
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
		/* Route known, neighbour not (yet): the kernel's neighbour
		 * subsystem resolves it and fills L2. */
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
		return XL_SKB_PASS;
	default:
		/* Blackhole, unreachable, prohibit, MTU, forwarding disabled:
		 * Linux does the right thing and sends the ICMP error. */
		*reason = XL_PASS_NO_ROUTE;
		return XL_SKB_PASS;
	}
}

/* Stage verdicts in skb return codes. */
static __always_inline int skb_step(enum ep_step step)
{
	return step == EP_DROP ? TC_ACT_SHOT : XL_SKB_PASS;
}

static __always_inline int skb_pipeline(struct __sk_buff *skb, const struct skb_cfg *cfg,
					enum xl_reason *reason)
{
	struct endpoint_val *dst;
	enum ep_step step;
	struct pkt p = {};

	skb_pull_headers(skb);
	step = ep_parsed(parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end,
				  skb->len, &p), reason);
	if (step != EP_CONTINUE)
		return skb_step(step);
	step = ep_admit(&p, skb->ifindex, reason);
	if (step != EP_CONTINUE)
		return skb_step(step);
	dst = ep_local(&p);
	if (dst)
		return skb_to_local_endpoint(skb, &p, cfg, dst, reason);
	return skb_to_fib(skb, &p, reason);
}

/* skb_from_endpoint runs the pipeline and counts the verdict once, on the
 * sending endpoint's host device. */
static __always_inline int skb_from_endpoint(struct __sk_buff *skb, const struct skb_cfg *cfg)
{
	enum xl_reason reason = XL_PASS_NON_IP;
	__u32 len = skb->len;
	int ret;

	ret = skb_pipeline(skb, cfg, &reason);
	/* The redirect helpers return TC_ACT_SHOT when they refuse. */
	if (reason <= XL_FWD_NEIGH && ret != TC_ACT_REDIRECT)
		reason = XL_DROP_REDIRECT;
	metrics_count(skb->ifindex, reason, XL_DIR_EGRESS, len);
	return ret;
}

#endif /* XLANE_SKB_ENDPOINT_H */
