// SPDX-License-Identifier: GPL-2.0
/*
 * pgwu.bpf.c: the PGW-U user plane in XDP.
 *   xdp_access  S1-U/S5 side: GTP-U G-PDU in -> decapsulate -> SGi; Echo Request -> Echo Response.
 *   xdp_sgi     SGi side: IPv4 to a UE -> encapsulate in GTP-U -> access side.
 *   fib_gen_*   tracing programs: bump fib_gen after the kernel changes a route or a neighbour, which
 *               invalidates every cached next hop at once.
 * The exact behaviour, every reason and its verdict: docs/dataplane.md. Every path sets
 * (action, reason) and leaves through `out:`, where the packet is counted exactly once.
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_tracing.h>
#include "pgwu.h"
#include "consts.h"
#include "maps.h"
#include "parsing.h"
#include "csum.h"
#include "gtpu.h"

#define AF_INET 2
#define AF_INET6 10

struct nexthop {
	__u32 ifindex;
	__u8 smac[6];
	__u8 dmac[6];
};

/*
 * csum_bytes (csum.h) as a global function: the verifier checks it (its three bpf_loop calls and
 * their callback) once, on its own, where inlined it was walked again for every state a program
 * reaches it with (70-120k instructions of xdp_sgi's and xdp_sgi6's). Only the full-checksum
 * fallbacks and the ICMP errors call it, where one more call is little next to the loops' (a
 * call and return cost some ns on this host: Safe RET). Returns the sum, or -1 when the bytes are
 * not in the frame (csum_bytes' *err).
 */
__attribute__((noinline)) long pgwu_csum_bytes(struct xdp_md *ctx, __u32 off, __u32 len)
{
	int err;
	__u64 sum = csum_bytes(ctx, off, len, &err);

	return err ? -1 : (long)sum;
}

static __always_inline __u64 csum_bytes_once(struct xdp_md *ctx, __u32 off, __u32 len, int *err)
{
	long sum = pgwu_csum_bytes(ctx, off, len);

	*err = sum < 0;
	return sum < 0 ? 0 : sum;
}

static __always_inline void count(__u32 reason, __u32 action, __u32 bytes)
{
	__u32 key = reason * PGWU_VERDICT_MAX + action;
	struct pgwu_counter *c = bpf_map_lookup_elem(&stats, &key);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

/*
 * The volume threshold th (struct pgwu_volth in pgwu.h): when its count has reached the limit and
 * no crossing waits for the agent, the count becomes the usage at the crossing and restarts.
 * Called with the entry's lock held.
 */
static __always_inline void volth_cross(struct pgwu_qos *q)
{
	struct pgwu_volth *t = &q->th;
	__u64 ul = t->now[1], dl = t->now[3];
	__u32 vf = t->vol_flags;

	if (q->flags & PGWU_QOS_VOLTH_CROSSED)
		return;		/* the agent has not taken the last crossing yet */
	if (((vf & 1) && ul + dl >= t->limit[0]) || ((vf & 2) && ul >= t->limit[1]) ||
	    ((vf & 4) && dl >= t->limit[2])) {
		t->at[0] = t->now[0];
		t->at[1] = ul;
		t->at[2] = t->now[2];
		t->at[3] = dl;
		t->now[0] = 0;
		t->now[1] = 0;
		t->now[2] = 0;
		t->now[3] = 0;
		q->flags |= PGWU_QOS_VOLTH_CROSSED;
	}
}

/* A forwarded packet of len octets in direction dir counted in th: the one that reaches the limit
 * records the usage at it, itself included. Lock held. */
static __always_inline void volth_add(struct pgwu_qos *q, __u32 dir, __u32 len)
{
	struct pgwu_volth *t = &q->th;

	if (dir) {
		t->now[2] += 1;
		t->now[3] += len;
	} else {
		t->now[0] += 1;
		t->now[1] += len;
	}
	volth_cross(q);
}

/*
 * A bearer's QoS entry (qos map, struct pgwu_qos in pgwu.h) applied to a packet whose T-PDU is
 * len octets, in direction dir (PGWU_PFCP_UPLINK/DOWNLINK): 0 to forward it, else the drop reason.
 * The gate is read without the lock (one word, written by the agent only); the policer, the quota
 * and the volume threshold change under it, checked first and committed together, so a packet one
 * of them refuses costs the others nothing. counted: the packet will be counted in the bearer's
 * usage (not one handed to the kernel to route): only those count towards a volume threshold,
 * which measures what the usage reports report. The clock is read before the lock: no helper
 * call may be made while a bpf_spin_lock is held. Everything is done in here, where the quota is
 * charged: a map value pointer kept for where the bearer's counters are counted, after the packet
 * is rewritten, doubles the states the verifier walks through the rest of xdp_sgi (over its
 * limit of 10^6 instructions).
 */
static __always_inline __u32 qos_apply_map(void *map, const void *key, __u32 dir, __u32 len,
					   int counted)
{
	struct pgwu_qos *q = bpf_map_lookup_elem(map, key);
	struct pgwu_police *p;
	__u64 now = 0, cost, el, credit = 0;
	__u32 reason = 0, flags;
	int quota, th;

	if (!q)
		return 0;
	flags = q->flags;
	if (flags & (dir ? PGWU_QOS_DL_CLOSED : PGWU_QOS_UL_CLOSED))
		return PGWU_R_DROP_GATE_CLOSED;
	quota = (flags & PGWU_QOS_QUOTA) &&
		(flags & (dir ? PGWU_QOS_QUOTA_DL : PGWU_QOS_QUOTA_UL));
	th = counted && (flags & PGWU_QOS_VOLTH) &&
	     (flags & (dir ? PGWU_QOS_VOLTH_DL : PGWU_QOS_VOLTH_UL));
	p = &q->pol[dir & 1];
	if (!p->kbps && !quota && !th)
		return 0;
	if (p->kbps)
		now = bpf_ktime_get_ns();
	cost = (__u64)len * 8 * PGWU_QOS_MICRO;
	bpf_spin_lock(&q->lock);
	if (p->kbps) {
		/* refill: elapsed time capped at what fills an empty bucket, so the product
		 * stays within depth (and a clock before last_ns adds nothing) */
		el = now > p->last_ns ? now - p->last_ns : 0;
		if (el > p->fill_ns)
			el = p->fill_ns;
		credit = p->credit + el * p->kbps;
		if (credit > p->depth)
			credit = p->depth;
		p->credit = credit;
		p->last_ns = now;
		if (credit < cost)
			reason = PGWU_R_DROP_MBR;
	}
	if (!reason && quota) {
		if (q->quota_left < len) {
			q->flags |= PGWU_QOS_EXHAUSTED;
			reason = PGWU_R_DROP_QUOTA;
		} else {
			q->quota_left -= len;
		}
	}
	if (!reason && p->kbps)
		p->credit = credit - cost;
	if (!reason && th)
		volth_add(q, dir, len);
	bpf_spin_unlock(&q->lock);
	return reason;
}

/* the bearer's entry (qos, keyed by its local TEID); sdf.h applies a PDR's (sdf_qos) and its
 * URR's (sdf_urr) */
static __always_inline __u32 qos_apply(__be32 teid, __u32 dir, __u32 len, int counted)
{
	return qos_apply_map(&qos, &teid, dir, len, counted);
}

#include "sdf.h"

static __always_inline __u32 forward(struct xdp_md *ctx, __u32 ifindex)
{
	if (ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(ifindex, 0);
}

/*
 * The next hop towards dst, leaving through `side`: the static one when configured, else the
 * kernel's FIB, through fib_cache. Returns 0 with *nh set, or the reason for not forwarding (and,
 * when the packet is over the route's MTU, that MTU in *mtu, else *mtu is left alone).
 * A cache slot is used only while fib_gen is unchanged (bumped after every route, link or
 * neighbour change, see the end of this file), while a `pgwu watch` is alive to bump it, and only
 * for packets no longer than one the lookup's MTU check passed. The generation is read before the
 * lookup, so a change racing with it leaves a slot that is already stale.
 */
/* What a bpf_fib_lookup result means for the packet: 0 (SUCCESS: forward it), pass_no_neigh (the
 * kernel resolves the neighbour), drop_no_route (blackhole, unreachable, prohibit, forwarding off
 * on the ingress), pass_fib_other (anything else the kernel must do: local, over the MTU, ...).
 * Both families' lookups (resolve_nexthop, resolve_nexthop6). */
static __always_inline __u32 fib_reason(int rc)
{
	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		return 0;
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return PGWU_R_PASS_NO_NEIGH;
	case BPF_FIB_LKUP_RET_BLACKHOLE:
	case BPF_FIB_LKUP_RET_UNREACHABLE:
	case BPF_FIB_LKUP_RET_PROHIBIT:
	case BPF_FIB_LKUP_RET_FWD_DISABLED:
		return PGWU_R_DROP_NO_ROUTE;
	default:	/* NOT_FWDED (local), FRAG_NEEDED, UNSUPP_LWT, ... */
		return PGWU_R_PASS_FIB_OTHER;
	}
}

/* A next hop: egress ifindex, its source and destination MAC */
static __always_inline void nh_set(struct nexthop *nh, __u32 ifindex, const __u8 *smac, const __u8 *dmac)
{
	nh->ifindex = ifindex;
	__builtin_memcpy(nh->smac, smac, 6);
	__builtin_memcpy(nh->dmac, dmac, 6);
}

/*
 * A route cache slot's entry after a lookup the packet passed (both families' caches, whose slots
 * differ in their keys only): max_len starts again at this packet's length unless the slot held
 * this very route already (same_key: its key was this packet's; the same generation and egress),
 * where it only grows; then the generation, the egress and its MACs. A global function, as
 * pgwu_csum_bytes: inlined, the verifier walked the rest of xdp_sgi6 again for its branches
 * (+51,000 instructions); a call costs a route cache miss, never a hit. Returns 0.
 */
__attribute__((noinline)) int pgwu_fib_entry_fill(struct pgwu_fib_entry *e, int same_key, __u64 gen,
						  const struct bpf_fib_lookup *p, __u32 tot_len)
{
	if (!e || !p)
		return 0;
	if (!same_key || e->gen != gen || e->ifindex != p->ifindex || e->max_len < tot_len)
		e->max_len = tot_len;
	e->gen = gen;
	e->ifindex = p->ifindex;
	__builtin_memcpy(e->smac, p->smac, 6);
	__builtin_memcpy(e->dmac, p->dmac, 6);
	return 0;
}

static __always_inline __u32 resolve_nexthop(struct xdp_md *ctx, const struct pgwu_config *cfg,
					     int side, __u32 src, __u32 dst, __u8 tos, __u8 proto,
					     __u16 tot_len, struct nexthop *nh, __u32 *mtu)
{
	const struct pgwu_nexthop *st = &cfg->nexthop[side];
	struct pgwu_fib_slot *slot = NULL;
	struct bpf_fib_lookup p = {};
	__u32 zero = 0, one = 1, two = 2, idx, ksrc = 0;
	__u64 gen = 0;
	__u32 reason;
	int rc;

	if (st->ifindex) {
		nh_set(nh, st->ifindex, st->smac, st->dmac);
		return 0;
	}
	if (cfg->flags & PGWU_CFG_FIB_CACHE) {
		__u64 *g = bpf_map_lookup_elem(&fib_gen, &zero);
		__u64 *hb = bpf_map_lookup_elem(&fib_gen, &one);
		__u64 *pol = bpf_map_lookup_elem(&fib_gen, &two);

		/* no clock read: a helper call costs more here than the whole cache hit */
		if (g && hb && pol && *(volatile __u64 *)hb) {
			gen = *(volatile __u64 *)g;
			/* policy rules may pick the route by source: then it is part of the key */
			if (*(volatile __u64 *)pol & PGWU_FIB_BY_SRC)
				ksrc = src;
			idx = pgwu_fib_slot_of(dst, ctx->ingress_ifindex, ksrc);
			slot = bpf_map_lookup_elem(&fib_cache, &idx);
		}
		if (slot && slot->key.dst == dst && slot->key.ifindex == ctx->ingress_ifindex &&
		    slot->key.src == ksrc && slot->e.gen == gen && tot_len <= slot->e.max_len) {
			nh_set(nh, slot->e.ifindex, slot->e.smac, slot->e.dmac);
			return 0;
		}
	}

	p.family = AF_INET;
	p.tos = tos;
	p.l4_protocol = proto;
	p.tot_len = tot_len;
	p.ipv4_src = src;
	p.ipv4_dst = dst;
	p.ifindex = ctx->ingress_ifindex;
	rc = bpf_fib_lookup(ctx, &p, sizeof(p), 0);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		*mtu = p.mtu_result;	/* the egress MTU the packet is over */
	reason = fib_reason(rc);
	if (reason)
		return reason;
	nh_set(nh, p.ifindex, p.smac, p.dmac);
	if (slot) {	/* per CPU: no other writer */
		pgwu_fib_entry_fill(&slot->e, (slot->key.dst == dst) &
				    (slot->key.ifindex == ctx->ingress_ifindex) & (slot->key.src == ksrc),
				    gen, &p, tot_len);
		slot->key.dst = dst;
		slot->key.ifindex = ctx->ingress_ifindex;
		slot->key.src = ksrc;
	}
	return 0;
}

/* Ethernet header (+ 802.1Q tag when vid != 0) at the start of the frame, for an IP packet of
 * EtherType proto (network order); the caller has checked that 18 bytes are there. Returns its
 * length. */
static __always_inline __u32 write_eth_proto(void *data, const __u8 *dmac, const __u8 *smac,
					     __u16 vid, __be16 proto)
{
	struct ethhdr *eth = data;

	__builtin_memcpy(eth->h_dest, dmac, 6);
	__builtin_memcpy(eth->h_source, smac, 6);
	if (vid) {
		struct vlan_hdr *v = (void *)(eth + 1);

		eth->h_proto = ETH_P_8021Q_BE;
		v->tci = bpf_htons(vid & 0x0fff);
		v->encap_proto = proto;
		return sizeof(*eth) + sizeof(*v);
	}
	eth->h_proto = proto;
	return sizeof(*eth);
}

static __always_inline __u32 write_eth(void *data, const __u8 *dmac, const __u8 *smac, __u16 vid)
{
	return write_eth_proto(data, dmac, smac, vid, ETH_P_IP_BE);
}

/* Cut the frame to len bytes (Ethernet padding after an IP packet) */
static __always_inline int trim_to(struct xdp_md *ctx, __u32 len)
{
	__u32 cur = ctx->data_end - ctx->data;

	if (cur > len)
		return bpf_xdp_adjust_tail(ctx, (int)(len - cur));
	return 0;
}

/*
 * Sum of the inner IPv4 packet (header and payload) for the outer UDP checksum: gtpu_inner_sum
 * (gtpu.h), and the payload summed when its own checksum can't be trusted. Sets *err when the bytes
 * can't be summed (only if the caller's length checks were wrong).
 */
static __always_inline __u64 inner_sum(struct xdp_md *ctx, struct iphdr *iip, __u32 ihl_len,
				       __u32 tot, void *data_end, int *err)
{
	void *l4 = (void *)iip + ihl_len;
	__u64 sum;

	*err = 0;
	if (!gtpu_inner_sum(iip, ihl_len, tot, data_end, &sum))
		return sum;
	return sum + csum_bytes_once(ctx, l4 - (void *)(long)ctx->data, tot - ihl_len, err);
}

/*
 * The start both programs share: the config, Ethernet with at most one 802.1Q tag, and an IPv4
 * header whose IHL and total length fit in the frame. Returns 0 with *h filled, or the reason to
 * leave with (and *action, XDP_DROP unless the packet is for the kernel). The sides differ only in
 * the reasons of a bad IPv4 header, constants here once it is inlined.
 */
struct l3 {
	struct pgwu_config *cfg;
	struct ethhdr *eth;
	struct vlan_hdr *tag;		/* NULL: untagged */
	struct iphdr *ip;
	struct ipv6hdr *ip6;		/* set (reason PASS_NOT_IPV4) when the frame is IPv6 with
					 * a whole fixed header: xdp_sgi takes it (sgi_ipv6) */
	__u32 ihl_len;
	__u32 tot_len;
};

static __always_inline __u32 prologue(struct xdp_md *ctx, int side, struct l3 *h, __u32 *action)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct cursor cur = { .pos = data, .end = data_end };
	__u32 r_trunc = side == PGWU_SIDE_ACCESS ? PGWU_R_DROP_TRUNC_IP : PGWU_R_DROP_BAD_IP_DL;
	__u32 r_bad = side == PGWU_SIDE_ACCESS ? PGWU_R_DROP_BAD_IP : PGWU_R_DROP_BAD_IP_DL;
	struct iphdr *ip;
	__u32 zero = 0;
	int proto;

	*action = XDP_DROP;
	h->ip6 = NULL;
	h->cfg = bpf_map_lookup_elem(&config, &zero);
	if (!h->cfg)
		return PGWU_R_DROP_NOT_CONFIGURED;
	proto = parse_eth(&cur, &h->eth, &h->tag);
	if (proto < 0)
		return PGWU_R_DROP_TRUNC_ETH;
	if (proto != ETH_P_IP_BE) {
		struct ipv6hdr *i6 = cur.pos;

		if (proto == ETH_P_IPV6_BE && (void *)(i6 + 1) <= data_end)
			h->ip6 = i6;
		*action = XDP_PASS;
		return PGWU_R_PASS_NOT_IPV4;
	}
	if (parse_ipv4_fixed(&cur, &ip) < 0)
		return r_trunc;
	if (ip->version != 4 || ip->ihl < 5)
		return r_bad;
	h->ip = ip;
	h->ihl_len = ip->ihl * 4;
	if ((void *)ip + h->ihl_len > data_end)
		return r_trunc;
	h->tot_len = bpf_ntohs(ip->tot_len);
	if (h->tot_len < h->ihl_len || (void *)ip + h->tot_len > data_end)
		return r_bad;
	return 0;
}

