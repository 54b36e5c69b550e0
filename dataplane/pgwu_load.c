// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pgwu_load.c: load, unload, attach, detach. Everything lives in PIN_DIR: the maps and programs
 * under their own names, and one pinned bpf_link per attachment (link_<tracing program>,
 * link_xdp_<ifname>). A link is an object of its own, valid whatever network namespace pgwu runs
 * in later, so detach and unload only need PIN_DIR: BPF_LINK_DETACH, then unpin.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/if_link.h>
#include <linux/magic.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "pgwu_cli.h"
#include "consts.h"
#include "pgwu.skel.h"

#define MAX_PINS 64

/* What one load created, so a failure can remove exactly that. */
struct undo {
	char *pins[MAX_PINS];
	int npins;
	char *dirs[PATH_MAX / 2];
	int ndirs;
};

static int undo_add(char **list, int *n, int max, const char *path)
{
	if (*n >= max)
		return -E2BIG;
	list[*n] = strdup(path);
	if (!list[*n])
		return -ENOMEM;
	(*n)++;
	return 0;
}

static void undo_run(struct undo *u, bool remove)
{
	while (u->npins > 0) {
		char *p = u->pins[--u->npins];

		if (remove)
			unlink(p);
		free(p);
	}
	while (u->ndirs > 0) {
		char *p = u->dirs[--u->ndirs];

		if (remove)
			rmdir(p);
		free(p);
	}
}

/* mkdir -p, recording each directory it creates. */
static int mkdir_p(const char *dir, struct undo *u)
{
	char path[PATH_MAX];
	size_t len = strlen(dir);
	int err;

	if (len == 0 || len >= sizeof(path))
		return -ENAMETOOLONG;
	memcpy(path, dir, len + 1);
	for (char *p = path + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;

		*p = '\0';
		if (mkdir(path, 0700) == 0) {
			err = undo_add(u->dirs, &u->ndirs, sizeof(u->dirs) / sizeof(u->dirs[0]), path);
			if (err)
				return err;
		} else if (errno != EEXIST) {
			err = -errno;
			fprintf(stderr, "Couldn't create %s: %s\n", path, strerror(-err));
			return err;
		}
		*p = c;
		if (!c)
			break;
	}
	return 0;
}

static bool dir_is_empty(const char *dir)
{
	struct dirent *e;
	DIR *d = opendir(dir);
	bool empty = true;

	if (!d)
		return true;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			empty = false;
			break;
		}
	closedir(d);
	return empty;
}

/* The programs that keep the FIB cache correct and need tracing support from the kernel: all are
 * loaded, or none (then the cache is off). The fib_gen_ ones are attached here, with pinned links;
 * watch_register only runs when `pgwu watch` starts. */
static bool is_tracing(const struct bpf_program *prog)
{
	return bpf_program__type(prog) == BPF_PROG_TYPE_RAW_TRACEPOINT ||
	       bpf_program__type(prog) == BPF_PROG_TYPE_TRACING;
}

static bool attached_at_load(const struct bpf_program *prog)
{
	return is_tracing(prog) &&
	       !strncmp(bpf_program__name(prog), PGWU_TRACING_PREFIX, strlen(PGWU_TRACING_PREFIX));
}

/* bearer halves that may have SDF filters: the capacity, at most PGWU_SDF_LISTS (consts.h) */
static __u32 sdf_lists_for(__u32 max_bearers)
{
	return max_bearers < PGWU_SDF_LISTS ? max_bearers : PGWU_SDF_LISTS;
}

