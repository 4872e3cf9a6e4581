/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * maps.h - the maps every xlane program shares. They are pinned by name
 * under the daemon's pin directory, so all programs of one daemon and every
 * restart of it see the same maps.
 */
#ifndef XLANE_MAPS_H
#define XLANE_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "abi.h"

#define XL_MAX_ENDPOINTS 65536
#define XL_MAX_METRICS (XL_MAX_ENDPOINTS * 4)

/* key: endpoint address; value: host ifindex and MACs.
 * Written by the daemon on endpoint add/remove; read by every program. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct endpoint_key);
	__type(value, struct endpoint_val);
	__uint(max_entries, XL_MAX_ENDPOINTS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_endpoints SEC(".maps");

/* key: (ifindex, reason, direction); value: packets and bytes per CPU.
 * Written by every program; read, summed and pruned by the daemon. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__type(key, struct metrics_key);
	__type(value, struct metrics_val);
	__uint(max_entries, XL_MAX_METRICS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_metrics SEC(".maps");

/* key: enum xl_reason; value: the uplink's ingress counters at XDP, per
 * CPU (struct metrics_dev_val). Written by the uplink program; its ifindex
 * set, read and zeroed by the daemon. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct metrics_dev_val);
	__uint(max_entries, 64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_metrics_uplink SEC(".maps");

/* key: ifindex; value: ifindex. The devices XDP programs may redirect to:
 * every host veth of an XDP-mode endpoint and the uplink. Written by the
 * daemon; read by bpf_redirect_map. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, XL_MAX_ENDPOINTS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_devmap SEC(".maps");

/* key: (next hop, ifindex); value: MAC. Written by the daemon from netlink
 * neighbour events; read by XDP programs after bpf_fib_lookup. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct neigh_key);
	__type(value, struct neigh_val);
	__uint(max_entries, XL_MAX_ENDPOINTS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_neigh SEC(".maps");

#define XL_CT_DEFAULT_SIZE 1048576

/* key: a flow in one direction; value: state, counters, NAT rewrite.
 * Written by the datapath; read by the datapath and the daemon (ls, GC).
 * A plain hash, not LRU: an LRU would evict live idle flows when full;
 * here a full table is a counted pass to Linux and GC frees expired
 * entries. max_entries is set by the daemon at load time (--ct-size). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct ct_key);
	__type(value, struct ct_val);
	__uint(max_entries, XL_CT_DEFAULT_SIZE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_ct SEC(".maps");

/* key: 0; value: a count of the flows created in xlane_ct (ct_create
 * bumps it after its inserts; user space, by 1 << 32, after writing
 * entries itself: bpf.Objects.CTWritten). The uplink's firewall remembers
 * per CPU the flows it found no entry for (xlane_fw_miss), valid while
 * this count is unchanged (fw_lin.h): a flood is not hashed per packet. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_ct_seq SEC(".maps");

/* key: 0; value: the node's uplink and masquerade settings.
 * Written by the daemon; read by the datapath. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct xl_config);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_config SEC(".maps");

/* key: (proto, node port, family); value: endpoint address and port.
 * Written by the daemon; read by the datapath on new flows. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct publish_key);
	__type(value, struct publish_val);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_publish SEC(".maps");

/* A UDP socket's translation, for its replies: the socket and the backend
 * it was sent to; the published port or VIP the process sent to. */
struct sock_rnat_key {
	__u64 cookie;  /* bpf_get_socket_cookie */
	__u8 addr[16]; /* the backend (IPv4 as ::ffff:a.b.c.d) */
	__u16 port;    /* network order */
	__u16 pad[3];
};

struct sock_rnat_val {
	__u8 addr[16];
	__u16 port; /* network order */
	__u16 pad;
};

/* xlane_sock_rnat: key = (socket, backend); value = what the process sent
 * to. Written by sock_lb.c's connect and sendmsg hooks for UDP; read by its
 * recvmsg hooks (declared here, among the maps the first collection pins).
 * LRU: an entry of a closed socket ages out. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct sock_rnat_key);
	__type(value, struct sock_rnat_val);
	__uint(max_entries, 65536);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_sock_rnat SEC(".maps");

#define XL_MAX_SERVICES 262144
#define XL_MAGLEV_MAX 65521 /* largest table size the daemon uses */

/* key: VIP, port, proto; value: service id, table size, flags.
 * Written by the daemon; read by the datapath on new flows. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct service_key);
	__type(value, struct service_val);
	__uint(max_entries, XL_MAX_SERVICES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_services SEC(".maps");

/* key: service id; value: an array of slots (backend indices), built by
 * the daemon with Maglev (internal/maglev), sized per service (a prime
 * ~100 times its backends: BPF_F_INNER_MAP lets the sizes differ from the
 * template's; service_val.maglev_size says each one's), rewritten in place
 * when the size stays, swapped whole when it changes. Not preallocated:
 * a service costs its table, not the maximum. */
struct maglev_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, XL_MAGLEV_MAX);
	__uint(map_flags, BPF_F_INNER_MAP);
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, XL_MAX_SERVICES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct maglev_inner);
} xlane_maglev SEC(".maps");

/* key: (service id, backend index); value: backend address and port.
 * Written by the daemon; read by the datapath on new flows. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct backend_key);
	__type(value, struct backend_val);
	__uint(max_entries, XL_MAX_SERVICES * 4);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_backends SEC(".maps");

/* ClientIP session affinity: see struct affinity_key in abi.h. LRU and
 * preallocated (~100 bytes an entry): a full table evicts the clients seen
 * least recently, which then get a fresh choice. */
#define XL_AFFINITY_SIZE 65536
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct affinity_key);
	__type(value, struct affinity_val);
	__uint(max_entries, XL_AFFINITY_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_affinity SEC(".maps");

static __always_inline struct xl_config *xl_config(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&xlane_config, &zero);
}

/* devmap_has reports whether XDP may redirect to ifindex. Checked before a
 * packet is rewritten: a frame passed to Linux after its MACs, TTL or
 * checksum were rewritten for another device would be lost or corrupted. */
static __always_inline int devmap_has(__u32 ifindex)
{
	return bpf_map_lookup_elem(&xlane_devmap, &ifindex) != 0;
}

#endif /* XLANE_MAPS_H */
