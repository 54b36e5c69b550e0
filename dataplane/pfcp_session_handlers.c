// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pfcp_session_handlers.c: the session procedures of `pgwu pfcp` (TS 29.244 6.3): establishment,
 * modification (Update FAR, Update QER, Update URR) and deletion (with a usage report per URR).
 * Each request is validated into a plan (everything it would change, rules included), and only
 * then applied; a rejected request leaves every table, and the session, as they were.
 *
 * A session belongs to the association that created it: modification (Query URR included) and
 * deletion are taken only from that association's address and port (pfcp_node.c assoc_owns); from
 * any other sender, associated or not, the session does not exist (65), so nobody learns which
 * UP SEIDs are live. An establishment names its association by Node ID: from another sender, 72.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <bpf/bpf.h>
#include "pgwu_params.h"	/* addr_unusable: the check `pgwu session add` makes */
#include "pfcp_agent.h"

/* ---- what the PGW-U can do with a rule ---- */

/* Apply Action of a downlink FAR this UP can do: FORW alone, or no forwarding (BUFF or DROP,
 * with or without NOCP): the downlink half is then absent and the packet path drops (no buffer). */
static bool dl_apply_ok(__u8 apply)
{
	apply &= 0x1f;
	if (apply & PFCP_AA_FORW)
		return apply == PFCP_AA_FORW;
	return (apply & (PFCP_AA_BUFF | PFCP_AA_DROP)) && !(apply & PFCP_AA_DUPL);
}

/* An Outer Header Creation the downlink half can use: GTP-U/UDP/IPv4, or GTP-U/UDP/IPv6 (N3 over
 * IPv6) while the data path has an N3 IPv6 address to send from, a TEID, a host address (the check
 * `pgwu session add` makes, addr_unusable, addr6_unusable) */
static bool ohc_ok(const struct pfcp_agent *a, const struct pfcp_ohc *o)
{
	if (o->desc == PFCP_OHC_GTPU_UDP_IPV6)
		return a->has_n3_6 && o->teid && !addr6_unusable(o->ipv6);
	return o->desc == PFCP_OHC_GTPU_UDP_IPV4 && o->teid && !addr_unusable(o->ipv4);
}

static bool ohc_same(const struct pfcp_ohc *x, const struct pfcp_ohc *y)
{
	return x->desc == y->desc && x->teid == y->teid && x->ipv4 == y->ipv4 &&
	       !memcmp(x->ipv6, y->ipv6, 16);
}

/* The uplink F-TEID this UP can be: V4 (the GTP-U address) and/or V6 (the N3 IPv6 address, when
 * it has one), given (one of ours, a TEID) or CHOOSE (5.5.3: the UP allocates an address of each
 * family asked for) */
static bool fteid_ok(const struct pfcp_agent *a, const struct pfcp_fteid *f)
{
	if ((!f->v4 && !f->v6) || (f->v6 && !a->has_n3_6))
		return false;
	if (f->ch)
		return true;
	return f->teid && (!f->v4 || !a->local_addr || f->ipv4 == a->local_addr) &&
	       (!f->v6 || !memcmp(f->ipv6, a->n3_addr6, 16));
}

/* Outer Header Removal (8.2.64) of the tunnel f: GTP-U/UDP/IPv4 (0) of an F-TEID with V4, GTP-U/
 * UDP/IPv6 (1) of one with V6, GTP-U/UDP/IP (6) of either; the data path removes what arrives */
static bool ohr_ok(__u8 ohr, const struct pfcp_fteid *f)
{
	return (ohr == PFCP_OHR_GTPU_UDP_IPV4 && f->v4) || (ohr == PFCP_OHR_GTPU_UDP_IPV6 && f->v6) ||
	       ohr == PFCP_OHR_GTPU_UDP_IP;
}

/* Does the PDI match all of the bearer's traffic (the one thing a bearer can match)? No
 * Application ID or Ethernet filter, and no SDF Filter or one that matches everything (they are
 * alternatives: the PDR matches what any of them matches), or the UE's own traffic. */
static bool pdi_all(const struct pfcp_pdr *p, __u32 ue)
{
	if (p->narrow_ie)
		return false;
	if (!p->n_sdf || p->sdf_all)
		return true;
	for (int i = 0; ue && i < p->n_sdf_host; i++)	/* ue 0: IPv6 only, no IPv4 host */
		if (p->sdf_host[i] == ue)
			return true;
	return false;
}

/*
 * The length of a UE IP Address's IPv6 prefix (8.2.62): 64 - IPv6D's delegation bits, else
 * IPv6PL's length, else 64 (TS 23.401 5.3.1.2.2: one /64 per PDN connection).
 */
static int ue6_plen(const struct pfcp_ue_ip *u)
{
	if (u->ipv6d && u->pd_bits)
		return u->pd_bits > 64 ? 0 : 64 - u->pd_bits;
	return u->ipv6pl ? u->plen : 64;
}

/*
 * The /64 of a UE IP Address's IPv6 half (8.2.62), in *ue6 (its 8 octets as on the wire): the
 * prefix is a /64 or longer (a /65../128 is served as its /64, the one thing a bearer's
 * dl6_bearers and ul6_prefix keys hold: the downlink to and the uplink from the whole /64, which
 * no other session may then have) and a unicast one (not multicast, link-local or ::/64). A
 * shorter one (delegation) is refused (ue6_short_log says so). The address's bits after the /64
 * are the UE's, not looked at.
 */
static bool ue6_ok(const struct pfcp_ue_ip *u, __u64 *ue6)
{
	const __u8 *x = u->ipv6;
	int len = ue6_plen(u);

	if (!u->v6 || u->chv6 || len < 64 || len > 128)
		return false;
	if (x[0] == 0xff || (x[0] == 0xfe && (x[1] & 0xc0) == 0x80) ||
	    !memcmp(x, (__u8[8]){ 0 }, 8))
		return false;
	memcpy(ue6, x, 8);
	return true;
}

/* a prefix shorter than /64 refused (73): one stderr line a minute */
static void ue6_short_log(struct pfcp_agent *a, const struct pfcp_ue_ip *u)
{
	__u32 held;

	if (ratelimit_pass(a, &a->rl_prefix, &held))
		fprintf(stderr, "pgwu pfcp: a UE IPv6 prefix /%d (%s): the data path keys a UE by one "
			"/64, a shorter prefix (delegation) is not served: cause 73 (%u more like it "
			"since the last line)\n", ue6_plen(u), u->ipv6d && u->pd_bits ?
			"IPv6D delegation bits" : "IPv6PL", held);
}

static const struct pfcp_far *far_by_id(const struct pfcp_far *f, int n, __u32 id)
{
	for (int i = 0; i < n; i++)
		if (f[i].id == id)
			return &f[i];
	return NULL;
}

/* the first of n rules (ids at stride) whose ID an earlier one has, or -1 */
static int dup_id(const void *rules, int n, size_t stride, size_t off)
{
	for (int i = 1; i < n; i++)
		for (int j = 0; j < i; j++)
			if (*(const __u32 *)((const char *)rules + i * stride + off) ==
			    *(const __u32 *)((const char *)rules + j * stride + off))
				return i;
	return -1;
}

static const struct pgwu_qer *qer_of(const struct pgwu_qer *q, int n, __u32 id)
{
	for (int i = 0; i < n; i++)
		if (q[i].id == id)
			return &q[i];
	return NULL;
}

static const struct pgwu_urr *urr_of(const struct pgwu_urr *u, int n, __u32 id)
{
	for (int i = 0; i < n; i++)
		if (u[i].id == id)
			return &u[i];
	return NULL;
}

/* A URR this UP can measure: by volume (bearer counters) and/or duration (its clock) */
static bool urr_method_ok(__u8 method)
{
	return method & (PFCP_MM_VOLUM | PFCP_MM_DURAT);
}

/*
 * The downlink marking (5G N3, TS 29.244 8.2.89): the QFI of the QERs the downlink PDR applies.
 * 0 when none has one; -1 when two of them have different ones (which would a G-PDU carry?).
 */
static long dl_marking(const struct pgwu_pfcp_pdr *dl, const struct pgwu_qer *q, int n)
{
	long qfi = -1;

	for (int i = 0; i < dl->n_qer; i++) {
		const struct pgwu_qer *x = qer_of(q, n, dl->qer[i]);

		if (!x || !(x->flags & PGWU_QER_QFI))
			continue;
		if (qfi >= 0 && qfi != x->qfi)
			return -1;
		qfi = x->qfi;
	}
	return qfi < 0 ? 0 : pgwu_qfi_flags(qfi);
}

static void qer_set(struct pgwu_qer *d, const struct pfcp_qer *q)
{
	d->id = q->id;
	if (q->has_gate)
		d->gate = q->gate;
	if (q->has_mbr) {
		d->flags |= PGWU_QER_MBR;
		d->mbr_ul = q->mbr_ul;
		d->mbr_dl = q->mbr_dl;
	}
	if (q->has_gbr) {
		d->flags |= PGWU_QER_GBR;
		d->gbr_ul = q->gbr_ul;
		d->gbr_dl = q->gbr_dl;
	}
	if (q->has_qfi) {
		d->flags |= PGWU_QER_QFI;
		d->qfi = q->qfi;
	}
}

/* A Create URR's or an Update URR's parameters onto d (PFCP_URR_* and PGWU_URR_* share bits) */
static void urr_set(struct pgwu_urr *d, const struct pfcp_urr *u)
{
	const __u32 params = PGWU_URR_PERIOD | PGWU_URR_VOL_THRESH | PGWU_URR_VOL_QUOTA |
			     PGWU_URR_TIME_THRESH | PGWU_URR_TIME_QUOTA | PGWU_URR_QHT |
			     PGWU_URR_MEAS_INFO;

	d->id = u->id;
	if (u->present & PFCP_URR_METHOD)
		d->method = u->method;
	if (u->present & PFCP_URR_TRIGGERS)
		d->triggers = u->triggers;
	if (u->present & PFCP_URR_PERIOD)
		d->period = u->period;
	if (u->present & PFCP_URR_TIME_THRESH)
		d->time_threshold = u->time_threshold;
	if (u->present & PFCP_URR_TIME_QUOTA)
		d->time_quota = u->time_quota;
	if (u->present & PFCP_URR_QHT)
		d->quota_holding_time = u->quota_holding_time;
	if (u->present & PFCP_URR_MEAS_INFO)
		d->meas_info = u->meas_info;
	if (u->present & PFCP_URR_VOL_THRESH) {
		d->vol_thresh_flags = u->vol_thresh_flags;
		memcpy(d->vol_thresh, u->vol_thresh, sizeof(d->vol_thresh));
	}
	if (u->present & PFCP_URR_VOL_QUOTA) {
		d->vol_quota_flags = u->vol_quota_flags;
		memcpy(d->vol_quota, u->vol_quota, sizeof(d->vol_quota));
	}
	d->flags = (d->flags | (u->present & params)) & ~(u->cleared & params);
	if (u->cleared & PGWU_URR_VOL_THRESH) {
		d->vol_thresh_flags = 0;
		memset(d->vol_thresh, 0, sizeof(d->vol_thresh));
	}
	if (u->cleared & PGWU_URR_VOL_QUOTA) {
		d->vol_quota_flags = 0;
		memset(d->vol_quota, 0, sizeof(d->vol_quota));
	}
}

/* One allocation for a session's rules (struct sess_rules), or NULL */
static struct sess_rules *rules_alloc(int n_qer, int n_urr, int n_sdf)
{
	struct sess_rules *r = calloc(1, sizeof(*r) + n_qer * sizeof(struct pgwu_qer) +
				      n_urr * sizeof(struct pgwu_urr) +
				      n_sdf * sizeof(struct sdf_ent));

	if (!r)
		return NULL;
	r->n_qer = n_qer;
	r->n_urr = n_urr;
	r->n_sdf = n_sdf;
	r->qer = (struct pgwu_qer *)(r + 1);
	r->urr = (struct pgwu_urr *)(r->qer + n_qer);
	r->sdf = (struct sdf_ent *)(r->urr + n_urr);
	return r;
}

/* a PDR's links (its FAR, QER IDs, URR IDs) */
static void pdr_links(struct pgwu_pfcp_pdr *l, const struct pfcp_pdr *p)
{
	l->id = p->id;
	l->far_id = p->far_id;
	l->n_qer = p->n_qer;
	l->n_urr = p->n_urr;
	memcpy(l->qer, p->qer_id, p->n_qer * sizeof(__u32));
	memcpy(l->urr, p->urr_id, p->n_urr * sizeof(__u32));
}

/* ---- session establishment: validate into a plan, then apply ---- */

struct plan {
	const struct pfcp_pdr *ul, *dl;
	const struct pfcp_far *ul_far, *dl_far;
	__u32 ue;		/* the UE's IPv4 address, 0: none (an IPv6-only session) */
	bool has_ue6;		/* the UE IP Address had V6: its /64 in ue6 */
	__u64 ue6;
	bool dl_fwd;		/* the downlink FAR forwards (else it buffers or drops: no downlink half) */
	bool dl_sgw_ok;		/* its Outer Header Creation is usable (ohc_ok) */
	__u32 ul_flags;		/* the uplink PDR's PDI QFI: what uplink G-PDUs must carry */
	__u32 dl_flags;		/* the QFI of the QERs the downlink PDR applies: its marking */
	struct sess_rules *r;	/* the rules to store (NULL: none), freed unless applied */
	/* PDRs with SDF filters (beyond the two defaults), and per direction the PDRs of its
	 * filter list (its SDF PDRs and its default, NULL when it has none) for sdf_install */
	const struct pfcp_pdr *x[PFCP_MAX_RULES];
	const struct pfcp_far *x_far[PFCP_MAX_RULES];
	int n_x;
	struct sdf_pdr_spec *spec[2];
	int n_spec[2];
	/* Open5GS's CP2UP PDR: Source Interface CP-function, its own F-TEID, the downlink FAR
	 * (or one forwarding as it does): a tunnel from the CP function to the UE's (PGWU_B_CP2UP) */
	const struct pfcp_pdr *cp2up;
};

static void plan_free(struct plan *p)
{
	free(p->r);
	free(p->spec[0]);
	free(p->spec[1]);
	p->r = NULL;
	p->spec[0] = p->spec[1] = NULL;
}

/* the PDR's URR and QER references must name rules created in the same request */
static bool refs_ok(const struct pfcp_pdr *p, const struct pfcp_msg *m)
{
	for (int i = 0; i < p->n_urr; i++) {
		int k;

		for (k = 0; k < m->n_create_urr && m->create_urr[k].id != p->urr_id[i]; k++)
			;
		if (k == m->n_create_urr)
			return false;
	}
	for (int i = 0; i < p->n_qer; i++) {
		int k;

		for (k = 0; k < m->n_create_qer && m->create_qer[k].id != p->qer_id[i]; k++)
			;
		if (k == m->n_create_qer)
			return false;
	}
	return true;
}

static const struct pfcp_pdr *pdr_by_id(const struct pfcp_msg *m, __u16 id)
{
	for (int i = 0; i < m->n_create_pdr; i++)
		if (m->create_pdr[i].id == id)
			return &m->create_pdr[i];
	return NULL;
}

/* A PDI's SDF Filters (8.2.5) as the data path's filter specs: 0, or -1 when one cannot be (a
 * filter given by its ID only, a Flow Description too long or that the parser refuses, more than
 * PFCP_MAX_SDF of them) */
