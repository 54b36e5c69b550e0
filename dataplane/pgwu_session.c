// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pgwu_session.c: pgwu session add/del/get/list/load/flush. A bearer is two map entries:
 * ul_bearers[local TEID] = {UE} (uplink) and dl_bearers[UE] = {SGW, SGW TEID, local TEID}
 * (downlink). Writers insert with BPF_NOEXIST and undo the first half when the second fails, so
 * the tables are never left with a bearer half added by a failed call.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "pgwu_cli.h"

#define BATCH_CHUNK 65536
#define MAX_FILE_ERRORS 10
/* session load/unload FILE: what bounds the memory a FILE can make them use (parse_stream) */
#define MAX_LINE 4096		/* bytes of one line: 4 fields and 2 options take < 90, the rest a comment */
#define MAX_LINE_STR "4096"
#define READ_BUF 65536		/* bytes read at a time; > MAX_LINE, so a whole line always fits */

static const __u32 csum_flags[] = { PGWU_B_CSUM_OFF, PGWU_B_CSUM_ON, 0 };	/* off on default */

void bearer_print_header(FILE *f)
{
	fprintf(f, "%-10s %-15s %-15s %-10s %-7s %-5s %12s %14s %12s %14s\n", "TEID", "UE", "SGW",
		"SGW_TEID", "CSUM", "QFI", "UL_PACKETS", "UL_BYTES", "DL_PACKETS", "DL_BYTES");
}

void bearer_print_row(FILE *f, const struct bearer *b)
{
	char ue[16], sgw[INET6_ADDRSTRLEN], sgw_teid[12] = "-", ulp[24] = "-", ulb[24] = "-", dlp[24] = "-",
	     dlb[24] = "-", qfi[8];

	if (b->has_ul) {
		snprintf(ulp, sizeof(ulp), "%llu", (unsigned long long)b->ul_packets);
		snprintf(ulb, sizeof(ulb), "%llu", (unsigned long long)b->ul_bytes);
	}
	if (b->has_dl) {
		snprintf(sgw_teid, sizeof(sgw_teid), "%u", b->sgw_teid);
		snprintf(dlp, sizeof(dlp), "%llu", (unsigned long long)b->dl_packets);
		snprintf(dlb, sizeof(dlb), "%llu", (unsigned long long)b->dl_bytes);
	}
	fprintf(f, "%-10u %-15s %-15s %-10s %-7s %-5s %12s %14s %12s %14s", b->teid,
		ip_str(b->ue, ue), b->has_dl ? bearer_sgw_str(b, sgw) : "-", sgw_teid,
		b->has_dl ? bearer_csum_str(b->flags) : "-", bearer_qfi_str(b, qfi), ulp, ulb, dlp,
		dlb);
	if (b->has_ue6) {	/* a trailing column, only on the rows that have one */
		char p6[INET6_ADDRSTRLEN + 4];

		fprintf(f, " ue6=%s", prefix64_str(b->ue6, p6));
	}
	fprintf(f, "\n");
}

/* "qfi": the downlink half's (what downlink G-PDUs are marked with), "ul_qfi": the uplink
 * half's (what uplink G-PDUs must carry); null for none or no such half. */
static void qfi_json(FILE *f, const char *key, bool has, __u32 flags)
{
	if (has && pgwu_qfi_of(flags) >= 0)
		fprintf(f, "\"%s\": %d, ", key, pgwu_qfi_of(flags));
	else
		fprintf(f, "\"%s\": null, ", key);
}

/* "owner": "pgwu" (pgwu session) or "pfcp" (a `pgwu pfcp` session's, pgwu.h PGWU_B_OWNER_SHIFT);
 * with_pfcp: also "pfcp", the session (pfcp_view_json) */
static void print_json(FILE *f, const struct bearer *b, bool with_pfcp, const struct pfcp_view *v)
{
	char ue[16], sgw[INET6_ADDRSTRLEN];

	fprintf(f, "{\"teid\": %u, \"ue\": \"%s\", ", b->teid, ip_str(b->ue, ue));
	if (b->has_dl)
		fprintf(f, "\"sgw\": \"%s\", \"sgw_teid\": %u, \"csum\": \"%s\", ",
			bearer_sgw_str(b, sgw), b->sgw_teid, bearer_csum_str(b->flags));
	else
		fprintf(f, "\"sgw\": null, \"sgw_teid\": null, \"csum\": null, ");
	qfi_json(f, "qfi", b->has_dl, b->flags);
	qfi_json(f, "ul_qfi", b->has_ul, b->ul_flags);
	fprintf(f, "\"owner\": \"%s\", ",
		pgwu_owner_of(b->has_ul ? b->ul_flags : b->flags) ? "pfcp" : "pgwu");
	if (with_pfcp) {
		fprintf(f, "\"pfcp\": ");
		pfcp_view_json(f, v, b);
		fprintf(f, ", ");
	}
	if (b->has_ul)
		fprintf(f, "\"uplink\": {\"packets\": %llu, \"bytes\": %llu}, ",
			(unsigned long long)b->ul_packets, (unsigned long long)b->ul_bytes);
	else
		fprintf(f, "\"uplink\": null, ");
	if (b->has_ue6) {
		char p6[INET6_ADDRSTRLEN + 4];

		fprintf(f, "\"ue6\": \"%s\", \"uplink6\": {\"packets\": %llu, \"bytes\": %llu}, "
			"\"downlink6\": {\"packets\": %llu, \"bytes\": %llu}, ",
			prefix64_str(b->ue6, p6), (unsigned long long)b->ul6_packets,
			(unsigned long long)b->ul6_bytes, (unsigned long long)b->dl6_packets,
			(unsigned long long)b->dl6_bytes);
	}	/* without one: no such keys (the IPv4-only bearer's object as it always was) */
	if (b->has_dl)
		fprintf(f, "\"downlink\": {\"packets\": %llu, \"bytes\": %llu}}",
			(unsigned long long)b->dl_packets, (unsigned long long)b->dl_bytes);
	else
		fprintf(f, "\"downlink\": null}");
}

void bearer_print_json(FILE *f, const struct bearer *b)
{
	print_json(f, b, false, NULL);
}

void bearer_print_json_pfcp(FILE *f, const struct bearer *b, const struct pfcp_view *v)
{
	print_json(f, b, true, v);
}

static void full_msg(int fd)
{
	__u32 cap = 0;

	map_max_entries(fd, &cap);
	fprintf(stderr, "bearer table full (capacity %u)\n", cap);
}

