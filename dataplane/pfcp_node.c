// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pfcp_node.c: the node procedures of `pgwu pfcp` (TS 29.244 6.2): association setup, update and
 * release, heartbeats (answered, and ours to each CP with --heartbeat: path supervision), what a
 * CP's newer Recovery Time Stamp means (--restart-policy), and who may speak for an association.
 *
 * A peer is its association: the Node ID and the address and port its Association Setup Request
 * came from (one association per Node ID, one per address and port). Its session requests,
 * updates, releases and heartbeats are taken from that address and port only: anything else on
 * its address (another port, associated or not, another Node ID) is another peer, whose
 * heartbeats are answered and never a restart. A setup naming the Node ID:
 *   from its address and port     the association set up again (the stamp decides, below)
 *   from its address, another     the CP came back on a new socket: a new association replaces
 *   port                          the old one, as at a restart, whatever the stamp (sessions
 *                                 deleted unless --restart-policy keep: never handed to the new
 *                                 port of a CP that did not restart)
 *   from another address          refused (Cause 64) unless --allow-cp-move
 * A setup for a new Node ID from the address and port of an association ends that association
 * (as a release): an address and port speak for one Node ID.
 *
 * A CP restart (TS 29.244 6.2.2 and 6.2.6, restoration in TS 23.007 19A / TS 23.527 4): a
 * Recovery Time Stamp newer than the one in force (an older one is counted and ignored, as
 * open5gs and Cisco's UPF do). What makes one count and what it does is --restart-policy:
 *   delete    (default) newer in a Heartbeat Request/Response or an Association Setup Request:
 *             the CP lost its sessions, so they are deleted here too
 *   on-setup  only an Association Setup Request with a newer one is a restart (then: delete);
 *             newer ones in heartbeats are counted and logged (CPs that put "now" in each)
 *   keep      a restart (as on-setup) deletes nothing
 * Every restart drops the CP's cached answers (pfcp_rcache.c). stderr gets at most one line per
 * peer and kind of event a minute (LOG_INTERVAL_MS), saying how many were held back.
 *
 * A Recovery Time Stamp more than RTS_AHEAD_MAX_S ahead of our clock is not the time the CP
 * started: in force it would make the CP's real restart look older, and be ignored. In a heartbeat
 * it is ignored (answered, counted, logged); an Association Setup Request carrying one is
 * refused, 69 with Offending IE Recovery Time Stamp (nothing changes).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <sys/socket.h>
#include "pfcp_agent.h"

#define NTP_UNIX_OFFSET 2208988800ULL


static bool node_id_eq(const struct pfcp_node_id *a, const struct pfcp_node_id *b)
{
	if (a->type != b->type)
		return false;
	switch (a->type) {
	case PFCP_NODE_IPV4:
		return a->ipv4 == b->ipv4;
	case PFCP_NODE_IPV6:
		return !memcmp(a->ipv6, b->ipv6, 16);
	default:
		return !strcasecmp(a->fqdn, b->fqdn);
	}
}

const char *node_id_str(const struct pfcp_node_id *id, char *buf, size_t len)
{
	if (id->type == PFCP_NODE_IPV4)
		return inet_ntop(AF_INET, &id->ipv4, buf, len) ? buf : "?";
	if (id->type == PFCP_NODE_IPV6)
		return inet_ntop(AF_INET6, id->ipv6, buf, len) ? buf : "?";
	snprintf(buf, len, "%s", id->fqdn);
	return buf;
}

bool ratelimit_pass(struct pfcp_agent *a, struct ratelimit *rl, __u32 *held)
{
	if (a->now_ms < rl->next_ms) {
		rl->held++;
		return false;
	}
	*held = rl->held;
	rl->held = 0;
	rl->next_ms = a->now_ms + LOG_INTERVAL_MS;
	return true;
}

/* " (N more since the last line)" or "" */
static const char *held_str(__u32 held, char *buf, size_t len)
{
	if (!held)
		return "";
	snprintf(buf, len, " (%u more like it since the last line)", held);
	return buf;
}

int assoc_find(struct pfcp_agent *a, const struct pfcp_node_id *id)
{
	for (int i = 0; i < MAX_ASSOC; i++)
		if (a->assoc[i].used && node_id_eq(&a->assoc[i].id, id))
			return i;
	return -1;
}

void assoc_count(struct pfcp_agent *a)
{
	__u64 n = 0;

	for (int i = 0; i < MAX_ASSOC; i++)
		n += a->assoc[i].used;
	stat_set(a, PFCP_STAT_ASSOCIATIONS, n);
}

static bool same_peer(const struct sockaddr_in *x, const struct sockaddr_in *y)
{
	return x->sin_addr.s_addr == y->sin_addr.s_addr && x->sin_port == y->sin_port;
}

bool assoc_owns(const struct pfcp_agent *a, int ai, const struct sockaddr_in *peer)
{
	return ai >= 0 && ai < MAX_ASSOC && a->assoc[ai].used && same_peer(&a->assoc[ai].peer, peer);
}

/* The association set up from peer's address and port (at most one), or -1: the address alone
 * names none (another socket there is another peer) */
static int assoc_by_peer(struct pfcp_agent *a, const struct sockaddr_in *peer)
{
	for (int i = 0; i < MAX_ASSOC; i++)
		if (a->assoc[i].used && same_peer(&a->assoc[i].peer, peer))
			return i;
	return -1;
}

/* How many seconds rts (NTP seconds, modulo 2^32 like the IE) is ahead of our clock; <= 0: not */
static __s32 rts_ahead(__u32 rts)
{
	return (__s32)(rts - (__u32)(time(NULL) + NTP_UNIX_OFFSET));
}

/* The slot for a new association with this Node ID: its own released slot, else a free one,
 * else the released one released longest ago; -1 when every slot is associated. */
static int assoc_slot(struct pfcp_agent *a, const struct pfcp_node_id *id)
{
	int free_slot = -1, oldest = -1;

	for (int i = 0; i < MAX_ASSOC; i++) {
		const struct assoc *as = &a->assoc[i];

		if (as->used)
			continue;
		if (as->seen && node_id_eq(&as->id, id))
			return i;
		if (!as->seen && free_slot < 0)
			free_slot = i;
		if (as->seen && (oldest < 0 || as->since_ms < a->assoc[oldest].since_ms))
			oldest = i;
	}
	return free_slot >= 0 ? free_slot : oldest;
}

void peer_publish(struct pfcp_agent *a, int ai)
{
	const struct assoc *as = &a->assoc[ai];
	struct pfcp_peer_rec *p;

	if (!a->peers || ai < 0 || ai >= MAX_ASSOC)
		return;
	p = &a->peers[ai];
	p->addr = as->peer.sin_addr.s_addr;
	p->port = as->peer.sin_port;
	p->rts = as->rts;
	p->sessions = as->sessions;
	node_id_str(&as->id, p->node_id, sizeof(p->node_id));
	__atomic_store_n(&p->state, as->used ? PFCP_PEER_ASSOCIATED :
			 as->seen ? PFCP_PEER_RELEASED : PFCP_PEER_FREE, __ATOMIC_RELEASE);
}

/* A new occupant of a peer record: its counters start from zero */
static void peer_reset(struct pfcp_agent *a, int ai)
{
	if (a->peers)
		memset(&a->peers[ai], 0, sizeof(a->peers[ai]));
	memset(&a->assoc[ai].rl_restart, 0, sizeof(a->assoc[ai].rl_restart));
}

/*
 * Associated CP ai restarted (its Recovery Time Stamp is now rts; via: what said so): nothing it
 * sent before is its request any more, and its sessions are deleted unless --restart-policy keep.
 */
static void cp_restarted(struct pfcp_agent *a, int ai, __u32 rts, const char *via)
{
	struct assoc *as = &a->assoc[ai];
	struct pfcp_peer_rec dummy = {}, *pr = a->peers ? &a->peers[ai] : &dummy;
	char addr[16], node[PFCP_NODE_ID_MAX], more[64];
	__u32 held, n = 0, old = as->rts;

	inet_ntop(AF_INET, &as->peer.sin_addr, addr, sizeof(addr));
	node_id_str(&as->id, node, sizeof(node));
	rcache_flush_peer(a, &as->peer);
	if (a->restart_policy != PFCP_RESTART_KEEP)
		n = assoc_drop_sessions(a, ai);
	as->rts = as->seen_rts = rts;
	pr->restarts++;
	pr->restart_deleted += n;
	stat_add(a, PFCP_STAT_RESTARTS, 1);
	stat_add(a, PFCP_STAT_RESTART_DELETED, n);
	if (ratelimit_pass(a, &as->rl_restart, &held))
		fprintf(stderr, "pgwu pfcp: CP %s (%s) restarted (recovery time stamp %u -> %u, in "
			"%s): %s %u sessions (--restart-policy %s)%s\n", addr, node, old, rts, via,
			a->restart_policy == PFCP_RESTART_KEEP ? "kept its" : "deleted its",
			a->restart_policy == PFCP_RESTART_KEEP ? as->sessions : n,
			pfcp_restart_policy_names[a->restart_policy], held_str(held, more, sizeof(more)));
	peer_publish(a, ai);
}

/*
 * A Recovery Time Stamp from associated CP ai: in a heartbeat, or (by_setup) in its Association
 * Setup Request. The restart policy (top of this file) decides whether a newer one is a restart
 * and what a restart deletes.
 */
static void check_peer_rts(struct pfcp_agent *a, int ai, __u32 rts, bool by_setup)
{
	struct assoc *as = &a->assoc[ai];
	struct pfcp_peer_rec dummy = {}, *pr = a->peers ? &a->peers[ai] : &dummy;
	char addr[16], node[PFCP_NODE_ID_MAX], more[64];
	const char *via = by_setup ? "an association setup request" : "a heartbeat";
	__u32 held, old = as->rts;
	__s32 ahead;

	if (rts == as->rts)
		return;
	inet_ntop(AF_INET, &as->peer.sin_addr, addr, sizeof(addr));
	node_id_str(&as->id, node, sizeof(node));
	ahead = rts_ahead(rts);
	if (ahead > RTS_AHEAD_MAX_S) {
		/* not when the CP started: in force, it would hide its real restart */
		stat_add(a, PFCP_STAT_RTS_FUTURE, 1);
		if (ratelimit_pass(a, &as->rl_restart, &held))
			fprintf(stderr, "pgwu pfcp: CP %s (%s) sent a recovery time stamp %d s ahead of "
				"our clock (%u; at most %d s) in %s: ignored%s\n", addr, node, ahead, rts,
				RTS_AHEAD_MAX_S, via, held_str(held, more, sizeof(more)));
		return;
	}
	if ((__s32)(rts - as->rts) < 0) {
		/* an older start than the one in force: a stale or confused sender, not a restart */
		pr->rts_older++;
		if (ratelimit_pass(a, &as->rl_restart, &held))
			fprintf(stderr, "pgwu pfcp: CP %s (%s) sent an older recovery time stamp than "
				"the one in force (%u < %u) in %s: ignored%s\n", addr, node, rts, old,
				via, held_str(held, more, sizeof(more)));
		return;
	}
	if (rts != as->seen_rts)
		pr->rts_changes++;
	as->seen_rts = rts;
	if (!by_setup && a->restart_policy != PFCP_RESTART_DELETE) {
		if (ratelimit_pass(a, &as->rl_restart, &held))
			fprintf(stderr, "pgwu pfcp: CP %s (%s) sent a newer recovery time stamp (%u -> "
				"%u) in a heartbeat: not a restart with --restart-policy %s, its %u "
				"sessions kept%s\n", addr, node, old, rts,
				pfcp_restart_policy_names[a->restart_policy], as->sessions,
				held_str(held, more, sizeof(more)));
		return;
	}
	cp_restarted(a, ai, rts, via);
}

void on_heartbeat(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w)
{
	int ai;

	if ((m->present & PFCP_P_RTS) && m->cause == PFCP_CAUSE_ACCEPTED &&
	    (ai = assoc_by_peer(a, a->peer)) >= 0)
		check_peer_rts(a, ai, m->recovery_ts, false);
	pfcp_w_hdr(w, PFCP_HEARTBEAT_RESP, false, 0, m->h.seq);
	w_rts(a, w);
	stat_add(a, PFCP_STAT_TX(PFCP_HEARTBEAT_RESP, 0), 1);
}

/* A CP's answer to our Heartbeat Request (heartbeat_tick): the path is up again. */
void on_heartbeat_resp(struct pfcp_agent *a, const struct pfcp_msg *m)
{
	for (int ai = 0; ai < MAX_ASSOC; ai++) {
		struct assoc *as = &a->assoc[ai];

		if (!as->used || !as->hb_wait || as->hb_seq != m->h.seq ||
		    as->peer.sin_addr.s_addr != a->peer->sin_addr.s_addr ||
		    as->peer.sin_port != a->peer->sin_port)
			continue;
		as->hb_wait = false;
		as->hb_missed = 0;
		if ((m->present & PFCP_P_RTS) && m->cause == PFCP_CAUSE_ACCEPTED)
			check_peer_rts(a, ai, m->recovery_ts, false);
		return;
	}
}

/* Association ai ends (a release, or its address and port now speak for another Node ID): its
 * sessions deleted (TS 29.244 6.2.8), its cached answers dropped. -EBUSY when a session could not
 * be deleted (the association stays). */
static int assoc_end(struct pfcp_agent *a, int ai)
{
	struct assoc *as = &a->assoc[ai];

	assoc_drop_sessions(a, ai);
	if (as->sessions)
		return -EBUSY;
	rcache_flush_peer(a, &as->peer);
	as->used = false;
	as->hb_wait = false;
	as->since_ms = a->now_ms;
	assoc_count(a);
	peer_publish(a, ai);
	return 0;
}

/*
 * Association Setup Request (6.2.6.2.2). A Recovery Time Stamp too far ahead of our clock is
 * refused (69). A new Node ID gets a slot. A Node ID already associated:
 *  - from the same address and port sets the association up again: its Recovery Time Stamp says
 *    whether the CP restarted (check_peer_rts); with the same one its sessions are kept (it did
 *    not restart, they are still its own; 6.2.6.2.2 of Release 16 deletes them unless the request
 *    lists them for retention);
 *  - from the same address and another port is the CP on a new socket: it restarted (whatever its
 *    stamp, which is then the one in force), and the association moves to that port. Its sessions
 *    are deleted unless --restart-policy keep: another socket on the CP's host that names the Node
 *    ID never gets the sessions;
 *  - from another address is refused (64) and logged: another node claiming the Node ID must not
 *    take the association and its sessions over, unless --allow-cp-move says the CP may move (the
 *    association then follows it, sessions and all).
 * An accepted setup from the address and port of another Node ID's association ends that one:
 * one association per address and port.
 */
void on_assoc_setup(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w)
{
	struct reply r = { .cause = m->cause, .offending = m->offending_ie };
	char node[PFCP_NODE_ID_MAX], from[16], at[16], more[64];
	__u32 held;
	bool rehomed = false;	/* the association moved to this address or port */
	__s32 ahead;
	int ai = -1, other;

	if (r.cause != PFCP_CAUSE_ACCEPTED)
		goto out;
	node_id_str(&m->node_id, node, sizeof(node));
	inet_ntop(AF_INET, &a->peer->sin_addr, from, sizeof(from));
	ahead = rts_ahead(m->recovery_ts);
	if (ahead > RTS_AHEAD_MAX_S) {
		reject(&r, PFCP_CAUSE_MANDATORY_IE_INCORRECT, PFCP_IE_RECOVERY_TIME_STAMP);
		stat_add(a, PFCP_STAT_RTS_FUTURE, 1);
		if (ratelimit_pass(a, &a->rl_node_id, &held))
			fprintf(stderr, "pgwu pfcp: refused an association setup from %s:%u for Node ID "
				"%s: its recovery time stamp is %d s ahead of our clock (at most %d s; "
				"are both clocks set?)%s\n", from, ntohs(a->peer->sin_port), node, ahead,
				RTS_AHEAD_MAX_S, held_str(held, more, sizeof(more)));
		goto out;
	}
	ai = assoc_find(a, &m->node_id);
	if (ai >= 0) {
		struct assoc *as = &a->assoc[ai];
		bool moved = as->peer.sin_addr.s_addr != a->peer->sin_addr.s_addr;

		inet_ntop(AF_INET, &as->peer.sin_addr, at, sizeof(at));
		if (moved && !a->allow_cp_move) {
			reject(&r, PFCP_CAUSE_REJECTED, 0);
			stat_add(a, PFCP_STAT_NODE_ID_TAKEN, 1);
			if (ratelimit_pass(a, &a->rl_node_id, &held))
				fprintf(stderr, "pgwu pfcp: refused an association setup from %s for Node "
					"ID %s: associated from %s (--allow-cp-move lets a CP move)%s\n",
					from, node, at, held_str(held, more, sizeof(more)));
			ai = -1;
			goto out;
		}
	}
	other = assoc_by_peer(a, a->peer);
	if (other >= 0 && other != ai) {
		char was[PFCP_NODE_ID_MAX];

		if (ratelimit_pass(a, &a->rl_node_id, &held))
			fprintf(stderr, "pgwu pfcp: association setup from %s:%u for Node ID %s: ends "
				"the association of Node ID %s from there, and its %u sessions%s\n", from,
				ntohs(a->peer->sin_port), node,
				node_id_str(&a->assoc[other].id, was, sizeof(was)),
				a->assoc[other].sessions, held_str(held, more, sizeof(more)));
		if (assoc_end(a, other)) {
			reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
			ai = -1;
			goto out;
		}
	}
	if (ai >= 0) {
		struct assoc *as = &a->assoc[ai];
		bool moved = as->peer.sin_addr.s_addr != a->peer->sin_addr.s_addr;
		bool new_port = !moved && as->peer.sin_port != a->peer->sin_port;

		rehomed = moved || new_port;
		if (moved) {
			stat_add(a, PFCP_STAT_CP_MOVED, 1);
			fprintf(stderr, "pgwu pfcp: CP %s moved from %s to %s (--allow-cp-move): its %u "
				"sessions follow it\n", node, at, from, as->sessions);
			rcache_flush_peer(a, &as->peer);
		}
		if (new_port) {
			struct pfcp_peer_rec dummy = {}, *pr = a->peers ? &a->peers[ai] : &dummy;

			if ((__s32)(m->recovery_ts - as->rts) > 0 && m->recovery_ts != as->seen_rts)
				pr->rts_changes++;
			cp_restarted(a, ai, m->recovery_ts, "an association setup request from a new port");
		} else {
			check_peer_rts(a, ai, m->recovery_ts, true);
		}
	} else {
		ai = assoc_slot(a, &m->node_id);
		if (ai < 0) {
			reject(&r, PFCP_CAUSE_NO_RESOURCES, 0);
			goto out;
		}
		if (!a->assoc[ai].seen || !node_id_eq(&a->assoc[ai].id, &m->node_id))
			peer_reset(a, ai);
		a->assoc[ai].used = true;
		a->assoc[ai].seen = true;
		a->assoc[ai].id = m->node_id;
		a->assoc[ai].rts = a->assoc[ai].seen_rts = m->recovery_ts;
		a->assoc[ai].sessions = 0;
	}
	a->assoc[ai].peer = *a->peer;
	a->assoc[ai].since_ms = a->now_ms;
	a->assoc[ai].hb_wait = false;
	a->assoc[ai].hb_missed = 0;
	assoc_count(a);
	peer_publish(a, ai);
	if (rehomed)
		assoc_republish(a, ai);	/* the sessions' records name where their CP is */
out:
	pfcp_w_hdr(w, PFCP_ASSOC_SETUP_RESP, false, 0, m->h.seq);
	pfcp_w_node_id(w, &a->node_id);
	w_cause(w, &r);
	w_rts(a, w);
	if (r.cause == PFCP_CAUSE_ACCEPTED) {
		/* UEIP (octet 7) only with a pool to choose from */
		__u8 ff[3] = { PFCP_UPFF_FTUP, 0, PFCP_UPFF3_UEIP };
		bool ueip = a->pool4.set || a->pool6.set;

		pfcp_w_ie(w, PFCP_IE_UP_FUNCTION_FEATURES, ff, ueip ? 3 : 2);
	}
	stat_add(a, PFCP_STAT_TX(PFCP_ASSOC_SETUP_RESP, r.cause), 1);
}

/* Association Update / Release Request: only from the association's address and port (another
 * sender naming its Node ID is answered as one without an association, 72). A release deletes the
 * association's sessions (6.2.8) and its cached answers. */
void on_assoc_update_release(struct pfcp_agent *a, const struct pfcp_msg *m,
			     struct pfcp_w *w)
{
	struct reply r = { .cause = m->cause, .offending = m->offending_ie };
	__u8 type = m->h.type + 1;
	int ai;

	if (r.cause == PFCP_CAUSE_ACCEPTED) {
		ai = assoc_find(a, &m->node_id);
		if (ai >= 0 && !assoc_owns(a, ai, a->peer)) {
			stat_add(a, PFCP_STAT_NOT_OWNER, 1);
			ai = -1;
		}
		if (ai < 0)
			reject(&r, PFCP_CAUSE_NO_ASSOCIATION, 0);
		else if (m->h.type == PFCP_ASSOC_RELEASE_REQ && assoc_end(a, ai))
			reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
	}
	pfcp_w_hdr(w, type, false, 0, m->h.seq);
	pfcp_w_node_id(w, &a->node_id);
	w_cause(w, &r);
	stat_add(a, PFCP_STAT_TX(type, r.cause), 1);
}

/*
 * Path supervision: every --heartbeat seconds a Heartbeat Request to each associated CP. A request
 * still unanswered at the next tick counts as missed (pgwu_pfcp_heartbeats_missed_total) and is
 * replaced by a new one; nothing is torn down (the CP may come back with the same Recovery Time
 * Stamp: its sessions are still valid). Sent outside the PIN_DIR lock.
 */
void heartbeat_tick(struct pfcp_agent *a)
{
	__u8 buf[64];
	struct pfcp_w w;

	for (int i = 0; i < MAX_ASSOC; i++) {
		struct assoc *as = &a->assoc[i];
		int len;

		if (!as->used)
			continue;
		if (as->hb_wait) {
			as->hb_missed++;
			stat_add(a, PFCP_STAT_HB_MISSED, 1);
			if (as->hb_missed == 3)
				fprintf(stderr, "pgwu pfcp: no heartbeat answer from CP %s for 3 intervals\n",
					inet_ntoa(as->peer.sin_addr));
		}
		a->seq = (a->seq + 1) & 0xffffff;
		pfcp_w_init(&w, buf, sizeof(buf));
		pfcp_w_hdr(&w, PFCP_HEARTBEAT_REQ, false, 0, a->seq);
		pfcp_w_u32(&w, PFCP_IE_RECOVERY_TIME_STAMP, a->rts);
		len = pfcp_w_finish(&w);
		if (len > 0 && sendto(a->sock, buf, len, 0, (struct sockaddr *)&as->peer,
				      sizeof(as->peer)) == len) {
			as->hb_wait = true;
			as->hb_seq = a->seq;
			stat_add(a, PFCP_STAT_TX(PFCP_HEARTBEAT_REQ, 0), 1);
		}
	}
}
