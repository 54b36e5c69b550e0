/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Header parsing with a cursor (after xdp-tutorial's parsing_helpers.h).
 *
 * Contract: each parse_* function takes the cursor, checks that its whole header lies before
 * cur->end, returns a pointer to it through its out argument, advances the cursor past it and returns
 * the next protocol in NETWORK byte order (EtherType, IP protocol), or -1 when the header is
 * truncated. No function here reads past a bounds check; the verifier relies on that.
 */
#ifndef PGWU_PARSING_H
#define PGWU_PARSING_H

#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include "compat.h"
#include "consts.h"

struct cursor {
	void *pos;
	void *end;
};

struct vlan_hdr {
	__be16 tci;
	__be16 encap_proto;
};

/* TS 29.281 5.1: the mandatory 8 octets of a GTP-U header */
struct gtpu_hdr {
	__u8 flags;		/* version(3) PT(1) spare(1) E(1) S(1) PN(1) */
	__u8 type;
	__be16 length;		/* octets after the mandatory header */
	__be32 teid;
};

/* present when any of E, S, PN is set */
struct gtpu_opt {
	__be16 seq;
	__u8 npdu;
	__u8 next_ext;
};

#define GTP_FLAGS_VERSION(f)	((f) >> 5)
#define GTP_FLAG_PT		0x10
#define GTP_FLAG_E		0x04
#define GTP_FLAG_S		0x02
#define GTP_FLAG_PN		0x01
#define GTP_FLAGS_OPT		(GTP_FLAG_E | GTP_FLAG_S | GTP_FLAG_PN)

/* Ethernet, with at most one 802.1Q tag; *tag is NULL when untagged. A second tag or an 802.1ad
 * S-tag is returned as the EtherType, which the caller then treats as "not IPv4". */
static __always_inline int parse_eth(struct cursor *cur, struct ethhdr **eth, struct vlan_hdr **tag)
{
	struct ethhdr *e = cur->pos;
	__be16 proto;

	if ((void *)(e + 1) > cur->end)
		return -1;
	cur->pos = e + 1;
	*eth = e;
	*tag = NULL;
	proto = e->h_proto;
	if (proto == ETH_P_8021Q_BE) {
		struct vlan_hdr *v = cur->pos;

		if ((void *)(v + 1) > cur->end)
			return -1;
		cur->pos = v + 1;
		*tag = v;
		proto = v->encap_proto;
	}
	return proto;
}

/* The fixed 20 bytes of IPv4 only: the caller validates IHL and lengths, which have several
 * verdicts. The cursor is left at the IP header. */
static __always_inline int parse_ipv4_fixed(struct cursor *cur, struct iphdr **ip)
{
	struct iphdr *h = cur->pos;

	if ((void *)(h + 1) > cur->end)
		return -1;
	*ip = h;
	return h->protocol;
}

static __always_inline int parse_udp(struct cursor *cur, struct udphdr **udp)
{
	struct udphdr *u = cur->pos;

	if ((void *)(u + 1) > cur->end)
		return -1;
	cur->pos = u + 1;
	*udp = u;
	return 0;
}

static __always_inline int parse_gtpu(struct cursor *cur, struct gtpu_hdr **gtp)
{
	struct gtpu_hdr *g = cur->pos;

	if ((void *)(g + 1) > cur->end)
		return -1;
	cur->pos = g + 1;
	*gtp = g;
	return g->type;
}

static __always_inline int ipv4_is_fragment(const struct iphdr *ip)
{
	return ip->frag_off & bpf_htons(0x3fff);	/* MF or offset */
}

#endif /* PGWU_PARSING_H */
