/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * reply.h - answers to a refused packet, written in place of it, for any
 * stage of any hook: the TCP RST of a refused segment (RFC 9293 3.10.7.1)
 * and, for everything else, an ICMP or ICMPv6 port unreachable quoting
 * the packet, under a per-CPU rate limit. reply_skb and reply_xdp pick
 * the answer and turn the frame into it; the caller sends it back.
 */
#ifndef XLANE_REPLY_H
#define XLANE_REPLY_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "abi.h"
#include "maps.h"
#include "parse.h"
#include "l4.h"
#include "csum.h"
#include "tokens.h"
#include "stage.h"

/*
 * TCP: the refused TCP segment becomes the RST that answers it (RFC
 * 9293 3.10.7.1), in place, and goes back the way it came. Other
 * protocols get an ICMP unreachable (below).
 */

/* What the RST needs from the segment it answers, read before the frame
 * is cut down to the headers. */
struct reply_rst {
	__u32 l4_off;
	__u32 seq, ack; /* host order */
	__u32 seg_len;	/* payload + SYN + FIN */
	__u8 flags;
};

/* reply_rst_read fills r from the segment; -1 when there is nothing to
 * answer (not TCP, an RST, options or extension headers in the way). */
static __always_inline int reply_rst_read(void *data, void *data_end, struct reply_rst *r)
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
		return -1; /* never answer an RST */
	__builtin_memcpy(&r->seq, th + 4, 4);
	__builtin_memcpy(&r->ack, th + 8, 4);
	r->seq = bpf_ntohl(r->seq);
	r->ack = bpf_ntohl(r->ack);
	hl += (th[12] >> 4) * 4;
	r->seg_len = (tot > hl ? tot - hl : 0) + !!(r->flags & TCP_FLAG_SYN) +
		     !!(r->flags & TCP_FLAG_FIN);
	return 0;
}

/* reply_rst_write turns the frame, cut to r->l4_off + 20 bytes, into the
 * RST: addresses and ports swapped, sequence numbers as RFC 9293 says,
 * checksums computed whole (the frame has no offload state left that
 * could complete them). */
static __always_inline int reply_rst_write(void *data, void *data_end, const struct reply_rst *r)
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
		ip->frag_off = bpf_htons(0x4000); /* DF */
		ip->ttl = 64;
		ip->check = 0;
		ip->check = csum_finish(csum_add(0, ip, 20));
		sum = csum_add(sum, &ip->saddr, 8);
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
		sum = csum_add(sum, &ip6->saddr, 32);
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
	th[12] = 5 << 4;		 /* no options */
	__builtin_memset(th + 14, 0, 6); /* window, checksum, urgent */
	sum += bpf_htons(IPPROTO_TCP) + bpf_htons(20);
	sum = csum_add(sum, th, 20);
	port = csum_finish(sum);
	__builtin_memcpy(th + 16, &port, 2);
	return 0;
}

/*
 * Everything else (UDP, ICMP queries, other protocols): an ICMP
 * destination unreachable, port unreachable (IPv4 type 3 code 3, ICMPv6
 * type 1 code 4), as iptables' REJECT sends by default and what a closed
 * port answers: a connected UDP socket reports ECONNREFUSED. The refused
 * packet is quoted from its IP header on, as much as fits a reply of 576
 * bytes (IPv4, RFC 1812 4.3.2.3) or 1280 (IPv6, RFC 4443 2.4(c)). No
 * answer (the packet is dropped) to an ICMP error, a non-first fragment,
 * a packet behind IPv6 extension headers, a multicast or broadcast
 * destination, a source that is not unicast (RFC 1122 3.2.2, RFC 4443
 * 2.4(e)), or beyond REPLY_ICMP_RATE answers per second per CPU.
 */

#define REPLY_QUOTE4 548     /* 576 - 20 - 8 */
#define REPLY_QUOTE6 1232    /* 1280 - 40 - 8 */
#define REPLY_QUOTE_BUF 1536 /* 3 bpf_csum_diff chunks of 512 */
#define REPLY_ICMP_RATE 1000 /* answers per second per CPU */
#define REPLY_ICMP_BURST 100

/* The quote and what the answer needs from the refused packet, per CPU:
 * the stack of the XDP endpoint program has no room for it. */
