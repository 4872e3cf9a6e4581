// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * xdp_endpoint.c - the `xdp` and `xdp-generic` datapaths: XDP on the host
 * side of every endpoint's veth pair, redirecting before any skb exists.
 *
 *   container netns              node netns
 *   +------------+             +----------------------------------------+
 *   | eth0 ------+--- veth ----+- xlhA  [XDP: xlane_xdp_from_endpoint]  |
 *   +------------+             |   | XDP_REDIRECT via xlane_devmap      |
 *   +------------+             |   v                                    |
 *   | eth0 <-----+--- veth ----+- xlhB  (peer needs NAPI: GRO on eth0)  |
 *   +------------+             |   or the uplink, via FIB + xlane_neigh |
 *                              +----------------------------------------+
 *
 * The container's egress is the host veth's ingress, so XDP sees it. A
 * packet for another local endpoint is redirected to that endpoint's host
 * veth, which transmits it into the container; anything routable leaves
 * through bpf_fib_lookup and the neighbour MAC from xlane_neigh; the rest
 * goes to Linux unchanged (XDP_PASS keeps the original skb and its state).
 *
 * The stage functions are the XDP twins of the skb pipeline's
 * (lib/skb_endpoint.h), named xdp_<stage> beside skb_<stage>; the comment
 * above each names the pair ("xdp_X | skb_X") and how the two differ.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <stdbool.h>

#include "lib/abi.h"
#include "lib/maps.h"
#include "lib/metrics.h"
#include "lib/parse.h"
#include "lib/csum.h"
#include "lib/fib.h"
#include "lib/overlay.h"
#include "lib/endpoint.h"
#include "lib/l4csum.h"
#include "lib/l4.h"
#include "lib/ct.h"
#include "lib/fw.h"
#include "lib/stage.h"
#include "lib/handoff.h"

/*
 * The same pipeline runs as two programs. Native XDP turns the packet into
 * an xdp_frame on redirect and loses CHECKSUM_PARTIAL, so it completes
 * TCP/UDP checksums first (lib/l4csum.h). Generic XDP redirects the skb
 * itself, checksum state included, so it must not touch the checksum (a NIC
 * would later finish a "partial" checksum over a complete one); it must
 * instead leave GSO super-packets, bigger than any MTU, to Linux.
 */
struct xdp_cfg {
	bool native;
};

/* Redirect to ifindex through the devmap, after the caller checked the
 * target (devmap_has / XL_EP_XDP_TARGET) and rewrote the frame. Should the
 * entry vanish in between, the fallback is Linux, not a drop. */
static __always_inline enum xl_step xdp_redirect_dev(__u32 ifindex, enum xl_reason fwd,
						     enum xl_reason *reason)
{
	int ret = bpf_redirect_map(&xlane_devmap, ifindex, XDP_PASS);

	return xl_final(reason, ret == XDP_REDIRECT ? fwd : XL_PASS_NO_TARGET);
}

/* xdp_prepare finishes the L4 checksum (native only) before anything else
 * is rewritten: if it declines, the frame goes to Linux untouched. */
static __always_inline enum xl_step xdp_prepare(struct xdp_md *ctx, const struct pkt *p,
						const struct xdp_cfg *cfg, enum xl_reason *reason)
{
	if (cfg->native && l4csum_complete(ctx, p))
		return xl_final(reason, XL_PASS_NO_TARGET);
	return XL_CONTINUE;
}

/*
 * xdp_to_local_endpoint | skb_to_local_endpoint (lib/skb_endpoint.h): p to
 * dst, a local endpoint. XDP redirects through xlane_devmap (a native
 * redirect needs the target's peer NAPI, XL_EP_XDP_TARGET) and counts the
 * delivery on dst's host device; too big for dst, or no target, is Linux's.
 */
static __always_inline enum xl_step xdp_to_local_endpoint(struct xdp_md *ctx, struct pkt *p,
							  const struct xdp_cfg *cfg,
							  const struct endpoint_val *dst, __u32 len,
							  enum xl_reason *reason)
{
	if (len > dst->mtu + sizeof(struct ethhdr))
		return xl_final(reason, XL_PASS_TOO_BIG);
	/* Native redirects need the target's peer NAPI; generic ones go
	 * through the target's xmit path and need only the devmap entry. */
	if ((cfg->native && !(dst->flags & XL_EP_XDP_TARGET)) || !devmap_has(dst->ifindex))
		return xl_final(reason, XL_PASS_NO_TARGET);
	if (xdp_prepare(ctx, p, cfg, reason) != XL_CONTINUE)
		return XL_FINAL;
	__builtin_memcpy(p->eth->h_dest, dst->mac, ETH_ALEN);
	__builtin_memcpy(p->eth->h_source, dst->host_mac, ETH_ALEN);
	ep_forward_l3(p);
	xdp_redirect_dev(dst->ifindex, XL_FWD_PEER, reason);
	if (*reason == XL_FWD_PEER)
		metrics_count(dst->ifindex, XL_FWD_PEER, XL_DIR_INGRESS, XL_HOOK_XDP, len);
	return XL_FINAL;
}

