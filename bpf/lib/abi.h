/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * abi.h - the types the datapath programs (the tc, netkit, XDP, uplink,
 * overlay, VLAN and VM port entry files, and sock_lb.c's service lookup)
 * share with the Go control plane: map keys and values, reasons,
 * directions, flags. The socket layer's shared types
 * are in the header of its feature, which only its programs include:
 * lib/accel.h (sock_accel.c) and lib/proxy.h (sock_proxy.c). Each is the
 * single definition: Go gets these types from bpf2go (-type ...,
 * internal/bpf/gen.go), never from a hand-written mirror. Types only the
 * programs use (scratch, parse state) live with their stage in lib/.
 */
#ifndef XLANE_ABI_H
#define XLANE_ABI_H

/* The declarations below keep their comments aligned at tab stops, with
 * continuation lines under them, which clang-format cannot keep. */
/* clang-format off */

#include <linux/types.h>

/* One second in nanoseconds, the unit of every time the programs keep
 * (bpf_ktime_get_ns: conntrack and affinity timestamps) and of the token
 * buckets (lib/tokens.h). The one definition. */
#define NSEC_PER_SEC 1000000000ULL

/*
 * Why a packet left a program. Every packet is counted under exactly one
 * reason in xlane_metrics. The Go side reads the names from BTF, so adding a
 * reason here is all it takes to make it visible in `xlane status`.
 */
enum xl_reason {
	XL_FWD_PEER = 0,	/* to a local endpoint via bpf_redirect_peer */
	XL_FWD_FIB,		/* off the endpoint via FIB + bpf_redirect */
	XL_FWD_NEIGH,		/* off the endpoint via FIB + bpf_redirect_neigh */
	XL_PASS_NON_IP,		/* ARP, unknown ethertype: Linux handles it */
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
	XL_PASS_TOO_BIG,	/* larger than the egress MTU: XDP (a GSO
				 * packet under generic XDP): Linux segments
				 * it; the overlay: Linux sends the ICMP
				 * error (PMTU) */
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
	XL_DROP_FW,		/* firewall: a rule's drop (lib/fw.h) */
	XL_DROP_FW_DEFAULT,	/* firewall: the scope's default policy */
	XL_DROP_FW_REJECT,	/* firewall: a rule's reject (answered with a
				 * TCP RST or ICMP unreachable where the hook
				 * can; dropped otherwise) */
	XL_DROP_BLOCKLIST,	/* uplink: source in the prefix blocklist */
	XL_DROP_RATE_LIMIT,	/* uplink: source over its packet rate */
	XL_DROP_SYN_LIMIT,	/* uplink: source over its TCP SYN rate */
	XL_PASS_FW,		/* a new flow's packet for an endpoint goes
				 * through Linux to the endpoint's firewall
				 * (tcx egress) */
	XL_DROP_ICC,		/* between endpoints of a network with ICC off
				 * (XL_EP_NO_ICC) */
	XL_DROP_ISOLATED,	/* between endpoints of different networks, one
				 * of them isolated (XL_EP_ISOLATED) */
	XL_DROP_UNSOLICITED,	/* from off the node to an endpoint, in no
				 * tracked flow and to no published port
				 * (lib/unsolicited.h); XL_EP_ALLOW_UNSOLICITED
				 * lets such packets in */
	XL_DROP_VLAN,		/* an 802.1Q/802.1ad-tagged frame from an
				 * endpoint: endpoints are untagged links, and
				 * forwarding the inner packet would carry the
				 * tag (or its VLAN's traffic) into another;
				 * or a new flow from the uplink into a VLAN
				 * network, or from a VLAN into another
				 * network (lib/vlan.h) */
	XL_FWD_OVERLAY,		/* to a peer node's pod: tunnel key set,
				 * redirected to the VXLAN device (lib/overlay.h) */
	XL_PASS_OVERLAY,	/* XDP: for a peer node's pod; the tc program
				 * behind it tunnels it */
	XL_DROP_NO_PEER,	/* for an address of the cluster CIDR that no
				 * node (no longer) owns, or no VXLAN device */
	XL_DROP_VNI,		/* from the overlay with an unknown VNI, or
				 * for an endpoint of another network */
	XL_FWD_VLAN,		/* between a VLAN network's VLAN on the uplink
				 * and its port: tag pushed or popped,
				 * redirected (lib/vlan.h) */
	XL_FWD_XSK,		/* a VM's AF_XDP port: into QEMU's socket for
				 * the frame's queue (lib/xsk.h) */
	XL_DROP_NO_XSK,		/* a VM's AF_XDP port: no socket on the
				 * frame's queue (QEMU not attached) */
	XL_DROP_PEER_DOWN,	/* for a pod of a peer node the daemon's
				 * liveness probe found down (XL_PEER_DOWN):
				 * dropped here, not lost on the underlay */
	XL_DROP_TOO_BIG,	/* from off the node, too big for the overlay
				 * after a service's translation (a backend on
				 * another node): answered with ICMP
				 * fragmentation needed / packet too big
				 * quoting the packet as the client sent it
				 * (lib/nat_too_big.h); dropped unanswered over
				 * the rate limit */
	XL_DROP_UNENCRYPTED,	/* for a pod of a peer node without a working
				 * WireGuard session, with xlaned
				 * --encryption-strict (XL_PEER_UNENCRYPTED):
				 * never sent in cleartext */
	XL_REASON_MAX,
};

/* Direction, seen from the endpoint (the container). */
enum xl_dir {
	XL_DIR_EGRESS = 0,	/* sent by the endpoint */
	XL_DIR_INGRESS = 1,	/* delivered to the endpoint */
};

/* The attach point whose program decided a counted packet (struct
 * metrics_key). */
enum xl_hook {
	XL_HOOK_TC = 0,		/* tcx, or tc cls_bpf where tcx is missing */
	XL_HOOK_XDP = 1,
	XL_HOOK_NETKIT = 2,
	XL_HOOK_SOCK = 3,	/* a socket hook of the node's processes (sock_lb.c):
				 * a refused connect() or sendmsg(), 0 bytes */
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
	/* The network's endpoints do not reach each other (Docker's
	 * enable_icc=false): set on every endpoint of the network. */
	XL_EP_NO_ICC = 4,
	/* The network's endpoints and those of other networks of the node do
	 * not reach each other (Docker's networks, as DOCKER-ISOLATION does
	 * between bridges). The node, the outside and published ports
	 * still work. */
	XL_EP_ISOLATED = 8,
	/* Hosts off the node may open flows to the network's endpoints on
	 * any port (`--allow-unsolicited`; Docker's gateway_mode_ipv4=
	 * nat-unprotected). Without it only tracked flows and published
	 * ports get in (lib/unsolicited.h). */
	XL_EP_ALLOW_UNSOLICITED = 16,
	/* The endpoint's host device has no peer (a VM's tap: QEMU reads
	 * what the device transmits): packets for it are redirected to the
	 * device's egress, whose tcx program runs the to-endpoint stage and
	 * counts them, never with bpf_redirect_peer (which would drop). */
	XL_EP_NO_PEER = 32,
	/* The network is on a VLAN of the uplink (`network create --vlan`):
	 * new flows reach it from its VLAN device only (lib/vlan.h). */
	XL_EP_VLAN = 64,
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
} __attribute__((aligned(8)));	/* copied and hashed per packet: in words
				 * (40 bytes, so no layout changes) */

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
	CT_NAT_BOTH,		/* = SRC | DST: destination to nat_addr:nat_port
				 * and source to nat_saddr:nat_sport (hairpin,
				 * and a DNAT flow whose reply tuple clashed,
				 * with its source port remapped) */
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
	__u8 pad;
	__u16 nat_sport;	/* CT_NAT_BOTH: the source's new port */
	__u8 nat_saddr[16];	/* CT_NAT_BOTH: the source's new address */
};

