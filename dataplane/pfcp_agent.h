/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * pfcp_agent.h: what the files of `pgwu pfcp`, the PFCP agent, share: its state (struct
 * pfcp_agent, one per process, passed to every function as `a`), the association and session
 * records, and each file's functions for the others. The files, by job (as eUPF splits
 * pfcp_connection / pfcp_handlers / pfcp_session_handlers / session):
 *   pgwu_pfcp.c               the command: options, setup and teardown, the socket and its
 *                             loop, the dispatch (message type -> handler), the counters' map
 *   pfcp_node.c               node procedures: association setup/update/release, heartbeats
 *                             (answered, and ours with --heartbeat), a CP's restart
 *   pfcp_session_handlers.c   session establishment (validate into a plan, then apply),
 *                             modification, deletion
 *   pfcp_session.c            the sessions: their table, the UE index, F-TEID allocation,
 *                             deleting a session's bearer
 *   pfcp_gtpu.c               the GTP-U packets the agent sends: End Markers
 *   pfcp_qos.c                a session's qos map entry (gate, MBR, quota) for the data path
 *   pfcp_answer.c             building answers: Cause, Offending IE, Failed Rule ID, Recovery
 *                             Time Stamp, usage reports
 *   pfcp_rcache.c             the answers kept for retransmitted requests
 *   pfcp_msg.c                the messages: the bounded decoder and the encoder (also fuzzed)
 */
#ifndef PFCP_AGENT_H
#define PFCP_AGENT_H

#include <stdbool.h>
#include <netinet/in.h>
#include <linux/types.h>
#include "pgwu_maps.h"
#include "pgwu_bearers.h"
#include "pfcp_shared.h"
#include "pfcp_msg.h"

#define RESP_MAX 1024		/* our largest answer: a deletion with 8 usage reports (~680 octets)
				 * or an association response with a 255-octet FQDN */
#define MAX_ASSOC PFCP_MAX_PEERS
#define LOG_INTERVAL_MS 60000	/* rate-limited stderr lines: one per peer (or kind) per minute */
#define RTS_AHEAD_MAX_S 60	/* a CP's Recovery Time Stamp further ahead of our clock is not acted
				 * on: kept in force, it would make the CP's real restart "older" */

/* One stderr line per interval for a kind of event (of a peer, or of all): pass() says whether
 * this one may be logged and how many were held back since the last line. */
struct ratelimit {
	__u64 next_ms;
	__u32 held;
};

/* A CP's association (pfcp_node.c): its Node ID and the address and port its Association Setup
 * Request came from; one per Node ID and one per address and port. The slot outlives a release
 * (state released) so the peer's counters stay in pfcp_peers; it is reused for the same Node ID,
 * or when every slot is taken. */
struct assoc {
	bool used;		/* associated */
	bool seen;		/* the slot holds a peer (associated or released) */
	struct pfcp_node_id id;
	__u32 rts;		/* the CP's Recovery Time Stamp in force (at setup, or its restart) */
	__u32 seen_rts;		/* the last one it sent, in force or not */
	__u32 sessions;
	struct sockaddr_in peer;	/* where its Association Setup Request came from: the
					 * address and port its session requests, releases and
					 * heartbeats must come from */
	__u64 since_ms;		/* when it was set up or released (slot reuse: oldest first) */
	/* path supervision (--heartbeat): our Heartbeat Request in flight, intervals unanswered */
	bool hb_wait;
	__u32 hb_seq, hb_missed;
	struct ratelimit rl_restart;
};

/*
 * A session's rules as the CP gave them (pfcp_session.c), NULL in struct sess when it has no QER
 * or URR: one allocation holding the QERs, the URRs and each PDR's links to them (the model
 * pgwu.h describes; published in pfcp_sessions and pfcp_rules).
 */
