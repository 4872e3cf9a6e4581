// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * tc_uplink.c - tcx ingress on the node's uplink: the return half of
 * masquerade and the way in to published ports.
 *
 *   outside --> uplink [tcx ingress: xlane_from_uplink] --redirect_peer--> container
 *                 |
 *                 +-- not ours (no ct entry, no published port) --> Linux
 *
 * A packet whose tuple has a conntrack entry is translated as the entry
 * says (reply to a masqueraded flow: node address -> endpoint; an
 * established published-port flow: node port -> endpoint) and delivered
 * into the endpoint's namespace. A new flow to a published port creates its
 * entries first. Everything else passes to Linux untouched.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#include "lib/abi.h"
#include "lib/maps.h"
#include "lib/metrics.h"
#include "lib/parse.h"
#include "lib/csum.h"
#include "lib/l4.h"
#include "lib/ct.h"
#include "lib/nat.h"
#include "lib/endpoint.h"
#include "lib/ct_nat.h"
#include "lib/nat_icmp.h"
#include "lib/fw.h"
#include "lib/stage.h"
#include "lib/overlay.h"

static __always_inline enum xl_step deliver(struct __sk_buff *skb, struct pkt *p,
					    enum xl_reason *reason, __u32 *dst_ifindex,
					    int established)
{
	struct endpoint_val *dst = ep_local(p);

	if (!dst)
		return xl_final(reason, XL_PASS_NOT_FWDED);
	if (p->ttl <= 1)
		return xl_final(reason, XL_PASS_TTL);
	/* The peer redirect would skip the endpoint's tcx egress, where its
	 * firewall runs (this program's frame leaves no stack for the stage,
	 * lib/fw.h): with a rule set installed, packets of flows not yet
	 * established take the Linux path there. */
	if (!established && fw_on())
		return xl_final(reason, XL_PASS_FW);
	__builtin_memcpy(p->eth->h_dest, dst->mac, ETH_ALEN);
	__builtin_memcpy(p->eth->h_source, dst->host_mac, ETH_ALEN);
	ep_forward_l3(p);
	/* A VM's tap has no peer: its egress (tcx) counts the packet and
	 * hands it to QEMU. */
	if (dst->flags & XL_EP_NO_PEER)
		return xl_final(reason, bpf_redirect(dst->ifindex, 0) == TC_ACT_REDIRECT
						? XL_FWD_PEER
						: XL_DROP_REDIRECT);
	*dst_ifindex = dst->ifindex;
	return xl_final(reason, bpf_redirect_peer(dst->ifindex, 0) == TC_ACT_REDIRECT
					? XL_FWD_PEER
					: XL_DROP_REDIRECT);
}

static __always_inline enum xl_step from_uplink(struct __sk_buff *skb, enum xl_reason *reason,
						__u32 *dst_ifindex)
{
	struct xl_config *cfg = xl_config();
	struct ct_key k = {};
	struct ct_val *v;
	struct l4 l4 = {};
	struct pkt p = {};
	int rc, dnat;

	if (!cfg)
		return xl_final(reason, XL_PASS_NON_IP);
	tc_pull_l4(skb);
	if (parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, &p) !=
	    PARSE_OK)
		/* Linux judges what xlane does not track */
		return xl_final(reason, XL_PASS_NON_IP);
	if (parse_l4_skb(skb, &l4) != L4_OK) {
		/* An ICMP error about a translated flow (a masqueraded one's
		 * frag-needed, a published port's unreachable, ...): to the
		 * endpoint, translated. */
		if (l4.proto != IPPROTO_ICMP && l4.proto != IPPROTO_ICMPV6)
			return xl_final(reason, XL_PASS_NON_IP);
		rc = ct_icmp_error(skb, &p, &l4);
		if (rc < 0)
			return xl_final(reason, XL_DROP_MALFORMED);
		if (rc == 0)
			return xl_final(reason, XL_PASS_NOT_FWDED);
		return deliver(skb, &p, reason, dst_ifindex, 1);
	}
	ct_key_init(&k, &p, &l4);
	v = ct_refresh(&k, bpf_map_lookup_elem(&xlane_ct, &k), &l4, skb->len);
	if (v) {
		rc = ct_translate(skb, &p, &l4, v, reason);
		if (rc != XL_CONTINUE)
			return rc;
		return deliver(skb, &p, reason, dst_ifindex,
			       v->dir == CT_DIR_REPLY || v->state != CT_NEW);
	}
	rc = ct_publish(skb, &p, &l4, &k, cfg, &dnat, reason);
	if (rc != XL_CONTINUE)
		return rc;
	if (dnat)
		return deliver(skb, &p, reason, dst_ifindex, 0);
	/* Natively routed from a peer node's pod: of the cluster. */
	if (peer_remote(&p.src))
		return deliver(skb, &p, reason, dst_ifindex, 0);
	return xl_final(reason, XL_PASS_NOT_FWDED);
}

SEC("tcx/ingress")
int xlane_from_uplink(struct __sk_buff *skb)
{
	enum xl_reason reason = XL_PASS_NON_IP;
	__u32 len = skb->len, dst_ifindex = 0, ifindex = skb->ifindex;
	int step;

	step = from_uplink(skb, &reason, &dst_ifindex);
	metrics_count(ifindex, reason, XL_DIR_INGRESS, XL_HOOK_TC, len);
	if (reason == XL_FWD_PEER && dst_ifindex)
		metrics_count(dst_ifindex, XL_FWD_PEER, XL_DIR_INGRESS, XL_HOOK_TC, len);
	return tc_ret(skb, FW_KIND_UPLINK, step, reason);
}

