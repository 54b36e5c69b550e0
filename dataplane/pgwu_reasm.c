// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pgwu_reasm.c: `pgwu reassemble`, what takes the G-PDUs that reach the PGW-U in outer fragments.
 *
 * xdp_sgi lets the kernel fragment an encapsulated packet without DF that is over the access MTU
 * (as Linux IP tunnels do), so a peer like us sends outer fragments too. XDP sees one fragment at a
 * time; reassembly is the kernel's job. So xdp_access passes an outer fragment of UDP to the GTP-U
 * address to the kernel (PGWU_R_PASS_OUTER_FRAG) while this process is registered in
 * fib_gen[PGWU_REG_REASM], and drops it (PGWU_R_DROP_OUTER_FRAG) otherwise. The kernel reassembles
 * the datagram (the address is local) and delivers it to UDP port 2152, where this process reads it
 * and does what xdp_access does with a G-PDU, with the same code (include/gtpu.h): the GTP-U header,
 * the extension header chain, the bearer by TEID (ul_bearers), its QFI, the inner IPv4 header,
 * anti-spoofing, the TTL (decremented). The inner packet then goes to the kernel through a raw
 * socket (IP_HDRINCL), which routes it out of SGi. Every datagram is counted once in reasm_stats
 * (enum pgwu_reasm_stat), which this process alone writes, through mmap.
 *
 * What it does not do (the XDP program does, for whole G-PDUs): answer with an Error Indication,
 * a Supported Extension Headers Notification or an ICMP Time Exceeded; handle signalling (only
 * G-PDUs come fragmented in practice); count per-bearer usage. Registration: reasm_register, run on
 * itself with BPF_PROG_TEST_RUN, writes its tgid; fib_gen_watch_exit clears it when the process
 * exits, however it dies, so fragments are never passed to a kernel with no one to take them.
 * Every TICK_MS it re-reads the config (GTP-U address, inner checksum switch), the interfaces
 * xdp_access is attached to (only datagrams that came in on one of them are taken), and ends by
 * itself when pgwu is unloaded.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "pgwu_cli.h"
#include "pgwu_daemon.h"
#include "gtpu.h"

#define TICK_MS 200
#define BATCH 32
#define DGRAM_MAX 65536
#define MAX_ACCESS 16
#define RCVBUF (8 << 20)

struct reasm {
	struct pgwu_maps m;		/* config, ul_bearers and the slot index */
	int reg_fd;			/* reasm_register */
	int stats_fd;
	__u64 *stats;			/* reasm_stats, mmap()ed */
	size_t stats_len;
	int udp;			/* bound to local:2152 */
	int raw;			/* IPPROTO_RAW: sends the inner packets */
	__u32 local;			/* the address udp is bound to (network order) */
	bool check_csum;
	int access[MAX_ACCESS];		/* ifindexes xdp_access is attached to */
	int n_access;
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	stop = 1;
}

static __u64 now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (__u64)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The interfaces xdp_access is attached to: the links pinned as link_xdp_<ifname> that hold it. */
static void access_refresh(struct reasm *r)
{
	struct bpf_prog_info pi = {};
	__u32 len = sizeof(pi);
	struct dirent *e;
	int fd, n = 0;
	DIR *d;

	fd = pinned_open("xdp_access");
	if (fd < 0)
		return;
	if (bpf_obj_get_info_by_fd(fd, &pi, &len)) {
		close(fd);
		return;
	}
	close(fd);
	d = opendir(pin_dir);
	if (!d)
		return;
	while ((e = readdir(d)) && n < MAX_ACCESS) {
		struct bpf_link_info li = {};
		char path[PATH_MAX];

		if (strncmp(e->d_name, PGWU_XDP_LINK_PREFIX, strlen(PGWU_XDP_LINK_PREFIX)) ||
		    pin_path(path, sizeof(path), e->d_name))
			continue;
		fd = bpf_obj_get(path);
		if (fd < 0)
			continue;
		len = sizeof(li);
		if (!bpf_obj_get_info_by_fd(fd, &li, &len) && li.prog_id == pi.id)
			r->access[n++] = li.xdp.ifindex;
		close(fd);
	}
	closedir(d);
	r->n_access = n;
}

