// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pgwu_maps.c: the maps layer of pgwu's commands: the objects pinned in PIN_DIR, the writers' lock,
 * the slot index, table dumps, the bearer table joined from its two halves, and the snapshot that
 * stats and metrics report.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "pgwu_maps.h"
#include "pgwu_sock.h"

int pin_path(char *buf, size_t len, const char *name)
{
	int n = snprintf(buf, len, "%s/%s", pin_dir, name);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static bool on_bpffs(const char *path)
{
	struct statfs st;

	return !statfs(path, &st) && st.f_type == BPF_FS_MAGIC;
}

static void not_loaded(void)
{
	fprintf(stderr, "pgwu is not loaded in %s (run pgwu load)\n", pin_dir);
	/* `ip netns exec` gives its command a fresh /sys, without the bpffs mounted on it */
	if (!strncmp(pin_dir, "/sys/fs/bpf/", 12) && !on_bpffs("/sys/fs/bpf"))
		fprintf(stderr, "Note: /sys/fs/bpf is not a bpf filesystem here ('ip netns exec' "
			"remounts /sys): use 'pgwu --netns NS' or 'nsenter --net=/run/netns/NS pgwu'\n");
}

int pinned_open(const char *name)
{
	char path[PATH_MAX];
	int fd;

	fd = pin_path(path, sizeof(path), name);
	if (fd)
		return fd;
	fd = bpf_obj_get(path);
	if (fd >= 0)
		return fd;
	fd = -errno;
	if (fd == -ENOENT)
		not_loaded();
	else
		fprintf(stderr, "Couldn't open pinned object %s: %s\n", path, strerror(-fd));
	return fd;
}

/* The pinned map name, or -1 when it is not there (a PGW-U loaded by a build before it) */
int pinned_open_opt(const char *name)
{
	char path[PATH_MAX];
	int fd = pin_path(path, sizeof(path), name);

	if (fd)
		return fd;
	fd = bpf_obj_get(path);
	return fd >= 0 ? fd : -1;
}

bool pgwu_is_loaded(void)
{
	char path[PATH_MAX];

	return !pin_path(path, sizeof(path), "config") && !access(path, F_OK);
}

static int slots_open(struct pgwu_maps *m);

int maps_open(struct pgwu_maps *m)
{
	/* config first: when nothing is loaded, its "not loaded" is the one message */
	static const char *const names[] = { "config", "ul_bearers", "dl_bearers", "stats",
					     "fib_gen", "dl6_bearers", "ul6_prefix",
					     "sdf_lists", "sdf_pdrs", "sdf_qos", "cp_relay", "n3v6_peers" };
	int *fds[] = { &m->config, &m->ul, &m->dl, &m->stats, &m->fib_gen, &m->dl6, &m->ul6,
		       &m->sdf.lists, &m->sdf.pdrs, &m->sdf.qos, &m->sdf.cp, &m->peers6 };
	size_t i;

	m->lock = -1;
	m->ul_slots_fd = m->dl_slots_fd = -1;
	m->ul_slots = NULL;
	m->dl_slots = NULL;
	m->dl6_slots_fd = -1;
	m->dl6_slots = NULL;
	m->nslots = 0;
	for (i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		*fds[i] = -1;
	for (i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		*fds[i] = pinned_open(names[i]);
		if (*fds[i] < 0) {
			int err = *fds[i];

			maps_close(m);
			return err;
		}
	}
	return slots_open(m);
}

/* Map the slot index (pgwu.h); its absence is an error: every loaded pgwu has it. */
static int slots_open(struct pgwu_maps *m)
{
	__u32 n_ul = 0, n_dl = 0, n_dl6 = 0;
	void *a, *b, *c;
	int err;

	m->ul_slots_fd = pinned_open("ul_slots");
	m->dl_slots_fd = pinned_open("dl_slots");
	m->dl6_slots_fd = pinned_open("dl6_slots");
	if (m->ul_slots_fd < 0 || m->dl_slots_fd < 0 || m->dl6_slots_fd < 0) {
		err = m->ul_slots_fd < 0 ? m->ul_slots_fd :
		      m->dl_slots_fd < 0 ? m->dl_slots_fd : m->dl6_slots_fd;
		maps_close(m);
		return err;
	}
	err = map_max_entries(m->ul_slots_fd, &n_ul);
	if (!err)
		err = map_max_entries(m->dl_slots_fd, &n_dl);
	if (!err)
		err = map_max_entries(m->dl6_slots_fd, &n_dl6);
	if (!err && (n_ul != n_dl || n_ul != n_dl6))
		err = -EINVAL;
	if (err) {
		maps_close(m);
		return err;
	}
	a = mmap(NULL, (size_t)n_ul * sizeof(struct pgwu_ul_slot), PROT_READ | PROT_WRITE, MAP_SHARED,
		 m->ul_slots_fd, 0);
	b = mmap(NULL, (size_t)n_dl * sizeof(struct pgwu_dl_slot), PROT_READ | PROT_WRITE, MAP_SHARED,
		 m->dl_slots_fd, 0);
	c = mmap(NULL, (size_t)n_dl6 * sizeof(struct pgwu_dl6_slot), PROT_READ | PROT_WRITE,
		 MAP_SHARED, m->dl6_slots_fd, 0);
	if (a == MAP_FAILED || b == MAP_FAILED || c == MAP_FAILED) {
		err = -errno;
		fprintf(stderr, "Couldn't map the bearer index: %s\n", strerror(-err));
		if (a != MAP_FAILED)
			munmap(a, (size_t)n_ul * sizeof(struct pgwu_ul_slot));
		if (b != MAP_FAILED)
			munmap(b, (size_t)n_dl * sizeof(struct pgwu_dl_slot));
		if (c != MAP_FAILED)
			munmap(c, (size_t)n_dl6 * sizeof(struct pgwu_dl6_slot));
		maps_close(m);
		return err;
	}
	m->ul_slots = a;
	m->dl_slots = b;
	m->dl6_slots = c;
	m->nslots = n_ul;
	return 0;
}

struct pgwu_ul_slot *slot_ul(const struct pgwu_maps *m, __u32 teid)
{
	struct pgwu_ul_slot *s;

	if (!m->ul_slots)
		return NULL;
	s = &m->ul_slots[ntohl(teid) & (m->nslots - 1)];
	return __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == PGWU_SLOT_VALID && s->teid == teid ? s : NULL;
}

struct pgwu_dl_slot *slot_dl(const struct pgwu_maps *m, __u32 ue)
{
	struct pgwu_dl_slot *s;

	if (!m->dl_slots)
		return NULL;
	s = &m->dl_slots[ntohl(ue) & (m->nslots - 1)];
	return __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == PGWU_SLOT_VALID && s->ue == ue ? s : NULL;
}

/* Fill a free slot: everything first, the state last (the packet path checks it first). */
void slot_ul_set(const struct pgwu_maps *m, __u32 teid, const struct pgwu_ul_bearer *v)
{
	struct pgwu_ul_slot *s;

	if (!m->ul_slots)
		return;
	s = &m->ul_slots[ntohl(teid) & (m->nslots - 1)];
	if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == PGWU_SLOT_VALID)
		return;		/* taken by another key: this bearer stays in the hash map only */
	s->teid = teid;
	s->b = *v;
	s->b.packets = 0;
	s->b.bytes = 0;
	__atomic_store_n(&s->state, PGWU_SLOT_VALID, __ATOMIC_RELEASE);
}

void slot_dl_set(const struct pgwu_maps *m, __u32 ue, const struct pgwu_dl_bearer *v)
{
	struct pgwu_dl_slot *s;

	if (!m->dl_slots)
		return;
	s = &m->dl_slots[ntohl(ue) & (m->nslots - 1)];
	if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == PGWU_SLOT_VALID)
		return;
	s->ue = ue;
	s->b = *v;
	s->b.packets = 0;
	s->b.bytes = 0;
	__atomic_store_n(&s->state, PGWU_SLOT_VALID, __ATOMIC_RELEASE);
}

