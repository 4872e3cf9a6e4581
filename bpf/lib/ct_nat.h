/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * ct_nat.h - the NAT of conntrack entries in the tc programs: translate a
 * packet as its flow's entry says, or create the entries of a new flow
 * (DNAT to a published port or a service backend, masquerade towards the
 * uplink, a source port remapped when the reply tuple is taken).
 */
#ifndef XLANE_CT_NAT_H
#define XLANE_CT_NAT_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "abi.h"
#include "maps.h"
#include "parse.h"
#include "l4.h"
#include "ct.h"
#include "nat.h"
#include "lb.h"
#include "publish.h"
#include "overlay.h"
#include "stage.h"
#include "reply.h"

/* How many ports ct_create_ports tries (each a lookup; random draws, so
 * a range f full fails f^NAT_PORT_TRIES of its flows: 0.94^64 = 2 %,
 * 0.03 % over a range filling to 94 %). */
#define NAT_PORT_TRIES 64

#ifndef EEXIST
#define EEXIST 17 /* asm-generic/errno-base.h */
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

/* node_addr returns the node's masquerade address of p's family, or NULL. */
static __always_inline const __u8 *node_addr(const struct xl_config *cfg, const struct pkt *p)
{
	const __u8 *a = p->ip4 ? cfg->uplink_v4 : cfg->uplink_v6;

	return key_is_zero(a) ? 0 : a;
}

/* cluster_addr returns this node's cluster address of p's family (the
 * source of an outside flow to another node's pod), or NULL. */
static __always_inline const __u8 *cluster_addr(const struct xl_config *cfg, const struct pkt *p)
{
	const __u8 *a = p->ip4 ? cfg->cluster_v4 : cfg->cluster_v6;

	return key_is_zero(a) ? 0 : a;
}

/* Re-read the headers after a rewrite moved or invalidated them. Straight
 * into p, no copy on this frame (the tc pipeline's chain of calls is at
 * 6.1's 512-byte stack limit): on failure the packet is dropped, and p
 * with it. */
static __always_inline int tc_reparse(struct __sk_buff *skb, struct pkt *p, struct l4 *l4)
{
	__builtin_memset(p, 0, sizeof(*p));
	if (parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, p) != PARSE_OK)
		return -1;
	if (parse_l4_skb(skb, l4) != L4_OK)
		return -1;
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
static __always_inline enum xl_step ct_translate(struct __sk_buff *skb, struct pkt *p,
						 struct l4 *l4, const struct ct_val *v,
						 enum xl_reason *reason)
{
	if (v->nat == CT_NAT_NONE)
		return XL_CONTINUE;
	if (ct_nat_apply(skb, p, l4, v))
		return xl_final(reason, XL_DROP_MALFORMED);
	return XL_CONTINUE;
}

/* The port ranges ct_create_ports draws from, as min << 16 | max. */
static __always_inline __u32 nat_ports(const struct xl_config *cfg)
{
	return (__u32)cfg->nat_port_min << 16 | cfg->nat_port_max;
}

static __always_inline __u32 clash_ports(const struct xl_config *cfg)
{
	return (__u32)cfg->clash_port_min << 16 | cfg->clash_port_max;
}

/* ct_set_nat_port sets the port a new flow's source is translated to. */
static __always_inline void ct_set_nat_port(struct ct_scratch *sc, __u16 port)
{
	if (sc->orig.nat == CT_NAT_BOTH)
		sc->orig.nat_sport = port;
	else
		sc->orig.nat_port = port;
}

/*
 * ct_create_ports creates a flow's entries with a free port of ports
 * (min << 16 | max): the original direction's nat_port (CT_NAT_SRC) or
 * nat_sport (CT_NAT_BOTH). Ports come from --nat-ports (nat_ports: the
 * node's address, outside its ip_local_port_range) or, for a reply-tuple
 * clash that keeps the client's address and for the cluster address,
 * from the wide clash range (clash_ports).
 *
 * A port is free when no entry has the reply key it makes. Up to
 * NAT_PORT_TRIES ports are tried, each drawn at random: probes that walk
 * on from one random start (port + 1, as before) meet the runs of taken
 * ports that the walk itself builds (a linear-probing hash table's
 * clustering), and a range filling up in a burst of connections refused
 * far more of them than its fill alone would (bench/peers' NodePort row:
 * 11.7 % at 12,140 conn/s). When none of them is free, the first whose
 * entry is past its deadline is taken: its flow (a closed one kept 10 s,
 * then the GC's grace and interval; one to a shared backend, held for its
 * TIME_WAIT) is deleted as the GC would delete it (ct_reclaim), as
 * Linux's NAT treats an expired conntrack entry's tuple as free. Free
 * ports come first so that such holds last while the range has room: a
 * tuple taken over within the far end's TIME_WAIT (60 s, when it closed
 * first) may have its SYN refused as an old duplicate, and the client's
 * retransmission reopens the flow on another port (ct_forget), a second
 * later; refused outright is what the alternative is.
 *
 * Returns ct_create's result: -EEXIST when no port was free or stale (or
 * the one found was taken meanwhile by another CPU).
 */
