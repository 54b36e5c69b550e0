// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pgwu_sock_packet.c: one packet through `pgwu socket` (pgwu_sock.c): an uplink GTP-U message
 * (ul_one: checked as xdp_access checks it, include/gtpu.h; an IPv6 T-PDU as xdp_access6 takes
 * it, ul6_one; over IPv6 as xdp_ul_n3v6 takes it, ul6n3_one), a downlink IPv4 or IPv6 packet
 * (dl_one, dl6_one: encapsulated as xdp_sgi and xdp_sgi6 encapsulate it; to an IPv6 peer as
 * xdp_dl_n3v6, n3v6_encap), the replies both send (Echo Response, Error Indication, Supported
 * Extension Headers Notification, ICMP, ICMPv6 Time Exceeded, ICMPv6 Packet Too Big), the
 * signalling recorded as
 * xdp_access and xdp_ul_n3v6 record it; the bearers through the mmap()ed direct index, and --measure-lookups,
 * which times that lookup against the hash map's system call. What it forwards it queues
 * (tx_add, pgwu_sock_batch.c sends the batch).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/ipv6.h>
#include <bpf/bpf.h>
#include "pgwu_sock_int.h"
#include "gtpu.h"

/* ---- bearers: the direct index through mmap, the hash maps only for what it does not hold ---- */

static int ul_bearer(struct worker *w, __be32 teid, struct pgwu_ul_bearer *b, __u64 **usage)
{
	struct pgwu_ul_slot *s = &S.m.ul_slots[ntohl(teid) & (S.m.nslots - 1)];

	if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == PGWU_SLOT_VALID && s->teid == teid) {
		b->ue_addr = s->b.ue_addr;
		b->flags = s->b.flags;
		/* pgwu empties a slot before it reuses it: still this bearer's after the copy */
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&s->state, __ATOMIC_RELAXED) == PGWU_SLOT_VALID &&
		    s->teid == teid) {
			*usage = &s->b.packets;
			return 0;
		}
	}
	*usage = NULL;
	CTR(w, PGWU_SC_HASH_LOOKUPS)++;
	return bpf_map_lookup_elem(S.m.ul, &teid, b) ? -ENOENT : 0;
}

static int dl_bearer(struct worker *w, __be32 ue, struct pgwu_dl_bearer *b, __u64 **usage)
{
	struct pgwu_dl_slot *s = &S.m.dl_slots[ntohl(ue) & (S.m.nslots - 1)];

	if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == PGWU_SLOT_VALID && s->ue == ue) {
		b->sgw_addr = s->b.sgw_addr;
		b->sgw_teid = s->b.sgw_teid;
		b->local_teid = s->b.local_teid;	/* its SDF filters' key */
		b->flags = s->b.flags;
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&s->state, __ATOMIC_RELAXED) == PGWU_SLOT_VALID &&
		    s->ue == ue) {
			*usage = &s->b.packets;
			return 0;
		}
	}
	*usage = NULL;
	CTR(w, PGWU_SC_HASH_LOOKUPS)++;
	return bpf_map_lookup_elem(S.m.dl, &ue, b) ? -ENOENT : 0;
}

/* IPv6 bearers (ul6_prefix, dl6_bearers: hash maps, no slot index): a system call each, counted
 * as hash_lookups. 0 or -ENOENT. */
static int ul6_bearer(struct worker *w, __be32 teid, struct pgwu_ul6 *u6)
{
	CTR(w, PGWU_SC_HASH_LOOKUPS)++;
	return S.m.ul6 < 0 || bpf_map_lookup_elem(S.m.ul6, &teid, u6) ? -ENOENT : 0;
}

static int dl6_bearer(struct worker *w, __u64 prefix, struct pgwu_dl_bearer *b)
{
	CTR(w, PGWU_SC_HASH_LOOKUPS)++;
	return S.m.dl6 < 0 || bpf_map_lookup_elem(S.m.dl6, &prefix, b) ? -ENOENT : 0;
}

/*
 * The IPv6 usage a worker counts, added to the bearers' hash entries after each batch
 * (usage6_flush): uplink workers' to ul6_prefix (keyed by TEID), downlink workers' to dl6_bearers
 * (by /64); and the SDF PDRs', to sdf_pdrs (by rule id), either direction. A hash entry cannot be added to through mmap, so each flush is a read, an add and a
 * write (BPF_EXIST: a bearer removed meanwhile takes nothing), one worker at a time (usage6_lock)
 * so that two never lose each other's packets. The counters wait for the batch, never longer.
 */
static pthread_mutex_t usage6_lock = PTHREAD_MUTEX_INITIALIZER;

void usage6_flush(struct worker *w)
{
	int fd = w->dir == UL ? S.m.ul6 : S.m.dl6;

	if (!w->nusage6)
		return;
	pthread_mutex_lock(&usage6_lock);
	for (int i = 0; i < USAGE6_SLOTS; i++) {
		struct usage6 *u = &w->usage6[i];

		if (!u->used)
			continue;
		if (u->used == USAGE_PDR && u->packets && S.m.sdf.pdrs >= 0) {
			__u32 rule = (__u32)u->key;
			struct pgwu_sdf_pdr v;

			if (!bpf_map_lookup_elem(S.m.sdf.pdrs, &rule, &v)) {
				v.packets += u->packets;
				v.bytes += u->bytes;
				bpf_map_update_elem(S.m.sdf.pdrs, &rule, &v, BPF_EXIST);
			}
		} else if (u->used == USAGE_BEARER6 && u->packets && fd >= 0) {
			if (w->dir == UL) {
				__be32 teid = (__be32)u->key;
				struct pgwu_ul6 v;

				if (!bpf_map_lookup_elem(fd, &teid, &v)) {
					v.packets += u->packets;
					v.bytes += u->bytes;
					bpf_map_update_elem(fd, &teid, &v, BPF_EXIST);
				}
			} else {
				struct pgwu_dl_bearer v;

				if (!bpf_map_lookup_elem(fd, &u->key, &v)) {
					v.packets += u->packets;
					v.bytes += u->bytes;
					bpf_map_update_elem(fd, &u->key, &v, BPF_EXIST);
				}
			}
		}
		memset(u, 0, sizeof(*u));
	}
	w->nusage6 = 0;
	pthread_mutex_unlock(&usage6_lock);
}

/* Room in this worker's usage table for the two entries one packet may take (its IPv6 bearer's,
 * its PDR's): a table half full is flushed first, with what is queued to send (whose counters
 * point into it). Called before a packet takes its first entry, never between its two. */
void usage6_room(struct worker *w)
{
	if (w->nusage6 >= USAGE6_SLOTS / 2 - 2) {
		tx_flush(w);
		usage6_flush(w);
	}
}

/* The usage counters {packets, bytes} of (kind, key) in this worker's table (open addressing;
 * usage6_room first). */
__u64 *usage6_of(struct worker *w, __u64 key, enum usage_kind kind)
{
	__u32 h = (__u32)((key ^ key >> 32 ^ kind) * 0x9e3779b1U) >> 24;

	for (__u32 i = 0; i < USAGE6_SLOTS; i++) {
		struct usage6 *u = &w->usage6[(h + i) & (USAGE6_SLOTS - 1)];

		if (u->used == kind && u->key == key)
			return &u->packets;
		if (!u->used) {
			u->used = kind;
			u->key = key;
			w->nusage6++;
			return &u->packets;
		}
	}
	return NULL;	/* never: the table is at most half full */
}

/* ---- replies (TS 29.281 7.2.2, 7.3.1, 7.2.3), as xdp_access builds them ---- */

/* Addresses nobody may be answered at (RFC 1812 5.3.7, 4.2.2.11), as xdp_access's martian_src. */
static int martian(__be32 saddr, const struct pgwu_config *cfg)
{
	__u32 a = ntohl(saddr);

	return (a >> 24) == 0 || (a >> 24) == 127 || (a >> 28) >= 0xe || saddr == cfg->local_addr;
}

/* GCRA per peer (reply_budget in pgwu.h), per worker: PGWU_REPLY_BURST at once, then
 * PGWU_REPLY_RATE a second; with T workers a peer can get T times that. */
static int reply_allowed(struct worker *w, __be32 peer)
{
	const __u64 interval = 1000000000ULL / PGWU_REPLY_RATE;
	struct budget *b = &w->budget[(ntohl(peer) * 0x9e3779b1U) >> 22 & (BUDGET_SLOTS - 1)];
	__u64 now = mono_ns();

	if (b->peer != peer) {
		b->peer = peer;
		b->tat = now + interval;
		return 1;
	}
	if (b->tat > now + (PGWU_REPLY_BURST - 1) * interval)
		return 0;
	b->tat = (b->tat > now ? b->tat : now) + interval;
	return 1;
}

