// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#define _GNU_SOURCE
/*
 * pgwu: the PGW-U's control tool. Every command but load and attach works on the objects pinned
 * in PIN_DIR (bpf_obj_get), so each call is stateless and any number of them can run in turn.
 *
 * This file holds the command line as tables (options, commands), main(), which only dispatches,
 * and the config and stats commands. load/unload/attach/detach: pgwu_load.c; session: pgwu_session.c;
 * metrics: pgwu_metrics.c; the table parser: pgwu_params.c.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "pgwu_cli.h"
#include "consts.h"	/* PGWU_REPLY_*: shown by config */

#define PGWU_STR_(x) #x
#define PGWU_STR(x) PGWU_STR_(x)

/* Names of enum pgwu_reason, in its order: the enum's names lower-cased without PGWU_R_. */
const char *const pgwu_reason_names[PGWU_REASON_MAX] = {
	[PGWU_R_UL_FWD] = "ul_fwd",
	[PGWU_R_DL_FWD] = "dl_fwd",
	[PGWU_R_ECHO_REPLY] = "echo_reply",
	[PGWU_R_PASS_NOT_IPV4] = "pass_not_ipv4",
	[PGWU_R_PASS_NOT_GTPU] = "pass_not_gtpu",
	[PGWU_R_PASS_NOT_UE] = "pass_not_ue",
	[PGWU_R_SIG_ECHO_RESPONSE] = "sig_echo_response",
	[PGWU_R_SIG_ERROR_IND] = "sig_error_ind",
	[PGWU_R_SIG_END_MARKER] = "sig_end_marker",
	[PGWU_R_SIG_SUPP_EXT_NOTIF] = "sig_supp_ext_notif",
	[PGWU_R_PASS_NO_NEIGH] = "pass_no_neigh",
	[PGWU_R_PASS_FIB_OTHER] = "pass_fib_other",
	[PGWU_R_DROP_TRUNC_ETH] = "drop_trunc_eth",
	[PGWU_R_DROP_TRUNC_IP] = "drop_trunc_ip",
	[PGWU_R_DROP_BAD_IP] = "drop_bad_ip",
	[PGWU_R_DROP_OUTER_FRAG] = "drop_outer_frag",
	[PGWU_R_DROP_TRUNC_UDP] = "drop_trunc_udp",
	[PGWU_R_DROP_BAD_UDP_LEN] = "drop_bad_udp_len",
	[PGWU_R_DROP_TRUNC_GTP] = "drop_trunc_gtp",
	[PGWU_R_DROP_GTP_VERSION] = "drop_gtp_version",
	[PGWU_R_DROP_GTP_BAD_LEN] = "drop_gtp_bad_len",
	[PGWU_R_DROP_GTP_BAD_EXT] = "drop_gtp_bad_ext",
	[PGWU_R_DROP_GTP_UNKNOWN_MSG] = "drop_gtp_unknown_msg",
	[PGWU_R_DROP_UNKNOWN_TEID] = "drop_unknown_teid",
	[PGWU_R_DROP_INNER_NOT_IPV4] = "drop_inner_not_ipv4",
	[PGWU_R_DROP_INNER_BAD] = "drop_inner_bad",
	[PGWU_R_DROP_SPOOFED] = "drop_spoofed",
	[PGWU_R_DROP_TTL_EXPIRED] = "drop_ttl_expired",
	[PGWU_R_DROP_BAD_IP_DL] = "drop_bad_ip_dl",
	[PGWU_R_DROP_UNKNOWN_UE] = "drop_unknown_ue",
	[PGWU_R_DROP_NO_ROUTE] = "drop_no_route",
	[PGWU_R_DROP_ADJUST] = "drop_adjust",
	[PGWU_R_DROP_GTP_EXT_UNSUPPORTED] = "drop_gtp_ext_unsupported",
	[PGWU_R_DROP_ECHO_BAD_SRC] = "drop_echo_bad_src",
	[PGWU_R_DROP_INNER_CSUM] = "drop_inner_csum",
	[PGWU_R_DROP_FRAG_NEEDED] = "drop_frag_needed",
	[PGWU_R_DROP_QFI_MISMATCH] = "drop_qfi_mismatch",
	[PGWU_R_PASS_OUTER_FRAG] = "pass_outer_frag",
	[PGWU_R_DROP_NOT_CONFIGURED] = "drop_not_configured",
};
/* A reason added to the enum without a name here fails the build (or leaves a NULL: see main). */
_Static_assert(sizeof(pgwu_reason_names) / sizeof(pgwu_reason_names[0]) == PGWU_REASON_MAX,
	       "pgwu_reason_names[] must name every enum pgwu_reason");