int do_session_add(const void *cfg)
{
	const struct session_opts *o = cfg;
	__u32 teid = htonl(o->teid.v), ue = o->ue.addr;
	__u32 qfi = o->qfi.set ? pgwu_qfi_flags(o->qfi.v) : 0;
	struct pgwu_ul_bearer old_ul;
	struct pgwu_dl_bearer dl = {
		.sgw_addr = o->sgw.addr,
		.sgw_teid = htonl(o->sgw_teid.v),
		.local_teid = teid,
		.flags = csum_flags[o->csum.v] | qfi,
	}, old_dl;
	char a[16], b[16];
	const char *why = NULL;
	struct pgwu_maps m;
	__u64 ue6 = 0;
	struct {
		struct sdf_pdr_spec p[2][SDF_MAX_PDRS];
		int n[2];
	} *sdf = NULL;
	int err;

	if (addr_unusable(ue)) {
		fprintf(stderr, "UE address %s is %s: not a host\n", ip_str(ue, a), addr_unusable(ue));
		return -EUSAGE;
	}
	if (o->sgw.set == o->sgw6.set) {
		fprintf(stderr, "Give exactly one of --sgw A or --sgw6 A6\n");
		return -EUSAGE;
	}
	if (o->sgw.set && addr_unusable(o->sgw.addr)) {
		fprintf(stderr, "SGW address %s is %s: not a host\n", ip_str(o->sgw.addr, a),
			addr_unusable(o->sgw.addr));
		return -EUSAGE;
	}
	if (o->sgw6.set && addr6_unusable(o->sgw6.addr)) {
		char a6[INET6_ADDRSTRLEN];

		fprintf(stderr, "SGW address %s is %s: not a host\n",
			inet_ntop(AF_INET6, o->sgw6.addr, a6, sizeof(a6)), addr6_unusable(o->sgw6.addr));
		return -EUSAGE;
	}
	if (o->ue6.set && parse_prefix64(o->ue6.s, &ue6, &why)) {
		fprintf(stderr, "--ue6 '%s': %s\n", o->ue6.s, why);
		return -EUSAGE;
	}
	if (o->cp_teid.set && (!o->ue6.set || o->cp_teid.v == o->teid.v)) {
		fprintf(stderr, "--cp-teid: needs --ue6 (the CP function sends IPv6) and a TEID of its own\n");
		return -EUSAGE;
	}
	if (o->filter.set) {
		sdf = calloc(1, sizeof(*sdf));
		if (!sdf)
			return -ENOMEM;
		if (sdf_parse_option(o->filter.s, sdf->p, sdf->n, &why)) {
			fprintf(stderr, "--filter %s\n", why);
			free(sdf);
			return -EUSAGE;
		}
	}
	err = maps_open_locked(&m);
	if (err) {
		free(sdf);
		return err;
	}
	/* the lists before the halves that point at them (PGWU_B_SDF) */
	for (int d = 0; sdf && d < 2; d++) {
		if (!sdf->n[d])
			continue;
		why = NULL;
		err = sdf_install(&m.sdf, teid, d, sdf->p[d], sdf->n[d], NULL, &why);
		if (err) {
			if (why)
				fprintf(stderr, "--filter: %s\n", why);
			else
				fprintf(stderr, "Couldn't install the SDF filters: %s\n", strerror(-err));
			sdf_remove(&m.sdf, teid, PGWU_PFCP_UPLINK);
			maps_close(&m);
			free(sdf);
			return why ? -EUSAGE : err;
		}
		if (d == PGWU_PFCP_UPLINK) {
			qfi |= PGWU_B_SDF;
			for (int i = 0; i < sdf->n[d]; i++)
				if (sdf->p[d][i].to_cp)
					qfi |= PGWU_B_CP;
		} else
			dl.flags |= PGWU_B_SDF;
	}
	free(sdf);
	if (o->sgw6.set) {
		/* N3 over IPv6: the bearer names its peer by its index in n3v6_peers */
		err = n3v6_peer_find(&m, o->sgw6.addr, true, &dl.sgw_addr);
		if (err) {
			fprintf(stderr, "Couldn't add the IPv6 peer: %s\n", err == -ENOSPC ?
				"all " PGWU_N3V6_PEERS_STR " entries in use" : strerror(-err));
			sdf_remove(&m.sdf, teid, PGWU_PFCP_UPLINK);
			sdf_remove(&m.sdf, teid, PGWU_PFCP_DOWNLINK);
			maps_close(&m);
			return err == -ENOSPC ? -EUSAGE : err;
		}
		dl.flags |= PGWU_B_PEER6;
	}
	err = bearer_add(&m, teid, ue, qfi, &dl);
	if (!err && o->ue6.set) {
		err = bearer_add_v6(&m, teid, ue6, &dl);
		if (err == -EADDRINUSE && !bpf_map_lookup_elem(m.dl6, &ue6, &old_dl))
			fprintf(stderr, "IPv6 prefix %s already has a bearer (TEID %u)\n", o->ue6.s,
				ntohl(old_dl.local_teid));
		else if (err == -E2BIG)
			full_msg(m.dl6);
		else if (err)
			fprintf(stderr, "Couldn't add the bearer's IPv6 prefix: %s\n", strerror(-err));
		if (!err && o->cp_teid.set) {
			err = cp2up_add(&m.sdf, m.ul, htonl(o->cp_teid.v), ue6, 0);
			if (err == -EEXIST)
				fprintf(stderr, "--cp-teid %u: that TEID is taken\n", o->cp_teid.v);
			else if (err)
				fprintf(stderr, "Couldn't add the CP2UP tunnel: %s\n", strerror(-err));
		}
		if (err) {
			bearer_remove(&m, teid, ue, true, true);	/* all or nothing */
			sdf_remove(&m.sdf, teid, PGWU_PFCP_UPLINK);
			sdf_remove(&m.sdf, teid, PGWU_PFCP_DOWNLINK);
			maps_close(&m);
			return err;
		}
	}
	if (err && (qfi & PGWU_B_SDF || dl.flags & PGWU_B_SDF) && err != -EEXIST) {
		sdf_remove(&m.sdf, teid, PGWU_PFCP_UPLINK);
		sdf_remove(&m.sdf, teid, PGWU_PFCP_DOWNLINK);
	}
	if (err == -EEXIST && !bpf_map_lookup_elem(m.ul, &teid, &old_ul))
		fprintf(stderr, "TEID %u already has a bearer (UE %s)\n", o->teid.v,
			ip_str(old_ul.ue_addr, a));
	else if (err == -EADDRINUSE && !bpf_map_lookup_elem(m.dl, &ue, &old_dl))
		fprintf(stderr, "UE %s already has a bearer (TEID %u)\n", ip_str(ue, a),
			ntohl(old_dl.local_teid));
	else if (err == -E2BIG)
		full_msg(m.ul);
	else if (err)
		fprintf(stderr, "Couldn't add the bearer: %s\n", strerror(-err));
	else {
		char s6[INET6_ADDRSTRLEN];

		printf("added bearer TEID %u UE %s SGW %s SGW TEID %u", o->teid.v, ip_str(ue, a),
		       o->sgw6.set ? inet_ntop(AF_INET6, o->sgw6.addr, s6, sizeof(s6)) :
		       ip_str(o->sgw.addr, b), o->sgw_teid.v);
		if (o->qfi.set)
			printf(" QFI %u", o->qfi.v);
		if (o->ue6.set) {
			char p6[INET6_ADDRSTRLEN + 4];

			printf(" UE6 %s", prefix64_str(ue6, p6));
		}
		printf("\n");
	}
	maps_close(&m);
	return err;
}

