// SPDX-License-Identifier: GPL-2.0
/*
 * The traffic engine's kernel side: a TRex field-engine interpreter run per
 * packet with BPF_PROG_RUN + BPF_F_TEST_XDP_LIVE_FRAMES (tg_tx), and the
 * receive-side counter/capture program attached to each generator port (tg_rx).
 *
 * tg_tx: user space puts the stream's slot in 4 bytes of data_meta in front of
 * the template frame, and for live runs also in cur_slot (slot + 1) before each
 * run call: a DUT's encapsulation writes over data_meta of a recycled frame.
 * Each packet starts as a copy of the stream's template (map tmpl), as in TRex;
 * then the program runs the stream's compiled instructions
 * (map streams) against its variables (map state) and returns XDP_TX, which the
 * live-frames runner turns into a transmit out of the ingress device.
 * Live frames are recycled without restoring their bytes (and a DUT may have
 * rewritten them): the template copy makes every packet start from the same
 * bytes and length, every instruction writes its field on every packet, and
 * checksums are either summed over the packet or, when vm.py planned it
 * (TG_F_INCR), the template's sum over the unchanged bytes plus the changed
 * bytes read from this frame (trafficgen.h, "Incremental checksums"). Both give
 * the same bits.
 *
 * tg_rx: counts every frame per port, finds the trailer at the end of the frame
 * (GTP-U decap/encap keep the inner payload's end), counts per pg_id with
 * sequence and latency, copies the first N frames to a ring buffer, and drops
 * everything except ARP (which the lab's neighbour resolution may need).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <linux/ip.h>
#include "csum.h"		/* lib/include: checksum folding, shared with the PGW-U */
#include "trafficgen.h"

char LICENSE[] SEC("license") = "GPL";

/* Hide a value from the optimiser so that the bounds mask after it is kept for the verifier. */
#define opaque(x) asm volatile("" : "+r"(x))

/* Compiled stream programs: written by user space before start, read by tg_tx. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TG_MAX_STREAMS);
	__type(key, __u32);
	__type(value, struct tg_stream);
} streams SEC(".maps");

/* Flow variables and tx counters per stream: initialised by user space, advanced by tg_tx. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TG_MAX_STREAMS);
	__type(key, __u32);
	__type(value, struct tg_state);
} state SEC(".maps");

/*
 * Value lists of flow_var in chunks of TG_LIST_CHUNK values, key (slot * TG_MAX_VARS + var) << 8 |
 * chunk: written by user space, read by tg_tx. A hash map without preallocation holds only the
 * chunks written (a list of 65535 values is 256 of 2 KiB), not every stream's every variable's
 * longest list.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, TG_MAX_STREAMS * TG_MAX_VARS * 256);
	__type(key, __u32);
	__type(value, __u64[TG_LIST_CHUNK]);
} lists SEC(".maps");

/* Pacing per stream (struct tg_pace): set by user space before start, advanced by tg_tx. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TG_MAX_STREAMS);
	__type(key, __u32);
	__type(value, struct tg_pace);
} pace SEC(".maps");

/* Template frame per stream: written by user space before start, copied by tg_tx. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TG_MAX_STREAMS);
	__type(key, __u32);
	__type(value, struct tg_tmpl);
} tmpl SEC(".maps");

/* Prebuilt frames (struct tg_cframe): written by user space before start, copied by tg_tx. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TG_CACHE_FRAMES);
	__type(key, __u32);
	__type(value, struct tg_cframe);
} cache SEC(".maps");

/* Slot + 1 of the stream a live run is for (0: take the slot from data_meta). Written by user
 * space before each BPF_PROG_RUN call (one thread per port object), read by tg_tx. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} cur_slot SEC(".maps");

/* The paced streams a TG_ANY_PACED call serves: written by user space before start, read by tg_tx. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tg_paced);
} paced SEC(".maps");

/* Scratch for checksums and capture copies (too big for the 512-byte stack). */
struct scratch {
	struct tg_cap_hdr hdr;
	__u8 buf[TG_CAP_MAX + 8];
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch SEC(".maps");

/* Receive counters of this port: written by tg_rx, read by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tg_port_stats);
} rx_port SEC(".maps");

/*
 * Per pg_id receive state: user space creates an entry for every flow-stats id
 * before start (unknown ids are not counted per flow); tg_rx updates it. Veth
 * receives on one NAPI context per queue, so updates are atomic adds where
 * they are plain counters and plain stores for the sequence/latency state.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TG_MAX_PGIDS);
	__type(key, __u32);
	__type(value, struct tg_flow);
} rx_flow SEC(".maps");

/* Frames the port's network stack sent (the generator host's kernel, anything
 * on a packet socket), by kind: written by tg_bg_out, read by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tg_bg_out);
} bg_out SEC(".maps");

/* Capture budget: user space sets the number of frames to copy; tg_rx counts it down. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __s64);
} cap_left SEC(".maps");

/* Captured frames, tg_cap_hdr + bytes: tg_rx produces, user space consumes. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} cap_ring SEC(".maps");

/* Per packet, on tg_tx's stack; passed to tg_exec. */
struct tg_pkt {
	__u32 slot;
	__u32 restored;		/* the frame is an exact copy of the template (else: full sums) */
};

/*
 * Ones' complement sum of len bytes of the frame at off, chained on seed.
 * Bytes are copied to scratch with bpf_xdp_load_bytes so the verifier sees a
 * bounded map buffer instead of a variable-length packet range. Chunks are
 * even-sized, so only the last one may be odd; it is zero-padded to 4 bytes.
 * Returns the 32-bit partial sum (memory byte order) or -1.
 */
__noinline int tg_csum(struct xdp_md *ctx, __u32 off, __u32 len, __u32 seed)
{
	struct scratch *s;
	__u32 zero = 0, i;
	__s64 sum = seed;

	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s || !ctx)
		return -1;
	if (off > TG_MAX_FRAME || len > TG_MAX_FRAME)
		return -1;
	for (i = 0; i < TG_MAX_FRAME / TG_CSUM_CHUNK + 1; i++) {
		__u32 n = len > TG_CSUM_CHUNK ? TG_CSUM_CHUNK : len;
		__u32 n4;

		if (n == 0)
			break;
		n &= 0x1ff;	/* n <= TG_CSUM_CHUNK; the mask tells the verifier */
		if (n == 0 || n > TG_CSUM_CHUNK)
			return -1;
		*(__u32 *)&s->buf[n & 0x1ff] = 0;
		if (bpf_xdp_load_bytes(ctx, off, s->buf, n) < 0)
			return -1;
		n4 = (n + 3) & ~3U;
		if (n4 > TG_CSUM_CHUNK + 4)
			return -1;
		sum = bpf_csum_diff(NULL, 0, (__be32 *)s->buf, n4, (__u32)sum);
		if (sum < 0)
			return -1;
		off += n;
		len -= n;
		if (off > TG_MAX_FRAME)
			return -1;
	}
	return (int)(__u32)sum;
}