/* IPv4 local -> peer (tos 0, id 0: the kernel picks one, DF 0, TTL 64) / UDP 2152 -> dport
 * (checksum) / GTP-U (S set, TEID 0, sequence seq) / ie_len octets of IEs. 0 or -errno. */
static int reply_send(struct worker *w, __be32 peer, __be16 dport, __u8 type, __be16 seq,
		      const __u8 *ie, __u32 ie_len)
{
	__u8 buf[64] = {};
	struct iphdr *ip = (void *)buf;
	struct udphdr *u = (void *)(ip + 1);
	struct gtpu_hdr *g = (void *)(u + 1);
	struct gtpu_opt *o = (void *)(g + 1);
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_addr.s_addr = peer };
	__u32 len = 40 + ie_len;
	__u64 sum;

	ip->version = 4;
	ip->ihl = 5;
	ip->tot_len = htons(len);
	ip->ttl = OUTER_TTL;
	ip->protocol = IPPROTO_UDP;
	ip->saddr = w->cfg.local_addr;
	ip->daddr = peer;
	ip->check = csum_finish(ipv4_hdr_sum(ip, 5, buf + sizeof(buf)));
	u->source = GTPU_PORT_BE;
	u->dest = dport;
	u->len = htons(20 + ie_len);
	g->flags = 0x30 | GTP_FLAG_S;
	g->type = type;
	g->length = htons(4 + ie_len);
	o->seq = seq;
	memcpy(o + 1, ie, ie_len);
	sum = (__u64)ip->saddr + ip->daddr + htons(IPPROTO_UDP) + u->len + csum_buf(u, 20 + ie_len);
	u->check = csum_finish_udp(sum);
	CTR(w, PGWU_SC_TX_CALLS)++;
	return sendto(w->raw, buf, len, 0, (struct sockaddr *)&to, sizeof(to)) < 0 ? -errno : 0;
}

/*
 * An ICMP error (RFC 792: Time Exceeded 11/0; RFC 1191: Fragmentation Needed 3/4 with the next-hop
 * MTU) src -> dst quoting q (the packet's header and 8 octets after it, RFC 1812 4.3.2.3), as the
 * XDP programs build it: IPv4 tos 0, id 0, DF 0, TTL 64. Writes at buf; returns its length.
 */
static __u32 icmp_build(__u8 *buf, __be32 src, __be32 dst, __u8 type, __u8 code, __u16 mtu,
			const __u8 *q, __u32 qlen)
{
	struct iphdr *ip = (void *)buf;
	__u8 *ic = buf + sizeof(*ip);
	__be32 word = htonl(mtu);
	__u16 check;

	memset(buf, 0, 28);
	ip->version = 4;
	ip->ihl = 5;
	ip->tot_len = htons(28 + qlen);
	ip->ttl = OUTER_TTL;
	ip->protocol = IPPROTO_ICMP;
	ip->saddr = src;
	ip->daddr = dst;
	ip->check = csum_finish(ipv4_hdr_sum(ip, 5, ic));
	ic[0] = type;
	ic[1] = code;
	memcpy(ic + 4, &word, 4);
	memcpy(ic + 8, q, qlen);
	check = csum_finish(csum_buf(ic, 8 + qlen));
	memcpy(ic + 2, &check, 2);
	return 28 + qlen;
}

static int raw_send(struct worker *w, const void *buf, __u32 len, __be32 to)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = to };

	CTR(w, PGWU_SC_TX_CALLS)++;
	return sendto(w->raw, buf, len, 0, (struct sockaddr *)&a, sizeof(a)) < 0 ? -errno : 0;
}

/* The G-PDU header fields of a packet to downlink half b's tunnel: from this gateway's GTP-U address
 * to its SGW and TEID, its PDU Session Container when it has a QFI, the outer IP id the kernel's. */
static void encap_to(struct gtpu_encap *e, const struct pgwu_config *cfg, const struct pgwu_dl_bearer *b)
{
	e->qfi = gtpu_dl_qfi(b->flags);
	e->saddr = cfg->local_addr;
	e->daddr = b->sgw_addr;
	e->teid = b->sgw_teid;
	e->id = 0;			/* the kernel picks the id of a packet without DF */
}

static const __u8 *peer6_of(struct worker *w, __u32 idx);
static __u32 n3v6_gpdu(const struct worker *w, __u8 *o, __u32 inner_len, const struct pgwu_dl_bearer *b,
		       const __u8 *peer, __be16 sport, __u8 tc);
static int raw6_send(struct worker *w, const void *buf, __u32 len, const __u8 *to);
static int addr6_unset(const __u8 *a);

/* The G-PDU headers' length before a packet to downlink half dl's tunnel: GTP-U/UDP/IPv4 (36, 44
 * with a PSC), or over IPv6 to an IPv6 peer (PGWU_B_PEER6: N3V6_ENCAP_LEN, + 8 with a PSC). A
 * reply buffer holds TUNNEL_ENCAP_MAX before the error it carries. */
#define TUNNEL_ENCAP_MAX (N3V6_ENCAP_LEN + 8)
static __u32 tunnel_encap_len(const struct pgwu_dl_bearer *dl)
{
	__u8 qfi = gtpu_dl_qfi(dl->flags);

	if (dl->flags & PGWU_B_PEER6)
		return N3V6_ENCAP_LEN + (qfi != 0xff ? 8 : 0);
	return gtpu_encap_len(qfi);
}

/* Send the ICMP or ICMPv6 error (Time Exceeded, Packet Too Big) of n octets built at buf +
 * tunnel_encap_len(dl) to the UE of downlink half dl, in a G-PDU of its bearer, its PDU Session
 * Container when it has a QFI: over IPv4 from this gateway's GTP-U address to its SGW and TEID, UDP
 * 2152 -> 2152 checksum 0, no DF; to an IPv6 peer (PGWU_B_PEER6) from n3_addr6, class and flow
 * label 0, UDP 2152 -> 2152 with its checksum (RFC 8200 8.1); event ev counted. 0 when sent. */
static int tunnel_error_send(struct worker *w, __u8 *buf, __u32 n, const struct pgwu_dl_bearer *dl,
			     enum pgwu_event ev)
{
	struct gtpu_encap e = { .sport = GTPU_PORT_BE, .inner_len = n, .tos = 0, .df = 0 };
	__u32 len;

	if (dl->flags & PGWU_B_PEER6) {
		const __u8 *peer = peer6_of(w, dl->sgw_addr);

		if (!peer || addr6_unset(w->cfg.n3_addr6))
			return -1;
		len = n3v6_gpdu(w, buf, n, dl, peer, GTPU_PORT_BE, 0) + n;
		if (raw6_send(w, buf, len, peer))
			return -1;
		EVENT(w, ev);
		return 0;
	}
	encap_to(&e, &w->cfg, dl);
	len = gtpu_encap_len(e.qfi) + n;

	if (!gtpu_encap_write((void *)buf, buf + len, &e) || raw_send(w, buf, len, dl->sgw_addr))
		return -1;
	EVENT(w, ev);
	return 0;
}

/* RFC 1812 5.3.1: Time Exceeded to the UE whose uplink packet iip expired, through its tunnel (a
 * G-PDU to its SGW, UDP 2152 -> 2152 checksum 0, its PDU Session Container when it has a QFI; over
 * IPv6 to an IPv6 peer: tunnel_error_send), as xdp_access does; none when the G-PDU's sender is
 * martian (!answerable). Rate-limited per UE. 0 when sent. */
static int ul_time_exceeded(struct worker *w, const struct iphdr *iip, const __u8 *end, int answerable)
{
	const struct pgwu_config *cfg = &w->cfg;
	__u8 buf[TUNNEL_ENCAP_MAX + 28 + 68];
	struct pgwu_dl_bearer dl;
	__u32 q = iip->ihl * 4 + 8, n;
	__u64 *usage;

	if ((cfg->flags & PGWU_CFG_NO_ERR_IND) || !answerable || dl_bearer(w, iip->saddr, &dl, &usage))
		return -1;
	if (!reply_allowed(w, iip->saddr)) {
		EVENT(w, PGWU_EV_ICMP_RATE_LIMITED);
		return -1;
	}
	if (q > (__u32)(end - (const __u8 *)iip))
		q = end - (const __u8 *)iip;
	n = icmp_build(buf + tunnel_encap_len(&dl), cfg->local_addr, iip->saddr, 11, 0,
		       0, (const __u8 *)iip, q);
	return tunnel_error_send(w, buf, n, &dl, PGWU_EV_ICMP_TIME_EXCEEDED_SENT);
}

