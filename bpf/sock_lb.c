// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * sock_lb.c - services and published ports for the node's own processes.
 *
 * A process on the node connecting to a VIP or to a published port never
 * crosses an xlane tc program on its way out, so the translation happens at
 * connect() instead: the cgroup hook rewrites the socket's destination to
 * the chosen backend, and the connection is to the backend from the first
 * packet (no per-packet NAT, no conntrack entry). A UDP socket that sends
 * without connecting is translated per datagram at sendmsg(), and what it
 * receives from the backend is given the address it sent to at recvmsg(),
 * through xlane_sock_rnat (so is a connected UDP socket's recvfrom()).
 * A VIP without an active backend refuses the connect() or sendmsg() with
 * ECONNREFUSED where the node rejects such flows (XL_CFG_NO_BACKEND_REJECT,
 * xlaned --service-no-backend reject): what kube-proxy's TCP RST or ICMP
 * port unreachable gives the node's processes; counted as
 * XL_DROP_NO_BACKEND on the node (ifindex 0, XL_HOOK_SOCK).
 * cgroup hooks see every network namespace; these act only in the node's
 * (xlane_config's cookie).
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
#include "lib/publish.h"
#include "lib/metrics.h"

#define SOCK_ALLOW 1
#define SOCK_REJECT 0
#define ECONNREFUSED 111 /* asm-generic/errno.h */

/* sock_loopback4: a is 127.0.0.0/8 (as ::ffff:127.x.y.z). IPv6's ::1 is
 * left to what holds the port there (the Docker driver's relay, which
 * reaches a container's IPv4 address as docker-proxy does). */
static __always_inline int sock_loopback4(const __u8 *a)
{
	__u64 hi, lo;

	__builtin_memcpy(&hi, a, 8);
	__builtin_memcpy(&lo, a + 8, 8);
	/* little-endian loads: bytes 8-11 are 00 00 ff ff, byte 12 is 127 */
	return !hi && (lo & 0xffffffffffULL) == 0x7fffff0000ULL;
}

/* sock_translate finds where dst:dport of a new connection goes, from a
 * published port on the node's address or a service's backend (a VIP may
 * be the node's address: a NodePort): 1 with *to, 0 for neither, -1 for a
 * VIP without an active backend. */
static __always_inline int sock_translate(struct bpf_sock_addr *ctx, struct ct_key *k,
					  const struct xl_config *cfg, struct backend_val *to)
{
	struct l4 l4 = { .dport = k->dport, .proto = k->proto };
	const __u8 *na = k->daddr[10] == 0xff ? cfg->uplink_v4 : cfg->uplink_v6;
	__u64 cookie = bpf_get_socket_cookie(ctx);

	/* Hash entropy for Maglev: the socket, as the 5-tuple is not known. */
	__builtin_memcpy(k->saddr, &cookie, sizeof(cookie));
	{
		struct publish_key pk = { .port = k->dport,
					  .proto = k->proto,
					  .family = k->daddr[10] == 0xff ? 4 : 6 };
		/* A port published on every address is the node's 127.0.0.1's
		 * too, for the node's processes (as docker-proxy and the
		 * portmap plugin make it). */
		const struct publish_val *pv = publish_find(
			&pk, k->daddr,
			__builtin_memcmp(k->daddr, na, 16) == 0 || sock_loopback4(k->daddr));

		if (pv) {
			__builtin_memcpy(to->addr, pv->addr, 16);
			to->port = pv->port;
			return 1;
		}
		/* else maybe a service whose VIP is the node's address (NodePort) */
	}
	/* ClientIP affinity: the node's processes are one client, as they
	 * are to kube-proxy (the node's address). */
	return lb_target(k, 0, &l4, to);
}

/* sock_no_backend ends a connect() or sendmsg() to a VIP without backends
 * as the node says (XL_CFG_NO_BACKEND_REJECT): refused with ECONNREFUSED,
 * counted; else left to the VIP, untranslated (nothing answers it). */
static __always_inline int sock_no_backend(const struct xl_config *cfg)
{
	if (!(cfg->flags & XL_CFG_NO_BACKEND_REJECT))
		return SOCK_ALLOW;
	metrics_count(0, XL_DROP_NO_BACKEND, XL_DIR_EGRESS, XL_HOOK_SOCK, 0);
	bpf_set_retval(-ECONNREFUSED);
	return SOCK_REJECT;
}

static __always_inline struct xl_config *sock_config(struct bpf_sock_addr *ctx)
{
	struct xl_config *cfg = xl_config();

	if (!cfg || !cfg->netns_cookie || bpf_get_netns_cookie(ctx) != cfg->netns_cookie)
		return 0;
	return cfg;
}

/* sock_remember records a UDP socket's translation for recvmsg. */
static __always_inline void sock_remember(struct bpf_sock_addr *ctx, const struct ct_key *k,
					  const struct backend_val *to)
{
	struct sock_rnat_key rk = { .cookie = bpf_get_socket_cookie(ctx), .port = to->port };
	struct sock_rnat_val rv = { .port = k->dport };

	if (ctx->protocol != IPPROTO_UDP)
		return;
	__builtin_memcpy(rk.addr, to->addr, 16);
	__builtin_memcpy(rv.addr, k->daddr, 16);
	bpf_map_update_elem(&xlane_sock_rnat, &rk, &rv, BPF_ANY);
}

/* sock4_translate rewrites an IPv4 destination (connect, sendmsg). */
static __always_inline int sock4_translate(struct bpf_sock_addr *ctx)
{
	struct xl_config *cfg = sock_config(ctx);
	struct backend_val to = {};
	struct ct_key k = {};
	__u32 a;
	int rc;

	if (!cfg || (ctx->protocol != IPPROTO_TCP && ctx->protocol != IPPROTO_UDP))
		return SOCK_ALLOW;
	key_from_ipv4((struct endpoint_key *)k.daddr, ctx->user_ip4);
	k.dport = (__u16)ctx->user_port;
	k.proto = ctx->protocol;
	rc = sock_translate(ctx, &k, cfg, &to);
	if (rc > 0) {
		sock_remember(ctx, &k, &to);
		__builtin_memcpy(&a, &to.addr[12], 4);
		ctx->user_ip4 = a;
		ctx->user_port = to.port;
	}
	if (mon_types())
		mon_sock();
	return rc < 0 ? sock_no_backend(cfg) : SOCK_ALLOW;
}

/* sock6_translate rewrites an IPv6 destination (connect, sendmsg). */
static __always_inline int sock6_translate(struct bpf_sock_addr *ctx)
{
	struct xl_config *cfg = sock_config(ctx);
	struct backend_val to = {};
	struct ct_key k = {};
	__u32 a[4];
	int rc;

	if (!cfg || (ctx->protocol != IPPROTO_TCP && ctx->protocol != IPPROTO_UDP))
		return SOCK_ALLOW;
	a[0] = ctx->user_ip6[0];
	a[1] = ctx->user_ip6[1];
	a[2] = ctx->user_ip6[2];
	a[3] = ctx->user_ip6[3];
	__builtin_memcpy(k.daddr, a, 16);
	k.dport = (__u16)ctx->user_port;
	k.proto = ctx->protocol;
	rc = sock_translate(ctx, &k, cfg, &to);
	if (rc > 0) {
		sock_remember(ctx, &k, &to);
		__builtin_memcpy(a, to.addr, 16);
		ctx->user_ip6[0] = a[0];
		ctx->user_ip6[1] = a[1];
		ctx->user_ip6[2] = a[2];
		ctx->user_ip6[3] = a[3];
		ctx->user_port = to.port;
	}
	if (mon_types())
		mon_sock();
	return rc < 0 ? sock_no_backend(cfg) : SOCK_ALLOW;
}

/* sock_rnat finds what the socket sent to for a datagram from addr:port. */
static __always_inline struct sock_rnat_val *sock_rnat(struct bpf_sock_addr *ctx, const __u8 *addr,
						       __u16 port)
{
	struct sock_rnat_key rk = { .port = port };

	if (!sock_config(ctx))
		return 0;
	rk.cookie = bpf_get_socket_cookie(ctx);
	__builtin_memcpy(rk.addr, addr, 16);
	return bpf_map_lookup_elem(&xlane_sock_rnat, &rk);
}

SEC("cgroup/connect4")
int xlane_connect4(struct bpf_sock_addr *ctx)
{
	return sock4_translate(ctx);
}

SEC("cgroup/connect6")
int xlane_connect6(struct bpf_sock_addr *ctx)
{
	return sock6_translate(ctx);
}

/* sendmsg: a datagram of an unconnected UDP socket, per destination. */
SEC("cgroup/sendmsg4")
int xlane_sendmsg4(struct bpf_sock_addr *ctx)
{
	return sock4_translate(ctx);
}

SEC("cgroup/sendmsg6")
int xlane_sendmsg6(struct bpf_sock_addr *ctx)
{
	return sock6_translate(ctx);
}

/* recvmsg: the backend's datagram is reported as from what was sent to. */
SEC("cgroup/recvmsg4")
int xlane_recvmsg4(struct bpf_sock_addr *ctx)
{
	struct endpoint_key from;
	struct sock_rnat_val *v;
	__u32 a;

	key_from_ipv4(&from, ctx->user_ip4);
	v = sock_rnat(ctx, from.addr, (__u16)ctx->user_port);
	if (v) {
		__builtin_memcpy(&a, &v->addr[12], 4);
		ctx->user_ip4 = a;
		ctx->user_port = v->port;
	}
	return SOCK_ALLOW;
}

SEC("cgroup/recvmsg6")
int xlane_recvmsg6(struct bpf_sock_addr *ctx)
{
	struct sock_rnat_val *v;
	__u32 a[4];

	a[0] = ctx->user_ip6[0];
	a[1] = ctx->user_ip6[1];
	a[2] = ctx->user_ip6[2];
	a[3] = ctx->user_ip6[3];
	v = sock_rnat(ctx, (const __u8 *)a, (__u16)ctx->user_port);
	if (v) {
		__builtin_memcpy(a, v->addr, 16);
		ctx->user_ip6[0] = a[0];
		ctx->user_ip6[1] = a[1];
		ctx->user_ip6[2] = a[2];
		ctx->user_ip6[3] = a[3];
		ctx->user_port = v->port;
	}
	return SOCK_ALLOW;
}

XL_ABI_BTF_ANCHORS;

char __license[] SEC("license") = "Dual BSD/GPL";