static int one_of_teid_ue(const struct session_opts *o)
{
	if (o->teid.set == o->ue.set) {
		fprintf(stderr, "Give exactly one of --teid T or --ue A\n");
		return -EUSAGE;
	}
	return 0;
}

/* Find a bearer by TEID or UE and fill b; -ENOENT (printed) when there is none. */
static int bearer_find(const struct pgwu_maps *m, const struct session_opts *o, struct bearer *b)
{
	int err = bearer_get(m, htonl(o->teid.v), o->ue.addr, o->teid.set, b);
	char a[16];

	if (err == -ENOENT && o->teid.set)
		fprintf(stderr, "No bearer with TEID %u\n", o->teid.v);
	else if (err == -ENOENT)
		fprintf(stderr, "No bearer for UE %s\n", ip_str(o->ue.addr, a));
	return err;
}

int do_session_del(const void *cfg)
{
	const struct session_opts *o = cfg;
	struct pgwu_maps m;
	struct bearer b;
	__u32 teid, ue;
	char a[16];
	int err;

	err = one_of_teid_ue(o);
	if (err)
		return err;
	err = maps_open_locked(&m);
	if (err)
		return err;
	err = bearer_find(&m, o, &b);
	if (err)
		goto out;
	teid = htonl(b.teid);
	ue = b.ue;
	err = bearer_remove(&m, teid, ue, b.has_ul, b.has_dl);
	if (err) {
		fprintf(stderr, "Couldn't delete the bearer: %s\n", strerror(-err));
		goto out;
	}
	sdf_remove(&m.sdf, teid, PGWU_PFCP_UPLINK);	/* after the halves that pointed at them */
	sdf_remove(&m.sdf, teid, PGWU_PFCP_DOWNLINK);
	if (b.has_ue6)
		cp2up_remove(&m.sdf, m.ul, b.ue6);
	printf("deleted bearer TEID %u UE %s\n", b.teid, ip_str(ue, a));
out:
	maps_close(&m);
	return err;
}

int do_session_get(const void *cfg)
{
	const struct session_opts *o = cfg;
	struct pfcp_view v;
	struct pgwu_maps m;
	struct bearer b;
	int err;

	err = one_of_teid_ue(o);
	if (err)
		return err;
	err = maps_open(&m);
	if (err)
		return err;
	err = bearer_find(&m, o, &b);
	if (err)
		goto out;
	err = pfcp_view_load(&v);
	if (err)
		goto out;
	if (o->json.set) {
		bearer_print_json_pfcp(stdout, &b, &v);
		printf("\n");
	} else {
		bearer_print_header(stdout);
		bearer_print_row(stdout, &b);
		pfcp_view_print(stdout, &v, &b);
	}
	pfcp_view_free(&v);
out:
	maps_close(&m);
	return err;
}

int do_session_list(const void *cfg)
{
	const struct session_opts *o = cfg;
	struct bearer_table t;
	struct pfcp_view v;
	int err;

	err = bearers_load(&t);
	if (err)
		return err;
	err = o->json.set ? pfcp_view_load(&v) : 0;
	if (err) {
		bearers_free(&t);
		return err;
	}
	if (o->json.set) {
		printf("{\"capacity\": %u, \"uplink\": %zu, \"downlink\": %zu, \"bearers\": [",
		       t.cap_ul, t.n_ul, t.n_dl);
		for (size_t i = 0; i < t.n; i++) {
			printf(i ? ",\n  " : "\n  ");
			bearer_print_json_pfcp(stdout, &t.b[i], &v);
		}
		printf("\n]}\n");
		pfcp_view_free(&v);
	} else {
		bearer_print_header(stdout);
		for (size_t i = 0; i < t.n; i++)
			bearer_print_row(stdout, &t.b[i]);
	}
	bearers_free(&t);
	return 0;
}

/* Delete keys[0..n) from a hash map; keys already gone are skipped. */
static int delete_keys(int fd, const __u32 *keys, size_t n)
{
	LIBBPF_OPTS(bpf_map_batch_opts, opts);
	size_t done = 0;
	int err;

	while (done < n) {
		__u32 count = n - done > BATCH_CHUNK ? BATCH_CHUNK : n - done;

		err = bpf_map_delete_batch(fd, keys + done, &count, &opts);
		done += count;
		if (err == -ENOENT) {
			done++;		/* deleted by someone else meanwhile */
			continue;
		}
		if (err)
			return err;
	}
	return 0;
}

static int flush_both(int ul_fd, const __u32 *ul_keys, size_t n_ul, int dl_fd,
		      const __u32 *dl_keys, size_t n_dl);

/* Every IPv6 /64 (dl6_bearers, ul6_prefix): the downlink halves first, as for IPv4. */
static int flush_v6(const struct pgwu_maps *m)
{
	void *k6 = NULL, *v6 = NULL, *kt = NULL, *vt = NULL;
	size_t n6 = 0, nt = 0;
	int err;

	err = map_dump(m->dl6, sizeof(__u64), sizeof(struct pgwu_dl_bearer), &k6, &v6, &n6);
	if (!err)
		err = map_dump(m->ul6, sizeof(__u32), sizeof(struct pgwu_ul6), &kt, &vt, &nt);
	for (size_t i = 0; !err && i < n6; i++)
		if (bpf_map_delete_elem(m->dl6, (__u64 *)k6 + i) && errno != ENOENT)
			err = -errno;
	if (!err)
		err = delete_keys(m->ul6, kt, nt);
	free(k6);
	free(v6);
	free(kt);
	free(vt);
	return err;
}

