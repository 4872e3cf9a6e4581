// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * sock_accel.c - socket acceleration: sockops puts both sockets of a TCP
 * connection established on this node into xlane_accel_socks; sk_msg moves
 * what one sends straight into the other's receive queue.
 *
 * Fences (docs/accel.md has the why of each):
 * - a socket is added only at establishment and only if it has sent no
 *   data yet: a socket that existed before acceleration was enabled, or
 *   one that sent data in its SYN (TCP Fast Open), never enters the map;
 * - a direction either redirects from its first byte or never again: the
 *   receiver reads its redirect queue before its TCP queue, so a byte sent
 *   the normal way must never be followed by a redirected one
 *   (ACCEL_SK_FALLBACK, sticky);
 * - the peer is found by the 4-tuple and both initial sequence numbers,
 *   so a socket is only redirected into the one that did its handshake;
 * - every failure passes (SK_PASS): the normal path, counted.
 * Kernel bugs that no program can fence (splice, FIONREAD on redirected
 * data) are found by the self-test (internal/accel), which keeps
 * acceleration off on a kernel that has them.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lib/accel.h"

/* Context fields one 32-bit load at a time: clang merges neighbouring
 * loads of an array into 64-bit ones, which the verifier refuses. */
#define RD32(f) (*(volatile __u32 *)&(f))
#define AF_INET 2
#define AF_INET6 10
#define SOCKOPS_OK 1

static __always_inline void accel_addr4(__u8 a[16], __u32 ip4)
{
	__builtin_memset(a, 0, 10);
	a[10] = 0xff;
	a[11] = 0xff;
	__builtin_memcpy(&a[12], &ip4, 4);
}

static __always_inline int accel_is_loopback(const __u8 a[16])
{
	static const __u8 lo6[16] = { [15] = 1 };

	if (a[10] == 0xff && a[11] == 0xff && a[12] == 127)
		return __builtin_memcmp(a, lo6, 10) == 0;
	return __builtin_memcmp(a, lo6, 16) == 0;
}

static __always_inline int accel_net_ok(const __u8 a[16])
{
	struct accel_net_key k = { .prefixlen = 128 };

	__builtin_memcpy(k.addr, a, 16);
	return bpf_map_lookup_elem(&xlane_accel_nets, &k) != 0;
}

static __always_inline int accel_port_ok(__u16 p)
{
	return bpf_map_lookup_elem(&xlane_accel_ports, &p) != 0;
}

/* accel_filter: are both ends on accelerated networks, and is one of the
 * ports an accelerated one? */
static __always_inline int accel_filter(__u32 flags, const struct accel_key *k)
{
	if ((flags & ACCEL_FILTER_NETS) && (!accel_net_ok(k->laddr) || !accel_net_ok(k->raddr)))
		return 0;
	if ((flags & ACCEL_FILTER_PORTS) && !accel_port_ok((__u16)k->lport) &&
	    !accel_port_ok((__u16)k->rport))
		return 0;
	return 1;
}

