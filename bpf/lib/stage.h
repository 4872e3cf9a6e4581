/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * stage.h - the one contract between a pipeline and its stages, and the one
 * place that says what a reason does to a packet.
 *
 * Every stage returns XL_CONTINUE (the next stage runs) or a final step
 * with *reason set (the model is katran's FURTHER_PROCESSING): XL_FINAL,
 * whose action follows from the reason alone (xl_reason_verdict), or
 * XL_REPLIED / XL_REPLIED_TX, the packet turned into its own answer (a
 * reject's RST or ICMP unreachable) and sent back. A stage never says
 * "drop" or "pass" itself, so a drop reason cannot leave as a pass; a
 * forwarding stage whose redirect helper refused says XL_DROP_REDIRECT.
 * Each kind of hook turns the step into its return code once (tc_ret,
 * xdp_ret), at its exit, where the reason is counted; there, and only
 * there, drops and verdicts become monitor events (lib/monitor.h).
 */
#ifndef XLANE_STAGE_H
#define XLANE_STAGE_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include "abi.h"
#include "monitor.h"

/* What a stage tells its pipeline. */
enum xl_step {
	XL_CONTINUE = 0, /* go on to the next stage */
	XL_FINAL,	 /* stop: xl_reason_verdict(*reason) acts */
	XL_REPLIED,	 /* stop: answered and redirected back
			  * (TC_ACT_REDIRECT, XDP_REDIRECT) */
	XL_REPLIED_TX,	 /* stop: answered, XDP_TX */
};

/* What happens to a packet counted under a reason. */
enum xl_verdict {
	XL_V_PASS = 0, /* to Linux, unchanged */
	XL_V_DROP,     /* dropped */
	XL_V_FWD,      /* redirected by the stage that set it */
};

/*
 * The classification, by name rather than by position in enum xl_reason:
 * the build fails unless every reason is in exactly one set, so a new
 * reason cannot fall into a class by accident. internal/bpf checks the
 * same classes from Go (TestReasonClasses, verdict_test.go) and every
 * prog.Run of its tests against the verdict it returned (RunVerdict:
 * a reason counted with a return code its class does not allow fails the
 * table that reached it).
 */
#define XL_R(r) (1ULL << (r))
#define XL_REASONS_FWD                                                                      \
	(XL_R(XL_FWD_PEER) | XL_R(XL_FWD_FIB) | XL_R(XL_FWD_NEIGH) | XL_R(XL_FWD_OVERLAY) | \
	 XL_R(XL_FWD_VLAN) | XL_R(XL_FWD_XSK))
#define XL_REASONS_PASS                                                              \
	(XL_R(XL_PASS_NON_IP) | XL_R(XL_PASS_NOT_FWDED) | XL_R(XL_PASS_LINK_LOCAL) | \
	 XL_R(XL_PASS_TTL) | XL_R(XL_PASS_NO_ROUTE) | XL_R(XL_PASS_NO_NEIGH) |       \
	 XL_R(XL_PASS_NO_TARGET) | XL_R(XL_PASS_TOO_BIG) | XL_R(XL_PASS_TO_TC) |     \
	 XL_R(XL_PASS_UNTRACKED) | XL_R(XL_PASS_CT_FULL) | XL_R(XL_PASS_NAT_PORTS) | \
	 XL_R(XL_DELIVER) | XL_R(XL_PASS_FW) | XL_R(XL_PASS_OVERLAY))
#define XL_REASONS_DROP                                                                 \
	(XL_R(XL_DROP_NO_BACKEND) | XL_R(XL_DROP_MALFORMED) | XL_R(XL_DROP_SPOOFED) |   \
	 XL_R(XL_DROP_REDIRECT) | XL_R(XL_DROP_FW) | XL_R(XL_DROP_FW_DEFAULT) |         \
	 XL_R(XL_DROP_FW_REJECT) | XL_R(XL_DROP_BLOCKLIST) | XL_R(XL_DROP_RATE_LIMIT) | \
	 XL_R(XL_DROP_SYN_LIMIT) | XL_R(XL_DROP_ICC) | XL_R(XL_DROP_ISOLATED) |         \
	 XL_R(XL_DROP_UNSOLICITED) | XL_R(XL_DROP_VLAN) | XL_R(XL_DROP_NO_PEER) |       \
	 XL_R(XL_DROP_VNI) | XL_R(XL_DROP_NO_XSK) | XL_R(XL_DROP_PEER_DOWN) |           \
	 XL_R(XL_DROP_TOO_BIG) | XL_R(XL_DROP_UNENCRYPTED))

_Static_assert(XL_REASON_MAX <= 64, "enum xl_reason outgrew the classification sets");
_Static_assert((XL_REASONS_FWD | XL_REASONS_PASS | XL_REASONS_DROP) == XL_R(XL_REASON_MAX) - 1,
	       "a reason of enum xl_reason is in no set of lib/stage.h: classify it");
_Static_assert(!(XL_REASONS_FWD & XL_REASONS_PASS) && !(XL_REASONS_FWD & XL_REASONS_DROP) &&
		       !(XL_REASONS_PASS & XL_REASONS_DROP),
	       "a reason of enum xl_reason is in two sets of lib/stage.h");

static __always_inline enum xl_verdict xl_reason_verdict(enum xl_reason r)
{
	__u64 bit = XL_R(r & 63);

	if (XL_REASONS_DROP & bit)
		return XL_V_DROP;
	return (XL_REASONS_FWD & bit) ? XL_V_FWD : XL_V_PASS;
}

/* xl_final ends a stage with reason r. */
static __always_inline enum xl_step xl_final(enum xl_reason *reason, enum xl_reason r)
{
	*reason = r;
	return XL_FINAL;
}

/* tcx and legacy cls_bpf both read -1 as "not mine, carry on": with tcx the
 * next program in the chain runs, and Linux gets the packet after the last.
 * netkit's codes are the same (NETKIT_NEXT, NETKIT_DROP, NETKIT_REDIRECT). */
#define XL_TC_PASS TC_ACT_UNSPEC

/* mon_verdict is the enum mon_verdict of a stopped pipeline. */
static __always_inline __u8 mon_verdict(enum xl_step step, enum xl_reason reason)
{
	return step == XL_REPLIED || step == XL_REPLIED_TX ? MON_V_REPLIED
							   : xl_reason_verdict(reason);
}

/* tc_code is the return code of an skb program whose pipeline stopped. */
static __always_inline int tc_code(enum xl_step step, enum xl_reason reason)
{
	if (step == XL_REPLIED)
		return TC_ACT_REDIRECT;
	switch (xl_reason_verdict(reason)) {
	case XL_V_DROP:
		return TC_ACT_SHOT;
	case XL_V_FWD:
		return TC_ACT_REDIRECT;
	default:
		return XL_TC_PASS;
	}
}

/* tc_forwarded is the step of a forwarding stage: its reason if the
 * redirect helper took the packet (ret), else XL_DROP_REDIRECT. */
static __always_inline enum xl_step tc_forwarded(long ret, enum xl_reason fwd,
						 enum xl_reason *reason)
{
	return xl_final(reason, ret == TC_ACT_REDIRECT ? fwd : XL_DROP_REDIRECT);
}

/*
 * tc_ret is the return code of an skb program whose pipeline stopped at
 * hook kind (enum fw_kind), and the one place its drop (or, for a trace,
 * its verdict) becomes a monitor event: with the monitor off, a load and
 * a branch. Hooks call it last (their tail call, as it were): a value
 * live across its call would cost a stack slot in the hook's frame,
 * which 6.1 rounds to 32 bytes.
 */
static __always_inline int tc_ret(struct __sk_buff *skb, __u8 kind, enum xl_step step,
				  enum xl_reason reason)
{
	const struct mon_config *c = mon_cfg();
	__u8 v;

	if (c && c->types) {
		v = mon_verdict(step, reason);
		if (mon_exit_call(c, v))
			mon_skb(skb, MON_META(kind, reason, v));
	}
	return tc_code(step, reason);
}

/* xdp_code is tc_code for XDP programs. */
static __always_inline int xdp_code(enum xl_step step, enum xl_reason reason)
{
	if (step == XL_REPLIED)
		return XDP_REDIRECT;
	if (step == XL_REPLIED_TX)
		return XDP_TX;
	switch (xl_reason_verdict(reason)) {
	case XL_V_DROP:
		return XDP_DROP;
	case XL_V_FWD:
		return XDP_REDIRECT;
	default:
		return XDP_PASS;
	}
}

/* xdp_ret is tc_ret for XDP programs. */
static __always_inline int xdp_ret(struct xdp_md *ctx, __u8 kind, enum xl_step step,
				   enum xl_reason reason)
{
	const struct mon_config *c = mon_cfg();
	__u8 v;

	if (c && c->types) {
		v = mon_verdict(step, reason);
		if (mon_exit_call(c, v))
			mon_xdp(ctx, MON_META(kind, reason, v));
	}
	return xdp_code(step, reason);
}

#endif /* XLANE_STAGE_H */