static int sdf_specs(const struct pfcp_pdr *x, struct sdf_pdr_spec *sp)
{
	const char *why;

	if (x->n_sdf > PFCP_MAX_SDF || x->n_sdf > SDF_MAX_SPECS)
		return -1;
	sp->n = x->n_sdf;
	for (int i = 0; i < x->n_sdf; i++) {
		const struct pfcp_sdf *f = &x->sdf[i];
		struct sdf_spec *o = &sp->s[i];

		if (!(f->flags & (PFCP_SDF_FD | PFCP_SDF_TTC | PFCP_SDF_SPI | PFCP_SDF_FL)))
			return -1;	/* by its SDF Filter ID only: which filter is that? */
		if (f->flags & PFCP_SDF_FD) {
			if (f->fd_long || sdf_parse_flow(f->fd, &o->flow, &why))
				return -1;
			o->has_flow = true;
		}
		if (f->flags & PFCP_SDF_TTC) {
			o->has_tos = true;
			o->tos = f->tos;
			o->tos_mask = f->tos_mask;
		}
		if (f->flags & PFCP_SDF_SPI) {
			o->has_spi = true;
			o->spi = f->spi;
		}
		if (f->flags & PFCP_SDF_FL) {
			o->has_fl = true;
			o->fl = f->fl;
		}
	}
	return 0;
}

/* the uplink PDR x's tunnel is the default's: the same F-TEID (or both CHOOSE, with the same
 * CHOOSE ID if any: this UP gives a session one F-TEID) */
static bool same_tunnel(const struct pfcp_pdr *x, const struct pfcp_pdr *ul)
{
	const struct pfcp_fteid *a = &x->fteid, *b = &ul->fteid;

	if (!x->has_fteid || x->n_fteid != 1 || a->v4 != b->v4 || a->v6 != b->v6 || a->ch != b->ch)
		return false;
	if (a->ch)
		return a->chid == b->chid && (!a->chid || a->choose_id == b->choose_id);
	return a->teid == b->teid && a->ipv4 == b->ipv4 && !memcmp(a->ipv6, b->ipv6, 16);
}

/*
 * The FAR of an SDF PDR, created with it at establishment or by a modification: DROP; or FORW as
 * its direction's default does (the bearer's one way out): uplink to Core / SGi-LAN without an
 * outer header, or to the CP function in a GTP-U/UDP/IPv4 tunnel (xdp_cp relays: *to_cp set);
 * downlink to Access in the bearer's own tunnel (dl_tunnel: the caller's check of the FAR's Outer
 * Header Creation against the session's forwarding downlink FAR).
 */
static bool sdf_far_ok(struct pfcp_agent *a, const struct pfcp_far *f, bool ul, bool dl_tunnel,
		       bool *to_cp)
{
	__u8 act = f->apply & 0x1f & ~PFCP_AA_NOCP;

	if (act == PFCP_AA_DROP)
		return true;
	if (act != PFCP_AA_FORW || !f->has_fwd)
		return false;
	if (ul && f->dst_if == PFCP_IF_CP) {
		*to_cp = true;
		return f->has_ohc && ohc_ok(a, &f->ohc) && f->ohc.desc == PFCP_OHC_GTPU_UDP_IPV4;
	}
	if (ul)
		return !f->has_ohc && (f->dst_if == PFCP_IF_CORE || f->dst_if == PFCP_IF_SGI_LAN);
	return dl_tunnel && (!f->has_dst_if || f->dst_if == PFCP_IF_ACCESS);
}

/*
 * The PDRs with SDF filters (p->x, beyond the defaults p->ul and p->dl, which are valid): each on
 * the default's bearer (same tunnel, UE, QFI), its FAR forwarding as its direction's default FAR
 * does or dropping, its filters ones the data path has; then each direction's filter list (its SDF
 * PDRs and its default, whose FAR's forwarding is the half's) as sdf_install takes it.
 */
static bool plan_sdf(struct pfcp_agent *a, const struct pfcp_msg *m, struct plan *p,
		     struct reply *r)
{
	struct pgwu_sdf_list *l;
	__u32 zero[SDF_MAX_PDRS] = { 0 };
	const char *why;

	for (int i = 0; i < p->n_x; i++) {
		const struct pfcp_pdr *x = p->x[i];
		bool ul = x->src_if == PFCP_IF_ACCESS;
		const struct pfcp_far *f;
		bool to_cp;

		if (ul ? (!same_tunnel(x, p->ul) || !x->has_ohr || !ohr_ok(x->ohr, &x->fteid) ||
			  x->n_qfi > 1 || (x->n_qfi && (!p->ul->n_qfi || x->qfi != p->ul->qfi)))
		       : x->has_fteid)
			goto bad_pdr;
		if (x->has_ue_ip) {
			__u64 x6;

			if ((x->ue_ip.v4 && (!p->ue || x->ue_ip.ipv4 != p->ue)) ||
			    (x->ue_ip.v6 && (!p->has_ue6 || !ue6_ok(&x->ue_ip, &x6) ||
					     x6 != p->ue6)) ||
			    x->ue_ip.chv4 || x->ue_ip.chv6)
				goto bad_pdr;
		}
		if (!x->has_far_id) {
			reject(r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_FAR_ID);
			return false;
		}
		if (!refs_ok(x, m))
			goto bad_pdr;
		f = far_by_id(m->create_far, m->n_create_far, x->far_id);
		if (!f)
			goto bad_pdr;
		p->x_far[i] = f;
		/* a downlink FAR forwarding: into the tunnel of the session's downlink FAR */
		if (sdf_far_ok(a, f, ul, p->dl_fwd && f->has_ohc && ohc_ok(a, &f->ohc) &&
					 ohc_same(&f->ohc, &p->dl_far->ohc), &to_cp))
			continue;
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, f->id);
		return false;
bad_pdr:
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, x->id);
		return false;
	}
	/* URRs: a volume threshold or quota of the filter lists' PDRs is sdf_urr's (plan_sdf_urrs) */
	l = malloc(sizeof(*l));
	if (!l) {
		reject(r, PFCP_CAUSE_NO_RESOURCES, 0);
		return false;
	}
	for (int dir = 0; dir < 2; dir++) {
		const struct pfcp_pdr *def = dir == PGWU_PFCP_UPLINK ? p->ul : p->dl;
		const struct pfcp_pdr *last = NULL;
		int n = 0;

		for (int i = 0; i < p->n_x; i++)
			n += (p->x[i]->src_if == PFCP_IF_ACCESS) == (dir == PGWU_PFCP_UPLINK);
		if (!n)
			continue;
		if (n + 1 > SDF_MAX_PDRS)
			goto too_many;
		p->spec[dir] = calloc(n + 1, sizeof(struct sdf_pdr_spec));
		if (!p->spec[dir]) {
			free(l);
			reject(r, PFCP_CAUSE_NO_RESOURCES, 0);
			return false;
		}
		for (int i = 0; i < p->n_x; i++) {
			const struct pfcp_pdr *x = p->x[i];
			struct sdf_pdr_spec *sp = &p->spec[dir][p->n_spec[dir]];

			if ((x->src_if == PFCP_IF_ACCESS) != (dir == PGWU_PFCP_UPLINK))
				continue;
			last = x;
			sp->precedence = x->precedence;
			sp->pdr_id = x->id;
			sp->drop = (p->x_far[i]->apply & 0x1f & ~PFCP_AA_NOCP) == PFCP_AA_DROP;
			sp->to_cp = !sp->drop && p->x_far[i]->dst_if == PFCP_IF_CP;
			if (sp->to_cp) {
				sp->cp_addr = p->x_far[i]->ohc.ipv4;
				sp->cp_teid = p->x_far[i]->ohc.teid;
			}
			if (sdf_specs(x, sp)) {
				free(l);
				reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, x->id);
				return false;
			}
			p->n_spec[dir]++;
		}
		/* the default: a filter that matches everything, at its precedence */
		p->spec[dir][p->n_spec[dir]].precedence = def->precedence;
		p->spec[dir][p->n_spec[dir]].pdr_id = def->id;
		p->n_spec[dir]++;
		/* the list must fit (PGWU_SDF_MAX filters: a port list or several IEs make more) */
		why = NULL;
		if (sdf_build_list(p->spec[dir], p->n_spec[dir], dir, zero, l, &why))
			goto too_many;
		continue;
too_many:
		free(l);
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, last ? last->id : def->id);
		return false;
	}
	free(l);
	return true;
}

/*
 * The CP2UP PDR (Open5GS's SMF, src/smf/context.c smf_sess_create_cp_up_data_forwarding): Source
 * Interface CP-function, one IPv4 F-TEID of its own (CHOOSE, or given: this UP's address),
 * GTP-U/UDP/IP removed, no other match field (a UE IP Address, if any, the session's), its FAR
 * the session's downlink FAR (Open5GS shares it) or one forwarding to Access as that does; the
 * session has a /64 (the CP function sends IPv6: Router Advertisements). QERs may be linked (the
 * QFI sent is the downlink's marking); URRs too: the T-PDUs relayed are their downlink usage (the
 * tunnel's cp_relay counters), but not a volume threshold or quota (measured on the bearer's qos
 * entry, which no relayed packet passes).
 */
static bool cp2up_ok(struct pfcp_agent *a, const struct pfcp_msg *m, const struct plan *p)
{
	const struct pfcp_pdr *x = p->cp2up;
	const struct pfcp_far *f;
	__u64 x6;

	if (x->has_ue_ip && ((x->ue_ip.v4 && x->ue_ip.ipv4 != p->ue) || x->ue_ip.chv4 ||
			     x->ue_ip.chv6 ||
			     (x->ue_ip.v6 && (!ue6_ok(&x->ue_ip, &x6) || x6 != p->ue6))))
		return false;	/* a UE IP Address not the session's */
	if (!p->has_ue6 || !x->has_fteid || x->n_fteid != 1 || !x->fteid.v4 || x->fteid.v6 ||
	    (!x->fteid.ch && (!x->fteid.teid || (a->local_addr && x->fteid.ipv4 != a->local_addr))) ||
	    !x->has_ohr || (x->ohr != PFCP_OHR_GTPU_UDP_IPV4 && x->ohr != PFCP_OHR_GTPU_UDP_IP) ||
	    x->narrow_ie || x->n_sdf || x->n_qfi || !x->has_far_id || !refs_ok(x, m))
		return false;
	for (int i = 0; i < x->n_urr; i++)
		for (int k = 0; k < m->n_create_urr; k++) {
			const struct pfcp_urr *u = &m->create_urr[k];

			/* a threshold or quota is the bearer's qos entry's, which no relay passes */
			if (u->id == x->urr_id[i] && ((u->triggers & (RT_VOLTH | RT_VOLQU)) ||
			    (u->present & (PFCP_URR_VOL_THRESH | PFCP_URR_VOL_QUOTA))))
				return false;
		}
	if (!x->fteid.ch && x->fteid.teid == p->ul->fteid.teid)
		return false;	/* the bearer's own tunnel */
	f = far_by_id(m->create_far, m->n_create_far, x->far_id);
	if (!f)
		return false;
	if (p->dl_far->has_ohc && p->dl_far->ohc.desc != PFCP_OHC_GTPU_UDP_IPV4)
		return false;	/* xdp_cp relays into GTP-U/UDP/IPv4 tunnels only */
	if (f == p->dl_far)
		return true;
	return (f->apply & 0x1f) == PFCP_AA_FORW && f->has_fwd && p->dl_fwd && f->has_ohc &&
	       ohc_ok(a, &f->ohc) && ohc_same(&f->ohc, &p->dl_far->ohc) &&
	       (!f->has_dst_if || f->dst_if == PFCP_IF_ACCESS);
}

static int urr_index(const struct sess_rules *sr, __u32 id)
{
	for (int u = 0; u < sr->n_urr; u++)
		if (sr->urr[u].id == id)
			return u;
	return -1;
}

static bool links_urr(const struct pgwu_pfcp_pdr *l, __u32 id)
{
	for (int k = 0; k < l->n_urr; k++)
		if (l->urr[k] == id)
			return true;
	return false;
}

/*
 * The URRs with a volume threshold or quota (urr_in_dp) that PDRs of the filter lists link (the
 * SDF PDRs and the default of a direction with filters): each gets one sdf_urr entry, which all
 * its PDRs count in (PGWU_SDF_P_URR, sp->urr_id), so their usage adds up against one threshold
 * and one quota; st.in_sdf marks it. 73 naming the URR, for what one entry cannot measure: a PDR
 * linking two such URRs (sdf_pdrs names one), such a URR linked also by the default PDR of a
 * direction without filters (the bearer's qos entry measures that one) or by the CP2UP PDR.
 * p->r->sdf holds the lists' PDRs in p->spec's order (plan_est).
 */
static bool plan_sdf_urrs(struct plan *p, struct reply *r)
{
	struct sess_rules *sr = p->r;
	int e = 0;

	if (!sr)
		return true;
	for (int dir = 0; dir < 2; dir++)
		for (int i = 0; i < p->n_spec[dir]; i++, e++) {
			struct sdf_pdr_spec *sp = &p->spec[dir][i];
			const struct pgwu_pfcp_pdr *l = &sr->sdf[e].links;

			for (int k = 0; k < l->n_urr; k++) {
				int u = urr_index(sr, l->urr[k]);

				if (u < 0 || !urr_in_dp(&sr->urr[u]))
					continue;
				if (sp->has_urr) {	/* its second one */
					reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_URR,
						    l->urr[k]);
					plan_free(p);
					return false;
				}
				sp->has_urr = true;
				sp->urr_id = l->urr[k];
				sr->st[u].in_sdf = true;
			}
		}
	for (int u = 0; u < sr->n_urr; u++) {
		if (!sr->st[u].in_sdf)
			continue;
		for (int dir = 0; dir < 2; dir++)
			if (!p->n_spec[dir] && links_urr(&sr->pdr[dir], sr->urr[u].id))
				goto bad_u;
		if (p->cp2up && links_urr(&sr->cp2up, sr->urr[u].id))
			goto bad_u;
		continue;
bad_u:
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_URR, sr->urr[u].id);
		plan_free(p);
		return false;
	}
	return true;
}

/* The URRs of SDF PDRs (st.in_sdf): their sdf_urr entries written, each for the directions of
 * the PDRs that link it; all or none. 0 or -errno. */
static int sdf_urrs_install(struct pfcp_agent *a, __u32 teid, const struct sess_rules *sr)
{
	int err = 0, u;

	for (u = 0; u < sr->n_urr && !err; u++) {
		__u32 dirs = 0;

		if (!sr->st[u].in_sdf)
			continue;
		for (int e = 0; e < sr->n_sdf; e++)
			if (links_urr(&sr->sdf[e].links, sr->urr[u].id))
				dirs |= 1U << sr->sdf[e].dir;
		err = urr_install(a, teid, &sr->urr[u], dirs);
	}
	if (err)
		while (--u > 0)
			if (sr->st[u - 1].in_sdf)
				urr_remove(a, teid, sr->urr[u - 1].id);
	return err;
}

/* The bearer's qos entry: its gate, MBR, and the threshold/quota of the URRs its halves
 * without filters count (a direction in sdf_dirs applies its PDRs' entries, not this one) */
