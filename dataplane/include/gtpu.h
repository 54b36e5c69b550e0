/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The checks of an incoming GTP-U message (TS 29.281) that xdp_access applies to a frame, and
 * `pgwu reassemble` (pgwu_reasm.c) and the socket path (`pgwu socket`, pgwu_sock.c) to a datagram
 * the kernel delivered; and the downlink encapsulation xdp_sgi and the socket path both write: one
 * copy, plain C, built for both sides. Each check returns 0 or the enum pgwu_reason of the first
 * check that fails.
 *
 * Two ends: `end` is where the IP datagram ends (a header running past it is truncated or has a
 * bad length), `bound` is what every load is checked against for the verifier (the frame's
 * data_end, which may lie after `end`: Ethernet padding). In user space both are the buffer's end.
 */
#ifndef PGWU_GTPU_H
#define PGWU_GTPU_H

#include <linux/ip.h>
#ifdef __bpf__
#include <linux/in.h>
#else
#include <netinet/in.h>
#endif
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

/* TS 29.281 5.2.1, Figure 5.2.1-3: the extension header types this PGW-U comprehends, the one list.
 * Both paths walk past them (none changes what they do with the T-PDU) and list them, in this order,
 * in the Supported Extension Headers Notification (7.2.3; Extension Header Type List, 8.5) they send
 * for any other type that must be comprehended. gtplab's oracle (gtplab/conformance/oracle.py,
 * KNOWN_EXT_TYPES) is checked against it by tests/dataplane/test_ext_list.py. */
#define GTPU_EXT_KNOWN(X)				\
	X(0x03, "Long PDCP PDU Number")			\
	X(0x20, "Service Class Indicator")		\
	X(0x40, "UDP Port")				\
	X(0x81, "RAN Container")			\
	X(0x82, "Long PDCP PDU Number")			\
	X(0x83, "Xw RAN Container")			\
	X(0x84, "NR RAN Container")			\
	X(0x85, "PDU Session Container")		\
	X(0xc0, "PDCP PDU Number")

#define GTPU_EXT_ONE_(type, name) + 1
#define GTPU_EXT_CASE_(type, name) case type:
#define GTPU_EXT_PUT_(type, name) *q++ = type;

/* the Extension Header Type List IE: type, length, one octet per type */
enum { GTPU_EXT_KNOWN_N = 0 GTPU_EXT_KNOWN(GTPU_EXT_ONE_), GTPU_EXT_LIST_IE_LEN = 2 + GTPU_EXT_KNOWN_N };

static __always_inline int ext_known(__u8 t)
{
	switch (t) {
	GTPU_EXT_KNOWN(GTPU_EXT_CASE_)
		return 1;
	}
	return 0;
}

/* Writes the Extension Header Type List IE (GTPU_EXT_LIST_IE_LEN octets) at ie. */
static __always_inline void gtpu_ext_list_ie(__u8 *ie)
{
	__u8 *q = ie + 2;

	ie[0] = GTP_IE_EXT_HDR_LIST;
	ie[1] = GTPU_EXT_KNOWN_N;
	GTPU_EXT_KNOWN(GTPU_EXT_PUT_)
}

/* TS 29.281 7.1: the message types this PGW-U takes past the header check, the one list; any other
 * is PGWU_R_DROP_GTP_UNKNOWN_MSG. With each, the reason both paths count a consumed signalling
 * message under (0: not consumed there: an Echo Request is answered, a G-PDU forwarded). */
#define GTPU_MSG_KNOWN(X)						\
	X(GTP_ECHO_REQ, 0)						\
	X(GTP_ECHO_RSP, PGWU_R_SIG_ECHO_RESPONSE)			\
	X(GTP_ERROR_IND, PGWU_R_SIG_ERROR_IND)				\
	X(GTP_SUPP_EXT_NOTIF, PGWU_R_SIG_SUPP_EXT_NOTIF)		\
	X(GTP_END_MARKER, PGWU_R_SIG_END_MARKER)			\
	X(GTP_GPDU, 0)

#define GTPU_MSG_CASE_(type, reason) case type:
#define GTPU_MSG_SIG_(type, reason) case type: return reason;

static __always_inline int gtpu_msg_handled(__u8 type)
{
	switch (type) {
	GTPU_MSG_KNOWN(GTPU_MSG_CASE_)
		return 1;
	}
	return 0;
}

/* The reason a signalling message of this type is counted under once consumed; 0 for the types
 * that are not consumed (Echo Request, G-PDU) and for unknown ones. */
static __always_inline __u32 gtpu_sig_reason(__u8 type)
{
	switch (type) {
	GTPU_MSG_KNOWN(GTPU_MSG_SIG_)
	}
	return 0;
}