static __always_inline void event(__u32 ev)
{
	__u64 *c = bpf_map_lookup_elem(&events, &ev);

	if (c)
		(*c)++;
}

/* Addresses nobody may be answered at (RFC 1812 5.3.7, 4.2.2.11): 0/8, loopback, multicast,
 * 240/4 (with the limited broadcast), and our own address. */
static __always_inline int martian_src(__be32 saddr, const struct pgwu_config *cfg)
{
	__u32 a = bpf_ntohl(saddr);

	return (a >> 24) == 0 || (a >> 24) == 127 || (a >> 28) >= 0xe || saddr == cfg->local_addr;
}

/* A reply to peer is within its budget (GCRA, see reply_budget in pgwu.h); spends it if so. */
static __always_inline int reply_allowed(__be32 peer)
{
	const __u64 interval = 1000000000ULL / PGWU_REPLY_RATE;
	__u64 now = bpf_ktime_get_ns(), *tat, t;

	tat = bpf_map_lookup_elem(&reply_budget, &peer);
	if (!tat) {
		t = now + interval;
		bpf_map_update_elem(&reply_budget, &peer, &t, BPF_ANY);
		return 1;
	}
	t = *tat;
	if (t > now + (PGWU_REPLY_BURST - 1) * interval)
		return 0;
	*tat = (t > now ? t : now) + interval;
	return 1;
}

/*
 * The IPv4 header of a packet the PGW-U itself sends (a reply, or an ICMP error in a tunnel): no
 * options, TOS 0, id 0, not fragmented, TTL OUTER_TTL, its checksum. ip + 1 must be in bounds.
 */
static __always_inline void ipv4_own_hdr(struct iphdr *ip, __be32 src, __be32 dst, __u8 proto,
					 __u16 tot_len, const void *data_end)
{
	ip->version = 4;
	ip->ihl = 5;
	ip->tos = 0;
	ip->tot_len = bpf_htons(tot_len);
	ip->id = 0;
	ip->frag_off = 0;
	ip->ttl = OUTER_TTL;
	ip->protocol = proto;
	ip->check = 0;
	ip->saddr = src;
	ip->daddr = dst;
	ip->check = csum_finish(ipv4_hdr_sum(ip, 5, data_end));
}

/* A G-PDU header at og to steid for n octets of T-PDU, with, when x (8), a DL PDU Session Container
 * of QFI qfi (TS 38.415 5.5.2.1) after it. -1 when the frame is too short for it. */
static __always_inline int gtpu_gpdu_hdr(struct gtpu_hdr *og, const void *data_end, __be32 steid,
					 __u32 n, __u32 x, __u8 qfi)
{
	if ((void *)(og + 1) > data_end)
		return -1;
	og->flags = 0x30;
	og->type = GTP_GPDU;
	og->length = bpf_htons(x + n);
	og->teid = steid;
	if (x) {
		__u8 *e = (void *)(og + 1);

		if ((void *)(e + 8) > data_end)
			return -1;
		og->flags = 0x30 | GTP_FLAG_E;
		e[0] = 0;
		e[1] = 0;
		e[2] = 0;
		e[3] = GTP_EXT_PDU_SESSION_CONTAINER;
		e[4] = 1;
		e[5] = 0;	/* DL PDU SESSION INFORMATION */
		e[6] = qfi;
		e[7] = 0;
	}
	return 0;
}

/* The IPv6 header of a packet the PGW-U itself sends (a reply, an ICMPv6 error, an error's tunnel):
 * class and flow label 0, hop limit OUTER_TTL, no extension header. src and dst must not point
 * into the packet. */
static __always_inline void ipv6_own_hdr(struct ipv6hdr *ip6, const __u8 *src, const __u8 *dst, __u8 nexthdr,
					 __u16 payload_len)
{
	*(__be32 *)ip6 = bpf_htonl(0x60000000);
	ip6->payload_len = bpf_htons(payload_len);
	ip6->nexthdr = nexthdr;
	ip6->hop_limit = OUTER_TTL;
	__builtin_memcpy(&ip6->saddr, src, 16);
	__builtin_memcpy(&ip6->daddr, dst, 16);
}

/* The tunnel of an error the PGW-U sends a UE (ICMP or ICMPv6 Time Exceeded of an uplink packet) at
 * oip: outer IPv4 local -> sgw (ipv4_own_hdr), UDP 2152 -> 2152 without a checksum, a G-PDU header
 * to steid with, when x (8), a DL PDU Session Container of QFI qfi, for n octets of inner packet.
 * -1 when the frame is too short for it. */
static __always_inline int reply_tunnel_hdr(struct iphdr *oip, const void *data_end, __be32 local, __be32 sgw,
					    __be32 steid, __u32 n, __u32 x, __u8 qfi)
{
	struct udphdr *ou = (void *)(oip + 1);
	struct gtpu_hdr *og = (void *)(ou + 1);

	if ((void *)(og + 1) > data_end)
		return -1;
	ipv4_own_hdr(oip, local, sgw, IPPROTO_UDP, 36 + x + n, data_end);
	ou->source = GTPU_PORT_BE;
	ou->dest = GTPU_PORT_BE;
	ou->len = bpf_htons(16 + x + n);
	ou->check = 0;
	return gtpu_gpdu_hdr(og, data_end, steid, n, x, qfi);
}

/* The sum of an IPv6 pseudo header's addresses (RFC 8200 8.1) at a (32 octets: src then dst), in
 * 32-bit words as csum_bytes sums */
static __always_inline __u64 n3v6_addr_sum(const void *a)
{
	const csum_word *w = a;
	__u64 sum = 0;
	int i;

	for (i = 0; i < 8; i++)
		sum += w[i];
	return sum;
}

/* reply_tunnel_hdr's twin for a bearer whose downlink peer is IPv6 (PGWU_B_PEER6; docs/ipv6.md "N3
 * over IPv6 in the PGW-U (XDP)"): at l2 (14 or 18) from ctx->data, IPv6 local -> peer (class and
 * flow label 0, hop limit OUTER_TTL), UDP 2152 -> 2152 with its checksum (RFC 8200 8.1: mandatory),
 * the G-PDU header (gtpu_gpdu_hdr) around the n octets of inner packet already in place after it,
 * its own checksums written (the UDP sum covers them). local and peer must not point into the
 * packet. Returns 0, or -1 when the frame is too short (only if the caller's lengths were wrong). */
static __always_inline int reply_tunnel6(struct xdp_md *ctx, __u32 l2, const __u8 *local, const __u8 *peer,
					 __be32 steid, __u32 n, __u32 x, __u8 qfi)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *o6 = data + (l2 == 18 ? 18 : 14);
	struct udphdr *ou = (void *)(o6 + 1);
	struct gtpu_hdr *og = (void *)(ou + 1);
	__u64 sum;
	int err;

	if ((void *)(og + 1) > data_end)
		return -1;
	ipv6_own_hdr(o6, local, peer, IPPROTO_UDP, 16 + x + n);
	ou->source = GTPU_PORT_BE;
	ou->dest = GTPU_PORT_BE;
	ou->len = o6->payload_len;
	ou->check = 0;
	if (gtpu_gpdu_hdr(og, data_end, steid, n, x, qfi))
		return -1;
	sum = n3v6_addr_sum(&o6->saddr) + ou->len + bpf_htons(IPPROTO_UDP);
	sum += csum_bytes_once(ctx, (l2 == 18 ? 18 : 14) + 40, 16 + x + n, &err);
	if (err)
		return -1;
	/* csum_bytes' loops leave the packet pointers unknown to the verifier: again */
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	ou = data + (l2 == 18 ? 18 : 14) + 40;
	if ((void *)(ou + 1) > data_end)
		return -1;
	ou->check = csum_finish_udp(sum);
	return 0;
}

/*
 * Turn the frame into a GTP-U message back to the sender of the one received (TS 29.281 5.1, 7.2,
 * 7.3): Ethernet with the addresses swapped (orig_mac: the received dst then src) and the received
 * tag if any; IPv4 local -> peer (tos 0, id 0, ttl 64, no options); UDP sport -> dport; GTP-U with
 * S set, TEID 0, sequence seq; then ie_len octets of IEs, which the caller writes at r->ie before
 * reply_csum. ie_len is a constant at each call; rx_len the frame's length, unchanged so far
 * (computed here, its subtraction of packet pointers is narrowed to 32 bits, which the verifier
 * refuses). Returns 0, or -1 when the frame can't be resized.
 */
struct reply {
	struct iphdr *ip;
	struct udphdr *udp;
	__u8 *ie;
};

#define REPLY_HDRS (20 + 8 + 12)
#define REPLY_SHIFT 4		/* every frame that gets here is longer than that */

static __always_inline int reply_start(struct xdp_md *ctx, __u32 rx_len, __u32 l2,
				       __be16 tci, const __u8 *orig_mac,
				       __be32 local, __be32 peer, __be16 sport, __be16 dport,
				       __u8 type, __be16 seq, __u32 ie_len, struct reply *r)
{
	__u32 new_len = l2 + REPLY_HDRS + ie_len;
	void *data, *data_end;
	struct gtpu_opt *ropt;
	struct gtpu_hdr *rg;
	struct ethhdr *eth;
	struct iphdr *rip;
	struct udphdr *ru;

	/* The start moves too (by REPLY_SHIFT), not only the end: a frame whose start stayed put
	 * is taken as unchanged by the kernel's live-frame page recycling (BPF_F_TEST_XDP_LIVE_FRAMES
	 * checks the frame's data pointer, not its length), so a generator on a veth peer would
	 * send its next frame from this page with our reply's length. */
	if (bpf_xdp_adjust_head(ctx, REPLY_SHIFT) ||
	    bpf_xdp_adjust_tail(ctx, (int)new_len - (int)(rx_len - REPLY_SHIFT)))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	rip = data + (l2 == 18 ? 18 : 14);
	if ((void *)rip + REPLY_HDRS + ie_len > data_end)
		return -1;
	eth = data;
	__builtin_memcpy(eth->h_dest, orig_mac + 6, 6);
	__builtin_memcpy(eth->h_source, orig_mac, 6);
	if (l2 == 18) {
		struct vlan_hdr *v = (void *)(eth + 1);

		eth->h_proto = ETH_P_8021Q_BE;
		v->tci = tci;
		v->encap_proto = ETH_P_IP_BE;
	} else {
		eth->h_proto = ETH_P_IP_BE;
	}
	ru = (void *)(rip + 1);
	rg = (void *)(ru + 1);
	ropt = (void *)(rg + 1);

	ipv4_own_hdr(rip, local, peer, IPPROTO_UDP, REPLY_HDRS + ie_len, data_end);

	ru->source = sport;
	ru->dest = dport;
	ru->len = bpf_htons(8 + 12 + ie_len);
	ru->check = 0;
	rg->flags = 0x30 | GTP_FLAG_S;
	rg->type = type;
	rg->length = bpf_htons(4 + ie_len);
	rg->teid = 0;
	ropt->seq = seq;
	ropt->npdu = 0;
	ropt->next_ext = 0;
	r->ip = rip;
	r->udp = ru;
	r->ie = (void *)(ropt + 1);
	return 0;
}

