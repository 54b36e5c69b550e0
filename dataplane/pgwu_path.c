// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#define _GNU_SOURCE
/*
 * pgwu_path.c: the GTP-U signalling the data path consumes, shown to the operator.
 *   pgwu path        GTP-U path management (TS 29.281 7.2.1, 7.2.2): sends Echo Requests to the
 *                    peers (every SGW a bearer names, every peer that answered before, or --peer)
 *                    and shows each one's state and Recovery restart counter. The Echo Responses are
 *                    read by xdp_access, which writes the peers map; this command only sends and reads.
 *   pgwu signalling  the Error Indications and End Markers received (sig_rx), joined to the bearers.
 *   events_read()    the events counters (Error Indications sent ...) for pgwu stats.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "pgwu_cli.h"

#define MAX_PATH_PEERS 1024

int events_read(__u64 out[PGWU_EVENT_MAX])
{
	int fd = pinned_open("events"), ncpus = libbpf_num_possible_cpus(), err = 0;
	__u64 *v;

	memset(out, 0, sizeof(__u64) * PGWU_EVENT_MAX);
	if (fd < 0)
		return fd;
	if (ncpus < 0) {
		close(fd);
		return ncpus;
	}
	v = calloc(ncpus, sizeof(*v));
	if (!v) {
		close(fd);
		return -ENOMEM;
	}
	for (__u32 e = 0; e < PGWU_EVENT_MAX; e++) {
		if (bpf_map_lookup_elem(fd, &e, v)) {
			err = -errno;
			fprintf(stderr, "Couldn't read the events map: %s\n", strerror(-err));
			break;
		}
		for (int c = 0; c < ncpus; c++)
			out[e] += v[c];
	}
	free(v);
	close(fd);
	return err;
}

static __u64 now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);	/* bpf_ktime_get_ns()'s clock */
	return (__u64)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

struct path_peer {
	__u32 addr;			/* network order */
	struct pgwu_peer p;
	bool known;			/* in the peers map */
};

static int peer_add(struct path_peer *v, int *n, __u32 addr)
{
	for (int i = 0; i < *n; i++)
		if (v[i].addr == addr)
			return 0;
	if (*n >= MAX_PATH_PEERS)
		return -E2BIG;
	memset(&v[*n], 0, sizeof(v[*n]));
	v[(*n)++].addr = addr;
	return 0;
}

static int cmp_peer(const void *a, const void *b)
{
	__u32 x = ntohl(((const struct path_peer *)a)->addr);
	__u32 y = ntohl(((const struct path_peer *)b)->addr);

	return x < y ? -1 : x > y;
}

/* The peers to show: --peer, else the SGWs of the bearers and those in the peers map. */
static int peers_collect(int peers_fd, const struct path_opts *o, struct path_peer *v, int *n)
{
	struct bearer_table t;
	__u32 key, next;
	int err;

	*n = 0;
	if (o->peer.set)
		return peer_add(v, n, o->peer.addr);
	err = bearers_load(&t);
	if (err)
		return err;
	for (size_t i = 0; i < t.n && !err; i++)
		if (t.b[i].has_dl)
			err = peer_add(v, n, t.b[i].sgw);
	bearers_free(&t);
	for (int r = bpf_map_get_next_key(peers_fd, NULL, &next); !r && !err;
	     r = bpf_map_get_next_key(peers_fd, &key, &next)) {
		key = next;
		err = peer_add(v, n, key);
	}
	if (err == -E2BIG)
		fprintf(stderr, "More than %d peers: give one with --peer\n", MAX_PATH_PEERS);
	return err;
}

static void peers_refresh(int peers_fd, struct path_peer *v, int n)
{
	for (int i = 0; i < n; i++)
		v[i].known = !bpf_map_lookup_elem(peers_fd, &v[i].addr, &v[i].p);
}

static const char *peer_state(const struct path_peer *pp)
{
	if (!pp->known || (!pp->p.rsp_ns && !pp->p.req_ns))
		return "unprobed";
	if (pp->p.rsp_ns && pp->p.rsp_ns >= pp->p.req_ns)
		return "up";
	return "no-response";
}

/* TS 29.281 7.2.1: an Echo Request: S set, TEID 0, a sequence number, no IE. */
static int echo_send(int sock, __u32 peer, __u16 seq)
{
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(PGWU_GTPU_PORT),
				  .sin_addr.s_addr = peer };
	__u8 msg[12] = { 0x32, 1, 0, 4, 0, 0, 0, 0, seq >> 8, seq & 0xff, 0, 0 };

	if (sendto(sock, msg, sizeof(msg), 0, (struct sockaddr *)&to, sizeof(to)) != sizeof(msg))
		return -errno;
	return 0;
}

