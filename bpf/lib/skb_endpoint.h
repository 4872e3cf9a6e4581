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
 * Stages: VLAN tag -> parse -> admit (anti-spoofing, link scope, TTL) -> firewall ->
 * conntrack/NAT -> local endpoint -> FIB. Every exit counts one reason.
 *
 * xdp_endpoint.c runs the same pipeline on XDP: its stage functions are
 * the twins of these, xdp_<stage> beside skb_<stage> (skb_from_endpoint,
 * skb_from_endpoint_stages, skb_to_local_endpoint, and skb_fib_forward in
 * lib/fib_fwd.h); the comment above each XDP twin names the pair.
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
#include "fib_fwd.h"
#include "endpoint.h"
#include "ct_stage.h"
#include "fw.h"
#include "stage.h"
#include "handoff.h"
#include "unsolicited.h"
#include "overlay_fwd.h"
#include "vlan.h" /* its map: see there */

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
	bool peer;	   /* bpf_redirect_peer to local endpoints */
	enum xl_hook hook; /* what the counters say decided (XL_HOOK_TC, _NETKIT) */
};

/* skb_to_local_endpoint | xdp_to_local_endpoint (xdp_endpoint.c): p to dst,
 * a local endpoint, as cfg says (peer redirect or the host device). */
static __always_inline enum xl_step skb_to_local_endpoint(struct __sk_buff *skb, struct pkt *p,
							  const struct skb_cfg *cfg,
							  const struct endpoint_val *dst,
							  enum xl_reason *reason)
{
	__builtin_memcpy(p->eth->h_dest, dst->mac, ETH_ALEN);
	__builtin_memcpy(p->eth->h_source, dst->host_mac, ETH_ALEN);
	ep_forward_l3(p);
	if (!cfg->peer || (dst->flags & XL_EP_NO_PEER))
		return tc_forwarded(bpf_redirect(dst->ifindex, 0), XL_FWD_PEER, reason);
	/* The destination's host device never transmits a peer-redirected
	 * packet: count its delivery here. */
	metrics_count(dst->ifindex, XL_FWD_PEER, XL_DIR_INGRESS, cfg->hook, skb->len);
	return tc_forwarded(bpf_redirect_peer(dst->ifindex, 0), XL_FWD_PEER, reason);
}

/*
 * skb_published_flow says whether a packet between two endpoints, after
 * NAT, belongs to a published port's flow: a reply translated to come from
 * the node's address, or a request translated from it (its reply entry,
 * keyed by the packet's tuple reversed, says the reply leaves as the
 * node's address). Asked only of what the policy would drop, so only those
 * packets pay the parse and the lookup; a frame of its own (6.1's 512-byte
 * stack). The caller has pulled the headers to L4: a pull in here would
 * invalidate the caller's packet pointers.
 */
static __noinline int skb_published_flow(struct __sk_buff *skb)
{
	const struct xl_config *cfg = xl_config();
	const struct ct_val *v;
	struct ct_key k = {};
	struct l4 l4 = {};
	struct pkt p = {};

	if (!cfg)
		return 0;
	if (parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, &p) !=
		    PARSE_OK ||
	    parse_l4_skb(skb, &l4) != L4_OK)
		return 0;
	if (ep_is_node(cfg, &p.src))
		return 1;
	__builtin_memcpy(k.saddr, p.dst.addr, 16);
	__builtin_memcpy(k.daddr, p.src.addr, 16);
	k.sport = l4.dport;
	k.dport = l4.sport;
	k.proto = l4.proto;
	v = bpf_map_lookup_elem(&xlane_ct, &k);
	if (!v || v->dir != CT_DIR_REPLY)
		return 0;
	if (v->nat == CT_NAT_SRC)
		return ep_is_node(cfg, (const struct endpoint_key *)v->nat_addr);
	return v->nat == CT_NAT_BOTH && ep_is_node(cfg, (const struct endpoint_key *)v->nat_saddr);
}

/* skb_from_endpoint_stages | xdp_from_endpoint_stages (xdp_endpoint.c): the
 * stages of a packet an endpoint sends. */
static __always_inline int skb_from_endpoint_stages(struct __sk_buff *skb,
						    const struct skb_cfg *cfg,
						    enum xl_reason *reason)
{
	struct endpoint_val *src, *dst;
	struct pkt p = {};
	int step;

	tc_pull_l4(skb);
	/* A veth moves a frame's tag into skb metadata before tcx runs: the
	 * frame then parses as the inner packet. */
	step = ep_parsed(skb->vlan_present ? PARSE_VLAN
					   : parse_l3((void *)(long)skb->data,
						      (void *)(long)skb->data_end, skb->len, &p),
			 reason);
	if (step != XL_CONTINUE)
		return step;
	step = ep_admit(&p, skb->ifindex, &src, reason);
	if (step != XL_CONTINUE || !src) /* !src: never when it continues */
		return step;
	/* Firewall before conntrack: a refused flow gets no entries. */
	step = fw_skb_ep(skb, &p, FW_KIND_FROM_EP, 0, 0, reason);
	if (step != XL_CONTINUE)
		return step; /* a reject's RST goes back out */
	step = ct_from_endpoint(skb, &p, src->flags, reason);
	if (step != XL_CONTINUE)
		return ct_no_backend_answer(skb, step, *reason);
	/* A new flow to a service VIP: judged on its backend. */
	step = fw_skb_post_nat(skb, reason);
	if (step != XL_CONTINUE)
		return step;
	dst = ep_local(&p);
	if (dst) {
		/* After NAT: a published port's flow passes the policy, as
		 * Docker's userland proxy relays it between networks and
		 * within an ICC-off one; a service VIP's does not. */
		step = ep_apart(src, dst, reason);
		if (step != XL_CONTINUE && !skb_published_flow(skb))
			return step; /* else the delivery below sets the reason */
		/* A peer redirect skips the destination's tcx egress: its
		 * firewall runs here. Without a peer redirect (netkit) the
		 * packet goes through that hook, which runs it. */
		if (cfg->peer) {
			step = fw_skb_ep(skb, &p, FW_KIND_TO_EP, 0, 0, reason);
			if (step != XL_CONTINUE)
				return step;
		}
		return skb_to_local_endpoint(skb, &p, cfg, dst, reason);
	}
	step = overlay_forward(skb, &p, src->network_id, reason);
	if (step != XL_CONTINUE)
		return step;
	return skb_fib_forward(skb, &p, reason);
}

