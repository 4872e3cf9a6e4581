/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * deliver.h - how a packet from off the node reaches a local endpoint: the
 * one body the uplink's tc program (tc_uplink.c) and the VXLAN device's
 * (tc_overlay.c) share.
 */
#ifndef XLANE_DELIVER_H
#define XLANE_DELIVER_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "abi.h"
#include "parse.h"
#include "endpoint.h"
#include "metrics.h"
#include "fw.h"
#include "stage.h"

/*
 * tc_deliver hands p to dst, a local endpoint (NULL: none, Linux's);
 * *dst_ifindex is the endpoint's host device when it was peer-redirected
 * (the caller counts the delivery there). established: the packet's flow
 * is established (or a reply).
 */
static __always_inline enum xl_step tc_deliver(struct __sk_buff *skb, struct pkt *p,
					       const struct endpoint_val *dst,
					       enum xl_reason *reason, __u32 *dst_ifindex,
					       int established)
{
	if (!dst)
		return xl_final(reason, XL_PASS_NOT_FWDED);
	if (p->ttl <= 1)
		return xl_final(reason, XL_PASS_TTL);
	/* The peer redirect would skip the endpoint's tcx egress, where its
	 * firewall runs (these programs' frames leave no stack for the stage,
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
 * tc_deliver_ret is the exit of a program that delivers with tc_deliver:
 * the packet counted on the device it arrived on (ifindex, len as it
 * arrived), a peer-redirected delivery on the endpoint's host device too
 * (which never transmits it), and the step turned into tc's return code.
 */
static __always_inline int tc_deliver_ret(struct __sk_buff *skb, __u32 ifindex, __u32 len,
					  __u32 dst_ifindex, int step, enum xl_reason reason)
{
	metrics_count(ifindex, reason, XL_DIR_INGRESS, XL_HOOK_TC, len);
	if (reason == XL_FWD_PEER && dst_ifindex)
		metrics_count(dst_ifindex, XL_FWD_PEER, XL_DIR_INGRESS, XL_HOOK_TC, len);
	return tc_ret(skb, FW_KIND_UPLINK, step, reason);
}

#endif /* XLANE_DELIVER_H */
