/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* fib.h - ask the kernel's routing table where a packet goes next. */
#ifndef XLANE_FIB_H
#define XLANE_FIB_H

#include <linux/bpf.h>
#include <linux/socket.h>
#include <bpf/bpf_helpers.h>
#include "parse.h"

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

/*
 * fib_params_init prepares a lookup for p arriving on ifindex. The tc
 * programs leave tot_len 0: skbs keep their GSO state across
 * bpf_redirect, and an oversized non-GSO packet is refused on the redirect
 * path just as Linux would refuse it.
 */
static __always_inline void fib_params_init(struct bpf_fib_lookup *fib, const struct pkt *p,
					    __u32 ifindex)
{
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->ifindex = ifindex;
	/* tot_len 0 skips the FIB's MTU check. XDP sets it (fib_check_mtu). */
	if (p->ip4) {
		struct iphdr *ip = p->ip4;

		fib->family = AF_INET;
		fib->tos = ip->tos;
		fib->l4_protocol = ip->protocol;
		fib->ipv4_src = ip->saddr;
		fib->ipv4_dst = ip->daddr;
	} else if (p->ip6) {
		struct ipv6hdr *ip6 = p->ip6;

		fib->family = AF_INET6;
		fib->flowinfo = *(__be32 *)ip6 & bpf_htonl(0x0FFFFFFF);
		fib->l4_protocol = ip6->nexthdr;
		__builtin_memcpy(fib->ipv6_src, &ip6->saddr, 16);
		__builtin_memcpy(fib->ipv6_dst, &ip6->daddr, 16);
	}
}

/* fib_check_mtu makes bpf_fib_lookup answer FRAG_NEEDED for a packet of
 * l3len bytes that does not fit the egress MTU. */
static __always_inline void fib_check_mtu(struct bpf_fib_lookup *fib, __u32 l3len)
{
	fib->tot_len = l3len > 0xffff ? 0xffff : l3len;
}

#endif /* XLANE_FIB_H */