_Static_assert(PGWU_R_PASS_OUTER_FRAG == PGWU_REASON_MAX - 2,
	       "enum pgwu_reason changed: update pgwu_reason_names[]");
_Static_assert(PGWU_R_DROP_NOT_CONFIGURED == PGWU_REASON_MAX - 1,
	       "enum pgwu_reason changed: update pgwu_reason_names[]");

/* Names of enum pgwu_event, in its order: the enum's names lower-cased without PGWU_EV_. */
const char *const pgwu_event_names[PGWU_EVENT_MAX] = {
	[PGWU_EV_ERR_IND_SENT] = "err_ind_sent",
	[PGWU_EV_ERR_IND_RATE_LIMITED] = "err_ind_rate_limited",
	[PGWU_EV_SUPP_EXT_SENT] = "supp_ext_sent",
	[PGWU_EV_SUPP_EXT_RATE_LIMITED] = "supp_ext_rate_limited",
	[PGWU_EV_ICMP_TIME_EXCEEDED_SENT] = "icmp_time_exceeded_sent",
	[PGWU_EV_ICMP_FRAG_NEEDED_SENT] = "icmp_frag_needed_sent",
	[PGWU_EV_ICMP_RATE_LIMITED] = "icmp_rate_limited",
};
_Static_assert(sizeof(pgwu_event_names) / sizeof(pgwu_event_names[0]) == PGWU_EVENT_MAX,
	       "pgwu_event_names[] must name every enum pgwu_event");

/* Names of enum pgwu_reasm_stat, in its order: lower-cased without PGWU_RA_. */
const char *const pgwu_reasm_names[PGWU_RA_MAX] = {
	[PGWU_RA_RECEIVED] = "received",
	[PGWU_RA_FORWARDED] = "forwarded",
	[PGWU_RA_DROP_NOT_ACCESS] = "drop_not_access",
	[PGWU_RA_DROP_TRUNC_GTP] = "drop_trunc_gtp",
	[PGWU_RA_DROP_GTP_VERSION] = "drop_gtp_version",
	[PGWU_RA_DROP_GTP_BAD_LEN] = "drop_gtp_bad_len",
	[PGWU_RA_DROP_NOT_GPDU] = "drop_not_gpdu",
	[PGWU_RA_DROP_GTP_BAD_EXT] = "drop_gtp_bad_ext",
	[PGWU_RA_DROP_GTP_EXT_UNSUPPORTED] = "drop_gtp_ext_unsupported",
	[PGWU_RA_DROP_UNKNOWN_TEID] = "drop_unknown_teid",
	[PGWU_RA_DROP_QFI_MISMATCH] = "drop_qfi_mismatch",
	[PGWU_RA_DROP_INNER_NOT_IPV4] = "drop_inner_not_ipv4",
	[PGWU_RA_DROP_INNER_BAD] = "drop_inner_bad",
	[PGWU_RA_DROP_INNER_CSUM] = "drop_inner_csum",
	[PGWU_RA_DROP_SPOOFED] = "drop_spoofed",
	[PGWU_RA_DROP_TTL_EXPIRED] = "drop_ttl_expired",
	[PGWU_RA_DROP_SEND] = "drop_send",
};
_Static_assert(PGWU_RA_DROP_SEND == PGWU_RA_MAX - 1,
	       "enum pgwu_reasm_stat changed: update pgwu_reasm_names[]");

const char *const pgwu_verdict_names[PGWU_VERDICT_MAX] = {
	"aborted", "drop", "pass", "tx", "redirect"
};

const char *pin_dir = PGWU_DEFAULT_PIN_DIR;
bool verbose;

/* ---- common options ---- */

static struct opt_flag opt_verbose;
static struct opt_str opt_pin_dir;
static struct opt_str opt_netns;

static const struct opt common_opts[] = {
	{ .name = "verbose", .short_name = 'v', .type = OPT_FLAG, .ptr = &opt_verbose,
	  .help = "show libbpf's own messages (verifier log ...)" },
	{ .name = "pin-dir", .short_name = 'd', .type = OPT_STR, .ptr = &opt_pin_dir,
	  .metavar = "DIR",
	  .help = "where pgwu's maps, programs and links are pinned (default $PGWU_PIN_DIR or "
		  PGWU_DEFAULT_PIN_DIR ")" },
	{ .name = "netns", .short_name = 'n', .type = OPT_STR, .ptr = &opt_netns, .metavar = "NS",
	  .help = "interfaces are in network namespace NS (/run/netns/NS or a path); use this, "
		  "not 'ip netns exec', which hides /sys/fs/bpf" },
	OPT_END
};