int do_session_flush(const void *cfg)
{
	void *ul_keys = NULL, *ul_vals = NULL, *dl_keys = NULL, *dl_vals = NULL;
	size_t n_ul = 0, n_dl = 0;
	struct pgwu_maps m;
	int err;

	err = maps_open_locked(&m);
	if (err)
		return err;
	err = map_dump(m.ul, sizeof(__u32), sizeof(struct pgwu_ul_bearer), &ul_keys, &ul_vals, &n_ul);
	if (!err)
		err = map_dump(m.dl, sizeof(__u32), sizeof(struct pgwu_dl_bearer), &dl_keys, &dl_vals,
			       &n_dl);
	if (err)
		goto out;
	slots_clear_all(&m);
	err = flush_v6(&m);
	if (!err)
		err = flush_both(m.ul, ul_keys, n_ul, m.dl, dl_keys, n_dl);
	if (err) {
		fprintf(stderr, "Couldn't flush the bearer tables: %s\n", strerror(-err));
		goto out;
	}
	sdf_flush(&m.sdf);
	printf("flushed %zu bearers\n", n_ul > n_dl ? n_ul : n_dl);
out:
	free(ul_keys);
	free(ul_vals);
	free(dl_keys);
	free(dl_vals);
	maps_close(&m);
	return err;
}

/* ---- session load FILE ---- */

struct file_bearer {
	__u32 teid;		/* host order */
	__u32 ue;		/* network order */
	__u32 sgw;		/* network order */
	__u32 sgw_teid;		/* host order */
	__u32 flags;		/* downlink: csum= and qfi= */
	__u32 ul_flags;		/* uplink: qfi= */
	__u32 line;
	bool has_ue6;		/* ue6= */
	__u64 ue6;		/* the /64, network order (dl6_bearers' key) */
	bool has_sgw6;		/* sgw6=: the downlink's peer is this IPv6 address (N3 over IPv6) */
	__u8 sgw6[16];
};

struct bulk {
	const char *file;
	struct file_bearer *e;
	size_t n, cap;
	int nerr;
	bool fatal;		/* not a bearer file (a line too long, binary, too many lines): exit 2 */
	__u64 *by_teid, *by_ue;	/* e indexed by TEID and by UE (key_index) */
	__u32 limit;		/* bearers read at most: what the bearer table holds (bulk_limit) */
	bool limit_default;	/* no table to ask: the default capacity's */
};

/*
 * The most bearers FILE may hold: the loaded bearer table's capacity (no file beyond it can be
 * loaded or unloaded), else, with no PGW-U loaded to ask, the default table's. Read before FILE,
 * so that memory stays bounded by the table whatever FILE is (an endless stream of valid lines
 * grew to 3.6 GB in 15 s when the bound was the largest table any PGW-U can have).
 */
static void bulk_limit(struct bulk *bk)
{
	static const char *const names[] = { "ul_bearers", "dl_bearers" };
	char path[PATH_MAX];

	bk->limit = PGWU_MAX_MAX_BEARERS;
	for (size_t i = 0; i < 2; i++) {
		__u32 cap;
		int fd = pin_path(path, sizeof(path), names[i]) ? -1 : bpf_obj_get(path);

		if (fd < 0 || map_max_entries(fd, &cap)) {
			if (fd >= 0)
				close(fd);
			bk->limit = PGWU_DEFAULT_MAX_BEARERS;
			bk->limit_default = true;
			return;
		}
		close(fd);
		if (cap < bk->limit)
			bk->limit = cap;
	}
}

