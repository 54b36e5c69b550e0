/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The checks of an incoming GTP-U message (TS 29.281) that xdp_access applies to a frame and
 * `pgwu reassemble` (pgwu_reasm.c) to a datagram the kernel reassembled: one copy, plain C, built
 * for both sides. Each returns 0 or the enum pgwu_reason of the first check that fails.
 *
 * Two ends: `end` is where the IP datagram ends (a header running past it is truncated or has a
 * bad length), `bound` is what every load is checked against for the verifier (the frame's
 * data_end, which may lie after `end`: Ethernet padding). In user space both are the buffer's end.
 */
#ifndef PGWU_GTPU_H
#define PGWU_GTPU_H

#include <linux/ip.h>
#include "compat.h"
#include "consts.h"
#include "csum.h"
#include "parsing.h"
#include "pgwu.h"

struct gtpu_msg {
	struct gtpu_hdr *gtp;
	void *p;		/* after the header and its optional fields; after gtpu_ext_walk the
				 * message's body (the T-PDU of a G-PDU, the IEs of signalling) */
	__be16 seq;		/* the sequence number when S is set, else 0 */
	__u8 next_ext;		/* the first extension header type when E is set, else 0 */
	__u8 bad_ext;		/* the unknown comprehension-required type that stopped the walk */
	__u32 psc;		/* 0x100 | QFI of an UL PDU Session Container, 0x200 another PSC, 0 */
};

/* TS 29.281 5.2.1, Figure 5.2.1-3: the extension header types this PGW-U knows (it walks past
 * them: none changes what it does with the T-PDU). */
static __always_inline int ext_known(__u8 t)
{
	switch (t) {
	case 0x03:	/* Long PDCP PDU Number */
	case 0x20:	/* Service Class Indicator */
	case 0x40:	/* UDP Port */
	case 0x81:	/* RAN Container */
	case 0x82:	/* Long PDCP PDU Number */
	case 0x83:	/* Xw RAN Container */
	case 0x84:	/* NR RAN Container */
	case 0x85:	/* PDU Session Container */
	case 0xc0:	/* PDCP PDU Number */
		return 1;
	}
	return 0;
}

/* TS 29.281 5.1: the header at pos (a UDP payload of udp_len - 8 octets) and its optional fields:
 * version 1, PT 1, the length covering exactly the rest of the datagram. */
static __always_inline __u32 gtpu_hdr_check(void *pos, void *end, void *bound, __u32 udp_len,
					    struct gtpu_msg *m)
{
	struct gtpu_hdr *g = pos;
	__u32 gtp_len;

	m->seq = 0;
	m->next_ext = 0;
	m->bad_ext = 0;
	m->psc = 0;
	if ((void *)(g + 1) > end || (void *)(g + 1) > bound)
		return PGWU_R_DROP_TRUNC_GTP;
	m->gtp = g;
	m->p = g + 1;
	if (GTP_FLAGS_VERSION(g->flags) != 1 || !(g->flags & GTP_FLAG_PT))
		return PGWU_R_DROP_GTP_VERSION;
	gtp_len = bpf_ntohs(g->length);
	if (gtp_len != udp_len - sizeof(struct udphdr) - sizeof(*g))
		return PGWU_R_DROP_GTP_BAD_LEN;
	if (g->flags & GTP_FLAGS_OPT) {
		struct gtpu_opt *opt = (void *)(g + 1);

		/* the frame ends inside the optional fields: truncated; they are in the frame
		 * but the GTP length doesn't cover them: a length error */
		if ((void *)(opt + 1) > bound)
			return PGWU_R_DROP_TRUNC_GTP;
		if (gtp_len < sizeof(*opt))
			return PGWU_R_DROP_GTP_BAD_LEN;
		m->p = opt + 1;
		if (g->flags & GTP_FLAG_S)
			m->seq = opt->seq;
		if (g->flags & GTP_FLAG_E)
			m->next_ext = opt->next_ext;
	}
	return 0;
}