/*
 * xlane_config: one entry, written by the daemon: the node's uplink and
 * its masquerade addresses and port range.
 */
/* xl_config.flags */
enum xl_config_flags {
	/* A new flow to a service VIP without backends is answered, as
	 * kube-proxy answers it: a TCP RST, an ICMP port unreachable for
	 * the rest (lib/ct_nat.h ct_no_backend); without it, dropped.
	 * Counted as XL_DROP_NO_BACKEND either way. xlaned
	 * --service-no-backend (reject, the default; drop). */
	XL_CFG_NO_BACKEND_REJECT = 1,
};

struct xl_config {
	__u32 uplink_ifindex;
	__u16 nat_port_min;	/* host order, inclusive */
	__u16 nat_port_max;
	__u8 uplink_v4[16];	/* masquerade address (::ffff:a.b.c.d), or zero */
	__u8 uplink_v6[16];	/* masquerade address, or zero */
	__u64 netns_cookie;	/* the node's netns: socket hooks act only here */
	/* Source ports (host order, inclusive) for a DNAT flow whose reply
	 * tuple clashed with another flow's: the client's address is kept,
	 * so the node's own ports are no concern and the range is wide
	 * (1024-65535, as Linux's NAT), while the tuples of closed flows to
	 * shared backends stay taken for the backend's TIME_WAIT. */
	__u16 clash_port_min;
	__u16 clash_port_max;
	__u32 flags;		/* enum xl_config_flags */
	/* This node's address in the cluster, per family: the first address
	 * of its pod CIDR (never an endpoint's: ipam reserves a subnet's
	 * first address; flannel gives its VXLAN device the same), or zero
	 * (no cluster, no pod CIDR of the family). The source a flow from
	 * off the node gets when its service backend is another node's pod
	 * (lib/ct_nat.h ct_publish): peers route it back to this node, where
	 * the reply is translated. Written by the daemon (its node record). */
	__u8 cluster_v4[16];
	__u8 cluster_v6[16];
};

