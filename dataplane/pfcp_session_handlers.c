// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pfcp_session_handlers.c: the session procedures of `pgwu pfcp` (TS 29.244 6.3): establishment
 * (the request validated into a plan, then applied), modification (Update FAR, Update QER) and
 * deletion (with the final usage report). A request is rejected before any table is touched.
 */
#include <errno.h>
#include <string.h>
#include <bpf/bpf.h>
#include "pfcp_agent.h"

/* ---- session establishment: validate into a plan, then apply ---- */

struct plan {
	const struct pfcp_pdr *ul, *dl;
	const struct pfcp_far *ul_far, *dl_far;
	const struct pfcp_urr *urr;
	const struct pfcp_qer *qer;
	__u32 ue;
	bool dl_fwd;		/* the downlink FAR forwards (else it buffers or drops: no downlink half) */
	__u32 ul_flags;		/* the uplink PDR's PDI QFI: what uplink G-PDUs must carry */
	__u32 dl_flags;		/* the QFI of the QER the downlink PDR refers to: its marking */
};

static const struct pfcp_far *far_by_id(const struct pfcp_far *f, int n, __u32 id)
{
	for (int i = 0; i < n; i++)
		if (f[i].id == id)
			return &f[i];
	return NULL;
}

/* the PDR's URR and QER references must name the session's one URR / QER */
static bool refs_ok(const struct pfcp_pdr *p, const struct pfcp_urr *u, const struct pfcp_qer *q)
{
	for (int i = 0; i < p->n_urr; i++)
		if (!u || p->urr_id[i] != u->id)
			return false;
	for (int i = 0; i < p->n_qer; i++)
		if (!q || p->qer_id[i] != q->id)
			return false;
	return true;
}

/* Apply Action of a downlink FAR this UP can do: FORW alone, or no forwarding (BUFF or DROP,
 * with or without NOCP): the downlink half is then absent and the packet path drops (no buffer). */
static bool dl_apply_ok(__u8 apply)
{
	apply &= 0x1f;
	if (apply & PFCP_AA_FORW)
		return apply == PFCP_AA_FORW;
	return (apply & (PFCP_AA_BUFF | PFCP_AA_DROP)) && !(apply & PFCP_AA_DUPL);
}

static bool ohc_ok(const struct pfcp_ohc *o)
{
	return o->desc == PFCP_OHC_GTPU_UDP_IPV4 && o->teid && o->ipv4;
}

/* A Create FAR (or an Update FAR, where every field is optional) for the downlink */
static bool dl_far_ok(const struct pfcp_far *f)
{
	return (!f->has_apply || dl_apply_ok(f->apply)) &&
	       (!f->has_dst_if || f->dst_if == PFCP_IF_ACCESS) &&
	       (!f->has_ohc || ohc_ok(&f->ohc));
}