static __always_inline void accel_established(struct bpf_sock_ops *ctx)
{
	__u32 flags = accel_flags();
	struct accel_key k = {};
	struct accel_sk *st;
	struct bpf_sock *sk;

	if (!(flags & ACCEL_ON)) {
		accel_count(ACCEL_SOCK_SKIP_OFF, 1);
		return;
	}
	if (ctx->family == AF_INET) {
		accel_addr4(k.laddr, ctx->local_ip4);
		accel_addr4(k.raddr, ctx->remote_ip4);
	} else if (ctx->family == AF_INET6) {
		__u32 l[4] = { RD32(ctx->local_ip6[0]), RD32(ctx->local_ip6[1]),
			       RD32(ctx->local_ip6[2]), RD32(ctx->local_ip6[3]) };
		__u32 r[4] = { RD32(ctx->remote_ip6[0]), RD32(ctx->remote_ip6[1]),
			       RD32(ctx->remote_ip6[2]), RD32(ctx->remote_ip6[3]) };

		__builtin_memcpy(k.laddr, l, 16);
		__builtin_memcpy(k.raddr, r, 16);
	} else {
		return;
	}
	k.lport = ctx->local_port;
	k.rport = bpf_ntohl(ctx->remote_port) & 0xffff;
	if (!accel_filter(flags, &k)) {
		accel_count(ACCEL_SOCK_SKIP_FILTER, 1);
		return;
	}
	/* Data sent before this point went the normal way (TCP Fast Open):
	 * redirecting what follows could overtake it. */
	if (ctx->data_segs_out != 0 || ctx->snd_nxt != ctx->snd_una) {
		accel_count(ACCEL_SOCK_SKIP_INFLIGHT, 1);
		return;
	}
	k.snd_isn = ctx->snd_una;
	k.rcv_isn = ctx->rcv_nxt;
	if (accel_is_loopback(k.laddr) && accel_is_loopback(k.raddr))
		k.netns = bpf_get_netns_cookie(ctx);

	sk = ctx->sk;
	if (!sk)
		return;
	st = bpf_sk_storage_get(&xlane_accel_sk, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st) {
		accel_count(ACCEL_SOCK_ADD_FAILED, 1);
		return;
	}
	__builtin_memcpy(st->peer.laddr, k.raddr, 16);
	__builtin_memcpy(st->peer.raddr, k.laddr, 16);
	st->peer.lport = k.rport;
	st->peer.rport = k.lport;
	st->peer.snd_isn = k.rcv_isn;
	st->peer.rcv_isn = k.snd_isn;
	st->peer.netns = k.netns;
	st->flags = 0;
	if (bpf_sock_hash_update(ctx, &xlane_accel_socks, &k, BPF_NOEXIST) != 0) {
		st->flags = ACCEL_SK_FALLBACK;
		accel_count(ACCEL_SOCK_ADD_FAILED, 1);
		return;
	}
	accel_count(ACCEL_SOCK_ADDED, 1);
}

SEC("sockops")
int xlane_accel_sockops(struct bpf_sock_ops *ctx)
{
	if (ctx->op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB ||
	    ctx->op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		accel_established(ctx);
	return SOCKOPS_OK;
}

static __always_inline int accel_fallback(struct accel_sk *st, enum accel_stat why, __u64 len)
{
	st->flags |= ACCEL_SK_FALLBACK;
	accel_count(why, 1);
	accel_count(ACCEL_FALLBACK_BYTES, len);
	return SK_PASS;
}

SEC("sk_msg")
int xlane_accel_msg(struct sk_msg_md *msg)
{
	struct bpf_sock *sk = msg->sk;
	__u64 len = msg->size;
	struct accel_key peer;
	struct accel_sk *st;

	if (!sk)
		return SK_PASS;
	st = bpf_sk_storage_get(&xlane_accel_sk, sk, 0, 0);
	if (!st) {
		accel_count(ACCEL_FALLBACK_NO_STATE, 1);
		accel_count(ACCEL_FALLBACK_BYTES, len);
		return SK_PASS;
	}
	if (st->flags & ACCEL_SK_FALLBACK) {
		accel_count(ACCEL_FALLBACK_STICKY, 1);
		accel_count(ACCEL_FALLBACK_BYTES, len);
		return SK_PASS;
	}
	if (!(accel_flags() & ACCEL_ON))
		return accel_fallback(st, ACCEL_FALLBACK_OFF, len);
	__builtin_memcpy(&peer, &st->peer, sizeof(peer));
	if (bpf_msg_redirect_hash(msg, &xlane_accel_socks, &peer, BPF_F_INGRESS) != SK_PASS)
		return accel_fallback(st, ACCEL_FALLBACK_NO_PEER, len);
	accel_count(ACCEL_MSG_REDIRECTED, 1);
	accel_count(ACCEL_BYTES_REDIRECTED, len);
	return SK_PASS;
}

ACCEL_BTF_ANCHORS;

char __license[] SEC("license") = "Dual BSD/GPL";