void slot_ul_clear(const struct pgwu_maps *m, __u32 teid)
{
	struct pgwu_ul_slot *s = slot_ul(m, teid);

	if (s)
		__atomic_store_n(&s->state, 0, __ATOMIC_RELEASE);
}

void slot_dl_clear(const struct pgwu_maps *m, __u32 ue)
{
	struct pgwu_dl_slot *s = slot_dl(m, ue);

	if (s)
		__atomic_store_n(&s->state, 0, __ATOMIC_RELEASE);
}

void slots_clear_all(const struct pgwu_maps *m)
{
	for (__u32 i = 0; m->ul_slots && i < m->nslots; i++) {
		__atomic_store_n(&m->ul_slots[i].state, 0, __ATOMIC_RELEASE);
		__atomic_store_n(&m->ul_slots[i].state6, 0, __ATOMIC_RELEASE);
	}
	for (__u32 i = 0; m->dl_slots && i < m->nslots; i++)
		__atomic_store_n(&m->dl_slots[i].state, 0, __ATOMIC_RELEASE);
	for (__u32 i = 0; m->dl6_slots && i < m->nslots; i++)
		__atomic_store_n(&m->dl6_slots[i].state, 0, __ATOMIC_RELEASE);
}

/* IPv6: as the IPv4 ones above */
struct pgwu_ul_slot *slot_ul6(const struct pgwu_maps *m, __u32 teid)
{
	struct pgwu_ul_slot *s;

