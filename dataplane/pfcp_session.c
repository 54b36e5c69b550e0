// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pfcp_session.c: the sessions of `pgwu pfcp`: their table (index = the low 32 bits of the UP
 * SEID - 1), the indexes of their UE addresses and CP F-SEIDs, F-TEID allocation, their records
 * in pfcp_sessions / pfcp_rules (pgwu.h), and deleting a session with the bearer halves it owns.
 * One session is one bearer in the tables `pgwu session` writes; its halves carry the session's
 * owner tag (PGWU_B_OWNER_SHIFT), so deleting the session never removes a half someone else put
 * under the same TEID or UE in the meantime.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/bpf.h>
#include "pfcp_agent.h"

#define TEID_TRIES 65536

/*
 * Three open-addressing indexes over the session table, linear probing, deletion by shifting the
 * entries that follow back (no tombstones): every session's UE IPv4 address and every session's
 * UE /64, for those that have one (a UE address or /64 is never given to two sessions, also while
 * one of them has no downlink half in dl_bearers / dl6_bearers), and every session's
 * CP F-SEID (SEID and IPv4 address: it names one session at the CP, TS 29.244 5.6.2) within its
 * association: two CPs on one address (two associations) allocate their SEIDs apart.
 */
static __u32 mix(__u64 k)
{
	k *= 0x9e3779b97f4a7c15ULL;
	return (__u32)(k ^ (k >> 29) ^ (k >> 47));
}

static __u32 ue_home(const struct pfcp_agent *a, const struct sess *s)
{
	return mix(s->ue) & a->ue_idx.mask;
}

static __u32 ue6_home(const struct pfcp_agent *a, const struct sess *s)
{
	return mix(s->ue6) & a->ue6_idx.mask;
}

static __u32 fseid_home(const struct pfcp_agent *a, const struct sess *s)
{
	return mix(s->cp_seid ^ (__u64)s->cp_addr << 17 ^ (__u64)s->assoc << 49) & a->fseid_idx.mask;
}

static void idx_insert(struct pfcp_agent *a, struct sess_index *x, __u32 home, __u32 idx)
{
	__u32 i = home;

	while (x->tab[i])
		i = (i + 1) & x->mask;
	x->tab[i] = idx + 1;
}

static void idx_remove(struct pfcp_agent *a, struct sess_index *x, __u32 idx,
		       __u32 (*home)(const struct pfcp_agent *, const struct sess *))
{
	__u32 i = home(a, &a->sess[idx]), j;

	while (x->tab[i] && x->tab[i] != idx + 1)
		i = (i + 1) & x->mask;
	if (!x->tab[i])
		return;
	x->tab[i] = 0;
	for (j = (i + 1) & x->mask; x->tab[j]; j = (j + 1) & x->mask) {
		__u32 h = home(a, &a->sess[x->tab[j] - 1]);

		if (((j - h) & x->mask) >= ((j - i) & x->mask)) {
			x->tab[i] = x->tab[j];
			x->tab[j] = 0;
			i = j;
		}
	}
}

int sess_index_alloc(struct pfcp_agent *a)
{
	__u32 n = pgwu_slots_for(a->max_sess) * 2;

	a->ue_idx.mask = a->ue6_idx.mask = a->fseid_idx.mask = n - 1;
	a->ue_idx.tab = calloc(n, sizeof(__u32));
	a->ue6_idx.tab = calloc(n, sizeof(__u32));
	a->fseid_idx.tab = calloc(n, sizeof(__u32));
	return a->ue_idx.tab && a->ue6_idx.tab && a->fseid_idx.tab ? 0 : -ENOMEM;
}

void sess_index_free(struct pfcp_agent *a)
{
	free(a->ue_idx.tab);
	free(a->ue6_idx.tab);
	free(a->fseid_idx.tab);
}

struct sess *ue_find(struct pfcp_agent *a, __u32 ue)
{
	const struct sess probe = { .ue = ue };

	for (__u32 i = ue_home(a, &probe); a->ue_idx.tab[i]; i = (i + 1) & a->ue_idx.mask)
		if (a->sess[a->ue_idx.tab[i] - 1].ue == ue)
			return &a->sess[a->ue_idx.tab[i] - 1];
	return NULL;
}

