// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#define _GNU_SOURCE
/*
 * pgwu_metrics.c: pgwu metrics, a Prometheus exporter. A single-threaded HTTP/1.0 server: one
 * connection at a time, GET /metrics answered in the text exposition format 0.0.4 from the pinned
 * maps read afresh on every scrape (no state between scrapes), anything else 404/405.
 * SIGINT/SIGTERM arrive through a signalfd polled next to the listening socket, so the server
 * leaves its loop cleanly whatever it was waiting for.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <bpf/bpf.h>
#include <sys/mman.h>
#include "pgwu_cli.h"
#include "pfcp_msg.h"

#define REQ_MAX 8192
#define IO_TIMEOUT_S 5

static int parse_listen(const char *s, struct sockaddr_in *sa)
{
	char host[INET_ADDRSTRLEN];
	const char *colon = strrchr(s, ':');
	__u32 port;

	if (!colon || (size_t)(colon - s) >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, colon - s);
	host[colon - s] = '\0';
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	if (inet_pton(AF_INET, host, &sa->sin_addr) != 1 || parse_u32(colon + 1, &port) ||
	    port > 65535)
		return -EINVAL;
	sa->sin_port = htons(port);
	return 0;
}

static void metric_head(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void render(FILE *f, const struct pgwu_snapshot *s)
{
	const struct pgwu_config *c = &s->cfg;
	char a[16], p[16];
	int len;

	metric_head(f, "pgwu_packets_total", "counter",
		    "Packets the XDP programs handled, by reason and XDP verdict (each packet once).");
	for (int r = 0; r < PGWU_REASON_MAX; r++)
		for (int v = 0; v < PGWU_VERDICT_MAX; v++)
			fprintf(f, "pgwu_packets_total{reason=\"%s\",verdict=\"%s\"} %llu\n",
				pgwu_reason_names[r], pgwu_verdict_names[v],
				(unsigned long long)s->stats[r * PGWU_VERDICT_MAX + v].packets);
	metric_head(f, "pgwu_bytes_total", "counter",
		    "Bytes (frame length as received) of the packets in pgwu_packets_total.");
	for (int r = 0; r < PGWU_REASON_MAX; r++)
		for (int v = 0; v < PGWU_VERDICT_MAX; v++)
			fprintf(f, "pgwu_bytes_total{reason=\"%s\",verdict=\"%s\"} %llu\n",
				pgwu_reason_names[r], pgwu_verdict_names[v],
				(unsigned long long)s->stats[r * PGWU_VERDICT_MAX + v].bytes);
	metric_head(f, "pgwu_bearers", "gauge", "Bearers installed, per table.");
	fprintf(f, "pgwu_bearers{table=\"uplink\"} %zu\n", s->bearers.n_ul);
	fprintf(f, "pgwu_bearers{table=\"downlink\"} %zu\n", s->bearers.n_dl);
	metric_head(f, "pgwu_bearer_capacity", "gauge", "Bearers each table can hold.");
	fprintf(f, "pgwu_bearer_capacity %u\n",
		s->bearers.cap_ul < s->bearers.cap_dl ? s->bearers.cap_ul : s->bearers.cap_dl);
	metric_head(f, "pgwu_bearer_usage_packets_total", "counter",
		    "Packets forwarded for the installed bearers, summed per direction "
		    "(falls when a bearer is deleted).");
	fprintf(f, "pgwu_bearer_usage_packets_total{direction=\"uplink\"} %llu\n",
		(unsigned long long)s->ul_packets);
	fprintf(f, "pgwu_bearer_usage_packets_total{direction=\"downlink\"} %llu\n",
		(unsigned long long)s->dl_packets);
	metric_head(f, "pgwu_bearer_usage_bytes_total", "counter",
		    "Inner IPv4 bytes forwarded for the installed bearers, summed per direction "
		    "(falls when a bearer is deleted).");
	fprintf(f, "pgwu_bearer_usage_bytes_total{direction=\"uplink\"} %llu\n",
		(unsigned long long)s->ul_bytes);
	fprintf(f, "pgwu_bearer_usage_bytes_total{direction=\"downlink\"} %llu\n",
		(unsigned long long)s->dl_bytes);
	metric_head(f, "pgwu_route_changes_total", "counter",
		    "Route and neighbour changes seen by the FIB cache's tracing programs.");
	fprintf(f, "pgwu_route_changes_total %llu\n", (unsigned long long)s->fib_gen);
	metric_head(f, "pgwu_fib_cache_in_use", "gauge",
		    "1 when route lookups are cached: the cache is on and a pgwu watch keeps it correct.");
	fprintf(f, "pgwu_fib_cache_in_use %d\n",
		(c->flags & PGWU_CFG_FIB_CACHE) && s->fib_watcher ? 1 : 0);
	metric_head(f, "pgwu_config_info", "gauge", "The running configuration, as labels (value 1).");
	len = mask_len(c->ue_pool_mask);
	if (len >= 0)
		snprintf(p, sizeof(p), "%d", len);
	else
		ip_str(c->ue_pool_mask, p);
	fprintf(f, "pgwu_config_info{local_addr=\"%s\",", ip_str(c->local_addr, a));
	fprintf(f, "ue_pool=\"%s/%s\",csum=\"%s\",fib_cache=\"%s\",restart_counter=\"%u\","
		"vlan_access=\"%u\",vlan_sgi=\"%u\",nexthop_access=\"%s\",nexthop_sgi=\"%s\"} 1\n",
		ip_str(c->ue_pool_addr, a), p, c->flags & PGWU_CFG_CSUM ? "on" : "off",
		c->flags & PGWU_CFG_FIB_CACHE ? "on" : "off", c->restart_counter,
		c->egress_vlan[PGWU_SIDE_ACCESS], c->egress_vlan[PGWU_SIDE_SGI],
		c->nexthop[PGWU_SIDE_ACCESS].ifindex ? "static" : "fib",
		c->nexthop[PGWU_SIDE_SGI].ifindex ? "static" : "fib");
}

/*
 * `pgwu pfcp`'s counters, from its pinned pfcp_stats map (pgwu_cli.h), when an agent has run on
 * this PIN_DIR; nothing otherwise. Answers are shown per (type, cause) pair that occurred.
 */