/* TRex's fastrand (trex_stl_stream_vm.h): an LCG, 15 bits per draw. */
static __always_inline __u32 rand16(__u32 *seed)
{
	*seed = 214013 * *seed + 2531011;
	return (*seed >> 16) & 0x7fff;
}

static __always_inline __u64 rand_for_size(__u32 *seed, __u8 size)
{
	__u64 hi, lo;

	if (size <= 2)
		return rand16(seed);
	hi = rand16(seed);
	lo = rand16(seed);
	if (size == 4)
		return (hi << 16) + lo;
	hi = (hi << 16) + lo;
	lo = rand16(seed);
	lo = (lo << 16) + rand16(seed);
	return (hi << 32) + lo;
}

static __always_inline __u64 size_mask(__u8 size)
{
	return size >= 8 ? ~0ULL : (1ULL << (size * 8)) - 1;
}

/* inc_mod/dec_mod of trex_stl_stream_vm.h: wrap to the other end, a restart consumes one step. */
static __always_inline __u64 inc_mod(__u64 a, __u64 b, __u64 c, __u64 step, int *of)
{
	__u64 left = b - c;

	if (step <= left) {
		*of = 0;
		return c + step;
	}
	*of = 1;
	return a + (step - left - 1);
}

static __always_inline __u64 dec_mod(__u64 a, __u64 b, __u64 c, __u64 step)
{
	__u64 left = c - a;

	if (step <= left)
		return c - step;
	return b - (step - left - 1);
}

/* Store v (size bytes) at off, big or little endian. */
static __always_inline int store(struct xdp_md *ctx, __u32 off, __u64 v, __u8 size, int big)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *p;

	if (off > TG_MAX_FRAME)
		return -1;
	opaque(off);	/* see span_sum() */
	p = data + (off & 0xfff);
	switch (size) {
	case 1:
		if ((void *)(p + 1) > end)
			return -1;
		*p = (__u8)v;
		return 0;
	case 2:
		if ((void *)(p + 2) > end)
			return -1;
		*(__u16 *)p = big ? bpf_htons((__u16)v) : (__u16)v;
		return 0;
	case 4:
		if ((void *)(p + 4) > end)
			return -1;
		*(__u32 *)p = big ? bpf_htonl((__u32)v) : (__u32)v;
		return 0;
	case 8:
		if ((void *)(p + 8) > end)
			return -1;
		*(__u64 *)p = big ? __builtin_bswap64(v) : v;
		return 0;
	}
	return -1;
}

static __always_inline int load(struct xdp_md *ctx, __u32 off, __u64 *v, __u8 size, int big)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *p;

	if (off > TG_MAX_FRAME)
		return -1;
	opaque(off);	/* see span_sum() */
	p = data + (off & 0xfff);
	switch (size) {
	case 1:
		if ((void *)(p + 1) > end)
			return -1;
		*v = *p;
		return 0;
	case 2:
		if ((void *)(p + 2) > end)
			return -1;
		*v = big ? bpf_ntohs(*(__u16 *)p) : *(__u16 *)p;
		return 0;
	case 4:
		if ((void *)(p + 4) > end)
			return -1;
		*v = big ? bpf_ntohl(*(__u32 *)p) : *(__u32 *)p;
		return 0;
	}
	return -1;
}

/* Offset of the L4 checksum of fix_checksum_hw. */
static __always_inline __u32 hw_l4_csum_off(struct tg_insn *in)
{
	return in->offset + in->arg + ((in->flags & TG_F_L4_UDP) ? 6 : 16);
}

static __always_inline __u64 words4(__u64 x)
{
	return (x >> 48) + ((x >> 32) & 0xffff) + ((x >> 16) & 0xffff) + (x & 0xffff);
}

/*
 * Ones' complement sum of the n bytes at off as big-endian 16-bit words
 * aligned on even frame offsets, so that sums of different ranges add up like
 * the checksum of a range that starts at an even offset. n is a size the field
 * engine writes (1, 2, 4, 8, or the 16-byte trailer): one bound check of a
 * constant length each, which the verifier follows (a loop over a variable
 * length makes clang compute on the packet pointer, which the verifier
 * refuses). Summed as if off were even; an odd off swaps the bytes of the
 * folded sum (RFC 1071, 2.B). Not folded otherwise: < 8 * 0xffff.
 */