static __noinline int ct_create_ports(const struct ct_key *k, struct ct_scratch *sc,
				      const struct l4 *l4, __u32 len, __u32 ports)
{
	__u32 min = ports >> 16, max = ports & 0xffff;
	const struct ct_val *v;
	__u32 range;
	__u16 port = 0;
	int i;

	if (max < min || !min) /* no range configured */
		return -EEXIST;
	range = max - min + 1;
	sc->now = bpf_ktime_get_ns();
	sc->stale_port = 0;
	/* The reply key once; each try changes only its port (where
	 * ct_partner puts the new source port: dport; an echo key's
	 * identifier, sport), so the loop has no branch of ct_partner's to
	 * verify 64 times over (6.1's verifier ran out of its million
	 * instructions with ct_partner in a loop of 64). */
	ct_partner(k, &sc->orig, &sc->rk);
	for (i = 0; i < NAT_PORT_TRIES; i++) {
		port = bpf_htons(min + bpf_get_prandom_u32() % range);
		if (k->proto == IPPROTO_ICMP || k->proto == IPPROTO_ICMPV6)
			sc->rk.sport = port;
		else
			sc->rk.dport = port;
		v = bpf_map_lookup_elem(&xlane_ct, &sc->rk);
		if (!v)
			break;
		if (!sc->stale_port && v->expires < sc->now)
			sc->stale_port = port;
		port = 0;
	}
	if (!port) {
		port = sc->stale_port;
		if (!port)
			return -EEXIST;
		ct_set_nat_port(sc, port);
		ct_partner(k, &sc->orig, &sc->rk);
		if (ct_reclaim(&sc->rk, &sc->stale_pk, sc->now))
			return -EEXIST;
	}
	ct_set_nat_port(sc, port);
	return ct_create(k, sc, l4, len);
}

/* ct_dnat_target finds where a new flow's destination translates to: a
 * published port (lib/publish.h: on the destination alone, or on every
 * node address), or a service VIP's backend (a VIP may be the node's
 * address too: Kubernetes' NodePorts; a published port comes first).
 * Returns 1 with *to filled, 0 if neither, -1 for a VIP without
 * backends. sc: this CPU's zeroed ct scratch (its pk is written). */
static __always_inline int ct_dnat_target(const struct pkt *p, const struct l4 *l4,
					  const struct ct_key *k, const struct xl_config *cfg,
					  struct ct_scratch *sc, struct backend_val *to)
{
	const __u8 *na = node_addr(cfg, p);

	/* The key in this CPU's scratch (sc), not on the stack: the tc
	 * pipeline's chain of calls is at the 512-byte limit. */
	if (!l4->icmp_echo) {
		const struct publish_val *pv;

		sc->pk.port = l4->dport;
		sc->pk.proto = l4->proto;
		sc->pk.family = p->ip4 ? 4 : 6;
		pv = publish_find(&sc->pk, k->daddr, na && addr_eq(k->daddr, na));
		if (pv) {
			__builtin_memcpy(to->addr, pv->addr, 16);
			to->port = pv->port;
			return 1;
		}
	}
	return lb_target(k, k->saddr, l4, to);
}

/*
 * ct_no_backend ends a new flow to a VIP without backends:
 * XL_DROP_NO_BACKEND, final. The pipeline answers it (ct_no_backend_answer)
 * after the stage returns, not here: reply.h's frames below the conntrack
 * stage's pass 6.1's 512-byte bound on a call chain's stack (it rounds
 * each frame up to 32 bytes: 544 in xlane_from_endpoint).
 */
static __always_inline enum xl_step ct_no_backend(enum xl_reason *reason)
{
	return xl_final(reason, XL_DROP_NO_BACKEND);
}

/*
 * ct_no_backend_answer answers a flow ct_no_backend ended as kube-proxy
 * does (a TCP RST, an ICMP port unreachable for the rest, lib/reply.h,
 * back out of the device it came in by: to the endpoint, or out of the
 * uplink) where the node says so (XL_CFG_NO_BACKEND_REJECT), else leaves
 * it dropped; XL_DROP_NO_BACKEND either way (answered: XL_REPLIED; over
 * reply.h's rate, dropped). Any other step is returned as it is. The
 * packet is rewritten: the caller's pointers into it are stale.
 */
static __always_inline enum xl_step ct_no_backend_answer(struct __sk_buff *skb, enum xl_step step,
							 enum xl_reason reason)
{
	const struct xl_config *cfg;