/*
 * skb_to_endpoint_apart is ep_apart for what Linux delivers to an endpoint
 * (tcx egress of a host veth, netkit's primary program): a packet another
 * endpoint sent that Linux forwards (an XDP fallback, what any program
 * passed to Linux, netkit's redirect to a host device) is judged here, so
 * no path bypasses the check. (Kernel-mode endpoints are not in the map:
 * their packets look like the outside's.) A stage: XL_FINAL (and the
 * reason) to drop.
 */
static __always_inline enum xl_step skb_to_endpoint_apart(struct __sk_buff *skb,
							  enum xl_reason *reason)
{
	const struct endpoint_val *src, *dst;
	enum xl_reason apart;
	struct pkt p = {};

	/* L3 only: a pull beyond what the node's own TCP puts in the head
	 * would copy every segment it sends to the endpoint. */
	skb_pull_headers(skb, XL_PARSE_LEN);
	if (parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, &p) !=
	    PARSE_OK)
		return XL_CONTINUE;
	src = bpf_map_lookup_elem(&xlane_endpoints, &p.src);
	if (!src)
		return XL_CONTINUE;
	dst = ep_local(&p);
	if (!dst || ep_apart(src, dst, &apart) == XL_CONTINUE)
		return XL_CONTINUE;
	tc_pull_l4(skb);
	if (skb_published_flow(skb))
		return XL_CONTINUE;
	return xl_final(reason, apart);
}

/*
 * skb_to_endpoint_rnat translates the node's own answer to an endpoint's
 * service flow whose backend is the node (a hostNetwork backend, the
 * kubernetes Service on a control-plane node): the endpoint's program
 * DNATed the flow to the node's address, Linux delivered it to a local
 * socket, and the answer comes back through Linux, here, where the flow's
 * reply entry makes it come from the VIP again. Only the node's own
 * packets (no ingress device): what reaches Linux through an xlane program
 * was translated there. Headers as the node's stack built them, linear
 * (no pull: a pull beyond them would copy every segment it sends). A
 * stage; a BPF-to-BPF call, its keys on a frame of its own.
 */
static __noinline int skb_to_endpoint_rnat(struct __sk_buff *skb, enum xl_reason *reason)
{
	struct ct_key k = {};
	struct l4 l4 = {};
	struct pkt p = {};
	struct ct_val *v;

	if (!skb || !reason || skb->ingress_ifindex)
		return XL_CONTINUE;
	if (parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, &p) !=
		    PARSE_OK ||
	    parse_l4_skb(skb, &l4) != L4_OK)
		return XL_CONTINUE;
	ct_key_init(&k, &p, &l4);
	v = bpf_map_lookup_elem(&xlane_ct, &k);
	if (!v || v->dir != CT_DIR_REPLY || v->nat == CT_NAT_NONE)
		return XL_CONTINUE;
	v = ct_refresh(&k, v, &l4, skb->len);
	if (!v)
		return XL_CONTINUE;
	return ct_translate(skb, &p, &l4, v, reason);
}

/*
 * skb_to_endpoint runs the stages for what Linux delivers to an endpoint
 * (tcx egress of a host veth, netkit's primary program): the node's
 * answers to service flows translated back, network policy, then
 * unsolicited off-node traffic, then the firewall's to-endpoint rules
 * (whose reject answers with XL_REPLIED).
 */
static __always_inline enum xl_step skb_to_endpoint(struct __sk_buff *skb, enum xl_reason *reason)
{
	enum xl_step step;

	step = skb_to_endpoint_rnat(skb, reason);
	if (step == XL_CONTINUE)
		step = skb_to_endpoint_apart(skb, reason);
	if (step == XL_CONTINUE)
		step = skb_to_endpoint_unsolicited(skb, reason);
	if (step == XL_CONTINUE)
		step = fw_skb_to_endpoint(skb, reason);
	return step;
}

/* skb_from_endpoint | xdp_from_endpoint (xdp_endpoint.c) runs the pipeline
 * and counts the verdict once, on the sending endpoint's host device. */
static __always_inline int skb_from_endpoint(struct __sk_buff *skb, const struct skb_cfg *cfg)
{
	enum xl_reason reason = XL_PASS_NON_IP;
	__u32 len = skb->len;
	int step;

	enum xl_reason xdp;
	enum xl_hook hook = cfg->hook;

	step = skb_from_endpoint_stages(skb, cfg, &reason);
	/* XDP passed it here without counting (lib/handoff.h): what goes on
	 * to Linux counts under XDP's reason (a pass reason, as this one
	 * is) and as XDP's, the rest under this one's. */
	if (tc_code(step, reason) == XL_TC_PASS) {
		xdp = skb_handoff(skb);
		if (xdp != XL_HANDOFF_NONE) {
			reason = xdp;
			hook = XL_HOOK_XDP;
		}
	}
	metrics_count(skb->ifindex, reason, XL_DIR_EGRESS, hook, len);
	return tc_ret(skb, FW_KIND_FROM_EP, step, reason);
}

#endif /* XLANE_SKB_ENDPOINT_H */
