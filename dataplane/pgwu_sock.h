/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * pgwu_sock.h: the counters of the socket path (`pgwu socket`, pgwu_sock.c), as `pgwu stats`,
 * `pgwu metrics` and gtplab (gtplab/dut/sock.py) read them. Only __u* types and constants.
 *
 * sock_stats: an ARRAY of __u64 (BPF_F_MMAPABLE) that `pgwu socket` creates and pins in PIN_DIR,
 * and writes through mmap (plain stores: every word has one writer). Word layout:
 *   [0, PGWU_SOCK_HDR)                       the header (enum pgwu_sock_hdr)
 *   then PGWU_SOCK_MAX_THREADS blocks of PGWU_SOCK_THREAD_WORDS, one per worker thread:
 *     [(r * PGWU_VERDICT_MAX + v) * 2 + 0/1]  packets / bytes of reason r with verdict v, r below
 *                                             PGWU_SOCK_REASON_MAX: enum pgwu_reason (the XDP
 *                                             path's reasons, same names and meanings), then
 *                                             enum pgwu_sock_reason (the socket path's own)
 *     [PGWU_SOCK_EV_OFF + e]                  enum pgwu_event (replies sent, rate-limited)
 *     [PGWU_SOCK_CTR_OFF + c]                 enum pgwu_sock_counter
 * Verdicts (the XDP path's columns): redirect = sent out of the other side (ul_fwd, dl_fwd), tx =
 * a reply sent back (echo_reply; a drop_* answered), drop, pass = left to the kernel's own stack
 * (pass_not_ue: SGi traffic outside the UE pool, which the packet socket sees as the stack does).
 * Keep pgwu_sock_reason_names[] and pgwu_sock_counter_names[] (pgwu_fmt.c) in step.
 */
#ifndef PGWU_SOCK_H
#define PGWU_SOCK_H

#include <linux/types.h>
#include "pgwu.h"

#define PGWU_SOCK_STATS_MAP "sock_stats"
#define PGWU_SOCK_MAX_THREADS 64	/* workers per direction: 2 x this many blocks */

/* Reasons the XDP path does not have, numbered after enum pgwu_reason. */
enum pgwu_sock_reason {
	PGWU_SR_DROP_TX_FULL = PGWU_REASON_MAX,	/* DROP: the kernel refused to send it: the egress
						 * queue or ring was full (ENOBUFS). On the lab's
						 * veths: the generator's receive ring */
	PGWU_SR_DROP_SEND,		/* DROP: the kernel refused to send it otherwise (IPv4
					 * uplink over the SGi MTU: EMSGSIZE; EPERM, EINVAL ...) */
	PGWU_SR_DROP_TRUNC,		/* DROP: longer than the receive buffer (MSG_TRUNC) */
	PGWU_SOCK_REASON_MAX,
};

/* Per-thread counters that are not a packet's fate. */
enum pgwu_sock_counter {
	PGWU_SC_RX_CALLS = 0,	/* receive system calls that returned packets */
	PGWU_SC_RX_EMPTY,	/* ... that returned none (the receive timeout, TICK_MS) */
	PGWU_SC_RX_PACKETS,	/* packets (G-PDUs, IP packets) read: the sum of the reasons */
	PGWU_SC_TX_CALLS,	/* send system calls */
	PGWU_SC_GRO_DATAGRAMS,	/* datagrams read that carried several G-PDUs (UDP GRO) */
	PGWU_SC_HASH_LOOKUPS,	/* bearers looked up in the hash maps (a system call: their slot in
				 * the direct index holds another key; every IPv6 /64 lookup) */
	PGWU_SC_SOCK_DROPS,	/* packets the kernel dropped at this thread's socket: its receive
				 * buffer was full (sk_drops of SO_MEMINFO; a packet socket's
				 * PACKET_STATISTICS drops). Read every tick by the main thread */
	PGWU_SC_TID,		/* gauge: the thread's id */
	PGWU_SC_CPU,		/* gauge: the CPU it ran on last (read every tick) */
	PGWU_SC_DIRECTION,	/* gauge: 0 uplink (UDP 2152), 1 downlink (packet socket on SGi) */
	PGWU_SOCK_COUNTER_MAX,
};

enum pgwu_sock_hdr {
	PGWU_SH_LAYOUT = 0,	/* PGWU_SOCK_LAYOUT of the writer: readers check it */
	PGWU_SH_PID,		/* the running `pgwu socket`'s pid, 0: none */
	PGWU_SH_THREADS,	/* worker threads per direction */
	PGWU_SH_BATCH,		/* packets per receive/send call (1: recvfrom/sendto) */
	PGWU_SH_REUSEPORT,	/* 1: a socket per thread (SO_REUSEPORT group, PACKET_FANOUT
				 * group); 0: one socket per direction, read by every thread */
	PGWU_SH_RCVBUF,		/* SO_RCVBUF asked (0: the kernel's default) */
	PGWU_SH_SNDBUF,
	PGWU_SH_BUSY_POLL,	/* SO_BUSY_POLL microseconds (0: off) */
	PGWU_SH_PREFER_BUSY_POLL,
	PGWU_SH_BUSY_POLL_BUDGET,
	PGWU_SH_GRO,		/* UDP_GRO on the uplink sockets */
	PGWU_SH_FANOUT,		/* PACKET_FANOUT mode of the downlink group */
	PGWU_SH_RT_PRIORITY,	/* SCHED_FIFO priority of the workers, 0: SCHED_OTHER */
	PGWU_SH_STARTED,	/* CLOCK_REALTIME seconds */
	PGWU_SH_TICKS,		/* main-thread ticks: a reader waits for two to see drops folded in */
	PGWU_SOCK_HDR = 16,
};

#define PGWU_SOCK_EV_OFF (PGWU_SOCK_REASON_MAX * PGWU_VERDICT_MAX * 2)
#define PGWU_SOCK_CTR_OFF (PGWU_SOCK_EV_OFF + PGWU_EVENT_MAX)
/* rounded up to 8 words: each thread's block starts a cache line */
#define PGWU_SOCK_THREAD_WORDS ((PGWU_SOCK_CTR_OFF + PGWU_SOCK_COUNTER_MAX + 7) / 8 * 8)
#define PGWU_SOCK_WORDS (PGWU_SOCK_HDR + 2 * PGWU_SOCK_MAX_THREADS * PGWU_SOCK_THREAD_WORDS)
/* reasons | verdicts << 8 | counters << 16 | events << 24 | thread words << 32 */
#define PGWU_SOCK_LAYOUT ((__u64)PGWU_SOCK_REASON_MAX | (__u64)PGWU_VERDICT_MAX << 8 | \
			  (__u64)PGWU_SOCK_COUNTER_MAX << 16 | (__u64)PGWU_EVENT_MAX << 24 | \
			  (__u64)PGWU_SOCK_THREAD_WORDS << 32)

/* The block of worker i of direction dir (0 uplink, 1 downlink) in the words w. */
static inline __u64 *pgwu_sock_block(const __u64 *w, int dir, int i)
{
	return (__u64 *)w + PGWU_SOCK_HDR + (dir * PGWU_SOCK_MAX_THREADS + i) * PGWU_SOCK_THREAD_WORDS;
}

#endif /* PGWU_SOCK_H */
