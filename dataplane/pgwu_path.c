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
#include <limits.h>
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

/* A peer over IPv4 (af AF_INET, addr's first 4 octets, network order: peers) or IPv6 (peers6) */
struct path_peer {
	int af;
	__u8 addr[16];
	struct pgwu_peer p;
	bool known;			/* in its peers map */
};

static int peer_add(struct path_peer *v, int *n, int af, const void *addr)
{
	size_t len = af == AF_INET ? 4 : 16;

	for (int i = 0; i < *n; i++)
		if (v[i].af == af && !memcmp(v[i].addr, addr, len))
			return 0;
	if (*n >= MAX_PATH_PEERS)
		return -E2BIG;
	memset(&v[*n], 0, sizeof(v[*n]));
	v[*n].af = af;
	memcpy(v[(*n)++].addr, addr, len);
	return 0;
}

/* IPv4 peers first, each family by address */
static int cmp_peer(const void *a, const void *b)
{
	const struct path_peer *x = a, *y = b;

	if (x->af != y->af)
		return x->af == AF_INET ? -1 : 1;
	return memcmp(x->addr, y->addr, x->af == AF_INET ? 4 : 16);
}

static const char *peer_str(const struct path_peer *pp, char buf[INET6_ADDRSTRLEN])
{
	return inet_ntop(pp->af, pp->addr, buf, INET6_ADDRSTRLEN) ? buf : "?";
}

/* The peers to show: --peer / --peer6, else the SGWs of the bearers (their IPv4 or IPv6 peer) and
 * those in the peers maps. */
static int peers_collect(int peers_fd, int peers6_fd, const struct path_opts *o, struct path_peer *v,
			 int *n)
{
	struct bearer_table t;
	__u32 key, next;
	__u8 key6[16], next6[16];
	int err = 0;

	*n = 0;
	if (o->peer.set || o->peer6.set) {
		if (o->peer.set)
			err = peer_add(v, n, AF_INET, &o->peer.addr);
		if (!err && o->peer6.set)
			err = peer_add(v, n, AF_INET6, o->peer6.addr);
		return err;
	}
	err = bearers_load(&t);
	if (err)
		return err;
	for (size_t i = 0; i < t.n && !err; i++) {
		if (!t.b[i].has_dl)
			continue;
		if (t.b[i].flags & PGWU_B_PEER6)
			err = peer_add(v, n, AF_INET6, t.b[i].sgw6);
		else
			err = peer_add(v, n, AF_INET, &t.b[i].sgw);
	}
	bearers_free(&t);
	for (int r = bpf_map_get_next_key(peers_fd, NULL, &next); !r && !err;
	     r = bpf_map_get_next_key(peers_fd, &key, &next)) {
		key = next;
		err = peer_add(v, n, AF_INET, &key);
	}
	for (int r = peers6_fd < 0 ? -1 : bpf_map_get_next_key(peers6_fd, NULL, next6); !r && !err;
	     r = bpf_map_get_next_key(peers6_fd, key6, next6)) {
		memcpy(key6, next6, 16);
		err = peer_add(v, n, AF_INET6, key6);
	}
	if (err == -E2BIG)
		fprintf(stderr, "More than %d peers: give one with --peer or --peer6\n", MAX_PATH_PEERS);
	return err;
}

static int peer_fd(const struct path_peer *pp, int peers_fd, int peers6_fd)
{
	return pp->af == AF_INET ? peers_fd : peers6_fd;
}

static void peers_refresh(int peers_fd, int peers6_fd, struct path_peer *v, int n)
{
	for (int i = 0; i < n; i++) {
		int fd = peer_fd(&v[i], peers_fd, peers6_fd);

		v[i].known = fd >= 0 && !bpf_map_lookup_elem(fd, v[i].addr, &v[i].p);
	}
}

static const char *peer_state(const struct path_peer *pp)
{
	if (!pp->known || (!pp->p.rsp_ns && !pp->p.req_ns))
		return "unprobed";
	if (pp->p.rsp_ns && pp->p.rsp_ns >= pp->p.req_ns)
		return "up";
	return "no-response";
}

/* TS 29.281 7.2.1: an Echo Request: S set, TEID 0, a sequence number, no IE; to port 2152 of the
 * peer over its family (the kernel computes the UDP checksum, mandatory over IPv6). */