static void bearer_qos_of(const struct pfcp_agent *a, const struct sess_rules *sr, __u8 sdf_dirs,
			  const struct pgwu_qer *qer, const struct pgwu_urr *urr, struct pgwu_qos *q)
{
	struct pgwu_pfcp_pdr pdr[2];

	memcpy(pdr, sr->pdr, sizeof(pdr));
	for (int d = 0; d < 2; d++)
		if (sdf_dirs & (1U << d))
			pdr[d].n_urr = 0;
	qos_of(a, pdr, qer, sr->n_qer, urr, sr->n_urr, q);
}

static bool plan_est(struct pfcp_agent *a, const struct pfcp_msg *m, struct plan *p,
		     struct reply *r)
{
	long marking;
	int d;

	__u32 ue0 = 0;

	memset(p, 0, sizeof(*p));
	/* the UE's IPv4 address for pdi_all's host filters: the first downlink PDR's (every PDR's
	 * UE IP Address must name the session's, checked below) */
	for (int i = 0; i < m->n_create_pdr && !ue0; i++) {
		const struct pfcp_pdr *x = &m->create_pdr[i];

		if (x->src_if != PFCP_IF_ACCESS && x->has_ue_ip && x->ue_ip.v4)
			ue0 = x->ue_ip.ipv4;
	}
	/* per direction: the default PDR (its PDI matches all of the bearer's traffic: the
	 * bearer's own), and PDRs with SDF filters (a filter list in the data path) */
	for (int i = 0; i < m->n_create_pdr; i++) {
		const struct pfcp_pdr *x = &m->create_pdr[i];
		const struct pfcp_pdr **def;

		for (int j = 0; j < i; j++)
			if (m->create_pdr[j].id == x->id) {
				reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, x->id);
				return false;
			}
		if (x->src_if == PFCP_IF_CP && !p->cp2up) {
			p->cp2up = x;	/* checked once the session's /64 and FARs are known */
			continue;
		}
		if (x->src_if == PFCP_IF_ACCESS)
			def = &p->ul;
		else if (x->src_if == PFCP_IF_CORE || x->src_if == PFCP_IF_SGI_LAN)
			def = &p->dl;
		else
			def = NULL;	/* another interface (a second CP-function one) */
		if (!def || x->narrow_ie || (pdi_all(x, ue0) && *def)) {
			/* Application ID, Ethernet filter; a second PDR that matches everything */
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, x->id);
			return false;
		}
		if (pdi_all(x, ue0))
			*def = x;
		else
			p->x[p->n_x++] = x;
	}
	for (int i = 0; i < p->n_x; i++) {
		/* SDF PDRs of a direction without a default: no bearer to hang them on */
		if (!(p->x[i]->src_if == PFCP_IF_ACCESS ? p->ul : p->dl)) {
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, p->x[i]->id);
			return false;
		}
	}
	if (!p->ul || !p->dl) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, m->create_pdr[0].id);
		return false;
	}
	d = dup_id(m->create_far, m->n_create_far, sizeof(m->create_far[0]),
		   offsetof(struct pfcp_far, id));
	if (d >= 0) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, m->create_far[d].id);
		return false;
	}
	if (m->n_create_qer > PGWU_PFCP_MAX_RULES || m->n_create_urr > PGWU_PFCP_MAX_RULES) {
		reject(r, PFCP_CAUSE_NO_RESOURCES, m->n_create_qer > PGWU_PFCP_MAX_RULES ?
		       PFCP_IE_CREATE_QER : PFCP_IE_CREATE_URR);
		return false;
	}
	/* QERs and URRs: any number up to PFCP_MAX_RULES each (the decoder's bound), IDs unique,
	 * URRs measuring volume and/or duration */
	d = dup_id(m->create_qer, m->n_create_qer, sizeof(m->create_qer[0]),
		   offsetof(struct pfcp_qer, id));
	if (d >= 0) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_QER, m->create_qer[d].id);
		return false;
	}
	d = dup_id(m->create_urr, m->n_create_urr, sizeof(m->create_urr[0]),
		   offsetof(struct pfcp_urr, id));
	if (d >= 0) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_URR, m->create_urr[d].id);
		return false;
	}
	for (int i = 0; i < m->n_create_urr; i++) {
		if (!urr_method_ok(m->create_urr[i].method)) {
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_URR, m->create_urr[i].id);
			return false;
		}
	}

	/* uplink PDR: Access, one F-TEID, IPv4 and/or IPv6 (given or CHOOSE), its outer header
	 * removed (fteid_ok, ohr_ok) */
	if (!p->ul->has_fteid) {
		reject(r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_FTEID);
		return false;
	}
	if (p->ul->n_fteid > 1 || p->dl->n_fteid > 1) {
		/* which one is the tunnel? (a PDI has one Local F-TEID, 7.5.2.2) */
		reject(r, PFCP_CAUSE_MANDATORY_IE_INCORRECT, PFCP_IE_FTEID);
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
	if (!fteid_ok(a, &p->ul->fteid) || !ohr_ok(p->ul->ohr, &p->ul->fteid) ||
	    (p->ul->has_ue_ip && ((!p->ul->ue_ip.v4 && !p->ul->ue_ip.v6) || p->ul->ue_ip.chv4 ||
				  p->ul->ue_ip.chv6)) ||
	    p->ul->n_qfi > 1 ||	/* a list of QFIs: the data plane checks one */
	    !refs_ok(p->ul, m))
		goto bad_ul;

	/* downlink PDR: Core, the UE's IPv4 address (a host: addr_unusable) and/or its IPv6 /64
	 * (ue6_ok), no F-TEID */
	if (!p->dl->has_ue_ip) {
		reject(r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_UE_IP_ADDRESS);
		return false;
	}
	if (!p->dl->has_far_id) {
		reject(r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_FAR_ID);
		return false;
	}
	if (p->dl->ue_ip.v6 && ue6_plen(&p->dl->ue_ip) < 64)
		ue6_short_log(a, &p->dl->ue_ip);
	if ((!p->dl->ue_ip.v4 && !p->dl->ue_ip.v6) || p->dl->ue_ip.chv4 || p->dl->ue_ip.chv6 ||
	    (p->dl->ue_ip.v4 && addr_unusable(p->dl->ue_ip.ipv4)) ||
	    (p->dl->ue_ip.v6 && !ue6_ok(&p->dl->ue_ip, &p->ue6)) ||
	    p->dl->has_fteid || !refs_ok(p->dl, m))
		goto bad_dl;
	p->ue = p->dl->ue_ip.v4 ? p->dl->ue_ip.ipv4 : 0;
	p->has_ue6 = p->dl->ue_ip.v6;
	if (p->ul->has_ue_ip) {
		/* the uplink PDR's UE IP Address, if any, names the downlink's (each half it has) */
		__u64 ul6;

		if (p->ul->ue_ip.v6 && !ue6_ok(&p->ul->ue_ip, &ul6))
			goto bad_ul;
		if ((p->ul->ue_ip.v4 && (!p->ue || p->ul->ue_ip.ipv4 != p->ue)) ||
		    (p->ul->ue_ip.v6 && (!p->has_ue6 || ul6 != p->ue6)))
			goto bad_dl;
	}
	/* SDF filters: a bearer carries all of the UE's traffic, so a PDR must match all of it */
	if (!pdi_all(p->ul, p->ue))
		goto bad_ul;
	if (!pdi_all(p->dl, p->ue))
		goto bad_dl;

	/* FARs: uplink forwards to Core as is; downlink forwards to Access inside GTP-U/UDP/IPv4,
	 * or does not forward yet (BUFF/DROP: any outer header it carries is kept, unused) */
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
	p->dl_sgw_ok = p->dl_far->has_ohc && ohc_ok(a, &p->dl_far->ohc) &&
		       (!p->dl_far->has_dst_if || p->dl_far->dst_if == PFCP_IF_ACCESS);
	if (!dl_apply_ok(p->dl_far->apply) || (p->dl_fwd && !p->dl_sgw_ok)) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, p->dl_far->id);
		return false;
	}

	if (p->cp2up && !cp2up_ok(a, m, p)) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, p->cp2up->id);
		return false;
	}

	/* the rules to keep, and the QFIs they make (5G N3, TS 29.244 8.2.89): uplink G-PDUs must
	 * carry the uplink PDI's QFI; downlink ones get the QFI of the QERs the downlink PDR
	 * applies. A QFI in the downlink PDI would match on N6 packets, which carry none: accepted,
	 * not used. */
	p->ul_flags = p->ul->n_qfi ? pgwu_qfi_flags(p->ul->qfi) : 0;
	if (p->n_x && !plan_sdf(a, m, p, r))
		return false;
	for (int i = 0; i < m->n_create_far; i++) {
		/* a FAR no PDR applies: nothing this UP would do with it */
		int k;

		for (k = 0; k < m->n_create_pdr && m->create_pdr[k].far_id != m->create_far[i].id;
		     k++)
			;
		if (k == m->n_create_pdr) {
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, m->create_far[i].id);
			return false;
		}
	}
	if (m->n_create_qer || m->n_create_urr || p->n_x) {
		int n_sdf = p->n_spec[0] + p->n_spec[1], e = 0;

		p->r = rules_alloc(m->n_create_qer, m->n_create_urr, n_sdf);
		if (!p->r) {
			reject(r, PFCP_CAUSE_NO_RESOURCES, 0);
			return false;
		}
		for (int i = 0; i < m->n_create_qer; i++)
			qer_set(&p->r->qer[i], &m->create_qer[i]);
		for (int i = 0; i < m->n_create_urr; i++)
			urr_set(&p->r->urr[i], &m->create_urr[i]);
		pdr_links(&p->r->pdr[PGWU_PFCP_UPLINK], p->ul);
		pdr_links(&p->r->pdr[PGWU_PFCP_DOWNLINK], p->dl);
		if (p->cp2up)
			pdr_links(&p->r->cp2up, p->cp2up);
		marking = dl_marking(&p->r->pdr[PGWU_PFCP_DOWNLINK], p->r->qer, p->r->n_qer);
		if (marking < 0) {
			plan_free(p);
			goto bad_dl;
		}
		p->dl_flags = marking;
		/* the filter lists' PDRs: their links, their QERs' gate and MBR (their direction's),
		 * the downlink ones marking as the default does */
		for (int dir = 0; dir < 2; dir++)
			for (int i = 0; i < p->n_spec[dir]; i++) {
				struct sdf_pdr_spec *sp = &p->spec[dir][i];
				const struct pfcp_pdr *x = pdr_by_id(m, sp->pdr_id);
				struct sdf_ent *en = &p->r->sdf[e++];
				struct pgwu_pfcp_pdr one[2] = {};

				en->pdr_id = x->id;
				en->dir = dir;
				en->precedence = sp->precedence;
				pdr_links(&en->links, x);
				one[dir] = en->links;
				if (x->n_qer) {
					qos_of(a, one, p->r->qer, p->r->n_qer, NULL, 0, &sp->q);
					sp->has_qos = true;
				}
				if (dir == PGWU_PFCP_DOWNLINK && x != p->dl) {
					marking = dl_marking(&en->links, p->r->qer, p->r->n_qer);
					if (marking < 0 || (marking && marking != p->dl_flags)) {
						plan_free(p);
						reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR,
							    x->id);
						return false;
					}
				}
			}
	}
	return plan_sdf_urrs(p, r);
bad_ul:
	reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, p->ul->id);
	return false;
bad_dl:
	reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, p->dl->id);
	return false;
}

static void log_not_owner(struct pfcp_agent *a, const char *what, __u64 seid)
{
	char from[16];
	__u32 held;

	stat_add(a, PFCP_STAT_NOT_OWNER, 1);
	if (ratelimit_pass(a, &a->rl_not_owner, &held))
		fprintf(stderr, "pgwu pfcp: %s for session 0x%llx from %s:%u, not its association's "
			"address and port: answered as unknown (%u more since the last line)\n", what,
			(unsigned long long)seid,
			inet_ntop(AF_INET, &a->peer->sin_addr, from, sizeof(from)) ? from : "?",
			ntohs(a->peer->sin_port), held);
}

_Static_assert(PFCP_MAX_RULES <= 32, "on_sess_est's created: a bit per Create PDR");

