/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * fw_maps.h - the firewall's maps: the generation layout of a rule set
 * (inner map templates, the outer arrays, the live slot), rule counters and
 * events, and the DDoS stage's limits, blocklists and token buckets.
 */
#ifndef XLANE_FW_MAPS_H
#define XLANE_FW_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "abi.h"

/* Inner map templates first: the daemon creates one of each per
 * generation, with its own max_entries (the arrays carry BPF_F_INNER_MAP
 * so their sizes may differ from the template's).
 */

struct fw_exact_inner {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct fw_exact_key);
	__type(value, __u32);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
};

struct fw_addr_inner {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct fw_addr_key);
	__type(value, __u32);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
};

/* The scalar and rules arrays have fixed sizes: without BPF_F_INNER_MAP
 * the verifier inlines their lookups (a few instructions instead of a
 * helper call). The pool's size follows the rule set. */
struct fw_scalar_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, FW_SC_SIZE);
};

struct fw_pool_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct fw_bits);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_INNER_MAP);
};

struct fw_rules_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct fw_rule);
	__uint(max_entries, FW_MAX_RULES);
};

/* clang emits the key and value types of inner map templates as forward
 * declarations only; these definitions give loaders (and bpf2go) their
 * sizes. They are never written or read. */
struct fw_exact_key xl_btf_fw_exact_key __attribute__((unused));
struct fw_addr_key xl_btf_fw_addr_key __attribute__((unused));
struct fw_bits xl_btf_fw_bits __attribute__((unused));
struct fw_rule xl_btf_fw_rule __attribute__((unused));

/* key: slot (0, 1); value: the generation's (hook kind, network) and MAC
 * classes. Written by the daemon into the idle slot; read per packet. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, 2);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct fw_exact_inner);
} xlane_fw_exact SEC(".maps");

/* key: slot; value: LPM trie of source and destination prefixes. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, 2);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct fw_addr_inner);
} xlane_fw_addr SEC(".maps");

/* key: slot; value: value -> class arrays of ports, protocol, TCP flags
 * (layout: enum fw_limits FW_SC_*). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, 2);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct fw_scalar_inner);
} xlane_fw_scalar SEC(".maps");

/* key: slot; value: class -> bitmap. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, 2);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct fw_pool_inner);
} xlane_fw_pool SEC(".maps");

/* key: slot; value: bit -> rule action and counter slot. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, 2);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct fw_rules_inner);
} xlane_fw_rules SEC(".maps");

/* key: slot; value: which fields the generation uses, its options.
 * Written by the daemon before the flip; read per packet. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct fw_gen);
	__uint(max_entries, 2);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_fw_gens SEC(".maps");

/* key: 0; value: the live slot, and whether any rule set is installed.
 * Written by the daemon (the flip); read once per packet. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct fw_state);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_fw_state SEC(".maps");

/* key: a rule's counter slot; value: packets, bytes, last hit, per CPU.
 * Written by the datapath; read (summed) and reset by the daemon, which
 * gives every rule a slot for its lifetime. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct fw_counter);
	__uint(max_entries, FW_MAX_RULES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_fw_counters SEC(".maps");

/* Sampled rule hits (struct fw_event). Written by the datapath; read by
 * the daemon. A full ring loses events, never packets. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_fw_events SEC(".maps");

/* key: a resolved rule's slot, the endpoint, a destination it resolved
 * (struct fw_resolved_key); value: when the answer's TTL ends. Written
 * and expired by the daemon (internal/fqdn, from the endpoints' DNS
 * answers); read by the search (fw_resolved) for rules with
 * fw_rule.resolved. Entries outlive their TTL until the daemon's next
 * sweep: the datapath compares the expiry itself. */
#define FW_RESOLVED_MAX (1 << 18)
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct fw_resolved_key);
	__type(value, struct fw_resolved_val);
	__uint(max_entries, FW_RESOLVED_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_fw_resolved SEC(".maps");

#define FW_BLOCK4_MAX (1 << 22)
#define FW_BLOCK6_MAX (1 << 20)
#define FW_RATE_MAX (1 << 18)

/* key: 0; value: the DDoS limits. Written by the daemon. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct fw_ddos);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_fw_ddos SEC(".maps");

/* key: IPv4 prefix; value: unused (1). Written by the daemon
 * (`xlane fw block`); read by the uplink program. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct fw_block4_key);
	__type(value, __u32);
	__uint(max_entries, FW_BLOCK4_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_fw_block4 SEC(".maps");

/* key: IPv6 prefix; value: unused (1). As xlane_fw_block4. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct fw_block6_key);
	__type(value, __u32);
	__uint(max_entries, FW_BLOCK6_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_fw_block6 SEC(".maps");

/* key: source (prefix); value: its token buckets. Written and read by the
 * uplink program; LRU, so a flood of sources evicts the idle ones. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct fw_rate_key);
	__type(value, struct fw_rate_val);
	__uint(max_entries, FW_RATE_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_fw_rate SEC(".maps");

#endif /* XLANE_FW_MAPS_H */