/* What a URR has measured up to its last report (pfcp_usage.c): a report carries the usage since */
struct urr_state {
	__u64 ul_packets, ul_bytes, dl_packets, dl_bytes;	/* how much of the bearer's counters
								 * its reports carried, in all */
	__u64 since_ms;		/* CLOCK_MONOTONIC of the last report (0: the session's start) */
	__u64 since_wall;	/* its wall clock, NTP seconds (Start Time of the next report) */
	__u64 next_period_ms;	/* Measurement Period: when the next periodic report is due */
	__u64 traffic_ms;	/* CLOCK_MONOTONIC of the first packet seen since the last report (0: none);
				 * the Time Threshold is traffic duration (TS 29.244 8.2.14) */
	bool quota_reported;	/* the quota's exhaustion was reported */
	bool in_sdf;		/* its threshold/quota is sdf_urr's entry {TEID, its ID}: PDRs of
				 * SDF halves link it (PGWU_SDF_P_URR), not the bearer's qos */
	/* in a direction classified by SDF filters (UL packets, UL octets, DL packets, DL octets):
	 * what the PDRs a modification removed counted for it, and the bearer's counters when a
	 * modification's first SDF PDR made its default PDR's usage a filter's */
	__u64 gone[4];
};

/*
 * A PDR of a direction classified by SDF filters (pfcp_session_handlers.c): the direction's
 * default PDR and each PDR with SDF filters, installed in sdf_lists / sdf_pdrs / sdf_qos
 * (pgwu_sdf.h) under rule. Its usage is its sdf_pdrs counters (read by sdf_read; at deletion the
 * last values, read once its halves are gone).
 */
struct sdf_ent {
	__u16 pdr_id;
	__u8 dir;		/* PGWU_PFCP_UPLINK, PGWU_PFCP_DOWNLINK */
	__u32 rule;		/* key of sdf_pdrs and sdf_qos */
	__u32 precedence;	/* its place in the list (a modification merges new PDRs in) */
	struct pgwu_pfcp_pdr links;	/* its FAR, QER IDs, URR IDs */
	__u64 packets, bytes;
};

struct sess_rules {
	__u8 n_qer, n_urr;
	__u8 n_sdf;		/* entries in sdf */
	__u8 sdf_dirs;		/* 1 << direction: that direction's halves have PGWU_B_SDF */
	struct urr_state st[PGWU_PFCP_MAX_RULES];	/* of urr[i] */
	struct pgwu_pfcp_pdr pdr[2];	/* PGWU_PFCP_UPLINK, PGWU_PFCP_DOWNLINK */
	struct pgwu_qer *qer;		/* n_qer, in this allocation */
	struct pgwu_urr *urr;		/* n_urr, in this allocation */
	struct sdf_ent *sdf;		/* n_sdf, in this allocation */
	/* the CP2UP PDR's links (its URRs count its relayed T-PDUs as downlink usage: the
	 * cp_relay entry of its tunnel, read into cp2up_packets/bytes with the other counters) */
	struct pgwu_pfcp_pdr cp2up;
	__u64 cp2up_packets, cp2up_bytes;
};

/* A session (pfcp_session.c): its bearer, the rules it was set up with, the downlink's state */
#define S_USED 1

struct sess {
	__u64 up_seid, cp_seid;
	__u32 cp_addr;		/* the CP F-SEID's IPv4 address (network order; 0: IPv6 only) */
	__u32 teid, ue, sgw, sgw_teid;	/* network order; ue 0: an IPv6-only session */
	__u64 ue6;		/* the UE's /64 (has_ue6): its 8 octets in network order */
	__u32 ul_far, dl_far;
	__u32 dl_flags;		/* the downlink half's PGWU_B_QFI and QFI (5G N3), or 0; kept
				 * while the downlink FAR buffers, for the half it installs */
	__u32 owner;		/* the tag in its bearer halves' flags (PGWU_B_OWNER_SHIFT) */
	__u64 dl_packets, dl_bytes;	/* usage of downlink halves removed while the session lives */
	__u64 start_ms;		/* when it was established (CLOCK_MONOTONIC) */
	struct sess_rules *r;
	__u16 ul_pdr, dl_pdr;
	__u32 prec[2];		/* the default PDRs' precedence (PGWU_PFCP_UPLINK, _DOWNLINK) */
	__u16 assoc;
	__u8 flags;
	__u8 dl_apply;		/* the downlink FAR's Apply Action */
	bool dl_on;		/* the downlink half is installed (its FAR forwards) */
	bool has_sgw;		/* sgw/sgw_teid usable (a GTP-U/UDP/IPv4 Outer Header Creation
				 * with a host address and a TEID was received) */
	bool ohc_placeholder;	/* an Outer Header Creation was received that is not usable
				 * (a non-forwarding FAR's placeholder, e.g. TEID 0 / 0.0.0.0) */
	bool dl_dst_ok;		/* the downlink FAR's Destination Interface is Access (or none) */
	bool watched;		/* in the agent's usage watch list (pfcp_usage.c) */
	bool has_ue6;		/* the UE IP Address had V6: the bearer has ue6 (ul6_prefix, and
				 * dl6_bearers while dl_on) */
	__u32 cp2up_teid;	/* the CP2UP PDR's tunnel (PGWU_B_CP2UP, network order), 0: none */
};