/* A socket bound to local:2152, so the responses come back to port 2152 of our GTP-U address,
 * where xdp_access reads them (they never reach this socket). */
static int echo_socket(__u32 local)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(PGWU_GTPU_PORT),
				 .sin_addr.s_addr = local };
	int one = 1, fd, err;
	char buf[16];

	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	setsockopt(fd, IPPROTO_IP, IP_FREEBIND, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a))) {
		err = -errno;
		fprintf(stderr, "Couldn't bind %s:%d to send Echo Requests from: %s\n", ip_str(local, buf),
			PGWU_GTPU_PORT, strerror(-err));
		close(fd);
		return err;
	}
	return fd;
}

static int path_send(int peers_fd, __u32 local, struct path_peer *v, int n, __u32 wait_ms)
{
	__u64 sent_at = now_ns(), deadline;
	__u16 seq = (__u16)(sent_at >> 10);
	int sock, err = 0;
	char buf[16];

	sock = echo_socket(local);
	if (sock < 0)
		return sock;
	for (int i = 0; i < n; i++) {
		struct pgwu_peer p = {};

		if (bpf_map_lookup_elem(peers_fd, &v[i].addr, &p))
			memset(&p, 0, sizeof(p));
		p.req_ns = now_ns();
		p.req_seq = seq;
		/* written before sending: a response can't be older than its request */
		if (bpf_map_update_elem(peers_fd, &v[i].addr, &p, BPF_ANY)) {
			err = -errno;
			fprintf(stderr, "Couldn't write the peers map: %s\n", strerror(-err));
			goto out;
		}
		err = echo_send(sock, v[i].addr, seq);
		if (err) {
			fprintf(stderr, "Couldn't send an Echo Request to %s: %s\n",
				ip_str(v[i].addr, buf), strerror(-err));
			goto out;
		}
	}
	deadline = sent_at + (__u64)wait_ms * 1000000ULL;
	for (;;) {
		int pending = 0;

		peers_refresh(peers_fd, v, n);
		for (int i = 0; i < n; i++)
			pending += strcmp(peer_state(&v[i]), "up") != 0;
		if (!pending || now_ns() >= deadline)
			break;
		usleep(10000);
	}
out:
	close(sock);
	return err;
}

static void path_print(const struct path_peer *v, int n, bool json)
{
	__u64 now = now_ns();
	char a[16];

	if (!json)
		printf("%-15s %-11s %8s %8s %9s %10s\n", "PEER", "STATE", "RESTART", "RESTARTS",
		       "RESPONSES", "LAST RSP");
	else
		printf("{\"peers\": [");
	for (int i = 0; i < n; i++) {
		const struct pgwu_peer *p = &v[i].p;
		bool rc = v[i].known && p->has_recovery;
		double age = p->rsp_ns ? (double)(now - p->rsp_ns) / 1e9 : -1;

		if (json) {
			printf("%s\n  {\"addr\": \"%s\", \"state\": \"%s\", \"restart_counter\": ",
			       i ? "," : "", ip_str(v[i].addr, a), peer_state(&v[i]));
			if (rc)
				printf("%u", p->restart_counter);
			else
				printf("null");
			printf(", \"restarts\": %u, \"responses\": %llu, \"last_response_age_s\": ",
			       p->restarts, (unsigned long long)p->responses);
			if (age >= 0)
				printf("%.3f", age);
			else
				printf("null");
			printf("}");
			continue;
		}
		printf("%-15s %-11s ", ip_str(v[i].addr, a), peer_state(&v[i]));
		if (rc)
			printf("%8u", p->restart_counter);
		else
			printf("%8s", "-");
		printf(" %8u %9llu ", p->restarts, (unsigned long long)p->responses);
		if (age >= 0)
			printf("%9.1fs\n", age);
		else
			printf("%10s\n", "never");
	}
	if (json)
		printf("%s]}\n", n ? "\n" : "");
}

int do_path(const void *cfg)
{
	const struct path_opts *o = cfg;
	struct pgwu_config c;
	struct path_peer *v;
	int peers_fd, cfg_fd, n = 0, err;

	peers_fd = pinned_open("peers");
	if (peers_fd < 0)
		return peers_fd;
	cfg_fd = pinned_open("config");
	if (cfg_fd < 0) {
		close(peers_fd);
		return cfg_fd;
	}
	v = calloc(MAX_PATH_PEERS, sizeof(*v));
	err = v ? config_read(cfg_fd, &c) : -ENOMEM;
	if (err)
		goto out;
	err = peers_collect(peers_fd, o, v, &n);
	if (err)
		goto out;
	if (o->send.set) {
		if (!c.local_addr) {
			fprintf(stderr, "No GTP-U address configured (pgwu config --local-addr): "
				"Echo Responses could not come back to the data path\n");
			err = -EINVAL;
			goto out;
		}
		err = path_send(peers_fd, c.local_addr, v, n, o->wait.v);
		if (err)
			goto out;
	}
	peers_refresh(peers_fd, v, n);
	qsort(v, n, sizeof(*v), cmp_peer);
	path_print(v, n, o->json.set);
out:
	free(v);
	close(cfg_fd);
	close(peers_fd);
	return err;
}