	if (!m->ul_slots)
		return NULL;
	s = &m->ul_slots[ntohl(teid) & (m->nslots - 1)];
	return __atomic_load_n(&s->state6, __ATOMIC_ACQUIRE) == PGWU_SLOT_VALID && s->teid6 == teid ?
	       s : NULL;
}

struct pgwu_dl6_slot *slot_dl6(const struct pgwu_maps *m, __u64 ue6)
{
	struct pgwu_dl6_slot *s;

	if (!m->dl6_slots)
		return NULL;
	s = &m->dl6_slots[pgwu_slot6_of(ue6) & (m->nslots - 1)];
	return __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == PGWU_SLOT_VALID && s->prefix == ue6 ?
	       s : NULL;
}

void slot_ul6_set(const struct pgwu_maps *m, __u32 teid, __u64 ue6)
{
	struct pgwu_ul_slot *s;

	if (!m->ul_slots)
		return;
	s = &m->ul_slots[ntohl(teid) & (m->nslots - 1)];
	if (__atomic_load_n(&s->state6, __ATOMIC_ACQUIRE) == PGWU_SLOT_VALID)
		return;		/* taken by another TEID: this one stays in ul6_prefix only */
	s->teid6 = teid;
	s->u6.prefix = ue6;
	s->u6.packets = 0;
	s->u6.bytes = 0;
	__atomic_store_n(&s->state6, PGWU_SLOT_VALID, __ATOMIC_RELEASE);
}

void slot_dl6_set(const struct pgwu_maps *m, __u64 ue6, const struct pgwu_dl_bearer *v)
{
	struct pgwu_dl6_slot *s;

	if (!m->dl6_slots)
		return;
	s = &m->dl6_slots[pgwu_slot6_of(ue6) & (m->nslots - 1)];
	if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == PGWU_SLOT_VALID)
		return;
	s->prefix = ue6;
	s->b = *v;
	s->b.packets = 0;
	s->b.bytes = 0;
	__atomic_store_n(&s->state, PGWU_SLOT_VALID, __ATOMIC_RELEASE);
}

void slot_ul6_clear(const struct pgwu_maps *m, __u32 teid)
{
	struct pgwu_ul_slot *s = slot_ul6(m, teid);

	if (s)
		__atomic_store_n(&s->state6, 0, __ATOMIC_RELEASE);
}

void slot_dl6_clear(const struct pgwu_maps *m, __u64 ue6)
{
	struct pgwu_dl6_slot *s = slot_dl6(m, ue6);

	if (s)
		__atomic_store_n(&s->state, 0, __ATOMIC_RELEASE);
}

int pin_dir_lock(void)
{
	int fd, err;

	fd = open(pin_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || flock(fd, LOCK_EX)) {
		err = -errno;
		fprintf(stderr, "Couldn't lock %s: %s\n", pin_dir, strerror(-err));
		if (fd >= 0)
			close(fd);
		return err;
	}
	return fd;
}