static __always_inline int span_sum(struct xdp_md *ctx, __u32 off, __u32 n, __u64 *sum)
{
	/* fresh loads: clang reusing store()'s (through a 32-bit copy) loses the pointer type */
	void *data = (void *)(long)*(volatile __u32 *)&ctx->data;
	void *end = (void *)(long)*(volatile __u32 *)&ctx->data_end;
	__u64 s;
	void *p;

	if (off > TG_MAX_FRAME)
		return -1;
	/*
	 * clang may test a copy of off (the mask, a no-op as TG_MAX_FRAME < 4096,
	 * bounds this one), and may turn "p + n > end" into a scalar compare of
	 * off with end - data, which tells the verifier nothing: hide p.
	 */
	opaque(off);
	p = data + (off & 0xfff);
	opaque(p);
	switch (n) {
	case 1:
		if (p + 1 > end)
			return -1;
		s = (__u32)*(__u8 *)p << 8;
		break;
	case 2:
		if (p + 2 > end)
			return -1;
		s = bpf_ntohs(*(__u16 *)p);
		break;
	case 4:
		if (p + 4 > end)
			return -1;
		s = bpf_ntohl(*(__u32 *)p);
		s = (s >> 16) + (s & 0xffff);
		break;
	case 8:
		if (p + 8 > end)
			return -1;
		s = words4(__builtin_bswap64(*(__u64 *)p));
		break;
	case 16:
		if (p + 16 > end)
			return -1;
		s = words4(__builtin_bswap64(*(__u64 *)p)) +
		    words4(__builtin_bswap64(*(__u64 *)(p + 8)));
		break;
	default:
		return -1;
	}
	if (off & 1) {
		s = csum_fold16(s);
		s = ((s & 0xff) << 8) | (s >> 8);
	}
	*sum = s;
	return 0;
}

/*
 * A checksum from the template's sum over the bytes this packet did not change
 * plus the changed bytes as they are now: the same bits as summing the packet.
 * Both sums are of non-zero data (an IPv4 header with its version, a pseudo
 * header with its protocol), and a fold of a positive sum lies in 1..0xffff,
 * where each residue modulo 0xffff has exactly one value.
 */
static __always_inline int fix_incr(struct xdp_md *ctx, struct tg_insn *in, int is_hw)
{
	__u64 sum[2] = { in->base[0], in->base[1] }, x;
	__u32 i, ck;

	for (i = 0; i < TG_MAX_PIECES; i++) {
		if (i >= in->n_pieces)
			break;
		if (span_sum(ctx, in->piece[i].off, in->piece[i].len, &x) < 0)
			return -1;
		if (in->piece[i].sums & 1)
			sum[0] += x;
		if (in->piece[i].sums & 2)
			sum[1] += x;
	}
	/*
	 * the IPv4 checksum field is not in the L4 sum (the pseudo header has only the addresses);
	 * an IPv6 header (fix_checksum_hw, size 6) has no checksum of its own
	 */
	if (in->size != 6 && store(ctx, in->offset + 10, (__u16)~csum_fold16(sum[0]), 2, 1) < 0)
		return -1;
	if (!is_hw || !(in->flags & (TG_F_L4_UDP | TG_F_L4_TCP)))
		return 0;
	ck = (__u16)~csum_fold16(sum[1]);
	if ((in->flags & TG_F_L4_UDP) && ck == 0)
		ck = 0xffff;
	return store(ctx, hw_l4_csum_off(in), ck, 2, 1);
}

static __always_inline int fix_ipv4(struct xdp_md *ctx, __u32 off)
{
	__u64 vihl;
	int sum;

	if (load(ctx, off, &vihl, 1, 1) < 0)
		return -1;
	if (store(ctx, off + 10, 0, 2, 0) < 0)
		return -1;
	sum = tg_csum(ctx, off, (vihl & 0xf) * 4, 0);
	if (sum == -1)
		return -1;
	return store(ctx, off + 10, (__u16)~csum_fold16((__u32)sum), 2, 0);
}

/*
 * The UDP/TCP checksum at csum_off: zeroed, then the one's complement sum of the pseudo header ph
 * (ph_len bytes, a constant once inlined: 12 for IPv4, 40 for IPv6) and the l4len bytes at l4,
 * folded; a UDP sum of 0 is sent as 0xffff (0 means "no checksum", not allowed over IPv6).
 */
static __always_inline int l4_csum(struct xdp_md *ctx, __u32 l4, __u32 l4len, __u32 csum_off, void *ph,
				   __u32 ph_len, int udp)
{
	__s64 sum;
	__u32 i;
	int s;

	if (store(ctx, csum_off, 0, 2, 0) < 0)
		return -1;
	sum = bpf_csum_diff(NULL, 0, (__be32 *)ph, ph_len, 0);
	if (sum < 0)
		return -1;
	s = tg_csum(ctx, l4, l4len, (__u32)sum);
	if (s == -1)
		return -1;
	i = (__u16)~csum_fold16((__u32)s);
	if (udp && i == 0)
		i = 0xffff;
	return store(ctx, csum_off, i, 2, 0);
}

/*
 * fix_checksum_hw: what a NIC does with l2_len/l3_len and the L4 type: the IPv4
 * header checksum, then the UDP/TCP checksum over the IPv4 pseudo header and
 * the L4 bytes (length from the IPv4 total length, as the NIC takes it).
 */
