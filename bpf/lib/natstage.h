/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * natstage.h - the conntrack/NAT stage of the tc programs: look the flow up,
 * translate it as its entry says, or create the entries of a new flow
 * (masquerade towards the uplink, DNAT to a published port).
 */
#ifndef XLANE_NATSTAGE_H
#define XLANE_NATSTAGE_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "abi.h"
#include "maps.h"
#include "metrics.h"
#include "parse.h"
#include "l4.h"
#include "ct.h"
#include "nat.h"
#include "fib.h"
#include "endpoint.h"
#include "lb.h"

#define NAT_PORT_TRIES 16

#ifndef EEXIST
#define EEXIST 17	/* asm-generic/errno-base.h */
#endif

static __always_inline int key_is_zero(const __u8 *a)
{
	__u64 hi, lo;

	__builtin_memcpy(&hi, a, 8);
	__builtin_memcpy(&lo, a + 8, 8);
	return hi == 0 && lo == 0;
}

static __always_inline int addr_eq(const __u8 *a, const __u8 *b)
{
	__u64 a0, a1, b0, b1;

	__builtin_memcpy(&a0, a, 8);
	__builtin_memcpy(&a1, a + 8, 8);
	__builtin_memcpy(&b0, b, 8);
	__builtin_memcpy(&b1, b + 8, 8);
	return a0 == b0 && a1 == b1;
}

/* tc_pull_l4 makes the headers up to L4 linear (as far as the packet goes). */
static __always_inline void tc_pull_l4(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u32 need = XL_PARSE_L4_LEN;

	if (data + need <= data_end)
		return;
	if (skb->len < need)
		need = skb->len;
	bpf_skb_pull_data(skb, need);
}

/* node_addr returns the node's masquerade address of p's family, or NULL. */
static __always_inline const __u8 *node_addr(const struct xl_config *cfg, const struct pkt *p)
{
	const __u8 *a = p->ip4 ? cfg->uplink_v4 : cfg->uplink_v6;

	return key_is_zero(a) ? 0 : a;
}

/* Re-read the headers after a rewrite moved or invalidated them. */
static __always_inline int tc_reparse(struct __sk_buff *skb, struct pkt *p, struct l4 *l4)
{
	struct pkt np = {};

	if (parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, &np) != PARSE_OK)
		return -1;
	if (parse_l4((void *)(long)skb->data, (void *)(long)skb->data_end, &np, l4) != L4_OK)
		return -1;
	*p = np;
	return 0;
}

/* ct_translate applies an existing entry's NAT and re-parses. */
static __always_inline enum ep_step ct_translate(struct __sk_buff *skb, struct pkt *p,
						 struct l4 *l4, const struct ct_val *v,
						 enum xl_reason *reason)
{
	if (v->nat == CT_NAT_NONE)
		return EP_CONTINUE;
	if (nat_rewrite(skb, p, l4, v->nat, v->nat_addr, v->nat_port) || tc_reparse(skb, p, l4)) {
		*reason = XL_DROP_MALFORMED;
		return EP_DROP;
	}
	return EP_CONTINUE;
}

/* ct_dnat_target finds where a new flow's destination translates to: a
 * published port on the node's address, or a service VIP's backend.
 * Returns 1 with *to filled, 0 if neither, -1 for a VIP without backends. */
static __always_inline int ct_dnat_target(const struct pkt *p, const struct l4 *l4,
					  const struct ct_key *k, const struct xl_config *cfg,
					  struct backend_val *to)
{
	const __u8 *na = node_addr(cfg, p);

	if (na && addr_eq(k->daddr, na) && !l4->icmp_echo) {
		struct publish_key pk = { .port = l4->dport, .proto = l4->proto, .family = p->ip4 ? 4 : 6 };
		const struct publish_val *pv = bpf_map_lookup_elem(&xlane_publish, &pk);

		if (!pv)
			return 0;
		__builtin_memcpy(to->addr, pv->addr, 16);
		to->port = pv->port;
		return 1;
	}
	switch (lb_select(k, l4, to)) {
	case LB_BACKEND:
		return 1;
	case LB_NO_BACKEND:
		return -1;
	default:
		return 0;
	}
}

