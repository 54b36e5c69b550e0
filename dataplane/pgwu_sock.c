// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pgwu_sock.c: `pgwu socket`, the PGW-U on Linux sockets, beside the XDP one: how fast can a
 * gateway go with what every Linux host has? Written as the classic receive experiments are: one
 * file, every knob a flag, counters per second per thread, the kernel's drop counters beside its
 * own (docs/socket.md).
 *
 *   uplink    G-PDUs on UDP GTP-ADDR:2152 (bound to the access interface), one socket per
 *             worker thread in an SO_REUSEPORT group, or one socket all of them read; checked as
 *             xdp_access checks them (include/gtpu.h: the same code), the inner packet (TTL - 1)
 *             sent to SGi through a raw socket (IP_HDRINCL): the kernel routes it.
 *   downlink  IPv4 packets on SGi read with a packet socket (a tap: SOCK_DGRAM, every protocol,
 *             IPv4 kept by a filter), one per worker in a PACKET_FANOUT group, or one for all;
 *             packets for the UE pool are encapsulated as xdp_sgi encapsulates them (gtpu.h:
 *             source port from the inner flow, QFI, checksum or its opt-out) and sent to the SGW
 *             through the raw socket. A tap is served before tc ingress: a tc filter there should drop the UE
 *             pool's packets, else the kernel's own stack handles them too (and, with no route,
 *             answers them as unroutable; a blackhole route silences that, but the stack still
 *             parses them: a bad header is then counted twice).
 *
 * Bearers: from the tables `pgwu session` and `pgwu pfcp` write, read without a system call per
 * packet: the direct index (ul_slots, dl_slots: BPF_F_MMAPABLE arrays, one cache line a bearer) is
 * mmap()ed, read as the XDP programs read it (state, key, copy, state again), usage added with
 * atomic adds; only a bearer whose slot holds another key is looked up in the hash map (a system
 * call, counted: hash_lookups). `--measure-lookups N` measures both ways on the installed bearers.
 * The config is read every CONFIG_MS by the main thread and handed to the workers (seqlock).
 *
 * Counters: sock_stats (pgwu_sock.h), created and pinned in PIN_DIR, mmap()ed, one block per
 * thread; `pgwu stats` and `pgwu metrics` show them. The main thread folds the kernel's drops at
 * each socket (SO_MEMINFO, PACKET_STATISTICS) into them every TICK_MS and prints, every
 * --interval, per thread and direction: packets read, forwarded, dropped, and the kernel's own
 * counters (/proc/net/snmp Udp RcvbufErrors InErrors, /proc/net/softnet_stat per CPU).
 *
 * Replies as the XDP path sends them (Echo Response, Error Indication, Supported Extension Headers
 * Notification, ICMP Time Exceeded both ways, Fragmentation Needed), through the raw socket, rate-
 * limited per peer and per worker. Not done here (the XDP path does them): egress VLAN tags and
 * static next hops (the kernel routes), an
 * 802.1Q-tagged G-PDU on access (the kernel drops it without a VLAN device), per-bearer usage of
 * bearers outside the direct index. Outer fragments need no `pgwu reassemble`: the kernel
 * reassembles them for the UDP socket (the two cannot run at once: both bind port 2152).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/ethtool.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/sock_diag.h>
#include <linux/sockios.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "pgwu_cli.h"
#include "pgwu_sock.h"
#include "pgwu_daemon.h"
#include "gtpu.h"

#define TICK_MS 50		/* main thread: drops folded, CPUs read; workers: receive timeout */
#define CONFIG_MS 200		/* the config re-read */
#define HEADROOM 64		/* before a downlink packet: room for the outer headers (44) */
#define BUF_LEN 16384		/* a receive buffer: a G-PDU or IP packet (jumbo frames included) */
#define BUF_LEN_GRO 65536	/* with UDP GRO: up to 64 G-PDUs in one datagram */
#define TX_MAX 1024		/* packets a worker queues before it sends them */
#define BUDGET_SLOTS 1024	/* peers a worker remembers for its reply budget */
#define MAX_BATCH 1024

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef SO_PREFER_BUSY_POLL
#define SO_PREFER_BUSY_POLL 69
#endif
#ifndef SO_BUSY_POLL_BUDGET
#define SO_BUSY_POLL_BUDGET 70
#endif

static const char *const fanout_names[] = { "hash", "lb", "cpu", "qm", NULL };
static const int fanout_modes[] = { PACKET_FANOUT_HASH, PACKET_FANOUT_LB, PACKET_FANOUT_CPU,
				    PACKET_FANOUT_QM };

enum dir { UL = 0, DL = 1 };

/* What a queued packet is, for its counters once the kernel has taken it or not. */
struct txmeta {
	__u32 reason;		/* PGWU_R_UL_FWD / PGWU_R_DL_FWD */
	__u32 rx_bytes;		/* as read: counted with its fate */
	__u32 usage_bytes;	/* the bearer's usage: the inner packet's length */
	__u32 df;		/* downlink: the inner packet had DF (EMSGSIZE: drop_frag_needed) */
	__u64 *usage;		/* the bearer's slot counters {packets, bytes}, NULL: not indexed */
};

struct budget {
	__be32 peer;
	__u64 tat;		/* GCRA theoretical arrival time, CLOCK_MONOTONIC ns */
};

struct worker {
	int id;
	enum dir dir;
	pthread_t th;
	int rx;			/* UDP socket (uplink) or packet socket (downlink); maybe shared */
	int raw;		/* IPPROTO_RAW: everything this worker sends */
	int frag;		/* downlink without DF over the access MTU: a raw UDP socket the
				 * kernel fragments for (opened on first use), -1 */
	__u64 *st;		/* its block in sock_stats */
	struct pgwu_config cfg;
	__u32 cfg_seq;
	/* receive */
	int batch, buf_len;
	__u8 *bufs;
	struct mmsghdr *msgs;
	struct iovec *iov;
	struct sockaddr_in *from;
	char (*cmsg)[CMSG_SPACE(sizeof(int))];
	/* send */
	struct mmsghdr tmsg[TX_MAX];
	struct iovec tiov[TX_MAX];
	struct sockaddr_in tto[TX_MAX];
	struct txmeta tmeta[TX_MAX];
	int ntx;
	struct budget budget[BUDGET_SLOTS];
};

struct sock_knobs {
	int threads, batch, reuseport, gro, busy_poll, prefer_busy_poll, busy_poll_budget;
	int rcvbuf, sndbuf, fanout, rt_priority, interval_ms, json;
	int cpus[CPU_SETSIZE], ncpus;
};

/* The process: maps, counters, the config the workers copy. */
static struct {
	struct pgwu_maps m;
	int peers, sig_rx;		/* signalling recorded as xdp_access records it; -1: absent */
	int st_fd;
	__u64 *st;			/* sock_stats, mmap()ed */
	size_t st_len;
	__u32 cfg_seq;			/* odd while the main thread writes cfg */
	struct pgwu_config cfg;
	struct sock_knobs k;
	int access_ifindex, sgi_ifindex;
	struct worker *w[2 * PGWU_SOCK_MAX_THREADS];
	int nw;
	__u32 owner;			/* --owner: stop when this pid ends; 0: none */
	int owner_fd;			/* its pidfd; -1: none (or no pidfd_open: kill(owner, 0)) */
} S;

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	stop = 1;
}

