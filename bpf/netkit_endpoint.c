// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * netkit_endpoint.c - endpoints on netkit devices (Linux 6.7+, seed 003):
 * the programs run inside the device pair's transmit path, so a container's
 * packet meets xlane before it ever queues for the node.
 *
 *   container netns               node netns
 *   +-------------+             +-------------------------------------------+
 *   | eth0 (peer) +-- netkit ---+ xlhXXXX (primary)                         |
 *   |  xmit ------+-> [peer program: xlane_nk_from_endpoint]                |
 *   |             |             |    local endpoint: bpf_redirect to its    |
 *   |             |             |    primary; else FIB + bpf_redirect(_neigh)|
 *   |  rx <-------+-- [primary program: xlane_nk_to_endpoint] <- xmit       |
 *   +-------------+             +-------------------------------------------+
 *
 * Both programs are attached through the primary device (netkit links,
 * pinned like tcx links). The pair is created with the "blackhole" default
 * policy in both directions, so nothing flows until these programs are in
 * place. The peer program is the tc pipeline (lib/skb_endpoint.h): while it
 * runs, skb->dev is already the primary, so skb->ifindex is the host-side
 * device, as at tcx ingress of a veth.
 */
#include "lib/skb_endpoint.h"

SEC("netkit/peer")
int xlane_nk_from_endpoint(struct __sk_buff *skb)
{
	const struct skb_cfg cfg = { .peer = false };

	return skb_from_endpoint(skb, &cfg);
}

/*
 * The primary program sees what is about to enter the container. skb->dev
 * is the container-side device by then (its ifindex means nothing in the
 * node's namespace), so the endpoint is found by destination address; a
 * packet for no known endpoint address (ARP in L2 mode, multicast) is
 * counted on the node (ifindex 0).
 */
SEC("netkit/primary")
int xlane_nk_to_endpoint(struct __sk_buff *skb)
{
	struct endpoint_val *dst;
	__u32 ifindex = 0;
	struct pkt p = {};

	skb_pull_headers(skb);
	if (parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, &p) == PARSE_OK) {
		dst = ep_local(&p);
		if (dst)
			ifindex = dst->ifindex;
	}
	metrics_count(ifindex, XL_DELIVER, XL_DIR_INGRESS, skb->len);
	return XL_SKB_PASS;
}

XL_ABI_BTF_ANCHORS;

char __license[] SEC("license") = "Dual BSD/GPL";
