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
#include "pgwu_cli.h"
#include "pfcp_msg.h"

#define RESP_MAX 1024		/* our largest answer: an association response with a 255-octet FQDN */
#define MAX_ASSOC 64

/* A CP's association (pfcp_node.c) */
struct assoc {
	bool used;
	struct pfcp_node_id id;
	__u32 rts;		/* the CP's Recovery Time Stamp */
	__u32 sessions;
	struct sockaddr_in peer;	/* where its Association Setup Request came from */
	/* path supervision (--heartbeat): our Heartbeat Request in flight, intervals unanswered */
	bool hb_wait;
	__u32 hb_seq, hb_missed;
};

/* A session (pfcp_session.c): its bearer, the rules it was set up with, the downlink's state */
#define S_USED 1
#define S_URR 2
#define S_QER 4
#define S_DL_QER 8	/* the downlink PDR refers to the QER: its QFI marks downlink G-PDUs */

struct sess {
	__u64 up_seid, cp_seid;
	__u32 teid, ue, sgw, sgw_teid;	/* network order */
	__u32 ul_far, dl_far, urr_id, qer_id, ur_seqn;
	__u32 dl_flags;		/* the downlink half's PGWU_B_QFI and QFI (5G N3), or 0; kept
				 * while the downlink FAR buffers, for the half it installs */
	__u64 mbr_ul, mbr_dl;
	__u64 dl_packets, dl_bytes;	/* usage of downlink halves removed while the session lives */
	__u16 ul_pdr, dl_pdr;
	__u16 assoc;
	__u8 flags, gate;
	bool dl_on;		/* the downlink half is installed (its FAR forwards) */
	bool has_sgw;		/* sgw/sgw_teid known (an Outer Header Creation was received) */
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
 * The agent's state: one per process, made by do_pfcp and passed to every function as `a`. Only
 * the agent's thread touches it (the exporter reads the counters through pfcp_stats, not here).
 */
struct pfcp_agent {
	struct pgwu_maps m;
	int sock, lock_fd, stats_fd;
	__u64 *stats;
	__u32 local_addr;	/* GTP-U address (config map), network order */
	__u32 n4_addr;		/* our address in F-SEIDs */
	struct pfcp_node_id node_id;
	__u32 rts;		/* our Recovery Time Stamp */
	struct assoc assoc[MAX_ASSOC];
	struct sess *sess;
	__u32 *free_idx;
	__u32 n_free, max_sess, n_sess, gen;
	__u32 next_teid;	/* host order: the next CHOOSE candidate */
	struct rcache_ent *rcache;
	__u32 *ue_tab;		/* UE address -> session index + 1: open addressing, linear probing */
	__u32 ue_mask;
	__u32 hb_interval;	/* seconds between our Heartbeat Requests, 0: none */
	__u32 seq;		/* sequence number of our last request */
	const struct sockaddr_in *peer;	/* the current request's sender */
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
 * of the node messages; our Heartbeat Requests, every --heartbeat seconds. */
int assoc_find(struct pfcp_agent *a, const struct pfcp_node_id *id);
void assoc_count(struct pfcp_agent *a);
void on_heartbeat(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w);
void on_heartbeat_resp(struct pfcp_agent *a, const struct pfcp_msg *m);
void on_assoc_setup(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w);
void on_assoc_update_release(struct pfcp_agent *a, const struct pfcp_msg *m,
			     struct pfcp_w *w);
void heartbeat_tick(struct pfcp_agent *a);

/* pfcp_session_handlers.c: the handlers of the session messages */
void on_sess_est(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w);
void on_sess_mod(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w);
void on_sess_del(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w);

/* pfcp_session.c: the session with this UE address (or NULL); a new session's UE address
 * indexed; the session with this UP SEID (or NULL); a session and its bearer deleted (0 or
 * -errno; *b: its last usage, when b is not NULL); an association's sessions deleted; a free TEID
 * for an F-TEID with CHOOSE (network order, 0: none). */
struct sess *ue_find(struct pfcp_agent *a, __u32 ue);
void ue_insert(struct pfcp_agent *a, __u32 ue, __u32 idx);
struct sess *sess_find(struct pfcp_agent *a, __u64 seid);
int sess_delete(struct pfcp_agent *a, struct sess *s, struct bearer *b);
void assoc_drop_sessions(struct pfcp_agent *a, int ai);
__u32 teid_alloc(struct pfcp_agent *a);

/* pfcp_answer.c: a rejection into r (Cause and Offending IE, or Cause and Failed Rule ID); the
 * IEs written: r's Cause (with what goes with it), our Recovery Time Stamp, a session's final
 * usage report. */
void reject(struct reply *r, __u8 cause, __u16 offending);
void reject_rule(struct reply *r, __u8 cause, __u8 type, __u32 id);
void w_cause(struct pfcp_w *w, const struct reply *r);
void w_rts(struct pfcp_agent *a, struct pfcp_w *w);
void w_usage_report(struct pfcp_w *w, struct sess *s, const struct bearer *b);

/* pfcp_rcache.c: the cache (calloc'ed, NULL when out of memory); the answer already sent to a
 * retransmitted request (copied into out: its length, or 0); an answer kept for retransmissions. */
struct rcache_ent *rcache_alloc(void);
size_t rcache_answer(struct pfcp_agent *a, const struct sockaddr_in *peer,
		     const struct pfcp_msg *m, __u8 *out);
void rcache_keep(struct pfcp_agent *a, const struct sockaddr_in *peer,
		 const struct pfcp_msg *m, const __u8 *ans, size_t len);

#endif /* PFCP_AGENT_H */