struct reply_quote {
	__u8 mac[12];	/* the refused frame's destination, source */
	__u8 saddr[16]; /* its addresses (IPv4: the first 4 bytes) */
	__u8 daddr[16];
	__u32 q; /* bytes quoted */
	__u8 v6;
	__u8 tos;
	__u16 pad;
	__u64 tokens; /* REPLY_ICMP_RATE bucket, tokens x 1e9 */
	__u64 last;
	__u8 b[REPLY_QUOTE_BUF];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct reply_quote);
	__uint(max_entries, 1);
} xlane_fw_quote SEC(".maps");

/* reply_icmp_read fills qb from the refused packet (frame_len bytes); -1
 * when it must not be answered (see above) or is TCP (reply_rst_read's)
 * unless tcp (a constant: a packet too big, lib/nat_too_big.h, is answered
 * with ICMP whatever its protocol). */
static __always_inline int reply_icmp_read(void *data, void *data_end, __u32 frame_len,
					   struct reply_quote *qb, const int tcp)
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
		    (ip->frag_off & bpf_htons(0x1fff)) || (!tcp && ip->protocol == IPPROTO_TCP))
			return -1;
		hl = ip->ihl * 4;
		s = bpf_ntohl(ip->saddr);
		d = bpf_ntohl(ip->daddr);
		if (!s || (s >> 28) >= 14 || (s >> 24) == 127 || (d >> 28) >= 14)
			return -1; /* 0, multicast, class E, broadcast, loopback */
		if (ip->protocol == IPPROTO_ICMP) {
			l4 = (void *)ip + (hl & 0x3c);
			if ((void *)(l4 + 1) > data_end)
				return -1;
			if (l4[0] == 3 || l4[0] == 4 || l4[0] == 5 || l4[0] == 11 || l4[0] == 12)
				return -1; /* never an error about an error */
		}
		q = bpf_ntohs(ip->tot_len);
		if (q < hl + 8)
			return -1;
		if (q > REPLY_QUOTE4)
			q = REPLY_QUOTE4;
		__builtin_memcpy(qb->saddr, &ip->saddr, 4);
		__builtin_memcpy(qb->daddr, &ip->daddr, 4);
		qb->v6 = 0;
		qb->tos = (ip->tos & 0x1e) | 0xc0; /* internetwork control */
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		__u8 nh, *l4;

		if ((void *)(ip6 + 1) > data_end)
			return -1;
		nh = ip6->nexthdr;
		if ((!tcp && nh == IPPROTO_TCP) || ipv6_is_ext(nh) || nh == 50 || nh == 135 ||
		    nh == 139 || nh == 140)
			return -1; /* TCP; extension headers in the way */
		if (ip6->saddr.in6_u.u6_addr8[0] == 0xff || ip6->daddr.in6_u.u6_addr8[0] == 0xff ||
		    !(ip6->saddr.in6_u.u6_addr32[0] | ip6->saddr.in6_u.u6_addr32[1] |
		      ip6->saddr.in6_u.u6_addr32[2] | ip6->saddr.in6_u.u6_addr32[3]))
			return -1; /* multicast, unspecified */
		if (nh == IPPROTO_ICMPV6) {
			l4 = (void *)(ip6 + 1);
			if ((void *)(l4 + 1) > data_end || l4[0] < 128)
				return -1; /* never an error about an error */
		}
		q = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
		if (q < sizeof(*ip6) + 8)
			return -1;
		if (q > REPLY_QUOTE6)
			q = REPLY_QUOTE6;
		__builtin_memcpy(qb->saddr, &ip6->saddr, 16);
		__builtin_memcpy(qb->daddr, &ip6->daddr, 16);
		qb->v6 = 1;
		qb->tos = 0;
	} else {
		return -1;
	}
	if (q > frame_len - sizeof(*eth))
		return -1; /* shorter than its IP header says */
	qb->q = q;
	return 0;
}