/* What an answer says (pfcp_answer.c): its Cause, and why a request was refused */
struct reply {
	__u8 cause;
	__u16 offending;
	bool has_failed_rule;
	__u8 rule_type;
	__u32 rule_id;
};

struct rcache_ent;	/* pfcp_rcache.c */

/*
 * Writes to pfcp_sessions / pfcp_rules waiting for the end of the batch (pfcp_session.c): one
 * batch update and one batch delete per map then, instead of a syscall per message. A session has
 * at most one operation pending (a second one flushes first), so updates and deletes commute.
 */
#define PUB_SESS 128
#define PUB_RULES (PUB_SESS * 2 * PGWU_PFCP_MAX_RULES)

struct pub_pending {
	__u32 n_upd, n_del, n_rupd, n_rdel;
	__u32 upd_key[PUB_SESS], del_key[PUB_SESS];
	struct pgwu_pfcp_sess upd_val[PUB_SESS];
	struct pgwu_pfcp_rule_key rupd_key[PUB_RULES], rdel_key[PUB_RULES];
	struct pgwu_pfcp_rule rupd_val[PUB_RULES];
};

/* An open-addressing index of sessions (linear probing, no tombstones): slot -> index + 1 */
struct sess_index {
	__u32 *tab;
	__u32 mask;
};

/*
 * The agent's state: one per process, made by do_pfcp and passed to every function as `a`. Only
 * the agent's thread touches it (the exporter reads the counters through pfcp_stats, not here).
 */
/* An address pool of pfcp_ueip.c (--ue-pool / --ue-pool6): candidates base .. base + n - 1 (an
 * IPv4 address or the upper 64 bits of a /64, host order), the next choice tried from next */
struct ue_pool {
	bool set;
	__u8 len;
	__u64 base, n, next;
};

/* what ueip_choose chose for a request: an IPv4 address (network order), a /64 (wire octets) */
struct ueip_chosen {
	bool v4, v6;
	__u32 ipv4;
	__u64 ue6;
};

struct pfcp_agent {
	struct pgwu_maps m;
	int sock, lock_fd, stats_fd, peers_fd, sess_fd, rules_fd;
	int qos_fd;		/* the data path's qos map (pgwu.h) */
	int qos_ctl_fd;		/* the data path's qos_ctl program (pgwu.h struct pgwu_qos_ctl) */
	int sdf_urr_fd;		/* sdf_urr: the thresholds/quotas of URRs of SDF PDRs (maps.h) */
	int raw_fd;		/* raw IPv4 socket for End Markers (pfcp_gtpu.c), -1: none */
	int raw_fd6;		/* raw IPv6 socket for End Markers to IPv6 peers (n3_addr6), -1: none */
	__u32 mbr_burst_ms;	/* --mbr-burst-ms: a policer's depth, in time at its MBR */
	__u64 *stats;
	struct pfcp_peer_rec *peers;	/* pfcp_peers, mmap()ed */
	__u32 local_addr;	/* GTP-U address (config map), network order */
	__u8 n3_addr6[16];	/* N3 IPv6 address (config map's n3_addr6): F-TEIDs with V6 */
	bool has_n3_6;		/* n3_addr6 is set: N3 over IPv6 (F-TEID V6, OHC/OHR IPv6) taken */
	__u32 n4_addr;		/* our address in F-SEIDs */
	struct pfcp_node_id node_id;
	__u32 rts;		/* our Recovery Time Stamp */
	struct assoc assoc[MAX_ASSOC];
	struct sess *sess;
	__u32 *free_idx;
	__u32 n_free, max_sess, n_sess, gen;
	__u64 n_qer, n_urr;	/* rules stored, over all sessions */
	__u32 next_teid;	/* host order: the next CHOOSE candidate */
	struct rcache_ent *rcache;
	__u64 rc_key[2];	/* SipHash key of the cache's request digests (random) */
	__u64 rc_window_ms;	/* how long an answer serves retransmissions: T1 x (N1 + 1) */
	struct sess_index ue_idx;	/* UE IPv4 address -> session (those with one) */
	struct sess_index ue6_idx;	/* UE /64 -> session (those with one) */
	struct sess_index fseid_idx;	/* (association, CP F-SEID SEID and IPv4) -> session */
	__u32 hb_interval;	/* seconds between our Heartbeat Requests, 0: none */
	__u32 seq;		/* sequence number of our last request */
	enum pfcp_restart_policy restart_policy;
	bool allow_cp_move;
	__u64 now_ms;		/* CLOCK_MONOTONIC, read once per batch */
	__u64 *watch;		/* UP SEIDs of sessions whose URRs report on their own (usage_tick) */
	__u32 n_watch;
	struct ratelimit rl_not_owner, rl_node_id, rl_publish, rl_kept;
	struct ratelimit rl_ueip, rl_ueip_full, rl_prefix;	/* CHV refused, a pool used up, a prefix */
	struct ue_pool pool4, pool6;	/* --ue-pool, --ue-pool6: addresses the UP chooses */
	struct pub_pending pub;
	__u8 *pub_mark;		/* per session index: an operation is pending in pub */
	const struct sockaddr_in *peer;	/* the current request's sender */
	const __u8 *req;	/* the current request's bytes (msg_len of them) */
	struct pfcp_msg msg;
};