static bool plan_est(struct pfcp_agent *a, const struct pfcp_msg *m, struct plan *p,
		     struct reply *r)
{
	memset(p, 0, sizeof(*p));
	for (int i = 0; i < m->n_create_pdr; i++) {
		const struct pfcp_pdr *d = &m->create_pdr[i];

		if (d->src_if == PFCP_IF_ACCESS && !p->ul)
			p->ul = d;
		else if ((d->src_if == PFCP_IF_CORE || d->src_if == PFCP_IF_SGI_LAN) && !p->dl)
			p->dl = d;
		else
			goto bad_pdr;	/* a second PDR per direction, or another interface */
		continue;
bad_pdr:
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, d->id);
		return false;
	}
	if (!p->ul || !p->dl) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, m->create_pdr[0].id);
		return false;
	}
	if (m->n_create_far > 2) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, m->create_far[2].id);
		return false;
	}
	if (m->n_create_urr > 1) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_URR, m->create_urr[1].id);
		return false;
	}
	if (m->n_create_qer > 1) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_QER, m->create_qer[1].id);
		return false;
	}
	p->urr = m->n_create_urr ? &m->create_urr[0] : NULL;
	p->qer = m->n_create_qer ? &m->create_qer[0] : NULL;
	if (p->urr && !(p->urr->method & PFCP_MM_VOLUM)) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_URR, p->urr->id);
		return false;
	}

	/* uplink PDR: Access, an IPv4 F-TEID (given or CHOOSE), GTP-U/UDP/IPv4 removed */
	if (!p->ul->has_fteid) {
		reject(r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_FTEID);
		return false;
	}
	if (!p->ul->has_ohr) {
		reject(r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_OUTER_HEADER_REMOVAL);
		return false;
	}
	if (!p->ul->has_far_id) {
		reject(r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_FAR_ID);
		return false;
	}
	if (!p->ul->fteid.v4 || (!p->ul->fteid.ch && !p->ul->fteid.teid) ||
	    (!p->ul->fteid.ch && a->local_addr && p->ul->fteid.ipv4 != a->local_addr) ||
	    (p->ul->ohr != PFCP_OHR_GTPU_UDP_IPV4 && p->ul->ohr != PFCP_OHR_GTPU_UDP_IP) ||
	    (p->ul->has_ue_ip && (!p->ul->ue_ip.v4 || p->ul->ue_ip.chv4)) ||
	    p->ul->n_qfi > 1 ||	/* a list of QFIs: the data plane checks one */
	    !refs_ok(p->ul, p->urr, p->qer))
		goto bad_ul;

	/* downlink PDR: Core, the UE's IPv4 address, no F-TEID */
	if (!p->dl->has_ue_ip) {
		reject(r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_UE_IP_ADDRESS);
		return false;
	}
	if (!p->dl->has_far_id) {
		reject(r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_FAR_ID);
		return false;
	}
	if (!p->dl->ue_ip.v4 || p->dl->ue_ip.chv4 || !p->dl->ue_ip.ipv4 || p->dl->has_fteid ||
	    (p->ul->has_ue_ip && p->ul->ue_ip.ipv4 != p->dl->ue_ip.ipv4) ||
	    !refs_ok(p->dl, p->urr, p->qer))
		goto bad_dl;
	p->ue = p->dl->ue_ip.ipv4;
	/*
	 * 5G N3 (QFI IE, TS 29.244 8.2.89): uplink G-PDUs must carry the QFI of the uplink PDI
	 * (the data plane drops the others); downlink ones get the QFI of the QER the downlink PDR
	 * applies. A QFI in the downlink PDI would match on N6 packets, which carry none: accepted,
	 * not used.
	 */
	p->ul_flags = p->ul->n_qfi ? pgwu_qfi_flags(p->ul->qfi) : 0;
	p->dl_flags = p->qer && p->qer->has_qfi && p->dl->n_qer ? pgwu_qfi_flags(p->qer->qfi) : 0;

	/* FARs: uplink forwards to Core as is; downlink forwards to Access inside GTP-U/UDP/IPv4 */
	p->ul_far = far_by_id(m->create_far, m->n_create_far, p->ul->far_id);
	if (!p->ul_far)
		goto bad_ul;
	p->dl_far = far_by_id(m->create_far, m->n_create_far, p->dl->far_id);
	if (!p->dl_far || p->dl_far == p->ul_far)
		goto bad_dl;
	p->dl_fwd = p->dl_far->apply & PFCP_AA_FORW;
	if (!p->ul_far->has_fwd || (p->dl_fwd && !p->dl_far->has_fwd)) {
		reject(r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_FORWARDING_PARAMS);
		return false;
	}
	if (p->dl_fwd && !p->dl_far->has_ohc) {
		reject(r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_OUTER_HEADER_CREATION);
		return false;
	}
	if (!(p->ul_far->apply & PFCP_AA_FORW) || (p->ul_far->apply & ~PFCP_AA_FORW & 0x1f) ||
	    (p->ul_far->dst_if != PFCP_IF_CORE && p->ul_far->dst_if != PFCP_IF_SGI_LAN) ||
	    p->ul_far->has_ohc) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, p->ul_far->id);
		return false;
	}
	if (!dl_far_ok(p->dl_far)) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, p->dl_far->id);
		return false;
	}
	return true;
bad_ul:
	reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, p->ul->id);
	return false;
bad_dl:
	reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, p->dl->id);
	return false;
}

