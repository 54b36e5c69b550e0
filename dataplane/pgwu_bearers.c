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

int bearer_add_v6(const struct pgwu_maps *m, __u32 teid, __u64 ue6, const struct pgwu_dl_bearer *dl)
{
	struct pgwu_ul6 u6 = { .prefix = ue6 };
	int err = bpf_map_update_elem(m->ul6, &teid, &u6, BPF_NOEXIST);

	if (err)
		return err;
	if (dl) {
		err = bpf_map_update_elem(m->dl6, &ue6, dl, BPF_NOEXIST);
		if (err) {
			bpf_map_delete_elem(m->ul6, &teid);
			return err == -EEXIST ? -EADDRINUSE : err;
		}
		slot_dl6_set(m, ue6, dl);
	}
	slot_ul6_set(m, teid, ue6);
	return 0;
}

/* The /64 of the uplink half teid and its IPv6 downlink half (when it is that bearer's); their
 * slots emptied first. */
int bearer_remove_v6(const struct pgwu_maps *m, __u32 teid)
{
	struct pgwu_dl_bearer d;
	struct pgwu_ul6 u6;

	slot_ul6_clear(m, teid);
	if (bpf_map_lookup_elem(m->ul6, &teid, &u6))
		return 0;
	if (!bpf_map_lookup_elem(m->dl6, &u6.prefix, &d) && d.local_teid == teid) {
		slot_dl6_clear(m, u6.prefix);
		if (bpf_map_delete_elem(m->dl6, &u6.prefix) && errno != ENOENT)
			return -errno;
	}
	if (bpf_map_delete_elem(m->ul6, &teid) && errno != ENOENT)
		return -errno;
	return 0;
}

int parse_prefix64(const char *s, __u64 *ue6, const char **err)
{
	const char *slash = strchr(s, '/');
	struct in6_addr a;
	char buf[INET6_ADDRSTRLEN];
	size_t n;

	if (!slash) {
		*err = "no prefix length (expected PREFIX/64)";
		return -1;
	}
	if (strcmp(slash + 1, "64")) {
		*err = "not a /64 (a bearer's IPv6 prefix is a /64, TS 23.401 5.3.1.2.2)";
		return -1;
	}
	n = slash - s;
	if (n == 0 || n >= sizeof(buf)) {
		*err = "bad IPv6 prefix";
		return -1;
	}
	memcpy(buf, s, n);
	buf[n] = 0;
	if (inet_pton(AF_INET6, buf, &a) != 1) {
		*err = "bad IPv6 prefix";
		return -1;
	}
	if (a.s6_addr[8] | a.s6_addr[9] | a.s6_addr[10] | a.s6_addr[11] | a.s6_addr[12] |
	    a.s6_addr[13] | a.s6_addr[14] | a.s6_addr[15]) {
		*err = "host bits set after the /64";
		return -1;
	}
	if (a.s6_addr[0] == 0xff || (a.s6_addr[0] == 0xfe && (a.s6_addr[1] & 0xc0) == 0x80) ||
	    !memcmp(a.s6_addr, (__u8[8]){ 0 }, 8)) {
		*err = "not a unicast prefix (multicast, link-local or ::/64)";
		return -1;
	}
	memcpy(ue6, a.s6_addr, 8);
	return 0;
}

const char *prefix64_str(__u64 ue6, char *buf)
{
	struct in6_addr a = {};

	memcpy(a.s6_addr, &ue6, 8);
	inet_ntop(AF_INET6, &a, buf, INET6_ADDRSTRLEN);
	strcat(buf, "/64");
	return buf;
}

int bearer_add_dl6(const struct pgwu_maps *m, __u64 ue6, const struct pgwu_dl_bearer *dl)
{
	int err = bpf_map_update_elem(m->dl6, &ue6, dl, BPF_NOEXIST);

	if (err)
		return err == -EEXIST ? -EADDRINUSE : err;
	slot_dl6_set(m, ue6, dl);
	return 0;
}

/* The IPv6 downlink half of ue6, when it is owner's and joins local TEID teid: in *dl, 0; -EPERM
 * (another's), -ENOENT (none). */
