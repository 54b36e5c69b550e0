// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pfcp_node.c: the node procedures of `pgwu pfcp` (TS 29.244 6.2): association setup, update and
 * release, heartbeats (answered, and ours to each CP with --heartbeat: path supervision), and what
 * a CP's new Recovery Time Stamp means (it restarted: its sessions are deleted).
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include "pfcp_agent.h"

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

/* The association whose CP sends from this address and port, or -1 */
static int assoc_by_peer(struct pfcp_agent *a, const struct sockaddr_in *peer)
{
	for (int i = 0; i < MAX_ASSOC; i++)
		if (a->assoc[i].used && a->assoc[i].peer.sin_addr.s_addr == peer->sin_addr.s_addr &&
		    a->assoc[i].peer.sin_port == peer->sin_port)
			return i;
	return -1;
}

/* A Recovery Time Stamp from an associated CP: another one than at setup means it restarted and
 * lost its sessions, so they are deleted here too (TS 29.244 6.2.2). */
static void check_peer_rts(struct pfcp_agent *a, int ai, __u32 rts)
{
	if (ai < 0 || a->assoc[ai].rts == rts)
		return;
	fprintf(stderr, "pgwu pfcp: CP %s restarted (recovery time stamp %u -> %u): deleting its "
		"%u sessions\n", inet_ntoa(a->assoc[ai].peer.sin_addr), a->assoc[ai].rts, rts,
		a->assoc[ai].sessions);
	assoc_drop_sessions(a, ai);
	a->assoc[ai].rts = rts;
}

void on_heartbeat(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w)
{
	if (m->present & PFCP_P_RTS)
		check_peer_rts(a, assoc_by_peer(a, a->peer), m->recovery_ts);
	pfcp_w_hdr(w, PFCP_HEARTBEAT_RESP, false, 0, m->h.seq);
	w_rts(a, w);
	stat_add(a, PFCP_STAT_TX(PFCP_HEARTBEAT_RESP, 0), 1);
}

/* A CP's answer to our Heartbeat Request (heartbeat_tick): the path is up again. */
void on_heartbeat_resp(struct pfcp_agent *a, const struct pfcp_msg *m)
{
	int ai = assoc_by_peer(a, a->peer);

	if (ai >= 0 && a->assoc[ai].hb_wait && a->assoc[ai].hb_seq == m->h.seq) {
		a->assoc[ai].hb_wait = false;
		a->assoc[ai].hb_missed = 0;
		if (m->present & PFCP_P_RTS)
			check_peer_rts(a, ai, m->recovery_ts);
	}
}

void on_assoc_setup(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w)
{
	struct reply r = { .cause = m->cause, .offending = m->offending_ie };
	int ai = -1;

	if (r.cause == PFCP_CAUSE_ACCEPTED) {
		ai = assoc_find(a, &m->node_id);
		if (ai >= 0 && a->assoc[ai].rts != m->recovery_ts) {
			/* the CP restarted: its old sessions are gone on its side (TS 29.244 6.2.6) */
			assoc_drop_sessions(a, ai);
		}
		if (ai < 0) {
			for (ai = 0; ai < MAX_ASSOC && a->assoc[ai].used; ai++)
				;
			if (ai == MAX_ASSOC)
				reject(&r, PFCP_CAUSE_NO_RESOURCES, 0);
		}
	}
	if (r.cause == PFCP_CAUSE_ACCEPTED) {
		a->assoc[ai].used = true;
		a->assoc[ai].id = m->node_id;
		a->assoc[ai].rts = m->recovery_ts;
		a->assoc[ai].peer = *a->peer;
		a->assoc[ai].hb_wait = false;
		a->assoc[ai].hb_missed = 0;
		assoc_count(a);
	}
	pfcp_w_hdr(w, PFCP_ASSOC_SETUP_RESP, false, 0, m->h.seq);
	pfcp_w_node_id(w, &a->node_id);
	w_cause(w, &r);
	w_rts(a, w);
	if (r.cause == PFCP_CAUSE_ACCEPTED) {
		__u8 ff[2] = { PFCP_UPFF_FTUP, 0 };

		pfcp_w_ie(w, PFCP_IE_UP_FUNCTION_FEATURES, ff, sizeof(ff));
	}
	stat_add(a, PFCP_STAT_TX(PFCP_ASSOC_SETUP_RESP, r.cause), 1);
}

void on_assoc_update_release(struct pfcp_agent *a, const struct pfcp_msg *m,
			     struct pfcp_w *w)
{
	struct reply r = { .cause = m->cause, .offending = m->offending_ie };
	__u8 type = m->h.type + 1;
	int ai;

	if (r.cause == PFCP_CAUSE_ACCEPTED) {
		ai = assoc_find(a, &m->node_id);
		if (ai < 0) {
			reject(&r, PFCP_CAUSE_NO_ASSOCIATION, 0);
		} else if (m->h.type == PFCP_ASSOC_RELEASE_REQ) {
			/* the UP deletes the association's sessions locally (TS 29.244 6.2.8) */
			assoc_drop_sessions(a, ai);
			if (a->assoc[ai].sessions)
				reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
			else
				memset(&a->assoc[ai], 0, sizeof(a->assoc[ai]));
			assoc_count(a);
		}
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
