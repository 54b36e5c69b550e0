// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pgwu_sock_setup.c: the sockets of `pgwu socket` (pgwu_sock.c): the uplink UDP sockets (GTP-ADDR:2152
 * on the access interface, an SO_REUSEPORT group or one), the downlink packet sockets on SGi (a
 * tap, a PACKET_FANOUT group or one), the raw sockets that send; the knobs they share (receive
 * timeout, buffers, busy polling); and what must hold before they open: no XDP program of the
 * PGW-U on the interfaces, GRO off on SGi (and on on access for --gro).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <linux/ethtool.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/sockios.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "pgwu_sock_int.h"

const char *const fanout_names[] = { "hash", "lb", "cpu", "qm", NULL };
static const int fanout_modes[] = { PACKET_FANOUT_HASH, PACKET_FANOUT_LB, PACKET_FANOUT_CPU,
				    PACKET_FANOUT_QM };

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

int udp_open(void)
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
 * N3 over IPv6: the uplink's UDP socket on [n3_addr6]:2152 (IPv6 only), bound to the access
 * interface as udp_open's, in the same SO_REUSEPORT group arrangement. No UDP_NO_CHECK6_RX: the
 * kernel drops a datagram with checksum 0 (RFC 8200 8.1, RFC 6936 5) and one with a wrong checksum
 * before it is read, counted in /proc/net/snmp6 Udp6InCsumErrors (and Udp6InErrors): the XDP
 * path's drop_outer_udp_csum, counted where the kernel counts it.
 */
int udp6_open(void)
{
	struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_port = htons(PGWU_GTPU_PORT) };
	char ifname[IF_NAMESIZE] = "", buf[INET6_ADDRSTRLEN] = "";
	int one = 1, fd, err;

	memcpy(&a.sin6_addr, S.cfg.n3_addr6, 16);
	fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if_indextoname(S.access_ifindex, ifname);
	err = sock_common(fd, "UDP IPv6");
	if (!err && (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) ||
		     (S.k.reuseport &&
		      setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one))) ||
		     setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, ifname, strlen(ifname)) ||
		     (S.k.gro && setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof(one))) ||
		     bind(fd, (struct sockaddr *)&a, sizeof(a)))) {
		err = -errno;
		inet_ntop(AF_INET6, S.cfg.n3_addr6, buf, sizeof(buf));
		fprintf(stderr, "Couldn't bind UDP [%s]:%d on %s: %s%s\n", buf, PGWU_GTPU_PORT, ifname,
			strerror(-err), err == -EADDRNOTAVAIL ? " (the N3 IPv6 address is not on this "
			"host: pgwu config --n3-addr6)" : "");
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
 * after tc). A classic BPF filter keeps incoming IPv4 and IPv6 only.
 */
int packet_open(void)
{
	/* IPv4 and IPv6, and not a packet this host sends (a fanout group's hook ignores the
	 * sockets' PACKET_IGNORE_OUTGOING; PACKET_FANOUT_FLAG_IGNORE_OUTGOING is 6.4+) */
	struct sock_filter ip_in[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SKF_AD_OFF + SKF_AD_PKTTYPE),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PACKET_OUTGOING, 3, 0),
		BPF_STMT(BPF_LD | BPF_H | BPF_ABS, SKF_AD_OFF + SKF_AD_PROTOCOL),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IP, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IPV6, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, 0),
		BPF_STMT(BPF_RET | BPF_K, 0xffffffff),
	};
	struct sock_fprog prog = { .len = 7, .filter = ip_in };
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
int raw_open(void)
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

/* The socket IPv6 is sent through on SGi (the uplink's decapsulated packets, the downlink's ICMPv6
 * errors): AF_INET6 IPPROTO_RAW, which sends the IPv6 header as given (IPV6_HDRINCL is implied);
 * IPV6_RECVERR for the same reason as raw_open's IP_RECVERR. */
int raw6_open(void)
{
	int fd = socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW), err, one = 1;

	if (fd < 0 || setsockopt(fd, IPPROTO_IPV6, IPV6_RECVERR, &one, sizeof(one)) ||
	    (S.k.sndbuf && setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &S.k.sndbuf, sizeof(int)) &&
	     setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &S.k.sndbuf, sizeof(int)))) {
		err = -errno;
		fprintf(stderr, "Couldn't open the raw IPv6 socket that sends: %s\n", strerror(-err));
		if (fd >= 0)
			close(fd);
		return err;
	}
	return fd;
}

/* ---- what must hold before the sockets open ---- */

/* Nothing of the XDP path may take these interfaces' packets first: xdp_access or xdp_sgi
 * attached to them (pgwu attach) would. */
int xdp_check(void)
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
int gro_check(void)
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