/* The reply's UDP checksum, once its IEs are written; ie_len the same constant. */
static __always_inline void reply_csum(struct xdp_md *ctx, struct reply *r, __u32 ie_len)
{
	void *data_end = (void *)(long)ctx->data_end;
	__u16 *w = (void *)r->udp;
	__u64 sum;
	int i;

	if ((void *)r->udp + 20 + ie_len > data_end)	/* checked in reply_start; for the verifier */
		return;
	sum = (__u64)r->ip->saddr + r->ip->daddr + bpf_htons(IPPROTO_UDP) + r->udp->len;
#pragma unroll
	for (i = 0; i < (20 + ie_len) / 2; i++)
		sum += w[i];
	if ((20 + ie_len) & 1) {
		__u16 last = 0;

		*(__u8 *)&last = ((__u8 *)r->udp)[20 + ie_len - 1];	/* the word [b, 0] */
		sum += last;
	}
	r->udp->check = csum_finish_udp(sum);
}

/*
 * An ICMP error (RFC 792: Time Exceeded 11/0; Destination Unreachable, Fragmentation Needed 3/4
 * with the next-hop MTU, RFC 1191), its IPv4 header at off_ip from ctx->data: src -> dst
 * (ttl 64, id 0) and the ICMP header; the quoted bytes (the expired packet's header and 8 octets
 * after it, RFC 792, RFC 1812 4.3.2.3) are already in place right after it, q of them. Returns 0, or
 * -1 when the bytes aren't there (only if the caller's lengths were wrong).
 */
struct icmp_te {
	__u8 type;
	__u8 code;
	__u16 check;
	__u32 unused;
};

static __always_inline int icmp_error(struct xdp_md *ctx, __u32 off_ip, __be32 src, __be32 dst,
				      __u32 q, __u8 type, __u8 code, __u16 mtu)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + (off_ip & 0xff);
	struct icmp_te *ic = (void *)(ip + 1);
	__u64 sum;
	int err;

	if ((void *)(ic + 1) > data_end)
		return -1;
	ipv4_own_hdr(ip, src, dst, IPPROTO_ICMP, 28 + q, data_end);
	ic->type = type;
	ic->code = code;
	ic->check = 0;
	ic->unused = bpf_htonl(mtu);	/* Fragmentation Needed: next-hop MTU (RFC 1191); else 0 */
	sum = csum_bytes_once(ctx, (off_ip & 0xff) + 28, q, &err);
	if (err)
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	ic = data + (off_ip & 0xff) + 20;
	if ((void *)(ic + 1) > data_end)
		return -1;
	/* the ICMP header's words: type code, 0 (check), 0, mtu */
	ic->check = csum_finish(sum + bpf_htons(((__u16)type << 8) | code) + bpf_htons(mtu));
	return 0;
}

/*
 * An ICMPv6 error (RFC 4443: Time Exceeded 3/0, Packet Too Big 2/0 with its MTU), its IPv6 header
 * at off_ip6 from ctx->data: src -> dst (class and flow label 0, hop limit OUTER_TTL), then the
 * ICMPv6 header (its second word mtu: 0 for Time Exceeded) with its checksum over the pseudo
 * header (RFC 8200 8.1); the invoking packet's first q octets are already in place after it. src
 * and dst must not point into the packet. Returns 0, or -1 when the bytes aren't there (only if
 * the caller's lengths were wrong).
 */
static __always_inline int icmp6_error(struct xdp_md *ctx, __u32 off_ip6, const __u8 *src,
				       const __u8 *dst, __u32 q, __u8 type, __u8 code, __u32 mtu)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + (off_ip6 & 0xff);
	struct icmp_te *ic = (void *)(ip6 + 1);
	const csum_word *w;
	__u64 sum = 0;
	int err, i;

	if ((void *)(ic + 1) > data_end)
		return -1;
	ipv6_own_hdr(ip6, src, dst, IPPROTO_ICMPV6, 8 + q);
	ic->type = type;
	ic->code = code;
	ic->check = 0;
	ic->unused = bpf_htonl(mtu);
	w = (void *)&ip6->saddr;
	for (i = 0; i < 8; i++)
		sum += w[i];
	/* the pseudo header's length and next header, the ICMPv6 header's type and code */
	sum += bpf_htons(8 + q) + bpf_htons(IPPROTO_ICMPV6) + bpf_htons(((__u16)type << 8) | code) +
	       bpf_htons(mtu >> 16) + bpf_htons(mtu & 0xffff);
	sum += csum_bytes_once(ctx, (off_ip6 & 0xff) + 48, q, &err);
	if (err)
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	ic = data + (off_ip6 & 0xff) + 40;
	if ((void *)(ic + 1) > data_end)
		return -1;
	ic->check = csum_finish(sum);
	return 0;
}

/* The invoking packet's bytes an ICMPv6 error quotes: as many as fit without the error exceeding
 * the IPv6 minimum MTU (RFC 4443 2.4(c)): 1280 - 40 (IPv6) - 8 (ICMPv6) */
#define ICMP6_QUOTE_MAX 1232
/* RFC 8200 5: the smallest MTU an IPv6 link has; a tunnel that leaves less is fragmented below
 * IPv6 (the outer IPv4 packet), not answered with Packet Too Big */
#define ICMP6_MIN_MTU 1280

/*
 * Whether an ICMPv6 error may answer the IPv6 packet at ip6 (RFC 4443 2.4(e)): not to the
 * unspecified, loopback or a multicast source, nor about an ICMPv6 error message (types below
 * 128; an extension header before it is not walked). Returns 1 when it may.
 */
static __always_inline int icmp6_may_answer(const struct ipv6hdr *ip6, const void *data_end)
{
	const __u8 *s = ip6->saddr.in6_u.u6_addr8;
	const __u32 *s32 = ip6->saddr.in6_u.u6_addr32;

	if (s[0] == 0xff)
		return 0;
	if (!s32[0] && !s32[1] && !s32[2] && (!s32[3] || s32[3] == bpf_htonl(1)))
		return 0;
	if (ip6->nexthdr == IPPROTO_ICMPV6) {
		const __u8 *t = (const void *)(ip6 + 1);

		if ((const void *)(t + 1) > data_end || *t < 128)
			return 0;
	}
	return 1;
}

/* An address folded to the 32 bits reply_budget is keyed by (a UE's /64, an SGi sender) */
static __always_inline __be32 addr6_fold(const __u32 *a, int words)
{
	return words == 2 ? a[0] ^ a[1] : a[0] ^ a[1] ^ a[2] ^ a[3];
}

static __always_inline int addr6_unset(const __u8 *a)
{
	const __u32 *w = (const void *)a;

	return !(w[0] | w[1] | w[2] | w[3]);
}

static __always_inline void sig_count(__be32 teid, __be32 addr, __u8 type, __be32 from)
{
	struct pgwu_sig_key k = { .teid = teid, .addr = addr, .type = type };
	struct pgwu_sig_val *v = bpf_map_lookup_elem(&sig_rx, &k), nv = {};

	if (v) {
		__sync_fetch_and_add(&v->packets, 1);
		v->last_ns = bpf_ktime_get_ns();
		v->from = from;
		return;
	}
	nv.packets = 1;
	nv.last_ns = bpf_ktime_get_ns();
	nv.from = from;
	bpf_map_update_elem(&sig_rx, &k, &nv, BPF_ANY);
}

/* An Echo Response from the peer at key in map (peers: IPv4 address; peers6: IPv6 address) with
 * its body at ie. TS 29.281 7.2.2: the Recovery IE follows the header (its value is not used by
 * GTP-U, 7.2.2 says: recorded to show the peer's restarts). */
static __always_inline void peer_echo_rsp(void *map, const void *key, const __u8 *ie, const void *ip_end,
					  const void *data_end, __be16 seq)
{
	struct pgwu_peer *pe = bpf_map_lookup_elem(map, key), np = {};
	int has_rc = (const void *)(ie + 2) <= ip_end && (const void *)(ie + 2) <= data_end &&
		     ie[0] == GTP_IE_RECOVERY;
	__u8 rc = 0;

	if (has_rc && (const void *)(ie + 2) <= data_end)
		rc = ie[1];
	if (!pe) {
		np.rsp_ns = bpf_ktime_get_ns();
		np.responses = 1;
		np.rsp_seq = bpf_ntohs(seq);
		np.restart_counter = rc;
		np.has_recovery = has_rc;
		bpf_map_update_elem(map, key, &np, BPF_NOEXIST);
	} else {
		if (has_rc && pe->has_recovery && pe->restart_counter != rc)
			pe->restarts++;
		pe->rsp_ns = bpf_ktime_get_ns();
		pe->responses++;
		pe->rsp_seq = bpf_ntohs(seq);
		pe->restart_counter = rc;
		pe->has_recovery = has_rc;
	}
}