/*
 * xlane_peers: the cluster's pod CIDRs (lib/overlay.h). An LPM trie keyed
 * by prefix (IPv4 as ::ffff:a.b.c.d/96+len); the value says which node
 * owns the prefix and how to reach it. Written by the daemon from its node
 * records and --cluster-cidr; read by the tc and XDP programs.
 */
struct peer_key {
	__u32 prefixlen;	/* bits of addr that count */
	__u8 addr[16];
};

enum xl_peer_flags {
	XL_PEER_V6 = 1,		/* the underlay address is IPv6 */
	XL_PEER_NATIVE = 2,	/* routed natively (--routing native): the FIB
				 * reaches it through the underlay */
	XL_PEER_SELF = 4,	/* this node's own pod CIDR */
	XL_PEER_GONE = 8,	/* a cluster CIDR: an address in it that no
				 * more specific node prefix covers is
				 * dropped (XL_DROP_NO_PEER) */
	XL_PEER_DOWN = 16,	/* the node does not answer the daemon's
				 * probes (internal/daemon/peerprobe.go): its
				 * pods' packets are XL_DROP_PEER_DOWN */
	XL_PEER_UNENCRYPTED = 32, /* --encryption-strict: the node has no
				   * working WireGuard session
				   * (internal/wireguard): its pods' packets
				   * are XL_DROP_UNENCRYPTED */
};

struct peer_val {
	__u8 underlay[16];	/* the node's underlay address (IPv4 mapped) */
	__u32 node_id;		/* the node's id in this daemon's store */
	__u16 flags;		/* enum xl_peer_flags */
	__u16 pad;
};

/* How the tc programs put a packet on the overlay (overlay_cfg.flags). */
enum xl_overlay_flags {
	XL_OVERLAY_ENCAP_BPF = 1, /* push the outer headers in BPF and
				   * redirect to the underlay device
				   * (lib/overlay_encap.h), where this
				   * node has an underlay address of the
				   * peer's family; else the device */
	XL_OVERLAY_ENCRYPTED_RX = 2, /* --encryption-strict: a peer's overlay
				      * packets must come tunnelled from its
				      * cluster address (through WireGuard);
				      * from any other (cleartext VXLAN on the
				      * underlay) XL_DROP_UNENCRYPTED */
};

/*
 * xlane_overlay: one entry: the collect_md VXLAN device the tc programs
 * redirect cross-node traffic to (0: no overlay), and what encapsulation
 * in BPF needs: the VXLAN UDP port (network order) and this node's
 * underlay addresses, the outer source (all zero: none of that family).
 * Written by the daemon.
 */
struct overlay_cfg {
	__u32 ifindex;
	__u16 flags; /* enum xl_overlay_flags */
	__u16 port;  /* network order */
	__u8 src4[4];
	__u8 src6[16];
};

/*
 * xlane_vlans: key = VLAN ID (802.1Q VID), value = the network on that VLAN
 * of the uplink, the uplink and the two ends of its port, a veth pair xlaned makes:
 * `dev` is the node's L3 device on the VLAN (addresses, routes, ARP/ND,
 * xlvl<VID>), `port` its peer, where the tc programs push and pop the tag
 * (lib/vlan.h). Written by the daemon.
 */
struct vlan_val {
	__u32 network_id;
	__u32 dev;
	__u32 port;
	__u32 uplink; /* the tagged frames' device */
};

/*
 * xlane_publish: published ports (DNAT). key = (host address, protocol,
 * node port, family); value = the endpoint address and port behind it.
 * Written by the daemon (`xlane endpoint publish`, CNI portMappings); read
 * by the datapath on new flows (lib/publish.h publish_find).
 */
struct publish_key {
	__u8 addr[16];		/* the one host address it is published on
				 * (IPv4 as ::ffff:a.b.c.d: a hostIP), or zero:
				 * every node address (the uplink's; for the
				 * node's own processes, 127.0.0.0/8 too) */
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
	SVC_AFFINITY = 1,	/* ClientIP: a client's new flows go to one backend */
};

