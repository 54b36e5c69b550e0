/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * pgwu_bearers.h: the bearer table's API (pgwu_bearers.c), beside the maps layer (pgwu_maps.h):
 * what `pgwu session` and the PFCP agent write and read bearers with, without the command line.
 */
#ifndef PGWU_BEARERS_H
#define PGWU_BEARERS_H

#include <stdbool.h>
#include <linux/types.h>
#include "pgwu.h"
#include "pgwu_maps.h"

/*
 * One bearer in the tables (pgwu_bearers.c): what `session add/del` and the PFCP agent share.
 * The caller holds the PIN_DIR lock; teid, ue, sgw, sgw_teid network order.
 * bearer_add: both halves and their slots, all or nothing: -EEXIST (the TEID has a bearer),
 *   -EADDRINUSE (the UE has one), -E2BIG (table full), or another -errno; nothing changed then.
 *   ul_flags: the uplink half's (PGWU_B_QFI and the QFI, or 0); the downlink's are in dl.
 *   dl NULL: the uplink half only (a PFCP session whose downlink is not forwarding yet).
 * bearer_add_dl: the downlink half alone (and its slot): -EADDRINUSE, -E2BIG, -errno.
 * bearer_remove: empties the slots, then deletes the halves named.
 * bearer_set_dl: a new SGW address and TEID for the downlink half (usage counters kept).
 * bearer_set_dl_flags: the same with new flags too (a QFI changed by a PFCP Update QER).
 * bearer_get: by TEID (by_teid) or by UE, with usage (slot + hash entry); -ENOENT.
 * The *_owned variants (the PFCP agent) touch only halves whose owner tag
 * (PGWU_B_OWNER_SHIFT) is owner and that still belong together (uplink half of teid with UE
 * ue, downlink half of ue with local TEID teid):
 * bearer_remove_owned: removes those of the halves named; *kept: how many of the halves named
 *   were left in place; *usage (if not NULL): the usage of the ones removed, read just before.
 * bearer_set_dl_owned: bearer_set_dl_flags of the downlink half if it is owner's (-EPERM if
 *   another owner's, -ENOENT if none).
 */
int bearer_add(const struct pgwu_maps *m, __u32 teid, __u32 ue, __u32 ul_flags,
	       const struct pgwu_dl_bearer *dl);
/*
 * IPv6 (dl6_bearers, ul6_prefix; maps.h): the /64 ue6 (network order, its 8 octets) of the bearer
 * whose uplink half is teid, added after its IPv4 halves. bearer_add_v6: the prefix for uplink
 * anti-spoofing and, with dl, the IPv6 downlink half (dl as bearer_add's, local_teid teid); all or
 * nothing: -EEXIST (the TEID has a /64 already), -EADDRINUSE (the /64 is another bearer's),
 * -E2BIG, -errno. bearer_remove of an uplink half removes its /64 too (both maps). Each entry is
 * indexed in its slot (slot_ul6_set, slot_dl6_set) after the hash entry and emptied before it goes,
 * as the IPv4 halves'.
 */
int bearer_add_v6(const struct pgwu_maps *m, __u32 teid, __u64 ue6, const struct pgwu_dl_bearer *dl);
int bearer_remove_v6(const struct pgwu_maps *m, __u32 teid);
/* "PREFIX/64" (or "PREFIX::/64") to the /64's 8 octets in network order; 0, or -1 with why in
 * *err (one line, for a bad option). */
int parse_prefix64(const char *s, __u64 *ue6, const char **err);
/* The /64 as "a:b:c:d::/64" in buf (at least 48 octets). */
const char *prefix64_str(__u64 ue6, char *buf);
/*
 * The IPv6 downlink half alone, for the PFCP agent (its downlink FAR starts or stops forwarding,
 * or moves): bearer_add_dl6: -EADDRINUSE (the /64 has one), -E2BIG, -errno. The *_owned ones touch
 * the half of ue6 only when its owner tag is owner and its local TEID teid (else -EPERM; -ENOENT:
 * none): bearer_set_dl6_owned: a new SGW address, TEID and flags (usage counters kept);
 * bearer_remove_dl6_owned: removed, its usage just before in *packets, *bytes.
 */
int bearer_add_dl6(const struct pgwu_maps *m, __u64 ue6, const struct pgwu_dl_bearer *dl);
int bearer_set_dl6_owned(const struct pgwu_maps *m, __u64 ue6, __u32 teid, __u32 owner,
			 __u32 sgw, __u32 sgw_teid, __u32 flags);
int bearer_remove_dl6_owned(const struct pgwu_maps *m, __u64 ue6, __u32 teid, __u32 owner,
			    __u64 *packets, __u64 *bytes);
int bearer_add_dl(const struct pgwu_maps *m, __u32 ue, const struct pgwu_dl_bearer *dl);
int bearer_remove(const struct pgwu_maps *m, __u32 teid, __u32 ue, bool has_ul, bool has_dl);
int bearer_set_dl(const struct pgwu_maps *m, __u32 ue, __u32 sgw, __u32 sgw_teid);
int bearer_set_dl_flags(const struct pgwu_maps *m, __u32 ue, __u32 sgw, __u32 sgw_teid,
			__u32 flags);
int bearer_get(const struct pgwu_maps *m, __u32 teid, __u32 ue, bool by_teid, struct bearer *b);
int bearer_remove_owned(const struct pgwu_maps *m, __u32 teid, __u32 ue, __u32 owner,
			bool has_ul, bool has_dl, int *kept, struct bearer *usage);
int bearer_set_dl_owned(const struct pgwu_maps *m, __u32 ue, __u32 teid, __u32 owner,
			__u32 sgw, __u32 sgw_teid, __u32 flags);

#endif /* PGWU_BEARERS_H */