static __always_inline int fix_hw_full(struct xdp_md *ctx, struct tg_insn *in)
{
	__u32 l3 = in->offset, l4 = in->offset + in->arg, csum_off;
	__u8 ph[12];
	__u64 tot, proto;
	__u32 l4len;

	if (fix_ipv4(ctx, l3) < 0)
		return -1;
	if (!(in->flags & (TG_F_L4_UDP | TG_F_L4_TCP)))
		return 0;
	if (load(ctx, l3 + 2, &tot, 2, 1) < 0 || tot < in->arg)
		return -1;
	l4len = tot - in->arg;
	proto = (in->flags & TG_F_L4_UDP) ? 17 : 6;
	csum_off = l4 + ((in->flags & TG_F_L4_UDP) ? 6 : 16);
	if (bpf_xdp_load_bytes(ctx, l3 + 12, ph, 8) < 0)
		return -1;
	ph[8] = 0;
	ph[9] = proto;
	ph[10] = l4len >> 8;
	ph[11] = l4len & 0xff;
	return l4_csum(ctx, l4, l4len, csum_off, ph, 12, proto == 17);
}

/*
 * fix_checksum_hw at an IPv6 header (size 6, l3_len 40: no extension headers):
 * the UDP/TCP checksum over the IPv6 pseudo header (source, destination,
 * upper-layer length from the payload length, next header; RFC 8200 8.1),
 * UDP's 0 sent as 0xffff (a zero UDP checksum is not allowed over IPv6).
 */
static __always_inline int fix_hw6_full(struct xdp_md *ctx, struct tg_insn *in)
{
	__u32 l3 = in->offset, l4 = in->offset + in->arg, csum_off, l4len;
	__u32 ph[10];
	__u64 plen, proto;

	if (!(in->flags & (TG_F_L4_UDP | TG_F_L4_TCP)))
		return 0;
	if (load(ctx, l3 + 4, &plen, 2, 1) < 0 || plen + 40 < in->arg)
		return -1;
	l4len = plen + 40 - in->arg;
	proto = (in->flags & TG_F_L4_UDP) ? 17 : 6;
	csum_off = l4 + ((in->flags & TG_F_L4_UDP) ? 6 : 16);
	if (bpf_xdp_load_bytes(ctx, l3 + 8, ph, 32) < 0)
		return -1;
	ph[8] = bpf_htonl(l4len);
	ph[9] = bpf_htonl((__u32)proto);
	return l4_csum(ctx, l4, l4len, csum_off, ph, 40, proto == 17);
}

/* fix_checksum_ipv4 (is_hw 0) and fix_checksum_hw: incremental (TG_F_INCR) or full sums. */
static __always_inline int fix(struct xdp_md *ctx, struct tg_insn *in, struct tg_pkt *pk, int is_hw)
{
	if (pk->restored && (in->flags & TG_F_INCR))
		return fix_incr(ctx, in, is_hw);
	if (is_hw && in->size == 6)
		return fix_hw6_full(ctx, in);
	return is_hw ? fix_hw_full(ctx, in) : fix_ipv4(ctx, in->offset);
}

/*
 * Keep the L4 checksum at (enc & 0xffff) right after bytes old -> new at off:
 * enc = csum_off | l4_start << 16 | is_udp << 32 (0 = none). The difference is
 * taken from the bytes this frame really held, so recycled frames stay right.
 */
static __always_inline int csum_adjust(struct xdp_md *ctx, __u64 enc, __u32 off, __u32 d32,
				       __u32 *old_ck, __u32 *new_ck)
{
	__u32 csum_off = enc & 0xffff, l4 = (enc >> 16) & 0xffff, diff, sum;
	__u64 ck;

	if (!csum_off)
		return 0;
	if (load(ctx, csum_off, &ck, 2, 0) < 0)
		return -1;
	*old_ck = ck;
	*new_ck = ck;
	if (ck == 0 && (enc >> 32) & 1)	/* UDP without checksum stays so */
		return 0;
	diff = csum_fold16(d32);
	if ((off - l4) & 1)	/* odd distance from the L4 start: the bytes swap roles */
		diff = ((diff & 0xff) << 8) | (diff >> 8);
	sum = csum_fold16((__u64)(__u16)~ck + diff);
	sum = (__u16)~sum;
	if (sum == 0 && (enc >> 32) & 1)
		sum = 0xffff;
	*new_ck = sum;
	return store(ctx, csum_off, sum, 2, 0);
}

/* The trailer: the last TG_TRAILER_LEN bytes of the frame; then fix up to two L4 checksums. */
static __always_inline int write_trailer(struct xdp_md *ctx, struct tg_insn *in,
					 struct tg_state *st, __u32 pg_id)
{
	__u32 len = ctx->data_end - ctx->data, off;
	struct tg_trailer t, old;
	__u32 ock[2] = {}, nck[2] = {};
	__s64 d;

	if (len < TG_TRAILER_LEN || len > TG_MAX_FRAME)
		return -1;
	off = len - TG_TRAILER_LEN;
	t.magic = TG_TRAILER_MAGIC;
	t.pg_id = pg_id;
	t.seq = st->seq++;
	t.ts_ns = bpf_ktime_get_ns();
	if (bpf_xdp_load_bytes(ctx, off, &old, sizeof(old)) < 0)
		return -1;
	if (bpf_xdp_store_bytes(ctx, off, &t, sizeof(t)) < 0)
		return -1;
	if (!in->min && !in->max)
		return 0;
	d = bpf_csum_diff((__be32 *)&old, sizeof(old), (__be32 *)&t, sizeof(t), 0);
	if (d < 0)
		return -1;
	/* inner (max) first: the outer checksum (min) also covers the inner checksum field */
	if (csum_adjust(ctx, in->max, off, (__u32)d, &ock[0], &nck[0]) < 0)
		return -1;
	if (csum_adjust(ctx, in->min, off, (__u32)d, &ock[1], &nck[1]) < 0)
		return -1;
	if (!(in->min & 0xffff) || !(in->max & 0xffff) || ock[0] == nck[0])
		return 0;
	d = bpf_csum_diff(&ock[0], 4, &nck[0], 4, 0);
	if (d < 0)
		return -1;
	return csum_adjust(ctx, in->min, in->max & 0xffff, (__u32)d, &ock[1], &nck[1]);
}

