/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * N3 over IPv6 (GTP-U/UDP/IPv6, TS 29.281 4.4.1; issue 32): the PGW-U's two programs for G-PDUs whose
 * outer header is IPv6, each reached by a tail call, so that the IPv4 paths stay as they were and the
 * verifier walks these on their own. Included at the end of pgwu.bpf.c (they use its helpers).
 *
 *  xdp_ul_n3v6  xdp_access's IPv6 frames while the config has an N3 IPv6 address (n3_addr6): UDP
 *               2152 to that address, next header UDP directly (an outer extension header goes to
 *               the kernel, pass_not_gtpu), lengths as IPv4's, the UDP checksum verified (RFC 8200
 *               8.1: mandatory; 0 or wrong: drop_outer_udp_csum); then the GTP-U header, Echo Request
 *               -> Echo Response over IPv6, an unknown TEID -> Error Indication over IPv6 (its GTP-U
 *               Peer Address IE the 16-octet n3_addr6) under reply_budget's rate limit, keyed by the
 *               peer's address folded to 32 bits as the ICMPv6 errors' are; the TEID's bearer, its
 *               QFI, then the T-PDU decapsulated as over IPv4: an IPv4 one here, an IPv6 one by
 *               xdp_access6 (ul6_handoff). Echo Responses, Error Indications and End Markers
 *               received are counted under their sig_* reasons and recorded in peers6 / sig_rx6
 *               (peers / sig_rx keyed by the 16-octet address). An unknown comprehension-required
 *               extension header -> Supported Extension Headers Notification over IPv6 under the
 *               same rate limit (drop_gtp_ext_unsupported, tx); an inner TTL <= 1 -> ICMP Time
 *               Exceeded back into the bearer's IPv6 tunnel (n3v6_ttl_expired4, reply_tunnel6;
 *               an IPv6 T-PDU's by xdp_access6's ul6_error, told by the handoff's peer6).
 *  xdp_dl_n3v6  the downlink of a bearer whose peer is IPv6 (PGWU_B_PEER6, tail-called by xdp_sgi
 *               and sgi_ipv6 once they found the bearer): outer IPv6 n3_addr6 -> the peer
 *               (n3v6_peers[sgw_addr]), traffic class the inner TOS / class, flow label 0, hop
 *               limit OUTER_TTL; UDP from the flow's port to 2152 with its checksum always computed
 *               (RFC 6935/6936's zero checksum is not used); GTP-U G-PDU with the PDU Session
 *               Container of a bearer with a QFI; the route by bpf_fib_lookup(AF_INET6) through
 *               fib6_cache. Too big for the N3 route once encapsulated: an IPv6 packet drop_too_big,
 *               answered with ICMPv6 Packet Too Big (sgi6_error) while the tunnel leaves it >= 1280
 *               octets; an IPv4 one drop_frag_needed, answered with Fragmentation Needed when it has
 *               DF (XDP does not fragment the outer IPv6 packet, so one without DF is dropped
 *               unanswered under the same reason). TTL / hop limit <= 1: drop_ttl_expired, as the
 *               IPv4-peer path, answered the same way (icmp_reply4 / sgi6_error).
 */
#ifndef PGWU_N3V6_H
#define PGWU_N3V6_H

/* GTP-U over IPv6: what encapsulation prepends (IPv6 40, UDP 8, GTP-U 8) before a PSC's 8 */
#define N3V6_ENCAP_LEN 56
#define GTP_IE_PEER_ADDR_V6_LEN 16

/* peers6: LRU hash, the IPv6 peers' GTP-U path state (peers' twin, key the 16-octet address):
 * written by xdp_ul_n3v6 on each Echo Response and by `pgwu path` when it sends an Echo Request;
 * read by `pgwu path`. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PGWU_MAX_PEERS);
	__type(key, __u8[16]);
	__type(value, struct pgwu_peer);
} peers6 SEC(".maps");

/* sig_rx6's entries: a quarter of sig_rx's (preallocated, an LRU hash: ~2 MiB at 16,384 against
 * ~7 MiB at sig_rx's 65,536), the IPv6 peers being few; a report, not state, so an evicted entry
 * costs a line of `pgwu signalling` only */
#ifndef PGWU_MAX_SIG_RX6
#define PGWU_MAX_SIG_RX6 16384
#endif

/* sig_rx6: LRU hash, the Error Indications and End Markers received over IPv6 (sig_rx's twin,
 * struct pgwu_sig6_key): written by xdp_ul_n3v6, read by `pgwu signalling`. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PGWU_MAX_SIG_RX6);
	__type(key, struct pgwu_sig6_key);
	__type(value, struct pgwu_sig6_val);
} sig_rx6 SEC(".maps");

static __always_inline int addr6_eq(const void *a, const void *b)
{
	const __u32 *x = a, *y = b;

	return !((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3]));
}

static __always_inline void sig6_count(__be32 teid, const __u8 *addr, __u8 type, const __u8 *from)
{
	struct pgwu_sig6_key k = { .teid = teid, .type = type };
	struct pgwu_sig6_val *v, nv = {};

	__builtin_memcpy(k.addr, addr, 16);
	v = bpf_map_lookup_elem(&sig_rx6, &k);
	if (v) {
		__sync_fetch_and_add(&v->packets, 1);
		v->last_ns = bpf_ktime_get_ns();
		__builtin_memcpy(v->from, from, 16);
		return;
	}
	nv.packets = 1;
	nv.last_ns = bpf_ktime_get_ns();
	__builtin_memcpy(nv.from, from, 16);
	bpf_map_update_elem(&sig_rx6, &k, &nv, BPF_ANY);
}

/* The signalling an IPv6 peer sent, recorded as an IPv4 peer's is (xdp_access): an Echo Response
 * in peers6, an Error Indication (its Tunnel Endpoint Identifier Data I, and its GTP-U Peer Address
 * when that is 16 octets, TS 29.281 7.3.1 / 8.4; else the sender) and an End Marker (our TEID in
 * its header, 7.3.2) in sig_rx6. p the body, after the header and its extension headers. */
static __always_inline void n3v6_sig_record(__u8 type, __be32 teid, __be16 seq, const __u8 *peer,
					    const __u8 *p, const void *ip_end, const void *data_end)
{
	__u8 addr[16];
	__be32 t;

	if (type == GTP_ECHO_RSP) {
		peer_echo_rsp(&peers6, peer, p, ip_end, data_end, seq);
		return;
	}
	if (type == GTP_END_MARKER) {
		sig6_count(teid, peer, GTP_END_MARKER, peer);
		return;
	}
	if (type != GTP_ERROR_IND || (const void *)(p + 5) > ip_end || (const void *)(p + 5) > data_end ||
	    p[0] != GTP_IE_TEID_DATA_I)
		return;
	__builtin_memcpy(&t, p + 1, 4);
	__builtin_memcpy(addr, peer, 16);
	if ((const void *)(p + 24) <= ip_end && (const void *)(p + 24) <= data_end &&
	    p[5] == GTP_IE_PEER_ADDR && p[6] == 0 && p[7] == GTP_IE_PEER_ADDR_V6_LEN)
		__builtin_memcpy(addr, p + 8, 16);
	sig6_count(t, addr, GTP_ERROR_IND, peer);
}

/* An IPv6 source nobody may be answered at: unspecified, loopback, multicast, our own address. */
static __always_inline int n3v6_martian(const __u8 *a, const struct pgwu_config *cfg)
{
	const __u32 *w = (const void *)a;

	if (a[0] == 0xff)
		return 1;
	if (!w[0] && !w[1] && !w[2] && (!w[3] || w[3] == bpf_htonl(1)))
		return 1;
	return addr6_eq(a, cfg->n3_addr6);
}

/*
 * A GTP-U message back to the sender of the one received, over IPv6 (TS 29.281 7.2.2, 7.3.1):
 * Ethernet with the addresses swapped and the received tag; IPv6 n3_addr6 -> peer (class and flow
 * label 0, hop limit OUTER_TTL); UDP sport -> dport with its checksum; GTP-U with S set, TEID 0,
 * sequence seq; the ie_len octets of ie (a constant at each call, even). rx_len the frame's length.
 * Returns 0, or -1 when the frame can't be resized.
 */
#define N3V6_REPLY_HDRS (40 + 8 + 12)
#define N3V6_IE_MAX 24

static __always_inline int n3v6_reply(struct xdp_md *ctx, __u32 rx_len, __u32 l2, __be16 tci,
				      const __u8 *orig_mac, const __u8 *local, const __u8 *peer,
				      __be16 sport, __be16 dport, __u8 type, __be16 seq,
				      const __u8 *ie, __u32 ie_len)
{
	__u32 new_len = l2 + N3V6_REPLY_HDRS + ie_len;
	void *data, *data_end;
	struct gtpu_opt *ropt;
	struct gtpu_hdr *rg;
	struct ethhdr *eth;
	struct ipv6hdr *rip;
	struct udphdr *ru;
	const __u16 *w;
	__u64 sum;
	int i;

	/* the start moves too, as reply_start's (live-frame page recycling) */
	if (bpf_xdp_adjust_head(ctx, REPLY_SHIFT) ||
	    bpf_xdp_adjust_tail(ctx, (int)new_len - (int)(rx_len - REPLY_SHIFT)))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	rip = data + (l2 == 18 ? 18 : 14);
	if ((void *)rip + N3V6_REPLY_HDRS + ie_len > data_end)
		return -1;
	eth = data;
	__builtin_memcpy(eth->h_dest, orig_mac + 6, 6);
	__builtin_memcpy(eth->h_source, orig_mac, 6);
	if (l2 == 18) {
		struct vlan_hdr *v = (void *)(eth + 1);

		eth->h_proto = ETH_P_8021Q_BE;
		v->tci = tci;
		v->encap_proto = ETH_P_IPV6_BE;
	} else {
		eth->h_proto = ETH_P_IPV6_BE;
	}
	ru = (void *)(rip + 1);
	rg = (void *)(ru + 1);
	ropt = (void *)(rg + 1);
	ipv6_own_hdr(rip, local, peer, IPPROTO_UDP, 8 + 12 + ie_len);
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
	__builtin_memcpy(ropt + 1, ie, ie_len);
	sum = n3v6_addr_sum(&rip->saddr) + ru->len + bpf_htons(IPPROTO_UDP);
	w = (void *)ru;
#pragma unroll
	for (i = 0; i < (20 + ie_len) / 2; i++)
		sum += w[i];
	if (ie_len & 1) {
		__u16 last = 0;

		*(__u8 *)&last = ((__u8 *)ru)[20 + ie_len - 1];	/* the word [b, 0] */
		sum += last;
	}
	ru->check = csum_finish_udp(sum);
	return 0;
}

/*
 * RFC 1812 5.3.1 over an IPv6 tunnel: Time Exceeded to the UE whose uplink IPv4 packet (at iip,
 * inner_len octets) came over IPv6 N3 with TTL <= 1, as xdp_access's ttl_expired answers over IPv4,
 * through the bearer's downlink tunnel: Ethernet back to the sender of the G-PDU (orig_mac, VLAN id
 * vid) / IPv6 n3_addr6 -> the downlink half's IPv6 peer (n3v6_peers) / UDP 2152 -> 2152 with its
 * checksum / GTP-U G-PDU with its TEID (and its PDU Session Container, x = 8) / IPv4 local_addr ->
 * UE / ICMP 11/0 / the expired packet's header and 8 octets (reply_tunnel6). None with err-ind off,
 * without local_addr, from a martian sender, or for a bearer whose downlink peer is IPv4 (no IPv6
 * tunnel to answer in). Rate-limited per UE, as over IPv4. Returns the verdict.
 */
static __always_inline __u32 n3v6_ttl_expired4(struct xdp_md *ctx, const struct pgwu_config *cfg,
					       struct iphdr *iip, __u32 inner_len, const __u8 *orig_mac,
					       __u16 vid, const __u8 *peer)
{
	void *data = (void *)(long)ctx->data, *data_end;
	struct pgwu_n3v6_peer *pe;
	struct pgwu_dl_bearer *dl;
	__be32 ue = iip->saddr, steid;
	__u32 q = iip->ihl * 4 + 8, l2 = vid ? 18 : 14, off, x, idx;
	__u8 qfi;
	int i;

	if ((cfg->flags & PGWU_CFG_NO_ERR_IND) || !cfg->local_addr || n3v6_martian(peer, cfg))
		return XDP_DROP;
	dl = bpf_map_lookup_elem(&dl_bearers, &ue);
	if (!dl || !(dl->flags & PGWU_B_PEER6))	/* an IPv4 peer: no IPv6 tunnel to answer in */
		return XDP_DROP;
	idx = dl->sgw_addr;
	steid = dl->sgw_teid;
	x = dl->flags & PGWU_B_QFI ? 8 : 0;
	qfi = (dl->flags >> PGWU_B_QFI_SHIFT) & 0x3f;
	pe = bpf_map_lookup_elem(&n3v6_peers, &idx);
	if (!pe || addr6_unset(pe->addr))
		return XDP_DROP;
	if (!reply_allowed(ue)) {
		event(PGWU_EV_ICMP_RATE_LIMITED);
		return XDP_DROP;
	}
	if (q > inner_len)
		q = inner_len;
	/* the expired packet's header goes to l2 + 84: outer IPv6, UDP, GTP-U, IPv4, ICMP before it */
	i = (long)iip - (long)data;
	asm volatile("" : "+r"(i));
	if (bpf_xdp_adjust_head(ctx, i - (int)(l2 + 84 + x)) || trim_to(ctx, l2 + 84 + x + q))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + 18 + 84 + 8 > data_end)	/* the inner header alone is 20 */
		return XDP_DROP;
	off = write_eth_proto(data, orig_mac + 6, orig_mac, vid, ETH_P_IPV6_BE);
	/* the inner error first: the outer UDP checksum covers it */
	if (icmp_error(ctx, off + 56 + x, cfg->local_addr, ue, q, 11, 0, 0) ||
	    reply_tunnel6(ctx, off, cfg->n3_addr6, pe->addr, steid, 28 + q, x, qfi))
		return XDP_DROP;
	event(PGWU_EV_ICMP_TIME_EXCEEDED_SENT);
	return XDP_TX;
}