/* Counters for `pgwu metrics` (pgwu_cli.h: PFCP_STAT_*) */
static inline void stat_add(struct pfcp_agent *a, __u32 i, __u64 v)
{
	if (a->stats && i < PFCP_STAT_N)
		a->stats[i] += v;
}

static inline void stat_set(struct pfcp_agent *a, __u32 i, __u64 v)
{
	if (a->stats && i < PFCP_STAT_N)
		__atomic_store_n(&a->stats[i], v, __ATOMIC_RELAXED);
}

/* pfcp_node.c: the association with this Node ID (or -1); the associations gauge; the handlers
 * of the node messages; our Heartbeat Requests, every --heartbeat seconds; whether a message from
 * this peer may act for association ai (its address and port); a rate-limited line may be
 * written now (*held: lines held back since the last); an association's record in pfcp_peers. */
int assoc_find(struct pfcp_agent *a, const struct pfcp_node_id *id);
void assoc_count(struct pfcp_agent *a);
void on_heartbeat(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w);
void on_heartbeat_resp(struct pfcp_agent *a, const struct pfcp_msg *m);
void on_assoc_setup(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w);
void on_assoc_update_release(struct pfcp_agent *a, const struct pfcp_msg *m,
			     struct pfcp_w *w);
void heartbeat_tick(struct pfcp_agent *a);
bool assoc_owns(const struct pfcp_agent *a, int ai, const struct sockaddr_in *peer);
bool ratelimit_pass(struct pfcp_agent *a, struct ratelimit *rl, __u32 *held);
void peer_publish(struct pfcp_agent *a, int ai);
const char *node_id_str(const struct pfcp_node_id *id, char *buf, size_t len);

/* pfcp_ueip.c: the pools (0 or -EUSAGE, one line printed); whether a request has CHV4/CHV6; its
 * copy with them resolved (false: r says why not, 73 or 79); a Created PDR's UE IP Address */
struct pgwu_config;
int ueip_pool4_set(struct pfcp_agent *a, __u32 addr, __u32 mask, const struct pgwu_config *c);
int ueip_pool6_set(struct pfcp_agent *a, const char *arg);
bool ueip_wanted(const struct pfcp_msg *m);
bool ueip_choose(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_msg *out,
		 struct ueip_chosen *ch, struct reply *r);
void ueip_w_created(struct pfcp_w *w, const struct pfcp_pdr *asked, const struct ueip_chosen *ch);

/* pfcp_session_handlers.c: the handlers of the session messages */
void on_sess_est(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w);
void on_sess_mod(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w);
void on_sess_del(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w);

/* pfcp_session.c: the session with this UE IPv4 address / UE /64 / CP F-SEID in association ai (or NULL); a
 * new session indexed by both; the session with this UP SEID (or NULL); a session and the bearer
 * halves it owns deleted (0 or -errno; *b: their last usage, *rules: its rules, each when not
 * NULL); an association's sessions deleted (how many), or published again (its CP's address or
 * port changed); a free TEID for an F-TEID with CHOOSE (network order, 0: none); the owner tag of
 * a new session; a session's record written to (or removed from) pfcp_sessions and pfcp_rules (at
 * the end of the batch: sess_publish_flush); the rules gauges. */