static int open_skel(__u32 max_bearers, bool tracing, struct pgwu_bpf **out)
{
	struct bpf_program *prog;
	struct pgwu_bpf *skel;
	int err;

	skel = pgwu_bpf__open();
	if (!skel) {
		err = -errno;
		fprintf(stderr, "Couldn't open the BPF object: %s\n", strerror(-err));
		return err;
	}
	err = bpf_map__set_max_entries(skel->maps.ul_bearers, max_bearers);
	if (!err)
		err = bpf_map__set_max_entries(skel->maps.dl_bearers, max_bearers);
	if (!err)
		err = bpf_map__set_max_entries(skel->maps.dl6_bearers, max_bearers);
	if (!err)
		err = bpf_map__set_max_entries(skel->maps.ul6_prefix, max_bearers);
	if (!err)
		err = bpf_map__set_max_entries(skel->maps.qos, max_bearers);
	if (!err)	/* SDF filters: for some bearers only (PGWU_SDF_LISTS at most) */
		err = bpf_map__set_max_entries(skel->maps.sdf_lists, sdf_lists_for(max_bearers));
	if (!err)
		err = bpf_map__set_max_entries(skel->maps.sdf_pdrs, 4 * sdf_lists_for(max_bearers));
	if (!err)
		err = bpf_map__set_max_entries(skel->maps.sdf_qos, 4 * sdf_lists_for(max_bearers));
	if (!err)	/* URRs with a threshold or quota of SDF PDRs: at most one a PDR */
		err = bpf_map__set_max_entries(skel->maps.sdf_urr, 4 * sdf_lists_for(max_bearers));
	if (!err)	/* the CP function's tunnels: one or two per IPv6 session that has them */
		err = bpf_map__set_max_entries(skel->maps.cp_relay, 4 * sdf_lists_for(max_bearers));
	if (!err)
		err = bpf_map__set_max_entries(skel->maps.ul_slots, pgwu_slots_for(max_bearers));
	if (!err)
		err = bpf_map__set_max_entries(skel->maps.dl_slots, pgwu_slots_for(max_bearers));
	if (!err)
		err = bpf_map__set_max_entries(skel->maps.dl6_slots, pgwu_slots_for(max_bearers));
	if (err) {
		fprintf(stderr, "Couldn't set the bearer capacity: %s\n", strerror(-err));
		goto out;
	}
	bpf_object__for_each_program(prog, skel->obj)
		if (is_tracing(prog))
			bpf_program__set_autoload(prog, tracing);
	err = pgwu_bpf__load(skel);
out:
	if (err) {
		pgwu_bpf__destroy(skel);
		return err;
	}
	*out = skel;
	return 0;
}

static int pin_one(int fd, const char *name, struct undo *u)
{
	char path[PATH_MAX];
	int err;

	err = pin_path(path, sizeof(path), name);
	if (!err)
		err = bpf_obj_pin(fd, path);
	if (err) {
		fprintf(stderr, "Couldn't pin %s: %s\n", path, strerror(-err));
		return err;
	}
	return undo_add(u->pins, &u->npins, MAX_PINS, path);
}

/*
 * The memory a capacity takes, computed from the maps' types and sizes the way the kernel accounts
 * them (the "memlock" of each map's fdinfo, htab_map_mem_usage and array_map_mem_usage in Linux
 * 6.x): a hash map without preallocation holds its buckets from the start (a power of two >= its
 * max_entries, 16 bytes each) and one element per entry (a 48-byte header, the key and the value
 * rounded to 8, an 8-byte free-list node); an array holds max_entries values rounded to 8 (an
 * mmap-able one rounded to pages, plus a page); a per-CPU array one copy per possible CPU and an
 * 8-byte pointer per entry; an LRU hash (preallocated) its buckets and every element from the
 * start. Every map also has its struct (~0.3-1 KiB: counted as 1 KiB).
 */
#define HTAB_BUCKET_SIZE 16
#define HTAB_ELEM_HDR 48
#define LLIST_NODE_SIZE 8
#define MAP_HDR_SIZE 1024

struct mem_plan {
	__u64 buckets;		/* hash buckets, held from load on */
	__u64 slots;		/* the bearer index (ul_slots, dl_slots, dl6_slots) */
	__u64 counters;		/* per-CPU counters, the route cache and the small arrays */
	__u64 per_bearer;	/* hash elements one bearer adds (both tables) */
	__u64 at_load, full;
};

static __u64 round_up_u64(__u64 x, __u64 to)
{
	return (x + to - 1) / to * to;
}

static __u64 pow2_at_least(__u64 x)
{
	__u64 n = 1;

	while (n < x)
		n <<= 1;
	return n;
}