SEC("xdp")
int xdp_access(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 rx_len = data_end - data;
	__u32 action = XDP_DROP, reason, zero = 0;
	struct cursor cur;
	struct pgwu_config *cfg;
	struct pgwu_ul_bearer *b;
	struct ethhdr *eth;
	struct vlan_hdr *tag;
	struct iphdr *ip, *iip;
	struct udphdr *udp;
	struct gtpu_hdr *gtp;
	struct nexthop nh;
	struct reply r;
	struct l3 h;
	struct gtpu_msg m;
	void *ip_end, *p;
	__u32 ihl_len, tot_len, udp_len, inner_len, iihl_len, out_l2;
	__u8 orig_mac[12];
	__u32 mtu = 0;
	__be32 peer;
	__be16 seq, peer_port;
	__u8 type;
	int i;

	reason = prologue(ctx, PGWU_SIDE_ACCESS, &h, &action);
	if (reason == PGWU_R_PASS_NOT_IPV4 && h.ip6 && !addr6_unset(h.cfg->n3_addr6))
		bpf_tail_call(ctx, &sgi_progs, PGWU_PROG_UL_N3V6);	/* N3 over IPv6: n3v6.h */
	if (reason)
		goto out;
	cfg = h.cfg;
	eth = h.eth;
	tag = h.tag;
	ip = h.ip;
	ihl_len = h.ihl_len;
	tot_len = h.tot_len;
	if (ip->protocol != IPPROTO_UDP || !cfg->local_addr || ip->daddr != cfg->local_addr) {
		action = XDP_PASS;
		reason = PGWU_R_PASS_NOT_GTPU;
		goto out;
	}
	if (ipv4_is_fragment(ip)) {
		/* for the kernel to reassemble, while a `pgwu reassemble` is there to take the
		 * datagram (the kernel clears its registration when it exits) */
		__u32 slot = PGWU_REG_REASM;
		__u64 *reasm = bpf_map_lookup_elem(&fib_gen, &slot);

		if (reasm && *(volatile __u64 *)reasm) {
			action = XDP_PASS;
			reason = PGWU_R_PASS_OUTER_FRAG;
		} else {
			reason = PGWU_R_DROP_OUTER_FRAG;
		}
		goto out;
	}

	/* From here on a header is truncated when it runs past the IP datagram (ip_end), never
	 * into Ethernet padding; the checks against data_end are for the verifier. */
	ip_end = (void *)ip + tot_len;
	cur.pos = (void *)ip + ihl_len;
	cur.end = ip_end;
	if (parse_udp(&cur, &udp) < 0 || (void *)(udp + 1) > data_end) {
		reason = PGWU_R_DROP_TRUNC_UDP;
		goto out;
	}
	if (udp->dest != GTPU_PORT_BE) {
		action = XDP_PASS;
		reason = PGWU_R_PASS_NOT_GTPU;
		goto out;
	}
	udp_len = bpf_ntohs(udp->len);
	if (udp_len < sizeof(*udp) || udp_len != tot_len - ihl_len) {
		reason = PGWU_R_DROP_BAD_UDP_LEN;
		goto out;
	}
	reason = gtpu_hdr_check(cur.pos, ip_end, data_end, udp_len, &m);
	if (reason)
		goto out;
	gtp = m.gtp;
	/* read once: a type read again after the switch below (its helper calls make the compiler
	 * reload it) is a new unknown to the verifier, which then walks every signalling case on
	 * into the G-PDU path */
	type = gtp->type;
	seq = m.seq;
	peer = ip->saddr;
	peer_port = udp->source;
	__builtin_memcpy(orig_mac, eth->h_dest, 12);

	if (!gtpu_msg_handled(type)) {
		reason = PGWU_R_DROP_GTP_UNKNOWN_MSG;
		goto out;
	}
	if (type == GTP_ECHO_REQ)
		goto echo;

	reason = gtpu_ext_walk(&m, ip_end, data_end);
	if (reason == PGWU_R_DROP_GTP_EXT_UNSUPPORTED)
		goto supp_ext;
	if (reason)
		goto out;
	/* the body's offset as an unknown within the frame's bounds: each step of the walk above
	 * left a pointer of its own (offset, known length), and the verifier walked all that
	 * follows for each of them */
	i = (long)m.p - (long)data;
	p = data + (i & 0x3fff);

	switch (type) {
	case GTP_ECHO_RSP:
		peer_echo_rsp(&peers, &peer, p, ip_end, data_end, seq);
		break;
	case GTP_ERROR_IND: {
		__be32 teid, addr;

		if (gtpu_err_ind_ies(p, ip_end, data_end, peer, &teid, &addr))
			sig_count(teid, addr, GTP_ERROR_IND, peer);
		break;
	}
	case GTP_END_MARKER:
		sig_count(gtp->teid, peer, GTP_END_MARKER, peer);
		break;
	}
	reason = gtpu_sig_reason(type);
	if (reason)
		goto out;

	b = NULL;
	{
		__u32 *mask = bpf_map_lookup_elem(&slot_mask, &zero), idx;
		struct pgwu_ul_slot *sl;

		if (mask) {
			idx = bpf_ntohl(gtp->teid) & *mask;
			sl = bpf_map_lookup_elem(&ul_slots, &idx);
			if (sl && sl->state == PGWU_SLOT_VALID && sl->teid == gtp->teid)
				b = &sl->b;
		}
	}
	if (!b)
		b = bpf_map_lookup_elem(&ul_bearers, &gtp->teid);
	if (!b) {
		reason = PGWU_R_DROP_UNKNOWN_TEID;
		goto err_ind;
	}

	reason = gpdu_qfi_check(b->flags, m.psc);
	if (reason)
		goto out;

	inner_len = ip_end - p;
	if (p < ip_end && p + 1 <= data_end && (*(__u8 *)p >> 4) == 6) {
		/* an IPv6 T-PDU: xdp_access6 (a tail call: its stack and this one's would be over
		 * the verifier's 512 bytes), which takes over from here with what is known */
		struct pgwu_ul6_handoff *ho = bpf_map_lookup_elem(&ul6_handoff, &zero);

		if (ho) {
			ho->teid = gtp->teid;
			ho->flags = b->flags;
			ho->inner_off = p - data;
			ho->inner_len = inner_len;
			__builtin_memcpy(ho->orig_mac, orig_mac, 12);
			ho->peer = peer;
			ho->peer6 = 0;
			ho->vid = tag ? bpf_ntohs(tag->tci) & 0x0fff : 0;
			bpf_tail_call(ctx, &sgi_progs, PGWU_PROG_ACCESS6);
		}
		/* not there: as before it existed (drop_inner_not_ipv4 below) */
	}
	reason = gpdu_inner_check(p, ip_end, data_end, !(cfg->flags & PGWU_CFG_NO_INNER_CSUM_CHECK),
				  b->ue_addr, &iip);
	if (reason == PGWU_R_DROP_TTL_EXPIRED) {
		iihl_len = iip->ihl * 4;
		goto ttl_expired;
	}
	if (reason)
		goto out;

	reason = resolve_nexthop(ctx, cfg, PGWU_SIDE_SGI, iip->saddr, iip->daddr, iip->tos,
				 iip->protocol, inner_len, &nh, &mtu);
	if (reason == PGWU_R_PASS_NO_NEIGH || reason == PGWU_R_PASS_FIB_OTHER) {
		/* the kernel routes the inner packet (and resolves its neighbour): give it the
		 * decapsulated packet in a frame addressed as the one received */
		out_l2 = sizeof(struct ethhdr);
	} else if (reason) {
		goto out;
	} else {
		out_l2 = cfg->egress_vlan[PGWU_SIDE_SGI] ? 18 : 14;
	}
	if (b->flags & (PGWU_B_QOS | PGWU_B_SDF)) {
		/* last, so that only a packet that would leave is policed and counted in quota;
		 * one the kernel routes (PASS) leaves too */
		__u32 qr = pdr_apply(ctx, b->flags, gtp->teid, PGWU_PFCP_UPLINK, (void *)iip - data,
				     inner_len, !reason);

		if (qr) {
			reason = qr;
			action = XDP_DROP;
			goto out;
		}
	}

	/* Decapsulate: move the start of the frame to out_l2 bytes before the inner packet and
	 * cut what follows it. All packet pointers are invalid after this. */
	i = (long)iip - (long)data;	/* a scalar before it is mixed with out_l2 */
	asm volatile("" : "+r"(i));
	if (bpf_xdp_adjust_head(ctx, i - (int)out_l2) ||
	    trim_to(ctx, out_l2 + inner_len)) {
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	/* write_eth's 18 octets at most; never short: out_l2 + an inner packet of >= 20 octets (the
	 * inner header is checked again below) */
	if (data + 18 > data_end) {
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	if (reason) {
		struct ethhdr *e = data;

		__builtin_memcpy(e->h_dest, orig_mac, 12);
		e->h_proto = ETH_P_IP_BE;
		action = XDP_PASS;
		goto out;
	}
	write_eth(data, nh.dmac, nh.smac, cfg->egress_vlan[PGWU_SIDE_SGI]);
	iip = data + out_l2;
	if ((void *)(iip + 1) > data_end) {
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	ipv4_decrease_ttl(iip);
	__sync_fetch_and_add(&b->packets, 1);
	__sync_fetch_and_add(&b->bytes, inner_len);
	action = forward(ctx, nh.ifindex);
	reason = PGWU_R_UL_FWD;
	goto out;

echo:
	/* TS 29.281 7.2.2: Echo Response = header with S set, the request's sequence number, and
	 * a Recovery IE, to the request's source port. Never to an address nobody may be answered
	 * at: a forged source would make us send to ourselves or to a whole network. */
	if (martian_src(peer, cfg)) {
		reason = PGWU_R_DROP_ECHO_BAD_SRC;
		goto out;
	}
	if (reply_start(ctx, rx_len, tag ? 18 : 14, tag ? tag->tci : 0, orig_mac, cfg->local_addr, peer, GTPU_PORT_BE,
			peer_port, GTP_ECHO_RSP, seq, 2, &r)) {
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	r.ie[0] = GTP_IE_RECOVERY;
	r.ie[1] = cfg->restart_counter;
	reply_csum(ctx, &r, 2);
	action = XDP_TX;
	reason = PGWU_R_ECHO_REPLY;
	goto out;

err_ind:
	/* TS 29.281 7.3.1: Error Indication to the G-PDU's sender, from and to port 2152 (4.4.2.4),
	 * naming the TEID it used (Tunnel Endpoint Identifier Data I) and the address it sent to
	 * (GTP-U Peer Address). The G-PDU stays counted as drop_unknown_teid (verdict tx). */
	if ((cfg->flags & PGWU_CFG_NO_ERR_IND) || martian_src(peer, cfg))
		goto out;
	if (!reply_allowed(peer)) {
		event(PGWU_EV_ERR_IND_RATE_LIMITED);
		goto out;
	}
	{
		__be32 teid = gtp->teid;

		if (reply_start(ctx, rx_len, tag ? 18 : 14, tag ? tag->tci : 0, orig_mac, cfg->local_addr, peer, GTPU_PORT_BE,
				GTPU_PORT_BE, GTP_ERROR_IND, 0, 12, &r))
			goto out;
		r.ie[0] = GTP_IE_TEID_DATA_I;
		__builtin_memcpy(r.ie + 1, &teid, 4);
		r.ie[5] = GTP_IE_PEER_ADDR;
		r.ie[6] = 0;
		r.ie[7] = 4;
		__builtin_memcpy(r.ie + 8, &cfg->local_addr, 4);
	}
	reply_csum(ctx, &r, 12);
	event(PGWU_EV_ERR_IND_SENT);
	action = XDP_TX;
	goto out;

ttl_expired: {
	/* RFC 1812 5.3.1: Time Exceeded to the UE, through its tunnel: the frame becomes Ethernet
	 * (back to the sender of the G-PDU, the received VLAN id) / IPv4 local -> SGW / UDP 2152 ->
	 * 2152, checksum 0 / GTP-U G-PDU with the SGW's TEID / IPv4 local -> UE / ICMP / the expired
	 * packet's header and 8 octets. Rate-limited per UE. A bearer with a QFI gets its PDU
	 * Session Container, as its downlink G-PDUs do (x = 8 more octets). */
	struct pgwu_dl_bearer *dl;
	__be32 ue = iip->saddr, sgw, steid;
	__u16 vid = tag ? bpf_ntohs(tag->tci) & 0x0fff : 0;
	__u32 l2 = vid ? 18 : 14, q = iihl_len + 8, off, x;	/* a priority tag (VID 0) is dropped */
	__u8 qfi;
	struct iphdr *oip;

	if ((cfg->flags & PGWU_CFG_NO_ERR_IND) || martian_src(peer, cfg))
		goto out;
	dl = bpf_map_lookup_elem(&dl_bearers, &ue);
	if (!dl || (dl->flags & PGWU_B_PEER6))	/* an IPv6 peer: no IPv4 tunnel to answer in */
		goto out;
	sgw = dl->sgw_addr;
	steid = dl->sgw_teid;
	x = dl->flags & PGWU_B_QFI ? 8 : 0;
	qfi = (dl->flags >> PGWU_B_QFI_SHIFT) & 0x3f;
	if (!reply_allowed(ue)) {
		event(PGWU_EV_ICMP_RATE_LIMITED);
		goto out;
	}
	if (q > inner_len)
		q = inner_len;
	/* the expired packet's header goes to l2 + 64: outer IPv4, UDP, GTP-U, IPv4, ICMP before it */
	i = (long)iip - (long)data;
	asm volatile("" : "+r"(i));
	if (bpf_xdp_adjust_head(ctx, i - (int)(l2 + 64 + x)) || trim_to(ctx, l2 + 64 + x + q))
		goto out;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + 18 + 64 + 8 > data_end)	/* the inner header alone is 20 */
		goto out;
	off = write_eth(data, orig_mac + 6, orig_mac, vid);
	oip = data + (off == 18 ? 18 : 14);
	if (reply_tunnel_hdr(oip, data_end, cfg->local_addr, sgw, steid, 28 + q, x, qfi))
		goto out;
	if (icmp_error(ctx, off + 36 + x, cfg->local_addr, ue, q, 11, 0, 0))
		goto out;
	event(PGWU_EV_ICMP_TIME_EXCEEDED_SENT);
	action = XDP_TX;
	goto out;
}

supp_ext:
	/* TS 29.281 7.2.3: Supported Extension Headers Notification to the sender's port (4.4.2.5),
	 * listing the types we know (Extension Header Type List, 8.5: type, length, types). */
	reason = PGWU_R_DROP_GTP_EXT_UNSUPPORTED;
	if ((cfg->flags & PGWU_CFG_NO_ERR_IND) || martian_src(peer, cfg))
		goto out;
	if (!reply_allowed(peer)) {
		event(PGWU_EV_SUPP_EXT_RATE_LIMITED);
		goto out;
	}
	if (reply_start(ctx, rx_len, tag ? 18 : 14, tag ? tag->tci : 0, orig_mac, cfg->local_addr, peer, GTPU_PORT_BE,
			peer_port, GTP_SUPP_EXT_NOTIF, 0, GTPU_EXT_LIST_IE_LEN, &r))
		goto out;
	gtpu_ext_list_ie(r.ie);
	reply_csum(ctx, &r, GTPU_EXT_LIST_IE_LEN);
	event(PGWU_EV_SUPP_EXT_SENT);
	action = XDP_TX;
	goto out;

out:
	count(reason, action, rx_len);
	return action;
}

/*
 * The IPv6 halves through the slot index first, as the IPv4 ones (pgwu.h: the TEID's IPv6 uplink
 * in the second entry of its ul_slots line, the /64's downlink half in dl6_slots), the hash maps
 * for what it does not hold. An array lookup is inlined by the verifier where a hash lookup is a
 * helper call and two dependent misses at 1 M bearers (bucket, element); the uplink's line is
 * the one xdp_access has just read for the IPv4 half.
 */
static __always_inline struct pgwu_ul6 *ul6_find(__be32 teid)
{
	__u32 zero = 0, *mask = bpf_map_lookup_elem(&slot_mask, &zero), idx;
	struct pgwu_ul_slot *sl;

	if (mask) {
		idx = bpf_ntohl(teid) & *mask;
		sl = bpf_map_lookup_elem(&ul_slots, &idx);
		if (sl && sl->state6 == PGWU_SLOT_VALID && sl->teid6 == teid)
			return &sl->u6;
	}
	return bpf_map_lookup_elem(&ul6_prefix, &teid);
}

/* dl6_find_at's *at for an entry found in the hash map: no slot index is this large */
#define PGWU_SLOT_NONE 0xffffffffU

/*
 * pgwu_slot6_of (pgwu.h) for a prefix loaded from the wire into a little-endian register: octets
 * 4-7 are its high word, read big-endian. One shift and one byte swap, where pgwu_slot6_of's four
 * octets took 13 instructions in xdp_sgi6.
 */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "slot6_of and addr6_prefix read the /64 as a little-endian word"
#endif
static __always_inline __u32 slot6_of(__u64 prefix)
{
	return bpf_ntohl((__u32)(prefix >> 32));
}

/* An address's /64 as dl6_bearers' key (its 8 octets as on the wire), from two 32-bit loads: a
 * memcpy from the octets was eight byte loads, shifted and or-ed (clang does not know the
 * header's alignment from a __u8 pointer) */
static __always_inline __u64 addr6_prefix(const struct in6_addr *a)
{
	return (__u64)a->in6_u.u6_addr32[1] << 32 | a->in6_u.u6_addr32[0];
}

/* The /64's entry, its slot's index (slot6_of or pgwu_slot6_of of it) in *at, PGWU_SLOT_NONE when
 * in the hash map */
static __always_inline struct pgwu_dl_bearer *dl6_find_in(__u64 prefix, __u32 slot, __u32 *at)
{
	__u32 zero = 0, *mask = bpf_map_lookup_elem(&slot_mask, &zero), idx;
	struct pgwu_dl6_slot *sl;

	*at = PGWU_SLOT_NONE;
	if (mask) {
		idx = slot & *mask;
		sl = bpf_map_lookup_elem(&dl6_slots, &idx);
		if (sl && sl->state == PGWU_SLOT_VALID && sl->prefix == prefix) {
			*at = idx;
			return &sl->b;
		}
	}
	return bpf_map_lookup_elem(&dl6_bearers, &prefix);
}

static __always_inline struct pgwu_dl_bearer *dl6_find_at(__u64 prefix, __u32 *at)
{
	return dl6_find_in(prefix, slot6_of(prefix), at);
}

/* pgwu_slot6_of here: with slot6_of clang spilled a packet pointer of xdp_dl_n3v6's as 32 bits
 * (clang 14), which the verifier refuses ("invalid size of register spill") */
static __always_inline struct pgwu_dl_bearer *dl6_find(__u64 prefix)
{
	__u32 at;

	return dl6_find_in(prefix, pgwu_slot6_of(prefix), &at);
}

/*
 * The usage counters of a forwarded IPv6 packet on the downlink, found again where dl6_find_at
 * found the entry (the slot's line is still in the cache): dl6_count_at goes straight to the slot
 * it was in (no mask, no hash; the hash map when it is not there, or no longer), dl6_count looks
 * it up whole (n3v6.h). sgi_ipv6 keeps a copy of the entry's first half, not the pointer: a
 * pointer into either of two maps kept live to its end doubled the states the verifier walks in
 * xdp_sgi6 (338,581 instructions walked with the whole entry copied and found again, 565,687 with
 * the pointer kept, 229,339 with the slot kept and 16 octets copied, kernel 6.18; 230,843 this
 * way once the /64 was read as two words, and 731,528 with the slot's pointer kept then).
 * xdp_access6 keeps its pointer (38,348 walked, 35,738 before).
 */
static __always_inline void dl6_count(__u64 prefix, __u32 len)
{
	struct pgwu_dl_bearer *b = dl6_find(prefix);

	if (b) {
		__sync_fetch_and_add(&b->packets, 1);
		__sync_fetch_and_add(&b->bytes, len);
	}
}

static __always_inline void dl6_count_at(__u64 prefix, __u32 at, __u32 len)
{
	struct pgwu_dl_bearer *b = NULL;

	if (at != PGWU_SLOT_NONE) {	/* where dl6_find_at found it: no mask, no hash */
		struct pgwu_dl6_slot *sl = bpf_map_lookup_elem(&dl6_slots, &at);

		if (sl && sl->state == PGWU_SLOT_VALID && sl->prefix == prefix)
			b = &sl->b;
	}
	if (!b)		/* in the hash map, or moved there since (its slot emptied) */
		b = bpf_map_lookup_elem(&dl6_bearers, &prefix);

	if (b) {
		__sync_fetch_and_add(&b->packets, 1);
		__sync_fetch_and_add(&b->bytes, len);
	}
}

/*
 * RFC 4443 3.3 / 3.2: Time Exceeded (type 3, mtu 0) to the sender of a downlink IPv6 packet whose
 * hop limit expired, or Packet Too Big (type 2) with the MTU it can have, out of the SGi interface
 * it came in on, as the IPv4 downlink's (xdp_sgi icmp_reply): Ethernet (addresses swapped, the
 * received VLAN id) / IPv6 local_addr6 -> sender / ICMPv6 type/0 / the packet, as much as fits in
 * 1280 octets. None without local_addr6 or with err-ind off, nor where RFC 4443 2.4(e) forbids one
 * (icmp6_may_answer). Rate-limited per sender (its address folded to 32 bits, in reply_budget with
 * the IPv4 peers). Returns the verdict.
 */
static __always_inline __u32 sgi6_error(struct xdp_md *ctx, const struct pgwu_config *cfg,
					__u32 in_l2, __u32 tot_len, __u8 type, __u32 mtu)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct vlan_hdr *tag = (void *)(eth + 1);
	struct ipv6hdr *ip6 = data + (in_l2 == 18 ? 18 : 14);
	__u8 src[16], me[16], macs[12];
	__u32 q = tot_len, l2, off;
	__u16 vid;

	if ((cfg->flags & PGWU_CFG_NO_ERR_IND) || addr6_unset(cfg->local_addr6))
		return XDP_DROP;
	if ((void *)(ip6 + 1) > data_end || !icmp6_may_answer(ip6, data_end))
		return XDP_DROP;
	vid = in_l2 == 18 ? bpf_ntohs(tag->tci) & 0x0fff : 0;	/* a priority tag (VID 0) is dropped */
	if (!reply_allowed(addr6_fold(ip6->saddr.in6_u.u6_addr32, 4))) {
		event(PGWU_EV_ICMP_RATE_LIMITED);
		return XDP_DROP;
	}
	__builtin_memcpy(src, &ip6->saddr, 16);
	__builtin_memcpy(me, cfg->local_addr6, 16);
	__builtin_memcpy(macs, eth->h_dest, 12);
	if (q > ICMP6_QUOTE_MAX)
		q = ICMP6_QUOTE_MAX;
	l2 = vid ? 18 : 14;
	if (bpf_xdp_adjust_head(ctx, (int)in_l2 - (int)(l2 + 48)) || trim_to(ctx, l2 + 48 + q))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + 18 + 48 > data_end)
		return XDP_DROP;
	off = write_eth_proto(data, macs + 6, macs, vid, ETH_P_IPV6_BE);
	if (icmp6_error(ctx, off, me, src, q, type, 0, mtu))
		return XDP_DROP;
	event(type == 2 ? PGWU_EV_ICMP6_TOO_BIG_SENT : PGWU_EV_ICMP_TIME_EXCEEDED_SENT);
	return XDP_TX;
}

/*
 * RFC 4443 3.3 / 3.2: Time Exceeded (type 3, mtu 0) to the UE whose uplink IPv6 packet's hop limit
 * expired, or Packet Too Big (type 2) with the SGi route's MTU, through its tunnel, as the IPv4
 * uplink's (xdp_access ttl_expired): Ethernet back to the sender of the G-PDU (its VLAN id) / IPv4
 * local -> SGW / UDP 2152 -> 2152, checksum 0 / GTP-U G-PDU with the SGW's TEID, and the PDU
 * Session Container of a bearer with a QFI (x = 8 octets) / IPv6 local_addr6 -> UE / ICMPv6
 * type/0 / the packet, as much as fits in 1280 octets. The SGW and its TEID are the /64's downlink
 * half (dl6_bearers). A G-PDU that came over IPv6 (ho->peer6, xdp_ul_n3v6) is answered in the same
 * way through an IPv6 tunnel (reply_tunnel6: n3_addr6 -> the half's IPv6 peer, UDP checksum
 * computed); each family answers only through a tunnel of its own (a half whose peer is of the
 * other family: none). None without local_addr6, with err-ind off, from a martian sender, or where
 * RFC 4443 2.4(e) forbids one. Rate-limited per UE /64. The T-PDU (inner_len octets at off) has
 * been checked whole. Returns the verdict.
 */
static __always_inline __u32 ul6_error(struct xdp_md *ctx, const struct pgwu_config *cfg,
				       const struct pgwu_ul6_handoff *ho, __u64 prefix,
				       __u32 off, __u32 inner_len, __u8 type, __u32 mtu)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + (off & 0x3fff);
	struct pgwu_n3v6_peer *pe = NULL;
	struct pgwu_dl_bearer *dl;
	struct iphdr *oip;
	__u8 ue[16], me[16], mac[12], qfi, v6 = ho->peer6;
	__u32 q = inner_len, x, l2, o, hdrs, idx;
	__be32 sgw, steid;
	__u16 vid = ho->vid & 0x0fff;

	if ((cfg->flags & PGWU_CFG_NO_ERR_IND) || addr6_unset(cfg->local_addr6) ||
	    (!v6 && martian_src(ho->peer, cfg)))
		return XDP_DROP;
	if ((void *)(ip6 + 1) > data_end || !icmp6_may_answer(ip6, data_end))
		return XDP_DROP;
	dl = dl6_find(prefix);
	if (!dl || !(dl->flags & PGWU_B_PEER6) != !v6)	/* no tunnel of the G-PDU's family */
		return XDP_DROP;
	sgw = dl->sgw_addr;
	steid = dl->sgw_teid;
	x = dl->flags & PGWU_B_QFI ? 8 : 0;
	qfi = (dl->flags >> PGWU_B_QFI_SHIFT) & 0x3f;
	if (v6) {
		idx = sgw;
		pe = bpf_map_lookup_elem(&n3v6_peers, &idx);
		if (!pe || addr6_unset(pe->addr) || addr6_unset(cfg->n3_addr6))
			return XDP_DROP;
	}
	if (!reply_allowed(addr6_fold((const __u32 *)&prefix, 2))) {
		event(PGWU_EV_ICMP_RATE_LIMITED);
		return XDP_DROP;
	}
	__builtin_memcpy(ue, &ip6->saddr, 16);
	__builtin_memcpy(me, cfg->local_addr6, 16);
	__builtin_memcpy(mac, ho->orig_mac, 12);
	if (q > ICMP6_QUOTE_MAX)
		q = ICMP6_QUOTE_MAX;
	l2 = vid ? 18 : 14;
	/* the expired packet goes to l2 + hdrs: outer IPv4 (IPv6), UDP, GTP-U, IPv6, ICMPv6 before it */
	hdrs = (v6 ? 104 : 84) + x;
	if (bpf_xdp_adjust_head(ctx, (int)off - (int)(l2 + hdrs)) || trim_to(ctx, l2 + hdrs + q))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + 18 + 104 + 8 > data_end)	/* the quoted header alone is 40 */
		return XDP_DROP;
	o = write_eth_proto(data, mac + 6, mac, vid, v6 ? ETH_P_IPV6_BE : ETH_P_IP_BE);
	if (v6) {
		/* the inner error first: the outer UDP checksum covers it */
		if (icmp6_error(ctx, o + 56 + x, me, ue, q, type, 0, mtu) ||
		    reply_tunnel6(ctx, o, cfg->n3_addr6, pe->addr, steid, 48 + q, x, qfi))
			return XDP_DROP;
	} else {
		oip = data + (o == 18 ? 18 : 14);
		if (reply_tunnel_hdr(oip, data_end, cfg->local_addr, sgw, steid, 48 + q, x, qfi) ||
		    icmp6_error(ctx, o + 36 + x, me, ue, q, type, 0, mtu))
			return XDP_DROP;
	}
	event(type == 2 ? PGWU_EV_ICMP6_TOO_BIG_SENT : PGWU_EV_ICMP_TIME_EXCEEDED_SENT);
	return XDP_TX;
}

