// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pfcp_msg.c: the bounded PFCP decoder and encoder (contract in pfcp_msg.h). Every read goes
 * through a length that was checked against the run it lies in: the message body for top-level
 * IEs, the parent's value for grouped ones. A rejection records the first error only (cause and
 * offending IE); decoding continues so the counters of skipped IEs stay meaningful, but nothing
 * after a rejection is used.
 */
#include <errno.h>
#include <string.h>
#include "pfcp_msg.h"

static __u16 rd16(const __u8 *p)
{
	return (__u16)p[0] << 8 | p[1];
}

static __u32 rd32(const __u8 *p)
{
	return (__u32)p[0] << 24 | (__u32)p[1] << 16 | (__u32)p[2] << 8 | p[3];
}

static __u64 rd40(const __u8 *p)
{
	return (__u64)p[0] << 32 | rd32(p + 1);
}

static __u64 rd64(const __u8 *p)
{
	return (__u64)rd32(p) << 32 | rd32(p + 4);
}

/* network-order copy of 4 octets (TEIDs, IPv4 addresses) */
static __u32 rdn32(const __u8 *p)
{
	__u32 v;

	memcpy(&v, p, 4);
	return v;
}

/* ---- cursor ---- */

void pfcp_cur_init(struct pfcp_cur *c, const __u8 *p, size_t len)
{
	c->p = p;
	c->end = p + len;
	c->depth = 0;
}

int pfcp_ie_next(struct pfcp_cur *c, struct pfcp_ie *ie)
{
	size_t left = c->end - c->p;
	__u16 len;

	memset(ie, 0, sizeof(*ie));
	if (!left)
		return 0;
	if (left < 4) {
		if (left >= 2)
			ie->type = rd16(c->p);
		return -EBADMSG;
	}
	ie->type = rd16(c->p);
	len = rd16(c->p + 2);
#ifndef PFCP_FUZZ_SELFTEST_BUG
	if (len > left - 4)
		return -EBADMSG;
#else
	/* only in the fuzzer's self-test build (tests/test_pfcp_fuzz.py): the check is gone */
	(void)left;
#endif
	ie->v = c->p + 4;
	ie->len = len;
	if (ie->type & 0x8000) {
		if (len < 2)
			return -EBADMSG;
		ie->enterprise = rd16(ie->v);
		ie->v += 2;
		ie->len -= 2;
	}
	c->p += 4 + (size_t)len;
	return 1;
}

int pfcp_ie_enter(const struct pfcp_cur *parent, const struct pfcp_ie *ie, struct pfcp_cur *child)
{
	if (parent->depth + 1 >= PFCP_MAX_DEPTH)
		return -ELOOP;
	child->p = ie->v;
	child->end = ie->v + ie->len;
	child->depth = parent->depth + 1;
	return 0;
}

/* ---- header ---- */

static bool is_session_msg(__u8 type)
{
	return type >= 50 && type <= 99;
}

int pfcp_hdr_parse(const __u8 *b, size_t n, struct pfcp_hdr *h)
{
	memset(h, 0, sizeof(*h));
	if (n < 8)
		return -EBADMSG;
	h->version = b[0] >> 5;
	h->flags = b[0] & 0x07;
	h->has_seid = b[0] & 0x01;
	h->type = b[1];
	h->length = rd16(b + 2);
	h->msg_len = 4 + (size_t)h->length;
	h->hdr_len = h->has_seid ? 16 : 8;
	/* the sequence number is read first: a Version Not Supported Response echoes it */
	if (h->has_seid) {
		if (n < 16)
			return -EBADMSG;
		h->seid = rd64(b + 4);
		h->seq = rd32(b + 11) & 0xffffff;
	} else {
		h->seq = rd32(b + 3) & 0xffffff;
	}
	if (h->version != PFCP_VERSION)
		return -EPROTONOSUPPORT;
	if (h->msg_len > n || h->msg_len < h->hdr_len)
		return -EBADMSG;
	if (h->has_seid != is_session_msg(h->type))
		return -EBADMSG;
	return 0;
}

/* ---- IE values ---- */

static void fail(struct pfcp_msg *m, __u8 cause, __u16 ie)
{
	if (m->cause != PFCP_CAUSE_ACCEPTED)
		return;
	m->cause = cause;
	m->offending_ie = ie;
}

static int dec_node_id(const struct pfcp_ie *ie, struct pfcp_node_id *id)
{
	size_t i, o = 0;

	memset(id, 0, sizeof(*id));
	if (ie->len < 1)
		return -EINVAL;
	id->type = ie->v[0] & 0x0f;
	switch (id->type) {
	case PFCP_NODE_IPV4:
		if (ie->len < 5)
			return -EINVAL;
		id->ipv4 = rdn32(ie->v + 1);
		return 0;
	case PFCP_NODE_IPV6:
		if (ie->len < 17)
			return -EINVAL;
		memcpy(id->ipv6, ie->v + 1, 16);
		return 0;
	case PFCP_NODE_FQDN:
		/* DNS labels (RFC 1035 3.1), as TS 29.244 8.2.38 says; a root label may end it */
		for (i = 1; i < ie->len;) {
			__u8 l = ie->v[i++];

			if (!l)
				break;
			if (l > 63 || l > ie->len - i || o + l + 1 > PFCP_FQDN_MAX)
				return -EINVAL;
			if (o)
				id->fqdn[o++] = '.';
			for (__u8 k = 0; k < l; k++) {
				__u8 ch = ie->v[i + k];

				if (ch <= ' ' || ch >= 0x7f || ch == '.')
					return -EINVAL;
				id->fqdn[o++] = ch;
			}
			i += l;
		}
		id->fqdn[o] = '\0';
		return o ? 0 : -EINVAL;
	default:
		return -EINVAL;
	}
}

static int dec_fseid(const struct pfcp_ie *ie, struct pfcp_fseid *f)
{
	size_t need = 9;

	memset(f, 0, sizeof(*f));
	if (ie->len < need)
		return -EINVAL;
	f->v6 = ie->v[0] & 0x01;
	f->v4 = ie->v[0] & 0x02;
	f->seid = rd64(ie->v + 1);
	need += (f->v4 ? 4 : 0) + (f->v6 ? 16 : 0);
	if (ie->len < need || (!f->v4 && !f->v6))
		return -EINVAL;
	if (f->v4)
		f->ipv4 = rdn32(ie->v + 9);
	if (f->v6)
		memcpy(f->ipv6, ie->v + 9 + (f->v4 ? 4 : 0), 16);
	return 0;
}

