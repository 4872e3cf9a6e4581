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
#define XL_MAX_METRICS	 (XL_MAX_ENDPOINTS * 4)

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

/* devmap_has reports whether XDP may redirect to ifindex. Checked before a
 * packet is rewritten: a frame passed to Linux after its MACs, TTL or
 * checksum were rewritten for another device would be lost or corrupted. */
static __always_inline int devmap_has(__u32 ifindex)
{
	return bpf_map_lookup_elem(&xlane_devmap, &ifindex) != 0;
}

#endif /* XLANE_MAPS_H */
