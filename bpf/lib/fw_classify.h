/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * fw_classify.h - the rule classifier (docs/firewall.md): the packet's
 * field classes, the search for the deciding rule over the ANDed bitmaps,
 * rule counters and sampled events, and the two halves of the verdict
 * (fw_prepare, fw_verdict) with the conntrack entries an allowed flow gets
 * where the hook owns them.
 */
#ifndef XLANE_FW_CLASSIFY_H
#define XLANE_FW_CLASSIFY_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include "abi.h"
#include "maps.h"
#include "parse.h"
#include "l4.h"
#include "ct.h"
#include "fw_maps.h"
#include "fw_l4.h"
#include "monitor.h"

/* What the calling hook knows. */
struct fw_hook {
	__u32 ifindex; /* device the hit is reported on */
	__u32 netid;   /* the endpoint's network; 0 on the uplink */
	__u32 len;     /* bytes, for counters */
	__u8 kind;     /* enum fw_kind */
	__u8 track;    /* this hook owns conntrack for the packet:
			* refresh its entry, or create one for an
			* allowed new flow (hooks no ct stage runs
			* behind: tcx egress, XDP) */
	__u8 post_nat; /* FW_KIND_FROM_EP after conntrack's DNAT: the
			* flow fw_prepare deferred (FW_CALL_POST_NAT) */
	__u8 pad;
};

/* Between the halves of the stage (the global functions); the hooks see
 * an enum xl_step. */
enum fw_verdict {
	FW_V_ALLOW = 0,
	FW_V_DROP,
	FW_V_REJECT, /* refused: answer it where the hook can */
	FW_V_SEARCH, /* fw_prepare: the classes are in the
		      * scratch, fw_decide searches them */
};

/* The verdict of a deciding rule's action, and the reason of a refusal:
 * one mapping for both classifiers (fw_verdict, fw_lin.h). */
static __always_inline enum fw_verdict fw_action_verdict(__u8 action, __u8 is_default,
							 enum xl_reason *reason)
{
	if (action == FW_ALLOW)
		return FW_V_ALLOW;
	if (action == FW_REJECT) {
		*reason = XL_DROP_FW_REJECT;
		return FW_V_REJECT;
	}
	*reason = is_default ? XL_DROP_FW_DEFAULT : XL_DROP_FW;
	return FW_V_DROP;
}

/* fw_call.flags */
#define FW_CALL_POST_NAT \
	1 /* the from-endpoint stage after conntrack
			    * (fw_skb_post_nat): judge the packet only
			    * if the stage before deferred it */

/* In and out of the stage's global functions (fw_stage.h, fw_lin.h). */
struct fw_call {
	__u32 len;   /* in: bytes, for counters */
	__u8 kind;   /* in: enum fw_kind */
	__u8 track;  /* in: struct fw_hook.track */
	__u8 reason; /* out: enum xl_reason of a refusal */
	__u8 flags;  /* in: FW_CALL_* */
};

/*
 * Per-packet scratch of the stage, kept off the BPF stack: the stage runs
 * as a call below the hook's frame, and the two share 512 bytes.
 */
struct fw_scratch {
	struct ct_key k;  /* the packet's flow, as conntrack keys it
			   * (addresses always set: events use them) */
	struct ct_key rk; /* ICMP error: the flow it is about; else
			   * k reversed (fw_translated) */
	struct ct_key ok; /* a refused translated flow's original
			   * key (fw_forget_translated) */
	struct fw_l4 l4;
	struct fw_hook hk;
	struct fw_exact_key ek;
	struct fw_addr_key ak;
	struct fw_resolved_key rsk;
	__u32 cls[FW_F_MAX];
	__u32 key;
	__u32 slot;	       /* the generation's slot */
	__u32 fields;	       /* its fw_gen.fields */
	enum xl_reason reason; /* of a refusal */
	/* The search (fw_step): candidate words left, the current word's
	 * matching rules, the deciding rule's bit + 1 (0: none). */
	__u64 c0, c1, c2, c3;
	__u64 acc;
	__u32 base;
	__u32 found;
	__u32 from; /* a pass rule's target: bits below it are skipped */
	/* The uplink (fw_prepare_xdp) tests established only for a packet a
	 * rule matched; set for uplink packets only. */
	__u32 late_ct;
	/* fw_count_slot: the counter slot whose last hit this CPU wrote
	 * last, and the jiffies then. */
	__u64 lh_jiffies;
	__u32 lh_slot;
	__u32 pad_lh;
	/* The IPv4 tuples (fw_tuple4_uplink): the last tuple's key, its bit
	 * + 1 (0: no tuple), and the tag + 1 of the generation (0: none). */
	__u64 t4_key;
	__u64 t4_tag;
	__u32 t4_hit;
	/* A new flow from an endpoint to a service VIP, passed by the
	 * stage before conntrack, to be judged on its backend after the
	 * DNAT (fw_prepare, fw_skb_post_nat); reset by every run. */
	__u32 deferred;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct fw_scratch);
	__uint(max_entries, 1);
} xlane_fw_scratch SEC(".maps");