static int echo_send(int sock, const struct path_peer *pp, __u16 seq)
{
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(PGWU_GTPU_PORT) };
	struct sockaddr_in6 to6 = { .sin6_family = AF_INET6, .sin6_port = htons(PGWU_GTPU_PORT) };
	__u8 msg[12] = { 0x32, 1, 0, 4, 0, 0, 0, 0, seq >> 8, seq & 0xff, 0, 0 };
	ssize_t r;

	if (pp->af == AF_INET) {
		memcpy(&to.sin_addr, pp->addr, 4);
		r = sendto(sock, msg, sizeof(msg), 0, (struct sockaddr *)&to, sizeof(to));
	} else {
		memcpy(&to6.sin6_addr, pp->addr, 16);
		r = sendto(sock, msg, sizeof(msg), 0, (struct sockaddr *)&to6, sizeof(to6));
	}
	return r == sizeof(msg) ? 0 : -errno;
}

/* A socket bound to local:2152 (af's GTP-U address: local_addr, n3_addr6), so the responses come
 * back to port 2152 of that address, where xdp_access / xdp_ul_n3v6 read them (they never reach
 * this socket). */
static int echo_socket(int af, const void *local)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(PGWU_GTPU_PORT) };
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = htons(PGWU_GTPU_PORT) };
	int one = 1, fd, err;
	char buf[INET6_ADDRSTRLEN];

	fd = socket(af, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (af == AF_INET) {
		memcpy(&a.sin_addr, local, 4);
		setsockopt(fd, IPPROTO_IP, IP_FREEBIND, &one, sizeof(one));
		err = bind(fd, (struct sockaddr *)&a, sizeof(a));
	} else {
		memcpy(&a6.sin6_addr, local, 16);
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		setsockopt(fd, IPPROTO_IPV6, IPV6_FREEBIND, &one, sizeof(one));
		err = bind(fd, (struct sockaddr *)&a6, sizeof(a6));
	}
	if (err) {
		err = -errno;
		fprintf(stderr, "Couldn't bind %s%s%s:%d to send Echo Requests from: %s\n",
			af == AF_INET6 ? "[" : "", inet_ntop(af, local, buf, sizeof(buf)) ? buf : "?",
			af == AF_INET6 ? "]" : "", PGWU_GTPU_PORT, strerror(-err));
		close(fd);
		return err;
	}
	return fd;
}

static int path_send(int peers_fd, int peers6_fd, const struct pgwu_config *c, struct path_peer *v,
		     int n, __u32 wait_ms)
{
	__u64 sent_at = now_ns(), deadline;
	__u16 seq = (__u16)(sent_at >> 10);
	int sock = -1, sock6 = -1, err = 0;
	char buf[INET6_ADDRSTRLEN];

	for (int i = 0; i < n; i++) {
		struct pgwu_peer p = {};
		int fd = peer_fd(&v[i], peers_fd, peers6_fd), *s = v[i].af == AF_INET ? &sock : &sock6;

		if (*s < 0) {
			*s = echo_socket(v[i].af, v[i].af == AF_INET ? (const void *)&c->local_addr :
					 (const void *)c->n3_addr6);
			if (*s < 0) {
				err = *s;
				goto out;
			}
		}
		if (bpf_map_lookup_elem(fd, v[i].addr, &p))
			memset(&p, 0, sizeof(p));
		p.req_ns = now_ns();
		p.req_seq = seq;
		/* written before sending: a response can't be older than its request */
		if (bpf_map_update_elem(fd, v[i].addr, &p, BPF_ANY)) {
			err = -errno;
			fprintf(stderr, "Couldn't write the peers map: %s\n", strerror(-err));
			goto out;
		}
		err = echo_send(*s, &v[i], seq);
		if (err) {
			fprintf(stderr, "Couldn't send an Echo Request to %s: %s\n", peer_str(&v[i], buf),
				strerror(-err));
			goto out;
		}
	}
	deadline = sent_at + (__u64)wait_ms * 1000000ULL;
	for (;;) {
		int pending = 0;

		peers_refresh(peers_fd, peers6_fd, v, n);
		for (int i = 0; i < n; i++)
			pending += strcmp(peer_state(&v[i]), "up") != 0;
		if (!pending || now_ns() >= deadline)
			break;
		usleep(10000);
	}
out:
	if (sock >= 0)
		close(sock);
	if (sock6 >= 0)
		close(sock6);
	return err;
}

