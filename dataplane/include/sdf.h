/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * sdf.h: SDF filters (TS 29.244 5.2.1 packet detection by SDF filter, 8.2.5; struct pgwu_sdf_list in
 * pgwu.h) for the four packet paths: a bearer half with PGWU_B_SDF has its packet classified, once
 * its bearer is found and its route resolved, by the call that applies a bearer's QoS (PGWU_B_QOS):
 *
 *	reason = pdr_apply(ctx, flags, teid, dir, l3_off, len, counted);
 *
 * l3_off: the inner IPv4 or IPv6 header's offset in the frame (the T-PDU uplink, the packet itself
 * downlink), len its length. Returns 0 to go on (the matched PDR forwards, its QER let the packet
 * through, its usage counted when `counted`: the packet is forwarded by XDP, as the bearer's
 * counters), else the drop reason: DROP_NO_PDR (no filter matches), DROP_FAR (its FAR drops), or
 * its QER's DROP_GATE_CLOSED / DROP_MBR / DROP_QUOTA, or its URR's DROP_QUOTA (PGWU_SDF_P_URR: the
 * quota of a URR, in sdf_urr, shared by every PDR that links it; its volume threshold is measured
 * there too).
 *
 * The work is in a global function, pgwu_pdr_apply, which the verifier checks once, on its own:
 * inlined, a 32-filter loop would multiply the states it walks through the rest of each path (each
 * is close to its limit already), and the paths' stacks stay as they are (it has its own frame; the
 * IPv6 ones are tail calls already). The cost is bounded: one hash lookup of the list, at most
 * PGWU_SDF_MAX filters compared (a few loads and compares each, no helper call), one lookup of the
 * matched PDR, one of its QER when it has one, one of its URR's (sdf_urr) when it has one.
 *
 * Byte order: addresses and SPI as on the wire (network order), ports and flow label host order.
 */
#ifndef PGWU_SDF_H
#define PGWU_SDF_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "pgwu.h"
#include "maps.h"
#include "sdf_match.h"

/* The packet's fields, per CPU: on the stack they would put the paths that call in (xdp_sgi6 uses
 * over 400 of its 512 bytes) over the verifier's limit for the two frames. Scratch only: filled
 * and read within one call, which nothing else runs into on that CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sdf_pkt);
} sdf_scratch SEC(".maps");

static __always_inline int sdf_parse(struct xdp_md *ctx, __u32 off, __u32 len, struct sdf_pkt *p)
{
	/* the bound checked on the register the pointer is made from (without it clang tested
	 * `how` before the shift, and the verifier lost the bound: the access was refused) */
	asm volatile("" : "+r"(off));
	return sdf_parse_buf((void *)(long)ctx->data, (void *)(long)ctx->data_end, off, len, p);
}

/* how's bits beside the direction (bit 0), counted (bit 1) and l3_off (bits 16-31), for xdp_cp:
 * PDR_CLASSIFY: find the PDR only (no QER, no usage), its rule id left in sdf_scratch's rule,
 * and return PGWU_R_UL_CP_FWD when its FAR forwards to the CP function, else 0; PDR_RELAY: the
 * caller relays to the CP function, so such a PDR is applied as a forwarding one (without it:
 * drop_far, the path cannot send there). */
#define PDR_CLASSIFY	(1U << 2)
#define PDR_RELAY	(1U << 3)

/* The global function (verified once, on its own; see the top of the file). A half without
 * PGWU_B_SDF: its bearer's QoS entry (qos, keyed by the TEID). With it: the packet's PDR by the
 * filters, its FAR, its QER (sdf_qos), its usage. Returns 0 or the drop reason. */
__attribute__((noinline)) int pgwu_pdr_apply(struct xdp_md *ctx, __u32 teid, __u32 flags, __u32 how,
					     __u32 len)
{
	struct pgwu_sdf_key key;
	struct pgwu_sdf_list *l;
	struct pgwu_sdf_pdr *d;
	struct sdf_pkt *p;
	__u32 i, n, rule = 0, found = 0, zero = 0;
	__u32 dir = how & 1, counted = (how >> 1) & 1, l3_off = how >> 16;

	if (!(flags & PGWU_B_SDF))
		return qos_apply_map(&qos, &teid, dir, len, counted);
	p = bpf_map_lookup_elem(&sdf_scratch, &zero);
	if (!p)
		return PGWU_R_DROP_NOT_CONFIGURED;
	__builtin_memset(p, 0, sizeof(*p));
	key.teid = teid;
	key.dir = dir;
	l = bpf_map_lookup_elem(&sdf_lists, &key);
	if (!l || sdf_parse(ctx, l3_off, len, p))
		return PGWU_R_DROP_NO_PDR;
	n = l->n;
#pragma clang loop unroll(disable)
	for (i = 0; i < PGWU_SDF_MAX; i++) {
		if (i >= n)
			break;
		if (sdf_match(&l->f[i], p)) {
			rule = l->f[i].rule;
			found = 1;
			break;
		}
	}
	if (!found)
		return PGWU_R_DROP_NO_PDR;
	d = bpf_map_lookup_elem(&sdf_pdrs, &rule);
	if (!d)
		return PGWU_R_DROP_NO_PDR;
	if (how & PDR_CLASSIFY) {
		p->rule = rule;
		return d->flags & PGWU_SDF_P_CP ? PGWU_R_UL_CP_FWD : 0;
	}
	if ((d->flags & PGWU_SDF_P_DROP) || ((d->flags & PGWU_SDF_P_CP) && !(how & PDR_RELAY)))
		return PGWU_R_DROP_FAR;
	if (d->flags & PGWU_SDF_P_QOS) {
		__u32 qr = qos_apply_map(&sdf_qos, &rule, dir, len, counted);

		if (qr)
			return qr;
	}
	if (d->flags & PGWU_SDF_P_URR) {
		/* its URR's quota and threshold, one entry for every PDR that links it; after the
		 * QER, so a packet the gate or MBR drops costs the quota nothing (one the quota
		 * drops has taken its MBR credit: the QER's bucket is another entry's) */
		struct pgwu_urr_key uk = { .teid = teid, .urr_id = d->urr };
		__u32 qr = qos_apply_map(&sdf_urr, &uk, dir, len, counted);

		if (qr)
			return qr;
	}
	if (counted) {
		__sync_fetch_and_add(&d->packets, 1);
		__sync_fetch_and_add(&d->bytes, len);
	}
	return 0;
}

/* The call the paths make for a half with PGWU_B_QOS or PGWU_B_SDF (flags: the half's): without
 * SDF filters the bearer's QoS entry, inline (through the global function it cost 8 ns more a
 * packet, bench/qos_bench.py); with them the global function. Scalars only: a struct on the caller's stack passed by pointer made the verifier walk xdp_access's
 * earlier paths again and again (over its 10^6 instructions). */
static __always_inline __u32 pdr_apply(struct xdp_md *ctx, __u32 flags, __be32 teid, __u32 dir,
				       __u32 l3_off, __u32 len, int counted)
{
	if (!(flags & PGWU_B_SDF))
		return qos_apply(teid, dir, len, counted);	/* inline: a call costs ~8 ns */
	return pgwu_pdr_apply(ctx, teid, flags, (dir & 1) | (counted ? 2 : 0) | (l3_off & 0xffff) << 16,
			      len);
}

#endif /* PGWU_SDF_H */