static int dl6_owned(const struct pgwu_maps *m, __u64 ue6, __u32 teid, __u32 owner,
		     struct pgwu_dl_bearer *dl)
{
	if (bpf_map_lookup_elem(m->dl6, &ue6, dl))
		return -ENOENT;
	if (dl->local_teid != teid || pgwu_owner_of(dl->flags) != owner)
		return -EPERM;
	return 0;
}

int bearer_set_dl6_owned(const struct pgwu_maps *m, __u64 ue6, __u32 teid, __u32 owner,
			 __u32 sgw, __u32 sgw_teid, __u32 flags)
{
	struct pgwu_dl6_slot *sl;
	struct pgwu_dl_bearer dl;
	int err = dl6_owned(m, ue6, teid, owner, &dl);

	if (err)
		return err;
	/* as set_dl: the slot emptied and its counters folded into the entry, which is replaced
	 * with its counters as read, then indexed again; what the packet path adds in between is
	 * lost from the usage, nothing is misrouted */
	sl = slot_dl6(m, ue6);
	if (sl) {
		__atomic_store_n(&sl->state, 0, __ATOMIC_RELEASE);
		dl.packets += __atomic_load_n(&sl->b.packets, __ATOMIC_RELAXED);
		dl.bytes += __atomic_load_n(&sl->b.bytes, __ATOMIC_RELAXED);
	}
	dl.sgw_addr = sgw;
	dl.sgw_teid = sgw_teid;
	dl.flags = flags;
	err = bpf_map_update_elem(m->dl6, &ue6, &dl, BPF_EXIST);
	if (err)
		return err;
	slot_dl6_set(m, ue6, &dl);
	return 0;
}

int bearer_remove_dl6_owned(const struct pgwu_maps *m, __u64 ue6, __u32 teid, __u32 owner,
			    __u64 *packets, __u64 *bytes)
{
	struct pgwu_dl_bearer dl;
	struct pgwu_dl6_slot *sl;
	int err = dl6_owned(m, ue6, teid, owner, &dl);

	if (err)
		return err;
	sl = slot_dl6(m, ue6);
	*packets = dl.packets;	/* read just before it goes, the slot's with it */
	*bytes = dl.bytes;
	if (sl) {
		__atomic_store_n(&sl->state, 0, __ATOMIC_RELEASE);
		*packets += __atomic_load_n(&sl->b.packets, __ATOMIC_RELAXED);
		*bytes += __atomic_load_n(&sl->b.bytes, __ATOMIC_RELAXED);
	}
	if (bpf_map_delete_elem(m->dl6, &ue6) && errno != ENOENT)
		return -errno;
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
	if (has_ul)
		return bearer_remove_v6(m, teid);
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
		if (dl->flags & PGWU_B_PEER6)
			n3v6_peer_get(m, dl->sgw_addr, b->sgw6);
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
	struct pgwu_ul6 u6;

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
		if (dl.flags & PGWU_B_PEER6)
			n3v6_peer_get(m, dl.sgw_addr, b->sgw6);
		b->sgw_teid = ntohl(dl.sgw_teid);
		b->flags = dl.flags;
		b->dl_packets = dl.packets + (sl ? sl->b.packets : 0);
		b->dl_bytes = dl.bytes + (sl ? sl->b.bytes : 0);
	}
	if (b->has_ul && !bpf_map_lookup_elem(m->ul6, &teid, &u6)) {
		const struct pgwu_ul_slot *su = slot_ul6(m, teid);

		b->has_ue6 = true;
		b->ue6 = u6.prefix;
		b->ul6_packets = u6.packets + (su ? su->u6.packets : 0);
		b->ul6_bytes = u6.bytes + (su ? su->u6.bytes : 0);
		b->ul_packets += b->ul6_packets;
		b->ul_bytes += b->ul6_bytes;
		if (!bpf_map_lookup_elem(m->dl6, &b->ue6, &dl) && dl.local_teid == teid) {
			const struct pgwu_dl6_slot *sd = slot_dl6(m, b->ue6);

			b->dl6_packets = dl.packets + (sd ? sd->b.packets : 0);
			b->dl6_bytes = dl.bytes + (sd ? sd->b.bytes : 0);
			b->dl_packets += b->dl6_packets;
			b->dl_bytes += b->dl6_bytes;
		}
	}
	return 0;
}