static __u64 mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (__u64)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* ---- counters ---- */

static inline void count(struct worker *w, __u32 reason, __u32 verdict, __u32 bytes)
{
	__u64 *c = w->st + (reason * PGWU_VERDICT_MAX + verdict) * 2;

	c[0]++;
	c[1] += bytes;
}

#define CTR(w, c) ((w)->st[PGWU_SOCK_CTR_OFF + (c)])
#define EVENT(w, e) ((w)->st[PGWU_SOCK_EV_OFF + (e)]++)

/* ---- the config, from the main thread to the workers (a seqlock) ---- */

static void cfg_publish(const struct pgwu_config *c)
{
	__atomic_store_n(&S.cfg_seq, S.cfg_seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	S.cfg = *c;
	__atomic_store_n(&S.cfg_seq, S.cfg_seq + 1, __ATOMIC_RELEASE);
}

static void cfg_sync(struct worker *w)
{
	__u32 s = __atomic_load_n(&S.cfg_seq, __ATOMIC_ACQUIRE);

	if (s == w->cfg_seq)
		return;
	do {
		s = __atomic_load_n(&S.cfg_seq, __ATOMIC_ACQUIRE);
		if (s & 1)
			continue;
		w->cfg = S.cfg;
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
	} while (__atomic_load_n(&S.cfg_seq, __ATOMIC_RELAXED) != s);
	w->cfg_seq = s;
}

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

/* ---- sending ---- */

static void tx_add(struct worker *w, void *pkt, __u32 len, __be32 to, const struct txmeta *meta);
static int dl_icmp(struct worker *w, const __u8 *q, __u32 qlen, __u8 type, __u8 code, __u16 mtu);
static int route_mtu(__be32 dst);

/* The kernel refused packet i: why, as a reason (*verdict XDP_TX when it was answered); a downlink
 * packet without DF over the access MTU goes again through the socket that fragments (the kernel's
 * IP output fragments it), one with DF is answered with Fragmentation Needed. */
static __u32 tx_refused(struct worker *w, int i, int err, __u32 *verdict)
{
	const struct txmeta *t = &w->tmeta[i];

	*verdict = XDP_DROP;
	if (err == EMSGSIZE && t->reason == PGWU_R_DL_FWD) {
		struct iphdr *oip = w->tiov[i].iov_base;
		char cbuf[CMSG_SPACE(sizeof(int))] = {};
		struct iovec iov = { (__u8 *)oip + 20, w->tiov[i].iov_len - 20 };
		struct msghdr mh = { .msg_name = &w->tto[i], .msg_namelen = sizeof(w->tto[i]),
				     .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
				     .msg_controllen = sizeof(cbuf) };
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		int tos = oip->tos;

		if (t->df) {
			/* RFC 1191: the MTU the packet can have before encapsulation; the quote is
			 * the packet as it arrived (its TTL not yet decremented) */
			__u32 encap = w->tiov[i].iov_len - t->usage_bytes, q;
			__u8 *inner = (__u8 *)oip + encap, quote[68];
			struct iphdr *qi = (void *)quote;
			int mtu = route_mtu(oip->daddr);

			q = (inner[0] & 0xf) * 4 + 8;
			if (q > t->usage_bytes)
				q = t->usage_bytes;
			memcpy(quote, inner, q);
			qi->ttl++;
			qi->check = 0;
			qi->check = csum_finish(ipv4_hdr_sum(qi, qi->ihl, quote + q));
			if (mtu > (int)encap && !dl_icmp(w, quote, q, 3, 4, mtu - encap))
				*verdict = XDP_TX;
			return PGWU_R_DROP_FRAG_NEEDED;
		}
		if (w->frag < 0) {
			/* a raw UDP socket "connected" to an address nothing comes from: it
			 * receives nothing (raw sockets get a copy of every datagram of their
			 * protocol otherwise); the kernel writes the IP header and fragments */
			struct sockaddr_in none = { .sin_family = AF_INET,
						    .sin_addr.s_addr = htonl(0x7f000002) };
			struct sockaddr_in me = { .sin_family = AF_INET,
						  .sin_addr.s_addr = oip->saddr };
			int off = IP_PMTUDISC_DONT, ttl = OUTER_TTL, one = 1;

			w->frag = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_UDP);
			if (w->frag < 0 || bind(w->frag, (struct sockaddr *)&me, sizeof(me)) ||
			    connect(w->frag, (struct sockaddr *)&none, sizeof(none)) ||
			    setsockopt(w->frag, IPPROTO_IP, IP_MTU_DISCOVER, &off, sizeof(off)) ||
			    setsockopt(w->frag, IPPROTO_IP, IP_TTL, &ttl, sizeof(ttl)) ||
			    setsockopt(w->frag, IPPROTO_IP, IP_RECVERR, &one, sizeof(one))) {
				if (w->frag >= 0)
					close(w->frag);
				w->frag = -1;
				return PGWU_SR_DROP_SEND;
			}
		}
		c->cmsg_level = IPPROTO_IP;
		c->cmsg_type = IP_TOS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &tos, sizeof(int));
		CTR(w, PGWU_SC_TX_CALLS)++;
		if (sendmsg(w->frag, &mh, 0) >= 0) {
			*verdict = XDP_REDIRECT;
			return PGWU_R_DL_FWD;
		}
		err = errno;
	}
	switch (err) {
	case ENOBUFS:
	case EAGAIN:
		return PGWU_SR_DROP_TX_FULL;
	case ENETUNREACH:
	case EHOSTUNREACH:
	case ENETDOWN:
		return PGWU_R_DROP_NO_ROUTE;
	default:
		return PGWU_SR_DROP_SEND;
	}
}

static void tx_done(struct worker *w, int i, __u32 reason, __u32 verdict)
{
	const struct txmeta *t = &w->tmeta[i];

	if (reason != t->reason) {
		count(w, reason, verdict, t->rx_bytes);
		return;
	}
	count(w, reason, XDP_REDIRECT, t->rx_bytes);
	if (t->usage) {
		__atomic_fetch_add(&t->usage[0], 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&t->usage[1], t->usage_bytes, __ATOMIC_RELAXED);
	}
}