static int prepare(void)
{
	const char *env = getenv("PGWU_PIN_DIR");
	char path[PATH_MAX];
	int fd;

	verbose = opt_verbose.set;
	if (opt_pin_dir.set)
		pin_dir = opt_pin_dir.s;
	else if (env && *env)
		pin_dir = env;
	if (!opt_netns.set)
		return 0;
	snprintf(path, sizeof(path), strchr(opt_netns.s, '/') ? "%s" : "/run/netns/%s",
		 opt_netns.s);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET)) {
		int err = -errno;

		fprintf(stderr, "Couldn't enter network namespace %s: %s\n", path, strerror(-err));
		if (fd >= 0)
			close(fd);
		return err;
	}
	close(fd);
	return 0;
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (!verbose)
		return 0;
	return vfprintf(stderr, fmt, args);
}

/* ---- config ---- */

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
	char attached[8][IF_NAMESIZE], a[16], m[16], buf[128];
	int n = list_attached(attached, 8), len = mask_len(c->ue_pool_mask);

	if (len >= 0)
		snprintf(m, sizeof(m), "%d", len);
	else
		ip_str(c->ue_pool_mask, m);
	if (!json) {
		printf("%-18s %s\n", "local address", ip_str(c->local_addr, a));
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

static int do_config(const void *cfg)
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
	if (o->local_addr.set || o->ue_pool.set || o->csum.set || o->fib_cache.set ||
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

/* ---- stats ---- */

static bool bearer_active(const struct bearer *b)
{
	return b->ul_packets || b->dl_packets;
}

static void stats_print_json(const struct pgwu_snapshot *s, const __u64 *ev, bool bearers)
{
	struct pgwu_counter tot[PGWU_VERDICT_MAX] = {};
	const struct bearer_table *t = &s->bearers;
	bool first = true;

	printf("{\"reasons\": {");
	for (int r = 0; r < PGWU_REASON_MAX; r++) {
		printf("%s\n  \"%s\": {", r ? "," : "", pgwu_reason_names[r]);
		for (int v = 0; v < PGWU_VERDICT_MAX; v++) {
			const struct pgwu_counter *c = &s->stats[r * PGWU_VERDICT_MAX + v];

			printf("%s\"%s\": {\"packets\": %llu, \"bytes\": %llu}", v ? ", " : "",
			       pgwu_verdict_names[v], (unsigned long long)c->packets,
			       (unsigned long long)c->bytes);
			tot[v].packets += c->packets;
			tot[v].bytes += c->bytes;
		}
		printf("}");
	}
	printf("\n},\n\"verdicts\": {");
	for (int v = 0; v < PGWU_VERDICT_MAX; v++)
		printf("%s\"%s\": {\"packets\": %llu, \"bytes\": %llu}", v ? ", " : "",
		       pgwu_verdict_names[v], (unsigned long long)tot[v].packets,
		       (unsigned long long)tot[v].bytes);
	printf("},\n\"bearers\": {\"uplink\": %zu, \"downlink\": %zu, \"capacity\": %u, "
	       "\"usage\": {\"uplink\": {\"packets\": %llu, \"bytes\": %llu}, "
	       "\"downlink\": {\"packets\": %llu, \"bytes\": %llu}}},\n",
	       t->n_ul, t->n_dl, t->cap_ul < t->cap_dl ? t->cap_ul : t->cap_dl,
	       (unsigned long long)s->ul_packets, (unsigned long long)s->ul_bytes,
	       (unsigned long long)s->dl_packets, (unsigned long long)s->dl_bytes);
	printf("\"events\": {");
	for (int e = 0; e < PGWU_EVENT_MAX; e++)
		printf("%s\"%s\": %llu", e ? ", " : "", pgwu_event_names[e], (unsigned long long)ev[e]);
	printf("},\n");
	printf("\"fib_generation\": %llu, \"fib_watcher_pid\": %llu", (unsigned long long)s->fib_gen,
	       (unsigned long long)s->fib_watcher);
	printf(",\n\"reassembler\": {\"pid\": %llu", (unsigned long long)s->reasm_pid);
	for (int i = 0; i < PGWU_RA_MAX; i++)
		printf(", \"%s\": %llu", pgwu_reasm_names[i], (unsigned long long)s->reasm[i]);
	printf("}");
	if (bearers) {
		printf(",\n\"active_bearers\": [");
		for (size_t i = 0; i < t->n; i++) {
			if (!bearer_active(&t->b[i]))
				continue;
			printf(first ? "\n  " : ",\n  ");
			bearer_print_json(stdout, &t->b[i]);
			first = false;
		}
		printf("\n]");
	}
	printf("}\n");
}

static void stats_print(const struct pgwu_snapshot *s, const __u64 *ev, bool bearers)
{
	struct pgwu_counter tot[PGWU_VERDICT_MAX] = {};
	const struct bearer_table *t = &s->bearers;

	printf("%-22s %-9s %16s %20s\n", "REASON", "VERDICT", "PACKETS", "BYTES");
	for (int r = 0; r < PGWU_REASON_MAX; r++) {
		for (int v = 0; v < PGWU_VERDICT_MAX; v++) {
			const struct pgwu_counter *c = &s->stats[r * PGWU_VERDICT_MAX + v];

			tot[v].packets += c->packets;
			tot[v].bytes += c->bytes;
			if (!c->packets && !c->bytes)
				continue;
			printf("%-22s %-9s %16llu %20llu\n", pgwu_reason_names[r],
			       pgwu_verdict_names[v], (unsigned long long)c->packets,
			       (unsigned long long)c->bytes);
		}
	}
	printf("\n%-32s %16s %20s\n", "TOTAL BY VERDICT", "PACKETS", "BYTES");
	for (int v = 0; v < PGWU_VERDICT_MAX; v++)
		printf("%-32s %16llu %20llu\n", pgwu_verdict_names[v],
		       (unsigned long long)tot[v].packets, (unsigned long long)tot[v].bytes);
	printf("\n%-32s %16s\n", "EVENT", "COUNT");
	for (int e = 0; e < PGWU_EVENT_MAX; e++)
		printf("%-32s %16llu\n", pgwu_event_names[e], (unsigned long long)ev[e]);
	printf("\nbearers: %zu uplink, %zu downlink, capacity %u\n", t->n_ul, t->n_dl,
	       t->cap_ul < t->cap_dl ? t->cap_ul : t->cap_dl);
	printf("bearer usage: uplink %llu packets %llu bytes, downlink %llu packets %llu bytes\n",
	       (unsigned long long)s->ul_packets, (unsigned long long)s->ul_bytes,
	       (unsigned long long)s->dl_packets, (unsigned long long)s->dl_bytes);
	printf("FIB generation: %llu, watcher: %s", (unsigned long long)s->fib_gen,
	       s->fib_watcher ? "pid " : "none (the cache is unused)");
	if (s->fib_watcher)
		printf("%llu", (unsigned long long)s->fib_watcher);
	printf("\n");
	printf("\nreassembler (outer fragments): ");
	if (s->reasm_pid)
		printf("pgwu reassemble pid %llu\n", (unsigned long long)s->reasm_pid);
	else
		printf("none (outer fragments are dropped)\n");
	for (int i = 0; i < PGWU_RA_MAX; i++)
		if (i < 2 || s->reasm[i])	/* received and forwarded always, drops when any */
			printf("  %-30s %16llu\n", pgwu_reasm_names[i], (unsigned long long)s->reasm[i]);
	if (!bearers)
		return;
	printf("\nactive bearers:\n");
	bearer_print_header(stdout);
	for (size_t i = 0; i < t->n; i++)
		if (bearer_active(&t->b[i]))
			bearer_print_row(stdout, &t->b[i]);
}

static int do_stats(const void *cfg)
{
	const struct stats_opts *o = cfg;
	__u64 ev[PGWU_EVENT_MAX];
	struct pgwu_snapshot s;
	int err;

	err = snapshot_read(&s);
	if (err)
		return err;
	err = events_read(ev);
	if (err) {
		snapshot_free(&s);
		return err;
	}
	if (o->json.set)
		stats_print_json(&s, ev, o->bearers.set);
	else
		stats_print(&s, ev, o->bearers.set);
	snapshot_free(&s);
	return 0;
}

/* ---- the tables ---- */

static const char *const onoff[] = { "off", "on", NULL };
static const char *const onoff_default[] = { "off", "on", "default", NULL };
static const char *const modes[] = { "native", "generic", NULL };

static const struct opt load_options[] = {
	{ .name = "max-bearers", .type = OPT_U32, .off = offsetof(struct load_opts, max_bearers),
	  .metavar = "N", .min = 1, .max = PGWU_MAX_MAX_BEARERS,
	  .help = "capacity of each bearer table (default 1048576)" },
	{ .name = "local-addr", .type = OPT_ADDR, .off = offsetof(struct load_opts, local_addr),
	  .metavar = "A", .help = "this gateway's GTP-U address (default none)" },
	{ .name = "ue-pool", .type = OPT_PREFIX, .off = offsetof(struct load_opts, ue_pool),
	  .metavar = "A/LEN", .help = "UE address pool (default 0.0.0.0/0: every address)" },
	{ .name = "csum", .type = OPT_ENUM, .off = offsetof(struct load_opts, csum),
	  .metavar = "on|off", .choices = onoff,
	  .help = "outer UDP checksum for bearers without their own setting (default on)" },
	{ .name = "sport-entropy", .type = OPT_ENUM, .off = offsetof(struct load_opts, sport_entropy),
	  .metavar = "on|off", .choices = onoff,
	  .help = "downlink outer UDP source port from the inner flow (default on; off: 2152)" },
	{ .name = "no-fib-cache", .type = OPT_FLAG, .off = offsetof(struct load_opts, no_fib_cache),
	  .help = "don't cache route lookups" },
	{ .name = "restart-counter", .type = OPT_U32,
	  .off = offsetof(struct load_opts, restart_counter), .metavar = "N", .min = 0, .max = 255,
	  .help = "Recovery IE value in Echo Responses (default 0)" },
	OPT_END
};

static const struct opt attach_options[] = {
	{ .name = "access", .type = OPT_STR, .off = offsetof(struct attach_opts, access),
	  .metavar = "IF", .required = true,
	  .help = "access (S1-U/S5) interface: xdp_access, uplink GTP-U in" },
	{ .name = "sgi", .type = OPT_STR, .off = offsetof(struct attach_opts, sgi),
	  .metavar = "IF", .required = true, .help = "SGi interface: xdp_sgi, downlink IP in" },
	{ .name = "mode", .type = OPT_ENUM, .off = offsetof(struct attach_opts, mode),
	  .metavar = "native|generic", .choices = modes, .help = "XDP mode (default native)" },
	{ .name = "no-watch", .type = OPT_FLAG, .off = offsetof(struct attach_opts, no_watch),
	  .help = "don't start `pgwu watch` (the route cache then stays unused)" },
	OPT_END
};

static const struct opt config_options[] = {
	{ .name = "local-addr", .type = OPT_ADDR, .off = offsetof(struct config_opts, local_addr),
	  .metavar = "A", .help = "this gateway's GTP-U address" },
	{ .name = "ue-pool", .type = OPT_PREFIX, .off = offsetof(struct config_opts, ue_pool),
	  .metavar = "A/LEN", .help = "UE address pool" },
	{ .name = "csum", .type = OPT_ENUM, .off = offsetof(struct config_opts, csum),
	  .metavar = "on|off", .choices = onoff, .help = "default outer UDP checksum" },
	{ .name = "fib-cache", .type = OPT_ENUM, .off = offsetof(struct config_opts, fib_cache),
	  .metavar = "on|off", .choices = onoff, .help = "cache route lookups" },
	{ .name = "nexthop", .type = OPT_NEXTHOP, .off = offsetof(struct config_opts, nexthop),
	  .metavar = "SIDE IFNAME DSTMAC|SIDE fib",
	  .help = "static next hop for packets sent out of SIDE (access|sgi): out of IFNAME, from "
		  "its MAC to DSTMAC; 'fib': route lookup (default). Repeatable" },
	{ .name = "vlan", .type = OPT_VLAN, .off = offsetof(struct config_opts, vlan),
	  .metavar = "SIDE ID", .help = "VLAN ID pushed on frames sent out of SIDE, 0: none" },
	{ .name = "err-ind", .type = OPT_ENUM, .off = offsetof(struct config_opts, err_ind),
	  .metavar = "on|off", .choices = onoff,
	  .help = "answer an unknown TEID with an Error Indication, an unknown extension header "
		  "with a Supported Extension Headers Notification, an expired TTL or a packet too big "
		  "to encapsulate with an ICMP error; rate-limited per peer (default on)" },
	{ .name = "inner-csum-check", .type = OPT_ENUM,
	  .off = offsetof(struct config_opts, inner_csum_check), .metavar = "on|off", .choices = onoff,
	  .help = "drop uplink packets whose inner IPv4 header checksum is wrong (default on)" },
	{ .name = "sport-entropy", .type = OPT_ENUM, .off = offsetof(struct config_opts, sport_entropy),
	  .metavar = "on|off", .choices = onoff,
	  .help = "downlink outer UDP source port from the inner flow, so a receiver's RSS spreads "
		  "a bearer's flows (default on; off: 2152, for peers that need it)" },
	{ .name = "json", .type = OPT_FLAG, .off = offsetof(struct config_opts, json),
	  .help = "print JSON" },
	OPT_END
};

#define SESSION_TEID(req) { .name = "teid", .type = OPT_TEID, \
	.off = offsetof(struct session_opts, teid), .metavar = "T", .required = req, \
	.help = "local TEID (the SGW sends to it), decimal or 0x-hex" }
#define SESSION_UE(req) { .name = "ue", .type = OPT_ADDR, .off = offsetof(struct session_opts, ue), \
	.metavar = "A", .required = req, .help = "UE address" }