void on_sess_est(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w)
{
	struct reply r = { .cause = m->cause, .offending = m->offending_ie };
	struct pgwu_dl_bearer dl = {}, old_dl;
	struct sess *s = NULL;
	struct plan p;
	__u32 teid = 0, idx;
	int ai = -1, err;

	if (r.cause != PFCP_CAUSE_ACCEPTED)
		goto out;
	ai = assoc_find(a, &m->node_id);
	if (ai < 0) {
		reject(&r, PFCP_CAUSE_NO_ASSOCIATION, 0);
		goto out;
	}
	if (!plan_est(a, m, &p, &r))
		goto out;
	if (!a->n_free) {
		reject(&r, PFCP_CAUSE_NO_RESOURCES, 0);
		goto out;
	}
	/* the UE must be free: in this agent's sessions (some have no downlink half) and the table */
	if (ue_find(a, p.ue) || (!p.dl_fwd && !bpf_map_lookup_elem(a->m.dl, &p.ue, &old_dl))) {
		reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, p.dl->id);
		goto out;
	}
	teid = p.ul->fteid.ch ? teid_alloc(a) : p.ul->fteid.teid;
	if (!teid) {
		reject(&r, PFCP_CAUSE_NO_RESOURCES, 0);
		goto out;
	}
	dl.sgw_addr = p.dl_far->ohc.ipv4;
	dl.sgw_teid = p.dl_far->ohc.teid;
	dl.local_teid = teid;
	dl.flags = p.dl_flags;
	err = bearer_add(&a->m, teid, p.ue, p.ul_flags, p.dl_fwd ? &dl : NULL);
	if (err == -EEXIST)		/* the F-TEID the CP chose is in use */
		reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, p.ul->id);
	else if (err == -EADDRINUSE)	/* the UE address has a bearer */
		reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, p.dl->id);
	else if (err == -E2BIG)
		reject(&r, PFCP_CAUSE_NO_RESOURCES, 0);
	else if (err)
		reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
	if (err)
		goto out;

	idx = a->free_idx[--a->n_free];
	s = &a->sess[idx];
	memset(s, 0, sizeof(*s));
	a->gen++;
	s->up_seid = (__u64)(a->gen ? a->gen : ++a->gen) << 32 | (idx + 1);
	s->cp_seid = m->fseid.seid;
	s->teid = teid;
	s->ue = p.ue;
	s->sgw = dl.sgw_addr;
	s->sgw_teid = dl.sgw_teid;
	s->ul_pdr = p.ul->id;
	s->dl_pdr = p.dl->id;
	s->ul_far = p.ul_far->id;
	s->dl_far = p.dl_far->id;
	s->dl_on = p.dl_fwd;
	s->has_sgw = p.dl_far->has_ohc;
	s->dl_flags = p.dl_flags;
	s->assoc = ai;
	s->flags = S_USED;
	ue_insert(a, p.ue, idx);
	if (p.urr) {
		s->flags |= S_URR;
		s->urr_id = p.urr->id;
	}
	if (p.qer) {
		s->flags |= S_QER | (p.dl->n_qer ? S_DL_QER : 0);
		s->qer_id = p.qer->id;
		s->gate = p.qer->gate;
		s->mbr_ul = p.qer->mbr_ul;
		s->mbr_dl = p.qer->mbr_dl;
	}
	a->assoc[ai].sessions++;
	a->n_sess++;
	stat_set(a, PFCP_STAT_SESSIONS, a->n_sess);
out:
	/* the CP's SEID when it was readable (TS 29.244 7.2.2.4.2), else 0 */
	pfcp_w_hdr(w, PFCP_SESS_EST_RESP, true, m->present & PFCP_P_FSEID ? m->fseid.seid : 0,
		   m->h.seq);
	pfcp_w_node_id(w, &a->node_id);
	w_cause(w, &r);
	if (s) {
		pfcp_w_fseid(w, s->up_seid, a->n4_addr);
		if (p.ul->fteid.ch) {
			size_t g = pfcp_w_group_begin(w, PFCP_IE_CREATED_PDR);

			pfcp_w_u16(w, PFCP_IE_PDR_ID, p.ul->id);
			pfcp_w_fteid(w, teid, a->local_addr);
			pfcp_w_group_end(w, g);
		}
	}
	stat_add(a, PFCP_STAT_TX(PFCP_SESS_EST_RESP, r.cause), 1);
}

/* ---- modification: Update FAR (downlink: a new SGW F-TEID, as at handover), Update QER ---- */

