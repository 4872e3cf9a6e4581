/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * handoff.h - how an endpoint's XDP program hands a packet to the tcx
 * program of the same device without counting it twice. In the XDP modes
 * both run on the host veth: what XDP passes (XDP_PASS) the tcx ingress
 * program sees next, and only one of them may count it ("every packet is
 * counted under exactly one reason"). XDP leaves its reason in the
 * packet's metadata (before the frame: the kernel carries it into the
 * skb) and counts nothing; tcx counts the packet once: under its own
 * reason when it forwards or drops it (its fate: a GSO packet generic XDP
 * found too big and tcx redirected is fwd_peer), under XDP's (why the fast
 * path gave it up) when it hands it on to Linux.
 */
#ifndef XLANE_HANDOFF_H
#define XLANE_HANDOFF_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "abi.h"

/* Marks xlane's metadata word; the low 16 bits are the enum xl_reason. */
#define XL_HANDOFF_MAGIC 0x584c0000u /* "XL" */
#define XL_HANDOFF_NONE XL_REASON_MAX

/* xdp_handoff leaves reason for the tcx program. Returns -1 when the
 * driver has no metadata room: the caller counts the packet itself. */
static __always_inline int xdp_handoff(struct xdp_md *ctx, enum xl_reason reason)
{
	__u32 v = XL_HANDOFF_MAGIC | (__u32)reason;
	__u8 *meta, *data;

	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(v)))
		return -1;
	meta = (void *)(long)ctx->data_meta;
	data = (void *)(long)ctx->data;
	if (meta + sizeof(v) > data)
		return -1;
	__builtin_memcpy(meta, &v, sizeof(v));
	return 0;
}

/* skb_handoff reads the reason XDP left (XL_HANDOFF_NONE: none; not in
 * the tc mode, nor for packets XDP did not see). */
static __always_inline enum xl_reason skb_handoff(const struct __sk_buff *skb)
{
	__u32 *meta = (void *)(long)skb->data_meta;
	__u32 v;

	if ((void *)(meta + 1) > (void *)(long)skb->data)
		return XL_HANDOFF_NONE;
	v = *meta;
	if ((v & 0xffff0000u) != XL_HANDOFF_MAGIC || (v & 0xffff) >= XL_REASON_MAX)
		return XL_HANDOFF_NONE;
	return (enum xl_reason)(v & 0xffff);
}

#endif /* XLANE_HANDOFF_H */