static void mem_plan_of(const struct bpf_object *obj, __u32 max_bearers, struct mem_plan *p)
{
	long page = sysconf(_SC_PAGESIZE);
	int ncpus = libbpf_num_possible_cpus();
	const struct bpf_map *map;

	memset(p, 0, sizeof(*p));
	if (ncpus < 1)
		ncpus = 1;
	if (page < 1)
		page = 4096;
	bpf_object__for_each_map(map, obj) {
		const char *name = bpf_map__name(map);
		__u64 n = bpf_map__max_entries(map), v = round_up_u64(bpf_map__value_size(map), 8);
		__u64 k = round_up_u64(bpf_map__key_size(map), 8);

		if (!strcmp(name, "ul_bearers") || !strcmp(name, "dl_bearers") ||
		    !strcmp(name, "dl6_bearers") || !strcmp(name, "ul6_prefix") ||
		    !strcmp(name, "qos"))
			n = max_bearers;
		else if (!strcmp(name, "ul_slots") || !strcmp(name, "dl_slots") ||
			 !strcmp(name, "dl6_slots"))
			n = pgwu_slots_for(max_bearers);
		p->counters += MAP_HDR_SIZE;
		switch (bpf_map__type(map)) {
		case BPF_MAP_TYPE_HASH:
		case BPF_MAP_TYPE_LRU_HASH:	/* always preallocated (htab_map_mem_usage) */
			p->buckets += pow2_at_least(n) * HTAB_BUCKET_SIZE;
			/* a qos entry exists only for a PFCP session with QERs or URRs: not a
			 * bearer's cost (HTAB_ELEM_HDR + 8 + 96 + 8 = 160 bytes more for those);
			 * nor are the IPv6 maps' entries, made only for a bearer with a /64
			 * (dl6_bearers 104 + ul6_prefix 88 = 192 bytes more for those) */
			if (!strcmp(name, "qos") || !strcmp(name, "dl6_bearers") ||
			    !strcmp(name, "ul6_prefix") || !strncmp(name, "sdf_", 4) ||
			    !strcmp(name, "cp_relay"))
				break;	/* nor the SDF filters' (a list 2,960 bytes a bearer half),
					 * nor the CP function's tunnels (96 bytes each) */
			if (bpf_map__map_flags(map) & BPF_F_NO_PREALLOC)
				p->per_bearer += HTAB_ELEM_HDR + k + v + LLIST_NODE_SIZE;
			else
				p->counters += n * (HTAB_ELEM_HDR + k + v);
			break;
		case BPF_MAP_TYPE_PERCPU_ARRAY:
			p->counters += n * (v * ncpus + sizeof(void *));
			break;
		default:	/* arrays */
			if (bpf_map__map_flags(map) & BPF_F_MMAPABLE)
				p->slots += round_up_u64(n * v, page) + page;
			else
				p->counters += n * v;
		}
	}
	p->at_load = p->buckets + p->slots + p->counters;
	p->full = p->at_load + p->per_bearer * max_bearers;
}

