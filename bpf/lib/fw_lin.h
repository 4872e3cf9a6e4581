/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * fw_lin.h - the uplink's classifiers for simple rule sets, inlined into
 * the uplink program (they take the packet it parsed): the generation's
 * list of conjunctions (struct fw_lin, filled by the compiler when the
 * set's uplink rules fit FW_LIN_MAX of them) tried in order, and for a
 * larger set of "protocol, /32 source, destination port" rules the IPv4
 * tuple hash (fw_gen.tuple4); without the bitmaps' lookups (LPM trie,
 * scalar arrays, pool) or the search. Conntrack is consulted only once a
 * rule matched: established packets pass before any rule, so one that no
 * rule matches passes either way, and the uplink owns no conntrack
 * entries to refresh. What these cannot do — other sets, IPv6 packets of
 * a tuple set, a monitor listening for rule events — is left to the
 * bitmaps (fw_prepare_xdp, fw_decide), which decide alike.
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

/* fw_lin_match4 is fw_lin_match for an IPv4 packet, its addresses s and
 * d as in the IP header. */
static __always_inline int fw_lin_match4(const struct fw_lin *e, __u32 s, __u32 d,
					 const struct fw_l4 *l4)
{
	if (e->ip6 || ((s ^ e->src[3]) & e->src_mask[3]) || ((d ^ e->dst[3]) & e->dst_mask[3]))
		return 0;
	if (!e->any_proto && e->proto != l4->l4.proto)
		return 0;
	if (l4->sport < e->sport_lo || l4->sport > e->sport_hi || l4->dport < e->dport_lo ||
	    l4->dport > e->dport_hi)
		return 0;
	return (l4->l4.tcp_flags & e->flags_mask) == e->flags_comp;
}

/* fw_ct_key_eq: keys a and b (zero padded) are equal. */
static __always_inline int fw_ct_key_eq(const struct ct_key *a, const struct ct_key *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;

	return !((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3]) | (x[4] ^ y[4]));
}

/*
 * The conntrack misses each CPU remembers (fw_lin_established): a slot
 * per fold of the flow's key (fw_miss_slot), holding the last flow found
 * there without an entry and xlane_ct_seq + 1 then (0: none).
 */
#define FW_MISS_SLOTS 256

struct fw_miss {
	struct ct_key k;
	__u64 seq;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct fw_miss);
	__uint(max_entries, FW_MISS_SLOTS);
} xlane_fw_miss SEC(".maps");

/* fw_miss_slot folds key k's ten words to a slot of xlane_fw_miss: flows
 * that differ in a port's low byte (a run of source ports) get slots of
 * their own. */
static __always_inline __u32 fw_miss_slot(const struct ct_key *k)
{
	const __u32 *w = (const __u32 *)k;
	__u32 h = w[0] ^ w[1] ^ w[2] ^ w[3] ^ w[4] ^ w[5] ^ w[6] ^ w[7] ^ w[8] ^ w[9];

	h ^= h >> 16;
	h ^= h >> 8;
	return h & (FW_MISS_SLOTS - 1);
}

/*
 * fw_lin_established is fw_established_late with the flow's key made, and
 * without the hash of the key for a flow this CPU found no entry for while
 * no flow was created since (xlane_ct_seq): a flood of up to
 * FW_MISS_SLOTS flows (those whose keys fold to slots of their own) that a
 * rule drops costs a compare, not a lookup. The count is read before the
 * lookup and ct_create bumps it after its inserts, so a remembered miss is
 * never older than the table.
 */
