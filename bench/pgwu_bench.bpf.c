// SPDX-License-Identifier: GPL-2.0
/*
 * pgwu_bench.bpf.c: gives every BPF_PROG_TEST_RUN iteration a fresh frame, then tail-calls the
 * program under test (progs[0]).
 *
 * With `repeat`, the kernel runs each iteration on the buffer and data pointers the previous one
 * left: a decap benchmark would from the second iteration on time the program on its own output
 * (the unknown-TEID path, at a flattering speed). bench_restore moves the head back to where the
 * first iteration found it, restores the length and the first bytes (all the data plane writes
 * in a frame), and writes a bearer chosen at random among the installed ones into the TEID and
 * UE address fields, so hash lookups are not all served from one hot cache line.
 * Its own cost is measured by tail-calling bench_null and subtracted (bench/pgwu_bench.py).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define RESTORE_MAX 256

struct bench_frame {
	__u32 len;		/* frame length */
	__u32 restore;		/* bytes to restore from the start, <= RESTORE_MAX */
	__u32 nbearers;		/* choose k in [0, nbearers) per iteration; 0: don't rewrite */
	__u32 teid_off;		/* offset of the TEID to write (0: none) */
	__u32 teid_base;	/* host order: TEID = teid_base + k */
	__u32 ue_off;		/* offset of the UE address to write (0: none) */
	__u32 ue_base;		/* host order: UE = ue_base + k */
	__u32 pad;
	__u8 bytes[RESTORE_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bench_frame);
} frame SEC(".maps");

/* the data pointer (low 32 bits) the first iteration saw; 0 = not seen yet. Reset per run. Not per
 * CPU: a test run may move to another CPU when it reschedules between iterations, and the frame
 * it works on moves with it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} base SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} progs SEC(".maps");

SEC("xdp")
int bench_restore(struct xdp_md *ctx)
{
	__u32 zero = 0, *b, cur, len, n, k;
	struct bench_frame *f;
	int delta;

	f = bpf_map_lookup_elem(&frame, &zero);
	b = bpf_map_lookup_elem(&base, &zero);
	if (!f || !b)
		return XDP_ABORTED;
	cur = ctx->data;
	if (!*b) {
		*b = cur;
	} else {
		/* Both calls are made even when they change nothing (bench_null moves neither
		 * pointer), so that the wrapper costs the same behind every program. */
		delta = (int)(cur - *b);
		if (bpf_xdp_adjust_head(ctx, -delta))
			return XDP_ABORTED;
		len = ctx->data_end - ctx->data;
		if (bpf_xdp_adjust_tail(ctx, (int)f->len - (int)len))
			return XDP_ABORTED;
		n = f->restore;
		if (n < 1 || n > RESTORE_MAX)
			return XDP_ABORTED;
		if (bpf_xdp_store_bytes(ctx, 0, f->bytes, n))
			return XDP_ABORTED;
	}
	if (f->nbearers) {
		k = bpf_get_prandom_u32() % f->nbearers;
		if (f->teid_off) {
			__be32 teid = bpf_htonl(f->teid_base + k);

			bpf_xdp_store_bytes(ctx, f->teid_off & 0xff, &teid, 4);
		}
		if (f->ue_off) {
			__be32 ue = bpf_htonl(f->ue_base + k);

			bpf_xdp_store_bytes(ctx, f->ue_off & 0xff, &ue, 4);
		}
	}
	bpf_tail_call(ctx, &progs, 0);
	return XDP_ABORTED;
}

/* measures bench_restore itself */
SEC("xdp")
int bench_null(struct xdp_md *ctx)
{
	return XDP_TX;
}

/* the floor: the least a forwarding XDP program does */
SEC("xdp")
int bench_macswap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 tmp[6];

	if (data + 12 > data_end)
		return XDP_DROP;
	__builtin_memcpy(tmp, data, 6);
	__builtin_memcpy(data, data + 6, 6);
	__builtin_memcpy(data + 6, tmp, 6);
	return XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
