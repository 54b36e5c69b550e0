// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pfcp_qos.c: what the data path enforces of a session's rules: its qos map entry (struct
 * pgwu_qos in pgwu.h), keyed by the session's local TEID. From the QERs each PDR applies: the gate
 * of each direction (closed when any of them closes it, TS 29.244 8.2.7) and its MBR (the least of
 * theirs, 8.2.8: one token bucket at the least rate is what passing every QER's bucket comes to
 * for one flow); from the URRs: the volume quota (5.2.2.2, the first URR with one) and the volume
 * threshold (5.2.2.2.1, the first URR with VOLTH and a Volume Threshold: the data path records the
 * usage at the packet that reaches it, pfcp_usage.c reports that). A session with any QER or URR
 * gets the entry before its bearer's halves get PGWU_B_QOS, and loses it after they are gone; a
 * modification rewrites it in one step under the value's lock with the data path's qos_ctl
 * (struct pgwu_qos_ctl in pgwu.h), which keeps a policer's state when its rate and depth did not
 * change (an Update QER that touches the gate hands out no fresh burst), the quota left unless a
 * new one was given, and the threshold's count while the same URR is measured: nothing the data
 * path counts while the entry changes is lost.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <stdio.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include "pfcp_agent.h"

/* MBRs at or above this (1 Tbit/s) are not policed: no link here is that fast, and the bucket's
 * micro-bit arithmetic stays far from overflowing below it */
#define QOS_KBPS_MAX 1000000000ULL

static const struct pgwu_qer *find_qer(const struct pgwu_qer *q, int n, __u32 id)
{
	for (int i = 0; i < n; i++)
		if (q[i].id == id)
			return &q[i];
	return NULL;
}

static bool pdr_has_urr(const struct pgwu_pfcp_pdr *p, __u32 id)
{
	for (int i = 0; i < p->n_urr; i++)
		if (p->urr[i] == id)
			return true;
	return false;
}

/* A bucket for kbps (0: none) and the agent's burst: full, refilled from the first packet on */
static void police_of(const struct pfcp_agent *a, __u64 kbps, struct pgwu_police *p)
{
	memset(p, 0, sizeof(*p));
	if (!kbps || kbps >= QOS_KBPS_MAX)
		return;
	pgwu_police_init(p, kbps, a->mbr_burst_ms);
}

/* The directions whose PDRs link URR id: PGWU_QOS_VOLTH_UL / _DL */
static __u32 volth_dirs(const struct pgwu_pfcp_pdr pdr[2], __u32 id)
{
	return (pdr_has_urr(&pdr[PGWU_PFCP_UPLINK], id) ? PGWU_QOS_VOLTH_UL : 0) |
	       (pdr_has_urr(&pdr[PGWU_PFCP_DOWNLINK], id) ? PGWU_QOS_VOLTH_DL : 0);
}

int volth_urr(const struct pgwu_pfcp_pdr pdr[2], const struct pgwu_urr *urr, int n_urr)
{
	for (int i = 0; i < n_urr; i++) {
		const struct pgwu_urr *u = &urr[i];

		if ((u->triggers & RT_VOLTH) && (u->flags & PGWU_URR_VOL_THRESH) &&
		    (u->vol_thresh_flags & 7) && volth_dirs(pdr, u->id))
			return i;
	}
	return -1;
}

void qos_of(const struct pfcp_agent *a, const struct pgwu_pfcp_pdr pdr[2],
	    const struct pgwu_qer *qer, int n_qer, const struct pgwu_urr *urr, int n_urr,
	    struct pgwu_qos *out)
{
	int i;