static int dec_fteid(const struct pfcp_ie *ie, struct pfcp_fteid *f)
{
	size_t need;

	memset(f, 0, sizeof(*f));
	if (ie->len < 1)
		return -EINVAL;
	f->v4 = ie->v[0] & 0x01;
	f->v6 = ie->v[0] & 0x02;
	f->ch = ie->v[0] & 0x04;
	f->chid = ie->v[0] & 0x08;
	if (f->ch) {
		if (f->chid) {
			if (ie->len < 2)
				return -EINVAL;
			f->choose_id = ie->v[1];
		}
		return f->v4 || f->v6 ? 0 : -EINVAL;
	}
	if (f->chid || (!f->v4 && !f->v6))
		return -EINVAL;
	need = 5 + (f->v4 ? 4 : 0) + (f->v6 ? 16 : 0);
	if (ie->len < need)
		return -EINVAL;
	f->teid = rdn32(ie->v + 1);
	if (f->v4)
		f->ipv4 = rdn32(ie->v + 5);
	if (f->v6)
		memcpy(f->ipv6, ie->v + 5 + (f->v4 ? 4 : 0), 16);
	return 0;
}

static int dec_ue_ip(const struct pfcp_ie *ie, struct pfcp_ue_ip *u)
{
	size_t off = 1;

	memset(u, 0, sizeof(*u));
	if (ie->len < 1)
		return -EINVAL;
	u->v6 = ie->v[0] & 0x01;
	u->v4 = ie->v[0] & 0x02;
	u->sd = ie->v[0] & 0x04;
	u->chv4 = ie->v[0] & 0x10;
	u->chv6 = ie->v[0] & 0x20;
	u->ipv6d = ie->v[0] & 0x08;
	u->ipv6pl = ie->v[0] & 0x40;
	if (u->v4 && !u->chv4) {
		if (ie->len < off + 4)
			return -EINVAL;
		u->ipv4 = rdn32(ie->v + off);
		off += 4;
	}
	if (u->v6 && !u->chv6) {
		if (ie->len < off + 16)
			return -EINVAL;
		memcpy(u->ipv6, ie->v + off, 16);
		off += 16;
	}
	if (u->ipv6d) {
		if (ie->len < off + 1)
			return -EINVAL;
		u->pd_bits = ie->v[off++];
	}
	if (u->ipv6pl) {
		if (ie->len < off + 1)
			return -EINVAL;
		u->plen = ie->v[off++];
	}
	return 0;
}

static int dec_ohc(const struct pfcp_ie *ie, struct pfcp_ohc *o)
{
	size_t off = 2;

	memset(o, 0, sizeof(*o));
	if (ie->len < 2)
		return -EINVAL;
	o->desc = rd16(ie->v);
	if (o->desc & (PFCP_OHC_GTPU_UDP_IPV4 | PFCP_OHC_GTPU_UDP_IPV6)) {
		if (ie->len < off + 4)
			return -EINVAL;
		o->teid = rdn32(ie->v + off);
		off += 4;
	}
	if (o->desc & (PFCP_OHC_GTPU_UDP_IPV4 | PFCP_OHC_UDP_IPV4 | PFCP_OHC_IPV4)) {
		if (ie->len < off + 4)
			return -EINVAL;
		o->ipv4 = rdn32(ie->v + off);
		off += 4;
	}
	if (o->desc & (PFCP_OHC_GTPU_UDP_IPV6 | PFCP_OHC_UDP_IPV6 | PFCP_OHC_IPV6)) {
		if (ie->len < off + 16)
			return -EINVAL;
		memcpy(o->ipv6, ie->v + off, 16);
		off += 16;
	}
	if (o->desc & (PFCP_OHC_UDP_IPV4 | PFCP_OHC_UDP_IPV6))
		off += 2;
	if (o->desc & PFCP_OHC_CTAG)
		off += 3;
	if (o->desc & PFCP_OHC_STAG)
		off += 3;
	return ie->len < off ? -EINVAL : 0;
}

/* fixed-size integer IEs: the value must have at least n octets (more are allowed: 8.1.1) */
static int need(const struct pfcp_ie *ie, size_t n)
{
	return ie->len < n ? -EINVAL : 0;
}

/* QFI (8.2.89): octet 5, spare bits 8-7 (ignored, as spare bits are), the QFI in bits 6-1;
 * octets past it are allowed like those of every fixed-size IE (8.1.1). */
static int dec_qfi(const struct pfcp_ie *ie, __u8 *qfi)
{
	if (need(ie, 1))
		return -EINVAL;
	*qfi = ie->v[0] & 0x3f;
	return 0;
}

/*
 * Flow Description (TS 29.212 5.4.2: an IPFilterRule of RFC 6733 4.3.3, "action dir proto from
 * src [ports] to dst [ports] [options]") classified by what it matches (pfcp_msg.h). Only the
 * shapes that match everything of one bearer are recognised; every other text, well formed or
 * not, is PFCP_SDF_NARROW, so nothing here needs to understand ports, options or IPv6.
 */
#define FD_TOKENS 8

static bool tok_is(const __u8 *t, size_t n, const char *w)
{
	return strlen(w) == n && !memcmp(t, w, n);
}

/* an end that is every address: any, assigned (the UE's own, 29.212), 0.0.0.0/0 */
static bool end_all(const __u8 *t, size_t n)
{
	return tok_is(t, n, "any") || tok_is(t, n, "assigned") || tok_is(t, n, "0.0.0.0/0");
}

/* an end that is one IPv4 host: dotted quad (no leading zeros), optionally /32; *a network order */
static bool end_host(const __u8 *t, size_t n, __u32 *a)
{
	__u8 o[4];
	__u32 part = 0;
	int dots = 0, digits = 0;

	if (n >= 3 && tok_is(t + n - 3, 3, "/32"))
		n -= 3;
	for (size_t i = 0; i < n; i++) {
		if (t[i] == '.') {
			if (!digits || dots == 3)
				return false;
			o[dots++] = part;
			part = 0;
			digits = 0;
		} else if (t[i] >= '0' && t[i] <= '9') {
			if (++digits > 3 || (digits > 1 && part == 0))
				return false;
			part = part * 10 + (t[i] - '0');
			if (part > 255)
				return false;
		} else {
			return false;
		}
	}
	if (dots != 3 || !digits)
		return false;
	o[3] = part;
	memcpy(a, o, 4);
	return true;
}

