/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * vlan.h - networks on a VLAN of the uplink (docs/multinode.md, "VLAN
 * networks"). The tag is pushed and popped here, in BPF: kernels without
 * 802.1Q devices (CONFIG_VLAN_8021Q off, as on the machine this was built
 * on) carry VLANs all the same. Each VLAN network has a port, a veth pair
 * xlaned makes: xlvl<VID> is the node's L3 device on the VLAN (the
 * subnet's route, ARP and ND, proxy ARP for the endpoints), its peer
 * xlvp<VID> the end the programs use.
 *
 *   in:  uplink [tc: xlane_from_uplink] tag VID (skb or frame): pop, then
 *          endpoint of the VLAN's network  --> redirect_peer
 *          endpoint of another network     --> XL_DROP_VLAN
 *          a peer node's pod               --> the overlay, the network's VNI
 *          anything else (ARP, ND, the node) --> xlvp<VID> --> xlvl<VID>: Linux
 *   out: what Linux routes out of xlvl<VID> (the endpoints' packets to the
 *        VLAN's hosts through the FIB, ARP, ND) --> xlvp<VID>
 *          [tc: xlane_to_vlan] push VID --> uplink
 *
 * Untagged on the uplink, a new flow for an endpoint of a VLAN network is
 * XL_DROP_VLAN: it is reached from its VLAN (and its VNI) only.
 */
#ifndef XLANE_VLAN_H
#define XLANE_VLAN_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "abi.h"

#define XL_VLAN_VID_MASK 0x0fff

/* key: VID; value: its network and port (struct vlan_val). Written by the
 * daemon (network create/rm, start); read by the uplink's tc programs.
 * Declared where the endpoint program includes it too, so the first
 * collection loaded creates and pins it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct vlan_val);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_vlans SEC(".maps");

/* key: ifindex of either end of a VLAN's port; value: the VID. Written by
 * the daemon; read by the uplink's tc programs. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_vlan_dev SEC(".maps");

struct vlan_tag {
	__be16 tci;
	__be16 proto;
};

/*
 * vlan_tagged says whether the frame carries an 802.1Q/802.1ad tag: in the
 * skb (where the kernel moves it before tc) or still in the frame (a
 * BPF_PROG_TEST_RUN, a frame the kernel did not untag). *vid is its VID.
 */
static __always_inline int vlan_tagged(struct __sk_buff *skb, __u32 *vid)
{
	void *data = (void *)(long)skb->data, *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct vlan_tag *tag = (void *)(eth + 1);

	if (skb->vlan_present) {
		*vid = skb->vlan_tci & XL_VLAN_VID_MASK;
		return 1;
	}
	if ((void *)(tag + 1) > data_end)
		return 0;
	if (eth->h_proto != bpf_htons(ETH_P_8021Q) && eth->h_proto != bpf_htons(ETH_P_8021AD))
		return 0;
	*vid = bpf_ntohs(tag->tci) & XL_VLAN_VID_MASK;
	return 1;
}

/* vlan_of_dev: the VLAN whose port ifindex is an end of, if any. */
static __always_inline const struct vlan_val *vlan_of_dev(__u32 ifindex)
{
	const __u32 *vid = bpf_map_lookup_elem(&xlane_vlan_dev, &ifindex);

	return vid ? bpf_map_lookup_elem(&xlane_vlans, vid) : 0;
}

/* vlan_apart: a new flow from VLAN network vnet (0: untagged) may not reach
 * endpoint dst: dst's network is on a VLAN and this is not it, or this is
 * a VLAN and dst is not its network's. */
static __always_inline int vlan_apart(__u32 vnet, const struct endpoint_val *dst)
{
	if (dst->flags & XL_EP_VLAN)
		return vnet != dst->network_id;
	return vnet != 0;
}

#endif /* XLANE_VLAN_H */
