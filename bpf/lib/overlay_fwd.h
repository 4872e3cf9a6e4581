/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * overlay_fwd.h - the tc stage that hands a packet for a peer node's pod
 * to the overlay (lib/overlay.h): the endpoint programs for their pods'
 * packets, the uplink's program for a VLAN's hosts' (lib/vlan.h).
 */
#ifndef XLANE_OVERLAY_FWD_H
#define XLANE_OVERLAY_FWD_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "abi.h"
#include "parse.h"
#include "endpoint.h"
#include "stage.h"
#include "overlay.h"
#include "overlay_encap.h"

/*
 * overlay_forward sends a packet for a peer node's pod over the overlay: the
 * tunnel key (the node's underlay address, the sending network's VNI; for
 * network_id 0, which no network has, the node's own, XL_VNI_NODE: what
 * the uplink's program tunnels to a service backend there, from this
 * node's cluster address),
 * then a redirect to the VXLAN device, which encapsulates; or, with
 * XL_OVERLAY_ENCAP_BPF, the outer headers pushed here and a redirect to
 * the underlay device (lib/overlay_encap.h). Natively routed
 * peers and this node's own prefix continue (to the FIB); an address of
 * the cluster CIDR no node owns, or no overlay device, is a counted drop
 * rather than a leak through the default route; a pod of a peer found down
 * (XL_PEER_DOWN, tunnelled or natively routed) one too, rather than a loss
 * on the underlay. A healthy peer's packet pays no more than the flags
 * test it always had. A frame of its own: the tunnel key would not fit
 * the pipeline's on 6.1.
 */
static __noinline int overlay_forward(struct __sk_buff *skb, struct pkt *p, __u32 network_id,
				      enum xl_reason *reason)
{
	const struct peer_val *peer = peer_lookup(&p->dst);
	__u32 vni = XL_VNI_NODE, *v, ifindex, mtu_len = 0, zero = 0;
	const struct overlay_cfg *c;
	struct ethhdr *eth = p->eth;
	int step;

	if (!peer || (peer->flags & XL_PEER_SELF))
		return XL_CONTINUE;
	if (peer->flags & (XL_PEER_NATIVE | XL_PEER_DOWN | XL_PEER_GONE | XL_PEER_UNENCRYPTED)) {
		if (peer->flags & XL_PEER_DOWN)
			return xl_final(reason, XL_DROP_PEER_DOWN);
		if (peer->flags & XL_PEER_UNENCRYPTED)
			return xl_final(reason, XL_DROP_UNENCRYPTED);
		if (peer->flags & XL_PEER_GONE)
			return xl_final(reason, XL_DROP_NO_PEER);
		return XL_CONTINUE; /* natively routed: the FIB */
	}
	c = bpf_map_lookup_elem(&xlane_overlay, &zero);
	ifindex = c ? c->ifindex : 0;
	if (network_id) {
		v = bpf_map_lookup_elem(&xlane_net_vni, &network_id);
		if (!v)
			return xl_final(reason, XL_DROP_NO_PEER);
		vni = *v;
	}
	if (!c || !ifindex)
		return xl_final(reason, XL_DROP_NO_PEER);
	/* Too big for the overlay (an endpoint with a larger MTU than the
	 * VXLAN device's): the redirect would drop it silently; Linux routes
	 * it to the device and sends the sender its ICMP error (PMTU). The
	 * same check for encapsulation in BPF: the device's MTU is the
	 * overlay's. */
	if (bpf_check_mtu(skb, ifindex, &mtu_len, 0, 0) == BPF_MTU_CHK_RET_FRAG_NEEDED)
		return xl_final(reason, XL_PASS_TOO_BIG);
	ep_forward_l3(p);
	if (c->flags & XL_OVERLAY_ENCAP_BPF) {
		step = overlay_encap(skb, c, peer, vni, reason);
		if (step == XL_ENCAP_REFUSED) {
			eth = (void *)(long)skb->data;
			if ((void *)(eth + 1) > (void *)(long)skb->data_end)
				return xl_final(reason, XL_DROP_REDIRECT);
		} else if (step != XL_CONTINUE) {
			return step;
		}
	}
	if (overlay_set_key(skb, eth, peer, vni))
		return xl_final(reason, XL_DROP_REDIRECT);
	return tc_forwarded(bpf_redirect(ifindex, 0), XL_FWD_OVERLAY, reason);
}

#endif /* XLANE_OVERLAY_FWD_H */