enum pfcp_sdf_kind pfcp_flow_desc_kind(const __u8 *s, size_t n, __u32 *host)
{
	const __u8 *tok[FD_TOKENS];
	size_t len[FD_TOKENS], i = 0;
	int nt = 0;
	__u32 h1 = 0, h2 = 0;
	bool all1, all2, host1, host2;

	while (i < n) {
		if (s[i] == ' ') {
			i++;
			continue;
		}
		if (nt == FD_TOKENS)
			return PFCP_SDF_NARROW;	/* more than the 7 words of a match-all rule */
		tok[nt] = s + i;
		while (i < n && s[i] != ' ') {
			if (s[i] < 0x21 || s[i] > 0x7e)
				return PFCP_SDF_NARROW;
			i++;
		}
		len[nt] = s + i - tok[nt];
		nt++;
	}
	if (nt != 7 || !tok_is(tok[0], len[0], "permit") ||
	    !(tok_is(tok[1], len[1], "out") || tok_is(tok[1], len[1], "in")) ||
	    !tok_is(tok[2], len[2], "ip") || !tok_is(tok[3], len[3], "from") ||
	    !tok_is(tok[5], len[5], "to"))
		return PFCP_SDF_NARROW;
	all1 = end_all(tok[4], len[4]);
	all2 = end_all(tok[6], len[6]);
	host1 = !all1 && end_host(tok[4], len[4], &h1);
	host2 = !all2 && end_host(tok[6], len[6], &h2);
	if (all1 && all2)
		return PFCP_SDF_ALL;
	if ((all1 && host2) || (host1 && all2)) {
		*host = host1 ? h1 : h2;
		return PFCP_SDF_HOST;
	}
	return PFCP_SDF_NARROW;
}

/* SDF Filter (8.2.5): octet 5 FD TTC SPI FL BID (bits 1-5), octet 6 spare, then the Flow
 * Description (2-octet length, text), ToS Traffic Class (2), SPI (4), Flow Label (3), SDF
 * Filter ID (4), each when its flag is set. -EINVAL when a field runs past the IE. */
static int dec_sdf(const struct pfcp_ie *ie, enum pfcp_sdf_kind *kind, __u32 *host,
		   struct pfcp_sdf *out)
{
	__u8 f;
	size_t off = 2, fd_len = 0;
	const __u8 *fd = NULL;

	if (ie->len < 2)
		return -EINVAL;
	f = ie->v[0];
	if (f & PFCP_SDF_FD) {
		if (ie->len < off + 2)
			return -EINVAL;
		fd_len = rd16(ie->v + off);
		off += 2;
		if (ie->len - off < fd_len)
			return -EINVAL;
		fd = ie->v + off;
		off += fd_len;
	}
	off += (f & 0x02 ? 2 : 0) + (f & 0x04 ? 4 : 0) + (f & 0x08 ? 3 : 0) + (f & 0x10 ? 4 : 0);
	if (ie->len < off)
		return -EINVAL;
	if (!fd || (f & 0x0e))
		*kind = PFCP_SDF_NARROW;	/* no text (a filter named by ID), or ToS/SPI/label */
	else
		*kind = pfcp_flow_desc_kind(fd, fd_len, host);
	if (out) {
		memset(out, 0, sizeof(*out));
		out->flags = f & 0x1f;
		if (fd) {
			out->fd_long = fd_len > PFCP_FD_MAX || memchr(fd, 0, fd_len);
			if (!out->fd_long)
				memcpy(out->fd, fd, fd_len);
		}
		off = 4 + fd_len;
		if (!fd)
			off = 2;
		if (f & PFCP_SDF_TTC) {
			out->tos = ie->v[off];
			out->tos_mask = ie->v[off + 1];
			off += 2;
		}
		if (f & PFCP_SDF_SPI) {
			out->spi = rd32(ie->v + off);
			off += 4;
		}
		if (f & PFCP_SDF_FL) {
			out->fl = ((__u32)(ie->v[off] & 0x0f) << 16) | rd16(ie->v + off + 1);
			off += 3;
		}
		if (f & PFCP_SDF_BID)
			out->id = rd32(ie->v + off);
	}
	return 0;
}

/* ---- grouped IEs ---- */

/* Walk one grouped IE; returns false (after recording a rejection) if it cannot be walked. */
static bool enter(struct pfcp_msg *m, const struct pfcp_cur *parent, const struct pfcp_ie *ie,
		  struct pfcp_cur *child)
{
	if (pfcp_ie_enter(parent, ie, child)) {
		fail(m, PFCP_CAUSE_MANDATORY_IE_INCORRECT, ie->type);
		return false;
	}
	return true;
}

/* next child IE; on an overrun record Invalid Length naming the child (or the parent) */
static int next(struct pfcp_msg *m, struct pfcp_cur *c, struct pfcp_ie *ie, __u16 parent)
{
	int r = pfcp_ie_next(c, ie);

	if (r < 0)
		fail(m, PFCP_CAUSE_INVALID_LENGTH, ie->type ? ie->type : parent);
	return r;
}

#define BAD(t) fail(m, PFCP_CAUSE_MANDATORY_IE_INCORRECT, (t))

static void dec_pdi(struct pfcp_msg *m, const struct pfcp_cur *pc, const struct pfcp_ie *g,
		    struct pfcp_pdr *p)
{
	struct pfcp_cur c;
	struct pfcp_ie ie;
	bool has_src = false;