/* MemAvailable from /proc/meminfo in bytes; 0 when it cannot be read. A test can set it. */
static __u64 mem_available(void)
{
	const char *fake = getenv("PGWU_TEST_MEMAVAILABLE_KB");
	unsigned long long kb = 0;
	char line[256];
	FILE *f;

	if (fake)
		return strtoull(fake, NULL, 10) * 1024;
	f = fopen("/proc/meminfo", "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return (__u64)kb * 1024;
}

static double mib(__u64 b)
{
	return b / 1048576.0;
}

/*
 * Print what max_bearers will take; refuse (-ENOMEM) when the tables, full, would not fit in what
 * the host has available now. Runs before anything is created: only the object file is opened.
 */
static int mem_check(__u32 max_bearers)
{
	struct mem_plan p, q;
	struct pgwu_bpf *skel;
	__u64 avail;
	__u32 lo, hi;

	skel = pgwu_bpf__open();
	if (!skel) {
		int err = -errno;

		fprintf(stderr, "Couldn't open the BPF object: %s\n", strerror(-err));
		return err;
	}
	mem_plan_of(skel->obj, max_bearers, &p);
	avail = mem_available();
	if (avail && p.full > avail) {
		/* the largest capacity that fits: the plan grows with the capacity */
		lo = 0;
		hi = max_bearers;
		while (lo < hi) {
			__u32 mid = lo + (hi - lo + 1) / 2;

			mem_plan_of(skel->obj, mid, &q);
			if (q.full <= avail)
				lo = mid;
			else
				hi = mid - 1;
		}
		fprintf(stderr, "Capacity %u bearers needs %.1f MiB with every bearer installed "
			"(%.1f MiB at load: hash buckets %.1f, bearer index %.1f, counters %.1f; "
			"%llu bytes a bearer), more than this host has available (MemAvailable %.1f "
			"MiB): nothing loaded; the largest capacity that fits now is %u\n",
			max_bearers, mib(p.full), mib(p.at_load), mib(p.buckets), mib(p.slots),
			mib(p.counters), (unsigned long long)p.per_bearer, mib(avail), lo);
		pgwu_bpf__destroy(skel);
		return -ENOMEM;
	}
	printf("memory for %u bearers: %.1f MiB at load (hash buckets %.1f, bearer index %.1f, "
	       "counters %.1f), %.1f MiB with every bearer installed (%llu bytes a bearer); "
	       "MemAvailable %.1f MiB\n", max_bearers, mib(p.at_load), mib(p.buckets), mib(p.slots),
	       mib(p.counters), mib(p.full), (unsigned long long)p.per_bearer, mib(avail));
	pgwu_bpf__destroy(skel);
	return 0;
}

const struct load_opts load_defaults = {
	.max_bearers = { .v = PGWU_DEFAULT_MAX_BEARERS },
	.csum = { .v = 1 },
	.sport_entropy = { .v = 1 },
};

int pgwu_load(const struct load_opts *o)
{
	struct bpf_link *links[MAX_PINS] = {};
	const char *link_prog[MAX_PINS];
	int nlinks = 0, err;
	struct pgwu_bpf *skel = NULL;
	struct pgwu_config cfg = {};
	struct bpf_program *prog;
	struct bpf_map *map;
	struct undo u = {};
	char tracing_err[256] = "";
	struct statfs st;
	__u32 zero = 0;

	if (!dir_is_empty(pin_dir)) {
		if (pgwu_is_loaded())
			fprintf(stderr, "pgwu is already loaded in %s (run pgwu unload first)\n",
				pin_dir);
		else
			fprintf(stderr, "%s is not empty: not loading pgwu there\n", pin_dir);
		return -EEXIST;
	}
	err = mem_check(o->max_bearers.v);
	if (err)
		return err;

	err = open_skel(o->max_bearers.v, true, &skel);
	if (err) {
		/* Maybe only the route-change tracing failed (no BTF, no fentry): go on without it. */
		snprintf(tracing_err, sizeof(tracing_err), "couldn't load the fib_gen_ programs: %s",
			 strerror(-err));
		err = open_skel(o->max_bearers.v, false, &skel);
		if (err) {
			fprintf(stderr, "Couldn't load the BPF programs: %s%s\n", strerror(-err),
				verbose ? "" : " (run with -v for libbpf's log)");
			return err;
		}
	}
	bpf_object__for_each_program(prog, skel->obj) {
		if (!attached_at_load(prog) || !bpf_program__autoload(prog) || tracing_err[0])
			continue;
		links[nlinks] = bpf_program__attach(prog);
		if (!links[nlinks]) {
			snprintf(tracing_err, sizeof(tracing_err), "couldn't attach %s: %s",
				 bpf_program__name(prog), strerror(errno));
			break;
		}
		link_prog[nlinks++] = bpf_program__name(prog);
	}
	if (tracing_err[0]) {
		/* a cache nobody invalidates is wrong: drop the tracing links and the cache */
		while (nlinks > 0)
			bpf_link__destroy(links[--nlinks]);
		pr_warn("Warning: FIB cache disabled: %s\n", tracing_err);
	}

	cfg.local_addr = o->local_addr.addr;
	memcpy(cfg.local_addr6, o->local_addr6.addr, 16);
	memcpy(cfg.n3_addr6, o->n3_addr6.addr, 16);
	cfg.ue_pool_addr = o->ue_pool.addr;
	cfg.ue_pool_mask = o->ue_pool.mask;
	cfg.restart_counter = o->restart_counter.v;
	cfg.flags = (o->csum.v ? PGWU_CFG_CSUM : 0) |
		    (o->sport_entropy.v ? 0 : PGWU_CFG_SPORT_FIXED) |
		    (!o->no_fib_cache.set && !tracing_err[0] ? PGWU_CFG_FIB_CACHE : 0);
	err = bpf_map_update_elem(bpf_map__fd(skel->maps.config), &zero, &cfg, BPF_ANY);
	if (!err) {
		__u32 mask = pgwu_slots_for(o->max_bearers.v) - 1;

		err = bpf_map_update_elem(bpf_map__fd(skel->maps.slot_mask), &zero, &mask, BPF_ANY);
	}
	if (err) {
		fprintf(stderr, "Couldn't write the config map: %s\n", strerror(-err));
		goto out;
	}

	err = mkdir_p(pin_dir, &u);
	if (err)
		goto out;
	if (statfs(pin_dir, &st) || st.f_type != BPF_FS_MAGIC) {
		fprintf(stderr, "%s is not on a bpf filesystem (mount -t bpf bpf /sys/fs/bpf)\n",
			pin_dir);
		err = -EINVAL;
		goto out;
	}
	bpf_object__for_each_map(map, skel->obj) {
		err = pin_one(bpf_map__fd(map), bpf_map__name(map), &u);
		if (err)
			goto out;
	}
	bpf_object__for_each_program(prog, skel->obj) {
		if (!bpf_program__autoload(prog))
			continue;
		err = pin_one(bpf_program__fd(prog), bpf_program__name(prog), &u);
		if (err)
			goto out;
	}
	for (int i = 0; i < nlinks; i++) {
		char name[NAME_MAX];

		snprintf(name, sizeof(name), PGWU_LINK_PREFIX "%s", link_prog[i]);
		err = pin_one(bpf_link__fd(links[i]), name, &u);
		if (err)
			goto out;
	}
	printf("pgwu loaded in %s: capacity %u bearers, FIB cache %s\n", pin_dir,
	       o->max_bearers.v, cfg.flags & PGWU_CFG_FIB_CACHE ? "on" : "off");
out:
	undo_run(&u, err != 0);
	/* Closing our fds leaves pinned links attached; unpinned ones detach here. */
	while (nlinks > 0)
		bpf_link__destroy(links[--nlinks]);
	pgwu_bpf__destroy(skel);
	return err;
}

int do_load(const void *cfg)
{
	return pgwu_load(cfg);
}

/* BPF_LINK_DETACH then unpin every link_xdp_*; returns how many, or -errno. */
static int detach_xdp_links(bool print)
{
	struct dirent *e;
	int n = 0, err = 0;
	DIR *d;

	d = opendir(pin_dir);
	if (!d)
		return -errno;
	while ((e = readdir(d))) {
		char path[PATH_MAX];
		int fd;

		if (strncmp(e->d_name, PGWU_XDP_LINK_PREFIX, strlen(PGWU_XDP_LINK_PREFIX)))
			continue;
		if (pin_path(path, sizeof(path), e->d_name))
			continue;
		fd = bpf_obj_get(path);
		if (fd >= 0) {
			/* EINVAL/EOPNOTSUPP: old kernel; the link goes with its last reference */
			bpf_link_detach(fd);
			close(fd);
		}
		if (unlink(path)) {
			err = -errno;
			fprintf(stderr, "Couldn't unpin %s: %s\n", path, strerror(-err));
			continue;
		}
		if (print)
			printf("detached %s\n", e->d_name + strlen(PGWU_XDP_LINK_PREFIX));
		n++;
	}
	closedir(d);
	return err ? err : n;
}

static int count_xdp_links(void)
{
	struct dirent *e;
	int n = 0;
	DIR *d;

	d = opendir(pin_dir);
	if (!d)
		return -errno;
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, PGWU_XDP_LINK_PREFIX, strlen(PGWU_XDP_LINK_PREFIX)))
			n++;
	closedir(d);
	return n;
}

