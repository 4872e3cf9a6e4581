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
 * into the endpoint's namespace. A new flow to a published port or a
 * service VIP creates its entries first. A service backend on another
 * node (a NodePort, externalTrafficPolicy Cluster) is reached over the
 * overlay, or natively routed through the FIB, from this node's cluster
 * address (lib/ct_nat.h ct_publish); its reply comes back here, over the
 * overlay (xlane_from_overlay) or natively routed (this program), and
 * leaves, translated back, through the FIB:
 *
 *   client --> uplink [DNAT + SNAT] --tunnel/route--> peer node --> backend pod
 *   client <-- uplink <--FIB-- [reverse NAT] <--tunnel/route-- peer node <--'
 *
 * A frame tagged with a VLAN network's VID (lib/vlan.h)
 * loses its tag here: the VLAN's hosts reach the endpoints of its network
 * and, over the overlay, the pods of peer nodes; the rest of the VLAN's
 * traffic goes to Linux through the VLAN's port. Everything else passes
 * to Linux untouched.
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
#include "lib/overlay_fwd.h"
#include "lib/fib.h"
#include "lib/fib_fwd.h"
#include "lib/vlan.h"
#include "lib/nat_too_big.h"

/* deliver hands p to dst, a local endpoint (NULL: none, Linux's). */
static __always_inline enum xl_step deliver(struct __sk_buff *skb, struct pkt *p,
					    const struct endpoint_val *dst, enum xl_reason *reason,
					    __u32 *dst_ifindex, int established)
{
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

/*
 * from_vlan: a new flow from off the node (no conntrack entry, no
 * published port), from VLAN network vnet's VLAN (its tag popped) or
 * untagged (vnet 0; lib/vlan.h). The VLAN's hosts are on their network's
 * segment: delivered to its endpoints, tunnelled to peer nodes' pods with
 * its VNI; an endpoint of another network is XL_DROP_VLAN. Untagged, an
 * endpoint of a VLAN network is XL_DROP_VLAN. The rest goes to Linux (a
 * VLAN's through its port).
 */
static __always_inline enum xl_step from_vlan(struct __sk_buff *skb, struct pkt *p,
					      enum xl_reason *reason, __u32 *dst_ifindex,
					      __u32 vnet)
{
	struct endpoint_val *dst = ep_local(p);
	enum xl_step step;

	if (dst) {
		if (vlan_apart(vnet, dst))
			return xl_final(reason, XL_DROP_VLAN);
		if (vnet)
			return deliver(skb, p, dst, reason, dst_ifindex, 0);
		return xl_final(reason, XL_PASS_NOT_FWDED);
	}
	if (!vnet)
		return xl_final(reason, XL_PASS_NOT_FWDED);
	if (p->ttl <= 1)
		return xl_final(reason, XL_PASS_TTL);
	step = overlay_forward(skb, p, vnet, reason);
	if (step != XL_CONTINUE)
		return step;
	return xl_final(reason, XL_PASS_NOT_FWDED);
}

/*
 * uplink_too_big answers a translated packet from off the node too big for
 * the overlay (overlay_forward said XL_PASS_TOO_BIG): the ICMP error
 * naming the overlay's MTU, to the client, about its packet as it sent it,
 * back out of the uplink (XL_DROP_TOO_BIG, XL_REPLIED); over the answer
 * rate or half-rewritten, XL_DROP_TOO_BIG dropped. What nat_too_big does
 * not answer (an IPv4 packet without DF, which Linux fragments; a GSO
 * packet) stays XL_PASS_TOO_BIG.
 */
static __noinline int uplink_too_big(struct __sk_buff *skb, enum xl_reason *reason)
{
	const struct overlay_cfg *c;
	__u32 zero = 0, mtu = 0;
	int rc;

	c = bpf_map_lookup_elem(&xlane_overlay, &zero);
	if (!c || bpf_check_mtu(skb, c->ifindex, &mtu, 0, 0) != BPF_MTU_CHK_RET_FRAG_NEEDED)
		return xl_final(reason, XL_PASS_TOO_BIG);
	rc = nat_too_big(skb, mtu);
	if (rc == NAT_TOO_BIG_NO)
		return xl_final(reason, XL_PASS_TOO_BIG);
	if (rc == NAT_TOO_BIG_OK && bpf_redirect(skb->ifindex, 0) == TC_ACT_REDIRECT) {
		*reason = XL_DROP_TOO_BIG;
		return XL_REPLIED;
	}
	return xl_final(reason, XL_DROP_TOO_BIG);
}

/* uplink_publish's return when it translated the packet (ct_publish's
 * *dnat), beside the enum xl_step values. */
#define UPLINK_DNAT 0x100

/*
 * uplink_publish is ct_publish for a new flow from off the node (outside):
 * an enum xl_step, or UPLINK_DNAT. A BPF-to-BPF call: inlined, its
 * lookups' spills made xlane_from_uplink's frame 48 bytes larger, and 6.1
 * bounds the chain through overlay_forward by 512 bytes (each frame
 * rounded up to 32).
 */
static __noinline int uplink_publish(struct __sk_buff *skb, struct pkt *p, struct l4 *l4,
				     const struct ct_key *k, enum xl_reason *reason)
{
	const struct xl_config *cfg = xl_config();
	int dnat = 0, rc;

	if (!skb || !p || !l4 || !k || !reason || !cfg)
		return XL_CONTINUE;
	rc = ct_publish(skb, p, l4, k, cfg, 1, &dnat, reason);
	if (rc != XL_CONTINUE)
		return rc;
	return dnat ? UPLINK_DNAT : XL_CONTINUE;
}

/*
 * forward sends on a packet from off the node that conntrack translated
 * (a hit, or a new DNAT flow). To a local endpoint: delivered. Otherwise
 * it is a flow of a service backend on another node: towards the backend
 * (a peer's pod) over the overlay with the node's VNI, or natively
 * routed through the FIB; the backend's reply, natively routed back and
 * translated to come from the node's address, out through the FIB to the
 * client. Linux could not: that reply's source is one of its own
 * addresses (a martian on the way in). An untranslated packet for no
 * endpoint is Linux's.
 */
static __always_inline enum xl_step forward(struct __sk_buff *skb, struct pkt *p,
					    enum xl_reason *reason, __u32 *dst_ifindex,
					    int established, int translated, __u32 vnet)
{
	struct endpoint_val *dst = ep_local(p);
	enum xl_step step;

	if (dst || !translated)
		return deliver(skb, p, dst, reason, dst_ifindex, established);
	if (p->ttl <= 1)
		return xl_final(reason, XL_PASS_TTL);
	step = overlay_forward(skb, p, 0, reason);
	/* Too big for the overlay: the client gets the ICMP error about its
	 * own packet (lib/nat_too_big.h). A VLAN's host would get it
	 * untagged: Linux's, as before. */
	if (step == XL_FINAL && *reason == XL_PASS_TOO_BIG && !vnet)
		return uplink_too_big(skb, reason);
	if (step != XL_CONTINUE)
		return step;
	return fib_forward(skb, p, reason);
}

static __always_inline enum xl_step from_uplink(struct __sk_buff *skb, enum xl_reason *reason,
						__u32 *dst_ifindex, __u32 vnet)
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
		/* Translated to a local endpoint, a peer's pod (a service
		 * flow's backend on another node) or an address off the node
		 * (its client, when the error came natively routed from the
		 * backend's node): forwarded as the flow's packets are. */
		return forward(skb, &p, reason, dst_ifindex, 1, 1, vnet);
	}
	ct_key_init(&k, &p, &l4);
	v = ct_refresh(&k, bpf_map_lookup_elem(&xlane_ct, &k), &l4, skb->len);
	if (v) {
		rc = ct_translate(skb, &p, &l4, v, reason);
		if (rc != XL_CONTINUE)
			return rc;
		return forward(skb, &p, reason, dst_ifindex,
			       v->dir == CT_DIR_REPLY || v->state != CT_NEW, v->nat != CT_NAT_NONE,
			       vnet);
	}
	rc = uplink_publish(skb, &p, &l4, &k, reason);
	dnat = rc == UPLINK_DNAT;
	if (dnat)
		rc = XL_CONTINUE;
	if (rc != XL_CONTINUE)
		return ct_no_backend_answer(skb, rc, *reason);
	if (dnat)
		return forward(skb, &p, reason, dst_ifindex, 0, 1, vnet);
	/* Natively routed from a peer node's pod: of the cluster. */
	if (!vnet && peer_remote(&p.src))
		return deliver(skb, &p, ep_local(&p), reason, dst_ifindex, 0);
	return from_vlan(skb, &p, reason, dst_ifindex, vnet);
}