/* ---- pgwu signalling ---- */

struct sig_entry {
	struct pgwu_sig_key k;
	struct pgwu_sig_val v;
};

static int cmp_sig(const void *a, const void *b)
{
	const struct pgwu_sig_key *x = &((const struct sig_entry *)a)->k;
	const struct pgwu_sig_key *y = &((const struct sig_entry *)b)->k;

	if (x->type != y->type)
		return x->type < y->type ? -1 : 1;
	if (ntohl(x->teid) != ntohl(y->teid))
		return ntohl(x->teid) < ntohl(y->teid) ? -1 : 1;
	return ntohl(x->addr) < ntohl(y->addr) ? -1 : ntohl(x->addr) > ntohl(y->addr);
}

/* The bearer a report names: an Error Indication its downlink half (SGW, SGW TEID), an End Marker
 * its local TEID. */
static const struct bearer *sig_bearer(const struct bearer_table *t, const struct pgwu_sig_key *k)
{
	for (size_t i = 0; i < t->n; i++) {
		const struct bearer *b = &t->b[i];

		if (k->type == 26 && b->has_dl && b->sgw == k->addr && b->sgw_teid == ntohl(k->teid))
			return b;
		if (k->type == 254 && b->teid == ntohl(k->teid))
			return b;
	}
	return NULL;
}

int do_signalling(const void *cfg)
{
	const struct signalling_opts *o = cfg;
	struct sig_entry *e = NULL;
	struct bearer_table t = {};
	struct pgwu_sig_key key, next;
	size_t n = 0, cap = 0;
	__u64 now = now_ns();
	int fd, err, r;
	char a[16], f[16];

	fd = pinned_open("sig_rx");
	if (fd < 0)
		return fd;
	err = bearers_load(&t);
	if (err)
		goto out;
	for (r = bpf_map_get_next_key(fd, NULL, &next); !r; r = bpf_map_get_next_key(fd, &key, &next)) {
		key = next;
		if (n == cap) {
			struct sig_entry *ne = realloc(e, (cap = cap ? 2 * cap : 64) * sizeof(*e));

			if (!ne) {
				err = -ENOMEM;
				goto out;
			}
			e = ne;
		}
		e[n].k = key;
		if (!bpf_map_lookup_elem(fd, &key, &e[n].v))
			n++;		/* else evicted meanwhile */
	}
	if (n)
		qsort(e, n, sizeof(*e), cmp_sig);
	if (!o->json.set)
		printf("%-14s %-10s %-15s %-10s %-15s %8s %9s\n", "MESSAGE", "TEID", "PEER", "BEARER",
		       "UE", "PACKETS", "LAST");
	else
		printf("{\"signalling\": [");
	for (size_t i = 0; i < n; i++) {
		const struct bearer *b = sig_bearer(&t, &e[i].k);
		const char *type = e[i].k.type == 26 ? "error_ind" : "end_marker";
		double age = (double)(now - e[i].v.last_ns) / 1e9;

		if (o->json.set) {
			printf("%s\n  {\"message\": \"%s\", \"teid\": %u, \"peer\": \"%s\", \"from\": \"%s\", "
			       "\"packets\": %llu, \"last_age_s\": %.3f, \"bearer\": ", i ? "," : "", type,
			       ntohl(e[i].k.teid), ip_str(e[i].k.addr, a), ip_str(e[i].v.from, f),
			       (unsigned long long)e[i].v.packets, age);
			if (b)
				printf("{\"teid\": %u, \"ue\": \"%s\"}}", b->teid, ip_str(b->ue, a));
			else
				printf("null}");
			continue;
		}
		printf("%-14s 0x%08x %-15s ", type, ntohl(e[i].k.teid), ip_str(e[i].k.addr, a));
		if (b)
			printf("0x%08x %-15s", b->teid, ip_str(b->ue, f));
		else
			printf("%-10s %-15s", "none", "-");
		printf(" %8llu %8.1fs\n", (unsigned long long)e[i].v.packets, age);
	}
	if (o->json.set)
		printf("%s]}\n", n ? "\n" : "");
out:
	bearers_free(&t);
	free(e);
	close(fd);
	return err;
}
