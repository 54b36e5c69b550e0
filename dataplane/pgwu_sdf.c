// SPDX-License-Identifier: GPL-2.0
/*
 * pgwu_sdf.c: SDF filters in user space (pgwu_sdf.h): the IPFilterRule parser, the filter list of
 * a bearer half, its writers.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <ctype.h>
#include <arpa/inet.h>
#include <sys/random.h>
#include <bpf/bpf.h>
#include "pgwu_sdf.h"

/* the next space-separated word of *s into w (at most n-1 characters); 0 at the end */
static int word(const char **s, char *w, size_t n)
{
	const char *p = *s;
	size_t k = 0;

	while (*p == ' ' || *p == '\t')
		p++;
	if (!*p)
		return 0;
	while (*p && *p != ' ' && *p != '\t') {
		if (k + 1 < n)
			w[k++] = *p;
		else
			return -1;
		p++;
	}
	w[k] = 0;
	*s = p;
	return 1;
}

static int parse_uint(const char *s, unsigned long max, unsigned long *v)
{
	char *end;

	if (!*s || !isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	*v = strtoul(s, &end, 0);
	return errno || *end || *v > max ? -1 : 0;
}

/* ADDR[/BITS], any or assigned */
static int parse_addr(const char *w, struct sdf_end *e, const char **why)
{
	char buf[INET6_ADDRSTRLEN + 8];
	const char *slash;
	unsigned long bits;
	int i, max;

	memset(e->addr, 0, sizeof(e->addr));
	memset(e->mask, 0, sizeof(e->mask));
	e->family = 0;
	if (!strcmp(w, "any") || !strcmp(w, "assigned"))
		return 0;
	if (*w == '!') {
		*why = "a negated address ('!') is not supported";
		return -1;
	}
	if (strlen(w) >= sizeof(buf)) {
		*why = "bad address";
		return -1;
	}
	strcpy(buf, w);
	slash = strchr(buf, '/');
	if (slash)
		*(char *)slash = 0;
	if (inet_pton(AF_INET, buf, e->addr) == 1) {
		e->family = 4;
		max = 32;
	} else if (inet_pton(AF_INET6, buf, e->addr) == 1) {
		e->family = 6;
		max = 128;
	} else {
		*why = "bad address (expected any, assigned, an IPv4 or IPv6 address[/bits])";
		return -1;
	}
	bits = max;
	if (slash && parse_uint(slash + 1, max, &bits)) {
		*why = "bad prefix length";
		return -1;
	}
	for (i = 0; i < max / 32; i++) {
		int b = (int)bits - i * 32;
		__u32 m = b >= 32 ? 0xffffffffU : b <= 0 ? 0 : ~((1U << (32 - b)) - 1);

		e->mask[i] = htonl(m);
		e->addr[i] &= e->mask[i];
	}
	return 0;
}

/* port, port-port, and comma lists of those */
static int parse_ports(const char *w, struct sdf_end *e, const char **why)
{
	char buf[128], *tok, *save = NULL;

	if (strlen(w) >= sizeof(buf)) {
		*why = "port list too long";
		return -1;
	}
	strcpy(buf, w);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *dash = strchr(tok, '-');
		unsigned long lo, hi;

		if (dash)
			*dash = 0;
		if (parse_uint(tok, 65535, &lo) || (dash && parse_uint(dash + 1, 65535, &hi))) {
			*why = "bad port (expected N, N-M or a comma list of those)";
			return -1;
		}
		if (!dash)
			hi = lo;
		if (lo > hi) {
			*why = "bad port range (low above high)";
			return -1;
		}
		if (e->n_ports == SDF_MAX_PORTS) {
			*why = "too many port ranges (at most 8 a side)";
			return -1;
		}
		e->lo[e->n_ports] = lo;
		e->hi[e->n_ports++] = hi;
	}
	if (!e->n_ports) {
		*why = "bad port list";
		return -1;
	}
	return 0;
}

static bool is_ports(const char *w)
{
	return isdigit((unsigned char)*w) && !strchr(w, '.') && !strchr(w, ':');
}

