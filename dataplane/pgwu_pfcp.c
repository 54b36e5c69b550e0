// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#define _GNU_SOURCE
/*
 * pgwu_pfcp.c: `pgwu pfcp`, a PFCP (3GPP TS 29.244) agent on Sx/N4 that turns sessions into bearers
 * in the same tables `pgwu session` writes (bearer_add/bearer_remove/bearer_set_dl in
 * pgwu_session.c). Single-threaded: one UDP socket and a signalfd under poll(); datagrams are
 * read and answered in batches (recvmmsg/sendmmsg), each batch under the PIN_DIR lock that every
 * pgwu writer takes.
 *
 * Every request goes parse (pfcp_msg.c) -> validate into a plan -> apply; a request is rejected
 * before any table is touched, and the one multi-step change (a bearer's two halves) is undone by
 * bearer_add itself when its second step fails. One session is one bearer: an uplink PDR (Access,
 * F-TEID, outer header removal) with a FAR forwarding to Core, and a downlink PDR (Core, UE IP)
 * with a FAR forwarding to Access with GTP-U/UDP/IPv4 outer header creation. docs/pfcp.md has the
 * IEs, the causes and what is not supported.
 *
 * Counters for `pgwu metrics` go to the pinned array map pfcp_stats (layout in pgwu_cli.h),
 * mmap()ed: one writer (this process), plain stores, read by the exporter on each scrape.
 *
 * This file is the command: its options, setup and teardown, the socket and its loop, and the
 * dispatch of each datagram to its handler; the other jobs are in their own files (pfcp_agent.h
 * lists them).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <bpf/bpf.h>
#include "pgwu_cli.h"
#include "pfcp_agent.h"

#define BATCH 64
#define DGRAM_MAX 65536
#define NTP_UNIX_OFFSET 2208988800UL	/* seconds from 1900 to 1970 */
#define LOADED_CHECK_MS 1000	/* how often the agent checks that its maps are still the pinned ones */

/* The counters `pgwu metrics` reads: pfcp_stats in PIN_DIR (pinned here if absent), mmap()ed. */
static int stats_open(struct pfcp_agent *a)
{
	LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = BPF_F_MMAPABLE);
	char path[PATH_MAX];
	__u32 max = 0;
	void *p;
	int fd;

	if (pin_path(path, sizeof(path), PFCP_STATS_MAP))
		return -ENAMETOOLONG;
	fd = bpf_obj_get(path);
	if (fd < 0) {
		fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, PFCP_STATS_MAP, 4, 8, PFCP_STAT_N, &opts);
		if (fd < 0 || bpf_obj_pin(fd, path)) {
			int err = -errno;

			fprintf(stderr, "Couldn't create %s: %s\n", path, strerror(-err));
			if (fd >= 0)
				close(fd);
			return err;
		}
	} else if (map_max_entries(fd, &max) || max != PFCP_STAT_N) {
		fprintf(stderr, "%s is not a pfcp_stats map of this version\n", path);
		close(fd);
		return -EINVAL;
	}
	p = mmap(NULL, PFCP_STAT_N * 8, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int err = -errno;

		fprintf(stderr, "Couldn't map %s: %s\n", path, strerror(-err));
		close(fd);
		return err;
	}
	a->stats_fd = fd;
	a->stats = p;
	return 0;
}

/*
 * The maps the agent publishes its model in (pgwu_cli.h, pgwu.h), each made fresh and pinned in
 * PIN_DIR in place of a previous agent's (whose sessions are gone): pfcp_peers (mmap()ed array),
 * pfcp_sessions and pfcp_rules (hash maps without preallocation: memory as sessions come).
 */
static int pin_fresh(const char *name, int fd)
{
	char path[PATH_MAX];
	int err;

	if (fd < 0) {
		err = -errno;
		fprintf(stderr, "Couldn't create %s: %s\n", name, strerror(-err));
		return err;
	}
	if (pin_path(path, sizeof(path), name)) {
		close(fd);
		return -ENAMETOOLONG;
	}
	if ((unlink(path) && errno != ENOENT) || bpf_obj_pin(fd, path)) {
		err = -errno;
		fprintf(stderr, "Couldn't pin %s: %s\n", path, strerror(-err));
		close(fd);
		return err;
	}
	return fd;
}