/* Send what is queued: sendmmsg (sendto with --batch 1); a refused packet is counted, skipped. */
static void tx_flush(struct worker *w)
{
	int i = 0, r;

	while (i < w->ntx) {
		CTR(w, PGWU_SC_TX_CALLS)++;
		if (w->batch == 1)
			r = sendto(w->raw, w->tiov[i].iov_base, w->tiov[i].iov_len, 0,
				   (struct sockaddr *)&w->tto[i], sizeof(w->tto[i])) < 0 ? -1 : 1;
		else
			r = sendmmsg(w->raw, w->tmsg + i, w->ntx - i, 0);
		if (r > 0) {
			for (int j = i; j < i + r; j++)
				tx_done(w, j, w->tmeta[j].reason, XDP_REDIRECT);
			i += r;
			continue;
		}
		if (errno == EINTR)
			continue;
		{
			__u32 verdict, reason = tx_refused(w, i, errno, &verdict);

			tx_done(w, i, reason, verdict);
		}
		i++;
	}
	w->ntx = 0;
}

static void tx_add(struct worker *w, void *pkt, __u32 len, __be32 to, const struct txmeta *meta)
{
	int i;

	if (w->ntx == TX_MAX)
		tx_flush(w);
	i = w->ntx++;
	w->tiov[i].iov_base = pkt;
	w->tiov[i].iov_len = len;
	w->tto[i].sin_addr.s_addr = to;
	w->tmeta[i] = *meta;
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
static int dl_icmp(struct worker *w, const __u8 *q, __u32 qlen, __u8 type, __u8 code, __u16 mtu)
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
static int route_mtu(__be32 dst)
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

static void ul_one(struct worker *w, __u8 *buf, __u32 n, const struct sockaddr_in *from)
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
		count(w, PGWU_R_SIG_ECHO_RESPONSE, XDP_DROP, n);
		return;
	case GTP_ERROR_IND: {
		const __u8 *p = m.p;

		if (p + 12 <= end && p[0] == GTP_IE_TEID_DATA_I && p[5] == GTP_IE_PEER_ADDR &&
		    p[6] == 0 && p[7] == 4)
			sig_count(*(__be32 *)(p + 1), *(__be32 *)(p + 8), GTP_ERROR_IND, peer);
		else if (p + 5 <= end && p[0] == GTP_IE_TEID_DATA_I)
			sig_count(*(__be32 *)(p + 1), peer, GTP_ERROR_IND, peer);
		count(w, PGWU_R_SIG_ERROR_IND, XDP_DROP, n);
		return;
	}
	case GTP_END_MARKER:
		sig_count(m.gtp->teid, peer, GTP_END_MARKER, peer);
		count(w, PGWU_R_SIG_END_MARKER, XDP_DROP, n);
		return;
	case GTP_SUPP_EXT_NOTIF:
		count(w, PGWU_R_SIG_SUPP_EXT_NOTIF, XDP_DROP, n);
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

static void dl_one(struct worker *w, __u8 *p, __u32 n)
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

/* ---- the workers ---- */

/* The GRO segment size of datagram i (UDP_GRO cmsg), 0 when it carries one G-PDU. */
static int gso_size(struct msghdr *h)
{
	struct cmsghdr *c;
	int v;

	for (c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c))
		if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
			memcpy(&v, CMSG_DATA(c), sizeof(v));
			return v;
		}
	return 0;
}

/* Read one batch; returns datagrams read, 0 on the receive timeout, -errno on an error. */
static int rx_batch(struct worker *w)
{
	int n;

	for (int i = 0; i < w->batch; i++) {
		w->msgs[i].msg_hdr.msg_namelen = sizeof(w->from[i]);
		w->msgs[i].msg_hdr.msg_controllen = S.k.gro ? sizeof(w->cmsg[i]) : 0;
		w->msgs[i].msg_hdr.msg_flags = 0;
	}
	if (w->batch == 1) {
		/* recvfrom, the classic loop (recvmsg for the GRO cmsg) */
		struct msghdr *h = &w->msgs[0].msg_hdr;
		ssize_t r;

		if (S.k.gro)
			r = recvmsg(w->rx, h, 0);
		else
			r = recvfrom(w->rx, w->iov[0].iov_base, w->buf_len, MSG_TRUNC,
				     w->dir == UL ? (struct sockaddr *)&w->from[0] : NULL,
				     w->dir == UL ? &h->msg_namelen : NULL);
		if (r >= 0 && !S.k.gro && r > w->buf_len)
			h->msg_flags |= MSG_TRUNC;
		w->msgs[0].msg_len = r;
		n = r < 0 ? -1 : 1;
	} else {
		n = recvmmsg(w->rx, w->msgs, w->batch, MSG_WAITFORONE, NULL);
	}
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
	return n;
}

static void worker_setup(struct worker *w)
{
	char name[16];

	/* its name in /proc (comm): what a reader of the DUT's threads sees next to napi/... */
	snprintf(name, sizeof(name), "pgwu-%s-%d", w->dir == UL ? "ul" : "dl", w->id);
	pthread_setname_np(pthread_self(), name);
	w->st[PGWU_SOCK_CTR_OFF + PGWU_SC_TID] = syscall(SYS_gettid);
	w->st[PGWU_SOCK_CTR_OFF + PGWU_SC_DIRECTION] = w->dir;
	if (S.k.ncpus) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(S.k.cpus[w->id % S.k.ncpus], &set);
		if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set))
			fprintf(stderr, "Couldn't pin worker %d to CPU %d\n", w->id,
				S.k.cpus[w->id % S.k.ncpus]);
	}
	if (S.k.rt_priority) {
		struct sched_param sp = { .sched_priority = S.k.rt_priority };

		if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp))
			fprintf(stderr, "Couldn't make worker %d SCHED_FIFO %d\n", w->id,
				S.k.rt_priority);
	}
}

static void *worker_run(void *arg)
{
	struct worker *w = arg;

	worker_setup(w);
	while (!stop) {
		int n;

		cfg_sync(w);
		n = rx_batch(w);
		if (n <= 0) {
			if (n < 0) {
				fprintf(stderr, "worker %d: Couldn't receive: %s\n", w->id, strerror(-n));
				usleep(TICK_MS * 1000);
			}
			CTR(w, PGWU_SC_RX_EMPTY)++;
			continue;
		}
		CTR(w, PGWU_SC_RX_CALLS)++;
		for (int i = 0; i < n; i++) {
			struct msghdr *h = &w->msgs[i].msg_hdr;
			__u8 *buf = w->iov[i].iov_base;
			__u32 len = w->msgs[i].msg_len;

			if (h->msg_flags & MSG_TRUNC) {
				CTR(w, PGWU_SC_RX_PACKETS)++;
				count(w, PGWU_SR_DROP_TRUNC, XDP_DROP, len);
				continue;
			}
			if (w->dir == DL) {
				dl_one(w, buf, len);
				continue;
			}
			int seg = S.k.gro ? gso_size(h) : 0;

			if (!seg || (__u32)seg >= len) {
				ul_one(w, buf, len, &w->from[i]);
				continue;
			}
			CTR(w, PGWU_SC_GRO_DATAGRAMS)++;
			for (__u32 off = 0; off < len; off += seg) {
				__u32 n = len - off < (__u32)seg ? len - off : (__u32)seg;

				ul_one(w, buf + off, n, &w->from[i]);
			}
		}
		tx_flush(w);
	}
	return NULL;
}

