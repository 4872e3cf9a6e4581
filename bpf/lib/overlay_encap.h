/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * overlay_encap.h - VXLAN encapsulation in BPF (overlay_cfg.flags
 * XL_OVERLAY_ENCAP_BPF, xlaned --overlay-encap): the tc stage pushes the
 * outer headers itself and redirects to the underlay device, where the
 * collect_md device (lib/overlay.h) would have encapsulated in the kernel.
 * The receiving node keeps its VXLAN device either way: its UDP socket
 * gives VXLAN GRO.
 *
 *   before: | eth | inner L3 ...
 *   after:  | eth (outer, the next hop's) | IPv4/IPv6 | UDP | VXLAN | eth (inner) | inner L3 ...
 *
 * bpf_skb_adjust_room(BPF_ADJ_ROOM_MAC) inserts the room behind the
 * Ethernet header; the ENCAP flags make it an encapsulated skb as the
 * kernel's tunnels make them: inner headers set, skb->encapsulation,
 * inner protocol ETH_P_TEB (ENCAP_L2_ETH, as the VXLAN device sets), and
 * for a GSO skb SKB_GSO_UDP_TUNNEL added to its gso_type, so a TSO'd
 * super-packet is segmented (inner TCP, then outer UDP and IP lengths and
 * IPv4 checksums per segment) by the underlay device or the stack, as the
 * device's are. FIXED_GSO keeps gso_size: the inner MSS already fits the
 * overlay's MTU (the endpoint's, underlay - 50/70). No
 * SKB_GSO_UDP_TUNNEL_CSUM can be asked for: the outer UDP checksum is 0,
 * as the VXLAN device sends over IPv4 by default; over IPv6 the
 * receiving device accepts it (udp6zerocsumrx, internal/netconf).
 */
#ifndef XLANE_OVERLAY_ENCAP_H
#define XLANE_OVERLAY_ENCAP_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "abi.h"
#include "csum.h"
#include "fib.h"
#include "overlay.h"
#include "parse.h"
#include "stage.h"

/* The outer UDP source port: the kernel's udp_flow_src_port over the
 * VXLAN device's default range (the local port range's default), from
 * the inner flow's hash, so receivers spread flows over their queues. */
#define XL_ENCAP_SPORT_MIN 32768
#define XL_ENCAP_SPORT_MAX 61000

/* overlay_encap's: the push was refused, the packet is untouched but the
 * caller's packet pointers are not valid any more. */
#define XL_ENCAP_REFUSED (-1)

struct xl_vxlanhdr {
	__be32 flags; /* 0x08000000: VNI valid */
	__be32 vni;   /* VNI << 8 */
};

#define XL_ENCAP4_LEN                                                                \
	(sizeof(struct iphdr) + sizeof(struct udphdr) + sizeof(struct xl_vxlanhdr) + \
	 sizeof(struct ethhdr))
#define XL_ENCAP6_LEN                                                                  \
	(sizeof(struct ipv6hdr) + sizeof(struct udphdr) + sizeof(struct xl_vxlanhdr) + \
	 sizeof(struct ethhdr))

/* encap_fill_tail writes the UDP, VXLAN and inner Ethernet headers at
 * udp (bounds checked by the caller). */
static __always_inline void encap_fill_tail(struct udphdr *udp, const struct overlay_cfg *c,
					    __u16 sport, __u32 udplen, __u32 vni, __be16 proto)
{
	const __u8 mac[ETH_ALEN] = XL_OVERLAY_MAC;
	const __u8 smac[ETH_ALEN] = XL_OVERLAY_SRC_MAC;
	struct xl_vxlanhdr *vx = (void *)(udp + 1);
	struct ethhdr *in = (void *)(vx + 1);

	udp->source = bpf_htons(sport);
	udp->dest = c->port;
	udp->len = bpf_htons(udplen > 0xffff ? 0xffff : udplen);
	udp->check = 0;
	vx->flags = bpf_htonl(0x08000000);
	vx->vni = bpf_htonl(vni << 8);
	__builtin_memcpy(in->h_dest, mac, ETH_ALEN);
	__builtin_memcpy(in->h_source, smac, ETH_ALEN);
	in->h_proto = proto;
}

/*
 * overlay_encap sends the packet (its inner frame already forwarded: TTL
 * decremented) to peer's node, VXLAN in BPF: the route to the peer's
 * underlay address from the FIB (this node's underlay address of that
 * family as the source), the outer headers pushed and filled, the next
 * hop's MAC written (bpf_redirect) or resolved by the kernel
 * (bpf_redirect_neigh). XL_FWD_OVERLAY, as through the device.
 *
 * XL_CONTINUE, the packet untouched, where this node has no underlay
 * address of the peer's family or the FIB gives no usable route: the
 * caller hands it to the device. XL_ENCAP_REFUSED, the packet untouched
 * too, where the kernel refuses the push (a GSO type it cannot segment
 * again, no memory): the caller hands it to the device as well, but has
 * to read its Ethernet header again (the verifier forgets every packet
 * pointer across bpf_skb_adjust_room). Inlined into overlay_forward's
 * frame, where its FIB parameters share stack with the device path's
 * tunnel key: a frame of its own made three (pipeline, overlay_forward,
 * this) and 528 bytes of stack on the uplink's program, over the
 * verifier's 512.
 */
