/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * fw_l4.h - the firewall's view of a packet's L4 facts: lib/l4.h's
 * parse_l4 (through IPv6 extension headers) as rule classes (ports, ICMP
 * type and code), and for an ICMP error the flow it quotes
 * (lib/icmp_quote.h).
 */
#ifndef XLANE_FW_L4_H
#define XLANE_FW_L4_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_endian.h>
#include "abi.h"
#include "parse.h"
#include "l4.h"
#include "icmp_quote.h"

struct fw_l4 {
	struct l4 l4;	/* parse_l4's facts: conntrack's key and state */
	__u32 sport;	/* class index: host-order port, ICMP code,
			 * or FW_NO_L4 */
	__u32 dport;	/* ... ICMP type */
	__u8 trackable; /* parse_l4 said L4_OK: conntrack keys it */
	__u8 related;	/* ICMP error: rk holds the reversed inner flow */
	__u8 malformed; /* parse_l4 said L4_MALFORMED: endpoint hooks
			 * drop it */
};

/*
 * fw_parse_l4 fills f (zeroed) from p. A header parse_l4 cannot reach (a
 * non-first fragment, beyond the linear area) leaves the ports at
 * FW_NO_L4: only rules without ports match then.
 */
static __always_inline void fw_parse_l4(void *data, void *data_end, const struct pkt *p,
					struct fw_l4 *f, struct ct_key *rk)
{
	struct l4 *l4 = &f->l4;
	enum l4_result r = parse_l4(data, data_end, p, l4);

	f->trackable = r == L4_OK;
	f->malformed = r == L4_MALFORMED;
	f->sport = f->dport = FW_NO_L4;
	if (!l4->hdr)
		return;
	if (l4->proto != IPPROTO_ICMP && l4->proto != IPPROTO_ICMPV6) {
		f->sport = bpf_ntohs(l4->sport);
		f->dport = bpf_ntohs(l4->dport);
		return;
	}
	f->dport = l4->icmp_type;
	f->sport = l4->icmp_code;
	if ((l4->proto == IPPROTO_ICMP) == (p->ip4 != 0) &&
	    icmp_is_error(l4->proto, l4->icmp_type) &&
	    icmp_quote(data, data_end, l4->off + 8, p->ip4 != 0, rk) >= 0)
		f->related = 1;
}

#endif /* XLANE_FW_L4_H */