/* TS 29.281 7.3.1: an Error Indication's IEs at p: TEID Data I (TV, 4 octets), then GTP-U Peer
 * Address (TLV). Returns 0 without TEID Data I; else 1 with *teid and *addr, the Peer Address when
 * it is an IPv4 one, else the sender's (peer). Every load is checked against end and bound. */
static __always_inline int gtpu_err_ind_ies(const __u8 *p, const void *end, const void *bound,
					    __be32 peer, __be32 *teid, __be32 *addr)
{
	if ((const void *)(p + 5) > end || (const void *)(p + 5) > bound || p[0] != GTP_IE_TEID_DATA_I)
		return 0;
	__builtin_memcpy(teid, p + 1, 4);
	*addr = peer;
	if ((const void *)(p + 12) <= end && (const void *)(p + 12) <= bound &&
	    p[5] == GTP_IE_PEER_ADDR && p[6] == 0 && p[7] == 4)
		__builtin_memcpy(addr, p + 8, 4);
	return 1;
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
	if (iip->saddr != ue || !ue)	/* ue 0: an IPv6-only bearer takes no IPv4 */
		return PGWU_R_DROP_SPOOFED;
	if (iip->ttl <= 1)
		return PGWU_R_DROP_TTL_EXPIRED;
	return 0;
}

/*
 * Downlink encapsulation (TS 29.281 5.1, 4.4.2.0; TS 38.415 5.5.2.1), as xdp_sgi and the socket
 * path write it: outer IPv4 local -> SGW (tos copied, DF copied with id 0, TTL OUTER_TTL), UDP from
 * the inner flow's port to 2152 (checksum filled by gtpu_encap_csum, or 0), a G-PDU header with the
 * SGW's TEID, and for a bearer with a QFI the optional fields and a DL PDU Session Container.
 */
struct gtpu_encap {
	__be32 saddr;		/* this gateway's GTP-U address */
	__be32 daddr;		/* the bearer's SGW */
	__be32 teid;		/* the bearer's SGW TEID */
	__be16 sport;		/* gtpu_dl_sport */
	__be16 id;		/* outer IP id: 0 with DF */
	__u16 inner_len;	/* the inner IPv4 packet's total length */
	__u8 tos;		/* copied from the inner packet */
	__u8 df;		/* the inner packet's DF, copied */
	__u8 qfi;		/* gtpu_dl_qfi: 0xff for none */
};

/* The QFI a downlink G-PDU of a bearer carries (its flags), or 0xff for none. */
static __always_inline __u8 gtpu_dl_qfi(__u32 bearer_flags)
{
	return bearer_flags & PGWU_B_QFI ? (bearer_flags >> PGWU_B_QFI_SHIFT) & 0x3f : 0xff;
}

/* What encapsulation prepends: 36 octets, 44 with a PDU Session Container. */
static __always_inline __u32 gtpu_encap_len(__u8 qfi)
{
	return GTPU_ENCAP_LEN + (qfi != 0xff ? 8 : 0);
}

/* Whether a bearer's downlink G-PDUs get an outer UDP checksum: its own setting, else the global. */
static __always_inline __u32 gtpu_dl_csum_on(__u32 bearer_flags, __u32 cfg_flags)
{
	if (bearer_flags & PGWU_B_CSUM_ON)
		return 1;
	if (bearer_flags & PGWU_B_CSUM_OFF)
		return 0;
	return cfg_flags & PGWU_CFG_CSUM;
}

/*
 * The outer UDP source port of a downlink G-PDU of inner packet ip (tot_len octets, ihl_len of
 * header): 2152 with PGWU_CFG_SPORT_FIXED, else pgwu_sport_of() of its flow (the ports of an
 * unfragmented TCP or UDP packet whose first 4 octets of L4 header are there, else 0).
 */
static __always_inline __be16 gtpu_dl_sport(const struct iphdr *ip, __u32 ihl_len, __u32 tot_len,
					    const void *bound, __u32 cfg_flags)
{
	const __u32 *ports = (const void *)ip + (ihl_len & 0x3c);
	__u32 l4 = 0;

	if (cfg_flags & PGWU_CFG_SPORT_FIXED)
		return GTPU_PORT_BE;
	if ((ip->protocol == IPPROTO_TCP || ip->protocol == IPPROTO_UDP) && !ipv4_is_fragment(ip) &&
	    tot_len >= ihl_len + 4 && (const void *)(ports + 1) <= bound)
		l4 = *ports;
	return bpf_htons(pgwu_sport_of(ip->saddr, ip->daddr, l4, ip->protocol));
}

/*
 * The start of the outer UDP checksum's sum over the inner IPv4 packet iip (ihl_len of header,
 * tot octets): its header, and the payload's sum from its own checksum where that can be trusted
 * (local checksum offload, the kernel's Documentation/networking/checksum-offloads.rst): a valid
 * TCP/UDP checksum makes the segment sum the negated pseudo-header sum, a valid ICMP checksum makes
 * it zero. Returns 0 with the whole sum in *sum, or 1 when the caller must add the sum of the
 * tot - ihl_len octets after the header (UDP checksum 0, fragments, other protocols).
 */
