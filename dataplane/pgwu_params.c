// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* pgwu_params.c: parse a command line against the command and option tables of pgwu_params.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pgwu_params.h"

static const struct opt *common_opts;
static int (*prepare_fn)(void);

void cmd_set_prepare(int (*prepare)(void))
{
	prepare_fn = prepare;
}

void cmd_set_common_opts(const struct opt *opts)
{
	common_opts = opts;
}

static bool opt_is_end(const struct opt *o)
{
	return !o->name && !o->metavar && !o->help;
}

int parse_u32(const char *s, __u32 *v)
{
	unsigned long long x = 0;
	int base = 10;
	const char *p = s;

	if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
		base = 16;
		p += 2;
	}
	if (!*p)
		return -EINVAL;
	for (; *p; p++) {
		int d;

		if (*p >= '0' && *p <= '9')
			d = *p - '0';
		else if (base == 16 && *p >= 'a' && *p <= 'f')
			d = *p - 'a' + 10;
		else if (base == 16 && *p >= 'A' && *p <= 'F')
			d = *p - 'A' + 10;
		else
			return -EINVAL;
		x = x * base + d;
		if (x > 0xffffffffULL)
			return -ERANGE;
	}
	*v = x;
	return 0;
}

int parse_teid(const char *s, __u32 *teid)
{
	int err = parse_u32(s, teid);

	if (!err && *teid == 0)
		return -ERANGE;	/* TEID 0 is for signalling (TS 29.281 5.1), never a bearer */
	return err;
}

int parse_addr(const char *s, __u32 *addr)
{
	struct in_addr a;

	if (inet_pton(AF_INET, s, &a) != 1)
		return -EINVAL;
	*addr = a.s_addr;
	return 0;
}

const char *addr_unusable(__u32 addr)
{
	__u32 a = ntohl(addr);

	if (a == 0)
		return "the unspecified address 0.0.0.0";
	if ((a >> 24) == 0)
		return "a 'this network' address (0.0.0.0/8)";
	if ((a >> 24) == 127)
		return "a loopback address (127.0.0.0/8)";
	if (a == 0xffffffffU)
		return "the limited broadcast address";
	if ((a >> 28) == 0xe)
		return "a multicast address (224.0.0.0/4)";
	if ((a >> 28) == 0xf)
		return "a reserved address (240.0.0.0/4)";
	return NULL;
}

int parse_prefix(const char *s, __u32 *addr, __u32 *mask)
{
	char buf[INET_ADDRSTRLEN + 4];
	const char *slash = strchr(s, '/');
	__u32 len, a;

	if (!slash || (size_t)(slash - s) >= INET_ADDRSTRLEN)
		return -EINVAL;
	memcpy(buf, s, slash - s);
	buf[slash - s] = '\0';
	if (parse_addr(buf, &a) || (slash[1] == '0' && slash[2]) || parse_u32(slash + 1, &len) ||
	    len > 32)
		return -EINVAL;
	*mask = len ? htonl(0xffffffffU << (32 - len)) : 0;
	if (a & ~*mask)
		return -EINVAL;		/* host bits set: say what is meant */
	*addr = a;
	return 0;
}

int parse_mac(const char *s, __u8 mac[6])
{
	unsigned int b[6];
	char end;

	if (sscanf(s, "%2x:%2x:%2x:%2x:%2x:%2x%c", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5],
		   &end) != 6 || strlen(s) != 17)
		return -EINVAL;
	for (int i = 0; i < 6; i++)
		mac[i] = b[i];
	return 0;
}

int parse_side(const char *s)
{
	if (!strcmp(s, "access"))
		return PGWU_SIDE_ACCESS;
	if (!strcmp(s, "sgi"))
		return PGWU_SIDE_SGI;
	return -EINVAL;
}

static int usage_err(const char *opt, const char *fmt, const char *val)
{
	fprintf(stderr, "Invalid %s%s '%s': %s\n", opt[0] == '-' ? "" : "argument ", opt, val, fmt);
	return -EUSAGE;
}

