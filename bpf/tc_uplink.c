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
 * into the endpoint's namespace. A new flow to a published port creates its
 * entries first. Everything else passes to Linux untouched.
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

static __always_inline enum xl_step deliver(struct __sk_buff *skb, struct pkt *p,
					    enum xl_reason *reason, __u32 *dst_ifindex,
					    int established)
{
	struct endpoint_val *dst = ep_local(p);

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
	*dst_ifindex = dst->ifindex;
	return xl_final(reason, bpf_redirect_peer(dst->ifindex, 0) == TC_ACT_REDIRECT
					? XL_FWD_PEER
					: XL_DROP_REDIRECT);
}

static __always_inline enum xl_step from_uplink(struct __sk_buff *skb, enum xl_reason *reason,
						__u32 *dst_ifindex)
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
	if (parse_l4((void *)(long)skb->data, (void *)(long)skb->data_end, &p, &l4) != L4_OK) {
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
		return deliver(skb, &p, reason, dst_ifindex, 1);
	}
	ct_key_init(&k, &p, &l4);
	v = ct_refresh(&k, bpf_map_lookup_elem(&xlane_ct, &k), &l4, skb->len);
	if (v) {
		rc = ct_translate(skb, &p, &l4, v, reason);
		if (rc != XL_CONTINUE)
			return rc;
		return deliver(skb, &p, reason, dst_ifindex,
			       v->dir == CT_DIR_REPLY || v->state != CT_NEW);
	}
	rc = ct_publish(skb, &p, &l4, &k, cfg, &dnat, reason);
	if (rc != XL_CONTINUE)
		return rc;
	if (dnat)
		return deliver(skb, &p, reason, dst_ifindex, 0);
	return xl_final(reason, XL_PASS_NOT_FWDED);
}

SEC("tcx/ingress")
int xlane_from_uplink(struct __sk_buff *skb)
{
	enum xl_reason reason = XL_PASS_NON_IP;
	__u32 len = skb->len, dst_ifindex = 0, ifindex = skb->ifindex;
	int step;

	step = from_uplink(skb, &reason, &dst_ifindex);
	metrics_count(ifindex, reason, XL_DIR_INGRESS, len);
	if (reason == XL_FWD_PEER)
		metrics_count(dst_ifindex, XL_FWD_PEER, XL_DIR_INGRESS, len);
	return tc_ret(skb, FW_KIND_UPLINK, step, reason);
}

XL_ABI_BTF_ANCHORS;

char __license[] SEC("license") = "Dual BSD/GPL";
