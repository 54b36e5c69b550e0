// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pfcp_usage.c: usage reporting (TS 29.244 5.2.2): what a session's URRs measured, in the usage
 * reports of a Session Report Request (7.5.8: periodic, volume threshold, volume quota, time
 * threshold), of a Session Modification Response (Query URR, PFCPSMReq-Flags QAURR: 7.5.5) and of a
 * Session Deletion Response (7.5.7).
 *
 * What is measured: the bearer's own counters (pgwu.h: packets forwarded and the octets of their
 * inner IPv4 packets, per direction; a URR counts the directions of the PDRs that link it). A
 * packet the data path dropped (gate, MBR, quota, anything) is in none of them. Each report carries
 * the usage since the URR's last report and the measurement goes on from there: struct urr_state
 * keeps how much of the bearer's counters the URR has reported, and every report adds what it
 * carried, so the reports of a URR add up to the bearer's counters, whatever each one took.
 *
 * Reporting on its own: a session whose URRs ask for PERIO, VOLTH, TIMTH or VOLQU is on the watch
 * list; every USAGE_TICK_MS the agent reads those bearers' counters and their qos entry and sends a
 * Session Report Request per URR whose trigger fired, to the CP's association address, with Report
 * Type USAR. The quota is enforced by the data path, to the octet (pfcp_qos.c). The volume
 * threshold of the session's first URR with one is measured by the data path too (struct
 * pgwu_volth): the packet that reaches it records the usage at it, so the VOLTH report carries
 * exactly that (the rest since is the next measurement's); every other report of that URR takes
 * the data path's count (qos_ctl TAKE_ALL), so its measurement restarts where the report's ends.
 * A second URR's threshold is checked against the counters every tick (seen up to USAGE_TICK_MS
 * late). A CP's Session Report Response is counted, not waited for: a lost report is not sent
 * again.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include "pfcp_agent.h"

#define NTP_UNIX_OFFSET 2208988800ULL

/* Usage Report Trigger (8.2.41) octets 5-7 */
static const __u8 UR_PERIO[3] = { 0x01, 0, 0 };
static const __u8 UR_VOLTH[3] = { 0x02, 0, 0 };
static const __u8 UR_TIMTH[3] = { 0x04, 0, 0 };
static const __u8 UR_IMMER[3] = { 0x80, 0, 0 };
static const __u8 UR_VOLQU[3] = { 0, 0x01, 0 };
static const __u8 UR_TERMR[3] = { 0, 0x08, 0 };

static __u64 wall_ntp(void)
{
	return (__u64)time(NULL) + NTP_UNIX_OFFSET;
}

static void urr_dirs(const struct sess_rules *r, __u32 id, bool *ul, bool *dl)
{
	*ul = *dl = false;
	for (int d = 0; d < 2; d++)
		for (int i = 0; i < r->pdr[d].n_urr; i++)
			if (r->pdr[d].urr[i] == id)
				*(d == PGWU_PFCP_UPLINK ? ul : dl) = true;
}

/* The session's bearer usage now (IPv4 and IPv6, each direction), with what its removed
 * downlink halves counted */
static int sess_usage(struct pfcp_agent *a, const struct sess *s, struct bearer *b)
{
	int err = bearer_get(&a->m, s->teid, s->ue, true, b);

	if (err)
		return err;
	if (!b->has_dl) {
		/* no IPv4 downlink half (buffering, or an IPv6-only session): its IPv6 one's only
		 * (bearer_get adds dl6_bearers' usage to dl_*, 0 when there is none) */
		b->dl_packets = b->dl6_packets;
		b->dl_bytes = b->dl6_bytes;
	}
	b->dl_packets += s->dl_packets;
	b->dl_bytes += s->dl_bytes;
	if (s->r && s->r->sdf_dirs)
		sdf_read(a, s->r);
	if (s->r)
		cp2up_read(a, s);
	return 0;
}