/*
 * IPv6 on SGi (the UE's /64 in dl6_bearers, maps.h): the same downlink as IPv4's, in a program of
 * its own (xdp_sgi6, tail-called by xdp_sgi): in xdp_sgi, even as a function, its stack and the
 * IPv4 path's came to 608 bytes, over the verifier's 512, and the IPv4 path stays as it was. Inside the IPv4 tunnel: GTP-U/UDP/IPv4
 * (gtpu_encap_write) around the IPv6 packet, outer TOS the Traffic Class. Returns the reason; the
 * verdict in *action. in_l2: 14, or 18 with an 802.1Q tag.
 *  - fe80::/10 and multicast destinations, and Neighbor Discovery (ICMPv6 133-137: the kernel
 *    resolves its own neighbours on SGi) go to the kernel: PASS_NOT_UE, as IPv4 outside the pool.
 *  - a /64 with no bearer: DROP_UNKNOWN_UE (no IPv6 pool to tell a UE address from another one).
 *  - hop limit <= 1: DROP_TTL_EXPIRED, answered with ICMPv6 Time Exceeded (sgi6_error), never
 *    passed: the kernel has no route to the UE prefixes.
 *  - over the access route's MTU once encapsulated: DROP_TOO_BIG, answered with ICMPv6 Packet
 *    Too Big (the route's MTU - the encapsulation) while that leaves >= 1280 octets; below, the
 *    outer header has no DF and the packet goes to the kernel, which fragments the outer IPv4
 *    (PASS_FIB_OTHER; RFC 8200 5: a link under 1280 fragments below IPv6).
 */