int maps_open_locked(struct pgwu_maps *m)
{
	int err = maps_open(m);

	if (err)
		return err;
	m->lock = pin_dir_lock();
	if (m->lock < 0) {
		err = m->lock;
		maps_close(m);
	}
	return err;
}

void maps_close(struct pgwu_maps *m)
{
	if (m->lock >= 0)
		close(m->lock);
	m->lock = -1;
	int *fds[] = { &m->ul, &m->dl, &m->stats, &m->config, &m->fib_gen, &m->ul_slots_fd,
		       &m->dl_slots_fd, &m->dl6, &m->ul6, &m->sdf.lists, &m->sdf.pdrs, &m->sdf.qos,
		       &m->sdf.cp, &m->dl6_slots_fd, &m->peers6 };

	if (m->ul_slots)
		munmap(m->ul_slots, (size_t)m->nslots * sizeof(struct pgwu_ul_slot));
	if (m->dl_slots)
		munmap(m->dl_slots, (size_t)m->nslots * sizeof(struct pgwu_dl_slot));
	if (m->dl6_slots)
		munmap(m->dl6_slots, (size_t)m->nslots * sizeof(struct pgwu_dl6_slot));
	m->ul_slots = NULL;
	m->dl_slots = NULL;
	m->dl6_slots = NULL;
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		if (*fds[i] >= 0)
			close(*fds[i]);
		*fds[i] = -1;
	}
}

int map_max_entries(int fd, __u32 *max)
{
	struct bpf_map_info info = {};
	__u32 len = sizeof(info);
	int err;

	err = bpf_obj_get_info_by_fd(fd, &info, &len);
	if (err) {
		err = -errno;
		fprintf(stderr, "Couldn't read map info: %s\n", strerror(-err));
		return err;
	}
	*max = info.max_entries;
	return 0;
}

int map_dump(int fd, size_t key_size, size_t val_size, void **keys, void **vals, size_t *n)
{
	LIBBPF_OPTS(bpf_map_batch_opts, opts);
	const __u32 chunk_max = 65536;
	char *k = NULL, *v = NULL, *nk, *nv;
	size_t cap = 0, cnt = 0;
	__u64 batch = 0;
	bool first = true;
	int err = 0;

	for (;;) {
		__u32 chunk = chunk_max;

		if (cnt + chunk > cap) {
			cap = cap * 2 > cnt + chunk ? cap * 2 : cnt + chunk;
			nk = realloc(k, cap * key_size);
			if (!nk) {
				err = -ENOMEM;
				goto out;
			}
			k = nk;
			nv = realloc(v, cap * val_size);
			if (!nv) {
				err = -ENOMEM;
				goto out;
			}
			v = nv;
		}
		/* Hash maps use a u32 bucket index as the batch token; u64 leaves room. */
		err = bpf_map_lookup_batch(fd, first ? NULL : &batch, &batch, k + cnt * key_size,
					   v + cnt * val_size, &chunk, &opts);
		if (err && err != -ENOENT)
			goto out;
		cnt += chunk;
		first = false;
		if (err == -ENOENT) {
			err = 0;
			break;
		}
	}
out:
	if (err) {
		fprintf(stderr, "Couldn't read a map: %s\n", strerror(-err));
		free(k);
		free(v);
		return err;
	}
	*keys = k;
	*vals = v;
	*n = cnt;
	return 0;
}

int config_read(int fd, struct pgwu_config *cfg)
{
	__u32 zero = 0;

	if (bpf_map_lookup_elem(fd, &zero, cfg)) {
		int err = -errno;

		fprintf(stderr, "Couldn't read the config map: %s\n", strerror(-err));
		return err;
	}
	return 0;
}

