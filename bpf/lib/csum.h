/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * csum.h - the Internet checksum (RFC 1071) helpers every program shares:
 * sums and folds, incremental updates (RFC 1624), and the TTL / hop limit
 * decrement of a forwarded packet.
 */
#ifndef XLANE_CSUM_H
#define XLANE_CSUM_H

#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>

/* csum_fold folds a one's complement sum of any width to 16 bits (not
 * complemented): 0 only for a sum of 0. */
static __always_inline __u16 csum_fold(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)s;
}

/* csum_finish is the checksum field of data whose sum is s. */
static __always_inline __u16 csum_finish(__u64 s)
{
	return (__u16)~csum_fold(s);
}

/* csum_add adds the len bytes at p (len even, a constant) to sum as 16-bit
 * words in memory order. */
static __always_inline __u32 csum_add(__u32 sum, const void *p, int len)
{
	const __u16 *w = p;

#pragma unroll
	for (int i = 0; i < len / 2; i++)
		sum += w[i];
	return sum;
}

/* csum_replace returns checksum field check after the data it covers
 * changed by diff (a bpf_csum_diff result), RFC 1624. */
static __always_inline __u16 csum_replace(__u16 check, __u32 diff)
{
	return csum_finish((__u64)(__u16)~check + diff);
}

/*
 * Decrement the IPv4 TTL and patch the header checksum in place, the way
 * the kernel's ip_decrease_ttl() does: TTL is the high byte of a 16-bit
 * word, so lowering it by one raises the one's complement sum by 0x0100.
 */
static __always_inline void ipv4_dec_ttl(struct iphdr *ip)
{
	__u32 check = ip->check;

	check += bpf_htons(0x0100);
	ip->check = (__u16)(check + (check >= 0xFFFF));
	ip->ttl--;
}

static __always_inline void ipv6_dec_hoplimit(struct ipv6hdr *ip6)
{
	ip6->hop_limit--;
}

#endif /* XLANE_CSUM_H */