void on_sess_mod(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w)
{
	struct reply r = { .cause = m->cause, .offending = m->offending_ie };
	struct sess *s = sess_find(a, m->h.seid);
	const struct pfcp_far *dl_upd = NULL;
	const struct pfcp_qer *q = NULL;
	__u32 sgw = 0, sgw_teid = 0, dl_flags = 0;
	bool want_fwd = false;
	int err;

	if (!s) {
		reject(&r, PFCP_CAUSE_SESSION_NOT_FOUND, 0);
		goto out;
	}
	if (r.cause != PFCP_CAUSE_ACCEPTED)
		goto out;
	sgw = s->sgw;
	sgw_teid = s->sgw_teid;
	want_fwd = s->dl_on;
	dl_flags = s->dl_flags;
	if (m->n_other_rules || m->n_create_far || m->n_create_urr || m->n_create_qer) {
		reject(&r, PFCP_CAUSE_RULE_FAILURE, m->n_other_rules ? m->other_rule_ie :
		       m->n_create_far ? PFCP_IE_CREATE_FAR : m->n_create_urr ?
		       PFCP_IE_CREATE_URR : PFCP_IE_CREATE_QER);
		goto out;
	}
	if (m->n_create_pdr) {
		reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, m->create_pdr[0].id);
		goto out;
	}
	for (int i = 0; i < m->n_update_far; i++) {
		const struct pfcp_far *f = &m->update_far[i];
		bool fwd_ok = !f->has_apply ||
			      ((f->apply & PFCP_AA_FORW) && !(f->apply & ~PFCP_AA_FORW & 0x1f));

		if (f->id == s->dl_far && !dl_upd && dl_far_ok(f)) {
			dl_upd = f;
			continue;
		}
		if (f->id == s->ul_far && fwd_ok && !f->has_ohc &&
		    (!f->has_dst_if || f->dst_if == PFCP_IF_CORE || f->dst_if == PFCP_IF_SGI_LAN))
			continue;	/* nothing in the tables to change */
		reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, f->id);
		goto out;
	}
	if (dl_upd) {
		want_fwd = dl_upd->has_apply ? !!(dl_upd->apply & PFCP_AA_FORW) : s->dl_on;
		sgw = dl_upd->has_ohc ? dl_upd->ohc.ipv4 : s->sgw;
		sgw_teid = dl_upd->has_ohc ? dl_upd->ohc.teid : s->sgw_teid;
		if (want_fwd && !dl_upd->has_ohc && !s->has_sgw) {
			reject(&r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_OUTER_HEADER_CREATION);
			goto out;
		}
	}
	for (int i = 0; i < m->n_update_qer; i++) {
		if (!(s->flags & S_QER) || m->update_qer[i].id != s->qer_id || q) {
			reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_QER, m->update_qer[i].id);
			goto out;
		}
		q = &m->update_qer[i];
	}
	/* a new QFI of the QER the downlink PDR applies: a new marking for the downlink half */
	if (q && q->has_qfi && (s->flags & S_DL_QER))
		dl_flags = pgwu_qfi_flags(q->qfi);
	/* everything checked: the one table change (without dl_upd, want_fwd == s->dl_on) */
	if (want_fwd && s->dl_on &&
	    (sgw != s->sgw || sgw_teid != s->sgw_teid || dl_flags != s->dl_flags)) {
		err = bearer_set_dl_flags(&a->m, s->ue, sgw, sgw_teid, dl_flags);
		if (err) {
			reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
			goto out;
		}
	} else if (dl_upd && want_fwd && !s->dl_on) {
		struct pgwu_dl_bearer dl = { .sgw_addr = sgw, .sgw_teid = sgw_teid,
					     .local_teid = s->teid, .flags = dl_flags };

		err = bearer_add_dl(&a->m, s->ue, &dl);
		if (err == -EADDRINUSE)
			reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, dl_upd->id);
		else if (err == -E2BIG)
			reject(&r, PFCP_CAUSE_NO_RESOURCES, 0);
		else if (err)
			reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
		if (err)
			goto out;
	} else if (dl_upd && !want_fwd && s->dl_on) {
		struct bearer b;

		if (!bearer_get(&a->m, s->teid, s->ue, true, &b)) {
			s->dl_packets += b.dl_packets;
			s->dl_bytes += b.dl_bytes;
		}
		err = bearer_remove(&a->m, s->teid, s->ue, false, true);
		if (err) {
			reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
			goto out;
		}
	}
	if (dl_upd) {
		s->dl_on = want_fwd;
		s->sgw = sgw;
		s->sgw_teid = sgw_teid;
		s->has_sgw |= dl_upd->has_ohc;
	}
	s->dl_flags = dl_flags;
	if (q) {
		if (q->has_gate)
			s->gate = q->gate;
		if (q->has_mbr) {
			s->mbr_ul = q->mbr_ul;
			s->mbr_dl = q->mbr_dl;
		}
	}
out:
	pfcp_w_hdr(w, PFCP_SESS_MOD_RESP, true, s ? s->cp_seid : 0, m->h.seq);
	w_cause(w, &r);
	stat_add(a, PFCP_STAT_TX(PFCP_SESS_MOD_RESP, r.cause), 1);
}

/* ---- deletion, with the final usage report (TS 29.244 7.5.7.2) ---- */

void on_sess_del(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w)
{
	struct reply r = { .cause = m->cause, .offending = m->offending_ie };
	struct sess *s = sess_find(a, m->h.seid), copy;
	__u64 cp_seid = s ? s->cp_seid : 0;
	struct bearer b = {};
	bool report = false;

	if (!s)
		reject(&r, PFCP_CAUSE_SESSION_NOT_FOUND, 0);
	if (r.cause == PFCP_CAUSE_ACCEPTED) {
		copy = *s;
		if (sess_delete(a, s, &b))
			reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
		else
			report = copy.flags & S_URR;
	}
	pfcp_w_hdr(w, PFCP_SESS_DEL_RESP, true, cp_seid, m->h.seq);
	w_cause(w, &r);
	if (report)
		w_usage_report(w, &copy, &b);
	stat_add(a, PFCP_STAT_TX(PFCP_SESS_DEL_RESP, r.cause), 1);
}
