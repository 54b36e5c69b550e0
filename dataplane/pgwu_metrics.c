// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#define _GNU_SOURCE
/*
 * pgwu metrics: a Prometheus exporter. A single-threaded HTTP/1.0 server that polls its listening
 * socket and up to MAX_CONNS connections, each non-blocking with a deadline of its own (see
 * struct conn), so a slow or idle client cannot keep a scraper out. GET /metrics is answered in
 * the text exposition format 0.0.4 from the pinned maps read afresh on every scrape (no state
 * between scrapes), anything else 400/404/405.
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
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include "pfcp_msg.h"
#include "pgwu_cli.h"
#include "pgwu_sock.h"

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
	metric_head(f, "pgwu_reassembler_running", "gauge",
		    "1 while a `pgwu reassemble` is registered: outer fragments are passed to the kernel.");
	fprintf(f, "pgwu_reassembler_running %d\n", s->reasm_pid ? 1 : 0);
	metric_head(f, "pgwu_reassembler_received_total", "counter",
		    "Reassembled datagrams `pgwu reassemble` read from UDP 2152.");
	fprintf(f, "pgwu_reassembler_received_total %llu\n",
		(unsigned long long)s->reasm[PGWU_RA_RECEIVED]);
	metric_head(f, "pgwu_reassembler_datagrams_total", "counter",
		    "What `pgwu reassemble` did with each datagram it read (forwarded, or the drop "
		    "reason): sums to pgwu_reassembler_received_total.");
	for (int i = PGWU_RA_FORWARDED; i < PGWU_RA_MAX; i++)
		fprintf(f, "pgwu_reassembler_datagrams_total{result=\"%s\"} %llu\n",
			pgwu_reasm_names[i], (unsigned long long)s->reasm[i]);
	metric_head(f, "pgwu_config_info", "gauge", "The running configuration, as labels (value 1).");
	len = mask_len(c->ue_pool_mask);
	if (len >= 0)
		snprintf(p, sizeof(p), "%d", len);
	else
		ip_str(c->ue_pool_mask, p);
	fprintf(f, "pgwu_config_info{local_addr=\"%s\",", ip_str(c->local_addr, a));
	fprintf(f, "ue_pool=\"%s/%s\",csum=\"%s\",fib_cache=\"%s\",sport_entropy=\"%s\","
		"restart_counter=\"%u\",vlan_access=\"%u\",vlan_sgi=\"%u\",nexthop_access=\"%s\","
		"nexthop_sgi=\"%s\"} 1\n",
		ip_str(c->ue_pool_addr, a), p, c->flags & PGWU_CFG_CSUM ? "on" : "off",
		c->flags & PGWU_CFG_FIB_CACHE ? "on" : "off",
		c->flags & PGWU_CFG_SPORT_FIXED ? "off" : "on", c->restart_counter,
		c->egress_vlan[PGWU_SIDE_ACCESS], c->egress_vlan[PGWU_SIDE_SGI],
		c->nexthop[PGWU_SIDE_ACCESS].ifindex ? "static" : "fib",
		c->nexthop[PGWU_SIDE_SGI].ifindex ? "static" : "fib");
}

/* One series per CP the agent has had an association with (pfcp_peers), labelled with its Node
 * ID and address; a released association's series stay until its slot is reused. */