/*
 * TS 29.281 5.2: each extension header is a length octet (in 4-octet units), content, and the next
 * type in its last octet; type 0 ends the chain. A type we don't know whose high bit says the
 * endpoint must comprehend it (5.2.1) stops the walk: PGWU_R_DROP_GTP_EXT_UNSUPPORTED, the type in
 * m->bad_ext. On 0, m->p is the message's body and m->psc says what PDU Session Container it had.
 */
static __always_inline __u32 gtpu_ext_walk(struct gtpu_msg *m, void *end, void *bound)
{
	__u8 next_ext = m->next_ext;
	void *p = m->p;
	int i;

	for (i = 0; i < PGWU_MAX_EXT_HDRS; i++) {
		__u8 *lp = p, *last;
		__u32 ext_len;

		if (!next_ext)
			break;
		if ((next_ext & GTP_EXT_COMPREHENSION_REQUIRED) && !ext_known(next_ext)) {
			m->bad_ext = next_ext;
			return PGWU_R_DROP_GTP_EXT_UNSUPPORTED;
		}
		if ((void *)(lp + 1) > end || (void *)(lp + 1) > bound)
			return PGWU_R_DROP_GTP_BAD_EXT;
		ext_len = *lp * 4;
		if (!ext_len || p + ext_len > end)
			return PGWU_R_DROP_GTP_BAD_EXT;
		/* TS 38.415 5.5.2.2: PDU type in the high nibble of octet 2, QFI in octet 3 */
		if (next_ext == GTP_EXT_PDU_SESSION_CONTAINER && (void *)(lp + 3) <= bound)
			m->psc = (lp[1] >> 4) == 1 ? 0x100 | (lp[2] & 0x3f) : 0x200;
		last = p + (ext_len - 1);
		if ((void *)(last + 1) > bound)
			return PGWU_R_DROP_GTP_BAD_EXT;
		next_ext = *last;
		p = last + 1;
	}
	if (next_ext)
		return PGWU_R_DROP_GTP_BAD_EXT;
	m->p = p;
	return 0;
}

/* TS 38.415: a bearer with a QFI takes only G-PDUs with an UL PDU Session Container carrying it. */
static __always_inline __u32 gpdu_qfi_check(__u32 bearer_flags, __u32 psc)
{
	if ((bearer_flags & PGWU_B_QFI) &&
	    psc != (0x100 | ((bearer_flags >> PGWU_B_QFI_SHIFT) & 0x3f)))
		return PGWU_R_DROP_QFI_MISMATCH;
	return 0;
}

/*
 * The T-PDU of an uplink G-PDU at p (up to end) for the bearer of UE ue: an IPv4 packet whose
 * header fits, whose total length is exactly the T-PDU, whose header checksum is right (RFC 1812
 * 5.2.2, unless check_csum is 0), from the bearer's UE (anti-spoofing), with a TTL it can still be
 * forwarded with. *iip is the inner header once it is known to be IPv4 with 20 octets.
 */
static __always_inline __u32 gpdu_inner_check(void *p, void *end, void *bound, int check_csum,
					      __be32 ue, struct iphdr **out)
{
	struct iphdr *iip = p;
	__u32 iihl_len;

	if (p >= end || p + 1 > bound || (*(__u8 *)p >> 4) != 4)
		return PGWU_R_DROP_INNER_NOT_IPV4;
	if ((void *)(iip + 1) > end || (void *)(iip + 1) > bound || iip->ihl < 5)
		return PGWU_R_DROP_INNER_BAD;
	*out = iip;
	iihl_len = iip->ihl * 4;
	if (p + iihl_len > end || bpf_ntohs(iip->tot_len) != (__u32)(end - p))
		return PGWU_R_DROP_INNER_BAD;
	if (check_csum && csum_fold16(ipv4_hdr_sum(iip, iip->ihl, bound)) != 0xffff)
		return PGWU_R_DROP_INNER_CSUM;
	if (iip->saddr != ue)
		return PGWU_R_DROP_SPOOFED;
	if (iip->ttl <= 1)
		return PGWU_R_DROP_TTL_EXPIRED;
	return 0;
}

#endif /* PGWU_GTPU_H */