/* ---- sockets ---- */

static int sock_common(int fd, const char *what)
{
	const struct sock_knobs *k = &S.k;
	struct timeval tv = { .tv_usec = TICK_MS * 1000 };
	int v;

	/* the receive timeout: a worker looks at the stop flag and the config that often */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)))
		goto fail;
	if (k->rcvbuf && setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &k->rcvbuf, sizeof(int)) &&
	    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &k->rcvbuf, sizeof(int)))
		goto fail;
	if (k->busy_poll) {
		v = k->busy_poll;
		if (setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &v, sizeof(v)))
			goto fail;
		v = k->prefer_busy_poll;
		if (v && setsockopt(fd, SOL_SOCKET, SO_PREFER_BUSY_POLL, &v, sizeof(v)))
			goto fail;
		v = k->busy_poll_budget;
		if (v && setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL_BUDGET, &v, sizeof(v)))
			goto fail;
	}
	return 0;
fail:
	v = -errno;
	fprintf(stderr, "Couldn't set up the %s socket: %s\n", what, strerror(-v));
	return v;
}

static int udp_open(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(PGWU_GTPU_PORT),
				 .sin_addr.s_addr = S.cfg.local_addr };
	char ifname[IF_NAMESIZE] = "", buf[16];
	int one = 1, fd, err;

	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if_indextoname(S.access_ifindex, ifname);
	err = sock_common(fd, "UDP");
	if (!err && ((S.k.reuseport &&
		      setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one))) ||
		     setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, ifname, strlen(ifname)) ||
		     (S.k.gro && setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof(one))) ||
		     bind(fd, (struct sockaddr *)&a, sizeof(a)))) {
		err = -errno;
		fprintf(stderr, "Couldn't bind UDP %s:%d on %s: %s%s\n", ip_str(a.sin_addr.s_addr, buf),
			PGWU_GTPU_PORT, ifname, strerror(-err), err == -EADDRINUSE ?
			" (another pgwu socket or pgwu reassemble?)" : "");
	}
	if (err) {
		close(fd);
		return err;
	}
	return fd;
}

/*
 * The downlink socket: SOCK_DGRAM (from the IP header on) bound to SGi for every protocol, so it is
 * a tap, served before tc ingress (ptype_all): tc can then take UE-pool packets away from the
 * kernel's own IP stack, which sees them otherwise (ETH_P_IP sockets are served beside ip_rcv,
 * after tc). A classic BPF filter keeps incoming IPv4 only.
 */
static int packet_open(void)
{
	/* IPv4, and not a packet this host sends (a fanout group's hook ignores the sockets'
	 * PACKET_IGNORE_OUTGOING; PACKET_FANOUT_FLAG_IGNORE_OUTGOING is 6.4+) */
	struct sock_filter ipv4_in[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SKF_AD_OFF + SKF_AD_PKTTYPE),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PACKET_OUTGOING, 2, 0),
		BPF_STMT(BPF_LD | BPF_H | BPF_ABS, SKF_AD_OFF + SKF_AD_PROTOCOL),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IP, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, 0),
		BPF_STMT(BPF_RET | BPF_K, 0xffffffff),
	};
	struct sock_fprog prog = { .len = 6, .filter = ipv4_in };
	struct sockaddr_ll ll = { .sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
				  .sll_ifindex = S.sgi_ifindex };
	int fd, err, one = 1;

	/* protocol 0: nothing arrives before the filter is in place and the socket is bound */
	fd = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	err = sock_common(fd, "packet");
	if (!err && (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) ||
		     setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) ||
		     bind(fd, (struct sockaddr *)&ll, sizeof(ll))))
		err = -errno;
	if (!err && S.k.reuseport) {
		/* one group per process: its pid names it */
		int arg = (getpid() & 0xffff) | fanout_modes[S.k.fanout] << 16;

		if (setsockopt(fd, SOL_PACKET, PACKET_FANOUT, &arg, sizeof(arg)))
			err = -errno;
	}
	if (err) {
		fprintf(stderr, "Couldn't open the packet socket on SGi: %s\n", strerror(-err));
		close(fd);
		return err;
	}
	return fd;
}

/* The socket everything is sent through. IP_RECVERR: without it the kernel reports a packet the
 * egress refused (ENOBUFS: a full ring or queue) as sent, counting it only in Ip OutDiscards. */
static int raw_open(void)
{
	int fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW), err, one = 1;

	if (fd < 0 || setsockopt(fd, IPPROTO_IP, IP_RECVERR, &one, sizeof(one)) ||
	    (S.k.sndbuf && setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &S.k.sndbuf, sizeof(int)) &&
	     setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &S.k.sndbuf, sizeof(int)))) {
		err = -errno;
		fprintf(stderr, "Couldn't open the raw socket that sends: %s\n", strerror(-err));
		if (fd >= 0)
			close(fd);
		return err;
	}
	return fd;
}

static void worker_free(struct worker *w)
{
	if (!w)
		return;
	if (w->raw >= 0)
		close(w->raw);
	if (w->frag >= 0)
		close(w->frag);
	free(w->bufs);
	free(w->msgs);
	free(w->iov);
	free(w->from);
	free(w->cmsg);
	free(w);
}

/* Worker i of direction dir, its receive socket rx (shared or its own). */
static struct worker *worker_new(enum dir dir, int i, int rx)
{
	struct worker *w = calloc(1, sizeof(*w));
	size_t slot;

	if (!w)
		return NULL;
	w->id = i;
	w->dir = dir;
	w->rx = rx;
	w->raw = w->frag = -1;
	w->st = pgwu_sock_block(S.st, dir, i);
	w->cfg = S.cfg;
	w->cfg_seq = S.cfg_seq;
	w->batch = S.k.batch;
	w->buf_len = dir == UL && S.k.gro ? BUF_LEN_GRO : BUF_LEN;
	slot = HEADROOM + w->buf_len;
	w->bufs = malloc(slot * w->batch);
	w->msgs = calloc(w->batch, sizeof(*w->msgs));
	w->iov = calloc(w->batch, sizeof(*w->iov));
	w->from = calloc(w->batch, sizeof(*w->from));
	w->cmsg = calloc(w->batch, sizeof(*w->cmsg));
	if (!w->bufs || !w->msgs || !w->iov || !w->from || !w->cmsg)
		goto fail;
	for (int j = 0; j < w->batch; j++) {
		struct msghdr *h = &w->msgs[j].msg_hdr;

		w->iov[j].iov_base = w->bufs + j * slot + HEADROOM;
		w->iov[j].iov_len = w->buf_len;
		h->msg_iov = &w->iov[j];
		h->msg_iovlen = 1;
		h->msg_name = dir == UL ? &w->from[j] : NULL;
		h->msg_control = w->cmsg[j];
	}
	for (int j = 0; j < TX_MAX; j++) {
		w->tto[j].sin_family = AF_INET;
		w->tmsg[j].msg_hdr.msg_name = &w->tto[j];
		w->tmsg[j].msg_hdr.msg_namelen = sizeof(w->tto[j]);
		w->tmsg[j].msg_hdr.msg_iov = &w->tiov[j];
		w->tmsg[j].msg_hdr.msg_iovlen = 1;
	}
	w->raw = raw_open();
	if (w->raw < 0)
		goto fail;
	return w;
fail:
	worker_free(w);
	return NULL;
}

