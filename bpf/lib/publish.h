/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * publish.h - the published ports (xlane_publish, lib/abi.h): a port
 * published on one host address (Kubernetes' hostPort with a hostIP, a
 * CNI portMapping's hostIP) or on every node address (addr zero).
 */
#ifndef XLANE_PUBLISH_H
#define XLANE_PUBLISH_H

#include <bpf/bpf_helpers.h>
#include "abi.h"
#include "maps.h"

/*
 * publish_find finds the published port a new flow to daddr is for (pk:
 * port, proto and family set; its address is the function's to write):
 * the one published on daddr alone, else, when daddr is an address of
 * the node's every published port (node: the uplink's address; for the
 * node's own processes, 127.0.0.0/8 too), the one published on every
 * address. NULL: none.
 */
static __always_inline const struct publish_val *publish_find(struct publish_key *pk,
							      const __u8 *daddr, int node)
{
	const struct publish_val *pv;

	__builtin_memcpy(pk->addr, daddr, 16);
	pv = bpf_map_lookup_elem(&xlane_publish, pk);
	if (pv || !node)
		return pv;
	__builtin_memset(pk->addr, 0, 16);
	return bpf_map_lookup_elem(&xlane_publish, pk);
}

#endif /* XLANE_PUBLISH_H */