static bool from_access(const struct reasm *r, int ifindex)
{
	for (int i = 0; i < r->n_access; i++)
		if (r->access[i] == ifindex)
			return true;
	return false;
}

/* A UDP socket on addr:2152 that says which interface each datagram came in on. SO_REUSEADDR:
 * `pgwu path --send` binds the same address and port for a moment to send its Echo Requests. */
static int udp_open(__u32 addr)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(PGWU_GTPU_PORT),
				 .sin_addr.s_addr = addr };
	int one = 1, rcvbuf = RCVBUF, fd, err;
	char buf[16];

	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* room for bursts of reassembled datagrams; the unprivileged limit when FORCE is refused */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)))
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	if (setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a))) {
		err = -errno;
		fprintf(stderr, "Couldn't bind %s:%d: %s\n", ip_str(addr, buf), PGWU_GTPU_PORT,
			strerror(-err));
		close(fd);
		return err;
	}
	return fd;
}

/* The config's GTP-U address and inner checksum switch; a new address gets a new socket. */
static int config_refresh(struct reasm *r)
{
	struct pgwu_config c;
	char buf[16];
	int fd, err;

	err = config_read(r->m.config, &c);
	if (err)
		return err;
	r->check_csum = !(c.flags & PGWU_CFG_NO_INNER_CSUM_CHECK);
	if (c.local_addr == r->local && r->udp >= 0)
		return 0;
	if (!c.local_addr) {
		fprintf(stderr, "pgwu has no GTP-U address (pgwu config --local-addr A)\n");
		return -EDESTADDRREQ;
	}
	fd = udp_open(c.local_addr);
	if (fd < 0)
		return fd;
	if (r->udp >= 0) {
		close(r->udp);
		printf("pgwu reassemble: now on %s:%d\n", ip_str(c.local_addr, buf), PGWU_GTPU_PORT);
		fflush(stdout);
	}
	r->udp = fd;
	r->local = c.local_addr;
	return 0;
}

static __u32 ra_of(__u32 reason)
{
	switch (reason) {
	case PGWU_R_DROP_TRUNC_GTP:
		return PGWU_RA_DROP_TRUNC_GTP;
	case PGWU_R_DROP_GTP_VERSION:
		return PGWU_RA_DROP_GTP_VERSION;
	case PGWU_R_DROP_GTP_BAD_LEN:
		return PGWU_RA_DROP_GTP_BAD_LEN;
	case PGWU_R_DROP_GTP_BAD_EXT:
		return PGWU_RA_DROP_GTP_BAD_EXT;
	case PGWU_R_DROP_GTP_EXT_UNSUPPORTED:
		return PGWU_RA_DROP_GTP_EXT_UNSUPPORTED;
	case PGWU_R_DROP_QFI_MISMATCH:
		return PGWU_RA_DROP_QFI_MISMATCH;
	case PGWU_R_DROP_INNER_NOT_IPV4:
		return PGWU_RA_DROP_INNER_NOT_IPV4;
	case PGWU_R_DROP_INNER_BAD:
		return PGWU_RA_DROP_INNER_BAD;
	case PGWU_R_DROP_INNER_CSUM:
		return PGWU_RA_DROP_INNER_CSUM;
	case PGWU_R_DROP_SPOOFED:
		return PGWU_RA_DROP_SPOOFED;
	default:	/* PGWU_R_DROP_TTL_EXPIRED, the last check */
		return PGWU_RA_DROP_TTL_EXPIRED;
	}
}

/* The bearer of a local TEID (network order): its slot copy, else the hash map. */
static int bearer_of(const struct reasm *r, __u32 teid, struct pgwu_ul_bearer *b)
{
	const struct pgwu_ul_slot *s = slot_ul(&r->m, teid);

	if (s) {
		b->ue_addr = s->b.ue_addr;
		b->flags = s->b.flags;
		return 0;
	}
	return bpf_map_lookup_elem(r->m.ul, &teid, b) ? -ENOENT : 0;
}

