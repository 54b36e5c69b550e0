// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pgwu_sock_batch.c: a worker's loop in `pgwu socket` (pgwu_sock.c): a batch read (recvmmsg, or
 * recvfrom with --batch 1; a UDP GRO datagram cut back into its G-PDUs), each packet handed to its
 * path (pgwu_sock_packet.c), and the packets it queued sent (sendmmsg, or sendto): each counted
 * once the kernel has taken it or refused it, a refused one by why (or sent again through the
 * socket that fragments, or answered with Fragmentation Needed).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <poll.h>
#include <unistd.h>
#include <arpa/inet.h>
#include "pgwu_sock_int.h"
#include "gtpu.h"

/* ---- sending ---- */

/* The kernel refused packet i: why, as a reason (*verdict XDP_TX when it was answered); a downlink
 * packet without DF over the access MTU goes again through the socket that fragments (the kernel's
 * IP output fragments it), one with DF is answered with Fragmentation Needed. */
static __u32 tx_refused(struct worker *w, int i, int err, __u32 *verdict)
{
	const struct txmeta *t = &w->tmeta[i];

	*verdict = XDP_DROP;
	if (err == EMSGSIZE && t->reason == PGWU_R_UL_FWD && t->v6) {
		/* RFC 4443 3.2, as xdp_access6: over the SGi route's MTU (the kernel does not
		 * fragment a raw socket's IPv6): Packet Too Big with that MTU to the UE, through its
		 * tunnel, quoting the packet as it arrived */
		struct ipv6hdr *ip6 = w->tiov[i].iov_base;
		__u32 len = w->tiov[i].iov_len;
		int mtu = route6_mtu(ip6->daddr.s6_addr);
		__u64 prefix;

		if (mtu <= 0 || len <= (__u32)mtu)
			return PGWU_SR_DROP_SEND;
		memcpy(&prefix, &ip6->saddr, 8);	/* the TEID's /64: checked (drop_spoofed) */
		ip6->hop_limit++;
		if (!ul6_error(w, ip6, len, prefix, t->answerable, 2, mtu))
			*verdict = XDP_TX;
		return PGWU_R_DROP_TOO_BIG;
	}
	if (err == EMSGSIZE && t->reason == PGWU_R_DL_FWD && t->v6)
		return n3v6_too_big(w, w->tiov[i].iov_base, w->tiov[i].iov_len, t, verdict);
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
			__u32 encap = w->tiov[i].iov_len - t->usage_bytes;

			dl_frag_needed(w, (__u8 *)oip + encap, t, encap, route_mtu(oip->daddr), verdict);
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
	if (t->pdr_usage) {	/* the worker's own table: no other thread adds to it */
		t->pdr_usage[0]++;
		t->pdr_usage[1] += t->usage_bytes;
	}
}

/* Send what is queued: sendmmsg (sendto with --batch 1), each run of IPv4 packets through raw and
 * of IPv6 ones through raw6; a refused packet is counted, skipped. */
