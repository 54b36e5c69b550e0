/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * pgwu_params.h: the CLI as tables (after xdp-tools lib/util/params.h). A command names its handler,
 * the struct its options are parsed into, that struct's defaults and a table of options; the
 * dispatcher parses argv into a copy of the defaults and calls the handler with it.
 *
 * Every option value type is a struct whose first member is `bool set`, so a handler can tell
 * "given" from "default" (config set needs that).
 */
#ifndef PGWU_PARAMS_H
#define PGWU_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <linux/types.h>
#include "pgwu.h"

/* Handlers return 0, a negative errno (exit 1), or -EUSAGE (exit 2, the message is printed). */
#define EUSAGE 4096

enum opt_type {
	OPT_FLAG,	/* struct opt_flag, no argument */
	OPT_STR,	/* struct opt_str */
	OPT_U32,	/* struct opt_u32, decimal or 0x-hex, in [min, max] */
	OPT_TEID,	/* struct opt_u32, a TEID: 1..0xffffffff, host byte order */
	OPT_ADDR,	/* struct opt_addr, dotted-quad IPv4, network byte order */
	OPT_PREFIX,	/* struct opt_prefix, A/LEN */
	OPT_ENUM,	/* struct opt_enum, one of opt->choices (index) */
	OPT_NEXTHOP,	/* struct opt_nexthop: SIDE IFNAME DSTMAC | SIDE fib; repeatable */
	OPT_VLAN,	/* struct opt_vlan: SIDE ID; repeatable */
	OPT_ADDR6,	/* struct opt_addr6, an IPv6 address, network byte order */
};

struct opt_flag { bool set; };
struct opt_str { bool set; const char *s; };
struct opt_u32 { bool set; __u32 v; };
struct opt_addr { bool set; __u32 addr; };
struct opt_addr6 { bool set; __u8 addr[16]; };
struct opt_prefix { bool set; __u32 addr; __u32 mask; };
struct opt_enum { bool set; int v; };
struct opt_nexthop {
	bool set;
	bool side_set[PGWU_SIDE_MAX];
	const char *ifname[PGWU_SIDE_MAX];	/* NULL: "fib" (clear the static next hop) */
	__u8 dmac[PGWU_SIDE_MAX][6];
};
struct opt_vlan {
	bool set;
	bool side_set[PGWU_SIDE_MAX];
	__u16 id[PGWU_SIDE_MAX];
};

struct opt {
	const char *name;	/* long name without "--"; NULL: a positional argument */
	char short_name;	/* 0: none */
	enum opt_type type;
	size_t off;		/* offset of the value in the command's config struct */
	const char *metavar;
	const char *help;
	bool required;
	unsigned long long min, max;		/* OPT_U32 */
	const char *const *choices;		/* OPT_ENUM, NULL-terminated */
	void *ptr;		/* common options: the value lives here, not in the config struct */
};

struct cmd {
	const char *name;
	int (*func)(const void *cfg);	/* NULL with sub: a command group */
	const struct opt *opts;		/* terminated by an entry with no name, metavar or help */
	size_t cfg_size;
	const void *defaults;
	const char *help;		/* one line */
	const char *doc;		/* longer text under the usage, or NULL */
	const struct cmd *sub;		/* subcommands, terminated by { 0 } */
};

#define OPT_END { 0 }
#define CMD_END { 0 }

/* Options every command accepts (-v, -d ...), parsed wherever they appear; each has .ptr set. */
void cmd_set_common_opts(const struct opt *opts);
/* Called once the command line is parsed, right before a handler runs (applies common options). */
void cmd_set_prepare(int (*prepare)(void));

/* Parse argv (argv[0] = the command's name) and run the command; returns the handler's value. */
int cmd_dispatch(const struct cmd *cmds, const char *prefix, int argc, char **argv);
void cmd_usage(const struct cmd *cmd, const char *prefix, bool full);
void cmds_usage(const struct cmd *cmds, const char *prefix, const char *header);
/* pgwu help [COMMAND [SUBCOMMAND]] */
int cmd_help(const struct cmd *cmds, const char *prefix, int argc, char **argv);

/* Value parsers, also used by the bulk bearer file: 0 or -EINVAL. */
int parse_u32(const char *s, __u32 *v);
int parse_teid(const char *s, __u32 *teid);
int parse_addr(const char *s, __u32 *addr);
/* Why addr (network order) cannot be a bearer's UE or SGW address, or NULL when it can: the one
 * check of `pgwu session add`, the bulk files of `session load` and the PFCP agent (UE IP Address,
 * Outer Header Creation). 0.0.0.0/8, 127.0.0.0/8 (loopback), 224.0.0.0/4 (multicast) and
 * 240.0.0.0/4 (reserved, with the limited broadcast) name no host a bearer can reach
 * (RFC 1122 3.2.1.3, RFC 1112, RFC 6890). */
const char *addr_unusable(__u32 addr);
/* The same for an IPv6 peer (16 octets): unspecified, loopback, multicast, link-local, IPv4-mapped;
 * NULL when usable */
const char *addr6_unusable(const __u8 *a);
int parse_prefix(const char *s, __u32 *addr, __u32 *mask);
int parse_mac(const char *s, __u8 mac[6]);
int parse_side(const char *s);

#endif /* PGWU_PARAMS_H */
