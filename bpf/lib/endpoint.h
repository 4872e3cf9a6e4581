/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * endpoint.h - the stages every "from endpoint" program runs, whatever its
 * hook (tcx or XDP): turn the parse result into a verdict, check the source
 * belongs to the sending endpoint, hand link-scope and expiring packets to
 * Linux, and find a local destination endpoint.
 */
#ifndef XLANE_ENDPOINT_H
#define XLANE_ENDPOINT_H

#include "abi.h"
#include "maps.h"
#include "parse.h"
#include "csum.h"
#include "stage.h"

/* ep_parsed is the parse stage: parse_l3's result as a step. */
static __always_inline enum xl_step ep_parsed(enum parse_result r, enum xl_reason *reason)
{
	switch (r) {
	case PARSE_OK:
		return XL_CONTINUE;
	case PARSE_NON_IP:
		return xl_final(reason, XL_PASS_NON_IP);
	case PARSE_VLAN:
		/* Endpoints are untagged links: forwarding the inner
		 * packet would hand another container the VLAN's traffic. */
		return xl_final(reason, XL_DROP_VLAN);
	default:
		return xl_final(reason, XL_DROP_MALFORMED);
	}
}

/*
 * ep_mac_spoofed says whether a frame's source MAC is not the endpoint's.
 * The MAC is part of the endpoint's identity as much as its address: a
 * container forging another's would pass that one's src_mac firewall
 * rules. An endpoint without a MAC (netkit in L3 mode: all zeros in the
 * map) has nothing to check.
 */
static __always_inline int ep_mac_spoofed(const struct pkt *p, const struct endpoint_val *ep)
{
	const __u8 *m = ep->mac, *h = p->eth->h_source;

	/* Word loads, no stack copies: the tc pipeline's frames are at
	 * 6.1's 512-byte limit. */
	if (!*(const __u32 *)m && !*(const __u16 *)(m + 4))
		return 0;
	return *(const __u32 *)m != *(const __u32 *)h ||
	       *(const __u16 *)(m + 4) != *(const __u16 *)(h + 4);
}

/*
 * ep_admit checks a parsed packet sent by the endpoint behind ifindex.
 * Anti-spoofing: the source must be one of the endpoint's addresses, sent
 * from its MAC; only the unspecified and link-local sources (DHCP, DAD,
 * ND) are exempt and go to Linux. Link-scope destinations and packets
 * whose TTL would expire go to Linux too (it answers ND/ARP and sends ICMP
 * time exceeded). *srcp is the sender's entry (set whatever the step;
 * not NULL when the packet continues): later stages need not look it up
 * again.
 */
static __always_inline enum xl_step ep_admit(const struct pkt *p, __u32 ifindex,
					     struct endpoint_val **srcp, enum xl_reason *reason)
{
	struct endpoint_val *src;

	src = bpf_map_lookup_elem(&xlane_endpoints, &p->src);
	*srcp = src;
	if (!src || src->ifindex != ifindex) {
		if (addr_is_src_exempt(&p->src))
			return xl_final(reason, XL_PASS_LINK_LOCAL);
		return xl_final(reason, XL_DROP_SPOOFED);
	}
	if (ep_mac_spoofed(p, src))
		return xl_final(reason, XL_DROP_SPOOFED);
	if (addr_is_link_scope(&p->dst))
		return xl_final(reason, XL_PASS_LINK_LOCAL);
	if (p->ttl <= 1)
		return xl_final(reason, XL_PASS_TTL);
	return XL_CONTINUE;
}

/* ep_local returns the endpoint that owns the destination, if local. */
static __always_inline struct endpoint_val *ep_local(const struct pkt *p)
{
	return bpf_map_lookup_elem(&xlane_endpoints, &p->dst);
}

/*
 * ep_apart says whether network policy keeps src from reaching dst, two
 * local endpoints: a network with ICC off (XL_EP_NO_ICC, on every endpoint
 * of the network) keeps its endpoints apart; an isolated network
 * (XL_EP_ISOLATED) keeps its endpoints and those of every other network
 * apart. Stateless and symmetric, so replies are judged as requests are.
 * Every hook that hands a packet from one endpoint to another calls it: the
 * from-endpoint programs before a local delivery, the to-endpoint programs
 * for what Linux delivers; a published port's flow is not asked (see
 * ep_is_node).
 */
static __always_inline enum xl_step ep_apart(const struct endpoint_val *src,
					     const struct endpoint_val *dst, enum xl_reason *reason)
{
	__u16 f = src->flags | dst->flags;

	if (!(f & (XL_EP_NO_ICC | XL_EP_ISOLATED)))
		return XL_CONTINUE;
	if (src->network_id != dst->network_id) {
		if (!(f & XL_EP_ISOLATED))
			return XL_CONTINUE;
		return xl_final(reason, XL_DROP_ISOLATED);
	}
	if (!(f & XL_EP_NO_ICC) || src->ifindex == dst->ifindex)
		return XL_CONTINUE;
	return xl_final(reason, XL_DROP_ICC);
}

/*
 * ep_is_node says whether a is the node's address of its family (the
 * uplink's, where ports are published). A packet of a published port's
 * flow has it on its outer side: the destination before the DNAT, the
 * source after the reply's translation. Nothing else between two
 * endpoints does (ep_admit holds senders to their own addresses), so it
 * marks what passes the policy as Docker's userland proxy relays it.
 */
static __always_inline int ep_is_node(const struct xl_config *cfg, const struct endpoint_key *a)
{
	const __u8 *na = a->addr[10] == 0xff ? cfg->uplink_v4 : cfg->uplink_v6;
	__u64 a0, a1, n0, n1;

	__builtin_memcpy(&a0, a->addr, 8);
	__builtin_memcpy(&a1, a->addr + 8, 8);
	__builtin_memcpy(&n0, na, 8);
	__builtin_memcpy(&n1, na + 8, 8);
	return (n0 || n1) && a0 == n0 && a1 == n1;
}

/* ep_forward_l3 does what a router does to a packet it forwards: TTL or hop
 * limit down by one (with the IPv4 header checksum patched). */
static __always_inline void ep_forward_l3(struct pkt *p)
{
	if (p->ip4)
		ipv4_dec_ttl(p->ip4);
	else if (p->ip6)
		ipv6_dec_hoplimit(p->ip6);
}

#endif /* XLANE_ENDPOINT_H */
