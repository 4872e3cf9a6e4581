/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * nat_icmp.h - ICMP errors about translated flows, translated as their
 * flow (tc programs).
 */
#ifndef XLANE_NAT_ICMP_H
#define XLANE_NAT_ICMP_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "abi.h"
#include "maps.h"
#include "parse.h"
#include "l4.h"
#include "icmp_quote.h"
#include "csum.h"
#include "nat.h"
#include "ct_nat.h"

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
 * by identifier) are translated, found by lib/icmp_quote.h (through IPv4
 * options and IPv6 extension headers). What changes is in the quote's
 * fixed IP header and the first 8 bytes of its L4 header: those two are
 * copied out side by side, translated and written back. The quote's IPv4
 * header checksum and UDP or echo checksum (inside the 8 bytes) are
 * patched, the ICMP checksum by the difference of the copy (options and
 * extension headers are multiples of 4 bytes: the 16-bit words line up);
 * a quoted TCP checksum lies beyond the guaranteed 8 bytes and is left
 * alone, as Linux does for short quotes.
 */
#define ICMP_QUOTE4 28 /* IPv4 header without options + 8 bytes */
#define ICMP_QUOTE6 48 /* IPv6 header + 8 bytes */

/* The quote before and after, and the entry's key: too big for the stack
 * of a third call level. */
struct icmp_scratch {
	__u8 q[ICMP_QUOTE6];
	__u8 nq[ICMP_QUOTE6];
	__u8 old[40]; /* icmp_quote_nat: addresses, then ports */
	struct ct_key rk;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct icmp_scratch);
	__uint(max_entries, 1);
} xlane_icmp_scratch SEC(".maps");

/* icmp_quote_nat translates quote q (v6 is a constant; proto: the quoted
 * upper-layer protocol) as entry v says.
 * A quoted echo request (echo) has its identifier where TCP and UDP have
 * the source port, and only a destination translation (masquerade's
 * reply entry) applies to it. */
static __always_inline void icmp_quote_nat(__u8 *q, __u8 *old, const struct ct_val *v, const int v6,
					   __u8 proto, int echo)
{
	const int sa = v6 ? 8 : 12;    /* quoted source address */
	const int al = v6 ? 16 : 4;    /* address length */
	const int po = v6 ? 40 : 20;   /* quoted L4 header */
	__u32 pp = echo ? po + 4 : po; /* ports; echo: identifier, sequence */
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
			c = csum_replace(c, d);
			__builtin_memcpy(q + 10, &c, 2);
		}
		d = bpf_csum_diff((__be32 *)(old + 2 * al), 4, (__be32 *)(q + pp), 4, v6 ? d : 0);
		__builtin_memcpy(&c, q + po + 2, 2);
		c = csum_replace(c, d);
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
		c = csum_replace(c, d);
		__builtin_memcpy(q + 10, &c, 2);
	}
	if (proto != IPPROTO_UDP)
		return;
	__builtin_memcpy(&c, q + po + 6, 2);
	if (!c && !v6)
		return; /* IPv4 UDP without a checksum */
	d = bpf_csum_diff((__be32 *)(old + 2 * al), 4, (__be32 *)(q + po), 4, d);
	c = csum_replace(c, d);
	if (!c)
		c = 0xffff;
	__builtin_memcpy(q + po + 6, &c, 2);
}