/* Octets total, UL, DL, then packets total, UL, DL, of UL packets, UL octets, DL packets, DL octets */
static void vol_of(const __u64 n[4], __u64 v[6])
{
	v[0] = n[1] + n[3];
	v[1] = n[1];
	v[2] = n[3];
	v[3] = n[0] + n[2];
	v[4] = n[0];
	v[5] = n[2];
}

static __u64 since(__u64 now, __u64 then)
{
	/* the data path's count of a packet can be taken before a removed downlink half's
	 * counters are read back (bearer_set_dl): 0 until the counters catch up, never a wrap */
	return now > then ? now - then : 0;
}

/* URR u's usage since its last report by the bearer's counters: UL packets, UL octets, DL
 * packets, DL octets */
static void urr_since(const struct sess *s, int u, const struct bearer *b, __u64 n[4])
{
	const struct urr_state *st = &s->r->st[u];
	bool ul, dl;

	__u64 c[4] = { b->ul_packets, b->ul_bytes, b->dl_packets, b->dl_bytes };
	__u32 id = s->r->urr[u].id;

	urr_dirs(s->r, id, &ul, &dl);
	/* a direction classified by SDF filters: the counters of its PDRs that link the URR (the
	 * default PDR's included), not the bearer's, which count all of them */
	for (int d = 0; d < 2; d++) {
		bool any = false;

		if (!(s->r->sdf_dirs & (1U << d)))
			continue;
		/* what its removed PDRs counted, and the bearer's counters before the direction
		 * was classified (a modification's first SDF PDR there) */
		c[2 * d] = st->gone[2 * d];
		c[2 * d + 1] = st->gone[2 * d + 1];
		any = st->gone[2 * d] || st->gone[2 * d + 1];
		for (int i = 0; i < s->r->n_sdf; i++) {
			const struct sdf_ent *e = &s->r->sdf[i];

			if (e->dir != d)
				continue;
			for (int k = 0; k < e->links.n_urr; k++)
				if (e->links.urr[k] == id) {
					c[2 * d] += e->packets;
					c[2 * d + 1] += e->bytes;
					any = true;
					break;
				}
		}
		*(d == PGWU_PFCP_UPLINK ? &ul : &dl) = any;
	}
	/* the CP2UP PDR's relayed T-PDUs: towards the UE, downlink */
	for (int k = 0; k < s->r->cp2up.n_urr; k++)
		if (s->r->cp2up.urr[k] == id) {
			c[2] += s->r->cp2up_packets;
			c[3] += s->r->cp2up_bytes;
			dl = true;
		}
	n[0] = ul ? since(c[0], st->ul_packets) : 0;
	n[1] = ul ? since(c[1], st->ul_bytes) : 0;
	n[2] = dl ? since(c[2], st->dl_packets) : 0;
	n[3] = dl ? since(c[3], st->dl_bytes) : 0;
}

/* The same as a Volume Measurement: octets total, UL, DL, then packets total, UL, DL */
static void urr_usage(const struct sess *s, int u, const struct bearer *b, __u64 v[6])
{
	__u64 n[4];

	urr_since(s, u, b, n);
	vol_of(n, v);
}

/* One Usage Report IE (ie: 78 modification, 79 deletion, 80 report request) of URR u carrying v
 * (a Volume Measurement's six values), then the URR measures from there: what it reported is
 * added to what it has reported (struct urr_state) */
static void w_report_urr(struct pfcp_agent *a, struct pfcp_w *w, __u16 ie, struct pgwu_urr *urr,
			 struct urr_state *st, __u64 start_ms, const __u64 v[6], const __u8 trig[3])
{
	__u64 now_wall = wall_ntp(), since_ms = st->since_ms ? st->since_ms : start_ms;
	size_t g;

