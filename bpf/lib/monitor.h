/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * monitor.h - events for `xlane monitor` and `xlane trace` (struct
 * mon_event, abi.h) in one ring buffer.
 *
 * Cost: every hook first reads xlane_mon_config's types word (an array
 * lookup the verifier inlines: no helper call) and branches on it; loaded
 * with the monitor switched off (xl_monitor, below), not even that. The
 * daemon keeps it 0 unless a client listens, so with nobody listening
 * that load and one never-taken branch are the whole cost; drops and
 * verdicts are tested once per packet, at the exit where a pipeline's
 * step becomes a return code (lib/stage.h), the other types where their
 * event happens (a firewall rule decides, conntrack creates or closes a
 * flow, a service picks a backend: never on an established flow's
 * packets). While a client listens, a per-CPU token bucket bounds the
 * events (mon_config.rate, .burst); those over it are counted
 * (mon_state.suppressed), as are those a full ring refused (.lost).
 *
 * Nor does a listening monitor wake its reader: events are submitted with
 * BPF_RB_NO_WAKEUP and the daemon polls the ring while a client listens
 * (every 100 ms, sooner when the rate and the number of CPUs could fill
 * an eighth of it in that time, or when a poll found it that full:
 * internal/daemon/monitor.go). A wakeup is an irq_work (an interrupt)
 * and a scheduler wakeup of the daemon on the packet's CPU: per event, it
 * cost the monitored traffic more than the event. (A wakeup forced when
 * the ring was an eighth full was the daemon's cue for a burst while it
 * blocked in epoll_wait; it no longer blocks there, see monitor.go, and a
 * forced wakeup nobody waits for would still raise its interrupt.)
 *
 * The emitters are global functions: verified once each, whatever the
 * state of their callers, so the hooks cost the verifier little more
 * than the call.
 */
#ifndef XLANE_MONITOR_H
#define XLANE_MONITOR_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "abi.h"
#include "tokens.h"

/* The event ring's size: 16,384 events of 120 bytes with their 8-byte
 * headers. */
#define MON_RING_BYTES (1 << 21)

/* key: 0; value: the event types wanted and their rate. Written by the
 * daemon (on while a monitor client listens); read by every hook. Not
 * pinned: a restarted daemon starts with the monitor off. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct mon_config);
	__uint(max_entries, 1);
} xlane_mon_config SEC(".maps");

/* key: 0; value: this CPU's token bucket and counters. Written by the
 * emitters; read (summed) by the daemon. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct mon_state);
	__uint(max_entries, 1);
} xlane_mon_state SEC(".maps");

/* struct mon_event records. Written by the emitters; read by the daemon,
 * which hands them to its monitor clients. A full ring loses events
 * (counted), never packets. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, MON_RING_BYTES);
} xlane_mon_events SEC(".maps");

/*
 * The key of the monitor's one-entry maps, in .rodata rather than on the
 * stack: the hooks are inlined into the deepest frames of the endpoint
 * program (ct_from_endpoint -> ct_create_ports), where 6.1's verifier,
 * which rounds every frame to 32 bytes, leaves no room for another slot.
 */
static const volatile __u32 mon_key0 = 0;

/*
 * xl_monitor is the monitor's build switch, set by the loader (internal/bpf
 * Options.NoMonitor; xlaned --monitor=false clears it) and fixed for the
 * programs' life. Off, mon_cfg is NULL to every hook: the verifier, for
 * which a frozen .rodata value is a known constant, removes the hooks as
 * dead code, and the programs are what they would be without the monitor
 * (observability off, the baseline of its cost: docs/observability.md).
 */
volatile const __u8 xl_monitor = 1;

/* mon_cfg is the monitor's configuration: NULL with the monitor built out
 * (xl_monitor), else only to the verifier. Every hook starts here. */
static __always_inline const struct mon_config *mon_cfg(void)
{
	if (!xl_monitor)
		return 0;
	return bpf_map_lookup_elem(&xlane_mon_config, (const void *)&mon_key0);
}

/* mon_types is the one test every hook makes: the wanted types. */
static __always_inline __u32 mon_types(void)
{
	const struct mon_config *c = mon_cfg();

	return c ? c->types : 0;
}

static __always_inline struct mon_state *mon_state(void)
{
	return bpf_map_lookup_elem(&xlane_mon_state, (const void *)&mon_key0);
}