static void render_pfcp(FILE *f)
{
	char path[PATH_MAX], cause[8];
	const __u64 *st;
	__u32 max = 0;
	int fd;

	if (pin_path(path, sizeof(path), PFCP_STATS_MAP))
		return;
	fd = bpf_obj_get(path);
	if (fd < 0)
		return;
	if (map_max_entries(fd, &max) || max != PFCP_STAT_N) {
		close(fd);
		return;
	}
	st = mmap(NULL, PFCP_STAT_N * 8, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (st == MAP_FAILED)
		return;
	metric_head(f, "pgwu_pfcp_sessions", "gauge", "PFCP sessions of `pgwu pfcp` (one bearer each).");
	fprintf(f, "pgwu_pfcp_sessions %llu\n", (unsigned long long)st[PFCP_STAT_SESSIONS]);
	metric_head(f, "pgwu_pfcp_associations", "gauge", "PFCP associations of `pgwu pfcp`.");
	fprintf(f, "pgwu_pfcp_associations %llu\n", (unsigned long long)st[PFCP_STAT_ASSOCIATIONS]);
	metric_head(f, "pgwu_pfcp_dropped_total", "counter",
		    "PFCP datagrams discarded unanswered: invalid header or unknown message type.");
	fprintf(f, "pgwu_pfcp_dropped_total %llu\n", (unsigned long long)st[PFCP_STAT_DROPPED]);
	metric_head(f, "pgwu_pfcp_retransmissions_total", "counter",
		    "Retransmitted PFCP requests answered with the first answer, not applied again.");
	fprintf(f, "pgwu_pfcp_retransmissions_total %llu\n",
		(unsigned long long)st[PFCP_STAT_RETRANSMISSIONS]);
	metric_head(f, "pgwu_pfcp_heartbeats_missed_total", "counter",
		    "Heartbeat Requests of `pgwu pfcp --heartbeat` a CP did not answer within the interval.");
	fprintf(f, "pgwu_pfcp_heartbeats_missed_total %llu\n",
		(unsigned long long)st[PFCP_STAT_HB_MISSED]);
	metric_head(f, "pgwu_pfcp_messages_received_total", "counter",
		    "PFCP messages received with a valid header, by message type (responses too).");
	for (int t = 0; t < 256; t++) {
		const char *name = pfcp_msg_name(t);

		if (name)
			fprintf(f, "pgwu_pfcp_messages_received_total{type=\"%s\"} %llu\n", name,
				(unsigned long long)st[PFCP_STAT_RX(t)]);
	}
	metric_head(f, "pgwu_pfcp_messages_sent_total", "counter",
		    "PFCP messages sent (answers, heartbeat requests), by message type and Cause "
		    "(none: no Cause IE).");
	for (int t = 0; t < 256; t++) {
		const char *name = pfcp_msg_name(t);

		for (int c = 0; c < 256; c++) {
			const char *cn = pfcp_cause_name(c);
			__u64 v = st[PFCP_STAT_TX(t, c)];

			if (!v)
				continue;
			if (!cn) {
				snprintf(cause, sizeof(cause), "%d", c);
				cn = cause;
			}
			fprintf(f, "pgwu_pfcp_messages_sent_total{type=\"%s\",cause=\"%s\"} %llu\n",
				name ? name : "unknown", cn, (unsigned long long)v);
		}
	}
	munmap((void *)st, PFCP_STAT_N * 8);
}

static void send_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t w = send(fd, buf, len, MSG_NOSIGNAL);

		if (w <= 0)
			return;
		buf += w;
		len -= w;
	}
}

