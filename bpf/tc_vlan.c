// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * tc_vlan.c - tcx ingress on a VLAN network's port (lib/vlan.h): what Linux
 * sends out of the VLAN's device leaves the uplink tagged.
 *
 *   Linux --> xlvl<VID> --veth--> xlvp<VID> [tcx ingress: xlane_to_vlan] push VID --> uplink
 *
 * The way in (a tagged frame on the uplink, its tag popped) is the
 * uplink's program (tc_uplink.c).
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lib/abi.h"
#include "lib/maps.h"
#include "lib/metrics.h"
#include "lib/fw.h"
#include "lib/stage.h"
#include "lib/vlan.h"

/*
 * xlane_to_vlan (tcx ingress of a VLAN's port, xlvp<VID>): what Linux sent
 * out of the VLAN's device leaves the uplink tagged with the VID
 * (lib/vlan.h).
 */
static __always_inline enum xl_step to_vlan(struct __sk_buff *skb, enum xl_reason *reason)
{
	__u32 ifindex = skb->ifindex;
	const struct vlan_val *vlan;
	const __u32 *vid;

	vid = bpf_map_lookup_elem(&xlane_vlan_dev, &ifindex);
	if (!vid)
		return xl_final(reason, XL_DROP_REDIRECT);
	vlan = bpf_map_lookup_elem(&xlane_vlans, vid);
	if (!vlan || bpf_skb_vlan_push(skb, bpf_htons(ETH_P_8021Q), *vid))
		return xl_final(reason, XL_DROP_REDIRECT);
	return tc_forwarded(bpf_redirect(vlan->uplink, 0), XL_FWD_VLAN, reason);
}

SEC("tcx/ingress")
int xlane_to_vlan(struct __sk_buff *skb)
{
	enum xl_reason reason = XL_FWD_VLAN;
	__u32 len = skb->len;
	int step;

	step = to_vlan(skb, &reason);
	metrics_count(skb->ifindex, reason, XL_DIR_EGRESS, XL_HOOK_TC, len);
	return tc_ret(skb, FW_KIND_UPLINK, step, reason);
}

XL_ABI_BTF_ANCHORS;

char __license[] SEC("license") = "Dual BSD/GPL";