SEC("xdp")
int xdp_ul_n3v6(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 rx_len = data_end - data, action = XDP_DROP, reason, zero = 0;
	struct pgwu_config *cfg = bpf_map_lookup_elem(&config, &zero);
	struct cursor cur = { .pos = data, .end = data_end };
	struct pgwu_ul_bearer *b = NULL;
	struct ethhdr *eth;
	struct vlan_hdr *tag;
	struct ipv6hdr *ip6;
	struct udphdr *udp;
	struct iphdr *iip;
	struct gtpu_hdr *gtp;
	struct gtpu_msg m;
	struct nexthop nh;
	__u8 orig_mac[12], peer[16], ie[N3V6_IE_MAX], pa[32];
	__u8 type;
	__u32 l2, plen, udp_len, inner_len, out_l2, mtu = 0;
	__be16 tci, peer_port, seq;
	void *ip_end, *p;
	__u64 sum;
	int err, i;

	if (!cfg) {
		reason = PGWU_R_DROP_NOT_CONFIGURED;
		goto out;
	}
	if (parse_eth(&cur, &eth, &tag) != ETH_P_IPV6_BE) {
		reason = PGWU_R_DROP_TRUNC_ETH;		/* xdp_access checked it: not reached */
		goto out;
	}
	l2 = tag ? 18 : 14;
	tci = tag ? tag->tci : 0;
	ip6 = cur.pos;
	if ((void *)(ip6 + 1) > data_end || addr6_unset(cfg->n3_addr6) ||
	    !addr6_eq(&ip6->daddr, cfg->n3_addr6)) {
		action = XDP_PASS;		/* as before N3 over IPv6: ND, MLD, host traffic */
		reason = PGWU_R_PASS_NOT_IPV4;
		goto out;
	}
	if (ip6->nexthdr != IPPROTO_UDP) {
		/* ICMPv6 to our address (ND, echo) and an outer extension header: the kernel's */
		action = XDP_PASS;
		reason = PGWU_R_PASS_NOT_GTPU;
		goto out;
	}
	plen = bpf_ntohs(ip6->payload_len);
	if (ip6->version != 6 || (void *)(ip6 + 1) + plen > data_end) {
		reason = PGWU_R_DROP_BAD_IP;
		goto out;
	}
	ip_end = (void *)(ip6 + 1) + plen;
	udp = (void *)(ip6 + 1);
	if ((void *)(udp + 1) > ip_end || (void *)(udp + 1) > data_end) {
		reason = PGWU_R_DROP_TRUNC_UDP;
		goto out;
	}
	if (udp->dest != GTPU_PORT_BE) {
		action = XDP_PASS;
		reason = PGWU_R_PASS_NOT_GTPU;
		goto out;
	}
	udp_len = bpf_ntohs(udp->len);
	if (udp_len < sizeof(*udp) || udp_len != plen) {
		reason = PGWU_R_DROP_BAD_UDP_LEN;
		goto out;
	}
	/* RFC 8200 8.1: the checksum is mandatory; the datagram with it sums to 0xffff */
	if (!udp->check) {
		reason = PGWU_R_DROP_OUTER_UDP_CSUM;
		goto out;
	}
	__builtin_memcpy(pa, &ip6->saddr, 32);	/* the pseudo header's addresses */
	__builtin_memcpy(peer, pa, 16);
	__builtin_memcpy(orig_mac, eth->h_dest, 12);
	sum = n3v6_addr_sum(pa) + bpf_htons((__u16)udp_len) + bpf_htons(IPPROTO_UDP);
	sum += csum_bytes_once(ctx, l2 + 40, udp_len, &err);
	if (err || csum_fold16(sum) != 0xffff) {
		reason = PGWU_R_DROP_OUTER_UDP_CSUM;
		goto out;
	}
	/* csum_bytes' loops leave the packet pointers unknown to the verifier: again */
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	udp = data + (l2 == 18 ? 18 : 14) + 40;
	if ((void *)(udp + 1) > data_end) {
		reason = PGWU_R_DROP_TRUNC_UDP;
		goto out;
	}
	ip_end = (void *)udp + (udp_len & 0xffff);
	peer_port = udp->source;
	reason = gtpu_hdr_check(udp + 1, ip_end, data_end, udp_len, &m);
	if (reason)
		goto out;
	gtp = m.gtp;
	seq = m.seq;
	/* read once, as xdp_access does: a type read again is a new unknown to the verifier */
	type = gtp->type;
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
	/* the body's offset as an unknown within the frame's bounds, as xdp_access's: each step of
	 * the walk left a pointer of its own, and the verifier walked all that follows for each */
	i = (long)m.p - (long)data;
	p = data + (i & 0x3fff);
	reason = gtpu_sig_reason(type);
	if (reason) {
		/* consumed, counted, and recorded in peers6 / sig_rx6 */
		n3v6_sig_record(type, gtp->teid, seq, peer, p, ip_end, data_end);
		goto out;
	}

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
		struct pgwu_ul6_handoff *ho = bpf_map_lookup_elem(&ul6_handoff, &zero);

		if (ho) {
			ho->teid = gtp->teid;
			ho->flags = b->flags;
			ho->inner_off = p - data;
			ho->inner_len = inner_len;
			__builtin_memcpy(ho->orig_mac, orig_mac, 12);
			ho->peer = 0;	/* no IPv4 sender: answers go into an IPv6 tunnel only */
			ho->peer6 = !n3v6_martian(peer, cfg);
			ho->vid = tag ? bpf_ntohs(tci) & 0x0fff : 0;
			bpf_tail_call(ctx, &sgi_progs, PGWU_PROG_ACCESS6);
		}
	}
	reason = gpdu_inner_check(p, ip_end, data_end, !(cfg->flags & PGWU_CFG_NO_INNER_CSUM_CHECK),
				  b->ue_addr, &iip);
	if (reason == PGWU_R_DROP_TTL_EXPIRED) {
		action = n3v6_ttl_expired4(ctx, cfg, iip, inner_len, orig_mac,
					   tag ? bpf_ntohs(tci) & 0x0fff : 0, peer);
		goto out;
	}
	if (reason)
		goto out;
	reason = resolve_nexthop(ctx, cfg, PGWU_SIDE_SGI, iip->saddr, iip->daddr, iip->tos,
				 iip->protocol, inner_len, &nh, &mtu);
	if (reason == PGWU_R_PASS_NO_NEIGH || reason == PGWU_R_PASS_FIB_OTHER)
		out_l2 = sizeof(struct ethhdr);
	else if (reason)
		goto out;
	else
		out_l2 = cfg->egress_vlan[PGWU_SIDE_SGI] ? 18 : 14;
	if (b->flags & (PGWU_B_QOS | PGWU_B_SDF)) {
		__u32 qr = pdr_apply(ctx, b->flags, gtp->teid, PGWU_PFCP_UPLINK, (void *)iip - data,
				     inner_len, !reason);

		if (qr) {
			reason = qr;
			action = XDP_DROP;
			goto out;
		}
	}
	i = (long)iip - (long)data;
	asm volatile("" : "+r"(i));
	if (bpf_xdp_adjust_head(ctx, i - (int)out_l2) || trim_to(ctx, out_l2 + inner_len)) {
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
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
	if (n3v6_martian(peer, cfg)) {
		reason = PGWU_R_DROP_ECHO_BAD_SRC;
		goto out;
	}
	ie[0] = GTP_IE_RECOVERY;
	ie[1] = cfg->restart_counter;
	if (n3v6_reply(ctx, rx_len, l2, tci, orig_mac, cfg->n3_addr6, peer, GTPU_PORT_BE, peer_port,
		       GTP_ECHO_RSP, seq, ie, 2)) {
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	action = XDP_TX;
	reason = PGWU_R_ECHO_REPLY;
	goto out;

err_ind:
	/* TS 29.281 7.3.1: naming the TEID used and the address sent to (GTP-U Peer Address, 8.4:
	 * 16 octets for IPv6); the G-PDU stays counted as drop_unknown_teid (verdict tx) */
	if ((cfg->flags & PGWU_CFG_NO_ERR_IND) || n3v6_martian(peer, cfg))
		goto out;
	if (!reply_allowed(addr6_fold((const __u32 *)peer, 4))) {
		event(PGWU_EV_ERR_IND_RATE_LIMITED);
		goto out;
	}
	ie[0] = GTP_IE_TEID_DATA_I;
	__builtin_memcpy(ie + 1, &gtp->teid, 4);
	ie[5] = GTP_IE_PEER_ADDR;
	ie[6] = 0;
	ie[7] = GTP_IE_PEER_ADDR_V6_LEN;
	__builtin_memcpy(ie + 8, cfg->n3_addr6, 16);
	if (n3v6_reply(ctx, rx_len, l2, tci, orig_mac, cfg->n3_addr6, peer, GTPU_PORT_BE, GTPU_PORT_BE,
		       GTP_ERROR_IND, 0, ie, 24))
		goto out;
	event(PGWU_EV_ERR_IND_SENT);
	action = XDP_TX;
	goto out;

supp_ext:
	/* TS 29.281 7.2.3: Supported Extension Headers Notification to the sender's port (4.4.2.5),
	 * as xdp_access's, over IPv6; rate-limited per peer as the Error Indications are */
	if ((cfg->flags & PGWU_CFG_NO_ERR_IND) || n3v6_martian(peer, cfg))
		goto out;
	if (!reply_allowed(addr6_fold((const __u32 *)peer, 4))) {
		event(PGWU_EV_SUPP_EXT_RATE_LIMITED);
		goto out;
	}
	gtpu_ext_list_ie(ie);
	if (n3v6_reply(ctx, rx_len, l2, tci, orig_mac, cfg->n3_addr6, peer, GTPU_PORT_BE, peer_port,
		       GTP_SUPP_EXT_NOTIF, 0, ie, GTPU_EXT_LIST_IE_LEN))
		goto out;
	event(PGWU_EV_SUPP_EXT_SENT);
	action = XDP_TX;
	goto out;
out:
	count(reason, action, rx_len);
	return action;
}

/*
 * Fragmentation Needed (RFC 1191) or Time Exceeded (RFC 792) to the sender of the IPv4 packet at
 * in_l2, out of SGi, as xdp_sgi's icmp_reply. Returns the verdict.
 */
static __always_inline __u32 icmp_reply4(struct xdp_md *ctx, const struct pgwu_config *cfg, __u32 in_l2,
					 __u32 ihl_len, __u32 tot_len, __u8 type, __u8 code, __u16 mtu)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct vlan_hdr *tag = (void *)(eth + 1);
	struct iphdr *ip = data + (in_l2 == 18 ? 18 : 14);
	__u32 q = ihl_len + 8, l2, off;
	__u8 macs[12];
	__be32 src;
	__u16 vid;

	if ((void *)(ip + 1) > data_end)
		return XDP_DROP;
	src = ip->saddr;
	if ((cfg->flags & PGWU_CFG_NO_ERR_IND) || !cfg->local_addr || martian_src(src, cfg))
		return XDP_DROP;
	if (!reply_allowed(src)) {
		event(PGWU_EV_ICMP_RATE_LIMITED);
		return XDP_DROP;
	}
	vid = in_l2 == 18 ? bpf_ntohs(tag->tci) & 0x0fff : 0;
	l2 = vid ? 18 : 14;
	if (q > tot_len)
		q = tot_len;
	__builtin_memcpy(macs, eth->h_dest, 12);
	if (bpf_xdp_adjust_head(ctx, (int)in_l2 - (int)(l2 + 28)) || trim_to(ctx, l2 + 28 + q))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + 18 + 28 > data_end)
		return XDP_DROP;
	off = write_eth(data, macs + 6, macs, vid);
	if (icmp_error(ctx, off, cfg->local_addr, src, q, type, code, mtu))
		return XDP_DROP;
	event(type == 3 ? PGWU_EV_ICMP_FRAG_NEEDED_SENT : PGWU_EV_ICMP_TIME_EXCEEDED_SENT);
	return XDP_TX;
}

