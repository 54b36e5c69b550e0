// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pgwu_sock_sdf.c: SDF filters on the socket path (`pgwu socket`), the way the XDP paths apply
 * them (include/sdf.h, pgwu_pdr_apply) and from the same tables (sdf_lists, sdf_pdrs, sdf_qos:
 * whatever `pgwu session add --filter` or `pgwu pfcp` wrote). A bearer half with PGWU_B_SDF has its
 * packet classified once every other check has passed, just before it is queued: the first filter
 * of its list that the packet matches (include/sdf_match.h: the one matcher both paths build)
 * names its PDR; none is drop_no_pdr, a FAR that drops is drop_far, a QER with the gate closed in
 * that direction is drop_gate_closed. What the PDR forwards is counted in its usage (sdf_pdrs'
 * packets and bytes, the inner packet's length as XDP counts it) once the kernel has taken it.
 *
 * Where it differs from XDP: the lists and PDRs are hash maps, read with a system call each (two a
 * packet, three with a QER; counted in hash_lookups); a PDR's MBR and quota are not applied (the
 * socket path applies no bearer's either: docs/socket.md); the usage is added to sdf_pdrs after
 * each batch (usage6_flush), not per packet.
 */
#define _GNU_SOURCE
#include <string.h>
#include <bpf/bpf.h>
#include "pgwu_sock_int.h"
#include "sdf_match.h"

/* The packet at l3 (len octets, an IPv4 or IPv6 header first) of half (teid, dir): 0 and
 * t->pdr_usage set to its PDR's counters (usage6_room first), or the drop reason. */
__u32 sock_pdr_apply(struct worker *w, __be32 teid, __u32 dir, void *l3, __u32 len, struct txmeta *t)
{
	struct pgwu_sdf_key key = { .teid = teid, .dir = dir };
	struct pgwu_sdf_list l;
	struct pgwu_sdf_pdr d;
	struct sdf_pkt p;
	__u32 i, rule;

	t->pdr_usage = NULL;
	memset(&p, 0, sizeof(p));
	CTR(w, PGWU_SC_HASH_LOOKUPS)++;
	if (S.m.sdf.lists < 0 || bpf_map_lookup_elem(S.m.sdf.lists, &key, &l) ||
	    sdf_parse_buf(l3, (__u8 *)l3 + len, 0, len, &p))
		return PGWU_R_DROP_NO_PDR;
	for (i = 0; i < l.n && i < PGWU_SDF_MAX; i++)
		if (sdf_match(&l.f[i], &p))
			break;
	if (i >= l.n || i >= PGWU_SDF_MAX)
		return PGWU_R_DROP_NO_PDR;
	rule = l.f[i].rule;
	CTR(w, PGWU_SC_HASH_LOOKUPS)++;
	if (bpf_map_lookup_elem(S.m.sdf.pdrs, &rule, &d))
		return PGWU_R_DROP_NO_PDR;
	/* a FAR to the CP function: only XDP relays there (xdp_cp) */
	if (d.flags & (PGWU_SDF_P_DROP | PGWU_SDF_P_CP))
		return PGWU_R_DROP_FAR;
	if (d.flags & PGWU_SDF_P_QOS) {
		struct pgwu_qos q;

		CTR(w, PGWU_SC_HASH_LOOKUPS)++;
		if (!bpf_map_lookup_elem_flags(S.m.sdf.qos, &rule, &q, BPF_F_LOCK) &&
		    (q.flags & (dir ? PGWU_QOS_DL_CLOSED : PGWU_QOS_UL_CLOSED)))
			return PGWU_R_DROP_GATE_CLOSED;
	}
	t->pdr_usage = usage6_of(w, rule, USAGE_PDR);
	return 0;
}
