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
 * - the redirect path has no flow control: the kernel queues a redirected
 *   message on the peer whatever the peer has not read yet (neither the
 *   writer's send buffer nor the reader's receive buffer is checked), and
 *   once the node's TCP memory is exhausted the writer's write() fails with
 *   ENOMEM instead of blocking. A direction whose peer has more than
 *   max_backlog unread, or that sends while the node's TCP memory is
 *   under pressure, falls back to the normal path, where TCP's flow control
 *   holds the writer (accel_peer_queued, accel_mem_pressure);
 * - every failure passes (SK_PASS): the normal path, counted.
 * Kernel bugs that no program can fence (splice, FIONREAD on redirected
 * data) are found by the self-test (internal/accel), which keeps
 * acceleration off on a kernel that has them.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>

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

/*
 * Kernel structures the sk_msg program reads (CO-RE: the offsets are the
 * running kernel's, from its BTF). The ___xl suffix keeps them apart from
 * any declaration of the real ones; CO-RE ignores it.
 */
struct proto___xl {
	unsigned long *memory_pressure;
} __attribute__((preserve_access_index));

struct sock_common___xl {
	struct proto___xl *skc_prot;
} __attribute__((preserve_access_index));

struct sock___xl {
	struct sock_common___xl __sk_common;
	void *sk_user_data;
} __attribute__((preserve_access_index));

struct sk_psock___xl {
	__u32 msg_tot_len; /* 6.12+: bytes queued in ingress_msg (FIONREAD) */
} __attribute__((preserve_access_index));

/* The context of an sk_msg program is the kernel's struct sk_msg;
 * bpf_msg_redirect_hash stores the socket it found in sk_redir. */
struct sk_msg___xl {
	struct sock___xl *sk_redir;
} __attribute__((preserve_access_index));

/* sk_user_data's low bits are flags (SK_USER_DATA_NOCOPY, _BPF, _PSOCK). */
#define ACCEL_USER_DATA_PTRMASK (~7ul)

/* accel_mem_pressure: is the node's TCP memory under pressure (above
 * tcp_mem[1])? There the kernel refuses to queue a redirected message on
 * the peer and the writer gets ENOMEM, where the normal path would wait.
 * Read through the writer's own socket (sk_prot->memory_pressure points to
 * tcp_memory_pressure for both families). A read that fails says no. */
static __always_inline int accel_mem_pressure(struct bpf_sock *sk)
{
	/* A BTF pointer (the verifier forbids arithmetic on msg->sk). */
	struct sock___xl *s = (struct sock___xl *)bpf_skc_to_tcp_sock(sk);
	struct proto___xl *prot;
	unsigned long v = 0;
	unsigned long *flag;

	if (!s)
		return 0;
	prot = s->__sk_common.skc_prot;
	if (!prot)
		return 0;
	flag = prot->memory_pressure;
	if (!flag || bpf_probe_read_kernel(&v, sizeof(v), flag))
		return 0;
	return v != 0;
}

/* accel_peer_queued: what the peer bpf_msg_redirect_hash just chose has
 * not read yet from its redirect queue (this message not included), into
 * *queued. -1 where the kernel keeps no count (msg_tot_len, before 6.12)
 * or the read fails. */
static __always_inline int accel_peer_queued(struct sk_msg_md *msg, __u32 *queued)
{
	struct sk_msg___xl *m = (struct sk_msg___xl *)msg;
	struct sock___xl *peer = 0;
	unsigned long ud = 0;

	if (!bpf_core_field_exists(struct sk_psock___xl, msg_tot_len))
		return -1;
	if (bpf_core_read(&peer, sizeof(peer), &m->sk_redir) || !peer)
		return -1;
	if (bpf_core_read(&ud, sizeof(ud), &peer->sk_user_data) || !(ud & ACCEL_USER_DATA_PTRMASK))
		return -1;
	if (bpf_core_read(queued, sizeof(*queued),
			  &((struct sk_psock___xl *)(ud & ACCEL_USER_DATA_PTRMASK))->msg_tot_len))
		return -1;
	return 0;
}

static __always_inline int accel_fallback(struct accel_sk *st, enum accel_stat why, __u64 len)
{
	st->flags |= ACCEL_SK_FALLBACK;
	accel_count(why, 1);
	accel_count(ACCEL_FALLBACK_BYTES, len);
	return SK_PASS;
}

/* accel_stop: this message was redirected; the next ones take the normal
 * path. */
static __always_inline void accel_stop(struct accel_sk *st, enum accel_stat why)
{
	st->flags |= ACCEL_SK_FALLBACK;
	accel_count(why, 1);
}

SEC("sk_msg")
int xlane_accel_msg(struct sk_msg_md *msg)
{
	struct bpf_sock *sk = msg->sk;
	__u64 len = msg->size, max;
	struct accel_config *cfg;
	struct accel_key peer;
	struct accel_sk *st;
	__u32 queued = 0;

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
	cfg = accel_config();
	if (!cfg || !(cfg->flags & ACCEL_ON))
		return accel_fallback(st, ACCEL_FALLBACK_OFF, len);
	if (accel_mem_pressure(sk))
		return accel_fallback(st, ACCEL_FALLBACK_MEM_PRESSURE, len);
	max = cfg->max_backlog ? cfg->max_backlog : ACCEL_DEFAULT_BACKLOG;
	__builtin_memcpy(&peer, &st->peer, sizeof(peer));
	if (bpf_msg_redirect_hash(msg, &xlane_accel_socks, &peer, BPF_F_INGRESS) != SK_PASS)
		return accel_fallback(st, ACCEL_FALLBACK_NO_PEER, len);
	/* Committed: this message goes to the peer (a redirect cannot be
	 * taken back). If the peer is too far behind, the next one is the
	 * first of the normal path; the peer reads what it has queued
	 * first, so the order holds. The backlog overshoots max_backlog by
	 * at most this message (at most MAX_SKB_FRAGS pages). */
	if (accel_peer_queued(msg, &queued)) {
		/* No count: the socket's whole redirected total counts as
		 * unread (a direction redirects at most max_backlog bytes in
		 * all); no small-stream rule. */
		if (st->redirected + len > max)
			accel_stop(st, ACCEL_FALLBACK_BACKLOG);
	} else if (queued + len > max) {
		accel_stop(st, ACCEL_FALLBACK_BACKLOG);
	} else if (len < (cfg->small_msg ? cfg->small_msg : ACCEL_DEFAULT_SMALL_MSG) &&
		   queued > (cfg->small_backlog ? cfg->small_backlog
						: ACCEL_DEFAULT_SMALL_BACKLOG)) {
		/* Small messages to a reader that is falling behind, many
		 * in a row: a stream, which the normal path carries faster
		 * (it coalesces); ping-pong never leaves a backlog, and a
		 * relay's odd short read is one message, not a run. Same
		 * order argument as above. */
		if (++st->small_run >= ACCEL_SMALL_RUN)
			accel_stop(st, ACCEL_FALLBACK_SMALL_STREAM);
	} else {
		st->small_run = 0;
	}
	st->redirected += len;
	accel_count(ACCEL_MSG_REDIRECTED, 1);
	accel_count(ACCEL_BYTES_REDIRECTED, len);
	return SK_PASS;
}

ACCEL_BTF_ANCHORS;

char __license[] SEC("license") = "Dual BSD/GPL";