struct service_val {
	__u32 id;
	__u32 maglev_size;	/* slots in its xlane_maglev array */
	__u32 flags;		/* enum service_flags */
	/* With SVC_AFFINITY: seconds a client keeps its backend after its
	 * last new flow (xlane_affinity; Kubernetes' timeoutSeconds). 0: no
	 * state, the client address's hash alone picks the backend. */
	__u32 affinity_timeout;
};

struct backend_key {
	__u32 service;
	__u32 index;
};

enum backend_flags {
	BACKEND_DRAINING = 1,	/* weight 0: no new flows (nor affinity) */
};

struct backend_val {
	__u8 addr[16];
	__u16 port;		/* network order */
	__u16 flags;		/* enum backend_flags */
};

/*
 * xlane_affinity: ClientIP session affinity. key = (service id, client
 * address); value = the backend the client's last new flow to the service
 * got, and when. Written and read by the datapath (lib/lb.h lb_select) on
 * new flows to a service with SVC_AFFINITY and an affinity_timeout; an
 * entry older than the timeout, or whose backend is gone, replaced or
 * draining, is ignored and overwritten by a fresh choice. LRU: clients
 * that stopped coming age out. The daemon only reads it (dumps).
 */
struct affinity_key {
	__u32 service;
	__u8 client[16];	/* IPv4 as ::ffff:a.b.c.d; all zero: the node's processes (sock_lb.c) */
};

struct affinity_val {
	__u64 last;		/* bpf_ktime_get_ns() of the client's last new flow */
	__u32 index;		/* backend_key.index of the backend */
	__u16 port;		/* the backend's address and port when chosen: */
	__u16 pad;
	__u8 addr[16];		/* an index reused by another backend is not it */
};

/*
 * xlane_metrics: key = (endpoint host ifindex, reason, direction, attach
 * point), value = packets and bytes, per CPU. Written by the datapath,
 * read and pruned by the daemon.
 */
struct metrics_key {
	__u32 ifindex;
	__u8 reason;		/* enum xl_reason */
	__u8 dir;		/* enum xl_dir */
	__u8 hook;		/* enum xl_hook: the program that decided */
	__u8 pad;
};

struct metrics_val {
	__u64 packets;
	__u64 bytes;
};

/* xlane_metrics_uplink: key = enum xl_reason, value per CPU: the
 * counters of (ifindex, reason, ingress, XDP), the uplink program's, in
 * an array instead of the hash (one lookup less per uplink packet). The
 * daemon sets ifindex to the uplink's; a slot of another device (0: none)
 * leaves the count to xlane_metrics. */
struct metrics_dev_val {
	__u64 packets;
	__u64 bytes;
	__u32 ifindex;
	__u32 pad;
};

/* Keep enums that no program variable names in BTF, so bpf2go can emit
 * them for Go (enums only appear in BTF when something references them). */
/* The structs below (and lib/parse.h's headers) are reached only through
 * pointers inside other structs, which clang leaves as BTF forward
 * declarations and orders by heap address: the objects then depended on
 * the directory they were built in (check-generate). A pointer variable
 * of each emits it in full. */
#define XL_ABI_BTF_ANCHORS \
	struct bpf_flow_keys *xl_btf_flow_keys __attribute__((unused)); \
	struct bpf_sock *xl_btf_sock __attribute__((unused)); \
	const enum xl_reason *xl_btf_reason __attribute__((unused)); \
	const enum xl_dir *xl_btf_dir __attribute__((unused)); \
	const enum xl_hook *xl_btf_hook __attribute__((unused)); \
	const enum xl_ep_flags *xl_btf_ep_flags __attribute__((unused)); \
	const enum ct_dir *xl_btf_ct_dir __attribute__((unused)); \
	const enum ct_state *xl_btf_ct_state __attribute__((unused)); \
	const enum ct_nat *xl_btf_ct_nat __attribute__((unused)); \
	const enum service_flags *xl_btf_service_flags __attribute__((unused)); \
	const enum backend_flags *xl_btf_backend_flags __attribute__((unused)); \
	const enum fw_field *xl_btf_fw_field __attribute__((unused)); \
	const enum fw_kind *xl_btf_fw_kind __attribute__((unused)); \
	const enum fw_action *xl_btf_fw_action __attribute__((unused)); \
	const enum fw_limits *xl_btf_fw_limits __attribute__((unused)); \
	const enum fw_ddos_flags *xl_btf_fw_ddos_flags __attribute__((unused)); \
	const enum xl_peer_flags *xl_btf_peer_flags __attribute__((unused)); \
	const enum xl_overlay_flags *xl_btf_overlay_flags __attribute__((unused)); \
	const enum xl_config_flags *xl_btf_config_flags __attribute__((unused)); \
	const struct fw_event *xl_btf_fw_event __attribute__((unused)); \
	const enum mon_type *xl_btf_mon_type __attribute__((unused)); \
	const enum mon_verdict *xl_btf_mon_verdict __attribute__((unused)); \
	const struct mon_event *xl_btf_mon_event __attribute__((unused)); \
	const struct mon_state *xl_btf_mon_state __attribute__((unused)); \
	const struct mon_config *xl_btf_mon_config __attribute__((unused))

