// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pgwu_pfcp_view.c: what `pgwu session get/list` show of a bearer `pgwu pfcp` installed: its
 * session (SEIDs, the CP that owns it), each PDR's links, the QERs and URRs as the CP gave them.
 * Read from the maps the agent publishes (pfcp_sessions, pfcp_rules, pfcp_peers: pgwu.h,
 * pgwu_cli.h), joined to a bearer by its TEID and its halves' owner tag.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <bpf/bpf.h>
#include "pgwu_cli.h"

/* a pinned map's fd, or -1 when it is not there (no agent has run on this PIN_DIR) */
static int pinned_quiet(const char *name)
{
	char path[PATH_MAX];

	if (pin_path(path, sizeof(path), name))
		return -1;
	return bpf_obj_get(path);
}

static int key_cmp(const struct pgwu_pfcp_rule_key *a, const struct pgwu_pfcp_rule_key *b)
{
	if (a->sess != b->sess)
		return a->sess < b->sess ? -1 : 1;
	if (a->kind != b->kind)
		return a->kind < b->kind ? -1 : 1;
	return a->id < b->id ? -1 : a->id > b->id;
}

struct rule_pair {
	struct pgwu_pfcp_rule_key k;
	struct pgwu_pfcp_rule r;
};

static int pair_cmp(const void *x, const void *y)
{
	return key_cmp(&((const struct rule_pair *)x)->k, &((const struct rule_pair *)y)->k);
}

/* Sort the rules by key (keys and values together): a lookup is then a binary search. */
static int rules_sort(struct pfcp_view *v)
{
	struct rule_pair *p = malloc((v->nr + 1) * sizeof(*p));

	if (!p)
		return -ENOMEM;
	for (size_t i = 0; i < v->nr; i++) {
		p[i].k = v->rkeys[i];
		p[i].r = v->rules[i];
	}
	qsort(p, v->nr, sizeof(*p), pair_cmp);
	for (size_t i = 0; i < v->nr; i++) {
		v->rkeys[i] = p[i].k;
		v->rules[i] = p[i].r;
	}
	free(p);
	return 0;
}

static int by_teid_cmp(const void *x, const void *y)
{
	__u64 a = *(const __u64 *)x, b = *(const __u64 *)y;

	return a < b ? -1 : a > b;
}

int pfcp_view_load(struct pfcp_view *v)
{
	void *keys = NULL;
	int fd, err = 0;

	memset(v, 0, sizeof(*v));
	fd = pinned_quiet(PFCP_SESSIONS_MAP);
	if (fd < 0)
		return 0;
	err = map_dump(fd, sizeof(__u32), sizeof(struct pgwu_pfcp_sess), &keys, (void **)&v->sess,
		       &v->n);
	close(fd);
	free(keys);
	if (err)
		goto fail;
	v->by_teid = malloc((v->n + 1) * sizeof(*v->by_teid));
	if (!v->by_teid) {
		err = -ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < v->n; i++)
		v->by_teid[i] = (__u64)ntohl(v->sess[i].teid) << 32 | i;
	qsort(v->by_teid, v->n, sizeof(*v->by_teid), by_teid_cmp);
	fd = pinned_quiet(PFCP_RULES_MAP);
	if (fd >= 0) {
		err = map_dump(fd, sizeof(struct pgwu_pfcp_rule_key), sizeof(struct pgwu_pfcp_rule),
			       (void **)&v->rkeys, (void **)&v->rules, &v->nr);
		close(fd);
		if (!err)
			err = rules_sort(v);
		if (err)
			goto fail;
	}
	fd = pinned_quiet(PFCP_PEERS_MAP);
	if (fd >= 0) {
		const size_t len = PFCP_MAX_PEERS * sizeof(struct pfcp_peer_rec);
		void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);

		close(fd);
		v->peers = malloc(len);
		if (p != MAP_FAILED && v->peers)
			memcpy(v->peers, p, len);
		if (p != MAP_FAILED)
			munmap(p, len);
	}
	return 0;
fail:
	fprintf(stderr, "Couldn't read %s: %s\n", PFCP_SESSIONS_MAP, strerror(-err));
	pfcp_view_free(v);
	return err;
}