struct sess *ue6_find(struct pfcp_agent *a, __u64 ue6)
{
	const struct sess probe = { .ue6 = ue6 };

	for (__u32 i = ue6_home(a, &probe); a->ue6_idx.tab[i]; i = (i + 1) & a->ue6_idx.mask) {
		const struct sess *s = &a->sess[a->ue6_idx.tab[i] - 1];

		if (s->has_ue6 && s->ue6 == ue6)
			return &a->sess[a->ue6_idx.tab[i] - 1];
	}
	return NULL;
}

struct sess *fseid_find(struct pfcp_agent *a, int ai, __u64 seid, __u32 addr)
{
	const struct sess probe = { .cp_seid = seid, .cp_addr = addr, .assoc = ai };

	for (__u32 i = fseid_home(a, &probe); a->fseid_idx.tab[i];
	     i = (i + 1) & a->fseid_idx.mask) {
		const struct sess *s = &a->sess[a->fseid_idx.tab[i] - 1];

		if (s->cp_seid == seid && s->cp_addr == addr && s->assoc == ai)
			return &a->sess[a->fseid_idx.tab[i] - 1];
	}
	return NULL;
}

void sess_index_add(struct pfcp_agent *a, __u32 idx)
{
	if (a->sess[idx].ue)
		idx_insert(a, &a->ue_idx, ue_home(a, &a->sess[idx]), idx);
	if (a->sess[idx].has_ue6)
		idx_insert(a, &a->ue6_idx, ue6_home(a, &a->sess[idx]), idx);
	idx_insert(a, &a->fseid_idx, fseid_home(a, &a->sess[idx]), idx);
}

struct sess *sess_find(struct pfcp_agent *a, __u64 seid)
{
	__u32 idx = (__u32)seid;
	struct sess *s;

	if (!idx || idx > a->max_sess)
		return NULL;
	s = &a->sess[idx - 1];
	return (s->flags & S_USED) && s->up_seid == seid ? s : NULL;
}

/* A new session's owner tag: from the session generation, never 0 (0 is `pgwu session`'s) */
__u32 owner_tag(__u32 gen)
{
	return gen % 0xffff + 1;
}

void rules_count(struct pfcp_agent *a)
{
	stat_set(a, PFCP_STAT_QERS, a->n_qer);
	stat_set(a, PFCP_STAT_URRS, a->n_urr);
}

static void publish_err(struct pfcp_agent *a, int err, __u32 n)
{
	__u32 held;

	stat_add(a, PFCP_STAT_PUBLISH_ERRORS, n);
	if (ratelimit_pass(a, &a->rl_publish, &held))
		fprintf(stderr, "Couldn't write %u session records to %s/%s: %s (%u more such lines "
			"held back); `pgwu session` does not show their rules\n", n, PFCP_SESSIONS_MAP,
			PFCP_RULES_MAP, strerror(-err), held);
}

/* Write what is pending: a batch update and a batch delete per map. */
void sess_publish_flush(struct pfcp_agent *a)
{
	struct pub_pending *p = &a->pub;
	__u32 n;
	int err;

	if (a->sess_fd < 0)
		return;
	if ((n = p->n_upd) &&
	    (err = bpf_map_update_batch(a->sess_fd, p->upd_key, p->upd_val, &n, NULL)))
		publish_err(a, err, p->n_upd - n);
	if ((n = p->n_rupd) &&
	    (err = bpf_map_update_batch(a->rules_fd, p->rupd_key, p->rupd_val, &n, NULL)))
		publish_err(a, err, p->n_rupd - n);
	/* deletes: keys already gone (a record that failed to be written) are no error */
	for (__u32 done = 0; done < p->n_del; done += n + 1) {
		n = p->n_del - done;
		if (!bpf_map_delete_batch(a->sess_fd, p->del_key + done, &n, NULL))
			break;
	}
	for (__u32 done = 0; done < p->n_rdel; done += n + 1) {
		n = p->n_rdel - done;
		if (!bpf_map_delete_batch(a->rules_fd, p->rdel_key + done, &n, NULL))
			break;
	}
	for (__u32 i = 0; i < p->n_upd; i++)
		a->pub_mark[p->upd_key[i]] = 0;
	for (__u32 i = 0; i < p->n_del; i++)
		a->pub_mark[p->del_key[i]] = 0;
	p->n_upd = p->n_del = p->n_rupd = p->n_rdel = 0;
}