/*
 * Firewall (bpf/lib/fw.h, docs/firewall.md). A rule set is compiled by the
 * daemon (internal/firewall) into one "generation" of five inner maps,
 * installed into slot 0 or 1 of the outer maps xlane_fw_{exact,addr,
 * scalar,pool,rules}; xlane_fw_state says which slot is live, so a packet
 * sees one whole rule set, old or new, never a mix.
 *
 * Classification: every field lookup yields a class, and every class a
 * bitmap of the rules (one bit per rule, in priority order) whose value
 * set for that field contains the packet's value. The AND of the bitmaps
 * of all fields is the set of matching rules; its lowest bit wins.
 */
enum fw_field {
	FW_F_CTX = 0,		/* hook kind and network (fw_exact_key) */
	FW_F_SMAC,		/* source MAC (fw_exact_key) */
	FW_F_DMAC,		/* destination MAC (fw_exact_key) */
	FW_F_SRC,		/* source address (fw_addr_key LPM) */
	FW_F_DST,		/* destination address (fw_addr_key LPM) */
	FW_F_PROTO,		/* IP protocol (scalar array) */
	FW_F_SPORT,		/* TCP/UDP source port; ICMP: code */
	FW_F_DPORT,		/* TCP/UDP destination port; ICMP: type */
	FW_F_FLAGS,		/* TCP flags byte */
	FW_F_MAX,
};

/* Where a packet is classified. */
enum fw_kind {
	FW_KIND_FROM_EP = 0,	/* sent by an endpoint */
	FW_KIND_TO_EP,		/* delivered to an endpoint */
	FW_KIND_UPLINK,		/* arriving on the node's uplink */
	FW_KIND_MAX,
};

enum fw_action {
	FW_ALLOW = 0,
	FW_DROP,
	FW_REJECT,
	FW_LOG,			/* sampled event, then the next matching rule */
	FW_PASS,		/* counted, then the search goes on at bit
				 * fw_rule.pass_to (a tier's later rules
				 * skipped: ClusterNetworkPolicy's Pass) */
};

enum fw_limits {
	FW_MAX_RULES = 16384,	/* bits in a bitmap: rules + default policies */
	FW_WORDS = 256,		/* u64 words of a bitmap */
	FW_SUM_WORDS = 4,	/* u64 words of its summary (bit i: w[i] != 0) */
	FW_MAX_LOG_RULES = 32,	/* log rules per set: bounds the search loop */
	FW_MAX_PASS_TARGETS = 8,	/* distinct fw_rule.pass_to of a set: a
				 * packet meets at most one pass rule per
				 * target (each jumps past the next) */
	FW_MAX_RESOLVED = 256,	/* bits of rules with fw_rule.resolved per
				 * set: a packet to a destination its source
				 * did not resolve steps over each */
	FW_LIN_MAX = 8,		/* fw_gen.lin_rules: the uplink's list of a small set */
	/* Layout of the scalar inner array (u32 class per value). */
	FW_SC_SPORT = 0,	/* 65536 ports, then FW_NO_L4 */
	FW_SC_DPORT = 65537,
	FW_SC_PROTO = 131074,	/* 256 protocols */
	FW_SC_FLAGS = 131330,	/* 256 TCP flag bytes */
	FW_SC_SIZE = 131586,
	FW_NO_L4 = 65536,	/* port "value" of a packet without L4 ports
				 * (non-first fragment, other protocols) */
	FW_CLASS_ALL = 0,	/* pool entry 0: every bit set */
	FW_ADDR_V6 = 0x80,	/* fw_addr_key.field bit of IPv6 prefixes */
	/* fw_exact_key.field of the uplink's IPv4 tuples (fw_gen.tuple4):
	 * kind = protocol, data = source address (network order) and
	 * destination port (class value, host order, u16 in memory order);
	 * the value is the deciding rule's bit. */
	FW_EXACT_TUPLE4 = 0x40,
};

