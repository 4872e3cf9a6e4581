/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * fw.h - the firewall stage: a stateful rule classifier whose per-packet
 * cost does not depend on the number of rules, and the uplink's DDoS
 * defence (prefix blocklist, per-source token buckets, early drop of
 * malformed headers). The algorithm is described in docs/firewall.md.
 *
 * Classification (bit-vector with aggregation): the daemon numbers the
 * rules of a set in priority order, bit 0 first, and compiles every field
 * into a lookup (exact hash, LPM trie, or an array indexed by value) that
 * yields a class; a class is a bitmap of FW_MAX_RULES bits, set for the
 * rules whose value set for that field contains the value, plus a summary
 * (bit i: word i not zero). The packet's matching rules are the AND of its
 * classes' bitmaps; the lowest set bit is the winner. The search ANDs the
 * summaries first and then only the words they leave, so its cost is
 * bounded by FW_WORDS whatever the number of rules, and is a handful of
 * words when rules are selective.
 *
 * Atomic updates: a rule set lives in five inner maps put into slot 0 or
 * 1 of the outer arrays; xlane_fw_state.active names the live slot and is
 * read once per packet, so a packet uses one generation throughout. The
 * daemon fills the idle slot, flips, and waits an RCU grace period before
 * it ever touches the old slot again (internal/firewall).
 */
#ifndef XLANE_FW_H
#define XLANE_FW_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "abi.h"
#include "maps.h"
#include "parse.h"
#include "l4.h"
#include "ct.h"

/* ---------------------------------------------------------------------
 * Maps. Inner map templates first: the daemon creates one of each per
 * generation, with its own max_entries (the arrays carry BPF_F_INNER_MAP
 * so their sizes may differ from the template's).
 */

struct fw_exact_inner {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct fw_exact_key);
	__type(value, __u32);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
};

struct fw_addr_inner {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct fw_addr_key);
	__type(value, __u32);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
};

/* The scalar and rules arrays have fixed sizes: without BPF_F_INNER_MAP
 * the verifier inlines their lookups (a few instructions instead of a
 * helper call). The pool's size follows the rule set. */
struct fw_scalar_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, FW_SC_SIZE);
};

struct fw_pool_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct fw_bits);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_INNER_MAP);
};

struct fw_rules_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct fw_rule);
	__uint(max_entries, FW_MAX_RULES);
};

/* clang emits the key and value types of inner map templates as forward
 * declarations only; these definitions give loaders (and bpf2go) their
 * sizes. They are never written or read. */
struct fw_exact_key xl_btf_fw_exact_key __attribute__((unused));
struct fw_addr_key xl_btf_fw_addr_key __attribute__((unused));
struct fw_bits xl_btf_fw_bits __attribute__((unused));
struct fw_rule xl_btf_fw_rule __attribute__((unused));

/* key: slot (0, 1); value: the generation's (hook kind, network) and MAC
 * classes. Written by the daemon into the idle slot; read per packet. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, 2);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct fw_exact_inner);
} xlane_fw_exact SEC(".maps");

/* key: slot; value: LPM trie of source and destination prefixes. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, 2);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct fw_addr_inner);
} xlane_fw_addr SEC(".maps");

/* key: slot; value: value -> class arrays of ports, protocol, TCP flags
 * (layout: enum fw_limits FW_SC_*). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, 2);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct fw_scalar_inner);
} xlane_fw_scalar SEC(".maps");

/* key: slot; value: class -> bitmap. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, 2);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct fw_pool_inner);
} xlane_fw_pool SEC(".maps");

/* key: slot; value: bit -> rule action and counter slot. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, 2);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct fw_rules_inner);
} xlane_fw_rules SEC(".maps");

/* key: slot; value: which fields the generation uses, its options.
 * Written by the daemon before the flip; read per packet. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct fw_gen);
	__uint(max_entries, 2);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_fw_gens SEC(".maps");

/* key: 0; value: the live slot, and whether any rule set is installed.
 * Written by the daemon (the flip); read once per packet. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct fw_state);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_fw_state SEC(".maps");

/* key: a rule's counter slot; value: packets, bytes, last hit, per CPU.
 * Written by the datapath; read (summed) and reset by the daemon, which
 * gives every rule a slot for its lifetime. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct fw_counter);
	__uint(max_entries, FW_MAX_RULES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_fw_counters SEC(".maps");

/* Sampled rule hits (struct fw_event). Written by the datapath; read by
 * the daemon. A full ring loses events, never packets. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_fw_events SEC(".maps");

#define FW_BLOCK4_MAX (1 << 22)
#define FW_BLOCK6_MAX (1 << 20)
#define FW_RATE_MAX   (1 << 18)

/* key: 0; value: the DDoS limits. Written by the daemon. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct fw_ddos);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_fw_ddos SEC(".maps");

/* key: IPv4 prefix; value: unused (1). Written by the daemon
 * (`xlane fw block`); read by the uplink program. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct fw_block4_key);
	__type(value, __u32);
	__uint(max_entries, FW_BLOCK4_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_fw_block4 SEC(".maps");

/* key: IPv6 prefix; value: unused (1). As xlane_fw_block4. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct fw_block6_key);
	__type(value, __u32);
	__uint(max_entries, FW_BLOCK6_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_fw_block6 SEC(".maps");

/* key: source (prefix); value: its token buckets. Written and read by the
 * uplink program; LRU, so a flood of sources evicts the idle ones. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct fw_rate_key);
	__type(value, struct fw_rate_val);
	__uint(max_entries, FW_RATE_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_fw_rate SEC(".maps");

/* ---------------------------------------------------------------------
 * The packet as the firewall sees it.
 */

/* What the calling hook knows. */
struct fw_hook {
	__u32 ifindex;		/* device the hit is reported on */
	__u32 netid;		/* the endpoint's network; 0 on the uplink */
	__u32 len;		/* bytes, for counters */
	__u8 kind;		/* enum fw_kind */
	__u8 track;		/* this hook owns conntrack for the packet:
				 * refresh its entry, or create one for an
				 * allowed new flow (hooks no ct stage runs
				 * behind: tcx egress, XDP) */
	__u16 pad;
};

/* L4 facts, found through IPv6 extension headers. */
struct fw_l4 {
	__u32 sport;		/* class index: host-order port, ICMP code,
				 * or FW_NO_L4 */
	__u32 dport;		/* ... ICMP type */
	__u16 ct_sport;		/* network order, as conntrack keys it */
	__u16 ct_dport;
	__u8 proto;		/* upper-layer protocol */
	__u8 flags;		/* TCP flags byte */
	__u8 trackable;		/* conntrack keys this packet (lib/l4.h) */
	__u8 related;		/* ICMP error: rk holds the reversed inner flow */
	__u32 l4_off;		/* offset of the L4 header */
};

enum fw_verdict {
	FW_V_ALLOW = 0,
	FW_V_DROP,
	FW_V_REJECT,		/* refused, no answer possible: drop it */
	FW_V_REPLIED,		/* refused and turned into the TCP RST or
				 * ICMP unreachable that answers it,
				 * redirected back: return
				 * TC_ACT_REDIRECT / XDP_REDIRECT */
	FW_V_REPLIED_TX,	/* the same, XDP: return XDP_TX */
	FW_V_SEARCH,		/* fw_prepare: the classes are in the
				 * scratch, fw_decide searches them */
};

#define FW_EXT_MAX 4		/* IPv6 extension headers walked */
#define FW_L4_OFF_MAX 256	/* L4 header beyond this: no L4 facts */

#define IPPROTO_HOPOPTS_ 0
#define IPPROTO_ROUTING_ 43
#define IPPROTO_FRAGMENT_ 44
#define IPPROTO_AH_ 51
#define IPPROTO_DSTOPTS_ 60

static __always_inline int fw_icmp_is_error(__u8 proto, __u8 type)
{
	if (proto == IPPROTO_ICMP)
		return type == 3 || type == 11 || type == 12;
	return type >= 1 && type <= 4;
}

/*
 * fw_related fills rk with the flow an ICMP error is about, as conntrack
 * keys the direction the error travels: the reverse of the quoted packet.
 * Returns 0 when the quote is complete enough to look up.
 */