static __always_inline int fw_lin_established(const struct pkt *p, struct fw_scratch *sc)
{
	__u32 zero = 0, i;
	struct fw_miss *m;
	struct ct_val *v;
	__u64 *seq, s;

	__builtin_memset(&sc->k, 0, sizeof(sc->k));
	__builtin_memcpy(sc->k.saddr, p->src.addr, 16);
	__builtin_memcpy(sc->k.daddr, p->dst.addr, 16);
	sc->k.sport = sc->l4.l4.sport;
	sc->k.dport = sc->l4.l4.dport;
	sc->k.proto = sc->l4.l4.proto;
	seq = bpf_map_lookup_elem(&xlane_ct_seq, &zero);
	if (!seq || !sc->l4.trackable)
		return fw_established_late(sc);
	s = *(volatile __u64 *)seq + 1;
	i = fw_miss_slot(&sc->k);
	m = bpf_map_lookup_elem(&xlane_fw_miss, &i);
	if (m && m->seq == s && fw_ct_key_eq(&m->k, &sc->k)) {
		v = 0;
	} else {
		v = bpf_map_lookup_elem(&xlane_ct, &sc->k);
		if (!v && m) {
			m->k = sc->k;
			m->seq = s;
		}
	}
	if (v && (v->dir == CT_DIR_REPLY || v->state != CT_NEW) && !ct_reopens(v, &sc->l4.l4))
		return 1;
	return sc->l4.related && bpf_map_lookup_elem(&xlane_ct, &sc->rk);
}

/*
 * fw_lin_uplink classifies an uplink packet with gen's list (gen->lin not
 * 0): FW_V_ALLOW, FW_V_DROP or FW_V_REJECT (c->reason set). Inlined into
 * the uplink program, so the packet is the one the program parsed (p,
 * PARSE_OK): no second L3 parse, no call, the live generation looked up
 * once. Only the L4 header is parsed here (the program itself needs no
 * ports before the firewall).
 */
static __always_inline int fw_lin_uplink(void *data, void *data_end, const struct pkt *p,
					 const struct fw_gen *gen, struct fw_call *c)
{
	__u32 zero = 0, n = gen->lin;
	const struct fw_lin *e = 0;
	enum xl_reason reason = 0;
	struct fw_scratch *sc;
	enum fw_verdict v;

	sc = bpf_map_lookup_elem(&xlane_fw_scratch, &zero);
	if (!sc)
		return FW_V_ALLOW;
	__builtin_memset(&sc->l4, 0, sizeof(sc->l4));
	fw_parse_l4(data, data_end, p, &sc->l4, &sc->rk);
	/* Neighbour discovery is never filtered (fw_prepare). */
	if (sc->l4.l4.proto == IPPROTO_ICMPV6 && sc->l4.dport >= 133 && sc->l4.dport <= 137)
		return FW_V_ALLOW;
	if (p->ip4) {
		/* IPv4 entries (ip6 0) hold ::ffff:0:0/96 in their first three
		 * words, as the packet's address does: the last word decides. */
		__u32 s = p->ip4->saddr, d = p->ip4->daddr;

#pragma unroll
		for (int i = 0; i < FW_LIN_MAX; i++) {
			if (i + 1 >= n)
				break;
			if (fw_lin_match4(&gen->lin_rules[i], s, d, &sc->l4)) {
				e = &gen->lin_rules[i];
				break;
			}
		}
	} else {
		const __u32 *s = (const __u32 *)p->src.addr, *d = (const __u32 *)p->dst.addr;

#pragma unroll
		for (int i = 0; i < FW_LIN_MAX; i++) {
			if (i + 1 >= n)
				break;
			if (fw_lin_match(&gen->lin_rules[i], 1, s, d, &sc->l4)) {
				e = &gen->lin_rules[i];
				break;
			}
		}
	}
	if (!e)
		return FW_V_ALLOW; /* no rule: allowed, established or not */
	if (gen->established && fw_lin_established(p, sc))
		return FW_V_ALLOW;
	fw_count_slot(e->slot, c->len, sc);
	v = fw_action_verdict(e->action, e->is_default, &reason);
	if (v != FW_V_ALLOW)
		c->reason = reason;
	return v;
}