	g = pfcp_w_group_begin(w, ie);
	pfcp_w_u32(w, PFCP_IE_URR_ID, urr->id);
	pfcp_w_u32(w, PFCP_IE_UR_SEQN, urr->ur_seqn++);
	pfcp_w_ie(w, PFCP_IE_USAGE_REPORT_TRIGGER, trig, 3);
	if (st->since_wall)
		pfcp_w_u32(w, PFCP_IE_START_TIME, (__u32)st->since_wall);
	pfcp_w_u32(w, PFCP_IE_END_TIME, (__u32)now_wall);
	if (urr->method & PFCP_MM_VOLUM) {
		__u8 vol[1 + 6 * 8];

		vol[0] = 0x3f;	/* TOVOL ULVOL DLVOL TONOP ULNOP DLNOP */
		for (int i = 0; i < 6; i++)
			for (int k = 0; k < 8; k++)
				vol[1 + i * 8 + k] = v[i] >> (56 - 8 * k);
		pfcp_w_ie(w, PFCP_IE_VOLUME_MEASUREMENT, vol, sizeof(vol));
	}
	if (urr->method & PFCP_MM_DURAT)
		pfcp_w_u32(w, PFCP_IE_DURATION_MEASUREMENT,
			   (__u32)((a->now_ms - since_ms) / 1000));
	pfcp_w_group_end(w, g);
	st->ul_bytes += v[1];
	st->dl_bytes += v[2];
	st->ul_packets += v[4];
	st->dl_packets += v[5];
	st->since_ms = a->now_ms;
	st->since_wall = now_wall;
	st->traffic_ms = 0;
}

static void w_report(struct pfcp_agent *a, struct pfcp_w *w, __u16 ie, struct sess *s, int u,
		     const __u64 v[6], const __u8 trig[3])
{
	w_report_urr(a, w, ie, &s->r->urr[u], &s->r->st[u], s->start_ms, v, trig);
}

int usage_now(struct pfcp_agent *a, struct sess *s, struct bearer *b)
{
	return sess_usage(a, s, b);
}

void usage_of_urr(const struct sess *s, int u, const struct bearer *b, __u64 v[6])
{
	urr_usage(s, u, b, v);
}

void w_removed_report(struct pfcp_agent *a, struct pfcp_w *w, struct pgwu_urr *urr,
		      struct urr_state *st, __u64 start_ms, const __u64 v[6])
{
	w_report_urr(a, w, PFCP_IE_USAGE_REPORT_SMR, urr, st, start_ms, v, UR_TERMR);
}

__u64 usage_wall_ntp(void)
{
	return wall_ntp();
}

static void watch_compact(struct pfcp_agent *a)
{
	__u32 keep = 0;

	for (__u32 i = 0; i < a->n_watch; i++) {
		struct sess *s = sess_find(a, a->watch[i]);

		if (s && s->watched && s->r)
			a->watch[keep++] = a->watch[i];
	}
	a->n_watch = keep;
}

void usage_watch(struct pfcp_agent *a, struct sess *s)
{
	bool watch = false;

	if (!s->r)
		return;
	for (int u = 0; u < s->r->n_urr; u++) {
		struct pgwu_urr *urr = &s->r->urr[u];
		struct urr_state *st = &s->r->st[u];

		if (!st->since_ms) {
			st->since_ms = a->now_ms;
			st->since_wall = wall_ntp() - (a->now_ms - s->start_ms) / 1000;
		}
		if (urr->period && !st->next_period_ms)
			st->next_period_ms = st->since_ms + (__u64)urr->period * 1000;
		watch |= !!(urr->triggers & RT_WATCHED);
	}
	if (watch && !s->watched && a->watch && a->n_watch == a->max_sess)
		watch_compact(a);	/* churn faster than the tick: drop the deleted sessions */
	if (watch && !s->watched && a->watch && a->n_watch < a->max_sess) {
		a->watch[a->n_watch++] = s->up_seid;
		s->watched = true;
	}
}