int sdf_parse_flow(const char *desc, struct sdf_flow *f, const char **why)
{
	const char *s = desc;
	char w[160];
	unsigned long v;
	int r;

	memset(f, 0, sizeof(*f));
	if (word(&s, w, sizeof(w)) != 1 || strcmp(w, "permit")) {
		*why = "expected 'permit' (TS 29.212 5.4.2: only permit rules)";
		return -1;
	}
	if (word(&s, w, sizeof(w)) != 1 || strcmp(w, "out")) {
		*why = "expected 'out' after permit (TS 29.212 5.4.2: the direction is out)";
		return -1;
	}
	if (word(&s, w, sizeof(w)) != 1) {
		*why = "no protocol";
		return -1;
	}
	if (strcmp(w, "ip")) {
		if (parse_uint(w, 255, &v)) {
			*why = "bad protocol (expected ip or 0..255)";
			return -1;
		}
		f->has_proto = true;
		f->proto = v;
	}
	if (word(&s, w, sizeof(w)) != 1 || strcmp(w, "from")) {
		*why = "expected 'from'";
		return -1;
	}
	if (word(&s, w, sizeof(w)) != 1 || parse_addr(w, &f->from, why)) {
		if (!*why)
			*why = "no source";
		return -1;
	}
	r = word(&s, w, sizeof(w));
	if (r == 1 && is_ports(w)) {
		if (parse_ports(w, &f->from, why))
			return -1;
		r = word(&s, w, sizeof(w));
	}
	if (r != 1 || strcmp(w, "to")) {
		*why = "expected 'to'";
		return -1;
	}
	if (word(&s, w, sizeof(w)) != 1 || parse_addr(w, &f->to, why)) {
		if (!*why)
			*why = "no destination";
		return -1;
	}
	r = word(&s, w, sizeof(w));
	if (r == 1 && is_ports(w)) {
		if (parse_ports(w, &f->to, why))
			return -1;
		r = word(&s, w, sizeof(w));
	}
	if (r != 0) {
		*why = "options after the destination are not supported (frag, ipoptions, tcpflags ...)";
		return -1;
	}
	if (f->from.family && f->to.family && f->from.family != f->to.family) {
		*why = "an IPv4 and an IPv6 address in one rule";
		return -1;
	}
	if ((f->from.n_ports || f->to.n_ports) && f->has_proto && f->proto != 6 && f->proto != 17 &&
	    f->proto != 132) {
		*why = "ports with a protocol that has none (ports: TCP 6, UDP 17, SCTP 132)";
		return -1;
	}
	return 0;
}

/* by precedence, lower first (TS 29.244 5.2.1), stable: PDRs of equal precedence keep their order */
static void sort_prec(struct sdf_pdr_spec *p, int n)
{
	static struct sdf_pdr_spec t;
	int i, j;

	for (i = 1; i < n; i++) {
		t = p[i];
		for (j = i; j > 0 && p[j - 1].precedence > t.precedence; j--)
			p[j] = p[j - 1];
		p[j] = t;
	}
}

static void set_end(const struct sdf_end *e, int k, __u32 *addr, __u32 *mask, __u16 *lo, __u16 *hi,
		    __u32 *fields, __u32 faddr, __u32 fport)
{
	if (e->family) {
		memcpy(addr, e->addr, 16);
		memcpy(mask, e->mask, 16);
		*fields |= faddr | (e->family == 4 ? PGWU_SDF_F_V4 : PGWU_SDF_F_V6);
	}
	if (e->n_ports) {
		*lo = e->lo[k];
		*hi = e->hi[k];
		*fields |= fport;
	}
}

