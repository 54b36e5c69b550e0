/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * pgwu_cli.h: what the parts of the pgwu control tool share: the option structs of every command
 * (their tables are in pgwu.c), the handlers, the printing of bearers. The maps layer is pgwu_maps.h,
 * the bearer table's API pgwu_bearers.h, what the PFCP agent shares with the commands that read it
 * pfcp_shared.h, the formatting pgwu_fmt.h; all are included here.
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
#include "pgwu_bearers.h"
#include "pfcp_shared.h"

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
	struct opt_addr6 local_addr6;
	struct opt_addr6 n3_addr6;
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
	struct opt_addr6 local_addr6;
	struct opt_addr6 n3_addr6;
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
	struct opt_str ue6;		/* the UE's IPv6 /64 */
	struct opt_str filter;		/* SDF filters: PDR specs (pgwu_sdf.h sdf_parse_option) */
	struct opt_u32 cp_teid;		/* a CP2UP tunnel's local TEID (PGWU_B_CP2UP); not set: none */
	struct opt_addr6 sgw6;		/* an IPv6 peer (N3 over IPv6) instead of sgw */
};

struct stats_opts {
	struct opt_flag json;
	struct opt_flag bearers;
};

struct path_opts {
	struct opt_addr peer;
	struct opt_addr6 peer6;
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

struct sock_opts {
	struct opt_str access;
	struct opt_str sgi;
	struct opt_u32 threads;		/* per direction */
	struct opt_str cpus;
	struct opt_enum reuseport;	/* 0 off (one socket per direction), 1 on */
	struct opt_u32 batch;
	struct opt_u32 rcvbuf;
	struct opt_u32 sndbuf;
	struct opt_u32 busy_poll;	/* SO_BUSY_POLL usec, 0 off */
	struct opt_flag prefer_busy_poll;
	struct opt_u32 busy_poll_budget;
	struct opt_flag gro;
	struct opt_enum fanout;		/* hash lb cpu qm */
	struct opt_u32 rt_priority;
	struct opt_u32 interval;	/* ms between the per-thread lines, 0: none */
	struct opt_flag json;
	struct opt_flag daemon;
	struct opt_str log;
	struct opt_u32 measure_lookups;
	struct opt_u32 owner;		/* exit when this pid ends (the lab that started it) */
};

struct pfcp_opts {
	struct opt_str listen;
	struct opt_str node_id;
	struct opt_u32 max_sessions;
	struct opt_u32 heartbeat;	/* seconds between Heartbeat Requests to each CP, 0: none */
	struct opt_enum restart_policy;	/* enum pfcp_restart_policy */
	struct opt_flag allow_cp_move;
	struct opt_u32 cp_t1;		/* ms: the CPs' retransmission timer T1 */
	struct opt_u32 cp_n1;		/* the CPs' retransmission count N1 */
	struct opt_u32 mbr_burst_ms;	/* a policer's depth: this long at its MBR */
	struct opt_str gtpu_netns;	/* where End Markers are sent from (a netns path) */
	struct opt_prefix ue_pool;	/* IPv4 addresses the UP chooses (CHV4) */
	struct opt_str ue_pool6;	/* the /64s of an IPv6 prefix the UP chooses (CHV6) */
};

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
int do_socket(const void *cfg);		/* pgwu_sock.c */
int do_path(const void *cfg);		/* pgwu_path.c */
int do_signalling(const void *cfg);
/* events[] summed over CPUs (enum pgwu_event) */
int events_read(__u64 out[PGWU_EVENT_MAX]);
int do_pfcp(const void *cfg);

/* `pgwu watch` (pgwu_watch.c): keeps the route cache correct, registered as its watcher. */
int pgwu_watch_run(int ready_fd);	/* ready_fd: pgwu_daemon_ready's, -1 in the foreground */
int pgwu_watch_spawn(void);	/* detached, in this netns: its pid once registered, or -errno */

/* Load programs and maps and pin them (do_load; attach uses it when nothing is loaded). */
int pgwu_load(const struct load_opts *o);
extern const struct load_opts load_defaults;

void bearer_print_header(FILE *f);
void bearer_print_row(FILE *f, const struct bearer *b);
void bearer_print_json(FILE *f, const struct bearer *b);

/*
 * `pgwu session`'s view of the sessions `pgwu pfcp` publishes (pgwu_pfcp_view.c): loaded once
 * (empty when no agent has run on this PIN_DIR), then joined to each bearer by TEID and owner tag.
 * pfcp_view_json: the bearer's session as a JSON object, or null (not a PFCP bearer, or its
 * session is gone); pfcp_view_print: the same as text lines, nothing for an operator's bearer.
 * bearer_print_json_pfcp: bearer_print_json with the "pfcp" member.
 */
struct pfcp_view {
	struct pgwu_pfcp_sess *sess;
	size_t n;
	__u64 *by_teid;		/* (TEID host order << 32 | index), sorted */
	struct pgwu_pfcp_rule_key *rkeys;
	struct pgwu_pfcp_rule *rules;
	size_t nr;
	struct pfcp_peer_rec *peers;	/* a copy, or NULL */
};
int pfcp_view_load(struct pfcp_view *v);
void pfcp_view_free(struct pfcp_view *v);
void pfcp_view_json(FILE *f, const struct pfcp_view *v, const struct bearer *b);
void pfcp_view_print(FILE *f, const struct pfcp_view *v, const struct bearer *b);
void bearer_print_json_pfcp(FILE *f, const struct bearer *b, const struct pfcp_view *v);

#endif /* PGWU_CLI_H */