/* mon_submit hands e to the reader, which polls: no wakeup. */
static __always_inline void mon_submit(struct mon_event *e)
{
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

/*
 * How many events the rate limit suppresses without reading the clock once
 * it found the bucket empty: as many as it expects before the next token,
 * from the rate the events came at since the clock's previous read
 * (mon_skip_after), up to MON_SKIP_MAX. Under a flood (a verdict event per
 * packet) the clock read, the refill and the call to the exit's emitter
 * were most of what a suppressed event cost the packet: this reads the
 * clock about twice per token, where doubling runs of 1, 3, 7, ... 63 read
 * it six times per token at TCP's 50,000 packets a second and CPU. The
 * skipping never lets more than the rate through; when a flood ends it
 * suppresses at most MON_SKIP_MAX events that a token could have paid for.
 */
#define MON_SKIP_MAX 63

/* mon_skip suppresses an event without reading the clock while the rate
 * limit's run of such events lasts (c, st: the monitor's config and this
 * CPU's state): 1 if it did. */
static __always_inline int mon_skip(const struct mon_config *c, struct mon_state *st)
{
	if (!c->rate || !st->skip)
		return 0;
	st->skip--;
	st->seen++;
	st->suppressed++;
	return 1;
}

/*
 * mon_skip_after is the run of events to suppress without the clock after
 * one found the bucket at tokens (less than one), n events (it included)
 * having come in the elapsed ns since the clock's previous read: those
 * expected before the next token, (BUCKET_TOKEN - tokens) / rate ns away,
 * at n per elapsed ns; at most MON_SKIP_MAX. The product stays below
 * 1e9 x (MON_SKIP_MAX + 1): no overflow.
 */
static __always_inline __u32 mon_skip_after(__u64 tokens, __u64 elapsed, __u32 n, __u32 rate)
{
	__u64 k;

	if (!elapsed || !rate)
		return MON_SKIP_MAX;
	k = (BUCKET_TOKEN - tokens) * n / rate / elapsed;
	return k > MON_SKIP_MAX ? MON_SKIP_MAX : k;
}

/* mon_reserve_in takes a token and a zeroed event of type t from the ring
 * (c, st: the monitor's config and this CPU's state): NULL (counted) when
 * over the rate or the ring is full. */
static __always_inline struct mon_event *mon_reserve_in(const struct mon_config *c,
							struct mon_state *st, __u8 t)
{
	struct mon_event *e;
	__u64 now, elapsed;
	__u32 n;

	if (mon_skip(c, st))
		return 0;
	now = bpf_ktime_get_ns();
	if (c->rate) {
		elapsed = now - st->last;
		n = (st->seen & MON_SKIP_MAX) + 1;
		st->seen = 0;
		bucket_refill(&st->tokens, elapsed, c->rate, c->burst);
		st->last = now;
		if (bucket_take(&st->tokens)) {
			st->suppressed++;
			st->skip = mon_skip_after(st->tokens, elapsed, n, c->rate);
			return 0;
		}
	}
	e = bpf_ringbuf_reserve(&xlane_mon_events, sizeof(*e), 0);
	if (!e) {
		st->lost++;
		return 0;
	}
	st->emitted++;
	__builtin_memset(e, 0, sizeof(*e));
	e->ts = now;
	e->type = t;
	return e;
}

/* mon_reserve is mon_reserve_in for a hook that has neither at hand. */
static __always_inline struct mon_event *mon_reserve(__u8 t)
{
	const struct mon_config *c = mon_cfg();
	struct mon_state *st = mon_state();

	if (!c || !st)
		return 0;
	return mon_reserve_in(c, st, t);
}

/*
 * mon_tuple fills e's family, protocol, addresses and ports from the frame
 * in [data, data_end): IPv4, or IPv6 whose first header is the transport
 * (behind extension headers the ports stay 0). A frame that is not IP, or
 * too short, leaves them 0: the event still says what happened.
 */
static __always_inline void mon_tuple(void *data, void *data_end, struct mon_event *e)
{
	struct ethhdr *eth = data;
	__u16 *ports;
	__u8 *l4;

	if ((void *)(eth + 1) > data_end)
		return;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > data_end)
			return;
		e->family = 4;
		e->proto = ip->protocol;
		e->saddr[10] = e->saddr[11] = 0xff;
		e->daddr[10] = e->daddr[11] = 0xff;
		__builtin_memcpy(&e->saddr[12], &ip->saddr, 4);
		__builtin_memcpy(&e->daddr[12], &ip->daddr, 4);
		if (ip->frag_off & bpf_htons(0x1fff))
			return; /* a later fragment: no ports */
		l4 = (__u8 *)ip + (ip->ihl & 0xf) * 4;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > data_end)
			return;
		e->family = 6;
		e->proto = ip6->nexthdr;
		__builtin_memcpy(e->saddr, &ip6->saddr, 16);
		__builtin_memcpy(e->daddr, &ip6->daddr, 16);
		l4 = (__u8 *)(ip6 + 1);
	} else {
		return;
	}
	if ((void *)(l4 + 4) > data_end)
		return;
	switch (e->proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
		ports = (__u16 *)l4;
		e->sport = ports[0];
		e->dport = ports[1];
		break;
	case IPPROTO_ICMP:
	case 58: /* IPPROTO_ICMPV6 */
		/* As the firewall sees ICMP: type and code. */
		e->dport = bpf_htons(l4[0]);
		e->sport = bpf_htons(l4[1]);
		break;
	}
}