/*
 * One instruction, any kind. A global function: the verifier checks it once,
 * not once per iteration of tg_tx's loop. Returns 0 or -1 (drop frame).
 */
__noinline int tg_exec(struct xdp_md *ctx, struct tg_insn *in, struct tg_state *st,
		       struct tg_pkt *pk)
{
	struct tg_var *v, *v2;
	__u64 range, r, pv;
	__u32 key;
	__u64 *list;
	int of = 0;

	if (!ctx || !in || !st || !pk)
		return -1;
	v = &st->var[in->var & (TG_MAX_VARS - 1)];
	range = in->max - in->min;

	switch (in->op) {
	case TG_OP_NOP:
		return 0;
	case TG_OP_VAR_INC:
		v->val = inc_mod(in->min, in->max, v->val, in->step, &of);
		return 0;
	case TG_OP_VAR_DEC:
		v->val = dec_mod(in->min, in->max, v->val, in->step);
		return 0;
	case TG_OP_VAR_RAND:
		r = rand_for_size(&st->rand_seed, in->size);
		v->val = range == ~0ULL ? r : in->min + r % (range + 1);
		return 0;
	case TG_OP_LIST_INC:
	case TG_OP_LIST_DEC:
	case TG_OP_LIST_RAND: {
		__u32 idx;

		if (in->arg == 0)
			return -1;
		idx = in->op == TG_OP_LIST_RAND ? rand16(&st->rand_seed) % in->arg : v->idx;
		if (idx >= in->arg)
			return -1;
		key = (pk->slot * TG_MAX_VARS + (in->var & (TG_MAX_VARS - 1))) << 8 | idx / TG_LIST_CHUNK;
		list = bpf_map_lookup_elem(&lists, &key);
		if (!list)
			return -1;
		idx %= TG_LIST_CHUNK;
		opaque(idx);
		v->val = list[idx & (TG_LIST_CHUNK - 1)];
		if (in->op == TG_OP_LIST_RAND)
			return 0;
		if (in->op == TG_OP_LIST_INC)
			v->idx = (v->idx + in->step) % in->arg;
		else
			v->idx = (v->idx + in->arg - in->step % in->arg) % in->arg;
		return 0;
	}
	case TG_OP_RAND_LIMIT:
		if (v->cnt == (__u64)in->add) {
			v->seed = in->init;
			v->cnt = 0;
		}
		r = rand_for_size(&v->seed, in->size);
		v->val = (range == ~0ULL ? r : in->min + r % (range + 1)) & size_mask(in->size);
		v->cnt++;
		return 0;
	case TG_OP_TUPLE:
		/* StreamDPOpClientsLimit: ip is the inner loop, port advances when ip wraps. */
		v2 = &st->var[(in->var + 1) & (TG_MAX_VARS - 1)];
		v->val = inc_mod(in->min, in->max, v->val, 1, &of);
		if (of)
			v2->val = inc_mod(in->step & 0xffff, in->step >> 16, v2->val, 1, &of);
		if (in->add) {
			v->cnt++;
			if (v->cnt > (__u64)in->add) {
				v->cnt = 1;
				v->val = in->min;
				v2->val = in->step & 0xffff;
			}
		}
		return 0;
	case TG_OP_WRITE:
		return store(ctx, in->offset, (v->val + in->add) & size_mask(in->size), in->size,
			     in->flags & TG_F_BIG_ENDIAN);
	case TG_OP_WRITE_BE32:
		return store(ctx, in->offset, (__u32)(v->val + in->add), 4, 1);
	case TG_OP_WRITE_MASK: {
		int big = in->flags & TG_F_BIG_ENDIAN;
		__u32 w = (__u32)v->val;

		/* the variable is read in its own size (arg), then add, shift, mask */
		w = (__u32)(v->val & size_mask(in->arg));
		w += (__u32)in->add;
		if (in->shift > 0)
			w <<= (in->shift & 31);
		else if (in->shift < 0)
			w >>= ((-in->shift) & 31);
		if (load(ctx, in->offset, &pv, in->size, big) < 0)
			return -1;
		pv = (pv & ~(__u64)in->mask) | (w & in->mask);
		return store(ctx, in->offset, pv & size_mask(in->size), in->size, big);
	}
	case TG_OP_FIX_IPV4:
		return fix(ctx, in, pk, 0);
	case TG_OP_FIX_HW:
		return fix(ctx, in, pk, 1);
	case TG_OP_TRIM: {
		__u32 len = ctx->data_end - ctx->data;
		__u32 want = (__u16)v->val;

		if (want > len || want < 14)
			return -1;
		if (want < len && bpf_xdp_adjust_tail(ctx, (int)want - (int)len) < 0)
			return -1;
		return 0;
	}
	case TG_OP_TRAILER: {
		struct tg_stream *s = bpf_map_lookup_elem(&streams, &pk->slot);

		if (!s)
			return -1;
		return write_trailer(ctx, in, st, s->pg_id);
	}
	}
	return -1;
}

/*
 * The common instructions, inlined in tg_tx's loop: a BPF-to-BPF call costs
 * more than such an instruction on a CPU with the SRSO "Safe RET" mitigation
 * (every return goes through a thunk). Everything else goes to tg_exec; this
 * split also keeps what the verifier walks per loop iteration small.
 */