	if (!enter(m, pc, g, &c))
		return;
	while (next(m, &c, &ie, g->type) > 0) {
		switch (ie.type) {
		case PFCP_IE_SOURCE_INTERFACE:
			if (need(&ie, 1))
				BAD(ie.type);
			else if (!has_src)
				p->src_if = ie.v[0] & 0x0f;
			has_src = true;
			break;
		case PFCP_IE_FTEID:
			/* one F-TEID per PDI (7.5.2.2); a second is refused by the handler */
			if (!p->n_fteid++ && dec_fteid(&ie, &p->fteid))
				BAD(ie.type);
			p->has_fteid = true;
			break;
		case PFCP_IE_SDF_FILTER: {
			enum pfcp_sdf_kind k;
			__u32 h = 0;

			if (dec_sdf(&ie, &k, &h, p->n_sdf < PFCP_MAX_SDF ? &p->sdf[p->n_sdf] : NULL))
				BAD(ie.type);
			else if (k == PFCP_SDF_ALL)
				p->sdf_all = true;
			else if (k == PFCP_SDF_HOST && p->n_sdf_host < PFCP_MAX_IDS)
				p->sdf_host[p->n_sdf_host++] = h;
			p->n_sdf++;
			break;
		}
		case PFCP_IE_APPLICATION_ID:
		case PFCP_IE_ETHERNET_PACKET_FILTER:
			if (!p->narrow_ie)
				p->narrow_ie = ie.type;
			break;
		case PFCP_IE_UE_IP_ADDRESS:
			if (!p->has_ue_ip && dec_ue_ip(&ie, &p->ue_ip))
				BAD(ie.type);
			p->has_ue_ip = true;
			break;
		case PFCP_IE_QFI: {
			__u8 q;

			if (dec_qfi(&ie, &q))
				BAD(ie.type);
			else if (!p->n_qfi)
				p->qfi = q;
			if (p->n_qfi < PFCP_MAX_IDS)	/* one is enough to refuse a list */
				p->n_qfi++;
			break;
		}
		default:
			m->unknown_ies++;
		}
	}
	if (!has_src)
		fail(m, PFCP_CAUSE_MANDATORY_IE_MISSING, PFCP_IE_SOURCE_INTERFACE);
}

/* Create PDR (7.5.2.2), or Update PDR (7.5.4.2, upd: all but the PDR ID optional; *upd_pdi
 * says whether it had a PDI) */
static void dec_pdr(struct pfcp_msg *m, const struct pfcp_cur *pc, const struct pfcp_ie *g,
		    struct pfcp_pdr *p, bool *upd_pdi)
{
	bool has_id = false, has_pdi = false;
	struct pfcp_cur c;
	struct pfcp_ie ie;

	memset(p, 0, sizeof(*p));
	if (!enter(m, pc, g, &c))
		return;
	while (next(m, &c, &ie, g->type) > 0) {
		switch (ie.type) {
		case PFCP_IE_PDR_ID:
			if (need(&ie, 2))
				BAD(ie.type);
			else
				p->id = rd16(ie.v);
			has_id = true;
			break;
		case PFCP_IE_PRECEDENCE:
			if (need(&ie, 4))
				BAD(ie.type);
			else
				p->precedence = rd32(ie.v);
			p->has_precedence = true;
			break;
		case PFCP_IE_PDI:
			if (!has_pdi)
				dec_pdi(m, &c, &ie, p);
			has_pdi = true;
			break;
		case PFCP_IE_OUTER_HEADER_REMOVAL:
			if (need(&ie, 1))
				BAD(ie.type);
			else
				p->ohr = ie.v[0];
			p->has_ohr = true;
			break;
		case PFCP_IE_FAR_ID:
			if (need(&ie, 4))
				BAD(ie.type);
			else
				p->far_id = rd32(ie.v);
			p->has_far_id = true;
			break;
		case PFCP_IE_URR_ID:
			if (need(&ie, 4))
				BAD(ie.type);
			else if (p->n_urr < PFCP_MAX_IDS)
				p->urr_id[p->n_urr++] = rd32(ie.v);
			else
				fail(m, PFCP_CAUSE_NO_RESOURCES, ie.type);
			break;
		case PFCP_IE_QER_ID:
			if (need(&ie, 4))
				BAD(ie.type);
			else if (p->n_qer < PFCP_MAX_IDS)
				p->qer_id[p->n_qer++] = rd32(ie.v);
			else
				fail(m, PFCP_CAUSE_NO_RESOURCES, ie.type);
			break;
		default:
			m->unknown_ies++;
		}
	}
	if (!has_id)
		fail(m, PFCP_CAUSE_MANDATORY_IE_MISSING, PFCP_IE_PDR_ID);
	if (upd_pdi) {
		*upd_pdi = has_pdi;
		return;
	}
	if (!p->has_precedence)
		fail(m, PFCP_CAUSE_MANDATORY_IE_MISSING, PFCP_IE_PRECEDENCE);
	if (!has_pdi)
		fail(m, PFCP_CAUSE_MANDATORY_IE_MISSING, PFCP_IE_PDI);
}

/* Forwarding Parameters (Create FAR) or Update Forwarding Parameters (Update FAR) */
static void dec_fwd(struct pfcp_msg *m, const struct pfcp_cur *pc, const struct pfcp_ie *g,
		    struct pfcp_far *f, bool update)
{
	struct pfcp_cur c;
	struct pfcp_ie ie;

	if (!enter(m, pc, g, &c))
		return;
	f->has_fwd = true;
	while (next(m, &c, &ie, g->type) > 0) {
		switch (ie.type) {
		case PFCP_IE_DESTINATION_INTERFACE:
			if (need(&ie, 1))
				BAD(ie.type);
			else
				f->dst_if = ie.v[0] & 0x0f;
			f->has_dst_if = true;
			break;
		case PFCP_IE_OUTER_HEADER_CREATION:
			if (dec_ohc(&ie, &f->ohc))
				BAD(ie.type);
			f->has_ohc = true;
			break;
		case PFCP_IE_PFCPSMREQ_FLAGS:	/* only Update Forwarding Parameters has it */
			if (!update)
				m->unknown_ies++;
			else if (need(&ie, 1))
				BAD(ie.type);
			else
				f->smreq = ie.v[0];
			break;
		default:
			m->unknown_ies++;
		}
	}
	if (!update && !f->has_dst_if)
		fail(m, PFCP_CAUSE_MANDATORY_IE_MISSING, PFCP_IE_DESTINATION_INTERFACE);
}

static void dec_far(struct pfcp_msg *m, const struct pfcp_cur *pc, const struct pfcp_ie *g,
		    struct pfcp_far *f, bool update)
{
	__u16 fwd_type = update ? PFCP_IE_UPDATE_FORWARDING_PARAMS : PFCP_IE_FORWARDING_PARAMS;
	bool has_id = false;
	struct pfcp_cur c;
	struct pfcp_ie ie;

