// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * tc_endpoint.c - the `tc` datapath: tcx programs on the host side of every
 * endpoint's veth pair.
 *
 *   container netns            node netns
 *   +-----------+            +-----------------------------------------+
 *   |   eth0  --+--- veth ---+- xlXXXX  [tcx ingress: from_endpoint]   |
 *   +-----------+            |          [tcx egress:  to_endpoint]     |
 *                            +-----------------------------------------+
 *
 * Ingress on the host veth sees what the container sends. A packet for
 * another local endpoint goes straight into that endpoint's netns with
 * bpf_redirect_peer; anything else routable leaves through the FIB with
 * bpf_redirect / bpf_redirect_neigh; everything else (ARP, ND, traffic for
 * the node, TTL expiry, no route) goes to Linux unchanged. Linux is the slow
 * path, never a black hole. Egress only counts what Linux delivers.
 *
 * The pipeline is lib/skb_endpoint.h, which netkit endpoints run too
 * (netkit_endpoint.c): edit the stages there.
 */
#include "lib/skb_endpoint.h"
#include "lib/unsolicited.h"

SEC("tcx/ingress")
int xlane_from_endpoint(struct __sk_buff *skb)
{
	const struct skb_cfg cfg = { .peer = true, .hook = XL_HOOK_TC };

	return skb_from_endpoint(skb, &cfg);
}

SEC("tcx/egress")
int xlane_to_endpoint(struct __sk_buff *skb)
{
	enum xl_reason reason = XL_DELIVER;
	__u32 len = skb->len;
	int step;

	step = skb_to_endpoint(skb, &reason); /* a reject's RST goes back in */
	metrics_count(skb->ifindex, reason, XL_DIR_INGRESS, XL_HOOK_TC, len);
	return tc_ret(skb, FW_KIND_TO_EP, step, reason);
}

XL_ABI_BTF_ANCHORS;

char __license[] SEC("license") = "Dual BSD/GPL";