/* The classes' bitmaps, one pointer per field: the search ANDs them. */
struct fw_bitmaps {
	struct fw_bits *b[FW_F_MAX];
};

static __always_inline int fw_ctz(__u64 x)
{
	return __builtin_ctzll(x); /* de Bruijn multiply in BPF */
}

/*
 * fw_count_slot counts a hit of the rule with counter slot slot (len
 * bytes) on this CPU. Its last hit is the coarse clock, which moves only
 * with the tick (jiffies): the clock is read when this CPU's last counted
 * slot (sc->lh_slot) or the jiffies (bpf_jiffies64, inlined: a load)
 * changed since it was last read, or when the daemon reset the counter;
 * a flood of one rule reads it once per tick, not per packet. The last
 * hit is the tick's, as before, or the one before when the tick moved
 * jiffies but not yet the clock.
 */
static __always_inline void fw_count_slot(__u32 slot, __u32 len, struct fw_scratch *sc)
{
	struct fw_counter *c = bpf_map_lookup_elem(&xlane_fw_counters, &slot);
	__u64 j;

	if (!c)
		return;
	/* Per-CPU value: no atomics needed. */
	c->packets++;
	c->bytes += len;
	j = bpf_jiffies64();
	if (sc->lh_jiffies != j || sc->lh_slot != slot || !c->last_hit) {
		c->last_hit = bpf_ktime_get_coarse_ns();
		sc->lh_jiffies = j;
		sc->lh_slot = slot;
	}
}

static __always_inline void fw_count(const struct fw_rule *r, struct fw_scratch *sc)
{
	fw_count_slot(r->slot, sc->hk.len, sc);
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
	e->proto = sc->l4.l4.proto;
	e->pad = 0;
	__builtin_memcpy(e->saddr, sc->k.saddr, 16);
	__builtin_memcpy(e->daddr, sc->k.daddr, 16);
	e->sport = sc->l4.sport == FW_NO_L4 ? 0 : sc->l4.sport;
	e->dport = sc->l4.dport == FW_NO_L4 ? 0 : sc->l4.dport;
	e->pad2 = 0;
	bpf_ringbuf_submit(e, 0);
}

/* fw_monitor is fw_log for `xlane monitor` (lib/monitor.h): it remembers
 * the deciding rule for the packet's MON_DROP event and, when wanted,
 * emits it as a MON_FW event. Nothing but mon_types() while nobody
 * listens. */
