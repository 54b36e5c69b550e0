/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Types shared by the traffic engine's BPF programs (trafficgen.bpf.c) and
 * user space (gtplab/traffic/engine/vm.py packs the same layouts with struct).
 * Only __u* types; every struct is 8-byte aligned and padded explicitly so
 * that both sides agree without compiler help.
 */
#ifndef __TRAFFICGEN_H
#define __TRAFFICGEN_H

#include <linux/types.h>

/* Field-engine limits: the verifier needs fixed loop bounds. */
#ifndef TG_MAX_INSNS
#define TG_MAX_INSNS 16		/* instructions per stream (TRex programs are short) */
#endif
#ifndef TG_MAX_VARS
#define TG_MAX_VARS 16		/* flow variables per stream (a tuple uses two) */
#endif
#ifndef TG_MAX_STREAMS
#define TG_MAX_STREAMS 64	/* streams per port */
#endif
#ifndef TG_MAX_LIST
#define TG_MAX_LIST 65535	/* entries of a flow_var value_list (TRex's own limit) */
#endif
#define TG_LIST_CHUNK 256	/* values per entry of the lists map */
#ifndef TG_MAX_PGIDS
#define TG_MAX_PGIDS 256	/* flow-stats ids (pg_id) tracked per receive port */
#endif
#ifndef TG_MAX_FRAME
#define TG_MAX_FRAME 3520	/* a live frame is one page minus headroom and tailroom */
#endif
#ifndef TG_MAX_PIECES
#define TG_MAX_PIECES 8		/* changed byte runs an incremental fix reads (else: full sum) */
#endif
#ifndef TG_CACHE_FRAMES
#define TG_CACHE_FRAMES 16384	/* prebuilt frames per port object, shared by its streams */
#endif
#define TG_CACHE_FRAME 128	/* bytes of a prebuilt frame: only small frames are cached */
#define TG_CSUM_CHUNK 256	/* bytes summed per bpf_csum_diff call (helper max is 512) */
#define TG_LAT_BUCKETS 256	/* latency histogram: 4 buckets per power of two of ns */
#define TG_META_LEN 4		/* data_meta in front of each frame: the stream slot */
#define TG_ANY_PACED 0xFFFFFFFFu	/* cur_slot: the paced stream due first (struct tg_paced) */
#ifndef TG_MAX_PACED
#define TG_MAX_PACED 16		/* paced streams one call serves: a run checks each */
#endif

/*
 * The template of each stream, copied over the frame before the instructions
 * run. A DUT that rewrites frames in place (GTP-U decap/encap, TTL) writes
 * into the live frames' pages across the veth, and the kernel recycles them
 * without restoring their bytes: without this, the next packet would carry the
 * DUT's edits (and the DUT's encap overwrites data_meta, hence tg_cur_slot).
 */
struct tg_tmpl {
	__u32 len;
	__u32 pad;
	__u8 bytes[TG_MAX_FRAME];
};

/* Per-packet trailer at the very end of the frame (host byte order). */
#define TG_TRAILER_MAGIC 0x4c47	/* "GL" */
#define TG_TRAILER_LEN 16
struct tg_trailer {
	__u16 magic;
	__u16 pg_id;
	__u32 seq;
	__u64 ts_ns;		/* bpf_ktime_get_ns() at transmit */
};

enum tg_op {
	TG_OP_NOP = 0,
	TG_OP_VAR_INC,		/* flow_var op=inc: min, max, step, size */
	TG_OP_VAR_DEC,		/* flow_var op=dec */
	TG_OP_VAR_RAND,		/* flow_var op=random (per-stream seed) */
	TG_OP_LIST_INC,		/* flow_var value_list, op=inc: list length in arg */
	TG_OP_LIST_DEC,
	TG_OP_LIST_RAND,
	TG_OP_RAND_LIMIT,	/* flow_var_rand_limit: limit in add, seed in init */
	TG_OP_TUPLE,		/* tuple_flow_var: ip in var, port in var+1 */
	TG_OP_WRITE,		/* write_flow_var */
	TG_OP_WRITE_MASK,	/* write_mask_flow_var */
	TG_OP_FIX_IPV4,		/* fix_checksum_ipv4 at offset */
	TG_OP_FIX_HW,		/* fix_checksum_hw: l2_len in offset, l3_len in arg */
	TG_OP_TRIM,		/* trim_pkt_size to the value of var */
	TG_OP_TRAILER,		/* write the trailer; csum_off = L4 checksum to update */
	TG_OP_WRITE_BE32,	/* write_flow_var of a 4-byte variable, big endian (the common case) */
	TG_OP_MAX,
};

