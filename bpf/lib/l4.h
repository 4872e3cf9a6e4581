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

static __always_inline enum l4_result parse_l4(void *data, void *data_end, const struct pkt *p,
					       struct l4 *l4)
{
	void *h;

	if (p->ip4) {
		struct iphdr *ip = p->ip4;

		if (ip->frag_off & bpf_htons(0x3fff))
			return L4_UNTRACKABLE;
		l4->proto = ip->protocol;
		l4->off = sizeof(struct ethhdr) + ip->ihl * 4;
	} else if (p->ip6) {
		l4->proto = p->ip6->nexthdr;
		l4->off = sizeof(struct ethhdr) + sizeof(struct ipv6hdr);
	} else {
		return L4_UNTRACKABLE;
	}
	if (l4->off > sizeof(struct ethhdr) + 60)
		return L4_MALFORMED;
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
