// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pgwu_config.c: `pgwu config`, the running configuration (the config map) shown, or set then
 * shown, with what goes with it: the XDP attachments, the route cache's watcher, the next hops.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <bpf/bpf.h>
#include "pgwu_cli.h"
#include "consts.h"	/* PGWU_REPLY_*: shown by config */

#define PGWU_STR_(x) #x
#define PGWU_STR(x) PGWU_STR_(x)

static int ifname_mac(const char *ifname, __u8 mac[6])
{
	struct ifreq ifr = {};
	int fd, err = 0;

	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	if (ioctl(fd, SIOCGIFHWADDR, &ifr))
		err = -errno;
	else
		memcpy(mac, ifr.ifr_hwaddr.sa_data, 6);
	close(fd);
	return err;
}

/* The XDP attachments, from the link_xdp_<ifname> pins. */
static int list_attached(char names[][IF_NAMESIZE], int max)
{
	struct dirent *e;
	int n = 0;
	DIR *d;

	d = opendir(pin_dir);
	if (!d)
		return 0;
	while ((e = readdir(d)) && n < max) {
		if (strncmp(e->d_name, PGWU_XDP_LINK_PREFIX, strlen(PGWU_XDP_LINK_PREFIX)))
			continue;
		snprintf(names[n++], IF_NAMESIZE, "%s", e->d_name + strlen(PGWU_XDP_LINK_PREFIX));
	}
	closedir(d);
	return n;
}

/* The cache is only correct with the neighbour hooks and the watcher's exit hook attached. */
static bool fib_tracing_attached(void)
{
	static const char *const links[] = {
		PGWU_LINK_PREFIX "fib_gen_neigh_update", PGWU_LINK_PREFIX "fib_gen_neigh_timer",
		PGWU_LINK_PREFIX "fib_gen_neigh_release", PGWU_LINK_PREFIX "fib_gen_watch_exit",
	};
	char path[PATH_MAX];

	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++)
		if (pin_path(path, sizeof(path), links[i]) || access(path, F_OK))
			return false;
	return true;
}

static const char *const side_names[PGWU_SIDE_MAX] = { "access", "sgi" };

static void nexthop_str(const struct pgwu_nexthop *nh, char *buf, size_t len)
{
	char ifname[IF_NAMESIZE] = "?", s[18], d[18];

	if (!nh->ifindex) {
		snprintf(buf, len, "fib");
		return;
	}
	if (!if_indextoname(nh->ifindex, ifname))
		snprintf(ifname, sizeof(ifname), "?");
	snprintf(buf, len, "%s (ifindex %u) %s -> %s", ifname, nh->ifindex, mac_str(nh->smac, s),
		 mac_str(nh->dmac, d));
}

/* The tgid of the registered `pgwu watch` (fib_gen[1]), 0 when there is none. */
static __u64 fib_watcher(void)
{
	int fd = pinned_open("fib_gen");
	__u64 v = 0;

	if (fd >= 0) {
		v = fib_watcher_read(fd);
		close(fd);
	}
	return v;
}

/* fib_gen[2]: the route cache is keyed by source too (pgwu watch saw IPv4 policy rules). */
static bool fib_by_src(void)
{
	int fd = pinned_open("fib_gen");
	__u32 two = 2;
	__u64 v = 0;

	if (fd >= 0) {
		bpf_map_lookup_elem(fd, &two, &v);
		close(fd);
	}
	return v != 0;
}

