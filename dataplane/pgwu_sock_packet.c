// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pgwu_sock_packet.c: one packet through `pgwu socket` (pgwu_sock.c): an uplink GTP-U message
 * (ul_one: checked as xdp_access checks it, include/gtpu.h), a downlink IPv4 packet (dl_one:
 * encapsulated as xdp_sgi encapsulates it), the replies both send (Echo Response, Error
 * Indication, Supported Extension Headers Notification, ICMP), the signalling recorded as
 * xdp_access records it; the bearers through the mmap()ed direct index, and --measure-lookups,
 * which times that lookup against the hash map's system call. What it forwards it queues
 * (tx_add, pgwu_sock_batch.c sends the batch).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
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

/* RFC 1812 5.3.1: Time Exceeded to the UE whose uplink packet iip expired, through its tunnel (a
 * G-PDU to its SGW, UDP 2152 -> 2152 checksum 0, its PDU Session Container when it has a QFI), as
 * xdp_access does. Rate-limited per UE. 0 when sent. */
static int ul_time_exceeded(struct worker *w, const struct iphdr *iip, const __u8 *end, __be32 peer)
{
	const struct pgwu_config *cfg = &w->cfg;
	__u8 buf[44 + 28 + 68];
	struct pgwu_dl_bearer dl;
	struct gtpu_encap e;
	__u32 q = iip->ihl * 4 + 8, n;
	__u64 *usage;

	if ((cfg->flags & PGWU_CFG_NO_ERR_IND) || martian(peer, cfg) ||
	    dl_bearer(w, iip->saddr, &dl, &usage))
		return -1;
	if (!reply_allowed(w, iip->saddr)) {
		EVENT(w, PGWU_EV_ICMP_RATE_LIMITED);
		return -1;
	}
	if (q > (__u32)(end - (const __u8 *)iip))
		q = end - (const __u8 *)iip;
	e.qfi = gtpu_dl_qfi(dl.flags);
	n = icmp_build(buf + gtpu_encap_len(e.qfi), cfg->local_addr, iip->saddr, 11, 0, 0,
		       (const __u8 *)iip, q);
	e.saddr = cfg->local_addr;
	e.daddr = dl.sgw_addr;
	e.teid = dl.sgw_teid;
	e.sport = GTPU_PORT_BE;
	e.id = 0;
	e.inner_len = n;
	e.tos = 0;
	e.df = 0;
	if (!gtpu_encap_write((void *)buf, buf + gtpu_encap_len(e.qfi) + n, &e) ||
	    raw_send(w, buf, gtpu_encap_len(e.qfi) + n, dl.sgw_addr))
		return -1;
	EVENT(w, PGWU_EV_ICMP_TIME_EXCEEDED_SENT);
	return 0;
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

/* ---- signalling, recorded as xdp_access records it (system calls: signalling is rare) ---- */

static void peer_echo_response(__be32 peer, __be16 seq, const __u8 *ie, const __u8 *end)
{
	struct pgwu_peer p = {};
	int has_rc = ie + 2 <= end && ie[0] == GTP_IE_RECOVERY;
	__u8 rc = has_rc ? ie[1] : 0;
	bool known = S.peers >= 0 && !bpf_map_lookup_elem(S.peers, &peer, &p);

	if (S.peers < 0)
		return;
	if (known && has_rc && p.has_recovery && p.restart_counter != rc)
		p.restarts++;
	p.rsp_ns = mono_ns();
	p.responses++;
	p.rsp_seq = ntohs(seq);
	p.restart_counter = rc;
	p.has_recovery = has_rc;
	bpf_map_update_elem(S.peers, &peer, &p, BPF_ANY);
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

/* ---- uplink: one GTP-U message (a UDP payload of n octets) from `from` ---- */

void ul_one(struct worker *w, __u8 *buf, __u32 n, const struct sockaddr_in *from)
{
	const struct pgwu_config *cfg = &w->cfg;
	__be32 peer = from->sin_addr.s_addr;
	struct pgwu_ul_bearer b;
	struct iphdr *iip = NULL;
	struct gtpu_msg m;
	struct txmeta t = { .reason = PGWU_R_UL_FWD, .rx_bytes = n };
	__u8 *end = buf + n, ie[16];
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
		if (martian(peer, cfg)) {
			reason = PGWU_R_DROP_ECHO_BAD_SRC;
			goto drop;
		}
		ie[0] = GTP_IE_RECOVERY;
		ie[1] = cfg->restart_counter;
		if (reply_send(w, peer, from->sin_port, GTP_ECHO_RSP, m.seq, ie, 2)) {
			reason = PGWU_SR_DROP_SEND;
			goto drop;
		}
		count(w, PGWU_R_ECHO_REPLY, XDP_TX, n);
		return;
	}
	reason = gtpu_ext_walk(&m, end, end);
	if (reason == PGWU_R_DROP_GTP_EXT_UNSUPPORTED) {
		__u8 known[GTPU_EXT_LIST_IE_LEN];

		if ((cfg->flags & PGWU_CFG_NO_ERR_IND) || martian(peer, cfg))
			goto drop;
		if (!reply_allowed(w, peer)) {
			EVENT(w, PGWU_EV_SUPP_EXT_RATE_LIMITED);
			goto drop;
		}
		gtpu_ext_list_ie(known);
		if (reply_send(w, peer, from->sin_port, GTP_SUPP_EXT_NOTIF, 0, known,
			       sizeof(known)))
			goto drop;
		EVENT(w, PGWU_EV_SUPP_EXT_SENT);
		count(w, reason, XDP_TX, n);
		return;
	}
	if (reason)
		goto drop;
	switch (m.gtp->type) {
	case GTP_ECHO_RSP:
		peer_echo_response(peer, m.seq, m.p, end);
		break;
	case GTP_ERROR_IND: {
		__be32 teid, addr;

		if (gtpu_err_ind_ies(m.p, end, end, peer, &teid, &addr))
			sig_count(teid, addr, GTP_ERROR_IND, peer);
		break;
	}
	case GTP_END_MARKER:
		sig_count(m.gtp->teid, peer, GTP_END_MARKER, peer);
		break;
	}
	reason = gtpu_sig_reason(m.gtp->type);
	if (reason) {
		count(w, reason, XDP_DROP, n);
		return;
	}
	if (ul_bearer(w, m.gtp->teid, &b, &t.usage)) {
		__be32 teid = m.gtp->teid;

		/* TS 29.281 7.3.1: an Error Indication to the sender, port 2152 */
		reason = PGWU_R_DROP_UNKNOWN_TEID;
		if ((cfg->flags & PGWU_CFG_NO_ERR_IND) || martian(peer, cfg))
			goto drop;
		if (!reply_allowed(w, peer)) {
			EVENT(w, PGWU_EV_ERR_IND_RATE_LIMITED);
			goto drop;
		}
		ie[0] = GTP_IE_TEID_DATA_I;
		memcpy(ie + 1, &teid, 4);
		ie[5] = GTP_IE_PEER_ADDR;
		ie[6] = 0;
		ie[7] = 4;
		memcpy(ie + 8, &cfg->local_addr, 4);
		if (reply_send(w, peer, GTPU_PORT_BE, GTP_ERROR_IND, 0, ie, 12))
			goto drop;
		EVENT(w, PGWU_EV_ERR_IND_SENT);
		count(w, reason, XDP_TX, n);
		return;
	}
	reason = gpdu_qfi_check(b.flags, m.psc);
	if (!reason)
		reason = gpdu_inner_check(m.p, end, end,
					  !(cfg->flags & PGWU_CFG_NO_INNER_CSUM_CHECK), b.ue_addr, &iip);
	if (reason == PGWU_R_DROP_TTL_EXPIRED && !ul_time_exceeded(w, iip, end, peer)) {
		count(w, reason, XDP_TX, n);
		return;
	}
	if (reason)
		goto drop;
	ipv4_decrease_ttl(iip);
	t.usage_bytes = end - (__u8 *)iip;
	tx_add(w, iip, t.usage_bytes, iip->daddr, &t);
	return;
drop:
	count(w, reason, XDP_DROP, n);
}

/* ---- downlink: one IPv4 packet of n octets at p, HEADROOM free before it ---- */

void dl_one(struct worker *w, __u8 *p, __u32 n)
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
	e.sport = gtpu_dl_sport(ip, ihl_len, tot_len, p + tot_len, cfg->flags);
	e.qfi = gtpu_dl_qfi(b.flags);
	e.saddr = cfg->local_addr;
	e.daddr = b.sgw_addr;
	e.teid = b.sgw_teid;
	e.id = 0;			/* the kernel picks the id of a packet without DF */
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
