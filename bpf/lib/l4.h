/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* l4.h - the transport header facts conntrack and NAT need. */
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
	__u32 off;	/* L4 header offset from the frame start */
	__u32 csum_off; /* checksum field offset, 0: none to fix */
	__u16 sport;	/* network order; ICMP echo: identifier */
	__u16 dport;	/* network order; ICMP echo: 0 */
	__u8 proto;
	__u8 tcp_flags; /* TCP: the flags byte */
	__u8 icmp_echo; /* ICMP/ICMPv6 echo request or reply */
};

enum l4_result {
	L4_OK = 0,
	L4_UNTRACKABLE, /* fragment, extension headers, other proto */
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
#define L4_IPV6_FRAGMENT 44 /* the IPv6 fragment header's next-header value */

/*
 * l4_hdr_check judges the TCP or UDP header at h, avail IP payload bytes
 * long (L4_LEN_UNKNOWN: no length to check against): L4_MALFORMED when it
 * is cut short (a "tiny fragment", RFC 1858: a first fragment too short for
 * the ports or flags hides them from port rules), a TCP data offset is
 * under 5 words or beyond the payload, a UDP length under 8 or, but in a
 * first fragment (frag: the UDP length counts the whole datagram), beyond
 * the payload. L4_UNTRACKABLE when the IP length says the header is there
 * but it is not in [h, data_end) (not in the linear area); L4_OK
 * otherwise, and for every other protocol. The one check both L4 parsers
 * (parse_l4 here, fw_parse_l4 in lib/fw_l4.h) make.
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
	return L4_OK;
}

/* l4_first_frag is parse_l4's verdict on a first fragment whose transport
 * header starts off bytes into the frame: never trackable, malformed when
 * the header is not all there. */
static __always_inline enum l4_result l4_first_frag(void *data, void *data_end, __u32 off,
						    __u8 proto, __u32 avail)
{
	if (off > sizeof(struct ethhdr) + 60 + 8)
		return L4_UNTRACKABLE;
	if (l4_hdr_check(proto, data + off, data_end, avail, 1) == L4_MALFORMED)
		return L4_MALFORMED;
	return L4_UNTRACKABLE;
}

static __always_inline enum l4_result parse_l4(void *data, void *data_end, const struct pkt *p,
					       struct l4 *l4)
{
	__u32 avail = L4_LEN_UNKNOWN;
	enum l4_result r;
	void *h;

	if (p->ip4) {
		struct iphdr *ip = p->ip4;

		l4->off = sizeof(struct ethhdr) + ip->ihl * 4;
		/* parse_l3 checked tot_len >= ihl * 4 */
		if (ip->tot_len)
			avail = bpf_ntohs(ip->tot_len) - ip->ihl * 4;
		if (ip->frag_off & bpf_htons(0x1fff))
			return L4_UNTRACKABLE; /* not the first fragment */
		if (ip->frag_off & bpf_htons(0x2000))
			return l4_first_frag(data, data_end, l4->off, ip->protocol, avail);
		l4->proto = ip->protocol;
	} else if (p->ip6) {
		l4->proto = p->ip6->nexthdr;
		l4->off = sizeof(struct ethhdr) + sizeof(struct ipv6hdr);
		if (p->ip6->payload_len)
			avail = bpf_ntohs(p->ip6->payload_len);
		if (l4->proto == L4_IPV6_FRAGMENT) {
			__u8 *fh = data + l4->off;

			/* Extension headers are not tracked; a fragment
			 * header straight after the IPv6 one is checked like
			 * an IPv4 fragment. */
			if ((void *)(fh + 8) > data_end || avail < 8)
				return L4_MALFORMED;
			if ((fh[2] << 8 | fh[3]) & 0xfff8)
				return L4_UNTRACKABLE; /* not the first fragment */
			return l4_first_frag(data, data_end, l4->off + 8, fh[0],
					     avail == L4_LEN_UNKNOWN ? avail : avail - 8);
		}
	} else {
		return L4_UNTRACKABLE;
	}
	if (l4->off > sizeof(struct ethhdr) + 60)
		return L4_MALFORMED;
	r = l4_hdr_check(l4->proto, data + l4->off, data_end, avail, 0);
	if (r != L4_OK)
		return r;
	h = data + l4->off;
	switch (l4->proto) {
	case IPPROTO_TCP: {
		struct tcphdr *th = h;

		if ((void *)(th + 1) > data_end)
			return L4_MALFORMED;
		l4->sport = th->source;
		l4->dport = th->dest;
		l4->tcp_flags = ((__u8 *)th)[13];
		l4->csum_off = l4->off + 16;
		return L4_OK;
	}
	case IPPROTO_UDP: {
		struct udphdr *uh = h;

		if ((void *)(uh + 1) > data_end)
			return L4_MALFORMED;
		l4->sport = uh->source;
		l4->dport = uh->dest;
		l4->csum_off = l4->off + 6;
		return L4_OK;
	}
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6: {
		__u8 *ic = h;
		__u8 type;

		if ((void *)(ic + 8) > data_end)
			return L4_MALFORMED;
		if ((l4->proto == IPPROTO_ICMP) != (p->ip4 != 0))
			return L4_UNTRACKABLE;
		type = ic[0];
		if (l4->proto == IPPROTO_ICMP
			    ? (type != ICMP_ECHO && type != ICMP_ECHOREPLY)
			    : (type != ICMPV6_ECHO_REQ && type != ICMPV6_ECHO_REP))
			return L4_UNTRACKABLE; /* errors: related, Linux for now */
		l4->icmp_echo = 1;
		__builtin_memcpy(&l4->sport, ic + 4, 2);
		l4->dport = 0;
		l4->csum_off = l4->off + 2;
		return L4_OK;
	}
	}
	return L4_UNTRACKABLE;
}

#endif /* XLANE_L4_H */