/* ct_publish creates a DNAT flow if p is addressed to a published port or
 * a service VIP. Returns 1 if it did (p translated), 0 if p is for
 * neither, -1 on failure or a VIP without backends (*reason set). */
static __always_inline int ct_publish(struct __sk_buff *skb, struct pkt *p, struct l4 *l4,
				      const struct ct_key *k, const struct xl_config *cfg,
				      enum xl_reason *reason)
{
	struct backend_val to = {};
	struct ct_scratch *sc;
	int rc;

	rc = ct_dnat_target(p, l4, k, cfg, &to);
	if (rc <= 0) {
		if (rc < 0)
			*reason = XL_DROP_NO_BACKEND;
		return rc;
	}
	sc = ct_scratch_get();
	if (!sc) {
		*reason = XL_PASS_CT_FULL;
		return -1;
	}
	sc->orig.nat = CT_NAT_DST;
	__builtin_memcpy(sc->orig.nat_addr, to.addr, 16);
	sc->orig.nat_port = to.port;
	sc->reply.nat = CT_NAT_SRC;
	__builtin_memcpy(sc->reply.nat_addr, k->daddr, 16);
	sc->reply.nat_port = k->dport;
	rc = ct_create(k, sc, l4, skb->len);
	if (rc) {
		/* -EEXIST: the reply tuple is taken (the same client port to
		 * another VIP or directly to the same backend). Linux would
		 * remap the source port; xlane cannot yet (one NAT per entry):
		 * a named pass, not a silent loss. */
		*reason = rc == -EEXIST ? XL_PASS_NAT_PORTS : XL_PASS_CT_FULL;
		return -1;
	}
	if (nat_rewrite(skb, p, l4, CT_NAT_DST, sc->orig.nat_addr, sc->orig.nat_port) ||
	    tc_reparse(skb, p, l4)) {
		*reason = XL_DROP_MALFORMED;
		return -1;
	}
	return 1;
}

/* ct_masquerade creates a source-NAT flow from the node's address and a
 * free port (ICMP: identifier) of the configured range. */
static __always_inline enum ep_step ct_masquerade(struct __sk_buff *skb, struct pkt *p,
						  struct l4 *l4, const struct ct_key *k,
						  const struct xl_config *cfg,
						  enum xl_reason *reason)
{
	const __u8 *na = node_addr(cfg, p);
	struct ct_scratch *sc;
	__u32 range, start;
	long err = -1;
	int i;

	sc = ct_scratch_get();
	if (!na || !sc || cfg->nat_port_max < cfg->nat_port_min) {
		*reason = XL_PASS_NAT_PORTS;
		return EP_PASS;
	}
	sc->orig.nat = CT_NAT_SRC;
	__builtin_memcpy(sc->orig.nat_addr, na, 16);
	sc->reply.nat = CT_NAT_DST;
	__builtin_memcpy(sc->reply.nat_addr, k->saddr, 16);
	sc->reply.nat_port = k->sport;
	range = (__u32)cfg->nat_port_max - cfg->nat_port_min + 1;
	start = bpf_get_prandom_u32();
	for (i = 0; i < NAT_PORT_TRIES; i++) {
		sc->orig.nat_port = bpf_htons(cfg->nat_port_min + (start + i) % range);
		err = ct_create(k, sc, l4, skb->len);
		if (err != -EEXIST)
			break;
	}
	if (err) {
		*reason = err == -EEXIST ? XL_PASS_NAT_PORTS : XL_PASS_CT_FULL;
		return EP_PASS;
	}
	if (nat_rewrite(skb, p, l4, CT_NAT_SRC, sc->orig.nat_addr, sc->orig.nat_port) ||
	    tc_reparse(skb, p, l4)) {
		*reason = XL_DROP_MALFORMED;
		return EP_DROP;
	}
	return EP_CONTINUE;
}

#endif /* XLANE_NATSTAGE_H */
