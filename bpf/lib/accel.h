/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * accel.h - socket acceleration (bpf/sock_accel.c): the types Go shares
 * (bpf2go -type) and the maps of the sockops and sk_msg programs.
 *
 * Two sockets of one node that talk TCP to each other are put in a
 * SOCKHASH when their connection is established; a message one of them
 * sends is then moved into the other's receive queue (sk_msg redirect with
 * BPF_F_INGRESS) instead of crossing the TCP/IP stack twice. Everything
 * that cannot be made correct passes (SK_PASS) and is counted; so does a
 * direction whose peer falls too far behind (accel_config.max_backlog),
 * since the redirect path has no flow control.
 */
#ifndef XLANE_ACCEL_H
#define XLANE_ACCEL_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/*
 * accel_key identifies one socket of a connection: its own address and
 * port, the peer's, and the two sequence numbers the handshake chose
 * (its own ISN + 1 and the peer's). The sequence numbers make the key
 * unique on the node even where two network namespaces carry the same
 * 4-tuple (two containers' loopback, overlapping addresses in a cgroup a
 * user named): a socket is only ever redirected to the one that did its
 * handshake with it. IPv4 is keyed as ::ffff:a.b.c.d.
 */
struct accel_key {
	__u8 laddr[16];
	__u8 raddr[16];
	__u32 lport;   /* host order */
	__u32 rport;   /* host order */
	__u32 snd_isn; /* own ISN + 1 */
	__u32 rcv_isn; /* the peer's ISN + 1 */
	__u64 netns;   /* netns cookie when both ends are loopback, else 0 */
};

/* accel_sk is the per-socket state (xlane_accel_sk). */
struct accel_sk {
	struct accel_key peer; /* the key of the socket at the other end */
	__u32 flags;	       /* enum accel_sk_flags */
	/* Small messages this socket redirected in a row while its peer
	 * had more than small_backlog unread (the small-stream rule). */
	__u32 small_run;
	__u64 redirected; /* bytes this socket redirected to its peer */
};

enum accel_sk_flags {
	/* Something this socket sent went the normal way: from then on it
	 * never redirects, or the receiver (which reads its redirect queue
	 * first) would see later bytes before earlier ones. */
	ACCEL_SK_FALLBACK = 1,
};

/* accel_config (xlane_accel_config[0]): written by the daemon. */
struct accel_config {
	__u32 flags; /* enum accel_flags */
	/* The most a peer may have unread in its redirect queue: a direction
	 * whose peer has more falls back to the normal path, where TCP's
	 * flow control holds the writer (the redirect path has none). 0:
	 * ACCEL_DEFAULT_BACKLOG. */
	__u32 max_backlog;
	/* A stream of small messages to a reader that falls behind:
	 * ACCEL_SMALL_RUN messages in a row shorter than small_msg bytes,
	 * each redirected while the peer has more than small_backlog
	 * unread, make their direction fall back for good
	 * (ACCEL_FALLBACK_SMALL_STREAM). One message alone does not: a
	 * relay (a proxy copying between sockets) writes what it read, and
	 * an odd short read is no stream. The normal path coalesces
	 * small writes (autocork, GSO/GRO) where the redirect path moves and
	 * wakes per message. Needs the peer's unread count (msg_tot_len,
	 * 6.12+); without it nothing changes. 0: the ACCEL_DEFAULT_ ones. */
	__u32 small_msg;
	__u32 small_backlog;
};

/* The max_backlog when the daemon gives none (it writes the largest TCP
 * receive buffer, tcp_rmem[2]: 6 MiB on a default Debian). */
#define ACCEL_DEFAULT_BACKLOG (4u << 20)
/* The small_msg and small_backlog when the daemon gives none. */
#define ACCEL_DEFAULT_SMALL_MSG (4u << 10)
#define ACCEL_DEFAULT_SMALL_BACKLOG (128u << 10)
/* Small messages in a row that make a stream (accel_sk.small_run). */
#define ACCEL_SMALL_RUN 16

enum accel_flags {
	ACCEL_ON = 1,		/* off: no new socket is added, nothing redirects */
	ACCEL_FILTER_NETS = 2,	/* both addresses must be in xlane_accel_nets */
	ACCEL_FILTER_PORTS = 4, /* one of the ports must be in xlane_accel_ports */
};

/* accel_net_key: an LPM key, IPv4 as ::ffff:a.b.c.d/(96 + len). */
struct accel_net_key {
	__u32 prefixlen;
	__u8 addr[16];
};

/*
 * accel_stat: the counters of xlane_accel_stats. Sockets: added, or why
 * not; messages: redirected (and their bytes), or why they fell back to
 * the normal path. Names are read from BTF by Go.
 */
enum accel_stat {
	ACCEL_SOCK_ADDED,	     /* a socket entered the SOCKHASH */
	ACCEL_SOCK_SKIP_FILTER,	     /* its addresses or ports are not accelerated */
	ACCEL_SOCK_SKIP_INFLIGHT,    /* data was sent before it was established */
	ACCEL_SOCK_SKIP_OFF,	     /* acceleration is off (draining) */
	ACCEL_SOCK_ADD_FAILED,	     /* map full, or the kernel refused it */
	ACCEL_MSG_REDIRECTED,	     /* messages moved socket to socket */
	ACCEL_BYTES_REDIRECTED,	     /* their bytes */
	ACCEL_FALLBACK_NO_PEER,	     /* the peer socket is not in the map */
	ACCEL_FALLBACK_STICKY,	     /* the socket fell back before */
	ACCEL_FALLBACK_OFF,	     /* acceleration was turned off */
	ACCEL_FALLBACK_NO_STATE,     /* no per-socket state (should not happen) */
	ACCEL_FALLBACK_BACKLOG,	     /* the peer had more than max_backlog unread */
	ACCEL_FALLBACK_MEM_PRESSURE, /* the node's TCP memory is under pressure */
	ACCEL_FALLBACK_BYTES,	     /* bytes of every message that fell back */
	ACCEL_FALLBACK_SMALL_STREAM, /* small messages, the peer more than small_backlog behind */
	ACCEL_STAT_MAX,
};

#define ACCEL_MAX_SOCKS 65536

/* key: accel_key of a socket; value: the socket. Written by the sockops
 * program at establishment; the kernel removes a socket when it closes.
 * Read by bpf_msg_redirect_hash in the sk_msg program. */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__type(key, struct accel_key);
	__type(value, __u64);
	__uint(max_entries, ACCEL_MAX_SOCKS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_accel_socks SEC(".maps");

/* Per-socket accel_sk, freed with the socket. Written by sockops (peer
 * key) and sk_msg (fallback flag); read by sk_msg. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__type(key, int);
	__type(value, struct accel_sk);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_accel_sk SEC(".maps");

/* [0]: accel_config. Written by the daemon; read by both programs. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct accel_config);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_accel_config SEC(".maps");

/* key: prefix (accel_net_key); value: unused. The address filter, written
 * by the daemon (`xlane accel enable --net`); read by sockops. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct accel_net_key);
	__type(value, __u8);
	__uint(max_entries, 256);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_accel_nets SEC(".maps");

/* key: TCP port, host order; value: unused. The port filter, written by the
 * daemon (`--port`); read by sockops. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u16);
	__type(value, __u8);
	__uint(max_entries, 256);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_accel_ports SEC(".maps");

/* [enum accel_stat]: per-CPU counts. Written by both programs; summed by
 * the daemon (`xlane accel status`). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, ACCEL_STAT_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_accel_stats SEC(".maps");

/* Enums and pointed-to structs in BTF for bpf2go, and in a fixed order
 * (see XL_ABI_BTF_ANCHORS in abi.h). */
#define ACCEL_BTF_ANCHORS                                                \
	struct bpf_sock *accel_btf_sock __attribute__((unused));         \
	const enum accel_stat *accel_btf_stat __attribute__((unused));   \
	const enum accel_flags *accel_btf_flags __attribute__((unused)); \
	const enum accel_sk_flags *accel_btf_sk_flags __attribute__((unused))

static __always_inline void accel_count(enum accel_stat s, __u64 n)
{
	__u32 k = s;
	__u64 *v = bpf_map_lookup_elem(&xlane_accel_stats, &k);

	if (v)
		*v += n;
}

static __always_inline struct accel_config *accel_config(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&xlane_accel_config, &zero);
}

static __always_inline __u32 accel_flags(void)
{
	struct accel_config *c = accel_config();

	return c ? c->flags : 0;
}

#endif
