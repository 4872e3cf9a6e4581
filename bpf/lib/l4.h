/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* l4.h - the one L4 parser: the transport header facts of a packet, found
 * through IPv6 extension headers, for every stage that needs them. */
#ifndef XLANE_L4_H
#define XLANE_L4_H

#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "parse.h"

/* From linux/icmp.h and linux/icmpv6.h, which pull in libc headers. */
#ifndef IPPROTO_ICMPV6
#define IPPROTO_ICMPV6 58
#endif
#define ICMP_ECHOREPLY 0
#define ICMP_ECHO 8
#define ICMPV6_ECHO_REQ 128
#define ICMPV6_ECHO_REP 129

/* Bytes the tc programs pull into the linear area before parsing L4:
 * Ethernet + the largest IPv4 header + a TCP header. */
#define XL_PARSE_L4_LEN (sizeof(struct ethhdr) + 60 + sizeof(struct tcphdr))

struct l4 {
	__u16 off;	/* L4 header offset from the frame start (after any
			 * IPv6 extension headers); 0: not reached */
	__u16 csum_off; /* checksum field offset, 0: none to fix */
	__u16 sport;	/* network order; ICMP echo: identifier */
	__u16 dport;	/* network order; ICMP echo: 0 */
	__u8 proto;	/* upper-layer protocol */
	__u8 tcp_flags; /* TCP: the flags byte */
	__u8 icmp_echo; /* ICMP/ICMPv6 echo request or reply */
	__u8 icmp_type; /* ICMP/ICMPv6: type and code */
	__u8 icmp_code;
	__u8 frag; /* L4_FRAG_FIRST, L4_FRAG_LATER (no L4 header) */
	__u8 hdr;  /* the header was read: ports and flags (TCP, UDP)
		    * or type and code (ICMP), in a first fragment too */
};

#define L4_FRAG_FIRST 1
#define L4_FRAG_LATER 2

enum l4_result {
	L4_OK = 0,
	L4_UNTRACKABLE, /* fragment, other protocol, ICMP but echo,
			 * header out of reach */
	L4_MALFORMED,
};

/* icmp_is_error: an ICMP (proto) error message type that quotes a packet. */
static __always_inline int icmp_is_error(__u8 proto, __u8 type)
{
	if (proto == IPPROTO_ICMP)
		return type == 3 || type == 11 || type == 12;
	return type >= 1 && type <= 4;
}

/* skb_pull_headers makes the first need bytes of skb linear (as far as
 * the packet goes): the one place a tc program pulls headers. */
static __always_inline void skb_pull_headers(struct __sk_buff *skb, __u32 need)
{
	if ((void *)(long)skb->data + need <= (void *)(long)skb->data_end)
		return;
	if (skb->len < need)
		need = skb->len;
	bpf_skb_pull_data(skb, need);
}

/* tc_pull_l4 makes the headers up to L4 linear. */
static __always_inline void tc_pull_l4(struct __sk_buff *skb)
{
	skb_pull_headers(skb, XL_PARSE_L4_LEN);
}

#define TCP_FLAG_FIN 0x01
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_RST 0x04
#define TCP_FLAG_ACK 0x10

/* IP payload length unknown (BIG TCP, jumbograms: the length field is 0). */
#define L4_LEN_UNKNOWN 0xffffffffu

/*
 * l4_hdr_check judges the TCP, UDP or ICMP header at h, avail IP payload
 * bytes long (L4_LEN_UNKNOWN: no length to check against): L4_MALFORMED
 * when it is cut short (a "tiny fragment", RFC 1858: a first fragment too
 * short for the ports or flags hides them from port rules), a TCP data
 * offset is under 5 words or beyond the payload, a UDP length under 8 or,
 * but in a first fragment (frag: the UDP length counts the whole
 * datagram), beyond the payload. L4_UNTRACKABLE when the IP length says
 * the header is there but it is not in [h, data_end) (not in the linear
 * area); L4_OK otherwise, and for every other protocol.
 */
static __always_inline enum l4_result l4_hdr_check(__u8 proto, const __u8 *h, const void *data_end,
						   __u32 avail, int frag)
{
	__u32 n;

	/* Constant bounds per protocol: the verifier tracks a packet
	 * pointer's range by the constant it was checked against. */
	if (proto == IPPROTO_TCP) {
		if (avail < sizeof(struct tcphdr))
			return L4_MALFORMED;
		if ((const void *)(h + sizeof(struct tcphdr)) > data_end)
			return L4_UNTRACKABLE;
		n = (h[12] >> 4) * 4; /* data offset */
		return n < sizeof(struct tcphdr) || n > avail ? L4_MALFORMED : L4_OK;
	}
	if (proto == IPPROTO_UDP) {
		if (avail < sizeof(struct udphdr))
			return L4_MALFORMED;
		if ((const void *)(h + sizeof(struct udphdr)) > data_end)
			return L4_UNTRACKABLE;
		n = h[4] << 8 | h[5]; /* UDP length */
		return n < sizeof(struct udphdr) || (!frag && n > avail) ? L4_MALFORMED : L4_OK;
	}
	if (proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6) {
		if (avail < 8)
			return L4_MALFORMED;
		if ((const void *)(h + 8) > data_end)
			return L4_UNTRACKABLE;
	}
	return L4_OK;
}

