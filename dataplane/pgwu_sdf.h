/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * pgwu_sdf.h: SDF filters for user space (pgwu_sdf.c): the Flow Description parser (IPFilterRule,
 * TS 29.212 5.4.2, as TS 29.244 8.2.5 carries it), the PDRs of a bearer half turned into its filter
 * list (struct pgwu_sdf_list, pgwu.h), and the writers of sdf_lists / sdf_pdrs / sdf_qos, shared
 * by `pgwu session add --filter` and `pgwu pfcp`.
 * Byte order: addresses and SPI network order, ports and flow label host order (as in pgwu.h).
 */
#ifndef PGWU_SDF_USER_H
#define PGWU_SDF_USER_H

#include <stdbool.h>
#include <linux/types.h>
#include "pgwu.h"

#define SDF_MAX_PORTS 8		/* port ranges in one comma list */
#define SDF_MAX_SPECS 8		/* SDF Filter IEs in one PDR */
#define SDF_MAX_PDRS PGWU_SDF_MAX	/* PDRs in one direction of a bearer */

/* One side of an IPFilterRule: `any`, `assigned` (the UE: any, the bearer carries only its
 * traffic) or an address with an optional prefix length, then optional ports. */
struct sdf_end {
	int family;		/* 0: any address, 4, 6 */
	__u32 addr[4], mask[4];
	int n_ports;		/* 0: any port */
	__u16 lo[SDF_MAX_PORTS], hi[SDF_MAX_PORTS];
};

struct sdf_flow {
	bool has_proto;		/* false: `ip` */
	__u8 proto;
	struct sdf_end from, to;
};

/* One SDF Filter (8.2.5): each field optional. */
struct sdf_spec {
	bool has_flow, has_tos, has_fl, has_spi;
	struct sdf_flow flow;
	__u8 tos, tos_mask;
	__u32 fl;		/* flow label, 20 bits */
	__u32 spi;		/* host order as parsed; stored network order */
};

/* One PDR of a bearer half: its precedence, its SDF filters (none: it matches everything), its
 * FAR (drop, forward, or forward to the CP function in a GTP-U tunnel: to_cp, cp_addr and
 * cp_teid network order, uplink only), its QER (gate, MBR: has_qos, q) and the URR whose volume
 * threshold or quota it counts in (has_urr, urr_id: the entry is the PFCP agent's to write). */
struct sdf_pdr_spec {
	__u32 precedence;
	__u16 pdr_id;
	bool drop;
	bool to_cp;
	__u32 cp_addr, cp_teid;
	bool has_qos;
	struct pgwu_qos q;
	bool has_urr;		/* PGWU_SDF_P_URR: a URR's threshold/quota in sdf_urr {TEID, urr_id} */
	__u32 urr_id;
	int n;
	struct sdf_spec s[SDF_MAX_SPECS];
};

struct sdf_maps {
	int lists, pdrs, qos, cp;	/* cp: cp_relay (struct pgwu_cp_relay) */
};

/* Parse a Flow Description; 0, or -1 with *why set. */
int sdf_parse_flow(const char *desc, struct sdf_flow *f, const char **why);

/* The half's filter list from its PDRs, which are in precedence order (sdf_install sorts them),
 * rules[i] the rule id of p[i]. 0, or -1 with *why (over PGWU_SDF_MAX
 * filters, a Flow Description with an IPv4 and an IPv6 address). */
int sdf_build_list(struct sdf_pdr_spec *p, int n, int dir, const __u32 *rules, struct pgwu_sdf_list *l,
		   const char **why);

/* Install the PDRs of half (teid, dir): new rule ids, their sdf_pdrs (and sdf_qos) entries, then
 * the list (replacing the one there, whose rules are removed after). 0 or -errno; -EINVAL with
 * *why for what the PDRs say that cannot be done. rules_out (optional): the rule id of each PDR
 * in p after sorting. */
int sdf_install(const struct sdf_maps *m, __u32 teid, int dir, struct sdf_pdr_spec *p, int n,
		__u32 *rules_out, const char **why);
/* One PDR's rule alone (the PFCP agent's Create PDR in a modification, which then writes the list
 * itself): a new rule id in *rule with its sdf_pdrs entry (and sdf_qos, cp_relay ones). 0 or
 * -errno. sdf_rule_del: those entries removed (a rule no list names any more). */
int sdf_rule_add(const struct sdf_maps *m, const struct sdf_pdr_spec *p, __u32 *rule);
void sdf_rule_del(const struct sdf_maps *m, __u32 rule);
/* Remove the half's list and its rules (nothing there: 0). */
int sdf_remove(const struct sdf_maps *m, __u32 teid, int dir);
/* Every list and rule (session flush). */
void sdf_flush(const struct sdf_maps *m);

/* A CP2UP tunnel (PGWU_B_CP2UP, pgwu.h): its cp_relay entry, then its ul_bearers entry (ul: that
 * map's fd) with flags PGWU_B_CP2UP | owner; teid network order, prefix the session's /64 (its
 * downlink half in dl6_bearers is where the T-PDUs go). 0 or -errno (-EEXIST: the TEID is a
 * bearer's). */
int cp2up_add(const struct sdf_maps *m, int ul, __u32 teid, __u64 prefix, __u32 owner);
/* Remove the CP2UP tunnel teid (its ul_bearers entry when it is one, then its cp_relay entry). */
void cp2up_del(const struct sdf_maps *m, int ul, __u32 teid);
/* Remove the CP2UP tunnels of a /64 (its ul_bearers entries first). The number removed. */
int cp2up_remove(const struct sdf_maps *m, int ul, __u64 prefix);

/* `pgwu session add --filter`: PDR specs separated by ';', each
 *   ul|dl PRECEDENCE [drop|cp ADDR TEID] [gate closed] [mbr KBPS] [tos V/M] [flowlabel N] [spi N]
 *         [flow permit out ...]   (flow takes the rest of the spec)
 * into p[dir][...] and n[dir]. 0, or -1 with the offending text in *why (static buffer). */
int sdf_parse_option(const char *s, struct sdf_pdr_spec p[2][SDF_MAX_PDRS], int n[2],
		     const char **why);

#endif /* PGWU_SDF_USER_H */