static int published_open(struct pfcp_agent *a)
{
	LIBBPF_OPTS(bpf_map_create_opts, mm, .map_flags = BPF_F_MMAPABLE);
	LIBBPF_OPTS(bpf_map_create_opts, np, .map_flags = BPF_F_NO_PREALLOC);
	void *p;

	a->peers_fd = pin_fresh(PFCP_PEERS_MAP, bpf_map_create(BPF_MAP_TYPE_ARRAY, PFCP_PEERS_MAP, 4,
				sizeof(struct pfcp_peer_rec), PFCP_MAX_PEERS, &mm));
	if (a->peers_fd < 0)
		return a->peers_fd;
	p = mmap(NULL, PFCP_MAX_PEERS * sizeof(struct pfcp_peer_rec), PROT_READ | PROT_WRITE,
		 MAP_SHARED, a->peers_fd, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "Couldn't map %s: %s\n", PFCP_PEERS_MAP, strerror(errno));
		return -errno;
	}
	a->peers = p;
	a->sess_fd = pin_fresh(PFCP_SESSIONS_MAP, bpf_map_create(BPF_MAP_TYPE_HASH,
				PFCP_SESSIONS_MAP, 4, sizeof(struct pgwu_pfcp_sess), a->max_sess, &np));
	if (a->sess_fd < 0)
		return a->sess_fd;
	a->rules_fd = pin_fresh(PFCP_RULES_MAP, bpf_map_create(BPF_MAP_TYPE_HASH, PFCP_RULES_MAP,
				sizeof(struct pgwu_pfcp_rule_key), sizeof(struct pgwu_pfcp_rule),
				a->max_sess > (1U << 27) ? 1U << 31 : a->max_sess * 2 *
				PGWU_PFCP_MAX_RULES, &np));
	return a->rules_fd < 0 ? a->rules_fd : 0;
}

/* At exit every session is gone: so are their records */
static void published_close(struct pfcp_agent *a)
{
	char path[PATH_MAX];

	if (a->peers)
		munmap(a->peers, PFCP_MAX_PEERS * sizeof(struct pfcp_peer_rec));
	if (a->peers_fd >= 0)
		close(a->peers_fd);
	if (a->sess_fd >= 0) {
		if (!pin_path(path, sizeof(path), PFCP_SESSIONS_MAP))
			unlink(path);
		close(a->sess_fd);
	}
	if (a->rules_fd >= 0) {
		if (!pin_path(path, sizeof(path), PFCP_RULES_MAP))
			unlink(path);
		close(a->rules_fd);
	}
}

static __u64 now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (__u64)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- dispatch: the (message type -> handler) table ---- */

static const struct {
	__u8 type;
	void (*fn)(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w);
} handlers[] = {
	{ PFCP_HEARTBEAT_REQ, on_heartbeat },
	{ PFCP_ASSOC_SETUP_REQ, on_assoc_setup },
	{ PFCP_ASSOC_UPDATE_REQ, on_assoc_update_release },
	{ PFCP_ASSOC_RELEASE_REQ, on_assoc_update_release },
	{ PFCP_SESS_EST_REQ, on_sess_est },
	{ PFCP_SESS_MOD_REQ, on_sess_mod },
	{ PFCP_SESS_DEL_REQ, on_sess_del },
};

/* Answer one datagram into out; the answer's length, or 0: nothing to send. */
static size_t handle(struct pfcp_agent *a, const __u8 *buf, size_t n,
		     const struct sockaddr_in *peer, __u8 *out)
{
	struct pfcp_msg *m = &a->msg;
	struct pfcp_w w;
	size_t i;
	int err, len;

	err = pfcp_decode(buf, n, m);
	pfcp_w_init(&w, out, RESP_MAX);
	if (err == -EPROTONOSUPPORT) {
		/* TS 29.244 7.6.2: answer with the version we speak, the request's sequence number */
		pfcp_w_hdr(&w, PFCP_VERSION_NOT_SUPPORTED, false, 0, m->h.seq);
		stat_add(a, PFCP_STAT_TX(PFCP_VERSION_NOT_SUPPORTED, 0), 1);
		len = pfcp_w_finish(&w);
		return len > 0 ? len : 0;
	}
	if (err) {
		stat_add(a, PFCP_STAT_DROPPED, 1);
		return 0;
	}
	stat_add(a, PFCP_STAT_RX(m->h.type), 1);
	a->peer = peer;
	a->req = buf;
	if (m->h.type == PFCP_HEARTBEAT_RESP) {
		on_heartbeat_resp(a, m);
		return 0;
	}
	for (i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++)
		if (handlers[i].type == m->h.type)
			break;
	if (i == sizeof(handlers) / sizeof(handlers[0]))
		return 0;	/* a response (heartbeat ...) or a request this UP does not serve */

	len = rcache_answer(a, m, out);
	if (len) {
		stat_add(a, PFCP_STAT_RETRANSMISSIONS, 1);
		return len;
	}
	handlers[i].fn(a, m, &w);
	len = pfcp_w_finish(&w);
	if (len <= 0) {
		fprintf(stderr, "Couldn't encode the answer to %s seq %u\n", pfcp_msg_name(m->h.type),
			m->h.seq);
		return 0;
	}
	rcache_keep(a, m, out, len);
	return len;
}

