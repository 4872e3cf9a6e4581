// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * sock_lb.c - services and published ports for the node's own processes.
 *
 * A process on the node connecting to a VIP or to a published port never
 * crosses an xlane tc program on its way out, so the translation happens at
 * connect() instead: the cgroup hook rewrites the socket's destination to
 * the chosen backend, and the connection is to the backend from the first
 * packet (no per-packet NAT, no conntrack entry). cgroup hooks see every
 * network namespace; these act only in the node's (xlane_config's cookie).
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>

#include "lib/abi.h"
#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/l4.h"
#include "lib/ct.h"
#include "lib/lb.h"

#define SOCK_ALLOW 1

/* sock_translate finds where dst:dport of a new connection goes, from a
 * published port on the node's address or a service's backend. */
static __always_inline int sock_translate(struct bpf_sock_addr *ctx, struct ct_key *k,
					  const struct xl_config *cfg, struct backend_val *to)
{
	struct l4 l4 = { .dport = k->dport, .proto = k->proto };
	const __u8 *na = k->daddr[10] == 0xff ? cfg->uplink_v4 : cfg->uplink_v6;
	__u64 cookie = bpf_get_socket_cookie(ctx);

	/* Hash entropy for Maglev: the socket, as the 5-tuple is not known. */
	__builtin_memcpy(k->saddr, &cookie, sizeof(cookie));
	if (__builtin_memcmp(k->daddr, na, 16) == 0) {
		struct publish_key pk = { .port = k->dport,
					  .proto = k->proto,
					  .family = k->daddr[10] == 0xff ? 4 : 6 };
		struct publish_val *pv = bpf_map_lookup_elem(&xlane_publish, &pk);

		if (!pv)
			return 0;
		__builtin_memcpy(to->addr, pv->addr, 16);
		to->port = pv->port;
		return 1;
	}
	return lb_select(k, &l4, to) == LB_BACKEND;
}

static __always_inline struct xl_config *sock_config(struct bpf_sock_addr *ctx)
{
	struct xl_config *cfg = xl_config();

	if (!cfg || !cfg->netns_cookie || bpf_get_netns_cookie(ctx) != cfg->netns_cookie)
		return 0;
	return cfg;
}

SEC("cgroup/connect4")
int xlane_connect4(struct bpf_sock_addr *ctx)
{
	struct xl_config *cfg = sock_config(ctx);
	struct backend_val to = {};
	struct ct_key k = {};

	if (!cfg || (ctx->protocol != IPPROTO_TCP && ctx->protocol != IPPROTO_UDP))
		return SOCK_ALLOW;
	key_from_ipv4((struct endpoint_key *)k.daddr, ctx->user_ip4);
	k.dport = (__u16)ctx->user_port;
	k.proto = ctx->protocol;
	if (sock_translate(ctx, &k, cfg, &to)) {
		__u32 a;

		__builtin_memcpy(&a, &to.addr[12], 4);
		ctx->user_ip4 = a;
		ctx->user_port = to.port;
	}
	if (mon_types())
		mon_sock();
	return SOCK_ALLOW;
}

SEC("cgroup/connect6")
int xlane_connect6(struct bpf_sock_addr *ctx)
{
	struct xl_config *cfg = sock_config(ctx);
	struct backend_val to = {};
	struct ct_key k = {};
	__u32 a[4];

	if (!cfg || (ctx->protocol != IPPROTO_TCP && ctx->protocol != IPPROTO_UDP))
		return SOCK_ALLOW;
	a[0] = ctx->user_ip6[0];
	a[1] = ctx->user_ip6[1];
	a[2] = ctx->user_ip6[2];
	a[3] = ctx->user_ip6[3];
	__builtin_memcpy(k.daddr, a, 16);
	k.dport = (__u16)ctx->user_port;
	k.proto = ctx->protocol;
	if (sock_translate(ctx, &k, cfg, &to)) {
		__builtin_memcpy(a, to.addr, 16);
		ctx->user_ip6[0] = a[0];
		ctx->user_ip6[1] = a[1];
		ctx->user_ip6[2] = a[2];
		ctx->user_ip6[3] = a[3];
		ctx->user_port = to.port;
	}
	if (mon_types())
		mon_sock();
	return SOCK_ALLOW;
}

XL_ABI_BTF_ANCHORS;

char __license[] SEC("license") = "Dual BSD/GPL";