static void render_pfcp_peers(FILE *f)
{
	static const struct {
		const char *name, *type, *help;
		size_t off;
	} series[] = {
		{ "pgwu_pfcp_peer_associated", "gauge", "1 while the CP is associated, 0 after a release.", 0 },
		{ "pgwu_pfcp_peer_sessions", "gauge", "The CP's sessions.",
		  offsetof(struct pfcp_peer_rec, sessions) },
		{ "pgwu_pfcp_peer_restarts_total", "counter",
		  "Restarts of the CP acted on (a newer Recovery Time Stamp, --restart-policy).",
		  offsetof(struct pfcp_peer_rec, restarts) },
		{ "pgwu_pfcp_peer_restart_sessions_deleted_total", "counter",
		  "The CP's sessions deleted because it restarted.",
		  offsetof(struct pfcp_peer_rec, restart_deleted) },
		{ "pgwu_pfcp_peer_recovery_time_stamp_changes_total", "counter",
		  "Newer Recovery Time Stamps the CP sent, restart or not.",
		  offsetof(struct pfcp_peer_rec, rts_changes) },
		{ "pgwu_pfcp_peer_recovery_time_stamp_older_total", "counter",
		  "Older Recovery Time Stamps than the one in force the CP sent (ignored).",
		  offsetof(struct pfcp_peer_rec, rts_older) },
	};
	const size_t len = PFCP_MAX_PEERS * sizeof(struct pfcp_peer_rec);
	char path[PATH_MAX], a[16];
	struct pfcp_peer_rec *p;
	void *map;
	int fd;

	if (pin_path(path, sizeof(path), PFCP_PEERS_MAP))
		return;
	fd = bpf_obj_get(path);
	if (fd < 0)
		return;
	map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return;
	p = malloc(len);
	if (p)
		memcpy(p, map, len);	/* one read: the agent keeps writing */
	munmap(map, len);
	if (!p)
		return;
	for (size_t k = 0; k < sizeof(series) / sizeof(series[0]); k++) {
		metric_head(f, series[k].name, series[k].type, series[k].help);
		for (int i = 0; i < PFCP_MAX_PEERS; i++) {
			__u64 v;

			if (p[i].state == PFCP_PEER_FREE)
				continue;
			p[i].node_id[PFCP_NODE_ID_MAX - 1] = '\0';
			v = series[k].off ? *(const __u64 *)((const char *)&p[i] + series[k].off) :
			    p[i].state == PFCP_PEER_ASSOCIATED;
			fprintf(f, "%s{node_id=", series[k].name);
			json_str(f, p[i].node_id);	/* a Prometheus label value escapes as JSON */
			fprintf(f, ",address=\"%s\"} %llu\n", ip_str(p[i].addr, a), (unsigned long long)v);
		}
	}
	free(p);
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
	metric_head(f, "pgwu_pfcp_rules", "gauge",
		    "QERs and URRs the sessions of `pgwu pfcp` hold (stored; enforcement: see docs/pfcp.md).");
	fprintf(f, "pgwu_pfcp_rules{kind=\"qer\"} %llu\n", (unsigned long long)st[PFCP_STAT_QERS]);
	fprintf(f, "pgwu_pfcp_rules{kind=\"urr\"} %llu\n", (unsigned long long)st[PFCP_STAT_URRS]);
	metric_head(f, "pgwu_pfcp_refused_total", "counter",
		    "PFCP requests refused for who sent them: a session or association request not "
		    "from its association's address and port (not_owner), an association setup for "
		    "a Node ID associated from another address (node_id_taken), a Recovery Time "
		    "Stamp too far ahead of our clock (future_recovery_time_stamp: a heartbeat's "
		    "ignored, an association setup refused).");
	fprintf(f, "pgwu_pfcp_refused_total{reason=\"not_owner\"} %llu\n",
		(unsigned long long)st[PFCP_STAT_NOT_OWNER]);
	fprintf(f, "pgwu_pfcp_refused_total{reason=\"node_id_taken\"} %llu\n",
		(unsigned long long)st[PFCP_STAT_NODE_ID_TAKEN]);
	fprintf(f, "pgwu_pfcp_refused_total{reason=\"future_recovery_time_stamp\"} %llu\n",
		(unsigned long long)st[PFCP_STAT_RTS_FUTURE]);
	metric_head(f, "pgwu_pfcp_cp_moves_total", "counter",
		    "Associations that moved to another address (--allow-cp-move).");
	fprintf(f, "pgwu_pfcp_cp_moves_total %llu\n", (unsigned long long)st[PFCP_STAT_CP_MOVED]);
	metric_head(f, "pgwu_pfcp_cp_restarts_total", "counter",
		    "CP restarts acted on (--restart-policy), all CPs; per CP: pgwu_pfcp_peer_restarts_total.");
	fprintf(f, "pgwu_pfcp_cp_restarts_total %llu\n", (unsigned long long)st[PFCP_STAT_RESTARTS]);
	metric_head(f, "pgwu_pfcp_cp_restart_sessions_deleted_total", "counter",
		    "Sessions deleted because their CP restarted.");
	fprintf(f, "pgwu_pfcp_cp_restart_sessions_deleted_total %llu\n",
		(unsigned long long)st[PFCP_STAT_RESTART_DELETED]);
	metric_head(f, "pgwu_pfcp_retransmission_cache_total", "counter",
		    "Cached answers dropped because their CP restarted or left (flushed), requests "
		    "like a cached one but past the retransmission window, applied as new (expired).");
	fprintf(f, "pgwu_pfcp_retransmission_cache_total{event=\"flushed\"} %llu\n",
		(unsigned long long)st[PFCP_STAT_RCACHE_FLUSHED]);
	fprintf(f, "pgwu_pfcp_retransmission_cache_total{event=\"expired\"} %llu\n",
		(unsigned long long)st[PFCP_STAT_RCACHE_EXPIRED]);
	metric_head(f, "pgwu_pfcp_bearer_halves_kept_total", "counter",
		    "Bearer halves a PFCP session did not remove or rewrite: another owner's (pgwu session).");
	fprintf(f, "pgwu_pfcp_bearer_halves_kept_total %llu\n",
		(unsigned long long)st[PFCP_STAT_HALVES_KEPT]);
	metric_head(f, "pgwu_pfcp_publish_errors_total", "counter",
		    "Writes to pfcp_sessions / pfcp_rules that failed (what pgwu session shows).");
	fprintf(f, "pgwu_pfcp_publish_errors_total %llu\n",
		(unsigned long long)st[PFCP_STAT_PUBLISH_ERRORS]);
	metric_head(f, "pgwu_pfcp_end_markers_total", "counter",
		    "End Markers sent on a session's old downlink tunnel (Update FAR with SNDEM), and "
		    "those that could not be sent.");
	fprintf(f, "pgwu_pfcp_end_markers_total{result=\"sent\"} %llu\n",
		(unsigned long long)st[PFCP_STAT_END_MARKERS]);
	fprintf(f, "pgwu_pfcp_end_markers_total{result=\"error\"} %llu\n",
		(unsigned long long)st[PFCP_STAT_END_MARKER_ERRORS]);
	metric_head(f, "pgwu_pfcp_session_reports_total", "counter",
		    "Session Report Requests sent to a CP (usage reports), and those given up unanswered.");
	fprintf(f, "pgwu_pfcp_session_reports_total{result=\"sent\"} %llu\n",
		(unsigned long long)st[PFCP_STAT_REPORTS]);
	fprintf(f, "pgwu_pfcp_session_reports_total{result=\"unanswered\"} %llu\n",
		(unsigned long long)st[PFCP_STAT_REPORTS_UNANSWERED]);
	if (st[PFCP_STAT_RESTART_POLICY] && st[PFCP_STAT_RESTART_POLICY] <= PFCP_RESTART_MAX) {
		metric_head(f, "pgwu_pfcp_restart_policy", "gauge",
			    "The agent's --restart-policy (1 for the one in force).");
		fprintf(f, "pgwu_pfcp_restart_policy{policy=\"%s\"} 1\n",
			pfcp_restart_policy_names[st[PFCP_STAT_RESTART_POLICY] - 1]);
	}
	render_pfcp_peers(f);
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

/*
 * The socket path's counters (`pgwu socket`, sock_stats, pgwu_sock.h), when one has run on this
 * PIN_DIR; nothing otherwise. Packets by reason and verdict summed over its threads, in the names
 * of pgwu_packets_total; per thread its calls, packets and the kernel's drops at its socket.
 */
static void render_socket(FILE *f)
{
	const __u64 *b;
	__u64 *w = NULL;
	bool running;

	if (sock_stats_read(&w, &running) || !w)
		return;
	metric_head(f, "pgwu_socket_running", "gauge",
		    "1 while a `pgwu socket` runs on this PIN_DIR (the socket path).");
	fprintf(f, "pgwu_socket_running %d\n", running ? 1 : 0);
	for (int k = 0; k < 2; k++) {
		metric_head(f, k ? "pgwu_socket_bytes_total" : "pgwu_socket_packets_total", "counter",
			    k ? "Bytes (as read: UDP payload uplink, IP packet downlink) of the packets "
				"in pgwu_socket_packets_total." :
				"Packets the socket path read, by reason and verdict (each packet once; "
				"the reasons of pgwu_packets_total, and drop_tx_full, drop_send, drop_trunc).");
		for (int r = 0; r < PGWU_SOCK_REASON_MAX; r++)
			for (int v = 0; v < PGWU_VERDICT_MAX; v++) {
				__u64 n = 0;

				for (int d = 0; d < 2; d++)
					for (int i = 0; i < (int)w[PGWU_SH_THREADS] && i < PGWU_SOCK_MAX_THREADS; i++) {
						b = pgwu_sock_block(w, d, i);
						n += b[(r * PGWU_VERDICT_MAX + v) * 2 + k];
					}
				fprintf(f, "%s{reason=\"%s\",verdict=\"%s\"} %llu\n",
					k ? "pgwu_socket_bytes_total" : "pgwu_socket_packets_total",
					sock_reason_name(r), pgwu_verdict_names[v], (unsigned long long)n);
			}
	}
	metric_head(f, "pgwu_socket_thread_total", "counter",
		    "Per socket-path thread: receive and send calls, packets read, bearers looked up in "
		    "the hash maps, packets the kernel dropped at its socket (sock_drops).");
	for (int d = 0; d < 2; d++)
		for (int i = 0; i < (int)w[PGWU_SH_THREADS] && i < PGWU_SOCK_MAX_THREADS; i++) {
			b = pgwu_sock_block(w, d, i);
			for (int c = 0; c < PGWU_SC_TID; c++)
				fprintf(f, "pgwu_socket_thread_total{direction=\"%s\",thread=\"%d\","
					"counter=\"%s\"} %llu\n", d ? "downlink" : "uplink", i,
					pgwu_sock_counter_names[c],
					(unsigned long long)b[PGWU_SOCK_CTR_OFF + c]);
		}
	metric_head(f, "pgwu_socket_thread_cpu", "gauge", "The CPU each socket-path thread ran on last.");
	for (int d = 0; d < 2; d++)
		for (int i = 0; i < (int)w[PGWU_SH_THREADS] && i < PGWU_SOCK_MAX_THREADS; i++) {
			b = pgwu_sock_block(w, d, i);
			fprintf(f, "pgwu_socket_thread_cpu{direction=\"%s\",thread=\"%d\"} %lld\n",
				d ? "downlink" : "uplink", i, (long long)b[PGWU_SOCK_CTR_OFF + PGWU_SC_CPU]);
		}
	free(w);
}

/*
 * The connections being served. A connection reads its request, then writes its response, both
 * non-blocking, within IO_TIMEOUT_S of being accepted (a whole-request deadline, not a per-read
 * timeout, so a client that sends a byte every second is still closed in time). At most MAX_CONNS
 * are open; a new one then takes the place of the oldest that is still reading, so idle or
 * half-open connections can neither block the loop nor keep a scraper out.
 */
#define MAX_CONNS 128

struct conn {
	int fd;			/* -1: free */
	__u64 deadline_ms;	/* CLOCK_MONOTONIC */
	size_t got;		/* request bytes read */
	char *out;		/* response, once the request is complete */
	size_t out_len, sent;
	char req[REQ_MAX + 1];
};

static __u64 now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (__u64)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void conn_close(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->out);
	c->fd = -1;
	c->out = NULL;
	c->got = c->out_len = c->sent = 0;
}

