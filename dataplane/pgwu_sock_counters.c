// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pgwu_sock_counters.c: the counters of `pgwu socket` (pgwu_sock.c): sock_stats (pgwu_sock.h),
 * created or reused, pinned in PIN_DIR, mmap()ed and claimed for this process; what the main
 * thread reads every tick (the kernel's drops at each socket, the CPU each worker ran on); and the
 * per-second lines, each worker's rates beside the kernel's own counters (/proc/net/snmp Udp,
 * /proc/net/softnet_stat), or their JSON.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <linux/if_packet.h>
#include <linux/sock_diag.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "pgwu_sock_int.h"

/* ---- the counters' map ---- */

/* sock_stats: the pinned one when its layout is this program's, else a new one pinned in its
 * place; mmap()ed. Its header's pid says whether a `pgwu socket` runs for this PIN_DIR. */
int stats_open(void)
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
int stats_claim(void)
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

/* ---- what the main thread reads every tick, and the per-second lines ---- */

/* The kernel's drops at worker w's socket, into its block (only the first worker of a shared
 * socket holds them). */
void fold_drops(struct worker *w)
{
	if (w->dir == UL) {
		__u32 mi[SK_MEMINFO_VARS] = {};
		socklen_t len = sizeof(mi);

		__u64 drops = 0;

		if (!getsockopt(w->rx, SOL_SOCKET, SO_MEMINFO, mi, &len))
			drops = mi[SK_MEMINFO_DROPS];
		/* N3 over IPv6: its socket's too */
		len = sizeof(mi);
		if (w->rx6 >= 0 && !getsockopt(w->rx6, SOL_SOCKET, SO_MEMINFO, mi, &len))
			drops += mi[SK_MEMINFO_DROPS];
		CTR(w, PGWU_SC_SOCK_DROPS) = drops;
	} else {
		struct tpacket_stats ps = {};
		socklen_t len = sizeof(ps);

		/* read and reset by the kernel: added up here */
		if (!getsockopt(w->rx, SOL_PACKET, PACKET_STATISTICS, &ps, &len))
			CTR(w, PGWU_SC_SOCK_DROPS) += ps.tp_drops;
	}
}

int thread_cpu(__u64 tid)
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

/* The kernel's counters: this netns's UDP MIB (Udp + Udp6), and softnet_stat (per CPU, the whole host's). */
void kstats_read(struct kstats *k)
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
	/* N3 over IPv6: Udp6's (its checksum 0 or wrong are Udp6InCsumErrors), added to Udp's */
	f = fopen("/proc/self/net/snmp6", "r");
	while (f && fgets(line, sizeof(line), f)) {
		char name[64];
		unsigned long long v;

		if (sscanf(line, "Udp6%63s %llu", name, &v) != 2)
			continue;
		if (!strcmp(name, "RcvbufErrors"))
			k->udp_rcvbuf += v;
		else if (!strcmp(name, "InErrors"))
			k->udp_inerr += v;
		else if (!strcmp(name, "InCsumErrors"))
			k->udp_csum += v;
		else if (!strcmp(name, "NoPorts"))
			k->udp_noports += v;
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

static void snap_of(const struct worker *w, struct snap *s)
{
	const __u64 *b = w->st;

	s->rx = b[PGWU_SOCK_CTR_OFF + PGWU_SC_RX_PACKETS];
	s->fwd = sum_fwd(b, w->dir == UL ? PGWU_R_UL_FWD : PGWU_R_DL_FWD);
	s->drop = sum_drop(b);
	s->sock_drops = b[PGWU_SOCK_CTR_OFF + PGWU_SC_SOCK_DROPS];
}

/* One line per worker, then one of the kernel's counters; or one JSON object. */
void report(double dt, struct snap *prev, const struct kstats *k0, const struct kstats *k1)
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