static __always_inline int fw_related(void *data, void *data_end, const struct pkt *p,
				      __u32 off, struct ct_key *rk)
{
	__u8 *in = data + off;
	__u8 *ports;

	__builtin_memset(rk, 0, sizeof(*rk));
	if (p->ip4) {
		struct iphdr *ip = (void *)in;

		if ((void *)(ip + 1) > data_end || ip->ihl < 5)
			return -1;
		if (ip->frag_off & bpf_htons(0x1fff))
			return -1;
		key_from_ipv4((struct endpoint_key *)rk->saddr, ip->daddr);
		key_from_ipv4((struct endpoint_key *)rk->daddr, ip->saddr);
		rk->proto = ip->protocol;
		ports = in + (ip->ihl & 0xf) * 4;
	} else {
		struct ipv6hdr *ip6 = (void *)in;

		if ((void *)(ip6 + 1) > data_end)
			return -1;
		__builtin_memcpy(rk->saddr, &ip6->daddr, 16);
		__builtin_memcpy(rk->daddr, &ip6->saddr, 16);
		rk->proto = ip6->nexthdr;
		ports = in + sizeof(*ip6);
	}
	if ((void *)(ports + 8) > data_end)
		return -1;
	switch (rk->proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
		__builtin_memcpy(&rk->sport, ports + 2, 2);
		__builtin_memcpy(&rk->dport, ports, 2);
		return 0;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		/* An echo request of ours: its reply entry is keyed by id. */
		__builtin_memcpy(&rk->sport, ports + 4, 2);
		rk->dport = 0;
		return 0;
	}
	return -1;
}

/*
 * fw_parse_l4 finds the upper-layer header of p: through up to FW_EXT_MAX
 * IPv6 extension headers (so a destination-options header cannot hide a
 * port from a rule), not in non-first fragments. A header it cannot reach
 * leaves the ports at FW_NO_L4: only rules without ports match then.
 */
static __always_inline void fw_parse_l4(void *data, void *data_end, const struct pkt *p,
					struct fw_l4 *l4, struct ct_key *rk)
{
	__u32 off;
	__u8 *h;
	int exts = 0;

	l4->sport = l4->dport = FW_NO_L4;
	if (p->ip4) {
		struct iphdr *ip = p->ip4;

		l4->proto = ip->protocol;
		if (ip->frag_off & bpf_htons(0x1fff))
			return;		/* non-first fragment: no header */
		l4->trackable = !(ip->frag_off & bpf_htons(0x2000));
		off = sizeof(struct ethhdr) + (ip->ihl & 0xf) * 4;
	} else if (p->ip6) {
		__u8 nh = p->ip6->nexthdr;

		off = sizeof(struct ethhdr) + sizeof(struct ipv6hdr);
		l4->trackable = 1;
#pragma unroll
		for (int i = 0; i < FW_EXT_MAX; i++) {
			if (nh != IPPROTO_HOPOPTS_ && nh != IPPROTO_ROUTING_ &&
			    nh != IPPROTO_FRAGMENT_ && nh != IPPROTO_AH_ && nh != IPPROTO_DSTOPTS_)
				break;
			h = data + off;
			if ((void *)(h + 8) > data_end || off > FW_L4_OFF_MAX) {
				l4->proto = nh;
				return;
			}
			exts++;
			if (nh == IPPROTO_FRAGMENT_) {
				/* offset != 0: no upper-layer header here */
				if ((h[2] << 8 | h[3]) & 0xfff8) {
					l4->proto = h[0];
					return;
				}
				off += 8;
			} else if (nh == IPPROTO_AH_) {
				off += (h[1] + 2) * 4;
			} else {
				off += (h[1] + 1) * 8;
			}
			nh = h[0];
		}
		l4->proto = nh;
		/* Conntrack (lib/l4.h) keys the first next header only. */
		if (exts)
			l4->trackable = 0;
	} else {
		return;
	}
	if (off > FW_L4_OFF_MAX)
		return;
	l4->l4_off = off;
	h = data + off;
	switch (l4->proto) {
	case IPPROTO_TCP:
		if ((void *)(h + 20) > data_end)
			return;
		__builtin_memcpy(&l4->ct_sport, h, 2);
		__builtin_memcpy(&l4->ct_dport, h + 2, 2);
		l4->sport = bpf_ntohs(l4->ct_sport);
		l4->dport = bpf_ntohs(l4->ct_dport);
		l4->flags = h[13];
		return;
	case IPPROTO_UDP:
		if ((void *)(h + 8) > data_end)
			return;
		__builtin_memcpy(&l4->ct_sport, h, 2);
		__builtin_memcpy(&l4->ct_dport, h + 2, 2);
		l4->sport = bpf_ntohs(l4->ct_sport);
		l4->dport = bpf_ntohs(l4->ct_dport);
		return;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		if ((void *)(h + 8) > data_end)
			return;
		l4->dport = h[0];	/* type */
		l4->sport = h[1];	/* code */
		if ((l4->proto == IPPROTO_ICMP) != (p->ip4 != 0)) {
			l4->trackable = 0;
			return;
		}
		if (l4->proto == IPPROTO_ICMP ? (h[0] == ICMP_ECHO || h[0] == ICMP_ECHOREPLY)
					      : (h[0] == ICMPV6_ECHO_REQ || h[0] == ICMPV6_ECHO_REP)) {
			__builtin_memcpy(&l4->ct_sport, h + 4, 2);
			l4->ct_dport = 0;
			return;
		}
		l4->trackable = 0;
		if (fw_icmp_is_error(l4->proto, h[0]) && !fw_related(data, data_end, p, off + 8, rk))
			l4->related = 1;
		return;
	}
	l4->trackable = 0;
}

/*
 * Per-packet scratch of the stage, kept off the BPF stack: the stage runs
 * as a call below the hook's frame, and the two share 512 bytes.
 */
struct fw_scratch {
	struct ct_key k;	/* the packet's flow, as conntrack keys it
				 * (addresses always set: events use them) */
	struct ct_key rk;	/* ICMP error: the flow it is about */
	struct l4 cl;		/* what ct_hit/ct_create need */
	struct fw_l4 l4;
	struct fw_hook hk;
	struct fw_exact_key ek;
	struct fw_addr_key ak;
	__u32 cls[FW_F_MAX];
	__u32 key;
	__u32 slot;		/* the generation's slot */
	__u32 fields;		/* its fw_gen.fields */
	enum xl_reason reason;	/* of a refusal */
	/* The search (fw_step): candidate words left, the current word's
	 * matching rules, the deciding rule's bit + 1 (0: none). */
	__u64 c0, c1, c2, c3;
	__u64 acc;
	__u32 base;
	__u32 found;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct fw_scratch);
	__uint(max_entries, 1);
} xlane_fw_scratch SEC(".maps");

/* ---------------------------------------------------------------------
 * Classification.
 */

/* The classes' bitmaps, one pointer per field: the search ANDs them. */
struct fw_bitmaps {
	struct fw_bits *b[FW_F_MAX];
};

static __always_inline int fw_ctz(__u64 x)
{
	return __builtin_ctzll(x);	/* de Bruijn multiply in BPF */
}

static __always_inline void fw_count(const struct fw_rule *r, __u32 len)
{
	__u32 slot = r->slot;
	struct fw_counter *c = bpf_map_lookup_elem(&xlane_fw_counters, &slot);

	if (!c)
		return;
	/* Per-CPU value: no atomics needed. */
	c->packets++;
	c->bytes += len;
	c->last_hit = bpf_ktime_get_coarse_ns();
}

static __always_inline void fw_log(const struct fw_rule *r, const struct fw_scratch *sc)
{
	struct fw_event *e;

	if (!r->sample || (r->sample > 1 && bpf_get_prandom_u32() % r->sample))
		return;
	e = bpf_ringbuf_reserve(&xlane_fw_events, sizeof(*e), 0);
	if (!e)
		return;
	e->ts = bpf_ktime_get_ns();
	e->slot = r->slot;
	e->ifindex = sc->hk.ifindex;
	e->len = sc->hk.len;
	e->kind = sc->hk.kind;
	e->action = r->action;
	e->proto = sc->l4.proto;
	e->pad = 0;
	__builtin_memcpy(e->saddr, sc->k.saddr, 16);
	__builtin_memcpy(e->daddr, sc->k.daddr, 16);
	e->sport = sc->l4.sport == FW_NO_L4 ? 0 : sc->l4.sport;
	e->dport = sc->l4.dport == FW_NO_L4 ? 0 : sc->l4.dport;
	e->pad2 = 0;
	bpf_ringbuf_submit(e, 0);
}

