/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The lab's reference DUT (`dut.mode: fwd`): what both sides of fwd.bpf.c share. One entry of
 * fwd_ports per DUT port, keyed by its ifindex: where frames arriving there leave, and with which
 * MAC addresses. Counters: one per fwd_reason, per CPU.
 */
#ifndef GTPLAB_FWD_H
#define GTPLAB_FWD_H

#include <linux/types.h>

#define FWD_MAX_PORTS 64

struct fwd_port {
	__u32 out_ifindex;	/* the other DUT port */
	__u8 src[6];		/* MAC of out_ifindex */
	__u8 dst[6];		/* MAC of the generator port behind it */
};

/* Reasons: the index of fwd_stats. Names as gtplab reads them (gtplab/dut/fwd.py). */
enum fwd_reason {
	FWD_R_FWD = 0,		/* rewritten and redirected */
	FWD_R_DROP_SHORT,	/* shorter than an Ethernet header */
	FWD_R_DROP_NO_PORT,	/* ingress interface not configured */
	FWD_R_MAX,
};

struct fwd_counter {
	__u64 packets;
	__u64 bytes;
};

#endif
