/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * overlay.h - traffic between nodes (docs/multinode.md). Every node owns
 * pod CIDRs; xlane_peers maps each to its node. A packet for a peer node's
 * pod leaves over VXLAN: encapsulated by the tc program itself
 * (lib/overlay_encap.h, XL_OVERLAY_ENCAP_BPF) and redirected to the
 * underlay device, or through one collect_md VXLAN device the daemon
 * owns (xlvx0): the tc program sets the tunnel key (underlay address of
 * the node, VNI of the sender's network) and redirects to it; the device
 * encapsulates (UDP tunnel GSO and checksums by the kernel). What arrives
 * on that device is delivered by xlane_from_overlay (tc_uplink.c) when its
 * VNI is the destination endpoint's network. With native routing the
 * peers' prefixes are routed through their underlay addresses and the FIB
 * forwards; the map then only exempts cluster traffic from masquerade and
 * from the unsolicited-traffic check.
 *
 *   pod --veth--> [tcx: from_endpoint] --set_tunnel_key+redirect--> xlvx0 ~~UDP 4789~~>
 *   ~~> xlvx0 [tcx: xlane_from_overlay] --VNI ok, redirect_peer--> pod
 */
#ifndef XLANE_OVERLAY_H
#define XLANE_OVERLAY_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "abi.h"
#include "parse.h"

#define XL_MAX_PEERS 16384
/* VNI of the node's own traffic (its processes, Linux's forwarding) to a
 * peer's pod: the receiver delivers it to any network. Networks' VNIs are
 * 2 and up. */
#define XL_VNI_NODE 1
/* All xlane VXLAN devices carry this MAC, so a frame tunnelled by one
 * node is addressed to the device that receives it (PACKET_HOST). */
#define XL_OVERLAY_MAC { 0x02, 0x78, 0x6c, 0x76, 0x78, 0x00 }
/* ... and come from this one: the receiving device drops a frame from its
 * own MAC as a loop (vxlan_set_mac). */
#define XL_OVERLAY_SRC_MAC { 0x02, 0x78, 0x6c, 0x76, 0x78, 0x01 }

/* key: pod CIDR or cluster CIDR; value: the node (enum xl_peer_flags).
 * Written by the daemon (node add/rm, start); read by the datapath. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct peer_key);
	__type(value, struct peer_val);
	__uint(max_entries, XL_MAX_PEERS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_peers SEC(".maps");

/* key: network id; value: its VNI. Written by the daemon; read by the
 * programs that tunnel. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_net_vni SEC(".maps");

/* key: VNI; value: network id. Written by the daemon; read by
 * xlane_from_overlay. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_vni_net SEC(".maps");

/* key: 0; value: the VXLAN device. Written by the daemon. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct overlay_cfg);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_overlay SEC(".maps");

/*
 * xl_cluster is set by the loader (internal/bpf Options.Cluster) on a node
 * of a cluster (xlaned --cluster-cidr), fixed for the programs' life. A
 * node alone has no peers: its programs never look at xlane_peers, and the
 * verifier, for which a frozen .rodata value is a known constant, prunes
 * that code (no trie lookup on a lone node's packets).
 */
volatile const __u8 xl_cluster = 0;

/* peer_lookup: the cluster prefix holding a, if any. */
static __always_inline const struct peer_val *peer_lookup(const struct endpoint_key *a)
{
	struct peer_key k = { .prefixlen = 128 };

	if (!xl_cluster)
		return 0;
	__builtin_memcpy(k.addr, a->addr, 16);
	return bpf_map_lookup_elem(&xlane_peers, &k);
}

/* peer_remote: a is a pod address of another node (not this node's, not
 * an unowned cluster address). */
static __always_inline int peer_remote(const struct endpoint_key *a)
{
	const struct peer_val *v = peer_lookup(a);

	return v && !(v->flags & (XL_PEER_SELF | XL_PEER_GONE));
}

/* peer_tunnelled: a packet for a is the overlay's (a peer's pod over
 * VXLAN, or an unowned cluster address or a down peer's pod, natively
 * routed too, that the tc program drops). */
static __always_inline int peer_tunnelled(const struct endpoint_key *a)
{
	const struct peer_val *v = peer_lookup(a);

	return v && ((v->flags & XL_PEER_DOWN) || !(v->flags & (XL_PEER_SELF | XL_PEER_NATIVE)));
}

/*
 * overlay_set_key points the packet at peer's node: its underlay address
 * and vni. The inner frame is addressed to the receiving VXLAN device
 * (XL_OVERLAY_MAC). 0 on success.
 */
static __always_inline int overlay_set_key(struct __sk_buff *skb, struct ethhdr *eth,
					   const struct peer_val *peer, __u32 vni)
{
	const __u8 mac[ETH_ALEN] = XL_OVERLAY_MAC;
	const __u8 smac[ETH_ALEN] = XL_OVERLAY_SRC_MAC;
	struct bpf_tunnel_key tk = {};
	__u64 flags = 0;

	if (peer->flags & XL_PEER_V6) {
		__builtin_memcpy(tk.remote_ipv6, peer->underlay, 16);
		flags = BPF_F_TUNINFO_IPV6;
	} else {
		__u32 a;

		__builtin_memcpy(&a, &peer->underlay[12], 4);
		tk.remote_ipv4 = bpf_ntohl(a);
	}
	tk.tunnel_id = vni;
	tk.tunnel_ttl = 64;
	__builtin_memcpy(eth->h_dest, mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, smac, ETH_ALEN);
	return bpf_skb_set_tunnel_key(skb, &tk, sizeof(tk), flags);
}

#endif /* XLANE_OVERLAY_H */
