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
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_tracing.h>
#include "pgwu.h"
#include "consts.h"
#include "maps.h"
#include "parsing.h"
#include "csum.h"

#define AF_INET 2

struct nexthop {
	__u32 ifindex;
	__u8 smac[6];
	__u8 dmac[6];
};

static __always_inline void count(__u32 reason, __u32 action, __u32 bytes)
{
	__u32 key = reason * PGWU_VERDICT_MAX + action;
	struct pgwu_counter *c = bpf_map_lookup_elem(&stats, &key);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

static __always_inline __u32 forward(struct xdp_md *ctx, __u32 ifindex)
{
	if (ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(ifindex, 0);
}

/*
 * The next hop towards dst, leaving through `side`: the static one when configured, else the
 * kernel's FIB, through fib_cache. Returns 0 with *nh set, or the reason for not forwarding.
 * A cache slot is used only while fib_gen is unchanged (bumped after every route, link or
 * neighbour change, see the end of this file), while a `pgwu watch` is alive to bump it, and only
 * for packets no longer than one the lookup's MTU check passed. The generation is read before the
 * lookup, so a change racing with it leaves a slot that is already stale.
 */
static __always_inline __u32 resolve_nexthop(struct xdp_md *ctx, const struct pgwu_config *cfg,
					     int side, __u32 src, __u32 dst, __u8 tos, __u8 proto,
					     __u16 tot_len, struct nexthop *nh)
{
	const struct pgwu_nexthop *st = &cfg->nexthop[side];
	struct pgwu_fib_slot *slot = NULL;
	struct bpf_fib_lookup p = {};
	__u32 zero = 0, one = 1, idx;
	__u64 gen = 0;
	int rc;

	if (st->ifindex) {
		nh->ifindex = st->ifindex;
		__builtin_memcpy(nh->smac, st->smac, 6);
		__builtin_memcpy(nh->dmac, st->dmac, 6);
		return 0;
	}
	if (cfg->flags & PGWU_CFG_FIB_CACHE) {
		__u64 *g = bpf_map_lookup_elem(&fib_gen, &zero);
		__u64 *hb = bpf_map_lookup_elem(&fib_gen, &one);

		/* no clock read: a helper call costs more here than the whole cache hit */
		if (g && hb && *(volatile __u64 *)hb) {
			gen = *(volatile __u64 *)g;
			idx = pgwu_fib_slot_of(dst, ctx->ingress_ifindex);
			slot = bpf_map_lookup_elem(&fib_cache, &idx);
		}
		if (slot && slot->key.dst == dst && slot->key.ifindex == ctx->ingress_ifindex &&
		    slot->e.gen == gen && tot_len <= slot->e.max_len) {
			nh->ifindex = slot->e.ifindex;
			__builtin_memcpy(nh->smac, slot->e.smac, 6);
			__builtin_memcpy(nh->dmac, slot->e.dmac, 6);
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
	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		break;
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
	nh->ifindex = p.ifindex;
	__builtin_memcpy(nh->smac, p.smac, 6);
	__builtin_memcpy(nh->dmac, p.dmac, 6);
	if (slot) {	/* per CPU: no other writer */
		if (slot->key.dst != dst || slot->key.ifindex != ctx->ingress_ifindex ||
		    slot->e.gen != gen || slot->e.ifindex != p.ifindex || slot->e.max_len < tot_len)
			slot->e.max_len = tot_len;
		slot->key.dst = dst;
		slot->key.ifindex = ctx->ingress_ifindex;
		slot->e.gen = gen;
		slot->e.ifindex = p.ifindex;
		__builtin_memcpy(slot->e.smac, p.smac, 6);
		__builtin_memcpy(slot->e.dmac, p.dmac, 6);
	}
	return 0;
}

/* Ethernet header (+ 802.1Q tag when vid != 0) at the start of the frame; the caller has checked
 * that 18 bytes are there. Returns its length. */
static __always_inline __u32 write_eth(void *data, const __u8 *dmac, const __u8 *smac, __u16 vid)
{
	struct ethhdr *eth = data;

	__builtin_memcpy(eth->h_dest, dmac, 6);
	__builtin_memcpy(eth->h_source, smac, 6);
	if (vid) {
		struct vlan_hdr *v = (void *)(eth + 1);

		eth->h_proto = ETH_P_8021Q_BE;
		v->tci = bpf_htons(vid & 0x0fff);
		v->encap_proto = ETH_P_IP_BE;
		return sizeof(*eth) + sizeof(*v);
	}
	eth->h_proto = ETH_P_IP_BE;
	return sizeof(*eth);
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
 * Sum of the inner IPv4 packet (header and payload) for the outer UDP checksum. The payload's sum
 * comes from its own checksum where that can be trusted (local checksum offload, see the kernel's
 * Documentation/networking/checksum-offloads.rst): a valid TCP/UDP checksum makes the segment sum
 * the negated pseudo-header sum, a valid ICMP checksum makes it zero. Otherwise it is summed.
 * Sets *err when the bytes can't be summed (only if the caller's length checks were wrong).
 */
static __always_inline __u64 inner_sum(struct xdp_md *ctx, struct iphdr *iip, __u32 ihl_len,
				       __u32 tot, void *data_end, int *err)
{
	void *l4 = (void *)iip + ihl_len;
	__u32 l4_len = tot - ihl_len;
	__u64 sum = ipv4_hdr_sum(iip, ihl_len / 4, data_end);
	__u64 pseudo;

	*err = 0;
	if (!ipv4_is_fragment(iip)) {
		pseudo = (__u64)iip->saddr + iip->daddr + bpf_htons(iip->protocol) +
			 bpf_htons((__u16)l4_len);
		switch (iip->protocol) {
		case IPPROTO_TCP:
			if (l4_len >= 20)
				return sum + csum_neg(pseudo);
			break;
		case IPPROTO_UDP: {
			struct udphdr *u = l4;

			if (l4_len >= sizeof(*u) && (void *)(u + 1) <= data_end && u->check)
				return sum + csum_neg(pseudo);
			break;
		}
		case IPPROTO_ICMP:
			if (l4_len >= 8)
				return sum;
			break;
		}
	}
	return sum + csum_bytes(ctx, l4 - (void *)(long)ctx->data, l4_len, err);
}

SEC("xdp")
int xdp_access(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 rx_len = data_end - data;
	__u32 action = XDP_DROP, reason, zero = 0;
	struct cursor cur = { .pos = data, .end = data_end };
	struct pgwu_config *cfg;
	struct pgwu_ul_bearer *b;
	struct ethhdr *eth;
	struct vlan_hdr *tag;
	struct iphdr *ip, *iip;
	struct udphdr *udp;
	struct gtpu_hdr *gtp;
	struct nexthop nh;
	void *ip_end, *p;
	__u32 ihl_len, tot_len, udp_len, gtp_len, inner_len, iihl_len, out_l2;
	__u8 next_ext = 0, orig_mac[12];
	__be16 seq = 0;
	int i;

	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg) {
		reason = PGWU_R_DROP_NOT_CONFIGURED;
		goto out;
	}

	i = parse_eth(&cur, &eth, &tag);
	if (i < 0) {
		reason = PGWU_R_DROP_TRUNC_ETH;
		goto out;
	}
	if (i != ETH_P_IP_BE) {
		action = XDP_PASS;
		reason = PGWU_R_PASS_NOT_IPV4;
		goto out;
	}
	if (parse_ipv4_fixed(&cur, &ip) < 0) {
		reason = PGWU_R_DROP_TRUNC_IP;
		goto out;
	}
	if (ip->version != 4 || ip->ihl < 5) {
		reason = PGWU_R_DROP_BAD_IP;
		goto out;
	}
	ihl_len = ip->ihl * 4;
	if ((void *)ip + ihl_len > data_end) {
		reason = PGWU_R_DROP_TRUNC_IP;
		goto out;
	}
	tot_len = bpf_ntohs(ip->tot_len);
	if (tot_len < ihl_len || (void *)ip + tot_len > data_end) {
		reason = PGWU_R_DROP_BAD_IP;
		goto out;
	}
	if (ip->protocol != IPPROTO_UDP || !cfg->local_addr || ip->daddr != cfg->local_addr) {
		action = XDP_PASS;
		reason = PGWU_R_PASS_NOT_GTPU;
		goto out;
	}
	if (ipv4_is_fragment(ip)) {
		reason = PGWU_R_DROP_OUTER_FRAG;
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
	if (parse_gtpu(&cur, &gtp) < 0 || (void *)(gtp + 1) > data_end) {
		reason = PGWU_R_DROP_TRUNC_GTP;
		goto out;
	}
	if (GTP_FLAGS_VERSION(gtp->flags) != 1 || !(gtp->flags & GTP_FLAG_PT)) {
		reason = PGWU_R_DROP_GTP_VERSION;
		goto out;
	}
	gtp_len = bpf_ntohs(gtp->length);
	if (gtp_len != udp_len - sizeof(*udp) - sizeof(*gtp)) {
		reason = PGWU_R_DROP_GTP_BAD_LEN;
		goto out;
	}
	if (gtp->flags & GTP_FLAGS_OPT) {
		struct gtpu_opt *opt = cur.pos;

		/* the frame ends inside the optional fields: truncated; they are in the frame
		 * but the GTP length doesn't cover them: a length error */
		if ((void *)(opt + 1) > data_end) {
			reason = PGWU_R_DROP_TRUNC_GTP;
			goto out;
		}
		if (gtp_len < sizeof(*opt)) {
			reason = PGWU_R_DROP_GTP_BAD_LEN;
			goto out;
		}
		cur.pos = opt + 1;
		if (gtp->flags & GTP_FLAG_S)
			seq = opt->seq;
		if (gtp->flags & GTP_FLAG_E)
			next_ext = opt->next_ext;
	}

	switch (gtp->type) {
	case GTP_GPDU:
		break;
	case GTP_ECHO_REQ:
		goto echo;
	case GTP_ECHO_RSP:
	case GTP_ERROR_IND:
	case GTP_END_MARKER:
	case GTP_SUPP_EXT_NOTIF:
		action = XDP_PASS;
		reason = PGWU_R_PASS_SIGNALLING;
		goto out;
	default:
		reason = PGWU_R_DROP_GTP_UNKNOWN_MSG;
		goto out;
	}

	/* TS 29.281 5.2: each extension header is a length octet (in 4-octet units), content, and
	 * the next type in its last octet; type 0 ends the chain. */
	p = cur.pos;
	for (i = 0; i < PGWU_MAX_EXT_HDRS; i++) {
		__u8 *lp = p, *last;
		__u32 ext_len;

		if (!next_ext)
			break;
		if ((void *)(lp + 1) > ip_end || (void *)(lp + 1) > data_end) {
			reason = PGWU_R_DROP_GTP_BAD_EXT;
			goto out;
		}
		ext_len = *lp * 4;
		if (!ext_len || p + ext_len > ip_end) {
			reason = PGWU_R_DROP_GTP_BAD_EXT;
			goto out;
		}
		last = p + (ext_len - 1);
		if ((void *)(last + 1) > data_end) {
			reason = PGWU_R_DROP_GTP_BAD_EXT;
			goto out;
		}
		next_ext = *last;
		p = last + 1;
	}
	if (next_ext) {
		reason = PGWU_R_DROP_GTP_BAD_EXT;
		goto out;
	}

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
		goto out;
	}

	iip = p;
	inner_len = ip_end - p;
	if (!inner_len || (void *)iip + 1 > data_end || (*(__u8 *)iip >> 4) != 4) {
		reason = PGWU_R_DROP_INNER_NOT_IPV4;
		goto out;
	}
	if ((void *)(iip + 1) > ip_end || (void *)(iip + 1) > data_end || iip->ihl < 5) {
		reason = PGWU_R_DROP_INNER_BAD;
		goto out;
	}
	iihl_len = iip->ihl * 4;
	if ((void *)iip + iihl_len > ip_end || bpf_ntohs(iip->tot_len) != inner_len) {
		reason = PGWU_R_DROP_INNER_BAD;
		goto out;
	}
	if (iip->saddr != b->ue_addr) {
		reason = PGWU_R_DROP_SPOOFED;
		goto out;
	}
	if (iip->ttl <= 1) {
		reason = PGWU_R_DROP_TTL_EXPIRED;
		goto out;
	}

	reason = resolve_nexthop(ctx, cfg, PGWU_SIDE_SGI, iip->saddr, iip->daddr, iip->tos,
				 iip->protocol, inner_len, &nh);
	if (reason == PGWU_R_PASS_NO_NEIGH || reason == PGWU_R_PASS_FIB_OTHER) {
		/* the kernel routes the inner packet (and resolves its neighbour): give it the
		 * decapsulated packet in a frame addressed as the one received */
		__builtin_memcpy(orig_mac, eth->h_dest, 12);
		out_l2 = sizeof(struct ethhdr);
	} else if (reason) {
		goto out;
	} else {
		out_l2 = cfg->egress_vlan[PGWU_SIDE_SGI] ? 18 : 14;
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
	if (data + 18 + sizeof(struct iphdr) > data_end) {
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

echo: {
	/* TS 29.281 7.2.2: Echo Response = header with S set, the request's sequence number, and
	 * a Recovery IE. Built over the request, cut or grown to exactly that. */
	struct gtpu_opt *ropt;
	struct gtpu_hdr *rg;
	struct udphdr *ru;
	struct iphdr *rip;
	__u8 *ie;
	__be32 peer = ip->saddr;
	__be16 peer_port = udp->source;
	__u32 l2 = tag ? 18 : 14, new_len = l2 + 42;
	__u64 sum;

	__builtin_memcpy(orig_mac, eth->h_dest, 12);
	if (bpf_xdp_adjust_tail(ctx, (int)new_len - (int)rx_len)) {
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + 18 + 42 > data_end && data + 14 + 42 > data_end) {
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	eth = data;
	__builtin_memcpy(eth->h_dest, orig_mac + 6, 6);
	__builtin_memcpy(eth->h_source, orig_mac, 6);
	rip = data + (l2 == 18 ? 18 : 14);
	if ((void *)rip + 42 > data_end) {
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	ru = (void *)(rip + 1);
	rg = (void *)(ru + 1);
	ropt = (void *)(rg + 1);
	ie = (void *)(ropt + 1);

	rip->version = 4;
	rip->ihl = 5;
	rip->tos = 0;
	rip->tot_len = bpf_htons(42);
	rip->id = 0;
	rip->frag_off = 0;
	rip->ttl = OUTER_TTL;
	rip->protocol = IPPROTO_UDP;
	rip->check = 0;
	rip->saddr = cfg->local_addr;
	rip->daddr = peer;
	rip->check = csum_finish(ipv4_hdr_sum(rip, 5, data_end));

	ru->source = GTPU_PORT_BE;
	ru->dest = peer_port;
	ru->len = bpf_htons(22);
	ru->check = 0;
	rg->flags = 0x30 | GTP_FLAG_S;
	rg->type = GTP_ECHO_RSP;
	rg->length = bpf_htons(6);
	rg->teid = 0;
	ropt->seq = seq;
	ropt->npdu = 0;
	ropt->next_ext = 0;
	ie[0] = GTP_IE_RECOVERY;
	ie[1] = cfg->restart_counter;

	sum = (__u64)rip->saddr + rip->daddr + bpf_htons(IPPROTO_UDP) + ru->len;
	{
		__u16 *w = (void *)ru;

#pragma unroll
		for (i = 0; i < 11; i++)
			sum += w[i];
	}
	ru->check = csum_finish_udp(sum);
	action = XDP_TX;
	reason = PGWU_R_ECHO_REPLY;
	goto out;
}

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
	struct cursor cur = { .pos = data, .end = data_end };
	struct pgwu_config *cfg;
	struct pgwu_dl_bearer *b;
	struct ethhdr *eth;
	struct vlan_hdr *tag;
	struct iphdr *ip, *oip;
	struct udphdr *udp;
	struct gtpu_hdr *gtp;
	struct nexthop nh;
	__u32 ihl_len, tot_len, in_l2, out_l2, csum_on, pass;
	__u8 tos, df;
	__u64 isum = 0, sum;
	int i, err;

	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg) {
		reason = PGWU_R_DROP_NOT_CONFIGURED;
		goto out;
	}
	i = parse_eth(&cur, &eth, &tag);
	if (i < 0) {
		reason = PGWU_R_DROP_TRUNC_ETH;
		goto out;
	}
	if (i != ETH_P_IP_BE) {
		action = XDP_PASS;
		reason = PGWU_R_PASS_NOT_IPV4;
		goto out;
	}
	in_l2 = tag ? 18 : 14;
	if (parse_ipv4_fixed(&cur, &ip) < 0 || ip->version != 4 || ip->ihl < 5) {
		reason = PGWU_R_DROP_BAD_IP_DL;
		goto out;
	}
	ihl_len = ip->ihl * 4;
	tot_len = bpf_ntohs(ip->tot_len);
	if ((void *)ip + ihl_len > data_end || tot_len < ihl_len || (void *)ip + tot_len > data_end) {
		reason = PGWU_R_DROP_BAD_IP_DL;
		goto out;
	}
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
	if (ip->ttl <= 1) {
		reason = PGWU_R_DROP_TTL_EXPIRED;
		goto out;
	}

	tos = ip->tos;
	df = !!(ip->frag_off & bpf_htons(0x4000));
	reason = resolve_nexthop(ctx, cfg, PGWU_SIDE_ACCESS, cfg->local_addr, b->sgw_addr, tos,
				 IPPROTO_UDP, tot_len + GTPU_ENCAP_LEN, &nh);
	pass = reason == PGWU_R_PASS_NO_NEIGH || reason == PGWU_R_PASS_FIB_OTHER;
	if (reason && !pass)
		goto out;
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
	if (b->flags & PGWU_B_CSUM_ON)
		csum_on = 1;
	else if (b->flags & PGWU_B_CSUM_OFF)
		csum_on = 0;
	else
		csum_on = cfg->flags & PGWU_CFG_CSUM;
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
	    bpf_xdp_adjust_head(ctx, (int)in_l2 - (int)(out_l2 + GTPU_ENCAP_LEN))) {
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + 18 + GTPU_ENCAP_LEN > data_end) {
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	write_eth(data, nh.dmac, nh.smac, pass ? 0 : cfg->egress_vlan[PGWU_SIDE_ACCESS]);
	oip = data + (out_l2 == 18 ? 18 : 14);
	udp = (void *)(oip + 1);
	gtp = (void *)(udp + 1);
	if ((void *)(gtp + 1) > data_end) {
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	oip->version = 4;
	oip->ihl = 5;
	oip->tos = tos;
	oip->tot_len = bpf_htons(tot_len + GTPU_ENCAP_LEN);
	if (df) {
		oip->id = 0;
		oip->frag_off = bpf_htons(0x4000);
	} else {
		__u32 *id = bpf_map_lookup_elem(&ip_id, &zero);

		oip->id = id ? bpf_htons((__u16)(*id)++) : 0;
		oip->frag_off = 0;
	}
	oip->ttl = OUTER_TTL;
	oip->protocol = IPPROTO_UDP;
	oip->check = 0;
	oip->saddr = cfg->local_addr;
	oip->daddr = b->sgw_addr;
	oip->check = csum_finish(ipv4_hdr_sum(oip, 5, data_end));

	udp->source = GTPU_PORT_BE;
	udp->dest = GTPU_PORT_BE;
	udp->len = bpf_htons(tot_len + sizeof(*udp) + sizeof(*gtp));
	udp->check = 0;
	gtp->flags = 0x30;
	gtp->type = GTP_GPDU;
	gtp->length = bpf_htons(tot_len);
	gtp->teid = b->sgw_teid;
	if (csum_on) {
		__u32 *w = (void *)udp;

		if ((void *)(w + 4) > data_end) {	/* checked above; again for the verifier */
			reason = PGWU_R_DROP_ADJUST;
			goto out;
		}
		/* pseudo header + UDP header (check 0) + GTP-U header + inner packet */
		sum = (__u64)oip->saddr + oip->daddr + bpf_htons(IPPROTO_UDP) + udp->len;
		sum += (__u64)w[0] + w[1] + w[2] + w[3] + isum;
		udp->check = csum_finish_udp(sum);
	}

	if (pass) {
		action = XDP_PASS;
		goto out;
	}
	__sync_fetch_and_add(&b->packets, 1);
	__sync_fetch_and_add(&b->bytes, tot_len);
	action = forward(ctx, nh.ifindex);
	reason = PGWU_R_DL_FWD;
out:
	count(reason, action, rx_len);
	return action;
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

/* Run by `pgwu watch` on itself (BPF_PROG_TEST_RUN), once its socket is in place: changes made
 * before that are unknown, so a new generation starts. Returns the tgid it registered. */
SEC("raw_tp")
int watch_register(void *ctx)
{
	__u32 one = 1;
	__u64 *w = bpf_map_lookup_elem(&fib_gen, &one);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (!w)
		return 0;
	fib_gen_bump();
	*w = tgid;
	return tgid;
}

SEC("raw_tp/sched_process_exit")	/* a task exits: in do_exit(), before its files are closed */
int fib_gen_watch_exit(void *ctx)
{
	__u32 one = 1;
	__u64 *w = bpf_map_lookup_elem(&fib_gen, &one);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 tgid = pid_tgid >> 32;

	/* the thread-group leader: another thread's exit leaves the process and its socket alive */
	if ((__u32)pid_tgid != tgid)
		return 0;
	if (w && *w == tgid && __sync_val_compare_and_swap(w, tgid, 0) == tgid)
		fib_gen_bump();
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
	fib_gen_bump();
	return 0;	/* nothing is queued: the socket never fills */
}

char LICENSE[] SEC("license") = "GPL";