	memset(f, 0, sizeof(*f));
	if (!enter(m, pc, g, &c))
		return;
	while (next(m, &c, &ie, g->type) > 0) {
		if (ie.type == PFCP_IE_FAR_ID) {
			if (need(&ie, 4))
				BAD(ie.type);
			else
				f->id = rd32(ie.v);
			has_id = true;
		} else if (ie.type == PFCP_IE_APPLY_ACTION) {
			if (need(&ie, 1))
				BAD(ie.type);
			else
				f->apply = ie.v[0];
			f->has_apply = true;
		} else if (ie.type == fwd_type) {
			if (!f->has_fwd)
				dec_fwd(m, &c, &ie, f, update);
		} else {
			m->unknown_ies++;
		}
	}
	if (!has_id)
		fail(m, PFCP_CAUSE_MANDATORY_IE_MISSING, PFCP_IE_FAR_ID);
	if (!update && !f->has_apply)
		fail(m, PFCP_CAUSE_MANDATORY_IE_MISSING, PFCP_IE_APPLY_ACTION);
}

/* Query URR (7.5.4.10): one URR ID */
/* A grouped IE whose one mandatory child is a rule ID (Query URR 7.5.4.10; Remove PDR / FAR / URR /
 * QER 7.5.4.6-9): id_type is that ID's IE type, id_len its length (PDR ID 2, the others 4) */
static void dec_rule_id(struct pfcp_msg *m, const struct pfcp_cur *pc, const struct pfcp_ie *g,
			__u16 id_type, int id_len, __u32 *id)
{
	bool has_id = false;
	struct pfcp_cur c;
	struct pfcp_ie ie;

	*id = 0;
	if (!enter(m, pc, g, &c))
		return;
	while (next(m, &c, &ie, g->type) > 0) {
		if (ie.type == id_type) {
			if (need(&ie, id_len))
				BAD(ie.type);
			else
				*id = id_len == 2 ? rd16(ie.v) : rd32(ie.v);
			has_id = true;
		} else {
			m->unknown_ies++;
		}
	}
	if (!has_id)
		fail(m, PFCP_CAUSE_MANDATORY_IE_MISSING, id_type);
}

/* A 4-octet seconds value of a URR (Measurement Period, Time Threshold/Quota, Quota Holding
 * Time): *v, or -EINVAL when shorter. */
static int dec_secs(const struct pfcp_ie *ie, __u32 *v)
{
	if (need(ie, 4))
		return -EINVAL;
	*v = rd32(ie->v);
	return 0;
}

/* Volume Threshold (8.2.13) / Volume Quota (8.2.50): flags, then the 8-octet values flagged */
static int dec_volume(const struct pfcp_ie *ie, __u8 *flags, __u64 v[3])
{
	size_t off = 1;

	if (need(ie, 1))
		return -EINVAL;
	*flags = ie->v[0] & (PFCP_VOL_TOVOL | PFCP_VOL_ULVOL | PFCP_VOL_DLVOL);
	for (int i = 0; i < 3; i++) {
		if (!(*flags & (1U << i))) {
			v[i] = 0;
			continue;
		}
		if (ie->len < off + 8)
			return -EINVAL;
		v[i] = rd64(ie->v + off);
		off += 8;
	}
	return 0;
}

/*
 * Create URR (every parameter's IE with a value; URR ID, Measurement Method and Reporting
 * Triggers mandatory) or Update URR (URR ID mandatory; any other IE with a null length removes
 * that parameter, 5.6.3). The parameters kept are those a usage report needs: the measurement
 * method, triggers, period, volume and time thresholds and quotas, quota holding time.
 */
static void dec_urr(struct pfcp_msg *m, const struct pfcp_cur *pc, const struct pfcp_ie *g,
		    struct pfcp_urr *u, bool update)
{
	bool has_id = false;
	struct pfcp_cur c;
	struct pfcp_ie ie;

	memset(u, 0, sizeof(*u));
	if (!enter(m, pc, g, &c))
		return;
	while (next(m, &c, &ie, g->type) > 0) {
		__u32 bit;
		int err = 0;

		switch (ie.type) {
		case PFCP_IE_URR_ID:
			if (need(&ie, 4))
				BAD(ie.type);
			else
				u->id = rd32(ie.v);
			has_id = true;
			continue;
		case PFCP_IE_MEASUREMENT_METHOD: bit = PFCP_URR_METHOD; break;
		case PFCP_IE_REPORTING_TRIGGERS: bit = PFCP_URR_TRIGGERS; break;
		case PFCP_IE_MEASUREMENT_PERIOD: bit = PFCP_URR_PERIOD; break;
		case PFCP_IE_VOLUME_THRESHOLD: bit = PFCP_URR_VOL_THRESH; break;
		case PFCP_IE_VOLUME_QUOTA: bit = PFCP_URR_VOL_QUOTA; break;
		case PFCP_IE_TIME_THRESHOLD: bit = PFCP_URR_TIME_THRESH; break;
		case PFCP_IE_TIME_QUOTA: bit = PFCP_URR_TIME_QUOTA; break;
		case PFCP_IE_QUOTA_HOLDING_TIME: bit = PFCP_URR_QHT; break;
		case PFCP_IE_MEASUREMENT_INFORMATION: bit = PFCP_URR_MEAS_INFO; break;
		default:
			m->unknown_ies++;
			continue;
		}
		if (update && !ie.len && bit != PFCP_URR_METHOD && bit != PFCP_URR_TRIGGERS) {
			u->cleared |= bit;	/* 5.6.3: a null length removes it */
			u->present &= ~bit;
			continue;
		}
		switch (bit) {
		case PFCP_URR_METHOD:
			if (!(err = need(&ie, 1)))
				u->method = ie.v[0];
			break;
		case PFCP_URR_TRIGGERS:
			/* 2 octets (Release 15), a third from Release 16: the third is kept if sent */
			if (!(err = need(&ie, 2)))
				u->triggers = ie.v[0] | ie.v[1] << 8 | (ie.len > 2 ? ie.v[2] << 16 : 0);
			break;
		case PFCP_URR_PERIOD:
			err = dec_secs(&ie, &u->period);
			break;
		case PFCP_URR_TIME_THRESH:
			err = dec_secs(&ie, &u->time_threshold);
			break;
		case PFCP_URR_TIME_QUOTA:
			err = dec_secs(&ie, &u->time_quota);
			break;
		case PFCP_URR_QHT:
			err = dec_secs(&ie, &u->quota_holding_time);
			break;
		case PFCP_URR_VOL_THRESH:
			err = dec_volume(&ie, &u->vol_thresh_flags, u->vol_thresh);
			break;
		case PFCP_URR_VOL_QUOTA:
			err = dec_volume(&ie, &u->vol_quota_flags, u->vol_quota);
			break;
		case PFCP_URR_MEAS_INFO:
			if (!(err = need(&ie, 1)))
				u->meas_info = ie.v[0];
			break;
		}
		if (err) {
			BAD(ie.type);
			continue;
		}
		u->present |= bit;
		u->cleared &= ~bit;
	}
	if (!has_id)
		fail(m, PFCP_CAUSE_MANDATORY_IE_MISSING, PFCP_IE_URR_ID);
	if (!update && !(u->present & PFCP_URR_METHOD))
		fail(m, PFCP_CAUSE_MANDATORY_IE_MISSING, PFCP_IE_MEASUREMENT_METHOD);
	if (!update && !(u->present & PFCP_URR_TRIGGERS))
		fail(m, PFCP_CAUSE_MANDATORY_IE_MISSING, PFCP_IE_REPORTING_TRIGGERS);
}

