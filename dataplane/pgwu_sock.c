// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pgwu_sock.c: `pgwu socket`, the PGW-U on Linux sockets, beside the XDP one: how fast can a
 * gateway go with what every Linux host has? Written as the classic receive experiments are: every
 * knob a flag, counters per second per thread, the kernel's drop counters beside its own
 * (docs/socket.md). This file is the command (setup, the threads, the signals, the main thread's
 * tick); the packet paths, the batching, the sockets and the counters have a file each
 * (pgwu_sock_int.h lists them).
 *
 *   uplink    G-PDUs on UDP GTP-ADDR:2152 (bound to the access interface), one socket per
 *             worker thread in an SO_REUSEPORT group, or one socket all of them read; checked as
 *             xdp_access checks them (include/gtpu.h: the same code), the inner packet (TTL - 1)
 *             sent to SGi through a raw socket (IP_HDRINCL): the kernel routes it. With the
 *             config's n3_addr6, GTP-U over IPv6 too: a UDP socket on [n3_addr6]:2152 beside it
 *             (both waited on with poll()), replies over IPv6 (docs/ipv6.md).
 *   downlink  IPv4 packets on SGi read with a packet socket (a tap: SOCK_DGRAM, every protocol,
 *             IPv4 kept by a filter), one per worker in a PACKET_FANOUT group, or one for all;
 *             packets for the UE pool are encapsulated as xdp_sgi encapsulates them (gtpu.h:
 *             source port from the inner flow, QFI, checksum or its opt-out) and sent to the SGW
 *             through the raw socket (a bearer whose peer is IPv6, PGWU_B_PEER6: GTP-U/UDP/IPv6
 *             through the raw IPv6 socket). A tap is served before tc ingress: a tc filter there should drop the UE
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
 * Notification, ICMP and ICMPv6 Time Exceeded both ways, Fragmentation Needed, ICMPv6 Packet Too
 * Big both ways), through the raw socket, rate-
 * limited per peer and per worker. Not done here (the XDP path does them): egress VLAN tags and
 * static next hops (the kernel routes), an
 * 802.1Q-tagged G-PDU on access (the kernel drops it without a VLAN device), per-bearer usage of
 * bearers outside the direct index. Outer fragments need no `pgwu reassemble`: the kernel
 * reassembles them for the UDP socket (the two cannot run at once: both bind port 2152).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <net/if.h>
#include <arpa/inet.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <bpf/bpf.h>
#include "pgwu_sock_int.h"
#include "pgwu_daemon.h"

struct sock_state S;

volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	stop = 1;
}

/* ---- the config, from the main thread to the workers (a seqlock) ---- */