/* ---- setup and the loop ---- */

static int parse_hostport(const char *s, struct sockaddr_in *sa)
{
	char host[INET_ADDRSTRLEN];
	const char *colon = strrchr(s, ':');
	size_t hl = colon ? (size_t)(colon - s) : strlen(s);
	__u32 port = PFCP_PORT;

	if (hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, hl);
	host[hl] = '\0';
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
		return -EINVAL;
	if (colon && (parse_u32(colon + 1, &port) || port > 65535))
		return -EINVAL;
	sa->sin_port = htons(port);
	return 0;
}

static void published_close(struct pfcp_agent *a);

static void shutdown_sessions(struct pfcp_agent *a)
{
	__u32 n = 0;

	published_close(a);	/* first: no record to remove one by one */
	a->peers = NULL;
	a->peers_fd = a->sess_fd = a->rules_fd = -1;

	if (flock(a->lock_fd, LOCK_EX))
		return;
	for (__u32 i = 0; i < a->max_sess; i++)
		if ((a->sess[i].flags & S_USED) && !sess_delete(a, &a->sess[i], NULL, NULL))
			n++;
	flock(a->lock_fd, LOCK_UN);
	if (n)
		printf("pgwu pfcp: removed the %u bearers of its sessions\n", n);
	stat_set(a, PFCP_STAT_SESSIONS, 0);
	stat_set(a, PFCP_STAT_ASSOCIATIONS, 0);
}

/* The id of a map, 0 on error */
static __u32 map_id(int fd)
{
	struct bpf_map_info info = {};
	__u32 len = sizeof(info);

	return bpf_obj_get_info_by_fd(fd, &info, &len) ? 0 : info.id;
}

/* Are the maps this agent writes still the ones pinned in PIN_DIR (pgwu not unloaded/reloaded)? */
static bool still_pinned(__u32 ul_id)
{
	char path[PATH_MAX];
	__u32 id;
	int fd;

	if (pin_path(path, sizeof(path), "ul_bearers"))
		return false;
	fd = bpf_obj_get(path);
	if (fd < 0)
		return false;
	id = map_id(fd);
	close(fd);
	return id == ul_id;
}