static __always_inline int overlay_encap(struct __sk_buff *skb, const struct overlay_cfg *c,
					 const struct peer_val *peer, __u32 vni,
					 enum xl_reason *reason)
{
	__u64 flags = BPF_F_ADJ_ROOM_FIXED_GSO | BPF_F_ADJ_ROOM_ENCAP_L4_UDP |
		      BPF_F_ADJ_ROOM_ENCAP_L2_ETH | BPF_F_ADJ_ROOM_ENCAP_L2(ETH_HLEN);
	struct bpf_fib_lookup fib = {};
	__u32 hash, inlen, sport, v4src;
	void *data, *data_end;
	struct ethhdr *eth;
	__be16 proto;
	long rc;

	fib.ifindex = skb->ifindex;
	fib.l4_protocol = IPPROTO_UDP;
	if (peer->flags & XL_PEER_V6) {
		__u64 *s = (__u64 *)c->src6;

		if (!(s[0] | s[1]))
			return XL_CONTINUE;
		fib.family = AF_INET6;
		__builtin_memcpy(fib.ipv6_src, c->src6, 16);
		__builtin_memcpy(fib.ipv6_dst, peer->underlay, 16);
		flags |= BPF_F_ADJ_ROOM_ENCAP_L3_IPV6;
	} else {
		__builtin_memcpy(&v4src, c->src4, 4);
		if (!v4src)
			return XL_CONTINUE;
		fib.family = AF_INET;
		fib.ipv4_src = v4src;
		__builtin_memcpy(&fib.ipv4_dst, &peer->underlay[12], 4);
		flags |= BPF_F_ADJ_ROOM_ENCAP_L3_IPV4;
	}
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return XL_CONTINUE;

	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return XL_CONTINUE;
	proto = eth->h_proto;
	hash = bpf_get_hash_recalc(skb);
	sport = (((__u64)hash * (XL_ENCAP_SPORT_MAX - XL_ENCAP_SPORT_MIN)) >> 32) +
		XL_ENCAP_SPORT_MIN;
	inlen = skb->len; /* the inner frame */

	if (fib.family == AF_INET6) {
		struct ipv6hdr *ip6;

		if (bpf_skb_adjust_room(skb, XL_ENCAP6_LEN, BPF_ADJ_ROOM_MAC, flags))
			return XL_ENCAP_REFUSED;
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		eth = data;
		ip6 = (void *)(eth + 1);
		if ((void *)ip6 + XL_ENCAP6_LEN > data_end)
			return xl_final(reason, XL_DROP_REDIRECT);
		eth->h_proto = bpf_htons(ETH_P_IPV6);
		/* The flow label from the flow's hash (ip6_make_flowlabel):
		 * the underlay's ECMP spreads flows too. */
		*(__be32 *)ip6 = bpf_htonl(0x60000000 | ((hash ^ (hash >> 12)) & 0xfffff));
		ip6->payload_len = bpf_htons(inlen + 16 > 0xffff ? 0xffff : inlen + 16);
		ip6->nexthdr = IPPROTO_UDP;
		ip6->hop_limit = 64;
		__builtin_memcpy(&ip6->saddr, c->src6, 16);
		__builtin_memcpy(&ip6->daddr, peer->underlay, 16);
		encap_fill_tail((void *)(ip6 + 1), c, sport, inlen + 16, vni, proto);
	} else {
		struct iphdr *ip;
		__u32 tot;

		if (bpf_skb_adjust_room(skb, XL_ENCAP4_LEN, BPF_ADJ_ROOM_MAC, flags))
			return XL_ENCAP_REFUSED;
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		eth = data;
		ip = (void *)(eth + 1);
		if ((void *)ip + XL_ENCAP4_LEN > data_end)
			return xl_final(reason, XL_DROP_REDIRECT);
		eth->h_proto = bpf_htons(ETH_P_IP);
		tot = inlen + 36;
		/* No DF, as the VXLAN device by default: what fits the
		 * overlay's MTU was checked before (bpf_check_mtu). A
		 * random ID for an underlay that fragments anyway. */
		ip->version = 4;
		ip->ihl = 5;
		ip->tos = 0;
		ip->tot_len = bpf_htons(tot > 0xffff ? 0xffff : tot);
		ip->id = (__u16)bpf_get_prandom_u32();
		ip->frag_off = 0;
		ip->ttl = 64;
		ip->protocol = IPPROTO_UDP;
		ip->check = 0;
		ip->saddr = fib.ipv4_src;
		__builtin_memcpy(&ip->daddr, &peer->underlay[12], 4);
		ip->check = csum_finish(csum_add(0, ip, sizeof(*ip)));
		encap_fill_tail((void *)(ip + 1), c, sport, inlen + 16, vni, proto);
	}
	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
		__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
		return tc_forwarded(bpf_redirect(fib.ifindex, 0), XL_FWD_OVERLAY, reason);
	} else {
		struct bpf_redir_neigh nh = { .nh_family = fib.family };

		if (fib.family == AF_INET)
			nh.ipv4_nh = fib.ipv4_dst;
		else
			__builtin_memcpy(nh.ipv6_nh, fib.ipv6_dst, 16);
		return tc_forwarded(bpf_redirect_neigh(fib.ifindex, &nh, sizeof(nh), 0),
				    XL_FWD_OVERLAY, reason);
	}
}

#endif /* XLANE_OVERLAY_ENCAP_H */