/* Room for one more session operation with nr rules, and none pending for idx: flush if not. */
static void pub_room(struct pfcp_agent *a, __u32 idx, __u32 nr)
{
	struct pub_pending *p = &a->pub;

	if (a->pub_mark[idx] || p->n_upd + p->n_del == PUB_SESS ||
	    p->n_rupd + p->n_rdel + nr > PUB_RULES)
		sess_publish_flush(a);
	a->pub_mark[idx] = 1;
}

/*
 * The session's record and its rules, queued for pfcp_sessions and pfcp_rules (written at the
 * end of the batch). What `pgwu session` shows; a failure is counted and logged, the session
 * itself stands (the record is a copy, the agent's table is the model).
 */
void sess_publish(struct pfcp_agent *a, const struct sess *s)
{
	struct pub_pending *p = &a->pub;
	const struct assoc *as = &a->assoc[s->assoc];
	__u32 idx = (__u32)s->up_seid - 1;
	struct pgwu_pfcp_sess *rec;

	if (a->sess_fd < 0)
		return;
	pub_room(a, idx, s->r ? s->r->n_qer + s->r->n_urr : 0);
	p->upd_key[p->n_upd] = idx;
	rec = &p->upd_val[p->n_upd++];
	memset(rec, 0, sizeof(*rec));
	rec->up_seid = s->up_seid;
	rec->cp_seid = s->cp_seid;
	rec->cp_addr = s->cp_addr;
	rec->peer_addr = as->peer.sin_addr.s_addr;
	rec->peer_port = as->peer.sin_port;
	rec->assoc = s->assoc;
	rec->teid = s->teid;
	rec->ue = s->ue;
	rec->sgw = s->sgw;
	rec->sgw_teid = s->sgw_teid;
	rec->owner = s->owner;
	rec->flags = (s->dl_on ? PGWU_PFCP_S_DL_ON : 0) | (s->has_sgw ? PGWU_PFCP_S_HAS_SGW : 0);
	rec->dl_apply = s->dl_apply;
	rec->pdr[PGWU_PFCP_UPLINK].id = s->ul_pdr;
	rec->pdr[PGWU_PFCP_UPLINK].far_id = s->ul_far;
	rec->pdr[PGWU_PFCP_DOWNLINK].id = s->dl_pdr;
	rec->pdr[PGWU_PFCP_DOWNLINK].far_id = s->dl_far;
	if (!s->r)
		return;
	memcpy(rec->pdr, s->r->pdr, sizeof(rec->pdr));
	rec->n_qer = s->r->n_qer;
	rec->n_urr = s->r->n_urr;
	for (int i = 0; i < s->r->n_qer; i++) {
		rec->qer_ids[i] = s->r->qer[i].id;
		p->rupd_key[p->n_rupd] = (struct pgwu_pfcp_rule_key){ idx, PGWU_PFCP_RULE_QER,
								       s->r->qer[i].id };
		p->rupd_val[p->n_rupd++] = (struct pgwu_pfcp_rule){ .kind = PGWU_PFCP_RULE_QER,
								    .qer = s->r->qer[i] };
	}
	for (int i = 0; i < s->r->n_urr; i++) {
		rec->urr_ids[i] = s->r->urr[i].id;
		p->rupd_key[p->n_rupd] = (struct pgwu_pfcp_rule_key){ idx, PGWU_PFCP_RULE_URR,
								       s->r->urr[i].id };
		p->rupd_val[p->n_rupd++] = (struct pgwu_pfcp_rule){ .kind = PGWU_PFCP_RULE_URR,
								    .urr = s->r->urr[i] };
	}
}