static __always_inline void fw_monitor(const struct fw_rule *r, const struct fw_scratch *sc)
{
	__u32 t = mon_types();
	struct mon_state *st;
	struct mon_event *e;

	if (!t)
		return;
	st = mon_state();
	if (st)
		st->rule = r->slot + 1;
	if (!(t & MON_FW))
		return;
	e = mon_reserve(MON_FW);
	if (!e)
		return;
	e->ifindex = sc->hk.ifindex;
	e->len = sc->hk.len;
	e->kind = sc->hk.kind;
	e->action = r->action;
	e->proto = sc->l4.l4.proto;
	e->rule = r->slot + 1;
	__builtin_memcpy(e->saddr, sc->k.saddr, 16);
	__builtin_memcpy(e->daddr, sc->k.daddr, 16);
	e->family = mon_family(sc->k.saddr);
	e->sport = sc->l4.sport == FW_NO_L4 ? 0 : bpf_htons(sc->l4.sport);
	e->dport = sc->l4.dport == FW_NO_L4 ? 0 : bpf_htons(sc->l4.dport);
	mon_submit(e);
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

/* fw_skip_below clears the bits of c (candidate words base..base+63)
 * below word tw. */
static __always_inline __u64 fw_skip_below(__u64 c, __u32 base, __u32 tw)
{
	if (tw >= base + 64)
		return 0;
	if (tw > base)
		return c & (~0ULL << (tw - base));
	return c;
}

/*
 * fw_pass moves the search on to bit `to` (a pass rule's pass_to: the
 * next tier): the current word keeps its bits from `to` on, or, when
 * `to` is in a later word, it is dropped with the candidate words before
 * that word, and fw_step masks the bits below `to` of that word when it
 * loads it (sc->from). Only ever forwards (the compiler puts `to` after the pass
 * rule's own bit), so a packet meets at most one pass rule per distinct
 * target and the walk stays within its steps.
 */
static __always_inline void fw_pass(struct fw_scratch *sc, __u32 to)
{
	__u32 tw = to / 64;

	sc->from = to;
	if (tw == sc->base / 64) {
		sc->acc &= ~0ULL << (to & 63);
		return;
	}
	if (tw < sc->base / 64)
		return;
	sc->acc = 0;
	sc->c0 = fw_skip_below(sc->c0, 0, tw);
	sc->c1 = fw_skip_below(sc->c1, 64, tw);
	sc->c2 = fw_skip_below(sc->c2, 128, tw);
	sc->c3 = fw_skip_below(sc->c3, 192, tw);
}

/*
 * fw_resolved says whether the packet's destination is one its source
 * resolved through DNS for the names of rule r (fw_rule.resolved), with
 * the answer's TTL not yet over. A connection it allowed stays allowed
 * after the TTL: conntrack passes an established flow before the rules.
 */
static __always_inline int fw_resolved(const struct fw_rule *r, struct fw_scratch *sc)
{
	struct fw_resolved_val *v;

	sc->rsk.slot = r->slot;
	__builtin_memcpy(sc->rsk.src, sc->k.saddr, 16);
	__builtin_memcpy(sc->rsk.dst, sc->k.daddr, 16);
	v = bpf_map_lookup_elem(&xlane_fw_resolved, &sc->rsk);
	return v && v->expires > bpf_ktime_get_ns();
}

/*
 * fw_step is a bpf_loop callback, one step of the search: with no
 * matching rule left in the current word, move to the next candidate word
 * (stop when none is left); else take the word's first rule: a log rule
 * emits its event and the walk goes on, a pass rule moves the walk on
 * to its target (fw_pass), any other decides (stop). A
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
		/* The word of a pass rule's target: the words before it are
		 * no candidates any more, so base < from only here. */
		if (sc->base < sc->from)
			sc->acc &= ~0ULL << ((sc->from - sc->base) & 63);
		return 0;
	}
	sc->key = sc->base + fw_ctz(sc->acc);
	sc->acc &= sc->acc - 1;
	r = bpf_map_lookup_elem(w->rules, &sc->key);
	if (!r)
		return 1;
	if (r->action == FW_PASS) {
		fw_count(r, sc);
		fw_pass(sc, r->pass_to);
		return 0;
	}
	/* A destination the source did not resolve for the rule's names:
	 * the rule does not match, the walk goes on. */
	if (r->resolved && !fw_resolved(r, sc))
		return 0;
	if (r->action != FW_LOG) {
		sc->found = sc->key + 1;
		return 1;
	}
	fw_count(r, sc);
	fw_log(r, sc);
	return 0;
}

/*
 * fw_search walks the matching rules in priority order and returns the
 * one that decides, or NULL when none matches. At most FW_WORDS words are
 * ANDed, one step per word and per matching log rule, of which a set has
 * at most FW_MAX_LOG_RULES, per pass rule met, at most one per
 * distinct target (FW_MAX_PASS_TARGETS), and per resolved rule whose
 * destination was not resolved (FW_MAX_RESOLVED bits per set).
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
	sc->from = 0;
	bpf_loop(2 * FW_WORDS + FW_MAX_LOG_RULES + FW_MAX_PASS_TARGETS + FW_MAX_RESOLVED + 1,
		 fw_step, w, 0);
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

	return v ? (__s64)*v : -1; /* not u32: -1 must stay negative */
}

/*
 * fw_classes looks p's fields up in slot's generation and leaves their
 * classes in sc->cls: 0 when the search must run, -1 when no rule of
 * the set can match p (allowed).
 */