/*
 * vlan_untag: a tagged frame on the uplink. Of no VLAN network's: Linux's
 * (XL_PASS_NON_IP; another owner's VLAN device, or dropped). Of one: the
 * tag popped, *vlan its VLAN; a second tag inside is XL_DROP_VLAN.
 */
static __always_inline enum xl_step vlan_untag(struct __sk_buff *skb, __u32 vid,
					       const struct vlan_val **vlan, enum xl_reason *reason)
{
	__u32 inner;

	*vlan = bpf_map_lookup_elem(&xlane_vlans, &vid);
	if (!*vlan)
		return xl_final(reason, XL_PASS_NON_IP);
	if (bpf_skb_vlan_pop(skb) || vlan_tagged(skb, &inner))
		return xl_final(reason, XL_DROP_VLAN);
	return XL_CONTINUE;
}

SEC("tcx/ingress")
int xlane_from_uplink(struct __sk_buff *skb)
{
	enum xl_reason reason = XL_PASS_NON_IP;
	__u32 len = skb->len, dst_ifindex = 0, ifindex = skb->ifindex, vid;
	const struct vlan_val *vlan = 0;
	int step = XL_CONTINUE;

	if (vlan_tagged(skb, &vid))
		step = vlan_untag(skb, vid, &vlan, &reason);
	if (step == XL_CONTINUE)
		step = from_uplink(skb, &reason, &dst_ifindex, vlan ? vlan->network_id : 0);
	/* What Linux should see of a VLAN's traffic, it sees on the VLAN's
	 * device: through the port, untagged. */
	if (vlan && tc_code(step, reason) == XL_TC_PASS)
		step = tc_forwarded(bpf_redirect(vlan->port, 0), XL_FWD_VLAN, &reason);
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
 * The VNI must be a network's, and a local destination must be an
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
	return deliver(skb, &p, dst, reason, dst_ifindex, established);
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
 * network's VNI, the node's XL_VNI_NODE. No peer: XL_DROP_NO_PEER; a
 * peer found down: XL_DROP_PEER_DOWN.
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

/*
 * xlane_to_vlan (tcx ingress of a VLAN's port, xlvp<VID>): what Linux sent
 * out of the VLAN's device leaves the uplink tagged with the VID
 * (lib/vlan.h).
 */
static __always_inline enum xl_step to_vlan(struct __sk_buff *skb, enum xl_reason *reason)
{
	__u32 ifindex = skb->ifindex;
	const struct vlan_val *vlan;
	const __u32 *vid;

	vid = bpf_map_lookup_elem(&xlane_vlan_dev, &ifindex);
	if (!vid)
		return xl_final(reason, XL_DROP_REDIRECT);
	vlan = bpf_map_lookup_elem(&xlane_vlans, vid);
	if (!vlan || bpf_skb_vlan_push(skb, bpf_htons(ETH_P_8021Q), *vid))
		return xl_final(reason, XL_DROP_REDIRECT);
	return tc_forwarded(bpf_redirect(vlan->uplink, 0), XL_FWD_VLAN, reason);
}

SEC("tcx/ingress")
int xlane_to_vlan(struct __sk_buff *skb)
{
	enum xl_reason reason = XL_FWD_VLAN;
	__u32 len = skb->len;
	int step;

	step = to_vlan(skb, &reason);
	metrics_count(skb->ifindex, reason, XL_DIR_EGRESS, XL_HOOK_TC, len);
	return tc_ret(skb, FW_KIND_UPLINK, step, reason);
}

XL_ABI_BTF_ANCHORS;

char __license[] SEC("license") = "Dual BSD/GPL";