static int serve(struct pfcp_agent *a, int sfd, int tfd, int ufd)
{
	static __u8 in[BATCH][DGRAM_MAX], out[BATCH][RESP_MAX];
	struct mmsghdr rx[BATCH], tx[BATCH];
	struct sockaddr_in peers[BATCH];
	struct iovec riov[BATCH], tiov[BATCH];
	struct pollfd pfd[4] = { { .fd = a->sock, .events = POLLIN }, { .fd = sfd, .events = POLLIN },
				 { .fd = tfd, .events = POLLIN }, { .fd = ufd, .events = POLLIN } };
	__u32 ul_id = map_id(a->m.ul);
	__u64 checked_ms = now_ms();

	for (;;) {
		int n, nt = 0, r;

		r = poll(pfd, 4, LOADED_CHECK_MS);	/* an fd of -1 is ignored */
		if (r < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "Couldn't wait for messages: %s\n", strerror(errno));
			return -errno;
		}
		if (now_ms() - checked_ms >= LOADED_CHECK_MS) {
			/* like `pgwu watch`: end when the PGW-U it serves is unloaded (or reloaded);
			 * checked by the clock, the usage timer wakes the loop every 100 ms */
			checked_ms = now_ms();
			if (!still_pinned(ul_id)) {
				fprintf(stderr, "pgwu pfcp: the bearer tables in %s are gone (pgwu unloaded "
					"or reloaded), exiting\n", pin_dir);
				return -ENOENT;
			}
		}
		if (r == 0)
			continue;
		if (pfd[1].revents) {
			struct signalfd_siginfo si;

			if (read(sfd, &si, sizeof(si)) == sizeof(si))
				printf("pgwu pfcp: signal %u, exiting\n", si.ssi_signo);
			return 0;
		}
		if (tfd >= 0 && pfd[2].revents) {
			__u64 ticks;

			a->now_ms = now_ms();
			if (read(tfd, &ticks, sizeof(ticks)) == sizeof(ticks))
				heartbeat_tick(a);
		}
		if (ufd >= 0 && pfd[3].revents) {
			__u64 ticks;

			a->now_ms = now_ms();
			if (read(ufd, &ticks, sizeof(ticks)) == sizeof(ticks))
				usage_tick(a);
		}
		if (!pfd[0].revents)
			continue;
		for (int i = 0; i < BATCH; i++) {
			riov[i] = (struct iovec){ in[i], DGRAM_MAX };
			rx[i].msg_hdr = (struct msghdr){ .msg_name = &peers[i],
				.msg_namelen = sizeof(peers[i]), .msg_iov = &riov[i], .msg_iovlen = 1 };
		}
		n = recvmmsg(a->sock, rx, BATCH, MSG_DONTWAIT, NULL);
		if (n <= 0)
			continue;
		a->now_ms = now_ms();
		if (flock(a->lock_fd, LOCK_EX)) {
			fprintf(stderr, "Couldn't lock %s: %s\n", pin_dir, strerror(errno));
			return -errno;
		}
		for (int i = 0; i < n; i++) {
			size_t len;

			if (rx[i].msg_hdr.msg_flags & MSG_TRUNC) {
				stat_add(a, PFCP_STAT_DROPPED, 1);
				continue;
			}
			len = handle(a, in[i], rx[i].msg_len, &peers[i], out[nt]);
			if (!len)
				continue;
			tiov[nt] = (struct iovec){ out[nt], len };
			tx[nt].msg_hdr = (struct msghdr){ .msg_name = &peers[i],
				.msg_namelen = sizeof(peers[i]), .msg_iov = &tiov[nt], .msg_iovlen = 1 };
			nt++;
		}
		sess_publish_flush(a);	/* before the answers leave: what they say is shown */
		flock(a->lock_fd, LOCK_UN);
		for (int done = 0; done < nt;) {
			int s = sendmmsg(a->sock, tx + done, nt - done, 0);

			if (s <= 0)
				break;	/* the peer retransmits: UDP, as the spec expects */
			done += s;
		}
	}
}

/* A pinned map or program this agent needs: a pin dir loaded by an older pgwu lacks it. */
static int pinned_required(const char *name, const char *kind)
{
	int fd = pinned_open(name);

	if (fd < 0)
		fprintf(stderr, "pgwu was loaded by an older pgwu without the %s %s: unload and load it "
			"again\n", name, kind);
	return fd;
}