static __always_inline int tg_exec_fast(struct xdp_md *ctx, struct tg_insn *in,
					struct tg_state *st, struct tg_pkt *pk)
{
	struct tg_var *v = &st->var[in->var & (TG_MAX_VARS - 1)];
	int of;

	switch (in->op) {
	case TG_OP_VAR_INC:
		v->val = inc_mod(in->min, in->max, v->val, in->step, &of);
		return 0;
	case TG_OP_VAR_DEC:
		v->val = dec_mod(in->min, in->max, v->val, in->step);
		return 0;
	case TG_OP_WRITE:
		return store(ctx, in->offset, (v->val + in->add) & size_mask(in->size), in->size,
			     in->flags & TG_F_BIG_ENDIAN);
	case TG_OP_WRITE_BE32:
		return store(ctx, in->offset, (__u32)(v->val + in->add), 4, 1);
	case TG_OP_FIX_IPV4:
	case TG_OP_FIX_HW:
		if (pk->restored && (in->flags & TG_F_INCR))
			return fix_incr(ctx, in, in->op == TG_OP_FIX_HW);
		break;
	}
	return tg_exec(ctx, in, st, pk);
}

/*
 * The template copy of a small frame, with plain stores: 8 bytes at a time,
 * then the last len % 8 one by one. A helper call costs more than the copy
 * itself at these sizes (and every call and return is a mispredicted one
 * under this CPU's SRSO mitigation).
 */
#define TG_SMALL_FRAME 128
static __always_inline int restore_small(struct xdp_md *ctx, const __u8 *bytes, __u32 len)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 i;

	if (data + len > end)
		return -1;
#pragma clang loop unroll(full)
	for (i = 0; i < TG_SMALL_FRAME / 8; i++) {
		if (i * 8 + 8 > len)
			break;
		if (data + i * 8 + 8 > end)
			return -1;
		*(__u64 *)(data + i * 8) = *(const __u64 *)&bytes[i * 8];
	}
	for (i = len & ~7u; i < len && i < TG_SMALL_FRAME; i++) {
		if (data + i + 1 > end)
			return -1;
		*(__u8 *)(data + i) = bytes[i];
	}
	return 0;
}

/*
 * The slot of the paced stream due first (one whose burst has begun: that one),
 * or -1 when none is due. Streams not due end their run of back-to-back frames.
 */
static __always_inline int pick_paced(__u64 now)
{
	__u64 best = ~0ULL;
	struct tg_paced *ps;
	__u32 i, zero = 0;
	int found = -1;

	ps = bpf_map_lookup_elem(&paced, &zero);
	if (!ps)
		return -1;
	for (i = 0; i < TG_MAX_PACED; i++) {
		struct tg_pace *p;
		__u32 slot;

		if (i >= ps->n)
			break;
		slot = ps->slot[i];
		p = bpf_map_lookup_elem(&pace, &slot);
		if (!p || !p->next_q8 || (p->end_ns && now >= p->end_ns) || p->left == 1)
			continue;
		if (p->burst_pos)
			return slot;
		if ((now << 8) < p->next_q8) {
			if (p->run)
				p->run = 0;
			continue;
		}
		if (p->next_q8 < best) {
			best = p->next_q8;
			found = slot;
		}
	}
	return found;
}

SEC("xdp")
int tg_tx(struct xdp_md *ctx)
{
	void *meta = (void *)(long)ctx->data_meta;
	void *data = (void *)(long)ctx->data;
	struct tg_pkt pk = {};
	struct tg_pace *p;
	struct tg_stream *s;
	struct tg_state *st;
	struct tg_tmpl *t;
	__u32 slot, i, len, zero = 0, *cur;
	int verdict = XDP_DROP;

	cur = bpf_map_lookup_elem(&cur_slot, &zero);
	if (cur && *cur == TG_ANY_PACED) {
		int k = pick_paced(bpf_ktime_get_ns());

		if (k < 0)
			goto out;
		slot = k;
	} else if (cur && *cur) {
		slot = *cur - 1;
	} else {
		if (meta + TG_META_LEN > data)
			goto out;
		slot = *(__u32 *)meta;
	}
	p = bpf_map_lookup_elem(&pace, &slot);
	if (p && p->next_q8) {
		__u64 now = bpf_ktime_get_ns(), due = p->next_q8, late;

		if ((p->end_ns && now >= p->end_ns) || p->left == 1)
			goto out;
		if (p->burst_pos) {
			/* the rest of a burst: now, whatever the clock */
			if (++p->burst_pos >= p->burst)
				p->burst_pos = 0;
			goto paced;
		}
		if ((now << 8) < due) {
			p->idle++;
			p->run = 0;
			goto out;
		}
		late = (now << 8) - due;
		if (late > p->late_q8 && p->gap_q8) {
			__u64 n = (late - p->late_q8) / p->gap_q8 + 1;

			p->skipped += n * (p->burst > 1 ? p->burst : 1);
			due += n * p->gap_q8;
		}
		p->next_q8 = due + p->gap_q8;
		if (p->burst > 1)
			p->burst_pos = 1;
paced:
		if (++p->run > p->max_run)
			p->max_run = p->run;
		if (p->left)
			p->left--;
	}
	s = bpf_map_lookup_elem(&streams, &slot);
	st = bpf_map_lookup_elem(&state, &slot);
	t = bpf_map_lookup_elem(&tmpl, &slot);
	if (!s || !st || !t)
		goto out;
	/*
	 * Restore the template (see struct tg_tmpl), length included: a frame an
	 * earlier trim_pkt_size shortened comes back short (the kernel resets the
	 * frame's pointers only when the frame itself was changed). len 0: no
	 * template, the frame as given (unit tests of the full-sum path).
	 */
	len = ctx->data_end - ctx->data;
	if (t->len && t->len != len) {
		if (t->len > TG_MAX_FRAME ||
		    bpf_xdp_adjust_tail(ctx, (int)t->len - (int)len) < 0) {
			st->errors++;
			goto out;
		}
		len = ctx->data_end - ctx->data;
	}
	if (t->len < len)
		len = t->len;
	opaque(len);
	if (len > TG_MAX_FRAME)
		goto out;
	if (s->cache_n && len == t->len && len <= TG_CACHE_FRAME) {
		/* a prebuilt frame: the template with the program already run on it */
		__u32 pos = st->cache_pos, key;
		struct tg_cframe *f;

		if (pos >= s->cache_n)
			pos = 0;
		key = s->cache_base + pos;
		f = bpf_map_lookup_elem(&cache, &key);
		if (!f || restore_small(ctx, f->bytes, len) < 0) {
			st->errors++;
			goto out;
		}
		st->cache_pos = pos + 1 < s->cache_n ? pos + 1 : 0;
		goto sent;
	}
	if (len <= TG_SMALL_FRAME) {
		if (restore_small(ctx, t->bytes, len) < 0) {
			st->errors++;
			goto out;
		}
	} else if (bpf_xdp_store_bytes(ctx, 0, t->bytes, len) < 0) {
		st->errors++;
		goto out;
	}
	pk.slot = slot;
	pk.restored = len && len == t->len;
#pragma clang loop unroll(disable)
	for (i = 0; i < TG_MAX_INSNS; i++) {
		if (i >= s->n_insns)
			break;
		if (tg_exec_fast(ctx, &s->insn[i], st, &pk) < 0) {
			st->errors++;
			goto out;
		}
	}
sent:
	st->tx_packets++;
	st->tx_bytes += ctx->data_end - ctx->data;
	verdict = XDP_TX;
out:
	return verdict;
}