/* ---- the counters' map ---- */

/* sock_stats: the pinned one when its layout is this program's, else a new one pinned in its
 * place; mmap()ed. Its header's pid says whether a `pgwu socket` runs for this PIN_DIR. */
static int stats_open(void)
{
	char path[PATH_MAX];
	__u32 max = 0;
	int fd, err;

	err = pin_path(path, sizeof(path), PGWU_SOCK_STATS_MAP);
	if (err)
		return err;
	fd = bpf_obj_get(path);
	if (fd >= 0 && (map_max_entries(fd, &max) || max != PGWU_SOCK_WORDS)) {
		close(fd);
		unlink(path);
		fd = -1;
	}
	if (fd < 0) {
		LIBBPF_OPTS(bpf_map_create_opts, o, .map_flags = BPF_F_MMAPABLE);

		fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, PGWU_SOCK_STATS_MAP, 4, 8, PGWU_SOCK_WORDS,
				    &o);
		if (fd < 0 || bpf_obj_pin(fd, path)) {
			err = -errno;
			fprintf(stderr, "Couldn't create %s: %s\n", path, strerror(-err));
			if (fd >= 0)
				close(fd);
			return err;
		}
	}
	S.st_fd = fd;
	S.st_len = (PGWU_SOCK_WORDS * 8 + 4095) / 4096 * 4096;
	S.st = mmap(NULL, S.st_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (S.st == MAP_FAILED) {
		err = -errno;
		S.st = NULL;
		fprintf(stderr, "Couldn't map %s: %s\n", path, strerror(-err));
		return err;
	}
	if (S.st[PGWU_SH_LAYOUT] != PGWU_SOCK_LAYOUT) {
		memset(S.st, 0, PGWU_SOCK_WORDS * 8);
		S.st[PGWU_SH_LAYOUT] = PGWU_SOCK_LAYOUT;
	}
	return 0;
}

/* Take sock_stats for this process (under the PIN_DIR lock: two starts cannot both take it). */
static int stats_claim(void)
{
	int lock = pin_dir_lock(), err = 0;
	__u64 other;

	if (lock < 0)
		return lock;
	other = S.st[PGWU_SH_PID];
	if (other && other != (__u64)getpid() && pid_is_pgwu(other)) {
		fprintf(stderr, "pgwu socket already runs for %s (pid %llu)\n", pin_dir,
			(unsigned long long)other);
		err = -EBUSY;
	} else {
		const struct sock_knobs *k = &S.k;

		S.st[PGWU_SH_PID] = getpid();
		S.st[PGWU_SH_THREADS] = k->threads;
		S.st[PGWU_SH_BATCH] = k->batch;
		S.st[PGWU_SH_REUSEPORT] = k->reuseport;
		S.st[PGWU_SH_RCVBUF] = k->rcvbuf;
		S.st[PGWU_SH_SNDBUF] = k->sndbuf;
		S.st[PGWU_SH_BUSY_POLL] = k->busy_poll;
		S.st[PGWU_SH_PREFER_BUSY_POLL] = k->prefer_busy_poll;
		S.st[PGWU_SH_BUSY_POLL_BUDGET] = k->busy_poll_budget;
		S.st[PGWU_SH_GRO] = k->gro;
		S.st[PGWU_SH_FANOUT] = k->fanout;
		S.st[PGWU_SH_RT_PRIORITY] = k->rt_priority;
		S.st[PGWU_SH_STARTED] = time(NULL);
		/* the blocks of threads this run does not have: zero, so old values don't linger */
		for (int d = 0; d < 2; d++)
			for (int i = k->threads; i < PGWU_SOCK_MAX_THREADS; i++)
				memset(pgwu_sock_block(S.st, d, i), 0, PGWU_SOCK_THREAD_WORDS * 8);
	}
	close(lock);
	return err;
}

/* ---- the main thread: kernel drops, CPUs, config, the per-second lines ---- */

/* The kernel's drops at worker w's socket, into its block (only the first worker of a shared
 * socket holds them). */
static void fold_drops(struct worker *w)
{
	if (w->dir == UL) {
		__u32 mi[SK_MEMINFO_VARS] = {};
		socklen_t len = sizeof(mi);

		if (!getsockopt(w->rx, SOL_SOCKET, SO_MEMINFO, mi, &len))
			CTR(w, PGWU_SC_SOCK_DROPS) = mi[SK_MEMINFO_DROPS];
	} else {
		struct tpacket_stats ps = {};
		socklen_t len = sizeof(ps);

		/* read and reset by the kernel: added up here */
		if (!getsockopt(w->rx, SOL_PACKET, PACKET_STATISTICS, &ps, &len))
			CTR(w, PGWU_SC_SOCK_DROPS) += ps.tp_drops;
	}
}