static void path_print(const struct path_peer *v, int n, bool json)
{
	__u64 now = now_ns();
	char a[INET6_ADDRSTRLEN];
	int w = 15;

	for (int i = 0; i < n; i++)
		if ((int)strlen(peer_str(&v[i], a)) > w)
			w = strlen(a);
	if (!json)
		printf("%-*s %-11s %8s %8s %9s %10s\n", w, "PEER", "STATE", "RESTART", "RESTARTS",
		       "RESPONSES", "LAST RSP");
	else
		printf("{\"peers\": [");
	for (int i = 0; i < n; i++) {
		const struct pgwu_peer *p = &v[i].p;
		bool rc = v[i].known && p->has_recovery;
		double age = p->rsp_ns ? (double)(now - p->rsp_ns) / 1e9 : -1;

		if (json) {
			printf("%s\n  {\"addr\": \"%s\", \"family\": %d, \"state\": \"%s\", "
			       "\"restart_counter\": ", i ? "," : "", peer_str(&v[i], a),
			       v[i].af == AF_INET ? 4 : 6, peer_state(&v[i]));
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
		printf("%-*s %-11s ", w, peer_str(&v[i], a), peer_state(&v[i]));
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
	int peers_fd, peers6_fd, cfg_fd, n = 0, err;
	bool has4 = false, has6 = false;

	peers_fd = pinned_open("peers");
	if (peers_fd < 0)
		return peers_fd;
	peers6_fd = pinned_open_opt("peers6");
	cfg_fd = pinned_open("config");
	if (cfg_fd < 0) {
		close(peers_fd);
		if (peers6_fd >= 0)
			close(peers6_fd);
		return cfg_fd;
	}
	v = calloc(MAX_PATH_PEERS, sizeof(*v));
	err = v ? config_read(cfg_fd, &c) : -ENOMEM;
	if (err)
		goto out;
	err = peers_collect(peers_fd, peers6_fd, o, v, &n);
	if (err)
		goto out;
	for (int i = 0; i < n; i++) {
		has4 |= v[i].af == AF_INET;
		has6 |= v[i].af == AF_INET6;
	}
	if (o->send.set) {
		if (has4 && !c.local_addr) {
			fprintf(stderr, "No GTP-U address configured (pgwu config --local-addr): "
				"Echo Responses could not come back to the data path\n");
			err = -EINVAL;
			goto out;
		}
		if (has6 && (peers6_fd < 0 || !memcmp(c.n3_addr6, (__u8[16]){}, 16))) {
			fprintf(stderr, "No N3 IPv6 address configured (pgwu config --n3-addr6): "
				"Echo Responses from IPv6 peers could not come back to the data path\n");
			err = -EINVAL;
			goto out;
		}
		err = path_send(peers_fd, peers6_fd, &c, v, n, o->wait.v);
		if (err)
			goto out;
	}
	peers_refresh(peers_fd, peers6_fd, v, n);
	qsort(v, n, sizeof(*v), cmp_peer);
	path_print(v, n, o->json.set);
out:
	free(v);
	close(cfg_fd);
	close(peers_fd);
	if (peers6_fd >= 0)
		close(peers6_fd);
	return err;
}

/* ---- pgwu signalling ---- */

/* A report of sig_rx (IPv4: addr/from's first 4 octets) or sig_rx6 (IPv6) */
struct sig_entry {
	int af;
	__u32 teid;		/* network order */
	__u8 type;
	__u8 addr[16], from[16];
	__u64 packets, last_ns;
};

static int cmp_sig(const void *a, const void *b)
{
	const struct sig_entry *x = a, *y = b;

	if (x->type != y->type)
		return x->type < y->type ? -1 : 1;
	if (ntohl(x->teid) != ntohl(y->teid))
		return ntohl(x->teid) < ntohl(y->teid) ? -1 : 1;
	if (x->af != y->af)
		return x->af == AF_INET ? -1 : 1;
	return memcmp(x->addr, y->addr, x->af == AF_INET ? 4 : 16);
}

/* The bearer a report names: an Error Indication its downlink half (SGW or IPv6 peer, SGW TEID),
 * an End Marker its local TEID. */
static const struct bearer *sig_bearer(const struct bearer_table *t, const struct sig_entry *k)
{
	for (size_t i = 0; i < t->n; i++) {
		const struct bearer *b = &t->b[i];
		bool v6 = b->flags & PGWU_B_PEER6;

		if (k->type == 26 && b->has_dl && b->sgw_teid == ntohl(k->teid) &&
		    (k->af == AF_INET6 ? v6 && !memcmp(b->sgw6, k->addr, 16) :
					 !v6 && !memcmp(&b->sgw, k->addr, 4)))
			return b;
		if (k->type == 254 && b->teid == ntohl(k->teid))
			return b;
	}
	return NULL;
}

static int sig_push(struct sig_entry **e, size_t *n, size_t *cap, const struct sig_entry *x)
{
	if (*n == *cap) {
		struct sig_entry *ne = realloc(*e, (*cap = *cap ? 2 * *cap : 64) * sizeof(**e));

		if (!ne)
			return -ENOMEM;
		*e = ne;
	}
	(*e)[(*n)++] = *x;
	return 0;
}

static int sig_read(int fd, int fd6, struct sig_entry **e, size_t *n)
{
	struct pgwu_sig_key key, next;
	struct pgwu_sig6_key key6, next6;
	struct pgwu_sig_val v;
	struct pgwu_sig6_val v6;
	size_t cap = 0;
	int r, err = 0;

	for (r = bpf_map_get_next_key(fd, NULL, &next); !r && !err;
	     r = bpf_map_get_next_key(fd, &key, &next)) {
		struct sig_entry x = { .af = AF_INET };

		key = next;
		if (bpf_map_lookup_elem(fd, &key, &v))
			continue;		/* evicted meanwhile */
		x.teid = key.teid;
		x.type = key.type;
		memcpy(x.addr, &key.addr, 4);
		memcpy(x.from, &v.from, 4);
		x.packets = v.packets;
		x.last_ns = v.last_ns;
		err = sig_push(e, n, &cap, &x);
	}
	for (r = fd6 < 0 ? -1 : bpf_map_get_next_key(fd6, NULL, &next6); !r && !err;
	     r = bpf_map_get_next_key(fd6, &key6, &next6)) {
		struct sig_entry x = { .af = AF_INET6 };

		key6 = next6;
		if (bpf_map_lookup_elem(fd6, &key6, &v6))
			continue;
		x.teid = key6.teid;
		x.type = key6.type;
		memcpy(x.addr, key6.addr, 16);
		memcpy(x.from, v6.from, 16);
		x.packets = v6.packets;
		x.last_ns = v6.last_ns;
		err = sig_push(e, n, &cap, &x);
	}
	return err;
}

int do_signalling(const void *cfg)
{
	const struct signalling_opts *o = cfg;
	struct sig_entry *e = NULL;
	struct bearer_table t = {};
	size_t n = 0;
	__u64 now = now_ns();
	int fd, fd6, err;
	char a[INET6_ADDRSTRLEN], f[INET6_ADDRSTRLEN];

	fd = pinned_open("sig_rx");
	if (fd < 0)
		return fd;
	fd6 = pinned_open_opt("sig_rx6");
	err = bearers_load(&t);
	if (err)
		goto out;
	err = sig_read(fd, fd6, &e, &n);
	if (err)
		goto out;
	if (n)
		qsort(e, n, sizeof(*e), cmp_sig);
	if (!o->json.set)
		printf("%-14s %-10s %-15s %-10s %-15s %8s %9s\n", "MESSAGE", "TEID", "PEER", "BEARER",
		       "UE", "PACKETS", "LAST");
	else
		printf("{\"signalling\": [");
	for (size_t i = 0; i < n; i++) {
		const struct bearer *b = sig_bearer(&t, &e[i]);
		const char *type = e[i].type == 26 ? "error_ind" : "end_marker";
		double age = (double)(now - e[i].last_ns) / 1e9;

		inet_ntop(e[i].af, e[i].addr, a, sizeof(a));
		if (o->json.set) {
			inet_ntop(e[i].af, e[i].from, f, sizeof(f));
			printf("%s\n  {\"message\": \"%s\", \"teid\": %u, \"peer\": \"%s\", \"from\": \"%s\", "
			       "\"packets\": %llu, \"last_age_s\": %.3f, \"bearer\": ", i ? "," : "", type,
			       ntohl(e[i].teid), a, f, (unsigned long long)e[i].packets, age);
			if (b)
				printf("{\"teid\": %u, \"ue\": \"%s\"}}", b->teid, ip_str(b->ue, a));
			else
				printf("null}");
			continue;
		}
		printf("%-14s 0x%08x %-15s ", type, ntohl(e[i].teid), a);
		if (b)
			printf("0x%08x %-15s", b->teid, ip_str(b->ue, f));
		else
			printf("%-10s %-15s", "none", "-");
		printf(" %8llu %8.1fs\n", (unsigned long long)e[i].packets, age);
	}
	if (o->json.set)
		printf("%s]}\n", n ? "\n" : "");
out:
	bearers_free(&t);
	free(e);
	close(fd);
	if (fd6 >= 0)
		close(fd6);
	return err;
}