/*
 * fw_tuple4_uplink classifies an IPv4 uplink packet of a set with
 * gen->tuple4 (live in slot tag & 1, tag: fw_uplink_simple's): one lookup
 * of (protocol, source, destination port) in the generation's exact map
 * gives the deciding rule's bit; a tuple not there is decided by
 * gen->tuple4_miss (the first uplink default), or allowed. The compiler
 * (internal/firewall, compileTuple4) makes the set one for this only when
 * the bitmaps would decide alike. Each CPU remembers the last tuple and
 * what the lookup gave, under the tag: a generation never changes, so the
 * next packet of that tuple in the same generation needs no hash. Returns
 * as fw_lin_uplink.
 */
static __always_inline int fw_tuple4_uplink(void *data, void *data_end, const struct pkt *p,
					    const struct fw_gen *gen, __u64 tag, struct fw_call *c)
{
	__u32 zero = 0, bit = 0, slot = tag & 1, *hit;
	enum xl_reason reason = 0;
	const struct fw_rule *r;
	struct fw_exact_key k;
	struct fw_scratch *sc;
	void *exact, *rules;
	enum fw_verdict v;
	__u64 kw;

	sc = bpf_map_lookup_elem(&xlane_fw_scratch, &zero);
	if (!sc || !p->ip4)
		return FW_V_ALLOW;
	__builtin_memset(&sc->l4, 0, sizeof(sc->l4));
	fw_parse_l4(data, data_end, p, &sc->l4, &sc->rk);
	if (sc->l4.dport != FW_NO_L4) {
		k.field = FW_EXACT_TUPLE4;
		k.kind = sc->l4.l4.proto;
		__builtin_memcpy(k.data, &p->ip4->saddr, 4);
		*(__u16 *)&k.data[4] = sc->l4.dport;
		__builtin_memcpy(&kw, &k, sizeof(kw));
		if (sc->t4_tag != tag + 1 || sc->t4_key != kw) {
			exact = bpf_map_lookup_elem(&xlane_fw_exact, &slot);
			if (!exact)
				return FW_V_ALLOW;
			hit = bpf_map_lookup_elem(exact, &k);
			sc->t4_hit = hit ? *hit + 1 : 0;
			sc->t4_key = kw;
			sc->t4_tag = tag + 1;
		}
		bit = sc->t4_hit;
	}
	if (bit)
		bit--;
	else if (gen->tuple4_miss)
		bit = gen->tuple4_miss - 1;
	else
		return FW_V_ALLOW; /* no rule: allowed, established or not */
	rules = bpf_map_lookup_elem(&xlane_fw_rules, &slot);
	if (!rules)
		return FW_V_ALLOW;
	r = bpf_map_lookup_elem(rules, &bit);
	if (!r)
		return FW_V_ALLOW;
	if (gen->established && fw_lin_established(p, sc))
		return FW_V_ALLOW;
	fw_count_slot(r->slot, c->len, sc);
	v = fw_action_verdict(r->action, r->is_default, &reason);
	if (v != FW_V_ALLOW)
		c->reason = reason;
	return v;
}

/*
 * fw_uplink_simple is the list (gen->lin) or the IPv4 tuples (gen->tuple4,
 * p IPv4) for the uplink program: a static subprogram, not inlined, so its
 * locals are in a frame of its own (the program's frame and that of the
 * bitmaps' global functions share 512 bytes), and not global, so it reads
 * the packet the program parsed (p) instead of parsing it again. tag: the
 * live state's generation << 1 | its slot (gen's), read together.
 */
static __noinline int fw_uplink_simple(struct xdp_md *ctx, const struct pkt *p,
				       const struct fw_gen *gen, __u64 tag, struct fw_call *c)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;

	if (gen->lin)
		return fw_lin_uplink(data, data_end, p, gen, c);
	return fw_tuple4_uplink(data, data_end, p, gen, tag, c);
}

#endif /* XLANE_FW_LIN_H */
