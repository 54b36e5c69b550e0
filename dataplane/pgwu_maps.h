/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * pgwu_maps.h: the maps layer of pgwu's commands (pgwu_maps.c): the objects pinned in PIN_DIR, the
 * writers' lock, the slot index, table dumps, the bearer table joined from its two halves, and the
 * snapshot that stats and metrics report.
 * Byte order: addresses and TEIDs in maps and in struct bearer are network order, except
 * bearer.teid/sgw_teid (host order, for printing and sorting).
 */
#ifndef PGWU_MAPS_H
#define PGWU_MAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <linux/types.h>
#include "pgwu.h"
#include "pgwu_sdf.h"

extern const char *pin_dir;	/* PIN_DIR: --pin-dir, $PGWU_PIN_DIR or the default (pgwu.c) */

/* Pinned objects */
int pin_path(char *buf, size_t len, const char *name);
int pinned_open(const char *name);		/* fd, or -errno after printing why */
int pinned_open_opt(const char *name);		/* fd, or -1 when absent (an older load), silent */
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
	int dl6;	/* dl6_bearers: UE /64 -> downlink half (IPv6) */
	int ul6;	/* ul6_prefix: local TEID -> UE /64 */
	struct sdf_maps sdf;	/* sdf_lists, sdf_pdrs, sdf_qos (pgwu_sdf.h) */
	/* the IPv6 slot index (pgwu.h): dl6_slots, mmap()ed, nslots entries as the others; the
	 * uplink's is in ul_slots (teid6, state6, u6) */
	int dl6_slots_fd;
	struct pgwu_dl6_slot *dl6_slots;
	int peers6;	/* n3v6_peers: the IPv6 peers (N3 over IPv6) bearers name by index */
};

/*
 * N3 over IPv6 (n3v6_peers, include/n3v6.h): the index of the IPv6 peer addr (16 octets), an
 * existing entry's, else (alloc) the first free one, filled: 0, -ENOENT (not there, !alloc),
 * -ENOSPC (all PGWU_N3V6_PEERS in use), -errno. The caller holds the PIN_DIR lock to alloc.
 * Entries are never emptied while pgwu is loaded (peers are few: gNBs, SGWs).
 * n3v6_peer_get: the address of index idx (all zero: none).
 */
int n3v6_peer_find(const struct pgwu_maps *m, const __u8 *addr, bool alloc, __u32 *idx);
int n3v6_peer_get(const struct pgwu_maps *m, __u32 idx, __u8 *addr);

/* The slot holding this bearer (key network order), or NULL. */
struct pgwu_ul_slot *slot_ul(const struct pgwu_maps *m, __u32 teid);
struct pgwu_dl_slot *slot_dl(const struct pgwu_maps *m, __u32 ue);
/* Index a bearer that is in the hash maps (if its slot is free); empty its slot (if it has one). */
void slot_ul_set(const struct pgwu_maps *m, __u32 teid, const struct pgwu_ul_bearer *v);
void slot_dl_set(const struct pgwu_maps *m, __u32 ue, const struct pgwu_dl_bearer *v);
void slot_ul_clear(const struct pgwu_maps *m, __u32 teid);
void slot_dl_clear(const struct pgwu_maps *m, __u32 ue);
void slots_clear_all(const struct pgwu_maps *m);
/* The same for the IPv6 halves: the TEID's IPv6 uplink (ul_slots' second entry) and the /64's
 * downlink half (dl6_slots). slot_ul6_set: the prefix, counters from 0. */
struct pgwu_ul_slot *slot_ul6(const struct pgwu_maps *m, __u32 teid);
struct pgwu_dl6_slot *slot_dl6(const struct pgwu_maps *m, __u64 ue6);
void slot_ul6_set(const struct pgwu_maps *m, __u32 teid, __u64 ue6);
void slot_dl6_set(const struct pgwu_maps *m, __u64 ue6, const struct pgwu_dl_bearer *v);
void slot_ul6_clear(const struct pgwu_maps *m, __u32 teid);
void slot_dl6_clear(const struct pgwu_maps *m, __u64 ue6);
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
	__u32 sgw;		/* network order; with PGWU_B_PEER6 in flags its n3v6_peers index */
	__u8 sgw6[16];		/* with PGWU_B_PEER6: the IPv6 peer's address */
	__u32 sgw_teid;		/* host order */
	__u32 flags;		/* PGWU_B_* of the downlink half */
	__u32 ul_flags;		/* PGWU_B_QFI and the QFI of the uplink half */
	bool has_ul, has_dl;	/* false: a half-installed bearer (only while pgwu writes it) */
	bool has_ue6;		/* ue6 is the bearer's IPv6 /64 (ul6_prefix) */
	__u64 ue6;		/* the /64, its 8 octets in network order (dl6_bearers' key) */
	__u64 dl6_packets, dl6_bytes;	/* downlink IPv6 usage (dl6_bearers), also in dl_* */
	__u64 ul6_packets, ul6_bytes;	/* uplink IPv6 usage (ul6_prefix), also in ul_* */
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
/* reasm_stats (enum pgwu_reasm_stat) into out, and the registered reassembler's tgid; zeros when
 * the map is missing. Returns 0 or -errno. */
int reasm_stats_read(__u64 out[PGWU_RA_MAX], __u64 *pid);
void snapshot_free(struct pgwu_snapshot *s);

/* sock_stats (pgwu_sock.h) copied into *words (malloc'ed, PGWU_SOCK_WORDS of them); NULL when no
 * `pgwu socket` ran on this PIN_DIR, or one of another layout. *running: the pid in its header is
 * a live pgwu. Returns 0 or -errno. */
int sock_stats_read(__u64 **words, bool *running);
bool pid_is_pgwu(__u64 pid);

/* Sort (key << 32 | payload) values by key, stable: LSD radix sort on the upper 32 bits. */
int radix_sort_hi32(__u64 *a, size_t n);

#endif /* PGWU_MAPS_H */
