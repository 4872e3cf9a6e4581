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

/*
 * ct_nat_apply rewrites p as entry v says (for CT_NAT_BOTH the destination,
 * then the source) and re-parses it. A BPF-to-BPF call, so the rewrite code
 * exists once in each program. Returns 0, or -1 if the packet could not be
 * rewritten.
 */
static __noinline int ct_nat_apply(struct __sk_buff *skb, struct pkt *p, struct l4 *l4,
				   const struct ct_val *v)
{
	__u8 nat = v->nat;

	if (nat & CT_NAT_DST) {
		if (nat_rewrite(skb, p, l4, CT_NAT_DST, v->nat_addr, v->nat_port) ||
		    tc_reparse(skb, p, l4))
			return -1;
	}
	if (nat & CT_NAT_SRC) {
		const __u8 *a = nat == CT_NAT_BOTH ? v->nat_saddr : v->nat_addr;
		__u16 port = nat == CT_NAT_BOTH ? v->nat_sport : v->nat_port;

		if (nat_rewrite(skb, p, l4, CT_NAT_SRC, a, port) || tc_reparse(skb, p, l4))
			return -1;
	}
	return 0;
}

/* ct_translate applies an existing entry's NAT and re-parses. */
static __always_inline enum ep_step ct_translate(struct __sk_buff *skb, struct pkt *p,
						 struct l4 *l4, const struct ct_val *v,
						 enum xl_reason *reason)
{
	if (v->nat == CT_NAT_NONE)
		return EP_CONTINUE;
	if (ct_nat_apply(skb, p, l4, v)) {
		*reason = XL_DROP_MALFORMED;
		return EP_DROP;
	}
	return EP_CONTINUE;
}

/*
 * ct_create_ports creates a flow's entries with the first free port of the
 * masquerade range (random start, NAT_PORT_TRIES tries): the original
 * direction's nat_port (CT_NAT_SRC) or nat_sport (CT_NAT_BOTH). Ports come
 * from --nat-ports, outside the node's ip_local_port_range. Returns
 * ct_create's result: -EEXIST when every port tried was taken.
 */