/* The session's record and rules, queued for removal from the published maps */
static void sess_unpublish(struct pfcp_agent *a, const struct sess *s)
{
	struct pub_pending *p = &a->pub;
	__u32 idx = (__u32)s->up_seid - 1;

	if (a->sess_fd < 0)
		return;
	pub_room(a, idx, s->r ? s->r->n_qer + s->r->n_urr : 0);
	p->del_key[p->n_del++] = idx;
	if (!s->r)
		return;
	for (int i = 0; i < s->r->n_qer; i++)
		p->rdel_key[p->n_rdel++] = (struct pgwu_pfcp_rule_key){ idx, PGWU_PFCP_RULE_QER,
									 s->r->qer[i].id };
	for (int i = 0; i < s->r->n_urr; i++)
		p->rdel_key[p->n_rdel++] = (struct pgwu_pfcp_rule_key){ idx, PGWU_PFCP_RULE_URR,
									 s->r->urr[i].id };
}

void sess_unpublish_rule(struct pfcp_agent *a, const struct sess *s, __u8 kind, __u32 id)
{
	struct pub_pending *p = &a->pub;
	__u32 idx = (__u32)s->up_seid - 1;

	if (a->sess_fd < 0)
		return;
	if (p->n_rupd + p->n_rdel + 1 > PUB_RULES)
		sess_publish_flush(a);
	p->rdel_key[p->n_rdel++] = (struct pgwu_pfcp_rule_key){ idx, kind, id };
}

static void sess_free(struct pfcp_agent *a, struct sess *s, struct sess_rules **rules)
{
	__u32 idx = (__u32)s->up_seid - 1;

	sess_unpublish(a, s);
	a->assoc[s->assoc].sessions--;
	if (s->ue)
		idx_remove(a, &a->ue_idx, idx, ue_home);
	if (s->has_ue6)
		idx_remove(a, &a->ue6_idx, idx, ue6_home);
	idx_remove(a, &a->fseid_idx, idx, fseid_home);
	if (s->r) {
		a->n_qer -= s->r->n_qer;
		a->n_urr -= s->r->n_urr;
	}
	if (rules)
		*rules = s->r;
	else
		free(s->r);
	if (a->peers)
		a->peers[s->assoc].sessions = a->assoc[s->assoc].sessions;
	memset(s, 0, sizeof(*s));
	a->free_idx[a->n_free++] = idx;
	a->n_sess--;
	stat_set(a, PFCP_STAT_SESSIONS, a->n_sess);
	rules_count(a);
}

/* Remove the bearer halves the session owns and forget it; their usage just before is in *b,
 * its rules in *rules (the caller frees them), when those are not NULL. */
int sess_delete(struct pfcp_agent *a, struct sess *s, struct bearer *b, struct sess_rules **rules)
{
	__u64 p6 = 0, b6 = 0;
	int err = 0, kept = 0, kept6 = 0;

	/* the IPv6 downlink half first, while it is still found by its /64 and owner (the uplink
	 * half's removal takes ul6_prefix, and a dl6_bearers entry of its TEID, with it) */
	if (s->has_ue6 && s->dl_on) {
		err = bearer_remove_dl6_owned(&a->m, s->ue6, s->teid, s->owner, &p6, &b6);
		kept6 = err == -EPERM || err == -ENOENT;
		err = kept6 ? 0 : err;
	}
	if (!err)
		err = bearer_remove_owned(&a->m, s->teid, s->ue, s->owner, true, s->dl_on && s->ue,
					  &kept, b);
	kept += kept6;
	if (b) {
		b->dl_packets += s->dl_packets + p6;
		b->dl_bytes += s->dl_bytes + b6;
		b->dl6_packets = p6;
		b->dl6_bytes = b6;
	}
	if (err) {
		fprintf(stderr, "Couldn't delete the bearer of session 0x%llx: %s\n",
			(unsigned long long)s->up_seid, strerror(-err));
		return err;
	}
	if (kept) {
		char ue[16];
		__u32 held;

		stat_add(a, PFCP_STAT_HALVES_KEPT, kept);
		if (ratelimit_pass(a, &a->rl_kept, &held))
			fprintf(stderr, "pgwu pfcp: session 0x%llx (TEID %u, UE %s) deleted; %d of its "
				"bearer halves were not removed: someone else's now (pgwu session?) "
				"(%u more since the last line)\n", (unsigned long long)s->up_seid,
				ntohl(s->teid), inet_ntop(AF_INET, &s->ue, ue, sizeof(ue)) ? ue : "?",
				kept, held);
	}
	if (s->cp2up_teid && s->r)
		cp2up_read(a, s);	/* final: the halves it relays to are gone */
	if (s->cp2up_teid)
		cp2up_del(&a->m.sdf, a->m.ul, s->cp2up_teid);	/* the CP2UP tunnel with them */
	if (s->r && s->r->sdf_dirs) {
		/* the halves are gone: the counters are final; the lists and rules after them */
		sdf_read(a, s->r);
		sdf_drop(a, s);
		sdf_urrs_remove(a, s->teid, s->r);	/* after the rules that named them */
	}
	if (s->r)
		qos_remove(a, s->teid);	/* after the halves that pointed at it */
	sess_free(a, s, rules);
	return 0;
}