int stats_read(int fd, struct pgwu_counter out[PGWU_REASON_MAX * PGWU_VERDICT_MAX])
{
	int ncpus = libbpf_num_possible_cpus(), err = 0;
	struct pgwu_counter *v;

	if (ncpus < 0)
		return ncpus;
	/* per-CPU values are 8-byte aligned; struct pgwu_counter already is */
	v = calloc(ncpus, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (__u32 k = 0; k < PGWU_REASON_MAX * PGWU_VERDICT_MAX; k++) {
		out[k].packets = out[k].bytes = 0;
		if (bpf_map_lookup_elem(fd, &k, v)) {
			err = -errno;
			fprintf(stderr, "Couldn't read the stats map: %s\n", strerror(-err));
			goto out;
		}
		for (int c = 0; c < ncpus; c++) {
			out[k].packets += v[c].packets;
			out[k].bytes += v[c].bytes;
		}
	}
out:
	free(v);
	return err;
}

int radix_sort_hi32(__u64 *a, size_t n)
{
	__u64 *tmp, *src = a, *dst, *t;
	size_t count[256];

	if (n < 2)
		return 0;
	tmp = malloc(n * sizeof(*tmp));
	if (!tmp)
		return -ENOMEM;
	dst = tmp;
	for (int shift = 32; shift < 64; shift += 8) {
		size_t sum = 0;

		memset(count, 0, sizeof(count));
		for (size_t i = 0; i < n; i++)
			count[(src[i] >> shift) & 0xff]++;
		for (int b = 0; b < 256; b++) {
			size_t c = count[b];

			count[b] = sum;
			sum += c;
		}
		for (size_t i = 0; i < n; i++)
			dst[count[(src[i] >> shift) & 0xff]++] = src[i];
		t = src;
		src = dst;
		dst = t;
	}
	/* four passes: the result is back in a */
	free(tmp);
	return 0;
}

struct dump_job {
	int fd;
	size_t key_size, val_size;
	void *keys, *vals;
	size_t n;
	int err;
};

static void *dump_thread(void *arg)
{
	struct dump_job *j = arg;

	j->err = map_dump(j->fd, j->key_size, j->val_size, &j->keys, &j->vals, &j->n);
	return NULL;
}

/* Dump two maps at once, one thread each (walking a large hash map is mostly cache misses). */
int map_dump_two(struct dump_job *a, struct dump_job *b)
{
	pthread_t t;

	if (pthread_create(&t, NULL, dump_thread, b)) {
		dump_thread(b);
		dump_thread(a);
	} else {
		dump_thread(a);
		pthread_join(t, NULL);
	}
	if (a->err || b->err) {
		free(a->keys);
		free(a->vals);
		free(b->keys);
		free(b->vals);
		a->keys = a->vals = b->keys = b->vals = NULL;
		return a->err ? a->err : b->err;
	}
	return 0;
}

static ssize_t find_hi32(const __u64 *a, size_t n, __u32 key)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if ((__u32)(a[mid] >> 32) < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && (__u32)(a[lo] >> 32) == key ? (ssize_t)lo : -1;
}

/* a bearer's downlink usage: its hash entry's and its slot's */
static void dl_slot_add(const struct pgwu_maps *m, __u32 ue, struct bearer *x)
{
	const struct pgwu_dl_slot *sl = slot_dl(m, ue);

	if (sl) {
		x->dl_packets += sl->b.packets;
		x->dl_bytes += sl->b.bytes;
	}
}

/* The IPv6 /64 of the bearers that have one (ul6_prefix), and their IPv6 usage both ways: read
 * by prefix, so the cost is the IPv6 bearers', not the table's. t is sorted by TEID. */
static int bearers_read_v6(const struct pgwu_maps *m, struct bearer_table *t)
{
	__u32 *keys = NULL;
	struct pgwu_ul6 *vals = NULL;
	size_t n = 0;
	int err;

	err = map_dump(m->ul6, sizeof(*keys), sizeof(*vals), (void **)&keys, (void **)&vals, &n);
	if (err)
		return err;
	for (size_t i = 0; i < n; i++) {
		__u32 teid = ntohl(keys[i]);
		size_t lo = 0, hi = t->n;
		struct pgwu_dl_bearer d;

		while (lo < hi) {	/* the first bearer with this TEID */
			size_t mid = lo + (hi - lo) / 2;

			if (t->b[mid].teid < teid)
				lo = mid + 1;
			else
				hi = mid;
		}
		for (; lo < t->n && t->b[lo].teid == teid; lo++) {
			struct bearer *x = &t->b[lo];

			if (!x->has_ul)
				continue;
			const struct pgwu_ul_slot *su = slot_ul6(m, keys[i]);

			x->has_ue6 = true;
			x->ue6 = vals[i].prefix;
			x->ul6_packets = vals[i].packets + (su ? su->u6.packets : 0);
			x->ul6_bytes = vals[i].bytes + (su ? su->u6.bytes : 0);
			x->ul_packets += x->ul6_packets;
			x->ul_bytes += x->ul6_bytes;
			if (!bpf_map_lookup_elem(m->dl6, &vals[i].prefix, &d) &&
			    d.local_teid == keys[i]) {
				const struct pgwu_dl6_slot *sd = slot_dl6(m, vals[i].prefix);

				x->dl6_packets = d.packets + (sd ? sd->b.packets : 0);
				x->dl6_bytes = d.bytes + (sd ? sd->b.bytes : 0);
				x->dl_packets += x->dl6_packets;
				x->dl_bytes += x->dl6_bytes;
			}
		}
	}
	free(keys);
	free(vals);
	return 0;
}

int bearers_read(const struct pgwu_maps *m, struct bearer_table *t)
{
	struct pgwu_ul_bearer *ulv = NULL;
	struct pgwu_dl_bearer *dlv = NULL;
	__u32 *ulk = NULL, *dlk = NULL;
	__u64 *dl_idx = NULL, *order = NULL;
	struct bearer *b = NULL, *sorted = NULL;
	bool *used = NULL;
	size_t n_ul = 0, n_dl = 0, n = 0;
	int err;

	memset(t, 0, sizeof(*t));
	err = map_max_entries(m->ul, &t->cap_ul);
	if (!err)
		err = map_max_entries(m->dl, &t->cap_dl);
	if (!err) {
		struct dump_job ju = { .fd = m->ul, .key_size = sizeof(*ulk), .val_size = sizeof(*ulv) };
		struct dump_job jd = { .fd = m->dl, .key_size = sizeof(*dlk), .val_size = sizeof(*dlv) };

		err = map_dump_two(&ju, &jd);
		ulk = ju.keys;
		ulv = ju.vals;
		n_ul = ju.n;
		dlk = jd.keys;
		dlv = jd.vals;
		n_dl = jd.n;
	}
	if (err)
		goto out;
	err = -ENOMEM;
	dl_idx = malloc((n_dl + 1) * sizeof(*dl_idx));
	used = calloc(n_dl + 1, sizeof(*used));
	b = calloc(n_ul + n_dl + 1, sizeof(*b));
	order = malloc((n_ul + n_dl + 1) * sizeof(*order));
	sorted = malloc((n_ul + n_dl + 1) * sizeof(*sorted));
	if (!dl_idx || !used || !b || !order || !sorted)
		goto out;
	for (size_t i = 0; i < n_dl; i++)
		dl_idx[i] = (__u64)dlk[i] << 32 | i;
	err = radix_sort_hi32(dl_idx, n_dl);
	if (err)
		goto out;
	for (size_t i = 0; i < n_ul; i++) {
		struct bearer *x;
		ssize_t j;

		if (ulv[i].flags & PGWU_B_CP2UP)
			continue;	/* a tunnel from the CP function, not a bearer (pgwu.h) */
		x = &b[n++];
		j = find_hi32(dl_idx, n_dl, ulv[i].ue_addr);

		x->teid = ntohl(ulk[i]);
		x->ue = ulv[i].ue_addr;
		x->has_ul = true;
		x->ul_flags = ulv[i].flags;
		x->ul_packets = ulv[i].packets;
		x->ul_bytes = ulv[i].bytes;
		{
			const struct pgwu_ul_slot *sl = slot_ul(m, ulk[i]);

			if (sl) {
				x->ul_packets += sl->b.packets;
				x->ul_bytes += sl->b.bytes;
			}
		}
		if (j >= 0) {
			const struct pgwu_dl_bearer *d = &dlv[(__u32)dl_idx[j]];

			if (d->local_teid == ulk[i]) {
				used[(__u32)dl_idx[j]] = true;
				x->has_dl = true;
				x->sgw = d->sgw_addr;
				x->sgw_teid = ntohl(d->sgw_teid);
				x->flags = d->flags;
				x->dl_packets = d->packets;
				x->dl_bytes = d->bytes;
				dl_slot_add(m, ulv[i].ue_addr, x);
			}
		}
	}
	for (size_t i = 0; i < n_dl; i++) {
		struct bearer *x;

		if (used[i])
			continue;
		x = &b[n++];
		x->teid = ntohl(dlv[i].local_teid);
		x->ue = dlk[i];
		x->has_dl = true;
		x->sgw = dlv[i].sgw_addr;
		x->sgw_teid = ntohl(dlv[i].sgw_teid);
		x->flags = dlv[i].flags;
		x->dl_packets = dlv[i].packets;
		x->dl_bytes = dlv[i].bytes;
		dl_slot_add(m, dlk[i], x);
	}
	for (size_t i = 0; i < n; i++)
		order[i] = (__u64)b[i].teid << 32 | i;
	err = radix_sort_hi32(order, n);
	if (err)
		goto out;
	for (size_t i = 0; i < n; i++)
		sorted[i] = b[(__u32)order[i]];
	t->b = sorted;
	sorted = NULL;
	t->n = n;
	t->n_ul = n_ul;
	t->n_dl = n_dl;
	err = bearers_read_v6(m, t);
	for (size_t i = 0; !err && i < t->n; i++)
		if (t->b[i].has_dl && (t->b[i].flags & PGWU_B_PEER6))
			n3v6_peer_get(m, t->b[i].sgw, t->b[i].sgw6);
out:
	if (err == -ENOMEM)
		fprintf(stderr, "Couldn't read the bearer tables: %s\n", strerror(ENOMEM));
	free(ulk);
	free(ulv);
	free(dlk);
	free(dlv);
	free(dl_idx);
	free(used);
	free(b);
	free(order);
	free(sorted);
	return err;
}

/* bearers_read() of the pinned maps, opened and closed around it. */
int bearers_load(struct bearer_table *t)
{
	struct pgwu_maps m;
	int err = maps_open(&m);

	if (err)
		return err;
	err = bearers_read(&m, t);
	maps_close(&m);
	return err;
}

void bearers_free(struct bearer_table *t)
{
	free(t->b);
	t->b = NULL;
	t->n = 0;
}

__u64 helper_read(int fib_gen_fd, __u32 slot)
{
	__u64 v;

	return bpf_map_lookup_elem(fib_gen_fd, &slot, &v) ? 0 : v;
}

__u64 fib_watcher_read(int fib_gen_fd)
{
	return helper_read(fib_gen_fd, PGWU_REG_WATCH);
}

int helper_register(int prog_fd, __u32 *tgid)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts);

	if (bpf_prog_test_run_opts(prog_fd, &opts))
		return -errno;
	if (!opts.retval)
		return -ENOENT;
	*tgid = opts.retval;
	return 0;
}