/* icmp_outer_addr replaces the outer source (src) or destination address. */
static __always_inline int icmp_outer_addr(struct __sk_buff *skb, int v4, int src, const __u8 *addr,
					   __u32 csum_off)
{
	__u32 off = sizeof(struct ethhdr) + (v4 ? (src ? 12 : 16) : (src ? 8 : 24));
	__u8 old[16];
	__s64 d;

	if (v4) {
		if (bpf_skb_load_bytes(skb, off, old, 4) ||
		    bpf_l3_csum_replace(skb, IPV4_CSUM_OFF, *(__be32 *)old, *(__be32 *)(addr + 12),
					4))
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
 * flow (l4 as parse_l4 left it: off, proto, type). Returns 1 if it did, 0
 * if p is no such error, -1 if the rewrite failed; p is parsed again at
 * L3 (the quote is pulled into the linear area) unless -1.
 */
static __noinline int ct_icmp_error(struct __sk_buff *skb, struct pkt *p, const struct l4 *l4)
{
	__u32 qoff = l4->off + 8, csum_off = l4->off + 2, zero = 0;
	int v4 = p->ip4 != 0, echo = 0, ql4;
	struct icmp_scratch *sc;
	struct ct_key *rk;
	struct ct_val *v;
	__s64 d;

	if (!l4->hdr || (l4->proto == IPPROTO_ICMP) != v4 ||
	    !icmp_is_error(l4->proto, l4->icmp_type))
		return 0;
	sc = bpf_map_lookup_elem(&xlane_icmp_scratch, &zero);
	if (!sc)
		return 0;
	rk = &sc->rk;
	skb_pull_headers(skb, ICMP_QUOTE_PULL);
	__builtin_memset(p, 0, sizeof(*p));
	if (parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, p) != PARSE_OK)
		return -1;
	ql4 = icmp_quote((void *)(long)skb->data, (void *)(long)skb->data_end, qoff, v4, rk);
	if (ql4 < 0)
		return 0;
	/* The quote's fixed IP header and L4 bytes, side by side. */
	if (v4) {
		if (bpf_skb_load_bytes(skb, qoff, sc->q, 20) ||
		    bpf_skb_load_bytes(skb, ql4, sc->q + 20, 8))
			return 0;
	} else {
		if (bpf_skb_load_bytes(skb, qoff, sc->q, 40) ||
		    bpf_skb_load_bytes(skb, ql4, sc->q + 40, 8))
			return 0;
	}
	if (rk->proto == l4->proto) {
		/* A quoted echo request: its flow is keyed by identifier. */
		if (sc->q[v4 ? 20 : 40] != (v4 ? ICMP_ECHO : ICMPV6_ECHO_REQ))
			return 0;
		echo = 1;
	} else if (rk->proto != IPPROTO_TCP && rk->proto != IPPROTO_UDP) {
		return 0;
	}
	v = bpf_map_lookup_elem(&xlane_ct, rk);
	if (!v || v->nat == CT_NAT_NONE || (echo && v->nat != CT_NAT_DST))
		return 0;
	__builtin_memcpy(sc->nq, sc->q, ICMP_QUOTE6);
	if (v4) {
		icmp_quote_nat(sc->nq, sc->old, v, 0, rk->proto, echo);
		d = bpf_csum_diff((__be32 *)sc->q, ICMP_QUOTE4, (__be32 *)sc->nq, ICMP_QUOTE4, 0);
		if (d < 0 || bpf_l4_csum_replace(skb, csum_off, 0, d, 0) ||
		    bpf_skb_store_bytes(skb, qoff, sc->nq, 20, 0) ||
		    bpf_skb_store_bytes(skb, ql4, sc->nq + 20, 8, 0))
			return -1;
	} else {
		icmp_quote_nat(sc->nq, sc->old, v, 1, rk->proto, echo);
		d = bpf_csum_diff((__be32 *)sc->q, ICMP_QUOTE6, (__be32 *)sc->nq, ICMP_QUOTE6, 0);
		if (d < 0 || bpf_l4_csum_replace(skb, csum_off, 0, d, 0) ||
		    bpf_skb_store_bytes(skb, qoff, sc->nq, 40, 0) ||
		    bpf_skb_store_bytes(skb, ql4, sc->nq + 40, 8, 0))
			return -1;
	}
	/* The outer header: the error goes to whom the quoted packet came
	 * from (translated like the entry's destination); from the flow's
	 * peer, its source is translated like the entry's source. */
	if ((v->nat & CT_NAT_DST) && addr_eq(p->dst.addr, rk->daddr) &&
	    icmp_outer_addr(skb, v4, 0, v->nat_addr, csum_off))
		return -1;
	if ((v->nat & CT_NAT_SRC) && addr_eq(p->src.addr, rk->saddr) &&
	    icmp_outer_addr(skb, v4, 1, v->nat == CT_NAT_BOTH ? v->nat_saddr : v->nat_addr,
			    csum_off))
		return -1;
	__builtin_memset(p, 0, sizeof(*p));
	if (parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, p) != PARSE_OK)
		return -1;
	return 1;
}

#endif /* XLANE_NAT_ICMP_H */
