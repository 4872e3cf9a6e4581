// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * xdp_vmport.c - the AF_XDP port of a VM endpoint (`endpoint add --vm
 * --backend af-xdp`): native XDP on the port end of the endpoint's veth
 * pair, where QEMU's AF_XDP sockets are bound.
 *
 *   guest -- QEMU -netdev af-xdp --XSK TX--> xlcP ==veth== xlhH [tcx: tc_endpoint.c] --> pipeline
 *                 (sockets in xlane_xsks)  <--XSK RX-- xlcP [XDP: xlane_xdp_to_vm] <-- xlhH egress
 *
 * The host end (xlhH) carries the same tcx programs as a container's host
 * veth; frames for the guest reach its egress (XL_EP_NO_PEER, like a tap),
 * cross the pair, and this program puts them into QEMU's socket for the
 * queue they arrived on, TCP/UDP checksums completed (lib/xsk.h). QEMU
 * only inserts its sockets into the pinned map:
 * it loads no program and attaches nothing.
 *
 * Counted under the port's ifindex, delivered to the endpoint; the daemon
 * shows them with the endpoint's other counters.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "lib/abi.h"
#include "lib/maps.h"
#include "lib/metrics.h"
#include "lib/parse.h"
#include "lib/csum.h"
#include "lib/l4csum.h"
#include "lib/stage.h"
#include "lib/xsk.h"

/* Not xdp.frags: a copy-mode socket takes single-buffer frames only
 * (QEMU does not bind with XDP_USE_SG), and without frags support veth
 * keeps the host end's packets within the MTU (it turns GSO off there). */
SEC("xdp")
int xlane_xdp_to_vm(struct xdp_md *ctx)
{
	__u32 len = ctx->data_end - ctx->data;
	enum xl_reason reason = XL_DROP_NO_XSK;
	enum xl_step step = xsk_to_socket(ctx, len, &reason);

	metrics_count(ctx->ingress_ifindex, reason, XL_DIR_INGRESS, XL_HOOK_XDP, len);
	return xdp_ret(ctx, FW_KIND_TO_EP, step, reason);
}

XL_ABI_BTF_ANCHORS;

char __license[] SEC("license") = "Dual BSD/GPL";