/* xlane_fw_exact inner HASH: MACs and hook contexts. */
struct fw_exact_key {
	__u8 field;		/* enum fw_field: FW_F_CTX, FW_F_SMAC, FW_F_DMAC */
	__u8 kind;		/* FW_F_CTX: enum fw_kind; else 0 */
	__u8 data[6];		/* a MAC; FW_F_CTX: network id (u32, host
				 * order) in data[0..3], 0 = every network */
};

/* xlane_fw_addr inner LPM trie: source and destination prefixes of both
 * families, apart: field is FW_F_SRC or FW_F_DST, with FW_ADDR_V6 for
 * IPv6 (an IPv6 packet never matches an IPv4 prefix through a v4-mapped
 * address). IPv4 addresses fill addr[0..3]. prefixlen counts the field
 * byte: 8 + the address prefix length. */
struct fw_addr_key {
	__u32 prefixlen;
	__u8 field;		/* FW_F_SRC or FW_F_DST, | FW_ADDR_V6 */
	__u8 addr[16];
	__u8 pad[3];
};

/* xlane_fw_pool inner ARRAY: class -> bitmap. */
struct fw_bits {
	__u64 sum[FW_SUM_WORDS];
	__u64 w[FW_WORDS];
};

/* xlane_fw_rules inner ARRAY: bit -> what the rule does. */
struct fw_rule {
	__u32 slot;		/* xlane_fw_counters index (stable per rule) */
	__u8 action;		/* enum fw_action */
	__u8 is_default;	/* a scope's default policy */
	union {
		__u16 sample;	/* log 1 in sample hits (0: never) */
		__u16 pass_to;	/* FW_PASS: the bit the search goes on
				 * from (the first rule of the next tier),
				 * always after the pass rule's own */
	};
	__u8 resolved;		/* FW_ALLOW with dst_names: the rule matches
				 * only a destination its source resolved
				 * through DNS for the rule's names, until
				 * the answer's TTL ends (xlane_fw_resolved,
				 * internal/fqdn); else the search goes on */
	__u8 pad[3];
};

/* xlane_fw_resolved: a destination an endpoint resolved through DNS for
 * the names of a rule (fw_rule.resolved), keyed by the rule's counter slot
 * (stable for the rule's lifetime); addresses as conntrack keys them (IPv4
 * as ::ffff:a.b.c.d). */
struct fw_resolved_key {
	__u32 slot;
	__u8 src[16];		/* the endpoint that resolved */
	__u8 dst[16];		/* an address of the answer */
};

struct fw_resolved_val {
	__u64 expires;		/* bpf_ktime_get_ns (CLOCK_MONOTONIC) when
				 * the answer's TTL ends */
};

/*
 * fw_gen.lin: the uplink's rules as a list tried in order (lib/fw_lin.h),
 * for a set small and simple enough: at most FW_LIN_MAX conjunctions of
 * one value per field (a rule with lists is their cross product), no MAC
 * matches, no log rules, no sampled events. Addresses as conntrack keys
 * them (IPv4 as ::ffff:a.b.c.d), read as four u32 words in memory order,
 * pre-masked; ports as fw_l4's class values (host order; ICMP type in
 * dport, code in sport; FW_NO_L4 for none), unrestricted: 0-FW_NO_L4.
 */
struct fw_lin {
	__u32 src[4];
	__u32 src_mask[4];
	__u32 dst[4];
	__u32 dst_mask[4];
	__u32 sport_lo;
	__u32 sport_hi;
	__u32 dport_lo;
	__u32 dport_hi;
	__u32 slot;		/* the rule's counter slot */
	__u8 ip6;		/* 1: IPv6 packets, 0: IPv4 */
	__u8 proto;		/* when any_proto is 0 */
	__u8 any_proto;
	__u8 flags_mask;	/* (TCP flags & mask) == comp */
	__u8 flags_comp;
	__u8 action;		/* enum fw_action: allow, drop, reject */
	__u8 is_default;
	__u8 pad;
};

