// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * tc_overlay.c - tcx on the node's VXLAN device (lib/overlay.h): the way
 * in from peer nodes and the tunnel key for what Linux routes to them.
 *
 *   peer node ~~UDP 4789~~> xlvx0 [tcx ingress: xlane_from_overlay]
 *                             |--redirect_peer--> local endpoint (its VNI's network)
 *                             |--redirect_neigh--> a VLAN network's host (lib/vlan.h)
 *                             +--> Linux (the node's own addresses and routes)
 *
 *   Linux --> xlvx0 [tcx egress: xlane_to_overlay] tunnel key: peer, VNI ~~> peer node
 *
 * A conntrack hit is translated first (the reply of a service flow
 * DNATed on the other node, lib/ct_nat.h); delivery to an endpoint is the
 * uplink's (lib/deliver.h).
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
#include "lib/overlay_encap.h"
#include "lib/fib.h"
#include "lib/fib_fwd.h"
#include "lib/vlan.h"
#include "lib/deliver.h"

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
 * overlay_unencrypted: with --encryption-strict (XL_OVERLAY_ENCRYPTED_RX)
 * a peer's overlay packets come through WireGuard, tunnelled from its
 * cluster address (the first of its pod CIDR, in xlane_peers); one
 * tunnelled from any other address (a peer's underlay address: VXLAN in
 * cleartext on the underlay, a non-strict peer's fallback) was not
 * encrypted: 1. Without the flag no more than the configuration's lookup.
 */
static __noinline int overlay_unencrypted(struct __sk_buff *skb)
{
	struct bpf_tunnel_key tk = {};
	const struct overlay_cfg *c;
	const struct peer_val *peer;
	struct endpoint_key a = {};
	__u32 zero = 0, v4;

	c = bpf_map_lookup_elem(&xlane_overlay, &zero);
	if (!c || !(c->flags & XL_OVERLAY_ENCRYPTED_RX))
		return 0;
	if (!bpf_skb_get_tunnel_key(skb, &tk, sizeof(tk), 0)) {
		a.addr[10] = a.addr[11] = 0xff;
		v4 = bpf_htonl(tk.remote_ipv4);
		__builtin_memcpy(&a.addr[12], &v4, 4);
	} else if (!bpf_skb_get_tunnel_key(skb, &tk, sizeof(tk), BPF_F_TUNINFO_IPV6)) {
		__builtin_memcpy(a.addr, tk.remote_ipv6, 16);
	} else {
		return 1;
	}
	peer = peer_lookup(&a);
	return !peer || (peer->flags & (XL_PEER_SELF | XL_PEER_GONE));
}

/*
 * overlay_to_vlan: a packet from the overlay for no local endpoint. Routed
 * to a VLAN's device (a host of a VLAN network: VXLAN to VLAN) it must
 * carry that network's VNI (or the node's, XL_VNI_NODE), else XL_DROP_VNI,
 * and is forwarded there (bpf_redirect_neigh: the kernel's neighbour entry
 * on the VLAN; the port tags it). A packet conntrack translated
 * (translated: the reply of an outside client's flow to a service backend
 * on the peer, now from this node's address to the client) goes where the
 * FIB says (lib/fib.h fib_redirect): Linux would drop it, its source being
 * one of its own addresses. Anything else is Linux's: the node's own
 * addresses, its routes.
 */
static __noinline int overlay_to_vlan(struct __sk_buff *skb, struct pkt *p, long net,
				      int translated, enum xl_reason *reason)
{
	const struct vlan_val *vlan;
	struct bpf_fib_lookup fib;
	long rc;

	/* Both answers name the egress device; the neighbour is left to
	 * bpf_redirect_neigh (6.1 has no BPF_FIB_LOOKUP_SKIP_NEIGH). */
	fib_params_init(&fib, p, skb->ifindex);
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return xl_final(reason, XL_PASS_NOT_FWDED);
	vlan = vlan_of_dev(fib.ifindex);
	if (!vlan) {
		if (!translated)
			return xl_final(reason, XL_PASS_NOT_FWDED);
		if (p->ttl <= 1)
			return xl_final(reason, XL_PASS_TTL);
		return fib_redirect(p, &fib, rc, reason);
	}
	if (net && vlan->network_id != net)
		return xl_final(reason, XL_DROP_VNI);
	if (p->ttl <= 1)
		return xl_final(reason, XL_PASS_TTL);
	ep_forward_l3(p);
	return tc_forwarded(bpf_redirect_neigh(fib.ifindex, 0, 0, 0), XL_FWD_NEIGH, reason);
}

/*
 * from_overlay: what a peer node tunnelled to this one (lib/overlay.h).
 * Under --encryption-strict it must have come through WireGuard
 * (overlay_unencrypted), else XL_DROP_UNENCRYPTED. The VNI must be a network's, and a local destination must be an
 * endpoint of that network (a node's own traffic, XL_VNI_NODE, reaches
 * any): else XL_DROP_VNI. A conntrack hit is translated first (the reply
 * of a service flow DNATed on the other node). Anything else for the node
 * goes to Linux, and so does a flow not yet established while a rule set
 * is installed (its to-endpoint rules run at the pod's tcx egress).
 */
static __always_inline enum xl_step from_overlay(struct __sk_buff *skb, enum xl_reason *reason,
						 __u32 *dst_ifindex)
{
	struct endpoint_val *dst;
	struct ct_key k = {};
	struct ct_val *v;
	struct l4 l4 = {};
	struct pkt p = {};
	int rc, established = 0, translated = 0;
	long net;

	net = overlay_network(skb);
	if (net < 0)
		return xl_final(reason, XL_DROP_VNI);
	if (overlay_unencrypted(skb))
		return xl_final(reason, XL_DROP_UNENCRYPTED);
	tc_pull_l4(skb);
	if (parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, &p) !=
	    PARSE_OK)
		return xl_final(reason, XL_PASS_NON_IP);
	if (parse_l4_skb(skb, &l4) == L4_OK) {
		ct_key_init(&k, &p, &l4);
		v = ct_refresh(&k, bpf_map_lookup_elem(&xlane_ct, &k), &l4, skb->len);
		if (v)
			established = v->dir == CT_DIR_REPLY || v->state != CT_NEW;
		if (v && v->nat != CT_NAT_NONE) {
			rc = ct_translate(skb, &p, &l4, v, reason);
			if (rc != XL_CONTINUE)
				return rc;
			translated = 1;
		}
	} else if (l4.proto == IPPROTO_ICMP || l4.proto == IPPROTO_ICMPV6) {
		/* An ICMP error about a translated flow (a service backend's
		 * port unreachable, sent to this node's cluster address):
		 * translated as its flow, to the client (lib/nat_icmp.h). */
		rc = ct_icmp_error(skb, &p, &l4);
		if (rc < 0)
			return xl_final(reason, XL_DROP_MALFORMED);
		established = translated = rc;
	}
	dst = ep_local(&p);
	if (!dst)
		return overlay_to_vlan(skb, &p, net, translated, reason);
	if (net && dst->network_id != net)
		return xl_final(reason, XL_DROP_VNI);
	/* A network's VNI comes from its pods on other nodes: with ICC off
	 * they do not reach this node's, as local ones do not (ep_apart). */
	if (net && (dst->flags & XL_EP_NO_ICC))
		return xl_final(reason, XL_DROP_ICC);
	/* A new flow meets the pod's to-endpoint rules (NetworkPolicy
	 * ingress) through Linux, as one from the uplink does (deliver). */
	return tc_deliver(skb, &p, dst, reason, dst_ifindex, established);
}

SEC("tcx/ingress")
int xlane_from_overlay(struct __sk_buff *skb)
{
	enum xl_reason reason = XL_PASS_NON_IP;
	__u32 len = skb->len, dst_ifindex = 0, ifindex = skb->ifindex;
	int step;

	step = from_overlay(skb, &reason, &dst_ifindex);
	return tc_deliver_ret(skb, ifindex, len, dst_ifindex, step, reason);
}

/*
 * xlane_to_overlay (tcx egress of the VXLAN device): what Linux routes to
 * a peer's pod CIDR (the node's own traffic, packets the endpoint programs
 * passed to Linux) gets its tunnel key here: an endpoint's packet its
 * network's VNI, the node's XL_VNI_NODE. No peer: XL_DROP_NO_PEER; a
 * peer found down: XL_DROP_PEER_DOWN; one without a working WireGuard
 * session under --encryption-strict: XL_DROP_UNENCRYPTED.
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
	if (peer && (peer->flags & XL_PEER_DOWN))
		return xl_final(reason, XL_DROP_PEER_DOWN);
	if (peer && (peer->flags & XL_PEER_UNENCRYPTED))
		return xl_final(reason, XL_DROP_UNENCRYPTED);
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
