// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#define _GNU_SOURCE
/*
 * pfcp_gtpu.c: the GTP-U packets the agent itself sends: End Markers (TS 29.281 7.3.2) on a
 * session's old downlink tunnel, when an Update FAR moves it (or stops it) with the SNDEM flag
 * (TS 29.244 5.2.2.3: "send end marker packets").
 *
 * Sent through a raw IPv4 socket in the agent's network namespace (the data path's, where the
 * GTP-U address lives), from the GTP-U address and port 2152 to the old peer's port 2152: no UDP
 * socket bound to 2152, which `pgwu reassemble` owns. The kernel routes it as the data path's
 * unresolved packets are routed. To an IPv6 peer (N3 over IPv6, a bearer with PGWU_B_PEER6): the
 * same through a raw IPv6 socket (IPPROTO_RAW: the header is ours, nothing is received) from the
 * N3 IPv6 address, hop limit 64, the UDP checksum computed (mandatory over IPv6, RFC 8200 8.1).
 *
 * Order: the End Marker must follow the last G-PDU sent on the old tunnel. The new tunnel is in
 * the bearer tables (hash entry and slot) before end_marker_send() is called; a program run that
 * read the old one may still be in flight on another CPU. XDP programs run inside an RCU read-side
 * section, with the redirected frames flushed before it ends, so membarrier(MEMBARRIER_CMD_GLOBAL)
 * (synchronize_rcu()) returns only once every such run, and its frames, is gone to the device
 * queue; the End Marker is queued after them.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <linux/membarrier.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include "pfcp_agent.h"

#define GTP_END_MARKER 254
#define GTP_EXT_PSC 0x85

void gtpu_close(struct pfcp_agent *a)
{
	if (a->raw_fd >= 0)
		close(a->raw_fd);
	if (a->raw_fd6 >= 0)
		close(a->raw_fd6);
	a->raw_fd = a->raw_fd6 = -1;
}

/*
 * The raw socket, made in netns (a path such as /run/netns/NAME; NULL: the agent's own) and bound
 * to the GTP-U address: a namespace that does not have that address (the host's, for an agent
 * serving a lab's data path from outside it) gets no socket, so no End Marker ever takes that
 * namespace's routes (its default route) towards a lab's addresses.
 */
int gtpu_open(struct pfcp_agent *a, const char *netns)
{
	struct sockaddr_in me = { .sin_family = AF_INET, .sin_addr.s_addr = a->local_addr };
	int self = -1, ns = -1, err = 0;

	if (netns) {
		self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
		ns = open(netns, O_RDONLY | O_CLOEXEC);
		if (self < 0 || ns < 0 || setns(ns, CLONE_NEWNET)) {
			err = -errno;
			fprintf(stderr, "Couldn't enter %s for End Markers: %s\n", netns, strerror(-err));
			goto out;
		}
	}
	a->raw_fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
	if (a->raw_fd < 0)
		err = -errno;
	else if (bind(a->raw_fd, (struct sockaddr *)&me, sizeof(me)))
		err = -errno;
	if (!err && a->has_n3_6) {
		struct sockaddr_in6 me6 = { .sin6_family = AF_INET6 };

		memcpy(&me6.sin6_addr, a->n3_addr6, 16);
		a->raw_fd6 = socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
		if (a->raw_fd6 < 0 || bind(a->raw_fd6, (struct sockaddr *)&me6, sizeof(me6))) {
			fprintf(stderr, "Couldn't open a raw IPv6 socket on the N3 IPv6 address for End "
				"Markers: %s (none will be sent to IPv6 peers)\n", strerror(errno));
			if (a->raw_fd6 >= 0)
				close(a->raw_fd6);
			a->raw_fd6 = -1;
		}
	}
	if (netns && setns(self, CLONE_NEWNET)) {
		fprintf(stderr, "Couldn't return to the agent's network namespace: %s\n",
			strerror(errno));
		err = err ? err : -errno;
	}
	if (err) {
		fprintf(stderr, "Couldn't open a raw socket on the GTP-U address for End Markers%s%s: "
			"%s (none will be sent)\n", netns ? " in " : "", netns ? netns : "",
			strerror(-err));
		gtpu_close(a);
	}
out:
	if (self >= 0)
		close(self);
	if (ns >= 0)
		close(ns);
	return err;
}


static __u16 csum_fold(__u32 sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

static __u32 csum_add(__u32 sum, const void *p, size_t len)
{
	const __u8 *b = p;

	for (size_t i = 0; i + 1 < len; i += 2)
		sum += b[i] << 8 | b[i + 1];
	if (len & 1)
		sum += b[len - 1] << 8;
	return sum;
}

/* Every XDP run that may have read the old tunnel is over (see the top of the file) */
static void dataplane_sync(void)
{
	if (syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0))
		usleep(10000);	/* nohz_full kernels refuse it: a run takes microseconds */
}

/* UDP 2152 -> 2152 (checksum 0) and the End Marker at udp: TEID teid (network order), with qfi >= 0
 * a PDU Session Container (DL PDU SESSION INFORMATION, that QFI). Returns the UDP length. */
