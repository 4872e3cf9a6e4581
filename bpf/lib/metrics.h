/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* metrics.h - the one place a verdict is counted. */
#ifndef XLANE_METRICS_H
#define XLANE_METRICS_H

#include "maps.h"

/* metrics_count counts a packet of bytes that the program at attach point
 * hook decided with reason, on device ifindex (0: the node's). */
static __always_inline void metrics_count(__u32 ifindex, enum xl_reason reason, enum xl_dir dir,
					  enum xl_hook hook, __u32 bytes)
{
	struct metrics_key key = {
		.ifindex = ifindex,
		.reason = reason,
		.dir = dir,
		.hook = hook,
	};
	struct metrics_val *val, init = { .packets = 1, .bytes = bytes };

	val = bpf_map_lookup_elem(&xlane_metrics, &key);
	if (val) {
		/* Per-CPU value: no atomics needed. */
		val->packets++;
		val->bytes += bytes;
		return;
	}
	/* First packet for this key on any CPU. A full map loses the count,
	 * never the packet. */
	bpf_map_update_elem(&xlane_metrics, &key, &init, BPF_NOEXIST);
}

/* metrics_count_uplink is metrics_count of (ifindex, reason, ingress,
 * XDP) for the uplink program: into xlane_metrics_uplink when the daemon
 * gave its slot to ifindex, else into the hash. */
static __always_inline void metrics_count_uplink(__u32 ifindex, enum xl_reason reason, __u32 bytes)
{
	__u32 k = reason;
	struct metrics_dev_val *v = bpf_map_lookup_elem(&xlane_metrics_uplink, &k);

	if (v && ifindex && v->ifindex == ifindex) {
		/* Per-CPU value: no atomics needed. */
		v->packets++;
		v->bytes += bytes;
		return;
	}
	metrics_count(ifindex, reason, XL_DIR_INGRESS, XL_HOOK_XDP, bytes);
}

#endif /* XLANE_METRICS_H */