static void dec_qer(struct pfcp_msg *m, const struct pfcp_cur *pc, const struct pfcp_ie *g,
		    struct pfcp_qer *q, bool update)
{
	bool has_id = false;
	struct pfcp_cur c;
	struct pfcp_ie ie;

	memset(q, 0, sizeof(*q));
	if (!enter(m, pc, g, &c))
		return;
	while (next(m, &c, &ie, g->type) > 0) {
		switch (ie.type) {
		case PFCP_IE_QER_ID:
			if (need(&ie, 4))
				BAD(ie.type);
			else
				q->id = rd32(ie.v);
			has_id = true;
			break;
		case PFCP_IE_GATE_STATUS:
			if (need(&ie, 1))
				BAD(ie.type);
			else
				q->gate = ie.v[0] & 0x0f;
			q->has_gate = true;
			break;
		case PFCP_IE_MBR:
			if (need(&ie, 10)) {
				BAD(ie.type);
			} else {
				q->mbr_ul = rd40(ie.v);
				q->mbr_dl = rd40(ie.v + 5);
			}
			q->has_mbr = true;
			break;
		case PFCP_IE_GBR:
			if (need(&ie, 10)) {
				BAD(ie.type);
			} else {
				q->gbr_ul = rd40(ie.v);
				q->gbr_dl = rd40(ie.v + 5);
			}
			q->has_gbr = true;
			break;
		case PFCP_IE_QFI:
			if (dec_qfi(&ie, &q->qfi))
				BAD(ie.type);
			q->has_qfi = true;
			break;
		default:
			m->unknown_ies++;
		}
	}
	if (!has_id)
		fail(m, PFCP_CAUSE_MANDATORY_IE_MISSING, PFCP_IE_QER_ID);
	if (!update && !q->has_gate)
		fail(m, PFCP_CAUSE_MANDATORY_IE_MISSING, PFCP_IE_GATE_STATUS);
}

/* room for one more rule of a kind, or a No resources rejection naming the IE */
static bool room(struct pfcp_msg *m, int n, __u16 type)
{
	if (n < PFCP_MAX_RULES)
		return true;
	fail(m, PFCP_CAUSE_NO_RESOURCES, type);
	return false;
}

/* The IEs each request must carry (TS 29.244 7.4, 7.5), as PFCP_P_* bits and IE types. */
static void check_mandatory(struct pfcp_msg *m)
{
	static const struct {
		__u8 type;
		__u32 bit;
		__u16 ie;
	} rules[] = {
		{ PFCP_HEARTBEAT_REQ, PFCP_P_RTS, PFCP_IE_RECOVERY_TIME_STAMP },
		{ PFCP_HEARTBEAT_RESP, PFCP_P_RTS, PFCP_IE_RECOVERY_TIME_STAMP },
		{ PFCP_ASSOC_SETUP_REQ, PFCP_P_NODE_ID, PFCP_IE_NODE_ID },
		{ PFCP_ASSOC_SETUP_REQ, PFCP_P_RTS, PFCP_IE_RECOVERY_TIME_STAMP },
		{ PFCP_ASSOC_UPDATE_REQ, PFCP_P_NODE_ID, PFCP_IE_NODE_ID },
		{ PFCP_ASSOC_RELEASE_REQ, PFCP_P_NODE_ID, PFCP_IE_NODE_ID },
		{ PFCP_SESS_EST_REQ, PFCP_P_NODE_ID, PFCP_IE_NODE_ID },
		{ PFCP_SESS_EST_REQ, PFCP_P_FSEID, PFCP_IE_FSEID },
	};

	for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++)
		if (rules[i].type == m->h.type && !(m->present & rules[i].bit))
			fail(m, PFCP_CAUSE_MANDATORY_IE_MISSING, rules[i].ie);
	if (m->h.type == PFCP_SESS_EST_REQ && !m->n_create_pdr)
		fail(m, PFCP_CAUSE_MANDATORY_IE_MISSING, PFCP_IE_CREATE_PDR);
	if (m->h.type == PFCP_SESS_EST_REQ && !m->n_create_far)
		fail(m, PFCP_CAUSE_MANDATORY_IE_MISSING, PFCP_IE_CREATE_FAR);
}

const char *pfcp_msg_name(__u8 type)
{
	switch (type) {
	case PFCP_HEARTBEAT_REQ: return "heartbeat_request";
	case PFCP_HEARTBEAT_RESP: return "heartbeat_response";
	case PFCP_ASSOC_SETUP_REQ: return "association_setup_request";
	case PFCP_ASSOC_SETUP_RESP: return "association_setup_response";
	case PFCP_ASSOC_UPDATE_REQ: return "association_update_request";
	case PFCP_ASSOC_UPDATE_RESP: return "association_update_response";
	case PFCP_ASSOC_RELEASE_REQ: return "association_release_request";
	case PFCP_ASSOC_RELEASE_RESP: return "association_release_response";
	case PFCP_VERSION_NOT_SUPPORTED: return "version_not_supported_response";
	case PFCP_SESS_EST_REQ: return "session_establishment_request";
	case PFCP_SESS_EST_RESP: return "session_establishment_response";
	case PFCP_SESS_MOD_REQ: return "session_modification_request";
	case PFCP_SESS_MOD_RESP: return "session_modification_response";
	case PFCP_SESS_DEL_REQ: return "session_deletion_request";
	case PFCP_SESS_DEL_RESP: return "session_deletion_response";
	default: return NULL;
	}
}