#define SESSION_JSON { .name = "json", .type = OPT_FLAG, \
	.off = offsetof(struct session_opts, json), .help = "print JSON" }

static const struct opt session_add_options[] = {
	SESSION_TEID(true),
	SESSION_UE(true),
	{ .name = "sgw", .type = OPT_ADDR, .off = offsetof(struct session_opts, sgw),
	  .metavar = "A", .required = true, .help = "SGW GTP-U address (downlink outer destination)" },
	{ .name = "sgw-teid", .type = OPT_TEID, .off = offsetof(struct session_opts, sgw_teid),
	  .metavar = "T", .required = true, .help = "TEID written in downlink G-PDUs" },
	{ .name = "csum", .type = OPT_ENUM, .off = offsetof(struct session_opts, csum),
	  .metavar = "on|off|default", .choices = onoff_default,
	  .help = "outer UDP checksum of this bearer (default: the global setting)" },
	{ .name = "qfi", .type = OPT_U32, .off = offsetof(struct session_opts, qfi),
	  .metavar = "N", .min = 0, .max = PGWU_QFI_MAX,
	  .help = "5G N3 QoS flow (0..63): downlink G-PDUs get a PDU Session Container with "
		  "it, uplink ones without an UL one carrying it are dropped (TS 38.415; "
		  "default: none)" },
	OPT_END
};

