/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * pgwu_cli.h: what the parts of the pgwu control tool share: the option structs of every command
 * (their tables are in pgwu.c), the handlers, and helpers for the pinned maps.
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

#define PGWU_DEFAULT_PIN_DIR "/sys/fs/bpf/pgwu"
#define PGWU_DEFAULT_MAX_BEARERS 1048576
#define PGWU_MAX_MAX_BEARERS (1U << 27)
#define PGWU_LINK_PREFIX "link_"
#define PGWU_XDP_LINK_PREFIX "link_xdp_"
#define PGWU_TRACING_PREFIX "fib_gen_"

extern const char *pin_dir;
extern bool verbose;
extern const char *const pgwu_reason_names[PGWU_REASON_MAX];
extern const char *const pgwu_verdict_names[PGWU_VERDICT_MAX];
extern const char *const pgwu_event_names[PGWU_EVENT_MAX];
extern const char *const pgwu_reasm_names[PGWU_RA_MAX];

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
int do_session_add(const void *cfg);
int do_session_del(const void *cfg);
int do_session_get(const void *cfg);
int do_session_list(const void *cfg);
int do_session_load(const void *cfg);
int do_session_flush(const void *cfg);
int do_session_unload(const void *cfg);
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

/* Load programs and maps and pin them (do_load; attach uses it when nothing is loaded). */
int pgwu_load(const struct load_opts *o);
extern const struct load_opts load_defaults;

/* Pinned objects */
int pin_path(char *buf, size_t len, const char *name);
int pinned_open(const char *name);		/* fd, or -errno after printing why */
bool pgwu_is_loaded(void);

struct pgwu_maps {
	int ul;
	int dl;
	int stats;
	int config;
	int fib_gen;
	int lock;	/* PIN_DIR, flock()ed by writers, or -1 */
	/* the slot index (pgwu.h), mmap()ed; NULL when not mapped */
	int ul_slots_fd, dl_slots_fd;
	struct pgwu_ul_slot *ul_slots;
	struct pgwu_dl_slot *dl_slots;
	__u32 nslots;
};

/* The slot holding this bearer (key network order), or NULL. */
struct pgwu_ul_slot *slot_ul(const struct pgwu_maps *m, __u32 teid);
struct pgwu_dl_slot *slot_dl(const struct pgwu_maps *m, __u32 ue);
/* Index a bearer that is in the hash maps (if its slot is free); empty its slot (if it has one). */
void slot_ul_set(const struct pgwu_maps *m, __u32 teid, const struct pgwu_ul_bearer *v);
void slot_dl_set(const struct pgwu_maps *m, __u32 ue, const struct pgwu_dl_bearer *v);
void slot_ul_clear(const struct pgwu_maps *m, __u32 teid);
void slot_dl_clear(const struct pgwu_maps *m, __u32 ue);
void slots_clear_all(const struct pgwu_maps *m);
int maps_open(struct pgwu_maps *m);
/* maps_open, then an exclusive flock on PIN_DIR: pgwu writers take turns, so a check made before
 * a write (no such TEID yet) still holds when the write happens. */
int maps_open_locked(struct pgwu_maps *m);
int pin_dir_lock(void);		/* fd holding the lock, or -errno */
void maps_close(struct pgwu_maps *m);
int map_max_entries(int fd, __u32 *max);
/* Every entry of a hash map, read with BPF_MAP_LOOKUP_BATCH; keys and vals are malloc'ed. */
int map_dump(int fd, size_t key_size, size_t val_size, void **keys, void **vals, size_t *n);
int config_read(int fd, struct pgwu_config *cfg);
int stats_read(int fd, struct pgwu_counter out[PGWU_REASON_MAX * PGWU_VERDICT_MAX]);

/* A bearer joined from its two halves. */
struct bearer {
	__u32 teid;		/* host order */
	__u32 ue;		/* network order */
	__u32 sgw;		/* network order */
	__u32 sgw_teid;		/* host order */
	__u32 flags;		/* PGWU_B_* of the downlink half */
	__u32 ul_flags;		/* PGWU_B_QFI and the QFI of the uplink half */
	bool has_ul, has_dl;	/* false: a half-installed bearer (only while pgwu writes it) */
	__u64 ul_packets, ul_bytes, dl_packets, dl_bytes;
};
struct bearer_table {
	struct bearer *b;	/* sorted by TEID */
	size_t n;
	size_t n_ul, n_dl;
	__u32 cap_ul, cap_dl;
};
int bearers_read(const struct pgwu_maps *m, struct bearer_table *t);
int bearers_load(struct bearer_table *t);
void bearers_free(struct bearer_table *t);
const char *bearer_csum_str(__u32 flags);
/* "N" when both halves have QFI N (or the one half there is), "-" with none, "UL/DL" when they
 * differ ("-" for a half without); buf of at least 8. */
const char *bearer_qfi_str(const struct bearer *b, char buf[8]);

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

/* Everything stats and metrics report, read fresh from the pinned maps. */
struct pgwu_snapshot {
	struct pgwu_counter stats[PGWU_REASON_MAX * PGWU_VERDICT_MAX];
	struct pgwu_config cfg;
	__u64 fib_gen;
	__u64 fib_watcher;	/* tgid of the registered `pgwu watch`, 0: none */
	__u64 reasm_pid;	/* tgid of the registered `pgwu reassemble`, 0: none */
	__u64 reasm[PGWU_RA_MAX];	/* its counters (reasm_stats) */
	struct bearer_table bearers;
	__u64 ul_packets, ul_bytes, dl_packets, dl_bytes;	/* summed over bearers */
};
int snapshot_read(struct pgwu_snapshot *s);
/* fib_gen[1]: the tgid of the registered `pgwu watch`, 0 when there is none */
__u64 fib_watcher_read(int fib_gen_fd);
/* fib_gen[slot] (PGWU_REG_*): the tgid of the registered helper, 0 when there is none */
__u64 helper_read(int fib_gen_fd, __u32 slot);
/* Run the pinned program prog (watch_register, reasm_register) on this process: it registers
 * itself in its slot. *tgid: the tgid registered. Returns 0 or -errno. */
int helper_register(int prog_fd, __u32 *tgid);
void stdio_to_devnull(void);
/* reasm_stats (enum pgwu_reasm_stat) into out, and the registered reassembler's tgid; zeros when
 * the map is missing. Returns 0 or -errno. */
int reasm_stats_read(__u64 out[PGWU_RA_MAX], __u64 *pid);
void snapshot_free(struct pgwu_snapshot *s);

/* Formatting */
const char *ip_str(__u32 addr, char buf[16]);
const char *mac_str(const __u8 mac[6], char buf[18]);
int mask_len(__u32 mask);		/* prefix length, -1 if not contiguous */
void json_str(FILE *f, const char *s);

/* Sort (key << 32 | payload) values by key, stable: LSD radix sort on the upper 32 bits. */
int radix_sort_hi32(__u64 *a, size_t n);

#endif /* PGWU_CLI_H */