const char *pfcp_cause_name(__u8 cause)
{
	switch (cause) {
	case 0: return "none";
	case PFCP_CAUSE_ACCEPTED: return "request_accepted";
	case PFCP_CAUSE_REJECTED: return "request_rejected";
	case PFCP_CAUSE_SESSION_NOT_FOUND: return "session_context_not_found";
	case PFCP_CAUSE_MANDATORY_IE_MISSING: return "mandatory_ie_missing";
	case PFCP_CAUSE_CONDITIONAL_IE_MISSING: return "conditional_ie_missing";
	case PFCP_CAUSE_INVALID_LENGTH: return "invalid_length";
	case PFCP_CAUSE_MANDATORY_IE_INCORRECT: return "mandatory_ie_incorrect";
	case PFCP_CAUSE_NO_ASSOCIATION: return "no_established_pfcp_association";
	case PFCP_CAUSE_RULE_FAILURE: return "rule_creation_modification_failure";
	case PFCP_CAUSE_NO_RESOURCES: return "no_resources_available";
	case PFCP_CAUSE_SERVICE_NOT_SUPPORTED: return "service_not_supported";
	case PFCP_CAUSE_SYSTEM_FAILURE: return "system_failure";
	default: return NULL;
	}
}

int pfcp_decode(const __u8 *buf, size_t n, struct pfcp_msg *m)
{
	struct pfcp_cur c;
	struct pfcp_ie ie;
	int err;

	memset(m, 0, sizeof(*m));
	m->cause = PFCP_CAUSE_ACCEPTED;
	err = pfcp_hdr_parse(buf, n, &m->h);
	if (err)
		return err;
	if (!pfcp_msg_name(m->h.type))
		return -ENOMSG;
	pfcp_cur_init(&c, buf + m->h.hdr_len, m->h.msg_len - m->h.hdr_len);
	while (next(m, &c, &ie, 0) > 0) {
		switch (ie.type) {
		case PFCP_IE_NODE_ID:
			if (!(m->present & PFCP_P_NODE_ID) && dec_node_id(&ie, &m->node_id))
				BAD(ie.type);
			m->present |= PFCP_P_NODE_ID;
			break;
		case PFCP_IE_FSEID:
			/* the first is decoded; a second is refused by the handler */
			if (!m->n_fseid++ && dec_fseid(&ie, &m->fseid))
				BAD(ie.type);
			m->present |= PFCP_P_FSEID;
			break;
		case PFCP_IE_RECOVERY_TIME_STAMP:
			if (need(&ie, 4))
				BAD(ie.type);
			else
				m->recovery_ts = rd32(ie.v);
			m->present |= PFCP_P_RTS;
			break;
		case PFCP_IE_CAUSE:
			if (need(&ie, 1))
				BAD(ie.type);
			else
				m->resp_cause = ie.v[0];
			m->present |= PFCP_P_CAUSE;
			break;
		case PFCP_IE_UP_FUNCTION_FEATURES:
			m->present |= PFCP_P_UPFF;
			break;
		case PFCP_IE_CREATE_PDR:
			if (room(m, m->n_create_pdr, ie.type))
				dec_pdr(m, &c, &ie, &m->create_pdr[m->n_create_pdr++], NULL);
			break;
		case PFCP_IE_CREATE_FAR:
			if (room(m, m->n_create_far, ie.type))
				dec_far(m, &c, &ie, &m->create_far[m->n_create_far++], false);
			break;
		case PFCP_IE_CREATE_URR:
			if (room(m, m->n_create_urr, ie.type))
				dec_urr(m, &c, &ie, &m->create_urr[m->n_create_urr++], false);
			break;
		case PFCP_IE_CREATE_QER:
			if (room(m, m->n_create_qer, ie.type))
				dec_qer(m, &c, &ie, &m->create_qer[m->n_create_qer++], false);
			break;
		case PFCP_IE_UPDATE_FAR:
			if (room(m, m->n_update_far, ie.type))
				dec_far(m, &c, &ie, &m->update_far[m->n_update_far++], true);
			break;
		case PFCP_IE_UPDATE_QER:
			if (room(m, m->n_update_qer, ie.type))
				dec_qer(m, &c, &ie, &m->update_qer[m->n_update_qer++], true);
			break;
		case PFCP_IE_UPDATE_URR:
			if (room(m, m->n_update_urr, ie.type))
				dec_urr(m, &c, &ie, &m->update_urr[m->n_update_urr++], true);
			break;
		case PFCP_IE_PFCPSMREQ_FLAGS:
			if (need(&ie, 1))
				BAD(ie.type);
			else
				m->smreq = ie.v[0];
			break;
		case PFCP_IE_QUERY_URR:
			if (room(m, m->n_query_urr, ie.type))
				dec_rule_id(m, &c, &ie, PFCP_IE_URR_ID, 4,
					    &m->query_urr[m->n_query_urr++]);
			break;
		case PFCP_IE_REMOVE_PDR:
			if (room(m, m->n_remove_pdr, ie.type))
				dec_rule_id(m, &c, &ie, PFCP_IE_PDR_ID, 2,
					    &m->remove_pdr[m->n_remove_pdr++]);
			break;
		case PFCP_IE_REMOVE_FAR:
			if (room(m, m->n_remove_far, ie.type))
				dec_rule_id(m, &c, &ie, PFCP_IE_FAR_ID, 4,
					    &m->remove_far[m->n_remove_far++]);
			break;
		case PFCP_IE_REMOVE_URR:
			if (room(m, m->n_remove_urr, ie.type))
				dec_rule_id(m, &c, &ie, PFCP_IE_URR_ID, 4,
					    &m->remove_urr[m->n_remove_urr++]);
			break;
		case PFCP_IE_REMOVE_QER:
			if (room(m, m->n_remove_qer, ie.type))
				dec_rule_id(m, &c, &ie, PFCP_IE_QER_ID, 4,
					    &m->remove_qer[m->n_remove_qer++]);
			break;
		case PFCP_IE_UPDATE_PDR:
			if (m->n_update_pdr == PFCP_MAX_UPD_PDR) {
				fail(m, PFCP_CAUSE_NO_RESOURCES, ie.type);
				break;
			}
			dec_pdr(m, &c, &ie, &m->update_pdr[m->n_update_pdr],
				&m->upd_pdi[m->n_update_pdr]);
			m->n_update_pdr++;
			break;
		default:
			m->unknown_ies++;
		}
	}
	if (m->cause == PFCP_CAUSE_ACCEPTED)
		check_mandatory(m);
	return 0;
}

