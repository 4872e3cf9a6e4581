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

/* proxy_rule is the rule for a TCP connect() to port, unless the caller is
 * the proxy itself. */
static __always_inline struct proxy_val *proxy_rule(struct bpf_sock_addr *ctx, __u16 port)
{
	struct proxy_val *r;
	struct bpf_sock *sk;
	int exempt = 0;

	if (ctx->protocol != IPPROTO_TCP)
		return 0;
	r = bpf_map_lookup_elem(&xlane_proxy_rules, &port);
	if (!r)
		return 0;
	switch (r->exempt) {
	case PROXY_EXEMPT_MARK:
		sk = ctx->sk;
		exempt = sk && sk->mark == r->mark;
		break;
	case PROXY_EXEMPT_CGROUP:
		exempt = bpf_get_current_cgroup_id() == r->cgroup;
		break;
	case PROXY_EXEMPT_UID:
		exempt = (__u32)bpf_get_current_uid_gid() == r->uid;
		break;
	}
	if (exempt) {
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

/* Once connect() has chosen the source port, key the original destination
 * by the client's end, which is what the proxy sees as its peer. */
SEC("sockops")
int xlane_proxy_sockops(struct bpf_sock_ops *ctx)
{
	struct proxy_tuple t = {};
	struct proxy_orig *o;
	__u64 cookie;

	if (ctx->op != BPF_SOCK_OPS_TCP_CONNECT_CB)
		return ALLOW;
	cookie = bpf_get_socket_cookie(ctx);
	o = bpf_map_lookup_elem(&xlane_proxy_pending, &cookie);
	if (!o)
		return ALLOW;
	if (ctx->family == AF_INET) {
		__u32 a = ctx->local_ip4;

		t.addr[10] = 0xff;
		t.addr[11] = 0xff;
		__builtin_memcpy(&t.addr[12], &a, 4);
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

/* SO_ORIGINAL_DST (IPv4: struct sockaddr_in) and IP6T_SO_ORIGINAL_DST
 * (struct sockaddr_in6) on the proxy's accepted socket. Anything else, and
 * a connection that was not redirected, keeps the kernel's answer. */
SEC("cgroup/getsockopt")
int xlane_proxy_getsockopt(struct bpf_sockopt *ctx)
{
	struct bpf_sock *sk = ctx->sk;
	struct proxy_tuple t = {};
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