void tx_flush(struct worker *w)
{
	int i = 0, r;

	while (i < w->ntx) {
		int v6 = w->tmeta[i].v6, fd = v6 ? w->raw6 : w->raw, run = 1;

		while (i + run < w->ntx && (int)w->tmeta[i + run].v6 == v6)
			run++;
		CTR(w, PGWU_SC_TX_CALLS)++;
		if (w->batch == 1)
			r = sendto(fd, w->tiov[i].iov_base, w->tiov[i].iov_len, 0,
				   w->tmsg[i].msg_hdr.msg_name, w->tmsg[i].msg_hdr.msg_namelen) < 0 ?
				   -1 : 1;
		else
			r = sendmmsg(fd, w->tmsg + i, run, 0);
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

/* ---- the workers' loop ---- */

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

/* Read one batch from fd (the uplink's IPv6 socket: v6), flags MSG_DONTWAIT once poll() said it
 * is readable; returns datagrams read, 0 on the receive timeout (or nothing left), -errno on an
 * error. */
static int rx_batch(struct worker *w, int fd, int v6, int flags)
{
	int n;

	for (int i = 0; i < w->batch; i++) {
		struct msghdr *h = &w->msgs[i].msg_hdr;

		if (w->dir == DL) {
			h->msg_namelen = sizeof(w->ll[i]);
		} else if (v6) {
			h->msg_name = &w->from6[i];
			h->msg_namelen = sizeof(w->from6[i]);
		} else {
			h->msg_name = &w->from[i];
			h->msg_namelen = sizeof(w->from[i]);
		}
		h->msg_controllen = S.k.gro ? sizeof(w->cmsg[i]) : 0;
		h->msg_flags = 0;
	}
	if (w->batch == 1) {
		/* recvfrom, the classic loop (recvmsg for the GRO cmsg) */
		struct msghdr *h = &w->msgs[0].msg_hdr;
		ssize_t r;

		if (S.k.gro)
			r = recvmsg(fd, h, flags);
		else
			r = recvfrom(fd, w->iov[0].iov_base, w->buf_len, MSG_TRUNC | flags,
				     h->msg_name, &h->msg_namelen);
		if (r >= 0 && !S.k.gro && r > w->buf_len)
			h->msg_flags |= MSG_TRUNC;
		w->msgs[0].msg_len = r;
		n = r < 0 ? -1 : 1;
	} else {
		n = recvmmsg(fd, w->msgs, w->batch, MSG_WAITFORONE | flags, NULL);
	}
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
	return n;
}

/* The n datagrams rx_batch read (from the uplink's IPv6 socket: v6), each to its path, then what
 * they queued sent and the IPv6 usage added. */
static void rx_handle(struct worker *w, int n, int v6)
{
	if (n <= 0) {
		if (n < 0) {
			fprintf(stderr, "worker %d: Couldn't receive: %s\n", w->id, strerror(-n));
			usleep(TICK_MS * 1000);
		}
		CTR(w, PGWU_SC_RX_EMPTY)++;
		return;
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
			dl_one(w, buf, len, w->ll[i].sll_protocol);
			continue;
		}
		int seg = S.k.gro ? gso_size(h) : 0;

		if (!seg || (__u32)seg >= len) {
			if (v6)
				ul6n3_one(w, buf, len, &w->from6[i]);
			else
				ul_one(w, buf, len, &w->from[i]);
			continue;
		}
		CTR(w, PGWU_SC_GRO_DATAGRAMS)++;
		for (__u32 off = 0; off < len; off += seg) {
			__u32 n = len - off < (__u32)seg ? len - off : (__u32)seg;

			if (v6)
				ul6n3_one(w, buf + off, n, &w->from6[i]);
			else
				ul_one(w, buf + off, n, &w->from[i]);
		}
	}
	/* before the next read: what is queued points into the receive buffers */
	tx_flush(w);
	usage6_flush(w);
}

/*
 * A worker's loop. An uplink worker with the N3 IPv6 socket too (rx6) waits on both with poll()
 * and reads each that is ready without waiting (another thread of a shared socket may have taken
 * it): a system call more per batch than the one socket's blocking read, which the others keep.
 */
void *worker_run(void *arg)
{
	struct worker *w = arg;

	worker_setup(w);
	while (!stop) {
		cfg_sync(w);
		if (w->rx6 < 0) {
			rx_handle(w, rx_batch(w, w->rx, 0, 0), 0);
			continue;
		}
		struct pollfd pf[2] = { { .fd = w->rx, .events = POLLIN },
					{ .fd = w->rx6, .events = POLLIN } };
		int r = poll(pf, 2, TICK_MS);

		if (r <= 0) {
			CTR(w, PGWU_SC_RX_EMPTY)++;
			continue;
		}
		for (int k = 0; k < 2; k++)
			if (pf[k].revents & (POLLIN | POLLERR))
				rx_handle(w, rx_batch(w, pf[k].fd, k, MSG_DONTWAIT), k);
	}
	return NULL;
}
