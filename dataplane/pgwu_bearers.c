// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pgwu_bearers.c: the bearer table's API (pgwu_bearers.h): the two halves of a bearer in the uplink
 * and downlink hash maps and their direct-index slots, written all or nothing, read with usage.
 * Used by `pgwu session` (pgwu_session.c) and the PFCP agent (pfcp_session.c).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <bpf/bpf.h>
#include "pgwu_bearers.h"

int bearer_add(const struct pgwu_maps *m, __u32 teid, __u32 ue, __u32 ul_flags,
	       const struct pgwu_dl_bearer *dl)
{
	struct pgwu_ul_bearer ul = { .ue_addr = ue, .flags = ul_flags };
	int err;

	err = bpf_map_update_elem(m->ul, &teid, &ul, BPF_NOEXIST);
	if (err)
		return err;
	if (dl) {
		err = bearer_add_dl(m, ue, dl);
		if (err) {
			bpf_map_delete_elem(m->ul, &teid);
			return err;
		}
	}
	slot_ul_set(m, teid, &ul);
	return 0;
}

int bearer_add_dl(const struct pgwu_maps *m, __u32 ue, const struct pgwu_dl_bearer *dl)
{
	int err = bpf_map_update_elem(m->dl, &ue, dl, BPF_NOEXIST);

	if (err)
		return err == -EEXIST ? -EADDRINUSE : err;
	slot_dl_set(m, ue, dl);
	return 0;
}

int bearer_remove(const struct pgwu_maps *m, __u32 teid, __u32 ue, bool has_ul, bool has_dl)
{
	if (has_dl)
		slot_dl_clear(m, ue);
	if (has_ul)
		slot_ul_clear(m, teid);
	if (has_dl && bpf_map_delete_elem(m->dl, &ue) && errno != ENOENT)
		return -errno;
	if (has_ul && bpf_map_delete_elem(m->ul, &teid) && errno != ENOENT)
		return -errno;
	return 0;
}

/* flags NULL: keep the half's flags */
static int set_dl(const struct pgwu_maps *m, __u32 ue, __u32 sgw, __u32 sgw_teid,
		  const __u32 *flags)
{
	struct pgwu_dl_slot *sl;
	struct pgwu_dl_bearer dl;
	__u64 packets = 0, bytes = 0;
	int err;

	if (bpf_map_lookup_elem(m->dl, &ue, &dl))
		return -errno;
	/*
	 * The slot's copy can't be rewritten in place (the packet path reads sgw_addr, sgw_teid
	 * and flags without a lock): empty it, fold its counters into the hash entry, rewrite
	 * that, index it again. Packets counted between the lookup above and the update below
	 * (a few microseconds) are lost from the usage counters; none is misrouted.
	 */
	sl = slot_dl(m, ue);
	if (sl) {
		__atomic_store_n(&sl->state, 0, __ATOMIC_RELEASE);
		packets = __atomic_load_n(&sl->b.packets, __ATOMIC_RELAXED);
		bytes = __atomic_load_n(&sl->b.bytes, __ATOMIC_RELAXED);
	}
	dl.sgw_addr = sgw;
	dl.sgw_teid = sgw_teid;
	if (flags)
		dl.flags = *flags;
	dl.packets += packets;
	dl.bytes += bytes;
	err = bpf_map_update_elem(m->dl, &ue, &dl, BPF_EXIST);
	if (err)
		return err;
	slot_dl_set(m, ue, &dl);
	return 0;
}

int bearer_set_dl(const struct pgwu_maps *m, __u32 ue, __u32 sgw, __u32 sgw_teid)
{
	return set_dl(m, ue, sgw, sgw_teid, NULL);
}

int bearer_set_dl_flags(const struct pgwu_maps *m, __u32 ue, __u32 sgw, __u32 sgw_teid,
			__u32 flags)
{
	return set_dl(m, ue, sgw, sgw_teid, &flags);
}

/* The halves of (teid, ue) that carry owner's tag and still join: 1 uplink, 2 downlink. */
static int halves_owned(const struct pgwu_maps *m, __u32 teid, __u32 ue, __u32 owner,
			struct pgwu_ul_bearer *ul, struct pgwu_dl_bearer *dl)
{
	int h = 0;

