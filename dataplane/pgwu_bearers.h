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