void pfcp_view_free(struct pfcp_view *v)
{
	free(v->sess);
	free(v->by_teid);
	free(v->rkeys);
	free(v->rules);
	free(v->peers);
	memset(v, 0, sizeof(*v));
}

/* The session a bearer belongs to: same TEID, and the owner tag its halves carry */
static const struct pgwu_pfcp_sess *view_sess(const struct pfcp_view *v, const struct bearer *b)
{
	__u32 owner = pgwu_owner_of(b->has_ul ? b->ul_flags : b->flags);
	size_t lo = 0, hi = v->n;

	if (!owner)
		return NULL;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if ((__u32)(v->by_teid[mid] >> 32) < b->teid)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < v->n && (__u32)(v->by_teid[lo] >> 32) == b->teid; lo++) {
		const struct pgwu_pfcp_sess *s = &v->sess[(__u32)v->by_teid[lo]];

		if (s->owner == owner)
			return s;
	}
	return NULL;
}

static const struct pgwu_pfcp_rule *view_rule(const struct pfcp_view *v,
					      const struct pgwu_pfcp_sess *s, __u32 kind, __u32 id)
{
	const struct pgwu_pfcp_rule_key want = { (__u32)s->up_seid - 1, kind, id };
	size_t lo = 0, hi = v->nr;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = key_cmp(&v->rkeys[mid], &want);

		if (!c)
			return &v->rules[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static const char *const trigger_names[24] = {
	"perio", "volth", "timth", "quhti", "start", "stopt", "droth", "liusa",
	"volqu", "timqu", "envcl", "macar", "eveth", "evequ", "ipmjl", "quvti",
	"reemr", "upint", "bit19", "bit20", "bit21", "bit22", "bit23", "bit24",
};

static void json_ids(FILE *f, const __u32 *ids, int n)
{
	fputc('[', f);
	for (int i = 0; i < n; i++)
		fprintf(f, "%s%u", i ? ", " : "", ids[i]);
	fputc(']', f);
}

static void json_volume(FILE *f, const char *key, bool has, __u8 flags, const __u64 v[3])
{
	static const char *const dir[3] = { "total", "uplink", "downlink" };
	bool first = true;

	fprintf(f, ", \"%s\": ", key);
	if (!has) {
		fprintf(f, "null");
		return;
	}
	fputc('{', f);
	for (int i = 0; i < 3; i++) {
		if (!(flags & (1U << i)))
			continue;
		fprintf(f, "%s\"%s\": %llu", first ? "" : ", ", dir[i], (unsigned long long)v[i]);
		first = false;
	}
	fputc('}', f);
}

static void json_secs(FILE *f, const char *key, bool has, __u32 v)
{
	if (has)
		fprintf(f, ", \"%s\": %u", key, v);
	else
		fprintf(f, ", \"%s\": null", key);
}

static void json_qer(FILE *f, const struct pgwu_qer *q)
{
	fprintf(f, "{\"id\": %u, \"gate\": {\"uplink\": \"%s\", \"downlink\": \"%s\"}", q->id,
		q->gate & 0x0c ? "closed" : "open", q->gate & 0x03 ? "closed" : "open");
	if (q->flags & PGWU_QER_MBR)
		fprintf(f, ", \"mbr_kbps\": {\"uplink\": %llu, \"downlink\": %llu}",
			(unsigned long long)q->mbr_ul, (unsigned long long)q->mbr_dl);
	else
		fprintf(f, ", \"mbr_kbps\": null");
	if (q->flags & PGWU_QER_GBR)
		fprintf(f, ", \"gbr_kbps\": {\"uplink\": %llu, \"downlink\": %llu}",
			(unsigned long long)q->gbr_ul, (unsigned long long)q->gbr_dl);
	else
		fprintf(f, ", \"gbr_kbps\": null");
	if (q->flags & PGWU_QER_QFI)
		fprintf(f, ", \"qfi\": %u}", q->qfi);
	else
		fprintf(f, ", \"qfi\": null}");
}

static void json_urr(FILE *f, const struct pgwu_urr *u)
{
	bool first = true;

	fprintf(f, "{\"id\": %u, \"method\": [", u->id);
	if (u->method & 0x01) {
		fprintf(f, "\"duration\"");
		first = false;
	}
	if (u->method & 0x02) {
		fprintf(f, "%s\"volume\"", first ? "" : ", ");
		first = false;
	}
	if (u->method & 0x04)
		fprintf(f, "%s\"event\"", first ? "" : ", ");
	fprintf(f, "], \"triggers\": [");
	first = true;
	for (int i = 0; i < 24; i++) {
		if (!(u->triggers & (1U << i)))
			continue;
		fprintf(f, "%s\"%s\"", first ? "" : ", ", trigger_names[i]);
		first = false;
	}
	fputc(']', f);
	json_secs(f, "measurement_period", u->flags & PGWU_URR_PERIOD, u->period);
	json_volume(f, "volume_threshold", u->flags & PGWU_URR_VOL_THRESH, u->vol_thresh_flags,
		    u->vol_thresh);
	json_volume(f, "volume_quota", u->flags & PGWU_URR_VOL_QUOTA, u->vol_quota_flags,
		    u->vol_quota);
	json_secs(f, "time_threshold", u->flags & PGWU_URR_TIME_THRESH, u->time_threshold);
	json_secs(f, "time_quota", u->flags & PGWU_URR_TIME_QUOTA, u->time_quota);
	json_secs(f, "quota_holding_time", u->flags & PGWU_URR_QHT, u->quota_holding_time);
	fputc('}', f);
}

void pfcp_view_json(FILE *f, const struct pfcp_view *v, const struct bearer *b)
{
	const struct pgwu_pfcp_sess *s = v ? view_sess(v, b) : NULL;
	const struct pfcp_peer_rec *peer;
	char a[16], c[16];

	if (!s) {
		fprintf(f, "null");
		return;
	}
	peer = v->peers && s->assoc < PFCP_MAX_PEERS ? &v->peers[s->assoc] : NULL;
	fprintf(f, "{\"up_seid\": %llu, \"cp_seid\": %llu, \"cp_f_seid_address\": \"%s\", "
		"\"cp\": \"%s:%u\", \"node_id\": ", (unsigned long long)s->up_seid,
		(unsigned long long)s->cp_seid, ip_str(s->cp_addr, a), ip_str(s->peer_addr, c),
		ntohs(s->peer_port));
	if (peer && peer->state != PFCP_PEER_FREE)
		json_str(f, peer->node_id);
	else
		fprintf(f, "null");
	fprintf(f, ", \"downlink_far\": {\"apply_action\": %u, \"forwarding\": %s}, \"pdrs\": [",
		s->dl_apply, s->flags & PGWU_PFCP_S_DL_ON ? "true" : "false");
	for (int d = 0; d < 2; d++) {
		const struct pgwu_pfcp_pdr *p = &s->pdr[d];

		fprintf(f, "%s{\"id\": %u, \"direction\": \"%s\", \"far\": %u, \"qers\": ",
			d ? ", " : "", p->id, d == PGWU_PFCP_UPLINK ? "uplink" : "downlink",
			p->far_id);
		json_ids(f, p->qer, p->n_qer);
		fprintf(f, ", \"urrs\": ");
		json_ids(f, p->urr, p->n_urr);
		fputc('}', f);
	}
	fprintf(f, "], \"qers\": [");
	for (int i = 0; i < s->n_qer && i < PGWU_PFCP_MAX_RULES; i++) {
		const struct pgwu_pfcp_rule *r = view_rule(v, s, PGWU_PFCP_RULE_QER, s->qer_ids[i]);

		fprintf(f, "%s", i ? ", " : "");
		if (r)
			json_qer(f, &r->qer);
		else
			fprintf(f, "{\"id\": %u}", s->qer_ids[i]);
	}
	fprintf(f, "], \"urrs\": [");
	for (int i = 0; i < s->n_urr && i < PGWU_PFCP_MAX_RULES; i++) {
		const struct pgwu_pfcp_rule *r = view_rule(v, s, PGWU_PFCP_RULE_URR, s->urr_ids[i]);

		fprintf(f, "%s", i ? ", " : "");
		if (r)
			json_urr(f, &r->urr);
		else
			fprintf(f, "{\"id\": %u}", s->urr_ids[i]);
	}
	fprintf(f, "]}");
}

static void print_ids(FILE *f, const char *what, const __u32 *ids, int n)
{
	if (!n)
		return;
	fprintf(f, " %s", what);
	for (int i = 0; i < n; i++)
		fprintf(f, "%c%u", i ? ',' : ' ', ids[i]);
}

void pfcp_view_print(FILE *f, const struct pfcp_view *v, const struct bearer *b)
{
	const struct pgwu_pfcp_sess *s = v ? view_sess(v, b) : NULL;
	const struct pfcp_peer_rec *peer;
	char a[16];

	if (!s) {
		if (pgwu_owner_of(b->has_ul ? b->ul_flags : b->flags))
			fprintf(f, "installed by pgwu pfcp (its session is gone: agent killed?)\n");
		return;
	}
	peer = v->peers && s->assoc < PFCP_MAX_PEERS ? &v->peers[s->assoc] : NULL;
	fprintf(f, "PFCP session: UP SEID 0x%llx, CP SEID 0x%llx, CP %s:%u", (unsigned long long)s->up_seid,
		(unsigned long long)s->cp_seid, ip_str(s->peer_addr, a), ntohs(s->peer_port));
	if (peer && peer->state != PFCP_PEER_FREE)
		fprintf(f, " (Node ID %s)", peer->node_id);
	fprintf(f, "\n");
	for (int d = 0; d < 2; d++) {
		const struct pgwu_pfcp_pdr *p = &s->pdr[d];

		fprintf(f, "  PDR %u %-8s FAR %u", p->id, d ? "downlink" : "uplink", p->far_id);
		if (d == PGWU_PFCP_DOWNLINK && !(s->flags & PGWU_PFCP_S_DL_ON))
			fprintf(f, " (not forwarding, apply action 0x%02x)", s->dl_apply);
		print_ids(f, "QER", p->qer, p->n_qer);
		print_ids(f, "URR", p->urr, p->n_urr);
		fprintf(f, "\n");
	}
	for (int i = 0; i < s->n_qer && i < PGWU_PFCP_MAX_RULES; i++) {
		const struct pgwu_pfcp_rule *r = view_rule(v, s, PGWU_PFCP_RULE_QER, s->qer_ids[i]);

		if (!r)
			continue;
		fprintf(f, "  QER %u gate %s/%s", r->qer.id, r->qer.gate & 0x0c ? "closed" : "open",
			r->qer.gate & 0x03 ? "closed" : "open");
		if (r->qer.flags & PGWU_QER_MBR)
			fprintf(f, " MBR %llu/%llu kbit/s", (unsigned long long)r->qer.mbr_ul,
				(unsigned long long)r->qer.mbr_dl);
		if (r->qer.flags & PGWU_QER_GBR)
			fprintf(f, " GBR %llu/%llu kbit/s", (unsigned long long)r->qer.gbr_ul,
				(unsigned long long)r->qer.gbr_dl);
		if (r->qer.flags & PGWU_QER_QFI)
			fprintf(f, " QFI %u", r->qer.qfi);
		/* the gate and the MBR are in the data path (qos map); a GBR is a reservation a
		 * single-queue XDP path has nothing to do with */
		fprintf(f, r->qer.flags & PGWU_QER_GBR ? " (gate, MBR enforced; GBR not)\n" :
			" (gate, MBR enforced)\n");
	}
	for (int i = 0; i < s->n_urr && i < PGWU_PFCP_MAX_RULES; i++) {
		const struct pgwu_pfcp_rule *r = view_rule(v, s, PGWU_PFCP_RULE_URR, s->urr_ids[i]);

		if (!r)
			continue;
		fprintf(f, "  URR %u method 0x%02x triggers 0x%06x", r->urr.id, r->urr.method,
			r->urr.triggers);
		if (r->urr.flags & PGWU_URR_PERIOD)
			fprintf(f, " period %u s", r->urr.period);
		if (r->urr.flags & PGWU_URR_VOL_THRESH)
			fprintf(f, " volume threshold %llu", (unsigned long long)r->urr.vol_thresh[0]);
		if (r->urr.flags & PGWU_URR_VOL_QUOTA)
			fprintf(f, " volume quota %llu", (unsigned long long)r->urr.vol_quota[0]);
		fprintf(f, " (reported on its triggers, Query URR, deletion)\n");
	}
}