/* Is name one pgwu pins? Judged against the object's own map and program names. */
static bool is_ours(const struct bpf_object *obj, const char *name)
{
	struct bpf_program *prog;
	struct bpf_map *map;

	if (!strncmp(name, PGWU_LINK_PREFIX, strlen(PGWU_LINK_PREFIX)))
		return true;
	if (!strcmp(name, PFCP_STATS_MAP) || !strcmp(name, PFCP_PEERS_MAP) ||
	    !strcmp(name, PFCP_SESSIONS_MAP) || !strcmp(name, PFCP_RULES_MAP))
		return true;	/* `pgwu pfcp`'s counters and published model */
	bpf_object__for_each_map(map, obj)
		if (!strcmp(bpf_map__name(map), name))
			return true;
	bpf_object__for_each_program(prog, obj)
		if (!strcmp(bpf_program__name(prog), name))
			return true;
	return false;
}

static int pgwu_unload(bool print)
{
	struct pgwu_bpf *skel;
	struct dirent *e;
	int err = 0, n;
	DIR *d;

	if (!pgwu_is_loaded()) {
		fprintf(stderr, "pgwu is not loaded in %s (nothing to unload)\n", pin_dir);
		return -ENOENT;
	}
	skel = pgwu_bpf__open();
	if (!skel) {
		err = -errno;
		fprintf(stderr, "Couldn't open the BPF object: %s\n", strerror(-err));
		return err;
	}
	n = detach_xdp_links(print);
	if (n < 0)
		err = n;
	d = opendir(pin_dir);
	if (!d) {
		err = -errno;
		fprintf(stderr, "Couldn't open %s: %s\n", pin_dir, strerror(-err));
		goto out;
	}
	while ((e = readdir(d))) {
		char path[PATH_MAX];

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (!is_ours(skel->obj, e->d_name)) {
			fprintf(stderr, "Left %s/%s in place: pgwu did not create it\n", pin_dir,
				e->d_name);
			continue;
		}
		if (pin_path(path, sizeof(path), e->d_name) || unlink(path)) {
			err = -errno;
			fprintf(stderr, "Couldn't unpin %s/%s: %s\n", pin_dir, e->d_name,
				strerror(-err));
		}
	}
	closedir(d);
	if (rmdir(pin_dir)) {
		err = -errno;
		fprintf(stderr, "Couldn't remove %s: %s\n", pin_dir, strerror(-err));
		goto out;
	}
	if (print)
		printf("pgwu unloaded from %s\n", pin_dir);
out:
	pgwu_bpf__destroy(skel);
	return err;
}