int reasm_stats_read(__u64 out[PGWU_RA_MAX], __u64 *pid)
{
	char path[PATH_MAX];
	int fd;

	memset(out, 0, PGWU_RA_MAX * sizeof(out[0]));
	*pid = 0;
	/* quietly absent: a PIN_DIR loaded by a pgwu without the reassembler */
	if (!pin_path(path, sizeof(path), "fib_gen")) {
		fd = bpf_obj_get(path);
		if (fd >= 0) {
			*pid = helper_read(fd, PGWU_REG_REASM);
			close(fd);
		}
	}
	if (pin_path(path, sizeof(path), "reasm_stats"))
		return 0;
	fd = bpf_obj_get(path);
	if (fd < 0)
		return 0;
	for (__u32 k = 0; k < PGWU_RA_MAX; k++)
		if (bpf_map_lookup_elem(fd, &k, &out[k]))
			out[k] = 0;
	close(fd);
	return 0;
}

int snapshot_read(struct pgwu_snapshot *s)
{
	struct pgwu_maps m;
	__u32 zero = 0;
	int err;

	memset(s, 0, sizeof(*s));
	err = maps_open(&m);
	if (err)
		return err;
	err = stats_read(m.stats, s->stats);
	if (!err)
		err = config_read(m.config, &s->cfg);
	if (!err && bpf_map_lookup_elem(m.fib_gen, &zero, &s->fib_gen))
		s->fib_gen = 0;
	if (!err)
		s->fib_watcher = fib_watcher_read(m.fib_gen);
	if (!err)
		err = reasm_stats_read(s->reasm, &s->reasm_pid);
	if (!err)
		err = bearers_read(&m, &s->bearers);
	if (err)
		goto out;
	for (size_t i = 0; i < s->bearers.n; i++) {
		const struct bearer *b = &s->bearers.b[i];

		s->ul_packets += b->ul_packets;
		s->ul_bytes += b->ul_bytes;
		s->dl_packets += b->dl_packets;
		s->dl_bytes += b->dl_bytes;
	}
out:
	maps_close(&m);
	return err;
}

