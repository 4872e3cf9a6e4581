/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * parse.h - L2/L3 parsing with explicit bounds checks. Works on any
 * (data, data_end) pair, so TC and XDP programs share it.
 */
#ifndef XLANE_PARSE_H
#define XLANE_PARSE_H

#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include "abi.h"

/* Bytes of header the parser needs in the linear area: Ethernet + IPv6. */
#define XL_PARSE_LEN (sizeof(struct ethhdr) + sizeof(struct ipv6hdr))

enum parse_result {
	PARSE_OK = 0,
	PARSE_NON_IP,	 /* not IPv4/IPv6: let Linux have it */
	PARSE_MALFORMED, /* truncated or invalid: drop and count */
	PARSE_VLAN,	 /* an 802.1Q/802.1ad tag: not IP to a hook that
			  * forwards, which must not carry the tag on */
};

/* Emitted in full in BTF (see XL_ABI_BTF_ANCHORS). */
struct ethhdr *xl_btf_ethhdr __attribute__((unused));
struct iphdr *xl_btf_iphdr __attribute__((unused));
struct ipv6hdr *xl_btf_ipv6hdr __attribute__((unused));

struct pkt {
	struct ethhdr *eth;
	/* Exactly one of ip4/ip6 is set for PARSE_OK. Typed pointers, not a
	 * protocol field: the verifier tracks a spilled pointer's NULL-ness,
	 * but not a spilled u16, and would otherwise lose which header length
	 * it has checked. */
	struct iphdr *ip4;
	struct ipv6hdr *ip6;
	__u16 proto; /* ethertype, host order */
	__u8 ttl;    /* TTL or hop limit before any rewrite */
	/* 8-byte aligned (struct endpoint_key is bytes): the addresses are
	 * then written, copied and compared in words, not byte by byte. */
	struct endpoint_key src __attribute__((aligned(8)));
	struct endpoint_key dst __attribute__((aligned(8)));
};

static __always_inline void key_from_ipv4(struct endpoint_key *k, __be32 a)
{
	__builtin_memset(k->addr, 0, 10);
	k->addr[10] = 0xff;
	k->addr[11] = 0xff;
	__builtin_memcpy(&k->addr[12], &a, 4);
}

/*
 * parse_l3 fills pkt from the frame in [data, data_end). pkt_len is the
 * frame's full length (skb->len or the XDP frame length), used to reject IP
 * headers that claim more bytes than the frame carries.
 */
static __always_inline enum parse_result parse_l3(void *data, void *data_end, __u32 pkt_len,
						  struct pkt *p)
{
	struct ethhdr *eth = data;
	__u32 l3_len;

	if ((void *)(eth + 1) > data_end)
		return PARSE_MALFORMED;
	p->eth = eth;
	p->proto = bpf_ntohs(eth->h_proto);
	l3_len = pkt_len - sizeof(*eth);

	if (p->proto == ETH_P_IP) {
		struct iphdr *ip = (void *)(eth + 1);
		__u32 tot;

		if ((void *)(ip + 1) > data_end)
			return PARSE_MALFORMED;
		if (ip->version != 4 || ip->ihl < 5)
			return PARSE_MALFORMED;
		tot = bpf_ntohs(ip->tot_len);
		/* tot_len 0 is legal only for BIG TCP GSO packets (> 64 KiB). */
		if (tot == 0 ? l3_len <= 0xFFFF : (tot < ip->ihl * 4u || tot > l3_len))
			return PARSE_MALFORMED;
		p->ip4 = ip;
		p->ttl = ip->ttl;
		key_from_ipv4(&p->src, ip->saddr);
		key_from_ipv4(&p->dst, ip->daddr);
		return PARSE_OK;
	}
	if (p->proto == ETH_P_IPV6) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		__u32 plen;

		if ((void *)(ip6 + 1) > data_end)
			return PARSE_MALFORMED;
		if (ip6->version != 6)
			return PARSE_MALFORMED;
		plen = bpf_ntohs(ip6->payload_len);
		/* payload_len 0 is legal only above 64 KiB: BIG TCP (IPv6 jumbo
		 * without the HBH option) or an RFC 2675 jumbogram. */
		if (plen == 0 ? l3_len <= 0xFFFF + sizeof(*ip6) : plen + sizeof(*ip6) > l3_len)
			return PARSE_MALFORMED;
		p->ip6 = ip6;
		p->ttl = ip6->hop_limit;
		__builtin_memcpy(p->src.addr, &ip6->saddr, 16);
		__builtin_memcpy(p->dst.addr, &ip6->daddr, 16);
		return PARSE_OK;
	}
	if (p->proto == ETH_P_8021Q || p->proto == ETH_P_8021AD)
		return PARSE_VLAN;
	return PARSE_NON_IP;
}

/* True for addresses Linux must handle: IPv4 multicast/broadcast/unspecified,
 * IPv6 multicast/link-local/unspecified. */
static __always_inline int addr_is_link_scope(const struct endpoint_key *k)
{
	const __u8 *a = k->addr;
	__u64 hi, lo;

	__builtin_memcpy(&hi, a, 8);
	__builtin_memcpy(&lo, a + 8, 8);
	if (hi == 0 && a[8] == 0 && a[9] == 0 && a[10] == 0xff && a[11] == 0xff)
		/* IPv4-mapped: 0.0.0.0/8, multicast, reserved, broadcast */
		return a[12] == 0 || a[12] >= 224;
	if (a[0] == 0xff) /* ff00::/8 */
		return 1;
	if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80) /* fe80::/10 */
		return 1;
	return hi == 0 && lo == 0; /* :: */
}

/* True for sources that need no owner: 0.0.0.0 and :: (DHCP, DAD) and
 * IPv6 link-local (ND, router discovery). Multicast, broadcast or reserved
 * sources are never legitimate and fall to the anti-spoofing drop. */
static __always_inline int addr_is_src_exempt(const struct endpoint_key *k)
{
	const __u8 *a = k->addr;
	__u64 hi, lo;

	__builtin_memcpy(&hi, a, 8);
	__builtin_memcpy(&lo, a + 8, 8);
	if (hi == 0 && a[8] == 0 && a[9] == 0 && a[10] == 0xff && a[11] == 0xff)
		return a[12] == 0 && a[13] == 0 && a[14] == 0 && a[15] == 0;
	if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
		return 1;
	return hi == 0 && lo == 0;
}

static __always_inline int pkt_is_ipv4(const struct pkt *p)
{
	return p->ip4 != 0;
}

#endif /* XLANE_PARSE_H */