/* mon_family: 4 for a v4-mapped address, else 6. */
static __always_inline __u8 mon_family(const __u8 *a)
{
	__u64 hi;

	__builtin_memcpy(&hi, a, 8);
	return hi == 0 && a[8] == 0 && a[9] == 0 && a[10] == 0xff && a[11] == 0xff ? 4 : 6;
}

/* mon_flow_fill copies a conntrack key into an event. */
static __always_inline void mon_flow_fill(struct mon_event *e, const struct ct_key *k)
{
	__builtin_memcpy(e->saddr, k->saddr, 16);
	__builtin_memcpy(e->daddr, k->daddr, 16);
	e->sport = k->sport;
	e->dport = k->dport;
	e->proto = k->proto;
	e->family = mon_family(k->daddr);
}

/* mon_flow_new is the hook conntrack calls after it tried to create a
 * flow (err: 0 if it did; k: the opening direction's key, v: its entry).
 * It leaves the flow for the program's exit to emit (mon_pending). */
static __always_inline void mon_flow_new(int err, const struct ct_key *k, const struct ct_val *v)
{
	struct mon_state *st;

	if (err || !(mon_types() & (MON_FLOW_NEW | MON_NAT)))
		return;
	st = mon_state();
	if (!st)
		return;
	__builtin_memcpy(&st->new_key, k, sizeof(*k));
	__builtin_memcpy(&st->new_val, v, sizeof(*v));
	st->pending |= MON_FLOW_NEW;
}

/* mon_flow_state is the hook conntrack calls before it moves the flow of
 * key k from state old to state new. */
static __always_inline void mon_flow_state(const struct ct_key *k, __u8 old, __u8 new)
{
	struct mon_state *st;

	if (new != CT_CLOSED || old == CT_CLOSED || !(mon_types() & MON_FLOW_CLOSE))
		return;
	st = mon_state();
	if (!st)
		return;
	__builtin_memcpy(&st->close_key, k, sizeof(*k));
	st->pending |= MON_FLOW_CLOSE;
}

/* mon_pending emits what the hooks of this run left in st (t: the wanted
 * types). */
static __always_inline void mon_pending(const struct mon_config *c, struct mon_state *st, __u32 t,
					__u8 kind)
{
	struct mon_event *e;
	__u32 p = st->pending;

	st->pending = 0;
	if ((p & MON_FLOW_NEW) && (t & MON_FLOW_NEW)) {
		e = mon_reserve_in(c, st, MON_FLOW_NEW);
		if (e) {
			mon_flow_fill(e, &st->new_key);
			e->action = st->new_val.state;
			mon_submit(e);
		}
	}
	if ((p & MON_FLOW_NEW) && (t & MON_NAT) && st->new_val.nat != CT_NAT_NONE) {
		e = mon_reserve_in(c, st, MON_NAT);
		if (e) {
			mon_flow_fill(e, &st->new_key);
			e->action = st->new_val.nat;
			__builtin_memcpy(e->nat_addr, st->new_val.nat_addr, 16);
			e->nat_port = st->new_val.nat_port;
			__builtin_memcpy(e->nat_saddr, st->new_val.nat_saddr, 16);
			e->nat_sport = st->new_val.nat_sport;
			mon_submit(e);
		}
	}
	if ((p & MON_FLOW_CLOSE) && (t & MON_FLOW_CLOSE)) {
		e = mon_reserve_in(c, st, MON_FLOW_CLOSE);
		if (e) {
			mon_flow_fill(e, &st->close_key);
			e->action = CT_CLOSED;
			mon_submit(e);
		}
	}
	if ((p & MON_LB) && (t & MON_LB)) {
		e = mon_reserve_in(c, st, MON_LB);
		if (e) {
			mon_flow_fill(e, &st->lb_key);
			e->kind = kind;
			if (kind == FW_KIND_MAX) /* a socket: the key's source is its cookie */
				__builtin_memset(e->saddr, 0, sizeof(e->saddr));
			e->service = st->lb_bk.service;
			e->backend = st->lb_bk.index;
			__builtin_memcpy(e->nat_addr, st->lb_be.addr, 16);
			e->nat_port = st->lb_be.port;
			mon_submit(e);
		}
	}
}

/* mon_lb is the hook the load balancer calls when it picked backend be
 * (bk: service and index) for the flow k; the program's exit emits it. */