void snapshot_free(struct pgwu_snapshot *s)
{
	bearers_free(&s->bearers);
}

bool pid_is_pgwu(__u64 pid)
{
	char path[64], comm[32] = "";
	FILE *f;

	if (!pid || kill(pid, 0))
		return false;
	snprintf(path, sizeof(path), "/proc/%llu/comm", (unsigned long long)pid);
	f = fopen(path, "r");
	if (!f)
		return false;
	if (!fgets(comm, sizeof(comm), f))
		comm[0] = '\0';
	fclose(f);
	return !strncmp(comm, "pgwu", 4);
}

int sock_stats_read(__u64 **words, bool *running)
{
	size_t len = (PGWU_SOCK_WORDS * 8 + 4095) / 4096 * 4096;
	char path[PATH_MAX];
	__u32 max = 0;
	__u64 *w, *copy;
	int fd;

	*words = NULL;
	*running = false;
	if (pin_path(path, sizeof(path), PGWU_SOCK_STATS_MAP))
		return 0;
	fd = bpf_obj_get(path);
	if (fd < 0)
		return 0;		/* no socket path ever ran here */
	if (map_max_entries(fd, &max) || max != PGWU_SOCK_WORDS) {
		close(fd);
		return 0;
	}
	w = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (w == MAP_FAILED)
		return -errno;
	if (w[PGWU_SH_LAYOUT] != PGWU_SOCK_LAYOUT) {
		munmap(w, len);
		return 0;		/* written by another pgwu's layout */
	}
	copy = malloc(PGWU_SOCK_WORDS * 8);
	if (copy)
		memcpy(copy, w, PGWU_SOCK_WORDS * 8);
	munmap(w, len);
	if (!copy)
		return -ENOMEM;
	*words = copy;
	*running = pid_is_pgwu(copy[PGWU_SH_PID]);
	return 0;
}

