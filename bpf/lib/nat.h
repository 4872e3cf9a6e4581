/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * nat.h - address and port translation of an skb (tc programs). The
 * kernel's csum helpers patch the L3 and L4 checksums incrementally and do
 * the right thing for CHECKSUM_PARTIAL packets (they patch the pseudo-
 * header sum the device will finish), which XDP cannot see.
 */
#ifndef XLANE_NAT_H
#define XLANE_NAT_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "abi.h"
#include "parse.h"
#include "l4.h"

#define IPV4_CSUM_OFF (sizeof(struct ethhdr) + 10)

/*
 * nat_rewrite replaces the source (CT_NAT_SRC) or destination (CT_NAT_DST)
 * address and port of the packet in skb with addr:port. For ICMP echo the
 * "port" is the identifier, whichever side is rewritten. Packet pointers are
 * invalid afterwards: parse again.
 */
static __always_inline int nat_rewrite(struct __sk_buff *skb, const struct pkt *p,
				       const struct l4 *l4, __u8 which, const __u8 *addr,
				       __u16 port)
{
	__u64 pseudo = l4->proto == IPPROTO_ICMP ? 0 : BPF_F_PSEUDO_HDR;
	__u64 mangled = l4->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__u32 port_off;
	__u16 old_port;

	if (p->ip4) {
		__u32 off = sizeof(struct ethhdr) + (which == CT_NAT_SRC ? 12 : 16);
		__be32 old = which == CT_NAT_SRC ? p->ip4->saddr : p->ip4->daddr;
		__be32 new;

		__builtin_memcpy(&new, addr + 12, 4);
		if (bpf_l3_csum_replace(skb, IPV4_CSUM_OFF, old, new, 4))
			return -1;
		if (pseudo &&
		    bpf_l4_csum_replace(skb, l4->csum_off, old, new, pseudo | mangled | 4))
			return -1;
		if (bpf_skb_store_bytes(skb, off, &new, 4, 0))
			return -1;
	} else {
		__u32 off = sizeof(struct ethhdr) + (which == CT_NAT_SRC ? 8 : 24);
		__u8 old[16];
		__s64 diff;

		if (bpf_skb_load_bytes(skb, off, old, 16))
			return -1;
		diff = bpf_csum_diff((__be32 *)old, 16, (__be32 *)addr, 16, 0);
		if (diff < 0 ||
		    bpf_l4_csum_replace(skb, l4->csum_off, 0, diff, BPF_F_PSEUDO_HDR | mangled))
			return -1;
		if (bpf_skb_store_bytes(skb, off, addr, 16, 0))
			return -1;
	}
	if (l4->icmp_echo)
		port_off = l4->off + 4;
	else
		port_off = l4->off + (which == CT_NAT_SRC ? 0 : 2);
	old_port = l4->icmp_echo ? l4->sport : (which == CT_NAT_SRC ? l4->sport : l4->dport);
	if (old_port == port)
		return 0;
	if (bpf_l4_csum_replace(skb, l4->csum_off, old_port, port, mangled | 2))
		return -1;
	return bpf_skb_store_bytes(skb, port_off, &port, 2, 0) ? -1 : 0;
}

#endif /* XLANE_NAT_H */