static int thread_cpu(__u64 tid)
{
	char path[64], buf[1024], *p;
	ssize_t n;
	int fd, f;

	snprintf(path, sizeof(path), "/proc/self/task/%llu/stat", (unsigned long long)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	p = strrchr(buf, ')');		/* comm may hold spaces */
	for (f = 2; p && f < 39; f++)	/* field 39: the CPU it last ran on */
		p = strchr(p + 1, ' ');
	return p ? atoi(p + 1) : -1;
}

struct kstats {
	__u64 udp_rcvbuf, udp_inerr, udp_csum, udp_noports;
	__u64 softnet[CPU_SETSIZE][3];	/* processed, dropped, time_squeeze */
	int ncpu;
};

/* The kernel's counters: this netns's UDP MIB, and softnet_stat (per CPU, the whole host's). */
static void kstats_read(struct kstats *k)
{
	char line[1024], head[1024] = "";
	FILE *f;

	memset(k, 0, sizeof(*k));
	f = fopen("/proc/self/net/snmp", "r");
	while (f && fgets(line, sizeof(line), f)) {
		char *hn, *vn, *hs = NULL, *vs = NULL;

		if (strncmp(line, "Udp:", 4))
			continue;
		if (!head[0]) {
			snprintf(head, sizeof(head), "%s", line);
			continue;
		}
		hn = strtok_r(head, " \n", &hs);
		vn = strtok_r(line, " \n", &vs);
		while ((hn = strtok_r(NULL, " \n", &hs)) && (vn = strtok_r(NULL, " \n", &vs))) {
			__u64 v = strtoull(vn, NULL, 10);

			if (!strcmp(hn, "RcvbufErrors"))
				k->udp_rcvbuf = v;
			else if (!strcmp(hn, "InErrors"))
				k->udp_inerr = v;
			else if (!strcmp(hn, "InCsumErrors"))
				k->udp_csum = v;
			else if (!strcmp(hn, "NoPorts"))
				k->udp_noports = v;
		}
		break;
	}
	if (f)
		fclose(f);
	f = fopen("/proc/net/softnet_stat", "r");
	while (f && fgets(line, sizeof(line), f) && k->ncpu < CPU_SETSIZE) {
		unsigned int v[16] = {};
		int n = sscanf(line, "%x %x %x %x %x %x %x %x %x %x %x %x %x", &v[0], &v[1], &v[2],
			       &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &v[11], &v[12]);
		/* the 13th column: the CPU (5.10+) */
		int cpu = n >= 13 ? (int)v[12] : k->ncpu;

		if (cpu >= 0 && cpu < CPU_SETSIZE) {
			k->softnet[cpu][0] = v[0];
			k->softnet[cpu][1] = v[1];
			k->softnet[cpu][2] = v[2];
		}
		k->ncpu = cpu + 1 > k->ncpu ? cpu + 1 : k->ncpu;
	}
	if (f)
		fclose(f);
}

static __u64 sum_fwd(const __u64 *b, __u32 reason)
{
	return b[(reason * PGWU_VERDICT_MAX + XDP_REDIRECT) * 2];
}

static __u64 sum_drop(const __u64 *b)
{
	__u64 n = 0;

	for (int r = 0; r < PGWU_SOCK_REASON_MAX; r++) {
		const __u64 *c = b + r * PGWU_VERDICT_MAX * 2;

		n += c[XDP_DROP * 2] + c[XDP_ABORTED * 2] +
		     (r == PGWU_R_ECHO_REPLY ? 0 : c[XDP_TX * 2]);
	}
	return n;
}

struct snap {
	__u64 rx, fwd, drop, sock_drops;
};

static void snap_of(const struct worker *w, struct snap *s)
{
	const __u64 *b = w->st;

	s->rx = b[PGWU_SOCK_CTR_OFF + PGWU_SC_RX_PACKETS];
	s->fwd = sum_fwd(b, w->dir == UL ? PGWU_R_UL_FWD : PGWU_R_DL_FWD);
	s->drop = sum_drop(b);
	s->sock_drops = b[PGWU_SOCK_CTR_OFF + PGWU_SC_SOCK_DROPS];
}

/* One line per worker, then one of the kernel's counters; or one JSON object. */
static void report(double dt, struct snap *prev, const struct kstats *k0, const struct kstats *k1)
{
	bool json = S.k.json;

	if (json)
		printf("{\"interval_s\": %.3f, \"threads\": [", dt);
	for (int i = 0; i < S.nw; i++) {
		struct worker *w = S.w[i];
		struct snap s;

		snap_of(w, &s);
		if (json)
			printf("%s{\"direction\": \"%s\", \"thread\": %d, \"cpu\": %lld, \"rx_pps\": %.0f, "
			       "\"fwd_pps\": %.0f, \"drop_pps\": %.0f, \"sock_drops_ps\": %.0f}",
			       i ? ", " : "", w->dir == UL ? "uplink" : "downlink", w->id,
			       (long long)w->st[PGWU_SOCK_CTR_OFF + PGWU_SC_CPU],
			       (s.rx - prev[i].rx) / dt, (s.fwd - prev[i].fwd) / dt,
			       (s.drop - prev[i].drop) / dt, (s.sock_drops - prev[i].sock_drops) / dt);
		else if (s.rx != prev[i].rx || s.sock_drops != prev[i].sock_drops)
			printf("%-8s thread %2d cpu %3lld  rx %10.0f/s  fwd %10.0f/s  drop %8.0f/s  "
			       "socket drops %8.0f/s\n", w->dir == UL ? "uplink" : "downlink", w->id,
			       (long long)w->st[PGWU_SOCK_CTR_OFF + PGWU_SC_CPU],
			       (s.rx - prev[i].rx) / dt, (s.fwd - prev[i].fwd) / dt,
			       (s.drop - prev[i].drop) / dt, (s.sock_drops - prev[i].sock_drops) / dt);
		prev[i] = s;
	}
	if (json)
		printf("], \"udp\": {\"RcvbufErrors\": %llu, \"InErrors\": %llu, \"InCsumErrors\": %llu, "
		       "\"NoPorts\": %llu}, \"softnet\": [",
		       (unsigned long long)(k1->udp_rcvbuf - k0->udp_rcvbuf),
		       (unsigned long long)(k1->udp_inerr - k0->udp_inerr),
		       (unsigned long long)(k1->udp_csum - k0->udp_csum),
		       (unsigned long long)(k1->udp_noports - k0->udp_noports));
	else
		printf("kernel: udp RcvbufErrors %llu InErrors %llu InCsumErrors %llu NoPorts %llu |",
		       (unsigned long long)(k1->udp_rcvbuf - k0->udp_rcvbuf),
		       (unsigned long long)(k1->udp_inerr - k0->udp_inerr),
		       (unsigned long long)(k1->udp_csum - k0->udp_csum),
		       (unsigned long long)(k1->udp_noports - k0->udp_noports));
	for (int c = 0, first = 1; c < k1->ncpu; c++) {
		const __u64 *a = k0->softnet[c], *b = k1->softnet[c];

		if (json)
			printf("%s{\"cpu\": %d, \"processed\": %llu, \"dropped\": %llu, "
			       "\"time_squeeze\": %llu}", first ? "" : ", ", c,
			       (unsigned long long)(b[0] - a[0]), (unsigned long long)(b[1] - a[1]),
			       (unsigned long long)(b[2] - a[2]));
		else
			printf(" softnet cpu%d processed %llu dropped %llu squeezed %llu", c,
			       (unsigned long long)(b[0] - a[0]), (unsigned long long)(b[1] - a[1]),
			       (unsigned long long)(b[2] - a[2]));
		first = 0;
	}
	printf(json ? "]}\n" : "\n");
	fflush(stdout);
}

/* --owner: whether the process that started this one has ended (its pidfd turned readable; without
 * pidfd_open, kill(owner, 0)). */
static bool owner_gone(void)
{
	struct pollfd p = { .fd = S.owner_fd, .events = POLLIN };

	if (!S.owner)
		return false;
	if (S.owner_fd >= 0)
		return poll(&p, 1, 0) > 0;
	return kill(S.owner, 0) && errno == ESRCH;
}

static void main_loop(void)
{
	struct snap prev[2 * PGWU_SOCK_MAX_THREADS] = {};
	struct kstats *k0 = calloc(1, sizeof(*k0)), *k1 = calloc(1, sizeof(*k1)), *kt;
	__u64 last_cfg = mono_ns(), last_report = last_cfg;
	struct pgwu_config c;
	bool warned = false;

	if (!k0 || !k1)
		goto out;
	kstats_read(k0);
	while (!stop) {
		__u64 now;

		usleep(TICK_MS * 1000);
		if (owner_gone()) {
			fprintf(stderr, "pgwu socket: its owner, pid %u, ended: stopping\n", S.owner);
			break;
		}
		for (int i = 0; i < S.nw; i++) {
			struct worker *w = S.w[i];

			if (w->id == 0 || S.k.reuseport)
				fold_drops(w);
			w->st[PGWU_SOCK_CTR_OFF + PGWU_SC_CPU] =
				thread_cpu(w->st[PGWU_SOCK_CTR_OFF + PGWU_SC_TID]);
		}
		S.st[PGWU_SH_TICKS]++;
		now = mono_ns();
		if (now - last_cfg >= CONFIG_MS * 1000000ULL) {
			last_cfg = now;
			if (!pgwu_is_loaded())
				break;		/* unloaded: nothing left to forward for */
			if (!config_read(S.m.config, &c) && memcmp(&c, &S.cfg, sizeof(c))) {
				if (c.local_addr != S.cfg.local_addr && !warned) {
					fprintf(stderr, "pgwu socket: the GTP-U address changed: the "
						"uplink sockets stay bound to the old one until a restart\n");
					warned = true;
				}
				cfg_publish(&c);
			}
		}
		if (S.k.interval_ms && now - last_report >= S.k.interval_ms * 1000000ULL) {
			kstats_read(k1);
			report((now - last_report) / 1e9, prev, k0, k1);
			kt = k0;
			k0 = k1;
			k1 = kt;
			last_report = now;
		}
	}
out:
	free(k0);
	free(k1);
}

/* ---- --measure-lookups: the direct index through mmap against the hash map's system call ---- */

static int measure_lookups(__u32 n, bool json)
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

/* ---- the command ---- */

static int parse_cpus(const char *s, struct sock_knobs *k)
{
	char *dup = strdup(s), *tok, *save = NULL;
	int err = 0;

	if (!dup)
		return -ENOMEM;
	k->ncpus = 0;
	for (tok = strtok_r(dup, ",", &save); tok && !err; tok = strtok_r(NULL, ",", &save)) {
		__u32 lo, hi;
		char *dash = strchr(tok, '-');

		if (dash)
			*dash = '\0';
		if (parse_u32(tok, &lo) || (dash ? parse_u32(dash + 1, &hi) : (hi = lo, 0)) ||
		    hi < lo || hi >= CPU_SETSIZE) {
			err = -EINVAL;
			break;
		}
		for (__u32 c = lo; c <= hi && k->ncpus < CPU_SETSIZE; c++)
			k->cpus[k->ncpus++] = c;
	}
	free(dup);
	if (err || !k->ncpus) {
		fprintf(stderr, "Invalid --cpus '%s': expected a CPU list (1, 2-3, 0,4)\n", s);
		return -EUSAGE;
	}
	return 0;
}

static int ifindex_of(const char *name, const char *opt)
{
	int i = if_nametoindex(name);

	if (!i)
		fprintf(stderr, "Invalid --%s '%s': no such interface in this network namespace\n",
			opt, name);
	return i;
}

/* Nothing of the XDP path may take these interfaces' packets first: xdp_access or xdp_sgi
 * attached to them (pgwu attach) would. */
static int xdp_check(void)
{
	int ifs[2] = { S.access_ifindex, S.sgi_ifindex };

	for (int i = 0; i < 2; i++) {
		LIBBPF_OPTS(bpf_xdp_query_opts, q);
		char name[IF_NAMESIZE] = "";
		struct bpf_prog_info pi = {};
		__u32 len = sizeof(pi);
		int fd;

		if (bpf_xdp_query(ifs[i], 0, &q) || !q.prog_id)
			continue;
		fd = bpf_prog_get_fd_by_id(q.prog_id);
		if (fd < 0 || bpf_obj_get_info_by_fd(fd, &pi, &len)) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		close(fd);
		if (!strcmp(pi.name, "xdp_access") || !strcmp(pi.name, "xdp_sgi")) {
			if_indextoname(ifs[i], name);
			fprintf(stderr, "%s runs on %s: the XDP path takes its packets before any socket "
				"(pgwu detach first)\n", pi.name, name);
			return -EBUSY;
		}
	}
	return 0;
}

/* GRO on an interface (ETHTOOL_GGRO), or -errno. */
static int gro_of(int ifindex, char name[IF_NAMESIZE])
{
	struct ethtool_value ev = { .cmd = ETHTOOL_GGRO };
	struct ifreq ifr = { .ifr_data = (void *)&ev };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), err;

	if (fd < 0)
		return -errno;
	if_indextoname(ifindex, ifr.ifr_name);
	memcpy(name, ifr.ifr_name, IF_NAMESIZE);
	err = ioctl(fd, SIOCETHTOOL, &ifr) ? -errno : (int)!!ev.data;
	close(fd);
	return err;
}