/* ---- encoder ---- */

void pfcp_w_init(struct pfcp_w *w, __u8 *buf, size_t cap)
{
	w->b = buf;
	w->cap = cap;
	w->len = 0;
	w->err = 0;
}

static __u8 *w_take(struct pfcp_w *w, size_t n)
{
	__u8 *p;

	if (w->err || n > w->cap - w->len) {
		w->err = -ENOSPC;
		return NULL;
	}
	p = w->b + w->len;
	w->len += n;
	return p;
}

static void wr16(__u8 *p, __u16 v)
{
	p[0] = v >> 8;
	p[1] = v;
}

static void wr32(__u8 *p, __u32 v)
{
	wr16(p, v >> 16);
	wr16(p + 2, v);
}

void pfcp_w_hdr(struct pfcp_w *w, __u8 type, bool has_seid, __u64 seid, __u32 seq)
{
	__u8 *p = w_take(w, has_seid ? 16 : 8);

	if (!p)
		return;
	p[0] = PFCP_VERSION << 5 | (has_seid ? 1 : 0);
	p[1] = type;
	wr16(p + 2, 0);
	if (has_seid) {
		wr32(p + 4, seid >> 32);
		wr32(p + 8, seid);
		p += 8;
	}
	wr32(p + 4, seq << 8);	/* 3 octets sequence, then spare / priority */
}

void pfcp_w_ie(struct pfcp_w *w, __u16 type, const void *v, size_t len)
{
	__u8 *p;

	if (len > 0xffff) {
		w->err = -ENOSPC;
		return;
	}
	p = w_take(w, 4 + len);
	if (!p)
		return;
	wr16(p, type);
	wr16(p + 2, len);
	if (len)
		memcpy(p + 4, v, len);
}

void pfcp_w_u8(struct pfcp_w *w, __u16 type, __u8 v)
{
	pfcp_w_ie(w, type, &v, 1);
}

void pfcp_w_u16(struct pfcp_w *w, __u16 type, __u16 v)
{
	__u8 b[2];

	wr16(b, v);
	pfcp_w_ie(w, type, b, 2);
}

void pfcp_w_u32(struct pfcp_w *w, __u16 type, __u32 v)
{
	__u8 b[4];

	wr32(b, v);
	pfcp_w_ie(w, type, b, 4);
}

size_t pfcp_w_group_begin(struct pfcp_w *w, __u16 type)
{
	size_t at = w->len;

	pfcp_w_ie(w, type, NULL, 0);
	return at;
}

void pfcp_w_group_end(struct pfcp_w *w, size_t at)
{
	size_t len;

	if (w->err)
		return;
	len = w->len - at - 4;
	if (len > 0xffff) {
		w->err = -ENOSPC;
		return;
	}
	wr16(w->b + at + 2, len);
}

int pfcp_fqdn_encode(const char *s, __u8 *out, size_t cap)
{
	size_t o = 0;

	while (*s) {
		const char *dot = strchr(s, '.');
		size_t l = dot ? (size_t)(dot - s) : strlen(s);

		if (!l || l > 63 || o + 1 + l > cap)
			return -EINVAL;
		out[o++] = l;
		memcpy(out + o, s, l);
		o += l;
		s += l;
		if (*s == '.')
			s++;
	}
	return o ? (int)o : -EINVAL;
}

void pfcp_w_node_id(struct pfcp_w *w, const struct pfcp_node_id *id)
{
	__u8 b[1 + PFCP_FQDN_MAX + 1];
	int n;

	b[0] = id->type;
	if (id->type == PFCP_NODE_IPV4) {
		memcpy(b + 1, &id->ipv4, 4);
		pfcp_w_ie(w, PFCP_IE_NODE_ID, b, 5);
		return;
	}
	n = pfcp_fqdn_encode(id->fqdn, b + 1, sizeof(b) - 1);
	if (n < 0) {
		w->err = n;
		return;
	}
	pfcp_w_ie(w, PFCP_IE_NODE_ID, b, 1 + n);
}

void pfcp_w_fseid(struct pfcp_w *w, __u64 seid, __u32 ipv4)
{
	__u8 b[13];

	b[0] = 0x02;	/* V4 */
	wr32(b + 1, seid >> 32);
	wr32(b + 5, seid);
	memcpy(b + 9, &ipv4, 4);
	pfcp_w_ie(w, PFCP_IE_FSEID, b, sizeof(b));
}

void pfcp_w_fteid46(struct pfcp_w *w, __u32 teid, __u32 ipv4, const __u8 *ipv6)
{
	__u8 b[25];
	size_t n = 5;

	b[0] = (ipv4 ? 0x01 : 0) | (ipv6 ? 0x02 : 0);	/* V4, V6 */
	memcpy(b + 1, &teid, 4);
	if (ipv4) {
		memcpy(b + n, &ipv4, 4);
		n += 4;
	}
	if (ipv6) {
		memcpy(b + n, ipv6, 16);
		n += 16;
	}
	pfcp_w_ie(w, PFCP_IE_FTEID, b, n);
}

void pfcp_w_fteid(struct pfcp_w *w, __u32 teid, __u32 ipv4)
{
	__u8 b[9];

	b[0] = 0x01;	/* V4 */
	memcpy(b + 1, &teid, 4);
	memcpy(b + 5, &ipv4, 4);
	pfcp_w_ie(w, PFCP_IE_FTEID, b, sizeof(b));
}

int pfcp_w_finish(struct pfcp_w *w)
{
	if (w->err)
		return w->err;
	if (w->len < 8 || w->len - 4 > 0xffff)
		return -ENOSPC;
	wr16(w->b + 2, w->len - 4);
	return w->len;
}