struct sess *ue_find(struct pfcp_agent *a, __u32 ue);
struct sess *ue6_find(struct pfcp_agent *a, __u64 ue6);
struct sess *fseid_find(struct pfcp_agent *a, int ai, __u64 seid, __u32 addr);
void sess_index_add(struct pfcp_agent *a, __u32 idx);
struct sess *sess_find(struct pfcp_agent *a, __u64 seid);
int sess_delete(struct pfcp_agent *a, struct sess *s, struct bearer *b,
		struct sess_rules **rules);
__u32 assoc_drop_sessions(struct pfcp_agent *a, int ai);
void assoc_republish(struct pfcp_agent *a, int ai);
__u32 teid_alloc(struct pfcp_agent *a);
__u32 owner_tag(__u32 gen);
void sess_publish(struct pfcp_agent *a, const struct sess *s);
/* a QER or URR (PGWU_PFCP_RULE_*) a modification removed, queued for removal from pfcp_rules */
void sess_unpublish_rule(struct pfcp_agent *a, const struct sess *s, __u8 kind, __u32 id);
/* a session's SDF PDRs' counters (sdf_pdrs) into its struct sdf_ent; its lists and rules removed */
void sdf_read(struct pfcp_agent *a, struct sess_rules *r);
void sdf_drop(struct pfcp_agent *a, const struct sess *s);
/* the CP2UP tunnel's usage (cp_relay) into s->r->cp2up_packets/bytes, when a URR counts it */
void cp2up_read(struct pfcp_agent *a, const struct sess *s);
void sess_publish_flush(struct pfcp_agent *a);
void rules_count(struct pfcp_agent *a);
int sess_index_alloc(struct pfcp_agent *a);
void sess_index_free(struct pfcp_agent *a);

/* pfcp_qos.c: the qos entry of a session's PDR links, QERs and URRs; the URR whose volume
 * threshold the data path measures (index in urr, or -1); the entry written for a new session's
 * TEID (-EEXIST: one is there), rewritten in one step (keeping the policers' state, the quota left
 * when keep_quota, the threshold's count), removed, read; the threshold's crossing or all its
 * count taken (op PGWU_QOS_CTL_TAKE_*: *out as it was, *after its flags after). */
void qos_of(const struct pfcp_agent *a, const struct pgwu_pfcp_pdr pdr[2],
	    const struct pgwu_qer *qer, int n_qer, const struct pgwu_urr *urr, int n_urr,
	    struct pgwu_qos *out);
int volth_urr(const struct pgwu_pfcp_pdr pdr[2], const struct pgwu_urr *urr, int n_urr);
int qos_install(struct pfcp_agent *a, __u32 teid, const struct pgwu_qos *q);
int qos_update(struct pfcp_agent *a, __u32 teid, const struct pgwu_qos *q, bool keep_quota);
void qos_remove(struct pfcp_agent *a, __u32 teid);
int qos_read(struct pfcp_agent *a, __u32 teid, struct pgwu_qos *q);
int qos_take(struct pfcp_agent *a, __u32 teid, __u32 op, struct pgwu_qos *out, __u32 *after);
/* The same for a URR of SDF PDRs (urr_state.in_sdf): its sdf_urr entry {teid, URR ID}, written
 * (for the directions dirs, 1 << PGWU_PFCP_*), removed, read, taken from (op with
 * PGWU_QOS_CTL_URR). urr_in_dp: the URR has a threshold or a quota the data path counts. */
int urr_install(struct pfcp_agent *a, __u32 teid, const struct pgwu_urr *u, __u32 dirs);
void urr_remove(struct pfcp_agent *a, __u32 teid, __u32 urr_id);
void sdf_urrs_remove(struct pfcp_agent *a, __u32 teid, const struct sess_rules *sr);	/* all */
int urr_read(struct pfcp_agent *a, __u32 teid, __u32 urr_id, struct pgwu_qos *q);
int urr_take(struct pfcp_agent *a, __u32 teid, __u32 urr_id, __u32 op, struct pgwu_qos *out,
	     __u32 *after);
bool urr_in_dp(const struct pgwu_urr *u);

