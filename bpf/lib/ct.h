/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * ct.h - connection tracking. A flow is two entries in xlane_ct, one per
 * direction, each keyed by the tuple its packets carry (after the other
 * direction's NAT), like Linux's original and reply tuples. Each entry
 * knows its partner's key (ct_partner), so either direction finds both.
 *
 * Every hit moves the deadline (per-hit last-seen); the daemon's GC deletes
 * entries past their deadline plus a grace period, so a flow that is still
 * sending is never collected.
 */
#ifndef XLANE_CT_H
#define XLANE_CT_H

#include <bpf/bpf_helpers.h>
#include "abi.h"
#include "maps.h"
#include "l4.h"
#include "monitor.h"

#define CT_TIMEOUT_TCP_SYN (60 * NSEC_PER_SEC)
#define CT_TIMEOUT_TCP_EST (6 * 3600 * NSEC_PER_SEC)
#define CT_TIMEOUT_TCP_CLOSE (10 * NSEC_PER_SEC)
#define CT_TIMEOUT_UDP (30 * NSEC_PER_SEC)
#define CT_TIMEOUT_UDP_EST (180 * NSEC_PER_SEC)
#define CT_TIMEOUT_ICMP (30 * NSEC_PER_SEC)

static __always_inline void ct_key_init(struct ct_key *k, const struct pkt *p, const struct l4 *l4)
{
	__builtin_memcpy(k->saddr, p->src.addr, 16);
	__builtin_memcpy(k->daddr, p->dst.addr, 16);
	k->sport = l4->sport;
	k->dport = l4->dport;
	k->proto = l4->proto;
}

/* ct_reverse: k's tuple the other way round, the key of an untranslated
 * flow's other direction (echo keys carry the identifier in sport both
 * ways). */
static __always_inline void ct_reverse(const struct ct_key *k, struct ct_key *out)
{
	__builtin_memset(out, 0, sizeof(*out)); /* the padding is key */
	__builtin_memcpy(out->saddr, k->daddr, 16);
	__builtin_memcpy(out->daddr, k->saddr, 16);
	out->proto = k->proto;
	if (k->proto == IPPROTO_ICMP || k->proto == IPPROTO_ICMPV6) {
		out->sport = k->sport;
		out->dport = 0;
	} else {
		out->sport = k->dport;
		out->dport = k->sport;
	}
}

/* ct_partner computes the key of the other direction's entry. */
static __always_inline void ct_partner(const struct ct_key *k, const struct ct_val *v,
				       struct ct_key *out)
{
	out->proto = k->proto;
	switch (v->nat) {
	case CT_NAT_SRC: /* we leave as nat: the partner is sent to nat */
		__builtin_memcpy(out->saddr, k->daddr, 16);
		__builtin_memcpy(out->daddr, v->nat_addr, 16);
		out->sport = k->dport;
		out->dport = v->nat_port;
		break;
	case CT_NAT_DST: /* we go on to nat: the partner comes from nat */
		__builtin_memcpy(out->saddr, v->nat_addr, 16);
		__builtin_memcpy(out->daddr, k->saddr, 16);
		out->sport = v->nat_port;
		out->dport = k->sport;
		break;
	case CT_NAT_BOTH: /* the partner comes from nat and goes to nat_s */
		__builtin_memcpy(out->saddr, v->nat_addr, 16);
		__builtin_memcpy(out->daddr, v->nat_saddr, 16);
		out->sport = v->nat_port;
		out->dport = v->nat_sport;
		break;
	default:
		__builtin_memcpy(out->saddr, k->daddr, 16);
		__builtin_memcpy(out->daddr, k->saddr, 16);
		out->sport = k->dport;
		out->dport = k->sport;
	}
	if (k->proto == IPPROTO_ICMP || k->proto == IPPROTO_ICMPV6) {
		/* Echo keys carry the identifier in sport both ways. */
		if (!out->sport)
			out->sport = out->dport;
		out->dport = 0;
	}
}

static __always_inline __u64 ct_timeout(__u8 proto, __u8 state)
{
	switch (proto) {
	case IPPROTO_TCP:
		if (state == CT_ESTABLISHED)
			return CT_TIMEOUT_TCP_EST;
		return state == CT_NEW ? CT_TIMEOUT_TCP_SYN : CT_TIMEOUT_TCP_CLOSE;
	case IPPROTO_UDP:
		return state == CT_ESTABLISHED ? CT_TIMEOUT_UDP_EST : CT_TIMEOUT_UDP;
	}
	return CT_TIMEOUT_ICMP;
}

/* ct_next_state is the TCP state machine, simplified the way conntrack
 * helpers for a forwarding plane usually are: what matters is when a flow
 * may be forgotten. */
static __always_inline __u8 ct_next_state(__u8 state, __u8 dir, const struct l4 *l4)
{
	if (l4->proto != IPPROTO_TCP)
		return dir == CT_DIR_REPLY ? CT_ESTABLISHED : state;
	if (l4->tcp_flags & TCP_FLAG_RST)
		return CT_CLOSED;
	/* A bare SYN from the originator of a closing or closed flow opens a
	 * new connection on the same tuple (the client reused its port).
	 * ct_refresh starts such a flow over (ct_reopens); a caller that
	 * only accounts (ct_hit) gets the new connection's state here, or
	 * it would live on the closing timeout. */
	if (dir == CT_DIR_ORIG && state >= CT_CLOSING &&
	    (l4->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK | TCP_FLAG_FIN)) == TCP_FLAG_SYN)
		return CT_NEW;
	if (l4->tcp_flags & TCP_FLAG_FIN)
		return state == CT_CLOSING ? CT_CLOSED : CT_CLOSING;
	if (state == CT_NEW && dir == CT_DIR_REPLY && (l4->tcp_flags & TCP_FLAG_ACK))
		return CT_ESTABLISHED;
	return state;
}

