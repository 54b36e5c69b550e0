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
};

/* What a CP's restart (a newer Recovery Time Stamp) does to its sessions (docs/pfcp.md) */
enum pfcp_restart_policy {
	PFCP_RESTART_DELETE,	/* default: seen in a heartbeat or an association setup: deleted */
	PFCP_RESTART_ON_SETUP,	/* only a new association setup is a restart: then deleted */
	PFCP_RESTART_KEEP,	/* a restart (association setup) deletes nothing */
	PFCP_RESTART_MAX,
};
extern const char *const pfcp_restart_policy_names[];	/* pgwu_fmt.c, NULL-terminated */

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
#define PFCP_STAT_QERS 5		/* gauge: QERs stored, over all sessions */
#define PFCP_STAT_URRS 6		/* gauge: URRs stored, over all sessions */
#define PFCP_STAT_NOT_OWNER 7		/* session requests refused: not from the session's CP */
#define PFCP_STAT_NODE_ID_TAKEN 8	/* Association Setups refused: the Node ID is another
					 * address's association */
#define PFCP_STAT_CP_MOVED 9		/* associations moved to another address (--allow-cp-move) */
#define PFCP_STAT_RESTARTS 10		/* CP restarts acted on (all peers) */
#define PFCP_STAT_RESTART_DELETED 11	/* sessions deleted because their CP restarted */
#define PFCP_STAT_RCACHE_EXPIRED 12	/* requests like a cached one (peer, sequence number,
					 * bytes) but past the window: applied as new */
#define PFCP_STAT_RCACHE_FLUSHED 13	/* cached answers dropped: their CP restarted or left */
#define PFCP_STAT_HALVES_KEPT 14	/* bearer halves a session deletion left in place:
					 * another owner's (PGWU_B_OWNER_SHIFT) */
#define PFCP_STAT_PUBLISH_ERRORS 15	/* pfcp_sessions/pfcp_rules writes that failed */
#define PFCP_STAT_RESTART_POLICY 16	/* gauge: enum pfcp_restart_policy + 1 (0: no agent yet) */
#define PFCP_STAT_END_MARKERS 17	/* End Markers sent on an old downlink tunnel (SNDEM) */
#define PFCP_STAT_END_MARKER_ERRORS 18	/* ... that could not be sent */
#define PFCP_STAT_REPORTS 19		/* Session Report Requests sent (usage reports) */
#define PFCP_STAT_REPORTS_UNANSWERED 20	/* ... given up after N1 retransmissions */
#define PFCP_STAT_RTS_FUTURE 21	/* Recovery Time Stamps too far ahead of our clock: not acted
					 * on (heartbeats), refused (association setups) */
#define PFCP_STAT_RX(type) (256 + (type))
#define PFCP_STAT_TX(type, cause) (512 + (type) * 256 + (cause))
#define PFCP_STAT_N (512 + 256 * 256)

/*
 * pfcp_peers: an ARRAY (BPF_F_MMAPABLE) of PFCP_MAX_PEERS struct pfcp_peer_rec, pinned in PIN_DIR
 * by `pgwu pfcp` and written by it only (mmap, plain stores, state last); one per CP the agent has
 * had an association with, kept after a release so its counters stay (the slot is reused when all
 * are taken). Read by `pgwu metrics` (per-peer series) and `pgwu session` (the owning CP's name).
 * pfcp_sessions, pfcp_rules: pgwu.h.
 */
#define PFCP_PEERS_MAP "pfcp_peers"
#define PFCP_SESSIONS_MAP "pfcp_sessions"
#define PFCP_RULES_MAP "pfcp_rules"
#define PFCP_MAX_PEERS 64
#define PFCP_NODE_ID_MAX 256

#define PFCP_PEER_FREE 0
#define PFCP_PEER_ASSOCIATED 1
#define PFCP_PEER_RELEASED 2

struct pfcp_peer_rec {
	__u32 state;			/* PFCP_PEER_* */
	__u32 addr;			/* where the association's requests come from (network order) */
	__u16 port;			/* network order */
	__u16 pad;
	__u32 rts;			/* the CP's Recovery Time Stamp in force */
	__u64 sessions;			/* gauge */
	__u64 restarts;			/* restarts acted on (--restart-policy) */
	__u64 restart_deleted;		/* sessions deleted for them */
	__u64 rts_changes;		/* newer Recovery Time Stamps seen, restart or not */
	__u64 rts_older;		/* older ones (ignored) */
	char node_id[PFCP_NODE_ID_MAX];	/* IPv4 or FQDN text, NUL-terminated */
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
 * The *_owned variants (the PFCP agent) touch only halves whose owner tag
 * (PGWU_B_OWNER_SHIFT) is owner and that still belong together (uplink half of teid with UE
 * ue, downlink half of ue with local TEID teid):
 * bearer_remove_owned: removes those of the halves named; *kept: how many of the halves named
 *   were left in place; *usage (if not NULL): the usage of the ones removed, read just before.
 * bearer_set_dl_owned: bearer_set_dl_flags of the downlink half if it is owner's (-EPERM if
 *   another owner's, -ENOENT if none).
 */
int bearer_add(const struct pgwu_maps *m, __u32 teid, __u32 ue, __u32 ul_flags,
	       const struct pgwu_dl_bearer *dl);
int bearer_add_dl(const struct pgwu_maps *m, __u32 ue, const struct pgwu_dl_bearer *dl);
int bearer_remove(const struct pgwu_maps *m, __u32 teid, __u32 ue, bool has_ul, bool has_dl);
int bearer_set_dl(const struct pgwu_maps *m, __u32 ue, __u32 sgw, __u32 sgw_teid);
int bearer_set_dl_flags(const struct pgwu_maps *m, __u32 ue, __u32 sgw, __u32 sgw_teid,
			__u32 flags);
int bearer_get(const struct pgwu_maps *m, __u32 teid, __u32 ue, bool by_teid, struct bearer *b);
int bearer_remove_owned(const struct pgwu_maps *m, __u32 teid, __u32 ue, __u32 owner,
			bool has_ul, bool has_dl, int *kept, struct bearer *usage);
int bearer_set_dl_owned(const struct pgwu_maps *m, __u32 ue, __u32 teid, __u32 owner,
			__u32 sgw, __u32 sgw_teid, __u32 flags);
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