/*
 * xdp_fib_forward | skb_fib_forward (lib/fib_fwd.h): p off the node through
 * the FIB. XDP needs the next hop's MAC from xlane_neigh (below) and the
 * egress device in xlane_devmap; what it cannot send is Linux's.
 */
static __always_inline enum xl_step xdp_fib_forward(struct xdp_md *ctx, struct pkt *p,
						    const struct xdp_cfg *cfg, __u32 ifindex,
						    __u32 len, enum xl_reason *reason)
{
	struct bpf_fib_lookup fib;
	struct neigh_key nk = {};
	struct neigh_val *nv;
	long rc;

	fib_params_init(&fib, p, ifindex);
	fib_check_mtu(&fib, len - sizeof(struct ethhdr));
	/* XDP cannot hand a packet to the neighbour subsystem the way
	 * bpf_redirect_neigh does, so xlane keeps its own copy of the
	 * neighbour table (xlane_neigh) for the next hop's MAC. The lookup
	 * does not skip the kernel's neighbours: with SKIP_NEIGH the kernel
	 * fills no MAC at all, and the egress device's own MAC (smac) is
	 * needed; NO_NEIGH means Linux must resolve first anyway. */
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		break;
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return xl_final(reason, XL_PASS_NO_NEIGH);
	case BPF_FIB_LKUP_RET_NOT_FWDED:
		return xl_final(reason, XL_PASS_NOT_FWDED);
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		return xl_final(reason, XL_PASS_TOO_BIG);
	default:
		return xl_final(reason, XL_PASS_NO_ROUTE);
	}
	if (fib.family == AF_INET)
		key_from_ipv4((struct endpoint_key *)nk.addr, fib.ipv4_dst);
	else
		__builtin_memcpy(nk.addr, fib.ipv6_dst, 16);
	nk.ifindex = fib.ifindex;
	nv = bpf_map_lookup_elem(&xlane_neigh, &nk);
	if (!nv)
		return xl_final(reason, XL_PASS_NO_NEIGH);
	if (!devmap_has(fib.ifindex))
		return xl_final(reason, XL_PASS_NO_TARGET);
	if (xdp_prepare(ctx, p, cfg, reason) != XL_CONTINUE)
		return XL_FINAL;
	__builtin_memcpy(p->eth->h_dest, nv->mac, ETH_ALEN);
	__builtin_memcpy(p->eth->h_source, fib.smac, ETH_ALEN);
	ep_forward_l3(p);
	return xdp_redirect_dev(fib.ifindex, XL_FWD_FIB, reason);
}

/*
 * xdp_needs_nat: NAT is the tc program's job (it runs on the same host veth
 * after XDP_PASS, with the kernel's checksum helpers). XDP forwards a flow
 * itself only when its conntrack entry says "no translation", or when it is
 * untracked and no masquerade applies. An untranslated flow leaving the
 * node is tracked here (by the firewall stage when a rule set is on): its
 * replies get in only through its entries (lib/unsolicited.h).
 * src: the sender's entry (ep_admit); off_node: no local endpoint has the
 * destination. A BPF-to-BPF call: its frame (conntrack key and l4) is not
 * on the stack of the deeper calls after it (6.1 refused the combined 544
 * bytes).
 */
static __noinline int xdp_needs_nat(struct xdp_md *ctx, const struct pkt *p,
				    const struct endpoint_val *src, int off_node, __u32 len)
{
	struct ct_scratch *sc;
	struct ct_key k = {};
	struct ct_val *v;
	struct l4 l4 = {};
	enum l4_result r;

	r = parse_l4_xdp(ctx, &l4);
	if (r == L4_MALFORMED)
		return 1; /* the tc program drops and counts it */
	if (r == L4_OK) {
		struct service_key sk = { .port = l4.dport, .proto = l4.proto };

		ct_key_init(&k, p, &l4);
		v = bpf_map_lookup_elem(&xlane_ct, &k);
		if (v && v->nat != CT_NAT_NONE)
			return 1;
		if (v && fw_on())
			return 0;
		if (ct_refresh(&k, v, &l4, len))
			return 0;
		__builtin_memcpy(sk.addr, k.daddr, 16);
		if (bpf_map_lookup_elem(&xlane_services, &sk))
			return 1; /* a new flow to a VIP: the tc program balances */
		if ((src->flags & XL_EP_MASQUERADE) && off_node)
			return 1;
		if (off_node && !fw_on()) {
			sc = ct_scratch_get();
			if (sc && ct_create(&k, sc, &l4, len))
				metrics_count(0, XL_PASS_CT_FULL, XL_DIR_EGRESS, XL_HOOK_XDP, len);
		}
		return 0;
	}
	return (src->flags & XL_EP_MASQUERADE) && off_node;
}