/* Parse the arguments of one option into dst; returns how many were consumed or -EUSAGE. */
static int parse_value(const struct opt *o, void *dst, char **args, int nargs, const char *what)
{
	int side, n = 1;
	__u32 v;

	if (o->type != OPT_FLAG && nargs < 1) {
		fprintf(stderr, "Option %s needs an argument (%s)\n", what, o->metavar);
		return -EUSAGE;
	}
	switch (o->type) {
	case OPT_FLAG:
		((struct opt_flag *)dst)->set = true;
		return 0;
	case OPT_STR:
		((struct opt_str *)dst)->s = args[0];
		break;
	case OPT_U32:
		if (parse_u32(args[0], &v) || v < o->min || v > o->max) {
			char range[64];

			snprintf(range, sizeof(range), "expected an integer in %llu..%llu", o->min, o->max);
			return usage_err(what, range, args[0]);
		}
		((struct opt_u32 *)dst)->v = v;
		break;
	case OPT_TEID:
		if (parse_teid(args[0], &v))
			return usage_err(what, "expected a TEID in 1..4294967295 (decimal or 0x-hex)",
					 args[0]);
		((struct opt_u32 *)dst)->v = v;
		break;
	case OPT_ADDR:
		if (parse_addr(args[0], &((struct opt_addr *)dst)->addr))
			return usage_err(what, "expected an IPv4 address (a.b.c.d)", args[0]);
		break;
	case OPT_ADDR6:
		if (inet_pton(AF_INET6, args[0], ((struct opt_addr6 *)dst)->addr) != 1)
			return usage_err(what, "expected an IPv6 address", args[0]);
		break;
	case OPT_PREFIX: {
		struct opt_prefix *p = dst;

		if (parse_prefix(args[0], &p->addr, &p->mask))
			return usage_err(what, "expected an IPv4 prefix A/LEN with no host bits set",
					 args[0]);
		break;
	}
	case OPT_ENUM: {
		int i;

		for (i = 0; o->choices[i]; i++)
			if (!strcmp(args[0], o->choices[i]))
				break;
		if (!o->choices[i])
			return usage_err(what, o->metavar, args[0]);
		((struct opt_enum *)dst)->v = i;
		break;
	}
	case OPT_NEXTHOP: {
		struct opt_nexthop *nh = dst;

		side = parse_side(args[0]);
		if (side < 0)
			return usage_err(what, "SIDE must be access or sgi", args[0]);
		if (nargs < 2) {
			fprintf(stderr, "Option %s needs SIDE IFNAME DSTMAC or SIDE fib\n", what);
			return -EUSAGE;
		}
		nh->side_set[side] = true;
		if (!strcmp(args[1], "fib")) {
			nh->ifname[side] = NULL;
			n = 2;
			break;
		}
		if (nargs < 3) {
			fprintf(stderr, "Option %s needs SIDE IFNAME DSTMAC or SIDE fib\n", what);
			return -EUSAGE;
		}
		if (parse_mac(args[2], nh->dmac[side]))
			return usage_err(what, "DSTMAC must be a MAC address xx:xx:xx:xx:xx:xx", args[2]);
		nh->ifname[side] = args[1];
		n = 3;
		break;
	}
	case OPT_VLAN: {
		struct opt_vlan *vl = dst;

		side = parse_side(args[0]);
		if (side < 0)
			return usage_err(what, "SIDE must be access or sgi", args[0]);
		if (nargs < 2) {
			fprintf(stderr, "Option %s needs SIDE ID\n", what);
			return -EUSAGE;
		}
		if (parse_u32(args[1], &v) || v > 4094)
			return usage_err(what, "VLAN ID must be 0 (none) .. 4094", args[1]);
		vl->side_set[side] = true;
		vl->id[side] = v;
		n = 2;
		break;
	}
	}
	((struct opt_flag *)dst)->set = true;
	return n;
}

static const struct opt *find_opt(const struct opt *opts, const char *arg, size_t len)
{
	for (const struct opt *o = opts; o && !opt_is_end(o); o++) {
		if (!o->name)
			continue;
		if (arg[1] != '-' && len == 2 && o->short_name && arg[1] == o->short_name)
			return o;
		if (arg[1] == '-' && strlen(o->name) == len - 2 && !strncmp(arg + 2, o->name, len - 2))
			return o;
	}
	return NULL;
}

static bool is_help(const char *arg)
{
	return !strcmp(arg, "-h") || !strcmp(arg, "--help");
}