static const struct opt session_del_options[] = {
	SESSION_TEID(false),
	SESSION_UE(false),
	OPT_END
};

static const struct opt session_get_options[] = {
	SESSION_TEID(false),
	SESSION_UE(false),
	SESSION_JSON,
	OPT_END
};

static const struct opt session_list_options[] = {
	SESSION_JSON,
	OPT_END
};

static const struct opt session_load_options[] = {
	{ .type = OPT_STR, .off = offsetof(struct session_opts, file), .metavar = "FILE",
	  .required = true,
	  .help = "one bearer a line: TEID UE_ADDR SGW_ADDR SGW_TEID [csum=on|off|default] "
		  "[qfi=0..63]" },
	OPT_END
};

static const struct opt stats_options[] = {
	{ .name = "json", .type = OPT_FLAG, .off = offsetof(struct stats_opts, json),
	  .help = "print JSON (every reason and verdict, zeros too)" },
	{ .name = "bearers", .type = OPT_FLAG, .off = offsetof(struct stats_opts, bearers),
	  .help = "also list every bearer that carried traffic, with its counters" },
	OPT_END
};

static const struct opt metrics_options[] = {
	{ .name = "listen", .type = OPT_STR, .off = offsetof(struct metrics_opts, listen),
	  .metavar = "ADDR:PORT", .help = "where to serve /metrics (default 127.0.0.1:9464; "
	  "port 0: any free port, printed)" },
	OPT_END
};