/*
 * xdp_from_endpoint_stages | skb_from_endpoint_stages (lib/skb_endpoint.h):
 * the stages of a packet an endpoint sends. XDP has no conntrack/NAT stage
 * and no overlay: what needs them goes to the tc program behind it
 * (XL_PASS_TO_TC, XL_PASS_OVERLAY).
 */
static __always_inline enum xl_step xdp_from_endpoint_stages(struct xdp_md *ctx,
							     const struct xdp_cfg *cfg, __u32 len,
							     enum xl_reason *reason)
{
	struct endpoint_val *src, *dst;
	struct pkt p = {};
	int step;

	step = ep_parsed(parse_l3((void *)(long)ctx->data, (void *)(long)ctx->data_end, len, &p),
			 reason);
	if (step != XL_CONTINUE)
		return step;
	step = ep_admit(&p, ctx->ingress_ifindex, &src, reason);
	if (step != XL_CONTINUE || !src) /* !src: never when it continues */
		return step;
	dst = ep_local(&p);
	/* Cross-node traffic over the overlay: the tc program behind this
	 * one sets the tunnel key (XDP has no tunnel metadata). A local
	 * endpoint's address is in no peer's prefix (the tc program asks in
	 * the same order). */
	if (!dst && peer_tunnelled(&p.dst))
		return xl_final(reason, XL_PASS_OVERLAY);
	if (xdp_needs_nat(ctx, &p, src, !dst, len))
		return xl_final(reason, XL_PASS_TO_TC);
	/* Firewall (the tc program does it for what goes to it above). No
	 * ct stage runs behind XDP: this hook keeps the flow's entries. */
	step = fw_xdp_ep(ctx, &p, FW_KIND_FROM_EP, len, 1, reason);
	if (step != XL_CONTINUE)
		return step; /* a reject's RST goes back out */
	if (dst) {
		step = ep_apart(src, dst, reason);
		if (step != XL_CONTINUE)
			return step;
		step = fw_xdp_ep(ctx, &p, FW_KIND_TO_EP, len, 0, reason);
		if (step != XL_CONTINUE)
			return step;
		return xdp_to_local_endpoint(ctx, &p, cfg, dst, len, reason);
	}
	return xdp_fib_forward(ctx, &p, cfg, ctx->ingress_ifindex, len, reason);
}

/* xdp_from_endpoint | skb_from_endpoint (lib/skb_endpoint.h): the stages,
 * the verdict counted once, the step turned into the hook's return code. */
static __always_inline int xdp_from_endpoint(struct xdp_md *ctx, const struct xdp_cfg *cfg)
{
	enum xl_reason reason = XL_PASS_NON_IP;
	__u32 len = bpf_xdp_get_buff_len(ctx);
	int step;

	step = xdp_from_endpoint_stages(ctx, cfg, len, &reason);
	/* What goes to Linux meets the tcx program next, which counts it
	 * (lib/handoff.h). */
	if (xdp_code(step, reason) != XDP_PASS || xdp_handoff(ctx, reason))
		metrics_count(ctx->ingress_ifindex, reason, XL_DIR_EGRESS, XL_HOOK_XDP, len);
	return xdp_ret(ctx, FW_KIND_FROM_EP, step, reason);
}

SEC("xdp.frags")
int xlane_xdp_from_endpoint(struct xdp_md *ctx)
{
	const struct xdp_cfg cfg = { .native = true };

	return xdp_from_endpoint(ctx, &cfg);
}

/*
 * Not xdp.frags: for a frags program, generic XDP (6.8+) replaces an skb it
 * must copy (cloned, paged as every GSO packet is, or short of headroom:
 * most of what a veth receives) with skb_pp_cow_data, whose copy has
 * mac_len 0. The skb was past skb_reset_mac_len already, so the tcx
 * ingress program behind XDP then sees the frame from its IP header on:
 * everything XDP passed (GSO packets, flows for NAT, the node's traffic)
 * was counted as pass_non_ip and left to Linux untranslated (issue 11).
 * Without frags the kernel linearizes the same skb in place, mac_len kept,
 * as every kernel before 6.8 did for any program.
 */
SEC("xdp")
int xlane_xdp_generic_from_endpoint(struct xdp_md *ctx)
{
	const struct xdp_cfg cfg = { .native = false };

	return xdp_from_endpoint(ctx, &cfg);
}

XL_ABI_BTF_ANCHORS;

char __license[] SEC("license") = "Dual BSD/GPL";