/* Parse one option at argv[0] (which starts with '-'); returns argv entries consumed or -EUSAGE. */
static int parse_one(const struct opt *opts, void *cfg, int argc, char **argv)
{
	const char *arg = argv[0], *eq = NULL;
	const struct opt *o;
	size_t len = strlen(arg);
	char name[64];
	void *dst;
	int n;

	if (arg[1] == '-' && (eq = strchr(arg, '=')))
		len = eq - arg;
	o = find_opt(opts, arg, len);
	if (!o)
		o = find_opt(common_opts, arg, len);
	if (!o) {
		fprintf(stderr, "Unknown option %.*s (see -h)\n", (int)len, arg);
		return -EUSAGE;
	}
	snprintf(name, sizeof(name), "--%s", o->name);
	dst = o->ptr ? o->ptr : (char *)cfg + o->off;
	if (eq) {
		char *val = (char *)eq + 1;

		n = parse_value(o, dst, &val, 1, name);
		if (n >= 0 && n != 1) {
			fprintf(stderr, "Option %s does not take %s\n", name,
				o->type == OPT_FLAG ? "a value" : "NAME=VALUE, give its values apart");
			return -EUSAGE;
		}
		return n < 0 ? n : 1;
	}
	n = parse_value(o, dst, argv + 1, argc - 1, name);
	return n < 0 ? n : n + 1;
}

static const char *metavar_of(const struct opt *o)
{
	return o->metavar ? o->metavar : "";
}

/* Print "  LHS   help..." with the help wrapped at 100 columns under a 33-column indent. */
static void print_wrapped(FILE *f, const char *lhs, const char *help, const char *tail)
{
	char text[512];
	const char *p = text;
	int col = 33, width = 100 - col;

	snprintf(text, sizeof(text), "%s%s", help, tail);
	if (strlen(lhs) > 30)
		fprintf(f, "  %s\n  %-30s ", lhs, "");
	else
		fprintf(f, "  %-30s ", lhs);
	while (*p) {
		int n = strlen(p), cut = n;

		if (n > width) {
			for (cut = width; cut > 0 && p[cut] != ' '; cut--)
				;
			if (cut == 0)
				cut = width;
		}
		fprintf(f, "%.*s\n", cut, p);
		p += cut;
		while (*p == ' ')
			p++;
		if (*p)
			fprintf(f, "%*s", col, "");
	}
}

static void print_opts(FILE *f, const struct opt *opts)
{
	for (const struct opt *o = opts; o && !opt_is_end(o); o++) {
		char lhs[80];

		if (!o->name)
			continue;
		if (o->short_name)
			snprintf(lhs, sizeof(lhs), "-%c, --%s %s", o->short_name, o->name, metavar_of(o));
		else
			snprintf(lhs, sizeof(lhs), "--%s %s", o->name, metavar_of(o));
		print_wrapped(f, lhs, o->help, o->required ? " (required)" : "");
	}
}

void cmd_usage(const struct cmd *cmd, const char *prefix, bool full)
{
	FILE *f = full ? stdout : stderr;
	bool has_opts = false;

	if (cmd->sub) {
		char p[128];

		snprintf(p, sizeof(p), "%s %s", prefix, cmd->name);
		cmds_usage(cmd->sub, p, cmd->help);
		return;
	}
	fprintf(f, "Usage: %s %s", prefix, cmd->name);
	for (const struct opt *o = cmd->opts; o && !opt_is_end(o); o++) {
		if (o->name)
			has_opts = true;
		else
			fprintf(f, " %s", o->metavar);
	}
	fprintf(f, "%s\n", has_opts ? " [options]" : "");
	if (!full) {
		fprintf(f, "Try '%s %s -h' for more information.\n", prefix, cmd->name);
		return;
	}
	fprintf(f, "\n%s\n", cmd->help);
	if (cmd->doc)
		fprintf(f, "\n%s\n", cmd->doc);
	for (const struct opt *o = cmd->opts; o && !opt_is_end(o); o++)
		if (!o->name)
			fprintf(f, "\n  %-30s %s\n", o->metavar, o->help);
	fprintf(f, "\nOptions:\n");
	print_opts(f, cmd->opts);
	fprintf(f, "  %-30s %s\n", "-h, --help", "show this help");
	fprintf(f, "\nCommon options:\n");
	print_opts(f, common_opts);
}

void cmds_usage(const struct cmd *cmds, const char *prefix, const char *header)
{
	fprintf(stdout, "Usage: %s [common options] COMMAND [options]\n", prefix);
	if (header)
		fprintf(stdout, "\n%s\n", header);
	fprintf(stdout, "\nCommands:\n");
	for (const struct cmd *c = cmds; c->name; c++)
		fprintf(stdout, "  %-10s %s\n", c->name, c->help);
	fprintf(stdout, "\nCommon options:\n");
	print_opts(stdout, common_opts);
	fprintf(stdout, "  %-30s %s\n", "-h, --help", "show this help");
	fprintf(stdout, "\n'%s help COMMAND' or '%s COMMAND -h' shows a command's options.\n",
		prefix, prefix);
}