	memset(out, 0, sizeof(*out));
	for (int d = 0; d < 2; d++) {
		__u64 kbps = 0;

		for (int i = 0; i < pdr[d].n_qer; i++) {
			const struct pgwu_qer *q = find_qer(qer, n_qer, pdr[d].qer[i]);
			__u64 mbr;

			if (!q)
				continue;
			/* gate: bits 4-3 uplink, 2-1 downlink; 0 open, anything else closed */
			if ((d == PGWU_PFCP_UPLINK ? q->gate >> 2 : q->gate) & 3)
				out->flags |= d == PGWU_PFCP_UPLINK ? PGWU_QOS_UL_CLOSED :
					      PGWU_QOS_DL_CLOSED;
			mbr = d == PGWU_PFCP_UPLINK ? q->mbr_ul : q->mbr_dl;
			if ((q->flags & PGWU_QER_MBR) && mbr && (!kbps || mbr < kbps))
				kbps = mbr;
		}
		police_of(a, kbps, &out->pol[d]);
	}
	for (i = 0; i < n_urr; i++) {
		const struct pgwu_urr *u = &urr[i];
		__u32 dirs = 0;

		if (!(u->flags & PGWU_URR_VOL_QUOTA) || !u->vol_quota_flags)
			continue;
		/* the quota's volume: total (bit 1), else uplink (2) or downlink (4), counted on
		 * the directions whose PDR links the URR */
		if (pdr_has_urr(&pdr[PGWU_PFCP_UPLINK], u->id) &&
		    (u->vol_quota_flags & 3))
			dirs |= PGWU_QOS_QUOTA_UL;
		if (pdr_has_urr(&pdr[PGWU_PFCP_DOWNLINK], u->id) &&
		    (u->vol_quota_flags & 5))
			dirs |= PGWU_QOS_QUOTA_DL;
		if (!dirs)
			continue;
		out->flags |= PGWU_QOS_QUOTA | dirs;
		out->quota_left = u->vol_quota_flags & 1 ? u->vol_quota[0] :
				  u->vol_quota_flags & 2 ? u->vol_quota[1] : u->vol_quota[2];
		break;
	}
	i = volth_urr(pdr, urr, n_urr);
	if (i >= 0) {
		out->flags |= PGWU_QOS_VOLTH | volth_dirs(pdr, urr[i].id);
		out->th.urr_id = urr[i].id;
		out->th.vol_flags = urr[i].vol_thresh_flags & 7;
		for (int k = 0; k < 3; k++)
			out->th.limit[k] = urr[i].vol_thresh[k];
	}
}

int qos_install(struct pfcp_agent *a, __u32 teid, const struct pgwu_qos *q)
{
	if (bpf_map_update_elem(a->qos_fd, &teid, q, BPF_NOEXIST | BPF_F_LOCK))
		return -errno;
	return 0;
}

/* qos_ctl on the entry of teid: op (PGWU_QOS_CTL_*), c->q in and out. 0, -ENOENT (no entry),
 * -errno */
static int qos_ctl_run(struct pfcp_agent *a, __u32 teid, __u32 op, __u32 keep,
		       struct pgwu_qos_ctl *c)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = c, .data_size_in = sizeof(*c),
		    .data_out = c, .data_size_out = sizeof(*c));

	/* op with PGWU_QOS_CTL_URR: sdf_urr's entry {teid, c->urr_id} */
	c->teid = teid;
	c->op = op;
	c->keep = keep;
	c->after = 0;
	if (bpf_prog_test_run_opts(a->qos_ctl_fd, &opts))
		return -errno;
	if (opts.retval == XDP_DROP)
		return -ENOENT;
	if (opts.retval != XDP_PASS || opts.data_size_out < sizeof(*c))
		return -EIO;
	return 0;
}

/* The entry becomes q in one step (qos_ctl SET): each policer's state (credit, last refill) kept
 * when its rate and depth are unchanged, the quota left when keep_quota (no URR changed its
 * quota), the threshold's count while q measures the same URR (else it starts from q's th.now). */
int qos_update(struct pfcp_agent *a, __u32 teid, const struct pgwu_qos *q, bool keep_quota)
{
	struct pgwu_qos_ctl c = { .q = *q };

	return qos_ctl_run(a, teid, PGWU_QOS_CTL_SET, keep_quota ? PGWU_QOS_KEEP_QUOTA : 0, &c);
}

/* The volume threshold's crossing taken (op TAKE_CROSSING: the count goes on) or everything it
 * measured (TAKE_ALL: it restarts): *out holds the flags and th as they were, *after the flags
 * after (CROSSED again: a second crossing recorded late, to take too). */