static const struct opt watch_options[] = {
	{ .name = "daemon", .type = OPT_FLAG, .off = offsetof(struct watch_opts, daemon),
	  .help = "run in the background (attach starts one this way)" },
	OPT_END
};

static const struct opt reasm_options[] = {
	{ .name = "daemon", .type = OPT_FLAG, .off = offsetof(struct reasm_opts, daemon),
	  .help = "run in the background; returns once it is registered (or failed, saying why)" },
	OPT_END
};

static const struct opt path_options[] = {
	{ .name = "peer", .type = OPT_ADDR, .off = offsetof(struct path_opts, peer), .metavar = "A",
	  .help = "only this peer (default: every SGW a bearer names and every peer seen)" },
	{ .name = "send", .type = OPT_FLAG, .off = offsetof(struct path_opts, send),
	  .help = "send an Echo Request to each peer first, then wait for the responses" },
	{ .name = "wait", .type = OPT_U32, .off = offsetof(struct path_opts, wait), .metavar = "MS",
	  .min = 1, .max = 60000, .help = "how long --send waits for responses (default 1000)" },
	{ .name = "json", .type = OPT_FLAG, .off = offsetof(struct path_opts, json),
	  .help = "print JSON" },
	OPT_END
};

static const struct opt signalling_options[] = {
	{ .name = "json", .type = OPT_FLAG, .off = offsetof(struct signalling_opts, json),
	  .help = "print JSON" },
	OPT_END
};

