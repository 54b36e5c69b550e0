/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * pgwu_sock_int.h: what the files of `pgwu socket` (the socket-path PGW-U, docs/socket.md) share,
 * private to them; the counters' layout, which gtplab and `pgwu stats` read too, is pgwu_sock.h.
 *   pgwu_sock.c           the command: its setup and teardown, the workers' threads, the signals,
 *                         the main thread's tick, the config handed to the workers (a seqlock)
 *   pgwu_sock_packet.c    one packet: uplink, downlink, the replies, signalling; the bearer lookup
 *                         (and --measure-lookups, which times it)
 *   pgwu_sock_batch.c     a worker's loop: a batch in (recvmmsg, UDP GRO), each packet to its path,
 *                         the batch out (sendmmsg) and what the kernel refused of it
 *   pgwu_sock_sdf.c       SDF filters: a packet's PDR (include/sdf_match.h, as XDP matches), its
 *                         FAR and gate, its usage
 *   pgwu_sock_setup.c     the sockets (UDP, packet, raw) and what must hold before they open
 *   pgwu_sock_counters.c  sock_stats (created, claimed), the kernel's counters, the per-second lines
 */
#ifndef PGWU_SOCK_INT_H
#define PGWU_SOCK_INT_H

#include <pthread.h>
#include <string.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <linux/if_packet.h>
#include <linux/ipv6.h>
#include "pgwu_cli.h"
#include "pgwu_sock.h"

#define TICK_MS 50		/* main thread: drops folded, CPUs read; workers: receive timeout */
#define CONFIG_MS 200		/* the config re-read */
#define HEADROOM 64		/* before a downlink packet: room for the outer headers (44; over
				 * IPv6, N3V6_ENCAP_LEN + 8 = 64) */
#define N3V6_ENCAP_LEN 56	/* GTP-U over IPv6: IPv6 40, UDP 8, GTP-U 8 (before a PSC's 8), as
				 * include/n3v6.h's */
#define BUF_LEN 16384		/* a receive buffer: a G-PDU or IP packet (jumbo frames included) */
#define BUF_LEN_GRO 65536	/* with UDP GRO: up to 64 G-PDUs in one datagram */
#define TX_MAX 1024		/* packets a worker queues before it sends them */
#define BUDGET_SLOTS 1024	/* peers a worker remembers for its reply budget */
#define MAX_BATCH 1024
#define USAGE6_SLOTS 256	/* IPv6 bearers and SDF PDRs a worker adds usage to between two
				 * flushes */

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

enum dir { UL = 0, DL = 1 };

/* What a queued packet is, for its counters once the kernel has taken it or not. */
struct txmeta {
	__u32 reason;		/* PGWU_R_UL_FWD / PGWU_R_DL_FWD */
	__u32 rx_bytes;		/* as read: counted with its fate */
	__u32 usage_bytes;	/* the bearer's usage: the inner packet's length */
	__u32 df;		/* downlink: the inner packet had DF (EMSGSIZE: drop_frag_needed) */
	__u32 v6;		/* an IPv6 packet to send as is (uplink; downlink over N3 IPv6):
				 * raw6, tto6 */
	__u32 answerable;	/* uplink IPv6: the G-PDU's sender is not martian (EMSGSIZE: Packet
				 * Too Big into its tunnel) */
	__u64 *usage;		/* the bearer's slot counters {packets, bytes}, NULL: not indexed;
				 * an IPv6 bearer's: its entry in the worker's usage6 */
	__u64 *pdr_usage;	/* the SDF PDR it matched: its entry in usage6; NULL: none */
};

/* The usage of an IPv6 bearer (the hash maps ul6_prefix, dl6_bearers: no slot to add to through
 * mmap) or of an SDF PDR (sdf_pdrs, a hash map too) counted by a worker since its last flush
 * (usage6_flush: after every batch). */
enum usage_kind { USAGE_FREE = 0, USAGE_BEARER6, USAGE_PDR };

struct usage6 {
	__u64 key;		/* ul6_prefix: the TEID; dl6_bearers: the /64; sdf_pdrs: the rule id */
	__u64 packets, bytes;
	__u32 used;		/* enum usage_kind */
};

#define MTU_CACHE_BITS 4	/* a worker's remembered access route MTUs: 16 SGWs */
#define MTU_CACHE_MS 100	/* how long one is trusted (a route changed is seen after that) */

struct mtu_slot {
	__be32 addr;
	int mtu;		/* route_mtu(addr), 0: unknown */
	__u64 at;		/* when it was asked, CLOCK_MONOTONIC ns */
};

/* An n3v6_peers entry a downlink worker read (N3 over IPv6), trusted for MTU_CACHE_MS. */
struct peer6_slot {
	__u8 addr[16];
	__u64 at;		/* when it was read, CLOCK_MONOTONIC ns; 0: never */
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
	int rx6;		/* uplink: the UDP socket on [n3_addr6]:2152 (N3 over IPv6), maybe
				 * shared; -1: none (no n3_addr6) */
	int raw;		/* IPPROTO_RAW: everything this worker sends over IPv4 */
	int raw6;		/* AF_INET6 IPPROTO_RAW (the header as is): IPv6 it sends on SGi */
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
	struct sockaddr_in *from;	/* uplink: the G-PDUs' senders */
	struct sockaddr_in6 *from6;	/* uplink over IPv6: theirs */
	struct sockaddr_ll *ll;		/* downlink: the packets' link-layer info (EtherType) */
	char (*cmsg)[CMSG_SPACE(sizeof(int))];
	/* send */
	struct mmsghdr tmsg[TX_MAX];
	struct iovec tiov[TX_MAX];
	struct sockaddr_in tto[TX_MAX];
	struct sockaddr_in6 tto6[TX_MAX];
	struct txmeta tmeta[TX_MAX];
	int ntx;
	struct budget budget[BUDGET_SLOTS];
	struct usage6 usage6[USAGE6_SLOTS];
	int nusage6;
	struct mtu_slot mtu_cache[1 << MTU_CACHE_BITS];	/* downlink IPv6: access_mtu */
	struct peer6_slot *peer6;	/* downlink: PGWU_N3V6_PEERS of them (peer6_of) */
};