int qos_take(struct pfcp_agent *a, __u32 teid, __u32 op, struct pgwu_qos *out, __u32 *after)
{
	return urr_take(a, teid, 0, op, out, after);
}

int urr_take(struct pfcp_agent *a, __u32 teid, __u32 urr_id, __u32 op, struct pgwu_qos *out,
	     __u32 *after)
{
	struct pgwu_qos_ctl c = { .urr_id = urr_id };
	int err = qos_ctl_run(a, teid, op, 0, &c);

	if (!err) {
		*out = c.q;
		*after = c.after;
	}
	return err;
}

void qos_remove(struct pfcp_agent *a, __u32 teid)
{
	if (bpf_map_delete_elem(a->qos_fd, &teid) && errno != ENOENT)
		fprintf(stderr, "Couldn't remove the qos entry of TEID %u: %s\n", ntohl(teid),
			strerror(errno));
}

/* The entry as the data path left it (quota used up?), 0 or -errno */
int qos_read(struct pfcp_agent *a, __u32 teid, struct pgwu_qos *q)
{
	if (bpf_map_lookup_elem_flags(a->qos_fd, &teid, q, BPF_F_LOCK))
		return -errno;
	return 0;
}

/*
 * A URR whose volume threshold or quota PDRs of SDF halves count (PGWU_SDF_P_URR): its sdf_urr
 * entry {TEID, URR ID}, one for all its PDRs, so their usage adds up against one limit. Built as
 * the bearer's entry is (qos_of) from the URR alone and the directions dirs (1 << PGWU_PFCP_*) of
 * the PDRs that link it: its QUOTA* and VOLTH* flags, quota_left and th; no gate, no policer (the
 * PDRs' QERs are sdf_qos's). Written before the PDRs that name it, removed after them.
 */
int urr_install(struct pfcp_agent *a, __u32 teid, const struct pgwu_urr *u, __u32 dirs)
{
	struct pgwu_urr_key k = { .teid = teid, .urr_id = u->id };
	struct pgwu_pfcp_pdr one[2] = {};
	struct pgwu_qos q;

	for (int d = 0; d < 2; d++)
		if (dirs & (1U << d)) {
			one[d].n_urr = 1;
			one[d].urr[0] = u->id;
		}
	qos_of(a, one, NULL, 0, u, 1, &q);
	if (bpf_map_update_elem(a->sdf_urr_fd, &k, &q, BPF_NOEXIST | BPF_F_LOCK))
		return -errno;
	return 0;
}

void urr_remove(struct pfcp_agent *a, __u32 teid, __u32 urr_id)
{
	struct pgwu_urr_key k = { .teid = teid, .urr_id = urr_id };

	if (bpf_map_delete_elem(a->sdf_urr_fd, &k) && errno != ENOENT)
		fprintf(stderr, "Couldn't remove the sdf_urr entry of TEID %u URR %u: %s\n",
			ntohl(teid), urr_id, strerror(errno));
}

int urr_read(struct pfcp_agent *a, __u32 teid, __u32 urr_id, struct pgwu_qos *q)
{
	struct pgwu_urr_key k = { .teid = teid, .urr_id = urr_id };

	if (bpf_map_lookup_elem_flags(a->sdf_urr_fd, &k, q, BPF_F_LOCK))
		return -errno;
	return 0;
}

void sdf_urrs_remove(struct pfcp_agent *a, __u32 teid, const struct sess_rules *sr)
{
	for (int u = 0; sr && u < sr->n_urr; u++)
		if (sr->st[u].in_sdf)
			urr_remove(a, teid, sr->urr[u].id);
}

/* A URR the data path measures or enforces (a volume threshold it reports, a quota) */
bool urr_in_dp(const struct pgwu_urr *u)
{
	return ((u->triggers & RT_VOLTH) && (u->flags & PGWU_URR_VOL_THRESH) &&
		(u->vol_thresh_flags & 7)) ||
	       ((u->flags & PGWU_URR_VOL_QUOTA) && u->vol_quota_flags);
}
