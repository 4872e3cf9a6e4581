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
 * overlay (xlane_from_overlay, tc_overlay.c) or natively routed (this
 * program), and
 * leaves, translated back, through the FIB:
 *
 *   client --> uplink [DNAT + SNAT] --tunnel/route--> peer node --> backend pod
 *   client <-- uplink <--FIB-- [reverse NAT] <--tunnel/route-- peer node <--'
 *
 * A frame tagged with a VLAN network's VID (lib/vlan.h)
 * loses its tag here: the VLAN's hosts reach the endpoints of its network
 * and, over the overlay, the pods of peer nodes; the rest of the VLAN's
 * traffic goes to Linux through the VLAN's port (the way out is
 * tc_vlan.c). Everything else passes to Linux untouched.
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
#include "lib/deliver.h"

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
			return tc_deliver(skb, p, dst, reason, dst_ifindex, 0);
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
		return tc_deliver(skb, p, dst, reason, dst_ifindex, established);
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
	return skb_fib_forward(skb, p, reason);
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
		return tc_deliver(skb, &p, ep_local(&p), reason, dst_ifindex, 0);
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
	return tc_deliver_ret(skb, ifindex, len, dst_ifindex, step, reason);
}

XL_ABI_BTF_ANCHORS;

char __license[] SEC("license") = "Dual BSD/GPL";