static __always_inline int fw_classes(__u32 slot, const struct fw_gen *gen, const struct pkt *p,
				      struct fw_scratch *sc, const int xdp)
{
	const struct fw_hook *hk = &sc->hk;
	const struct fw_l4 *l4 = &sc->l4;
	struct fw_exact_key *ek = &sc->ek;
	struct fw_addr_key *ak = &sc->ak;
	void *exact, *addr, *scalar;
	__u32 fields = gen->fields, none = 0;
	__s64 c;

	exact = bpf_map_lookup_elem(&xlane_fw_exact, &slot);
	addr = bpf_map_lookup_elem(&xlane_fw_addr, &slot);
	scalar = bpf_map_lookup_elem(&xlane_fw_scalar, &slot);
	if (!exact || !addr || !scalar)
		return -1;
	sc->slot = slot;
	sc->fields = fields;

	/* The hook: (kind, network), else (kind, every network); a kind no
	 * rule names has no entry, and nothing to match. The uplink's class
	 * is in the generation (struct fw_gen), without a hash lookup. */
	c = gen->any_class[FW_F_CTX];
	if (hk->kind == FW_KIND_UPLINK && c) {
		if (c == FW_CTX_NO_UPLINK)
			return -1;
		c--;
	} else {
		ek->field = FW_F_CTX;
		ek->kind = hk->kind;
		__builtin_memset(ek->data, 0, sizeof(ek->data));
		__builtin_memcpy(ek->data, &hk->netid, 4);
		c = fw_lookup_u32(exact, ek);
		if (c < 0 && hk->netid) {
			__builtin_memset(ek->data, 0, sizeof(ek->data));
			c = fw_lookup_u32(exact, ek);
		}
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
			return -1; /* no rule covers this source */
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
		sc->key = FW_SC_PROTO + l4->l4.proto;
		c = fw_lookup_u32(scalar, &sc->key);
		none |= c == FW_CLASS_NONE;
		sc->cls[FW_F_PROTO] = c < 0 ? FW_CLASS_ALL : c;
	}
	sc->cls[FW_F_SPORT] = FW_CLASS_ALL;
	if (fields & (1 << FW_F_SPORT)) {
		sc->key = FW_SC_SPORT + l4->sport;
		c = fw_lookup_u32(scalar, &sc->key);
		none |= c == FW_CLASS_NONE;
		sc->cls[FW_F_SPORT] = c < 0 ? FW_CLASS_ALL : c;
	}
	sc->cls[FW_F_DPORT] = FW_CLASS_ALL;
	if (fields & (1 << FW_F_DPORT)) {
		sc->key = FW_SC_DPORT + l4->dport;
		c = fw_lookup_u32(scalar, &sc->key);
		none |= c == FW_CLASS_NONE;
		sc->cls[FW_F_DPORT] = c < 0 ? FW_CLASS_ALL : c;
	}
	sc->cls[FW_F_FLAGS] = FW_CLASS_ALL;
	if (fields & (1 << FW_F_FLAGS)) {
		sc->key = FW_SC_FLAGS + l4->l4.tcp_flags;
		c = fw_lookup_u32(scalar, &sc->key);
		none |= c == FW_CLASS_NONE;
		sc->cls[FW_F_FLAGS] = c < 0 ? FW_CLASS_ALL : c;
	}

	/* A scalar value no rule has (FW_CLASS_NONE): no rule can match, no
	 * search. XDP programs only: the tc pipeline is at the verifier's
	 * limit on 6.1, and there the pool has no class FW_CLASS_NONE, so
	 * the search finds no rule (the same verdict, later). */
	if (xdp && none)
		return -1;
	return 0;
}

/* fw_search_classes runs the search over sc's classes: the deciding rule,
 * or NULL. */
