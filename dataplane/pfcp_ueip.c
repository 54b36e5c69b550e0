// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pfcp_ueip.c: UE addresses chosen by the UP (TS 29.244 5.21, 8.2.62 CHV4/CHV6; the UEIP feature,
 * 8.2.25 octet 7 bit 3). `pgwu pfcp --ue-pool A/LEN` gives the IPv4 addresses, `--ue-pool6 P/LEN`
 * the /64s (P/LEN cut into /64s) the agent hands out. The pools keep no state of their own: an
 * address is free when no session of the agent has it (ue_find / ue6_find, the sessions' index)
 * and no bearer of the tables has it (dl / dl6_bearers: one `pgwu session add` wrote), so a
 * session's deletion frees its address and nothing can leak. A choice is next-fit from after the
 * previous one; a pool has at most POOL_MAX candidates, the bound of a scan of a full pool.
 *
 * A request with CHV is resolved before it is planned: a copy of the message with each such UE
 * IP Address given (V4 the chosen address, V6 the chosen /64, its host bits 0), then the same
 * checks and steps as an address the CP gave; the Created PDRs carry the choice back (7.5.3.2).
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/bpf.h>
#include "pgwu_params.h"	/* addr_unusable, EUSAGE */
#include "pfcp_agent.h"

#define POOL_MAX (1ULL << 24)	/* candidates of a pool: a /8 of IPv4 addresses, a /40 of /64s */

static int pool_bad(const char *opt, const char *arg, const char *why)
{
	fprintf(stderr, "Invalid %s '%s': %s\n", opt, arg, why);
	return -EUSAGE;
}

int ueip_pool4_set(struct pfcp_agent *a, __u32 addr, __u32 mask, const struct pgwu_config *c)
{
	__u32 net = ntohl(addr), m = ntohl(mask);
	int len = __builtin_popcount(m);
	__u64 size = 1ULL << (32 - len);
	char arg[24], ip[16];

	inet_ntop(AF_INET, &addr, ip, sizeof(ip));
	snprintf(arg, sizeof(arg), "%s/%d", ip, len);

	if (size > POOL_MAX)
		return pool_bad("--ue-pool", arg, "at most 16777216 addresses (a /8)");
	if (addr_unusable(addr) || addr_unusable(htonl(net + size - 1)))
		return pool_bad("--ue-pool", arg, "not unicast host addresses");
	if (c->ue_pool_mask && ((addr & c->ue_pool_mask) != c->ue_pool_addr ||
				(ntohl(c->ue_pool_mask) & ~m))) {
		char p[16];

		inet_ntop(AF_INET, &c->ue_pool_addr, p, sizeof(p));
		fprintf(stderr, "Invalid --ue-pool '%s': not inside the PGW-U's UE pool %s/%d (pgwu "
			"config --ue-pool), whose downlink to the rest is passed to the host\n", arg, p,
			__builtin_popcount(c->ue_pool_mask));
		return -EUSAGE;
	}
	/* a /30 or shorter: not its network and broadcast addresses */
	a->pool4.base = len <= 30 ? net + 1 : net;
	a->pool4.n = len <= 30 ? size - 2 : size;
	a->pool4.len = len;
	a->pool4.set = true;
	return 0;
}

int ueip_pool6_set(struct pfcp_agent *a, const char *arg)
{
	char buf[INET6_ADDRSTRLEN + 8], *slash, *end;
	__u8 x[16];
	__u64 hi;
	long len;

	if (strlen(arg) >= sizeof(buf))
		return pool_bad("--ue-pool6", arg, "expected an IPv6 prefix P/LEN, LEN 40..64");
	strcpy(buf, arg);
	slash = strchr(buf, '/');
	if (!slash)
		return pool_bad("--ue-pool6", arg, "expected an IPv6 prefix P/LEN, LEN 40..64");
	*slash = 0;
	errno = 0;
	len = strtol(slash + 1, &end, 10);
	if (inet_pton(AF_INET6, buf, x) != 1 || errno || *end || end == slash + 1)
		return pool_bad("--ue-pool6", arg, "expected an IPv6 prefix P/LEN, LEN 40..64");
	if (len < 40 || len > 64)
		return pool_bad("--ue-pool6", arg, "LEN 40..64: the pool is cut into /64s, at most "
				"16777216 of them");
	memcpy(&hi, x, 8);
	hi = be64toh(hi);
	if ((len < 64 && (hi & ((1ULL << (64 - len)) - 1))) || memcmp(x + 8, (__u8[8]){ 0 }, 8))
		return pool_bad("--ue-pool6", arg, "host bits set");
	if (x[0] == 0xff || (x[0] == 0xfe && (x[1] & 0xc0) == 0x80) || !hi)
		return pool_bad("--ue-pool6", arg, "not a unicast prefix (multicast, link-local or ::)");
	a->pool6.base = hi;
	a->pool6.n = 1ULL << (64 - len);
	a->pool6.len = len;
	a->pool6.set = true;
	return 0;
}

/* a free IPv4 address of the pool (network order), 0: none */
static __u32 pool4_take(struct pfcp_agent *a)
{
	struct ue_pool *p = &a->pool4;
	struct pgwu_dl_bearer dl;

	for (__u64 k = 0; k < p->n; k++) {
		__u64 i = (p->next + k) % p->n;
		__u32 addr = htonl((__u32)(p->base + i));

		if (addr_unusable(addr) || ue_find(a, addr) ||
		    !bpf_map_lookup_elem(a->m.dl, &addr, &dl))
			continue;
		p->next = (i + 1) % p->n;
		return addr;
	}
	return 0;
}

/* a free /64 of the pool (its 8 octets as on the wire, in *ue6): false when none */
static bool pool6_take(struct pfcp_agent *a, __u64 *ue6)
{
	struct ue_pool *p = &a->pool6;
	struct pgwu_dl_bearer dl;

	for (__u64 k = 0; k < p->n; k++) {
		__u64 i = (p->next + k) % p->n;
		__u64 w = htobe64(p->base + i);

		if (ue6_find(a, w) || !bpf_map_lookup_elem(a->m.dl6, &w, &dl))
			continue;
		p->next = (i + 1) % p->n;
		*ue6 = w;
		return true;
	}
	return false;
}

bool ueip_wanted(const struct pfcp_msg *m)
{
	for (int i = 0; i < m->n_create_pdr; i++)
		if (m->create_pdr[i].has_ue_ip &&
		    (m->create_pdr[i].ue_ip.chv4 || m->create_pdr[i].ue_ip.chv6))
			return true;
	return false;
}

/* one stderr line a minute per kind: why a choice was refused */
static void log_ueip(struct pfcp_agent *a, struct ratelimit *rl, const char *msg)
{
	__u32 held;

	if (ratelimit_pass(a, rl, &held)) {
		fprintf(stderr, "pgwu pfcp: %s", msg);
		if (held)
			fprintf(stderr, " (%u more like it since the last line)", held);
		fputc('\n', stderr);
	}
}

bool ueip_choose(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_msg *out,
		 struct ueip_chosen *ch, struct reply *r)
{
	bool want4 = false, want6 = false;

	memset(ch, 0, sizeof(*ch));
	for (int i = 0; i < m->n_create_pdr; i++) {
		const struct pfcp_pdr *x = &m->create_pdr[i];

		if (!x->has_ue_ip)
			continue;
		if ((x->ue_ip.chv4 && !a->pool4.set) || (x->ue_ip.chv6 && !a->pool6.set)) {
			log_ueip(a, &a->rl_ueip, x->ue_ip.chv4 && !a->pool4.set ?
				 "a PDR asks the UP to choose the UE's IPv4 address (CHV4) and the "
				 "agent has no --ue-pool: cause 73" :
				 "a PDR asks the UP to choose the UE's IPv6 prefix (CHV6) and the "
				 "agent has no --ue-pool6: cause 73");
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, x->id);
			return false;
		}
		/* the UP hands out /64s: a delegation (IPv6D bits) or another length is not one */
		if (x->ue_ip.chv6 && ((x->ue_ip.ipv6d && x->ue_ip.pd_bits) ||
				      (x->ue_ip.ipv6pl && x->ue_ip.plen != 64))) {
			log_ueip(a, &a->rl_ueip, "a PDR asks the UP to choose an IPv6 prefix other "
				 "than a /64 (IPv6D bits or IPv6PL): the pool hands out /64s, cause 73");
			reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, x->id);
			return false;
		}
		want4 |= x->ue_ip.chv4;
		want6 |= x->ue_ip.chv6;
	}
	if (want4) {
		ch->ipv4 = pool4_take(a);
		if (!ch->ipv4) {
			log_ueip(a, &a->rl_ueip_full, "the IPv4 pool (--ue-pool) has no free "
				 "address: cause 79 (all dynamic addresses are occupied)");
			reject(r, PFCP_CAUSE_NO_DYN_ADDR, 0);
			return false;
		}
		ch->v4 = true;
	}
	if (want6) {
		if (!pool6_take(a, &ch->ue6)) {
			log_ueip(a, &a->rl_ueip_full, "the IPv6 pool (--ue-pool6) has no free /64: "
				 "cause 79 (all dynamic addresses are occupied)");
			reject(r, PFCP_CAUSE_NO_DYN_ADDR, 0);
			return false;
		}
		ch->v6 = true;
	}
	memcpy(out, m, sizeof(*out));
	for (int i = 0; i < out->n_create_pdr; i++) {
		struct pfcp_ue_ip *u = &out->create_pdr[i].ue_ip;

		if (!out->create_pdr[i].has_ue_ip)
			continue;
		if (u->chv4) {
			u->chv4 = false;
			u->v4 = true;
			u->ipv4 = ch->ipv4;
		}
		if (u->chv6) {
			u->chv6 = false;
			u->v6 = true;
			memset(u->ipv6, 0, 16);
			memcpy(u->ipv6, &ch->ue6, 8);
		}
	}
	return true;
}

/* The chosen address(es) of a PDR that asked (7.5.3.2: UE IP Address in its Created PDR), with
 * its SD bit */
void ueip_w_created(struct pfcp_w *w, const struct pfcp_pdr *asked, const struct ueip_chosen *ch)
{
	__u8 b[1 + 4 + 16] = { 0 };
	size_t n = 1;

	if (!asked->has_ue_ip || !(asked->ue_ip.chv4 || asked->ue_ip.chv6))
		return;
	b[0] = asked->ue_ip.sd ? 0x04 : 0;
	if (asked->ue_ip.chv4 && ch->v4) {
		b[0] |= 0x02;
		memcpy(b + n, &ch->ipv4, 4);
		n += 4;
	}
	if (asked->ue_ip.chv6 && ch->v6) {
		b[0] |= 0x01;
		memcpy(b + n, &ch->ue6, 8);
		n += 16;
	}
	pfcp_w_ie(w, PFCP_IE_UE_IP_ADDRESS, b, n);
}