static void report_send(struct pfcp_agent *a, struct sess *s, int u, const __u64 v[6],
			const __u8 trig[3])
{
	const struct sockaddr_in *to = &a->assoc[s->assoc].peer;
	__u8 buf[RESP_MAX], rt = 0x02;	/* Report Type: USAR */
	struct pfcp_w w;
	int len;

	pfcp_w_init(&w, buf, sizeof(buf));
	a->seq = (a->seq + 1) & 0xffffff;
	pfcp_w_hdr(&w, PFCP_SESS_REPORT_REQ, true, s->cp_seid, a->seq);
	pfcp_w_ie(&w, PFCP_IE_REPORT_TYPE, &rt, 1);
	w_report(a, &w, PFCP_IE_USAGE_REPORT_SRR, s, u, v, trig);
	len = pfcp_w_finish(&w);
	if (len <= 0 || sendto(a->sock, buf, len, 0, (const struct sockaddr *)to, sizeof(*to)) != len)
		return;		/* UDP: as lost as a datagram the network drops */
	stat_add(a, PFCP_STAT_REPORTS, 1);
	stat_add(a, PFCP_STAT_TX(PFCP_SESS_REPORT_REQ, 0), 1);
}

static bool over(const __u64 v[6], __u8 flags, const __u64 lim[3])
{
	return ((flags & PFCP_VOL_TOVOL) && v[0] >= lim[0]) ||
	       ((flags & PFCP_VOL_ULVOL) && v[1] >= lim[1]) ||
	       ((flags & PFCP_VOL_DLVOL) && v[2] >= lim[2]);
}

/* The URR whose volume threshold the data path measures, by the entry q (index, or -1) */
static int dp_urr(const struct sess *s, const struct pgwu_qos *q)
{
	if (!(q->flags & PGWU_QOS_VOLTH))
		return -1;
	for (int u = 0; u < s->r->n_urr; u++)
		if (s->r->urr[u].id == q->th.urr_id)
			return u;
	return -1;
}

/*
 * URR u, whose threshold the data path measures, reports. The crossings it recorded first, when
 * crossed (the entry said so): a Session Report Request each, VOLTH, with the usage at the
 * crossing. Then, when trig, everything counted since, the data path's measurement restarting:
 * as a Session Report Request, or into w (a modification's answer) when w. Returns how many VOLTH
 * reports went, or -errno when the data path could not be asked for trig's (nothing taken for it:
 * the caller reports from the counters). What is taken and not reported is not lost: a report
 * adds to what the URR has reported only what it carried, the rest is in the next one.
 */
#define DP_TAKES_MAX 4		/* crossings taken in a row: one recorded late follows at once */

/* qos_take on URR u's entry: sdf_urr's when its PDRs are SDF halves' (in_sdf), else the bearer's */
static int dp_take(struct pfcp_agent *a, const struct sess *s, int u, __u32 op, struct pgwu_qos *q,
		   __u32 *after)
{
	if (s->r->st[u].in_sdf)
		return urr_take(a, s->teid, s->r->urr[u].id, op | PGWU_QOS_CTL_URR, q, after);
	return qos_take(a, s->teid, op, q, after);
}

/* The flags of the sdf_urr entry of each URR of SDF PDRs (0 for the others), its crossing
 * reported first when it has one (crossed[u]: a VOLTH report went) */
static void sdf_urr_crossings(struct pfcp_agent *a, struct sess *s, __u32 fl[], bool crossed[]);

static int dp_report(struct pfcp_agent *a, struct sess *s, int u, bool crossed,
		     const __u8 *trig, struct pfcp_w *w)
{
	__u32 after = crossed ? PGWU_QOS_VOLTH_CROSSED : 0;
	struct pgwu_qos q;
	__u64 v[6];
	int err, n = 0;

	while (n < DP_TAKES_MAX && (after & PGWU_QOS_VOLTH_CROSSED)) {
		if (dp_take(a, s, u, PGWU_QOS_CTL_TAKE_CROSSING, &q, &after) ||
		    !(q.flags & PGWU_QOS_VOLTH_CROSSED))
			break;
		vol_of(q.th.at, v);
		report_send(a, s, u, v, UR_VOLTH);
		n++;
	}
	if (!trig)
		return n;
	err = dp_take(a, s, u, PGWU_QOS_CTL_TAKE_ALL, &q, &after);
	if (err)
		return err;
	if (q.flags & PGWU_QOS_VOLTH_CROSSED) {	/* crossed since the entry was read */
		vol_of(q.th.at, v);
		report_send(a, s, u, v, UR_VOLTH);
		n++;
	}
	vol_of(q.th.now, v);
	if (w)
		w_report(a, w, PFCP_IE_USAGE_REPORT_SMR, s, u, v, trig);
	else
		report_send(a, s, u, v, trig);
	return n;
}

