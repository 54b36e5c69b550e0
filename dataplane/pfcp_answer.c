// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pfcp_answer.c: the parts of `pgwu pfcp`'s answers that more than one procedure writes: a
 * rejection (Cause, Offending IE, Failed Rule ID), our Recovery Time Stamp, a usage report.
 */
#include <arpa/inet.h>
#include <string.h>
#include "pfcp_agent.h"

void reject(struct reply *r, __u8 cause, __u16 offending)
{
	r->cause = cause;
	r->offending = offending;
}

void reject_rule(struct reply *r, __u8 cause, __u8 type, __u32 id)
{
	r->cause = cause;
	r->has_failed_rule = true;
	r->rule_type = type;
	r->rule_id = id;
}

void w_cause(struct pfcp_w *w, const struct reply *r)
{
	pfcp_w_u8(w, PFCP_IE_CAUSE, r->cause);
	if (r->offending)
		pfcp_w_u16(w, PFCP_IE_OFFENDING_IE, r->offending);
	if (r->has_failed_rule) {
		__u8 b[5] = { r->rule_type };
		size_t n = 5;

		if (r->rule_type == PFCP_RULE_PDR) {
			b[1] = r->rule_id >> 8;
			b[2] = r->rule_id;
			n = 3;
		} else {
			__u32 v = htonl(r->rule_id);

			memcpy(b + 1, &v, 4);
		}
		pfcp_w_ie(w, PFCP_IE_FAILED_RULE_ID, b, n);
	}
}

void w_rts(struct pfcp_agent *a, struct pfcp_w *w)
{
	pfcp_w_u32(w, PFCP_IE_RECOVERY_TIME_STAMP, a->rts);
}

/*
 * A session's final usage reports (TS 29.244 7.5.7.2): one per URR, each with its URR ID, UR-SEQN,
 * the termination trigger, and what it measured: a Volume Measurement (VOLUM: octets and packets
 * of the directions of the PDRs that count in it, and their sum) and a Duration Measurement
 * (DURAT: seconds since the session was established). Octets are inner IPv4 packets' lengths.
 */
void w_usage_reports(struct pfcp_w *w, struct sess *s, const struct bearer *b,
		     __u32 duration_s)
{
	__u8 trig[3] = { 0, 0x08, 0 };	/* TERMR: termination report */

	if (!s->r)
		return;
	for (int u = 0; u < s->r->n_urr; u++) {
		struct pgwu_urr *urr = &s->r->urr[u];
		bool ul = false, dl = false;
		size_t g;

		for (int d = 0; d < 2; d++)
			for (int i = 0; i < s->r->pdr[d].n_urr; i++)
				if (s->r->pdr[d].urr[i] == urr->id)
					*(d == PGWU_PFCP_UPLINK ? &ul : &dl) = true;
		g = pfcp_w_group_begin(w, PFCP_IE_USAGE_REPORT_SDR);
		pfcp_w_u32(w, PFCP_IE_URR_ID, urr->id);
		pfcp_w_u32(w, PFCP_IE_UR_SEQN, urr->ur_seqn++);
		pfcp_w_ie(w, PFCP_IE_USAGE_REPORT_TRIGGER, trig, sizeof(trig));
		if (urr->method & PFCP_MM_VOLUM) {
			__u64 ulb = ul ? b->ul_bytes : 0, dlb = dl ? b->dl_bytes : 0;
			__u64 ulp = ul ? b->ul_packets : 0, dlp = dl ? b->dl_packets : 0;
			__u64 v[6] = { ulb + dlb, ulb, dlb, ulp + dlp, ulp, dlp };
			__u8 vol[1 + 6 * 8];

			vol[0] = 0x3f;	/* TOVOL ULVOL DLVOL TONOP ULNOP DLNOP */
			for (int i = 0; i < 6; i++)
				for (int k = 0; k < 8; k++)
					vol[1 + i * 8 + k] = v[i] >> (56 - 8 * k);
			pfcp_w_ie(w, PFCP_IE_VOLUME_MEASUREMENT, vol, sizeof(vol));
		}
		if (urr->method & PFCP_MM_DURAT)
			pfcp_w_u32(w, PFCP_IE_DURATION_MEASUREMENT, duration_s);
		pfcp_w_group_end(w, g);
	}
}