static __always_inline __u32 sgi_ipv6(struct xdp_md *ctx, struct pgwu_config *cfg, __u32 in_l2,
				      __u32 *action)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = data + (in_l2 == 18 ? 18 : 14);
	struct pgwu_dl_bearer *b, bv;
	struct gtpu_encap e;
	__u32 at;
	struct nexthop nh;
	struct iphdr *oip;
	__u32 tot_len, out_l2, csum_on, pass, mtu = 0, encap, zero = 0, reason, l2 = in_l2 == 18 ? 18 : 14;
	__u32 s0, d0, l4 = 0;
	__u64 prefix, isum = 0;
	__u8 qfi, tc, nexthdr, *d8;
	__be16 sport;
	int err;

	*action = XDP_DROP;
	if ((void *)(ip6 + 1) > data_end)
		return PGWU_R_DROP_BAD_IP_DL;
	if (ip6->version != 6)
		return PGWU_R_DROP_BAD_IP_DL;
	tot_len = sizeof(*ip6) + bpf_ntohs(ip6->payload_len);
	if ((void *)ip6 + tot_len > data_end)
		return PGWU_R_DROP_BAD_IP_DL;
	d8 = ip6->daddr.in6_u.u6_addr8;
	nexthdr = ip6->nexthdr;
	if (d8[0] == 0xff || (d8[0] == 0xfe && (d8[1] & 0xc0) == 0x80)) {
		*action = XDP_PASS;
		return PGWU_R_PASS_NOT_UE;
	}
	if (nexthdr == IPPROTO_ICMPV6) {
		__u8 *t = (void *)(ip6 + 1);

		if ((void *)(t + 1) <= data_end && *t >= 133 && *t <= 137) {
			*action = XDP_PASS;
			return PGWU_R_PASS_NOT_UE;
		}
	}
	prefix = addr6_prefix(&ip6->daddr);
	b = dl6_find_at(prefix, &at);
	if (!b)
		return PGWU_R_DROP_UNKNOWN_UE;
	if (b->flags & PGWU_B_PEER6) {
		bpf_tail_call(ctx, &sgi_progs, PGWU_PROG_DL_N3V6);	/* an IPv6 peer: n3v6.h */
		return PGWU_R_DROP_NOT_CONFIGURED;
	}
	__builtin_memcpy(&bv, b, 16);	/* a copy of what is read (dl6_count_at): not the counters */
	b = &bv;
	if (ip6->hop_limit <= 1) {
		reason = PGWU_R_DROP_TTL_EXPIRED;
		goto icmp6;
	}

	tc = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
	/* the flow's outer source port: pgwu_sport_of over the addresses folded to a word each */
	s0 = ip6->saddr.in6_u.u6_addr32[0] ^ ip6->saddr.in6_u.u6_addr32[1] ^
	     ip6->saddr.in6_u.u6_addr32[2] ^ ip6->saddr.in6_u.u6_addr32[3];
	d0 = ip6->daddr.in6_u.u6_addr32[0] ^ ip6->daddr.in6_u.u6_addr32[1] ^
	     ip6->daddr.in6_u.u6_addr32[2] ^ ip6->daddr.in6_u.u6_addr32[3];
	if (nexthdr == IPPROTO_TCP || nexthdr == IPPROTO_UDP) {
		__u32 *ports = (void *)(ip6 + 1);

		if (tot_len >= sizeof(*ip6) + 4 && (void *)(ports + 1) <= data_end)
			l4 = *ports;
	}
	sport = cfg->flags & PGWU_CFG_SPORT_FIXED ? GTPU_PORT_BE :
		bpf_htons(pgwu_sport_of(s0, d0, l4, nexthdr));
	qfi = gtpu_dl_qfi(b->flags);
	encap = gtpu_encap_len(qfi);
	/* The frame's pointers afresh, known to hold the fixed header only: the checks above left
	 * them with different known lengths (the ports, the ICMPv6 type), and the verifier walked
	 * the rest for each. (volatile: loaded again, not the registers the compiler kept) */
	data = (void *)(long)*(volatile __u32 *)&ctx->data;
	data_end = (void *)(long)*(volatile __u32 *)&ctx->data_end;
	eth = data;
	ip6 = data + l2;
	if ((void *)(ip6 + 1) > data_end)
		return PGWU_R_DROP_BAD_IP_DL;
	reason = resolve_nexthop(ctx, cfg, PGWU_SIDE_ACCESS, cfg->local_addr, b->sgw_addr, tc,
				 IPPROTO_UDP, tot_len + encap, &nh, &mtu);
	if (mtu >= ICMP6_MIN_MTU + encap) {
		/* RFC 4443 3.2: too big for the tunnel, which leaves it >= 1280 octets */
		reason = PGWU_R_DROP_TOO_BIG;
		goto icmp6;
	}
	pass = reason == PGWU_R_PASS_NO_NEIGH || reason == PGWU_R_PASS_FIB_OTHER;
	if (reason && !pass)
		return reason;
	if (b->flags & (PGWU_B_QOS | PGWU_B_SDF)) {
		__u32 qr = pdr_apply(ctx, b->flags, b->local_teid, PGWU_PFCP_DOWNLINK,
				     (void *)ip6 - data, tot_len, !pass);

		if (qr)
			return qr;
	}
	if (pass) {
		__builtin_memcpy(nh.dmac, eth->h_dest, 6);
		__builtin_memcpy(nh.smac, eth->h_source, 6);
		out_l2 = 14;
	} else {
		out_l2 = cfg->egress_vlan[PGWU_SIDE_ACCESS] ? 18 : 14;
	}

	/* an IP hop on SGi: the hop limit goes down before the packet enters the tunnel */
	ip6->hop_limit--;
	csum_on = gtpu_dl_csum_on(b->flags, cfg->flags);
	if (csum_on) {
		/* the inner packet's sum: its fixed header, then the payload's from its own checksum
		 * where that covers it (TCP, UDP with one, ICMPv6: each sums to the negated pseudo
		 * header, RFC 8200 8.1), else summed */
		const csum_word *w = (void *)ip6;
		__u32 plen = tot_len - sizeof(*ip6);
		int i, trusted = 0;

		if ((void *)(w + 10) > data_end)
			return PGWU_R_DROP_BAD_IP_DL;
		for (i = 0; i < 10; i++)
			isum += w[i];
		if (nexthdr == IPPROTO_TCP && plen >= 20)
			trusted = 1;
		else if (nexthdr == IPPROTO_ICMPV6 && plen >= 4)
			trusted = 1;
		else if (nexthdr == IPPROTO_UDP && plen >= 8) {
			struct udphdr *u = (void *)(ip6 + 1);

			trusted = (void *)(u + 1) <= data_end && u->check;
		}
		if (trusted) {
			__u64 pseudo = bpf_htons((__u16)plen) + bpf_htons(nexthdr);

			for (i = 2; i < 10; i++)
				pseudo += w[i];
			isum += csum_neg(pseudo);
		} else {
			isum += csum_bytes_once(ctx, l2 + sizeof(*ip6), plen, &err);
			if (err)
				return PGWU_R_DROP_BAD_IP_DL;
		}
	}

	if (trim_to(ctx, l2 + tot_len) || bpf_xdp_adjust_head(ctx, (int)l2 - (int)(out_l2 + encap)))
		return PGWU_R_DROP_ADJUST;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + 18 + GTPU_ENCAP_LEN + 8 > data_end)
		return PGWU_R_DROP_ADJUST;
	write_eth(data, nh.dmac, nh.smac, pass ? 0 : cfg->egress_vlan[PGWU_SIDE_ACCESS]);
	oip = data + (out_l2 == 18 ? 18 : 14);
	e.saddr = cfg->local_addr;
	e.daddr = b->sgw_addr;
	e.teid = b->sgw_teid;
	e.sport = sport;
	e.inner_len = tot_len;
	e.tos = tc;
	e.df = 0;
	e.qfi = qfi;
	{
		__u32 *id = bpf_map_lookup_elem(&ip_id, &zero);

		e.id = id ? bpf_htons((__u16)__sync_fetch_and_add(id, 1)) : 0;
	}
	if (!gtpu_encap_write(oip, data_end, &e) ||
	    (csum_on && !gtpu_encap_csum(oip, data_end, qfi, isum)))
		return PGWU_R_DROP_ADJUST;
	if (pass) {
		*action = XDP_PASS;
		return reason;
	}
	dl6_count_at(prefix, at, tot_len);
	*action = forward(ctx, nh.ifindex);
	return PGWU_R_DL_FWD;

icmp6:	/* one inlined copy for both errors: the verifier walks it once */
	*action = sgi6_error(ctx, cfg, in_l2, tot_len, reason == PGWU_R_DROP_TOO_BIG ? 2 : 3,
			     reason == PGWU_R_DROP_TOO_BIG ? mtu - encap : 0);
	return reason;
}

/* xdp_sgi's IPv6 frames (sgi_ipv6). Counted here, with the frame's length as received. */
SEC("xdp")
int xdp_sgi6(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct cursor cur = { .pos = data, .end = data_end };
	__u32 rx_len = data_end - data, action = XDP_DROP, reason, zero = 0;
	struct pgwu_config *cfg = bpf_map_lookup_elem(&config, &zero);
	struct vlan_hdr *tag;
	struct ethhdr *eth;
	int proto;

	if (!cfg) {
		reason = PGWU_R_DROP_NOT_CONFIGURED;
		goto out;
	}
	proto = parse_eth(&cur, &eth, &tag);
	if (proto != ETH_P_IPV6_BE) {	/* only xdp_sgi's IPv6 frames get here */
		action = XDP_PASS;
		reason = PGWU_R_PASS_NOT_IPV4;
		goto out;
	}
	reason = sgi_ipv6(ctx, cfg, tag ? 18 : 14, &action);
out:
	count(reason, action, rx_len);
	return action;
}

/*
 * The next hop of an IPv6 packet leaving through `side`: the static one when configured, else the
 * kernel's FIB through fib6_cache, under resolve_nexthop's rules (fib_gen unchanged, a live
 * `pgwu watch`, same ingress, source in the key when policy rules exist, no longer than a packet
 * the lookup's MTU check passed). Returns 0 with *nh set, or the reason for not forwarding.
 */
static __always_inline __u32 resolve_nexthop6(struct xdp_md *ctx, const struct pgwu_config *cfg,
					      int side, const struct ipv6hdr *ip6, __u8 proto,
					      __u16 tot_len, struct nexthop *nh, __u32 *mtu)
{
	const struct pgwu_nexthop *st = &cfg->nexthop[side];
	struct pgwu_fib6_slot *slot = NULL;
	__u32 zero = 0, one = 1, two = 2, idx;
	__u64 gen = 0, d0, d1, s0 = 0, s1 = 0;
	__u32 reason;
	int rc;

	if (st->ifindex) {
		nh_set(nh, st->ifindex, st->smac, st->dmac);
		return 0;
	}
	/* The key as two 64-bit words a side, compared where they are (the packet, the slot): the
	 * hit, every packet of a flow, takes four compares and no copy; the lookup's struct is
	 * filled on a miss only. */
	__builtin_memcpy(&d0, &ip6->daddr, 8);
	__builtin_memcpy(&d1, (const __u8 *)&ip6->daddr + 8, 8);
	if (cfg->flags & PGWU_CFG_FIB_CACHE) {
		__u64 *g = bpf_map_lookup_elem(&fib_gen, &zero);
		__u64 *hb = bpf_map_lookup_elem(&fib_gen, &one);
		__u64 *pol = bpf_map_lookup_elem(&fib_gen, &two);

		if (g && hb && pol && *(volatile __u64 *)hb) {
			gen = *(volatile __u64 *)g;
			if (*(volatile __u64 *)pol & PGWU_FIB_BY_SRC) {
				__builtin_memcpy(&s0, &ip6->saddr, 8);
				__builtin_memcpy(&s1, (const __u8 *)&ip6->saddr + 8, 8);
			}
			/* pgwu_fib6_slot_of on the words (little-endian: dst[0] is d0's low half) */
			idx = pgwu_fib_slot_of((__u32)d0 ^ (__u32)(d0 >> 32) ^ ((__u32)d1 * 0x85ebca6bU) ^
					       ((__u32)(d1 >> 32) * 0xc2b2ae35U), ctx->ingress_ifindex,
					       (__u32)(s0 ^ s1) ^ (__u32)((s0 ^ s1) >> 32));
			slot = bpf_map_lookup_elem(&fib6_cache, &idx);
		}
		if (slot && *(__u64 *)&slot->key.dst[0] == d0 && *(__u64 *)&slot->key.dst[2] == d1 &&
		    *(__u64 *)&slot->key.src[0] == s0 && *(__u64 *)&slot->key.src[2] == s1 &&
		    slot->key.ifindex == ctx->ingress_ifindex && slot->e.gen == gen &&
		    tot_len <= slot->e.max_len) {
			nh_set(nh, slot->e.ifindex, slot->e.smac, slot->e.dmac);
			return 0;
		}
	}
	{
		struct bpf_fib_lookup p = {};

		p.family = AF_INET6;
		p.flowinfo = *(const __be32 *)ip6 & bpf_htonl(0x0fffffff);	/* class and flow label */
		p.l4_protocol = proto;
		p.tot_len = tot_len;
		__builtin_memcpy(p.ipv6_src, &ip6->saddr, 16);
		__builtin_memcpy(p.ipv6_dst, &ip6->daddr, 16);
		p.ifindex = ctx->ingress_ifindex;
		rc = bpf_fib_lookup(ctx, &p, sizeof(p), 0);
		if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
			*mtu = p.mtu_result;	/* the egress MTU the packet is over: Packet Too Big */
		reason = fib_reason(rc);
		if (reason)
			return reason;
		nh_set(nh, p.ifindex, p.smac, p.dmac);
		if (slot) {	/* per CPU: no other writer */
			pgwu_fib_entry_fill(&slot->e, (*(__u64 *)&slot->key.dst[0] == d0) &
					    (*(__u64 *)&slot->key.dst[2] == d1) &
					    (*(__u64 *)&slot->key.src[0] == s0) &
					    (*(__u64 *)&slot->key.src[2] == s1) &
					    (slot->key.ifindex == ctx->ingress_ifindex), gen, &p, tot_len);
			*(__u64 *)&slot->key.dst[0] = d0;
			*(__u64 *)&slot->key.dst[2] = d1;
			*(__u64 *)&slot->key.src[0] = s0;
			*(__u64 *)&slot->key.src[2] = s1;
			slot->key.ifindex = ctx->ingress_ifindex;
		}
	}
	return 0;
}

/*
 * The IPv6 T-PDU's upper-layer protocol, for the route lookup (policy rules may select by it):
 * the next header after the extension headers RFC 8200 4.1 lets precede it, walked no further
 * than the packet (end) and the frame (bound), PGWU_MAX_EXT_HDRS at most, and not past a
 * Fragment header (what follows it is the fragmentable part, in the first fragment only).
 * Nothing in them changes what is done with the packet. Returns the protocol, or -1 when a
 * Hop-by-Hop Options header is truncated (the kernel drops those too, RFC 8200 4.3); another
 * truncated header ends the walk at its own type (a router does not read it).
 */
static __always_inline int ipv6_upper_proto(struct ipv6hdr *ip6, void *end, void *bound)
{
	__u8 nexthdr = ip6->nexthdr, *h = (void *)(ip6 + 1);
	int i;

	for (i = 0; i < PGWU_MAX_EXT_HDRS; i++) {
		if (nexthdr == IPPROTO_FRAGMENT) {
			if ((void *)(h + 8) > end || (void *)(h + 8) > bound)
				return nexthdr;
			return h[0];
		}
		if (nexthdr != IPPROTO_HOPOPTS && nexthdr != IPPROTO_ROUTING &&
		    nexthdr != IPPROTO_DSTOPTS)
			return nexthdr;
		/* (Hdr Ext Len + 1) x 8 octets, the first two being next header and that length */
		if ((void *)(h + 2) > end || (void *)(h + 2) > bound ||
		    (void *)h + ((__u32)h[1] + 1) * 8 > end)
			return nexthdr == IPPROTO_HOPOPTS ? -1 : nexthdr;
		nexthdr = h[0];
		h += ((__u32)h[1] + 1) * 8;
	}
	return nexthdr;
}

/*
 * xdp_access's G-PDUs with an IPv6 T-PDU (tail-called once the outer headers, the TEID's bearer
 * and its QFI have been checked, ul6_handoff). The IPv4 uplink's steps on an IPv6 packet: a bearer
 * without a /64 takes none (drop_inner_not_ipv4, as before IPv6 existed); the T-PDU must be one
 * whole IPv6 packet (drop_inner_bad); its source in the bearer's /64 (drop_spoofed); hop limit > 1
 * (drop_ttl_expired, ICMPv6 Time Exceeded); then the route (bpf_fib_lookup AF_INET6, or the static
 * SGi next hop; over its MTU: drop_too_big, ICMPv6 Packet Too Big; no neighbour or anything else
 * the kernel must do: the decapsulated packet goes to it, pass_no_neigh / pass_fib_other), the
 * bearer's gate, MBR and
 * quota, the hop limit down by one, the outer headers removed, and the usage counted in
 * ul6_prefix's entry. Counted here, with the frame's length as received.
 */