static const struct opt pfcp_options[] = {
	{ .name = "listen", .type = OPT_STR, .off = offsetof(struct pfcp_opts, listen),
	  .metavar = "ADDR[:PORT]", .help = "where to serve PFCP (default 127.0.0.1:8805; port 0: any "
	  "free port, printed)" },
	{ .name = "node-id", .type = OPT_STR, .off = offsetof(struct pfcp_opts, node_id),
	  .metavar = "IPV4|FQDN", .help = "this UP's Node ID (default the listen address, or the "
	  "GTP-U address when listening on 0.0.0.0)" },
	{ .name = "max-sessions", .type = OPT_U32, .off = offsetof(struct pfcp_opts, max_sessions),
	  .metavar = "N", .min = 1, .max = PGWU_MAX_MAX_BEARERS,
	  .help = "sessions served at most (default and maximum: the bearer table capacity)" },
	{ .name = "heartbeat", .type = OPT_U32, .off = offsetof(struct pfcp_opts, heartbeat),
	  .metavar = "S", .min = 0, .max = 3600,
	  .help = "send a Heartbeat Request to each associated CP every S seconds (default 0: never)" },
	OPT_END
};

static const struct opt no_options[] = { OPT_END };

static const struct attach_opts attach_defaults = { .mode = { .v = 0 } };
static const struct session_opts session_defaults = { .csum = { .v = 2 } };
static const struct metrics_opts metrics_defaults = { .listen = { .s = "127.0.0.1:9464" } };
static const struct path_opts path_defaults = { .wait = { .v = 1000 } };
static const struct pfcp_opts pfcp_defaults = { .listen = { .s = "127.0.0.1:8805" } };

#define COMMAND(_name, _func, _opts, _type, _defaults, _help, _doc) { \
	.name = _name, .func = _func, .opts = _opts, .cfg_size = sizeof(_type), \
	.defaults = _defaults, .help = _help, .doc = _doc }

static const struct cmd session_cmds[] = {
	COMMAND("add", do_session_add, session_add_options, struct session_opts, &session_defaults,
		"add one bearer", "The TEID and the UE must be new, the UE and the SGW addresses hosts\n"
		"(not 0.0.0.0, 255.255.255.255 or 224.0.0.0/4); nothing is changed otherwise."),
	COMMAND("del", do_session_del, session_del_options, struct session_opts, &session_defaults,
		"delete one bearer (--teid T or --ue A)", NULL),
	COMMAND("get", do_session_get, session_get_options, struct session_opts, &session_defaults,
		"show one bearer and its usage counters (--teid T or --ue A)", NULL),
	COMMAND("list", do_session_list, session_list_options, struct session_opts,
		&session_defaults, "list every bearer with its usage counters, by TEID", NULL),
	COMMAND("load", do_session_load, session_load_options, struct session_opts,
		&session_defaults, "add the bearers of FILE, all or nothing",
		"The whole file is checked first (syntax, duplicates in it and against the tables,\n"
		"capacity, UE and SGW addresses that are hosts); errors are reported as FILE:LINE and\n"
		"nothing is added. FILE is read to its end whatever it is (a pipe, a FIFO); '-' is\n"
		"standard input. TEIDs are decimal or 0x-hex; '#' starts a comment; blank lines are\n"
		"ignored. The options after the four fields come in any order, each at most once:\n"
		"csum= as session add --csum, qfi= as session add --qfi."),
	COMMAND("unload", do_session_unload, session_load_options, struct session_opts,
		&session_defaults, "delete the bearers of FILE, all or nothing",
		"FILE is in the format of load. The whole file is checked first: every line must name\n"
		"an installed bearer (that TEID with that UE); errors are reported as FILE:LINE and\n"
		"nothing is deleted. Bearers not in FILE are not touched."),
	COMMAND("flush", do_session_flush, no_options, struct no_opts, NULL,
		"delete every bearer", NULL),
	CMD_END
};

