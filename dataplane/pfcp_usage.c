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
 * the usage since the URR's last report (struct urr_state keeps the counters then) and the
 * measurement goes on from there: the reports of a URR add up to the bearer's counters.
 *
 * Reporting on its own: a session whose URRs ask for PERIO, VOLTH, TIMTH or VOLQU is on the watch
 * list; every USAGE_TICK_MS the agent reads those bearers' counters (and the quota's state in the
 * qos map) and sends a Session Report Request per URR whose trigger fired, to the CP's association
 * address, with Report Type USAR. A threshold is seen at most USAGE_TICK_MS after it is crossed;
 * the quota itself is enforced by the data path, to the octet (pfcp_qos.c). A CP's Session Report
 * Response is counted, not waited for: a lost report is not sent again.
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

/* Reporting Triggers (8.2.19), as stored: octet 5 in bits 0-7, octet 6 in 8-15 */
#define RT_PERIO (1U << 0)
#define RT_VOLTH (1U << 1)
#define RT_TIMTH (1U << 2)
#define RT_VOLQU (1U << 8)
#define RT_WATCHED (RT_PERIO | RT_VOLTH | RT_TIMTH | RT_VOLQU)

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

/* The session's bearer usage now, with what its removed downlink halves counted */
static int sess_usage(struct pfcp_agent *a, const struct sess *s, struct bearer *b)
{
	int err = bearer_get(&a->m, s->teid, s->ue, true, b);

	if (err)
		return err;
	if (!b->has_dl) {
		b->dl_packets = 0;
		b->dl_bytes = 0;
	}
	b->dl_packets += s->dl_packets;
	b->dl_bytes += s->dl_bytes;
	return 0;
}

/* URR u's usage since its last report: octets total, UL, DL, then packets total, UL, DL */
static void urr_usage(const struct sess *s, int u, const struct bearer *b, __u64 v[6])
{
	const struct urr_state *st = &s->r->st[u];
	bool ul, dl;
	__u64 ulb, dlb, ulp, dlp;

	urr_dirs(s->r, s->r->urr[u].id, &ul, &dl);
	ulb = ul ? b->ul_bytes - st->ul_bytes : 0;
	dlb = dl ? b->dl_bytes - st->dl_bytes : 0;
	ulp = ul ? b->ul_packets - st->ul_packets : 0;
	dlp = dl ? b->dl_packets - st->dl_packets : 0;
	v[0] = ulb + dlb;
	v[1] = ulb;
	v[2] = dlb;
	v[3] = ulp + dlp;
	v[4] = ulp;
	v[5] = dlp;
}

/* One Usage Report IE (ie: 78 modification, 79 deletion, 80 report request) of URR u, then
 * the URR measures from here */
static void w_report(struct pfcp_agent *a, struct pfcp_w *w, __u16 ie, struct sess *s, int u,
		     const struct bearer *b, const __u8 trig[3])
{
	struct pgwu_urr *urr = &s->r->urr[u];
	struct urr_state *st = &s->r->st[u];
	__u64 now_wall = wall_ntp(), since_ms = st->since_ms ? st->since_ms : s->start_ms;
	size_t g;

	g = pfcp_w_group_begin(w, ie);
	pfcp_w_u32(w, PFCP_IE_URR_ID, urr->id);
	pfcp_w_u32(w, PFCP_IE_UR_SEQN, urr->ur_seqn++);
	pfcp_w_ie(w, PFCP_IE_USAGE_REPORT_TRIGGER, trig, 3);
	if (st->since_wall)
		pfcp_w_u32(w, PFCP_IE_START_TIME, (__u32)st->since_wall);
	pfcp_w_u32(w, PFCP_IE_END_TIME, (__u32)now_wall);
	if (urr->method & PFCP_MM_VOLUM) {
		__u64 v[6];
		__u8 vol[1 + 6 * 8];

		urr_usage(s, u, b, v);
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
	st->ul_packets = b->ul_packets;
	st->ul_bytes = b->ul_bytes;
	st->dl_packets = b->dl_packets;
	st->dl_bytes = b->dl_bytes;
	st->since_ms = a->now_ms;
	st->since_wall = now_wall;
	st->traffic_ms = 0;
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

static void report_send(struct pfcp_agent *a, struct sess *s, int u, const struct bearer *b,
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
	w_report(a, &w, PFCP_IE_USAGE_REPORT_SRR, s, u, b, trig);
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

static void usage_check(struct pfcp_agent *a, struct sess *s)
{
	struct pgwu_qos q;
	struct bearer b;
	bool exhausted;

	if (sess_usage(a, s, &b))
		return;
	exhausted = !qos_read(a, s->teid, &q) && (q.flags & PGWU_QOS_EXHAUSTED);
	for (int u = 0; u < s->r->n_urr; u++) {
		struct pgwu_urr *urr = &s->r->urr[u];
		struct urr_state *st = &s->r->st[u];
		const __u8 *trig = NULL;
		__u64 v[6];

		urr_usage(s, u, &b, v);
		if (!st->traffic_ms && v[3])
			st->traffic_ms = a->now_ms;	/* seen within USAGE_TICK_MS of the first packet */
		if ((urr->triggers & RT_VOLQU) && (urr->flags & PGWU_URR_VOL_QUOTA) && exhausted &&
		    !st->quota_reported) {
			trig = UR_VOLQU;
			st->quota_reported = true;
		} else if ((urr->triggers & RT_VOLTH) && (urr->flags & PGWU_URR_VOL_THRESH) &&
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
		if (trig)
			report_send(a, s, u, &b, trig);
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
	struct bearer b;

	if (!s->r || sess_usage(a, s, &b))
		return;
	for (int u = 0; u < s->r->n_urr; u++) {
		bool asked = m->smreq & PFCP_SMREQ_QAURR;

		for (int i = 0; i < m->n_query_urr && !asked; i++)
			asked = m->query_urr[i] == s->r->urr[u].id;
		if (asked)
			w_report(a, w, PFCP_IE_USAGE_REPORT_SMR, s, u, &b, UR_IMMER);
	}
}

void w_usage_reports(struct pfcp_agent *a, struct pfcp_w *w, struct sess *s,
		     const struct bearer *b)
{
	if (!s->r)
		return;
	for (int u = 0; u < s->r->n_urr; u++)
		w_report(a, w, PFCP_IE_USAGE_REPORT_SDR, s, u, b, UR_TERMR);
}