static void file_err(struct bulk *bk, __u32 line, const char *fmt, const char *a, const char *b)
{
	if (bk->nerr++ >= MAX_FILE_ERRORS)
		return;
	fprintf(stderr, "%s:%u: ", bk->file, line);
	fprintf(stderr, fmt, a, b);
	fputc('\n', stderr);
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

#define LINE_FORMAT "TEID UE_ADDR SGW_ADDR SGW_TEID [csum=on|off|default] [qfi=0..63] " \
	"[ue6=PREFIX/64] [sgw6=ADDR]"
#define MAX_FIELDS 8	/* 4 fields and each option once */

/* The options after the 4 fields, in any order, each at most once; false after reporting. */
static bool parse_line_opts(struct bulk *bk, struct file_bearer *e, char **f, int nf, __u32 line)
{
	static const char *const names[] = { "csum=off", "csum=on", "csum=default" };
	bool has_csum = false, has_qfi = false;
	const char *why;
	__u32 q;

	for (int k = 4; k < nf; k++) {
		bool csum = !strncmp(f[k], "csum=", 5), qfi = !strncmp(f[k], "qfi=", 4);
		bool ue6 = !strncmp(f[k], "ue6=", 4), sgw6 = !strncmp(f[k], "sgw6=", 5);
		int i;

		if ((csum && has_csum) || (qfi && has_qfi) || (ue6 && e->has_ue6) ||
		    (sgw6 && e->has_sgw6)) {
			file_err(bk, line, "'%s': a second %s option (each at most once)", f[k],
				 csum ? "csum=" : qfi ? "qfi=" : ue6 ? "ue6=" : "sgw6=");
			return false;
		}
		if (sgw6) {
			if (inet_pton(AF_INET6, f[k] + 5, e->sgw6) != 1) {
				file_err(bk, line, "bad sgw6= '%s': expected an IPv6 address%s", f[k] + 5, "");
				return false;
			}
			if (addr6_unusable(e->sgw6)) {
				file_err(bk, line, "bad sgw6= '%s': %s, not a host", f[k] + 5,
					 addr6_unusable(e->sgw6));
				return false;
			}
			e->has_sgw6 = true;
			continue;
		}
		if (ue6) {
			if (parse_prefix64(f[k] + 4, &e->ue6, &why)) {
				file_err(bk, line, "bad ue6= '%s': %s", f[k] + 4, why);
				return false;
			}
			e->has_ue6 = true;
			continue;
		}
		if (qfi) {
			if (parse_u32(f[k] + 4, &q) || q > PGWU_QFI_MAX) {
				file_err(bk, line, "bad QFI '%s' (qfi=0..63)%s", f[k] + 4, "");
				return false;
			}
			e->flags |= pgwu_qfi_flags(q);
			e->ul_flags = pgwu_qfi_flags(q);
			has_qfi = true;
			continue;
		}
		for (i = 0; i < 3; i++)
			if (!strcmp(f[k], names[i]))
				break;
		if (i == 3) {
			file_err(bk, line, "bad option '%s' (expected csum=on, csum=off, "
				 "csum=default, qfi=0..63, ue6=PREFIX/64 or sgw6=ADDR)%s", f[k], "");
			return false;
		}
		e->flags |= csum_flags[i];
		has_csum = true;
	}
	return true;
}

/* Parse one line (NUL-terminated, comment already cut); appends to bk->e when valid. */
static int parse_line(struct bulk *bk, char *s, __u32 line)
{
	struct file_bearer *e;
	char *f[MAX_FIELDS];
	int nf = 0;

	while (*s) {
		while (is_space(*s))
			*s++ = '\0';
		if (!*s)
			break;
		if (nf < MAX_FIELDS)
			f[nf] = s;
		nf++;
		while (*s && !is_space(*s))
			s++;
	}
	if (nf == 0)
		return 0;
	if (nf < 4 || nf > MAX_FIELDS) {
		char got[16];

		snprintf(got, sizeof(got), "%d", nf);
		file_err(bk, line, "expected " LINE_FORMAT ", got %s field%s", got,
			 nf == 1 ? "" : "s");
		return 0;
	}
	if (bk->n == bk->limit) {
		char n[16];

		snprintf(n, sizeof(n), "%u", bk->limit);
		file_err(bk, line, "more than %s bearers: more than the bearer table holds%s", n,
			 bk->limit_default ? " (the default capacity: no PGW-U is loaded to give its own)"
					   : " (its capacity)");
		bk->fatal = true;
		return 0;
	}
	if (bk->n == bk->cap) {
		size_t cap = bk->cap ? bk->cap * 2 : 4096;
		void *p = realloc(bk->e, cap * sizeof(*bk->e));

		if (!p)
			return -ENOMEM;
		bk->e = p;
		bk->cap = cap;
	}
	e = &bk->e[bk->n];
	e->line = line;
	e->flags = 0;
	e->ul_flags = 0;
	e->has_ue6 = false;
	e->ue6 = 0;
	e->has_sgw6 = false;
	if (parse_teid(f[0], &e->teid)) {
		file_err(bk, line, "bad TEID '%s' (1..4294967295, decimal or 0x-hex)%s", f[0], "");
		return 0;
	}
	if (parse_addr(f[1], &e->ue)) {
		file_err(bk, line, "bad UE address '%s'%s", f[1], "");
		return 0;
	}
	if (parse_addr(f[2], &e->sgw)) {
		file_err(bk, line, "bad SGW address '%s'%s", f[2], "");
		return 0;
	}
	if (addr_unusable(e->ue)) {
		file_err(bk, line, "UE address '%s' is %s: not a host", f[1], addr_unusable(e->ue));
		return 0;
	}
	if (addr_unusable(e->sgw)) {
		file_err(bk, line, "SGW address '%s' is %s: not a host", f[2], addr_unusable(e->sgw));
		return 0;
	}
	if (parse_teid(f[3], &e->sgw_teid)) {
		file_err(bk, line, "bad SGW TEID '%s' (1..4294967295, decimal or 0x-hex)%s", f[3], "");
		return 0;
	}
	if (!parse_line_opts(bk, e, f, nf, line))
		return 0;
	bk->n++;
	return 0;
}

/*
 * One line of FILE, s..nl (nl: its '\n' or the end of the file; there is room to write a NUL at
 * nl). A line over MAX_LINE bytes or with a NUL byte is not a bearer file's: reported with its
 * number, and the rest of FILE is not read (bk->fatal).
 */
static int take_line(struct bulk *bk, char *s, char *nl, __u32 line)
{
	char *hash;

	if (memchr(s, '\0', nl - s)) {
		file_err(bk, line, "binary data (a NUL byte): not a bearer file%s%s", "", "");
		bk->fatal = true;
		return 0;
	}
	if (nl - s > MAX_LINE) {
		file_err(bk, line, "longer than %s bytes: not a bearer file%s", MAX_LINE_STR, "");
		bk->fatal = true;
		return 0;
	}
	*nl = '\0';
	hash = memchr(s, '#', nl - s);
	if (hash)
		*hash = '\0';
	return parse_line(bk, s, line);
}

/*
 * Read FILE line by line to its end, whatever it is: a regular file, a pipe, a FIFO, /dev/stdin, a
 * socket; "-" is standard input. The memory is one buffer of READ_BUF bytes, whatever FILE holds,
 * plus the bearers parsed (at most bk->limit, bulk_limit): a line that does not end within MAX_LINE
 * bytes, or holds a NUL, stops the reading (/dev/zero, a binary, a file of one endless line).
 * Returns 0 or -errno (a read error, said here); bk->nerr counts FILE's errors.
 */
static int parse_stream(struct bulk *bk, const char *path)
{
	bool is_stdin = !strcmp(path, "-");
	size_t have = 0;	/* bytes at the start of buf: the beginning of a line */
	char *buf = NULL;
	struct stat st;
	__u32 line = 0;
	int fd, err = 0;

	fd = is_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st)) {
		err = -errno;
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		err = -EISDIR;
		goto out;
	}
	buf = malloc(READ_BUF + 1);
	if (!buf) {
		err = -ENOMEM;
		goto out;
	}
	while (!bk->fatal) {
		char *s = buf, *end, *nl;
		ssize_t r;

		r = read(fd, buf + have, READ_BUF - have);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			err = -errno;
			goto out;
		}
		end = buf + have + r;
		while (!bk->fatal && (nl = memchr(s, '\n', end - s))) {
			err = take_line(bk, s, nl, ++line);
			if (err)
				goto out;
			s = nl + 1;
		}
		have = end - s;
		if (bk->fatal)
			break;
		if (r == 0) {
			/* the last line, without its newline */
			if (have)
				err = take_line(bk, s, end, ++line);
			break;
		}
		if (have > MAX_LINE || memchr(s, '\0', have)) {
			/* a line that cannot be one of FILE's: said without reading its end */
			err = take_line(bk, s, end, ++line);
			break;
		}
		memmove(buf, s, have);
	}
out:
	if (err && err != -ENOMEM)
		fprintf(stderr, "Couldn't read %s: %s\n", is_stdin ? "standard input" : path,
			strerror(-err));
	if (fd >= 0 && !is_stdin)
		close(fd);
	free(buf);
	return err;
}

/* Index 32-bit keys for duplicate checks: a[i] = key << 32 | i, sorted by key, stable. */
static __u64 *key_index(const struct bulk *bk, bool by_ue)
{
	__u64 *a = malloc((bk->n + 1) * sizeof(*a));

	if (!a)
		return NULL;
	for (size_t i = 0; i < bk->n; i++)
		a[i] = (__u64)(by_ue ? ntohl(bk->e[i].ue) : bk->e[i].teid) << 32 | i;
	if (radix_sort_hi32(a, bk->n)) {
		free(a);
		return NULL;
	}
	return a;
}

static void key_str(bool by_ue, __u32 key, char buf[16])
{
	if (by_ue)
		ip_str(htonl(key), buf);
	else
		snprintf(buf, 16, "%u", key);
}