static void sdf_urr_crossings(struct pfcp_agent *a, struct sess *s, __u32 fl[], bool crossed[])
{
	struct pgwu_qos q;

	for (int u = 0; u < s->r->n_urr; u++) {
		fl[u] = 0;
		crossed[u] = false;
		if (!s->r->st[u].in_sdf || urr_read(a, s->teid, s->r->urr[u].id, &q))
			continue;
		fl[u] = q.flags;
		if (q.flags & PGWU_QOS_VOLTH_CROSSED)
			crossed[u] = dp_report(a, s, u, true, NULL, NULL) > 0;
	}
}

void usage_crossing(struct pfcp_agent *a, struct sess *s)
{
	__u32 fl[PGWU_PFCP_MAX_RULES];
	bool crossed[PGWU_PFCP_MAX_RULES];
	struct pgwu_qos q;
	int u;

	if (!s->r)
		return;
	sdf_urr_crossings(a, s, fl, crossed);
	if (qos_read(a, s->teid, &q) || !(q.flags & PGWU_QOS_VOLTH_CROSSED))
		return;
	u = dp_urr(s, &q);
	if (u >= 0)
		dp_report(a, s, u, true, NULL, NULL);
}

void usage_since(struct pfcp_agent *a, struct sess *s, __u32 urr_id, __u64 out[4])
{
	struct bearer b;

	memset(out, 0, 4 * sizeof(out[0]));
	if (!s->r || sess_usage(a, s, &b))
		return;
	for (int u = 0; u < s->r->n_urr; u++)
		if (s->r->urr[u].id == urr_id)
			urr_since(s, u, &b, out);
}

static void usage_check(struct pfcp_agent *a, struct sess *s)
{
	__u32 fl[PGWU_PFCP_MAX_RULES];
	bool sdf_crossed[PGWU_PFCP_MAX_RULES];
	struct pgwu_qos q;
	struct bearer b;
	bool have_q, exhausted, crossed = false;
	int dpu;

	have_q = !qos_read(a, s->teid, &q);
	exhausted = have_q && (q.flags & PGWU_QOS_EXHAUSTED);
	dpu = have_q ? dp_urr(s, &q) : -1;
	/* a crossing first: its report takes the usage up to it, what follows is measured on */
	if (dpu >= 0 && (q.flags & PGWU_QOS_VOLTH_CROSSED))
		crossed = dp_report(a, s, dpu, true, NULL, NULL) > 0;
	sdf_urr_crossings(a, s, fl, sdf_crossed);
	if (sess_usage(a, s, &b))
		return;
	for (int u = 0; u < s->r->n_urr; u++) {
		struct pgwu_urr *urr = &s->r->urr[u];
		struct urr_state *st = &s->r->st[u];
		const __u8 *trig = NULL;
		/* the data path measures its threshold (its report: dp_report), holds its quota */
		bool dp = st->in_sdf ? !!(fl[u] & PGWU_QOS_VOLTH) : u == dpu;
		bool ex = st->in_sdf ? !!(fl[u] & PGWU_QOS_EXHAUSTED) : exhausted;
		bool cr = st->in_sdf ? sdf_crossed[u] : crossed && u == dpu;
		__u64 v[6];

		urr_usage(s, u, &b, v);
		if (!st->traffic_ms && v[3])
			st->traffic_ms = a->now_ms;	/* seen within USAGE_TICK_MS of the first packet */
		if ((urr->triggers & RT_VOLQU) && (urr->flags & PGWU_URR_VOL_QUOTA) && ex &&
		    !st->quota_reported) {
			trig = UR_VOLQU;
			st->quota_reported = true;
		} else if (cr) {
			/* a VOLTH report went this tick: no other but the quota's */
		} else if (!dp && (urr->triggers & RT_VOLTH) &&
			   (urr->flags & PGWU_URR_VOL_THRESH) &&
			   over(v, urr->vol_thresh_flags, urr->vol_thresh)) {
			trig = UR_VOLTH;
		} else if ((urr->triggers & RT_TIMTH) && (urr->flags & PGWU_URR_TIME_THRESH) &&
			   urr->time_threshold && st->traffic_ms &&
			   a->now_ms - st->traffic_ms >= (__u64)urr->time_threshold * 1000) {
			trig = UR_TIMTH;
		} else if ((urr->triggers & RT_PERIO) && urr->period && st->next_period_ms &&
			   a->now_ms >= st->next_period_ms) {
			trig = UR_PERIO;
		}
		if (urr->period && st->next_period_ms && a->now_ms >= st->next_period_ms) {
			/* the period runs on, whatever report went out in it */
			st->next_period_ms += (__u64)urr->period * 1000;
			if (st->next_period_ms <= a->now_ms)
				st->next_period_ms = a->now_ms + (__u64)urr->period * 1000;
		}
		if (trig && (!dp || dp_report(a, s, u, false, trig, NULL) < 0))
			report_send(a, s, u, v, trig);
	}
}