/* An ICMP error back to the sender of downlink packet ip (quoted as it arrived: q, qlen), as
 * xdp_sgi sends it: from the GTP-U address, rate-limited per sender. 0 when sent. */
int dl_icmp(struct worker *w, const __u8 *q, __u32 qlen, __u8 type, __u8 code, __u16 mtu)
{
	const struct pgwu_config *cfg = &w->cfg;
	const struct iphdr *ip = (const void *)q;
	__u8 buf[28 + 68];
	__u32 n;

	if ((cfg->flags & PGWU_CFG_NO_ERR_IND) || !cfg->local_addr || martian(ip->saddr, cfg))
		return -1;
	if (!reply_allowed(w, ip->saddr)) {
		EVENT(w, PGWU_EV_ICMP_RATE_LIMITED);
		return -1;
	}
	n = icmp_build(buf, cfg->local_addr, ip->saddr, type, code, mtu, q, qlen);
	if (raw_send(w, buf, n, ip->saddr))
		return -1;
	EVENT(w, type == 3 ? PGWU_EV_ICMP_FRAG_NEEDED_SENT : PGWU_EV_ICMP_TIME_EXCEEDED_SENT);
	return 0;
}

/* The MTU of the route to dst (a UDP socket connected to it: IP_MTU), 0 when unknown. */
int route_mtu(__be32 dst)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = GTPU_PORT_BE,
				 .sin_addr.s_addr = dst };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), mtu = 0;
	socklen_t len = sizeof(mtu);

	if (fd < 0)
		return 0;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) ||
	    getsockopt(fd, IPPROTO_IP, IP_MTU, &mtu, &len))
		mtu = 0;
	close(fd);
	return mtu;
}

/* The MTU of the IPv6 route to dst (a UDP socket connected to it: IPV6_MTU, the route's mtu metric
 * else its device's, as bpf_fib_lookup's mtu_result), 0 when unknown. */
int route6_mtu(const __u8 *dst)
{
	struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_port = GTPU_PORT_BE };
	int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0), mtu = 0;
	socklen_t len = sizeof(mtu);

	if (fd < 0)
		return 0;
	memcpy(&a.sin6_addr, dst, 16);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) ||
	    getsockopt(fd, IPPROTO_IPV6, IPV6_MTU, &mtu, &len))
		mtu = 0;
	close(fd);
	return mtu;
}

/* The MTU of the IPv4 route to SGW sgw (route_mtu), remembered by the worker for MTU_CACHE_MS: it
 * is asked for every downlink IPv6 packet over 1280 octets, and four system calls a packet would
 * cost the throughput of large packets. A route changed is seen within MTU_CACHE_MS. */
static int access_mtu(struct worker *w, __be32 sgw)
{
	struct mtu_slot *m = &w->mtu_cache[(ntohl(sgw) * 2654435761U) >> (32 - MTU_CACHE_BITS)];
	__u64 now = mono_ns();

	if (m->addr != sgw || now - m->at > MTU_CACHE_MS * 1000000ULL) {
		m->addr = sgw;
		m->mtu = route_mtu(sgw);
		m->at = now;
	}
	return m->mtu;
}

/* ---- ICMPv6 (RFC 4443), as xdp_sgi6 and xdp_access6 build it ---- */

/* RFC 8200 5: the smallest MTU an IPv6 link has; a tunnel that leaves less is fragmented below
 * IPv6 (the outer IPv4 packet), not answered with Packet Too Big (ICMP6_MIN_MTU in pgwu.bpf.c) */
#define ICMP6_MIN_MTU 1280

/* The invoking packet's octets an ICMPv6 error quotes: as many as keep it within the IPv6 minimum
 * MTU (RFC 4443 2.4(c)): 1280 - 40 - 8, as ICMP6_QUOTE_MAX in pgwu.bpf.c. */
#define ICMP6_QUOTE_MAX 1232

/* Whether an ICMPv6 error may answer ip6 (n octets there; RFC 4443 2.4(e)): not to the
 * unspecified, loopback or a multicast source, nor about an ICMPv6 error (type < 128 right after
 * the fixed header; an extension header before it is not walked), as icmp6_may_answer. */
static int icmp6_may_answer(const struct ipv6hdr *ip6, __u32 n)
{
	const __u8 *s = ip6->saddr.s6_addr;
	static const __u8 zero[15];

	if (s[0] == 0xff)
		return 0;
	if (!memcmp(s, zero, 15) && (s[15] == 0 || s[15] == 1))
		return 0;
	if (ip6->nexthdr == IPPROTO_ICMPV6 && (n < sizeof(*ip6) + 1 || ((const __u8 *)(ip6 + 1))[0] < 128))
		return 0;
	return 1;
}

/* An address's words folded to the 32 bits the reply budget is keyed by, as addr6_fold. */
static __be32 addr6_fold(const void *a, int words)
{
	__u32 w[4];

	memcpy(w, a, words * 4);
	return words == 2 ? w[0] ^ w[1] : w[0] ^ w[1] ^ w[2] ^ w[3];
}

static int addr6_unset(const __u8 *a)
{
	static const __u8 zero[16];

	return !memcmp(a, zero, 16);
}

/* An ICMPv6 error (Time Exceeded 3/0, Packet Too Big 2/0 with its MTU: mtu, 0 for Time Exceeded)
 * src -> dst quoting q octets of the packet at qp, as icmp6_error writes it: IPv6 class and flow
 * label 0, hop limit 64, the checksum over the pseudo header (RFC 8200 8.1). Writes at buf; returns
 * its length (48 + q). */
static __u32 icmp6_build(__u8 *buf, const __u8 *src, const __u8 *dst, __u8 type, __u8 code,
			 __u32 mtu, const __u8 *qp, __u32 q)
{
	struct ipv6hdr *ip6 = (void *)buf;
	__u8 *ic = buf + sizeof(*ip6);
	__be32 word = htonl(mtu);
	__u64 sum;
	__u16 check;

	memset(buf, 0, 48);
	ip6->version = 6;
	ip6->payload_len = htons(8 + q);
	ip6->nexthdr = IPPROTO_ICMPV6;
	ip6->hop_limit = OUTER_TTL;
	memcpy(&ip6->saddr, src, 16);
	memcpy(&ip6->daddr, dst, 16);
	ic[0] = type;
	ic[1] = code;
	memcpy(ic + 4, &word, 4);
	memcpy(ic + 8, qp, q);
	sum = csum_buf(&ip6->saddr, 32) + htons(8 + q) + htons(IPPROTO_ICMPV6) + csum_buf(ic, 8 + q);
	check = csum_finish(sum);
	memcpy(ic + 2, &check, 2);
	return 48 + q;
}

static int raw6_send(struct worker *w, const void *buf, __u32 len, const __u8 *to)
{
	struct sockaddr_in6 a = { .sin6_family = AF_INET6 };

	memcpy(&a.sin6_addr, to, 16);
	CTR(w, PGWU_SC_TX_CALLS)++;
	return sendto(w->raw6, buf, len, 0, (struct sockaddr *)&a, sizeof(a)) < 0 ? -errno : 0;
}

/* RFC 4443 3.3 / 3.2: Time Exceeded (type 3, mtu 0) or Packet Too Big (type 2, the MTU the packet
 * can have) to the sender of downlink IPv6 packet ip6 (tot_len octets, n read; quoted as it
 * arrived), from local_addr6 out of SGi (the kernel routes it), as xdp_sgi6 answers (sgi6_error):
 * none without local_addr6, with replies off, or where RFC 4443 2.4(e) forbids one; rate-limited
 * per sender (folded to 32 bits). 0 when sent. */
int dl6_error(struct worker *w, const struct ipv6hdr *ip6, __u32 tot_len, __u32 n, __u8 type,
		     __u32 mtu)
{
	const struct pgwu_config *cfg = &w->cfg;
	__u8 buf[48 + ICMP6_QUOTE_MAX];
	__u32 q = tot_len < ICMP6_QUOTE_MAX ? tot_len : ICMP6_QUOTE_MAX;

	if ((cfg->flags & PGWU_CFG_NO_ERR_IND) || addr6_unset(cfg->local_addr6) ||
	    !icmp6_may_answer(ip6, n))
		return -1;
	if (!reply_allowed(w, addr6_fold(&ip6->saddr, 4))) {
		EVENT(w, PGWU_EV_ICMP_RATE_LIMITED);
		return -1;
	}
	if (raw6_send(w, buf, icmp6_build(buf, cfg->local_addr6, ip6->saddr.s6_addr, type, 0, mtu,
					  (const __u8 *)ip6, q), ip6->saddr.s6_addr))
		return -1;
	EVENT(w, type == 2 ? PGWU_EV_ICMP6_TOO_BIG_SENT : PGWU_EV_ICMP_TIME_EXCEEDED_SENT);
	return 0;
}