static __always_inline struct fw_rule *fw_search_classes(struct fw_scratch *sc)
{
	__u32 slot = sc->slot & 1, fields = sc->fields;
	struct fw_bits *ctx;
	struct fw_walk w;
	void *pool, *rules;

	pool = bpf_map_lookup_elem(&xlane_fw_pool, &slot);
	rules = bpf_map_lookup_elem(&xlane_fw_rules, &slot);
	if (!pool || !rules)
		return 0;
	/* A field no rule restricts matches every rule: ANDing the hook's
	 * bitmap (fw_classes always sets it) again changes nothing, and
	 * saves a lookup of the all-ones class. */
	ctx = bpf_map_lookup_elem(pool, &sc->cls[FW_F_CTX]);
	if (!ctx)
		return 0;
	w.m.b[FW_F_CTX] = ctx;
#pragma unroll
	for (int f = 1; f < FW_F_MAX; f++) {
		if (!(fields & (1 << f))) {
			w.m.b[f] = ctx;
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
	if (!v)
		v = bpf_map_lookup_elem(&xlane_ct, &sc->k);
	if (ct_refresh(&sc->k, v, &sc->l4.l4, sc->hk.len))
		return;
	{
		struct ct_scratch *cs = ct_scratch_get();

		/* A full table leaves the flow untracked: its replies are
		 * classified like new flows. */
		if (cs)
			ct_create(&sc->k, cs, &sc->l4.l4, sc->hk.len);
	}
}

/*
 * fw_translated says whether sc's packet, whose own tuple (sc->k) has no
 * entry, is a packet of a translated flow after its translation: its
 * tuple reversed (left in sc->rk) is the key of the flow's entry for the
 * other direction. Conntrack keys each direction by the tuple it arrives
 * with, so a service flow's reply, once translated back to come from the
 * VIP, and its original direction, once DNATed to the backend, carry no
 * key of their own. It is established as Linux means it: a reply (the
 * reversed entry is the original direction's), or the original direction
 * of a flow whose other side has answered. A bare SYN never is.
 */
static __always_inline int fw_translated(struct fw_scratch *sc)
{
	const struct ct_val *rv;

	if (sc->l4.l4.proto == IPPROTO_TCP &&
	    (sc->l4.l4.tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK | TCP_FLAG_RST)) == TCP_FLAG_SYN)
		return 0;
	ct_reverse(&sc->k, &sc->rk);
	rv = bpf_map_lookup_elem(&xlane_ct, &sc->rk);
	if (!rv || rv->nat == CT_NAT_NONE)
		return 0;
	return rv->dir == CT_DIR_ORIG || rv->state != CT_NEW;
}

/*
 * fw_forget_translated deletes the entries of the new flow whose
 * translated packet (sc->k, the original direction after DNAT) the stage
 * after conntrack refused: a refused flow keeps no entries, as when the
 * stage before conntrack refuses it. The reversed tuple is the reply
 * entry; its partner, the original entry.
 */
static __always_inline void fw_forget_translated(struct fw_scratch *sc)
{
	struct ct_val *rv, *ov;

	ct_reverse(&sc->k, &sc->rk);
	rv = bpf_map_lookup_elem(&xlane_ct, &sc->rk);
	if (!rv || rv->dir != CT_DIR_REPLY || rv->state != CT_NEW)
		return;
	__builtin_memset(&sc->ok, 0, sizeof(sc->ok));
	ct_partner(&sc->rk, rv, &sc->ok);
	ov = bpf_map_lookup_elem(&xlane_ct, &sc->ok);
	if (ov && ov->dir == CT_DIR_ORIG)
		ct_forget(&sc->ok, ov);
}

/* fw_to_service: sc's packet is addressed to a service VIP and port. */
static __always_inline int fw_to_service(struct fw_scratch *sc)
{
	struct service_key sk = { .port = sc->k.dport, .proto = sc->k.proto };

	if (!sc->l4.trackable || sc->l4.l4.proto == IPPROTO_ICMP ||
	    sc->l4.l4.proto == IPPROTO_ICMPV6)
		return 0;
	__builtin_memcpy(sk.addr, sc->k.daddr, 16);
	return bpf_map_lookup_elem(&xlane_services, &sk) != 0;
}

/* fw_established_late: sc's packet (its key in sc->k, set by
 * fw_prepare) belongs to an established flow, or is an ICMP error about a
 * tracked one: fw_prepare's test, made after the search. */
static __always_inline int fw_established_late(struct fw_scratch *sc)
{
	struct ct_val *v;

	if (sc->l4.trackable) {
		v = bpf_map_lookup_elem(&xlane_ct, &sc->k);
		if (v && (v->dir == CT_DIR_REPLY || v->state != CT_NEW) &&
		    !ct_reopens(v, &sc->l4.l4))
			return 1;
	}
	return sc->l4.related && bpf_map_lookup_elem(&xlane_ct, &sc->rk);
}

/*
 * fw_prepare is the first half of the stage: FW_V_ALLOW when the packet
 * passes before any rule (no rule set, neighbour discovery, established
 * or related, or no rule of the set can match it), else FW_V_SEARCH with
 * the classes of its fields in sc; FW_V_DROP (sc->reason: drop_malformed)
 * for a transport header an endpoint hook must not pass. p was parsed (PARSE_OK) from data;
 * sc->hk is set. xdp: built for fw_prepare_xdp (the uplink's late
 * conntrack test, the no-rule shortcut of fw_classes).
 */
static __always_inline int fw_prepare(void *data, void *data_end, const struct pkt *p,
				      struct fw_scratch *sc, const int xdp)
{
	__u32 zero = 0, slot;
	struct fw_state *st = bpf_map_lookup_elem(&xlane_fw_state, &zero);
	struct fw_gen *gen;
	struct ct_val *v = 0;
	int late;

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
	/* A transport header cut short (a tiny first fragment) or lying about
	 * its length would hide its ports from the rules: endpoint hooks drop
	 * it (the uplink's DDoS stage does when asked). */
	if (sc->l4.malformed && sc->hk.kind != FW_KIND_UPLINK) {
		sc->reason = XL_DROP_MALFORMED;
		return FW_V_DROP;
	}
	/* Neighbour discovery (router/neighbour solicitation and
	 * advertisement, redirect) is never filtered: without it IPv6 dies. */
	if (sc->l4.l4.proto == IPPROTO_ICMPV6 && sc->l4.dport >= 133 && sc->l4.dport <= 137)
		return FW_V_ALLOW;
	__builtin_memcpy(sc->k.saddr, p->src.addr, 16);
	__builtin_memcpy(sc->k.daddr, p->dst.addr, 16);
	/* On the uplink (which owns no entries) of a set without log rules,
	 * a packet no rule matches passes established or not: conntrack is
	 * asked after the search, and only when a rule matched (fw_verdict).
	 * With log rules the search would emit their events first. */
	late = xdp && sc->hk.kind == FW_KIND_UPLINK && gen->established && !gen->log_rules;

	if (xdp)
		sc->late_ct = late;
	if (sc->l4.trackable) {
		sc->k.sport = sc->l4.l4.sport;
		sc->k.dport = sc->l4.l4.dport;
		sc->k.proto = sc->l4.l4.proto;
		/* A hash of a 40-byte key: only when it is needed. */
		if ((gen->established && !late) || sc->hk.track)
			v = bpf_map_lookup_elem(&xlane_ct, &sc->k);
	}
	if (gen->established && !late) {
		/* ESTABLISHED as Linux means it: a reply, or a flow that has
		 * seen both directions. The flow's first direction is
		 * classified again until the other side answers; a SYN
		 * reopening a finished flow's tuple is new (ct_reopens). */
		if (v && (v->dir == CT_DIR_REPLY || v->state != CT_NEW) &&
		    !ct_reopens(v, &sc->l4.l4)) {
			fw_track(sc, v);
			return FW_V_ALLOW;
		}
		/* The stage that translated it accounted it: no fw_track. */
		if (!v && sc->l4.trackable && fw_translated(sc))
			return FW_V_ALLOW;
		if (sc->l4.related && bpf_map_lookup_elem(&xlane_ct, &sc->rk))
			return FW_V_ALLOW;
	}
	/* Kubernetes judges an egress policy on a service flow's backend,
	 * not its VIP: a new flow from an endpoint to a VIP passes the stage
	 * before conntrack, and the one after (fw_skb_post_nat) judges its
	 * translated packet. Only the tc pipeline defers (track 0): XDP
	 * hands flows to VIPs to it before its firewall runs. */
	if (sc->hk.kind == FW_KIND_FROM_EP && !sc->hk.track && !sc->hk.post_nat &&
	    fw_to_service(sc)) {
		sc->deferred = 1;
		return FW_V_ALLOW;
	}
	if (fw_classes(slot, gen, p, sc, xdp)) {
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

	if (r && sc->hk.kind == FW_KIND_UPLINK && sc->late_ct && fw_established_late(sc))
		return FW_V_ALLOW; /* the uplink tracks nothing: no fw_track */
	if (r) {
		fw_count(r, sc);
		fw_log(r, sc);
		fw_monitor(r, sc);
		if (r->action != FW_ALLOW) {
			if (sc->hk.post_nat)
				fw_forget_translated(sc);
			return fw_action_verdict(r->action, r->is_default, &sc->reason);
		}
	}
	fw_track(sc, 0);
	return FW_V_ALLOW;
}

#endif /* XLANE_FW_CLASSIFY_H */