int do_unload(const void *cfg)
{
	return pgwu_unload(true);
}

static int attach_one(const char *prog, const char *ifname, unsigned int ifindex, __u32 mode,
		      const char *mode_name)
{
	LIBBPF_OPTS(bpf_link_create_opts, opts, .flags = mode);
	char name[NAME_MAX], path[PATH_MAX];
	int prog_fd, fd, err;

	prog_fd = pinned_open(prog);
	if (prog_fd < 0)
		return prog_fd;
	snprintf(name, sizeof(name), PGWU_XDP_LINK_PREFIX "%s", ifname);
	err = pin_path(path, sizeof(path), name);
	if (err)
		goto out;
	fd = bpf_link_create(prog_fd, ifindex, BPF_XDP, &opts);
	if (fd < 0) {
		err = fd;
		fprintf(stderr, "Couldn't attach %s to %s (%s mode): %s\n", prog, ifname, mode_name,
			strerror(-err));
		goto out;
	}
	err = bpf_obj_pin(fd, path);
	if (err) {
		fprintf(stderr, "Couldn't pin %s: %s\n", path, strerror(-err));
		bpf_link_detach(fd);
	}
	close(fd);
out:
	close(prog_fd);
	return err;
}

/*
 * net.ipv4.conf.<sgi>.accept_local = 1, in this network namespace. xdp_sgi hands the kernel an
 * encapsulated packet it can't forward itself (too big for the access MTU without DF: the kernel
 * fragments it; SGW neighbour unresolved: the kernel resolves it), in the frame it came in: the
 * kernel receives it on SGi with our own GTP-U address as its source, which it drops as a martian
 * unless accept_local is set on that interface. Returns 0 or -errno.
 */
static int sgi_accept_local(const char *ifname)
{
	char path[PATH_MAX];
	int fd, err = 0;

	snprintf(path, sizeof(path), "/proc/sys/net/ipv4/conf/%s/accept_local", ifname);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "1\n", 2) != 2)
		err = -errno;
	if (fd >= 0)
		close(fd);
	return err;
}

/* Interfaces an attach takes per side: one per generator port pair (docs/ansible.md). */
#define MAX_ATTACH_PAIRS 4

/*
 * "a,b,c" into names[] and their ifindexes (in this network namespace). Returns the count, or
 * -EUSAGE (message printed) for an empty name, too many, or a name that is not an interface.
 */
