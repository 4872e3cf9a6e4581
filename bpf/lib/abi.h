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
	XL_DROP_NO_BACKEND,	/* a service VIP with no active backend */
	XL_PASS_TO_TC,		/* XDP: the flow needs NAT, which the tc
				 * program on the same device does */
	XL_PASS_UNTRACKED,	/* needs NAT but cannot be tracked (IPv6
				 * extension headers, fragments): Linux */
	XL_PASS_CT_FULL,	/* conntrack table full: forwarded by Linux,
				 * untranslated and untracked */
	XL_PASS_NAT_PORTS,	/* no free masquerade port for this
				 * destination: Linux */
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
	/* Masquerade this endpoint's traffic that leaves through the uplink
	 * (the network's --masquerade, on by default). */
	XL_EP_MASQUERADE = 2,
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
 * xlane_ct: connection tracking and NAT, one entry per direction like
 * Linux's two tuples. key = the flow as that direction's packets carry it;
 * value = state and what to rewrite in packets that match the key.
 * Written by the datapath (new flows, state, expiry); read by the datapath,
 * and by the daemon for `xlane ct` and garbage collection.
 */
struct ct_key {
	__u8 saddr[16];		/* IPv4 as ::ffff:a.b.c.d */
	__u8 daddr[16];
	__u16 sport;		/* network order; ICMP echo: the identifier */
	__u16 dport;		/* network order; ICMP echo: 0 */
	__u8 proto;
	__u8 pad[3];
};

enum ct_dir {
	CT_DIR_ORIG = 0,	/* the direction that opened the flow */
	CT_DIR_REPLY = 1,
};

enum ct_state {
	CT_NEW = 0,		/* one direction seen (TCP: SYN sent) */
	CT_ESTABLISHED,		/* both directions seen */
	CT_CLOSING,		/* TCP FIN seen */
	CT_CLOSED,		/* TCP RST, or FIN both ways */
};

enum ct_nat {
	CT_NAT_NONE = 0,
	CT_NAT_SRC,		/* rewrite source to nat_addr:nat_port */
	CT_NAT_DST,		/* rewrite destination to nat_addr:nat_port */
};

struct ct_val {
	__u64 expires;		/* bpf_ktime_get_ns() deadline; GC deletes after */
	__u64 packets;		/* packets matching this key */
	__u64 bytes;
	__u8 nat_addr[16];	/* the address that replaces saddr/daddr */
	__u16 nat_port;		/* network order */
	__u8 dir;		/* enum ct_dir */
	__u8 state;		/* enum ct_state (authoritative in the ORIG entry) */
	__u8 nat;		/* enum ct_nat */
	__u8 pad[3];
};

/*
 * xlane_config: one entry, written by the daemon: the node's uplink and
 * its masquerade addresses and port range.
 */
struct xl_config {
	__u32 uplink_ifindex;
	__u16 nat_port_min;	/* host order, inclusive */
	__u16 nat_port_max;
	__u8 uplink_v4[16];	/* masquerade address (::ffff:a.b.c.d), or zero */
	__u8 uplink_v6[16];	/* masquerade address, or zero */
	__u64 netns_cookie;	/* the node's netns: socket hooks act only here */
};

/*
 * xlane_publish: published ports (DNAT). key = (protocol, node port,
 * family); value = the endpoint address and port behind it. Written by the
 * daemon (`xlane endpoint publish`); read by the datapath on new flows to a
 * node address.
 */
struct publish_key {
	__u16 port;		/* network order */
	__u8 proto;
	__u8 family;		/* 4 or 6 */
};

struct publish_val {
	__u8 addr[16];
	__u16 port;		/* network order */
	__u16 pad;
};

/*
 * Services (L4 load balancer). xlane_services: key = VIP, port, protocol;
 * value = the service. xlane_maglev: service id -> an array of
 * maglev_size slots, each a backend index. xlane_backends: (service id,
 * index) -> backend. Written by the daemon; read by the datapath on the
 * first packet of a flow to a VIP, after which conntrack pins the flow to
 * its backend (removing a backend from the table never moves an
 * established flow).
 */
struct service_key {
	__u8 addr[16];		/* VIP, IPv4 as ::ffff:a.b.c.d */
	__u16 port;		/* network order */
	__u8 proto;
	__u8 pad;
};

enum service_flags {
	SVC_AFFINITY = 1,	/* hash the client address only (ClientIP) */
};

struct service_val {
	__u32 id;
	__u32 maglev_size;	/* slots in its xlane_maglev array */
	__u32 flags;		/* enum service_flags */
};

struct backend_key {
	__u32 service;
	__u32 index;
};

struct backend_val {
	__u8 addr[16];
	__u16 port;		/* network order */
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
	const enum xl_ep_flags *xl_btf_ep_flags __attribute__((unused)); \
	const enum ct_dir *xl_btf_ct_dir __attribute__((unused)); \
	const enum ct_state *xl_btf_ct_state __attribute__((unused)); \
	const enum ct_nat *xl_btf_ct_nat __attribute__((unused)); \
	const enum service_flags *xl_btf_service_flags __attribute__((unused))

#endif /* XLANE_ABI_H */