int do_pfcp(const void *cfg)
{
	static struct pfcp_agent agent;	/* static: its message buffer and tables are large */
	struct pfcp_agent *a = &agent;
	const struct pfcp_opts *o = cfg;
	struct sockaddr_in sa;
	struct pgwu_config c;
	sigset_t mask, old;
	socklen_t salen = sizeof(sa);
	int sfd = -1, tfd = -1, ufd = -1, err, one = 1;
	char addr[16], g[16], l[16];
	__u32 cap = 0;

	memset(a, 0, sizeof(*a));
	a->sock = a->lock_fd = a->stats_fd = a->peers_fd = a->sess_fd = a->rules_fd = -1;
	a->qos_fd = a->qos_ctl_fd = a->sdf_urr_fd = a->raw_fd = a->raw_fd6 = -1;
	a->mbr_burst_ms = o->mbr_burst_ms.v;
	a->restart_policy = o->restart_policy.v;
	a->allow_cp_move = o->allow_cp_move.set;
	/* an answer serves retransmissions for as long as the CP may still send them: its N1
	 * retransmissions go T1 apart, one more T1 covers the last one's trip */
	a->rc_window_ms = (__u64)o->cp_t1.v * (o->cp_n1.v + 1);
	if (getrandom(a->rc_key, sizeof(a->rc_key), 0) != sizeof(a->rc_key)) {
		fprintf(stderr, "Couldn't get a random key: %s\n", strerror(errno));
		return -errno;
	}
	if (parse_hostport(o->listen.s, &sa)) {
		fprintf(stderr, "Invalid --listen '%s': expected IPV4ADDR[:PORT]\n", o->listen.s);
		return -EUSAGE;
	}
	if (o->node_id.set) {
		if (inet_pton(AF_INET, o->node_id.s, &a->node_id.ipv4) == 1) {
			a->node_id.type = PFCP_NODE_IPV4;
		} else {
			__u8 tmp[PFCP_FQDN_MAX];

			a->node_id.type = PFCP_NODE_FQDN;
			if (strlen(o->node_id.s) > PFCP_FQDN_MAX ||
			    pfcp_fqdn_encode(o->node_id.s, tmp, sizeof(tmp)) < 0) {
				fprintf(stderr, "Invalid --node-id '%s': an IPv4 address or an FQDN\n",
					o->node_id.s);
				return -EUSAGE;
			}
			snprintf(a->node_id.fqdn, sizeof(a->node_id.fqdn), "%s", o->node_id.s);
		}
	}
	err = maps_open(&a->m);
	if (err)
		return err;
	a->qos_fd = pinned_required("qos", "map");
	if (a->qos_fd < 0) {
		err = a->qos_fd;
		goto out;
	}
	a->qos_ctl_fd = pinned_required("qos_ctl", "program");
	if (a->qos_ctl_fd < 0) {
		err = a->qos_ctl_fd;
		goto out;
	}
	a->sdf_urr_fd = pinned_required("sdf_urr", "map");
	if (a->sdf_urr_fd < 0) {
		err = a->sdf_urr_fd;
		goto out;
	}
	err = config_read(a->m.config, &c);
	if (err)
		goto out;
	a->local_addr = c.local_addr;
	if (o->ue_pool.set) {
		err = ueip_pool4_set(a, o->ue_pool.addr, o->ue_pool.mask, &c);
		if (err)
			goto out;
	}
	if (o->ue_pool6.set) {
		err = ueip_pool6_set(a, o->ue_pool6.s);
		if (err)
			goto out;
	}
	memcpy(a->n3_addr6, c.n3_addr6, 16);
	for (int i = 0; i < 16; i++)
		a->has_n3_6 |= c.n3_addr6[i] != 0;
	if (!a->local_addr) {
		fprintf(stderr, "pgwu has no GTP-U address: set one first (pgwu config --local-addr A); "
			"the agent hands it out in F-TEIDs\n");
		err = -EINVAL;
		goto out;
	}
	/* without it the agent serves, sending no End Marker */
	gtpu_open(a, o->gtpu_netns.set ? o->gtpu_netns.s : NULL);
	a->n4_addr = sa.sin_addr.s_addr ? sa.sin_addr.s_addr : a->local_addr;
	if (!o->node_id.set) {
		a->node_id.type = PFCP_NODE_IPV4;
		a->node_id.ipv4 = a->n4_addr;
	}
	err = map_max_entries(a->m.ul, &cap);
	if (err)
		goto out;
	a->max_sess = o->max_sessions.set && o->max_sessions.v < cap ? o->max_sessions.v : cap;
	a->sess = calloc(a->max_sess, sizeof(*a->sess));
	a->free_idx = malloc((size_t)a->max_sess * sizeof(*a->free_idx));
	a->rcache = rcache_alloc();
	a->pub_mark = calloc(a->max_sess, 1);
	a->watch = malloc((size_t)a->max_sess * sizeof(*a->watch));
	if (!a->sess || !a->free_idx || !a->rcache || !a->pub_mark || !a->watch ||
	    sess_index_alloc(a)) {
		err = -ENOMEM;
		fprintf(stderr, "Couldn't allocate %u sessions: %s\n", a->max_sess, strerror(ENOMEM));
		goto out;
	}
	for (__u32 i = 0; i < a->max_sess; i++)
		a->free_idx[i] = a->max_sess - 1 - i;	/* index 0 is handed out first */
	a->n_free = a->max_sess;
	a->next_teid = 1;
	a->rts = (__u32)(time(NULL) + NTP_UNIX_OFFSET);
	a->lock_fd = open(pin_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (a->lock_fd < 0) {
		err = -errno;
		fprintf(stderr, "Couldn't open %s: %s\n", pin_dir, strerror(-err));
		goto out;
	}
	err = stats_open(a);
	if (!err)
		err = published_open(a);
	if (err)
		goto out;
	a->now_ms = now_ms();
	stat_set(a, PFCP_STAT_SESSIONS, 0);
	stat_set(a, PFCP_STAT_ASSOCIATIONS, 0);
	rules_count(a);
	stat_set(a, PFCP_STAT_RESTART_POLICY, a->restart_policy + 1);

	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigprocmask(SIG_BLOCK, &mask, &old);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	a->sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sfd < 0 || a->sock < 0) {
		err = -errno;
		fprintf(stderr, "Couldn't create a socket: %s\n", strerror(-err));
		goto out_sig;
	}
	setsockopt(a->sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	one = 4 << 20;
	setsockopt(a->sock, SOL_SOCKET, SO_RCVBUF, &one, sizeof(one));
	if (bind(a->sock, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockname(a->sock, (struct sockaddr *)&sa, &salen)) {
		err = -errno;
		fprintf(stderr, "Couldn't listen on %s: %s\n", o->listen.s, strerror(-err));
		goto out_sig;
	}
	printf("pgwu pfcp: listening on %s:%u, node id %s, GTP-U address %s, up to %u sessions, "
	       "restart policy %s%s, answers kept %llu ms\n",
	       ip_str(sa.sin_addr.s_addr, addr), ntohs(sa.sin_port),
	       a->node_id.type == PFCP_NODE_IPV4 ? ip_str(a->node_id.ipv4, g) : a->node_id.fqdn,
	       ip_str(a->local_addr, l), a->max_sess, pfcp_restart_policy_names[a->restart_policy],
	       a->allow_cp_move ? ", CPs may move" : "", (unsigned long long)a->rc_window_ms);
	fflush(stdout);
	a->hb_interval = o->heartbeat.v;
	if (a->hb_interval) {
		struct itimerspec its = { .it_interval = { .tv_sec = a->hb_interval },
					  .it_value = { .tv_sec = a->hb_interval } };

		tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
		if (tfd < 0 || timerfd_settime(tfd, 0, &its, NULL)) {
			err = -errno;
			fprintf(stderr, "Couldn't create the heartbeat timer: %s\n", strerror(-err));
			goto out_sig;
		}
	}
	{
		struct itimerspec its = { .it_interval = { .tv_nsec = USAGE_TICK_MS * 1000000L },
					  .it_value = { .tv_nsec = USAGE_TICK_MS * 1000000L } };

		ufd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
		if (ufd < 0 || timerfd_settime(ufd, 0, &its, NULL)) {
			err = -errno;
			fprintf(stderr, "Couldn't create the usage report timer: %s\n", strerror(-err));
			goto out_sig;
		}
	}
	err = serve(a, sfd, tfd, ufd);
	shutdown_sessions(a);
out_sig:
	sigprocmask(SIG_SETMASK, &old, NULL);
out:
	if (sfd >= 0)
		close(sfd);
	if (tfd >= 0)
		close(tfd);
	if (ufd >= 0)
		close(ufd);
	free(a->watch);
	if (a->sock >= 0)
		close(a->sock);
	if (a->lock_fd >= 0)
		close(a->lock_fd);
	if (a->stats)
		munmap(a->stats, PFCP_STAT_N * 8);
	if (a->stats_fd >= 0)
		close(a->stats_fd);
	published_close(a);
	free(a->sess);
	free(a->free_idx);
	rcache_free(a->rcache);
	free(a->pub_mark);
	sess_index_free(a);
	if (a->qos_fd >= 0)
		close(a->qos_fd);
	if (a->qos_ctl_fd >= 0)
		close(a->qos_ctl_fd);
	if (a->sdf_urr_fd >= 0)
		close(a->sdf_urr_fd);
	gtpu_close(a);
	maps_close(&a->m);
	return err;
}