/* Duplicates within the file: reports the earliest line that repeats a key. */
static void check_file_dups(struct bulk *bk, const __u64 *a, bool by_ue)
{
	size_t best = (size_t)-1, first = 0, group = 0;
	char k[16], l[16];

	/* stable sort: a group of equal keys starts with the earliest line */
	for (size_t i = 1; i < bk->n; i++) {
		if (a[i] >> 32 != a[i - 1] >> 32) {
			group = i;
			continue;
		}
		if ((__u32)a[i] < best) {
			best = (__u32)a[i];
			first = (__u32)a[group];
		}
	}
	if (best == (size_t)-1)
		return;
	key_str(by_ue, by_ue ? ntohl(bk->e[best].ue) : bk->e[best].teid, k);
	snprintf(l, sizeof(l), "%u", bk->e[first].line);
	file_err(bk, bk->e[best].line, by_ue ? "duplicate UE %s (also on line %s)" :
		 "duplicate TEID %s (also on line %s)", k, l);
}

/*
 * What session load and unload do first: read FILE (without the lock: a slow pipe must not hold up
 * other writers), parse it, index it by TEID and by UE, check it for duplicates, then open the
 * maps under the PIN_DIR lock. Returns 0 or -errno; bk->nerr > 0 when FILE has errors (reported
 * as FILE:LINE; the maps are not opened then). bulk_close frees what it made, whatever it returned.
 */
static int bulk_open(struct bulk *bk, const char *path, struct pgwu_maps *m)
{
	int err;

	bulk_limit(bk);
	err = parse_stream(bk, path);
	if (err || bk->nerr)
		return err;
	bk->by_teid = key_index(bk, false);
	bk->by_ue = key_index(bk, true);
	if (!bk->by_teid || !bk->by_ue)
		return -ENOMEM;
	check_file_dups(bk, bk->by_teid, false);
	check_file_dups(bk, bk->by_ue, true);
	if (bk->nerr)
		return 0;
	return maps_open_locked(m);
}

/* FILE had errors: how many were not shown, and that nothing was done ("loaded", "deleted"). */
static int bulk_refused(const struct bulk *bk, const char *nothing_done)
{
	if (bk->nerr > MAX_FILE_ERRORS)
		fprintf(stderr, "%s: %d more errors not shown\n", bk->file, bk->nerr - MAX_FILE_ERRORS);
	fprintf(stderr, "%s: nothing %s\n", bk->file, nothing_done);
	return bk->fatal ? -EUSAGE : -EINVAL;
}

static void bulk_close(struct bulk *bk, struct pgwu_maps *m)
{
	free(bk->e);
	free(bk->by_teid);
	free(bk->by_ue);
	maps_close(m);
}

/* Keys already installed: reports the earliest file line whose key is in the table. */
static void check_installed(struct bulk *bk, const __u64 *a, __u32 *keys, size_t nkeys,
			    bool by_ue)
{
	size_t best = (size_t)-1, i = 0, j = 0;
	__u64 *inst;
	char k[16];

	if (!nkeys)
		return;
	inst = malloc(nkeys * sizeof(*inst));
	if (!inst) {
		bk->nerr++;
		fprintf(stderr, "Couldn't check %s: %s\n", bk->file, strerror(ENOMEM));
		return;
	}
	for (size_t x = 0; x < nkeys; x++)
		inst[x] = (__u64)ntohl(keys[x]) << 32;
	if (radix_sort_hi32(inst, nkeys)) {
		free(inst);
		bk->nerr++;
		return;
	}
	while (i < bk->n && j < nkeys) {
		__u32 x = a[i] >> 32, y = inst[j] >> 32;

		if (x < y) {
			i++;
		} else if (x > y) {
			j++;
		} else {
			if (best == (size_t)-1 || (__u32)a[i] < best)
				best = (__u32)a[i];
			i++;
		}
	}
	free(inst);
	if (best == (size_t)-1)
		return;
	key_str(by_ue, by_ue ? ntohl(bk->e[best].ue) : bk->e[best].teid, k);
	file_err(bk, bk->e[best].line, by_ue ? "UE %s already has a bearer (installed)%s" :
		 "TEID %s already has a bearer (installed)%s", k, "");
}

/*
 * Insert keys/values in chunks; *done = how many went in. The kernel refuses BPF_NOEXIST in
 * elem_flags of a batch update (only BPF_F_LOCK is allowed there), so this is BPF_ANY: the caller
 * has checked, under the PIN_DIR lock, that no key exists.
 */
static int insert_batch(int fd, const void *keys, const void *vals, size_t vsize, size_t n,
			size_t *done, size_t fail_at)
{
	LIBBPF_OPTS(bpf_map_batch_opts, opts, .elem_flags = BPF_ANY);
	int err = 0;

	*done = 0;
	while (*done < n) {
		__u32 count = n - *done > BATCH_CHUNK ? BATCH_CHUNK : n - *done;

		if (fail_at && *done + count > fail_at - 1)
			count = fail_at - 1 - *done;
		err = bpf_map_update_batch(fd, (const __u32 *)keys + *done,
					   (const char *)vals + *done * vsize, &count, &opts);
		*done += count;
		if (!err && fail_at && *done == fail_at - 1)
			err = -EIO;	/* injected: see PGWU_TEST_FAIL_DL_INSERT_AT */
		if (err)
			break;
	}
	return err;
}

struct insert_job {
	int fd;
	const void *keys, *vals;	/* vals NULL: delete keys */
	size_t vsize, n, done;
	size_t fail_at;			/* fault injection: fail on this (1-based) element */
	int err;
};

static void *insert_thread(void *arg)
{
	struct insert_job *j = arg;

	if (j->vals)
		j->err = insert_batch(j->fd, j->keys, j->vals, j->vsize, j->n, &j->done, j->fail_at);
	else
		j->err = delete_keys(j->fd, j->keys, j->n);
	return NULL;
}

/*
 * Fill both tables at once, one thread each: an insert into a large hash map is dominated by
 * cache and TLB misses, so two maps on two cores take the time of one.
 */
static int insert_both(struct insert_job *ul, struct insert_job *dl)
{
	pthread_t t;

	if (pthread_create(&t, NULL, insert_thread, dl)) {
		insert_thread(ul);
		if (!ul->err)
			insert_thread(dl);
		return ul->err ? ul->err : dl->err;
	}
	insert_thread(ul);
	pthread_join(t, NULL);
	return ul->err ? ul->err : dl->err;
}

static int flush_both(int ul_fd, const __u32 *ul_keys, size_t n_ul, int dl_fd,
		      const __u32 *dl_keys, size_t n_dl)
{
	struct insert_job ju = { .fd = ul_fd, .keys = ul_keys, .n = n_ul };
	struct insert_job jd = { .fd = dl_fd, .keys = dl_keys, .n = n_dl };

	return insert_both(&ju, &jd);
}