static void config_print(const struct pgwu_config *c, bool json)
{
	__u64 watcher = fib_watcher();
	char attached[8][IF_NAMESIZE], a[16], m[16], buf[128], a6[INET6_ADDRSTRLEN];
	int n = list_attached(attached, 8), len = mask_len(c->ue_pool_mask);

	if (len >= 0)
		snprintf(m, sizeof(m), "%d", len);
	else
		ip_str(c->ue_pool_mask, m);
	if (!json) {
		printf("%-18s %s\n", "local address", ip_str(c->local_addr, a));
		printf("%-18s %s\n", "local IPv6 address", inet_ntop(AF_INET6, c->local_addr6, a6, sizeof(a6)));
		printf("%-18s %s\n", "N3 IPv6 address", inet_ntop(AF_INET6, c->n3_addr6, a6, sizeof(a6)));
		printf("%-18s %s/%s\n", "UE pool", ip_str(c->ue_pool_addr, a), m);
		printf("%-18s %s\n", "checksum", c->flags & PGWU_CFG_CSUM ? "on" : "off");
		if (!(c->flags & PGWU_CFG_FIB_CACHE))
			printf("%-18s off\n", "FIB cache");
		else if (watcher)
			printf("%-18s on (pgwu watch: pid %llu)%s\n", "FIB cache", (unsigned long long)watcher,
			       fib_by_src() ? ", keyed by source: ip rules present" : "");
		else
			printf("%-18s on, unused until pgwu watch runs\n", "FIB cache");
		printf("%-18s %u\n", "restart counter", c->restart_counter);
		printf("%-18s %s\n", "replies", c->flags & PGWU_CFG_NO_ERR_IND ? "off" :
		       "on: Error Indication, Supported Extension Headers Notification, ICMP ("
		       PGWU_STR(PGWU_REPLY_BURST) " at once, " PGWU_STR(PGWU_REPLY_RATE) "/s per peer)");
		printf("%-18s %s\n", "inner csum check", c->flags & PGWU_CFG_NO_INNER_CSUM_CHECK ? "off" :
		       "on");
		printf("%-18s %s\n", "outer UDP sport", c->flags & PGWU_CFG_SPORT_FIXED ?
		       "2152 (--sport-entropy off)" : "from the inner flow (49152-65535)");
		for (int s = 0; s < PGWU_SIDE_MAX; s++) {
			char label[32];

			nexthop_str(&c->nexthop[s], buf, sizeof(buf));
			snprintf(label, sizeof(label), "next hop %s", side_names[s]);
			printf("%-18s %s\n", label, buf);
		}
		for (int s = 0; s < PGWU_SIDE_MAX; s++) {
			char label[32];

			snprintf(label, sizeof(label), "VLAN %s", side_names[s]);
			if (c->egress_vlan[s])
				printf("%-18s %u\n", label, c->egress_vlan[s]);
			else
				printf("%-18s none\n", label);
		}
		printf("%-18s", "attached to");
		for (int i = 0; i < n; i++)
			printf(" %s", attached[i]);
		printf("%s\n", n ? "" : " nothing");
		return;
	}
	printf("{\"local_addr\": \"%s\", ", ip_str(c->local_addr, a));
	printf("\"local_addr6\": \"%s\", ", inet_ntop(AF_INET6, c->local_addr6, a6, sizeof(a6)));
	printf("\"n3_addr6\": \"%s\", ", inet_ntop(AF_INET6, c->n3_addr6, a6, sizeof(a6)));
	printf("\"ue_pool\": \"%s/%s\", ", ip_str(c->ue_pool_addr, a), m);
	printf("\"csum\": \"%s\", \"fib_cache\": \"%s\", \"fib_watcher_pid\": %llu, "
	       "\"restart_counter\": %u, \"err_ind\": \"%s\", \"inner_csum_check\": \"%s\", "
	       "\"sport_entropy\": \"%s\", \"fib_cache_by_source\": %s, ",
	       c->flags & PGWU_CFG_CSUM ? "on" : "off", c->flags & PGWU_CFG_FIB_CACHE ? "on" : "off",
	       (unsigned long long)watcher, c->restart_counter,
	       c->flags & PGWU_CFG_NO_ERR_IND ? "off" : "on",
	       c->flags & PGWU_CFG_NO_INNER_CSUM_CHECK ? "off" : "on",
	       c->flags & PGWU_CFG_SPORT_FIXED ? "off" : "on", fib_by_src() ? "true" : "false");
	printf("\"nexthop\": {");
	for (int s = 0; s < PGWU_SIDE_MAX; s++) {
		const struct pgwu_nexthop *nh = &c->nexthop[s];
		char ifname[IF_NAMESIZE], sm[18], dm[18];

		printf("%s\"%s\": ", s ? ", " : "", side_names[s]);
		if (!nh->ifindex) {
			printf("\"fib\"");
			continue;
		}
		printf("{\"ifindex\": %u, \"ifname\": ", nh->ifindex);
		if (if_indextoname(nh->ifindex, ifname))
			json_str(stdout, ifname);
		else
			printf("null");
		printf(", \"smac\": \"%s\", \"dmac\": \"%s\"}", mac_str(nh->smac, sm),
		       mac_str(nh->dmac, dm));
	}
	printf("}, \"vlan\": {\"access\": %u, \"sgi\": %u}, \"attached\": [",
	       c->egress_vlan[PGWU_SIDE_ACCESS], c->egress_vlan[PGWU_SIDE_SGI]);
	for (int i = 0; i < n; i++) {
		printf(i ? ", " : "");
		json_str(stdout, attached[i]);
	}
	printf("]}\n");
}

