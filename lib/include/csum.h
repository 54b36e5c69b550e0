/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Internet checksum helpers (RFC 1071, RFC 1624). Sums are kept unfolded in a __u64 of 16- or 32-bit
 * words loaded in host order from network-order data; the one's-complement sum does not care about
 * byte order as long as every word is loaded the same way, and folding happens once at the end.
 */
#ifndef PGWU_CSUM_H
#define PGWU_CSUM_H

#include <linux/bpf.h>
#include <linux/ip.h>
#include "compat.h"

/* A 32-bit word read from a header just written through its struct's fields (struct iphdr,
 * udphdr): may_alias, so that the compiler cannot move the read before those writes (C's strict
 * aliasing lets it assume a __u32 and a __be16 never overlap; user space builds with -O2). */
typedef __u32 __attribute__((__may_alias__)) csum_word;

/* Largest frame csum_bytes sums (the PGW-U's full-checksum fallback: 3024-byte frames plus
 * encapsulation); a power of two. Override with -D at build time. */
#ifndef CSUM_MAX_LEN
#define CSUM_MAX_LEN 4096
#endif

static __always_inline __u16 csum_fold16(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/* The checksum field value for a sum that includes the field as 0 */
static __always_inline __u16 csum_finish(__u64 sum)
{
	return (__u16)~csum_fold16(sum);
}

/*
 * UDP's checksum field (RFC 768): as csum_finish, but a computed 0 is sent as 0xffff. Without a
 * branch: a branch on a value derived from a sum makes the verifier track the sum precisely, and
 * then no two iterations of the summing loops look alike to it.
 */
static __always_inline __u16 csum_finish_udp(__u64 sum)
{
	__u32 c = csum_finish(sum);

	return c | (((c - 1) >> 16) & 0xffff);
}

/*
 * One's-complement negation of an unfolded sum below 2^36 (e.g. a pseudo header: two addresses and
 * two 16-bit words), without folding it: a multiple of 0xffff is zero in one's-complement
 * arithmetic, so CSUM_NEG_BASE - sum is -sum, and stays positive. Adding it to a sum keeps that
 * below 2^53, which csum_fold16 folds correctly.
 */
#define CSUM_NEG_BASE (0xffffULL << 36)

static __always_inline __u64 csum_neg(__u64 sum)
{
	return CSUM_NEG_BASE - sum;
}

/* RFC 1624 update for a TTL decrement, as the kernel's ip_decrease_ttl() */
static __always_inline void ipv4_decrease_ttl(struct iphdr *ip)
{
	__u32 check = ip->check;

	check += bpf_htons(0x0100);
	ip->check = (__u16)(check + (check >= 0xffff));
	ip->ttl--;
}

/* Sum of an IPv4 header of ihl words; the caller has checked (void *)ip + ihl * 4 <= end. */
static __always_inline __u64 ipv4_hdr_sum(const void *ip, __u32 ihl, const void *end)
{
	const csum_word *w = ip;
	__u64 sum = 0;
	int i;

	if (ihl == 5 && (void *)(w + 5) <= end)		/* no options: nearly every packet */
		return (__u64)w[0] + w[1] + w[2] + w[3] + w[4];
	for (i = 0; i < 15; i++) {
		if (i >= (int)ihl)
			break;
		if ((void *)(w + i + 1) > end)	/* re-checked for the verifier */
			break;
		sum += w[i];
	}
	return sum;
}

#ifdef __bpf__	/* the rest sums a frame with BPF helpers */
/*
 * Sum of len bytes of the frame from offset off, for the full-checksum fallback. bpf_csum_diff takes
 * at most 512 bytes, in multiples of 4, from a pointer with a constant size; unrolling that over every
 * length made the verifier walk too many states, so the chunks are summed in bpf_loop callbacks,
 * each verified once: 512-byte chunks, then 64, then 4, then the last 0-3 bytes by hand.
 */
struct csum_loop {
	struct xdp_md *ctx;
	__u32 base;		/* first byte of this pass, from ctx->data */
	__u32 step;		/* 512, 64 or 4 */
	__u32 err;
	__u64 sum;
};

static long csum_chunk(__u32 i, void *arg)
{
	struct csum_loop *c = arg;
	void *data = (void *)(long)c->ctx->data;
	void *data_end = (void *)(long)c->ctx->data_end;
	/* From the loop index, not a running offset: a bounded value the callback changed would
	 * make every iteration a new state for the verifier. */
	void *p = data + ((c->base + i * c->step) & (2 * CSUM_MAX_LEN - 1));

	if (c->step == 512) {
		if (p + 512 > data_end)
			goto err;
		c->sum += (__u32)bpf_csum_diff(NULL, 0, p, 512, 0);
	} else if (c->step == 64) {
		if (p + 64 > data_end)
			goto err;
		c->sum += (__u32)bpf_csum_diff(NULL, 0, p, 64, 0);
	} else {
		if (p + 4 > data_end)
			goto err;
		c->sum += *(__u32 *)p;
	}
	return 0;
err:
	c->err = 1;
	return 1;
}

static __always_inline __u64 csum_bytes(struct xdp_md *ctx, __u32 off, __u32 len, int *err)
{
	struct csum_loop c = { .ctx = ctx, .base = off };
	__u32 end = off + len, n;
	void *data, *data_end;
	__u8 *q;

	*err = 1;
	if (len > CSUM_MAX_LEN || off > CSUM_MAX_LEN)
		return 0;
	c.step = 512;
	n = len / 512;
	bpf_loop(n, csum_chunk, &c, 0);
	c.base += n * 512;
	c.step = 64;
	n = (end - c.base) / 64;
	bpf_loop(n, csum_chunk, &c, 0);
	c.base += n * 64;
	c.step = 4;
	n = (end - c.base) / 4;
	bpf_loop(n, csum_chunk, &c, 0);
	c.base += n * 4;
	if (c.err)
		return 0;

	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	q = data + (c.base & (2 * CSUM_MAX_LEN - 1));
	if (end - c.base >= 2) {
		if ((void *)(q + 2) > data_end)
			return 0;
		c.sum += *(__u16 *)q;
		q += 2;
	}
	if ((end - c.base) & 1) {
		__u16 w = 0;

		if ((void *)(q + 1) > data_end)
			return 0;
		*(__u8 *)&w = *q;	/* the word [b, 0], whatever the host's byte order */
		c.sum += w;
	}
	*err = 0;
	return c.sum;
}
#else	/* user space (the socket path, pgwu_sock.c): the same sum of a buffer, word by word */
/* Sum of len bytes at p, as csum_bytes sums a frame: 32-bit words, then 16, then [b, 0]. */
static inline __u64 csum_buf(const void *p, __u32 len)
{
	const __u8 *q = p;
	__u64 sum = 0;
	__u32 w;
	__u16 h;

	for (; len >= 4; len -= 4, q += 4) {
		__builtin_memcpy(&w, q, 4);
		sum += w;
	}
	if (len >= 2) {
		__builtin_memcpy(&h, q, 2);
		sum += h;
		q += 2;
		len -= 2;
	}
	if (len) {
		h = 0;
		*(__u8 *)&h = *q;	/* the word [b, 0], whatever the host's byte order */
		sum += h;
	}
	return sum;
}
#endif /* __bpf__ */

#endif /* PGWU_CSUM_H */
