// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * netkit_endpoint.c - endpoints on netkit devices (Linux 6.7+, no backlog):
 * the programs run inside the device pair's transmit path, so a container's
 * packet meets xlane before it ever queues for the node.
 *
 *   container netns               node netns
 *   +-------------+             +--------------------------------------------+
 *   | eth0 (peer) +-- netkit ---+ xlhXXXX (primary)                          |
 *   |  xmit ------+-> [peer program: xlane_nk_from_endpoint]                 |
 *   |             |             |    the tc pipeline; a local endpoint is    |
 *   |             |             |    reached by bpf_redirect to its device   |
 *   |  rx <-------+-- [primary program: xlane_nk_to_endpoint] <- xmit        |
 *   +-------------+             +--------------------------------------------+
 *
 * Both programs are attached through the primary device (netkit links,
 * pinned like tcx links). The pair is created with the "blackhole" default
 * policy in both directions, so nothing flows until these programs are in
 * place. The peer program is the tc pipeline (lib/skb_endpoint.h): while it
 * runs, skb->dev is already the primary, so skb->ifindex is the host-side
 * device, as at tcx ingress of a veth.
 */
#include "lib/skb_endpoint.h"
#include "lib/unsolicited.h"

SEC("netkit/peer")
int xlane_nk_from_endpoint(struct __sk_buff *skb)
{
	const struct skb_cfg cfg = { .peer = false, .hook = XL_HOOK_NETKIT };

	return skb_from_endpoint(skb, &cfg);
}

/* nk_endpoint finds the endpoint a packet entering a container belongs to.
 * In the primary program skb->dev is already the container-side device (its
 * ifindex means nothing in the node's namespace), so the endpoint is found
 * by destination address; 0 (the node) for none (ARP in L2 mode,
 * multicast). */
static __always_inline __u32 nk_endpoint(struct __sk_buff *skb)
{
	struct endpoint_val *dst;
	struct pkt p = {};

	tc_pull_l4(skb);
	if (parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, &p) !=
	    PARSE_OK)
		return 0;
	dst = ep_local(&p);
	return dst ? dst->ifindex : 0;
}

/*
 * The primary program is what tcx egress is on a host veth: the firewall's
 * stage for what enters the endpoint, and the count. A reject cannot send
 * its RST back from here (skb->dev is in the container's namespace, the
 * sender is not): it drops instead.
 */
SEC("netkit/primary")
int xlane_nk_to_endpoint(struct __sk_buff *skb)
{
	enum xl_reason reason = XL_DELIVER;
	__u32 ifindex = nk_endpoint(skb);
	__u32 len = skb->len;
	int step;

	step = skb_to_endpoint(skb, &reason);
	metrics_count(ifindex, reason, XL_DIR_INGRESS, XL_HOOK_NETKIT, len);
	/* No answer from here: a replied reject is a drop (its reason,
	 * drop_fw_reject, says so). */
	return tc_ret(skb, FW_KIND_TO_EP, step == XL_REPLIED ? XL_FINAL : step, reason);
}

XL_ABI_BTF_ANCHORS;

char __license[] SEC("license") = "Dual BSD/GPL";
