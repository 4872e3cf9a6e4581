/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * abi.h - every type shared between the BPF programs and the Go control
 * plane. This is the single definition: Go gets these types from bpf2go
 * (-type ...), never from a hand-written mirror.
 */
#ifndef XLANE_ABI_H
#define XLANE_ABI_H

#include <linux/types.h>

/*
 * Why a packet left a program. Every packet is counted under exactly one
 * reason in xlane_metrics. The Go side reads the names from BTF, so adding a
 * reason here is all it takes to make it visible in `xlane status`.
 */
enum xl_reason {
	XL_FWD_PEER = 0,	/* to a local endpoint via bpf_redirect_peer */
	XL_FWD_FIB,		/* off the endpoint via FIB + bpf_redirect */
	XL_FWD_NEIGH,		/* off the endpoint via FIB + bpf_redirect_neigh */
	XL_PASS_NON_IP,		/* ARP, VLAN, unknown ethertype: Linux handles it */
	XL_PASS_NOT_FWDED,	/* FIB: not forwarded (the node's own address,
				 * a non-unicast route, or no route at all:
				 * the kernel does not tell these apart) */
	XL_PASS_LINK_LOCAL,	/* link-local, multicast, broadcast: Linux */
	XL_PASS_TTL,		/* TTL/hop limit would expire: Linux sends ICMP */
	XL_PASS_NO_ROUTE,	/* blackhole, unreachable, prohibit, MTU,
				 * forwarding off: Linux sends the ICMP error */
	XL_PASS_NO_NEIGH,	/* XDP: next hop not in xlane_neigh yet: Linux
				 * resolves it, netlink fills the map */
	XL_PASS_NO_TARGET,	/* XDP: egress device not in xlane_devmap, or a
				 * checksum layout XDP does not complete */
	XL_PASS_TOO_BIG,	/* XDP: larger than the egress MTU (a GSO
				 * packet under generic XDP): Linux segments it */
	XL_DELIVER,		/* delivered to the endpoint by the Linux stack */
	XL_DROP_MALFORMED,	/* truncated or invalid L2/L3 header */
	XL_DROP_SPOOFED,	/* source address not owned by the sender */
	XL_DROP_REDIRECT,	/* a redirect helper refused the packet */
	XL_REASON_MAX,
};

/* Direction, seen from the endpoint (the container). */
enum xl_dir {
	XL_DIR_EGRESS = 0,	/* sent by the endpoint */
	XL_DIR_INGRESS = 1,	/* delivered to the endpoint */
};

/*
 * xlane_endpoints: key = endpoint address (IPv4 as ::ffff:a.b.c.d),
 * value = where it lives. Written by the daemon, read by the datapath.
 */
struct endpoint_key {
	__u8 addr[16];
};

struct endpoint_val {
	__u32 ifindex;		/* host-side veth */
	__u32 network_id;	/* owning network */
	__u8 mac[6];		/* container-side MAC */
	__u8 host_mac[6];	/* host-side veth MAC (the gateway MAC) */
	__u16 mtu;		/* the endpoint's MTU (L3) */
	__u16 flags;		/* enum xl_ep_flags */
};

enum xl_ep_flags {
	/* Native XDP may redirect into this endpoint: its host veth is in
	 * xlane_devmap and its peer has NAPI (GRO on), without which
	 * redirected frames are dropped. Set for `xdp`-mode endpoints. */
	XL_EP_XDP_TARGET = 1,
};

/*
 * xlane_neigh: key = (next-hop address, egress ifindex), value = its MAC.
 * Mirrors the kernel's neighbour table (ARP and ND) for the XDP datapath,
 * which cannot use bpf_redirect_neigh. Written by the daemon from netlink
 * neighbour events; read by XDP programs.
 */
struct neigh_key {
	__u8 addr[16];		/* IPv4 as ::ffff:a.b.c.d */
	__u32 ifindex;
};

struct neigh_val {
	__u8 mac[6];
	__u16 pad;
};

/*
 * xlane_metrics: key = (endpoint host ifindex, reason, direction),
 * value = packets and bytes, per CPU. Written by the datapath, read and
 * pruned by the daemon.
 */
struct metrics_key {
	__u32 ifindex;
	__u8 reason;		/* enum xl_reason */
	__u8 dir;		/* enum xl_dir */
	__u16 pad;
};

struct metrics_val {
	__u64 packets;
	__u64 bytes;
};

/* Keep enums that no program variable names in BTF, so bpf2go can emit
 * them for Go (enums only appear in BTF when something references them). */
#define XL_ABI_BTF_ANCHORS \
	const enum xl_reason *xl_btf_reason __attribute__((unused)); \
	const enum xl_dir *xl_btf_dir __attribute__((unused)); \
	const enum xl_ep_flags *xl_btf_ep_flags __attribute__((unused))

#endif /* XLANE_ABI_H */