SEC("xdp")
int xdp_access6(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 rx_len = data_end - data, action = XDP_DROP, reason, zero = 0;
	__u32 off, inner_len, out_l2, mtu = 0;
	struct pgwu_config *cfg = bpf_map_lookup_elem(&config, &zero);
	struct pgwu_ul6_handoff *ho = bpf_map_lookup_elem(&ul6_handoff, &zero);
	struct pgwu_ul6 *u6;
	struct ipv6hdr *ip6;
	struct nexthop nh;
	__be32 teid;
	__u64 src64, prefix;
	int proto;

	if (!cfg || !ho) {
		reason = PGWU_R_DROP_NOT_CONFIGURED;
		goto out;
	}
	teid = ho->teid;
	off = ho->inner_off;
	inner_len = ho->inner_len;
	/* the offset is xdp_access's, of this frame: bounded again for the verifier, which takes a
	 * packet pointer as checked only when its offset and the access stay under 64 KiB */
	if (off > 0x3fff || off + inner_len > rx_len) {
		reason = PGWU_R_DROP_INNER_BAD;
		goto out;
	}
	if (ho->flags & (PGWU_B_CP | PGWU_B_CP2UP))
		bpf_tail_call(ctx, &sgi_progs, PGWU_PROG_CP);	/* back here (flags cleared) if not taken */
	u6 = ul6_find(teid);
	if (!u6) {
		reason = PGWU_R_DROP_INNER_NOT_IPV4;	/* an IPv4-only bearer */
		goto out;
	}
	prefix = u6->prefix;
	ip6 = data + off;
	if ((void *)(ip6 + 1) > data_end) {
		reason = PGWU_R_DROP_INNER_BAD;
		goto out;
	}
	if (inner_len < sizeof(*ip6) || sizeof(*ip6) + bpf_ntohs(ip6->payload_len) != inner_len) {
		reason = PGWU_R_DROP_INNER_BAD;
		goto out;
	}
	__builtin_memcpy(&src64, &ip6->saddr, 8);
	if (src64 != prefix) {
		reason = PGWU_R_DROP_SPOOFED;
		goto out;
	}
	if (ip6->hop_limit <= 1) {
		reason = PGWU_R_DROP_TTL_EXPIRED;
		goto icmp6;
	}
	proto = ipv6_upper_proto(ip6, (void *)ip6 + inner_len, data_end);
	if (proto < 0) {
		reason = PGWU_R_DROP_INNER_BAD;
		goto out;
	}

	reason = resolve_nexthop6(ctx, cfg, PGWU_SIDE_SGI, ip6, proto, inner_len, &nh, &mtu);
	if (mtu) {	/* RFC 4443 3.2: a router does not fragment IPv6 */
		reason = PGWU_R_DROP_TOO_BIG;
		goto icmp6;
	}
	if (reason == PGWU_R_PASS_NO_NEIGH || reason == PGWU_R_PASS_FIB_OTHER)
		out_l2 = sizeof(struct ethhdr);	/* for the kernel: addressed as received */
	else if (reason)
		goto out;
	else
		out_l2 = cfg->egress_vlan[PGWU_SIDE_SGI] ? 18 : 14;
	if (ho->flags & (PGWU_B_QOS | PGWU_B_SDF)) {
		__u32 qr = pdr_apply(ctx, ho->flags, teid, PGWU_PFCP_UPLINK, off, inner_len, !reason);

		if (qr) {
			reason = qr;
			action = XDP_DROP;
			goto out;
		}
	}

	/* Decapsulate: the frame starts out_l2 octets before the T-PDU and ends with it. All packet
	 * pointers are invalid after this. */
	if (bpf_xdp_adjust_head(ctx, (int)off - (int)out_l2) || trim_to(ctx, out_l2 + inner_len)) {
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + 18 > data_end) {		/* out_l2 + 40 octets at least */
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	if (reason) {
		struct ethhdr *e = data;

		__builtin_memcpy(e->h_dest, ho->orig_mac, 12);
		e->h_proto = ETH_P_IPV6_BE;
		action = XDP_PASS;
		goto out;
	}
	write_eth_proto(data, nh.dmac, nh.smac, cfg->egress_vlan[PGWU_SIDE_SGI], ETH_P_IPV6_BE);
	ip6 = data + out_l2;
	if ((void *)(ip6 + 1) > data_end) {
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	ip6->hop_limit--;
	/* the entry found above (its line is in the cache), not found again */
	__sync_fetch_and_add(&u6->packets, 1);
	__sync_fetch_and_add(&u6->bytes, inner_len);
	action = forward(ctx, nh.ifindex);
	reason = PGWU_R_UL_FWD;
	goto out;
icmp6:	/* one inlined copy for both errors */
	action = ul6_error(ctx, cfg, ho, prefix, off, inner_len, reason == PGWU_R_DROP_TOO_BIG ? 2 : 3,
			   reason == PGWU_R_DROP_TOO_BIG ? mtu : 0);
out:
	count(reason, action, rx_len);
	return action;
}

/*
 * The relays to and from the CP function (TS 29.244 5.2.1: a FAR with Destination Interface
 * CP-function and Outer Header Creation; a PDR with Source Interface CP-function and its own
 * F-TEID), as Open5GS's SMF provisions them for IPv6 Router Solicitations (UP2CP) and Router
 * Advertisements (CP2UP). Tail-called by xdp_access6 for a half with PGWU_B_CP or PGWU_B_CP2UP,
 * before its source and route checks (a Router Solicitation comes from the UE's link-local
 * address to ff02::2, neither of which the UE's /64 or a route to N6 takes), with what
 * xdp_access found (ul6_handoff). A tail call of its own: xdp_access's and xdp_access6's
 * verification costs stay as they were (each is close to the verifier's limit).
 *
 * UP2CP (PGWU_B_CP): the T-PDU classified by the half's filters (pgwu_pdr_apply, PDR_CLASSIFY);
 * matched by a PDR with PGWU_SDF_P_CP, it is relayed: its QER and usage applied (PDR_RELAY), then
 * put in a G-PDU of its own, IPv4 local -> the CP function's address, UDP 2152 -> 2152 without a
 * checksum, TEID the FAR's, no extension header; the T-PDU itself unchanged (no hop limit
 * decrement: a relay, not a router's hop; RFC 4861 6.1.1 wants 255 at the CP function). Any other
 * T-PDU: back to xdp_access6 with PGWU_B_CP cleared, which takes it as before (the half's
 * filters classify it again there).
 * CP2UP (PGWU_B_CP2UP): any IPv6 T-PDU to the tunnel goes to the session's downlink tunnel (its
 * dl6_bearers half: the gNB's address and TEID), with a DL PDU Session Container of its QFI
 * when it has one (TS 38.415 5.5.2.1, PDU type 0), as the session's own downlink G-PDUs; no
 * downlink half (its FAR buffers or drops): drop_far.
 * The outer route is the access side's (resolve_nexthop); pass_no_neigh / pass_fib_other: the
 * new G-PDU goes to the kernel, addressed as the received frame was. Counted as ul_cp_fwd /
 * dl_cp_fwd, with the frame's length as received; usage in cp_relay.
 */
SEC("xdp")
int xdp_cp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 rx_len = data_end - data, action = XDP_DROP, reason, zero = 0;
	struct pgwu_config *cfg = bpf_map_lookup_elem(&config, &zero);
	struct pgwu_ul6_handoff *ho = bpf_map_lookup_elem(&ul6_handoff, &zero);
	__u32 off, len, x = 0, l2, done, mtu = 0, flags, qr;
	struct pgwu_cp_relay *c;
	struct pgwu_cp_key k;
	struct nexthop nh;
	struct iphdr *oip;
	__be32 dst, dteid;
	__u8 qfi = 0, orig_mac[12];
	int i;

	if (!cfg || !ho) {
		reason = PGWU_R_DROP_NOT_CONFIGURED;
		goto out;
	}
	off = ho->inner_off;
	len = ho->inner_len;
	flags = ho->flags;
	__builtin_memcpy(orig_mac, ho->orig_mac, 12);
	if (off > 0x3fff || off + len > rx_len || len < 40 || len > 0xffff) {
		reason = PGWU_R_DROP_INNER_BAD;
		goto out;
	}
	if (flags & PGWU_B_CP2UP) {
		struct pgwu_dl_bearer *dl;

		k.id = ho->teid;
		k.kind = PGWU_CP_CP2UP;
		c = bpf_map_lookup_elem(&cp_relay, &k);
		if (!c) {
			reason = PGWU_R_DROP_UNKNOWN_TEID;
			goto out;
		}
		dl = dl6_find(c->prefix);
		/* none, or an IPv6 peer (N3 over IPv6: this relay writes IPv4 tunnels only) */
		if (!dl || (dl->flags & PGWU_B_PEER6)) {
			reason = PGWU_R_DROP_FAR;
			goto out;
		}
		dst = dl->sgw_addr;
		dteid = dl->sgw_teid;
		if (dl->flags & PGWU_B_QFI) {
			x = 8;
			qfi = (dl->flags >> PGWU_B_QFI_SHIFT) & PGWU_QFI_MAX;
		}
		done = PGWU_R_DL_CP_FWD;
	} else {
		struct sdf_pkt *sp;

		if (pgwu_pdr_apply(ctx, ho->teid, flags, PGWU_PFCP_UPLINK | PDR_CLASSIFY | off << 16,
				   len) != PGWU_R_UL_CP_FWD) {
			/* not the CP function's: xdp_access6 as before (it does not come back) */
			ho->flags = flags & ~PGWU_B_CP;
			bpf_tail_call(ctx, &sgi_progs, PGWU_PROG_ACCESS6);
			reason = PGWU_R_DROP_NOT_CONFIGURED;
			goto out;
		}
		sp = bpf_map_lookup_elem(&sdf_scratch, &zero);
		if (!sp) {
			reason = PGWU_R_DROP_NOT_CONFIGURED;
			goto out;
		}
		k.id = sp->rule;
		k.kind = PGWU_CP_UP2CP;
		c = bpf_map_lookup_elem(&cp_relay, &k);
		if (!c) {
			reason = PGWU_R_DROP_FAR;
			goto out;
		}
		dst = c->addr;
		dteid = c->teid;
		done = PGWU_R_UL_CP_FWD;
	}
	reason = resolve_nexthop(ctx, cfg, PGWU_SIDE_ACCESS, cfg->local_addr, dst, 0, IPPROTO_UDP,
				 36 + x + len, &nh, &mtu);
	if (reason == PGWU_R_PASS_NO_NEIGH || reason == PGWU_R_PASS_FIB_OTHER)
		l2 = sizeof(struct ethhdr);	/* for the kernel: addressed as received */
	else if (reason)
		goto out;
	else
		l2 = cfg->egress_vlan[PGWU_SIDE_ACCESS] ? 18 : 14;
	if (done == PGWU_R_UL_CP_FWD) {
		qr = pgwu_pdr_apply(ctx, ho->teid, flags, PGWU_PFCP_UPLINK | PDR_RELAY |
				    (reason ? 0 : 2) | off << 16, len);
		if (qr) {
			reason = qr;
			goto out;
		}
	}
	/* the new outer headers (36 + x octets) right before the T-PDU, nothing after it */
	i = (int)off;
	asm volatile("" : "+r"(i));
	if (bpf_xdp_adjust_head(ctx, i - (int)(l2 + 36 + x)) || trim_to(ctx, l2 + 36 + x + len)) {
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + 18 + 44 > data_end) {
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	if (reason) {
		struct ethhdr *e = data;

		__builtin_memcpy(e->h_dest, orig_mac, 12);
		e->h_proto = ETH_P_IP_BE;
		action = XDP_PASS;
	} else {
		write_eth(data, nh.dmac, nh.smac, cfg->egress_vlan[PGWU_SIDE_ACCESS]);
	}
	oip = data + (l2 == 18 ? 18 : 14);
	if (reply_tunnel_hdr(oip, data_end, cfg->local_addr, dst, dteid, len, x, qfi)) {
		reason = PGWU_R_DROP_ADJUST;
		action = XDP_DROP;
		goto out;
	}
	__sync_fetch_and_add(&c->packets, 1);
	__sync_fetch_and_add(&c->bytes, len);
	if (reason)
		goto out;
	action = forward(ctx, nh.ifindex);
	reason = done;
out:
	count(reason, action, rx_len);
	return action;
}

SEC("xdp")
int xdp_sgi(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 rx_len = data_end - data;
	__u32 action = XDP_DROP, reason, zero = 0;
	struct pgwu_config *cfg;
	struct pgwu_dl_bearer *b;
	struct ethhdr *eth;
	struct iphdr *ip, *oip;
	struct gtpu_encap e;
	struct nexthop nh;
	struct l3 h;
	__u32 ihl_len, tot_len, in_l2, out_l2, csum_on, pass, mtu = 0, encap = GTPU_ENCAP_LEN;
	__u8 qfi;
	__be16 sport;
	__u8 tos, df;
	__u64 isum = 0;
	int err;

	reason = prologue(ctx, PGWU_SIDE_SGI, &h, &action);
	if (reason == PGWU_R_PASS_NOT_IPV4 && h.ip6)
		bpf_tail_call(ctx, &sgi_progs, PGWU_PROG_SGI6);	/* not back unless it is missing */
	if (reason)
		goto out;
	cfg = h.cfg;
	eth = h.eth;
	ip = h.ip;
	ihl_len = h.ihl_len;
	tot_len = h.tot_len;
	in_l2 = h.tag ? 18 : 14;
	if ((ip->daddr & cfg->ue_pool_mask) != cfg->ue_pool_addr) {
		action = XDP_PASS;
		reason = PGWU_R_PASS_NOT_UE;
		goto out;
	}
	b = NULL;
	{
		__u32 *mask = bpf_map_lookup_elem(&slot_mask, &zero), idx;
		struct pgwu_dl_slot *sl;

		if (mask) {
			idx = bpf_ntohl(ip->daddr) & *mask;
			sl = bpf_map_lookup_elem(&dl_slots, &idx);
			if (sl && sl->state == PGWU_SLOT_VALID && sl->ue == ip->daddr)
				b = &sl->b;
		}
	}
	if (!b)
		b = bpf_map_lookup_elem(&dl_bearers, &ip->daddr);
	if (!b) {
		reason = PGWU_R_DROP_UNKNOWN_UE;
		goto out;
	}
	if (b->flags & PGWU_B_PEER6) {
		bpf_tail_call(ctx, &sgi_progs, PGWU_PROG_DL_N3V6);	/* an IPv6 peer: n3v6.h */
		reason = PGWU_R_DROP_NOT_CONFIGURED;
		goto out;
	}
	if (ip->ttl <= 1) {
		reason = PGWU_R_DROP_TTL_EXPIRED;
		goto icmp_reply;
	}

	tos = ip->tos;
	df = !!(ip->frag_off & bpf_htons(0x4000));
	sport = gtpu_dl_sport(ip, ihl_len, tot_len, data_end, cfg->flags);
	/* 5G N3 (TS 38.415 5.5.2.1): a bearer with a QFI gets a PDU Session Container, DL PDU
	 * SESSION INFORMATION (type 0) with it, behind the optional fields: 8 more octets */
	qfi = gtpu_dl_qfi(b->flags);
	encap = gtpu_encap_len(qfi);
	reason = resolve_nexthop(ctx, cfg, PGWU_SIDE_ACCESS, cfg->local_addr, b->sgw_addr, tos,
				 IPPROTO_UDP, tot_len + encap, &nh, &mtu);
	if (mtu && df) {
		/* RFC 1191: too big once encapsulated, and the sender forbids fragments */
		reason = PGWU_R_DROP_FRAG_NEEDED;
		goto icmp_reply;
	}
	pass = reason == PGWU_R_PASS_NO_NEIGH || reason == PGWU_R_PASS_FIB_OTHER;
	if (reason && !pass)
		goto out;
	if (b->flags & (PGWU_B_QOS | PGWU_B_SDF)) {
		__u32 qr = pdr_apply(ctx, b->flags, b->local_teid, PGWU_PFCP_DOWNLINK,
				     (void *)ip - data, tot_len, !pass);

		if (qr) {
			reason = qr;
			action = XDP_DROP;
			goto out;
		}
	}
	if (pass) {
		/* the kernel routes the encapsulated packet: address the frame as received */
		__builtin_memcpy(nh.dmac, eth->h_dest, 6);
		__builtin_memcpy(nh.smac, eth->h_source, 6);
		out_l2 = 14;
	} else {
		out_l2 = cfg->egress_vlan[PGWU_SIDE_ACCESS] ? 18 : 14;
	}

	/* The PGW-U is an IP hop on SGi: the packet's TTL goes down before it enters the tunnel. */
	ipv4_decrease_ttl(ip);
	csum_on = gtpu_dl_csum_on(b->flags, cfg->flags);
	if (csum_on) {
		isum = inner_sum(ctx, ip, ihl_len, tot_len, data_end, &err);
		if (err) {
			reason = PGWU_R_DROP_BAD_IP_DL;
			goto out;
		}
	}

	/* Encapsulate: cut Ethernet padding, then grow the head by the outer headers (minus the
	 * difference in L2 length). All packet pointers are invalid after this. */
	if (trim_to(ctx, in_l2 + tot_len) ||
	    bpf_xdp_adjust_head(ctx, (int)in_l2 - (int)(out_l2 + encap))) {
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + 18 + GTPU_ENCAP_LEN + 8 > data_end) {	/* a frame is never shorter */
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	write_eth(data, nh.dmac, nh.smac, pass ? 0 : cfg->egress_vlan[PGWU_SIDE_ACCESS]);
	oip = data + (out_l2 == 18 ? 18 : 14);
	e.saddr = cfg->local_addr;
	e.daddr = b->sgw_addr;
	e.teid = b->sgw_teid;
	e.sport = sport;
	e.id = 0;
	e.inner_len = tot_len;
	e.tos = tos;
	e.df = df;
	e.qfi = qfi;
	if (!df) {
		__u32 *id = bpf_map_lookup_elem(&ip_id, &zero);

		e.id = id ? bpf_htons((__u16)__sync_fetch_and_add(id, 1)) : 0;
	}
	if (!gtpu_encap_write(oip, data_end, &e) ||
	    (csum_on && !gtpu_encap_csum(oip, data_end, qfi, isum))) {
		reason = PGWU_R_DROP_ADJUST;	/* checked above; again for the verifier */
		goto out;
	}

	if (pass) {
		action = XDP_PASS;
		goto out;
	}
	__sync_fetch_and_add(&b->packets, 1);
	__sync_fetch_and_add(&b->bytes, tot_len);
	action = forward(ctx, nh.ifindex);
	reason = PGWU_R_DL_FWD;
	goto out;

icmp_reply: {
	/* Back to the sender, out of the SGi interface it came in on: Ethernet (addresses swapped,
	 * the received VLAN id) / IPv4 local -> sender / ICMP Time Exceeded (RFC 1812 5.3.1) or
	 * Fragmentation Needed with the MTU the packet can have before encapsulation (RFC 1191,
	 * RFC 1812 5.2.7.1) / the packet's header and 8 octets. Rate-limited per sender. */
	__be32 src = ip->saddr;
	__u16 vid = h.tag ? bpf_ntohs(h.tag->tci) & 0x0fff : 0;
	__u32 q = ihl_len + 8, off, l2 = vid ? 18 : 14;	/* a priority tag (VID 0) is dropped */
	__u8 macs[12];

	if ((cfg->flags & PGWU_CFG_NO_ERR_IND) || !cfg->local_addr || martian_src(src, cfg))
		goto out;
	if (!reply_allowed(src)) {
		event(PGWU_EV_ICMP_RATE_LIMITED);
		goto out;
	}
	if (q > tot_len)
		q = tot_len;
	__builtin_memcpy(macs, eth->h_dest, 12);
	if (bpf_xdp_adjust_head(ctx, (int)in_l2 - (int)(l2 + 28)) || trim_to(ctx, l2 + 28 + q))
		goto out;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + 18 + 28 > data_end)
		goto out;
	off = write_eth(data, macs + 6, macs, vid);
	if (reason == PGWU_R_DROP_FRAG_NEEDED) {
		if (icmp_error(ctx, off, cfg->local_addr, src, q, 3, 4, mtu - encap))
			goto out;
		event(PGWU_EV_ICMP_FRAG_NEEDED_SENT);
	} else {
		if (icmp_error(ctx, off, cfg->local_addr, src, q, 11, 0, 0))
			goto out;
		event(PGWU_EV_ICMP_TIME_EXCEEDED_SENT);
	}
	action = XDP_TX;
	goto out;
}

out:
	count(reason, action, rx_len);
	return action;
}

/*
 * qos_ctl (pgwu.h, struct pgwu_qos_ctl): `pgwu pfcp` changes a qos entry in one step under its
 * lock, with BPF_PROG_TEST_RUN; never attached. The lock field is never read or written: the
 * verifier refuses any access to it but the lock helpers. No helper is called while it is held.
 */
static __always_inline void qos_set_locked(struct pgwu_qos *q, const struct pgwu_qos *in, __u32 keep)
{
	__u32 flags = in->flags & ~(PGWU_QOS_EXHAUSTED | PGWU_QOS_VOLTH_CROSSED);
	int d;

	for (d = 0; d < 2; d++) {
		struct pgwu_police *p = &q->pol[d];
		const struct pgwu_police *n = &in->pol[d];

		if (p->kbps != n->kbps || p->depth != n->depth) {
			p->credit = n->credit;
			p->last_ns = n->last_ns;
		}
		p->kbps = n->kbps;
		p->depth = n->depth;
		p->fill_ns = n->fill_ns;
	}
	if ((keep & PGWU_QOS_KEEP_QUOTA) && (q->flags & PGWU_QOS_QUOTA) && (flags & PGWU_QOS_QUOTA))
		flags |= q->flags & PGWU_QOS_EXHAUSTED;
	else
		q->quota_left = in->quota_left;
	if ((q->flags & PGWU_QOS_VOLTH) && (flags & PGWU_QOS_VOLTH) &&
	    q->th.urr_id == in->th.urr_id) {
		flags |= q->flags & PGWU_QOS_VOLTH_CROSSED;
	} else {
		for (d = 0; d < 4; d++) {
			q->th.now[d] = in->th.now[d];
			q->th.at[d] = 0;
		}
	}
	for (d = 0; d < 3; d++)
		q->th.limit[d] = in->th.limit[d];
	q->th.urr_id = in->th.urr_id;
	q->th.vol_flags = in->th.vol_flags;
	q->flags = flags;
}

SEC("xdp")
int qos_ctl(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct pgwu_qos_ctl *c = data;
	struct pgwu_qos *q, in;
	__u64 at[4], now[4];
	__u32 op, keep, flags, after, teid;
	int i;

	if ((void *)(c + 1) > data_end)
		return XDP_ABORTED;
	op = c->op;
	keep = c->keep;
	teid = c->teid;
	if (op & PGWU_QOS_CTL_URR) {
		struct pgwu_urr_key uk = { .teid = teid, .urr_id = c->urr_id };

		op &= ~PGWU_QOS_CTL_URR;
		q = bpf_map_lookup_elem(&sdf_urr, &uk);
	} else {
		q = bpf_map_lookup_elem(&qos, &teid);
	}
	if (op != PGWU_QOS_CTL_SET && op != PGWU_QOS_CTL_TAKE_CROSSING &&
	    op != PGWU_QOS_CTL_TAKE_ALL)
		return XDP_ABORTED;
	if (!q)
		return XDP_DROP;
	if (op == PGWU_QOS_CTL_SET) {
		__builtin_memcpy(&in, &c->q, sizeof(in));	/* out of the packet before the lock */
		bpf_spin_lock(&q->lock);
		qos_set_locked(q, &in, keep);
		after = q->flags;
		bpf_spin_unlock(&q->lock);
		c->after = after;
		return XDP_PASS;
	}
	bpf_spin_lock(&q->lock);
	flags = q->flags;
	for (i = 0; i < 4; i++) {
		at[i] = q->th.at[i];
		now[i] = q->th.now[i];
		q->th.at[i] = 0;
		if (op == PGWU_QOS_CTL_TAKE_ALL)
			q->th.now[i] = 0;
	}
	q->flags = flags & ~PGWU_QOS_VOLTH_CROSSED;
	if (op == PGWU_QOS_CTL_TAKE_CROSSING && (flags & PGWU_QOS_VOLTH))
		volth_cross(q);		/* reached again while this one waited: now, late */
	after = q->flags;
	bpf_spin_unlock(&q->lock);
	c->after = after;
	c->q.flags = flags;
	for (i = 0; i < 4; i++) {
		c->q.th.at[i] = at[i];
		c->q.th.now[i] = now[i];
	}
	return XDP_PASS;
}

/*
 * fib_gen[0] is bumped after a change, never before, so a lookup that saw the old state is stale.
 * Neighbour changes: raw tracepoints, in the kernel, as they happen. Route, address and link
 * changes have no tracepoint (and fentry/kprobes are not available on every kernel), so they are
 * caught by nl_fib_gen, a socket filter on an rtnetlink socket subscribed to those groups: it runs
 * when the kernel broadcasts the change, in the changing task, before the change's syscall returns.
 * `pgwu watch` holds that socket. fib_gen[1] is the watcher's tgid (the kernel's, whatever pid
 * namespace it runs in), written by watch_register, which the watcher runs on itself with
 * BPF_PROG_TEST_RUN; the cache is only used while it is not 0. When that task exits, however it
 * dies (SIGKILL included), fib_gen_watch_exit clears it, before its sockets are closed: a dead
 * watcher can't leave the cache in use, and the XDP programs need no clock to know it.
 */
static __always_inline void fib_gen_bump(void)
{
	__u32 zero = 0;
	__u64 *g = bpf_map_lookup_elem(&fib_gen, &zero);

	if (g)
		__sync_fetch_and_add(g, 1);
}

/* A helper process registers itself in fib_gen[slot] (PGWU_REG_*): its tgid, as the kernel sees
 * it. Returns that tgid, 0 when the slot is missing. */
static __always_inline __u32 helper_register(__u32 slot)
{
	__u64 *w = bpf_map_lookup_elem(&fib_gen, &slot);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (!w)
		return 0;
	*w = tgid;
	return tgid;
}

/* The exiting process tgid held fib_gen[slot]: cleared. Returns 1 when it did. */
static __always_inline int helper_exited(__u32 slot, __u64 tgid)
{
	__u64 *w = bpf_map_lookup_elem(&fib_gen, &slot);

	return w && *w == tgid && __sync_val_compare_and_swap(w, tgid, 0) == tgid;
}

/* Run by `pgwu watch` on itself (BPF_PROG_TEST_RUN), once its socket is in place: changes made
 * before that are unknown, so a new generation starts. Returns the tgid it registered. */
SEC("raw_tp")
int watch_register(void *ctx)
{
	fib_gen_bump();
	return helper_register(PGWU_REG_WATCH);
}

/* Run by `pgwu reassemble` on itself once its socket is bound: from then on xdp_access passes outer
 * fragments to the kernel. Returns the tgid it registered. */
SEC("raw_tp")
int reasm_register(void *ctx)
{
	return helper_register(PGWU_REG_REASM);
}

SEC("raw_tp/sched_process_exit")	/* a task exits: in do_exit(), before its files are closed */
int fib_gen_watch_exit(void *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 tgid = pid_tgid >> 32;

	/* the thread-group leader: another thread's exit leaves the process and its socket alive */
	if ((__u32)pid_tgid != tgid)
		return 0;
	if (helper_exited(PGWU_REG_WATCH, tgid))
		fib_gen_bump();
	helper_exited(PGWU_REG_REASM, tgid);
	return 0;
}

SEC("raw_tp/neigh_update_done")		/* after a neighbour's state or address changed */
int fib_gen_neigh_update(void *ctx)
{
	fib_gen_bump();
	return 0;
}

SEC("raw_tp/neigh_timer_handler")	/* after a timer moved a neighbour's state */
int fib_gen_neigh_timer(void *ctx)
{
	fib_gen_bump();
	return 0;
}

SEC("raw_tp/neigh_cleanup_and_release")	/* a neighbour was removed */
int fib_gen_neigh_release(void *ctx)
{
	fib_gen_bump();
	return 0;
}

SEC("socket")
int nl_fib_gen(struct __sk_buff *skb)
{
	/* struct nlmsghdr, then for RTM_NEWRULE struct fib_rule_hdr: its first octet, the family */
	struct {
		__u32 len;
		__u16 type;
		__u16 flags;
		__u32 seq;
		__u32 pid;
		__u8 family;
	} h;
	__u32 two = 2;
	__u64 *pol;

	/* an IPv4 or IPv6 policy rule added: the route may depend on the source from now on; marked
	 * before the generation moves, so no entry keyed without the source survives the change */
	if (!bpf_skb_load_bytes(skb, 0, &h, sizeof(h)) && h.type == 32 /* RTM_NEWRULE */ &&
	    (h.family == AF_INET || h.family == AF_INET6)) {
		pol = bpf_map_lookup_elem(&fib_gen, &two);
		if (pol)
			*pol = PGWU_FIB_BY_SRC;
	}
	fib_gen_bump();
	return 0;	/* nothing is queued: the socket never fills */
}

#include "n3v6.h"

char LICENSE[] SEC("license") = "GPL";
