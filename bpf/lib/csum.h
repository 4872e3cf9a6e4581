/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* csum.h - incremental Internet checksum updates (RFC 1624). */
#ifndef XLANE_CSUM_H
#define XLANE_CSUM_H

#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>

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