int sdf_build_list(struct sdf_pdr_spec *p, int n, int dir, const __u32 *rules, struct pgwu_sdf_list *l,
		   const char **why)
{
	int i, j, a, b;

	memset(l, 0, sizeof(*l));
	for (i = 0; i < n; i++) {
		int ns = p[i].n ? p[i].n : 1;

		for (j = 0; j < ns; j++) {
			const struct sdf_spec *s = p[i].n ? &p[i].s[j] : NULL;
			const struct sdf_end *from = s && s->has_flow ? &s->flow.from : NULL;
			const struct sdf_end *to = s && s->has_flow ? &s->flow.to : NULL;
			int na = from && from->n_ports ? from->n_ports : 1;
			int nb = to && to->n_ports ? to->n_ports : 1;

			for (a = 0; a < na; a++)
				for (b = 0; b < nb; b++) {
					struct pgwu_sdf_filter *f;
					/* the rule is written remote -> UE: downlink as is, uplink
					 * with source and destination swapped (TS 29.212 5.4.2) */
					const struct sdf_end *src = dir ? from : to;
					const struct sdf_end *dst = dir ? to : from;
					int ks = dir ? a : b, kd = dir ? b : a;

					if (l->n == PGWU_SDF_MAX) {
						*why = "over 32 SDF filters in one direction of a bearer "
						       "(a port list counts one a range)";
						return -1;
					}
					f = &l->f[l->n++];
					f->rule = rules[i];
					if (!s)
						continue;
					if (s->has_flow) {
						if (s->flow.has_proto) {
							f->proto = s->flow.proto;
							f->fields |= PGWU_SDF_F_PROTO;
						}
						set_end(src, ks, f->src, f->smask, &f->sport_lo,
							&f->sport_hi, &f->fields, PGWU_SDF_F_SRC,
							PGWU_SDF_F_SPORT);
						set_end(dst, kd, f->dst, f->dmask, &f->dport_lo,
							&f->dport_hi, &f->fields, PGWU_SDF_F_DST,
							PGWU_SDF_F_DPORT);
					}
					if (s->has_tos) {
						f->tos = s->tos & s->tos_mask;
						f->tos_mask = s->tos_mask;
						f->fields |= PGWU_SDF_F_TOS;
					}
					if (s->has_fl) {
						f->flow_label = s->fl & 0xfffff;
						f->fields |= PGWU_SDF_F_FLOW | PGWU_SDF_F_V6;
					}
					if (s->has_spi) {
						f->spi = htonl(s->spi);
						f->fields |= PGWU_SDF_F_SPI;
					}
					if ((f->fields & PGWU_SDF_F_V4) && (f->fields & PGWU_SDF_F_V6)) {
						*why = "a flow label (IPv6) with an IPv4 address";
						return -1;
					}
				}
		}
	}
	return 0;
}

static __u32 rule_new(void)
{
	__u32 r = 0;

	while (!r)
		if (getrandom(&r, sizeof(r), 0) != sizeof(r))
			r = (__u32)random();
	return r;
}

static void rules_delete(const struct sdf_maps *m, const struct pgwu_sdf_list *l)
{
	__u32 i;

	for (i = 0; i < l->n && i < PGWU_SDF_MAX; i++) {
		struct pgwu_cp_key ck = { .id = l->f[i].rule, .kind = PGWU_CP_UP2CP };

		bpf_map_delete_elem(m->pdrs, &l->f[i].rule);
		bpf_map_delete_elem(m->qos, &l->f[i].rule);
		if (m->cp >= 0)
			bpf_map_delete_elem(m->cp, &ck);
	}
}

/* the cp_relay entry of an UP2CP PDR (before its sdf_pdrs entry: xdp_cp finds it there) */
static int cp_put(const struct sdf_maps *m, const struct sdf_pdr_spec *p, __u32 rule)
{
	struct pgwu_cp_key k = { .id = rule, .kind = PGWU_CP_UP2CP };
	struct pgwu_cp_relay v = { .addr = p->cp_addr, .teid = p->cp_teid };

	if (!p->to_cp)
		return 0;
	if (m->cp < 0)
		return -EOPNOTSUPP;
	return bpf_map_update_elem(m->cp, &k, &v, BPF_ANY) ? -errno : 0;
}

int cp2up_add(const struct sdf_maps *m, int ul, __u32 teid, __u64 prefix, __u32 owner)
{
	struct pgwu_cp_key k = { .id = teid, .kind = PGWU_CP_CP2UP };
	struct pgwu_cp_relay v = { .prefix = prefix };
	struct pgwu_ul_bearer b = { .ue_addr = 0xffffffff, .flags = PGWU_B_CP2UP | owner };
	int err;

	if (m->cp < 0)
		return -EOPNOTSUPP;
	if (bpf_map_update_elem(m->cp, &k, &v, BPF_NOEXIST))
		return -errno;
	if (bpf_map_update_elem(ul, &teid, &b, BPF_NOEXIST)) {
		err = -errno;
		bpf_map_delete_elem(m->cp, &k);
		return err;
	}
	return 0;
}