static const struct cmd *find_cmd(const struct cmd *cmds, const char *name)
{
	for (const struct cmd *c = cmds; c->name; c++)
		if (!strcmp(c->name, name))
			return c;
	return NULL;
}

int cmd_help(const struct cmd *cmds, const char *prefix, int argc, char **argv)
{
	char p[128];
	const struct cmd *c;

	if (argc < 2) {
		cmds_usage(cmds, prefix, NULL);
		return 0;
	}
	c = find_cmd(cmds, argv[1]);
	if (!c || (!c->func && !c->sub)) {
		fprintf(stderr, "Unknown command '%s' (see '%s help')\n", argv[1], prefix);
		return -EUSAGE;
	}
	if (c->sub && argc > 2) {
		snprintf(p, sizeof(p), "%s %s", prefix, c->name);
		return cmd_help(c->sub, p, argc - 1, argv + 1);
	}
	cmd_usage(c, prefix, true);
	return 0;
}

static int run_cmd(const struct cmd *c, const char *prefix, int argc, char **argv)
{
	const struct opt *pos = c->opts;
	void *cfg;
	int i, n, err;

	cfg = calloc(1, c->cfg_size ? c->cfg_size : 1);
	if (!cfg)
		return -ENOMEM;
	if (c->defaults)
		memcpy(cfg, c->defaults, c->cfg_size);
	for (i = 1; i < argc; i += n) {
		const char *arg = argv[i];

		if (is_help(arg)) {
			cmd_usage(c, prefix, true);
			err = 0;
			goto out;
		}
		if (arg[0] == '-' && arg[1]) {
			n = parse_one(c->opts, cfg, argc - i, argv + i);
			if (n < 0) {
				err = n;
				goto usage;
			}
			continue;
		}
		while (pos && !opt_is_end(pos) && pos->name)
			pos++;
		if (!pos || opt_is_end(pos)) {
			fprintf(stderr, "Unexpected argument '%s'\n", arg);
			err = -EUSAGE;
			goto usage;
		}
		n = parse_value(pos, (char *)cfg + pos->off, argv + i, argc - i, pos->metavar);
		if (n < 0) {
			err = n;
			goto usage;
		}
		pos++;
	}
	for (const struct opt *o = c->opts; o && !opt_is_end(o); o++) {
		if (o->required && !((struct opt_flag *)((char *)cfg + o->off))->set) {
			if (o->name)
				fprintf(stderr, "Missing required option --%s %s\n", o->name, o->metavar);
			else
				fprintf(stderr, "Missing argument %s\n", o->metavar);
			err = -EUSAGE;
			goto usage;
		}
	}
	err = prepare_fn ? prepare_fn() : 0;
	if (!err)
		err = c->func(cfg);
	goto out;
usage:
	cmd_usage(c, prefix, false);
out:
	free(cfg);
	return err;
}

int cmd_dispatch(const struct cmd *cmds, const char *prefix, int argc, char **argv)
{
	const struct cmd *c;
	char p[128];
	int i, n;

	for (i = 1; i < argc && argv[i][0] == '-' && argv[i][1]; i += n) {
		if (is_help(argv[i])) {
			cmds_usage(cmds, prefix, NULL);
			return 0;
		}
		n = parse_one(NULL, NULL, argc - i, argv + i);
		if (n < 0)
			return n;
	}
	if (i == argc) {
		fprintf(stderr, "Missing command (see '%s help')\n", prefix);
		return -EUSAGE;
	}
	if (!strcmp(argv[i], "help"))
		return cmd_help(cmds, prefix, argc - i, argv + i);
	c = find_cmd(cmds, argv[i]);
	if (!c || (!c->func && !c->sub)) {
		fprintf(stderr, "Unknown command '%s' (see '%s help')\n", argv[i], prefix);
		return -EUSAGE;
	}
	if (c->sub) {
		snprintf(p, sizeof(p), "%s %s", prefix, c->name);
		return cmd_dispatch(c->sub, p, argc - i, argv + i);
	}
	return run_cmd(c, prefix, argc - i, argv + i);
}

const char *addr6_unusable(const __u8 *a)
{
	static const __u8 zero[16], mapped[12] = { [10] = 0xff, [11] = 0xff };

	if (!memcmp(a, zero, 16))
		return "the unspecified address ::";
	if (!memcmp(a, zero, 15) && a[15] == 1)
		return "the loopback address ::1";
	if (a[0] == 0xff)
		return "a multicast address (ff00::/8)";
	if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
		return "a link-local address (fe80::/10)";
	if (!memcmp(a, mapped, 12))
		return "an IPv4-mapped address (::ffff:0:0/96)";
	return NULL;
}