void on_sess_est(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w)
{
	static struct pfcp_msg chm;	/* m with its CHV4/CHV6 resolved (one thread: static) */
	struct reply r = { .cause = m->cause, .offending = m->offending_ie };
	struct pgwu_dl_bearer dl = {}, old_dl;
	const struct pfcp_msg *pm = m;	/* what is planned: m, or chm */
	struct ueip_chosen ch = {};
	struct sess *s = NULL;
	struct plan p = {};
	__u32 created = 0;	/* the Create PDRs (bit i: pm->create_pdr[i]) given a Created PDR */
	__u32 teid = 0, idx, owner, qflag = 0, sflag[2] = { 0, 0 }, cp_teid = 0;
	int ai = -1, err, cp_err = 0;

	if (r.cause != PFCP_CAUSE_ACCEPTED)
		goto out;
	if (m->h.seid) {
		/* the header's SEID is the receiver's, which an establishment has none of yet
		 * (7.2.2.4.2: 0): a CP that sets one means something this UP cannot tell */
		reject(&r, PFCP_CAUSE_REJECTED, 0);
		goto out;
	}
	if (m->n_fseid > 1) {
		reject(&r, PFCP_CAUSE_MANDATORY_IE_INCORRECT, PFCP_IE_FSEID);	/* which one? */
		goto out;
	}
	ai = assoc_find(a, &m->node_id);
	if (ai >= 0 && !assoc_owns(a, ai, a->peer)) {
		log_not_owner(a, "session establishment in another CP's name", m->fseid.seid);
		ai = -1;
	}
	if (ai < 0) {
		reject(&r, PFCP_CAUSE_NO_ASSOCIATION, 0);
		goto out;
	}
	if (fseid_find(a, ai, m->fseid.seid, m->fseid.v4 ? m->fseid.ipv4 : 0)) {
		/* a CP F-SEID names one session of its CP (5.6.2): a second would make every
		 * answer and report carrying it ambiguous */
		reject(&r, PFCP_CAUSE_MANDATORY_IE_INCORRECT, PFCP_IE_FSEID);
		goto out;
	}
	/* the UP's choice of UE address (CHV4/CHV6), then planned as an address the CP gave */
	if (ueip_wanted(m)) {
		if (!ueip_choose(a, m, &chm, &ch, &r))
			goto out;
		pm = &chm;
	}
	if (!plan_est(a, pm, &p, &r))
		goto out;
	if (!a->n_free) {
		reject(&r, PFCP_CAUSE_NO_RESOURCES, 0);
		goto out;
	}
	/* the UE must be free: in this agent's sessions (some have no downlink half) and the table;
	 * its IPv4 address and its /64 alike */
	if ((p.ue && (ue_find(a, p.ue) ||
		      (!p.dl_fwd && !bpf_map_lookup_elem(a->m.dl, &p.ue, &old_dl)))) ||
	    (p.has_ue6 && (ue6_find(a, p.ue6) ||
			   (!p.dl_fwd && !bpf_map_lookup_elem(a->m.dl6, &p.ue6, &old_dl))))) {
		reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, p.dl->id);
		goto out;
	}
	teid = p.ul->fteid.ch ? teid_alloc(a) : p.ul->fteid.teid;
	if (!teid) {
		reject(&r, PFCP_CAUSE_NO_RESOURCES, 0);
		goto out;
	}
	if (p.r) {
		/* what the data path enforces, in place before the halves that point at it */
		struct pgwu_qos q;

		bearer_qos_of(a, p.r, (p.n_spec[0] ? 1 : 0) | (p.n_spec[1] ? 2 : 0), p.r->qer,
			      p.r->urr, &q);
		err = qos_install(a, teid, &q);
		if (err == -EEXIST)
			reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, p.ul->id);
		else if (err)
			reject(&r, err == -E2BIG ? PFCP_CAUSE_NO_RESOURCES : PFCP_CAUSE_SYSTEM_FAILURE,
			       0);
		if (err)
			goto out;
		qflag = PGWU_B_QOS;
		/* the thresholds and quotas of URRs of SDF PDRs, before the PDRs that name them */
		err = sdf_urrs_install(a, teid, p.r);
		if (err) {
			qos_remove(a, teid);
			reject(&r, err == -E2BIG ? PFCP_CAUSE_NO_RESOURCES : PFCP_CAUSE_SYSTEM_FAILURE,
			       0);
			goto out;
		}
	}
	/* the filter lists, before the halves that point at them (PGWU_B_SDF) */
	for (int dir = 0; dir < 2; dir++) {
		__u32 rules[SDF_MAX_PDRS];
		const char *why = NULL;

		if (!p.n_spec[dir])
			continue;
		err = sdf_install(&a->m.sdf, teid, dir, p.spec[dir], p.n_spec[dir], rules, &why);
		if (err) {
			if (dir)
				sdf_remove(&a->m.sdf, teid, PGWU_PFCP_UPLINK);
			if (qflag) {
				sdf_urrs_remove(a, teid, p.r);
				qos_remove(a, teid);
			}
			if (why)
				reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR,
					    p.spec[dir][p.n_spec[dir] - 1].pdr_id);
			else
				reject(&r, err == -E2BIG || err == -ENOSPC ? PFCP_CAUSE_NO_RESOURCES :
				       PFCP_CAUSE_SYSTEM_FAILURE, 0);
			goto out;
		}
		for (int i = 0; i < p.n_spec[dir]; i++)
			for (int e = 0; e < p.r->n_sdf; e++)
				if (p.r->sdf[e].pdr_id == p.spec[dir][i].pdr_id)
					p.r->sdf[e].rule = rules[i];
		p.r->sdf_dirs |= 1U << dir;
		sflag[dir] = PGWU_B_SDF;
		for (int i = 0; i < p.n_spec[dir]; i++)
			if (p.spec[dir][i].to_cp)
				sflag[dir] |= PGWU_B_CP;	/* xdp_cp first (UP2CP) */
	}
	a->gen++;
	if (!a->gen)
		a->gen++;
	owner = owner_tag(a->gen);
	dl.sgw_addr = p.dl_far->ohc.ipv4;
	if (p.dl_sgw_ok && p.dl_far->ohc.desc == PFCP_OHC_GTPU_UDP_IPV6) {
		/* N3 over IPv6: the half names its peer by its n3v6_peers index (PGWU_B_PEER6, in
		 * the marking's flags from here on: every write of the half carries it) */
		if (n3v6_peer_find(&a->m, p.dl_far->ohc.ipv6, true, &dl.sgw_addr)) {
			reject(&r, PFCP_CAUSE_NO_RESOURCES, 0);
			goto out;
		}
		p.dl_flags |= PGWU_B_PEER6;
	}
	dl.sgw_teid = p.dl_far->ohc.teid;
	dl.local_teid = teid;
	dl.flags = p.dl_flags | qflag | sflag[1] | owner << PGWU_B_OWNER_SHIFT;
	err = bearer_add(&a->m, teid, p.ue,
			 p.ul_flags | qflag | sflag[0] | owner << PGWU_B_OWNER_SHIFT,
			 p.dl_fwd && p.ue ? &dl : NULL);
	if (!err && p.has_ue6) {
		/* the /64: uplink anti-spoofing, and the IPv6 downlink half while the FAR forwards;
		 * all or nothing with the IPv4 halves */
		err = bearer_add_v6(&a->m, teid, p.ue6, p.dl_fwd ? &dl : NULL);
		if (!err && p.cp2up) {
			/* the CP2UP tunnel: its T-PDUs go where the /64's downlink half sends */
			cp_teid = p.cp2up->fteid.ch ? teid_alloc(a) : p.cp2up->fteid.teid;
			cp_err = cp_teid ? cp2up_add(&a->m.sdf, a->m.ul, cp_teid, p.ue6,
						     owner << PGWU_B_OWNER_SHIFT) : -E2BIG;
			err = cp_err;
		}
		if (err)
			bearer_remove(&a->m, teid, p.ue, true, p.dl_fwd && p.ue);
	}
	if (err && p.r && p.r->sdf_dirs) {
		for (int dir = 0; dir < 2; dir++)
			if (p.r->sdf_dirs & (1U << dir))
				sdf_remove(&a->m.sdf, teid, dir);
	}
	if (err && qflag) {
		sdf_urrs_remove(a, teid, p.r);
		qos_remove(a, teid);
	}
	if (cp_err == -EEXIST)	/* the CP2UP F-TEID the CP chose is in use */
		reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, p.cp2up->id);
	else if (err == -EEXIST)	/* the F-TEID the CP chose is in use */
		reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, p.ul->id);
	else if (err == -EADDRINUSE)	/* the UE address or /64 has a bearer */
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
	s->up_seid = (__u64)a->gen << 32 | (idx + 1);
	s->cp_seid = m->fseid.seid;
	s->cp_addr = m->fseid.v4 ? m->fseid.ipv4 : 0;
	s->teid = teid;
	s->ue = p.ue;
	s->has_ue6 = p.has_ue6;
	s->ue6 = p.has_ue6 ? p.ue6 : 0;
	s->cp2up_teid = cp_teid;
	s->owner = owner;
	s->has_sgw = p.dl_sgw_ok;
	s->ohc_placeholder = p.dl_far->has_ohc && !p.dl_sgw_ok;
	s->dl_dst_ok = !p.dl_far->has_dst_if || p.dl_far->dst_if == PFCP_IF_ACCESS;
	s->sgw = p.dl_sgw_ok ? dl.sgw_addr : 0;
	s->sgw_teid = p.dl_sgw_ok ? dl.sgw_teid : 0;
	s->ul_pdr = p.ul->id;
	s->dl_pdr = p.dl->id;
	s->prec[PGWU_PFCP_UPLINK] = p.ul->precedence;
	s->prec[PGWU_PFCP_DOWNLINK] = p.dl->precedence;
	s->ul_far = p.ul_far->id;
	s->dl_far = p.dl_far->id;
	s->dl_apply = p.dl_far->apply;
	s->dl_on = p.dl_fwd;
	s->dl_flags = p.dl_flags;
	s->assoc = ai;
	s->start_ms = a->now_ms;
	s->flags = S_USED;
	s->r = p.r;
	p.r = NULL;
	if (s->r) {
		a->n_qer += s->r->n_qer;
		a->n_urr += s->r->n_urr;
		rules_count(a);
	}
	sess_index_add(a, idx);
	a->assoc[ai].sessions++;
	if (a->peers)
		a->peers[ai].sessions = a->assoc[ai].sessions;
	a->n_sess++;
	stat_set(a, PFCP_STAT_SESSIONS, a->n_sess);
	sess_publish(a, s);
	usage_watch(a, s);
out:
	plan_free(&p);
	/* the CP's SEID when it was readable (TS 29.244 7.2.2.4.2), else 0 */
	pfcp_w_hdr(w, PFCP_SESS_EST_RESP, true, m->present & PFCP_P_FSEID ? m->fseid.seid : 0,
		   m->h.seq);
	pfcp_w_node_id(w, &a->node_id);
	w_cause(w, &r);
	if (s) {
		pfcp_w_fseid(w, s->up_seid, a->n4_addr);
		/* each PDR's chosen F-TEID and UE address (CHV) in one Created PDR (7.5.3.2) */
#define ASKED(x) (&m->create_pdr[(x) - pm->create_pdr])
		if (p.ul->fteid.ch) {
			size_t g = pfcp_w_group_begin(w, PFCP_IE_CREATED_PDR);

			pfcp_w_u16(w, PFCP_IE_PDR_ID, p.ul->id);
			pfcp_w_fteid46(w, teid, p.ul->fteid.v4 ? a->local_addr : 0,
				       p.ul->fteid.v6 ? a->n3_addr6 : NULL);
			ueip_w_created(w, ASKED(p.ul), &ch);
			pfcp_w_group_end(w, g);
			created |= 1U << (p.ul - pm->create_pdr);
			/* the uplink SDF PDRs: the session's one F-TEID (same_tunnel) */
			for (int i = 0; i < p.n_x; i++) {
				if (p.x[i]->src_if != PFCP_IF_ACCESS)
					continue;
				g = pfcp_w_group_begin(w, PFCP_IE_CREATED_PDR);
				pfcp_w_u16(w, PFCP_IE_PDR_ID, p.x[i]->id);
				pfcp_w_fteid46(w, teid, p.ul->fteid.v4 ? a->local_addr : 0,
					       p.ul->fteid.v6 ? a->n3_addr6 : NULL);
				ueip_w_created(w, ASKED(p.x[i]), &ch);
				pfcp_w_group_end(w, g);
				created |= 1U << (p.x[i] - pm->create_pdr);
			}
		}
		if (p.cp2up && p.cp2up->fteid.ch) {
			size_t g = pfcp_w_group_begin(w, PFCP_IE_CREATED_PDR);

			pfcp_w_u16(w, PFCP_IE_PDR_ID, p.cp2up->id);
			pfcp_w_fteid(w, cp_teid, a->local_addr);
			ueip_w_created(w, ASKED(p.cp2up), &ch);
			pfcp_w_group_end(w, g);
			created |= 1U << (p.cp2up - pm->create_pdr);
		}
#undef ASKED
		for (int i = 0; (ch.v4 || ch.v6) && i < m->n_create_pdr; i++) {
			const struct pfcp_pdr *x = &m->create_pdr[i];
			size_t g;

			if ((created & (1U << i)) || !x->has_ue_ip || !(x->ue_ip.chv4 || x->ue_ip.chv6))
				continue;
			g = pfcp_w_group_begin(w, PFCP_IE_CREATED_PDR);
			pfcp_w_u16(w, PFCP_IE_PDR_ID, x->id);
			ueip_w_created(w, x, &ch);
			pfcp_w_group_end(w, g);
		}
	}
	stat_add(a, PFCP_STAT_TX(PFCP_SESS_EST_RESP, r.cause), 1);
}

/* ---- modification: Update FAR (downlink: forwarding on/off, a new SGW F-TEID as at handover),
 * Update QER, Update URR ---- */

static int dl_set(struct pfcp_agent *a, struct sess *s, __u32 sgw, __u32 sgw_teid, __u32 flags);

/* ---- modification: SDF PDRs created and removed (Create PDR / Remove PDR, with Create and Remove
 * FAR, QER, URR: a QoS flow added to a running session and taken away again, as Open5GS's and
 * free5GC's SMFs do). The defaults and the CP2UP PDR stay as established. ---- */

#define PP_MAX_SDF (2 * SDF_MAX_PDRS)

/* a removed URR's final report (TS 29.244 7.5.5.2), computed before its rules go */
struct removed_urr {
	struct pgwu_urr urr;
	struct urr_state st;
	__u64 v[6];
};

struct pdr_plan {
	bool any;			/* the request creates or removes rules */
	struct sess_rules *nr;		/* the session's rules as they will be */
	struct sdf_pdr_spec *spec[2];	/* per direction: its new PDRs (and its default, when the
					 * direction gets its first SDF PDRs) */
	int n_spec[2];
	bool convert[2];		/* the direction gets its first SDF PDRs */
	bool touch[2];			/* the direction's filter list changes */
	bool to_cp;			/* an uplink PDR to the CP function is created */
	int gone[PP_MAX_SDF];		/* indexes in s->r->sdf of the PDRs removed */
	int n_gone;
	int urr_gone[PGWU_PFCP_MAX_RULES];	/* indexes in s->r->urr of the URRs removed */
	int n_urr_gone;
	__u32 qer_gone[PGWU_PFCP_MAX_RULES];	/* IDs of the QERs removed */
	int n_qer_gone;
	struct removed_urr fin[PGWU_PFCP_MAX_RULES];
	int n_fin;
	const struct pfcp_pdr *created_ul[PFCP_MAX_RULES];	/* answered with a Created PDR */
	int n_created_ul;
	/* Update PDR (7.5.4.2) of an SDF PDR: planned as its Remove PDR and a Create PDR of the same
	 * ID (a new rule, new counters; the old rule's count goes to the URRs it linked, as a
	 * removed PDR's does), in mm: the request with them added. Without a PDI its filters stay
	 * (keep[i] for mm->create_pdr[i]: the list's filters of the old rule carried over) */
	struct pfcp_msg *mm;
	bool keep[PFCP_MAX_RULES];
	__u32 keep_rule[2][SDF_MAX_PDRS];	/* per spec: the old rule whose filters it takes, 0 */
	__u32 prec[2];		/* the default PDRs' precedence after the request */
	bool prec_upd[2];	/* an Update PDR changed it */
	const char *why;	/* why an Update PDR was refused, for the log */
};

static void pdr_plan_free(struct pdr_plan *pp)
{
	free(pp->mm);
	pp->mm = NULL;
	free(pp->nr);
	free(pp->spec[0]);
	free(pp->spec[1]);
	pp->nr = NULL;
	pp->spec[0] = pp->spec[1] = NULL;
}