/* reply_icmp_allow takes a token of the per-CPU answer rate. */
static __always_inline int reply_icmp_allow(struct reply_quote *qb)
{
	__u64 now = bpf_ktime_get_ns();

	if (!qb->last)
		qb->tokens = (__u64)REPLY_ICMP_BURST * BUCKET_TOKEN;
	else
		bucket_refill(&qb->tokens, now - qb->last, REPLY_ICMP_RATE, REPLY_ICMP_BURST);
	qb->last = now;
	if (qb->tokens < BUCKET_TOKEN)
		return 0;
	qb->tokens -= BUCKET_TOKEN;
	return 1;
}

/* reply_quote_sum is the one's complement sum of the quote (qb->b, qb->q
 * bytes, loaded by the caller), zero-padded to 4 bytes for bpf_csum_diff. */
static __always_inline __u32 reply_quote_sum(struct reply_quote *qb)
{
	__u32 q = qb->q, n;
	__u64 sum = 0;

	if (q > REPLY_QUOTE6)
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
	return csum_fold(sum);
}

/* reply_icmp_write writes the headers in front of the quote: the frame is
 * Ethernet + room for the new IP and ICMP headers + the quote. mtu 0 (a
 * constant there): port unreachable; else fragmentation needed (IPv4 type
 * 3 code 4) or packet too big (ICMPv6 type 2) naming that MTU. */
static __always_inline int reply_icmp_write(void *data, void *data_end, struct reply_quote *qb,
					    __u32 qsum, __u32 mtu)
{
	struct ethhdr *eth = data;
	__u32 sum = qsum, q = qb->q;
	__u16 c;

	if ((void *)(eth + 1) > data_end || q > REPLY_QUOTE6)
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
		ip->check = csum_finish(csum_add(0, ip, 20));
		__builtin_memset(ic, 0, 8);
		ic[0] = 3; /* destination unreachable */
		ic[1] = 3; /* port unreachable */
		if (mtu) {
			__u16 m = bpf_htons(mtu);

			ic[1] = 4; /* fragmentation needed and DF set */
			__builtin_memcpy(ic + 6, &m, 2);
		}
		sum = csum_add(sum, ic, 8);
		c = csum_finish(sum);
		__builtin_memcpy(ic + 2, &c, 2);
	} else {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		__u8 *ic = (void *)(ip6 + 1);

		if ((void *)(ic + 8) > data_end)
			return -1;
		eth->h_proto = bpf_htons(ETH_P_IPV6);
		*(__u32 *)ip6 = bpf_htonl(0x60000000); /* version, no class or label */
		ip6->payload_len = bpf_htons(8 + q);
		ip6->nexthdr = IPPROTO_ICMPV6;
		ip6->hop_limit = 64;
		__builtin_memcpy(&ip6->saddr, qb->daddr, 16);
		__builtin_memcpy(&ip6->daddr, qb->saddr, 16);
		__builtin_memset(ic, 0, 8);
		ic[0] = 1; /* destination unreachable */
		ic[1] = 4; /* port unreachable */
		if (mtu) {
			__u32 m = bpf_htonl(mtu);

			ic[0] = 2; /* packet too big */
			ic[1] = 0;
			__builtin_memcpy(ic + 4, &m, 4);
		}
		sum = csum_add(sum, &ip6->saddr, 32);
		sum += bpf_htons(8 + q) + bpf_htons(IPPROTO_ICMPV6);
		sum = csum_add(sum, ic, 8);
		c = csum_finish(sum);
		__builtin_memcpy(ic + 2, &c, 2);
	}
	return 0;
}

#define REPLY_ICMP_HDR(qb) ((qb)->v6 ? sizeof(struct ipv6hdr) + 8 : sizeof(struct iphdr) + 8)

/* reply_skb_icmp turns the refused packet in skb into its ICMP answer, sent
 * as reply_skb sends an RST. Not for GSO packets. */
