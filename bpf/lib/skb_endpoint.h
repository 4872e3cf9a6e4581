/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * skb_endpoint.h - the "from endpoint" pipeline of the programs that see a
 * container's packets as an skb: tcx (or legacy cls_bpf) at the ingress of a
 * host veth (tc_endpoint.c) and netkit's peer program, which runs in the
 * container device's transmit path (netkit_endpoint.c). Both see
 * skb->ifindex = the host-side device and speak the same return codes
 * (TC_ACT_UNSPEC = TCX_NEXT = NETKIT_NEXT, TC_ACT_SHOT = NETKIT_DROP,
 * TC_ACT_REDIRECT = NETKIT_REDIRECT); they differ only in how a packet
 * reaches a local endpoint (struct skb_cfg).
 *
 * Stages: parse -> admit (anti-spoofing, link scope, TTL) -> firewall ->
 * conntrack/NAT -> local endpoint -> FIB. Every exit counts one reason.
 */
#ifndef XLANE_SKB_ENDPOINT_H
#define XLANE_SKB_ENDPOINT_H

#include <stdbool.h>
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#include "abi.h"
#include "maps.h"
#include "metrics.h"
#include "parse.h"
#include "csum.h"
#include "fib.h"
#include "endpoint.h"
#include "natstage.h"
#include "fw.h"

/* tcx and legacy cls_bpf both read -1 as "not mine, carry on": with tcx the
 * next program in the chain runs, and Linux gets the packet after the last. */
#define XL_TC_PASS TC_ACT_UNSPEC

/*
 * How a program reaches a local endpoint. tcx (and legacy tc) at a host
 * veth's ingress use bpf_redirect_peer: straight into the destination's
 * namespace, no second pass through a backlog. The kernel allows a peer
 * redirect only at tc ingress and drops one from netkit's transmit path
 * (measured on 6.12), so netkit's peer program redirects to the
 * destination's host device instead, whose transmit hands the packet to the
 * container (a netkit primary through its primary program, a veth through
 * tcx egress: both count it and run the firewall's to-endpoint stage).
 */
struct skb_cfg {
	bool peer;	/* bpf_redirect_peer to local endpoints */
};