static __always_inline int gtpu_inner_sum(const struct iphdr *iip, __u32 ihl_len, __u32 tot,
					  const void *bound, __u64 *sum)
{
	const void *l4 = (const void *)iip + ihl_len;
	__u32 l4_len = tot - ihl_len;
	__u64 pseudo;

	*sum = ipv4_hdr_sum(iip, ihl_len / 4, bound);
	if (ipv4_is_fragment(iip))
		return 1;
	pseudo = (__u64)iip->saddr + iip->daddr + bpf_htons(iip->protocol) + bpf_htons((__u16)l4_len);
	switch (iip->protocol) {
	case IPPROTO_TCP:
		if (l4_len >= 20) {
			*sum += csum_neg(pseudo);
			return 0;
		}
		break;
	case IPPROTO_UDP: {
		const struct udphdr *u = l4;

		if (l4_len >= sizeof(*u) && (const void *)(u + 1) <= bound && u->check) {
			*sum += csum_neg(pseudo);
			return 0;
		}
		break;
	}
	case IPPROTO_ICMP:
		if (l4_len >= 8)
			return 0;
		break;
	}
	return 1;
}

/*
 * Write the outer headers at oip: IPv4 (20, its checksum), UDP (checksum 0), GTP-U (8) and, with a
 * QFI, the optional fields and the PDU Session Container (8). Returns the octets written
 * (gtpu_encap_len), or 0 when they do not fit before bound (only if the caller's checks were wrong).
 */
static __always_inline __u32 gtpu_encap_write(struct iphdr *oip, const void *bound,
					      const struct gtpu_encap *e)
{
	struct udphdr *udp = (void *)(oip + 1);
	struct gtpu_hdr *gtp = (void *)(udp + 1);
	__u32 encap = gtpu_encap_len(e->qfi);

	if ((void *)(gtp + 1) > bound)
		return 0;
	oip->version = 4;
	oip->ihl = 5;
	oip->tos = e->tos;
	oip->tot_len = bpf_htons(e->inner_len + encap);
	oip->id = e->df ? 0 : e->id;
	oip->frag_off = e->df ? bpf_htons(0x4000) : 0;
	oip->ttl = OUTER_TTL;
	oip->protocol = IPPROTO_UDP;
	oip->check = 0;
	oip->saddr = e->saddr;
	oip->daddr = e->daddr;
	oip->check = csum_finish(ipv4_hdr_sum(oip, 5, bound));

	udp->source = e->sport;
	udp->dest = GTPU_PORT_BE;
	udp->len = bpf_htons(e->inner_len + encap - sizeof(*oip));
	udp->check = 0;
	gtp->flags = 0x30;
	gtp->type = GTP_GPDU;
	gtp->length = bpf_htons(e->inner_len + encap - GTPU_ENCAP_LEN);
	gtp->teid = e->teid;
	if (e->qfi != 0xff) {
		__u8 *x = (void *)(gtp + 1);

		if ((void *)(x + 8) > bound)
			return 0;
		gtp->flags = 0x30 | GTP_FLAG_E;
		x[0] = 0;		/* sequence number, N-PDU number: not used */
		x[1] = 0;
		x[2] = 0;
		x[3] = GTP_EXT_PDU_SESSION_CONTAINER;
		x[4] = 1;		/* length: 4 octets */
		x[5] = 0;		/* PDU type 0 (DL PDU SESSION INFORMATION), no QMP/SNP/MSNP */
		x[6] = e->qfi;		/* PPP 0, RQI 0, QFI */
		x[7] = 0;		/* no next extension header */
	}
	return encap;
}

/*
 * The outer UDP checksum of headers gtpu_encap_write wrote at oip, isum the inner packet's sum
 * (gtpu_inner_sum, plus its payload's when that returned 1). Returns 0 when the headers are not
 * within bound (only if the caller's checks were wrong), else writes it and returns 1.
 */
static __always_inline int gtpu_encap_csum(struct iphdr *oip, const void *bound, __u8 qfi, __u64 isum)
{
	struct udphdr *udp = (void *)(oip + 1);
	const csum_word *w = (void *)udp;
	__u64 sum;

	if ((void *)(w + 6) > bound)
		return 0;
	/* pseudo header + UDP header (check 0) + GTP-U header [+ PSC] + inner packet */
	sum = (__u64)oip->saddr + oip->daddr + bpf_htons(IPPROTO_UDP) + udp->len;
	sum += (__u64)w[0] + w[1] + w[2] + w[3] + isum;
	if (qfi != 0xff)
		sum += (__u64)w[4] + w[5];
	udp->check = csum_finish_udp(sum);
	return 1;
}

#endif /* PGWU_GTPU_H */