static size_t end_marker_body(__u8 *udp, __u32 teid, int qfi)
{
	size_t glen = qfi >= 0 ? 16 : 8;
	__u8 *g = udp + 8;

	udp[0] = 2152 >> 8;
	udp[1] = 2152 & 0xff;
	udp[2] = 2152 >> 8;
	udp[3] = 2152 & 0xff;
	udp[4] = (8 + glen) >> 8;
	udp[5] = (8 + glen) & 0xff;
	udp[6] = udp[7] = 0;
	g[0] = 0x30;			/* version 1, PT 1 */
	g[1] = GTP_END_MARKER;
	memcpy(g + 4, &teid, 4);
	if (qfi >= 0) {
		g[0] |= 0x04;		/* E: the optional fields, then the extension header */
		g[3] = 8;
		g[11] = GTP_EXT_PSC;
		g[12] = 1;		/* 4 octets */
		g[13] = 0;		/* PDU type 0: DL PDU SESSION INFORMATION */
		g[14] = qfi & 0x3f;
		g[15] = 0;		/* no next extension header */
	}
	return 8 + glen;
}

/* The UDP checksum over the pseudo-header (RFC 768, RFC 8200 8.1): addrs the source and destination
 * (alen octets each), udp its datagram of ulen octets. */
static void udp_csum(const __u8 *addrs, size_t alen, __u8 *udp, size_t ulen)
{
	__u32 sum = csum_add(0, addrs, 2 * alen) + IPPROTO_UDP + ulen;
	__u16 c;

	sum = csum_add(sum, udp, ulen);
	c = csum_fold(sum);
	c = c ? c : 0xffff;
	udp[6] = c >> 8;
	udp[7] = c & 0xff;
}

static int end_marker_sent(struct pfcp_agent *a, ssize_t r, size_t len, int af, const void *peer)
{
	char p[INET6_ADDRSTRLEN];

	if (r != (ssize_t)len) {
		int err = r < 0 ? -errno : -EMSGSIZE;

		stat_add(a, PFCP_STAT_END_MARKER_ERRORS, 1);
		fprintf(stderr, "Couldn't send an End Marker to %s: %s\n",
			inet_ntop(af, peer, p, sizeof(p)) ? p : "?", strerror(-err));
		return err;
	}
	stat_add(a, PFCP_STAT_END_MARKERS, 1);
	return 0;
}

/*
 * One End Marker to peer (network order) with its TEID (network order): IPv4 / UDP 2152 -> 2152 /
 * GTP-U type 254, length 0, no sequence number; with qfi >= 0 a PDU Session Container (DL PDU
 * SESSION INFORMATION, that QFI), as the bearer's G-PDUs carry it (TS 38.415 5.5.2.1). 0 or -errno.
 */
int end_marker_send(struct pfcp_agent *a, __u32 peer, __u32 teid, int qfi)
{
	__u8 pkt[20 + 8 + 8 + 8] = {};
	__u8 *ip = pkt, *udp = pkt + 20;
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_addr.s_addr = peer };
	size_t ulen, len;

	if (a->raw_fd < 0) {
		stat_add(a, PFCP_STAT_END_MARKER_ERRORS, 1);
		return -EBADF;
	}
	ulen = end_marker_body(udp, teid, qfi);
	len = 20 + ulen;
	ip[0] = 0x45;
	ip[2] = len >> 8;
	ip[3] = len & 0xff;
	ip[6] = 0x40;			/* DF; the kernel fills the ID (0) and the checksum */
	ip[8] = 64;
	ip[9] = IPPROTO_UDP;
	memcpy(ip + 12, &a->local_addr, 4);
	memcpy(ip + 16, &peer, 4);
	udp_csum(ip + 12, 4, udp, ulen);
	dataplane_sync();
	return end_marker_sent(a, sendto(a->raw_fd, pkt, len, 0, (struct sockaddr *)&to, sizeof(to)), len,
			       AF_INET, &peer);
}

/* The same to an IPv6 peer: IPv6 n3_addr6 -> peer, class and flow label 0, hop limit 64. */
int end_marker_send6(struct pfcp_agent *a, const __u8 *peer, __u32 teid, int qfi)
{
	__u8 pkt[40 + 8 + 8 + 8] = {};
	__u8 *ip = pkt, *udp = pkt + 40;
	struct sockaddr_in6 to = { .sin6_family = AF_INET6 };
	size_t ulen;

	if (a->raw_fd6 < 0) {
		stat_add(a, PFCP_STAT_END_MARKER_ERRORS, 1);
		return -EBADF;
	}
	memcpy(&to.sin6_addr, peer, 16);
	ulen = end_marker_body(udp, teid, qfi);
	ip[0] = 0x60;
	ip[4] = ulen >> 8;
	ip[5] = ulen & 0xff;
	ip[6] = IPPROTO_UDP;
	ip[7] = 64;
	memcpy(ip + 8, a->n3_addr6, 16);
	memcpy(ip + 24, peer, 16);
	udp_csum(ip + 8, 16, udp, ulen);
	dataplane_sync();
	return end_marker_sent(a, sendto(a->raw_fd6, pkt, 40 + ulen, 0, (struct sockaddr *)&to, sizeof(to)),
			       40 + ulen, AF_INET6, peer);
}
