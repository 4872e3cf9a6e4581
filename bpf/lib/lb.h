/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * lb.h - the L4 service load balancer: the first packet of a flow to a
 * service VIP picks a backend through the service's Maglev table and is
 * DNATed to it; conntrack keeps every later packet on that backend.
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

/* lb_select looks the flow's destination up as a VIP and picks a backend. */
static __always_inline enum lb_result lb_select(const struct ct_key *k, const struct l4 *l4,
						struct backend_val *out)
{
	struct service_key sk = { .port = l4->dport, .proto = l4->proto };
	struct backend_key bk = {};
	struct service_val *svc;
	struct backend_val *be;
	__u32 slot, *idx;
	void *table;

	if (l4->icmp_echo)
		return LB_NOT_A_SERVICE;
	__builtin_memcpy(sk.addr, k->daddr, 16);
	svc = bpf_map_lookup_elem(&xlane_services, &sk);
	if (!svc)
		return LB_NOT_A_SERVICE;
	table = bpf_map_lookup_elem(&xlane_maglev, &svc->id);
	if (!table || !svc->maglev_size)
		return LB_NO_BACKEND;
	slot = lb_hash(k, svc->flags) % svc->maglev_size;
	idx = bpf_map_lookup_elem(table, &slot);
	if (!idx || *idx == (__u32)-1)
		return LB_NO_BACKEND;
	bk.service = svc->id;
	bk.index = *idx;
	be = bpf_map_lookup_elem(&xlane_backends, &bk);
	if (!be)
		return LB_NO_BACKEND;
	mon_lb(k, &bk, be);
	*out = *be;
	return LB_BACKEND;
}

#endif /* XLANE_LB_H */