/* xlane_fw_gens: key = slot (0, 1): what a generation's maps hold. */
struct fw_gen {
	__u32 fields;		/* bit (1 << enum fw_field): some rule
				 * restricts the field; others are skipped */
	__u32 established;	/* 1: packets of established flows (and
				 * ICMP errors related to a tracked flow)
				 * are allowed before any rule */
	__u32 any_class[FW_F_MAX];	/* class of a value no rule names
					 * (exact fields); [FW_F_CTX]: the
					 * uplink's class + 1, or
					 * FW_CTX_NO_UPLINK when no rule is
					 * for the uplink (0: unknown, look
					 * (uplink, 0) up) */
	__u32 log_rules;	/* log rules in the set; without any, the
				 * uplink looks conntrack up only for a
				 * packet a rule matched */
	__u32 lin;		/* entries of lin[] + 1: the uplink tries
				 * them in order instead of the bitmaps;
				 * 0: the set is not one for the list */
	struct fw_lin lin_rules[FW_LIN_MAX];
	__u32 tuple4;		/* 1: the uplink's IPv4 rules are all "one
				 * protocol, one /32 source, one destination
				 * port" (lists: their cross product), the
				 * defaults aside: an IPv4 packet's rule is
				 * one hash lookup of its tuple in the exact
				 * map (FW_EXACT_TUPLE4, lib/fw_lin.h) */
	__u32 tuple4_miss;	/* with tuple4: the bit + 1 of the uplink
				 * default that decides an IPv4 packet no
				 * tuple names; 0: none (allowed) */
};

/* fw_gen.any_class[FW_F_CTX] of a set without uplink rules. */
#define FW_CTX_NO_UPLINK 0xffffffffu
/* A scalar array's class for a value no rule's field contains (an empty
 * bitmap): no rule can match the packet, nothing to search. */
#define FW_CLASS_NONE 0xffffffffu

/* xlane_fw_state: key 0. */
struct fw_state {
	__u32 active;		/* live slot */
	__u32 on;		/* 0: no rule set installed, the stage is inert */
	__u64 generation;	/* increases with every apply (for the daemon) */
};

/* xlane_fw_counters: per-CPU, key = fw_rule.slot. */
struct fw_counter {
	__u64 packets;
	__u64 bytes;
	__u64 last_hit;		/* bpf_ktime_get_coarse_ns() */
};

/* xlane_fw_events ring buffer: a sampled log of rule hits. */
struct fw_event {
	__u64 ts;		/* bpf_ktime_get_ns() */
	__u32 slot;		/* the rule's counter slot */
	__u32 ifindex;
	__u32 len;
	__u8 kind;		/* enum fw_kind */
	__u8 action;		/* enum fw_action of the rule */
	__u8 proto;
	__u8 pad;
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport;		/* host order; ICMP: code */
	__u16 dport;		/* host order; ICMP: type */
	__u32 pad2;
};

/*
 * DDoS defence on the uplink (XDP). xlane_fw_block4/6: LPM blocklists,
 * written by the daemon (`xlane fw block`). xlane_fw_rate: per-source
 * token buckets (LRU). xlane_fw_ddos: key 0, the limits.
 */
enum fw_ddos_flags {
	FW_DDOS_BLOCKLIST = 1,	/* consult the blocklists */
	FW_DDOS_RATE = 2,	/* per-source packet rate limit */
	FW_DDOS_SYN = 4,	/* per-source SYN rate limit */
	FW_DDOS_MALFORMED = 8,	/* drop malformed IP/L4 headers early */
};

struct fw_ddos {
	__u32 flags;		/* enum fw_ddos_flags */
	__u32 pps;		/* packets per second per source */
	__u32 burst;		/* bucket depth, packets */
	__u32 syn_pps;		/* SYNs per second per source */
	__u32 syn_burst;
	__u8 v4_prefix;		/* source granularity: /32 ... */
	__u8 v6_prefix;		/* ... /64 */
	__u16 pad;
};

struct fw_block4_key {
	__u32 prefixlen;
	__u8 addr[4];
};

struct fw_block6_key {
	__u32 prefixlen;
	__u8 addr[16];
};

struct fw_rate_key {
	__u8 addr[16];		/* source, masked to v4_prefix/v6_prefix */
};

struct fw_rate_val {
	__u64 last;		/* bpf_ktime_get_ns() of the last refill */
	__u64 tokens;		/* packets x 1e9 */
	__u64 syn_tokens;	/* SYNs x 1e9 */
};

/*
 * Monitor (bpf/lib/monitor.h, `xlane monitor`, `xlane trace`): events in
 * the xlane_mon_events ring buffer, opt-in per type. xlane_mon_config says
 * which types the programs emit; the daemon sets it only while a client
 * listens (0: every hook's cost is one branch on a loaded value).
 */