static void respond(int fd, const char *status, const char *type, const char *body, size_t len)
{
	char head[256];
	int n;

	n = snprintf(head, sizeof(head),
		     "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
		     status, type, len);
	send_all(fd, head, n);
	send_all(fd, body, len);
}

static void serve(int fd)
{
	static const char text[] = "text/plain; charset=utf-8";
	char req[REQ_MAX + 1], method[16], path[256];
	struct pgwu_snapshot s;
	struct timeval tv = { .tv_sec = IO_TIMEOUT_S };
	size_t got = 0, len = 0;
	char *body = NULL;
	FILE *f;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	while (got < REQ_MAX) {
		ssize_t r = recv(fd, req + got, REQ_MAX - got, 0);

		if (r <= 0)
			break;
		got += r;
		req[got] = '\0';
		if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
			break;
	}
	req[got] = '\0';
	if (sscanf(req, "%15s %255s", method, path) != 2) {
		respond(fd, "400 Bad Request", text, "bad request\n", 12);
		return;
	}
	if (strcmp(path, "/metrics") && strncmp(path, "/metrics?", 9)) {
		respond(fd, "404 Not Found", text, "not found: try /metrics\n", 24);
		return;
	}
	if (strcmp(method, "GET")) {
		respond(fd, "405 Method Not Allowed", text, "only GET\n", 9);
		return;
	}
	if (snapshot_read(&s)) {
		static const char msg[] = "pgwu maps unreadable: is pgwu loaded?\n";

		respond(fd, "503 Service Unavailable", text, msg, sizeof(msg) - 1);
		return;
	}
	f = open_memstream(&body, &len);
	if (!f) {
		snapshot_free(&s);
		respond(fd, "500 Internal Server Error", text, "out of memory\n", 14);
		return;
	}
	render(f, &s);
	render_pfcp(f);
	fclose(f);
	snapshot_free(&s);
	respond(fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", body, len);
	free(body);
}

int do_metrics(const void *cfg)
{
	const struct metrics_opts *o = cfg;
	struct sockaddr_in sa;
	socklen_t salen = sizeof(sa);
	struct pollfd pfd[2];
	sigset_t mask, old;
	int fd = -1, sfd = -1, one = 1, err;
	char a[16];

	if (parse_listen(o->listen.s, &sa)) {
		fprintf(stderr, "Invalid --listen '%s': expected IPV4ADDR:PORT\n", o->listen.s);
		return -EUSAGE;
	}
	fd = pinned_open("config");	/* fail now, not on the first scrape, when not loaded */
	if (fd < 0)
		return fd;
	close(fd);

	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigprocmask(SIG_BLOCK, &mask, &old);
	signal(SIGPIPE, SIG_IGN);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (sfd < 0 || fd < 0) {
		err = -errno;
		fprintf(stderr, "Couldn't create a socket: %s\n", strerror(-err));
		goto out;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 16) ||
	    getsockname(fd, (struct sockaddr *)&sa, &salen)) {
		err = -errno;
		fprintf(stderr, "Couldn't listen on %s: %s\n", o->listen.s, strerror(-err));
		goto out;
	}
	printf("pgwu metrics: listening on http://%s:%u/metrics\n", ip_str(sa.sin_addr.s_addr, a),
	       ntohs(sa.sin_port));
	fflush(stdout);

	pfd[0] = (struct pollfd){ .fd = fd, .events = POLLIN };
	pfd[1] = (struct pollfd){ .fd = sfd, .events = POLLIN };
	for (;;) {
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			err = -errno;
			fprintf(stderr, "Couldn't wait for connections: %s\n", strerror(-err));
			goto out;
		}
		if (pfd[1].revents) {
			struct signalfd_siginfo si;

			if (read(sfd, &si, sizeof(si)) == sizeof(si))
				printf("pgwu metrics: signal %u, exiting\n", si.ssi_signo);
			err = 0;
			break;
		}
		if (pfd[0].revents) {
			int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);

			if (c < 0)
				continue;
			serve(c);
			close(c);
		}
	}
out:
	if (fd >= 0)
		close(fd);
	if (sfd >= 0)
		close(sfd);
	sigprocmask(SIG_SETMASK, &old, NULL);
	return err;
}