int n3v6_peer_get(const struct pgwu_maps *m, __u32 idx, __u8 *addr)
{
	struct pgwu_n3v6_peer p;

	memset(addr, 0, 16);
	if (bpf_map_lookup_elem(m->peers6, &idx, &p))
		return -errno;
	memcpy(addr, p.addr, 16);
	return 0;
}

int n3v6_peer_find(const struct pgwu_maps *m, const __u8 *addr, bool alloc, __u32 *idx)
{
	static const __u8 zero[16];
	struct pgwu_n3v6_peer p;
	__u32 i, free_idx = PGWU_N3V6_PEERS;

	for (i = 0; i < PGWU_N3V6_PEERS; i++) {
		if (bpf_map_lookup_elem(m->peers6, &i, &p))
			return -errno;
		if (!memcmp(p.addr, addr, 16)) {
			*idx = i;
			return 0;
		}
		if (free_idx == PGWU_N3V6_PEERS && !memcmp(p.addr, zero, 16))
			free_idx = i;
	}
	if (!alloc)
		return -ENOENT;
	if (free_idx == PGWU_N3V6_PEERS)
		return -ENOSPC;
	memcpy(p.addr, addr, 16);
	if (bpf_map_update_elem(m->peers6, &free_idx, &p, BPF_ANY))
		return -errno;
	*idx = free_idx;
	return 0;
}