/* pfcp_gtpu.c: the raw socket; an End Marker to a peer's TEID (network order; qfi -1: no PDU
 * Session Container), sent once every data path run that may use the old tunnel is over. */
int gtpu_open(struct pfcp_agent *a, const char *netns);
void gtpu_close(struct pfcp_agent *a);
int end_marker_send(struct pfcp_agent *a, __u32 peer, __u32 teid, int qfi);
/* the same to an IPv6 peer (16 octets), from n3_addr6 through the raw IPv6 socket */
int end_marker_send6(struct pfcp_agent *a, const __u8 *peer, __u32 teid, int qfi);

/* pfcp_usage.c: usage reporting. A session whose URRs have triggers the agent acts on (periodic,
 * volume threshold, volume quota, time threshold) joins the watch list; usage_tick() (every
 * USAGE_TICK_MS) sends a Session Report Request when one fires; w_query_reports writes the usage
 * reports a modification asks for (Query URR, QAURR); w_usage_reports the final ones. Each report
 * carries the usage since the URR's last report, then counts from there. usage_crossing sends the
 * VOLTH report of a threshold crossing the data path recorded and the agent has not reported yet
 * (before the qos entry changes or goes); usage_since gives a URR's usage since its last report
 * (UL packets, UL octets, DL packets, DL octets: where a threshold the data path starts
 * measuring starts from). */
#define USAGE_TICK_MS 100
/* Reporting Triggers (8.2.19), as stored: octet 5 in bits 0-7, octet 6 in 8-15 */
#define RT_PERIO (1U << 0)
#define RT_VOLTH (1U << 1)
#define RT_TIMTH (1U << 2)
#define RT_VOLQU (1U << 8)
#define RT_WATCHED (RT_PERIO | RT_VOLTH | RT_TIMTH | RT_VOLQU)
void usage_watch(struct pfcp_agent *a, struct sess *s);
void usage_tick(struct pfcp_agent *a);
void usage_crossing(struct pfcp_agent *a, struct sess *s);
void usage_since(struct pfcp_agent *a, struct sess *s, __u32 urr_id, __u64 out[4]);
void w_query_reports(struct pfcp_agent *a, struct pfcp_w *w, struct sess *s,
		     const struct pfcp_msg *m);
void w_usage_reports(struct pfcp_agent *a, struct pfcp_w *w, struct sess *s,
		     const struct bearer *b);
/* For a modification that removes URRs (TS 29.244 7.5.5.2: a removed URR's final report):
 * the session's usage now (its SDF PDRs' counters read into s->r); URR u's usage since its last
 * report (a Volume Measurement's six values); the report (trigger TERMR) of a URR no longer in
 * the session; NTP seconds now. */
int usage_now(struct pfcp_agent *a, struct sess *s, struct bearer *b);
void usage_of_urr(const struct sess *s, int u, const struct bearer *b, __u64 v[6]);
void w_removed_report(struct pfcp_agent *a, struct pfcp_w *w, struct pgwu_urr *urr,
		      struct urr_state *st, __u64 start_ms, const __u64 v[6]);
__u64 usage_wall_ntp(void);

/* pfcp_answer.c: a rejection into r (Cause and Offending IE, or Cause and Failed Rule ID); the
 * IEs written: r's Cause (with what goes with it), our Recovery Time Stamp, a session's final
 * usage reports (one per URR). */
void reject(struct reply *r, __u8 cause, __u16 offending);
void reject_rule(struct reply *r, __u8 cause, __u8 type, __u32 id);
void w_cause(struct pfcp_w *w, const struct reply *r);
void w_rts(struct pfcp_agent *a, struct pfcp_w *w);

/* pfcp_rcache.c: the cache (NULL when out of memory) and its release; the answer already sent
 * to a retransmission of the current request (a->peer, a->req: same peer, sequence number,
 * type and bytes, within the window), copied into out: its length, or 0; an answer kept for
 * retransmissions; every answer kept for a peer (address and port) dropped. */
struct rcache_ent *rcache_alloc(void);
void rcache_free(struct rcache_ent *rc);
size_t rcache_answer(struct pfcp_agent *a, const struct pfcp_msg *m, __u8 *out);
void rcache_keep(struct pfcp_agent *a, const struct pfcp_msg *m, const __u8 *ans, size_t len);
void rcache_flush_peer(struct pfcp_agent *a, const struct sockaddr_in *peer);

#endif /* PFCP_AGENT_H */