static __always_inline int to_local_endpoint(struct __sk_buff *skb, struct pkt *p,
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

static __noinline int to_fib(struct __sk_buff *skb, struct pkt *p,
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

enum uplink_route {
	ROUTE_ELSEWHERE = 0,	/* not out of the uplink */
	ROUTE_UPLINK,		/* out of the uplink: masquerade applies */
	ROUTE_TOO_BIG,		/* does not fit the path MTU: Linux must send
				 * the ICMP error to the untranslated source */
};

/* uplink_route asks the FIB where p goes; with tot_len 0 the kernel checks
 * the skb (GSO-aware) against the egress MTU. */
static __noinline int uplink_route(struct __sk_buff *skb, const struct pkt *p,
				   const struct xl_config *cfg)
{
	struct bpf_fib_lookup fib;
	long rc;

	fib_params_init(&fib, p, skb->ifindex);
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_SKIP_NEIGH);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return ROUTE_TOO_BIG;
	return (rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH) &&
	       cfg->uplink_ifindex && fib.ifindex == cfg->uplink_ifindex;
}

/*
 * ct_from_endpoint is the stage for packets an endpoint sends: existing
 * flows are translated as their entry says; a new flow to a published port
 * is DNATed, one leaving by the uplink from a masquerading endpoint is
 * SNATed, any other is tracked as is. What needs NAT but cannot be tracked
 * goes to Linux rather than out untranslated. Returns an enum ep_step.
 * A BPF-to-BPF call: its stack frame is not the caller's.
 */
static __noinline int ct_from_endpoint(struct __sk_buff *skb, struct pkt *p, __u16 src_flags,
				       enum xl_reason *reason)
{
	struct xl_config *cfg = xl_config();
	struct ct_scratch *sc;
	struct ct_key k = {};
	struct ct_val *v;
	struct l4 l4 = {};
	int masq, rc;

	if (!cfg)
		return EP_CONTINUE;
	masq = (src_flags & XL_EP_MASQUERADE) && !ep_local(p);
	switch (parse_l4((void *)(long)skb->data, (void *)(long)skb->data_end, p, &l4)) {
	case L4_OK:
		break;
	case L4_MALFORMED:
		*reason = XL_DROP_MALFORMED;
		return EP_DROP;
	default:
		/* An ICMP error about a translated flow: translated as its
		 * flow, then routed like any packet. */
		if (l4.proto == IPPROTO_ICMP || l4.proto == IPPROTO_ICMPV6) {
			rc = ct_icmp_error(skb, p, &l4);
			if (rc < 0) {
				*reason = XL_DROP_MALFORMED;
				return EP_DROP;
			}
			if (rc > 0)
				return EP_CONTINUE;
		}
		if (masq && uplink_route(skb, p, cfg) != ROUTE_ELSEWHERE) {
			*reason = XL_PASS_UNTRACKED;
			return EP_PASS;
		}
		return EP_CONTINUE;
	}
	ct_key_init(&k, p, &l4);
	v = bpf_map_lookup_elem(&xlane_ct, &k);
	if (v) {
		/* An SNAT flow's packet that does not fit the path goes to
		 * Linux untranslated, so its ICMP error reaches the sender. */
		if (v->nat == CT_NAT_SRC && uplink_route(skb, p, cfg) == ROUTE_TOO_BIG) {
			*reason = XL_PASS_NO_ROUTE;
			return EP_PASS;
		}
		if (!ct_hit(&k, v, &l4, skb->len))
			return ct_translate(skb, p, &l4, v, reason);
		/* Half a flow (ct_hit): forget it and start over. */
		bpf_map_delete_elem(&xlane_ct, &k);
	}
	rc = ct_publish(skb, p, &l4, &k, cfg, reason);
	if (rc)
		return rc > 0 ? EP_CONTINUE :
		       (*reason == XL_DROP_MALFORMED || *reason == XL_DROP_NO_BACKEND) ? EP_DROP : EP_PASS;
	if (masq) {
		switch (uplink_route(skb, p, cfg)) {
		case ROUTE_UPLINK:
			return ct_masquerade(skb, p, &l4, &k, cfg, node_addr(cfg, p), reason);
		case ROUTE_TOO_BIG:
			*reason = XL_PASS_NO_ROUTE;
			return EP_PASS;
		}
	}
	sc = ct_scratch_get();
	rc = sc ? ct_create(&k, sc, &l4, skb->len) : -1;
	if (rc == -EEXIST)
		/* The reply tuple is another flow's (a DNAT flow from the
		 * same port to this destination): remap the source port, as
		 * Linux's NAT does, or its replies would be translated as
		 * that flow's. */
		return ct_masquerade(skb, p, &l4, &k, cfg, k.saddr, reason);
	if (rc)
		/* Table full: forward untracked (no NAT needed), and say so. */
		metrics_count(0, XL_PASS_CT_FULL, XL_DIR_EGRESS, skb->len);
	return EP_CONTINUE;
}

/* Stage verdicts in tc return codes. */
static __always_inline int tc_step(enum ep_step step)
{
	return step == EP_DROP ? TC_ACT_SHOT : XL_TC_PASS;
}

static __always_inline int from_endpoint(struct __sk_buff *skb, const struct skb_cfg *cfg,
					 enum xl_reason *reason)
{
	struct endpoint_val *src, *dst;
	enum ep_step step;
	struct pkt p = {};
	int fw;

	tc_pull_l4(skb);
	step = ep_parsed(parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end,
				  skb->len, &p), reason);
	if (step != EP_CONTINUE)
		return tc_step(step);
	step = ep_admit(&p, skb->ifindex, reason);
	if (step != EP_CONTINUE)
		return tc_step(step);
	src = bpf_map_lookup_elem(&xlane_endpoints, &p.src);
	if (!src)
		return XL_TC_PASS;	/* link-scope source admitted above */
	/* Firewall before conntrack: a refused flow gets no entries. */
	fw = fw_skb_ep(skb, &p, FW_KIND_FROM_EP, 0, 0, reason);
	if (fw != FW_V_ALLOW)
		return fw_tc_ret(fw);	/* a reject's RST goes back out */
	step = ct_from_endpoint(skb, &p, src->flags, reason);
	if (step != EP_CONTINUE)
		return tc_step(step);
	dst = ep_local(&p);
	if (dst) {
		/* After NAT: a published port of another network (or of the
		 * same one, ICC off) is refused as on Docker's bridge. */
		if (ep_apart(src, dst, reason))
			return TC_ACT_SHOT;
		/* A peer redirect skips the destination's tcx egress: its
		 * firewall runs here. Without a peer redirect (netkit) the
		 * packet goes through that hook, which runs it. */
		fw = cfg->peer ? fw_skb_ep(skb, &p, FW_KIND_TO_EP, 0, 0, reason) : FW_V_ALLOW;
		if (fw != FW_V_ALLOW)
			return fw_tc_ret(fw);
		return to_local_endpoint(skb, &p, cfg, dst, reason);
	}
	return to_fib(skb, &p, reason);
}

/*
 * skb_to_endpoint_apart is ep_apart for what Linux delivers to an endpoint
 * (tcx egress of a host veth, netkit's primary program): a packet another
 * endpoint sent that Linux forwards (an XDP fallback, what any program
 * passed to Linux, netkit's redirect to a host device) is judged here, so
 * no path bypasses the check. (Kernel-mode endpoints are not in the map:
 * their packets look like the outside's.) Returns 1 (and the reason) to
 * drop.
 */
static __always_inline int skb_to_endpoint_apart(struct __sk_buff *skb, enum xl_reason *reason)
{
	const struct endpoint_val *src, *dst;
	struct pkt p = {};

	/* L3 only: a pull beyond what the node's own TCP puts in the head
	 * would copy every segment it sends to the endpoint. */
	if ((void *)(long)skb->data + XL_PARSE_LEN > (void *)(long)skb->data_end)
		bpf_skb_pull_data(skb, skb->len < XL_PARSE_LEN ? skb->len : XL_PARSE_LEN);
	if (parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, &p) != PARSE_OK)
		return 0;
	src = bpf_map_lookup_elem(&xlane_endpoints, &p.src);
	if (!src)
		return 0;
	dst = ep_local(&p);
	return dst && ep_apart(src, dst, reason);
}

/* skb_from_endpoint runs the pipeline and counts the verdict once, on the
 * sending endpoint's host device. */
static __always_inline int skb_from_endpoint(struct __sk_buff *skb, const struct skb_cfg *cfg)
{
	enum xl_reason reason = XL_PASS_NON_IP;
	__u32 len = skb->len;
	int ret;

	ret = from_endpoint(skb, cfg, &reason);
	/* The redirect helpers return TC_ACT_SHOT when they refuse. */
	if (reason <= XL_FWD_NEIGH && ret != TC_ACT_REDIRECT)
		reason = XL_DROP_REDIRECT;
	metrics_count(skb->ifindex, reason, XL_DIR_EGRESS, len);
	return ret;
}

#endif /* XLANE_SKB_ENDPOINT_H */
