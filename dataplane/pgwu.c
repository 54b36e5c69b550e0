// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#define _GNU_SOURCE
/*
 * pgwu: the PGW-U's control tool. Every command but load and attach works on the objects pinned
 * in PIN_DIR (bpf_obj_get), so each call is stateless and any number of them can run in turn.
 *
 * This file holds the command line as tables (options, commands) and main(), which only
 * dispatches; each command's handler is in the file of its job: load/unload/attach/detach
 * pgwu_load.c, config pgwu_config.c, session pgwu_session.c, stats pgwu_stats.c, metrics
 * pgwu_metrics.c, watch pgwu_watch.c, reassemble pgwu_reasm.c, socket pgwu_sock.c, path and
 * signalling pgwu_path.c, pfcp pgwu_pfcp.c. The table parser is pgwu_params.c, the maps layer
 * pgwu_maps.c, the formatting (and the names of the data plane's enums) pgwu_fmt.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include "pgwu_cli.h"
#include "pgwu_sock.h"

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
	{ .name = "local-addr6", .type = OPT_ADDR6, .off = offsetof(struct load_opts, local_addr6),
	  .metavar = "A6", .help = "this gateway's N6 (SGi) IPv6 address, the source of its ICMPv6 "
	  "errors (default none: no ICMPv6 errors)" },
	{ .name = "n3-addr6", .type = OPT_ADDR6, .off = offsetof(struct load_opts, n3_addr6),
	  .metavar = "A6", .help = "this gateway's N3 (GTP-U) IPv6 address: G-PDUs over IPv6 to it "
	  "are taken, bearers with an IPv6 peer are sent from it (default none)" },
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
	  .metavar = "IF[,IF]", .required = true,
	  .help = "access (S1-U/S5) interface(s): xdp_access, uplink GTP-U in" },
	{ .name = "sgi", .type = OPT_STR, .off = offsetof(struct attach_opts, sgi),
	  .metavar = "IF[,IF]", .required = true,
	  .help = "SGi interface(s): xdp_sgi, downlink IP in; one per port pair, up to 4" },
	{ .name = "mode", .type = OPT_ENUM, .off = offsetof(struct attach_opts, mode),
	  .metavar = "native|generic", .choices = modes, .help = "XDP mode (default native)" },
	{ .name = "no-watch", .type = OPT_FLAG, .off = offsetof(struct attach_opts, no_watch),
	  .help = "don't start `pgwu watch` (the route cache then stays unused)" },
	OPT_END
};

static const struct opt config_options[] = {
	{ .name = "local-addr", .type = OPT_ADDR, .off = offsetof(struct config_opts, local_addr),
	  .metavar = "A", .help = "this gateway's GTP-U address" },
	{ .name = "local-addr6", .type = OPT_ADDR6, .off = offsetof(struct config_opts, local_addr6),
	  .metavar = "A6", .help = "this gateway's N6 (SGi) IPv6 address (source of ICMPv6 errors; :: none)" },
	{ .name = "n3-addr6", .type = OPT_ADDR6, .off = offsetof(struct config_opts, n3_addr6),
	  .metavar = "A6", .help = "this gateway's N3 (GTP-U) IPv6 address (:: none)" },
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
	  .metavar = "A", .help = "SGW GTP-U address (downlink outer destination); this or --sgw6" },
	{ .name = "sgw6", .type = OPT_ADDR6, .off = offsetof(struct session_opts, sgw6),
	  .metavar = "A6", .help = "the peer's IPv6 GTP-U address instead (N3 over IPv6: downlink "
	  "G-PDUs over IPv6 from the --n3-addr6 of pgwu load)" },
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
	{ .name = "ue6", .type = OPT_STR, .off = offsetof(struct session_opts, ue6),
	  .metavar = "PREFIX/64", .help = "the UE's IPv6 /64 (IPv6 inside the IPv4 tunnel: "
	  "downlink to any address in it, uplink only from it; default: none)" },
	{ .name = "filter", .type = OPT_STR, .off = offsetof(struct session_opts, filter),
	  .metavar = "SPEC[;SPEC...]", .help = "SDF filters, a PDR each: 'ul|dl PRECEDENCE [drop] "
	  "[gate closed] [mbr KBPS] [tos V[/M]] [flowlabel N] [spi N] [flow permit out PROTO "
	  "from SRC [PORTS] to DST [PORTS]]' (TS 29.212 5.4.2; docs/dataplane.md; default: none, "
	  "every packet the bearer's)" },
	{ .name = "cp-teid", .type = OPT_U32, .off = offsetof(struct session_opts, cp_teid),
	  .metavar = "T", .min = 1, .max = 0xffffffffU,
	  .help = "a tunnel from the CP function (CP2UP, with --ue6): its G-PDUs to TEID T are "
	  "relayed to the bearer's downlink tunnel with its QFI (docs/ipv6.md; default: none)" },
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
		  "[qfi=0..63] [ue6=PREFIX/64]" },
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

static const char *const fanouts[] = { "hash", "lb", "cpu", "qm", NULL };

static const struct opt socket_options[] = {
	{ .name = "access", .type = OPT_STR, .off = offsetof(struct sock_opts, access),
	  .metavar = "IF", .required = true,
	  .help = "access (S1-U/S5) interface: uplink G-PDUs on UDP GTP-ADDR:2152 bound to it" },
	{ .name = "sgi", .type = OPT_STR, .off = offsetof(struct sock_opts, sgi), .metavar = "IF",
	  .required = true, .help = "SGi interface: downlink IPv4 read with a packet socket (GRO off)" },
	{ .name = "threads", .type = OPT_U32, .off = offsetof(struct sock_opts, threads),
	  .metavar = "N", .min = 1, .max = PGWU_SOCK_MAX_THREADS,
	  .help = "worker threads per direction (default 1)" },
	{ .name = "cpus", .type = OPT_STR, .off = offsetof(struct sock_opts, cpus),
	  .metavar = "LIST", .help = "pin worker i of each direction to the i-th CPU of LIST, "
	  "round robin (e.g. 1 or 2-5; default: not pinned)" },
	{ .name = "reuseport", .type = OPT_ENUM, .off = offsetof(struct sock_opts, reuseport),
	  .metavar = "on|off", .choices = onoff, .help = "a socket per thread (an SO_REUSEPORT group "
	  "uplink, a PACKET_FANOUT group downlink), or one socket per direction every thread reads "
	  "(default on)" },
	{ .name = "batch", .type = OPT_U32, .off = offsetof(struct sock_opts, batch), .metavar = "N",
	  .min = 1, .max = 1024, .help = "packets per system call: 1 = recvfrom/sendto, more = "
	  "recvmmsg/sendmmsg (default 64)" },
	{ .name = "rcvbuf", .type = OPT_U32, .off = offsetof(struct sock_opts, rcvbuf),
	  .metavar = "BYTES", .min = 1024, .max = 1U << 30,
	  .help = "SO_RCVBUF(FORCE) of the receive sockets (default: net.core.rmem_default)" },
	{ .name = "sndbuf", .type = OPT_U32, .off = offsetof(struct sock_opts, sndbuf),
	  .metavar = "BYTES", .min = 1024, .max = 1U << 30,
	  .help = "SO_SNDBUF(FORCE) of the sending raw sockets (default: net.core.wmem_default)" },
	{ .name = "busy-poll", .type = OPT_U32, .off = offsetof(struct sock_opts, busy_poll),
	  .metavar = "USEC", .min = 0, .max = 1000000,
	  .help = "SO_BUSY_POLL: a receive with nothing queued polls the device for up to USEC "
	  "before it sleeps (default 0: off)" },
	{ .name = "prefer-busy-poll", .type = OPT_FLAG,
	  .off = offsetof(struct sock_opts, prefer_busy_poll),
	  .help = "SO_PREFER_BUSY_POLL (with --busy-poll)" },
	{ .name = "busy-poll-budget", .type = OPT_U32,
	  .off = offsetof(struct sock_opts, busy_poll_budget), .metavar = "N", .min = 1,
	  .max = 65535, .help = "SO_BUSY_POLL_BUDGET (with --busy-poll; default the kernel's 8)" },
	{ .name = "gro", .type = OPT_FLAG, .off = offsetof(struct sock_opts, gro),
	  .help = "UDP_GRO on the uplink sockets: G-PDUs of one flow read several at a time" },
	{ .name = "fanout", .type = OPT_ENUM, .off = offsetof(struct sock_opts, fanout),
	  .metavar = "hash|lb|cpu|qm", .choices = fanouts,
	  .help = "how the downlink PACKET_FANOUT group spreads packets (default hash: by flow)" },
	{ .name = "rt-priority", .type = OPT_U32, .off = offsetof(struct sock_opts, rt_priority),
	  .metavar = "N", .min = 0, .max = 99,
	  .help = "run the workers SCHED_FIFO at N (default 0: SCHED_OTHER)" },
	{ .name = "interval", .type = OPT_U32, .off = offsetof(struct sock_opts, interval),
	  .metavar = "MS", .min = 0, .max = 3600000,
	  .help = "print the counters per thread and the kernel's every MS (default 1000; 0: never)" },
	{ .name = "json", .type = OPT_FLAG, .off = offsetof(struct sock_opts, json),
	  .help = "print those lines (and --measure-lookups) as JSON" },
	{ .name = "daemon", .type = OPT_FLAG, .off = offsetof(struct sock_opts, daemon),
	  .help = "run in the background; returns once the workers run (or failed, saying why)" },
	{ .name = "log", .type = OPT_STR, .off = offsetof(struct sock_opts, log), .metavar = "FILE",
	  .help = "with --daemon: append the lines to FILE (default: nowhere)" },
	{ .name = "measure-lookups", .type = OPT_U32,
	  .off = offsetof(struct sock_opts, measure_lookups), .metavar = "N", .min = 1,
	  .max = 100000000, .help = "don't forward: look up N random installed TEIDs through the "
	  "mmap()ed direct index and through the hash map's system call, print ns per lookup" },
	{ .name = "owner", .type = OPT_U32, .off = offsetof(struct sock_opts, owner), .metavar = "PID",
	  .min = 1, .max = 0x7fffffff, .help = "stop when process PID ends (within a tick, 50 ms): "
	  "whoever started it, so that it never outlives them (gtplab's labs pass their owner)" },
	OPT_END
};

static const struct opt path_options[] = {
	{ .name = "peer", .type = OPT_ADDR, .off = offsetof(struct path_opts, peer), .metavar = "A",
	  .help = "only this peer (default: every SGW a bearer names and every peer seen)" },
	{ .name = "peer6", .type = OPT_ADDR6, .off = offsetof(struct path_opts, peer6), .metavar = "A6",
	  .help = "only this IPv6 peer (N3 over IPv6; with --peer: both)" },
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
	{ .name = "restart-policy", .type = OPT_ENUM, .off = offsetof(struct pfcp_opts, restart_policy),
	  .choices = pfcp_restart_policy_names, .metavar = "delete|on-setup|keep",
	  .help = "a CP's newer Recovery Time Stamp: delete (default, TS 29.244 6.2.2/6.2.6, TS "
	  "23.007 19A: in a heartbeat or an association setup it is a restart, the CP's sessions "
	  "are deleted), on-setup (only in an association setup), keep (a restart deletes nothing)" },
	{ .name = "allow-cp-move", .type = OPT_FLAG, .off = offsetof(struct pfcp_opts, allow_cp_move),
	  .help = "an association setup for an associated Node ID from another address moves the "
	  "association there (default: refused, cause 64)" },
	{ .name = "cp-t1", .type = OPT_U32, .off = offsetof(struct pfcp_opts, cp_t1),
	  .metavar = "MS", .min = 100, .max = 60000,
	  .help = "the CPs' retransmission timer T1 (default 3000): an answer is resent to the same "
	  "request for T1 x (N1 + 1)" },
	{ .name = "cp-n1", .type = OPT_U32, .off = offsetof(struct pfcp_opts, cp_n1),
	  .metavar = "N", .min = 0, .max = 10,
	  .help = "the CPs' retransmission count N1 (default 3)" },
	{ .name = "mbr-burst-ms", .type = OPT_U32, .off = offsetof(struct pfcp_opts, mbr_burst_ms),
	  .metavar = "MS", .min = 1, .max = 10000,
	  .help = "a QER's MBR is policed by a token bucket this many ms deep at that rate, at least "
	  "3000 octets (default 100): over T seconds a direction delivers at most MBR x T + the bucket" },
	{ .name = "gtpu-netns", .type = OPT_STR, .off = offsetof(struct pfcp_opts, gtpu_netns),
	  .metavar = "PATH", .help = "the network namespace (e.g. /run/netns/NAME) whose GTP-U address "
	  "End Markers are sent from (default: the agent's own; where the GTP-U address is not, none "
	  "is sent)" },
	{ .name = "ue-pool", .type = OPT_PREFIX, .off = offsetof(struct pfcp_opts, ue_pool),
	  .metavar = "A/LEN", .help = "UE IPv4 addresses the UP chooses when a PDR asks (CHV4, the "
	  "UEIP feature): inside the PGW-U's UE pool, at most a /8 (default none: CHV4 is refused, "
	  "cause 73)" },
	{ .name = "ue-pool6", .type = OPT_STR, .off = offsetof(struct pfcp_opts, ue_pool6),
	  .metavar = "P/LEN", .help = "an IPv6 prefix (LEN 40..64) whose /64s the UP hands out when a "
	  "PDR asks (CHV6) (default none: CHV6 is refused, cause 73)" },
	OPT_END
};

static const struct opt no_options[] = { OPT_END };

static const struct attach_opts attach_defaults = { .mode = { .v = 0 } };
static const struct session_opts session_defaults = { .csum = { .v = 2 } };
static const struct metrics_opts metrics_defaults = { .listen = { .s = "127.0.0.1:9464" } };
static const struct path_opts path_defaults = { .wait = { .v = 1000 } };
static const struct pfcp_opts pfcp_defaults = { .listen = { .s = "127.0.0.1:8805" },
	.restart_policy = { .v = PFCP_RESTART_DELETE }, .cp_t1 = { .v = 3000 }, .cp_n1 = { .v = 3 },
	.mbr_burst_ms = { .v = 100 } };
static const struct sock_opts socket_defaults = { .threads = { .v = 1 }, .reuseport = { .v = 1 },
						  .batch = { .v = 64 }, .interval = { .v = 1000 } };

#define COMMAND(_name, _func, _opts, _type, _defaults, _help, _doc) { \
	.name = _name, .func = _func, .opts = _opts, .cfg_size = sizeof(_type), \
	.defaults = _defaults, .help = _help, .doc = _doc }

static const struct cmd session_cmds[] = {
	COMMAND("add", do_session_add, session_add_options, struct session_opts, &session_defaults,
		"add one bearer", "The TEID and the UE must be new, the UE and the SGW addresses hosts\n"
		"(not in 0.0.0.0/8, 127.0.0.0/8, 224.0.0.0/4 or 240.0.0.0/4, so not 255.255.255.255\n"
		"either: the same check as session load and pgwu pfcp); nothing is changed otherwise."),
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
	COMMAND("socket", do_socket, socket_options, struct sock_opts, &socket_defaults,
		"the PGW-U on Linux sockets instead of XDP (foreground, until SIGINT/SIGTERM)",
		"Uplink G-PDUs are read from UDP GTP-ADDR:2152 (bound to --access), checked as\n"
		"xdp_access checks them (the same code), and their inner packets sent to SGi through a\n"
		"raw socket; downlink IPv4 packets for the UE pool are read from --sgi with a packet\n"
		"socket, encapsulated as xdp_sgi does and sent to their SGW. Bearers come from the same\n"
		"tables (session, pfcp), read through the mmap()ed direct index. Needs pgwu loaded,\n"
		"xdp_access/xdp_sgi not attached to these interfaces, no pgwu reassemble, GRO off on\n"
		"--sgi. The packet socket is a tap, served before tc ingress: drop the UE pool there\n"
		"(tc filter add dev SGI ingress protocol ip u32 match ip dst POOL action drop), else\n"
		"the kernel's stack handles those packets too. Counters: pgwu stats (socket path), pgwu\n"
		"metrics (pgwu_socket_*); every --interval, one line per thread and the kernel's drop\n"
		"counters. See docs/socket.md."),
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
