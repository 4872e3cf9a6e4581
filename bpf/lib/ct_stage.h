/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * ct_stage.h - the conntrack/NAT stage of the skb "from endpoint"
 * pipeline (lib/skb_endpoint.h): ct_from_endpoint.
 */
#ifndef XLANE_CT_STAGE_H
#define XLANE_CT_STAGE_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "abi.h"
#include "maps.h"
#include "metrics.h"
#include "parse.h"
#include "l4.h"
#include "ct.h"
#include "fib.h"
#include "endpoint.h"
#include "stage.h"
#include "ct_nat.h"
#include "nat_icmp.h"
#include "overlay.h"

enum uplink_route {
	ROUTE_ELSEWHERE = 0, /* not out of the uplink */
	ROUTE_UPLINK,	     /* out of the uplink: masquerade applies */
	ROUTE_TOO_BIG,	     /* does not fit the path MTU: Linux must send
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
 * goes to Linux rather than out untranslated. Returns an enum xl_step.
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
	int masq, rc, dnat;

	if (!cfg)
		return XL_CONTINUE;
	/* Pod to pod, on this node or another, keeps its addresses. */
	masq = (src_flags & XL_EP_MASQUERADE) && !ep_local(p) && !peer_lookup(&p->dst);
	switch (parse_l4_skb(skb, &l4)) {
	case L4_OK:
		break;
	case L4_MALFORMED:
		return xl_final(reason, XL_DROP_MALFORMED);
	default:
		/* An ICMP error about a translated flow: translated as its
		 * flow, then routed like any packet. */
		if (l4.proto == IPPROTO_ICMP || l4.proto == IPPROTO_ICMPV6) {
			rc = ct_icmp_error(skb, p, &l4);
			if (rc < 0)
				return xl_final(reason, XL_DROP_MALFORMED);
			if (rc > 0)
				return XL_CONTINUE;
		}
		if (masq && uplink_route(skb, p, cfg) != ROUTE_ELSEWHERE)
			return xl_final(reason, XL_PASS_UNTRACKED);
		return XL_CONTINUE;
	}
	ct_key_init(&k, p, &l4);
	v = bpf_map_lookup_elem(&xlane_ct, &k);
	if (v) {
		/* An SNAT flow's packet that does not fit the path goes to
		 * Linux untranslated, so its ICMP error reaches the sender. */
		if (v->nat == CT_NAT_SRC && uplink_route(skb, p, cfg) == ROUTE_TOO_BIG)
			return xl_final(reason, XL_PASS_NO_ROUTE);
		if (ct_refresh(&k, v, &l4, skb->len))
			return ct_translate(skb, p, &l4, v, reason);
	}
	rc = ct_publish(skb, p, &l4, &k, cfg, 0, &dnat, reason);
	if (rc != XL_CONTINUE || dnat)
		return rc;
	if (masq) {
		switch (uplink_route(skb, p, cfg)) {
		case ROUTE_UPLINK:
			return ct_masquerade(skb, p, &l4, &k, cfg, node_addr(cfg, p), reason);
		case ROUTE_TOO_BIG:
			return xl_final(reason, XL_PASS_NO_ROUTE);
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
		/* Table full: forward untracked (no NAT needed), and say so
		 * (as tc's: netkit's program, which runs this stage too, is
		 * not known this deep, and the node's count has no device). */
		metrics_count(0, XL_PASS_CT_FULL, XL_DIR_EGRESS, XL_HOOK_TC, skb->len);
	return XL_CONTINUE;
}

#endif /* XLANE_CT_STAGE_H */