/* RFC 4443 3.3 / 3.2: Time Exceeded (type 3, mtu 0) to the UE whose uplink IPv6 packet ip6
 * (inner_len octets, checked whole; quoted as it arrived) expired, or Packet Too Big (type 2) with
 * the SGi route's MTU, inside a G-PDU of its bearer, as xdp_access6 answers (ul6_error): to the SGW
 * and TEID of the /64's downlink half (dl6_bearers), UDP 2152 -> 2152 checksum 0, its PDU Session
 * Container when it has a QFI (to an IPv6 peer over IPv6: tunnel_error_send). None without
 * local_addr6, with replies off, from a martian sender (!answerable), or where RFC 4443 2.4(e)
 * forbids one; rate-limited per UE /64. 0 when sent. */
int ul6_error(struct worker *w, const struct ipv6hdr *ip6, __u32 inner_len, __u64 prefix,
	      int answerable, __u8 type, __u32 mtu)
{
	const struct pgwu_config *cfg = &w->cfg;
	__u8 buf[TUNNEL_ENCAP_MAX + 48 + ICMP6_QUOTE_MAX];
	__u32 q = inner_len < ICMP6_QUOTE_MAX ? inner_len : ICMP6_QUOTE_MAX, n;
	struct pgwu_dl_bearer dl;

	if ((cfg->flags & PGWU_CFG_NO_ERR_IND) || addr6_unset(cfg->local_addr6) ||
	    !answerable || !icmp6_may_answer(ip6, inner_len) || dl6_bearer(w, prefix, &dl))
		return -1;
	if (!reply_allowed(w, addr6_fold(&prefix, 2))) {
		EVENT(w, PGWU_EV_ICMP_RATE_LIMITED);
		return -1;
	}
	n = icmp6_build(buf + tunnel_encap_len(&dl), cfg->local_addr6, ip6->saddr.s6_addr,
			type, 0, mtu, (const __u8 *)ip6, q);
	return tunnel_error_send(w, buf, n, &dl, type == 2 ? PGWU_EV_ICMP6_TOO_BIG_SENT :
						 PGWU_EV_ICMP_TIME_EXCEEDED_SENT);
}

/*
 * The IPv6 T-PDU's upper-layer protocol walk, as ipv6_upper_proto in pgwu.bpf.c: Hop-by-Hop,
 * Routing and Destination Options headers, PGWU_MAX_EXT_HDRS at most, not past a Fragment header
 * nor the packet. The socket path does not route by the protocol (the kernel routes the raw
 * socket's packets), so only its one verdict matters: -1 for a Hop-by-Hop Options header that runs
 * past the packet (the kernel drops those too, RFC 8200 4.3), else 0.
 */
static int ipv6_ext_ok(const struct ipv6hdr *ip6, const __u8 *end)
{
	__u8 nexthdr = ip6->nexthdr;
	const __u8 *h = (const __u8 *)(ip6 + 1);

	for (int i = 0; i < PGWU_MAX_EXT_HDRS; i++) {
		if (nexthdr != IPPROTO_HOPOPTS && nexthdr != IPPROTO_ROUTING &&
		    nexthdr != IPPROTO_DSTOPTS)
			return 0;
		if (h + 2 > end || h + ((__u32)h[1] + 1) * 8 > end)
			return nexthdr == IPPROTO_HOPOPTS ? -1 : 0;
		nexthdr = h[0];
		h += ((__u32)h[1] + 1) * 8;
	}
	return 0;
}

/* ---- signalling, recorded as xdp_access records it (system calls: signalling is rare) ---- */

/* An Echo Response from the peer at key in map fd (peers: its IPv4 address; peers6: its 16 octets),
 * its body at ie, as pgwu.bpf.c's peer_echo_rsp records it. */
static void peer_echo_response(int fd, const void *key, __be16 seq, const __u8 *ie, const __u8 *end)
{
	struct pgwu_peer p = {};
	int has_rc = ie + 2 <= end && ie[0] == GTP_IE_RECOVERY;
	__u8 rc = has_rc ? ie[1] : 0;
	bool known;

	if (fd < 0)
		return;
	known = !bpf_map_lookup_elem(fd, key, &p);
	if (known && has_rc && p.has_recovery && p.restart_counter != rc)
		p.restarts++;
	p.rsp_ns = mono_ns();
	p.responses++;
	p.rsp_seq = ntohs(seq);
	p.restart_counter = rc;
	p.has_recovery = has_rc;
	bpf_map_update_elem(fd, key, &p, BPF_ANY);
}

static void sig_count(__be32 teid, __be32 addr, __u8 type, __be32 from)
{
	struct pgwu_sig_key k = { .teid = teid, .addr = addr, .type = type };
	struct pgwu_sig_val v = {};

	if (S.sig_rx < 0)
		return;
	bpf_map_lookup_elem(S.sig_rx, &k, &v);
	v.packets++;
	v.last_ns = mono_ns();
	v.from = from;
	bpf_map_update_elem(S.sig_rx, &k, &v, BPF_ANY);
}

/* sig_count over IPv6 (sig_rx6, as n3v6.h's sig6_count) */
static void sig6_count(__be32 teid, const __u8 *addr, __u8 type, const __u8 *from)
{
	struct pgwu_sig6_key k = { .teid = teid, .type = type };
	struct pgwu_sig6_val v = {};

	if (S.sig_rx6 < 0)
		return;
	memcpy(k.addr, addr, 16);
	bpf_map_lookup_elem(S.sig_rx6, &k, &v);
	v.packets++;
	v.last_ns = mono_ns();
	memcpy(v.from, from, 16);
	bpf_map_update_elem(S.sig_rx6, &k, &v, BPF_ANY);
}

/* The signalling a peer sent (type, the header's teid and seq; p its body after the header and its
 * extension headers), recorded as xdp_access (peer over IPv4: peers, sig_rx) or xdp_ul_n3v6's
 * n3v6_sig_record (peer6 over IPv6: peers6, sig_rx6) records it: an Echo Response in the peers map,
 * an Error Indication (its Tunnel Endpoint Identifier Data I, its GTP-U Peer Address when it has
 * the family's length, TS 29.281 7.3.1 / 8.4, else the sender) and an End Marker (our TEID in its
 * header, 7.3.2) in the sig_rx map. */
static void sig_record(__u8 type, __be32 teid, __be16 seq, __be32 peer, const __u8 *peer6, const __u8 *p,
		       const __u8 *end)
{
	__be32 t, addr;

	switch (type) {
	case GTP_ECHO_RSP:
		if (peer6)
			peer_echo_response(S.peers6, peer6, seq, p, end);
		else
			peer_echo_response(S.peers, &peer, seq, p, end);
		break;
	case GTP_END_MARKER:
		if (peer6)
			sig6_count(teid, peer6, GTP_END_MARKER, peer6);
		else
			sig_count(teid, peer, GTP_END_MARKER, peer);
		break;
	case GTP_ERROR_IND:
		if (!peer6) {
			if (gtpu_err_ind_ies(p, end, end, peer, &t, &addr))
				sig_count(t, addr, GTP_ERROR_IND, peer);
		} else if (p + 5 <= end && p[0] == GTP_IE_TEID_DATA_I) {
			const __u8 *a6 = peer6;

			memcpy(&t, p + 1, 4);
			if (p + 24 <= end && p[5] == GTP_IE_PEER_ADDR && p[6] == 0 && p[7] == 16)
				a6 = p + 8;
			sig6_count(t, a6, GTP_ERROR_IND, peer6);
		}
		break;
	}
}

/* ---- N3 over IPv6 (GTP-U/UDP/IPv6, as include/n3v6.h's xdp_ul_n3v6 and xdp_dl_n3v6) ---- */

/* An IPv6 source nobody may be answered at: unspecified, loopback, multicast, our own N3 address
 * (as n3v6_martian). */
static int martian6(const __u8 *a, const struct pgwu_config *cfg)
{
	static const __u8 zero[15];

	if (a[0] == 0xff)
		return 1;
	if (!memcmp(a, zero, 15) && (a[15] == 0 || a[15] == 1))
		return 1;
	return !memcmp(a, cfg->n3_addr6, 16);
}

