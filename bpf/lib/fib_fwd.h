/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * fib_fwd.h - the tc stage that forwards a packet where the kernel's FIB
 * says (lib/fib.h asks): the endpoint programs' last stage, and the
 * uplink's for translated packets for no local endpoint (a service flow
 * whose backend is on another node, natively routed, and its reply).
 */
#ifndef XLANE_FIB_FWD_H
#define XLANE_FIB_FWD_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "abi.h"
#include "parse.h"
#include "fib.h"
#include "endpoint.h"
#include "stage.h"

/*
 * fib_redirect forwards p (tc) to the next hop a lookup answered (rc,
 * fib): route and neighbour known, L2 written here and bpf_redirect
 * (XL_FWD_FIB); route known, neighbour not (yet), the kernel's neighbour
 * subsystem resolves it and fills L2 (bpf_redirect_neigh, XL_FWD_NEIGH).
 * Not forwarded: XL_PASS_NOT_FWDED; blackhole, unreachable, prohibit,
 * MTU, forwarding disabled: XL_PASS_NO_ROUTE, Linux does the right thing
 * and sends the ICMP error.
 */
static __always_inline enum xl_step fib_redirect(struct pkt *p, const struct bpf_fib_lookup *fib,
						 long rc, enum xl_reason *reason)
{
	struct bpf_redir_neigh nh = {};

	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		ep_forward_l3(p);
		__builtin_memcpy(p->eth->h_dest, fib->dmac, ETH_ALEN);
		__builtin_memcpy(p->eth->h_source, fib->smac, ETH_ALEN);
		return tc_forwarded(bpf_redirect(fib->ifindex, 0), XL_FWD_FIB, reason);
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		ep_forward_l3(p);
		nh.nh_family = fib->family;
		if (fib->family == AF_INET)
			nh.ipv4_nh = fib->ipv4_dst;
		else
			__builtin_memcpy(nh.ipv6_nh, fib->ipv6_dst, 16);
		return tc_forwarded(bpf_redirect_neigh(fib->ifindex, &nh, sizeof(nh), 0),
				    XL_FWD_NEIGH, reason);
	case BPF_FIB_LKUP_RET_NOT_FWDED:
		return xl_final(reason, XL_PASS_NOT_FWDED);
	default:
		return xl_final(reason, XL_PASS_NO_ROUTE);
	}
}

/* skb_fib_forward | xdp_fib_forward (xdp_endpoint.c) looks p (arrived on
 * skb->ifindex) up in the FIB and forwards it there (fib_redirect). A frame
 * of its own. Unused where a program includes this file for fib_redirect
 * alone (tc_overlay.c). */
static __noinline __attribute__((unused)) int skb_fib_forward(struct __sk_buff *skb, struct pkt *p,
							      enum xl_reason *reason)
{
	struct bpf_fib_lookup fib;
	long rc;

	fib_params_init(&fib, p, skb->ifindex);
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	return fib_redirect(p, &fib, rc, reason);
}

#endif /* XLANE_FIB_FWD_H */
