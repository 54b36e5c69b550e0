/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * sdf_match.h: the SDF filter matcher (TS 29.244 5.2.1, 8.2.5; struct pgwu_sdf_filter in pgwu.h),
 * plain C built for both sides as gtpu.h is: the XDP paths call it through sdf.h (pgwu_pdr_apply),
 * the socket path (`pgwu socket`, pgwu_sock_sdf.c) directly, so a packet matches the same filter
 * whichever path carries it. sdf_parse_buf reads the fields a filter compares from an IPv4 or IPv6
 * packet (for IPv6 the upper layer behind extension headers), sdf_match compares one filter.
 *
 * Byte order: addresses and SPI as on the wire (network order), ports and flow label host order.
 */
#ifndef PGWU_SDF_MATCH_H
#define PGWU_SDF_MATCH_H

#include <linux/ip.h>
#include <linux/ipv6.h>
#ifdef __bpf__
#include <linux/in.h>
#else
#include <netinet/in.h>
#endif
#include "compat.h"
#include "pgwu.h"

#ifndef IPPROTO_SCTP
#define IPPROTO_SCTP 132
#endif
#define SDF_IPPROTO_ESP 50
#define SDF_IPPROTO_AH 51
#define SDF_EXT_HDRS 6		/* IPv6 extension headers walked before the upper layer */

/* The fields a filter can compare, read once from the packet. */
struct sdf_pkt {
	__u32 src[4], dst[4];	/* IPv4: [0], the rest 0 */
	__u32 spi;
	__u32 flow_label;
	__u16 sport, dport;
	__u8 proto, tos, v6, has_ports, has_spi, pad[3];
	__u32 rule;		/* out: the matched PDR's rule id (XDP's PDR_CLASSIFY) */
};

/* the upper-layer header of a packet: ports (TCP, UDP, SCTP), or SPI (ESP: first word; AH: second) */
static __always_inline void sdf_l4(struct sdf_pkt *p, void *data, void *end, __u32 off, __u32 stop)
{
	__u8 *l4;

	if (off > 0x3fff || off + 8 > stop)
		return;
	l4 = data + off;
	if ((void *)(l4 + 8) > end)
		return;
	if (p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP || p->proto == IPPROTO_SCTP) {
		p->sport = (__u16)l4[0] << 8 | l4[1];
		p->dport = (__u16)l4[2] << 8 | l4[3];
		p->has_ports = 1;
	} else if (p->proto == SDF_IPPROTO_ESP) {
		__builtin_memcpy(&p->spi, l4, 4);
		p->has_spi = 1;
	} else if (p->proto == SDF_IPPROTO_AH) {
		__builtin_memcpy(&p->spi, l4 + 4, 4);
		p->has_spi = 1;
	}
}

/* Fill p (zeroed by the caller) from the IP header at data + off, len octets, the buffer ending
 * at end: 0, or -1 when it is not a whole IPv4 or IPv6 header (the paths have checked it already:
 * for XDP this is for the verifier, and never matches). */
static __always_inline int sdf_parse_buf(void *data, void *end, __u32 off, __u32 len,
					 struct sdf_pkt *p)
{
	__u32 stop, i, l4off;
	__u8 *ip, nh;

	if (off > 0x3fff || len > 0xffff)
		return -1;
	stop = off + len;
	ip = data + off;
	if ((void *)(ip + 20) > end)
		return -1;
	if ((ip[0] >> 4) == 4) {
		struct iphdr *h = (void *)ip;

		p->proto = h->protocol;
		p->tos = h->tos;
		p->src[0] = h->saddr;
		p->dst[0] = h->daddr;
		/* a later fragment has no upper-layer header: it matches no port or SPI filter */
		if (!(h->frag_off & bpf_htons(0x1fff)))
			sdf_l4(p, data, end, off + h->ihl * 4, stop);
		return 0;
	}
	if ((void *)(ip + 40) > end)
		return -1;
	{
		struct ipv6hdr *h = (void *)ip;
		__u8 *x;

		p->v6 = 1;
		p->tos = ip[0] << 4 | ip[1] >> 4;
		p->flow_label = (__u32)(ip[1] & 0x0f) << 16 | (__u32)ip[2] << 8 | ip[3];
		__builtin_memcpy(p->src, &h->saddr, 16);
		__builtin_memcpy(p->dst, &h->daddr, 16);
		nh = h->nexthdr;
		l4off = off + 40;
		/* the upper layer behind Hop-by-Hop, Routing, Destination Options and Fragment
		 * headers (RFC 8200 4.1); a non-first fragment has none */
		for (i = 0; i < SDF_EXT_HDRS; i++) {
			if (nh != IPPROTO_HOPOPTS && nh != IPPROTO_ROUTING && nh != IPPROTO_DSTOPTS &&
			    nh != IPPROTO_FRAGMENT)
				break;
			if (l4off > 0x3fff)
				return 0;
			x = data + l4off;
			if ((void *)(x + 8) > end || l4off + 8 > stop) {
				p->proto = nh;
				return 0;
			}
			if (nh == IPPROTO_FRAGMENT) {
				if ((x[2] << 8 | (x[3] & 0xf8)) != 0) {
					p->proto = x[0];
					return 0;
				}
				l4off += 8;
			} else {
				l4off += ((__u32)x[1] + 1) * 8;
			}
			nh = x[0];
		}
		p->proto = nh;
		sdf_l4(p, data, end, l4off, stop);
	}
	return 0;
}

static __always_inline int sdf_addr_match(const __u32 *a, const __u32 *v, const __u32 *m)
{
	return ((a[0] & m[0]) ^ v[0]) == 0 && ((a[1] & m[1]) ^ v[1]) == 0 &&
	       ((a[2] & m[2]) ^ v[2]) == 0 && ((a[3] & m[3]) ^ v[3]) == 0;
}

static __always_inline int sdf_match(const struct pgwu_sdf_filter *f, const struct sdf_pkt *p)
{
	__u32 fl = f->fields;

	if (!fl)
		return 1;
	if ((fl & PGWU_SDF_F_V4) && p->v6)
		return 0;
	if ((fl & PGWU_SDF_F_V6) && !p->v6)
		return 0;
	if ((fl & PGWU_SDF_F_PROTO) && f->proto != p->proto)
		return 0;
	if ((fl & PGWU_SDF_F_SRC) && !sdf_addr_match(p->src, f->src, f->smask))
		return 0;
	if ((fl & PGWU_SDF_F_DST) && !sdf_addr_match(p->dst, f->dst, f->dmask))
		return 0;
	if ((fl & PGWU_SDF_F_SPORT) &&
	    (!p->has_ports || p->sport < f->sport_lo || p->sport > f->sport_hi))
		return 0;
	if ((fl & PGWU_SDF_F_DPORT) &&
	    (!p->has_ports || p->dport < f->dport_lo || p->dport > f->dport_hi))
		return 0;
	if ((fl & PGWU_SDF_F_TOS) && (p->tos & f->tos_mask) != f->tos)
		return 0;
	if ((fl & PGWU_SDF_F_FLOW) && (!p->v6 || p->flow_label != f->flow_label))
		return 0;
	if ((fl & PGWU_SDF_F_SPI) && (!p->has_spi || p->spi != f->spi))
		return 0;
	return 1;
}

#endif /* PGWU_SDF_MATCH_H */