/* fw_word is word i of the AND of every field's bitmap. */
static __always_inline __u64 fw_word(const struct fw_bitmaps *m, __u32 i)
{
	i &= FW_WORDS - 1;
	return m->b[FW_F_CTX]->w[i] & m->b[FW_F_SMAC]->w[i] & m->b[FW_F_DMAC]->w[i] &
	       m->b[FW_F_SRC]->w[i] & m->b[FW_F_DST]->w[i] & m->b[FW_F_PROTO]->w[i] &
	       m->b[FW_F_SPORT]->w[i] & m->b[FW_F_DPORT]->w[i] & m->b[FW_F_FLAGS]->w[i];
}

static __always_inline __u64 fw_sum(const struct fw_bitmaps *m, __u32 i)
{
	return m->b[FW_F_CTX]->sum[i] & m->b[FW_F_SMAC]->sum[i] & m->b[FW_F_DMAC]->sum[i] &
	       m->b[FW_F_SRC]->sum[i] & m->b[FW_F_DST]->sum[i] & m->b[FW_F_PROTO]->sum[i] &
	       m->b[FW_F_SPORT]->sum[i] & m->b[FW_F_DPORT]->sum[i] & m->b[FW_F_FLAGS]->sum[i];
}

/* The bpf_loop context: the bitmaps (pointers cannot live in a map
 * value), the rules map and the scratch that holds the rest. The only
 * part of the stage on the BPF stack. */
struct fw_walk {
	struct fw_bitmaps m;
	void *rules;
	struct fw_scratch *sc;
};

/*
 * fw_step is a bpf_loop callback, one step of the search: with no
 * matching rule left in the current word, move to the next candidate word
 * (stop when none is left); else take the word's first rule: a log rule
 * emits its event and the walk goes on, any other decides (stop). A
 * callback rather than a bounded loop: the verifier checks its body once,
 * where 300 iterations of data-dependent branches exceed its budget; the
 * kernel inlines the call.
 */
static long fw_step(__u64 n, void *ctx)
{
	struct fw_walk *w = ctx;
	struct fw_scratch *sc = w->sc;
	struct fw_rule *r;
	__u32 i;

	if (!sc->acc) {
		if (sc->c0) {
			i = fw_ctz(sc->c0);
			sc->c0 &= sc->c0 - 1;
		} else if (sc->c1) {
			i = 64 + fw_ctz(sc->c1);
			sc->c1 &= sc->c1 - 1;
		} else if (sc->c2) {
			i = 128 + fw_ctz(sc->c2);
			sc->c2 &= sc->c2 - 1;
		} else if (sc->c3) {
			i = 192 + fw_ctz(sc->c3);
			sc->c3 &= sc->c3 - 1;
		} else {
			return 1;
		}
		i &= FW_WORDS - 1;
		sc->acc = fw_word(&w->m, i);
		sc->base = i * 64;
		return 0;
	}
	sc->key = sc->base + fw_ctz(sc->acc);
	sc->acc &= sc->acc - 1;
	r = bpf_map_lookup_elem(w->rules, &sc->key);
	if (!r)
		return 1;
	if (r->action != FW_LOG) {
		sc->found = sc->key + 1;
		return 1;
	}
	fw_count(r, sc->hk.len);
	fw_log(r, sc);
	return 0;
}

/*
 * fw_search walks the matching rules in priority order and returns the
 * one that decides, or NULL when none matches. At most FW_WORDS words are
 * ANDed, one step per word and per matching log rule, of which a set has
 * at most FW_MAX_LOG_RULES.
 */
static __always_inline struct fw_rule *fw_search(struct fw_walk *w)
{
	struct fw_scratch *sc = w->sc;

	sc->c0 = fw_sum(&w->m, 0);
	sc->c1 = fw_sum(&w->m, 1);
	sc->c2 = fw_sum(&w->m, 2);
	sc->c3 = fw_sum(&w->m, 3);
	sc->acc = 0;
	sc->found = 0;
	bpf_loop(2 * FW_WORDS + FW_MAX_LOG_RULES + 1, fw_step, w, 0);
	if (!sc->found)
		return 0;
	sc->key = sc->found - 1;
	return bpf_map_lookup_elem(w->rules, &sc->key);
}

/* fw_addr_key fills the LPM key of address a for field f (struct
 * fw_addr_key: families apart, IPv4 in the first four bytes). */
static __always_inline void fw_addr_key(struct fw_addr_key *ak, __u8 f, const struct pkt *p,
					const struct endpoint_key *a)
{
	__builtin_memset(ak, 0, sizeof(*ak));
	if (p->ip4) {
		ak->prefixlen = 8 + 32;
		ak->field = f;
		__builtin_memcpy(ak->addr, &a->addr[12], 4);
	} else {
		ak->prefixlen = 8 + 128;
		ak->field = f | FW_ADDR_V6;
		__builtin_memcpy(ak->addr, a->addr, 16);
	}
}

/* fw_lookup_u32 returns the u32 value at key of map, or -1 if none. */
static __always_inline __s64 fw_lookup_u32(void *map, const void *key)
{
	__u32 *v = bpf_map_lookup_elem(map, key);

	return v ? (__s64)*v : -1;	/* not u32: -1 must stay negative */
}

/*
 * fw_classes looks p's fields up in slot's generation and leaves their
 * classes in sc->cls: 0 when the search must run, -1 when no rule of
 * the set can match p (allowed).
 */
static __always_inline int fw_classes(__u32 slot, const struct fw_gen *gen,
				      const struct pkt *p, struct fw_scratch *sc)
{
	const struct fw_hook *hk = &sc->hk;
	const struct fw_l4 *l4 = &sc->l4;
	struct fw_exact_key *ek = &sc->ek;
	struct fw_addr_key *ak = &sc->ak;
	void *exact, *addr, *scalar;
	__u32 fields = gen->fields;
	__s64 c;

	exact = bpf_map_lookup_elem(&xlane_fw_exact, &slot);
	addr = bpf_map_lookup_elem(&xlane_fw_addr, &slot);
	scalar = bpf_map_lookup_elem(&xlane_fw_scalar, &slot);
	if (!exact || !addr || !scalar)
		return -1;
	sc->slot = slot;
	sc->fields = fields;

	/* The hook: (kind, network), else (kind, every network); a kind no
	 * rule names has no entry, and nothing to match. */
	ek->field = FW_F_CTX;
	ek->kind = hk->kind;
	__builtin_memset(ek->data, 0, sizeof(ek->data));
	__builtin_memcpy(ek->data, &hk->netid, 4);
	c = fw_lookup_u32(exact, ek);
	if (c < 0) {
		__builtin_memset(ek->data, 0, sizeof(ek->data));
		c = fw_lookup_u32(exact, ek);
		if (c < 0)
			return -1;
	}
	sc->cls[FW_F_CTX] = c;

	sc->cls[FW_F_SMAC] = FW_CLASS_ALL;
	if (fields & (1 << FW_F_SMAC)) {
		ek->field = FW_F_SMAC;
		ek->kind = 0;
		__builtin_memcpy(ek->data, p->eth->h_source, 6);
		c = fw_lookup_u32(exact, ek);
		sc->cls[FW_F_SMAC] = c < 0 ? gen->any_class[FW_F_SMAC] : c;
	}
	sc->cls[FW_F_DMAC] = FW_CLASS_ALL;
	if (fields & (1 << FW_F_DMAC)) {
		ek->field = FW_F_DMAC;
		ek->kind = 0;
		__builtin_memcpy(ek->data, p->eth->h_dest, 6);
		c = fw_lookup_u32(exact, ek);
		sc->cls[FW_F_DMAC] = c < 0 ? gen->any_class[FW_F_DMAC] : c;
	}
	sc->cls[FW_F_SRC] = FW_CLASS_ALL;
	if (fields & (1 << FW_F_SRC)) {
		fw_addr_key(ak, FW_F_SRC, p, &p->src);
		c = fw_lookup_u32(addr, ak);
		if (c < 0)
			return -1;	/* no rule covers this source */
		sc->cls[FW_F_SRC] = c;
	}
	sc->cls[FW_F_DST] = FW_CLASS_ALL;
	if (fields & (1 << FW_F_DST)) {
		fw_addr_key(ak, FW_F_DST, p, &p->dst);
		c = fw_lookup_u32(addr, ak);
		if (c < 0)
			return -1;
		sc->cls[FW_F_DST] = c;
	}
	sc->cls[FW_F_PROTO] = FW_CLASS_ALL;
	if (fields & (1 << FW_F_PROTO)) {
		sc->key = FW_SC_PROTO + l4->proto;
		c = fw_lookup_u32(scalar, &sc->key);
		sc->cls[FW_F_PROTO] = c < 0 ? FW_CLASS_ALL : c;
	}
	sc->cls[FW_F_SPORT] = FW_CLASS_ALL;
	if (fields & (1 << FW_F_SPORT)) {
		sc->key = FW_SC_SPORT + l4->sport;
		c = fw_lookup_u32(scalar, &sc->key);
		sc->cls[FW_F_SPORT] = c < 0 ? FW_CLASS_ALL : c;
	}
	sc->cls[FW_F_DPORT] = FW_CLASS_ALL;
	if (fields & (1 << FW_F_DPORT)) {
		sc->key = FW_SC_DPORT + l4->dport;
		c = fw_lookup_u32(scalar, &sc->key);
		sc->cls[FW_F_DPORT] = c < 0 ? FW_CLASS_ALL : c;
	}
	sc->cls[FW_F_FLAGS] = FW_CLASS_ALL;
	if (fields & (1 << FW_F_FLAGS)) {
		sc->key = FW_SC_FLAGS + l4->flags;
		c = fw_lookup_u32(scalar, &sc->key);
		sc->cls[FW_F_FLAGS] = c < 0 ? FW_CLASS_ALL : c;
	}

	return 0;
}