SEC("xdp")
int xdp_dl_n3v6(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 rx_len = data_end - data, action = XDP_DROP, reason, zero = 0;
	struct pgwu_config *cfg = bpf_map_lookup_elem(&config, &zero);
	struct cursor cur = { .pos = data, .end = data_end };
	struct pgwu_dl_bearer *b = NULL, bv;
	struct pgwu_n3v6_peer *pe;
	struct ethhdr *eth;
	struct vlan_hdr *tag;
	struct ipv6hdr oh = {}, *o6;
	struct udphdr *ou;
	struct gtpu_hdr *og;
	struct nexthop nh;
	__u32 in_l2, out_l2, tot_len, ihl_len = 0, encap, pass, mtu = 0, peer_idx, l4 = 0;
	__u64 prefix = 0, sum;
	__u8 qfi, tc, v4, df = 0, expired;
	__be16 sport;
	int proto, err;

	if (!cfg) {
		reason = PGWU_R_DROP_NOT_CONFIGURED;
		goto out;
	}
	proto = parse_eth(&cur, &eth, &tag);
	in_l2 = tag ? 18 : 14;
	v4 = proto == ETH_P_IP_BE;
	/* xdp_sgi / sgi_ipv6 checked the header and found the bearer: the checks again are for the
	 * verifier, and the lookup again because a map value can't be handed over */
	if (v4) {
		struct iphdr *ip = cur.pos;

		if ((void *)(ip + 1) > data_end || ip->ihl < 5) {
			reason = PGWU_R_DROP_BAD_IP_DL;
			goto out;
		}
		ihl_len = ip->ihl * 4;
		tot_len = bpf_ntohs(ip->tot_len);
		if (tot_len < ihl_len || (void *)ip + tot_len > data_end) {
			reason = PGWU_R_DROP_BAD_IP_DL;
			goto out;
		}
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
		expired = ip->ttl <= 1;
		tc = ip->tos;
		df = !!(ip->frag_off & bpf_htons(0x4000));
		sport = gtpu_dl_sport(ip, ihl_len, tot_len, data_end, cfg->flags);
	} else if (proto == ETH_P_IPV6_BE) {
		struct ipv6hdr *ip6 = cur.pos;
		__u32 s0, d0;

		if ((void *)(ip6 + 1) > data_end) {
			reason = PGWU_R_DROP_BAD_IP_DL;
			goto out;
		}
		tot_len = sizeof(*ip6) + bpf_ntohs(ip6->payload_len);
		if ((void *)ip6 + tot_len > data_end) {
			reason = PGWU_R_DROP_BAD_IP_DL;
			goto out;
		}
		__builtin_memcpy(&prefix, &ip6->daddr, 8);
		b = dl6_find(prefix);
		expired = ip6->hop_limit <= 1;
		tc = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
		s0 = addr6_fold(ip6->saddr.in6_u.u6_addr32, 4);
		d0 = addr6_fold(ip6->daddr.in6_u.u6_addr32, 4);
		if (ip6->nexthdr == IPPROTO_TCP || ip6->nexthdr == IPPROTO_UDP) {
			__u32 *ports = (void *)(ip6 + 1);

			if (tot_len >= sizeof(*ip6) + 4 && (void *)(ports + 1) <= data_end)
				l4 = *ports;
		}
		sport = cfg->flags & PGWU_CFG_SPORT_FIXED ? GTPU_PORT_BE :
			bpf_htons(pgwu_sport_of(s0, d0, l4, ip6->nexthdr));
	} else {
		reason = PGWU_R_DROP_BAD_IP_DL;
		goto out;
	}
	if (!b) {
		reason = PGWU_R_DROP_UNKNOWN_UE;	/* removed since the caller found it */
		goto out;
	}
	if (expired) {
		reason = PGWU_R_DROP_TTL_EXPIRED;
		if (v4)
			action = icmp_reply4(ctx, cfg, in_l2, ihl_len, tot_len, 11, 0, 0);
		else
			action = sgi6_error(ctx, cfg, in_l2, tot_len, 3, 0);
		goto out;
	}
	peer_idx = b->sgw_addr;
	pe = bpf_map_lookup_elem(&n3v6_peers, &peer_idx);
	if (!pe || addr6_unset(pe->addr) || addr6_unset(cfg->n3_addr6)) {
		reason = PGWU_R_DROP_NO_ROUTE;		/* nothing to send to, or from */
		goto out;
	}
	qfi = gtpu_dl_qfi(b->flags);
	encap = N3V6_ENCAP_LEN + (qfi != 0xff ? 8 : 0);
	*(__be32 *)&oh = bpf_htonl(0x60000000 | (__u32)tc << 20);
	oh.payload_len = bpf_htons(tot_len + encap - 40);
	oh.nexthdr = IPPROTO_UDP;
	oh.hop_limit = OUTER_TTL;
	__builtin_memcpy(&oh.saddr, cfg->n3_addr6, 16);
	__builtin_memcpy(&oh.daddr, pe->addr, 16);
	reason = resolve_nexthop6(ctx, cfg, PGWU_SIDE_ACCESS, &oh, IPPROTO_UDP, tot_len + encap, &nh, &mtu);
	if (mtu) {
		/* no fragments of the outer IPv6 packet in XDP: an IPv6 packet hears Packet Too Big
		 * while the tunnel leaves it 1280, an IPv4 one with DF Fragmentation Needed */
		if (v4) {
			reason = PGWU_R_DROP_FRAG_NEEDED;
			if (df)
				action = icmp_reply4(ctx, cfg, in_l2, ihl_len, tot_len, 3, 4, mtu - encap);
		} else {
			reason = PGWU_R_DROP_TOO_BIG;
			if (mtu >= ICMP6_MIN_MTU + encap)
				action = sgi6_error(ctx, cfg, in_l2, tot_len, 2, mtu - encap);
		}
		goto out;
	}
	pass = reason == PGWU_R_PASS_NO_NEIGH || reason == PGWU_R_PASS_FIB_OTHER;
	if (reason && !pass)
		goto out;
	bv = *b;
	if (bv.flags & (PGWU_B_QOS | PGWU_B_SDF)) {
		__u32 qr = pdr_apply(ctx, bv.flags, bv.local_teid, PGWU_PFCP_DOWNLINK, in_l2, tot_len, !pass);

		if (qr) {
			reason = qr;
			action = XDP_DROP;
			goto out;
		}
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end) {
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	if (pass) {
		__builtin_memcpy(nh.dmac, eth->h_dest, 6);
		__builtin_memcpy(nh.smac, eth->h_source, 6);
		out_l2 = 14;
	} else {
		out_l2 = cfg->egress_vlan[PGWU_SIDE_ACCESS] ? 18 : 14;
	}
	/* an IP hop on SGi: TTL / hop limit down before the tunnel (the sum below sees it) */
	if (v4) {
		struct iphdr *ip = data + (in_l2 == 18 ? 18 : 14);

		if ((void *)(ip + 1) > data_end) {
			reason = PGWU_R_DROP_ADJUST;
			goto out;
		}
		ipv4_decrease_ttl(ip);
		/* the outer UDP checksum covers the inner packet: an IPv4 one's headers summed and
		 * its payload's sum taken from its own TCP / UDP checksum where that covers it, as
		 * the IPv4 outer's (inner_sum; else summed) */
		sum = inner_sum(ctx, ip, ihl_len, tot_len, data_end, &err);
	} else {
		struct ipv6hdr *ip6 = data + (in_l2 == 18 ? 18 : 14);

		if ((void *)(ip6 + 1) > data_end) {
			reason = PGWU_R_DROP_ADJUST;
			goto out;
		}
		ip6->hop_limit--;
		/* an IPv6 one summed whole */
		sum = csum_bytes_once(ctx, in_l2, tot_len, &err);
	}
	if (err) {
		reason = PGWU_R_DROP_BAD_IP_DL;
		goto out;
	}
	if (trim_to(ctx, in_l2 + tot_len) ||
	    bpf_xdp_adjust_head(ctx, (int)in_l2 - (int)(out_l2 + encap))) {
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + 18 + N3V6_ENCAP_LEN + 8 > data_end) {	/* a frame is never shorter */
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	write_eth_proto(data, nh.dmac, nh.smac, pass ? 0 : cfg->egress_vlan[PGWU_SIDE_ACCESS], ETH_P_IPV6_BE);
	o6 = data + (out_l2 == 18 ? 18 : 14);
	ou = (void *)(o6 + 1);
	og = (void *)(ou + 1);
	if ((void *)(og + 1) + 8 > data_end) {
		reason = PGWU_R_DROP_ADJUST;
		goto out;
	}
	__builtin_memcpy(o6, &oh, sizeof(oh));
	ou->source = sport;
	ou->dest = GTPU_PORT_BE;
	ou->len = oh.payload_len;
	ou->check = 0;
	og->flags = 0x30;
	og->type = GTP_GPDU;
	og->length = bpf_htons(tot_len + encap - N3V6_ENCAP_LEN);
	og->teid = bv.sgw_teid;
	sum += n3v6_addr_sum(&oh.saddr) + ou->len + bpf_htons(IPPROTO_UDP);
	if (qfi != 0xff) {
		__u8 *x = (void *)(og + 1);

		og->flags = 0x30 | GTP_FLAG_E;
		x[0] = 0;
		x[1] = 0;
		x[2] = 0;
		x[3] = GTP_EXT_PDU_SESSION_CONTAINER;
		x[4] = 1;
		x[5] = 0;	/* DL PDU SESSION INFORMATION */
		x[6] = qfi;
		x[7] = 0;
		sum += (__u64)*(csum_word *)(x + 0) + *(csum_word *)(x + 4);
	}
	{
		const csum_word *w = (void *)ou;

		sum += (__u64)w[0] + w[1] + w[2] + w[3];	/* UDP (check 0), GTP-U */
	}
	ou->check = csum_finish_udp(sum);
	if (pass) {
		action = XDP_PASS;
		goto out;
	}
	if (v4) {
		/* b is the slot's or the hash entry's value, still valid: map values do not move */
		__sync_fetch_and_add(&b->packets, 1);
		__sync_fetch_and_add(&b->bytes, tot_len);
	} else {
		dl6_count(prefix, tot_len);
	}
	action = forward(ctx, nh.ifindex);
	reason = PGWU_R_DL_FWD;
out:
	count(reason, action, rx_len);
	return action;
}

#endif /* PGWU_N3V6_H */
