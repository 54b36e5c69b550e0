// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pfcp_fuzz.c: libFuzzer target for the PFCP decoder (../pfcp_msg.c), built with
 * clang -fsanitize=fuzzer,address (make -C dataplane fuzz). Per input: pfcp_decode() on the bytes,
 * a generic walk of every IE down to PFCP_MAX_DEPTH (as a grouped IE, whatever its type), and the
 * encoder fed with what was decoded (Node ID, F-SEID, F-TEID), its output decoded again; and the
 * SDF Filter's Flow Description classifier (pfcp_flow_desc_kind) on the raw input as text. ASan
 * turns any read past the input into a crash; the checks below turn a broken contract into one.
 * Seed corpus: fuzz/corpus/pfcp/ from pfcp_seeds.py (Scapy, the messages the tests use).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "pfcp_msg.h"

static size_t walk(const struct pfcp_cur *c0)
{
	struct pfcp_cur c = *c0, child;
	struct pfcp_ie ie;
	size_t n = 0;
	int r;

	while ((r = pfcp_ie_next(&c, &ie)) > 0) {
		if (ie.v < c0->p || ie.v + ie.len > c0->end)
			abort();	/* an IE outside its parent */
		n++;
		if (!pfcp_ie_enter(&c, &ie, &child)) {
			if (child.depth >= PFCP_MAX_DEPTH)
				abort();
			n += walk(&child);
		}
	}
	if (r == 0 && c.p != c.end)
		abort();
	return n;
}

static struct pfcp_msg m, m2;

int LLVMFuzzerTestOneInput(const __u8 *data, size_t size)
{
	__u8 out[2048];
	struct pfcp_w w;
	struct pfcp_cur c;
	int err, len;

	{
		__u32 host = 0;
		enum pfcp_sdf_kind k = pfcp_flow_desc_kind(data, size, &host);

		if (k != PFCP_SDF_ALL && k != PFCP_SDF_HOST && k != PFCP_SDF_NARROW)
			abort();
		if (k != PFCP_SDF_HOST && host)
			abort();	/* a host only comes with a host filter */
	}
	err = pfcp_decode(data, size, &m);
	if (err == -EBADMSG || err == -EPROTONOSUPPORT)
		return 0;
	if (m.h.msg_len > size || m.h.hdr_len > m.h.msg_len)
		abort();
	pfcp_cur_init(&c, data + m.h.hdr_len, m.h.msg_len - m.h.hdr_len);
	walk(&c);
	if (err)
		return 0;
	if (m.n_create_pdr > PFCP_MAX_RULES || m.n_create_far > PFCP_MAX_RULES ||
	    m.n_update_far > PFCP_MAX_RULES || m.n_create_urr > PFCP_MAX_RULES ||
	    m.n_create_qer > PFCP_MAX_RULES || m.n_update_qer > PFCP_MAX_RULES ||
	    m.n_update_urr > PFCP_MAX_RULES)
		abort();
	for (int i = 0; i < m.n_create_pdr; i++) {
		const struct pfcp_pdr *p = &m.create_pdr[i];

		if (p->n_sdf_host > PFCP_MAX_IDS || p->n_sdf_host > p->n_sdf || p->n_urr > PFCP_MAX_IDS ||
		    p->n_qer > PFCP_MAX_IDS || (p->n_fteid > 0) != p->has_fteid)
			abort();
	}
	for (int i = 0; i < m.n_update_urr; i++)
		if (m.update_urr[i].present & m.update_urr[i].cleared)
			abort();	/* a parameter is given or removed, not both */
	if (m.cause == PFCP_CAUSE_ACCEPTED && m.offending_ie)
		abort();
	/* round trip what was decoded through the encoder */
	pfcp_w_init(&w, out, sizeof(out));
	pfcp_w_hdr(&w, PFCP_SESS_EST_RESP, true, m.fseid.seid, m.h.seq);
	if ((m.present & PFCP_P_NODE_ID) && m.cause == PFCP_CAUSE_ACCEPTED &&
	    m.node_id.type != PFCP_NODE_IPV6)
		pfcp_w_node_id(&w, &m.node_id);
	pfcp_w_u8(&w, PFCP_IE_CAUSE, m.cause);
	pfcp_w_fseid(&w, m.fseid.seid, m.fseid.ipv4);
	for (int i = 0; i < m.n_create_pdr; i++) {
		size_t g = pfcp_w_group_begin(&w, PFCP_IE_CREATED_PDR);

		pfcp_w_u16(&w, PFCP_IE_PDR_ID, m.create_pdr[i].id);
		pfcp_w_fteid(&w, m.create_pdr[i].fteid.teid, m.create_pdr[i].fteid.ipv4);
		pfcp_w_group_end(&w, g);
	}
	len = pfcp_w_finish(&w);
	if (len < 0)
		return 0;
	if (pfcp_decode(out, len, &m2) || m2.h.seq != m.h.seq || m2.h.seid != m.fseid.seid)
		abort();
	if ((m.present & PFCP_P_NODE_ID) && m.cause == PFCP_CAUSE_ACCEPTED &&
	    m.node_id.type == PFCP_NODE_FQDN && strcmp(m2.node_id.fqdn, m.node_id.fqdn))
		abort();
	return 0;
}