/* The sum of an IPv6 pseudo header (RFC 8200 8.1): addresses at a (src then dst), length, UDP. */
static __u64 udp6_pseudo_sum(const void *a, __u32 len)
{
	return csum_buf(a, 32) + htons((__u16)len) + htons(IPPROTO_UDP);
}

/* The outer IPv6 and UDP headers at o of a GTP-U datagram of ulen octets (its UDP header included)
 * from n3_addr6 to peer, as include/n3v6.h writes them: class tc, flow label 0, hop limit OUTER_TTL
 * / UDP sport -> dport; one writer for the replies (reply6_send) and the G-PDUs (n3v6_encap).
 * The UDP checksum is n3v6_udp_csum's once the rest of the datagram is written. */
static struct udphdr *n3v6_outer(const struct worker *w, void *o, __u8 tc, __u32 ulen, const __u8 *peer,
				 __be16 sport, __be16 dport)
{
	struct ipv6hdr *ip6 = o;
	struct udphdr *u = (void *)(ip6 + 1);
	__be32 vtf = htonl(0x60000000 | (__u32)tc << 20);

	memcpy(ip6, &vtf, 4);
	ip6->payload_len = htons(ulen);
	ip6->nexthdr = IPPROTO_UDP;
	ip6->hop_limit = OUTER_TTL;
	memcpy(&ip6->saddr, w->cfg.n3_addr6, 16);
	memcpy(&ip6->daddr, peer, 16);
	u->source = sport;
	u->dest = dport;
	u->len = htons(ulen);
	u->check = 0;
	return u;
}

/* The UDP checksum of n3v6_outer's datagram (u, ulen octets), always computed (RFC 8200 8.1). */
static void n3v6_udp_csum(struct udphdr *u, __u32 ulen)
{
	const struct ipv6hdr *ip6 = (const void *)((const __u8 *)u - sizeof(*ip6));

	u->check = csum_finish_udp(udp6_pseudo_sum(&ip6->saddr, ulen) + csum_buf(u, ulen));
}

/* A GTP-U message back to peer over IPv6, as n3v6_reply builds it (TS 29.281 7.2.2, 7.3.1): IPv6
 * n3_addr6 -> peer (class and flow label 0, hop limit OUTER_TTL) / UDP 2152 -> dport with its
 * checksum / GTP-U S set, TEID 0, sequence seq / ie_len octets of IEs; sent through raw6 (the
 * kernel routes it out of access). 0 or -errno. */
static int reply6_send(struct worker *w, const __u8 *peer, __be16 dport, __u8 type, __be16 seq,
		       const __u8 *ie, __u32 ie_len)
{
	__u8 buf[40 + 20 + 24] = {};
	__u32 ulen = 20 + ie_len;
	struct udphdr *u = n3v6_outer(w, buf, 0, ulen, peer, GTPU_PORT_BE, dport);
	struct gtpu_hdr *g = (void *)(u + 1);
	struct gtpu_opt *o = (void *)(g + 1);

	g->flags = 0x30 | GTP_FLAG_S;
	g->type = type;
	g->length = htons(4 + ie_len);
	o->seq = seq;
	memcpy(o + 1, ie, ie_len);
	n3v6_udp_csum(u, ulen);
	return raw6_send(w, buf, 40 + ulen, peer);
}

/* The address of n3v6_peers entry idx (a downlink half's sgw_addr with PGWU_B_PEER6), NULL when
 * it is empty or out of range. An array a bearer only names once pgwu filled its entry, so a
 * downlink worker remembers what it read for MTU_CACHE_MS (a lookup is a system call); an uplink
 * worker (no w->peer6) reads it each time it answers into an IPv6 tunnel. */
static const __u8 *peer6_of(struct worker *w, __u32 idx)
{
	static const __u8 zero[16];
	struct peer6_slot *s;
	struct pgwu_n3v6_peer p;
	__u64 now;

	if (idx >= PGWU_N3V6_PEERS || S.m.peers6 < 0)
		return NULL;
	if (!w->peer6) {
		/* an uplink worker answering into an IPv6 tunnel (tunnel_error_send): rare, read */
		static __thread __u8 addr[16];

		if (bpf_map_lookup_elem(S.m.peers6, &idx, &p))
			return NULL;
		memcpy(addr, p.addr, 16);
		return memcmp(addr, zero, 16) ? addr : NULL;
	}
	s = &w->peer6[idx];
	now = mono_ns();
	if (!s->at || now - s->at > MTU_CACHE_MS * 1000000ULL) {
		if (bpf_map_lookup_elem(S.m.peers6, &idx, &p))
			memset(&p, 0, sizeof(p));
		memcpy(s->addr, p.addr, 16);
		s->at = now;
	}
	return memcmp(s->addr, zero, 16) ? s->addr : NULL;
}

/*
 * The downlink packet at p (tot_len octets, IPv4 or IPv6 by its version; HEADROOM free before
 * it) of bearer b whose peer is IPv6 (PGWU_B_PEER6), whose checks have passed, as xdp_dl_n3v6
 * encapsulates it: its TTL or hop limit down by one, then IPv6 n3_addr6 -> the peer
 * (n3v6_peers[sgw_addr]), traffic class tc, flow label 0, hop limit OUTER_TTL / UDP sport -> 2152
 * with its checksum always computed over the whole datagram (RFC 8200 8.1: the bearer's or the
 * config's checksum opt-out is for IPv4) / GTP-U G-PDU to the peer's TEID, the PDU Session
 * Container of a bearer with a QFI; queued on raw6 with t (its usage already set). Returns 0 when
 * queued, else the reason: no peer entry or no n3_addr6 drop_no_route, as XDP's.
 */
static __u32 n3v6_encap(struct worker *w, __u8 *p, __u32 tot_len, const struct pgwu_dl_bearer *b,
			__be16 sport, __u8 tc, struct txmeta *t)
{
	const __u8 *peer = peer6_of(w, b->sgw_addr);
	__u32 encap = tunnel_encap_len(b);

	if (!peer || addr6_unset(w->cfg.n3_addr6))
		return PGWU_R_DROP_NO_ROUTE;
	/* an IP hop on SGi: TTL / hop limit down before the tunnel (the sum below sees it) */
	if ((p[0] >> 4) == 4)
		ipv4_decrease_ttl((struct iphdr *)p);
	else
		((struct ipv6hdr *)p)->hop_limit--;
	n3v6_gpdu(w, p - encap, tot_len, b, peer, sport, tc);
	tx_add6(w, p - encap, encap + tot_len, peer, t);
	return 0;
}

/* The headers at o of a G-PDU over IPv6 to bearer b's peer (its inner_len octets follow them):
 * n3v6_outer's / GTP-U G-PDU to the peer's TEID, the DL PDU Session Container of a bearer with a
 * QFI; the UDP checksum over the whole datagram. Returns their length (tunnel_encap_len). */
static __u32 n3v6_gpdu(const struct worker *w, __u8 *o, __u32 inner_len, const struct pgwu_dl_bearer *b,
		       const __u8 *peer, __be16 sport, __u8 tc)
{
	__u8 qfi = gtpu_dl_qfi(b->flags);
	__u32 encap = tunnel_encap_len(b), ulen = inner_len + encap - 40;
	struct udphdr *u = n3v6_outer(w, o, tc, ulen, peer, sport, GTPU_PORT_BE);
	struct gtpu_hdr *g = (void *)(u + 1);

	g->flags = 0x30;
	g->type = GTP_GPDU;
	g->length = htons(inner_len + encap - N3V6_ENCAP_LEN);
	g->teid = b->sgw_teid;
	if (qfi != 0xff) {
		__u8 *x = (void *)(g + 1);

		g->flags = 0x30 | GTP_FLAG_E;
		x[0] = x[1] = x[2] = 0;
		x[3] = GTP_EXT_PDU_SESSION_CONTAINER;
		x[4] = 1;
		x[5] = 0;	/* DL PDU SESSION INFORMATION */
		x[6] = qfi;
		x[7] = 0;
	}
	n3v6_udp_csum(u, ulen);
	return encap;
}

/* The kernel refused a downlink G-PDU over IPv6 (pkt, len octets; its inner packet the last
 * t->usage_bytes) with EMSGSIZE: over the N3 route's MTU (the kernel does not fragment a raw
 * socket's IPv6), as xdp_dl_n3v6: an IPv6 packet drop_too_big, answered with Packet Too Big while
 * the tunnel leaves it >= 1280 octets; an IPv4 one drop_frag_needed, answered with Fragmentation
 * Needed when it has DF (without DF: dropped unanswered, as XDP). *verdict XDP_TX when answered. */