static void check_v6(struct bulk *bk, const struct pgwu_maps *m);
static int load_v6(const struct bulk *bk, const struct pgwu_maps *m, const __u32 *k_ul,
		   const struct pgwu_dl_bearer *v_dl);

int do_session_load(const void *cfg)
{
	struct { __u8 a[16]; __u32 idx; } pc[16];	/* IPv6 peers found (sgw6=) */
	int npc = 0;
	const struct session_opts *o = cfg;
	struct bulk bk = { .file = strcmp(o->file.s, "-") ? o->file.s : "<stdin>" };
	void *ul_keys = NULL, *ul_vals = NULL, *dl_keys = NULL, *dl_vals = NULL;
	__u32 *k_ul = NULL, *k_dl = NULL, cap_ul, cap_dl, cap;
	struct pgwu_ul_bearer *v_ul = NULL;
	struct pgwu_dl_bearer *v_dl = NULL;
	size_t n_ul = 0, n_dl = 0, done_ul = 0, done_dl = 0, installed;
	struct pgwu_maps m = { -1, -1, -1, -1, -1, -1, -1, -1, NULL, NULL, 0, -1, -1, { -1, -1, -1, -1 }, -1, NULL, -1 };
	struct insert_job ju, jd;
	int err;

	err = bulk_open(&bk, o->file.s, &m);
	if (err)
		goto out;
	if (bk.nerr)
		goto bad_file;

	err = map_max_entries(m.ul, &cap_ul);
	if (!err)
		err = map_max_entries(m.dl, &cap_dl);
	if (!err)
		err = map_dump(m.ul, sizeof(__u32), sizeof(struct pgwu_ul_bearer), &ul_keys, &ul_vals,
			       &n_ul);
	if (!err)
		err = map_dump(m.dl, sizeof(__u32), sizeof(struct pgwu_dl_bearer), &dl_keys, &dl_vals,
			       &n_dl);
	if (err)
		goto out;
	check_installed(&bk, bk.by_teid, ul_keys, n_ul, false);
	check_installed(&bk, bk.by_ue, dl_keys, n_dl, true);
	check_v6(&bk, &m);
	if (bk.nerr)
		goto bad_file;
	cap = cap_ul < cap_dl ? cap_ul : cap_dl;
	installed = n_ul > n_dl ? n_ul : n_dl;
	if (installed + bk.n > cap) {
		fprintf(stderr, "bearer table full (capacity %u): %zu installed + %zu in %s\n", cap,
			installed, bk.n, bk.file);
		err = -E2BIG;
		goto out;
	}

	err = -ENOMEM;
	k_ul = malloc((bk.n + 1) * sizeof(*k_ul));
	k_dl = malloc((bk.n + 1) * sizeof(*k_dl));
	v_ul = calloc(bk.n + 1, sizeof(*v_ul));
	v_dl = calloc(bk.n + 1, sizeof(*v_dl));
	if (!k_ul || !k_dl || !v_ul || !v_dl)
		goto out;
	for (size_t i = 0; i < bk.n; i++) {
		const struct file_bearer *e = &bk.e[i];

		k_ul[i] = htonl(e->teid);
		v_ul[i].ue_addr = e->ue;
		v_ul[i].flags = e->ul_flags;
		k_dl[i] = e->ue;
		v_dl[i].sgw_addr = e->sgw;
		v_dl[i].sgw_teid = htonl(e->sgw_teid);
		v_dl[i].local_teid = k_ul[i];
		v_dl[i].flags = e->flags;
		if (e->has_sgw6) {
			/* N3 over IPv6: the peer by its index in n3v6_peers (an entry the bearers
			 * of a failed load leave behind is only an address, reused next time); the
			 * last few found kept here, as a file names the same few peers again and
			 * again and a search reads the whole array */
			int c;

			err = 0;
			for (c = 0; c < npc && memcmp(pc[c].a, e->sgw6, 16); c++)
				;
			if (c < npc) {
				v_dl[i].sgw_addr = pc[c].idx;
			} else {
				err = n3v6_peer_find(&m, e->sgw6, true, &v_dl[i].sgw_addr);
				c = npc < 16 ? npc++ : (int)(i % 16);
				memcpy(pc[c].a, e->sgw6, 16);
				pc[c].idx = v_dl[i].sgw_addr;
			}
			if (err) {
				fprintf(stderr, "%s:%u: Couldn't add the IPv6 peer: %s\n", bk.file, e->line,
					err == -ENOSPC ? "all " PGWU_N3V6_PEERS_STR " entries in use" :
					strerror(-err));
				err = err == -ENOSPC ? -EUSAGE : err;
				goto out;
			}
			v_dl[i].flags |= PGWU_B_PEER6;
		}
	}
	ju = (struct insert_job){ .fd = m.ul, .keys = k_ul, .vals = v_ul, .vsize = sizeof(*v_ul),
				  .n = bk.n };
	jd = (struct insert_job){ .fd = m.dl, .keys = k_dl, .vals = v_dl, .vsize = sizeof(*v_dl),
				  .n = bk.n };
	/*
	 * Fault injection for the tests: make the downlink insert of the Nth bearer fail, so the
	 * undo of a failure midway (both tables, after the checks passed) is exercised for real.
	 */
	if (getenv("PGWU_TEST_FAIL_DL_INSERT_AT"))
		jd.fail_at = strtoul(getenv("PGWU_TEST_FAIL_DL_INSERT_AT"), NULL, 10);
	err = insert_both(&ju, &jd);
	done_ul = ju.done;
	done_dl = jd.done;
	if (!err) {
		err = load_v6(&bk, &m, k_ul, v_dl);
		if (err) {
			int uerr = delete_keys(m.dl, k_dl, done_dl);

			if (!uerr)
				uerr = delete_keys(m.ul, k_ul, done_ul);
			if (!uerr)
				fprintf(stderr, "Removed what this call had inserted; the tables are as "
					"they were\n");
			goto out;
		}
	}
	if (err) {
		size_t at = ju.err ? done_ul : done_dl;
		const struct file_bearer *e = &bk.e[at < bk.n ? at : bk.n - 1];
		int uerr;

		if (err == -E2BIG)
			fprintf(stderr, "bearer table full (capacity %u)\n", cap);
		fprintf(stderr, "Couldn't insert the bearer of %s:%u (TEID %u): %s\n", bk.file,
			e->line, e->teid, strerror(-err));
		uerr = delete_keys(m.dl, k_dl, done_dl);
		if (!uerr)
			uerr = delete_keys(m.ul, k_ul, done_ul);
		if (uerr)
			fprintf(stderr, "Couldn't remove the bearers this call inserted: %s\n",
				strerror(-uerr));
		else
			fprintf(stderr, "Removed what this call had inserted (%zu uplink, %zu downlink "
				"entries); the tables are as they were\n", done_ul, done_dl);
		goto out;
	}
	for (size_t i = 0; i < bk.n; i++) {
		slot_ul_set(&m, k_ul[i], &v_ul[i]);
		slot_dl_set(&m, k_dl[i], &v_dl[i]);
	}
	printf("loaded %zu bearers from %s\n", bk.n, bk.file);
	goto out;

bad_file:
	err = bulk_refused(&bk, "loaded");
out:
	if (err == -ENOMEM)
		fprintf(stderr, "Couldn't load %s: %s\n", bk.file, strerror(ENOMEM));
	free(ul_keys);
	free(ul_vals);
	free(dl_keys);
	free(dl_vals);
	free(k_ul);
	free(k_dl);
	free(v_ul);
	free(v_dl);
	bulk_close(&bk, &m);
	return err;
}

