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
#include "lib/natstage.h"
#include "lib/fw.h"

#define XL_TC_PASS TC_ACT_UNSPEC

static __always_inline int deliver(struct __sk_buff *skb, struct pkt *p,
				   enum xl_reason *reason, __u32 *dst_ifindex, int established)
{
	struct endpoint_val *dst = ep_local(p);

	if (!dst) {
		*reason = XL_PASS_NOT_FWDED;
		return XL_TC_PASS;
	}
	if (p->ttl <= 1) {
		*reason = XL_PASS_TTL;
		return XL_TC_PASS;
	}
	/* The peer redirect would skip the endpoint's tcx egress, where its
	 * firewall runs (this program's frame leaves no stack for the stage,
	 * lib/fw.h): with a rule set installed, packets of flows not yet
	 * established take the Linux path there. */
	if (!established && fw_on()) {
		*reason = XL_PASS_FW;
		return XL_TC_PASS;
	}
	__builtin_memcpy(p->eth->h_dest, dst->mac, ETH_ALEN);
	__builtin_memcpy(p->eth->h_source, dst->host_mac, ETH_ALEN);
	ep_forward_l3(p);
	*reason = XL_FWD_PEER;
	*dst_ifindex = dst->ifindex;
	return bpf_redirect_peer(dst->ifindex, 0);
}

static __always_inline int from_uplink(struct __sk_buff *skb, enum xl_reason *reason,
				       __u32 *dst_ifindex)
{
	struct xl_config *cfg = xl_config();
	struct ct_key k = {};
	struct ct_val *v;
	struct l4 l4 = {};
	struct pkt p = {};
	int rc;

	if (!cfg)
		return XL_TC_PASS;
	tc_pull_l4(skb);
	if (parse_l3((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, &p) != PARSE_OK)
		return XL_TC_PASS;	/* Linux judges what xlane does not track */
	if (parse_l4((void *)(long)skb->data, (void *)(long)skb->data_end, &p, &l4) != L4_OK) {
		/* An ICMP error about a translated flow (a masqueraded one's
		 * frag-needed, a published port's unreachable, ...): to the
		 * endpoint, translated. */
		if (l4.proto != IPPROTO_ICMP && l4.proto != IPPROTO_ICMPV6)
			return XL_TC_PASS;
		rc = ct_icmp_error(skb, &p, &l4);
		if (rc < 0) {
			*reason = XL_DROP_MALFORMED;
			return TC_ACT_SHOT;
		}
		if (rc == 0) {
			*reason = XL_PASS_NOT_FWDED;
			return XL_TC_PASS;
		}
		return deliver(skb, &p, reason, dst_ifindex, 1);
	}
	ct_key_init(&k, &p, &l4);
	v = bpf_map_lookup_elem(&xlane_ct, &k);
	if (v && ct_hit(&k, v, &l4, skb->len)) {
		/* Half a flow (ct_hit): forget it; the packet is new. */
		bpf_map_delete_elem(&xlane_ct, &k);
		v = 0;
	}
	if (v) {
		if (ct_translate(skb, &p, &l4, v, reason) != EP_CONTINUE)
			return TC_ACT_SHOT;
		return deliver(skb, &p, reason, dst_ifindex,
			       v->dir == CT_DIR_REPLY || v->state != CT_NEW);
	}
	rc = ct_publish(skb, &p, &l4, &k, cfg, reason);
	if (rc > 0)
		return deliver(skb, &p, reason, dst_ifindex, 0);
	if (rc < 0)
		return (*reason == XL_DROP_MALFORMED || *reason == XL_DROP_NO_BACKEND) ? TC_ACT_SHOT : XL_TC_PASS;
	*reason = XL_PASS_NOT_FWDED;
	return XL_TC_PASS;
}

SEC("tcx/ingress")
int xlane_from_uplink(struct __sk_buff *skb)
{
	enum xl_reason reason = XL_PASS_NON_IP;
	__u32 len = skb->len, dst_ifindex = 0, ifindex = skb->ifindex;
	int ret;

	ret = from_uplink(skb, &reason, &dst_ifindex);
	if (reason == XL_FWD_PEER && ret != TC_ACT_REDIRECT)
		reason = XL_DROP_REDIRECT;
	metrics_count(ifindex, reason, XL_DIR_INGRESS, len);
	if (ret == TC_ACT_REDIRECT)
		metrics_count(dst_ifindex, XL_FWD_PEER, XL_DIR_INGRESS, len);
	return ret;
}

XL_ABI_BTF_ANCHORS;

char __license[] SEC("license") = "Dual BSD/GPL";