__u32 n3v6_too_big(struct worker *w, __u8 *pkt, __u32 len, const struct txmeta *t, __u32 *verdict)
{
	struct ipv6hdr *o6 = (void *)pkt;
	__u32 encap = len - t->usage_bytes;
	__u8 *inner = pkt + encap;
	int mtu = route6_mtu(o6->daddr.s6_addr);

	*verdict = XDP_DROP;
	if (mtu <= 0 || len <= (__u32)mtu)
		return PGWU_SR_DROP_SEND;
	if ((inner[0] >> 4) == 6) {
		struct ipv6hdr *ip6 = (void *)inner;

		ip6->hop_limit++;	/* quoted as it arrived */
		if (mtu >= ICMP6_MIN_MTU + (int)encap &&
		    !dl6_error(w, ip6, t->usage_bytes, t->usage_bytes, 2, mtu - encap))
			*verdict = XDP_TX;
		return PGWU_R_DROP_TOO_BIG;
	}
	if (t->df)
		dl_frag_needed(w, inner, t, encap, mtu, verdict);
	return PGWU_R_DROP_FRAG_NEEDED;
}

/* An inner IPv4 packet with DF over the access route's mtu once encapsulated (encap octets):
 * Fragmentation Needed to its sender (RFC 1191: the MTU it can have before encapsulation) quoting
 * the packet as it arrived (its TTL not yet decremented); *verdict XDP_TX when answered. Over
 * IPv4 and IPv6 N3 alike. */
void dl_frag_needed(struct worker *w, const __u8 *inner, const struct txmeta *t, __u32 encap, int mtu,
		    __u32 *verdict)
{
	__u8 quote[68];
	struct iphdr *qi = (void *)quote;
	__u32 q = (inner[0] & 0xf) * 4 + 8;

	if (q > t->usage_bytes)
		q = t->usage_bytes;
	memcpy(quote, inner, q);
	qi->ttl++;
	qi->check = 0;
	qi->check = csum_finish(ipv4_hdr_sum(qi, qi->ihl, quote + q));
	if (mtu > (int)encap && !dl_icmp(w, quote, q, 3, 4, mtu - encap))
		*verdict = XDP_TX;
}

/* ---- uplink: one GTP-U message (a UDP payload of n octets) from a peer ---- */

/* Who sent it: an IPv4 peer (peer6 NULL), or over IPv6 (N3 over IPv6: peer6 its address). */
struct ul_src {
	__be32 peer;
	__be16 port;
	const __u8 *peer6;
};

/* Whether nobody may be answered at the sender (martian, martian6) */
static int src_martian(const struct ul_src *src, const struct pgwu_config *cfg)
{
	return src->peer6 ? martian6(src->peer6, cfg) : martian(src->peer, cfg);
}

/* The sender's key in the replies' budget (reply_allowed): its IPv6 address folded to 32 bits */
static __be32 src_budget_key(const struct ul_src *src)
{
	return src->peer6 ? addr6_fold(src->peer6, 4) : src->peer;
}

/* A GTP-U message back to the sender, over the family it came by (reply6_send, reply_send) */
static int src_reply(struct worker *w, const struct ul_src *src, __be16 dport, __u8 type, __be16 seq,
		     const __u8 *ie, __u32 ie_len)
{
	return src->peer6 ? reply6_send(w, src->peer6, dport, type, seq, ie, ie_len) :
			    reply_send(w, src->peer, dport, type, seq, ie, ie_len);
}


/*
 * An IPv6 T-PDU (p to end) of bearer teid, whose G-PDU checks have passed, as xdp_access6 takes
 * it: a TEID without a /64 takes none (drop_inner_not_ipv4); one whole IPv6 packet
 * (drop_inner_bad); its source in the TEID's /64 (drop_spoofed); hop limit > 1 (drop_ttl_expired,
 * answered through the tunnel); a Hop-by-Hop header within it (drop_inner_bad); then the hop
 * limit down by one and the packet sent through raw6 (the kernel routes it: no route is
 * drop_no_route, over the SGi route's MTU drop_too_big, answered with Packet Too Big by
 * tx_refused). Returns the reason when it is not queued (*verdict
 * XDP_TX when answered), 0 when it is.
 */
static __u32 ul6_one(struct worker *w, __u8 *p, __u8 *end, __be32 teid, __u32 flags, int answerable,
		     struct txmeta *t, __u32 *verdict)
{
	struct ipv6hdr *ip6 = (void *)p;
	__u32 inner_len = end - p;
	struct pgwu_ul6 u6;
	__u64 src64;

	*verdict = XDP_DROP;
	if (ul6_bearer(w, teid, &u6))
		return PGWU_R_DROP_INNER_NOT_IPV4;	/* an IPv4-only bearer */
	if (inner_len < sizeof(*ip6) || sizeof(*ip6) + ntohs(ip6->payload_len) != inner_len)
		return PGWU_R_DROP_INNER_BAD;
	memcpy(&src64, &ip6->saddr, 8);
	if (src64 != u6.prefix)
		return PGWU_R_DROP_SPOOFED;
	if (ip6->hop_limit <= 1) {
		if (!ul6_error(w, ip6, inner_len, u6.prefix, answerable, 3, 0))
			*verdict = XDP_TX;
		return PGWU_R_DROP_TTL_EXPIRED;
	}
	if (ipv6_ext_ok(ip6, end))
		return PGWU_R_DROP_INNER_BAD;
	usage6_room(w);
	if (flags & PGWU_B_SDF) {
		__u32 r = sock_pdr_apply(w, teid, PGWU_PFCP_UPLINK, ip6, inner_len, t);

		if (r)
			return r;
	}
	ip6->hop_limit--;
	t->answerable = answerable;	/* over the SGi MTU: Packet Too Big (tx_refused) */
	t->usage = usage6_of(w, teid, USAGE_BEARER6);
	t->usage_bytes = inner_len;
	tx_add6(w, ip6, inner_len, ip6->daddr.s6_addr, t);
	return 0;
}

/*
 * One GTP-U message from src, checked as xdp_access (over IPv4) or xdp_ul_n3v6 (over IPv6) checks
 * it (include/gtpu.h: the same code). Over IPv6 the replies go back over IPv6 (src_reply): Echo
 * Response, Error Indication (its GTP-U Peer Address IE the 16-octet n3_addr6) and Supported
 * Extension Headers Notification, rate-limited per peer folded to 32 bits; signalling counted and
 * recorded in peers6 / sig_rx6 (sig_record); Time Exceeded and Packet Too Big go into the
 * bearer's tunnel, over IPv6 to an IPv6 peer (tunnel_error_send). The outer UDP checksum over
 * IPv6 was verified by the kernel, which drops a zero or wrong one before the socket (Udp6
 * InCsumErrors).
 */
