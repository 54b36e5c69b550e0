/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The data plane's maps. Above each: who writes it, who reads it. All are pinned by pgwu. */
#ifndef PGWU_MAPS_H
#define PGWU_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "pgwu.h"
#include "consts.h"

/* Written by pgwu (session add/del/load). Read by xdp_access (uplink), which also adds to the
 * usage counters. Never LRU and never preallocated: a bearer is only removed by pgwu. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, PGWU_MAX_BEARERS);
	__type(key, __u32);			/* local TEID */
	__type(value, struct pgwu_ul_bearer);
} ul_bearers SEC(".maps");

/* Written by pgwu. Read by xdp_sgi (downlink), which also adds to the usage counters. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, PGWU_MAX_BEARERS);
	__type(key, __u32);			/* UE address */
	__type(value, struct pgwu_dl_bearer);
} dl_bearers SEC(".maps");

/*
 * IPv6 (the UE's /64, TS 23.401 5.3.1.2.2: one /64 per PDN connection). Written by pgwu (session
 * add --ue6, load ue6=) and `pgwu pfcp`, beside the bearer's IPv4 halves, with a slot index as
 * theirs (dl6_slots, and the IPv6 half of ul_slots: pgwu.h), the hash maps holding every entry.
 * dl6_bearers: key the /64, the first 8 octets of the address as they are in the packet (network
 * order), value a downlink half as dl_bearers' (its own usage counters). Read by xdp_sgi6, which
 * adds to the usage counters.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, PGWU_MAX_BEARERS);
	__type(key, __u64);			/* UE /64 prefix */
	__type(value, struct pgwu_dl_bearer);
} dl6_bearers SEC(".maps");

/* ul6_prefix: key the local TEID, value the bearer's /64 (as dl6_bearers' key): the prefix an
 * IPv6 G-PDU's inner source must be in (anti-spoofing), and the IPv6 uplink's usage counters
 * (struct pgwu_ul6). Written by pgwu, read by xdp_access6, which adds to the usage counters. A
 * bearer without one takes no IPv6. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, PGWU_MAX_BEARERS);
	__type(key, __u32);			/* local TEID */
	__type(value, struct pgwu_ul6);
} ul6_prefix SEC(".maps");

/* The programs the XDP programs tail-call (PGWU_PROG_*), set statically in pgwu.bpf.c (libbpf
 * fills it at load). xdp_sgi hands its IPv6 frames to xdp_sgi6, xdp_access its G-PDUs with an
 * IPv6 T-PDU to xdp_access6. */
#define PGWU_PROG_SGI6 0
#define PGWU_PROG_ACCESS6 1
#define PGWU_PROG_CP 2		/* xdp_access6 -> xdp_cp (PGWU_B_CP, PGWU_B_CP2UP), back if not taken */
#define PGWU_PROG_UL_N3V6 3	/* xdp_access's IPv6 frames (include/n3v6.h) */
#define PGWU_PROG_DL_N3V6 4	/* the downlink of a bearer with an IPv6 peer (include/n3v6.h) */
int xdp_sgi6(struct xdp_md *ctx);
int xdp_access6(struct xdp_md *ctx);
int xdp_cp(struct xdp_md *ctx);
int xdp_ul_n3v6(struct xdp_md *ctx);
int xdp_dl_n3v6(struct xdp_md *ctx);
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 5);
	__type(key, __u32);
	__array(values, int(struct xdp_md *));
} sgi_progs SEC(".maps") = {
	.values = { [PGWU_PROG_SGI6] = (void *)&xdp_sgi6,
		    [PGWU_PROG_ACCESS6] = (void *)&xdp_access6,
		    [PGWU_PROG_CP] = (void *)&xdp_cp,
		    [PGWU_PROG_UL_N3V6] = (void *)&xdp_ul_n3v6,
		    [PGWU_PROG_DL_N3V6] = (void *)&xdp_dl_n3v6 },
};

/*
 * Written by xdp_access just before it tail-calls xdp_access6, read by xdp_access6 in the same
 * run on the same CPU (a tail call does not return, nor migrate, nor let another packet in
 * between): what xdp_access found of the G-PDU, so xdp_access6 does not parse it again. A
 * scratch slot, no state across packets.
 */
