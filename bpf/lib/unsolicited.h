/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * unsolicited.h - what Docker's DOCKER chain does for a bridge: a packet
 * from off the node reaches an endpoint only as part of a flow conntrack
 * knows (one the endpoint started, a published port's) or as an ICMP
 * error about one. Everything else from off the node is dropped and
 * counted (XL_DROP_UNSOLICITED), unless the endpoint's network opted in
 * (XL_EP_ALLOW_UNSOLICITED: `xlane network create --allow-unsolicited`,
 * Docker's gateway_mode_ipv4=nat-unprotected). The node's own packets and other local
 * endpoints' are not judged here (ep_apart is their policy).
 *
 * Run where packets from off the node reach an endpoint without having
 * come through the uplink's conntrack stage: what Linux forwards (tcx
 * egress of a host veth, netkit's primary program) and the uplink's XDP
 * redirect.
 */
#ifndef XLANE_UNSOLICITED_H
#define XLANE_UNSOLICITED_H

#include "abi.h"
#include "maps.h"
#include "parse.h"
#include "l4.h"
#include "icmp_quote.h"
#include "ct.h"
#include "metrics.h"
#include "endpoint.h"
#include "fw.h"
#include "overlay.h"

/* Linear bytes the check reads: Ethernet, an outer IP header with
 * options, an ICMP header and the quoted IP header and ports. */
#define XL_UNSOL_LEN (sizeof(struct ethhdr) + 60 + 8 + 60 + 8)

/* unsol_known: k or its reverse is a conntrack entry. */
static __always_inline int unsol_known(const struct ct_key *k)
{
	struct ct_key r = {};

	if (bpf_map_lookup_elem(&xlane_ct, k))
		return 1;
	ct_reverse(k, &r);
	return bpf_map_lookup_elem(&xlane_ct, &r) != 0;
}

/* ep_unsol_checked: p, from off the node for endpoint dst, must be
 * solicited (ep_solicited) to enter. */
static __always_inline int ep_unsol_checked(const struct pkt *p, const struct endpoint_val *dst)
{
	return !(dst->flags & XL_EP_ALLOW_UNSOLICITED) && !addr_is_link_scope(&p->dst);
}

/*
 * ep_solicited says whether p (parsed from data, from off the node, for a
 * local endpoint; l4 and r: parse_l4's facts and result) may enter: its
 * tuple, as the packet carries it (a reply the uplink left untranslated)
 * or reversed (a published port's flow after DNAT, a masqueraded flow
 * after the return translation), is tracked; or it is an ICMP error about
 * a tracked flow; or neighbour discovery. Fragments: the first is judged
 * by its ports; the others carry none, and without their first one they
 * are never reassembled. The entry of a reply is refreshed here when the
 * firewall, which otherwise keeps it, is off: an endpoint's flow must not
 * expire while its peer still sends. Drop it as XL_DROP_UNSOLICITED when
 * it says 0.
 */
static __always_inline int ep_solicited(void *data, void *data_end, const struct pkt *p,
					const struct l4 *l4, int r, __u32 len)
{
	struct ct_key k = {};
	struct ct_val *v;

	switch (r) {
	case L4_OK:
		ct_key_init(&k, p, l4);
		v = bpf_map_lookup_elem(&xlane_ct, &k);
		if (v) {
			if (!fw_on())
				ct_hit(&k, v, l4, len);
			return 1;
		}
		return unsol_known(&k);
	case L4_MALFORMED:
		return 0;
	default:
		break;
	}
	if (l4->frag == L4_FRAG_LATER)
		return 1;
	if (!l4->hdr)
		return 0;
	if (l4->frag) {
		if (l4->proto != IPPROTO_TCP && l4->proto != IPPROTO_UDP)
			return 0;
		ct_key_init(&k, p, l4);
		return unsol_known(&k);
	}
	if ((l4->proto == IPPROTO_ICMP) != (p->ip4 != 0))
		return 0;
	if (l4->proto == IPPROTO_ICMPV6 && l4->icmp_type >= 133 && l4->icmp_type <= 137)
		return 1; /* neighbour discovery: without it IPv6 dies */
	return icmp_is_error(l4->proto, l4->icmp_type) &&
	       icmp_quote(data, data_end, l4->off + 8, p->ip4 != 0, &k) >= 0 && unsol_known(&k);
}

/*
 * ep_track_inbound tracks a new flow from off the node to dst, an
 * endpoint that lets such flows in and masquerades its own: its replies
 * then leave as that flow's, untranslated, rather than as new flows of
 * the endpoint's to masquerade (to the node's address, which the client
 * answers with an RST). Masquerade applies to the flows the endpoint
 * opens, as Linux's MASQUERADE applies to conntrack's NEW connections
 * only. With a rule set on, the firewall's to-endpoint stage tracks the
 * flow (fw_track). r: parse_l4's result for l4. A BPF-to-BPF call: its
 * keys are on a frame of its own.
 */
static __noinline int ep_track_inbound(const struct pkt *p, const struct l4 *l4, int r,
				       const struct endpoint_val *dst, __u32 len, enum xl_hook hook)
{
	const __u16 both = XL_EP_ALLOW_UNSOLICITED | XL_EP_MASQUERADE;
	struct ct_scratch *sc;
	struct ct_key k = {};
	struct ct_val *v;

	if (!p || !l4 || !dst || r != L4_OK || (dst->flags & both) != both ||
	    addr_is_link_scope(&p->dst) || fw_on())
		return 0;
	ct_key_init(&k, p, l4);
	v = bpf_map_lookup_elem(&xlane_ct, &k);
	if (ct_refresh(&k, v, l4, len))
		return 0;
	if (unsol_known(&k))
		return 0; /* a reply to the endpoint's flow, translated back */
	sc = ct_scratch_get();
	if (sc && ct_create(&k, sc, l4, len))
		metrics_count(0, XL_PASS_CT_FULL, XL_DIR_INGRESS, hook, len);
	return 0;
}

/*
 * skb_to_endpoint_unsolicited is the check for what Linux delivers to an
 * endpoint (tcx egress, netkit primary). The node's own packets have no
 * ingress device; another endpoint's come in by its own host device (a
 * packet a program passed to Linux, an XDP fallback). Anything else was
 * forwarded from off the node (or from a kernel-mode endpoint, which is
 * not in the endpoint map and looks like the outside). A stage.
 */
static __always_inline enum xl_step skb_to_endpoint_unsolicited(struct __sk_buff *skb,
								enum xl_reason *reason)
{
	const struct endpoint_val *src, *dst;
	__u32 iif = skb->ingress_ifindex;
	struct l4 l4 = {};
	struct pkt p = {};
	int r;

	if (!iif)
		return XL_CONTINUE;
	skb_pull_headers(skb, XL_UNSOL_LEN);
	if (parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, &p) !=
	    PARSE_OK)
		return XL_CONTINUE; /* ARP; Linux already judged the IP header */
	src = bpf_map_lookup_elem(&xlane_endpoints, &p.src);
	if (src && src->ifindex == iif)
		return XL_CONTINUE;
	/* A peer node's pod (natively routed, or what the overlay passed to
	 * Linux) is of the cluster, not of the outside. */
	if (peer_remote(&p.src))
		return XL_CONTINUE;
	dst = ep_local(&p);
	if (!dst)
		return XL_CONTINUE;
	r = parse_l4_skb(skb, &l4);
	if (!ep_unsol_checked(&p, dst)) {
		ep_track_inbound(&p, &l4, r, dst, skb->len, XL_HOOK_TC);
		return XL_CONTINUE;
	}
	if (ep_solicited((void *)(long)skb->data, (void *)(long)skb->data_end, &p, &l4, r,
			 skb->len))
		return XL_CONTINUE;
	return xl_final(reason, XL_DROP_UNSOLICITED);
}

#endif /* XLANE_UNSOLICITED_H */