static bool id_in(const __u32 *ids, int n, __u32 id)
{
	for (int i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

static bool int_in(const int *v, int n, int x)
{
	for (int i = 0; i < n; i++)
		if (v[i] == x)
			return true;
	return false;
}

/* does a PDR that stays (a default, an SDF PDR not removed, one created) link QER / URR id? */
static bool linked_after(const struct sess *s, const struct pdr_plan *pp, const struct pfcp_msg *m,
			 bool urr, __u32 id)
{
	const struct sess_rules *o = s->r;

	for (int d = 0; d < 3; d++) {
		const struct pgwu_pfcp_pdr *l = d < 2 ? &o->pdr[d] : &o->cp2up;

		if (urr ? id_in(l->urr, l->n_urr, id) : id_in(l->qer, l->n_qer, id))
			return true;
	}
	for (int e = 0; e < o->n_sdf; e++) {
		const struct pgwu_pfcp_pdr *l = &o->sdf[e].links;

		if (!int_in(pp->gone, pp->n_gone, e) &&
		    (urr ? id_in(l->urr, l->n_urr, id) : id_in(l->qer, l->n_qer, id)))
			return true;
	}
	for (int i = 0; i < m->n_create_pdr; i++) {
		const struct pfcp_pdr *x = &m->create_pdr[i];

		if (urr ? id_in(x->urr_id, x->n_urr, id) : id_in(x->qer_id, x->n_qer, id))
			return true;
	}
	return false;
}

/* the FAR ids the session has after the request, but for created ones: the defaults' and those
 * of the SDF PDRs that stay */
static bool far_kept(const struct sess *s, const struct pdr_plan *pp, __u32 id)
{
	if (id == s->ul_far || id == s->dl_far)
		return true;
	for (int e = 0; e < s->r->n_sdf; e++)
		if (!int_in(pp->gone, pp->n_gone, e) && s->r->sdf[e].links.far_id == id)
			return true;
	return false;
}

/* Update PDR of an SDF PDR en: *x the PDR as it will be, the IEs given over what it has (a PDI
 * replaces the PDI; URR / QER IDs the whole list) */
static void pdr_merge(const struct sdf_ent *en, const struct pfcp_pdr *u, bool pdi,
		      struct pfcp_pdr *x)
{
	if (pdi) {
		*x = *u;
	} else {
		memset(x, 0, sizeof(*x));
		x->src_if = en->dir == PGWU_PFCP_UPLINK ? PFCP_IF_ACCESS : PFCP_IF_CORE;
	}
	x->id = en->pdr_id;
	x->has_precedence = true;
	x->precedence = u->has_precedence ? u->precedence : en->precedence;
	x->has_far_id = true;
	x->far_id = u->has_far_id ? u->far_id : en->links.far_id;
	x->n_urr = u->n_urr ? u->n_urr : en->links.n_urr;
	memcpy(x->urr_id, u->n_urr ? u->urr_id : en->links.urr, x->n_urr * sizeof(__u32));
	x->n_qer = u->n_qer ? u->n_qer : en->links.n_qer;
	memcpy(x->qer_id, u->n_qer ? u->qer_id : en->links.qer, x->n_qer * sizeof(__u32));
	if (pdi && !u->has_ohr && x->src_if == PFCP_IF_ACCESS) {
		/* the session's one tunnel's: GTP-U/UDP/IPv6 for an IPv6-only F-TEID */
		x->has_ohr = true;
		x->ohr = x->fteid.v6 && !x->fteid.v4 ? PFCP_OHR_GTPU_UDP_IPV6 : PFCP_OHR_GTPU_UDP_IPV4;
	}
}

/* The forwarding of the session's FAR far_id that an SDF PDR of direction dir uses now (one not
 * created in the request: an Update PDR keeps it, or moves to it) onto sp: drop, to the CP
 * function (its tunnel), else forward. false: no SDF PDR of that direction uses it. */
static bool far_of_ent(struct pfcp_agent *a, const struct sess *s, __u32 far_id, int dir,
		       struct sdf_pdr_spec *sp)
{
	for (int e = 0; e < s->r->n_sdf; e++) {
		const struct sdf_ent *en = &s->r->sdf[e];
		struct pgwu_cp_key k = { .id = en->rule, .kind = PGWU_CP_UP2CP };
		struct pgwu_cp_relay v;
		struct pgwu_sdf_pdr d;

		if (en->dir != dir || en->links.far_id != far_id ||
		    en->pdr_id == (dir == PGWU_PFCP_UPLINK ? s->ul_pdr : s->dl_pdr) ||
		    bpf_map_lookup_elem(a->m.sdf.pdrs, &en->rule, &d))
			continue;
		sp->drop = d.flags & PGWU_SDF_P_DROP;
		sp->to_cp = d.flags & PGWU_SDF_P_CP;
		if (sp->to_cp) {
			if (a->m.sdf.cp < 0 || bpf_map_lookup_elem(a->m.sdf.cp, &k, &v))
				return false;
			sp->cp_addr = v.addr;
			sp->cp_teid = v.teid;
		}
		return true;
	}
	return false;
}

/* Does the list filter of rule go with a PDR removed (not one an Update PDR keeps the filters of)? */
static bool filt_gone(const struct sess_rules *o, const struct pdr_plan *pp, __u32 rule)
{
	for (int g = 0; g < pp->n_gone; g++)
		if (o->sdf[pp->gone[g]].rule == rule)
			return !id_in(pp->keep_rule[o->sdf[pp->gone[g]].dir], SDF_MAX_PDRS, rule);
	return false;
}

/*
 * The request's Update PDRs into pp->mm (a copy of m): an SDF PDR's as its removal and a created
 * PDR (pdr_merge); a default PDR's: a new precedence (its place in its direction's list, when it
 * has one), with its FAR, URRs, QERs as they are and no PDI (the bearer's half is what the data
 * path has for it); the CP2UP PDR's: none. false: r and pp->why say why.
 */
static bool plan_updates(const struct pfcp_msg *m, const struct sess *s, struct pdr_plan *pp,
			 struct reply *r)
{
	const struct sess_rules *o = s->r;
	struct pfcp_msg *mm = malloc(sizeof(*mm));

	if (!mm) {
		reject(r, PFCP_CAUSE_NO_RESOURCES, 0);
		return false;
	}
	*mm = *m;
	pp->mm = mm;
	for (int i = 0; i < m->n_update_pdr; i++) {
		const struct pfcp_pdr *u = &m->update_pdr[i];
		int dir = u->id == s->ul_pdr ? PGWU_PFCP_UPLINK :
			  u->id == s->dl_pdr ? PGWU_PFCP_DOWNLINK : -1;
		int e;

		for (int k = 0; k < i; k++)
			if (m->update_pdr[k].id == u->id) {
				pp->why = "the PDR updated twice in one request";
				goto bad;
			}
		if (dir >= 0) {
			const struct pgwu_pfcp_pdr *l = &o->pdr[dir];
			bool same = true;

			for (int k = 0; k < u->n_urr; k++)
				same &= id_in(l->urr, l->n_urr, u->urr_id[k]);
			same &= !u->n_urr || u->n_urr == l->n_urr;
			for (int k = 0; k < u->n_qer; k++)
				same &= id_in(l->qer, l->n_qer, u->qer_id[k]);
			same &= !u->n_qer || u->n_qer == l->n_qer;
			if (m->upd_pdi[i] || u->has_ohr ||
			    (u->has_far_id && u->far_id != (dir ? s->dl_far : s->ul_far)) || !same) {
				pp->why = "a default PDR's PDI, Outer Header Removal, FAR, URRs or QERs "
					  "changed (the bearer's half and counters are its rules: only "
					  "its precedence can change)";
				goto bad;
			}
			if (u->has_precedence) {
				pp->prec[dir] = u->precedence;
				pp->prec_upd[dir] = true;
				pp->touch[dir] |= !!(o->sdf_dirs & (1U << dir));
			}
			continue;
		}
		for (e = 0; e < o->n_sdf && o->sdf[e].pdr_id != u->id; e++)
			;
		if (e == o->n_sdf) {
			pp->why = u->id == o->cp2up.id && s->cp2up_teid ?
				  "the CP2UP PDR (its tunnel is set up once)" :
				  "no PDR of the session has that ID";
			goto bad;
		}
		if (mm->n_create_pdr == PFCP_MAX_RULES || mm->n_remove_pdr == PFCP_MAX_RULES) {
			reject(r, PFCP_CAUSE_NO_RESOURCES, PFCP_IE_UPDATE_PDR);
			return false;
		}
		pp->keep[mm->n_create_pdr] = !m->upd_pdi[i];
		pdr_merge(&o->sdf[e], u, m->upd_pdi[i], &mm->create_pdr[mm->n_create_pdr++]);
		mm->remove_pdr[mm->n_remove_pdr++] = u->id;
		continue;
bad:
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, u->id);
		return false;
	}
	return true;
}

/* The list of direction dir's new PDRs' filters (rules: their rule ids, by spec), those whose
 * filters stay (keep_rule) left out: sdf_build_list's 0 or -1 */
static int sdf_list_new(const struct pdr_plan *pp, int dir, const __u32 *rules,
			struct pgwu_sdf_list *l, const char **why)
{
	struct sdf_pdr_spec *sp = calloc(pp->n_spec[dir] + 1, sizeof(*sp));
	__u32 ru[SDF_MAX_PDRS];
	int n = 0, err;

	if (!sp) {
		*why = "out of memory";
		return -1;
	}
	for (int i = 0; i < pp->n_spec[dir]; i++)
		if (!pp->keep_rule[dir][i]) {
			ru[n] = rules[i];
			sp[n++] = pp->spec[dir][i];
		}
	err = sdf_build_list(sp, n, dir, ru, l, why);
	free(sp);
	return err;
}

static bool plan_pdrs(struct pfcp_agent *a, const struct pfcp_msg *m0, const struct sess *s,
		      const struct pgwu_qer *upd_qer, const struct pgwu_urr *upd_urr,
		      struct pdr_plan *pp, struct reply *r)
{
	const struct sess_rules *o = s->r;
	struct pgwu_sdf_list *l = NULL;
	struct pgwu_ul_bearer ub;
	__u32 zero[SDF_MAX_PDRS] = { 0 };
	int n_qer, n_urr, n_sdf, e, ul_qfi = -1, n_dir[2] = { 0, 0 };
	const struct pfcp_msg *m = m0;
	const char *why;
	bool sdf_after;

	pp->any = m->n_create_pdr || m->n_remove_pdr || m->n_create_far || m->n_remove_far ||
		  m->n_create_urr || m->n_remove_urr || m->n_create_qer || m->n_remove_qer ||
		  m->n_update_pdr;
	pp->prec[0] = s->prec[0];
	pp->prec[1] = s->prec[1];
	if (!pp->any)
		return true;
	if (!o && m->n_update_pdr) {
		/* the defaults of a session without QERs or URRs: the same checks */
		struct sess_rules none = {};
		struct sess t = *s;

		t.r = &none;
		if (!plan_updates(m0, &t, pp, r))
			return false;
		if (!m->n_create_pdr && !m->n_remove_pdr && !m->n_create_far && !m->n_remove_far &&
		    !m->n_create_urr && !m->n_remove_urr && !m->n_create_qer && !m->n_remove_qer &&
		    !pp->mm->n_create_pdr) {
			pp->any = false;
			return true;
		}
	}
	if (!o) {
		/* a session set up without a QER or URR, and no PDR created (on_sess_mod gives it
		 * rules of its defaults when the request creates PDRs): nothing to remove or link */
		if (m->n_create_pdr)
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, m->create_pdr[0].id);
		else
			reject(r, PFCP_CAUSE_RULE_FAILURE, m->n_remove_pdr ? PFCP_IE_REMOVE_PDR :
			       m->n_create_far ? PFCP_IE_CREATE_FAR : m->n_remove_far ?
			       PFCP_IE_REMOVE_FAR : m->n_create_urr ? PFCP_IE_CREATE_URR :
			       m->n_remove_urr ? PFCP_IE_REMOVE_URR : m->n_create_qer ?
			       PFCP_IE_CREATE_QER : PFCP_IE_REMOVE_QER);
		return false;
	}
	if (!plan_updates(m0, s, pp, r))
		return false;
	m = pp->mm;
	/* Remove PDR: an SDF PDR of the session (not a default, not the CP2UP PDR) */
	for (int i = 0; i < m->n_remove_pdr; i++) {
		for (e = 0; e < o->n_sdf && o->sdf[e].pdr_id != m->remove_pdr[i]; e++)
			;
		if (e == o->n_sdf || o->sdf[e].pdr_id == s->ul_pdr || o->sdf[e].pdr_id == s->dl_pdr ||
		    int_in(pp->gone, pp->n_gone, e)) {
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, m->remove_pdr[i]);
			return false;
		}
		pp->gone[pp->n_gone++] = e;
		pp->touch[o->sdf[e].dir] = true;
	}
	/* Remove QER / URR: of the session, linked by no PDR that stays */
	for (int i = 0; i < m->n_remove_qer; i++) {
		__u32 id = m->remove_qer[i];

		if (!qer_of(o->qer, o->n_qer, id) || id_in(pp->qer_gone, pp->n_qer_gone, id) ||
		    linked_after(s, pp, m, false, id)) {
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_QER, id);
			return false;
		}
		pp->qer_gone[pp->n_qer_gone++] = id;
	}
	for (int i = 0; i < m->n_remove_urr; i++) {
		__u32 id = m->remove_urr[i];
		int u;

		for (u = 0; u < o->n_urr && o->urr[u].id != id; u++)
			;
		if (u == o->n_urr || int_in(pp->urr_gone, pp->n_urr_gone, u) ||
		    linked_after(s, pp, m, true, id)) {
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_URR, id);
			return false;
		}
		pp->urr_gone[pp->n_urr_gone++] = u;
	}
	/* Remove FAR: the FAR of a removed PDR that no PDR that stays or is created uses */
	for (int i = 0; i < m->n_remove_far; i++) {
		__u32 id = m->remove_far[i];
		bool of_gone = false;

		for (int g = 0; g < pp->n_gone; g++)
			of_gone |= o->sdf[pp->gone[g]].links.far_id == id;
		for (int k = 0; k < m->n_create_pdr; k++)
			of_gone &= m->create_pdr[k].far_id != id;
		if (!of_gone || far_kept(s, pp, id)) {
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, id);
			return false;
		}
	}
	/* Create QER / URR: new IDs (or those of rules this request removes) */
	{
		int d = dup_id(m->create_qer, m->n_create_qer, sizeof(m->create_qer[0]),
			       offsetof(struct pfcp_qer, id));

		for (int i = 0; d < 0 && i < m->n_create_qer; i++)
			if (qer_of(o->qer, o->n_qer, m->create_qer[i].id) &&
			    !id_in(pp->qer_gone, pp->n_qer_gone, m->create_qer[i].id))
				d = i;
		if (d >= 0) {
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_QER, m->create_qer[d].id);
			return false;
		}
		d = dup_id(m->create_urr, m->n_create_urr, sizeof(m->create_urr[0]),
			   offsetof(struct pfcp_urr, id));
		for (int i = 0; d < 0 && i < m->n_create_urr; i++) {
			int u;

			for (u = 0; u < o->n_urr && o->urr[u].id != m->create_urr[i].id; u++)
				;
			if ((u < o->n_urr && !int_in(pp->urr_gone, pp->n_urr_gone, u)) ||
			    !urr_method_ok(m->create_urr[i].method))
				d = i;
		}
		if (d >= 0) {
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_URR, m->create_urr[d].id);
			return false;
		}
	}
	/* Create FAR: a new ID, used by a PDR this request creates */
	for (int i = 0; i < m->n_create_far; i++) {
		__u32 id = m->create_far[i].id;
		bool used = false;

		for (int k = 0; k < m->n_create_pdr; k++)
			used |= m->create_pdr[k].far_id == id;
		for (int k = 0; k < i; k++)
			used &= m->create_far[k].id != id;
		if (!used || far_kept(s, pp, id)) {
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, id);
			return false;
		}
	}
	n_qer = o->n_qer - pp->n_qer_gone + m->n_create_qer;
	n_urr = o->n_urr - pp->n_urr_gone + m->n_create_urr;
	if (n_qer > PGWU_PFCP_MAX_RULES || n_urr > PGWU_PFCP_MAX_RULES) {
		reject(r, PFCP_CAUSE_NO_RESOURCES, n_qer > PGWU_PFCP_MAX_RULES ?
		       PFCP_IE_CREATE_QER : PFCP_IE_CREATE_URR);
		return false;
	}
	if (!bpf_map_lookup_elem(a->m.ul, &s->teid, &ub))
		ul_qfi = pgwu_qfi_of(ub.flags);
	/* Create PDR: an SDF PDR on the session's bearer, as at establishment (plan_sdf) */
	for (int i = 0; i < m->n_create_pdr; i++) {
		const struct pfcp_pdr *x = &m->create_pdr[i];
		bool ul = x->src_if == PFCP_IF_ACCESS;
		const struct pfcp_far *f;
		bool dup = x->id == s->ul_pdr || x->id == s->dl_pdr;
		bool to_cp;
		__u64 x6;

		for (e = 0; e < o->n_sdf; e++)
			dup |= o->sdf[e].pdr_id == x->id && !int_in(pp->gone, pp->n_gone, e);
		for (int k = 0; k < i; k++)
			dup |= m->create_pdr[k].id == x->id;
		if (pp->keep[i] && !dup)
			goto links;	/* its PDI as it was */
		if (dup || (!ul && x->src_if != PFCP_IF_CORE && x->src_if != PFCP_IF_SGI_LAN) ||
		    x->narrow_ie || pdi_all(x, s->ue))
			goto bad_pdr;	/* a second default, the CP function's, an ID in use */
		if (ul ? (!x->has_fteid || x->n_fteid != 1 || !fteid_ok(a, &x->fteid) ||
			  (!x->fteid.ch && x->fteid.teid != s->teid) || !x->has_ohr ||
			  !ohr_ok(x->ohr, &x->fteid) || x->n_qfi > 1 ||
			  (x->n_qfi && x->qfi != ul_qfi))
		       : x->has_fteid)
			goto bad_pdr;
		if (x->has_ue_ip &&
		    ((x->ue_ip.v4 && (!s->ue || x->ue_ip.ipv4 != s->ue)) || x->ue_ip.chv4 ||
		     x->ue_ip.chv6 ||
		     (x->ue_ip.v6 && (!s->has_ue6 || !ue6_ok(&x->ue_ip, &x6) || x6 != s->ue6))))
			goto bad_pdr;
links:
		if (!x->has_far_id) {
			reject(r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_FAR_ID);
			return false;
		}
		for (int k = 0; k < x->n_qer; k++) {
			int q;

			for (q = 0; q < m->n_create_qer && m->create_qer[q].id != x->qer_id[k]; q++)
				;
			if ((!qer_of(o->qer, o->n_qer, x->qer_id[k]) ||
			     id_in(pp->qer_gone, pp->n_qer_gone, x->qer_id[k])) &&
			    q == m->n_create_qer)
				goto bad_pdr;
		}
		for (int k = 0; k < x->n_urr; k++) {
			int u, q;

			for (u = 0; u < o->n_urr && o->urr[u].id != x->urr_id[k]; u++)
				;
			for (q = 0; q < m->n_create_urr && m->create_urr[q].id != x->urr_id[k]; q++)
				;
			if ((u == o->n_urr || int_in(pp->urr_gone, pp->n_urr_gone, u)) &&
			    q == m->n_create_urr)
				goto bad_pdr;
		}
		n_dir[ul ? PGWU_PFCP_UPLINK : PGWU_PFCP_DOWNLINK]++;
		pp->touch[ul ? PGWU_PFCP_UPLINK : PGWU_PFCP_DOWNLINK] = true;
		if (ul && x->fteid.ch && i < m0->n_create_pdr && pp->n_created_ul < PFCP_MAX_RULES)
			pp->created_ul[pp->n_created_ul++] = x;
		f = far_by_id(m->create_far, m->n_create_far, x->far_id);
		if (!f) {
			struct sdf_pdr_spec t;

			/* its direction's default FAR: forwarding as the default does */
			if (x->far_id == (ul ? s->ul_far : s->dl_far))
				continue;
			/* an updated PDR: a FAR of an SDF PDR of its direction */
			if (i >= m0->n_create_pdr &&
			    far_of_ent(a, s, x->far_id, ul ? PGWU_PFCP_UPLINK : PGWU_PFCP_DOWNLINK, &t))
				continue;
			goto bad_pdr;
		}
		/* downlink: the bearer's one tunnel (an IPv4 one: the IPv6 peer is an index) */
		to_cp = false;
		if (!sdf_far_ok(a, f, ul, s->dl_on && f->has_ohc &&
				f->ohc.desc == PFCP_OHC_GTPU_UDP_IPV4 &&
				!(s->dl_flags & PGWU_B_PEER6) && f->ohc.ipv4 == s->sgw &&
				f->ohc.teid == s->sgw_teid, &to_cp))
			goto bad_far;
		pp->to_cp |= to_cp;
		continue;
bad_far:
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, f->id);
		return false;