struct sock_knobs {
	int threads, batch, reuseport, gro, busy_poll, prefer_busy_poll, busy_poll_budget;
	int rcvbuf, sndbuf, fanout, rt_priority, interval_ms, json;
	int cpus[CPU_SETSIZE], ncpus;
};

/* The process: maps, counters, the config the workers copy (one, S, in pgwu_sock.c). */
struct sock_state {
	struct pgwu_maps m;
	int peers, sig_rx;		/* signalling recorded as xdp_access records it; -1: absent */
	int peers6, sig_rx6;		/* over IPv6, as xdp_ul_n3v6 records it; -1: absent */
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
};

extern struct sock_state S;
extern volatile sig_atomic_t stop;

static inline __u64 mono_ns(void)
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

/* The kernel's counters, between two reports; a worker's, at the last one. */
struct kstats {
	__u64 udp_rcvbuf, udp_inerr, udp_csum, udp_noports;
	__u64 softnet[CPU_SETSIZE][3];	/* processed, dropped, time_squeeze */
	int ncpu;
};

struct snap {
	__u64 rx, fwd, drop, sock_drops;
};

/* pgwu_sock.c: the config and the workers' start */
void cfg_sync(struct worker *w);
void worker_setup(struct worker *w);

/* pgwu_sock_packet.c */
void ul_one(struct worker *w, __u8 *buf, __u32 n, const struct sockaddr_in *from);
void ul6n3_one(struct worker *w, __u8 *buf, __u32 n, const struct sockaddr_in6 *from);
__u32 n3v6_too_big(struct worker *w, __u8 *pkt, __u32 len, const struct txmeta *t, __u32 *verdict);
int dl6_error(struct worker *w, const struct ipv6hdr *ip6, __u32 tot_len, __u32 n, __u8 type,
	      __u32 mtu);
void dl_one(struct worker *w, __u8 *p, __u32 n, __be16 proto);
void usage6_flush(struct worker *w);
void usage6_room(struct worker *w);
__u64 *usage6_of(struct worker *w, __u64 key, enum usage_kind kind);
int dl_icmp(struct worker *w, const __u8 *q, __u32 qlen, __u8 type, __u8 code, __u16 mtu);
void dl_frag_needed(struct worker *w, const __u8 *inner, const struct txmeta *t, __u32 encap, int mtu,
		    __u32 *verdict);
int route_mtu(__be32 dst);
int route6_mtu(const __u8 *dst);
int ul6_error(struct worker *w, const struct ipv6hdr *ip6, __u32 inner_len, __u64 prefix,
	      int answerable, __u8 type, __u32 mtu);
int measure_lookups(__u32 n, bool json);

/* pgwu_sock_sdf.c */
__u32 sock_pdr_apply(struct worker *w, __be32 teid, __u32 dir, void *l3, __u32 len, struct txmeta *t);

/* pgwu_sock_batch.c */
void tx_flush(struct worker *w);
void *worker_run(void *arg);

/* pgwu_sock_setup.c */
extern const char *const fanout_names[];
int udp_open(void);
int udp6_open(void);
int packet_open(void);
int raw_open(void);
int raw6_open(void);
int xdp_check(void);
int gro_check(void);

/* pgwu_sock_counters.c */
int stats_open(void);
int stats_claim(void);
void fold_drops(struct worker *w);
int thread_cpu(__u64 tid);
void kstats_read(struct kstats *k);
void report(double dt, struct snap *prev, const struct kstats *k0, const struct kstats *k1);

/* Queue a packet to send (per packet, from pgwu_sock_packet.c: inline, as it was in one file). */
static inline void tx_add(struct worker *w, void *pkt, __u32 len, __be32 to, const struct txmeta *meta)
{
	int i;

	if (w->ntx == TX_MAX)
		tx_flush(w);
	i = w->ntx++;
	w->tiov[i].iov_base = pkt;
	w->tiov[i].iov_len = len;
	w->tto[i].sin_addr.s_addr = to;
	w->tmsg[i].msg_hdr.msg_name = &w->tto[i];
	w->tmsg[i].msg_hdr.msg_namelen = sizeof(w->tto[i]);
	w->tmeta[i] = *meta;
	w->tmeta[i].v6 = 0;
}

/* Queue an IPv6 packet (its header as is) to its destination, sent through raw6. */
static inline void tx_add6(struct worker *w, void *pkt, __u32 len, const __u8 *to,
			   const struct txmeta *meta)
{
	int i;

	if (w->ntx == TX_MAX)
		tx_flush(w);
	i = w->ntx++;
	w->tiov[i].iov_base = pkt;
	w->tiov[i].iov_len = len;
	memcpy(&w->tto6[i].sin6_addr, to, 16);
	w->tmsg[i].msg_hdr.msg_name = &w->tto6[i];
	w->tmsg[i].msg_hdr.msg_namelen = sizeof(w->tto6[i]);
	w->tmeta[i] = *meta;
	w->tmeta[i].v6 = 1;
}

#endif /* PGWU_SOCK_INT_H */
