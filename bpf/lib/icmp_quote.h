/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * icmp_quote.h - the one parser of the packet an ICMP error quotes: the
 * flow the error is about, as conntrack keys it (conntrack's NAT of
 * errors, the firewall's "related", the unsolicited check).
 */
#ifndef XLANE_ICMP_QUOTE_H
#define XLANE_ICMP_QUOTE_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_endian.h>
#include "abi.h"
#include "parse.h"
#include "l4.h"

/* Linear bytes a quote's flow is read from: its L4 header ends by then. */
#define ICMP_QUOTE_PULL (L4_OFF_MAX + 8)

/*
 * icmp_quote parses the packet quoted at data + qoff by an ICMP error
 * (of family v4, or IPv6) and fills rk with the flow the error travels
 * in: the quote reversed, as conntrack keys that direction (TCP and UDP
 * by ports, an ICMP echo by identifier). IPv4 options and IPv6 extension
 * headers (lib/l4.h's walk) are skipped. Returns the offset of the quoted
 * L4 header from data (its 8 bytes are there), or -1 when the quote is
 * no flow conntrack could know: another protocol, a non-first fragment,
 * cut short before its ports.
 */
static __always_inline int icmp_quote(void *data, void *data_end, __u32 qoff, int v4,
				      struct ct_key *rk)
{
	__u32 off, avail = L4_LEN_UNKNOWN;
	__u8 *q, *h, nh, frag = 0;

	__builtin_memset(rk, 0, sizeof(*rk));
	if (qoff > L4_OFF_MAX)
		return -1;
	/* Bounded as the verifier sees it, whatever register clang compared:
	 * 6.1 tracks no bound across an offset copy, and a packet pointer
	 * offset that may pass 64 KiB gets no range. */
	barrier_var(qoff);
	qoff &= 2 * L4_OFF_MAX - 1;
	q = data + qoff;
	if (v4) {
		struct iphdr *ip = (void *)q;

		if ((void *)(ip + 1) > data_end || ip->version != 4 || ip->ihl < 5 ||
		    (ip->frag_off & bpf_htons(0x1fff)))
			return -1;
		key_from_ipv4((struct endpoint_key *)rk->saddr, ip->daddr);
		key_from_ipv4((struct endpoint_key *)rk->daddr, ip->saddr);
		nh = ip->protocol;
		off = qoff + ip->ihl * 4;
	} else {
		struct ipv6hdr *ip6 = (void *)q;

		if ((void *)(ip6 + 1) > data_end || ip6->version != 6)
			return -1;
		__builtin_memcpy(rk->saddr, &ip6->daddr, 16);
		__builtin_memcpy(rk->daddr, &ip6->saddr, 16);
		nh = ip6->nexthdr;
		off = qoff + sizeof(*ip6);
		if (ipv6_ext_walk(data, data_end, &off, &nh, &avail, &frag) != L4_OK)
			return -1;
	}
	if (off > L4_OFF_MAX)
		return -1;
	h = data + off;
	if ((void *)(h + 8) > data_end)
		return -1;
	rk->proto = nh;
	switch (nh) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
		__builtin_memcpy(&rk->sport, h + 2, 2);
		__builtin_memcpy(&rk->dport, h, 2);
		return off;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		/* An echo of ours: its entries are keyed by identifier. */
		if ((nh == IPPROTO_ICMP) != (v4 != 0) ||
		    (v4 ? (h[0] != ICMP_ECHO && h[0] != ICMP_ECHOREPLY)
			: (h[0] != ICMPV6_ECHO_REQ && h[0] != ICMPV6_ECHO_REP)))
			return -1;
		__builtin_memcpy(&rk->sport, h + 4, 2);
		return off;
	}
	return -1;
}

#endif /* XLANE_ICMP_QUOTE_H */
