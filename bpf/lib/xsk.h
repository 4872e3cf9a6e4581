/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * xsk.h - the AF_XDP port of a VM endpoint: every frame the port device
 * receives goes into the AF_XDP socket QEMU bound to the frame's queue.
 */
#ifndef XLANE_XSK_H
#define XLANE_XSK_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "abi.h"
#include "parse.h"
#include "l4csum.h"
#include "stage.h"

/* Queues of one AF_XDP port: model.MaxVMQueues. */
#define XL_XSK_MAX_QUEUES 64

/*
 * xlane_xsks: key = rx queue index of the port device, value = an AF_XDP
 * socket. One map per port: the daemon creates it with the port's program
 * and pins it beside the port's link (internal/datapath/vmport.go); QEMU
 * puts its sockets in through the pin (-netdev af-xdp,inhibit=on,
 * map-path=); read by xsk_to_socket. Never shared between collections.
 */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, XL_XSK_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xlane_xsks SEC(".maps");

/*
 * xsk_complete_csum finishes the TCP/UDP checksum of a frame bound for the
 * guest. Frames from a container's socket reach the host end as
 * CHECKSUM_PARTIAL skbs; veth passes them to this program as XDP buffers,
 * which the redirect turns into bare bytes in QEMU's socket: no one would
 * finish the checksum (QEMU's af-xdp backend has no virtio-net header to
 * say so), and the guest would drop every TCP segment while ping works.
 * A layout l4csum_complete does not sum goes as it is.
 */
static __always_inline void xsk_complete_csum(struct xdp_md *ctx, __u32 len)
{
	struct pkt p = {};

	if (parse_l3((void *)(long)ctx->data, (void *)(long)ctx->data_end, len, &p) == PARSE_OK)
		l4csum_complete(ctx, &p);
}

/*
 * xsk_to_socket hands the frame to the socket of its queue. Without one
 * (QEMU not started yet, or bound to fewer queues) the frame is dropped and
 * counted: XDP_PASS would give the guest's traffic to the node's stack on a
 * device that has no address. A full socket ring fails after this program
 * (in xdp_do_redirect): the kernel counts that, not xlane.
 */
static __always_inline enum xl_step xsk_to_socket(struct xdp_md *ctx, __u32 len,
						  enum xl_reason *reason)
{
	xsk_complete_csum(ctx, len);
	/* The low bits of the flags are the action when the slot is empty
	 * (kernel 5.6+, also for XSKMAP). */
	if (bpf_redirect_map(&xlane_xsks, ctx->rx_queue_index, XDP_DROP) == XDP_REDIRECT)
		return xl_final(reason, XL_FWD_XSK);
	return xl_final(reason, XL_DROP_NO_XSK);
}

#endif /* XLANE_XSK_H */
