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

static __always_inline int from_uplink(struct xdp_md *ctx, __u32 len,
				       enum xl_reason *reason, __u32 *dst_ifindex)
{
	struct endpoint_val *dst;
	struct pkt p = {};
	int ret, parsed;

	parsed = parse_l3((void *)(long)ctx->data, (void *)(long)ctx->data_end, len, &p);
	/* DDoS defence and the uplink scope's rules come first (lib/fw.h). */
	ret = fw_xdp_uplink(ctx, &p, parsed, len, reason);
	if (ret != FW_V_ALLOW)
		return fw_xdp_ret(ret);	/* a reject's RST goes back out */
	if (ep_parsed(parsed, reason) != EP_CONTINUE) {
		if (*reason == XL_DROP_MALFORMED)
			*reason = XL_PASS_NON_IP;
		return XDP_PASS;
	}
	dst = ep_local(&p);
	if (!dst) {
		*reason = XL_PASS_NOT_FWDED;
		return XDP_PASS;
	}
	if (p.ttl <= 1) {
		*reason = XL_PASS_TTL;
		return XDP_PASS;
	}
	if (len > dst->mtu + sizeof(struct ethhdr)) {
		*reason = XL_PASS_TOO_BIG;
		return XDP_PASS;
	}
	/* Only `xdp`-mode endpoints take native redirects (their peer has
	 * NAPI); the others are reached through Linux as before. */
	if (!(dst->flags & XL_EP_XDP_TARGET)) {
		*reason = XL_PASS_NO_TARGET;
		return XDP_PASS;
	}
	/* The redirect skips the endpoint's tcx egress: its firewall runs
	 * here, and keeps the flow's conntrack entries. */
	ret = fw_xdp_ep(ctx, &p, FW_KIND_TO_EP, len, 1, reason);
	if (ret != FW_V_ALLOW)
		return fw_xdp_ret(ret);
	/* Frames from a veth-backed uplink (or a NIC without RX checksum)
	 * may carry partial checksums: finish them (lib/l4csum.h), before
	 * anything else is rewritten, so a refusal leaves the frame intact. */
	if (l4csum_complete(ctx, &p)) {
		*reason = XL_PASS_NO_TARGET;
		return XDP_PASS;
	}
	__builtin_memcpy(p.eth->h_dest, dst->mac, ETH_ALEN);
	__builtin_memcpy(p.eth->h_source, dst->host_mac, ETH_ALEN);
	ep_forward_l3(&p);
	ret = bpf_redirect_map(&xlane_devmap, dst->ifindex, XDP_PASS);
	*reason = ret == XDP_REDIRECT ? XL_FWD_PEER : XL_PASS_NO_TARGET;
	*dst_ifindex = dst->ifindex;
	return ret;
}

static __always_inline int xdp_from_uplink(struct xdp_md *ctx)
{
	enum xl_reason reason = XL_PASS_NON_IP;
	__u32 len = bpf_xdp_get_buff_len(ctx);
	__u32 dst_ifindex = 0;
	int ret;

	ret = from_uplink(ctx, len, &reason, &dst_ifindex);
	metrics_count(ctx->ingress_ifindex, reason, XL_DIR_INGRESS, len);
	if (ret == XDP_REDIRECT && dst_ifindex)	/* not a reject's RST */
		metrics_count(dst_ifindex, XL_FWD_PEER, XL_DIR_INGRESS, len);
	return ret;
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
