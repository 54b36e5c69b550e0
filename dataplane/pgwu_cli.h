/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * pgwu_cli.h: what the parts of the pgwu control tool share: the option structs of every command
 * (their tables are in pgwu.c), the handlers, and the bearer table's writers (pgwu_session.c).
 * The maps layer is pgwu_maps.h, the formatting pgwu_fmt.h; both are included here.
 * Byte order: addresses and TEIDs in maps and in struct bearer are network order, except
 * bearer.teid/sgw_teid and every opt_u32 (host order, for printing and sorting).
 */
#ifndef PGWU_CLI_H
#define PGWU_CLI_H

#include <stdbool.h>
#include <stdio.h>
#include <linux/types.h>
#include "pgwu.h"
#include "pgwu_params.h"
#include "pgwu_maps.h"
#include "pgwu_fmt.h"

#define PGWU_DEFAULT_PIN_DIR "/sys/fs/bpf/pgwu"
#define PGWU_DEFAULT_MAX_BEARERS 1048576
#define PGWU_MAX_MAX_BEARERS (1U << 27)
#define PGWU_LINK_PREFIX "link_"
#define PGWU_XDP_LINK_PREFIX "link_xdp_"
#define PGWU_TRACING_PREFIX "fib_gen_"

extern bool verbose;

#define pr_warn(...) fprintf(stderr, __VA_ARGS__)

/* Command options (the tables that fill them are in pgwu.c) */
struct load_opts {
	struct opt_u32 max_bearers;
	struct opt_addr local_addr;
	struct opt_prefix ue_pool;
	struct opt_enum csum;		/* 0 off, 1 on */
	struct opt_enum sport_entropy;	/* 0 off (2152), 1 on */
	struct opt_flag no_fib_cache;
	struct opt_u32 restart_counter;
};

struct attach_opts {
	struct opt_str access;
	struct opt_str sgi;
	struct opt_enum mode;		/* 0 native, 1 generic */
	struct opt_flag no_watch;
};

struct watch_opts {
	struct opt_flag daemon;
};

struct reasm_opts {
	struct opt_flag daemon;
};

struct config_opts {
	struct opt_addr local_addr;
	struct opt_prefix ue_pool;
	struct opt_enum csum;
	struct opt_enum fib_cache;
	struct opt_nexthop nexthop;
	struct opt_vlan vlan;
	struct opt_enum err_ind;
	struct opt_enum inner_csum_check;
	struct opt_enum sport_entropy;
	struct opt_flag json;
};

struct session_opts {
	struct opt_u32 teid;
	struct opt_addr ue;
	struct opt_addr sgw;
	struct opt_u32 sgw_teid;
	struct opt_enum csum;		/* 0 off, 1 on, 2 default */
	struct opt_u32 qfi;		/* 5G N3 QoS flow, 0..63; not set: none */
	struct opt_flag json;
	struct opt_str file;
};

struct stats_opts {
	struct opt_flag json;
	struct opt_flag bearers;
};

struct path_opts {
	struct opt_addr peer;
	struct opt_flag send;
	struct opt_u32 wait;		/* ms */
	struct opt_flag json;
};

struct signalling_opts {
	struct opt_flag json;
};

struct metrics_opts {
	struct opt_str listen;
};

struct pfcp_opts {
	struct opt_str listen;
	struct opt_str node_id;
	struct opt_u32 max_sessions;
	struct opt_u32 heartbeat;	/* seconds between Heartbeat Requests to each CP, 0: none */
};

/*
 * pfcp_stats: an ARRAY of __u64 (BPF_F_MMAPABLE) pinned in PIN_DIR by `pgwu pfcp`, its only
 * writer (mmap, plain stores), read by `pgwu metrics` on each scrape. Gauges, then counters:
 * received requests by message type, sent answers by message type and Cause (0: no Cause IE).
 */
