/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * lb.h - the L4 service load balancer: the first packet of a flow to a
 * service VIP picks a backend through the service's Maglev table and is
 * DNATed to it; conntrack keeps every later packet on that backend. A
 * service with ClientIP affinity and a timeout first looks for the
 * client's backend of its last new flow (xlane_affinity).
 */
#ifndef XLANE_LB_H
#define XLANE_LB_H

#include <bpf/bpf_helpers.h>
#include "abi.h"
#include "maps.h"
#include "l4.h"
#include "ct.h"
#include "monitor.h"

/* A 32-bit mix of the flow (murmur3's finaliser over the words). The
 * daemon never needs to reproduce it: only the datapath hashes flows. */
static __always_inline __u32 lb_mix(__u32 h, __u32 k)
{
	k *= 0xcc9e2d51;
	k = (k << 15) | (k >> 17);
	k *= 0x1b873593;
	h ^= k;
	h = (h << 13) | (h >> 19);
	return h * 5 + 0xe6546b64;
}

static __always_inline __u32 lb_hash(const struct ct_key *k, __u32 flags)
{
	const __u32 *s = (const __u32 *)k->saddr;
	const __u32 *d = (const __u32 *)k->daddr;
	__u32 h = 0x7a1e;

	h = lb_mix(h, s[0]);
	h = lb_mix(h, s[1]);
	h = lb_mix(h, s[2]);
	h = lb_mix(h, s[3]);
	if (!(flags & SVC_AFFINITY)) {
		h = lb_mix(h, d[3]);
		h = lb_mix(h, ((__u32)k->sport << 16) | k->dport);
		h = lb_mix(h, k->proto);
	}
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	return h ^ (h >> 16);
}

enum lb_result {
	LB_NOT_A_SERVICE = 0,
	LB_BACKEND,    /* *out is the chosen backend */
	LB_NO_BACKEND, /* a VIP without an active backend */
};

/* An affinity entry being looked up and written: 56 bytes that pushed
 * xlane_from_endpoint's combined stack past 512 (528) on the stack. */
struct lb_scratch {
	struct affinity_key k;
	struct affinity_val v;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct lb_scratch);
	__uint(max_entries, 1);
} xlane_lb_scratch SEC(".maps");

/* lb_affinity_get finds the backend a ClientIP client's last new flow to
 * svc got (xlane_affinity), if that was within the service's timeout and
 * the backend still takes new flows: at its index (backend indices shift
 * when the list changes) with the same address and port, not draining.
 * Refreshes the entry's time and returns the backend, or 0: choose anew. */
static __always_inline struct backend_val *lb_affinity_get(const struct service_val *svc,
							   const struct affinity_key *ak, __u64 now,
							   struct backend_key *bk)
{
	struct affinity_val *av = bpf_map_lookup_elem(&xlane_affinity, ak);
	struct backend_val *be;

	if (!av || now - av->last > (__u64)svc->affinity_timeout * NSEC_PER_SEC)
		return 0;
	bk->index = av->index;
	be = bpf_map_lookup_elem(&xlane_backends, bk);
	if (!be || (be->flags & BACKEND_DRAINING) || be->port != av->port ||
	    __builtin_memcmp(be->addr, av->addr, 16) != 0)
		return 0;
	av->last = now;
	return be;
}

/* lb_select looks the flow's destination up as a VIP and picks a backend.
 * client is the client address ClientIP affinity keys on (the packet's
 * source; 0 for the node's processes, sock_lb.c: one client). */
static __always_inline enum lb_result lb_select(const struct ct_key *k, const __u8 *client,
						const struct l4 *l4, struct backend_val *out)
{
	struct service_key sk = { .port = l4->dport, .proto = l4->proto };
	struct lb_scratch *aff = 0; /* with affinity state */
	struct backend_key bk = {};
	struct service_val *svc;
	struct backend_val *be;
	__u32 slot, *idx;
	__u32 zero = 0;
	__u64 now = 0;
	void *table;

	if (l4->icmp_echo)
		return LB_NOT_A_SERVICE;
	__builtin_memcpy(sk.addr, k->daddr, 16);
	svc = bpf_map_lookup_elem(&xlane_services, &sk);
	if (!svc)
		return LB_NOT_A_SERVICE;
	bk.service = svc->id;
	if ((svc->flags & SVC_AFFINITY) && svc->affinity_timeout)
		aff = bpf_map_lookup_elem(&xlane_lb_scratch, &zero);
	if (aff) {
		__builtin_memset(aff, 0, sizeof(*aff));
		aff->k.service = svc->id;
		if (client)
			__builtin_memcpy(aff->k.client, client, 16);
		now = bpf_ktime_get_ns();
		be = lb_affinity_get(svc, &aff->k, now, &bk);
		if (be)
			goto found;
	}
	table = bpf_map_lookup_elem(&xlane_maglev, &svc->id);
	if (!table || !svc->maglev_size)
		return LB_NO_BACKEND;
	slot = lb_hash(k, svc->flags) % svc->maglev_size;
	idx = bpf_map_lookup_elem(table, &slot);
	if (!idx || *idx == (__u32)-1)
		return LB_NO_BACKEND;
	bk.index = *idx;
	be = bpf_map_lookup_elem(&xlane_backends, &bk);
	if (!be)
		return LB_NO_BACKEND;
	if (aff) {
		aff->v.last = now;
		aff->v.index = bk.index;
		aff->v.port = be->port;
		__builtin_memcpy(aff->v.addr, be->addr, 16);
		bpf_map_update_elem(&xlane_affinity, &aff->k, &aff->v, BPF_ANY);
	}
found:
	mon_lb(k, &bk, be);
	*out = *be;
	return LB_BACKEND;
}

/* lb_target is lb_select as a translation of a new flow wants it: 1 with
 * *out filled, 0 if k is no service's, -1 for a VIP without an active
 * backend. */
static __always_inline int lb_target(const struct ct_key *k, const __u8 *client,
				     const struct l4 *l4, struct backend_val *out)
{
	switch (lb_select(k, client, l4, out)) {
	case LB_BACKEND:
		return 1;
	case LB_NO_BACKEND:
		return -1;
	default:
		return 0;
	}
}

#endif /* XLANE_LB_H */