/* Bucket of a latency in ns: 4 per power of two (about 19% wide), 0 for < 4 ns. */
static __always_inline __u32 lat_bucket(__u64 ns)
{
	__u64 orig = ns;
	__u32 msb = 0, b;

	/* no clz in BPF: binary search for the top bit */
	if (ns >> 32) { msb += 32; ns >>= 32; }
	if (ns >> 16) { msb += 16; ns >>= 16; }
	if (ns >> 8) { msb += 8; ns >>= 8; }
	if (ns >> 4) { msb += 4; ns >>= 4; }
	if (ns >> 2) { msb += 2; ns >>= 2; }
	if (ns >> 1) { msb += 1; ns >>= 1; }

	if (msb < 2)
		return 0;
	b = msb * 4 + ((orig >> (msb - 2)) & 3);
	return b < TG_LAT_BUCKETS ? b : TG_LAT_BUCKETS - 1;
}

/*
 * What a frame is (enum tg_bg), from its first TG_BG_HDR bytes h (n of them
 * valid): Ethernet, then ARP / LLDP / IPv4 protocol / IPv6 next header, one
 * hop-by-hop header skipped (MLD comes behind one), then the ICMPv6 type.
 */
#define TG_BG_HDR 72		/* Ethernet 14 + IPv6 40 + hop-by-hop up to 16 + ICMPv6 type */
static __always_inline __u32 tg_classify(const __u8 *h, __u32 n)
{
	__u16 proto;
	__u32 off = 14 + 40;
	__u8 nh;

	if (n < 14)
		return TG_BG_OTHER;
	proto = ((__u16)h[12] << 8) | h[13];
	if (proto == ETH_P_ARP)
		return TG_BG_ARP;
	if (proto == 0x88cc)
		return TG_BG_LLDP;
	if (proto == ETH_P_IP) {
		if (n < 14 + 20)
			return TG_BG_IPV4;
		return h[14 + 9] == 17 ? TG_BG_UDP : TG_BG_IPV4;
	}
	if (proto != ETH_P_IPV6)
		return TG_BG_OTHER;
	if (n < 14 + 40)
		return TG_BG_IPV6;
	nh = h[14 + 6];
	if (nh == 0) {		/* hop-by-hop: its next header, its length in 8-byte units after the first 8 */
		if (n < off + 2)
			return TG_BG_IPV6;
		nh = h[off];
		off += 8 + 8 * (__u32)h[off + 1];
	}
	if (nh == 17)
		return TG_BG_UDP;
	if (nh != 58)
		return TG_BG_IPV6;
	if (off >= n || off >= TG_BG_HDR)
		return TG_BG_ICMP6;
	nh = h[off];		/* the ICMPv6 type */
	return nh >= 133 && nh <= 137 ? TG_BG_ND : TG_BG_ICMP6;
}

/*
 * 1 when the frame is an ICMP or ICMPv6 error (IPv4 types 3, 4, 5, 11, 12;
 * ICMPv6 types below 128), which quotes the packet it answers: a kernel quotes
 * as much as fits in 576 (IPv4) or 1280 (IPv6) octets, the sent packet's
 * trailer included, so the trailer at the end of such a frame is the quoted
 * packet's, not this frame's stream's. Untagged frames, no IPv6 extension
 * header before the ICMPv6 one (a kernel's error has none).
 */