/* Queue a response; it is written as the socket takes it. */
static void respond(struct conn *c, const char *status, const char *type, const char *body,
		    size_t len)
{
	char *buf = NULL;
	size_t blen = 0;
	FILE *f = open_memstream(&buf, &blen);

	if (!f) {
		conn_close(c);
		return;
	}
	fprintf(f, "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
		status, type, len);
	fwrite(body, 1, len, f);
	if (fclose(f)) {
		free(buf);
		conn_close(c);
		return;
	}
	c->out = buf;
	c->out_len = blen;
	c->sent = 0;
}

/* The request is complete (or as complete as it will get): build the answer. */
static void answer(struct conn *c)
{
	static const char text[] = "text/plain; charset=utf-8";
	char method[16], path[256];
	struct pgwu_snapshot s;
	size_t len = 0;
	char *body = NULL;
	FILE *f;

	c->req[c->got] = '\0';
	if (sscanf(c->req, "%15s %255s", method, path) != 2) {
		respond(c, "400 Bad Request", text, "bad request\n", 12);
		return;
	}
	if (strcmp(path, "/metrics") && strncmp(path, "/metrics?", 9)) {
		respond(c, "404 Not Found", text, "not found: try /metrics\n", 24);
		return;
	}
	if (strcmp(method, "GET")) {
		respond(c, "405 Method Not Allowed", text, "only GET\n", 9);
		return;
	}
	if (snapshot_read(&s)) {
		static const char msg[] = "pgwu maps unreadable: is pgwu loaded?\n";

		respond(c, "503 Service Unavailable", text, msg, sizeof(msg) - 1);
		return;
	}
	f = open_memstream(&body, &len);
	if (!f) {
		snapshot_free(&s);
		respond(c, "500 Internal Server Error", text, "out of memory\n", 14);
		return;
	}
	render(f, &s);
	render_pfcp(f);
	render_socket(f);
	fclose(f);
	snapshot_free(&s);
	respond(c, "200 OK", "text/plain; version=0.0.4; charset=utf-8", body, len);
	free(body);
}