/* fw_search_classes runs the search over sc's classes: the deciding rule,
 * or NULL. */
static __always_inline struct fw_rule *fw_search_classes(struct fw_scratch *sc)
{
	__u32 slot = sc->slot & 1, fields = sc->fields;
	struct fw_bits *all;
	struct fw_walk w;
	void *pool, *rules;

	pool = bpf_map_lookup_elem(&xlane_fw_pool, &slot);
	rules = bpf_map_lookup_elem(&xlane_fw_rules, &slot);
	if (!pool || !rules)
		return 0;
	/* A field no rule restricts is every bit: one lookup serves them. */
	sc->key = FW_CLASS_ALL;
	all = bpf_map_lookup_elem(pool, &sc->key);
	if (!all)
		return 0;
#pragma unroll
	for (int f = 0; f < FW_F_MAX; f++) {
		if (!(fields & (1 << f))) {
			w.m.b[f] = all;
			continue;
		}
		w.m.b[f] = bpf_map_lookup_elem(pool, &sc->cls[f]);
		if (!w.m.b[f])
			return 0;
	}
	w.rules = rules;
	w.sc = sc;
	return fw_search(&w);
}

/* fw_track keeps the flow's conntrack entries when the hook owns them:
 * refresh the entry v (NULL: look it up), or create the flow. */
static __always_inline void fw_track(struct fw_scratch *sc, struct ct_val *v)
{
	if (!sc->hk.track || !sc->l4.trackable)
		return;
	sc->cl.proto = sc->l4.proto;
	sc->cl.tcp_flags = sc->l4.flags;
	sc->cl.sport = sc->l4.ct_sport;
	sc->cl.dport = sc->l4.ct_dport;
	if (!v)
		v = bpf_map_lookup_elem(&xlane_ct, &sc->k);
	if (v && !ct_hit(&sc->k, v, &sc->cl, sc->hk.len))
		return;
	if (v)	/* half a flow (ct_hit): start over */
		bpf_map_delete_elem(&xlane_ct, &sc->k);
	{
		struct ct_scratch *cs = ct_scratch_get();

		/* A full table leaves the flow untracked: its replies are
		 * classified like new flows. */
		if (cs)
			ct_create(&sc->k, cs, &sc->cl, sc->hk.len);
	}
}

/*
 * fw_prepare is the first half of the stage: FW_V_ALLOW when the packet
 * passes before any rule (no rule set, neighbour discovery, established
 * or related, or no rule of the set can match it), else FW_V_SEARCH with
 * the classes of its fields in sc. p was parsed (PARSE_OK) from data;
 * sc->hk is set.
 */
static __always_inline int fw_prepare(void *data, void *data_end, const struct pkt *p,
				      struct fw_scratch *sc)
{
	__u32 zero = 0, slot;
	struct fw_state *st = bpf_map_lookup_elem(&xlane_fw_state, &zero);
	struct fw_gen *gen;
	struct ct_val *v = 0;

	if (!st || !st->on)
		return FW_V_ALLOW;
	slot = st->active & 1;
	gen = bpf_map_lookup_elem(&xlane_fw_gens, &slot);
	if (!gen)
		return FW_V_ALLOW;
	/* Only what is read before it is written needs zeroing (sc->hk is
	 * the caller's). */
	__builtin_memset(&sc->k, 0, sizeof(sc->k));
	__builtin_memset(&sc->l4, 0, sizeof(sc->l4));
	fw_parse_l4(data, data_end, p, &sc->l4, &sc->rk);
	/* Neighbour discovery (router/neighbour solicitation and
	 * advertisement, redirect) is never filtered: without it IPv6 dies. */
	if (sc->l4.proto == IPPROTO_ICMPV6 && sc->l4.dport >= 133 && sc->l4.dport <= 137)
		return FW_V_ALLOW;
	__builtin_memcpy(sc->k.saddr, p->src.addr, 16);
	__builtin_memcpy(sc->k.daddr, p->dst.addr, 16);
	if (sc->l4.trackable) {
		sc->k.sport = sc->l4.ct_sport;
		sc->k.dport = sc->l4.ct_dport;
		sc->k.proto = sc->l4.proto;
		/* A hash of a 40-byte key: only when it is needed. */
		if (gen->established || sc->hk.track)
			v = bpf_map_lookup_elem(&xlane_ct, &sc->k);
	}
	if (gen->established) {
		/* ESTABLISHED as Linux means it: a reply, or a flow that has
		 * seen both directions. The flow's first direction is
		 * classified again until the other side answers. */
		if (v && (v->dir == CT_DIR_REPLY || v->state != CT_NEW)) {
			fw_track(sc, v);
			return FW_V_ALLOW;
		}
		if (sc->l4.related && bpf_map_lookup_elem(&xlane_ct, &sc->rk))
			return FW_V_ALLOW;
	}
	if (fw_classes(slot, gen, p, sc)) {
		fw_track(sc, v);
		return FW_V_ALLOW;
	}
	return FW_V_SEARCH;
}

/*
 * fw_verdict is the second half: search the classes fw_prepare left in
 * sc, count and log the deciding rule, and return the verdict (with
 * sc->reason of a refusal); an allowed flow is tracked.
 */
static __always_inline int fw_verdict(struct fw_scratch *sc)
{
	struct fw_rule *r = fw_search_classes(sc);

	if (r) {
		fw_count(r, sc->hk.len);
		fw_log(r, sc);
		if (r->action == FW_REJECT) {
			sc->reason = XL_DROP_FW_REJECT;
			return FW_V_REJECT;
		}
		if (r->action != FW_ALLOW) {
			sc->reason = r->is_default ? XL_DROP_FW_DEFAULT : XL_DROP_FW;
			return FW_V_DROP;
		}
	}
	fw_track(sc, 0);
	return FW_V_ALLOW;
}

/* ---------------------------------------------------------------------
 * Reject: the refused TCP segment becomes the RST that answers it (RFC
 * 9293 3.10.7.1), in place, and goes back the way it came. Other
 * protocols get an ICMP unreachable (below).
 */

/* What the RST needs from the segment it answers, read before the frame
 * is cut down to the headers. */
struct fw_rst {
	__u32 l4_off;
	__u32 seq, ack;		/* host order */
	__u32 seg_len;		/* payload + SYN + FIN */
	__u8 flags;
};

static __always_inline __u32 fw_csum_add(__u32 sum, const void *p, int len)
{
	const __u16 *w = p;

#pragma unroll
	for (int i = 0; i < len / 2; i++)
		sum += w[i];
	return sum;
}

static __always_inline __u16 fw_csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* fw_rst_read fills r from the segment; -1 when there is nothing to
 * answer (not TCP, an RST, options or extension headers in the way). */