static __noinline int reply_skb_icmp(struct __sk_buff *skb, __u64 flags)
{
	__u32 zero = 0, qsum, q;
	struct reply_quote *qb = bpf_map_lookup_elem(&xlane_fw_quote, &zero);

	if (!qb || skb->gso_size ||
	    reply_icmp_read((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, qb, 0))
		return -1;
	q = qb->q;
	if (q < 28 || q > REPLY_QUOTE6 || !reply_icmp_allow(qb) ||
	    bpf_skb_load_bytes(skb, sizeof(struct ethhdr), qb->b, q))
		return -1;
	qsum = reply_quote_sum(qb);
	if (bpf_skb_change_tail(skb, sizeof(struct ethhdr) + q, 0) ||
	    bpf_skb_adjust_room(skb, REPLY_ICMP_HDR(qb), BPF_ADJ_ROOM_MAC, 0))
		return -1;
	if (reply_icmp_write((void *)(long)skb->data, (void *)(long)skb->data_end, qb, qsum, 0))
		return -1;
	return bpf_redirect(skb->ifindex, flags) == TC_ACT_REDIRECT ? 0 : -1;
}

/* reply_xdp_icmp is reply_skb_icmp for XDP: 0 means the answer is in place. */
static __noinline int reply_xdp_icmp(struct xdp_md *ctx)
{
	__u32 zero = 0, qsum, q, len = bpf_xdp_get_buff_len(ctx);
	struct reply_quote *qb = bpf_map_lookup_elem(&xlane_fw_quote, &zero);

	if (!qb ||
	    reply_icmp_read((void *)(long)ctx->data, (void *)(long)ctx->data_end, len, qb, 0))
		return -1;
	q = qb->q;
	if (q < 28 || q > REPLY_QUOTE6 || !reply_icmp_allow(qb) ||
	    bpf_xdp_load_bytes(ctx, sizeof(struct ethhdr), qb->b, q))
		return -1;
	qsum = reply_quote_sum(qb);
	if (bpf_xdp_adjust_tail(ctx, -(int)(len - sizeof(struct ethhdr) - q)) ||
	    bpf_xdp_adjust_head(ctx, -(int)REPLY_ICMP_HDR(qb)))
		return -1;
	return reply_icmp_write((void *)(long)ctx->data, (void *)(long)ctx->data_end, qb, qsum, 0);
}

/* reply_skb answers the refused segment in skb with an RST (other
 * packets: reply_skb_icmp) sent out
 * of the device it came in by (flags 0: tcx ingress, back to the
 * container) or into it (BPF_F_INGRESS: tcx egress, back to whoever sent
 * it through Linux). 0: redirected, return TC_ACT_REDIRECT. */
static __noinline int reply_skb(struct __sk_buff *skb, __u64 flags)
{
	struct reply_rst r = {};

	if (reply_rst_read((void *)(long)skb->data, (void *)(long)skb->data_end, &r))
		return reply_skb_icmp(skb, flags);
	if (r.l4_off > 128 || bpf_skb_change_tail(skb, r.l4_off + 20, 0))
		return -1;
	if (reply_rst_write((void *)(long)skb->data, (void *)(long)skb->data_end, &r))
		return -1;
	return bpf_redirect(skb->ifindex, flags) == TC_ACT_REDIRECT ? 0 : -1;
}

/* reply_xdp is reply_skb for XDP: 0 means return XDP_TX. */
static __noinline int reply_xdp(struct xdp_md *ctx)
{
	struct reply_rst r = {};
	__u32 len = bpf_xdp_get_buff_len(ctx);

	if (reply_rst_read((void *)(long)ctx->data, (void *)(long)ctx->data_end, &r))
		return reply_xdp_icmp(ctx);
	if (r.l4_off > 128 || len < r.l4_off + 20 ||
	    bpf_xdp_adjust_tail(ctx, -(int)(len - (r.l4_off + 20))))
		return -1;
	return reply_rst_write((void *)(long)ctx->data, (void *)(long)ctx->data_end, &r);
}

/*
 * reply_xdp_bounce sends a reject's RST back out of the device it came in by.
 * Through the devmap when the device is there (a redirect): on a veth,
 * XDP_TX wakes the peer only if the peer runs an XDP program itself
 * (veth_xdp_flush), and the RST would wait in its ring for the next
 * packet; XDP_TX otherwise (a NIC sends at once).
 */
static __always_inline enum xl_step reply_xdp_bounce(struct xdp_md *ctx)
{
	if (devmap_has(ctx->ingress_ifindex) &&
	    bpf_redirect_map(&xlane_devmap, ctx->ingress_ifindex, 0) == XDP_REDIRECT)
		return XL_REPLIED;
	return XL_REPLIED_TX;
}

#endif /* XLANE_REPLY_H */