/* overlay_network: the network of the VNI a packet came with; 0 for the
 * node's own traffic (XL_VNI_NODE), -1 for an unknown VNI or none. */
static __noinline long overlay_network(struct __sk_buff *skb)
{
	struct bpf_tunnel_key tk = {};
	__u32 *net;

	if (bpf_skb_get_tunnel_key(skb, &tk, sizeof(tk), 0) &&
	    bpf_skb_get_tunnel_key(skb, &tk, sizeof(tk), BPF_F_TUNINFO_IPV6))
		return -1;
	if (tk.tunnel_id == XL_VNI_NODE)
		return 0;
	net = bpf_map_lookup_elem(&xlane_vni_net, &tk.tunnel_id);
	return net ? *net : -1;
}

/*
 * from_overlay: what a peer node tunnelled to this one (lib/overlay.h).
 * The VNI must be a network's, and a local destination must be an
 * endpoint of that network (a node's own traffic, XL_VNI_NODE, reaches
 * any): else XL_DROP_VNI. A conntrack hit is translated first (the reply
 * of a service flow DNATed on the other node). Anything else for the node
 * goes to Linux.
 */
static __always_inline enum xl_step from_overlay(struct __sk_buff *skb, enum xl_reason *reason,
						 __u32 *dst_ifindex)
{
	struct endpoint_val *dst;
	struct ct_key k = {};
	struct ct_val *v;
	struct l4 l4 = {};
	struct pkt p = {};
	long net;
	int rc;

	net = overlay_network(skb);
	if (net < 0)
		return xl_final(reason, XL_DROP_VNI);
	tc_pull_l4(skb);
	if (parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, &p) !=
	    PARSE_OK)
		return xl_final(reason, XL_PASS_NON_IP);
	if (parse_l4_skb(skb, &l4) == L4_OK) {
		ct_key_init(&k, &p, &l4);
		v = ct_refresh(&k, bpf_map_lookup_elem(&xlane_ct, &k), &l4, skb->len);
		if (v && v->nat != CT_NAT_NONE) {
			rc = ct_translate(skb, &p, &l4, v, reason);
			if (rc != XL_CONTINUE)
				return rc;
		}
	}
	dst = ep_local(&p);
	if (!dst)
		return xl_final(reason, XL_PASS_NOT_FWDED);
	if (net && dst->network_id != net)
		return xl_final(reason, XL_DROP_VNI);
	return deliver(skb, &p, reason, dst_ifindex, 1);
}

SEC("tcx/ingress")
int xlane_from_overlay(struct __sk_buff *skb)
{
	enum xl_reason reason = XL_PASS_NON_IP;
	__u32 len = skb->len, dst_ifindex = 0, ifindex = skb->ifindex;
	int step;

	step = from_overlay(skb, &reason, &dst_ifindex);
	metrics_count(ifindex, reason, XL_DIR_INGRESS, XL_HOOK_TC, len);
	if (reason == XL_FWD_PEER && dst_ifindex)
		metrics_count(dst_ifindex, XL_FWD_PEER, XL_DIR_INGRESS, XL_HOOK_TC, len);
	return tc_ret(skb, FW_KIND_UPLINK, step, reason);
}

/*
 * xlane_to_overlay (tcx egress of the VXLAN device): what Linux routes to
 * a peer's pod CIDR (the node's own traffic, packets the endpoint programs
 * passed to Linux) gets its tunnel key here: an endpoint's packet its
 * network's VNI, the node's XL_VNI_NODE. No peer: XL_DROP_NO_PEER.
 * Packets the endpoint programs redirected already carry a key and pass.
 */
static __always_inline enum xl_step to_overlay(struct __sk_buff *skb, enum xl_reason *reason)
{
	const struct endpoint_val *src;
	const struct peer_val *peer;
	__u32 vni = XL_VNI_NODE, *v;
	struct pkt p = {};

	skb_pull_headers(skb, XL_PARSE_LEN);
	if (parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, &p) !=
	    PARSE_OK)
		return xl_final(reason, XL_DROP_NO_PEER);
	/* The node's own chatter on the device (IPv6 router solicitations,
	 * MLD): no tunnel to put it in; the device drops it. */
	if (addr_is_link_scope(&p.dst))
		return xl_final(reason, XL_PASS_LINK_LOCAL);
	peer = peer_lookup(&p.dst);
	if (!peer || (peer->flags & (XL_PEER_SELF | XL_PEER_NATIVE | XL_PEER_GONE)))
		return xl_final(reason, XL_DROP_NO_PEER);
	src = bpf_map_lookup_elem(&xlane_endpoints, &p.src);
	if (src) {
		v = bpf_map_lookup_elem(&xlane_net_vni, &src->network_id);
		if (!v)
			return xl_final(reason, XL_DROP_NO_PEER);
		vni = *v;
	}
	if (overlay_set_key(skb, p.eth, peer, vni))
		return xl_final(reason, XL_DROP_REDIRECT);
	return xl_final(reason, XL_FWD_OVERLAY);
}

SEC("tcx/egress")
int xlane_to_overlay(struct __sk_buff *skb)
{
	enum xl_reason reason = XL_FWD_OVERLAY;
	__u32 len = skb->len;

	/* Redirected by an endpoint program, its key set: counted there. */
	if (overlay_network(skb) != -1)
		return TC_ACT_UNSPEC;
	to_overlay(skb, &reason);
	metrics_count(skb->ifindex, reason, XL_DIR_EGRESS, XL_HOOK_TC, len);
	return xl_reason_verdict(reason) == XL_V_DROP ? TC_ACT_SHOT : TC_ACT_UNSPEC;
}

XL_ABI_BTF_ANCHORS;

char __license[] SEC("license") = "Dual BSD/GPL";