void cp2up_del(const struct sdf_maps *m, int ul, __u32 teid)
{
	struct pgwu_cp_key k = { .id = teid, .kind = PGWU_CP_CP2UP };
	struct pgwu_ul_bearer b;

	if (m->cp < 0)
		return;
	if (!bpf_map_lookup_elem(ul, &teid, &b) && (b.flags & PGWU_B_CP2UP))
		bpf_map_delete_elem(ul, &teid);
	bpf_map_delete_elem(m->cp, &k);
}

int cp2up_remove(const struct sdf_maps *m, int ul, __u64 prefix)
{
	struct pgwu_cp_key k, next, gone[16];
	struct pgwu_cp_relay v;
	struct pgwu_ul_bearer b;
	int n = 0, i;

	if (m->cp < 0)
		return 0;
	/* collected first: deleting while walking the keys can restart the walk */
	if (bpf_map_get_next_key(m->cp, NULL, &next))
		return 0;
	do {
		k = next;
		if (k.kind == PGWU_CP_CP2UP && !bpf_map_lookup_elem(m->cp, &k, &v) &&
		    v.prefix == prefix && n < 16)
			gone[n++] = k;
	} while (!bpf_map_get_next_key(m->cp, &k, &next));
	for (i = 0; i < n; i++) {
		if (!bpf_map_lookup_elem(ul, &gone[i].id, &b) && (b.flags & PGWU_B_CP2UP))
			bpf_map_delete_elem(ul, &gone[i].id);
		bpf_map_delete_elem(m->cp, &gone[i]);
	}
	return n;
}

int sdf_rule_add(const struct sdf_maps *m, const struct sdf_pdr_spec *p, __u32 *rule)
{
	struct pgwu_sdf_pdr d = {
		.flags = (p->drop ? PGWU_SDF_P_DROP : 0) | (p->has_qos ? PGWU_SDF_P_QOS : 0) |
			 (p->to_cp ? PGWU_SDF_P_CP : 0) | (p->has_urr ? PGWU_SDF_P_URR : 0),
		.precedence = p->precedence, .pdr_id = p->pdr_id, .urr = p->urr_id,
	};
	int err = -ENOSPC;

	for (int k = 0; k < 64; k++) {
		__u32 r = rule_new();

		if (p->has_qos && bpf_map_update_elem(m->qos, &r, &p->q, BPF_NOEXIST)) {
			err = -errno;
			continue;
		}
		err = cp_put(m, p, r);
		if (!err && !bpf_map_update_elem(m->pdrs, &r, &d, BPF_NOEXIST)) {
			*rule = r;
			return 0;
		}
		if (!err)
			err = -errno;
		sdf_rule_del(m, r);
	}
	return err;
}

void sdf_rule_del(const struct sdf_maps *m, __u32 rule)
{
	struct pgwu_cp_key ck = { .id = rule, .kind = PGWU_CP_UP2CP };

	bpf_map_delete_elem(m->pdrs, &rule);
	bpf_map_delete_elem(m->qos, &rule);
	if (m->cp >= 0)
		bpf_map_delete_elem(m->cp, &ck);
}

