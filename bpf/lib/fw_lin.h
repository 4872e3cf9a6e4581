/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * fw_lin.h - the uplink's classifier for small rule sets: the generation's
 * list of conjunctions (struct fw_lin, filled by the compiler when the
 * set's uplink rules fit FW_LIN_MAX of them) tried in order, without the
 * bitmaps' lookups (LPM trie, scalar arrays, pool) or the search. Conntrack
 * is consulted only once a rule matched: established packets pass before
 * any rule, so one that no rule matches passes either way, and the uplink
 * owns no conntrack entries to refresh. What the list cannot do — sets
 * beyond it, a monitor listening for rule events — is left to the bitmaps
 * (fw_prepare_xdp, fw_decide), which decide alike.
 */
#ifndef XLANE_FW_LIN_H
#define XLANE_FW_LIN_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include "abi.h"
#include "parse.h"
#include "ct.h"
#include "monitor.h"
#include "fw_maps.h"
#include "fw_l4.h"
#include "fw_classify.h"

/* fw_lin_addr is 0 when address a (four words) is in prefix p/m. */
static __always_inline __u32 fw_lin_addr(const __u32 *a, const __u32 *p, const __u32 *m)
{
	return ((a[0] ^ p[0]) & m[0]) | ((a[1] ^ p[1]) & m[1]) | ((a[2] ^ p[2]) & m[2]) |
	       ((a[3] ^ p[3]) & m[3]);
}

/* fw_lin_match: entry e matches the packet's fields. */
static __always_inline int fw_lin_match(const struct fw_lin *e, __u8 ip6, const __u32 *s,
					const __u32 *d, const struct fw_l4 *l4)
{
	if (e->ip6 != ip6 || fw_lin_addr(s, e->src, e->src_mask) ||
	    fw_lin_addr(d, e->dst, e->dst_mask))
		return 0;
	if (!e->any_proto && e->proto != l4->l4.proto)
		return 0;
	if (l4->sport < e->sport_lo || l4->sport > e->sport_hi || l4->dport < e->dport_lo ||
	    l4->dport > e->dport_hi)
		return 0;
	return (l4->l4.tcp_flags & e->flags_mask) == e->flags_comp;
}

/* fw_lin_established is fw_established_late with the flow's key made. */
static __always_inline int fw_lin_established(const struct pkt *p, struct fw_scratch *sc)
{
	__builtin_memset(&sc->k, 0, sizeof(sc->k));
	__builtin_memcpy(sc->k.saddr, p->src.addr, 16);
	__builtin_memcpy(sc->k.daddr, p->dst.addr, 16);
	sc->k.sport = sc->l4.l4.sport;
	sc->k.dport = sc->l4.l4.dport;
	sc->k.proto = sc->l4.l4.proto;
	return fw_established_late(sc);
}

/* fw_lin_ready: the live generation has a list and no monitor wants rule
 * events, the cheap test before fw_lin_xdp's call (a set beyond the list
 * goes to the bitmaps without it). */
static __always_inline int fw_lin_ready(void)
{
	__u32 zero = 0, slot;
	const struct fw_state *st = bpf_map_lookup_elem(&xlane_fw_state, &zero);
	const struct fw_gen *gen;

	if (!st)
		return 0;
	slot = st->active & 1;
	gen = bpf_map_lookup_elem(&xlane_fw_gens, &slot);
	return gen && gen->lin && !mon_types();
}

/*
 * fw_lin_xdp classifies an uplink packet with the generation's list:
 * FW_V_ALLOW, FW_V_DROP or FW_V_REJECT (c->reason set), or FW_V_SEARCH
 * when the bitmaps must decide. A global function (verified once, see
 * fw_stage.h): it parses the frame again, as fw_prepare_xdp does.
 */
__noinline int fw_lin_xdp(struct xdp_md *ctx, struct fw_call *c)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0, slot, n, s[4], d[4];
	const struct fw_lin *e = 0;
	enum xl_reason reason = 0;
	enum fw_verdict v;
	struct fw_scratch *sc;
	struct fw_state *st;
	struct fw_gen *gen;
	struct pkt p = {};
	__u8 ip6;

	if (!c)
		return FW_V_ALLOW;
	st = bpf_map_lookup_elem(&xlane_fw_state, &zero);
	if (!st || !st->on)
		return FW_V_ALLOW;
	slot = st->active & 1;
	gen = bpf_map_lookup_elem(&xlane_fw_gens, &slot);
	if (!gen)
		return FW_V_ALLOW;
	n = gen->lin;
	if (!n || mon_types())
		return FW_V_SEARCH;
	sc = bpf_map_lookup_elem(&xlane_fw_scratch, &zero);
	if (!sc || parse_l3(data, data_end, c->len, &p) != PARSE_OK)
		return FW_V_ALLOW;
	__builtin_memset(&sc->l4, 0, sizeof(sc->l4));
	fw_parse_l4(data, data_end, &p, &sc->l4, &sc->rk);
	/* Neighbour discovery is never filtered (fw_prepare). */
	if (sc->l4.l4.proto == IPPROTO_ICMPV6 && sc->l4.dport >= 133 && sc->l4.dport <= 137)
		return FW_V_ALLOW;
	__builtin_memcpy(s, p.src.addr, 16);
	__builtin_memcpy(d, p.dst.addr, 16);
	ip6 = p.proto == ETH_P_IPV6;
#pragma unroll
	for (int i = 0; i < FW_LIN_MAX; i++) {
		if (i + 1 >= n)
			break;
		if (fw_lin_match(&gen->lin_rules[i], ip6, s, d, &sc->l4)) {
			e = &gen->lin_rules[i];
			break;
		}
	}
	if (!e)
		return FW_V_ALLOW; /* no rule: allowed, established or not */
	if (gen->established && fw_lin_established(&p, sc))
		return FW_V_ALLOW;
	fw_count_slot(e->slot, c->len);
	v = fw_action_verdict(e->action, e->is_default, &reason);
	if (v != FW_V_ALLOW)
		c->reason = reason;
	return v;
}

#endif /* XLANE_FW_LIN_H */
