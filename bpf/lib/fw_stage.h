/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * fw_stage.h - the firewall as a stage of the hooks: the global functions
 * that run the classifier on a context, and the stage each hook calls
 * (from and to an endpoint, tc and XDP; the uplink, after the DDoS stage).
 */
#ifndef XLANE_FW_STAGE_H
#define XLANE_FW_STAGE_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "abi.h"
#include "maps.h"
#include "parse.h"
#include "l4.h"
#include "stage.h"
#include "fw_maps.h"
#include "fw_classify.h"
#include "fw_lin.h"
#include "reply.h"
#include "ddos.h"

/*
 * Global functions.
 *
 * A global (non-static) BPF function is verified once, on its own, with
 * only the types of its arguments known; a static one is verified again
 * for every state its callers reach it in. The stage is a few thousand
 * instructions with a loop callback: as a static function it multiplied
 * the verification of the endpoint program tenfold (760k instructions,
 * close to the verifier's limit). The price of a global function: it
 * takes the context, not the caller's parsed packet (packet pointers
 * cannot cross into it), so it parses the headers again, and it must not
 * change the packet (the reject rewrite is the caller's).
 */

/* fw_ep_hook fills hk for the endpoint a packet leaves (FW_KIND_FROM_EP:
 * its source) or reaches (FW_KIND_TO_EP: its destination). Returns -1
 * when that address is no endpoint (nothing to classify). */
static __always_inline int fw_ep_hook(const struct pkt *p, __u8 kind, __u32 len, __u8 track,
				      struct fw_hook *hk)
{
	const struct endpoint_val *ep = bpf_map_lookup_elem(
		&xlane_endpoints, kind == FW_KIND_FROM_EP ? &p->src : &p->dst);

	if (!ep)
		return -1;
	hk->ifindex = ep->ifindex;
	hk->netid = ep->network_id;
	hk->len = len;
	hk->kind = kind;
	hk->track = track;
	hk->post_nat = 0;
	return 0;
}

static __always_inline int fw_run(void *data, void *data_end, __u32 pkt_len, __u32 ifindex,
				  struct fw_call *c, const int xdp)
{
	__u32 zero = 0;
	struct fw_scratch *sc = bpf_map_lookup_elem(&xlane_fw_scratch, &zero);
	struct pkt p = {};
	int v;

	if (!sc)
		return FW_V_ALLOW;
	/* The stage after conntrack judges only what the one before
	 * deferred (fw_prepare), once. */
	if ((c->flags & FW_CALL_POST_NAT) && !sc->deferred)
		return FW_V_ALLOW;
	sc->deferred = 0;
	if (parse_l3(data, data_end, pkt_len, &p) != PARSE_OK)
		return FW_V_ALLOW;
	if (c->kind == FW_KIND_UPLINK) {
		__builtin_memset(&sc->hk, 0, sizeof(sc->hk));
		sc->hk.ifindex = ifindex;
		sc->hk.len = c->len;
		sc->hk.kind = FW_KIND_UPLINK;
	} else if (fw_ep_hook(&p, c->kind, c->len, c->track, &sc->hk)) {
		return FW_V_ALLOW;
	}
	sc->hk.post_nat = c->flags & FW_CALL_POST_NAT;
	v = fw_prepare(data, data_end, &p, sc, xdp);
	if (v == FW_V_DROP)
		c->reason = sc->reason;
	return v;
}

/* fw_prepare_skb and fw_prepare_xdp are fw_prepare for each context:
 * FW_V_ALLOW, or FW_V_SEARCH for fw_decide. Only fw_prepare_xdp carries
 * the uplink's late conntrack test and the no-rule shortcut (fw_prepare,
 * fw_classes): the tc pipeline is at 6.1's verifier limit. */
