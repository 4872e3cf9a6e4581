/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * nat_too_big.h - PMTU for a service flow from off the node whose backend
 * is on another node (tc, the uplink's program): the client's packet,
 * translated (DNAT to the peer's pod, SNAT to this node's cluster
 * address), is too big for the overlay. The client gets the ICMP error
 * here, quoting its packet as it sent it.
 *
 * Why here and not Linux: passed to Linux translated (what was done
 * before), the kernel's error goes to the cluster address, i.e. to no one;
 * passed untranslated, a NodePort's destination is one of the node's own
 * addresses, so Linux delivers it locally (no error at all, a port
 * unreachable at best), and an external VIP's is routed as the VIP, not
 * as the backend. Linux never has the translated route and the client's
 * address at once. The XDP program on the uplink does not translate
 * service flows (it passes them to this program, XL_PASS_NOT_FWDED), so
 * this is the one place for every uplink mode (XDP native, generic, tc).
 *
 * How: the quote is read from the translated packet (lib/reply.h, up to
 * 576 bytes in all for IPv4, 1280 for IPv6), translated back in the
 * buffer with the flow's reply entry as conntrack translates the quote of
 * an error about the flow (lib/nat_icmp.h icmp_quote_nat: addresses,
 * ports, the IPv4 header and UDP checksums; here also a TCP checksum,
 * which a quote this long holds), and the frame becomes the error from
 * the service's address to the client, its checksum computed whole over
 * what it carries (the skb's checksum state does not matter to it). Under
 * the per-CPU answer rate of lib/reply.h.
 */
#ifndef XLANE_NAT_TOO_BIG_H
#define XLANE_NAT_TOO_BIG_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "abi.h"
#include "maps.h"
#include "parse.h"
#include "csum.h"
#include "reply.h"
#include "nat_icmp.h"

/* The quote's bytes its translation may change: the IP header, the ports,
 * a UDP or TCP checksum (IPv6 + TCP: 40 + 18). */
#define NAT_TOO_BIG_FIX 64

enum nat_too_big_rc {
	NAT_TOO_BIG_OK = 0,	/* the frame is the answer: send it back */
	NAT_TOO_BIG_NO = -1,	/* no answer, the frame untouched */
	NAT_TOO_BIG_LIMIT = -2, /* over the answer rate, the frame untouched */
	NAT_TOO_BIG_FAIL = -3,	/* the rewrite failed half-way */
};

/* nat_too_big_quote translates the quote back as reply entry v says (v6
 * a constant) and takes the answer's addresses from it; the quote is
 * qb->b from its IP header, without IPv4 options or IPv6 extension
 * headers. */
static __always_inline void nat_too_big_quote(struct reply_quote *qb, struct icmp_scratch *sc,
					      const struct ct_val *v, const int v6, __u8 proto)
{
	const int sa = v6 ? 8 : 12, al = v6 ? 16 : 4, po = v6 ? 40 : 20;
	__u32 d;
	__u16 c;

	icmp_quote_nat(qb->b, sc->old, v, v6, proto, 0);
	/* The outer addresses: from the service's address to the client. */
	__builtin_memcpy(qb->saddr, qb->b + sa, al);
	__builtin_memcpy(qb->daddr, qb->b + sa + al, al);
	if (proto != IPPROTO_TCP || qb->q < po + 18)
		return;
	d = bpf_csum_diff((__be32 *)sc->old, 2 * al, (__be32 *)(qb->b + sa), 2 * al, 0);
	d = bpf_csum_diff((__be32 *)(sc->old + 2 * al), 4, (__be32 *)(qb->b + po), 4, d);
	__builtin_memcpy(&c, qb->b + po + 16, 2);
	c = csum_replace(c, d);
	__builtin_memcpy(qb->b + po + 16, &c, 2);
}

/*
 * nat_too_big turns skb, a translated packet of a service flow from off
 * the node (source: this node's cluster address) too big for mtu, into
 * the ICMP error its client must get (enum nat_too_big_rc). Not answered
 * (NAT_TOO_BIG_NO): an IPv4 packet without DF (Linux fragments it), a GSO
 * packet, IPv4 options or IPv6 extension headers, what lib/reply.h never
 * answers (an ICMP error, a non-first fragment, ...), a flow without a
 * reply entry that translates both ways.
 */
static __noinline int nat_too_big(struct __sk_buff *skb, __u32 mtu)
{
	struct reply_quote *qb;
	struct icmp_scratch *sc;
	__u32 zero = 0, qsum, q;
	struct ethhdr *eth;
	struct ct_key *rk;
	struct ct_val *v;
	__u8 proto, v6;

	qb = bpf_map_lookup_elem(&xlane_fw_quote, &zero);
	sc = bpf_map_lookup_elem(&xlane_icmp_scratch, &zero);
	if (!qb || !sc || skb->gso_size)
		return NAT_TOO_BIG_NO;
	eth = (void *)(long)skb->data;
	if ((void *)(eth + 1) > (void *)(long)skb->data_end)
		return NAT_TOO_BIG_NO;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > (void *)(long)skb->data_end || ip->ihl != 5 ||
		    !(ip->frag_off & bpf_htons(0x4000)))
			return NAT_TOO_BIG_NO;
	}
	if (reply_icmp_read((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, qb, 1))
		return NAT_TOO_BIG_NO;
	q = qb->q;
	v6 = qb->v6;
	if (q < NAT_TOO_BIG_FIX || q > REPLY_QUOTE6 ||
	    bpf_skb_load_bytes(skb, sizeof(struct ethhdr), qb->b, q))
		return NAT_TOO_BIG_NO;
	/* The flow's reply entry: the quote reversed. */
	rk = &sc->rk;
	__builtin_memset(rk, 0, sizeof(*rk));
	if (!v6) {
		key_from_ipv4((struct endpoint_key *)rk->saddr, *(__be32 *)(qb->b + 16));
		key_from_ipv4((struct endpoint_key *)rk->daddr, *(__be32 *)(qb->b + 12));
		proto = qb->b[9];
		__builtin_memcpy(&rk->sport, qb->b + 22, 2);
		__builtin_memcpy(&rk->dport, qb->b + 20, 2);
	} else {
		__builtin_memcpy(rk->saddr, qb->b + 24, 16);
		__builtin_memcpy(rk->daddr, qb->b + 8, 16);
		proto = qb->b[6];
		__builtin_memcpy(&rk->sport, qb->b + 42, 2);
		__builtin_memcpy(&rk->dport, qb->b + 40, 2);
	}
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return NAT_TOO_BIG_NO;
	rk->proto = proto;
	v = bpf_map_lookup_elem(&xlane_ct, rk);
	if (!v || v->nat != CT_NAT_BOTH)
		return NAT_TOO_BIG_NO;
	if (!reply_icmp_allow(qb))
		return NAT_TOO_BIG_LIMIT;
	if (!v6)
		nat_too_big_quote(qb, sc, v, 0, proto);
	else
		nat_too_big_quote(qb, sc, v, 1, proto);
	/* The translated bytes back into the frame, which the quote is. */
	if (bpf_skb_store_bytes(skb, sizeof(struct ethhdr), qb->b, NAT_TOO_BIG_FIX, 0))
		return NAT_TOO_BIG_FAIL;
	qsum = reply_quote_sum(qb);
	if (bpf_skb_change_tail(skb, sizeof(struct ethhdr) + q, 0) ||
	    bpf_skb_adjust_room(skb, REPLY_ICMP_HDR(qb), BPF_ADJ_ROOM_MAC, 0))
		return NAT_TOO_BIG_FAIL;
	if (reply_icmp_write((void *)(long)skb->data, (void *)(long)skb->data_end, qb, qsum, mtu))
		return NAT_TOO_BIG_FAIL;
	return NAT_TOO_BIG_OK;
}

#endif /* XLANE_NAT_TOO_BIG_H */