bad_pdr:
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, x->id);
		return false;
	}
	for (int d = 0; d < 2; d++)
		pp->convert[d] = n_dir[d] && !(o->sdf_dirs & (1U << d));
	sdf_after = o->sdf_dirs || pp->convert[0] || pp->convert[1];

	/* the rules as they will be: those that stay (as Update QER/URR made them), then the new */
	n_sdf = o->n_sdf - pp->n_gone + n_dir[0] + n_dir[1] + pp->convert[0] + pp->convert[1];
	pp->nr = rules_alloc(n_qer, n_urr, n_sdf);
	if (!pp->nr) {
		reject(r, PFCP_CAUSE_NO_RESOURCES, 0);
		return false;
	}
	n_qer = n_urr = n_sdf = 0;
	for (int i = 0; i < o->n_qer; i++)
		if (!id_in(pp->qer_gone, pp->n_qer_gone, upd_qer[i].id))
			pp->nr->qer[n_qer++] = upd_qer[i];
	for (int i = 0; i < m->n_create_qer; i++)
		qer_set(&pp->nr->qer[n_qer++], &m->create_qer[i]);
	for (int i = 0; i < o->n_urr; i++)
		if (!int_in(pp->urr_gone, pp->n_urr_gone, i)) {
			pp->nr->st[n_urr] = o->st[i];
			pp->nr->urr[n_urr++] = upd_urr[i];
		}
	for (int i = 0; i < m->n_create_urr; i++) {
		pp->nr->st[n_urr].since_ms = a->now_ms;
		pp->nr->st[n_urr].since_wall = usage_wall_ntp();
		urr_set(&pp->nr->urr[n_urr++], &m->create_urr[i]);
	}
	/* a volume threshold or quota once a half has filters: set at establishment only (its
	 * sdf_urr entry, plan_sdf_urrs, or the bearer's qos entry), kept while PDRs, FARs, QERs or
	 * URRs are created or removed: 73 */
	for (int i = 0; i < o->n_urr; i++)
		if (o->st[i].in_sdf) {
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_URR, o->urr[i].id);
			return false;
		}
	for (int i = 0; sdf_after && i < n_urr; i++) {
		const struct pgwu_urr *u = &pp->nr->urr[i];

		if ((u->triggers & (RT_VOLTH | RT_VOLQU)) ||
		    (u->flags & (PGWU_URR_VOL_THRESH | PGWU_URR_VOL_QUOTA))) {
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_URR, u->id);
			return false;
		}
	}
	memcpy(pp->nr->pdr, o->pdr, sizeof(o->pdr));
	pp->nr->cp2up = o->cp2up;
	pp->nr->sdf_dirs = o->sdf_dirs;
	for (e = 0; e < o->n_sdf; e++)
		if (!int_in(pp->gone, pp->n_gone, e))
			pp->nr->sdf[n_sdf++] = o->sdf[e];
	l = malloc(sizeof(*l));
	if (!l) {
		reject(r, PFCP_CAUSE_NO_RESOURCES, 0);
		return false;
	}
	for (int dir = 0; dir < 2; dir++) {
		struct pgwu_sdf_key key = { .teid = s->teid, .dir = dir };
		const struct pfcp_pdr *last = NULL;
		int kept = 0, n = n_dir[dir] + pp->convert[dir];

		for (e = 0; e < pp->nr->n_sdf && e < n_sdf; e++)
			kept += pp->nr->sdf[e].dir == dir;
		if (kept + n > SDF_MAX_PDRS)
			goto too_many;
		if (!n)
			goto count;
		pp->spec[dir] = calloc(n, sizeof(struct sdf_pdr_spec));
		if (!pp->spec[dir]) {
			free(l);
			reject(r, PFCP_CAUSE_NO_RESOURCES, 0);
			return false;
		}
		for (int i = 0; i <= m->n_create_pdr; i++) {
			const struct pfcp_pdr *x = i < m->n_create_pdr ? &m->create_pdr[i] : NULL;
			struct sdf_pdr_spec *sp = &pp->spec[dir][pp->n_spec[dir]];
			struct sdf_ent *en = &pp->nr->sdf[n_sdf];
			struct pgwu_pfcp_pdr one[2] = {};
			const struct pfcp_far *f;

			if (x && (x->src_if == PFCP_IF_ACCESS) != (dir == PGWU_PFCP_UPLINK))
				continue;
			if (!x && !pp->convert[dir])
				break;
			en->dir = dir;
			if (x) {
				last = x;
				pdr_links(&en->links, x);
				en->pdr_id = x->id;
				en->precedence = x->precedence;
				f = far_by_id(m->create_far, m->n_create_far, x->far_id);
				sp->drop = f && (f->apply & 0x1f & ~PFCP_AA_NOCP) == PFCP_AA_DROP;
				sp->to_cp = f && !sp->drop && f->dst_if == PFCP_IF_CP;
				if (sp->to_cp) {
					sp->cp_addr = f->ohc.ipv4;
					sp->cp_teid = f->ohc.teid;
				}
				if (!f && x->far_id != (dir ? s->dl_far : s->ul_far))
					far_of_ent(a, s, x->far_id, dir, sp);
				if (pp->keep[i]) {
					/* its filters stay: those of the rule it replaces */
					for (e = 0; e < o->n_sdf; e++)
						if (o->sdf[e].pdr_id == x->id && o->sdf[e].dir == dir)
							pp->keep_rule[dir][pp->n_spec[dir]] =
								o->sdf[e].rule;
				} else if (sdf_specs(x, sp)) {
					free(l);
					reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, x->id);
					return false;
				}
			} else {
				/* the default: a filter that matches everything, at its precedence */
				en->links = o->pdr[dir];
				en->pdr_id = dir == PGWU_PFCP_UPLINK ? s->ul_pdr : s->dl_pdr;
				en->precedence = pp->prec[dir];
			}
			sp->precedence = en->precedence;
			sp->pdr_id = en->pdr_id;
			one[dir] = en->links;
			if (en->links.n_qer) {
				qos_of(a, one, pp->nr->qer, pp->nr->n_qer, NULL, 0, &sp->q);
				sp->has_qos = true;
			}
			if (dir == PGWU_PFCP_DOWNLINK && x) {
				long marking = dl_marking(&en->links, pp->nr->qer, pp->nr->n_qer);

				if (marking < 0 ||
				    (marking && marking != (long)(s->dl_flags & ~PGWU_B_PEER6))) {
					free(l);
					reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, x->id);
					return false;
				}
			}
			pp->n_spec[dir]++;
			n_sdf++;
		}
		/* the list must fit: the filters that stay and the new PDRs' */
		why = NULL;
		if (sdf_list_new(pp, dir, zero, l, &why))
			goto too_many;
		kept = l->n;
count:
		if (pp->touch[dir] && !pp->convert[dir]) {
			struct pgwu_sdf_list *old = malloc(sizeof(*old));
			int nf = 0;

			if (!old) {
				free(l);
				reject(r, PFCP_CAUSE_NO_RESOURCES, 0);
				return false;
			}
			if (!bpf_map_lookup_elem(a->m.sdf.lists, &key, old))
				for (__u32 f = 0; f < old->n && f < PGWU_SDF_MAX; f++)
					nf += !filt_gone(o, pp, old->f[f].rule);
			free(old);
			if ((n ? kept : 0) + nf > PGWU_SDF_MAX)
				goto too_many;
		}
		if (pp->convert[dir])
			pp->nr->sdf_dirs |= 1U << dir;
		continue;
too_many:
		free(l);
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR,
			    last ? last->id : m->n_create_pdr ? m->create_pdr[0].id : 0);
		return false;
	}
	free(l);
	pp->nr->n_sdf = n_sdf;
	/* a default PDR's new precedence: its place in its direction's list */
	for (e = 0; e < n_sdf; e++) {
		struct sdf_ent *en = &pp->nr->sdf[e];

		if (pp->prec_upd[en->dir] &&
		    en->pdr_id == (en->dir == PGWU_PFCP_UPLINK ? s->ul_pdr : s->dl_pdr))
			en->precedence = pp->prec[en->dir];
	}
	return true;
}

/* Every XDP run that may have read a removed PDR's rule is over (pfcp_gtpu.c says why) */
static void pdrs_sync(void)
{
	if (syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0))
		usleep(10000);
}

/* The uplink half's flags with set added (the slot emptied, its counters folded into the hash
 * entry, then indexed again: bearer_set_dl's way). 0 or -errno; -EPERM: not the session's. */
static int ul_flags_add(struct pfcp_agent *a, const struct sess *s, __u32 set)
{
	struct pgwu_ul_bearer ub;
	struct pgwu_ul_slot *sl;

	if (bpf_map_lookup_elem(a->m.ul, &s->teid, &ub))
		return -errno;
	if (ub.flags >> PGWU_B_OWNER_SHIFT != s->owner)
		return -EPERM;
	if ((ub.flags & set) == set)
		return 0;
	sl = slot_ul(&a->m, s->teid);
	if (sl) {
		__atomic_store_n(&sl->state, 0, __ATOMIC_RELEASE);
		ub.packets += __atomic_load_n(&sl->b.packets, __ATOMIC_RELAXED);
		ub.bytes += __atomic_load_n(&sl->b.bytes, __ATOMIC_RELAXED);
	}
	ub.flags |= set;
	if (bpf_map_update_elem(a->m.ul, &s->teid, &ub, BPF_EXIST))
		return -errno;
	slot_ul_set(&a->m, s->teid, &ub);
	return 0;
}

static __u32 ent_prec(const struct sess_rules *r, __u32 rule)
{
	for (int e = 0; e < r->n_sdf; e++)
		if (r->sdf[e].rule == rule)
			return r->sdf[e].precedence;
	return 0;
}

/*
 * The plan applied: the new PDRs' rules, each direction's list (the filters that stay and the new
 * ones, by precedence), the halves' flags of a direction classified from now on; once no XDP run
 * can count on a removed PDR, the removed URRs' final usage, what the removed PDRs counted for the
 * URRs that stay, the rules removed. s->r is the new rules after. false: r says why (nothing
 * changed but the rules of new PDRs, removed again).
 */