#define L4_EXT_MAX 4	   /* IPv6 extension headers walked */
#define L4_OFF_MAX 256	   /* an L4 header beyond this offset: not reached */
#define IPPROTO_HOPOPTS_ 0 /* the extension headers' next-header values */
#define IPPROTO_ROUTING_ 43
#define IPPROTO_FRAGMENT_ 44
#define IPPROTO_AH_ 51
#define IPPROTO_DSTOPTS_ 60

static __always_inline int ipv6_is_ext(__u8 nh)
{
	return nh == IPPROTO_HOPOPTS_ || nh == IPPROTO_ROUTING_ || nh == IPPROTO_FRAGMENT_ ||
	       nh == IPPROTO_AH_ || nh == IPPROTO_DSTOPTS_;
}

/*
 * ipv6_ext_walk skips the IPv6 extension headers from base + *off, whose
 * first is of type *nh, up to L4_EXT_MAX of them (a bounded loop), so a
 * hop-by-hop or destination-options header hides no port from conntrack,
 * NAT or a rule. *avail is the IP payload left from *off (L4_LEN_UNKNOWN:
 * not known, as in an ICMP error's quote); *frag is set by a fragment
 * header. Leaves *off and *nh at the upper-layer header and returns L4_OK;
 * L4_MALFORMED when the payload ends inside the chain (a truncated chain);
 * L4_UNTRACKABLE for a non-first fragment, or a header out of reach
 * (beyond end or L4_OFF_MAX, more than L4_EXT_MAX).
 */
static __always_inline enum l4_result ipv6_ext_walk(const __u8 *base, const void *end, __u32 *off,
						    __u8 *nh, __u32 *avail, __u8 *frag)
{
	const __u8 *h;
	__u32 len;

#pragma unroll
	for (int i = 0; i < L4_EXT_MAX; i++) {
		if (!ipv6_is_ext(*nh))
			return L4_OK;
		if (*avail < 8)
			return L4_MALFORMED;
		if (*off > L4_OFF_MAX)
			return L4_UNTRACKABLE;
		h = base + *off;
		if ((const void *)(h + 8) > end)
			return L4_UNTRACKABLE;
		if (*nh == IPPROTO_FRAGMENT_) {
			*nh = h[0];
			if ((h[2] << 8 | h[3]) & 0xfff8) {
				*frag = L4_FRAG_LATER; /* no upper-layer header */
				return L4_UNTRACKABLE;
			}
			*frag = L4_FRAG_FIRST;
			len = 8;
		} else {
			len = *nh == IPPROTO_AH_ ? (h[1] + 2) * 4 : (h[1] + 1) * 8;
			*nh = h[0];
		}
		if (*avail != L4_LEN_UNKNOWN) {
			if (len > *avail)
				return L4_MALFORMED;
			*avail -= len;
		}
		*off += len;
	}
	return ipv6_is_ext(*nh) ? L4_UNTRACKABLE : L4_OK;
}

/*
 * parse_l4 is the one L4 parser (conntrack, NAT, the load balancer, the
 * firewall, the DDoS and unsolicited checks): it finds p's upper-layer
 * header, through IPv6 extension headers, and fills l4. L4_OK: a flow
 * conntrack keys (TCP, UDP, ICMP echo; not a fragment). L4_UNTRACKABLE:
 * none, but l4 says what is known: a first fragment's ports (frag, hdr),
 * an ICMP error's type (off, hdr: the quote follows, lib/icmp_quote.h), a
 * non-first fragment (frag, no header). L4_MALFORMED: a header cut short
 * or lying about its length (l4_hdr_check), a truncated extension chain.
 * l4 must be zeroed (or hold this packet's earlier parse).
 */
static __always_inline enum l4_result parse_l4(void *data, void *data_end, const struct pkt *p,
					       struct l4 *l4)
{
	__u32 off, avail = L4_LEN_UNKNOWN;
	enum l4_result r;
	__u8 *h;

