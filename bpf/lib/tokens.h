/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * tokens.h - token buckets (the DDoS stage's per-source limits, the reply
 * library's answer rate), in units of 1e-9 token.
 */
#ifndef XLANE_TOKENS_H
#define XLANE_TOKENS_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include "abi.h"

/* One token, in the buckets' unit (tokens x 1e9: rates per second
 * refill per nanosecond without a division). */
#define BUCKET_TOKEN NSEC_PER_SEC

/*
 * bucket_refill adds elapsed ns worth of rate/s tokens (x 1e9), up to burst.
 * elapsed * rate wraps 64 bits after 2^64 / rate ns (184 s at the 1e8/s
 * the spec allows, 4.3 s at the u32 maximum) and would leave a bucket idle
 * that long anywhere between empty and full: past 2^31 ns (where the
 * product and the sum still fit for any rate and burst) the refill is
 * compared with the room left instead, one division on the rare slow path.
 */
static __always_inline void bucket_refill(__u64 *tokens, __u64 elapsed, __u32 rate, __u32 burst)
{
	__u64 cap = (__u64)burst * BUCKET_TOKEN;
	__u64 t = *tokens;

	if (t >= cap || (elapsed >= (1ULL << 31) && rate && elapsed > (cap - t) / rate))
		t = cap;
	else
		t += elapsed * rate;
	*tokens = t > cap ? cap : t;
}

/* bucket_take takes one token: 0, or -1 when the bucket is empty. */
static __always_inline int bucket_take(__u64 *tokens)
{
	if (*tokens < BUCKET_TOKEN)
		return -1;
	*tokens -= BUCKET_TOKEN;
	return 0;
}

#endif /* XLANE_TOKENS_H */