static bool apply_pdrs(struct pfcp_agent *a, struct sess *s, struct pdr_plan *pp, struct reply *r)
{
	struct sess_rules *o = s->r, *nr = pp->nr;
	struct pgwu_sdf_list *old = calloc(4, sizeof(*old)), *nl = old + 2;
	__u32 rules[2][SDF_MAX_PDRS] = {};
	bool had[2] = { false, false };
	struct bearer b = {};
	const char *why;
	int err = 0, dir;

	if (!old) {
		reject(r, PFCP_CAUSE_NO_RESOURCES, 0);
		return false;
	}
	for (dir = 0; dir < 2 && !err; dir++)
		for (int i = 0; i < pp->n_spec[dir] && !err; i++) {
			err = sdf_rule_add(&a->m.sdf, &pp->spec[dir][i], &rules[dir][i]);
			for (int e = 0; !err && e < nr->n_sdf; e++)
				if (nr->sdf[e].pdr_id == pp->spec[dir][i].pdr_id &&
				    nr->sdf[e].dir == dir)
					nr->sdf[e].rule = rules[dir][i];
		}
	for (dir = 0; dir < 2 && !err; dir++) {
		struct pgwu_sdf_key key = { .teid = s->teid, .dir = dir };
		struct pgwu_sdf_list *n = &nl[dir];

		if (!pp->touch[dir])
			continue;
		n->n = 0;
		had[dir] = !bpf_map_lookup_elem(a->m.sdf.lists, &key, &old[dir]);
		for (__u32 f = 0; had[dir] && f < old[dir].n && f < PGWU_SDF_MAX; f++) {
			if (filt_gone(o, pp, old[dir].f[f].rule))
				continue;
			n->f[n->n] = old[dir].f[f];
			/* an updated PDR's filters kept: under its new rule */
			for (int i = 0; i < pp->n_spec[dir]; i++)
				if (pp->keep_rule[dir][i] == old[dir].f[f].rule)
					n->f[n->n].rule = rules[dir][i];
			n->n++;
		}
		if (pp->n_spec[dir]) {
			why = NULL;
			/* built into the half's list tail: the new PDRs' filters */
			{
				struct pgwu_sdf_list tmp;

				if (sdf_list_new(pp, dir, rules[dir], &tmp, &why) ||
				    n->n + tmp.n > PGWU_SDF_MAX) {
					err = -E2BIG;
					break;
				}
				memcpy(&n->f[n->n], tmp.f, tmp.n * sizeof(tmp.f[0]));
				n->n += tmp.n;
			}
		}
		/* by precedence, stable (a PDR's filters stay together, in their order) */
		for (__u32 i = 1; i < n->n; i++) {
			struct pgwu_sdf_filter x = n->f[i];
			__u32 px = ent_prec(nr, x.rule), j = i;

			while (j > 0 && ent_prec(nr, n->f[j - 1].rule) > px) {
				n->f[j] = n->f[j - 1];
				j--;
			}
			n->f[j] = x;
		}
		if (bpf_map_update_elem(a->m.sdf.lists, &key, n, BPF_ANY))
			err = -errno;
	}
	if (err) {
		/* the lists as they were, the new rules gone */
		for (int d = 0; d < dir && d < 2; d++) {
			struct pgwu_sdf_key key = { .teid = s->teid, .dir = d };

			if (!pp->touch[d])
				continue;
			if (had[d])
				bpf_map_update_elem(a->m.sdf.lists, &key, &old[d], BPF_ANY);
			else
				bpf_map_delete_elem(a->m.sdf.lists, &key);
		}
		for (int d = 0; d < 2; d++)
			for (int i = 0; i < pp->n_spec[d]; i++)
				if (rules[d][i])
					sdf_rule_del(&a->m.sdf, rules[d][i]);
		free(old);
		reject(r, err == -E2BIG || err == -ENOSPC ? PFCP_CAUSE_NO_RESOURCES :
		       PFCP_CAUSE_SYSTEM_FAILURE, 0);
		return false;
	}
	free(old);
	/* the halves of a direction classified from now on (the list is in place) */
	if (pp->convert[PGWU_PFCP_UPLINK] || pp->to_cp)
		ul_flags_add(a, s, (pp->convert[PGWU_PFCP_UPLINK] ? PGWU_B_SDF : 0) |
			     (pp->to_cp ? PGWU_B_CP : 0));
	if (pp->convert[PGWU_PFCP_DOWNLINK] && s->dl_on)
		dl_set(a, s, s->sgw, s->sgw_teid,
		       s->dl_flags | s->owner << PGWU_B_OWNER_SHIFT | PGWU_B_QOS | PGWU_B_SDF);
	/* the counters: final for the removed PDRs once no run can count on them */
	if (pp->n_gone)
		pdrs_sync();
	usage_now(a, s, &b);
	for (int k = 0; k < pp->n_urr_gone; k++) {
		int u = pp->urr_gone[k];
		struct removed_urr *f = &pp->fin[pp->n_fin++];

		usage_of_urr(s, u, &b, f->v);
		f->urr = o->urr[u];
		f->st = o->st[u];
	}
	for (int g = 0; g < pp->n_gone; g++) {
		const struct sdf_ent *x = &o->sdf[pp->gone[g]];

		for (int k = 0; k < x->links.n_urr; k++)
			for (int u = 0; u < nr->n_urr; u++)
				if (nr->urr[u].id == x->links.urr[k]) {
					nr->st[u].gone[2 * x->dir] += x->packets;
					nr->st[u].gone[2 * x->dir + 1] += x->bytes;
				}
		sdf_rule_del(&a->m.sdf, x->rule);
	}
	s->r = nr;
	pp->nr = NULL;
	/* a default PDR's new precedence: its place in the list (its sdf_pdrs entry keeps the one
	 * it was written with: rewriting the entry would lose the packets counted meanwhile) */
	for (dir = 0; dir < 2; dir++)
		if (pp->prec_upd[dir])
			s->prec[dir] = pp->prec[dir];
	sdf_read(a, nr);
	for (dir = 0; dir < 2; dir++) {
		/* the default PDR's usage was the bearer's counters: they carry on from there */
		__u64 bp = dir ? b.dl_packets : b.ul_packets, bb = dir ? b.dl_bytes : b.ul_bytes;

		if (!pp->convert[dir])
			continue;
		for (int e = 0; e < nr->n_sdf; e++)
			if (nr->sdf[e].dir == dir) {
				bp -= bp > nr->sdf[e].packets ? nr->sdf[e].packets : bp;
				bb -= bb > nr->sdf[e].bytes ? nr->sdf[e].bytes : bb;
			}
		for (int k = 0; k < nr->pdr[dir].n_urr; k++)
			for (int u = 0; u < nr->n_urr; u++)
				if (nr->urr[u].id == nr->pdr[dir].urr[k]) {
					nr->st[u].gone[2 * dir] += bp;
					nr->st[u].gone[2 * dir + 1] += bb;
				}
	}
	a->n_qer += nr->n_qer;
	a->n_qer -= o->n_qer;
	a->n_urr += nr->n_urr;
	a->n_urr -= o->n_urr;
	rules_count(a);
	for (int k = 0; k < pp->n_qer_gone; k++)
		sess_unpublish_rule(a, s, PGWU_PFCP_RULE_QER, pp->qer_gone[k]);
	for (int k = 0; k < pp->n_urr_gone; k++)
		sess_unpublish_rule(a, s, PGWU_PFCP_RULE_URR, o->urr[pp->urr_gone[k]].id);
	free(o);
	return true;
}

/* The session's state after a modification, built before anything is written */
struct mod_plan {
	const struct pfcp_far *dl_upd;
	bool fwd, has_sgw, placeholder, dst_ok;
	bool sgw6;		/* sgw is an n3v6_peers index (N3 over IPv6: PGWU_B_PEER6) */
	__u8 apply;
	__u32 sgw, sgw_teid, dl_flags;
	struct pgwu_qer qer[PGWU_PFCP_MAX_RULES];	/* the QERs and URRs as they will be */
	struct pgwu_urr urr[PGWU_PFCP_MAX_RULES];
	/* Update FARs of FARs to the CP function (UP2CP): a new tunnel for the rule's cp_relay */
	struct { __u32 rule, addr, teid; } cp_upd[PGWU_PFCP_MAX_RULES];
	int n_cp_upd;
	struct pdr_plan pp;	/* Create / Remove PDR, FAR, QER, URR */
};

/* The rule id of the session's UP2CP SDF PDR whose FAR is far_id (its cp_relay entry exists), or 0 */
static __u32 up2cp_rule(struct pfcp_agent *a, const struct sess *s, __u32 far_id)
{
	struct pgwu_cp_relay v;

	for (int e = 0; s->r && e < s->r->n_sdf; e++) {
		const struct sdf_ent *x = &s->r->sdf[e];
		struct pgwu_cp_key k = { .id = x->rule, .kind = PGWU_CP_UP2CP };

		if (x->dir == PGWU_PFCP_UPLINK && x->links.far_id == far_id && a->m.sdf.cp >= 0 &&
		    !bpf_map_lookup_elem(a->m.sdf.cp, &k, &v))
			return x->rule;
	}
	return 0;
}

static bool plan_mod(struct pfcp_agent *a, const struct pfcp_msg *m, const struct sess *s,
		     struct mod_plan *p, struct reply *r)
{
	int n_qer = s->r ? s->r->n_qer : 0, n_urr = s->r ? s->r->n_urr : 0, d;
	long marking;

	memset(p, 0, sizeof(*p));
	p->fwd = s->dl_on;
	p->apply = s->dl_apply;
	p->has_sgw = s->has_sgw;
	p->placeholder = s->ohc_placeholder;
	p->dst_ok = s->dl_dst_ok;
	p->sgw = s->sgw;
	p->sgw_teid = s->sgw_teid;
	p->dl_flags = s->dl_flags;
	p->sgw6 = s->dl_flags & PGWU_B_PEER6;
	if (s->r) {
		memcpy(p->qer, s->r->qer, n_qer * sizeof(p->qer[0]));
		memcpy(p->urr, s->r->urr, n_urr * sizeof(p->urr[0]));
	}
	if (m->n_other_rules) {
		reject(r, PFCP_CAUSE_RULE_FAILURE, m->other_rule_ie);
		return false;
	}

	/* Update FAR: of the downlink FAR, once; of the uplink FAR, when it changes nothing */
	for (int i = 0; i < m->n_update_far; i++) {
		const struct pfcp_far *f = &m->update_far[i];
		bool fwd_ok = !f->has_apply ||
			      ((f->apply & PFCP_AA_FORW) && !(f->apply & ~PFCP_AA_FORW & 0x1f));

		if (f->id == s->dl_far && !p->dl_upd) {
			p->dl_upd = f;
			continue;
		}
		if (f->id == s->ul_far && fwd_ok && !f->has_ohc &&
		    (!f->has_dst_if || f->dst_if == PFCP_IF_CORE || f->dst_if == PFCP_IF_SGI_LAN))
			continue;	/* nothing in the tables to change */
		if (fwd_ok && (!f->has_dst_if || f->dst_if == PFCP_IF_CP) &&
		    (!f->has_ohc || (ohc_ok(a, &f->ohc) && f->ohc.desc == PFCP_OHC_GTPU_UDP_IPV4)) &&
		    p->n_cp_upd < PGWU_PFCP_MAX_RULES) {
			/* the FAR to the CP function: still there, maybe in a new tunnel */
			__u32 rule = up2cp_rule(a, s, f->id);

			if (rule) {
				if (f->has_ohc) {
					p->cp_upd[p->n_cp_upd].rule = rule;
					p->cp_upd[p->n_cp_upd].addr = f->ohc.ipv4;
					p->cp_upd[p->n_cp_upd++].teid = f->ohc.teid;
				}
				continue;
			}
		}
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, f->id);
		return false;
	}
	if (p->dl_upd) {
		const struct pfcp_far *f = p->dl_upd;

		if (f->has_apply)
			p->apply = f->apply;
		if (!dl_apply_ok(p->apply))
			goto bad_far;
		p->fwd = p->apply & PFCP_AA_FORW;
		if (f->has_dst_if)
			p->dst_ok = f->dst_if == PFCP_IF_ACCESS;
		if (f->has_ohc) {
			/* a new outer header: usable (a forwarding FAR must have one), or kept
			 * as a placeholder while the FAR does not forward */
			p->has_sgw = ohc_ok(a, &f->ohc);
			p->placeholder = !p->has_sgw;
			p->sgw = p->has_sgw ? f->ohc.ipv4 : 0;
			p->sgw_teid = p->has_sgw ? f->ohc.teid : 0;
			p->sgw6 = p->has_sgw && f->ohc.desc == PFCP_OHC_GTPU_UDP_IPV6;
			/* moving to an IPv6 peer: its index (an entry filled here stays an address
			 * whatever the rest of the request makes of it) */
			if (p->sgw6 && n3v6_peer_find(&a->m, f->ohc.ipv6, true, &p->sgw)) {
				reject(r, PFCP_CAUSE_NO_RESOURCES, 0);
				return false;
			}
		}
		if (p->fwd && !p->has_sgw) {
			if (p->placeholder)
				goto bad_far;	/* e.g. still TEID 0 / 0.0.0.0, or 255.255.255.255 */
			reject(r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_OUTER_HEADER_CREATION);
			return false;
		}
		if (p->fwd && !p->dst_ok)
			goto bad_far;
	}

	/* Update QER / Update URR: each of a rule the session has, once */
	d = dup_id(m->update_qer, m->n_update_qer, sizeof(m->update_qer[0]),
		   offsetof(struct pfcp_qer, id));
	if (d >= 0) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_QER, m->update_qer[d].id);
		return false;
	}
	for (int i = 0; i < m->n_update_qer; i++) {
		struct pgwu_qer *q = (struct pgwu_qer *)qer_of(p->qer, n_qer, m->update_qer[i].id);

		if (!q) {
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_QER, m->update_qer[i].id);
			return false;
		}
		qer_set(q, &m->update_qer[i]);
	}
	d = dup_id(m->update_urr, m->n_update_urr, sizeof(m->update_urr[0]),
		   offsetof(struct pfcp_urr, id));
	if (d >= 0) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_URR, m->update_urr[d].id);
		return false;
	}
	for (int i = 0; i < m->n_update_urr; i++) {
		struct pgwu_urr *u = (struct pgwu_urr *)urr_of(p->urr, n_urr, m->update_urr[i].id);

		if (!u) {
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_URR, m->update_urr[i].id);
			return false;
		}
		urr_set(u, &m->update_urr[i]);
		if (!urr_method_ok(u->method) ||
		    (s->r->sdf_dirs && ((u->triggers & (RT_VOLTH | RT_VOLQU)) ||
					(u->flags & (PGWU_URR_VOL_THRESH | PGWU_URR_VOL_QUOTA))))) {
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_URR, u->id);
			return false;
		}
	}
	/* Query URR: of URRs the session has */
	for (int i = 0; i < m->n_query_urr; i++) {
		if (!urr_of(p->urr, n_urr, m->query_urr[i])) {
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_URR, m->query_urr[i]);
			return false;
		}
	}
	/* a QFI changed on a QER the downlink PDR applies: a new downlink marking */
	if (m->n_update_qer && s->r) {
		marking = dl_marking(&s->r->pdr[PGWU_PFCP_DOWNLINK], p->qer, n_qer);
		if (marking < 0) {
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_QER, m->update_qer[0].id);
			return false;
		}
		p->dl_flags = marking;
	}
	/* the peer's family is in the flags the halves are written with */
	p->dl_flags = (p->dl_flags & ~PGWU_B_PEER6) | (p->sgw6 ? PGWU_B_PEER6 : 0);
	/* Create / Remove PDR, FAR, QER, URR: with the QERs and URRs as the updates made them */
	return plan_pdrs(a, m, s, p->qer, p->urr, &p->pp, r);
bad_far:
	reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, p->dl_upd->id);
	return false;
}

/*
 * The session's downlink halves (the IPv4 one of its UE address, the IPv6 one of its /64, each it
 * has) as one: moved to another SGW F-TEID or marking, added, removed. dl_set and dl_add: both or
 * neither (when the second write fails, the first is undone; -errno of the one that failed).
 * dl_remove: the IPv6 half first, then the IPv4 one; a half another owner has now is left in place
 * (*kept), the usage of those removed adds to *packets, *bytes.
 */
/* the flags of the session's downlink halves besides their marking: owner, QoS, SDF filters */
static __u32 dl_own(const struct sess *s)
{
	return s->owner << PGWU_B_OWNER_SHIFT | (s->r ? PGWU_B_QOS : 0) |
	       (s->r && (s->r->sdf_dirs & (1U << PGWU_PFCP_DOWNLINK)) ? PGWU_B_SDF : 0);
}

