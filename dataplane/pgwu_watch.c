// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pgwu_watch.c: `pgwu watch`, what keeps the XDP route cache correct.
 *
 * The data plane caches bpf_fib_lookup results and trusts an entry only while fib_gen[0] is the
 * generation it was made under. Neighbour changes bump it from raw tracepoints (pgwu.bpf.c).
 * Route, address, rule and link changes have no tracepoint, and fentry/kprobes are not available
 * on every kernel; but the kernel announces each of them on rtnetlink. This process opens an
 * rtnetlink socket in its network namespace, subscribes to those groups, and attaches the pinned
 * socket filter nl_fib_gen to it: the filter bumps the generation when the kernel broadcasts the
 * change, in the task that made it, and drops the message, so the socket never fills and this
 * process never wakes for it. The process holds the socket and registers itself with
 * watch_register, run on itself with BPF_PROG_TEST_RUN, which writes its tgid into fib_gen[1]:
 * the XDP programs use the cache only while that is not 0, and fib_gen_watch_exit clears it when
 * this task exits, however it dies, so a dead watcher can't leave stale next hops in use. Every
 * 200 ms it checks that it is still registered (a second watcher that exited may have cleared the
 * slot) and that the data plane is still loaded; it ends by itself when it is not. It also keeps
 * fib_gen[2] (route cache keyed by source) in step with the IPv4 policy rules: set at start when
 * a rule besides the three defaults exists (the filter sets it as one is added), cleared within a
 * tick of the last one's removal.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <linux/fib_rules.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "pgwu_cli.h"
#include "pgwu_daemon.h"

#define TICK_MS 200

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	stop = 1;
}

/* Run watch_register on this task: a new generation, and fib_gen[1] = our tgid (as the kernel
 * sees it, which getpid() in a pid namespace would not). Returns 0 or -errno. */
static int register_watcher(int reg_fd, __u32 *tgid)
{
	return helper_register(reg_fd, tgid);
}

static bool still_loaded(void)
{
	char path[4096];

	return !pin_path(path, sizeof(path), "fib_gen") && !access(path, F_OK);
}

/* An rtnetlink socket on every group whose messages mean "a next hop may have changed". */
static int open_rtnl(int prog_fd)
{
	static const unsigned int groups[] = {
		RTNLGRP_LINK, RTNLGRP_NEIGH, RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV4_ROUTE,
		RTNLGRP_IPV4_RULE, RTNLGRP_NEXTHOP, RTNLGRP_IPV6_IFADDR, RTNLGRP_IPV6_ROUTE,
		RTNLGRP_IPV6_RULE,
	};
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
	unsigned int i;
	int sock, err;

	sock = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (sock < 0)
		return -errno;
	if (bind(sock, (struct sockaddr *)&sa, sizeof(sa)))
		goto fail;
	/* the filter first, so that no message is ever queued */
	if (setsockopt(sock, SOL_SOCKET, SO_ATTACH_BPF, &prog_fd, sizeof(prog_fd)))
		goto fail;
	for (i = 0; i < sizeof(groups) / sizeof(groups[0]); i++)
		if (setsockopt(sock, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, &groups[i], sizeof(groups[i])))
			goto fail;
	return sock;
fail:
	err = -errno;
	close(sock);
	return err;
}

/*
 * Does this namespace have a policy rule of `family` (AF_INET, AF_INET6) besides those every
 * namespace starts with (0 local, 32766 main, and IPv4's 32767 default)? With one, a route can
 * depend on the source address and both route caches must be keyed by it (fib_gen[2]).
 * Returns 1, 0, or -errno.
 */
static int policy_rules(unsigned char family)
{
	struct {
		struct nlmsghdr nh;
		struct fib_rule_hdr frh;
	} req = {
		.nh = { .nlmsg_len = sizeof(req), .nlmsg_type = RTM_GETRULE,
			.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 1 },
		.frh = { .family = family },
	};
	static char buf[32768];
	int sock, found = 0, done = 0, err = 0;

	sock = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (sock < 0)
		return -errno;
	if (send(sock, &req, sizeof(req), 0) < 0) {
		err = -errno;
		goto out;
	}
	while (!done) {
		ssize_t n = recv(sock, buf, sizeof(buf), 0);
		struct nlmsghdr *nh;

		if (n < 0) {
			err = -errno;
			goto out;
		}
		for (nh = (void *)buf; NLMSG_OK(nh, n); nh = NLMSG_NEXT(nh, n)) {
			struct fib_rule_hdr *frh = NLMSG_DATA(nh);
			__u32 prio = 0, table;
			struct rtattr *a;
			int len;

			if (nh->nlmsg_type == NLMSG_DONE) {
				done = 1;
				break;
			}
			if (nh->nlmsg_type == NLMSG_ERROR) {
				err = -EIO;
				goto out;
			}
			if (nh->nlmsg_type != RTM_NEWRULE)
				continue;
			table = frh->table;
			len = nh->nlmsg_len - NLMSG_LENGTH(sizeof(*frh));
			for (a = (void *)(frh + 1); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
				if (a->rta_type == FRA_PRIORITY && RTA_PAYLOAD(a) >= 4)
					memcpy(&prio, RTA_DATA(a), 4);
				else if (a->rta_type == FRA_TABLE && RTA_PAYLOAD(a) >= 4)
					memcpy(&table, RTA_DATA(a), 4);
			}
			if (!((prio == 0 && table == RT_TABLE_LOCAL) ||
			      (prio == 32766 && table == RT_TABLE_MAIN) ||
			      (prio == 32767 && table == RT_TABLE_DEFAULT)))
				found = 1;
		}
	}
out:
	close(sock);
	return err ? err : found;
}

