// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * xdp_uplink.c - XDP on the node's uplink: traffic from off the node for a
 * local endpoint in an XDP-mode network goes straight to that endpoint's
 * host veth; everything else passes to Linux untouched.
 *
 *   outside ---- uplink [XDP: xlane_xdp_from_uplink] --redirect--> xlhB --> eth0 (container)
 *                  |
 *                  +-- XDP_PASS --> Linux (node traffic, tc/kernel-mode endpoints, ARP/ND, ...)
 *
 * Before anything else, the firewall's DDoS stage (lib/fw.h) drops
 * blocklisted sources, sources over their rate and, when asked, malformed
 * headers; then the uplink scope's rules run. Without those settings
 * malformed frames are passed: on the uplink xlane is a guest.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "lib/abi.h"
#include "lib/maps.h"
#include "lib/metrics.h"
#include "lib/parse.h"
#include "lib/csum.h"
#include "lib/endpoint.h"
#include "lib/l4csum.h"
#include "lib/fw.h"
#include "lib/unsolicited.h"
#include "lib/stage.h"

static __always_inline enum xl_step from_uplink(struct xdp_md *ctx, __u32 len,
						enum xl_reason *reason, __u32 *dst_ifindex)
{
	struct endpoint_val *dst;
	struct pkt p = {};
	int step, parsed, ret;

	parsed = parse_l3((void *)(long)ctx->data, (void *)(long)ctx->data_end, len, &p);
	/* DDoS defence and the uplink scope's rules come first (lib/fw.h). */
	step = fw_xdp_uplink(ctx, &p, parsed, len, reason);
	if (step != XL_CONTINUE)
		return step; /* a reject's RST goes back out */
	/* Malformed frames are passed: on the uplink xlane is a guest. */
	if (parsed != PARSE_OK)
		return xl_final(reason, XL_PASS_NON_IP);
	dst = ep_local(&p);
	if (!dst)
		return xl_final(reason, XL_PASS_NOT_FWDED);
	if (p.ttl <= 1)
		return xl_final(reason, XL_PASS_TTL);
	if (len > dst->mtu + sizeof(struct ethhdr))
		return xl_final(reason, XL_PASS_TOO_BIG);
	/* Only `xdp`-mode endpoints take native redirects (their peer has
	 * NAPI); the others are reached through Linux as before. */
	if (!(dst->flags & XL_EP_XDP_TARGET))
		return xl_final(reason, XL_PASS_NO_TARGET);
	/* A VLAN network's endpoint: the tc program behind this one judges
	 * untagged traffic for it (lib/vlan.h). */
	if (dst->flags & XL_EP_VLAN)
		return xl_final(reason, XL_PASS_NO_TARGET);
	/* The redirect skips the endpoint's tcx egress: what it refuses
	 * from off the node is refused here (lib/unsolicited.h), and the
	 * firewall runs here, and keeps the flow's conntrack entries. */
	if (ep_unsol_checked(&p, dst)) {
		struct l4 l4 = {};
		int r = parse_l4_xdp(ctx, &l4);

		if (!ep_solicited((void *)(long)ctx->data, (void *)(long)ctx->data_end, &p, &l4, r,
				  len)) {
			*dst_ifindex = dst->ifindex;
			return xl_final(reason, XL_DROP_UNSOLICITED);
		}
	} else {
		struct l4 l4 = {};
		int r = parse_l4_xdp(ctx, &l4);

		ep_track_inbound(&p, &l4, r, dst, len, XL_HOOK_XDP);
	}
	step = fw_xdp_ep(ctx, &p, FW_KIND_TO_EP, len, 1, reason);
	if (step != XL_CONTINUE)
		return step;
	/* Frames from a veth-backed uplink (or a NIC without RX checksum)
	 * may carry partial checksums: finish them (lib/l4csum.h), before
	 * anything else is rewritten, so a refusal leaves the frame intact. */
	if (l4csum_complete(ctx, &p))
		return xl_final(reason, XL_PASS_NO_TARGET);
	__builtin_memcpy(p.eth->h_dest, dst->mac, ETH_ALEN);
	__builtin_memcpy(p.eth->h_source, dst->host_mac, ETH_ALEN);
	ep_forward_l3(&p);
	ret = bpf_redirect_map(&xlane_devmap, dst->ifindex, XDP_PASS);
	*dst_ifindex = dst->ifindex;
	return xl_final(reason, ret == XDP_REDIRECT ? XL_FWD_PEER : XL_PASS_NO_TARGET);
}

static __always_inline int xdp_from_uplink(struct xdp_md *ctx)
{
	enum xl_reason reason = XL_PASS_NON_IP;
	__u32 len = bpf_xdp_get_buff_len(ctx);
	__u32 dst_ifindex = 0;
	int step;

	step = from_uplink(ctx, len, &reason, &dst_ifindex);
	/* An unsolicited packet is counted on the endpoint it was for, as the
	 * endpoint's own hook counts it when Linux forwards it. */
	if (reason == XL_DROP_UNSOLICITED) {
		metrics_count(dst_ifindex, reason, XL_DIR_INGRESS, XL_HOOK_XDP, len);
		return xdp_ret(ctx, FW_KIND_UPLINK, step, reason);
	}
	metrics_count_uplink(ctx->ingress_ifindex, reason, len);
	if (reason == XL_FWD_PEER) /* not a reject's RST */
		metrics_count(dst_ifindex, XL_FWD_PEER, XL_DIR_INGRESS, XL_HOOK_XDP, len);
	return xdp_ret(ctx, FW_KIND_UPLINK, step, reason);
}

/* Native mode: frags, for NICs with multi-buffer XDP (jumbo frames). */
SEC("xdp.frags")
int xlane_xdp_from_uplink(struct xdp_md *ctx)
{
	return xdp_from_uplink(ctx);
}

/* Generic mode: not xdp.frags, or the tcx program behind it (reverse NAT,
 * tc_uplink.c) sees what XDP passes without its MAC header; see
 * xlane_xdp_generic_from_endpoint (xdp_endpoint.c). */
SEC("xdp")
int xlane_xdp_generic_from_uplink(struct xdp_md *ctx)
{
	return xdp_from_uplink(ctx);
}

XL_ABI_BTF_ANCHORS;

char __license[] SEC("license") = "Dual BSD/GPL";