static int dl_set(struct pfcp_agent *a, struct sess *s, __u32 sgw, __u32 sgw_teid, __u32 flags)
{
	__u32 own = dl_own(s);
	int err = 0;

	if (s->ue)
		err = bearer_set_dl_owned(&a->m, s->ue, s->teid, s->owner, sgw, sgw_teid, flags);
	if (!err && s->has_ue6) {
		err = bearer_set_dl6_owned(&a->m, s->ue6, s->teid, s->owner, sgw, sgw_teid, flags);
		if (err && s->ue)
			bearer_set_dl_owned(&a->m, s->ue, s->teid, s->owner, s->sgw, s->sgw_teid,
					    s->dl_flags | own);
	}
	return err;
}

static int dl_add(struct pfcp_agent *a, struct sess *s, const struct pgwu_dl_bearer *dl)
{
	int err = 0, kept;

	if (s->ue)
		err = bearer_add_dl(&a->m, s->ue, dl);
	if (!err && s->has_ue6) {
		err = bearer_add_dl6(&a->m, s->ue6, dl);
		if (err && s->ue)
			bearer_remove_owned(&a->m, s->teid, s->ue, s->owner, false, true, &kept, NULL);
	}
	return err;
}

static int dl_remove(struct pfcp_agent *a, struct sess *s, int *kept, __u64 *packets,
		     __u64 *bytes)
{
	struct bearer b = {};
	int err = 0, k = 0;

	if (s->has_ue6) {
		err = bearer_remove_dl6_owned(&a->m, s->ue6, s->teid, s->owner, packets, bytes);
		if (err == -EPERM || err == -ENOENT) {
			(*kept)++;
			err = 0;
		}
	}
	if (!err && s->ue) {
		err = bearer_remove_owned(&a->m, s->teid, s->ue, s->owner, false, true, &k, &b);
		*kept += k;
		*packets += b.dl_packets;
		*bytes += b.dl_bytes;
	}
	return err;
}

/* The SDF PDRs' QoS entries (sdf_qos) of the QERs a modification updates, rewritten from the
 * QERs as they will be (their policers start full again). 0 or -errno. */
static int sdf_qos_update(struct pfcp_agent *a, const struct sess *s, const struct pfcp_msg *m,
			  const struct pgwu_qer *qer)
{
	for (int e = 0; e < s->r->n_sdf; e++) {
		const struct sdf_ent *en = &s->r->sdf[e];
		struct pgwu_pfcp_pdr one[2] = {};
		struct pgwu_qos q;
		bool hit = false;

		for (int i = 0; i < m->n_update_qer && !hit; i++)
			for (int k = 0; k < en->links.n_qer; k++)
				hit |= en->links.qer[k] == m->update_qer[i].id;
		if (!hit)
			continue;
		one[en->dir] = en->links;
		qos_of(a, one, qer, s->r->n_qer, NULL, 0, &q);
		if (bpf_map_update_elem(a->m.sdf.qos, &en->rule, &q, BPF_EXIST))
			return -errno;
	}
	return 0;
}

/* A refused modification with Update PDR: why, on stderr (rate limited) */
static void log_upd_refused(struct pfcp_agent *a, const struct sess *s, const struct reply *r,
			    const char *why)
{
	static struct ratelimit rl;
	__u32 held;

	if (!ratelimit_pass(a, &rl, &held))
		return;
	fprintf(stderr, "pgwu pfcp: session 0x%llx: modification with Update PDR refused, cause %u",
		(unsigned long long)s->up_seid, r->cause);
	if (r->has_failed_rule)
		fprintf(stderr, " (%s %u)", r->rule_type == PFCP_RULE_PDR ? "PDR" :
			r->rule_type == PFCP_RULE_FAR ? "FAR" : r->rule_type == PFCP_RULE_QER ?
			"QER" : "URR", r->rule_id);
	fprintf(stderr, ": %s; the session is as it was (%u more since the last line)\n",
		why ? why : "the PDR as updated is not one the data path can apply (docs/pfcp.md, "
		"Create PDR's conditions)", held);
}

void on_sess_mod(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w)
{
	struct reply r = { .cause = m->cause, .offending = m->offending_ie };
	struct sess *s = sess_find(a, m->h.seid);
	__u32 own, em_sgw = 0, em_teid = 0;
	__u8 em_sgw6[16];
	bool em = false, em_6 = false;
	struct mod_plan p = {};
	struct sess_rules *fresh = NULL;
	bool fresh_qos = false;
	int err = 0, em_qfi = -1;

	if (s && !assoc_owns(a, s->assoc, a->peer)) {
		log_not_owner(a, "session modification", m->h.seid);
		s = NULL;
	}
	if (!s) {
		reject(&r, PFCP_CAUSE_SESSION_NOT_FOUND, 0);
		goto out;
	}
	if (r.cause == PFCP_CAUSE_ACCEPTED && !s->r && m->n_create_pdr) {
		/* a session set up without QERs or URRs: rules of its defaults alone for the new
		 * PDRs to join, taken back when the request is refused */
		fresh = rules_alloc(0, 0, 0);
		if (!fresh) {
			reject(&r, PFCP_CAUSE_NO_RESOURCES, 0);
			goto out;
		}
		fresh->pdr[PGWU_PFCP_UPLINK].id = s->ul_pdr;
		fresh->pdr[PGWU_PFCP_UPLINK].far_id = s->ul_far;
		fresh->pdr[PGWU_PFCP_DOWNLINK].id = s->dl_pdr;
		fresh->pdr[PGWU_PFCP_DOWNLINK].far_id = s->dl_far;
		s->r = fresh;
	}
	if (r.cause != PFCP_CAUSE_ACCEPTED || !plan_mod(a, m, s, &p, &r))
		goto out;
	if (fresh) {
		/* its halves carry PGWU_B_QOS from now on (dl_own): an entry without a gate or MBR,
		 * the URRs' and QERs' written below */
		struct pgwu_qos q;

		qos_of(a, s->r->pdr, NULL, 0, NULL, 0, &q);
		if (qos_install(a, s->teid, &q)) {
			reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
			goto out;
		}
		fresh_qos = true;
	}
	if (p.pp.any) {
		/* the SDF PDRs created and removed first (their map writes are what may fail);
		 * then the QERs and URRs as they are now */
		if (!apply_pdrs(a, s, &p.pp, &r))
			goto out;
		fresh = NULL;	/* (freed: s->r is the new rules) */
		memcpy(p.qer, s->r->qer, s->r->n_qer * sizeof(p.qer[0]));
		memcpy(p.urr, s->r->urr, s->r->n_urr * sizeof(p.urr[0]));
	}
	own = dl_own(s);
	if (s->r && (m->n_update_qer || m->n_update_urr || p.pp.any)) {
		/* the data path's gate, MBR and quota first: the one change that can fail alone */
		struct pgwu_qos q;
		bool new_quota = false;

		for (int i = 0; i < m->n_update_urr; i++)
			new_quota |= !!(m->update_urr[i].present & PFCP_URR_VOL_QUOTA);
		bearer_qos_of(a, s->r, s->r->sdf_dirs, p.qer, p.urr, &q);
		/* a crossing the data path recorded is reported before its entry changes; a
		 * threshold it starts measuring (another URR's) counts from that URR's last report */
		usage_crossing(a, s);
		if (q.flags & PGWU_QOS_VOLTH)
			usage_since(a, s, q.th.urr_id, q.th.now);
		if (qos_update(a, s->teid, &q, !new_quota)) {
			reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
			goto out;
		}
		if (sdf_qos_update(a, s, m, p.qer)) {
			reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
			goto out;
		}
	}

	/* SNDEM (TS 29.244 5.2.2.3): the old tunnel gets an End Marker once nothing more is sent on
	 * it: when the downlink moves to another tunnel, or stops forwarding */
	if (p.dl_upd && (p.dl_upd->smreq & PFCP_SMREQ_SNDEM) && s->dl_on && s->has_sgw &&
	    (!p.fwd || p.sgw != s->sgw || p.sgw_teid != s->sgw_teid ||
	     ((p.dl_flags ^ s->dl_flags) & PGWU_B_PEER6))) {
		/* the old tunnel's peer: an IPv4 address, or (PGWU_B_PEER6) an n3v6_peers index, read
		 * now: entries are never emptied while loaded */
		em_6 = s->dl_flags & PGWU_B_PEER6;
		if (!em_6 || !n3v6_peer_get(&a->m, s->sgw, em_sgw6)) {
			em = true;
			em_sgw = s->sgw;
			em_teid = s->sgw_teid;
			em_qfi = pgwu_qfi_of(s->dl_flags);
		}
	}

	/* everything checked: the one table change (the downlink halves: IPv4, IPv6), then the
	 * session */
	if (p.fwd && s->dl_on &&
	    (p.sgw != s->sgw || p.sgw_teid != s->sgw_teid || p.dl_flags != s->dl_flags)) {
		err = dl_set(a, s, p.sgw, p.sgw_teid, p.dl_flags | own);
		if (err == -EPERM || err == -ENOENT)	/* the UE's downlink is someone else's now */
			reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, s->dl_far);
		else if (err)
			reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
	} else if (p.fwd && !s->dl_on) {
		struct pgwu_dl_bearer dl = { .sgw_addr = p.sgw, .sgw_teid = p.sgw_teid,
					     .local_teid = s->teid, .flags = p.dl_flags | own };

		err = dl_add(a, s, &dl);
		if (err == -EADDRINUSE)
			reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, s->dl_far);
		else if (err == -E2BIG)
			reject(&r, PFCP_CAUSE_NO_RESOURCES, 0);
		else if (err)
			reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
	} else if (!p.fwd && s->dl_on) {
		__u64 packets = 0, bytes = 0;
		int kept = 0;

		err = dl_remove(a, s, &kept, &packets, &bytes);
		if (err) {
			reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
		} else {
			s->dl_packets += packets;	/* kept for the final report */
			s->dl_bytes += bytes;
			stat_add(a, PFCP_STAT_HALVES_KEPT, kept);
		}
	}
	if (err)
		goto out;
	for (int d = 0; d < 2; d++)
		if (p.pp.prec_upd[d])
			s->prec[d] = p.pp.prec[d];	/* (a session without rules: only here) */
	s->dl_on = p.fwd;
	s->dl_apply = p.apply;
	s->has_sgw = p.has_sgw;
	s->ohc_placeholder = p.placeholder;
	s->dl_dst_ok = p.dst_ok;
	s->sgw = p.sgw;
	s->sgw_teid = p.sgw_teid;
	s->dl_flags = p.dl_flags;
	for (int i = 0; i < p.n_cp_upd; i++) {
		/* the UP2CP PDR's new tunnel, its usage counters kept */
		struct pgwu_cp_key k = { .id = p.cp_upd[i].rule, .kind = PGWU_CP_UP2CP };
		struct pgwu_cp_relay v;

		if (!bpf_map_lookup_elem(a->m.sdf.cp, &k, &v)) {
			v.addr = p.cp_upd[i].addr;
			v.teid = p.cp_upd[i].teid;
			bpf_map_update_elem(a->m.sdf.cp, &k, &v, BPF_EXIST);
		}
	}
	if (s->r) {
		memcpy(s->r->qer, p.qer, s->r->n_qer * sizeof(p.qer[0]));
		memcpy(s->r->urr, p.urr, s->r->n_urr * sizeof(p.urr[0]));
		/* an updated period starts now; a new quota may be reported used up again */
		for (int i = 0; i < m->n_update_urr; i++)
			for (int u = 0; u < s->r->n_urr; u++) {
				if (s->r->urr[u].id != m->update_urr[i].id)
					continue;
				if (m->update_urr[i].present & PFCP_URR_PERIOD)
					s->r->st[u].next_period_ms = 0;
				if (m->update_urr[i].present & PFCP_URR_VOL_QUOTA)
					s->r->st[u].quota_reported = false;
			}
		usage_watch(a, s);
	}
	sess_publish(a, s);
	if (em && em_6)
		end_marker_send6(a, em_sgw6, em_teid, em_qfi);
	else if (em)
		end_marker_send(a, em_sgw, em_teid, em_qfi);
out:
	pfcp_w_hdr(w, PFCP_SESS_MOD_RESP, true, s ? s->cp_seid : 0, m->h.seq);
	w_cause(w, &r);
	if (s && r.cause == PFCP_CAUSE_ACCEPTED) {
		/* the uplink PDRs created with CHOOSE: the session's one F-TEID */
		for (int i = 0; i < p.pp.n_created_ul; i++) {
			const struct pfcp_pdr *x = p.pp.created_ul[i];
			size_t g = pfcp_w_group_begin(w, PFCP_IE_CREATED_PDR);

			pfcp_w_u16(w, PFCP_IE_PDR_ID, x->id);
			pfcp_w_fteid46(w, s->teid, x->fteid.v4 ? a->local_addr : 0,
				       x->fteid.v6 ? a->n3_addr6 : NULL);
			pfcp_w_group_end(w, g);
		}
		/* a removed URR's final report (7.5.5.2, Usage Report Trigger TERMR) */
		for (int i = 0; i < p.pp.n_fin; i++)
			w_removed_report(a, w, &p.pp.fin[i].urr, &p.pp.fin[i].st, s->start_ms,
					 p.pp.fin[i].v);
	}
	if (s && r.cause == PFCP_CAUSE_ACCEPTED && (m->n_query_urr || (m->smreq & PFCP_SMREQ_QAURR)))
		w_query_reports(a, w, s, m);
	if (s && r.cause != PFCP_CAUSE_ACCEPTED && m->n_update_pdr)
		log_upd_refused(a, s, &r, p.pp.why);
	if (fresh) {
		/* refused: the session without rules again */
		if (fresh_qos)
			qos_remove(a, s->teid);
		s->r = NULL;
		free(fresh);
	}
	pdr_plan_free(&p.pp);
	stat_add(a, PFCP_STAT_TX(PFCP_SESS_MOD_RESP, r.cause), 1);
}

/* ---- deletion, with the final usage reports (TS 29.244 7.5.7.2) ---- */

void on_sess_del(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w)
{
	struct reply r = { .cause = m->cause, .offending = m->offending_ie };
	struct sess *s = sess_find(a, m->h.seid), copy;
	struct sess_rules *rules = NULL;
	struct bearer b = {};
	__u64 cp_seid = 0;
	bool report = false;

	if (s && !assoc_owns(a, s->assoc, a->peer)) {
		log_not_owner(a, "session deletion", m->h.seid);
		s = NULL;
	}
	if (!s)
		reject(&r, PFCP_CAUSE_SESSION_NOT_FOUND, 0);
	else
		cp_seid = s->cp_seid;
	if (r.cause == PFCP_CAUSE_ACCEPTED) {
		usage_crossing(a, s);	/* a threshold crossed and not reported yet: before */
		copy = *s;
		if (sess_delete(a, s, &b, &rules)) {
			reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
		} else {
			copy.r = rules;	/* the report needs the URRs the session had */
			report = rules && rules->n_urr;
		}
	}
	pfcp_w_hdr(w, PFCP_SESS_DEL_RESP, true, cp_seid, m->h.seq);
	w_cause(w, &r);
	if (report)
		w_usage_reports(a, w, &copy, &b);
	free(rules);
	stat_add(a, PFCP_STAT_TX(PFCP_SESS_DEL_RESP, r.cause), 1);
}