	if (p->ip4) {
		struct iphdr *ip = p->ip4;

		l4->proto = ip->protocol;
		if (ip->frag_off & bpf_htons(0x1fff)) {
			l4->frag = L4_FRAG_LATER;
			return L4_UNTRACKABLE;
		}
		if (ip->frag_off & bpf_htons(0x2000))
			l4->frag = L4_FRAG_FIRST;
		off = sizeof(struct ethhdr) + ip->ihl * 4;
		/* parse_l3 checked tot_len >= ihl * 4 */
		if (ip->tot_len)
			avail = bpf_ntohs(ip->tot_len) - ip->ihl * 4;
	} else if (p->ip6) {
		__u8 nh = p->ip6->nexthdr;

		off = sizeof(struct ethhdr) + sizeof(struct ipv6hdr);
		if (p->ip6->payload_len)
			avail = bpf_ntohs(p->ip6->payload_len);
		r = ipv6_ext_walk(data, data_end, &off, &nh, &avail, &l4->frag);
		l4->proto = nh;
		if (r != L4_OK)
			return r;
	} else {
		return L4_UNTRACKABLE;
	}
	if (off > L4_OFF_MAX)
		return L4_UNTRACKABLE;
	l4->off = off;
	h = data + off;
	r = l4_hdr_check(l4->proto, h, data_end, avail, l4->frag);
	if (r != L4_OK)
		return r;
	switch (l4->proto) {
	case IPPROTO_TCP:
		if ((void *)(h + sizeof(struct tcphdr)) > data_end)
			return L4_UNTRACKABLE;
		__builtin_memcpy(&l4->sport, h, 2);
		__builtin_memcpy(&l4->dport, h + 2, 2);
		l4->tcp_flags = h[13];
		l4->csum_off = off + 16;
		break;
	case IPPROTO_UDP:
		if ((void *)(h + sizeof(struct udphdr)) > data_end)
			return L4_UNTRACKABLE;
		__builtin_memcpy(&l4->sport, h, 2);
		__builtin_memcpy(&l4->dport, h + 2, 2);
		l4->csum_off = off + 6;
		break;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		if ((void *)(h + 8) > data_end)
			return L4_UNTRACKABLE;
		l4->icmp_type = h[0];
		l4->icmp_code = h[1];
		l4->hdr = 1;
		if ((l4->proto == IPPROTO_ICMP) != (p->ip4 != 0))
			return L4_UNTRACKABLE;
		if (l4->proto == IPPROTO_ICMP
			    ? (h[0] != ICMP_ECHO && h[0] != ICMP_ECHOREPLY)
			    : (h[0] != ICMPV6_ECHO_REQ && h[0] != ICMPV6_ECHO_REP))
			return L4_UNTRACKABLE; /* errors: lib/icmp_quote.h */
		l4->icmp_echo = 1;
		__builtin_memcpy(&l4->sport, h + 4, 2);
		l4->dport = 0;
		l4->csum_off = off + 2;
		break;
	default:
		return L4_UNTRACKABLE;
	}
	l4->hdr = 1;
	/* A first fragment has its ports, but no flow: the others lack them. */
	return l4->frag ? L4_UNTRACKABLE : L4_OK;
}

/*
 * The parser as global functions, one per context: a global function is
 * verified once, on its own (see lib/fw_stage.h), so the extension header
 * walk's paths do not multiply the verification of every stage after it
 * (with parse_l4 inlined into each stage, 6.1's verifier went past its
 * limits). They take the context, not the caller's parsed packet (packet
 * pointers cannot cross into them), and find the IP header again, of a
 * frame parse_l3 said PARSE_OK for. l4 must be zeroed; its fields are
 * unknown to the verifier afterwards (offsets: bound them before use).
 */
static __always_inline enum l4_result parse_l4_frame(void *data, void *data_end, struct l4 *l4)
{
	struct ethhdr *eth = data;
	struct pkt p;

	p.ip4 = 0;
	p.ip6 = 0;
	if ((void *)(eth + 1) > data_end)
		return L4_UNTRACKABLE;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		p.ip4 = (void *)(eth + 1);
		if ((void *)(p.ip4 + 1) > data_end)
			return L4_UNTRACKABLE;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		p.ip6 = (void *)(eth + 1);
		if ((void *)(p.ip6 + 1) > data_end)
			return L4_UNTRACKABLE;
	}
	return parse_l4(data, data_end, &p, l4);
}

__noinline __attribute__((unused)) int parse_l4_skb(struct __sk_buff *skb, struct l4 *l4)
{
	if (!l4)
		return L4_UNTRACKABLE;
	return parse_l4_frame((void *)(long)skb->data, (void *)(long)skb->data_end, l4);
}

__noinline __attribute__((unused)) int parse_l4_xdp(struct xdp_md *ctx, struct l4 *l4)
{
	if (!l4)
		return L4_UNTRACKABLE;
	return parse_l4_frame((void *)(long)ctx->data, (void *)(long)ctx->data_end, l4);
}

#endif /* XLANE_L4_H */
