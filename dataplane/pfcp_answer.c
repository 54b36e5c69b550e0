// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pfcp_answer.c: the parts of `pgwu pfcp`'s answers that more than one procedure writes: a
 * rejection (Cause, Offending IE, Failed Rule ID), our Recovery Time Stamp (usage reports:
 * pfcp_usage.c).
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