static __always_inline int fw_rst_read(void *data, void *data_end, struct fw_rst *r)
{
	struct ethhdr *eth = data;
	__u32 tot, hl;
	__u8 *th;

	if ((void *)(eth + 1) > data_end)
		return -1;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > data_end || ip->ihl != 5 || ip->protocol != IPPROTO_TCP ||
		    (ip->frag_off & bpf_htons(0x3fff)))
			return -1;
		tot = bpf_ntohs(ip->tot_len);
		hl = sizeof(*ip);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > data_end || ip6->nexthdr != IPPROTO_TCP)
			return -1;
		tot = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
		hl = sizeof(*ip6);
	} else {
		return -1;
	}
	r->l4_off = sizeof(*eth) + hl;
	th = data + r->l4_off;
	if ((void *)(th + 20) > data_end)
		return -1;
	r->flags = th[13];
	if (r->flags & TCP_FLAG_RST)
		return -1;	/* never answer an RST */
	__builtin_memcpy(&r->seq, th + 4, 4);
	__builtin_memcpy(&r->ack, th + 8, 4);
	r->seq = bpf_ntohl(r->seq);
	r->ack = bpf_ntohl(r->ack);
	hl += (th[12] >> 4) * 4;
	r->seg_len = (tot > hl ? tot - hl : 0) + !!(r->flags & TCP_FLAG_SYN) + !!(r->flags & TCP_FLAG_FIN);
	return 0;
}

/* fw_rst_write turns the frame, cut to r->l4_off + 20 bytes, into the
 * RST: addresses and ports swapped, sequence numbers as RFC 9293 says,
 * checksums computed whole (the frame has no offload state left that
 * could complete them). */
static __always_inline int fw_rst_write(void *data, void *data_end, const struct fw_rst *r)
{
	struct ethhdr *eth = data;
	__u8 mac[ETH_ALEN];
	__u32 sum = 0, seq, ack;
	__u16 port;
	__u8 *th;

	if ((void *)(eth + 1) > data_end)
		return -1;
	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);
	th = data + r->l4_off;
	if ((void *)(th + 20) > data_end)
		return -1;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		__be32 a;

		if ((void *)(ip + 1) > data_end || (void *)ip + 20 != (void *)th)
			return -1;
		a = ip->saddr;
		ip->saddr = ip->daddr;
		ip->daddr = a;
		ip->tos = 0;
		ip->tot_len = bpf_htons(40);
		ip->id = 0;
		ip->frag_off = bpf_htons(0x4000);	/* DF */
		ip->ttl = 64;
		ip->check = 0;
		ip->check = fw_csum_fold(fw_csum_add(0, ip, 20));
		sum = fw_csum_add(sum, &ip->saddr, 8);
	} else {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		struct in6_addr a;

		if ((void *)(ip6 + 1) > data_end || (void *)(ip6 + 1) != (void *)th)
			return -1;
		a = ip6->saddr;
		ip6->saddr = ip6->daddr;
		ip6->daddr = a;
		ip6->priority = 0;
		__builtin_memset(ip6->flow_lbl, 0, sizeof(ip6->flow_lbl));
		ip6->payload_len = bpf_htons(20);
		ip6->hop_limit = 64;
		sum = fw_csum_add(sum, &ip6->saddr, 32);
	}
	__builtin_memcpy(&port, th, 2);
	__builtin_memcpy(th, th + 2, 2);
	__builtin_memcpy(th + 2, &port, 2);
	if (r->flags & TCP_FLAG_ACK) {
		seq = bpf_htonl(r->ack);
		ack = 0;
		th[13] = TCP_FLAG_RST;
	} else {
		seq = 0;
		ack = bpf_htonl(r->seq + r->seg_len);
		th[13] = TCP_FLAG_RST | TCP_FLAG_ACK;
	}
	__builtin_memcpy(th + 4, &seq, 4);
	__builtin_memcpy(th + 8, &ack, 4);
	th[12] = 5 << 4;			/* no options */
	__builtin_memset(th + 14, 0, 6);	/* window, checksum, urgent */
	sum += bpf_htons(IPPROTO_TCP) + bpf_htons(20);
	sum = fw_csum_add(sum, th, 20);
	port = fw_csum_fold(sum);
	__builtin_memcpy(th + 16, &port, 2);
	return 0;
}

/* ---------------------------------------------------------------------
 * Reject of everything else (UDP, ICMP queries, other protocols): an ICMP
 * destination unreachable, port unreachable (IPv4 type 3 code 3, ICMPv6
 * type 1 code 4), as iptables' REJECT sends by default and what a closed
 * port answers: a connected UDP socket reports ECONNREFUSED. The refused
 * packet is quoted from its IP header on, as much as fits a reply of 576
 * bytes (IPv4, RFC 1812 4.3.2.3) or 1280 (IPv6, RFC 4443 2.4(c)). No
 * answer (the packet is dropped) to an ICMP error, a non-first fragment,
 * a packet behind IPv6 extension headers, a multicast or broadcast
 * destination, a source that is not unicast (RFC 1122 3.2.2, RFC 4443
 * 2.4(e)), or beyond FW_ICMP_RATE answers per second per CPU.
 */

#define FW_QUOTE4 548		/* 576 - 20 - 8 */
#define FW_QUOTE6 1232		/* 1280 - 40 - 8 */
#define FW_QUOTE_BUF 1536	/* 3 bpf_csum_diff chunks of 512 */
#define FW_ICMP_RATE 1000	/* answers per second per CPU */
#define FW_ICMP_BURST 100

/* The quote and what the answer needs from the refused packet, per CPU:
 * the stack of the XDP endpoint program has no room for it. */
struct fw_quote {
	__u8 mac[12];		/* the refused frame's destination, source */
	__u8 saddr[16];		/* its addresses (IPv4: the first 4 bytes) */
	__u8 daddr[16];
	__u32 q;		/* bytes quoted */
	__u8 v6;
	__u8 tos;
	__u16 pad;
	__u64 tokens;		/* FW_ICMP_RATE bucket, tokens x 1e9 */
	__u64 last;
	__u8 b[FW_QUOTE_BUF];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct fw_quote);
	__uint(max_entries, 1);
} xlane_fw_quote SEC(".maps");

static __always_inline void fw_refill(__u64 *tokens, __u64 elapsed, __u32 rate, __u32 burst);

/* fw_icmp_read fills qb from the refused packet (frame_len bytes); -1
 * when it must not be answered (see above) or is TCP (fw_rst_read's). */
static __always_inline int fw_icmp_read(void *data, void *data_end, __u32 frame_len,
					struct fw_quote *qb)
{
	struct ethhdr *eth = data;
	__u32 q;

	if ((void *)(eth + 1) > data_end || (eth->h_dest[0] & 1) || frame_len < sizeof(*eth))
		return -1;
	__builtin_memcpy(qb->mac, eth->h_dest, 12);
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		__u32 hl, s, d;
		__u8 *l4;

		if ((void *)(ip + 1) > data_end || ip->version != 4 || ip->ihl < 5 ||
		    (ip->frag_off & bpf_htons(0x1fff)) || ip->protocol == IPPROTO_TCP)
			return -1;
		hl = ip->ihl * 4;
		s = bpf_ntohl(ip->saddr);
		d = bpf_ntohl(ip->daddr);
		if (!s || (s >> 28) >= 14 || (s >> 24) == 127 || (d >> 28) >= 14)
			return -1;	/* 0, multicast, class E, broadcast, loopback */
		if (ip->protocol == IPPROTO_ICMP) {
			l4 = (void *)ip + (hl & 0x3c);
			if ((void *)(l4 + 1) > data_end)
				return -1;
			if (l4[0] == 3 || l4[0] == 4 || l4[0] == 5 || l4[0] == 11 || l4[0] == 12)
				return -1;	/* never an error about an error */
		}
		q = bpf_ntohs(ip->tot_len);
		if (q < hl + 8)
			return -1;
		if (q > FW_QUOTE4)
			q = FW_QUOTE4;
		__builtin_memcpy(qb->saddr, &ip->saddr, 4);
		__builtin_memcpy(qb->daddr, &ip->daddr, 4);
		qb->v6 = 0;
		qb->tos = (ip->tos & 0x1e) | 0xc0;	/* internetwork control */
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		__u8 nh, *l4;