/* ct_nat_mirror is the partner entry's translation of a flow whose entry
 * translates nat (SNAT one way is DNAT back; both and none are their own). */
static __always_inline __u8 ct_nat_mirror(__u8 nat)
{
	return ((nat & CT_NAT_SRC) << 1) | ((nat & CT_NAT_DST) >> 1);
}

/*
 * ct_hit accounts a packet of len bytes to entry v (found under key k) and
 * moves the flow's state and deadline, in both entries. Returns -1, having
 * changed nothing, when v's partner is gone or is not v's partner: the GC
 * deleted it between reading it expired and a packet reviving the flow
 * (a client reusing its port), and another flow may have taken its key
 * since. The caller deletes k and handles the packet as a new flow;
 * otherwise the flow would stay half-translated until it expired.
 */
static __always_inline int ct_hit(const struct ct_key *k, struct ct_val *v, const struct l4 *l4,
				  __u32 len)
{
	struct ct_key pk = {};
	struct ct_val *pv;
	__u64 now = bpf_ktime_get_ns();
	__u8 state;

	ct_partner(k, v, &pk);
	pv = bpf_map_lookup_elem(&xlane_ct, &pk);
	if (!pv || pv->dir == v->dir || pv->nat != ct_nat_mirror(v->nat))
		return -1;
	__sync_fetch_and_add(&v->packets, 1);
	__sync_fetch_and_add(&v->bytes, len);
	state = ct_next_state(v->state, v->dir, l4);
	mon_flow_state(k, v->state, state);
	v->state = state;
	v->expires = now + ct_timeout(l4->proto, state);
	pv->state = state;
	pv->expires = v->expires;
	return 0;
}

/*
 * ct_reopens says whether l4, a packet found under entry v, opens a new
 * connection on the tuple of a finished one: a bare SYN from the flow's
 * originator while the flow is closing or closed (FIN or RST seen; the
 * client reused its port). Linux's conntrack kills such an entry and
 * handles the SYN as new (nf_conntrack_proto_tcp.c, SYN in TIME_WAIT or
 * CLOSE); so does xlane: the new connection gets a backend, a NAT port and
 * firewall rules of its own, never the old flow's translation (to a
 * backend since removed, of a service since deleted).
 */
static __always_inline int ct_reopens(const struct ct_val *v, const struct l4 *l4)
{
	return l4->proto == IPPROTO_TCP && v->dir == CT_DIR_ORIG && v->state >= CT_CLOSING &&
	       (l4->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK | TCP_FLAG_FIN | TCP_FLAG_RST)) ==
		       TCP_FLAG_SYN;
}

/* The two values and the partner key of a flow being created: 184 bytes
 * that would not fit the 512-byte BPF stack beside the rest. */
struct ct_scratch {
	struct ct_val orig;
	struct ct_val reply;
	struct ct_key rk;
	struct publish_key pk; /* ct_dnat_target's, before the flow's */
	/* ct_create_ports' (lib/ct_nat.h): when it started, the first port
	 * whose flow was past its deadline, and that flow's other key. */
	__u64 now;
	__u16 stale_port;
	struct ct_key stale_pk;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct ct_scratch);
	__uint(max_entries, 1);
} xlane_ct_scratch SEC(".maps");

/* ct_scratch_get returns this CPU's zeroed scratch. */
static __always_inline struct ct_scratch *ct_scratch_get(void)
{
	__u32 zero = 0;
	struct ct_scratch *sc = bpf_map_lookup_elem(&xlane_ct_scratch, &zero);

	if (sc)
		__builtin_memset(sc, 0, sizeof(*sc));
	return sc;
}

/*
 * ct_forget deletes the flow of entry v (found under k, the original
 * direction's): its partner, if that is v's, then k. A flow whose source
 * was translated (CT_NAT_SRC: masquerade, a remapped port; CT_NAT_BOTH: a
 * reply-tuple clash, a hairpin) keeps its reply entry until the GC takes
 * it, as any closed flow does: its translated tuple (the new source,
 * the destination) is the far end's TIME_WAIT socket (which the GC holds
 * a shared backend's over, internal/datapath/cthold.go); freed now, the
 * next flow to take that port towards that end would meet the TIME_WAIT
 * with sequence numbers computed for another connection. The new flow
 * takes another port. The partner key is made in this CPU's scratch
 * (free until the packet's new flow is made), not on the stack: the
 * combined stack of the XDP endpoint program's calls is at 6.1's 512-byte
 * limit (a 40-byte key, or a BPF-to-BPF call's 32-byte minimum frame,
 * made it 576).
 */