enum mon_type {
	MON_DROP = 1,		/* a packet dropped (or a reject answered):
				 * reason, tuple, the deciding rule */
	MON_VERDICT = 2,	/* every packet's final verdict: reason and
				 * tuple (heavy: `xlane trace`, -t verdict) */
	MON_FW = 4,		/* a firewall rule decided: rule, action */
	MON_FLOW_NEW = 8,	/* conntrack created a flow (both entries) */
	MON_FLOW_CLOSE = 16,	/* a TCP flow closed (RST, or FIN both ways) */
	MON_NAT = 32,		/* a new flow is translated: to what */
	MON_LB = 64,		/* a service VIP picked a backend */
	MON_TYPES_ALL = 127,
};

/* What a hook did to the packet of a MON_DROP or MON_VERDICT event. */
enum mon_verdict {
	MON_V_PASS = 0,		/* to Linux (enum xl_verdict's values) */
	MON_V_DROP = 1,
	MON_V_FWD = 2,		/* redirected */
	MON_V_REPLIED = 3,	/* a reject answered it (TCP RST, ICMP) */
};

/* xlane_mon_config: key 0, written by the daemon. */
struct mon_config {
	__u32 types;		/* enum mon_type bits; 0: the monitor is off */
	__u32 rate;		/* events per second per CPU; 0: unlimited */
	__u32 burst;		/* bucket depth, events */
	__u32 pad;
};

/* xlane_mon_state: per CPU, key 0: the rate limit and what it cost.
 * Written by the datapath; the counters read (summed) by the daemon. */
struct mon_state {
	__u64 last;		/* bpf_ktime_get_ns() of the last refill */
	__u64 tokens;		/* events x 1e9 */
	__u64 emitted;		/* events written to the ring */
	__u64 suppressed;	/* over the rate: not emitted */
	__u64 lost;		/* the ring was full */
	/* What this run of a program left for its exit to emit (a call
	 * where it happens would overflow the deepest call chain's stack):
	 * lib/monitor.h. */
	__u32 rule;		/* the deciding firewall rule's slot + 1 */
	__u32 pending;		/* MON_FLOW_NEW, MON_FLOW_CLOSE bits */
	/* The rate limit's events still to suppress without reading the
	 * clock, and those it suppressed so since the clock's last read
	 * (lib/monitor.h). */
	__u32 skip;
	__u32 seen;
	struct ct_key new_key;	/* MON_FLOW_NEW: the flow as it opened */
	struct ct_val new_val;	/* ... and its entry (NAT) */
	struct ct_key close_key;	/* MON_FLOW_CLOSE */
	struct ct_key lb_key;	/* MON_LB: the flow (a socket's: no source) */
	struct backend_key lb_bk;	/* ... the service and backend index */
	struct backend_val lb_be;	/* ... the backend */
};

/* One event in xlane_mon_events. Addresses as in struct ct_key (IPv4 as
 * ::ffff:a.b.c.d); fields a type does not use are zero. */
struct mon_event {
	__u64 ts;		/* bpf_ktime_get_ns() */
	__u32 ifindex;		/* the hook's device: an endpoint's host
				 * veth, or the uplink (FLOW_*, NAT, LB: 0) */
	__u32 len;		/* the packet's bytes (0 where unknown) */
	__u8 type;		/* enum mon_type (one bit) */
	__u8 kind;		/* enum fw_kind: the hook; FW_KIND_MAX: a
				 * socket's connect() (LB) */
	__u8 reason;		/* DROP, VERDICT: enum xl_reason */
	__u8 verdict;		/* DROP, VERDICT: enum mon_verdict */
	__u8 action;		/* FW: enum fw_action; FLOW_*: enum ct_state;
				 * NAT: enum ct_nat */
	__u8 proto;		/* IP protocol (0: not IP, or unknown) */
	__u8 family;		/* 4, 6, 0: not IP */
	__u8 pad;
	__u32 rule;		/* FW, DROP by the firewall: the rule's
				 * counter slot + 1 (0: none) */
	__u32 service;		/* LB: service id */
	__u32 backend;		/* LB: backend index */
	__u16 sport;		/* network order. ICMP: FLOW_*, NAT, LB:
				 * the echo identifier (as struct ct_key);
				 * DROP, VERDICT, FW: the code */
	__u16 dport;		/* network order; ICMP DROP, VERDICT, FW:
				 * the type */
	__u8 saddr[16];
	__u8 daddr[16];
	__u8 nat_addr[16];	/* NAT: the new destination (DNAT) or source
				 * (SNAT) address; LB: the backend's */
	__u8 nat_saddr[16];	/* NAT both ways: the new source address */
	__u16 nat_port;		/* network order */
	__u16 nat_sport;	/* NAT both ways: the new source port */
	__u32 pad2;
};

/* clang-format on */

#endif /* XLANE_ABI_H */
