// SPDX-License-Identifier: GPL-2.0
/*
 * pgwu_bench.bpf.c: gives every BPF_PROG_TEST_RUN iteration a fresh frame and a bearer, then
 * tail-calls the program under test (progs[0]).
 *
 * With `repeat`, the kernel runs each iteration on the buffer and data pointers the previous one
 * left: a decap benchmark would from the second iteration on time the program on its own output
 * (the unknown-TEID path, at a flattering speed). bench_restore moves the head back to where the
 * first iteration found it, rewrites the first bytes (all the data plane writes in the frame) with
 * direct 8-byte stores, and writes the next bearer's TEID and UE address into the frame:
 *   mode SAME:   bearer 0 every time;
 *   mode SEQ:    bearers start, start+1, ... (mod nbearers);
 *   mode RANDOM: order[order_off + (start + i) % nbearers], a permutation drawn by the script
 *                with a fixed seed before anything is timed.
 * It is built to be cheap (one helper call, no per-packet random numbers, no copy helper), since
 * its own cost, measured by tail-calling bench_null on the same work, is subtracted.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define RESTORE_MAX 128

enum { MODE_SAME = 0, MODE_SEQ = 1, MODE_RANDOM = 2 };

struct bench_frame {
	__u32 len;		/* frame length */
	__u32 restore;		/* bytes to restore from the start, multiple of 8, <= RESTORE_MAX */
	__u32 nbearers;		/* bearers to cycle through; 0: don't write TEID/UE */
	__u32 mode;		/* MODE_* */
	__u32 start;		/* first position in the order (the script continues it run after run) */
	__u32 order_off;	/* MODE_RANDOM: where this table's permutation starts in `order` */
	__u32 teid_off;		/* offset of the TEID to write (0: none) */
	__u32 teid_base;	/* host order: TEID = teid_base + k */
	__u32 ue_off;		/* offset of the UE address to write (0: none) */
	__u32 ue_base;		/* host order: UE = ue_base + k */
	__u32 ck_off;		/* offset of the IPv4 header checksum that covers the UE address,
				 * updated for it (RFC 1624); 0: none */
	__u8 bytes[RESTORE_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bench_frame);
} frame SEC(".maps");

/* [0] the data pointer (low 32 bits) the first iteration saw, 0 = not yet; [1] iterations done.
 * Reset per run. Not per CPU: a test run may move to another CPU between iterations. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u32);
} state SEC(".maps");

/* permutations of 0..n-1, one per table size, written by the script through mmap (elements
 * of an array map are 8 bytes apart) */
#define ORDER_MAX (1U << 22)
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, ORDER_MAX);
	__type(key, __u32);
	__type(value, __u32);
} order SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} progs SEC(".maps");

SEC("xdp")
int bench_restore(struct xdp_md *ctx)
{
	__u32 zero = 0, one = 1, *b, *it, cur, n, k, pos, i, off;
	struct bench_frame *f;
	void *data, *data_end;

	f = bpf_map_lookup_elem(&frame, &zero);
	b = bpf_map_lookup_elem(&state, &zero);
	it = bpf_map_lookup_elem(&state, &one);
	if (!f || !b || !it)
		return XDP_ABORTED;
	cur = ctx->data;
	if (!*b) {
		*b = cur;
	} else {
		/* made even when it changes nothing (bench_null moves no pointer), so that the
		 * wrapper costs the same behind every program */
		if (bpf_xdp_adjust_head(ctx, -(int)(cur - *b)))
			return XDP_ABORTED;
		/* the data plane only trims Ethernet padding, and the bench's frames have none */
		if (ctx->data_end - ctx->data != f->len)
			return XDP_ABORTED;
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	n = f->restore;
	for (i = 0; i < RESTORE_MAX / 8; i++) {
		if (i * 8 >= n)
			break;
		if (data + i * 8 + 8 > data_end)
			return XDP_ABORTED;
		*(__u64 *)(data + i * 8) = *(__u64 *)&f->bytes[i * 8];
	}
	n = f->nbearers;
	if (n) {
		pos = f->start + (*it)++;
		if (f->mode == MODE_SAME) {
			k = 0;
		} else if (f->mode == MODE_SEQ) {
			k = pos % n;
		} else {
			__u32 idx = f->order_off + pos % n, *o = bpf_map_lookup_elem(&order, &idx);

			if (!o)
				return XDP_ABORTED;
			k = *o;
		}
		off = f->teid_off & 0xff;
		if (off) {
			if (data + off + 4 > data_end)
				return XDP_ABORTED;
			*(__be32 *)(data + off) = bpf_htonl(f->teid_base + k);
		}
		off = f->ue_off & 0xff;
		if (off) {
			__u32 ue = bpf_htonl(f->ue_base + k), ck = f->ck_off & 0xff;

			if (data + off + 4 > data_end)
				return XDP_ABORTED;
			if (ck) {
				__u16 *c = data + ck, *o = data + off, *nw = (__u16 *)&ue;
				__u32 sum;

				if ((void *)(c + 1) > data_end)
					return XDP_ABORTED;
				/* ~C' = ~C - old + new, in one's complement (RFC 1624 eqn. 3) */
				sum = (__u16)~*c + (__u16)~o[0] + (__u16)~o[1] + nw[0] + nw[1];
				sum = (sum & 0xffff) + (sum >> 16);
				sum = (sum & 0xffff) + (sum >> 16);
				*c = (__u16)~sum;
			}
			*(__be32 *)(data + off) = ue;
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

/*
 * The price of one memory access that misses: probe[k] with k taken from the UE address the
 * wrapper wrote (k = UE - 10.64.0.1), in a 1 Mi x 64 B array (64 MiB, as big as a bearer table).
 * Behind the wrapper in SAME and RANDOM order over 1,000,000, the difference is one dependent
 * cache-and-TLB miss in this VM: the unit the data plane's random-order cost is made of.
 */
struct probe_line {
	__u64 v[8];
};

#define PROBE_N (1U << 20)
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PROBE_N);
	__type(key, __u32);
	__type(value, struct probe_line);
} probe SEC(".maps");

#define DL_UE_OFF (14 + 16)

SEC("xdp")
int bench_probe(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct probe_line *l;
	__u32 k;

	if (data + DL_UE_OFF + 4 > data_end)
		return XDP_DROP;
	k = (bpf_ntohl(*(__be32 *)(data + DL_UE_OFF)) - 0x0A400001) & (PROBE_N - 1);
	l = bpf_map_lookup_elem(&probe, &k);
	if (!l)
		return XDP_DROP;
	return l->v[0] == 1 ? XDP_DROP : XDP_TX;
}

/*
 * The data plane's own TEID lookup alone: probe_hash is replaced at load time by the pinned
 * ul_bearers of the data plane with the big table (bpftool prog loadall ... map name probe_hash
 * pinned PATH), so this is exactly its hash lookup, keyed by the TEID the wrapper wrote.
 */
struct probe_ul_bearer {
	__u32 ue_addr;
	__u32 flags;
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1048576);
	__type(key, __u32);
	__type(value, struct probe_ul_bearer);
} probe_hash SEC(".maps");

#define UL_TEID_OFF (14 + 20 + 8 + 4)

SEC("xdp")
int bench_probe_hash(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct probe_ul_bearer *b;

	if (data + UL_TEID_OFF + 4 > data_end)
		return XDP_DROP;
	b = bpf_map_lookup_elem(&probe_hash, (__u32 *)(data + UL_TEID_OFF));
	if (!b)
		return XDP_DROP;
	return b->ue_addr == 1 ? XDP_DROP : XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