#define PFCP_STATS_MAP "pfcp_stats"
#define PFCP_STAT_SESSIONS 0		/* gauge: sessions (= bearers the agent installed) */
#define PFCP_STAT_ASSOCIATIONS 1	/* gauge: PFCP associations */
#define PFCP_STAT_DROPPED 2		/* datagrams discarded: bad header, unknown message type */
#define PFCP_STAT_RETRANSMISSIONS 3	/* requests answered from the retransmission cache */
#define PFCP_STAT_HB_MISSED 4		/* our Heartbeat Requests unanswered within an interval */
#define PFCP_STAT_RX(type) (256 + (type))
#define PFCP_STAT_TX(type, cause) (512 + (type) * 256 + (cause))
#define PFCP_STAT_N (512 + 256 * 256)

struct no_opts {
	struct opt_flag unused;
};

int do_load(const void *cfg);
int do_unload(const void *cfg);
int do_attach(const void *cfg);
int do_detach(const void *cfg);
int do_config(const void *cfg);		/* pgwu_config.c */
int do_session_add(const void *cfg);
int do_session_del(const void *cfg);
int do_session_get(const void *cfg);
int do_session_list(const void *cfg);
int do_session_load(const void *cfg);
int do_session_flush(const void *cfg);
int do_session_unload(const void *cfg);
int do_stats(const void *cfg);		/* pgwu_stats.c */
int do_metrics(const void *cfg);
int do_watch(const void *cfg);
int do_reassemble(const void *cfg);	/* pgwu_reasm.c */
int do_path(const void *cfg);		/* pgwu_path.c */
int do_signalling(const void *cfg);
/* events[] summed over CPUs (enum pgwu_event) */
int events_read(__u64 out[PGWU_EVENT_MAX]);
int do_pfcp(const void *cfg);

/* `pgwu watch` (pgwu_watch.c): keeps the route cache correct, registered as its watcher. */
int pgwu_watch_run(void);
int pgwu_watch_spawn(void);	/* detached, in this netns: its pid or -errno */
/* A daemon's standard streams onto /dev/null (watch and reassemble --daemon). */
void stdio_to_devnull(void);

/* Load programs and maps and pin them (do_load; attach uses it when nothing is loaded). */
int pgwu_load(const struct load_opts *o);
extern const struct load_opts load_defaults;

/*
 * One bearer in the tables (pgwu_session.c): what `session add/del` and the PFCP agent share.
 * The caller holds the PIN_DIR lock; teid, ue, sgw, sgw_teid network order.
 * bearer_add: both halves and their slots, all or nothing: -EEXIST (the TEID has a bearer),
 *   -EADDRINUSE (the UE has one), -E2BIG (table full), or another -errno; nothing changed then.
 *   ul_flags: the uplink half's (PGWU_B_QFI and the QFI, or 0); the downlink's are in dl.
 *   dl NULL: the uplink half only (a PFCP session whose downlink is not forwarding yet).
 * bearer_add_dl: the downlink half alone (and its slot): -EADDRINUSE, -E2BIG, -errno.
 * bearer_remove: empties the slots, then deletes the halves named.
 * bearer_set_dl: a new SGW address and TEID for the downlink half (usage counters kept).
 * bearer_set_dl_flags: the same with new flags too (a QFI changed by a PFCP Update QER).
 * bearer_get: by TEID (by_teid) or by UE, with usage (slot + hash entry); -ENOENT.
 */
int bearer_add(const struct pgwu_maps *m, __u32 teid, __u32 ue, __u32 ul_flags,
	       const struct pgwu_dl_bearer *dl);
int bearer_add_dl(const struct pgwu_maps *m, __u32 ue, const struct pgwu_dl_bearer *dl);
int bearer_remove(const struct pgwu_maps *m, __u32 teid, __u32 ue, bool has_ul, bool has_dl);
int bearer_set_dl(const struct pgwu_maps *m, __u32 ue, __u32 sgw, __u32 sgw_teid);
int bearer_set_dl_flags(const struct pgwu_maps *m, __u32 ue, __u32 sgw, __u32 sgw_teid,
			__u32 flags);
int bearer_get(const struct pgwu_maps *m, __u32 teid, __u32 ue, bool by_teid, struct bearer *b);
void bearer_print_header(FILE *f);
void bearer_print_row(FILE *f, const struct bearer *b);
void bearer_print_json(FILE *f, const struct bearer *b);

#endif /* PGWU_CLI_H */