int sdf_install(const struct sdf_maps *m, __u32 teid, int dir, struct sdf_pdr_spec *p, int n,
		__u32 *rules_out, const char **why)
{
	struct pgwu_sdf_key key = { .teid = teid, .dir = dir };
	struct pgwu_sdf_list *l = calloc(2, sizeof(*l)), *old;
	__u32 rules[SDF_MAX_PDRS] = { 0 };
	int i, k, err = 0, has_old;

	if (!l)
		return -ENOMEM;
	old = l + 1;
	if (n > SDF_MAX_PDRS) {
		*why = "over 32 PDRs in one direction of a bearer";
		err = -EINVAL;
		goto out;
	}
	sort_prec(p, n);
	for (i = 0; i < n; i++) {
		struct pgwu_sdf_pdr d = {
			.flags = (p[i].drop ? PGWU_SDF_P_DROP : 0) | (p[i].has_qos ? PGWU_SDF_P_QOS : 0) |
				 (p[i].to_cp ? PGWU_SDF_P_CP : 0) | (p[i].has_urr ? PGWU_SDF_P_URR : 0),
			.precedence = p[i].precedence, .pdr_id = p[i].pdr_id, .urr = p[i].urr_id,
		};

		for (k = 0; k < 64; k++) {
			rules[i] = rule_new();
			if (p[i].has_qos &&
			    bpf_map_update_elem(m->qos, &rules[i], &p[i].q, BPF_NOEXIST))
				continue;
			if (cp_put(m, &p[i], rules[i])) {
				if (p[i].has_qos)
					bpf_map_delete_elem(m->qos, &rules[i]);
				continue;
			}
			if (!bpf_map_update_elem(m->pdrs, &rules[i], &d, BPF_NOEXIST))
				break;
			if (p[i].has_qos)
				bpf_map_delete_elem(m->qos, &rules[i]);
			if (p[i].to_cp) {
				struct pgwu_cp_key ck = { .id = rules[i], .kind = PGWU_CP_UP2CP };

				bpf_map_delete_elem(m->cp, &ck);
			}
		}
		if (k == 64) {
			err = errno ? -errno : -ENOSPC;
			for (k = 0; k < i; k++) {
				struct pgwu_cp_key ck = { .id = rules[k], .kind = PGWU_CP_UP2CP };

				bpf_map_delete_elem(m->pdrs, &rules[k]);
				bpf_map_delete_elem(m->qos, &rules[k]);
				if (p[k].to_cp)
					bpf_map_delete_elem(m->cp, &ck);
			}
			goto out;
		}
	}
	if (sdf_build_list(p, n, dir, rules, l, why)) {
		err = -EINVAL;
		goto undo;
	}
	has_old = !bpf_map_lookup_elem(m->lists, &key, old);
	if (bpf_map_update_elem(m->lists, &key, l, BPF_ANY)) {
		err = -errno;
		goto undo;
	}
	if (has_old)
		rules_delete(m, old);
	if (rules_out)
		memcpy(rules_out, rules, n * sizeof(*rules));
	goto out;
undo:
	for (k = 0; k < n; k++) {
		struct pgwu_cp_key ck = { .id = rules[k], .kind = PGWU_CP_UP2CP };

		bpf_map_delete_elem(m->pdrs, &rules[k]);
		bpf_map_delete_elem(m->qos, &rules[k]);
		if (p[k].to_cp)
			bpf_map_delete_elem(m->cp, &ck);
	}
out:
	free(l);
	return err;
}

int sdf_remove(const struct sdf_maps *m, __u32 teid, int dir)
{
	struct pgwu_sdf_key key = { .teid = teid, .dir = dir };
	struct pgwu_sdf_list *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	if (!bpf_map_lookup_elem(m->lists, &key, l)) {
		bpf_map_delete_elem(m->lists, &key);
		rules_delete(m, l);
	}
	free(l);
	return 0;
}

static void flush_map(int fd, size_t ksize)
{
	char k[16], next[16];

	if (fd < 0)
		return;
	while (!bpf_map_get_next_key(fd, NULL, next)) {
		memcpy(k, next, ksize);
		if (bpf_map_delete_elem(fd, k))
			break;
	}
}

void sdf_flush(const struct sdf_maps *m)
{
	flush_map(m->lists, sizeof(struct pgwu_sdf_key));
	flush_map(m->pdrs, sizeof(__u32));
	flush_map(m->qos, sizeof(__u32));
	flush_map(m->cp, sizeof(struct pgwu_cp_key));
}