static __always_inline void ct_forget(const struct ct_key *k, const struct ct_val *v)
{
	struct ct_scratch *sc;
	struct ct_val *pv;

	if (!(v->nat & CT_NAT_SRC)) {
		sc = ct_scratch_get();
		if (sc) {
			ct_partner(k, v, &sc->rk);
			pv = bpf_map_lookup_elem(&xlane_ct, &sc->rk);
			if (pv && pv->dir != v->dir && pv->nat == ct_nat_mirror(v->nat))
				bpf_map_delete_elem(&xlane_ct, &sc->rk);
		}
	}
	bpf_map_delete_elem(&xlane_ct, k);
}

/*
 * ct_refresh accounts the packet to v, the entry found under k (NULL:
 * none), and returns it; or returns NULL, the packet starting a flow
 * over, when v's flow is finished and the packet reopens its tuple
 * (ct_reopens: both entries deleted) or v is half a flow (ct_hit: v
 * deleted). The one place a finished or half flow is forgotten.
 */
static __always_inline struct ct_val *ct_refresh(const struct ct_key *k, struct ct_val *v,
						 const struct l4 *l4, __u32 len)
{
	if (!v)
		return v;
	if (ct_reopens(v, l4)) {
		ct_forget(k, v);
		return 0;
	}
	if (!ct_hit(k, v, l4, len))
		return v;
	bpf_map_delete_elem(&xlane_ct, k);
	return 0;
}

/*
 * ct_reclaim deletes the flow of entry k if it is still past its deadline
 * at now (a flow idle past its timeout, or closed for 10 s, that the GC
 * has not collected yet: its grace period, its interval, the TIME_WAIT
 * hold of a shared backend's flows, internal/datapath/cthold.go), as the
 * GC would: its partner (key made in pk) if that
 * is its partner and past its deadline too, then k. Returns 0 if k is
 * gone, -1 if the flow came back to life meanwhile (a packet moved its
 * deadline) and was left alone. No flow_close event is sent for it: a
 * TCP flow sent its own when it closed (mon_flow_state); an idle one is
 * forgotten as quietly as the programs forget a half flow.
 */
static __always_inline int ct_reclaim(const struct ct_key *k, struct ct_key *pk, __u64 now)
{
	struct ct_val *v = bpf_map_lookup_elem(&xlane_ct, k);
	struct ct_val *pv;

	if (!v || v->expires >= now)
		return -1;
	ct_partner(k, v, pk);
	pv = bpf_map_lookup_elem(&xlane_ct, pk);
	if (pv && pv->dir != v->dir && pv->nat == ct_nat_mirror(v->nat)) {
		if (pv->expires >= now)
			return -1;
		bpf_map_delete_elem(&xlane_ct, pk);
	}
	bpf_map_delete_elem(&xlane_ct, k);
	return 0;
}

/* ct_seq_bump counts a creation in xlane_ct_seq, after its inserts: what
 * a reader found missing before may be there now (fw_lin.h). */
static __always_inline void ct_seq_bump(void)
{
	__u32 zero = 0;
	__u64 *s = bpf_map_lookup_elem(&xlane_ct_seq, &zero);

	if (s)
		__sync_fetch_and_add(s, 1);
}

/*
 * ct_create inserts both entries of a new flow seen in direction ORIG with
 * key k: sc->orig is what to do to ORIG packets, sc->reply its partner's
 * value (nat fields filled in by the caller). Returns 0, -EEXIST when the
 * reply key is taken (the caller tries another NAT port), or another
 * negative error (-E2BIG: the table is full).
 */
static __always_inline int ct_create(const struct ct_key *k, struct ct_scratch *sc,
				     const struct l4 *l4, __u32 len)
{
	__u64 now = bpf_ktime_get_ns();
	/* int, not long: before 6.4 the map update helpers return an int
	 * that reaches the program zero-extended (-EEXIST read as a long
	 * is 4294967279 on 6.1; found by the 6.1 leg of the matrix). */
	int err;

	/* The packet that opens the flow is the entry's first. */
	sc->orig.packets = 1;
	sc->orig.bytes = len;
	sc->orig.dir = CT_DIR_ORIG;
	sc->reply.dir = CT_DIR_REPLY;
	sc->orig.state = sc->reply.state = CT_NEW;
	sc->orig.expires = sc->reply.expires = now + ct_timeout(l4->proto, CT_NEW);
	ct_partner(k, &sc->orig, &sc->rk);
	err = bpf_map_update_elem(&xlane_ct, &sc->rk, &sc->reply, BPF_NOEXIST);
	if (err)
		return err;
	err = bpf_map_update_elem(&xlane_ct, k, &sc->orig, BPF_NOEXIST);
	if (err)
		bpf_map_delete_elem(&xlane_ct, &sc->rk);
	ct_seq_bump();
	mon_flow_new(err, k, &sc->orig);
	return err;
}

#endif /* XLANE_CT_H */