static __noinline int ct_create_ports(const struct ct_key *k, struct ct_scratch *sc,
				      const struct l4 *l4, __u32 len, const struct xl_config *cfg)
{
	__u32 range, start;
	int err = -EEXIST;
	__u16 port;
	int i;

	if (cfg->nat_port_max < cfg->nat_port_min)
		return -EEXIST;
	range = (__u32)cfg->nat_port_max - cfg->nat_port_min + 1;
	start = bpf_get_prandom_u32();
	for (i = 0; i < NAT_PORT_TRIES; i++) {
		port = bpf_htons(cfg->nat_port_min + (start + i) % range);
		if (sc->orig.nat == CT_NAT_BOTH)
			sc->orig.nat_sport = port;
		else
			sc->orig.nat_port = port;
		err = ct_create(k, sc, l4, len);
		if (err != -EEXIST)
			break;
	}
	return err;
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

/*
 * ct_publish creates a DNAT flow if p is addressed to a published port or
 * a service VIP. Returns 1 if it did (p translated), 0 if p is for
 * neither, -1 on failure or a VIP without backends (*reason set).
 *
 * Two cases also translate the source (CT_NAT_BOTH), as Linux's NAT does:
 * - hairpin: the target is the client itself (a container reaching its own
 *   published port or a service it backs): the source becomes the node's
 *   address and a port of the masquerade range, so the reply leaves the
 *   container towards the gateway and comes back through xlane instead of
 *   going straight to the client socket inside the container;
 * - a reply-tuple clash: the target already has a flow from the client's
 *   address and port (the same client port to two VIPs with a common
 *   backend, or to the backend directly): the source port is remapped to a
 *   free one of the masquerade range, the address kept.
 * No free port: pass_nat_ports, the packet goes to Linux untranslated.
 */
static __always_inline int ct_publish(struct __sk_buff *skb, struct pkt *p, struct l4 *l4,
				      const struct ct_key *k, const struct xl_config *cfg,
				      enum xl_reason *reason)
{
	struct backend_val to = {};
	struct ct_scratch *sc;
	const __u8 *src;
	int err;
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
	src = k->saddr;
	if (addr_eq(to.addr, k->saddr)) {
		src = node_addr(cfg, p);	/* hairpin */
		err = -EEXIST;
	} else {
		err = ct_create(k, sc, l4, skb->len);
	}
	if (err == -EEXIST && src) {
		sc->orig.nat = CT_NAT_BOTH;
		__builtin_memcpy(sc->orig.nat_saddr, src, 16);
		sc->reply.nat = CT_NAT_BOTH;
		__builtin_memcpy(sc->reply.nat_addr, k->saddr, 16);
		sc->reply.nat_port = k->sport;
		__builtin_memcpy(sc->reply.nat_saddr, k->daddr, 16);
		sc->reply.nat_sport = k->dport;
		err = ct_create_ports(k, sc, l4, skb->len, cfg);
	}
	if (err) {
		*reason = err == -EEXIST ? XL_PASS_NAT_PORTS : XL_PASS_CT_FULL;
		return -1;
	}
	if (ct_nat_apply(skb, p, l4, &sc->orig)) {
		*reason = XL_DROP_MALFORMED;
		return -1;
	}
	return 1;
}

/* ct_masquerade creates a source-NAT flow from address na (the node's; or
 * the sender's own, to remap only the port of a flow whose reply tuple is
 * taken) and a free port (ICMP: identifier) of the configured range. */
static __always_inline enum ep_step ct_masquerade(struct __sk_buff *skb, struct pkt *p,
						  struct l4 *l4, const struct ct_key *k,
						  const struct xl_config *cfg, const __u8 *na,
						  enum xl_reason *reason)
{
	struct ct_scratch *sc;
	int err;

	sc = ct_scratch_get();
	if (!na || !sc) {
		*reason = XL_PASS_NAT_PORTS;
		return EP_PASS;
	}
	sc->orig.nat = CT_NAT_SRC;
	__builtin_memcpy(sc->orig.nat_addr, na, 16);
	sc->reply.nat = CT_NAT_DST;
	__builtin_memcpy(sc->reply.nat_addr, k->saddr, 16);
	sc->reply.nat_port = k->sport;
	err = ct_create_ports(k, sc, l4, skb->len, cfg);
	if (err) {
		*reason = err == -EEXIST ? XL_PASS_NAT_PORTS : XL_PASS_CT_FULL;
		return EP_PASS;
	}
	if (ct_nat_apply(skb, p, l4, &sc->orig)) {
		*reason = XL_DROP_MALFORMED;
		return EP_DROP;
	}
	return EP_CONTINUE;
}

/*
 * ICMP errors about translated flows. An error (destination unreachable,
 * fragmentation needed / packet too big, time exceeded, parameter problem)
 * quotes the packet it is about: IP header + at least 8 bytes of L4. The
 * error travels against the quoted packet, so the entry that describes it
 * is the one keyed by the quote reversed; it says how to translate the
 * error as it would translate a packet of that direction: the outer
 * destination (and the outer source when the error comes from the flow's
 * peer itself), and the quote the other way round (its source for the
 * entry's destination translation, its destination for the source one).
 * Quotes of TCP, UDP and ICMP echo requests (a masqueraded ping's: keyed
 * by identifier) are translated. The quote's IPv4 header checksum and UDP
 * or echo checksum (inside the 8 bytes) are patched, the ICMP checksum by
 * the difference of the whole quote; a quoted TCP checksum lies beyond the
 * guaranteed 8 bytes and is left alone, as Linux does for short quotes.
 */
#define ICMP_QUOTE4 28	/* IPv4 header without options + 8 bytes */
#define ICMP_QUOTE6 48	/* IPv6 header + 8 bytes */

/* The quote before and after, and the entry's key: too big for the stack
 * of a third call level. */
struct icmp_scratch {
	__u8 q[ICMP_QUOTE6];
	__u8 nq[ICMP_QUOTE6];
	__u8 old[40];		/* icmp_quote_nat: addresses, then ports */
	struct ct_key rk;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct icmp_scratch);
	__uint(max_entries, 1);
} xlane_icmp_scratch SEC(".maps");

static __always_inline int icmp_is_error(__u8 proto, __u8 type)
{
	if (proto == IPPROTO_ICMP)
		return type == 3 || type == 11 || type == 12;
	return type >= 1 && type <= 4;
}

/* csum16_add returns checksum field check after the data it covers changed
 * by diff (a bpf_csum_diff result), RFC 1624. */
static __always_inline __u16 csum16_add(__u16 check, __u32 diff)
{
	__u64 s = (__u16)~check;

	s += diff;
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return ~(__u16)s;
}

/* icmp_quote_nat translates quote q (v6 is a constant) as entry v says.
 * A quoted echo request (echo) has its identifier where TCP and UDP have
 * the source port, and only a destination translation (masquerade's
 * reply entry) applies to it. */
