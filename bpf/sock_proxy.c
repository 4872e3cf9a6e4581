// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * sock_proxy.c - transparent redirect of outgoing TCP connections to a
 * local proxy, and SO_ORIGINAL_DST for the proxy, as iptables REDIRECT and
 * conntrack would give it.
 *
 *   client --connect(P)--> [connect4/6: P redirected? -> 127.0.0.1|::1:to]
 *      sockops TCP_CONNECT_CB: cookie -> (client addr, port)
 *   proxy accept() -> getsockopt(SO_ORIGINAL_DST) [cgroup/getsockopt:
 *      peer (client addr, port) -> original destination]
 *
 * The proxy's own connections (its upstream, to the same port P) are
 * recognised by SO_MARK, by the connecting task's cgroup or by its uid
 * (the rule says which) and never redirected again.
 *
 * Inbound (`--direction in`), in the network namespace where the app
 * listens on P:
 *
 *   SYN to P --> [sk_lookup: (netns, P) redirected? the proxy's own
 *      connection (xlane_proxy_in_exempt)? -> normal lookup (the app);
 *      else -> the proxy's listener from xlane_proxy_listeners]
 *   proxy listen(to) --> sockops TCP_LISTEN_CB puts it in the listener map
 *   proxy connect(P) --> connect4/6: exempt? cookie -> xlane_proxy_in_pending
 *      sockops TCP_CONNECT_CB: 4-tuple -> xlane_proxy_in_exempt (removed
 *      at close, STATE_CB)
 *   proxy getsockopt(SO_ORIGINAL_DST) on the accepted socket: its local
 *      address, which sk_lookup left as the client addressed it.
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lib/proxy.h"

/* Context fields one 32-bit load at a time: clang merges neighbouring
 * loads of an array into 64-bit ones, which the verifier refuses. */
#define RD32(f) (*(volatile __u32 *)&(f))
#define AF_INET 2
#define AF_INET6 10
#define SOL_IP 0
#define SOL_IPV6 41
#define SO_ORIGINAL_DST 80	/* linux/netfilter_ipv4.h */
#define IP6T_SO_ORIGINAL_DST 80 /* linux/netfilter_ipv6/ip6_tables.h */
#define ALLOW 1
#define TCP_CLOSE 7 /* include/net/tcp_states.h */

/* The network namespace an sk_lookup copy is attached to (sk_lookup has
 * no helper that tells it): set per copy by the daemon at load time. */
volatile const __u64 proxy_netns;

/* proxy_exempt: the connecting task is the proxy itself, by the rule's
 * criterion. */
static __always_inline int proxy_exempt(struct bpf_sock_addr *ctx, struct proxy_val *r)
{
	struct bpf_sock *sk;

	switch (r->exempt) {
	case PROXY_EXEMPT_MARK:
		sk = ctx->sk;
		return sk && sk->mark == r->mark;
	case PROXY_EXEMPT_CGROUP:
		return bpf_get_current_cgroup_id() == r->cgroup;
	case PROXY_EXEMPT_UID:
		return (__u32)bpf_get_current_uid_gid() == r->uid;
	}
	return 0;
}

/* proxy_in_mark: a connect() to port of an inbound redirect in this
 * namespace by the proxy itself is remembered by socket cookie, so that
 * sk_lookup leaves it to the app once sockops has its 4-tuple. */
static __always_inline void proxy_in_mark(struct bpf_sock_addr *ctx, __u16 port)
{
	struct proxy_in_key k = { .netns = bpf_get_netns_cookie(ctx), .port = port };
	struct proxy_val *r = bpf_map_lookup_elem(&xlane_proxy_in, &k);
	__u64 cookie;
	__u8 one = 1;

	if (!r || !proxy_exempt(ctx, r))
		return;
	cookie = bpf_get_socket_cookie(ctx);
	if (bpf_map_update_elem(&xlane_proxy_in_pending, &cookie, &one, BPF_ANY) != 0)
		proxy_count(PROXY_TRACK_FAILED);
}

/* proxy_rule is the rule for a TCP connect() to port, unless the caller is
 * the proxy itself. */
static __always_inline struct proxy_val *proxy_rule(struct bpf_sock_addr *ctx, __u16 port)
{
	struct proxy_val *r;

	if (ctx->protocol != IPPROTO_TCP)
		return 0;
	r = bpf_map_lookup_elem(&xlane_proxy_rules, &port);
	if (!r) {
		proxy_in_mark(ctx, port);
		return 0;
	}
	if (proxy_exempt(ctx, r)) {
		proxy_count(PROXY_EXEMPTED);
		return 0;
	}
	return r;
}

static __always_inline int proxy_track(struct bpf_sock_addr *ctx, struct proxy_orig *o)
{
	__u64 cookie = bpf_get_socket_cookie(ctx);

	if (bpf_map_update_elem(&xlane_proxy_pending, &cookie, o, BPF_ANY) != 0) {
		proxy_count(PROXY_TRACK_FAILED);
		return 0;
	}
	proxy_count(PROXY_REDIRECTED);
	return 1;
}

SEC("cgroup/connect4")
int xlane_proxy_connect4(struct bpf_sock_addr *ctx)
{
	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	struct proxy_orig o = { .port = port, .family = 4 };
	struct proxy_val *r = proxy_rule(ctx, port);
	__u32 a = ctx->user_ip4;

	if (!r)
		return ALLOW;
	o.addr[10] = 0xff;
	o.addr[11] = 0xff;
	__builtin_memcpy(&o.addr[12], &a, 4);
	/* Without the original destination the proxy could not serve the
	 * connection: leave it alone. */
	if (!proxy_track(ctx, &o))
		return ALLOW;
	ctx->user_ip4 = bpf_htonl(0x7f000001);
	ctx->user_port = bpf_htons(r->to_port);
	return ALLOW;
}

SEC("cgroup/connect6")
int xlane_proxy_connect6(struct bpf_sock_addr *ctx)
{
	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	struct proxy_orig o = { .port = port, .family = 6 };
	struct proxy_val *r = proxy_rule(ctx, port);
	__u32 a[4];

	if (!r)
		return ALLOW;
	a[0] = RD32(ctx->user_ip6[0]);
	a[1] = RD32(ctx->user_ip6[1]);
	a[2] = RD32(ctx->user_ip6[2]);
	a[3] = RD32(ctx->user_ip6[3]);
	__builtin_memcpy(o.addr, a, 16);
	if (!proxy_track(ctx, &o))
		return ALLOW;
	ctx->user_ip6[0] = 0;
	ctx->user_ip6[1] = 0;
	ctx->user_ip6[2] = 0;
	ctx->user_ip6[3] = bpf_htonl(1);
	ctx->user_port = bpf_htons(r->to_port);
	return ALLOW;
}

static __always_inline void mapped4(__u8 *dst, __u32 a)
{
	__builtin_memset(dst, 0, 10);
	dst[10] = 0xff;
	dst[11] = 0xff;
	__builtin_memcpy(&dst[12], &a, 4);
}

/* proxy_sockops_key: the 4-tuple of a connecting socket, as sk_lookup on
 * the destination's side sees it. */
static __always_inline void proxy_sockops_key(struct bpf_sock_ops *ctx, struct proxy_conn_key *c)
{
	if (ctx->family == AF_INET) {
		mapped4(c->src, ctx->local_ip4);
		mapped4(c->dst, ctx->remote_ip4);
	} else {
		__u32 s[4] = { RD32(ctx->local_ip6[0]), RD32(ctx->local_ip6[1]),
			       RD32(ctx->local_ip6[2]), RD32(ctx->local_ip6[3]) };
		__u32 d[4] = { RD32(ctx->remote_ip6[0]), RD32(ctx->remote_ip6[1]),
			       RD32(ctx->remote_ip6[2]), RD32(ctx->remote_ip6[3]) };

		__builtin_memcpy(c->src, s, 16);
		__builtin_memcpy(c->dst, d, 16);
	}
	c->sport = ctx->local_port;
	c->dport = bpf_ntohl(ctx->remote_port);
	c->netns = bpf_get_netns_cookie(ctx);
}

/* proxy_listen: the proxy's listen() on its port of an inbound redirect
 * puts the socket in the listener map (again after a restart). */
static __always_inline void proxy_listen(struct bpf_sock_ops *ctx)
{
	struct proxy_in_key k = { .netns = bpf_get_netns_cookie(ctx), .port = ctx->local_port };
	struct proxy_lsn_key l = { .netns = k.netns, .port = k.port };

	if (!bpf_map_lookup_elem(&xlane_proxy_in_to, &k))
		return;
	l.family = ctx->family == AF_INET ? 4 : 6;
	if (bpf_sock_hash_update(ctx, &xlane_proxy_listeners, &l, BPF_ANY) != 0) {
		proxy_count(PROXY_TRACK_FAILED);
		return;
	}
	proxy_count(PROXY_IN_LISTENER_ADDED);
}

/* proxy_in_connect: the proxy's own connection to an inbound redirected
 * port, now with its source port, is left to the app by sk_lookup until
 * the socket closes. */
static __always_inline void proxy_in_connect(struct bpf_sock_ops *ctx, __u64 cookie)
{
	struct proxy_conn_key c = {};
	__u8 one = 1;

	if (!bpf_map_lookup_elem(&xlane_proxy_in_pending, &cookie))
		return;
	bpf_map_delete_elem(&xlane_proxy_in_pending, &cookie);
	proxy_sockops_key(ctx, &c);
	if (bpf_map_update_elem(&xlane_proxy_in_exempt, &c, &one, BPF_ANY) != 0) {
		proxy_count(PROXY_TRACK_FAILED);
		return;
	}
	/* Other programs' flags kept: only ours added. */
	bpf_sock_ops_cb_flags_set(ctx, ctx->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_STATE_CB_FLAG);
}

/* Once connect() has chosen the source port, key the original destination
 * by the client's end, which is what the proxy sees as its peer. */
SEC("sockops")
int xlane_proxy_sockops(struct bpf_sock_ops *ctx)
{
	struct proxy_tuple t = {};
	struct proxy_conn_key c = {};
	struct proxy_orig *o;
	__u64 cookie;

	switch (ctx->op) {
	case BPF_SOCK_OPS_TCP_LISTEN_CB:
		proxy_listen(ctx);
		return ALLOW;
	case BPF_SOCK_OPS_STATE_CB:
		/* Only sockets proxy_in_connect flagged get here. */
		if (ctx->args[1] == TCP_CLOSE) {
			proxy_sockops_key(ctx, &c);
			bpf_map_delete_elem(&xlane_proxy_in_exempt, &c);
		}
		return ALLOW;
	case BPF_SOCK_OPS_TCP_CONNECT_CB:
		break;
	default:
		return ALLOW;
	}
	cookie = bpf_get_socket_cookie(ctx);
	o = bpf_map_lookup_elem(&xlane_proxy_pending, &cookie);
	if (!o) {
		proxy_in_connect(ctx, cookie);
		return ALLOW;
	}
	if (ctx->family == AF_INET) {
		mapped4(t.addr, ctx->local_ip4);
	} else {
		__u32 a[4] = { RD32(ctx->local_ip6[0]), RD32(ctx->local_ip6[1]),
			       RD32(ctx->local_ip6[2]), RD32(ctx->local_ip6[3]) };

		__builtin_memcpy(t.addr, a, 16);
	}
	t.port = ctx->local_port;
	t.netns = bpf_get_netns_cookie(ctx);
	if (bpf_map_update_elem(&xlane_proxy_conns, &t, o, BPF_ANY) != 0)
		proxy_count(PROXY_TRACK_FAILED);
	bpf_map_delete_elem(&xlane_proxy_pending, &cookie);
	return ALLOW;
}

/* A TCP connection arriving at a redirected port of this namespace goes to
 * the proxy's listener, unless it is the proxy's own; with the rule but
 * no listener it is refused, as behind iptables REDIRECT with the proxy
 * down (never handed to the app behind the proxy's back). */
SEC("sk_lookup")
int xlane_proxy_lookup(struct bpf_sk_lookup *ctx)
{
	struct proxy_in_key k = { .netns = proxy_netns, .port = ctx->local_port };
	struct proxy_lsn_key l = { .netns = proxy_netns };
	struct proxy_conn_key c = {};
	struct proxy_val *r;
	struct bpf_sock *sk;
	long err;

	if (ctx->protocol != IPPROTO_TCP)
		return SK_PASS;
	r = bpf_map_lookup_elem(&xlane_proxy_in, &k);
	if (!r)
		return SK_PASS;
	if (ctx->family == AF_INET) {
		mapped4(c.src, ctx->remote_ip4);
		mapped4(c.dst, ctx->local_ip4);
		l.family = 4;
	} else {
		__u32 s[4] = { RD32(ctx->remote_ip6[0]), RD32(ctx->remote_ip6[1]),
			       RD32(ctx->remote_ip6[2]), RD32(ctx->remote_ip6[3]) };
		__u32 d[4] = { RD32(ctx->local_ip6[0]), RD32(ctx->local_ip6[1]),
			       RD32(ctx->local_ip6[2]), RD32(ctx->local_ip6[3]) };

		__builtin_memcpy(c.src, s, 16);
		__builtin_memcpy(c.dst, d, 16);
		l.family = 6;
	}
	c.sport = bpf_ntohs(ctx->remote_port);
	c.dport = ctx->local_port;
	c.netns = proxy_netns;
	if (bpf_map_lookup_elem(&xlane_proxy_in_exempt, &c)) {
		proxy_count(PROXY_IN_EXEMPTED);
		return SK_PASS;
	}
	l.port = r->to_port;
	sk = bpf_map_lookup_elem(&xlane_proxy_listeners, &l);
	if (!sk && l.family == 4) {
		/* A dual-stack listener ([::]) takes IPv4 too. */
		l.family = 6;
		sk = bpf_map_lookup_elem(&xlane_proxy_listeners, &l);
	}
	if (!sk) {
		proxy_count(PROXY_IN_NO_LISTENER);
		return SK_DROP;
	}
	err = bpf_sk_assign(ctx, sk, 0);
	bpf_sk_release(sk);
	if (err) {
		proxy_count(PROXY_IN_NO_LISTENER);
		return SK_DROP;
	}
	proxy_count(PROXY_IN_REDIRECTED);
	return SK_PASS;
}

/* proxy_in_orig: a socket whose local port is an inbound redirected port
 * of its namespace was handed over by sk_lookup (the proxy listens on
 * another port): its local address is the original destination, as
 * conntrack would report it. */
static __always_inline struct proxy_orig *proxy_in_orig(struct bpf_sock *sk, __u64 netns,
							struct proxy_orig *o)
{
	struct proxy_in_key k = { .netns = netns, .port = sk->src_port };
	__u32 a[4];

	if (!bpf_map_lookup_elem(&xlane_proxy_in, &k))
		return 0;
	o->port = sk->src_port;
	if (sk->family == AF_INET) {
		mapped4(o->addr, sk->src_ip4);
		o->family = 4;
		return o;
	}
	a[0] = RD32(sk->src_ip6[0]);
	a[1] = RD32(sk->src_ip6[1]);
	a[2] = RD32(sk->src_ip6[2]);
	a[3] = RD32(sk->src_ip6[3]);
	__builtin_memcpy(o->addr, a, 16);
	/* An IPv4 client of a dual-stack listener: ::ffff:a.b.c.d, answered
	 * for SOL_IP. */
	o->family = (a[0] | a[1]) == 0 && a[2] == bpf_htonl(0xffff) ? 4 : 6;
	return o;
}

/* SO_ORIGINAL_DST (IPv4: struct sockaddr_in) and IP6T_SO_ORIGINAL_DST
 * (struct sockaddr_in6) on the proxy's accepted socket. Anything else, and
 * a connection that was not redirected, keeps the kernel's answer. */
SEC("cgroup/getsockopt")
int xlane_proxy_getsockopt(struct bpf_sockopt *ctx)
{
	struct bpf_sock *sk = ctx->sk;
	struct proxy_tuple t = {};
	struct proxy_orig in = {};
	struct proxy_orig *o;
	__u8 *p = ctx->optval;
	__u8 *end = ctx->optval_end;
	int v4;

	if (ctx->optname != SO_ORIGINAL_DST || (ctx->level != SOL_IP && ctx->level != SOL_IPV6))
		return ALLOW;
	if (!sk)
		return ALLOW;
	v4 = ctx->level == SOL_IP;
	if (sk->family == AF_INET) {
		__u32 a = sk->dst_ip4;

		t.addr[10] = 0xff;
		t.addr[11] = 0xff;
		__builtin_memcpy(&t.addr[12], &a, 4);
	} else if (sk->family == AF_INET6) {
		__u32 a[4] = { RD32(sk->dst_ip6[0]), RD32(sk->dst_ip6[1]), RD32(sk->dst_ip6[2]),
			       RD32(sk->dst_ip6[3]) };

		__builtin_memcpy(t.addr, a, 16);
	} else {
		return ALLOW;
	}
	t.port = bpf_ntohs((__u16)sk->dst_port);
	t.netns = bpf_get_netns_cookie(ctx);
	o = bpf_map_lookup_elem(&xlane_proxy_conns, &t);
	if (!o)
		o = proxy_in_orig(sk, t.netns, &in);
	if (!o || (o->family == 4) != v4) {
		proxy_count(PROXY_ORIGDST_MISSED);
		return ALLOW;
	}
	if (v4) {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = bpf_htons(o->port) };

		if (p + sizeof(sa) > end)
			return ALLOW; /* the caller's buffer is too small */
		__builtin_memcpy(&sa.sin_addr, &o->addr[12], 4);
		__builtin_memcpy(p, &sa, sizeof(sa));
		ctx->optlen = sizeof(sa);
	} else {
		struct sockaddr_in6 {
			__u16 sin6_family;
			__u16 sin6_port;
			__u32 sin6_flowinfo;
			__u8 sin6_addr[16];
			__u32 sin6_scope_id;
		} sa6 = { .sin6_family = AF_INET6, .sin6_port = bpf_htons(o->port) };

		if (p + sizeof(sa6) > end)
			return ALLOW;
		__builtin_memcpy(sa6.sin6_addr, o->addr, 16);
		__builtin_memcpy(p, &sa6, sizeof(sa6));
		ctx->optlen = sizeof(sa6);
	}
	ctx->retval = 0;
	proxy_count(PROXY_ORIGDST_FOUND);
	return ALLOW;
}

PROXY_BTF_ANCHORS;

char __license[] SEC("license") = "Dual BSD/GPL";