/* One reassembled UDP payload (n octets) that came in on ifindex; returns its enum pgwu_reasm_stat. */
static __u32 handle(struct reasm *r, __u8 *buf, size_t n, int ifindex)
{
	struct sockaddr_in to = { .sin_family = AF_INET };
	struct pgwu_ul_bearer b;
	struct iphdr *iip = NULL;
	struct gtpu_msg m;
	void *end = buf + n;
	__u32 reason;

	if (!from_access(r, ifindex))
		return PGWU_RA_DROP_NOT_ACCESS;
	reason = gtpu_hdr_check(buf, end, end, n + sizeof(struct udphdr), &m);
	if (reason)
		return ra_of(reason);
	if (m.gtp->type != GTP_GPDU)
		return PGWU_RA_DROP_NOT_GPDU;
	reason = gtpu_ext_walk(&m, end, end);
	if (reason)
		return ra_of(reason);
	if (bearer_of(r, m.gtp->teid, &b))
		return PGWU_RA_DROP_UNKNOWN_TEID;
	reason = gpdu_qfi_check(b.flags, m.psc);
	if (!reason)
		reason = gpdu_inner_check(m.p, end, end, r->check_csum, b.ue_addr, &iip);
	if (reason)
		return ra_of(reason);
	ipv4_decrease_ttl(iip);
	to.sin_addr.s_addr = iip->daddr;
	if (sendto(r->raw, iip, (__u8 *)end - (__u8 *)m.p, 0, (struct sockaddr *)&to,
		   sizeof(to)) < 0)
		return PGWU_RA_DROP_SEND;
	return PGWU_RA_FORWARDED;
}

/* Read what the socket holds, BATCH datagrams at a time. */
static void drain(struct reasm *r)
{
	static __u8 bufs[BATCH][DGRAM_MAX];
	static char cbufs[BATCH][CMSG_SPACE(sizeof(struct in_pktinfo))];
	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
	int n;

	do {
		memset(msgs, 0, sizeof(msgs));
		for (int i = 0; i < BATCH; i++) {
			iov[i].iov_base = bufs[i];
			iov[i].iov_len = DGRAM_MAX;
			msgs[i].msg_hdr.msg_iov = &iov[i];
			msgs[i].msg_hdr.msg_iovlen = 1;
			msgs[i].msg_hdr.msg_control = cbufs[i];
			msgs[i].msg_hdr.msg_controllen = sizeof(cbufs[i]);
		}
		n = recvmmsg(r->udp, msgs, BATCH, MSG_DONTWAIT, NULL);
		for (int i = 0; i < n; i++) {
			struct msghdr *h = &msgs[i].msg_hdr;
			struct cmsghdr *c;
			int ifindex = 0;

			for (c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c))
				if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO)
					ifindex = ((struct in_pktinfo *)CMSG_DATA(c))->ipi_ifindex;
			r->stats[PGWU_RA_RECEIVED]++;
			r->stats[handle(r, bufs[i], msgs[i].msg_len, ifindex)]++;
		}
	} while (n == BATCH && !stop);
}

static void reasm_close(struct reasm *r)
{
	if (r->udp >= 0)
		close(r->udp);
	if (r->raw >= 0)
		close(r->raw);
	if (r->stats)
		munmap(r->stats, r->stats_len);
	if (r->stats_fd >= 0)
		close(r->stats_fd);
	if (r->reg_fd >= 0)
		close(r->reg_fd);
	maps_close(&r->m);
}