#define TG_F_BIG_ENDIAN	(1 << 0)
#define TG_F_L4_UDP	(1 << 1)	/* fix_checksum_hw l4_type 11 */
#define TG_F_L4_TCP	(1 << 2)	/* fix_checksum_hw l4_type 13 */
#define TG_F_INCR	(1 << 3)	/* fix_*: checksums from base[] + piece[] (see below) */

/*
 * Incremental checksums (RFC 1624), planned by vm.py. Each packet starts as an
 * exact copy of the template, and every byte the program changes before a fix
 * is at an offset known when the stream is compiled (no trim before it). So the
 * ones' complement sum of a checksummed range is the template's sum over the
 * bytes nobody changed (base[], computed by user space: the changed bytes and
 * the checksum field taken as zero) plus the sum of the changed bytes as the
 * frame holds them now (piece[], read by the fix). Sums use big-endian 16-bit
 * words aligned on even frame offsets, which is why vm.py only plans checksums
 * whose ranges start at even offsets.
 */
struct tg_piece {
	__u16 off;	/* frame offset */
	__u8 len;	/* 1, 2, 4, 8 or 16 */
	__u8 sums;	/* the sums it counts in: bit 0 the IPv4 header's, bit 1 the L4 one */
};

struct tg_insn {
	__u8 op;
	__u8 var;	/* variable index */
	__u8 size;	/* variable size 1/2/4/8 (write_mask: pkt_cast_size; fix_checksum_hw: 6 at an IPv6 header) */
	__u8 flags;	/* TG_F_* */
	__u16 offset;	/* packet offset; fix_checksum_hw: l2_len */
	__u16 arg;	/* list length; fix_checksum_hw: l3_len; write_mask: var size; trailer: L4 start */
	__s32 shift;	/* write_mask shift (positive left) */
	__u32 mask;	/* write_mask mask; trailer: offset of the L4 checksum (0 none) */
	__u64 min;	/* tuple: ip_min */
	__u64 max;	/* tuple: ip_max */
	__u64 step;	/* tuple: port_min | port_max << 16 */
	__s64 add;	/* add_value; rand_limit: limit; tuple: limit_flows */
	__u64 init;	/* rand_limit: seed */
	__u16 base[2];	/* fix (TG_F_INCR): template sums of the IPv4 header and the L4 range */
	__u32 n_pieces;	/* fix (TG_F_INCR): changed bytes to add, as the frame holds them */
	struct tg_piece piece[TG_MAX_PIECES];
};

/*
 * The frame cache. A program whose every variable is a plain inc/dec (no
 * random, trailer or trim) repeats its frames with a period P, the lcm of its
 * variables' cycles. When P frames fit (P <= TG_CACHE_FRAMES, frame <= 128 B),
 * user space prebuilds them by running tg_tx itself (not live, so the same
 * program makes them), stores them at cache_base.., and tg_tx then copies
 * frame cache_pos instead of the template and the instructions: one copy per
 * packet, whatever the number of flows. TRex's STLScVmRaw(cache_size=) does
 * the same. cache_n 0: not cached.
 */
struct tg_cframe {
	__u8 bytes[TG_CACHE_FRAME];
};

struct tg_stream {
	__u32 n_insns;
	__u32 pg_id;
	__u32 flags;
	__u32 cache_n;		/* prebuilt frames (the program's period); 0: none */
	__u32 cache_base;	/* first of them in the cache map */
	__u32 pad;
	struct tg_insn insn[TG_MAX_INSNS];
};

struct tg_var {
	__u64 val;
	__u64 cnt;	/* rand_limit: values drawn since reseed; tuple: flow id */
	__u32 seed;	/* rand_limit: its own generator */
	__u32 idx;	/* value list index; tuple: port */
};

/*
 * Pacing of a stream, in the kernel: each run of tg_tx for a paced stream reads
 * the clock and sends the next frame only when it is due, else returns XDP_DROP
 * (an idle iteration). User space runs large calls and no longer sleeps between
 * them, so frames leave one by one at their time, not in bursts of a call. A
 * frame more than late_q8 behind (the transmitter was held up) is not sent:
 * counted in skipped, so a hold-up never becomes a burst of more than late_q8 /
 * gap_q8 frames that the DUT's receive ring could not take (docs/engine.md).
 * Times are CLOCK_MONOTONIC (bpf_ktime_get_ns, Python's time.monotonic_ns) in
 * ns << 8: 1/256 ns steps keep the rate exact to 1e-5 at 5 Mpps, and overflow
 * after 2.28 years of uptime.
 *
 * burst > 1: each due time sends burst frames back to back (in consecutive
 * runs) and gap_q8 is the time between two bursts, so the average rate is
 * burst / gap; a hold-up skips whole bursts (skipped counts their frames).
 * max_run is the largest number of frames the stream sent back to back (in
 * consecutive runs): its bursts, and what a hold-up or another stream's call
 * made it catch up with, as the receiver saw them.
 */