int do_config(const void *cfg)
{
	const struct config_opts *o = cfg;
	struct pgwu_config c;
	int fd, lock, err;
	__u32 zero = 0;

	fd = pinned_open("config");
	if (fd < 0)
		return fd;
	lock = pin_dir_lock();		/* read-modify-write: one pgwu writer at a time */
	if (lock < 0) {
		close(fd);
		return lock;
	}
	err = config_read(fd, &c);
	if (err)
		goto out;
	if (o->local_addr.set)
		c.local_addr = o->local_addr.addr;
	if (o->local_addr6.set)
		memcpy(c.local_addr6, o->local_addr6.addr, 16);
	if (o->n3_addr6.set)
		memcpy(c.n3_addr6, o->n3_addr6.addr, 16);
	if (o->ue_pool.set) {
		c.ue_pool_addr = o->ue_pool.addr;
		c.ue_pool_mask = o->ue_pool.mask;
	}
	if (o->csum.set)
		c.flags = o->csum.v ? c.flags | PGWU_CFG_CSUM : c.flags & ~PGWU_CFG_CSUM;
	if (o->fib_cache.set) {
		if (o->fib_cache.v && !fib_tracing_attached()) {
			fprintf(stderr, "Can't turn the FIB cache on: the fib_gen_ tracing programs that "
				"keep it correct are not attached (see pgwu load's warning)\n");
			err = -EOPNOTSUPP;
			goto out;
		}
		c.flags = o->fib_cache.v ? c.flags | PGWU_CFG_FIB_CACHE :
			  c.flags & ~PGWU_CFG_FIB_CACHE;
	}
	if (o->err_ind.set)
		c.flags = o->err_ind.v ? c.flags & ~PGWU_CFG_NO_ERR_IND : c.flags | PGWU_CFG_NO_ERR_IND;
	if (o->inner_csum_check.set)
		c.flags = o->inner_csum_check.v ? c.flags & ~PGWU_CFG_NO_INNER_CSUM_CHECK :
			  c.flags | PGWU_CFG_NO_INNER_CSUM_CHECK;
	if (o->sport_entropy.set)
		c.flags = o->sport_entropy.v ? c.flags & ~PGWU_CFG_SPORT_FIXED :
			  c.flags | PGWU_CFG_SPORT_FIXED;
	for (int s = 0; s < PGWU_SIDE_MAX; s++) {
		struct pgwu_nexthop *nh = &c.nexthop[s];

		if (o->vlan.side_set[s])
			c.egress_vlan[s] = o->vlan.id[s];
		if (!o->nexthop.side_set[s])
			continue;
		memset(nh, 0, sizeof(*nh));
		if (!o->nexthop.ifname[s])
			continue;
		nh->ifindex = if_nametoindex(o->nexthop.ifname[s]);
		if (!nh->ifindex) {
			fprintf(stderr, "No interface %s (--nexthop %s) in this network namespace\n",
				o->nexthop.ifname[s], side_names[s]);
			err = -ENODEV;
			goto out;
		}
		err = ifname_mac(o->nexthop.ifname[s], nh->smac);
		if (err) {
			fprintf(stderr, "Couldn't read the MAC address of %s: %s\n",
				o->nexthop.ifname[s], strerror(-err));
			goto out;
		}
		memcpy(nh->dmac, o->nexthop.dmac[s], 6);
	}
	if (o->local_addr.set || o->local_addr6.set || o->n3_addr6.set || o->ue_pool.set || o->csum.set || o->fib_cache.set ||
	    o->nexthop.set || o->vlan.set || o->err_ind.set || o->inner_csum_check.set ||
	    o->sport_entropy.set) {
		err = bpf_map_update_elem(fd, &zero, &c, BPF_ANY);
		if (err) {
			fprintf(stderr, "Couldn't write the config map: %s\n", strerror(-err));
			goto out;
		}
	}
	config_print(&c, o->json.set);
out:
	close(lock);
	close(fd);
	return err;
}
