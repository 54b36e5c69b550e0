// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pfcp_session.c: the sessions of `pgwu pfcp`: their table (index = the low 32 bits of the UP
 * SEID), the index of their UE addresses, F-TEID allocation, and deleting a session with its
 * bearer. One session is one bearer in the tables `pgwu session` writes.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <bpf/bpf.h>
#include "pfcp_agent.h"

#define TEID_TRIES 65536

/*
 * Every session's UE address, so a UE is never given to two sessions, also while one of them has
 * no downlink half in dl_bearers (its FAR buffers or drops). Deletion shifts the entries that
 * follow back (no tombstones).
 */
static __u32 ue_home(struct pfcp_agent *a, __u32 ue)
{
	__u32 h = ue * 0x9e3779b1U;

	return (h ^ (h >> 16)) & a->ue_mask;
}

struct sess *ue_find(struct pfcp_agent *a, __u32 ue)
{
	for (__u32 i = ue_home(a, ue); a->ue_tab[i]; i = (i + 1) & a->ue_mask)
		if (a->sess[a->ue_tab[i] - 1].ue == ue)
			return &a->sess[a->ue_tab[i] - 1];
	return NULL;
}

void ue_insert(struct pfcp_agent *a, __u32 ue, __u32 idx)
{
	__u32 i = ue_home(a, ue);

	while (a->ue_tab[i])
		i = (i + 1) & a->ue_mask;
	a->ue_tab[i] = idx + 1;
}

static void ue_remove(struct pfcp_agent *a, __u32 ue)
{
	__u32 i = ue_home(a, ue), j;

	while (a->ue_tab[i] && a->sess[a->ue_tab[i] - 1].ue != ue)
		i = (i + 1) & a->ue_mask;
	if (!a->ue_tab[i])
		return;
	a->ue_tab[i] = 0;
	for (j = (i + 1) & a->ue_mask; a->ue_tab[j]; j = (j + 1) & a->ue_mask) {
		__u32 h = ue_home(a, a->sess[a->ue_tab[j] - 1].ue);

		if (((j - h) & a->ue_mask) >= ((j - i) & a->ue_mask)) {
			a->ue_tab[i] = a->ue_tab[j];
			a->ue_tab[j] = 0;
			i = j;
		}
	}
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

static void sess_free(struct pfcp_agent *a, struct sess *s)
{
	__u32 idx = (__u32)s->up_seid;

	a->assoc[s->assoc].sessions--;
	ue_remove(a, s->ue);
	memset(s, 0, sizeof(*s));
	a->free_idx[a->n_free++] = idx - 1;
	a->n_sess--;
	stat_set(a, PFCP_STAT_SESSIONS, a->n_sess);
}

/* Remove a session's bearer and forget it; the usage read just before is in *b. */
int sess_delete(struct pfcp_agent *a, struct sess *s, struct bearer *b)
{
	int err;

	if (b) {
		if (bearer_get(&a->m, s->teid, s->ue, true, b))
			memset(b, 0, sizeof(*b));
		b->dl_packets += s->dl_packets;
		b->dl_bytes += s->dl_bytes;
	}
	err = bearer_remove(&a->m, s->teid, s->ue, true, s->dl_on);
	if (err) {
		fprintf(stderr, "Couldn't delete the bearer of session 0x%llx: %s\n",
			(unsigned long long)s->up_seid, strerror(-err));
		return err;
	}
	sess_free(a, s);
	return 0;
}

void assoc_drop_sessions(struct pfcp_agent *a, int ai)
{
	for (__u32 i = 0; i < a->max_sess && a->assoc[ai].sessions; i++)
		if ((a->sess[i].flags & S_USED) && a->sess[i].assoc == ai)
			sess_delete(a, &a->sess[i], NULL);
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