/* one PDR spec of --filter (see pgwu_sdf.h) */
static int parse_spec(char *s, struct sdf_pdr_spec p[2][SDF_MAX_PDRS], int n[2], const char **why)
{
	const char *c = s;
	struct sdf_pdr_spec *x;
	struct sdf_spec *f;
	unsigned long v, m;
	char w[64], *slash;
	int dir, r;

	if (word(&c, w, sizeof(w)) != 1)
		return 0;	/* an empty spec (a trailing ';') */
	if (!strcmp(w, "ul"))
		dir = PGWU_PFCP_UPLINK;
	else if (!strcmp(w, "dl"))
		dir = PGWU_PFCP_DOWNLINK;
	else {
		*why = "expected ul or dl first";
		return -1;
	}
	if (n[dir] == SDF_MAX_PDRS) {
		*why = "over 32 PDRs in one direction";
		return -1;
	}
	x = &p[dir][n[dir]];
	memset(x, 0, sizeof(*x));
	if (word(&c, w, sizeof(w)) != 1 || parse_uint(w, 0xffffffffUL, &v)) {
		*why = "expected the precedence (an integer) after the direction";
		return -1;
	}
	x->precedence = v;
	f = &x->s[0];
	while ((r = word(&c, w, sizeof(w))) == 1) {
		char arg[64];

		if (!strcmp(w, "flow")) {
			if (sdf_parse_flow(c, &f->flow, why))
				return -1;
			f->has_flow = true;
			break;
		}
		if (!strcmp(w, "drop")) {
			x->drop = true;
			continue;
		}
		if (!strcmp(w, "fwd"))
			continue;
		if (!strcmp(w, "cp")) {
			char ca[64], ct[64];

			if (dir != PGWU_PFCP_UPLINK) {
				*why = "cp: an uplink PDR's (to the CP function)";
				return -1;
			}
			if (word(&c, ca, sizeof(ca)) != 1 || inet_pton(AF_INET, ca, &x->cp_addr) != 1 ||
			    word(&c, ct, sizeof(ct)) != 1 || parse_uint(ct, 0xffffffffUL, &v) || !v) {
				*why = "cp: expected the CP function's IPv4 address and TEID (1..4294967295)";
				return -1;
			}
			x->cp_teid = htonl(v);
			x->to_cp = true;
			continue;
		}
		if (word(&c, arg, sizeof(arg)) != 1) {
			*why = "a keyword without its value (gate, mbr, tos, flowlabel, spi)";
			return -1;
		}
		if (!strcmp(w, "gate")) {
			if (strcmp(arg, "closed") && strcmp(arg, "open")) {
				*why = "gate: expected open or closed";
				return -1;
			}
			x->has_qos = true;
			if (!strcmp(arg, "closed"))
				x->q.flags |= dir ? PGWU_QOS_DL_CLOSED : PGWU_QOS_UL_CLOSED;
		} else if (!strcmp(w, "mbr")) {
			if (parse_uint(arg, 100000000UL, &v) || !v) {
				*why = "mbr: expected kbit/s, 1..100000000";
				return -1;
			}
			/* as the agent's buckets (pfcp_qos.c) with a 100 ms burst */
			pgwu_police_init(&x->q.pol[dir], v, 100);
			x->has_qos = true;
		} else if (!strcmp(w, "tos")) {
			slash = strchr(arg, '/');
			if (slash)
				*slash = 0;
			m = 0xff;
			if (parse_uint(arg, 255, &v) || (slash && parse_uint(slash + 1, 255, &m))) {
				*why = "tos: expected VALUE[/MASK], 0..255 each";
				return -1;
			}
			f->has_tos = true;
			f->tos = v;
			f->tos_mask = m;
		} else if (!strcmp(w, "flowlabel")) {
			if (parse_uint(arg, 0xfffff, &v)) {
				*why = "flowlabel: expected 0..1048575";
				return -1;
			}
			f->has_fl = true;
			f->fl = v;
		} else if (!strcmp(w, "spi")) {
			if (parse_uint(arg, 0xffffffffUL, &v)) {
				*why = "spi: expected 0..4294967295";
				return -1;
			}
			f->has_spi = true;
			f->spi = v;
		} else {
			*why = "unknown keyword (expected drop, fwd, cp, gate, mbr, tos, flowlabel, spi, flow)";
			return -1;
		}
	}
	if (r < 0) {
		*why = "word too long";
		return -1;
	}
	x->n = f->has_flow || f->has_tos || f->has_fl || f->has_spi ? 1 : 0;
	n[dir]++;
	return 0;
}

int sdf_parse_option(const char *s, struct sdf_pdr_spec p[2][SDF_MAX_PDRS], int n[2],
		     const char **why)
{
	static char msg[512];
	char *copy = strdup(s), *spec, *save = NULL;
	int err = 0;

	n[0] = n[1] = 0;
	if (!copy) {
		*why = "out of memory";
		return -1;
	}
	for (spec = strtok_r(copy, ";", &save); spec; spec = strtok_r(NULL, ";", &save)) {
		const char *w = NULL;
		char shown[200];

		snprintf(shown, sizeof(shown), "%s", spec);
		if (parse_spec(spec, p, n, &w)) {
			snprintf(msg, sizeof(msg), "'%s': %s", shown, w);
			*why = msg;
			err = -1;
			break;
		}
	}
	free(copy);
	return err;
}