/* ue6= of FILE: no /64 twice in it, none installed already (reported as a bad FILE). */
static int cmp_u64_hi(const void *a, const void *b)
{
	const __u64 *x = a, *y = b;

	return x[0] < y[0] ? -1 : x[0] > y[0];
}

static void check_v6(struct bulk *bk, const struct pgwu_maps *m)
{
	__u64 (*a)[2] = malloc((bk->n + 1) * sizeof(*a));
	struct pgwu_dl_bearer d;
	char p6[INET6_ADDRSTRLEN + 4], ln[16];
	size_t n = 0;

	if (!a) {
		bk->nerr++;
		bk->fatal = true;
		return;
	}
	for (size_t i = 0; i < bk->n; i++) {
		if (!bk->e[i].has_ue6)
			continue;
		a[n][0] = bk->e[i].ue6;
		a[n++][1] = i;
		if (!bpf_map_lookup_elem(m->dl6, &bk->e[i].ue6, &d))
			file_err(bk, bk->e[i].line, "IPv6 prefix %s already has a bearer (installed)%s",
				 prefix64_str(bk->e[i].ue6, p6), "");
	}
	qsort(a, n, sizeof(*a), cmp_u64_hi);
	for (size_t i = 1; i < n; i++)
		if (a[i][0] == a[i - 1][0]) {
			snprintf(ln, sizeof(ln), "%u", bk->e[a[i - 1][1]].line);
			file_err(bk, bk->e[a[i][1]].line, "duplicate IPv6 prefix %s (also on line %s)",
				 prefix64_str(a[i][0], p6), ln);
		}
	free(a);
}

/* The /64s of the bearers just inserted; on failure they are removed again (the caller then
 * removes the IPv4 halves). Returns 0 or -errno (printed). */
static int load_v6(const struct bulk *bk, const struct pgwu_maps *m, const __u32 *k_ul,
		   const struct pgwu_dl_bearer *v_dl)
{
	size_t i;
	int err = 0;

	for (i = 0; i < bk->n; i++) {
		if (!bk->e[i].has_ue6)
			continue;
		err = bearer_add_v6(m, k_ul[i], bk->e[i].ue6, &v_dl[i]);
		if (err) {
			fprintf(stderr, "Couldn't insert the IPv6 prefix of %s:%u (TEID %u): %s\n",
				bk->file, bk->e[i].line, bk->e[i].teid, strerror(-err));
			break;
		}
	}
	if (err)
		while (i-- > 0)
			if (bk->e[i].has_ue6)
				bearer_remove_v6(m, k_ul[i]);
	return err;
}

/* ---- session unload FILE ---- */

/*
 * Delete the bearers of FILE (the format of `session load`), all or nothing: the whole file is
 * checked first (syntax, duplicates, and every line must name an installed bearer: its TEID's
 * uplink half with that UE, and that UE's downlink half with that TEID); then the downlink halves
 * are deleted, then the uplink halves, in batches. A bearer that is not listed is never touched.
 */
int do_session_unload(const void *cfg)
{
	const struct session_opts *o = cfg;
	struct bulk bk = { .file = strcmp(o->file.s, "-") ? o->file.s : "<stdin>" };
	__u32 *k_ul = NULL, *k_dl = NULL;
	struct pgwu_maps m = { -1, -1, -1, -1, -1, -1, -1, -1, NULL, NULL, 0, -1, -1, { -1, -1, -1, -1 }, -1, NULL, -1 };
	char k[16];
	int err;

	err = bulk_open(&bk, o->file.s, &m);
	if (err)
		goto out;
	if (bk.nerr)
		goto bad_file;

	err = -ENOMEM;
	k_ul = malloc((bk.n + 1) * sizeof(*k_ul));
	k_dl = malloc((bk.n + 1) * sizeof(*k_dl));
	if (!k_ul || !k_dl)
		goto out;
	err = 0;
	for (size_t i = 0; i < bk.n && bk.nerr <= MAX_FILE_ERRORS; i++) {
		const struct file_bearer *e = &bk.e[i];
		struct pgwu_ul_bearer ul;
		struct pgwu_dl_bearer dl;

		k_ul[i] = htonl(e->teid);
		k_dl[i] = e->ue;
		if (bpf_map_lookup_elem(m.ul, &k_ul[i], &ul) || ul.ue_addr != e->ue ||
		    bpf_map_lookup_elem(m.dl, &k_dl[i], &dl) || dl.local_teid != k_ul[i]) {
			key_str(false, e->teid, k);
			file_err(&bk, e->line, "no bearer with TEID %s and UE %s", k,
				 ip_str(e->ue, (char[16]){ 0 }));
		}
	}
	if (bk.nerr)
		goto bad_file;
	for (size_t i = 0; i < bk.n; i++) {
		slot_dl_clear(&m, k_dl[i]);
		slot_ul_clear(&m, k_ul[i]);
		bearer_remove_v6(&m, k_ul[i]);	/* its /64, whether the line names it or not */
	}
	err = flush_both(m.ul, k_ul, bk.n, m.dl, k_dl, bk.n);
	if (err) {
		fprintf(stderr, "Couldn't delete the bearers of %s: %s\n", bk.file, strerror(-err));
		goto out;
	}
	printf("deleted %zu bearers of %s\n", bk.n, bk.file);
	goto out;

bad_file:
	err = bulk_refused(&bk, "deleted");
out:
	if (err == -ENOMEM)
		fprintf(stderr, "Couldn't unload %s: %s\n", bk.file, strerror(ENOMEM));
	free(k_ul);
	free(k_dl);
	bulk_close(&bk, &m);
	return err;
}