/* Read what the client sent; answer once the headers are complete, or the peer closed. */
static void conn_read(struct conn *c)
{
	for (;;) {
		ssize_t r = recv(c->fd, c->req + c->got, REQ_MAX - c->got, 0);

		if (r < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			if (errno == EINTR)
				continue;
			conn_close(c);
			return;
		}
		c->got += r;
		c->req[c->got] = '\0';
		if (r == 0 || c->got == REQ_MAX || strstr(c->req, "\r\n\r\n") ||
		    strstr(c->req, "\n\n")) {
			if (r == 0 && c->got == 0) {
				conn_close(c);	/* connected and left without a word */
				return;
			}
			answer(c);
			return;
		}
	}
}

/* Send what the socket takes; close once all is sent. */
static void conn_write(struct conn *c)
{
	while (c->sent < c->out_len) {
		ssize_t w = send(c->fd, c->out + c->sent, c->out_len - c->sent, MSG_NOSIGNAL);

		if (w < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			if (errno == EINTR)
				continue;
			break;
		}
		c->sent += w;
	}
	conn_close(c);
}

/* A slot for a new connection: a free one, or the oldest still reading (closed); NULL if none. */
static struct conn *conn_slot(struct conn *conns)
{
	struct conn *oldest = NULL;

	for (int i = 0; i < MAX_CONNS; i++) {
		if (conns[i].fd < 0)
			return &conns[i];
		if (!conns[i].out && (!oldest || conns[i].deadline_ms < oldest->deadline_ms))
			oldest = &conns[i];
	}
	if (oldest)
		conn_close(oldest);
	return oldest;
}