static __always_inline void icmp_quote_nat(__u8 *q, __u8 *old, const struct ct_val *v,
					   const int v6, int echo)
{
	const int sa = v6 ? 8 : 12;	/* quoted source address */
	const int al = v6 ? 16 : 4;	/* address length */
	const int po = v6 ? 40 : 20;	/* quoted L4 header */
	__u32 pp = echo ? po + 4 : po;	/* ports; echo: identifier, sequence */
	__u32 d;
	__u16 c;

	__builtin_memcpy(old, q + sa, 2 * al);
	__builtin_memcpy(old + 2 * al, q + pp, 4);
	if (v->nat & CT_NAT_DST) {
		__builtin_memcpy(q + sa, v->nat_addr + 16 - al, al);
		__builtin_memcpy(q + pp, &v->nat_port, 2);
	}
	if (echo) {
		/* The quoted ICMP checksum (IPv6: with the pseudo-header). */
		d = bpf_csum_diff((__be32 *)old, 2 * al, (__be32 *)(q + sa), 2 * al, 0);
		if (!v6) {
			__builtin_memcpy(&c, q + 10, 2);
			c = csum16_add(c, d);
			__builtin_memcpy(q + 10, &c, 2);
		}
		d = bpf_csum_diff((__be32 *)(old + 2 * al), 4, (__be32 *)(q + pp), 4, v6 ? d : 0);
		__builtin_memcpy(&c, q + po + 2, 2);
		c = csum16_add(c, d);
		__builtin_memcpy(q + po + 2, &c, 2);
		return;
	}
	if (v->nat & CT_NAT_SRC) {
		if (v->nat == CT_NAT_BOTH) {
			__builtin_memcpy(q + sa + al, v->nat_saddr + 16 - al, al);
			__builtin_memcpy(q + po + 2, &v->nat_sport, 2);
		} else {
			__builtin_memcpy(q + sa + al, v->nat_addr + 16 - al, al);
			__builtin_memcpy(q + po + 2, &v->nat_port, 2);
		}
	}
	d = bpf_csum_diff((__be32 *)old, 2 * al, (__be32 *)(q + sa), 2 * al, 0);
	if (!v6) {
		__builtin_memcpy(&c, q + 10, 2);
		c = csum16_add(c, d);
		__builtin_memcpy(q + 10, &c, 2);
	}
	if (q[v6 ? 6 : 9] != IPPROTO_UDP)
		return;
	__builtin_memcpy(&c, q + po + 6, 2);
	if (!c && !v6)
		return;		/* IPv4 UDP without a checksum */
	d = bpf_csum_diff((__be32 *)(old + 2 * al), 4, (__be32 *)(q + po), 4, d);
	c = csum16_add(c, d);
	if (!c)
		c = 0xffff;
	__builtin_memcpy(q + po + 6, &c, 2);
}

/* icmp_outer_addr replaces the outer source (src) or destination address. */
static __always_inline int icmp_outer_addr(struct __sk_buff *skb, int v4, int src,
					   const __u8 *addr, __u32 csum_off)
{
	__u32 off = sizeof(struct ethhdr) + (v4 ? (src ? 12 : 16) : (src ? 8 : 24));
	__u8 old[16];
	__s64 d;

	if (v4) {
		if (bpf_skb_load_bytes(skb, off, old, 4) ||
		    bpf_l3_csum_replace(skb, IPV4_CSUM_OFF, *(__be32 *)old, *(__be32 *)(addr + 12), 4))
			return -1;
		return bpf_skb_store_bytes(skb, off, addr + 12, 4, 0) ? -1 : 0;
	}
	if (bpf_skb_load_bytes(skb, off, old, 16))
		return -1;
	d = bpf_csum_diff((__be32 *)old, 16, (__be32 *)addr, 16, 0);
	if (d < 0 || bpf_l4_csum_replace(skb, csum_off, 0, d, BPF_F_PSEUDO_HDR))
		return -1;
	return bpf_skb_store_bytes(skb, off, addr, 16, 0) ? -1 : 0;
}

/*
 * ct_icmp_error translates p if it is an ICMP error about a translated
 * flow (l4 as parse_l4 left it: off and proto). Returns 1 if it did (p
 * re-parsed at L3), 0 if p is no such error (untouched), -1 if the rewrite
 * failed.
 */