struct pgwu_ul6_handoff {
	__u32 teid;		/* the bearer's local TEID, network order */
	__u32 flags;		/* its uplink half's flags (PGWU_B_QOS) */
	__u32 inner_off;	/* the T-PDU's offset from the frame's start */
	__u32 inner_len;	/* its length: up to the end of the outer IP datagram */
	__u8 orig_mac[12];	/* the received frame's destination then source MAC */
	__u32 peer;		/* the outer source (the SGW), network order */
	__u16 vid;		/* the received VLAN id, 0: none */
	__u8 peer6;		/* from xdp_ul_n3v6: the G-PDU came over IPv6 from a sender that may be
				 * answered (peer is 0 then) */
	__u8 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pgwu_ul6_handoff);
} ul6_handoff SEC(".maps");

/* Written by pgwu (through mmap); read by xdp_access / xdp_sgi, which add to the usage counters.
 * Sized at load time (a power of two >= the capacity). See struct pgwu_ul_slot in pgwu.h. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pgwu_ul_slot);
} ul_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pgwu_dl_slot);
} dl_slots SEC(".maps");

/* dl_slots' IPv6 twin, keyed by the /64 (struct pgwu_dl6_slot in pgwu.h); written by pgwu as
 * dl_slots, read by xdp_sgi6 (and ul6_time_exceeded), which add to the usage counters. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pgwu_dl6_slot);
} dl6_slots SEC(".maps");

/* Written by pgwu load: [0] = the slot arrays' size - 1 (ul_slots, dl_slots, dl6_slots). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} slot_mask SEC(".maps");

/* Written by both XDP programs (one slot per reason x verdict). Read by pgwu stats/metrics. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PGWU_REASON_MAX * PGWU_VERDICT_MAX);
	__type(key, __u32);
	__type(value, struct pgwu_counter);
} stats SEC(".maps");

/* Written by both XDP programs: events that are not a packet's verdict (enum pgwu_event). Read
 * by pgwu stats/metrics. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PGWU_EVENT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} events SEC(".maps");

/* Written and read by xdp_access: each peer's reply budget (see reply_budget in pgwu.h). Shared
 * by the CPUs, updated without a lock: two CPUs racing may both send, which the budget allows
 * for (at most one extra reply per racing CPU). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PGWU_REPLY_PEERS);
	__type(key, __u32);
	__type(value, __u64);
} reply_budget SEC(".maps");

/* Written by xdp_access (Echo Responses) and pgwu path (requests sent). Read by pgwu path. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PGWU_MAX_PEERS);
	__type(key, __u32);
	__type(value, struct pgwu_peer);
} peers SEC(".maps");

/* Written by xdp_access (Error Indications and End Markers received). Read by pgwu signalling. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PGWU_MAX_SIG_RX);
	__type(key, struct pgwu_sig_key);
	__type(value, struct pgwu_sig_val);
} sig_rx SEC(".maps");

/* Written by pgwu (load, config). Read by both XDP programs on every packet. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pgwu_config);
} config SEC(".maps");

/* Written by the XDP programs after a successful bpf_fib_lookup; read by them before one. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PGWU_FIB_CACHE_SIZE);
	__type(key, __u32);
	__type(value, struct pgwu_fib_slot);
} fib_cache SEC(".maps");

/* fib_cache's IPv6 twin (resolve_nexthop6). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PGWU_FIB_CACHE_SIZE);
	__type(key, __u32);
	__type(value, struct pgwu_fib6_slot);
} fib6_cache SEC(".maps");

/* [0] generation: incremented by the fib_gen_* and nl_fib_gen programs whenever the kernel's
 * routes, addresses, links or neighbours change; read by the XDP programs: a cache entry made under
 * an older generation is stale. [1] (PGWU_REG_WATCH) the tgid of the live `pgwu watch`
 * (watch_register), 0 when there is none (fib_gen_watch_exit); the XDP programs use the cache only
 * while it is not 0. [3] (PGWU_REG_REASM) the same for `pgwu reassemble` (reasm_register):
 * xdp_access passes outer fragments to the kernel only while it is not 0.
 * [2] PGWU_FIB_BY_SRC when IPv4 policy rules may exist (`ip rule`): the cache is then keyed by the
 * source address too. Set by nl_fib_gen as a rule is added (in the adding task, before the change
 * returns) and by `pgwu watch` when its dump finds one; cleared only by `pgwu watch` once a dump
 * finds none. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PGWU_FIB_GEN_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} fib_gen SEC(".maps");

/* Written only by `pgwu reassemble` (mmap), read by pgwu stats/metrics: enum pgwu_reasm_stat.
 * No program touches it; it is here so that load creates and pins it with everything else. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, PGWU_RA_MAX);
	__type(key, __u32);
	__type(value, __u64);
} reasm_stats SEC(".maps");

/*
 * Written by xdp_sgi: the IP ID of outer headers without DF (those the kernel may fragment), one
 * counter for all CPUs, incremented atomically: per-CPU counters gave two CPUs the same IDs for the
 * same (source, destination, UDP), which a reassembling receiver takes for one datagram's fragments
 * (RFC 6864 4.1: unique within the MSL for a fragmentable datagram). DF packets (most) never touch it.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} ip_id SEC(".maps");

/* Written by `pgwu pfcp` (a session's gate, MBR and quota, struct pgwu_qos in pgwu.h); read and
 * updated under the value's lock by both XDP programs, for bearers with PGWU_B_QOS only. Sized
 * as the bearer tables at load (one entry per session at most). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, PGWU_MAX_BEARERS);
	__type(key, __u32);			/* local TEID */
	__type(value, struct pgwu_qos);
} qos SEC(".maps");