/* Everything before registering: maps, counters, sockets. Returns 0 or -errno (said why). */
static int reasm_open(struct reasm *r)
{
	long page = sysconf(_SC_PAGESIZE);
	__u32 max = 0;
	int one = 1, err;
	__u64 other;

	r->udp = r->raw = r->reg_fd = r->stats_fd = -1;
	r->stats = NULL;
	err = maps_open(&r->m);
	if (err)
		return err;
	r->reg_fd = pinned_open("reasm_register");
	if (r->reg_fd < 0) {
		err = r->reg_fd;
		if (err == -ENOENT)
			fprintf(stderr, "reasm_register is not loaded: it needs the tracing programs "
				"(see pgwu load's warning), or this PIN_DIR was loaded by an older pgwu\n");
		return err;
	}
	other = helper_read(r->m.fib_gen, PGWU_REG_REASM);
	if (other) {
		fprintf(stderr, "pgwu reassemble already runs for %s (pid %llu)\n", pin_dir,
			(unsigned long long)other);
		return -EBUSY;
	}
	r->stats_fd = pinned_open("reasm_stats");
	if (r->stats_fd < 0)
		return r->stats_fd;
	err = map_max_entries(r->stats_fd, &max);
	if (err)
		return err;
	if (max != PGWU_RA_MAX) {
		fprintf(stderr, "reasm_stats has %u entries, this pgwu counts %d: reload pgwu\n", max,
			PGWU_RA_MAX);
		return -EINVAL;
	}
	r->stats_len = (PGWU_RA_MAX * sizeof(__u64) + page - 1) / page * page;
	r->stats = mmap(NULL, r->stats_len, PROT_READ | PROT_WRITE, MAP_SHARED, r->stats_fd, 0);
	if (r->stats == MAP_FAILED) {
		err = -errno;
		r->stats = NULL;
		fprintf(stderr, "Couldn't map reasm_stats: %s\n", strerror(-err));
		return err;
	}
	r->raw = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
	if (r->raw < 0 || setsockopt(r->raw, IPPROTO_IP, IP_HDRINCL, &one, sizeof(one))) {
		err = -errno;
		fprintf(stderr, "Couldn't open the raw socket to send to SGi: %s\n", strerror(-err));
		return err;
	}
	err = config_refresh(r);
	if (err)
		return err;
	access_refresh(r);
	return 0;
}

/*
 * The reassembler, in this process. ready_fd >= 0 (--daemon): once registered, stdio goes to
 * /dev/null and one byte is written there; errors before that go to the caller's stderr.
 */
static int reasm_run(int ready_fd)
{
	struct sigaction sa = { .sa_handler = on_signal };	/* no SA_RESTART: poll returns */
	struct reasm r;
	__u64 last;
	__u32 tgid;
	char buf[16];
	int err;

	err = reasm_open(&r);
	if (err)
		goto out;
	err = helper_register(r.reg_fd, &tgid);
	if (err) {
		fprintf(stderr, "Couldn't register the reassembler: %s\n", strerror(-err));
		goto out;
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	printf("pgwu reassemble: registered as pid %u, reading %s:%d; outer fragments are passed "
	       "to the kernel\n", tgid, ip_str(r.local, buf), PGWU_GTPU_PORT);
	fflush(stdout);
	err = pgwu_daemon_ready(&ready_fd, NULL);
	last = now_ms();
	while (!stop) {
		struct pollfd p = { .fd = r.udp, .events = POLLIN };

		if (poll(&p, 1, TICK_MS) > 0)
			drain(&r);
		if (now_ms() - last < TICK_MS)
			continue;
		last = now_ms();
		if (!pgwu_is_loaded())
			break;		/* unloaded: nothing to reassemble for */
		if (config_refresh(&r))
			break;
		access_refresh(&r);
		/* the slot is empty only if a reassembler that another start found running
		 * exited in between: ours again */
		if (!helper_read(r.m.fib_gen, PGWU_REG_REASM))
			helper_register(r.reg_fd, &tgid);
	}
	/* on the way out fib_gen_watch_exit clears the registration, before the socket closes */
out:
	if (ready_fd >= 0)
		close(ready_fd);
	reasm_close(&r);
	return err;
}

static int reasm_child(void *arg, int ready_fd)
{
	(void)arg;
	return reasm_run(ready_fd);
}

int do_reassemble(const void *cfg)
{
	const struct reasm_opts *o = cfg;
	int pid;

	if (!o->daemon.set)
		return reasm_run(-1);
	pid = pgwu_daemonize(reasm_child, NULL);
	if (pid < 0)
		return pid;	/* -ECHILD: it failed before registering, and said why */
	printf("pgwu reassemble running as pid %d\n", pid);
	return 0;
}