void sdf_read(struct pfcp_agent *a, struct sess_rules *r)
{
	struct pgwu_sdf_pdr d;

	for (int i = 0; i < r->n_sdf; i++)
		if (!bpf_map_lookup_elem(a->m.sdf.pdrs, &r->sdf[i].rule, &d)) {
			r->sdf[i].packets = d.packets;
			r->sdf[i].bytes = d.bytes;
		}
}

void cp2up_read(struct pfcp_agent *a, const struct sess *s)
{
	struct pgwu_cp_key k = { .id = s->cp2up_teid, .kind = PGWU_CP_CP2UP };
	struct pgwu_cp_relay v;

	if (s->cp2up_teid && s->r->cp2up.n_urr && a->m.sdf.cp >= 0 &&
	    !bpf_map_lookup_elem(a->m.sdf.cp, &k, &v)) {
		s->r->cp2up_packets = v.packets;
		s->r->cp2up_bytes = v.bytes;
	}
}

void sdf_drop(struct pfcp_agent *a, const struct sess *s)
{
	for (int d = 0; d < 2; d++)
		if (s->r->sdf_dirs & (1U << d))
			sdf_remove(&a->m.sdf, s->teid, d);
}

void assoc_republish(struct pfcp_agent *a, int ai)
{
	for (__u32 i = 0, n = a->assoc[ai].sessions; i < a->max_sess && n; i++)
		if ((a->sess[i].flags & S_USED) && a->sess[i].assoc == ai) {
			sess_publish(a, &a->sess[i]);
			n--;
		}
}

__u32 assoc_drop_sessions(struct pfcp_agent *a, int ai)
{
	__u32 n = 0;

	for (__u32 i = 0; i < a->max_sess && a->assoc[ai].sessions; i++)
		if ((a->sess[i].flags & S_USED) && a->sess[i].assoc == ai &&
		    !sess_delete(a, &a->sess[i], NULL, NULL))
			n++;
	peer_publish(a, ai);
	return n;
}

/*
 * The next TEID that no bearer uses and whose slot in the direct index is free, so the packet
 * path finds it with one array access: candidates count up from 1, so while fewer than
 * nslots TEIDs have been handed out the TEID is its own slot number. A TEID is given again only
 * after the counter wraps (2^32 allocations) and only if it is free then. 0 when none was found.
 */
__u32 teid_alloc(struct pfcp_agent *a)
{
	for (__u32 i = 0; i < TEID_TRIES; i++) {
		__u32 t = a->next_teid++, n = htonl(t);
		struct pgwu_ul_bearer ul;

		if (!t)
			continue;
		if (a->m.ul_slots &&
		    __atomic_load_n(&a->m.ul_slots[t & (a->m.nslots - 1)].state, __ATOMIC_ACQUIRE) ==
		    PGWU_SLOT_VALID)
			continue;
		if (!bpf_map_lookup_elem(a->m.ul, &n, &ul))
			continue;
		return n;
	}
	return 0;
}