static __always_inline void mon_lb(const struct ct_key *k, const struct backend_key *bk,
				   const struct backend_val *be)
{
	struct mon_state *st;

	if (!(mon_types() & MON_LB))
		return;
	st = mon_state();
	if (!st)
		return;
	__builtin_memcpy(&st->lb_key, k, sizeof(*k));
	st->lb_bk = *bk;
	st->lb_be = *be;
	st->pending |= MON_LB;
}

/* mon_verdict_type is the event a packet's verdict makes under the wanted
 * types t: MON_VERDICT, MON_DROP, or 0. */
static __always_inline __u32 mon_verdict_type(__u32 t, __u8 verdict)
{
	if (t & MON_VERDICT)
		return MON_VERDICT;
	if ((t & MON_DROP) && (verdict == MON_V_DROP || verdict == MON_V_REPLIED))
		return MON_DROP;
	return 0;
}

/*
 * mon_exit_call is the exits' test before they call their emitter (mon_skb,
 * mon_xdp) for a packet of verdict v, c the monitor's config with its types
 * on. It settles inline what most packets come to while a monitor listens:
 * nothing left by the run's hooks and no event for the verdict (a forwarded
 * packet under the default types), or a verdict or drop event that the
 * rate limit suppresses without the clock (mon_skip). Those packets then
 * pay a lookup and a few loads, not the call and the cache lines of the
 * emitter's code: that was most of what a listening monitor cost a
 * forwarded packet on the real path.
 */
static __always_inline int mon_exit_call(const struct mon_config *c, __u8 v)
{
	struct mon_state *st = mon_state();

	if (!st)
		return 0;
	if (st->pending)
		return 1;
	if (!mon_verdict_type(c->types, v))
		return 0;
	return !mon_skip(c, st);
}

/* Packed arguments of the exit emitters (global functions take few). */
#define MON_META(kind, reason, verdict) \
	((__u32)(kind) | ((__u32)(reason) << 8) | ((__u32)(verdict) << 16))

/*
 * mon_exit is the exit's part of the emitters: what the run's hooks left
 * (mon_pending), then the packet's drop or verdict event, if wanted.
 * Returns the event to complete with the packet's tuple and device, or
 * NULL.
 */
static __always_inline struct mon_event *mon_exit(__u32 meta, __u32 len)
{
	const struct mon_config *c = mon_cfg();
	struct mon_state *st = mon_state();
	struct mon_event *e;
	__u8 reason = (meta >> 8) & 0xff;
	__u32 t;

	if (!c || !st)
		return 0;
	t = c->types;
	if (st->pending)
		mon_pending(c, st, t, meta & 0xff);
	t = mon_verdict_type(t, (meta >> 16) & 0xff);
	if (!t)
		return 0;
	e = mon_reserve_in(c, st, t);
	if (!e)
		return 0;
	e->kind = meta & 0xff;
	e->reason = reason;
	e->verdict = (meta >> 16) & 0xff;
	e->len = len;
	/* A firewall refusal names its rule: the one fw_verdict decided with
	 * in this run of the program, on this CPU (fw_monitor). */
	if (reason == XL_DROP_FW || reason == XL_DROP_FW_DEFAULT || reason == XL_DROP_FW_REJECT)
		e->rule = st->rule;
	return e;
}

/* mon_skb is the exit emitter of skb programs (meta: MON_META). */
__noinline int mon_skb(struct __sk_buff *skb, __u32 meta)
{
	struct mon_event *e;

	if (!skb)
		return 0;
	e = mon_exit(meta, skb->len);
	if (!e)
		return 0;
	e->ifindex = skb->ifindex;
	mon_tuple((void *)(long)skb->data, (void *)(long)skb->data_end, e);
	mon_submit(e);
	return 0;
}

/* mon_xdp is mon_skb for XDP programs. */
__noinline int mon_xdp(struct xdp_md *ctx, __u32 meta)
{
	struct mon_event *e;

	if (!ctx)
		return 0;
	e = mon_exit(meta, bpf_xdp_get_buff_len(ctx));
	if (!e)
		return 0;
	e->ifindex = ctx->ingress_ifindex;
	mon_tuple((void *)(long)ctx->data, (void *)(long)ctx->data_end, e);
	mon_submit(e);
	return 0;
}

/* mon_sock emits what the hooks of a socket program's run left (the
 * connect hooks' backend choices, lib/lb.h). */
__noinline int mon_sock(void)
{
	const struct mon_config *c = mon_cfg();
	struct mon_state *st = mon_state();

	if (c && st && st->pending)
		mon_pending(c, st, c->types, FW_KIND_MAX);
	return 0;
}

#endif /* XLANE_MONITOR_H */