/* SDF filters (struct pgwu_sdf_list in pgwu.h): written by pgwu (session add --filter) and
 * `pgwu pfcp` (several PDRs in a direction) before the bearer half gets PGWU_B_SDF, removed after
 * it has lost it; read by the four packet paths (sdf.h) for a half with PGWU_B_SDF only. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, PGWU_SDF_LISTS);
	__type(key, struct pgwu_sdf_key);
	__type(value, struct pgwu_sdf_list);
} sdf_lists SEC(".maps");

/* The PDRs the filters name: FAR action and usage counters (struct pgwu_sdf_pdr). Written by the
 * same writers; read by sdf.h, which adds to the usage counters (atomic adds). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, PGWU_SDF_RULES);
	__type(key, __u32);			/* rule id */
	__type(value, struct pgwu_sdf_pdr);
} sdf_pdrs SEC(".maps");

/* A PDR's QER (gate, MBR, quota), as the qos map's entries but keyed by rule id: written by the
 * same writers (qos_ctl with PGWU_QOS_CTL_SDF for `pgwu pfcp`), read and updated under its lock
 * by sdf.h for a PDR with PGWU_SDF_P_QOS. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, PGWU_SDF_RULES);
	__type(key, __u32);			/* rule id */
	__type(value, struct pgwu_qos);
} sdf_qos SEC(".maps");

/* A URR's volume threshold and quota counted by PDRs of SDF halves (PGWU_SDF_P_URR), one entry for
 * all the PDRs that link it (struct pgwu_qos: only its QUOTA* and VOLTH* flags, quota_left and th
 * are used; gate and MBR are the PDR's QER's, sdf_qos). Written by `pgwu pfcp` before the PDRs
 * that name it, removed after them; read and updated under its lock by sdf.h, changed by qos_ctl
 * (PGWU_QOS_CTL_URR). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, PGWU_SDF_RULES);
	__type(key, struct pgwu_urr_key);
	__type(value, struct pgwu_qos);
} sdf_urr SEC(".maps");

/* The tunnels to and from the CP function (struct pgwu_cp_relay in pgwu.h): written by pgwu
 * (session add --filter "... cp ADDR TEID", --cp-teid) and `pgwu pfcp` before the half gets
 * PGWU_B_CP / PGWU_B_CP2UP, removed after; read by xdp_cp, which adds to the usage counters. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, PGWU_SDF_RULES);
	__type(key, struct pgwu_cp_key);
	__type(value, struct pgwu_cp_relay);
} cp_relay SEC(".maps");

/* n3v6_peers: ARRAY of the IPv6 peers the bearers with PGWU_B_PEER6 name by index (their sgw_addr),
 * written by pgwu (session add --sgw6) and `pgwu pfcp` (OHC GTP-U/UDP/IPv6): an entry is filled
 * before a bearer names it; read by xdp_dl_n3v6, and by the Time Exceeded
 * answers through such a bearer's tunnel (xdp_ul_n3v6, ul6_error). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PGWU_N3V6_PEERS);
	__type(key, __u32);
	__type(value, struct pgwu_n3v6_peer);
} n3v6_peers SEC(".maps");

#endif /* PGWU_MAPS_H */
