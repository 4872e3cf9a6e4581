/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * l4csum.h - complete TCP/UDP checksums in XDP.
 *
 * A container's socket hands veth CHECKSUM_PARTIAL packets: the checksum
 * field holds only the pseudo-header sum and "the device" is to finish it.
 * Over XDP_REDIRECT that skb state is lost (the frame becomes an xdp_frame),
 * and the receiver sees a bad checksum (TcpInCsumErrors; the handshake
 * never completes while ping works). XDP cannot see ip_summed, so before
 * redirecting a TCP/UDP packet we sum it: a packet whose checksum already
 * verifies is left alone, any other gets its checksum completed.
 *
 * The cost is one pass over the L4 bytes per packet; docs/benchmarks.md has
 * what it costs here. Corruption inside the node is not a concern this
 * guards against: frames between two namespaces of one kernel are memory.
 */
#ifndef XLANE_L4CSUM_H
#define XLANE_L4CSUM_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "parse.h"
#include "csum.h"

#define L4CSUM_CHUNK 256
#define L4CSUM_MAX_LEN 9216 /* largest jumbo frame xlane configures */
#define L4CSUM_MAX_CHUNK (L4CSUM_MAX_LEN / L4CSUM_CHUNK + 1)

struct l4csum_scratch {
	__u8 buf[L4CSUM_CHUNK];
};

/* One buffer per CPU: 256 bytes is too much stack next to the rest. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct l4csum_scratch);
	__uint(max_entries, 1);
} xlane_l4csum_scratch SEC(".maps");

/* Sum len bytes of the frame from off (one's complement, 32-bit partial,
 * in memory order like the kernel's csum_partial). */
static __always_inline int xdp_sum(struct xdp_md *ctx, __u32 off, __u32 len, __u64 *sum)
{
	struct l4csum_scratch *sc;
	__u32 zero = 0;
	__s64 s = 0;

	sc = bpf_map_lookup_elem(&xlane_l4csum_scratch, &zero);
	if (!sc)
		return -1;
	for (int i = 0; i < L4CSUM_MAX_CHUNK; i++) {
		__u32 done = i * L4CSUM_CHUNK, n;

		if (done >= len)
			break;
		n = len - done;
		if (n >= L4CSUM_CHUNK) {
			if (bpf_xdp_load_bytes(ctx, off + done, sc->buf, L4CSUM_CHUNK))
				return -1;
			s = bpf_csum_diff(0, 0, (void *)sc->buf, L4CSUM_CHUNK, s);
		} else {
			/* Tail: zero-pad to a multiple of 4 (zeros add nothing,
			 * and an odd last byte is the high byte of its word). */
			__u32 padded;

			__builtin_memset(sc->buf, 0, L4CSUM_CHUNK);
			/* 1..255 by construction (n is in 1..255 here): older
			 * verifiers (6.1) lose an "n != 0" test once n is
			 * spilled to the stack, and refuse a length that
			 * may be 0. */
			n = ((n - 1) & (L4CSUM_CHUNK - 1)) + 1;
			if (bpf_xdp_load_bytes(ctx, off + done, sc->buf, n))
				return -1;
			/* (n + 3) & ~3, at most a whole chunk (a 253-255 byte
			 * tail pads to one), as shifts the verifier bounds
			 * exactly (<= 256) where it would bound the mask by
			 * 259; the barrier keeps clang from folding them into
			 * that mask. A comparison clamp is not enough: clang
			 * may spill padded before it and reload the
			 * unclamped copy, whose bound 6.1 never learns. */
			padded = (n + 3) >> 2;
			asm volatile("" : "+r"(padded));
			padded <<= 2;
			s = bpf_csum_diff(0, 0, (void *)sc->buf, padded, s);
		}
		if (s < 0)
			return -1;
	}
	*sum = (__u32)s;
	return 0;
}

/* Pseudo-header sum of p for an L4 payload of l4len bytes. */
static __always_inline __u64 pseudo_sum(const struct pkt *p, __u8 proto, __u32 l4len)
{
	__u64 s = 0;

	if (p->ip4) {
		s += (__u32)p->ip4->saddr >> 16;
		s += (__u32)p->ip4->saddr & 0xffff;
		s += (__u32)p->ip4->daddr >> 16;
		s += (__u32)p->ip4->daddr & 0xffff;
	} else if (p->ip6) {
		const __u16 *w = (const __u16 *)&p->ip6->saddr;

		/* saddr and daddr are adjacent: 16 words. */
		for (int i = 0; i < 16; i++)
			s += w[i];
	}
	s += bpf_htons(proto);
	s += bpf_htons((__u16)l4len);
	s += bpf_htons((__u16)(l4len >> 16));
	return s;
}

/*
 * l4csum_complete makes the TCP or UDP checksum of p right. Returns 0 when
 * the packet can be redirected (checksum verified or completed, or nothing
 * to do), -1 when it should go to Linux instead (a layout this code does
 * not sum: IPv6 extension headers, lengths it cannot trust).
 */
static __always_inline int l4csum_complete(struct xdp_md *ctx, const struct pkt *p)
{
	__u32 l3off = sizeof(struct ethhdr), l4off, l4len, csum_off;
	__u64 sum, ps;
	__u16 check, fixed;
	__u8 proto;

	if (p->ip4) {
		struct iphdr *ip = p->ip4;

		/* Fragments never carry CHECKSUM_PARTIAL: the stack finishes
		 * the checksum before it fragments. */
		if (ip->frag_off & bpf_htons(0x3fff))
			return 0;
		proto = ip->protocol;
		l4off = l3off + ip->ihl * 4;
		l4len = bpf_ntohs(ip->tot_len) - ip->ihl * 4;
	} else if (p->ip6) {
		proto = p->ip6->nexthdr;
		l4off = l3off + sizeof(struct ipv6hdr);
		l4len = bpf_ntohs(p->ip6->payload_len);
		if (proto != IPPROTO_TCP && proto != IPPROTO_UDP && proto != IPPROTO_ICMPV6)
			return -1; /* extension headers: let Linux forward it */
	} else {
		return 0;
	}
	if (proto == IPPROTO_TCP)
		csum_off = 16;
	else if (proto == IPPROTO_UDP)
		csum_off = 6;
	else
		return 0; /* ICMP checksums are always complete */
	if (l4len < csum_off + 2 || l4len > L4CSUM_MAX_LEN)
		return -1;
	if (bpf_xdp_load_bytes(ctx, l4off + csum_off, &check, 2))
		return -1;
	if (proto == IPPROTO_UDP && check == 0 && p->ip4)
		return 0; /* UDP over IPv4 without a checksum */
	if (xdp_sum(ctx, l4off, l4len, &sum))
		return -1;
	ps = pseudo_sum(p, proto, l4len);
	if (csum_fold(sum + ps) == 0xffff)
		return 0; /* already complete and valid */
	/* Remove whatever the field holds, then finish the sum. */
	fixed = ~csum_fold(sum + (__u16)~check + ps);
	if (proto == IPPROTO_UDP && fixed == 0)
		fixed = 0xffff;
	return bpf_xdp_store_bytes(ctx, l4off + csum_off, &fixed, 2) ? -1 : 0;
}

#endif /* XLANE_L4CSUM_H */
