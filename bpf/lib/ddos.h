/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * ddos.h - the uplink's DDoS stage, before any rule: early drop of
 * malformed headers (when asked), the prefix blocklist, and per-source
 * packet and SYN rates (token buckets in xlane_fw_rate).
 */
#ifndef XLANE_DDOS_H
#define XLANE_DDOS_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include "abi.h"
#include "parse.h"
#include "l4.h"
#include "stage.h"
#include "tokens.h"
#include "fw_maps.h"

static __always_inline void fw_mask_addr(__u8 *a, __u32 bits)
{
	/* bits counts from the start of the 16 bytes */
#pragma unroll
	for (int i = 0; i < 16; i++) {
		__u32 lo = i * 8;

		if (bits <= lo)
			a[i] = 0;
		else if (bits < lo + 8)
			a[i] &= (__u8)(0xff << (lo + 8 - bits));
	}
}

/* fw_ddos_on is the cheap test before the stage's call: any defence on. */
static __always_inline int fw_ddos_on(void)
{
	__u32 zero = 0;
	const struct fw_ddos *cfg = bpf_map_lookup_elem(&xlane_fw_ddos, &zero);

	return cfg && cfg->flags;
}

/*
 * fw_ddos_check runs first on the uplink: malformed headers (when asked),
 * blocklisted sources, sources over their rate. An enum xl_step.
 * malformed: the parser's verdict on the frame.
 */
static __noinline __attribute__((unused)) int fw_ddos_check(void *data, void *data_end,
							    const struct pkt *p, int malformed,
							    enum xl_reason *reason)
{
	__u32 zero = 0;
	struct fw_ddos *cfg = bpf_map_lookup_elem(&xlane_fw_ddos, &zero);
	struct fw_rate_key rk = {};
	struct fw_rate_val *rv;
	__u64 now, elapsed;
	int syn = 0;

	if (!cfg || !cfg->flags)
		return XL_CONTINUE;
	if (malformed) {
		if (cfg->flags & FW_DDOS_MALFORMED)
			return xl_final(reason, XL_DROP_MALFORMED);
		return XL_CONTINUE;
	}
	/* Not "!p->ip4 && !p->ip6": clang fuses that into an OR of two
	 * pointers, which the verifier refuses. */
	if (p->proto != ETH_P_IP && p->proto != ETH_P_IPV6)
		return XL_CONTINUE;
	if (cfg->flags & (FW_DDOS_MALFORMED | FW_DDOS_SYN)) {
		struct l4 l4 = {};

		if (parse_l4(data, data_end, p, &l4) == L4_MALFORMED &&
		    (cfg->flags & FW_DDOS_MALFORMED))
			/* A transport header cut short or lying about its
			 * length, a truncated extension header chain. */
			return xl_final(reason, XL_DROP_MALFORMED);
		if ((cfg->flags & FW_DDOS_MALFORMED) && l4.proto == IPPROTO_TCP && l4.hdr) {
			__u8 f = l4.tcp_flags;

			/* SYN+FIN, SYN+RST, no flags at all (null scan),
			 * FIN+PSH+URG without ACK (xmas): never legitimate. */
			if (((f & TCP_FLAG_SYN) && (f & (TCP_FLAG_FIN | TCP_FLAG_RST))) || f == 0 ||
			    (f & 0x29) == 0x29)
				return xl_final(reason, XL_DROP_MALFORMED);
		}
		syn = l4.proto == IPPROTO_TCP &&
		      (l4.tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN;
	}
	if (cfg->flags & FW_DDOS_BLOCKLIST) {
		if (p->ip4) {
			struct fw_block4_key bk = { .prefixlen = 32 };

			__builtin_memcpy(bk.addr, &p->ip4->saddr, 4);
			if (bpf_map_lookup_elem(&xlane_fw_block4, &bk))
				return xl_final(reason, XL_DROP_BLOCKLIST);
		} else {
			struct fw_block6_key bk = { .prefixlen = 128 };

			__builtin_memcpy(bk.addr, p->src.addr, 16);
			if (bpf_map_lookup_elem(&xlane_fw_block6, &bk))
				return xl_final(reason, XL_DROP_BLOCKLIST);
		}
	}
	if (!(cfg->flags & (FW_DDOS_RATE | FW_DDOS_SYN)))
		return XL_CONTINUE;
	if (!(cfg->flags & FW_DDOS_RATE) && !syn)
		return XL_CONTINUE;
	__builtin_memcpy(rk.addr, p->src.addr, 16);
	fw_mask_addr(rk.addr, p->ip4 ? 96 + (cfg->v4_prefix & 0x3f) : (cfg->v6_prefix & 0xff));
	now = bpf_ktime_get_ns();
	rv = bpf_map_lookup_elem(&xlane_fw_rate, &rk);
	if (!rv) {
		struct fw_rate_val nv = {
			.last = now,
			.tokens = (__u64)cfg->burst * BUCKET_TOKEN,
			.syn_tokens = (__u64)cfg->syn_burst * BUCKET_TOKEN,
		};

		bpf_map_update_elem(&xlane_fw_rate, &rk, &nv, BPF_NOEXIST);
		rv = bpf_map_lookup_elem(&xlane_fw_rate, &rk);
		if (!rv)
			return XL_CONTINUE;
	}
	/* Races between CPUs on one source lose a refill or a token, never
	 * more: the limit is approximate by design, as in every lock-free
	 * shared token bucket. Both buckets refill on every packet: they
	 * share the timestamp. */
	elapsed = now > rv->last ? now - rv->last : 0;
	rv->last = now;
	bucket_refill(&rv->tokens, elapsed, cfg->pps, cfg->burst);
	bucket_refill(&rv->syn_tokens, elapsed, cfg->syn_pps, cfg->syn_burst);
	if ((cfg->flags & FW_DDOS_RATE) && bucket_take(&rv->tokens))
		return xl_final(reason, XL_DROP_RATE_LIMIT);
	if (syn && (cfg->flags & FW_DDOS_SYN) && bucket_take(&rv->syn_tokens))
		return xl_final(reason, XL_DROP_SYN_LIMIT);
	return XL_CONTINUE;
}

#endif /* XLANE_DDOS_H */