static void accept_all(int lfd, struct conn *conns)
{
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		struct conn *c;

		if (fd < 0)
			return;		/* EAGAIN: none left; others (EMFILE...): next time */
		c = conn_slot(conns);
		if (!c) {
			close(fd);
			continue;
		}
		c->fd = fd;
		c->deadline_ms = now_ms() + IO_TIMEOUT_S * 1000;
		c->got = 0;
		conn_read(c);		/* the request is often there already */
		if (c->fd >= 0 && c->out)
			conn_write(c);
	}
}

int do_metrics(const void *cfg)
{
	const struct metrics_opts *o = cfg;
	struct sockaddr_in sa;
	socklen_t salen = sizeof(sa);
	struct pollfd pfd[2 + MAX_CONNS];
	struct conn *conns = NULL, *idx[MAX_CONNS];
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
	fd = -1;
	conns = calloc(MAX_CONNS, sizeof(*conns));
	if (!conns) {
		fprintf(stderr, "Couldn't serve metrics: %s\n", strerror(ENOMEM));
		return -ENOMEM;
	}
	for (int i = 0; i < MAX_CONNS; i++)
		conns[i].fd = -1;

	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigprocmask(SIG_BLOCK, &mask, &old);
	signal(SIGPIPE, SIG_IGN);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (sfd < 0 || fd < 0) {
		err = -errno;
		fprintf(stderr, "Couldn't create a socket: %s\n", strerror(-err));
		goto out;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, SOMAXCONN) ||
	    getsockname(fd, (struct sockaddr *)&sa, &salen)) {
		err = -errno;
		fprintf(stderr, "Couldn't listen on %s: %s\n", o->listen.s, strerror(-err));
		goto out;
	}
	printf("pgwu metrics: listening on http://%s:%u/metrics\n", ip_str(sa.sin_addr.s_addr, a),
	       ntohs(sa.sin_port));
	fflush(stdout);

	for (;;) {
		__u64 now = now_ms(), next = (__u64)-1;
		int n = 2, timeout;

		pfd[0] = (struct pollfd){ .fd = fd, .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = sfd, .events = POLLIN };
		for (int i = 0; i < MAX_CONNS; i++) {
			struct conn *c = &conns[i];

			if (c->fd < 0)
				continue;
			if (c->deadline_ms <= now) {
				conn_close(c);	/* too slow: its time is up */
				continue;
			}
			if (c->deadline_ms < next)
				next = c->deadline_ms;
			idx[n - 2] = c;
			pfd[n++] = (struct pollfd){ .fd = c->fd, .events = c->out ? POLLOUT : POLLIN };
		}
		timeout = next == (__u64)-1 ? -1 : (int)(next - now);
		if (poll(pfd, n, timeout) < 0) {
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
		for (int i = 2; i < n; i++) {
			struct conn *c = idx[i - 2];

			if (!pfd[i].revents || c->fd != pfd[i].fd)
				continue;
			if (!c->out)
				conn_read(c);
			if (c->fd >= 0 && c->out)
				conn_write(c);
		}
		if (pfd[0].revents)
			accept_all(fd, conns);
	}
out:
	for (int i = 0; conns && i < MAX_CONNS; i++)
		conn_close(&conns[i]);
	free(conns);
	if (fd >= 0)
		close(fd);
	if (sfd >= 0)
		close(sfd);
	sigprocmask(SIG_SETMASK, &old, NULL);
	return err;
}