/* fib_gen[2] from a dump of the rules. The filter sets it as a rule is added; it is cleared here
 * only when the generation did not move during the dump (no change raced with it). */
static void policy_refresh(int gen_fd)
{
	__u32 zero = 0, two = 2;
	__u64 g0 = 0, g1 = 0, cur = 0, want;
	int r;

	bpf_map_lookup_elem(gen_fd, &zero, &g0);
	bpf_map_lookup_elem(gen_fd, &two, &cur);
	r = policy_rules(AF_INET);
	if (r == 0)
		r = policy_rules(AF_INET6);
	if (r < 0)
		r = 1;			/* can't tell: keyed by source is always right */
	want = r ? PGWU_FIB_BY_SRC : 0;
	if (want == cur)
		return;
	bpf_map_lookup_elem(gen_fd, &zero, &g1);
	if (!want && g1 != g0)
		return;			/* something changed meanwhile: look again next tick */
	bpf_map_update_elem(gen_fd, &two, &want, BPF_ANY);
}

int pgwu_watch_run(int ready_fd)
{
	struct timespec tick = { .tv_sec = 0, .tv_nsec = TICK_MS * 1000000L };
	int prog_fd, reg_fd = -1, gen_fd = -1, sock = -1, err;
	__u32 tgid;

	prog_fd = pinned_open("nl_fib_gen");
	if (prog_fd < 0)
		return prog_fd;
	reg_fd = pinned_open("watch_register");
	if (reg_fd < 0) {
		err = reg_fd;
		goto out;
	}
	gen_fd = pinned_open("fib_gen");
	if (gen_fd < 0) {
		err = gen_fd;
		goto out;
	}
	sock = open_rtnl(prog_fd);
	if (sock < 0) {
		err = sock;
		fprintf(stderr, "Couldn't open the rtnetlink socket: %s\n", strerror(-err));
		goto out;
	}
	policy_refresh(gen_fd);		/* before the cache is used */
	err = register_watcher(reg_fd, &tgid);
	if (err) {
		fprintf(stderr, "Couldn't register the watcher: %s\n", strerror(-err));
		goto out;
	}
	printf("pgwu watch: registered as pid %u, the route cache is in use\n", tgid);
	fflush(stdout);
	pgwu_daemon_ready(&ready_fd, NULL);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	while (!stop && still_loaded()) {
		nanosleep(&tick, NULL);
		/* nobody registered (another watcher exited): this socket has been bumping the
		 * generation all along, register again */
		if (!fib_watcher_read(gen_fd))
			register_watcher(reg_fd, &tgid);
		policy_refresh(gen_fd);
	}
	/* on the way out fib_gen_watch_exit clears the registration */
	err = 0;
out:
	if (ready_fd >= 0)
		close(ready_fd);
	if (sock >= 0)
		close(sock);
	if (gen_fd >= 0)
		close(gen_fd);
	if (reg_fd >= 0)
		close(reg_fd);
	close(prog_fd);
	return err;
}

static int watch_child(void *arg, int ready_fd)
{
	(void)arg;
	return pgwu_watch_run(ready_fd);
}

/* A detached watcher in the caller's network namespace; returns its pid once it is registered, or
 * -errno (-ECHILD: it failed first, and said why on our stderr). */
int pgwu_watch_spawn(void)
{
	return pgwu_daemonize(watch_child, NULL);
}

int do_watch(const void *cfg)
{
	const struct watch_opts *o = cfg;
	int pid;

	if (!o->daemon.set)
		return pgwu_watch_run(-1) ? 1 : 0;
	pid = pgwu_watch_spawn();
	if (pid == -ECHILD)
		return 1;	/* it exited before it registered, and said why */
	if (pid < 0) {
		fprintf(stderr, "Couldn't start the watcher: %s\n", strerror(-pid));
		return 1;
	}
	printf("pgwu watch running as pid %d\n", pid);
	return 0;
}