static void cfg_publish(const struct pgwu_config *c)
{
	__atomic_store_n(&S.cfg_seq, S.cfg_seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	S.cfg = *c;
	__atomic_store_n(&S.cfg_seq, S.cfg_seq + 1, __ATOMIC_RELEASE);
}

void cfg_sync(struct worker *w)
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

/* ---- the workers ---- */

void worker_setup(struct worker *w)
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

static void worker_free(struct worker *w)
{
	if (!w)
		return;
	if (w->raw >= 0)
		close(w->raw);
	if (w->frag >= 0)
		close(w->frag);
	if (w->raw6 >= 0)
		close(w->raw6);
	free(w->bufs);
	free(w->from6);
	free(w->peer6);
	free(w->msgs);
	free(w->iov);
	free(w->from);
	free(w->ll);
	free(w->cmsg);
	free(w);
}

/* Worker i of direction dir, its receive socket rx (shared or its own); uplink, its N3 IPv6 one
 * rx6 too (-1: none). */
static struct worker *worker_new(enum dir dir, int i, int rx, int rx6)
{
	struct worker *w = calloc(1, sizeof(*w));
	size_t slot;

	if (!w)
		return NULL;
	w->id = i;
	w->dir = dir;
	w->rx = rx;
	w->rx6 = rx6;
	w->raw = w->frag = w->raw6 = -1;
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
	w->ll = calloc(w->batch, sizeof(*w->ll));
	w->cmsg = calloc(w->batch, sizeof(*w->cmsg));
	w->from6 = calloc(w->batch, sizeof(*w->from6));
	if (dir == DL)
		w->peer6 = calloc(PGWU_N3V6_PEERS, sizeof(*w->peer6));
	if (!w->bufs || !w->msgs || !w->iov || !w->from || !w->ll || !w->cmsg || !w->from6 ||
	    (dir == DL && !w->peer6))
		goto fail;
	for (int j = 0; j < w->batch; j++) {
		struct msghdr *h = &w->msgs[j].msg_hdr;

		w->iov[j].iov_base = w->bufs + j * slot + HEADROOM;
		w->iov[j].iov_len = w->buf_len;
		h->msg_iov = &w->iov[j];
		h->msg_iovlen = 1;
		h->msg_name = dir == UL ? (void *)&w->from[j] : (void *)&w->ll[j];
		h->msg_control = w->cmsg[j];
	}
	for (int j = 0; j < TX_MAX; j++) {
		w->tto[j].sin_family = AF_INET;
		w->tto6[j].sin6_family = AF_INET6;
		w->tmsg[j].msg_hdr.msg_name = &w->tto[j];
		w->tmsg[j].msg_hdr.msg_namelen = sizeof(w->tto[j]);
		w->tmsg[j].msg_hdr.msg_iov = &w->tiov[j];
		w->tmsg[j].msg_hdr.msg_iovlen = 1;
	}
	w->raw = raw_open();
	if (w->raw < 0)
		goto fail;
	w->raw6 = raw6_open();
	if (w->raw6 < 0)
		goto fail;
	return w;
fail:
	worker_free(w);
	return NULL;
}

/* ---- the main thread: kernel drops, CPUs, config, the per-second lines (pgwu_sock_counters.c) ---- */

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
				if ((c.local_addr != S.cfg.local_addr ||
				     memcmp(c.n3_addr6, S.cfg.n3_addr6, 16)) && !warned) {
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
	S.peers6 = pinned_open_opt("peers6");
	S.sig_rx6 = pinned_open_opt("sig_rx6");
	err = stats_open();
	if (!err)
		err = stats_claim();
	return err;
}

/* Whether the config has an N3 IPv6 address: the uplink workers read GTP-U over IPv6 too. */
static bool n3v6_on(void)
{
	static const __u8 zero[16];

	return memcmp(S.cfg.n3_addr6, zero, 16) != 0;
}

static int sock_open_workers(void)
{
	int shared[2] = { -1, -1 }, shared6 = -1, err = 0;

	for (int d = UL; d <= DL && !err; d++) {
		for (int i = 0; i < S.k.threads; i++) {
			int fd = shared[d], fd6 = d == UL ? shared6 : -1;
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
			if (d == UL && fd6 < 0 && n3v6_on()) {
				fd6 = udp6_open();
				if (fd6 < 0) {
					err = fd6;
					if (fd != shared[d])
						close(fd);
					break;
				}
				if (!S.k.reuseport)
					shared6 = fd6;
			}
			w = worker_new(d, i, fd, fd6);
			if (!w) {
				if (fd != shared[d])
					close(fd);
				if (fd6 >= 0 && fd6 != shared6)
					close(fd6);
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
	int closed[2] = { -1, -1 }, closed6 = -1;

	for (int i = 0; i < S.nw; i++) {
		struct worker *w = S.w[i];

		if (w->rx != closed[w->dir]) {
			close(w->rx);
			if (!S.k.reuseport)
				closed[w->dir] = w->rx;
		}
		if (w->rx6 >= 0 && w->rx6 != closed6) {
			close(w->rx6);
			if (!S.k.reuseport)
				closed6 = w->rx6;
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
	if (S.peers6 >= 0)
		close(S.peers6);
	if (S.sig_rx6 >= 0)
		close(S.sig_rx6);
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
	if (n3v6_on()) {
		char a6[INET6_ADDRSTRLEN] = "";

		inet_ntop(AF_INET6, S.cfg.n3_addr6, a6, sizeof(a6));
		printf("pgwu socket: N3 over IPv6: uplink UDP [%s]:%d on %s\n", a6, PGWU_GTPU_PORT, ifa);
	}
	fflush(stdout);
}

static int sock_run(const struct sock_opts *o, int ready_fd)
{
	struct sigaction sa = { .sa_handler = on_signal };	/* no SA_RESTART: sleeps return */
	int err, started = 0;

	S.peers = S.sig_rx = S.peers6 = S.sig_rx6 = S.st_fd = S.owner_fd = -1;
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