static __noinline int ct_icmp_error(struct __sk_buff *skb, struct pkt *p, const struct l4 *l4)
{
	__u32 qoff = l4->off + 8, csum_off = l4->off + 2, zero = 0;
	int v4 = p->ip4 != 0, echo = 0;
	struct icmp_scratch *sc;
	struct ct_key *rk;
	struct ct_val *v;
	__be32 a;
	__s64 d;
	__u8 type;

	if ((l4->proto == IPPROTO_ICMP) != v4 ||
	    bpf_skb_load_bytes(skb, l4->off, &type, 1) || !icmp_is_error(l4->proto, type))
		return 0;
	sc = bpf_map_lookup_elem(&xlane_icmp_scratch, &zero);
	if (!sc)
		return 0;
	rk = &sc->rk;
	__builtin_memset(rk, 0, sizeof(*rk));
	if (v4) {
		if (bpf_skb_load_bytes(skb, qoff, sc->q, ICMP_QUOTE4) || sc->q[0] != 0x45 ||
		    (sc->q[6] & 0x1f) || sc->q[7])
			return 0;	/* options, or not the first fragment */
		rk->proto = sc->q[9];
		__builtin_memcpy(&a, sc->q + 16, 4);
		key_from_ipv4((struct endpoint_key *)rk->saddr, a);
		__builtin_memcpy(&a, sc->q + 12, 4);
		key_from_ipv4((struct endpoint_key *)rk->daddr, a);
		__builtin_memcpy(&rk->sport, sc->q + 22, 2);
		__builtin_memcpy(&rk->dport, sc->q + 20, 2);
	} else {
		if (bpf_skb_load_bytes(skb, qoff, sc->q, ICMP_QUOTE6) || (sc->q[0] >> 4) != 6)
			return 0;
		rk->proto = sc->q[6];
		__builtin_memcpy(rk->saddr, sc->q + 24, 16);
		__builtin_memcpy(rk->daddr, sc->q + 8, 16);
		__builtin_memcpy(&rk->sport, sc->q + 42, 2);
		__builtin_memcpy(&rk->dport, sc->q + 40, 2);
	}
	if (rk->proto == l4->proto) {
		/* A quoted echo request: its flow is keyed by identifier. */
		if (sc->q[v4 ? 20 : 40] != (v4 ? ICMP_ECHO : ICMPV6_ECHO_REQ))
			return 0;
		rk->sport = v4 ? *(__u16 *)(sc->q + 24) : *(__u16 *)(sc->q + 44);
		rk->dport = 0;
		echo = 1;
	} else if (rk->proto != IPPROTO_TCP && rk->proto != IPPROTO_UDP) {
		return 0;
	}
	v = bpf_map_lookup_elem(&xlane_ct, rk);
	if (!v || v->nat == CT_NAT_NONE || (echo && v->nat != CT_NAT_DST))
		return 0;
	__builtin_memcpy(sc->nq, sc->q, ICMP_QUOTE6);
	if (v4) {
		icmp_quote_nat(sc->nq, sc->old, v, 0, echo);
		d = bpf_csum_diff((__be32 *)sc->q, ICMP_QUOTE4, (__be32 *)sc->nq, ICMP_QUOTE4, 0);
	} else {
		icmp_quote_nat(sc->nq, sc->old, v, 1, echo);
		d = bpf_csum_diff((__be32 *)sc->q, ICMP_QUOTE6, (__be32 *)sc->nq, ICMP_QUOTE6, 0);
	}
	if (d < 0 || bpf_l4_csum_replace(skb, csum_off, 0, d, 0) ||
	    bpf_skb_store_bytes(skb, qoff, sc->nq, v4 ? ICMP_QUOTE4 : ICMP_QUOTE6, 0))
		return -1;
	/* The outer header: the error goes to whom the quoted packet came
	 * from (translated like the entry's destination); from the flow's
	 * peer, its source is translated like the entry's source. */
	if ((v->nat & CT_NAT_DST) && addr_eq(p->dst.addr, rk->daddr) &&
	    icmp_outer_addr(skb, v4, 0, v->nat_addr, csum_off))
		return -1;
	if ((v->nat & CT_NAT_SRC) && addr_eq(p->src.addr, rk->saddr) &&
	    icmp_outer_addr(skb, v4, 1, v->nat == CT_NAT_BOTH ? v->nat_saddr : v->nat_addr, csum_off))
		return -1;
	__builtin_memset(p, 0, sizeof(*p));
	if (parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, p) != PARSE_OK)
		return -1;
	return 1;
}

#endif /* XLANE_NATSTAGE_H */