		if ((void *)(ip6 + 1) > data_end)
			return -1;
		nh = ip6->nexthdr;
		if (nh == IPPROTO_TCP || nh == IPPROTO_HOPOPTS_ || nh == IPPROTO_ROUTING_ ||
		    nh == IPPROTO_FRAGMENT_ || nh == IPPROTO_AH_ || nh == IPPROTO_DSTOPTS_ ||
		    nh == 50 || nh == 135 || nh == 139 || nh == 140)
			return -1;	/* TCP; extension headers in the way */
		if (ip6->saddr.in6_u.u6_addr8[0] == 0xff || ip6->daddr.in6_u.u6_addr8[0] == 0xff ||
		    !(ip6->saddr.in6_u.u6_addr32[0] | ip6->saddr.in6_u.u6_addr32[1] |
		      ip6->saddr.in6_u.u6_addr32[2] | ip6->saddr.in6_u.u6_addr32[3]))
			return -1;	/* multicast, unspecified */
		if (nh == IPPROTO_ICMPV6) {
			l4 = (void *)(ip6 + 1);
			if ((void *)(l4 + 1) > data_end || l4[0] < 128)
				return -1;	/* never an error about an error */
		}
		q = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
		if (q < sizeof(*ip6) + 8)
			return -1;
		if (q > FW_QUOTE6)
			q = FW_QUOTE6;
		__builtin_memcpy(qb->saddr, &ip6->saddr, 16);
		__builtin_memcpy(qb->daddr, &ip6->daddr, 16);
		qb->v6 = 1;
		qb->tos = 0;
	} else {
		return -1;
	}
	if (q > frame_len - sizeof(*eth))
		return -1;	/* shorter than its IP header says */
	qb->q = q;
	return 0;
}

/* fw_icmp_allow takes a token of the per-CPU answer rate. */
static __always_inline int fw_icmp_allow(struct fw_quote *qb)
{
	__u64 now = bpf_ktime_get_ns();

	if (!qb->last)
		qb->tokens = (__u64)FW_ICMP_BURST * 1000000000ULL;
	else
		fw_refill(&qb->tokens, now - qb->last, FW_ICMP_RATE, FW_ICMP_BURST);
	qb->last = now;
	if (qb->tokens < 1000000000ULL)
		return 0;
	qb->tokens -= 1000000000ULL;
	return 1;
}

/* fw_quote_sum is the one's complement sum of the quote (qb->b, qb->q
 * bytes, loaded by the caller), zero-padded to 4 bytes for bpf_csum_diff. */
static __always_inline __u32 fw_quote_sum(struct fw_quote *qb)
{
	__u32 q = qb->q, n;
	__u64 sum = 0;

	if (q > FW_QUOTE6)
		return 0;
	qb->b[q] = 0;
	qb->b[q + 1] = 0;
	qb->b[q + 2] = 0;
	n = (q + 3) & ~3U;
#pragma unroll
	for (int i = 0; i < 3; i++) {
		__u32 len;

		if (n <= i * 512)
			break;
		len = n - i * 512;
		/* Bounds the verifier of every kernel can follow: before 6.2
		 * it does not tie len to the check of n above (n is reloaded
		 * from the stack), so the clamp must stay in the code (the
		 * empty asm keeps clang from proving it redundant) and start
		 * from a non-negative range (the mask). */
		asm volatile("" : "+r"(len));
		len &= 0x7ff;
		if (len > 512)
			len = 512;
		sum += (__u32)bpf_csum_diff(NULL, 0, (void *)(qb->b + i * 512), len, 0);
	}
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffffffff) + (sum >> 32);
	return (__u32)(sum & 0xffff) + (__u32)(sum >> 16);
}

/* fw_icmp_write writes the headers in front of the quote: the frame is
 * Ethernet + room for the new IP and ICMP headers + the quote. */
static __always_inline int fw_icmp_write(void *data, void *data_end, struct fw_quote *qb, __u32 qsum)
{
	struct ethhdr *eth = data;
	__u32 sum = qsum, q = qb->q;
	__u16 c;

	if ((void *)(eth + 1) > data_end || q > FW_QUOTE6)
		return -1;
	__builtin_memcpy(eth->h_dest, qb->mac + 6, ETH_ALEN);
	__builtin_memcpy(eth->h_source, qb->mac, ETH_ALEN);
	if (!qb->v6) {
		struct iphdr *ip = (void *)(eth + 1);
		__u8 *ic = (void *)(ip + 1);

		if ((void *)(ic + 8) > data_end)
			return -1;
		eth->h_proto = bpf_htons(ETH_P_IP);
		ip->version = 4;
		ip->ihl = 5;
		ip->tos = qb->tos;
		ip->tot_len = bpf_htons(sizeof(*ip) + 8 + q);
		ip->id = 0;
		ip->frag_off = 0;
		ip->ttl = 64;
		ip->protocol = IPPROTO_ICMP;
		__builtin_memcpy(&ip->saddr, qb->daddr, 4);
		__builtin_memcpy(&ip->daddr, qb->saddr, 4);
		ip->check = 0;
		ip->check = fw_csum_fold(fw_csum_add(0, ip, 20));
		__builtin_memset(ic, 0, 8);
		ic[0] = 3;	/* destination unreachable */
		ic[1] = 3;	/* port unreachable */
		sum = fw_csum_add(sum, ic, 8);
		c = fw_csum_fold(sum);
		__builtin_memcpy(ic + 2, &c, 2);
	} else {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		__u8 *ic = (void *)(ip6 + 1);

		if ((void *)(ic + 8) > data_end)
			return -1;
		eth->h_proto = bpf_htons(ETH_P_IPV6);
		*(__u32 *)ip6 = bpf_htonl(0x60000000);	/* version, no class or label */
		ip6->payload_len = bpf_htons(8 + q);
		ip6->nexthdr = IPPROTO_ICMPV6;
		ip6->hop_limit = 64;
		__builtin_memcpy(&ip6->saddr, qb->daddr, 16);
		__builtin_memcpy(&ip6->daddr, qb->saddr, 16);
		__builtin_memset(ic, 0, 8);
		ic[0] = 1;	/* destination unreachable */
		ic[1] = 4;	/* port unreachable */
		sum = fw_csum_add(sum, &ip6->saddr, 32);
		sum += bpf_htons(8 + q) + bpf_htons(IPPROTO_ICMPV6);
		sum = fw_csum_add(sum, ic, 8);
		c = fw_csum_fold(sum);
		__builtin_memcpy(ic + 2, &c, 2);
	}
	return 0;
}

#define FW_ICMP_HDR(qb) ((qb)->v6 ? sizeof(struct ipv6hdr) + 8 : sizeof(struct iphdr) + 8)

/* fw_skb_icmp turns the refused packet in skb into its ICMP answer, sent
 * as fw_skb_reject sends an RST. Not for GSO packets. */