/* A packet socket on SGi with GRO would read merged TCP segments, longer than the MTU; UDP_GRO
 * merges nothing unless the access interface does GRO. */
static int gro_check(void)
{
	char name[IF_NAMESIZE];

	if (gro_of(S.sgi_ifindex, name) == 1) {
		fprintf(stderr, "GRO is on on %s: its packet socket would read merged TCP segments; "
			"turn it off (ethtool -K %s gro off)\n", name, name);
		return -EINVAL;
	}
	if (S.k.gro && gro_of(S.access_ifindex, name) == 0) {
		fprintf(stderr, "--gro: GRO is off on %s, so nothing is merged for UDP_GRO; turn it on "
			"(ethtool -K %s gro on)\n", name, name);
		return -EINVAL;
	}
	return 0;
}

static int sock_setup(const struct sock_opts *o)
{
	struct sock_knobs *k = &S.k;
	char buf[16];
	int err;

	k->threads = o->threads.v;
	k->batch = o->batch.v;
	k->reuseport = o->reuseport.v;
	k->gro = o->gro.set;
	k->busy_poll = o->busy_poll.v;
	k->prefer_busy_poll = o->prefer_busy_poll.set;
	k->busy_poll_budget = o->busy_poll_budget.set ? (int)o->busy_poll_budget.v : 0;
	k->rcvbuf = o->rcvbuf.set ? (int)o->rcvbuf.v : 0;
	k->sndbuf = o->sndbuf.set ? (int)o->sndbuf.v : 0;
	k->fanout = o->fanout.v;
	k->rt_priority = o->rt_priority.v;
	k->interval_ms = o->interval.v;
	k->json = o->json.set;
	if (o->cpus.set && (err = parse_cpus(o->cpus.s, k)))
		return err;
	if (o->owner.set) {
		S.owner = o->owner.v;
		S.owner_fd = syscall(SYS_pidfd_open, (pid_t)S.owner, 0);
		if (S.owner_fd < 0 && errno != ENOSYS) {
			err = -errno;
			fprintf(stderr, "Couldn't watch --owner %u: %s\n", S.owner, strerror(-err));
			return err == -ESRCH ? -EUSAGE : err;
		}
	}
	if ((k->prefer_busy_poll || o->busy_poll_budget.set) && !k->busy_poll) {
		fprintf(stderr, "--prefer-busy-poll and --busy-poll-budget need --busy-poll USEC\n");
		return -EUSAGE;
	}
	S.access_ifindex = ifindex_of(o->access.s, "access");
	S.sgi_ifindex = ifindex_of(o->sgi.s, "sgi");
	if (!S.access_ifindex || !S.sgi_ifindex)
		return -EUSAGE;
	err = maps_open(&S.m);
	if (err)
		return err;
	err = config_read(S.m.config, &S.cfg);
	if (err)
		return err;
	if (!S.cfg.local_addr) {
		fprintf(stderr, "pgwu has no GTP-U address (pgwu config --local-addr A)\n");
		return -EDESTADDRREQ;
	}
	if (helper_read(S.m.fib_gen, PGWU_REG_REASM)) {
		fprintf(stderr, "pgwu reassemble runs for %s: it reads UDP %s:%d, as the socket path "
			"would (the kernel reassembles outer fragments for the socket path itself)\n",
			pin_dir, ip_str(S.cfg.local_addr, buf), PGWU_GTPU_PORT);
		return -EBUSY;
	}
	err = xdp_check();
	if (!err)
		err = gro_check();
	if (err)
		return err;
	S.peers = pinned_open("peers");
	S.sig_rx = pinned_open("sig_rx");
	err = stats_open();
	if (!err)
		err = stats_claim();
	return err;
}