struct tg_pace {
	__u64 next_q8;	/* when the next frame is due; 0: the stream is not paced */
	__u64 gap_q8;	/* between two frames */
	__u64 end_ns;	/* no frame at or after this time (0: no end) */
	__u64 late_q8;	/* more than this behind: skip instead of catching up */
	__u64 skipped;	/* frames given up after a hold-up */
	__u64 idle;	/* runs that found no frame due */
	__u64 left;	/* a burst: frames still to send, + 1 (1: done); 0: no count */
	__u32 burst;	/* frames sent back to back at each due time (0, 1: one) */
	__u32 burst_pos;	/* frames of the current burst sent (0: none due) */
	__u32 run;	/* frames sent in consecutive runs, no idle run between */
	__u32 max_run;	/* the most of them: the largest burst that left */
};

/*
 * The continuous paced streams of one sending thread, served by the same calls
 * (cur_slot TG_ANY_PACED): each run sends the next frame of the stream due
 * first (a burst once begun is finished first), so no stream waits for another
 * stream's call and catches up with a burst of its own.
 */
struct tg_paced {
	__u32 n;
	__u32 slot[TG_MAX_PACED];
};

/* Written by the transmit program only; one port's thread runs a stream at a time. */
struct tg_state {
	struct tg_var var[TG_MAX_VARS];
	__u32 rand_seed;	/* generator for op=random, like TRex's per-thread seed */
	__u32 seq;		/* next trailer sequence number */
	__u64 tx_packets;
	__u64 tx_bytes;
	__u64 errors;		/* program failed on a packet (bounds): frame dropped */
	__u32 cache_pos;	/* next prebuilt frame (0 .. cache_n - 1) */
	__u32 pad;
};

/*
 * What a frame that is not a stream's is (tg_classify): the test's frames are
 * known by their stream's trailer; every other frame on a port is counted by
 * kind, in this order (names in gtplab/traffic/engine/stats.py, BG_KINDS).
 * TG_BG_UDP is IPv4/IPv6 UDP without a known trailer: a stray datagram when
 * every stream carries a trailer, else possibly the test's own (user space
 * decides, docs/engine.md "Background frames").
 */
enum tg_bg {
	TG_BG_ARP = 0,		/* ethertype 0x0806 */
	TG_BG_LLDP,		/* ethertype 0x88cc */
	TG_BG_ND,		/* ICMPv6 133..137: RS, RA, NS, NA, redirect */
	TG_BG_ICMP6,		/* other ICMPv6 (MLD, echo, errors), also after a hop-by-hop header */
	TG_BG_IPV6,		/* other IPv6 (not UDP, not ICMPv6) */
	TG_BG_IPV4,		/* IPv4 that is not UDP (ICMP, IGMP, TCP ...) */
	TG_BG_UDP,		/* IPv4/IPv6 UDP without a known trailer */
	TG_BG_OTHER,		/* any other ethertype, or a frame too short to tell */
	TG_BG_MAX,		/* 8: a power of two, the index mask the verifier sees */
};

struct tg_port_stats {
	__u64 packets;
	__u64 bytes;		/* frame bytes without FCS */
	__u64 trailer;		/* frames that carried a known trailer */
	__u64 cap_lost;		/* capture records the ring buffer had no room for */
	__u64 bg[TG_BG_MAX];	/* frames without a known trailer, by kind (enum tg_bg) */
};

/* Frames sent out of a port by its network stack (not by tg_tx, whose frames
 * go out through XDP and never pass tc), by kind: tg_bg_out counts them. */
struct tg_bg_out {
	__u64 bg[TG_BG_MAX];
};

/* Per flow-stats id, on each receive port. */
struct tg_flow {
	__u64 packets;
	__u64 bytes;
	__u32 expected;		/* next sequence number expected */
	__u32 started;
	__u64 dropped;
	__u64 out_of_order;
	__u64 seq_too_high;
	__u64 seq_too_low;
	__u64 lat_min;
	__u64 lat_max;
	__u64 lat_sum;
	__u64 lat_cnt;
	__u64 hist[TG_LAT_BUCKETS];
};

struct tg_cap_hdr {
	__u64 ts_ns;
	__u32 len;		/* frame length */
	__u32 caplen;		/* bytes that follow */
};

#define TG_CAP_MAX TG_MAX_FRAME	/* bytes of a frame copied to the capture ring */

#endif /* __TRAFFICGEN_H */