static const struct cmd cmds[] = {
	COMMAND("load", do_load, load_options, struct load_opts, &load_defaults,
		"load the programs and maps and pin them in PIN_DIR",
		"Fails if PIN_DIR already holds a loaded pgwu; on failure PIN_DIR is left as it was."),
	COMMAND("unload", do_unload, no_options, struct no_opts, NULL,
		"detach everything and remove PIN_DIR", NULL),
	COMMAND("attach", do_attach, attach_options, struct attach_opts, &attach_defaults,
		"attach xdp_access and xdp_sgi (loads with defaults if nothing is loaded)",
		"Interfaces are looked up in the current network namespace (or --netns). Sets\n"
		"net.ipv4.conf.SGI.accept_local=1 there: the packets xdp_sgi encapsulates but\n"
		"leaves to the kernel (to fragment them, or to resolve the SGW's neighbour) carry\n"
		"our own address as source, which the kernel otherwise drops as martians."),
	COMMAND("detach", do_detach, no_options, struct no_opts, NULL,
		"detach both programs", NULL),
	COMMAND("config", do_config, config_options, struct config_opts, NULL,
		"show, or set then show, the running configuration", NULL),
	{ .name = "session", .sub = session_cmds, .help = "add, delete, show and bulk-load bearers" },
	COMMAND("stats", do_stats, stats_options, struct stats_opts, NULL,
		"counters by reason and verdict, bearer counts", NULL),
	COMMAND("metrics", do_metrics, metrics_options, struct metrics_opts, &metrics_defaults,
		"serve Prometheus metrics over HTTP (foreground, until SIGINT/SIGTERM)", NULL),
	COMMAND("watch", do_watch, watch_options, struct watch_opts, NULL,
		"keep the route cache correct: follow route, link and neighbour changes (foreground)",
		"Holds an rtnetlink socket whose filter bumps the route cache's generation on every\n"
		"route, address, rule, nexthop, link or neighbour change in this network namespace,\n"
		"and registers itself: the cache is used only while a registered watcher is alive\n"
		"(the kernel clears the registration when it exits, however it dies). Ends by itself\n"
		"when pgwu is unloaded. attach starts one in the background unless --no-watch."),
	COMMAND("reassemble", do_reassemble, reasm_options, struct reasm_opts, NULL,
		"take G-PDUs that arrive in outer IPv4 fragments (foreground, until SIGINT/SIGTERM)",
		"While it runs, xdp_access passes outer fragments of UDP to the GTP-U address to the\n"
		"kernel (pass_outer_frag) instead of dropping them (drop_outer_frag). The kernel\n"
		"reassembles them and delivers the datagram to UDP 2152 on the GTP-U address, where\n"
		"this process checks it as xdp_access checks a G-PDU (GTP-U header, extension headers,\n"
		"bearer by TEID, QFI, inner IPv4 header and checksum, anti-spoofing, TTL) and sends\n"
		"the inner packet (TTL - 1) through a raw socket: the kernel routes it to SGi. Only\n"
		"datagrams that came in on an interface xdp_access is attached to are taken. No\n"
		"replies (Error Indication, ICMP) and no per-bearer usage for these packets; counters:\n"
		"pgwu stats (reassembler), pgwu metrics (pgwu_reassembler_*). The kernel clears the\n"
		"registration when it exits, however it dies. One per PIN_DIR; run it in the PGW-U's\n"
		"network namespace (--netns). Ends by itself when pgwu is unloaded."),
	COMMAND("path", do_path, path_options, struct path_opts, &path_defaults,
		"GTP-U peers: state and restart counter from their Echo Responses",
		"A peer is up when its last Echo Response is not older than the last Echo Request\n"
		"sent to it, no-response when a request went unanswered, unprobed otherwise. The\n"
		"responses are read by xdp_access (TS 29.281 7.2.2), which keeps the peers map;\n"
		"--send sends the requests from the GTP-U address, port 2152 (7.2.1)."),
	COMMAND("signalling", do_signalling, signalling_options, struct signalling_opts, NULL,
		"Error Indications and End Markers received, by tunnel, with their bearer",
		"An Error Indication names a downlink tunnel (the SGW's TEID and address, TS 29.281\n"
		"7.3.1): the bearer sending to it. An End Marker names one of our TEIDs (7.3.2)."),
	COMMAND("pfcp", do_pfcp, pfcp_options, struct pfcp_opts, &pfcp_defaults,
		"serve PFCP (Sx/N4): sessions become bearers (foreground, until SIGINT/SIGTERM)",
		"A PFCP user-plane agent (3GPP TS 29.244): heartbeats, association setup/update/\n"
		"release, session establishment/modification/deletion. One session is one bearer in\n"
		"the tables `pgwu session` writes; F-TEIDs with CHOOSE get a free TEID whose slot in\n"
		"the direct index is free. A rejected request changes nothing. On exit the agent\n"
		"deletes the bearers of its sessions. Counters: pgwu metrics (pgwu_pfcp_*).\n"
		"See docs/pfcp.md."),
	{ .name = "help", .help = "show help for a command: pgwu help [COMMAND [SUBCOMMAND]]" },
	CMD_END
};

int main(int argc, char **argv)
{
	int err;

	cmd_set_common_opts(common_opts);
	cmd_set_prepare(prepare);
	libbpf_set_print(libbpf_print);
	err = cmd_dispatch(cmds, "pgwu", argc, argv);
	return err == -EUSAGE ? 2 : err ? 1 : 0;
}