	if (step != XL_FINAL || reason != XL_DROP_NO_BACKEND)
		return step;
	cfg = xl_config();
	if (cfg && (cfg->flags & XL_CFG_NO_BACKEND_REJECT) && !reply_skb(skb, 0))
		return XL_REPLIED;
	return step;
}

/*
 * ct_publish creates a DNAT flow if p is addressed to a published port or
 * a service VIP. Returns XL_CONTINUE, with *dnat 1 if it did (p
 * translated) and 0 if p is for neither, or a final step (a VIP without
 * backends, ct_no_backend; no entry or port to be had).
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
 *   free one of the clash range (1024-65535), the address kept.
 * - from off the node (outside: the uplink's program, a constant that
 *   prunes the case from the endpoint programs) to another node's pod (a
 *   NodePort or external VIP whose Maglev pick is a peer's backend,
 *   Kubernetes' externalTrafficPolicy Cluster): the source becomes this
 *   node's cluster address (cluster_addr) and a port of the wide clash
 *   range (no socket of the node has that address: --nat-ports' 4,536
 *   ports, each held 10 s after a close, refused half the connections of
 *   bench/peers' NodePort row), so the backend answers this node, over the overlay or natively
 *   routed, where the reply entry translates it back. A local backend
 *   keeps the client's address (what externalTrafficPolicy Local, whose
 *   services have local backends only, needs).
 * No free port (or no cluster address of the family): pass_nat_ports,
 * the packet goes to Linux untranslated.
 */
static __always_inline enum xl_step ct_publish(struct __sk_buff *skb, struct pkt *p, struct l4 *l4,
					       const struct ct_key *k, const struct xl_config *cfg,
					       int outside, int *dnat, enum xl_reason *reason)
{
	struct backend_val to = {};
	struct ct_scratch *sc;
	const __u8 *src;
	__u32 ports;
	int err;
	int rc;

	*dnat = 0;
	sc = ct_scratch_get();
	if (!sc)
		return xl_final(reason, XL_PASS_CT_FULL);
	rc = ct_dnat_target(p, l4, k, cfg, sc, &to);
	if (rc < 0)
		return ct_no_backend(reason);
	if (rc == 0)
		return XL_CONTINUE;
	sc->orig.nat = CT_NAT_DST;
	__builtin_memcpy(sc->orig.nat_addr, to.addr, 16);
	sc->orig.nat_port = to.port;
	sc->reply.nat = CT_NAT_SRC;
	__builtin_memcpy(sc->reply.nat_addr, k->daddr, 16);
	sc->reply.nat_port = k->dport;
	src = k->saddr;
	ports = clash_ports(cfg);
	if (addr_eq(to.addr, k->saddr)) {
		src = node_addr(cfg, p); /* hairpin */
		ports = nat_ports(cfg);
		err = -EEXIST;
	} else if (outside && peer_remote((const struct endpoint_key *)to.addr)) {
		/* To another node's pod: from the cluster address, which no
		 * socket of the node has (it is no address of the node's), so
		 * its ports are the wide range, not --nat-ports. */
		src = cluster_addr(cfg, p);
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
		err = ct_create_ports(k, sc, l4, skb->len, ports);
	}
	if (err)
		return xl_final(reason, err == -EEXIST ? XL_PASS_NAT_PORTS : XL_PASS_CT_FULL);
	if (ct_nat_apply(skb, p, l4, &sc->orig))
		return xl_final(reason, XL_DROP_MALFORMED);
	*dnat = 1;
	return XL_CONTINUE;
}

/* ct_masquerade creates a source-NAT flow from address na (the node's; or
 * the sender's own, to remap only the port of a flow whose reply tuple is
 * taken) and a free port (ICMP: identifier) of the configured range. */
static __always_inline enum xl_step ct_masquerade(struct __sk_buff *skb, struct pkt *p,
						  struct l4 *l4, const struct ct_key *k,
						  const struct xl_config *cfg, const __u8 *na,
						  enum xl_reason *reason)
{
	struct ct_scratch *sc;
	int err;

	sc = ct_scratch_get();
	if (!na || !sc)
		return xl_final(reason, XL_PASS_NAT_PORTS);
	sc->orig.nat = CT_NAT_SRC;
	__builtin_memcpy(sc->orig.nat_addr, na, 16);
	sc->reply.nat = CT_NAT_DST;
	__builtin_memcpy(sc->reply.nat_addr, k->saddr, 16);
	sc->reply.nat_port = k->sport;
	err = ct_create_ports(k, sc, l4, skb->len,
			      addr_eq(na, k->saddr) ? clash_ports(cfg) : nat_ports(cfg));
	if (err)
		return xl_final(reason, err == -EEXIST ? XL_PASS_NAT_PORTS : XL_PASS_CT_FULL);
	if (ct_nat_apply(skb, p, l4, &sc->orig))
		return xl_final(reason, XL_DROP_MALFORMED);
	return XL_CONTINUE;
}

#endif /* XLANE_CT_NAT_H */