static __noinline int fw_skb_icmp(struct __sk_buff *skb, __u64 flags)
{
	__u32 zero = 0, qsum, q;
	struct fw_quote *qb = bpf_map_lookup_elem(&xlane_fw_quote, &zero);

	if (!qb || skb->gso_size ||
	    fw_icmp_read((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, qb))
		return -1;
	q = qb->q;
	if (q < 28 || q > FW_QUOTE6 || !fw_icmp_allow(qb) ||
	    bpf_skb_load_bytes(skb, sizeof(struct ethhdr), qb->b, q))
		return -1;
	qsum = fw_quote_sum(qb);
	if (bpf_skb_change_tail(skb, sizeof(struct ethhdr) + q, 0) ||
	    bpf_skb_adjust_room(skb, FW_ICMP_HDR(qb), BPF_ADJ_ROOM_MAC, 0))
		return -1;
	if (fw_icmp_write((void *)(long)skb->data, (void *)(long)skb->data_end, qb, qsum))
		return -1;
	return bpf_redirect(skb->ifindex, flags) == TC_ACT_REDIRECT ? 0 : -1;
}

/* fw_xdp_icmp is fw_skb_icmp for XDP: 0 means the answer is in place. */
static __noinline int fw_xdp_icmp(struct xdp_md *ctx)
{
	__u32 zero = 0, qsum, q, len = bpf_xdp_get_buff_len(ctx);
	struct fw_quote *qb = bpf_map_lookup_elem(&xlane_fw_quote, &zero);

	if (!qb || fw_icmp_read((void *)(long)ctx->data, (void *)(long)ctx->data_end, len, qb))
		return -1;
	q = qb->q;
	if (q < 28 || q > FW_QUOTE6 || !fw_icmp_allow(qb) ||
	    bpf_xdp_load_bytes(ctx, sizeof(struct ethhdr), qb->b, q))
		return -1;
	qsum = fw_quote_sum(qb);
	if (bpf_xdp_adjust_tail(ctx, -(int)(len - sizeof(struct ethhdr) - q)) ||
	    bpf_xdp_adjust_head(ctx, -(int)FW_ICMP_HDR(qb)))
		return -1;
	return fw_icmp_write((void *)(long)ctx->data, (void *)(long)ctx->data_end, qb, qsum);
}

/* fw_skb_reject answers the refused segment in skb with an RST (other
 * packets: fw_skb_icmp) sent out
 * of the device it came in by (flags 0: tcx ingress, back to the
 * container) or into it (BPF_F_INGRESS: tcx egress, back to whoever sent
 * it through Linux). 0: redirected, return TC_ACT_REDIRECT. */
static __noinline int fw_skb_reject(struct __sk_buff *skb, __u64 flags)
{
	struct fw_rst r = {};

	if (fw_rst_read((void *)(long)skb->data, (void *)(long)skb->data_end, &r))
		return fw_skb_icmp(skb, flags);
	if (r.l4_off > 128 || bpf_skb_change_tail(skb, r.l4_off + 20, 0))
		return -1;
	if (fw_rst_write((void *)(long)skb->data, (void *)(long)skb->data_end, &r))
		return -1;
	return bpf_redirect(skb->ifindex, flags) == TC_ACT_REDIRECT ? 0 : -1;
}

/* fw_xdp_reject is fw_skb_reject for XDP: 0 means return XDP_TX. */
static __noinline int fw_xdp_reject(struct xdp_md *ctx)
{
	struct fw_rst r = {};
	__u32 len = bpf_xdp_get_buff_len(ctx);

	if (fw_rst_read((void *)(long)ctx->data, (void *)(long)ctx->data_end, &r))
		return fw_xdp_icmp(ctx);
	if (r.l4_off > 128 || len < r.l4_off + 20 ||
	    bpf_xdp_adjust_tail(ctx, -(int)(len - (r.l4_off + 20))))
		return -1;
	return fw_rst_write((void *)(long)ctx->data, (void *)(long)ctx->data_end, &r);
}

/* ---------------------------------------------------------------------
 * The stage as the hooks call it: global functions.
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

/* In and out of the stage. */
struct fw_call {
	__u32 len;		/* in: bytes, for counters */
	__u8 kind;		/* in: enum fw_kind */
	__u8 track;		/* in: struct fw_hook.track */
	__u8 reason;		/* out: enum xl_reason of a refusal */
	__u8 pad;
};

/* fw_ep_hook fills hk for the endpoint a packet leaves (FW_KIND_FROM_EP:
 * its source) or reaches (FW_KIND_TO_EP: its destination). Returns -1
 * when that address is no endpoint (nothing to classify). */
static __always_inline int fw_ep_hook(const struct pkt *p, __u8 kind, __u32 len, __u8 track,
				      struct fw_hook *hk)
{
	const struct endpoint_val *ep = bpf_map_lookup_elem(&xlane_endpoints,
							    kind == FW_KIND_FROM_EP ? &p->src : &p->dst);

	if (!ep)
		return -1;
	hk->ifindex = ep->ifindex;
	hk->netid = ep->network_id;
	hk->len = len;
	hk->kind = kind;
	hk->track = track;
	return 0;
}

static __always_inline int fw_run(void *data, void *data_end, __u32 pkt_len, __u32 ifindex,
				  struct fw_call *c)
{
	__u32 zero = 0;
	struct fw_scratch *sc = bpf_map_lookup_elem(&xlane_fw_scratch, &zero);
	struct pkt p = {};

	if (!sc || parse_l3(data, data_end, pkt_len, &p) != PARSE_OK)
		return FW_V_ALLOW;
	if (c->kind == FW_KIND_UPLINK) {
		__builtin_memset(&sc->hk, 0, sizeof(sc->hk));
		sc->hk.ifindex = ifindex;
		sc->hk.len = c->len;
		sc->hk.kind = FW_KIND_UPLINK;
	} else if (fw_ep_hook(&p, c->kind, c->len, c->track, &sc->hk)) {
		return FW_V_ALLOW;
	}
	return fw_prepare(data, data_end, &p, sc);
}

/* fw_prepare_skb and fw_prepare_xdp are fw_prepare for each context:
 * FW_V_ALLOW, or FW_V_SEARCH for fw_decide. */
__noinline int fw_prepare_skb(struct __sk_buff *skb, struct fw_call *c)
{
	if (!c)
		return FW_V_ALLOW;
	return fw_run((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, skb->ifindex, c);
}

__noinline int fw_prepare_xdp(struct xdp_md *ctx, struct fw_call *c)
{
	if (!c)
		return FW_V_ALLOW;
	return fw_run((void *)(long)ctx->data, (void *)(long)ctx->data_end, bpf_xdp_get_buff_len(ctx),
		      ctx->ingress_ifindex, c);
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

/* ---------------------------------------------------------------------
 * Hook helpers: what the entry files call.
 */

/* fw_on is the cheap test hooks make before any firewall work. */
static __always_inline int fw_on(void)
{
	__u32 zero = 0;
	struct fw_state *st = bpf_map_lookup_elem(&xlane_fw_state, &zero);

	return st && st->on;
}

/* fw_skb_ep classifies a packet of a tc program leaving or reaching an
 * endpoint (p: as the caller parsed it; the stage parses again). track:
 * this hook owns the packet's conntrack (struct fw_hook). bounce: how a
 * reject's RST leaves (fw_skb_reject). */
static __always_inline int fw_skb_ep(struct __sk_buff *skb, const struct pkt *p, __u8 kind,
				     __u8 track, __u64 bounce, enum xl_reason *reason)
{
	struct fw_call c = { .len = skb->len, .kind = kind, .track = track };
	int v;

	if (!fw_on())
		return FW_V_ALLOW;
	v = fw_prepare_skb(skb, &c);
	if (v == FW_V_SEARCH)
		v = fw_decide(&c);
	if (v == FW_V_ALLOW)
		return v;
	*reason = c.reason;
	if (v == FW_V_REJECT && !fw_skb_reject(skb, bounce))
		return FW_V_REPLIED;
	return v;
}

/* fw_tc_ret is the tc verdict of a refusal. */
static __always_inline int fw_tc_ret(int v)
{
	return v == FW_V_REPLIED ? TC_ACT_REDIRECT : TC_ACT_SHOT;
}

/* fw_xdp_ret is the XDP verdict of a refusal. */
static __always_inline int fw_xdp_ret(int v)
{
	if (v == FW_V_REPLIED)
		return XDP_REDIRECT;
	return v == FW_V_REPLIED_TX ? XDP_TX : XDP_DROP;
}

/*
 * fw_xdp_bounce sends a reject's RST back out of the device it came in by.
 * Through the devmap when the device is there (a redirect): on a veth,
 * XDP_TX wakes the peer only if the peer runs an XDP program itself
 * (veth_xdp_flush), and the RST would wait in its ring for the next
 * packet; XDP_TX otherwise (a NIC sends at once).
 */
static __always_inline int fw_xdp_bounce(struct xdp_md *ctx)
{
	if (devmap_has(ctx->ingress_ifindex) &&
	    bpf_redirect_map(&xlane_devmap, ctx->ingress_ifindex, 0) == XDP_REDIRECT)
		return FW_V_REPLIED;
	return FW_V_REPLIED_TX;
}

/* fw_xdp_ep is fw_skb_ep for XDP programs. */
static __always_inline int fw_xdp_ep(struct xdp_md *ctx, const struct pkt *p, __u8 kind,
				     __u32 len, __u8 track, enum xl_reason *reason)
{
	struct fw_call c = { .len = len, .kind = kind, .track = track };
	int v;

	if (!fw_on())
		return FW_V_ALLOW;
	v = fw_prepare_xdp(ctx, &c);
	if (v == FW_V_SEARCH)
		v = fw_decide(&c);
	if (v == FW_V_ALLOW)
		return v;
	*reason = c.reason;
	if (v == FW_V_REJECT && !fw_xdp_reject(ctx))
		return fw_xdp_bounce(ctx);
	return v;
}

/*
 * fw_skb_to_endpoint is the whole stage of tcx egress on a host veth: what
 * Linux delivers to the endpoint. It owns conntrack for the packet: an
 * allowed new flow gets its entries here, so the endpoint's replies are
 * established.
 */
static __always_inline int fw_skb_to_endpoint(struct __sk_buff *skb, enum xl_reason *reason)
{
	struct pkt p = {};
	__u32 need = XL_PARSE_L4_LEN;

	if (!fw_on())
		return FW_V_ALLOW;
	if ((void *)(long)skb->data + need > (void *)(long)skb->data_end)
		bpf_skb_pull_data(skb, skb->len < need ? skb->len : need);
	if (parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, &p) != PARSE_OK)
		return FW_V_ALLOW;	/* non-IP; malformed is Linux's to judge here */
	if (addr_is_link_scope(&p.dst))
		return FW_V_ALLOW;	/* ND, multicast: never filtered */
	return fw_skb_ep(skb, &p, FW_KIND_TO_EP, 1, BPF_F_INGRESS, reason);
}

/* ---------------------------------------------------------------------
 * DDoS defence (uplink XDP).
 */

#define FW_NSEC 1000000000ULL

/*
 * fw_refill adds elapsed ns worth of rate/s tokens (x 1e9), up to burst.
 * elapsed * rate wraps 64 bits after 2^64 / rate ns (184 s at the 1e8/s
 * the spec allows, 4.3 s at the u32 maximum) and would leave a bucket idle
 * that long anywhere between empty and full: past 2^31 ns (where the
 * product and the sum still fit for any rate and burst) the refill is
 * compared with the room left instead, one division on the rare slow path.
 */
static __always_inline void fw_refill(__u64 *tokens, __u64 elapsed, __u32 rate, __u32 burst)
{
	__u64 cap = (__u64)burst * FW_NSEC;
	__u64 t = *tokens;

	if (t >= cap || (elapsed >= (1ULL << 31) && rate && elapsed > (cap - t) / rate))
		t = cap;
	else
		t += elapsed * rate;
	*tokens = t > cap ? cap : t;
}

/* fw_take takes one token: 0, or -1 when the bucket is empty. */
static __always_inline int fw_take(__u64 *tokens)
{
	if (*tokens < FW_NSEC)
		return -1;
	*tokens -= FW_NSEC;
	return 0;
}

static __always_inline void fw_mask_addr(__u8 *a, __u32 bits)
{
	/* bits counts from the start of the 16 bytes */
#pragma unroll
	for (int i = 0; i < 16; i++) {
		__u32 lo = i * 8;

		if (bits <= lo)
			a[i] = 0;
		else if (bits < lo + 8)
			a[i] &= (__u8)(0xff << (lo + 8 - bits));
	}
}

/*
 * fw_ddos_check runs first on the uplink: malformed headers (when asked),
 * blocklisted sources, sources over their rate. FW_V_ALLOW or FW_V_DROP
 * with *reason set. malformed: the parser's verdict on the frame.
 */
static __noinline __attribute__((unused)) int fw_ddos_check(void *data, void *data_end, const struct pkt *p,
				    int malformed, enum xl_reason *reason)
{
	__u32 zero = 0;
	struct fw_ddos *cfg = bpf_map_lookup_elem(&xlane_fw_ddos, &zero);
	struct fw_rate_key rk = {};
	struct fw_rate_val *rv;
	__u64 now, elapsed;
	int syn = 0;

	if (!cfg || !cfg->flags)
		return FW_V_ALLOW;
	if (malformed) {
		if (cfg->flags & FW_DDOS_MALFORMED) {
			*reason = XL_DROP_MALFORMED;
			return FW_V_DROP;
		}
		return FW_V_ALLOW;
	}
	/* Not "!p->ip4 && !p->ip6": clang fuses that into an OR of two
	 * pointers, which the verifier refuses. */
	if (p->proto != ETH_P_IP && p->proto != ETH_P_IPV6)
		return FW_V_ALLOW;
	if (cfg->flags & FW_DDOS_MALFORMED) {
		struct fw_l4 l4 = {};
		struct ct_key ik = {};

		fw_parse_l4(data, data_end, p, &l4, &ik);
		if (l4.l4_off && l4.sport == FW_NO_L4 &&
		    (l4.proto == IPPROTO_TCP || l4.proto == IPPROTO_UDP)) {
			/* A first fragment or unfragmented packet whose
			 * transport header is cut short. */
			*reason = XL_DROP_MALFORMED;
			return FW_V_DROP;
		}
		if (l4.proto == IPPROTO_TCP && l4.sport != FW_NO_L4) {
			__u8 f = l4.flags;

			/* SYN+FIN, SYN+RST, no flags at all (null scan),
			 * FIN+PSH+URG without ACK (xmas): never legitimate. */
			if (((f & TCP_FLAG_SYN) && (f & (TCP_FLAG_FIN | TCP_FLAG_RST))) ||
			    f == 0 || (f & 0x29) == 0x29) {
				*reason = XL_DROP_MALFORMED;
				return FW_V_DROP;
			}
		}
		syn = l4.proto == IPPROTO_TCP && (l4.flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN;
	} else if (cfg->flags & FW_DDOS_SYN) {
		struct fw_l4 l4 = {};
		struct ct_key ik = {};

		fw_parse_l4(data, data_end, p, &l4, &ik);
		syn = l4.proto == IPPROTO_TCP && (l4.flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN;
	}
	if (cfg->flags & FW_DDOS_BLOCKLIST) {
		if (p->ip4) {
			struct fw_block4_key bk = { .prefixlen = 32 };

			__builtin_memcpy(bk.addr, &p->ip4->saddr, 4);
			if (bpf_map_lookup_elem(&xlane_fw_block4, &bk)) {
				*reason = XL_DROP_BLOCKLIST;
				return FW_V_DROP;
			}
		} else {
			struct fw_block6_key bk = { .prefixlen = 128 };

			__builtin_memcpy(bk.addr, p->src.addr, 16);
			if (bpf_map_lookup_elem(&xlane_fw_block6, &bk)) {
				*reason = XL_DROP_BLOCKLIST;
				return FW_V_DROP;
			}
		}
	}
	if (!(cfg->flags & (FW_DDOS_RATE | FW_DDOS_SYN)))
		return FW_V_ALLOW;
	if (!(cfg->flags & FW_DDOS_RATE) && !syn)
		return FW_V_ALLOW;
	__builtin_memcpy(rk.addr, p->src.addr, 16);
	fw_mask_addr(rk.addr, p->ip4 ? 96 + (cfg->v4_prefix & 0x3f) : (cfg->v6_prefix & 0xff));
	now = bpf_ktime_get_ns();
	rv = bpf_map_lookup_elem(&xlane_fw_rate, &rk);
	if (!rv) {
		struct fw_rate_val nv = {
			.last = now,
			.tokens = (__u64)cfg->burst * FW_NSEC,
			.syn_tokens = (__u64)cfg->syn_burst * FW_NSEC,
		};

		bpf_map_update_elem(&xlane_fw_rate, &rk, &nv, BPF_NOEXIST);
		rv = bpf_map_lookup_elem(&xlane_fw_rate, &rk);
		if (!rv)
			return FW_V_ALLOW;
	}
	/* Races between CPUs on one source lose a refill or a token, never
	 * more: the limit is approximate by design, as in every lock-free
	 * shared token bucket. Both buckets refill on every packet: they
	 * share the timestamp. */
	elapsed = now > rv->last ? now - rv->last : 0;
	rv->last = now;
	fw_refill(&rv->tokens, elapsed, cfg->pps, cfg->burst);
	fw_refill(&rv->syn_tokens, elapsed, cfg->syn_pps, cfg->syn_burst);
	if ((cfg->flags & FW_DDOS_RATE) && fw_take(&rv->tokens)) {
		*reason = XL_DROP_RATE_LIMIT;
		return FW_V_DROP;
	}
	if (syn && (cfg->flags & FW_DDOS_SYN) && fw_take(&rv->syn_tokens)) {
		*reason = XL_DROP_SYN_LIMIT;
		return FW_V_DROP;
	}
	return FW_V_ALLOW;
}

/*
 * fw_xdp_uplink is the uplink's first stage: DDoS defence, then the rules
 * of the uplink scope. parsed: parse_l3's result for the frame.
 */
static __always_inline int fw_xdp_uplink(struct xdp_md *ctx, const struct pkt *p, int parsed,
					 __u32 len, enum xl_reason *reason)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct fw_call c = { .len = len, .kind = FW_KIND_UPLINK };
	int v;

	if (fw_ddos_check(data, data_end, p, parsed == PARSE_MALFORMED, reason) != FW_V_ALLOW)
		return FW_V_DROP;
	if (parsed != PARSE_OK || !fw_on())
		return FW_V_ALLOW;
	v = fw_prepare_xdp(ctx, &c);
	if (v == FW_V_SEARCH)
		v = fw_decide(&c);
	if (v == FW_V_ALLOW)
		return v;
	*reason = c.reason;
	if (v == FW_V_REJECT && !fw_xdp_reject(ctx))
		return fw_xdp_bounce(ctx);
	return v;
}

#endif /* XLANE_FW_H */
