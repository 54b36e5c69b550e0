/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * pfcp_shared.h: what `pgwu pfcp` (the agent, its only writer) shares with the commands that read
 * what it publishes (`pgwu metrics`, `pgwu session`): the restart policies, its statistics array,
 * its peers' records and the names of its pinned maps.
 */
#ifndef PFCP_SHARED_H
#define PFCP_SHARED_H

#include <linux/types.h>

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

#endif /* PFCP_SHARED_H */
