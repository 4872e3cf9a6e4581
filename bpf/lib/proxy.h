/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * proxy.h - transparent redirect to a local proxy (bpf/sock_proxy.c): the
 * types Go shares and the maps.
 *
 * A connect() to a redirected port goes to the proxy's port on loopback
 * instead; the original destination follows the connection from the
 * socket cookie (connect) to the client's address and port (sockops, once
 * the source port is chosen), where the proxy's getsockopt(SO_ORIGINAL_DST)
 * finds it: the proxy's accepted socket has the client's address and port
 * as its remote end.
 *
 * Inbound (--direction in): an sk_lookup program on the network namespace
 * where the app listens hands a connection arriving at a redirected port
 * to the proxy's listening socket (xlane_proxy_listeners), keeping the
 * original destination as the accepted socket's local address, which is
 * what the getsockopt program answers. The proxy's own connection to the
 * port is recognised at connect() (mark, cgroup or uid), keyed by its
 * 4-tuple once sockops sees the source port, and left to the app.
 */
#ifndef XLANE_PROXY_H
#define XLANE_PROXY_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* How the proxy's own connections are recognised (never redirected). */
enum proxy_exempt {
	PROXY_EXEMPT_MARK = 1,	 /* the socket's SO_MARK */
	PROXY_EXEMPT_CGROUP = 2, /* the connecting task's cgroup (v2 id) */
	PROXY_EXEMPT_UID = 3,	 /* the connecting task's uid */
};

/* xlane_proxy_rules: key = destination port (host order). */
struct proxy_val {
	__u16 to_port; /* the proxy's port on loopback, host order */
	__u8 exempt;   /* enum proxy_exempt */
	__u8 pad;
	__u32 mark; /* PROXY_EXEMPT_MARK */
	__u32 uid;  /* PROXY_EXEMPT_UID */
	__u32 pad2;
	__u64 cgroup; /* PROXY_EXEMPT_CGROUP */
};

/* The original destination of a redirected connection. */
struct proxy_orig {
	__u8 addr[16]; /* ::ffff:a.b.c.d for IPv4 */
	__u16 port;    /* host order */
	__u8 family;   /* 4 or 6 */
	__u8 pad;
	__u32 pad2;
};

/* The client end of a redirected connection: its address and port, as the
 * proxy's accepted socket sees its peer, in one network namespace. */
struct proxy_tuple {
	__u8 addr[16];
	__u32 port; /* host order */
	__u32 pad;
	__u64 netns;
};

/* xlane_proxy_in, xlane_proxy_in_to: a port in one network namespace. */
struct proxy_in_key {
	__u64 netns; /* network namespace cookie */
	__u16 port;  /* host order */
	__u16 pad;
	__u32 pad2;
};

/* xlane_proxy_listeners: the proxy's listening socket for one family. */
struct proxy_lsn_key {
	__u64 netns;
	__u16 port;  /* the proxy's port, host order */
	__u8 family; /* 4 or 6 */
	__u8 pad;
	__u32 pad2;
};

/* xlane_proxy_in_exempt: one TCP connection, as its client sees it. */
struct proxy_conn_key {
	__u8 src[16]; /* ::ffff:a.b.c.d for IPv4 */
	__u8 dst[16];
	__u16 sport; /* host order */
	__u16 dport; /* host order */
	__u32 pad;
	__u64 netns;
};

enum proxy_stat {
	PROXY_REDIRECTED,     /* connect() sent to the proxy */
	PROXY_EXEMPTED,	      /* the proxy's own connection, left alone */
	PROXY_ORIGDST_FOUND,  /* SO_ORIGINAL_DST answered */
	PROXY_ORIGDST_MISSED, /* SO_ORIGINAL_DST for an unknown connection */
	PROXY_TRACK_FAILED,   /* the original destination could not be kept */
	PROXY_IN_REDIRECTED,  /* an arriving connection handed to the proxy's listener */
	PROXY_IN_EXEMPTED,    /* the proxy's own connection to the port, left to the app */
	PROXY_IN_NO_LISTENER, /* an arriving connection refused: no proxy listener (or it refused) */
	PROXY_IN_LISTENER_ADDED, /* a proxy listen() put into xlane_proxy_listeners */
	PROXY_STAT_MAX,
};

#define PROXY_MAX_CONNS 65536

/* key: destination port (host order); value: proxy_val. Written by the
 * daemon (`xlane proxy redirect`); read by the connect programs. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u16);
	__type(value, struct proxy_val);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_proxy_rules SEC(".maps");

/* key: socket cookie; value: proxy_orig. Written at connect(), moved to
 * xlane_proxy_conns by sockops when the source port is known. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, __u64);
	__type(value, struct proxy_orig);
	__uint(max_entries, PROXY_MAX_CONNS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_proxy_pending SEC(".maps");

/* key: proxy_tuple (the client end); value: proxy_orig. Written by sockops;
 * read by the getsockopt program. LRU: a closed connection's entry is
 * overwritten when the tuple is used again, or evicted. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct proxy_tuple);
	__type(value, struct proxy_orig);
	__uint(max_entries, PROXY_MAX_CONNS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_proxy_conns SEC(".maps");

/* key: proxy_in_key (netns, redirected port); value: proxy_val (to_port,
 * exemption). Written by the daemon (`--direction in`); read by sk_lookup,
 * the connect programs (exemption) and getsockopt. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct proxy_in_key);
	__type(value, struct proxy_val);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_proxy_in SEC(".maps");

/* key: proxy_in_key (netns, the proxy's port); value: the redirected port.
 * Written by the daemon; read by sockops at listen() to know the proxy's
 * listener. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct proxy_in_key);
	__type(value, __u16);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_proxy_in_to SEC(".maps");

/* key: proxy_lsn_key; value: the socket (cookie when read from user space).
 * Written by the daemon (the listener taken from the proxy with
 * pidfd_getfd) and by sockops at the proxy's listen(); read by sk_lookup.
 * A closed listener leaves the map by itself. */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__type(key, struct proxy_lsn_key);
	__type(value, __u64);
	__uint(max_entries, 2048);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_proxy_listeners SEC(".maps");

/* key: socket cookie; value: 1. The proxy's own connect() to an inbound
 * redirected port, moved to xlane_proxy_in_exempt by sockops. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, __u64);
	__type(value, __u8);
	__uint(max_entries, PROXY_MAX_CONNS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_proxy_in_pending SEC(".maps");

/* key: proxy_conn_key; value: 1. The proxy's own connections to an inbound
 * redirected port: written by sockops (TCP_CONNECT_CB), deleted when the
 * socket closes (STATE_CB); read by sk_lookup, which leaves them to the app. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct proxy_conn_key);
	__type(value, __u8);
	__uint(max_entries, PROXY_MAX_CONNS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_proxy_in_exempt SEC(".maps");

/* [enum proxy_stat]: per-CPU counts, summed by the daemon. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, PROXY_STAT_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xlane_proxy_stats SEC(".maps");

#define PROXY_BTF_ANCHORS                                              \
	struct bpf_sock *proxy_btf_sock __attribute__((unused));       \
	const enum proxy_stat *proxy_btf_stat __attribute__((unused)); \
	const enum proxy_exempt *proxy_btf_exempt __attribute__((unused))

static __always_inline void proxy_count(enum proxy_stat s)
{
	__u32 k = s;
	__u64 *v = bpf_map_lookup_elem(&xlane_proxy_stats, &k);

	if (v)
		*v += 1;
}

#endif