static int sock_open_workers(void)
{
	int shared[2] = { -1, -1 }, err = 0;

	for (int d = UL; d <= DL && !err; d++) {
		for (int i = 0; i < S.k.threads; i++) {
			int fd = shared[d];
			struct worker *w;

			if (fd < 0) {
				fd = d == UL ? udp_open() : packet_open();
				if (fd < 0) {
					err = fd;
					break;
				}
				if (!S.k.reuseport)
					shared[d] = fd;
			}
			w = worker_new(d, i, fd);
			if (!w) {
				if (fd != shared[d])
					close(fd);
				err = -ENOMEM;
				break;
			}
			S.w[S.nw++] = w;
		}
	}
	return err;
}

static void sock_close(void)
{
	int closed[2] = { -1, -1 };

	for (int i = 0; i < S.nw; i++) {
		struct worker *w = S.w[i];

		if (w->rx != closed[w->dir]) {
			close(w->rx);
			if (!S.k.reuseport)
				closed[w->dir] = w->rx;
		}
		worker_free(w);
	}
	S.nw = 0;
	if (S.st) {
		if (S.st[PGWU_SH_PID] == (__u64)getpid())
			S.st[PGWU_SH_PID] = 0;
		munmap(S.st, S.st_len);
	}
	if (S.st_fd >= 0)
		close(S.st_fd);
	if (S.peers >= 0)
		close(S.peers);
	if (S.sig_rx >= 0)
		close(S.sig_rx);
	if (S.owner_fd >= 0)
		close(S.owner_fd);
	maps_close(&S.m);
}

static void describe(void)
{
	const struct sock_knobs *k = &S.k;
	char a[16], ifa[IF_NAMESIZE] = "", ifs[IF_NAMESIZE] = "";

	if_indextoname(S.access_ifindex, ifa);
	if_indextoname(S.sgi_ifindex, ifs);
	printf("pgwu socket: pid %d, %d thread(s) per direction", getpid(), k->threads);
	if (k->ncpus) {
		printf(" on CPU(s)");
		for (int i = 0; i < k->ncpus; i++)
			printf("%s%d", i ? "," : " ", k->cpus[i]);
	}
	printf(", %s, batch %d (%s), rcvbuf %d, sndbuf %d, busy poll %d us%s, GRO %s, "
	       "fanout %s%s; uplink UDP %s:%d on %s, downlink packet socket on %s\n",
	       k->reuseport ? "a socket per thread (SO_REUSEPORT, PACKET_FANOUT)" : "one socket per direction",
	       k->batch, k->batch == 1 ? "recvfrom/sendto" : "recvmmsg/sendmmsg", k->rcvbuf, k->sndbuf,
	       k->busy_poll, k->prefer_busy_poll ? " preferred" : "", k->gro ? "on" : "off",
	       fanout_names[k->fanout], k->rt_priority ? ", SCHED_FIFO workers" : "",
	       ip_str(S.cfg.local_addr, a), PGWU_GTPU_PORT, ifa, ifs);
	fflush(stdout);
}

static int sock_run(const struct sock_opts *o, int ready_fd)
{
	struct sigaction sa = { .sa_handler = on_signal };	/* no SA_RESTART: sleeps return */
	int err, started = 0;

	S.peers = S.sig_rx = S.st_fd = S.owner_fd = -1;
	err = sock_setup(o);
	if (err)
		goto out;
	if (o->measure_lookups.set) {
		err = measure_lookups(o->measure_lookups.v, o->json.set);
		goto out;
	}
	if (S.k.ncpus) {
		/* the main thread (drops, CPUs, the lines) runs on the workers' CPUs too: all of it
		 * is the DUT's work; each worker then narrows to its own CPU */
		cpu_set_t set;

		CPU_ZERO(&set);
		for (int i = 0; i < S.k.ncpus; i++)
			CPU_SET(S.k.cpus[i], &set);
		if (sched_setaffinity(0, sizeof(set), &set)) {
			err = -errno;
			fprintf(stderr, "Couldn't run on CPU(s) %s: %s\n", o->cpus.s, strerror(-err));
			goto out;
		}
	}
	err = sock_open_workers();
	if (err)
		goto out;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	for (; started < S.nw; started++) {
		err = -pthread_create(&S.w[started]->th, NULL, worker_run, S.w[started]);
		if (err) {
			fprintf(stderr, "Couldn't start a worker: %s\n", strerror(-err));
			stop = 1;
			break;
		}
	}
	if (!err) {
		describe();
		if (ready_fd >= 0) {
			err = pgwu_daemon_ready(&ready_fd, o->log.set ? o->log.s : NULL);
			if (o->log.set)
				describe();	/* again, into the log */
		}
		main_loop();
		stop = 1;
	}
	for (int i = 0; i < started; i++)
		pthread_join(S.w[i]->th, NULL);
	for (int i = 0; i < S.nw; i++)
		if (S.w[i]->id == 0 || S.k.reuseport)
			fold_drops(S.w[i]);
out:
	if (ready_fd >= 0)
		close(ready_fd);
	sock_close();
	return err;
}

static int sock_child(void *arg, int ready_fd)
{
	return sock_run(arg, ready_fd);
}

int do_socket(const void *cfg)
{
	const struct sock_opts *o = cfg;
	int pid;

	if (!o->daemon.set)
		return sock_run(o, -1);
	pid = pgwu_daemonize(sock_child, (void *)o);
	if (pid < 0)
		return pid;	/* -ECHILD: it failed before it ran, and said why */
	printf("pgwu socket running as pid %d\n", pid);
	return 0;
}