__noinline int fw_prepare_skb(struct __sk_buff *skb, struct fw_call *c)
{
	if (!c)
		return FW_V_ALLOW;
	return fw_run((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, skb->ifindex,
		      c, 0);
}

__noinline int fw_prepare_xdp(struct xdp_md *ctx, struct fw_call *c)
{
	if (!c)
		return FW_V_ALLOW;
	return fw_run((void *)(long)ctx->data, (void *)(long)ctx->data_end,
		      bpf_xdp_get_buff_len(ctx), ctx->ingress_ifindex, c, 1);
}

/* fw_decide is fw_verdict, called after fw_prepare returned FW_V_SEARCH
 * (the two halves' frames are never on the stack together). */
__noinline int fw_decide(struct fw_call *c)
{
	__u32 zero = 0;
	struct fw_scratch *sc = bpf_map_lookup_elem(&xlane_fw_scratch, &zero);
	int v;

	if (!c || !sc)
		return FW_V_ALLOW;
	v = fw_verdict(sc);
	c->reason = sc->reason;
	return v;
}

/*
 * What the hooks call.
 */

/* fw_on is the cheap test hooks make before any firewall work. */
static __always_inline int fw_on(void)
{
	__u32 zero = 0;
	struct fw_state *st = bpf_map_lookup_elem(&xlane_fw_state, &zero);

	return st && st->on;
}

/* fw_skb_call runs the stage's halves for call c of a tc program.
 * bounce: how a reject's RST leaves (reply_skb). */
static __always_inline enum xl_step fw_skb_call(struct __sk_buff *skb, struct fw_call *c,
						__u64 bounce, enum xl_reason *reason)
{
	int v;

	if (!fw_on())
		return XL_CONTINUE;
	v = fw_prepare_skb(skb, c);
	if (v == FW_V_SEARCH)
		v = fw_decide(c);
	if (v == FW_V_ALLOW)
		return XL_CONTINUE;
	*reason = c->reason;
	if (v == FW_V_REJECT && !reply_skb(skb, bounce))
		return XL_REPLIED;
	return XL_FINAL;
}

/* fw_skb_ep is the stage for a packet of a tc program leaving or
 * reaching an endpoint (p: as the caller parsed it; the stage parses
 * again). track: this hook owns the packet's conntrack (struct fw_hook).
 * bounce: how a reject's RST leaves (reply_skb). */
static __always_inline enum xl_step fw_skb_ep(struct __sk_buff *skb, const struct pkt *p, __u8 kind,
					      __u8 track, __u64 bounce, enum xl_reason *reason)
{
	struct fw_call c = { .len = skb->len, .kind = kind, .track = track };

	return fw_skb_call(skb, &c, bounce, reason);
}

/*
 * fw_skb_post_nat is the from-endpoint stage after conntrack: a new flow
 * to a service VIP, which the stage before passed (fw_prepare deferred
 * it), is judged on its translated packet, to the backend, as Kubernetes
 * judges egress policy. A refusal deletes the flow's new entries
 * (fw_forget_translated); a reject's answer comes from the backend's
 * address, which the client's socket, connected to the VIP, ignores.
 */
static __always_inline enum xl_step fw_skb_post_nat(struct __sk_buff *skb, enum xl_reason *reason)
{
	struct fw_call c = { .len = skb->len, .kind = FW_KIND_FROM_EP, .flags = FW_CALL_POST_NAT };

	return fw_skb_call(skb, &c, 0, reason);
}

/* fw_xdp_end ends the stage of an XDP program on verdict v (c: the call
 * its stage set up): continue if allowed, else final with the rule's
 * reason, or replied where a reject answered. fw_xdp_run judges the
 * packet against the rules first. */
static __always_inline enum xl_step fw_xdp_end(struct xdp_md *ctx, struct fw_call *c, int v,
					       enum xl_reason *reason)
{
	if (v == FW_V_ALLOW)
		return XL_CONTINUE;
	*reason = c->reason;
	if (v == FW_V_REJECT && !reply_xdp(ctx))
		return reply_xdp_bounce(ctx);
	return XL_FINAL;
}

static __always_inline enum xl_step fw_xdp_run(struct xdp_md *ctx, struct fw_call *c,
					       enum xl_reason *reason)
{
	int v;

	v = fw_prepare_xdp(ctx, c);
	if (v == FW_V_SEARCH)
		v = fw_decide(c);
	return fw_xdp_end(ctx, c, v, reason);
}

/* fw_xdp_ep is fw_skb_ep for XDP programs. */
static __always_inline enum xl_step fw_xdp_ep(struct xdp_md *ctx, const struct pkt *p, __u8 kind,
					      __u32 len, __u8 track, enum xl_reason *reason)
{
	struct fw_call c = { .len = len, .kind = kind, .track = track };

	if (!fw_on())
		return XL_CONTINUE;
	return fw_xdp_run(ctx, &c, reason);
}

/*
 * fw_skb_to_endpoint is the whole stage of tcx egress on a host veth: what
 * Linux delivers to the endpoint. It owns conntrack for the packet: an
 * allowed new flow gets its entries here, so the endpoint's replies are
 * established.
 */
static __always_inline enum xl_step fw_skb_to_endpoint(struct __sk_buff *skb,
						       enum xl_reason *reason)
{
	struct pkt p = {};

	if (!fw_on())
		return XL_CONTINUE;
	tc_pull_l4(skb);
	if (parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, &p) !=
	    PARSE_OK)
		return XL_CONTINUE; /* non-IP; malformed is Linux's to judge here */
	if (addr_is_link_scope(&p.dst))
		return XL_CONTINUE; /* ND, multicast: never filtered */
	return fw_skb_ep(skb, &p, FW_KIND_TO_EP, 1, BPF_F_INGRESS, reason);
}

/*
 * fw_xdp_uplink is the uplink's first stage: DDoS defence, then the rules
 * of the uplink scope. parsed: parse_l3's result for the frame.
 */
static __always_inline enum xl_step fw_xdp_uplink(struct xdp_md *ctx, const struct pkt *p,
						  int parsed, __u32 len, enum xl_reason *reason)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct fw_call c = { .len = len, .kind = FW_KIND_UPLINK };
	const struct fw_state *st;
	const struct fw_gen *gen;
	__u32 zero = 0, slot;
	int v;

	if (fw_ddos_on() &&
	    fw_ddos_check(data, data_end, p, parsed == PARSE_MALFORMED, reason) != XL_CONTINUE)
		return XL_FINAL;
	if (parsed != PARSE_OK)
		return XL_CONTINUE;
	st = bpf_map_lookup_elem(&xlane_fw_state, &zero);
	if (!st || !st->on)
		return XL_CONTINUE;
	/* A small set: the generation's list (fw_lin.h); an IPv4 packet of
	 * a set of tuples: one hash lookup; unless a monitor wants rule
	 * events. Else the bitmaps. */
	slot = st->active & 1;
	gen = bpf_map_lookup_elem(&xlane_fw_gens, &slot);
	if (gen && (gen->lin || (gen->tuple4 && p->ip4)) && !mon_types()) {
		v = fw_uplink_simple(ctx, p, gen, st->generation << 1 | slot, &c);
		return fw_xdp_end(ctx, &c, v, reason);
	}
	return fw_xdp_run(ctx, &c, reason);
}

#endif /* XLANE_FW_STAGE_H */