	if (!bpf_map_lookup_elem(m->ul, &teid, ul) && ul->ue_addr == ue &&
	    pgwu_owner_of(ul->flags) == owner)
		h |= 1;
	if (!bpf_map_lookup_elem(m->dl, &ue, dl) && dl->local_teid == teid &&
	    pgwu_owner_of(dl->flags) == owner)
		h |= 2;
	return h;
}

/* The usage of the halves h (1 uplink, 2 downlink) looked up in ul and dl: hash entry + slot */
static void usage_of(const struct pgwu_maps *m, __u32 teid, __u32 ue, int h,
		     const struct pgwu_ul_bearer *ul, const struct pgwu_dl_bearer *dl, struct bearer *b)
{
	memset(b, 0, sizeof(*b));
	b->teid = ntohl(teid);
	b->ue = ue;
	if (h & 1) {
		const struct pgwu_ul_slot *sl = slot_ul(m, teid);

		b->has_ul = true;
		b->ul_flags = ul->flags;
		b->ul_packets = ul->packets + (sl ? sl->b.packets : 0);
		b->ul_bytes = ul->bytes + (sl ? sl->b.bytes : 0);
	}
	if (h & 2) {
		const struct pgwu_dl_slot *sl = slot_dl(m, ue);

		b->has_dl = true;
		b->sgw = dl->sgw_addr;
		b->sgw_teid = ntohl(dl->sgw_teid);
		b->flags = dl->flags;
		b->dl_packets = dl->packets + (sl ? sl->b.packets : 0);
		b->dl_bytes = dl->bytes + (sl ? sl->b.bytes : 0);
	}
}

int bearer_remove_owned(const struct pgwu_maps *m, __u32 teid, __u32 ue, __u32 owner,
			bool has_ul, bool has_dl, int *kept, struct bearer *usage)
{
	struct pgwu_ul_bearer ul;
	struct pgwu_dl_bearer dl;
	int h = halves_owned(m, teid, ue, owner, &ul, &dl);

	h &= (has_ul ? 1 : 0) | (has_dl ? 2 : 0);
	if (usage)
		usage_of(m, teid, ue, h, &ul, &dl, usage);	/* read just before they go */
	*kept = (has_ul && !(h & 1)) + (has_dl && !(h & 2));
	return bearer_remove(m, teid, ue, h & 1, h & 2);
}

int bearer_set_dl_owned(const struct pgwu_maps *m, __u32 ue, __u32 teid, __u32 owner,
			__u32 sgw, __u32 sgw_teid, __u32 flags)
{
	struct pgwu_dl_bearer dl;

	if (bpf_map_lookup_elem(m->dl, &ue, &dl))
		return -ENOENT;
	if (dl.local_teid != teid || pgwu_owner_of(dl.flags) != owner)
		return -EPERM;
	return set_dl(m, ue, sgw, sgw_teid, &flags);
}

int bearer_get(const struct pgwu_maps *m, __u32 teid, __u32 ue, bool by_teid, struct bearer *b)
{
	struct pgwu_ul_bearer ul;
	struct pgwu_dl_bearer dl;

	memset(b, 0, sizeof(*b));
	if (by_teid) {
		if (bpf_map_lookup_elem(m->ul, &teid, &ul))
			return -ENOENT;
		ue = ul.ue_addr;
		b->has_ul = true;
		if (!bpf_map_lookup_elem(m->dl, &ue, &dl) && dl.local_teid == teid)
			b->has_dl = true;
	} else {
		if (bpf_map_lookup_elem(m->dl, &ue, &dl))
			return -ENOENT;
		teid = dl.local_teid;
		b->has_dl = true;
		if (!bpf_map_lookup_elem(m->ul, &teid, &ul) && ul.ue_addr == ue)
			b->has_ul = true;
	}
	b->teid = ntohl(teid);
	b->ue = ue;
	if (b->has_ul) {
		const struct pgwu_ul_slot *sl = slot_ul(m, teid);

		b->ul_flags = ul.flags;
		b->ul_packets = ul.packets + (sl ? sl->b.packets : 0);
		b->ul_bytes = ul.bytes + (sl ? sl->b.bytes : 0);
	}
	if (b->has_dl) {
		const struct pgwu_dl_slot *sl = slot_dl(m, ue);

		b->sgw = dl.sgw_addr;
		b->sgw_teid = ntohl(dl.sgw_teid);
		b->flags = dl.flags;
		b->dl_packets = dl.packets + (sl ? sl->b.packets : 0);
		b->dl_bytes = dl.bytes + (sl ? sl->b.bytes : 0);
	}
	return 0;
}