static int split_ifnames(const char *list, const char *opt, char names[][IF_NAMESIZE],
			 unsigned int *idx)
{
	const char *p = list;
	int n = 0;

	for (;;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (!len || len >= IF_NAMESIZE) {
			fprintf(stderr, "--%s %s: an empty or too long interface name\n", opt, list);
			return -EUSAGE;
		}
		if (n == MAX_ATTACH_PAIRS) {
			fprintf(stderr, "--%s %s: at most %d interfaces\n", opt, list, MAX_ATTACH_PAIRS);
			return -EUSAGE;
		}
		memcpy(names[n], p, len);
		names[n][len] = '\0';
		idx[n] = if_nametoindex(names[n]);
		if (!idx[n]) {
			fprintf(stderr, "No interface %s (--%s) in this network namespace\n", names[n], opt);
			return -ENODEV;
		}
		n++;
		if (!end)
			return n;
		p = end + 1;
	}
}

int do_attach(const void *cfg)
{
	static const __u32 modes[] = { XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE };
	static const char *const mode_names[] = { "native", "generic" };
	const struct attach_opts *o = cfg;
	char names[2 * MAX_ATTACH_PAIRS][IF_NAMESIZE];
	unsigned int idx[2 * MAX_ATTACH_PAIRS];
	bool loaded_here = false;
	int err, n, na, ns, i, j;

	/* one or more per side (comma lists): xdp_access on each access, xdp_sgi on each SGi; the
	 * programs' egress is the FIB's, so a route decides which pair a packet leaves on */
	na = split_ifnames(o->access.s, "access", names, idx);
	if (na < 0)
		return na;
	ns = split_ifnames(o->sgi.s, "sgi", names + na, idx + na);
	if (ns < 0)
		return ns;
	for (i = 0; i < na + ns; i++)
		for (j = i + 1; j < na + ns; j++)
			if (idx[i] == idx[j]) {
				fprintf(stderr, "%s is given twice (--access and --sgi take each interface "
					"once)\n", names[j]);
				return -EUSAGE;
			}
	if (!pgwu_is_loaded()) {
		err = pgwu_load(&load_defaults);
		if (err)
			return err;
		loaded_here = true;
	} else {
		n = count_xdp_links();
		if (n) {
			if (n > 0)
				fprintf(stderr, "pgwu is already attached in %s (run pgwu detach first)\n",
					pin_dir);
			return n > 0 ? -EBUSY : n;
		}
	}
	for (i = 0; i < na + ns; i++) {
		err = attach_one(i < na ? "xdp_access" : "xdp_sgi", names[i], idx[i],
				 modes[o->mode.v], mode_names[o->mode.v]);
		if (err) {
			detach_xdp_links(false);
			goto out;
		}
	}
	printf("attached xdp_access to %s and xdp_sgi to %s (%s mode)\n", o->access.s, o->sgi.s,
	       mode_names[o->mode.v]);
	for (i = na; i < na + ns; i++) {
		err = sgi_accept_local(names[i]);
		if (err)
			fprintf(stderr, "Warning: couldn't set net.ipv4.conf.%s.accept_local=1 (%s): "
				"downlink packets the kernel must fragment or resolve a neighbour for "
				"will be dropped as martians\n", names[i], strerror(-err));
		else
			printf("net.ipv4.conf.%s.accept_local=1: the kernel takes the encapsulated "
			       "packets xdp_sgi passes it (outer fragmentation, neighbour resolution)\n",
			       names[i]);
	}
	err = 0;
	if (!o->no_watch.set) {
		int pid = pgwu_watch_spawn();

		if (pid < 0)
			fprintf(stderr, "Couldn't start pgwu watch (the route cache stays unused): %s\n",
				pid == -ECHILD ? "it exited before it registered" : strerror(-pid));
		else
			printf("pgwu watch keeps the route cache correct (pid %d)\n", pid);
	}
out:
	if (err && loaded_here)
		pgwu_unload(false);
	return err;
}

int do_detach(const void *cfg)
{
	int fd, n;

	fd = pinned_open("config");
	if (fd < 0)
		return fd;
	close(fd);
	n = detach_xdp_links(true);
	if (n < 0)
		return n;
	if (n == 0) {
		fprintf(stderr, "pgwu is not attached to any interface\n");
		return -ENOENT;
	}
	return 0;
}