static __always_inline int tg_icmp_error(void *data, void *end)
{
	struct ethhdr *eth = data;
	__u8 *type;

	if ((void *)(eth + 1) > end)
		return 0;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > end || ip->protocol != 1)
			return 0;
		type = (__u8 *)ip + ip->ihl * 4;
		if ((void *)(type + 1) > end)
			return 0;
		return *type == 3 || *type == 4 || *type == 5 || *type == 11 || *type == 12;
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		__u8 *ip6 = (void *)(eth + 1);	/* IPv6: next header at 6, 40 octets */

		if ((void *)(ip6 + 40) > end || ip6[6] != 58)
			return 0;
		type = ip6 + 40;
		if ((void *)(type + 1) > end)
			return 0;
		return *type < 128;
	}
	return 0;
}

/* Returns 1 when the trailer is a known stream's (counted), 0 otherwise. */
static __always_inline int count_flow(struct tg_trailer *t, __u32 len, struct tg_port_stats *ps)
{
	struct tg_flow *f;
	__u32 key = t->pg_id;
	__u64 now, lat;

	f = bpf_map_lookup_elem(&rx_flow, &key);
	if (!f)
		return 0;
	if (ps)
		ps->trailer++;
	__sync_fetch_and_add(&f->packets, 1);
	__sync_fetch_and_add(&f->bytes, len);
	if (!f->started) {
		f->started = 1;
		f->expected = t->seq + 1;
	} else if (t->seq == f->expected) {
		f->expected++;
	} else if ((__s32)(t->seq - f->expected) > 0) {
		f->seq_too_high++;
		f->dropped += t->seq - f->expected;
		f->expected = t->seq + 1;
	} else {
		f->seq_too_low++;
		f->out_of_order++;
		if (f->dropped)
			f->dropped--;
	}
	now = bpf_ktime_get_ns();
	lat = now > t->ts_ns ? now - t->ts_ns : 0;
	if (!f->lat_cnt || lat < f->lat_min)
		f->lat_min = lat;
	if (lat > f->lat_max)
		f->lat_max = lat;
	f->lat_sum += lat;
	f->lat_cnt++;
	f->hist[lat_bucket(lat) & (TG_LAT_BUCKETS - 1)]++;
	return 1;
}

static __always_inline void capture(struct xdp_md *ctx, __u32 len, struct tg_port_stats *ps)
{
	__u32 zero = 0, n;
	struct scratch *s;
	__s64 *left;

	left = bpf_map_lookup_elem(&cap_left, &zero);
	if (!left || *left <= 0)
		return;
	if (__sync_fetch_and_add(left, -1) <= 0)
		return;
	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return;
	n = len > TG_CAP_MAX ? TG_CAP_MAX : len;
	opaque(n);
	if (n == 0 || n > TG_CAP_MAX)
		return;
	s->hdr.ts_ns = bpf_ktime_get_ns();
	s->hdr.len = len;
	s->hdr.caplen = n;
	if (bpf_xdp_load_bytes(ctx, 0, s->buf, n) < 0)
		return;
	if (bpf_ringbuf_output(&cap_ring, s, sizeof(s->hdr) + n, 0) < 0 && ps)
		ps->cap_lost++;
}

SEC("xdp")
int tg_rx(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct tg_port_stats *ps;
	struct ethhdr *eth = data;
	struct tg_trailer t;
	__u32 zero = 0, len = end - data;
	int verdict = XDP_DROP, stream = 0;

	ps = bpf_map_lookup_elem(&rx_port, &zero);
	if (ps) {
		ps->packets++;
		ps->bytes += len;
	}
	if ((void *)(eth + 1) > end) {
		if (ps)
			ps->bg[TG_BG_OTHER]++;	/* shorter than an Ethernet header */
		goto out;
	}
	if (eth->h_proto == bpf_htons(ETH_P_ARP))
		verdict = XDP_PASS;
	if (len >= sizeof(*eth) + TG_TRAILER_LEN && len <= TG_MAX_FRAME && !tg_icmp_error(data, end)) {
		if (bpf_xdp_load_bytes(ctx, len - TG_TRAILER_LEN, &t, sizeof(t)) == 0 &&
		    t.magic == TG_TRAILER_MAGIC)
			stream = count_flow(&t, len, ps);
	}
	if (!stream && ps) {
		__u8 h[TG_BG_HDR] = {};
		__u32 n = len > TG_BG_HDR ? TG_BG_HDR : len;

		opaque(n);
		if (n > 0 && n <= TG_BG_HDR && bpf_xdp_load_bytes(ctx, 0, h, n) == 0)
			ps->bg[tg_classify(h, n) & (TG_BG_MAX - 1)]++;
		else
			ps->bg[TG_BG_OTHER]++;
	}
	capture(ctx, len, ps);
out:
	return verdict;
}

/*
 * tcx egress of a generator port: counts, by kind, what the port's network
 * stack sends (the kernel's ARP replies and neighbour discovery, anything on a
 * packet socket). The engine's own frames go out through XDP and never pass
 * here. Always lets the frame go.
 */
#define TG_TCX_NEXT (-1)	/* TCX_NEXT (uapi 6.6): the next program, then the stack */
SEC("tc")
int tg_bg_out(struct __sk_buff *skb)
{
	struct tg_bg_out *o;
	__u32 zero = 0, len = skb->len;
	__u8 h[TG_BG_HDR] = {};
	__u32 n = len > TG_BG_HDR ? TG_BG_HDR : len;

	o = bpf_map_lookup_elem(&bg_out, &zero);
	if (!o)
		return TG_TCX_NEXT;
	opaque(n);
	if (n > 0 && n <= TG_BG_HDR && bpf_skb_load_bytes(skb, 0, h, n) == 0)
		o->bg[tg_classify(h, n) & (TG_BG_MAX - 1)]++;
	else
		o->bg[TG_BG_OTHER]++;
	return TG_TCX_NEXT;
}