static void ul_gtpu(struct worker *w, __u8 *buf, __u32 n, const struct ul_src *src)
{
	const struct pgwu_config *cfg = &w->cfg;
	__be32 peer = src->peer;
	const __u8 *peer6 = src->peer6;
	struct pgwu_ul_bearer b;
	struct iphdr *iip = NULL;
	struct gtpu_msg m;
	struct txmeta t = { .reason = PGWU_R_UL_FWD, .rx_bytes = n };
	__u8 *end = buf + n, ie[24];
	__u32 reason;

	CTR(w, PGWU_SC_RX_PACKETS)++;
	reason = gtpu_hdr_check(buf, end, end, n + sizeof(struct udphdr), &m);
	if (reason)
		goto drop;
	if (!gtpu_msg_handled(m.gtp->type)) {
		reason = PGWU_R_DROP_GTP_UNKNOWN_MSG;
		goto drop;
	}
	if (m.gtp->type == GTP_ECHO_REQ) {
		if (src_martian(src, cfg)) {
			reason = PGWU_R_DROP_ECHO_BAD_SRC;
			goto drop;
		}
		ie[0] = GTP_IE_RECOVERY;
		ie[1] = cfg->restart_counter;
		if (src_reply(w, src, src->port, GTP_ECHO_RSP, m.seq, ie, 2)) {
			reason = PGWU_SR_DROP_SEND;
			goto drop;
		}
		count(w, PGWU_R_ECHO_REPLY, XDP_TX, n);
		return;
	}
	reason = gtpu_ext_walk(&m, end, end);
	if (reason == PGWU_R_DROP_GTP_EXT_UNSUPPORTED) {
		__u8 known[GTPU_EXT_LIST_IE_LEN];

		/* TS 29.281 7.3.3, over the family it came by */
		if ((cfg->flags & PGWU_CFG_NO_ERR_IND) || src_martian(src, cfg))
			goto drop;
		if (!reply_allowed(w, src_budget_key(src))) {
			EVENT(w, PGWU_EV_SUPP_EXT_RATE_LIMITED);
			goto drop;
		}
		gtpu_ext_list_ie(known);
		if (src_reply(w, src, src->port, GTP_SUPP_EXT_NOTIF, 0, known, sizeof(known)))
			goto drop;
		EVENT(w, PGWU_EV_SUPP_EXT_SENT);
		count(w, reason, XDP_TX, n);
		return;
	}
	if (reason)
		goto drop;
	sig_record(m.gtp->type, m.gtp->teid, m.seq, peer, peer6, m.p, end);
	reason = gtpu_sig_reason(m.gtp->type);
	if (reason) {
		count(w, reason, XDP_DROP, n);
		return;
	}
	if (ul_bearer(w, m.gtp->teid, &b, &t.usage)) {
		__be32 teid = m.gtp->teid;
		int ie_len = 12;

		/* TS 29.281 7.3.1: an Error Indication to the sender, port 2152 */
		reason = PGWU_R_DROP_UNKNOWN_TEID;
		if ((cfg->flags & PGWU_CFG_NO_ERR_IND) || src_martian(src, cfg))
			goto drop;
		if (!reply_allowed(w, src_budget_key(src))) {
			EVENT(w, PGWU_EV_ERR_IND_RATE_LIMITED);
			goto drop;
		}
		ie[0] = GTP_IE_TEID_DATA_I;
		memcpy(ie + 1, &teid, 4);
		ie[5] = GTP_IE_PEER_ADDR;
		ie[6] = 0;
		if (peer6) {
			ie[7] = 16;
			memcpy(ie + 8, cfg->n3_addr6, 16);
			ie_len = 24;
		} else {
			ie[7] = 4;
			memcpy(ie + 8, &cfg->local_addr, 4);
		}
		if (src_reply(w, src, GTPU_PORT_BE, GTP_ERROR_IND, 0, ie, ie_len))
			goto drop;
		EVENT(w, PGWU_EV_ERR_IND_SENT);
		count(w, reason, XDP_TX, n);
		return;
	}
	reason = gpdu_qfi_check(b.flags, m.psc);
	if (!reason && (__u8 *)m.p < end && (*(__u8 *)m.p >> 4) == 6) {
		__u32 verdict;

		reason = ul6_one(w, m.p, end, m.gtp->teid, b.flags, !src_martian(src, cfg), &t, &verdict);
		if (reason)
			count(w, reason, verdict, n);
		return;
	}
	if (!reason)
		reason = gpdu_inner_check(m.p, end, end,
					  !(cfg->flags & PGWU_CFG_NO_INNER_CSUM_CHECK), b.ue_addr, &iip);
	if (reason == PGWU_R_DROP_TTL_EXPIRED && !ul_time_exceeded(w, iip, end, !src_martian(src, cfg))) {
		count(w, reason, XDP_TX, n);
		return;
	}
	if (reason)
		goto drop;
	t.usage_bytes = end - (__u8 *)iip;
	if (b.flags & PGWU_B_SDF) {
		usage6_room(w);
		reason = sock_pdr_apply(w, m.gtp->teid, PGWU_PFCP_UPLINK, iip, t.usage_bytes, &t);
		if (reason)
			goto drop;
	}
	ipv4_decrease_ttl(iip);
	tx_add(w, iip, t.usage_bytes, iip->daddr, &t);
	return;
drop:
	count(w, reason, XDP_DROP, n);
}

void ul_one(struct worker *w, __u8 *buf, __u32 n, const struct sockaddr_in *from)
{
	struct ul_src src = { .peer = from->sin_addr.s_addr, .port = from->sin_port };

	ul_gtpu(w, buf, n, &src);
}

/* A G-PDU or GTP-U message over IPv6: from the UDP socket on [n3_addr6]:2152 (udp6_open). */
void ul6n3_one(struct worker *w, __u8 *buf, __u32 n, const struct sockaddr_in6 *from)
{
	struct ul_src src = { .port = from->sin6_port, .peer6 = from->sin6_addr.s6_addr };

	ul_gtpu(w, buf, n, &src);
}


/* ---- downlink: one IP packet of n octets at p, HEADROOM free before it ---- */

/*
 * An IPv6 packet on SGi, as xdp_sgi6 takes it: link-local and multicast destinations and Neighbor
 * Discovery are the kernel's (pass_not_ue); a /64 without a bearer is drop_unknown_ue; hop limit
 * <= 1 is drop_ttl_expired, answered with Time Exceeded; else the hop limit goes down by one and
 * the packet is encapsulated as an IPv4 one is (gtpu.h), the Traffic Class as the outer TOS, the
 * outer source port from its flow (pgwu_sport_of over the addresses folded to a word each), no
 * DF (the kernel fragments the outer packet over the access MTU when the tunnel leaves < 1280;
 * over it, drop_too_big answered with Packet Too Big), the usage added to the /64's
 * dl6_bearers entry.
 */
static void dl6_one(struct worker *w, __u8 *p, __u32 n)
{
	const struct pgwu_config *cfg = &w->cfg;
	struct ipv6hdr *ip6 = (void *)p;
	struct txmeta t = { .reason = PGWU_R_DL_FWD, .rx_bytes = n };
	struct pgwu_dl_bearer b;
	struct gtpu_encap e;
	struct iphdr *oip;
	__u32 tot_len, plen, reason = PGWU_R_DROP_BAD_IP_DL, encap, s0, d0, l4 = 0, w32[8];
	const __u8 *d8 = ip6->daddr.s6_addr;
	__u64 prefix, isum = 0;
	__u8 nexthdr;
	int csum_on;

	if (n < sizeof(*ip6) || ip6->version != 6)
		goto drop;
	plen = ntohs(ip6->payload_len);
	tot_len = sizeof(*ip6) + plen;
	if (tot_len > n)
		goto drop;
	nexthdr = ip6->nexthdr;
	if (d8[0] == 0xff || (d8[0] == 0xfe && (d8[1] & 0xc0) == 0x80) ||
	    (nexthdr == IPPROTO_ICMPV6 && n > sizeof(*ip6) && p[40] >= 133 && p[40] <= 137)) {
		count(w, PGWU_R_PASS_NOT_UE, XDP_PASS, n);
		return;
	}
	memcpy(&prefix, d8, 8);
	reason = PGWU_R_DROP_UNKNOWN_UE;
	if (dl6_bearer(w, prefix, &b))
		goto drop;
	reason = PGWU_R_DROP_TTL_EXPIRED;
	if (ip6->hop_limit <= 1) {
		if (dl6_error(w, ip6, tot_len, n, 3, 0))
			goto drop;
		count(w, reason, XDP_TX, n);
		return;
	}
	/* RFC 4443 3.2, as xdp_sgi6: over the access route's MTU once encapsulated while the tunnel
	 * leaves >= 1280 octets: Packet Too Big with that MTU less the encapsulation (under 1280
	 * the outer packet leaves without DF and the kernel fragments it). A packet of 1280 octets
	 * or less never is. */
	encap = gtpu_encap_len(gtpu_dl_qfi(b.flags));
	if (tot_len > ICMP6_MIN_MTU && !(b.flags & PGWU_B_PEER6)) {
		int mtu = access_mtu(w, b.sgw_addr);

		if (mtu >= ICMP6_MIN_MTU + (int)encap && tot_len + encap > (__u32)mtu) {
			reason = PGWU_R_DROP_TOO_BIG;
			if (dl6_error(w, ip6, tot_len, n, 2, mtu - encap))
				goto drop;
			count(w, reason, XDP_TX, n);
			return;
		}
	}
	usage6_room(w);
	if (b.flags & PGWU_B_SDF) {
		reason = sock_pdr_apply(w, b.local_teid, PGWU_PFCP_DOWNLINK, ip6, tot_len, &t);
		if (reason)
			goto drop;
	}
	memcpy(w32, &ip6->saddr, 32);
	s0 = w32[0] ^ w32[1] ^ w32[2] ^ w32[3];
	d0 = w32[4] ^ w32[5] ^ w32[6] ^ w32[7];
	if ((nexthdr == IPPROTO_TCP || nexthdr == IPPROTO_UDP) && tot_len >= sizeof(*ip6) + 4)
		memcpy(&l4, p + sizeof(*ip6), 4);
	e.sport = cfg->flags & PGWU_CFG_SPORT_FIXED ? GTPU_PORT_BE :
		  htons(pgwu_sport_of(s0, d0, l4, nexthdr));
	e.tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
	if (b.flags & PGWU_B_PEER6) {
		/* N3 over IPv6: sgw_addr is the peer's n3v6_peers index */
		t.usage = usage6_of(w, prefix, USAGE_BEARER6);
		t.usage_bytes = tot_len;
		reason = n3v6_encap(w, p, tot_len, &b, e.sport, e.tos, &t);
		if (reason)
			goto drop;
		return;
	}
	encap_to(&e, cfg, &b);
	e.inner_len = tot_len;
	e.df = 0;
	encap = gtpu_encap_len(e.qfi);
	/* an IP hop on SGi: the hop limit goes down before the packet enters the tunnel */
	ip6->hop_limit--;
	csum_on = gtpu_dl_csum_on(b.flags, cfg->flags);
	if (csum_on) {
		/* the inner packet's sum, as xdp_sgi6's: its fixed header, then the payload's from
		 * its own checksum where that covers it (TCP, UDP with one, ICMPv6: each sums to the
		 * negated pseudo header, RFC 8200 8.1), else summed */
		int trusted = (nexthdr == IPPROTO_TCP && plen >= 20) ||
			      (nexthdr == IPPROTO_ICMPV6 && plen >= 4) ||
			      (nexthdr == IPPROTO_UDP && plen >= 8 && (p[46] | p[47]));

		isum = csum_buf(ip6, sizeof(*ip6));
		if (trusted)
			isum += csum_neg(htons((__u16)plen) + htons(nexthdr) + csum_buf(&ip6->saddr, 32));
		else
			isum += csum_buf(p + sizeof(*ip6), plen);
	}
	oip = (void *)(p - encap);
	reason = PGWU_R_DROP_ADJUST;	/* never: HEADROOM holds the outer headers */
	if (!gtpu_encap_write(oip, p + tot_len, &e) ||
	    (csum_on && !gtpu_encap_csum(oip, p + tot_len, e.qfi, isum)))
		goto drop;
	t.usage = usage6_of(w, prefix, USAGE_BEARER6);
	t.usage_bytes = tot_len;
	tx_add(w, oip, encap + tot_len, b.sgw_addr, &t);
	return;
drop:
	count(w, reason, XDP_DROP, n);
}

