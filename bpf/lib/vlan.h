/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * vlan.h - networks on a VLAN of the uplink (docs/multinode.md, "VLAN
 * networks"). The tag is the kernel's: xlaned makes a VLAN device on the
 * uplink per VLAN network (xlvl<VID>), Linux pushes the tag on what is
 * routed out of it and pops it from what arrives, before tc runs
 * (skb_vlan_untag, then vlan_do_receive moves the frame to the VLAN
 * device). The uplink's tc program runs on that device too and holds each
 * VLAN to its network:
 *
 *   VLAN host --802.1Q VID--> uplink [tc: still tagged -> Linux] --> xlvl<VID>
 *     [tc: xlane_from_uplink, xlane_vlan_dev says which network]
 *       --> endpoint of that network (redirect_peer)
 *       --> a peer node's pod: the network's VNI (VLAN to VXLAN)
 *       --> an endpoint of any other network: XL_DROP_VLAN
 *   untagged on the uplink --> endpoint of a VLAN network, no flow: XL_DROP_VLAN
 *
 * A network's VLAN is XL_EP_VLAN on its endpoints plus this map; the
 * endpoint programs need neither (the FIB routes a VLAN network's subnet
 * to its VLAN device).
 */
#ifndef XLANE_VLAN_H
#define XLANE_VLAN_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "abi.h"

/* key: ifindex of a VLAN device xlaned made; value: the network on that
 * VLAN. Written by the daemon (network create/rm, start); read by the
 * uplink's tc programs. Declared where the endpoint program includes it
 * too, so the first collection loaded creates and pins it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_vlan_dev SEC(".maps");

/* vlan_network: the network whose VLAN device ifindex is, 0 for any other
 * device (network ids start at 1). */
static __always_inline __u32 vlan_network(__u32 ifindex)
{
	const __u32 *net = bpf_map_lookup_elem(&xlane_vlan_dev, &ifindex);

	return net ? *net : 0;
}

/* vlan_apart: a new flow from a device on VLAN network vnet (0: an
 * untagged device) may not reach endpoint dst: dst's network is on a
 * VLAN and this is not it, or this is a VLAN and dst is not its
 * network's. */
static __always_inline int vlan_apart(__u32 vnet, const struct endpoint_val *dst)
{
	if (dst->flags & XL_EP_VLAN)
		return vnet != dst->network_id;
	return vnet != 0;
}

#endif /* XLANE_VLAN_H */
