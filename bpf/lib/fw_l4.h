/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * fw_l4.h - L4 facts as the firewall and the DDoS stage need them: the
 * upper-layer header found through IPv6 extension headers, its ports or
 * ICMP type and code, and for an ICMP error the flow it quotes.
 */
#ifndef XLANE_FW_L4_H
#define XLANE_FW_L4_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_endian.h>
#include "abi.h"
#include "parse.h"
#include "l4.h"

/* L4 facts, found through IPv6 extension headers. */
struct fw_l4 {
	__u32 sport;	/* class index: host-order port, ICMP code,
			 * or FW_NO_L4 */
	__u32 dport;	/* ... ICMP type */
	__u16 ct_sport; /* network order, as conntrack keys it */
	__u16 ct_dport;
	__u8 proto;	/* upper-layer protocol */
	__u8 flags;	/* TCP flags byte */
	__u8 trackable; /* conntrack keys this packet (lib/l4.h) */
	__u8 related;	/* ICMP error: rk holds the reversed inner flow */
	__u32 l4_off;	/* offset of the L4 header */
	__u8 malformed; /* TCP/UDP header cut short or lying about its
			 * length (l4_hdr_check): endpoint hooks drop it */
};

#define FW_EXT_MAX 4	  /* IPv6 extension headers walked */
#define FW_L4_OFF_MAX 256 /* L4 header beyond this: no L4 facts */

#define IPPROTO_HOPOPTS_ 0
#define IPPROTO_ROUTING_ 43
#define IPPROTO_FRAGMENT_ 44
#define IPPROTO_AH_ 51
#define IPPROTO_DSTOPTS_ 60

/*
 * fw_related fills rk with the flow an ICMP error is about, as conntrack
 * keys the direction the error travels: the reverse of the quoted packet.
 * Returns 0 when the quote is complete enough to look up.
 */
static __always_inline int fw_related(void *data, void *data_end, const struct pkt *p, __u32 off,
				      struct ct_key *rk)
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
 * leaves the ports at FW_NO_L4: only rules without ports match then. A
 * TCP/UDP header the packet cuts short or whose length fields lie
 * (l4_hdr_check: a tiny first fragment, RFC 1858) sets l4->malformed.
 */
static __always_inline void fw_parse_l4(void *data, void *data_end, const struct pkt *p,
					struct fw_l4 *l4, struct ct_key *rk)
{
	__u32 off, plen = L4_LEN_UNKNOWN; /* IP payload bytes, from the L3 header */
	__u8 *h;
	int exts = 0, frag = 0;

	l4->sport = l4->dport = FW_NO_L4;
	if (p->ip4) {
		struct iphdr *ip = p->ip4;

		l4->proto = ip->protocol;
		if (ip->frag_off & bpf_htons(0x1fff))
			return; /* non-first fragment: no header */
		frag = !!(ip->frag_off & bpf_htons(0x2000));
		l4->trackable = !frag;
		off = sizeof(struct ethhdr) + (ip->ihl & 0xf) * 4;
		if (ip->tot_len)
			plen = bpf_ntohs(ip->tot_len) + sizeof(struct ethhdr);
	} else if (p->ip6) {
		__u8 nh = p->ip6->nexthdr;

		off = sizeof(struct ethhdr) + sizeof(struct ipv6hdr);
		if (p->ip6->payload_len)
			plen = bpf_ntohs(p->ip6->payload_len) + off;
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
				frag = 1;
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
	/* plen here: the frame offset where the IP payload ends */
	if (l4_hdr_check(l4->proto, h, data_end,
			 plen == L4_LEN_UNKNOWN ? plen
			 : plen > off		? plen - off
						: 0,
			 frag) == L4_MALFORMED) {
		l4->malformed = 1;
		return;
	}
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
		l4->dport = h[0]; /* type */
		l4->sport = h[1]; /* code */
		if ((l4->proto == IPPROTO_ICMP) != (p->ip4 != 0)) {
			l4->trackable = 0;
			return;
		}
		if (l4->proto == IPPROTO_ICMP
			    ? (h[0] == ICMP_ECHO || h[0] == ICMP_ECHOREPLY)
			    : (h[0] == ICMPV6_ECHO_REQ || h[0] == ICMPV6_ECHO_REP)) {
			__builtin_memcpy(&l4->ct_sport, h + 4, 2);
			l4->ct_dport = 0;
			return;
		}
		l4->trackable = 0;
		if (icmp_is_error(l4->proto, h[0]) && !fw_related(data, data_end, p, off + 8, rk))
			l4->related = 1;
		return;
	}
	l4->trackable = 0;
}

#endif /* XLANE_FW_L4_H */