void dl_one(struct worker *w, __u8 *p, __u32 n, __be16 proto)
{
	const struct pgwu_config *cfg = &w->cfg;
	struct iphdr *ip = (void *)p, *oip;
	struct txmeta t = { .reason = PGWU_R_DL_FWD, .rx_bytes = n };
	struct pgwu_dl_bearer b;
	struct gtpu_encap e;
	__u32 ihl_len, tot_len, reason = PGWU_R_DROP_BAD_IP_DL, encap;
	__u64 isum = 0;
	int csum_on;

	CTR(w, PGWU_SC_RX_PACKETS)++;
	if (proto == htons(ETH_P_IPV6)) {	/* xdp_sgi hands these to xdp_sgi6 */
		dl6_one(w, p, n);
		return;
	}
	/* xdp_sgi's prologue: an IPv4 header whose IHL and total length fit in what was read */
	if (n < sizeof(*ip) || ip->version != 4 || ip->ihl < 5)
		goto drop;
	ihl_len = ip->ihl * 4;
	tot_len = ntohs(ip->tot_len);
	if (ihl_len > n || tot_len < ihl_len || tot_len > n)
		goto drop;
	if ((ip->daddr & cfg->ue_pool_mask) != cfg->ue_pool_addr) {
		count(w, PGWU_R_PASS_NOT_UE, XDP_PASS, n);
		return;
	}
	reason = PGWU_R_DROP_UNKNOWN_UE;
	if (dl_bearer(w, ip->daddr, &b, &t.usage))
		goto drop;
	reason = PGWU_R_DROP_TTL_EXPIRED;
	if (ip->ttl <= 1) {
		if (dl_icmp(w, p, ihl_len + 8 < tot_len ? ihl_len + 8 : tot_len, 11, 0, 0))
			goto drop;
		count(w, reason, XDP_TX, n);
		return;
	}
	if (b.flags & PGWU_B_SDF) {
		usage6_room(w);
		reason = sock_pdr_apply(w, b.local_teid, PGWU_PFCP_DOWNLINK, ip, tot_len, &t);
		if (reason)
			goto drop;
	}
	e.sport = gtpu_dl_sport(ip, ihl_len, tot_len, p + tot_len, cfg->flags);
	if (b.flags & PGWU_B_PEER6) {
		/* N3 over IPv6: sgw_addr is the peer's n3v6_peers index */
		t.usage_bytes = tot_len;
		t.df = !!(ip->frag_off & htons(0x4000));
		reason = n3v6_encap(w, p, tot_len, &b, e.sport, ip->tos, &t);
		if (reason)
			goto drop;
		return;
	}
	encap_to(&e, cfg, &b);
	e.inner_len = tot_len;
	e.tos = ip->tos;
	e.df = !!(ip->frag_off & htons(0x4000));
	encap = gtpu_encap_len(e.qfi);
	ipv4_decrease_ttl(ip);
	csum_on = gtpu_dl_csum_on(b.flags, cfg->flags);
	if (csum_on && gtpu_inner_sum(ip, ihl_len, tot_len, p + tot_len, &isum))
		isum += csum_buf(p + ihl_len, tot_len - ihl_len);
	oip = (void *)(p - encap);
	reason = PGWU_R_DROP_ADJUST;	/* never: HEADROOM holds the outer headers */
	if (!gtpu_encap_write(oip, p + tot_len, &e) ||
	    (csum_on && !gtpu_encap_csum(oip, p + tot_len, e.qfi, isum)))
		goto drop;
	t.usage_bytes = tot_len;
	t.df = e.df;
	tx_add(w, oip, encap + tot_len, b.sgw_addr, &t);
	return;
drop:
	count(w, reason, XDP_DROP, n);
}

/* ---- --measure-lookups: the direct index through mmap against the hash map's system call ---- */

int measure_lookups(__u32 n, bool json)
{
	struct worker w = { .st = calloc(PGWU_SOCK_THREAD_WORDS, 8) };
	struct pgwu_ul_bearer *vals = NULL, b;
	__u32 *keys = NULL, *pick = NULL, x = 2463534242U;
	__u64 t0, t1, t2, indexed = 0, found = 0, *usage;
	size_t nk = 0;
	int err;

	err = map_dump(S.m.ul, sizeof(*keys), sizeof(*vals), (void **)&keys, (void **)&vals, &nk);
	if (err)
		goto out;
	if (!nk) {
		fprintf(stderr, "no bearers installed: nothing to look up (pgwu session load FILE)\n");
		err = -ENOENT;
		goto out;
	}
	pick = malloc(n * sizeof(*pick));
	if (!pick || !w.st) {
		err = -ENOMEM;
		goto out;
	}
	for (__u32 i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		pick[i] = keys[x % nk];
	}
	t0 = mono_ns();
	for (__u32 i = 0; i < n; i++)
		indexed += !ul_bearer(&w, pick[i], &b, &usage) && usage;
	t1 = mono_ns();
	for (__u32 i = 0; i < n; i++)
		found += !bpf_map_lookup_elem(S.m.ul, &pick[i], &b);
	t2 = mono_ns();
	if (json)
		printf("{\"lookups\": %u, \"bearers\": %zu, \"indexed\": %llu, \"found\": %llu, "
		       "\"slot_ns\": %.1f, \"hash_syscall_ns\": %.1f}\n", n, nk,
		       (unsigned long long)indexed, (unsigned long long)found, (t1 - t0) / (double)n,
		       (t2 - t1) / (double)n);
	else
		printf("%u lookups of random TEIDs among %zu bearers (%llu found in the direct index, "
		       "%llu in the hash map):\n"
		       "  direct index through mmap (the packet path): %8.1f ns a lookup\n"
		       "  hash map, bpf(BPF_MAP_LOOKUP_ELEM):          %8.1f ns a lookup\n", n, nk,
		       (unsigned long long)indexed, (unsigned long long)found, (t1 - t0) / (double)n,
		       (t2 - t1) / (double)n);
out:
	free(keys);
	free(vals);
	free(pick);
	free(w.st);
	return err;
}