void usage_tick(struct pfcp_agent *a)
{
	__u32 keep = 0;

	for (__u32 i = 0; i < a->n_watch; i++) {
		struct sess *s = sess_find(a, a->watch[i]);

		if (!s || !s->watched || !s->r)
			continue;	/* deleted (its slot may hold another session now) */
		a->watch[keep++] = a->watch[i];
		usage_check(a, s);
	}
	a->n_watch = keep;
}

void w_query_reports(struct pfcp_agent *a, struct pfcp_w *w, struct sess *s,
		     const struct pfcp_msg *m)
{
	__u32 fl[PGWU_PFCP_MAX_RULES];
	bool sdf_crossed[PGWU_PFCP_MAX_RULES];
	struct pgwu_qos q;
	struct bearer b;
	int dpu;

	if (!s->r || sess_usage(a, s, &b))
		return;
	dpu = qos_read(a, s->teid, &q) ? -1 : dp_urr(s, &q);
	if (dpu >= 0 && (q.flags & PGWU_QOS_VOLTH_CROSSED)) {
		/* a crossing goes out on its own whether or not this URR is asked */
		dp_report(a, s, dpu, true, NULL, NULL);
	}
	sdf_urr_crossings(a, s, fl, sdf_crossed);	/* the same, of SDF PDRs' URRs */
	for (int u = 0; u < s->r->n_urr; u++) {
		bool asked = m->smreq & PFCP_SMREQ_QAURR;
		bool dp = s->r->st[u].in_sdf ? !!(fl[u] & PGWU_QOS_VOLTH) : u == dpu;
		__u64 v[6];

		for (int i = 0; i < m->n_query_urr && !asked; i++)
			asked = m->query_urr[i] == s->r->urr[u].id;
		if (!asked || (dp && dp_report(a, s, u, false, UR_IMMER, w) >= 0))
			continue;
		urr_usage(s, u, &b, v);
		w_report(a, w, PFCP_IE_USAGE_REPORT_SMR, s, u, v, UR_IMMER);
	}
}

void w_usage_reports(struct pfcp_agent *a, struct pfcp_w *w, struct sess *s,
		     const struct bearer *b)
{
	if (!s->r)
		return;
	for (int u = 0; u < s->r->n_urr; u++) {
		__u64 v[6];

		urr_usage(s, u, b, v);
		w_report(a, w, PFCP_IE_USAGE_REPORT_SDR, s, u, v, UR_TERMR);
	}
}
