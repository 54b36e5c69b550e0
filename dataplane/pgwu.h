/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * pgwu.h: the types the PGW-U's BPF programs (pgwu.bpf.c) and its control tool (pgwu.c) share.
 * Only __u* types and flags. Byte order: every address and TEID stored in a map is in network byte
 * order (as it is on the wire), so the fast path never swaps bytes; counters are host order.
 */
#ifndef PGWU_H
#define PGWU_H

#include <linux/types.h>
#include <linux/bpf.h>		/* struct bpf_spin_lock (struct pgwu_qos) */

#define PGWU_GTPU_PORT 2152

/* Where a packet enters: the programs are one per side. */
enum pgwu_side {
	PGWU_SIDE_ACCESS = 0,	/* S1-U/S5: GTP-U to and from the SGWs */
	PGWU_SIDE_SGI = 1,	/* SGi: plain IP to and from the packet data network */
	PGWU_SIDE_MAX,
};

/*
 * Every packet a program sees is counted exactly once, in stats[reason * PGWU_VERDICT_MAX + verdict].
 * The verdict is the XDP action returned (XDP_ABORTED .. XDP_REDIRECT). Each reason has one usual
 * verdict (comment); *_FWD is XDP_REDIRECT, or XDP_TX when the egress is the ingress interface.
 * Keep pgwu_reason_names[] (pgwu_fmt.c) and gtplab/dut/dataplane.py in step with this list.
 */
enum pgwu_reason {
	PGWU_R_UL_FWD = 0,		/* REDIRECT/TX: uplink G-PDU decapsulated and forwarded to SGi */
	PGWU_R_DL_FWD,			/* REDIRECT/TX: downlink packet encapsulated and forwarded to access */
	PGWU_R_ECHO_REPLY,		/* TX: GTP-U Echo Request answered with an Echo Response */
	PGWU_R_PASS_NOT_IPV4,		/* PASS: not IPv4 (ARP, IPv6, LLDP, QinQ ...) */
	PGWU_R_PASS_NOT_GTPU,		/* PASS: access side, IPv4 not UDP/2152 to the GTP-U address */
	PGWU_R_PASS_NOT_UE,		/* PASS: SGi side, destination outside the UE pool (host traffic) */
	PGWU_R_SIG_ECHO_RESPONSE,	/* DROP: Echo Response consumed: peers[src] updated */
	PGWU_R_SIG_ERROR_IND,		/* DROP: Error Indication received: consumed, counted per
					 * bearer (sig_bearers) when its TEID is one we send to */
	PGWU_R_SIG_END_MARKER,		/* DROP: End Marker consumed (TS 29.281 7.3.2), counted per
					 * bearer (sig_bearers) when its TEID is a bearer's */
	PGWU_R_SIG_SUPP_EXT_NOTIF,	/* DROP: Supported Extension Headers Notification consumed */
	PGWU_R_PASS_NO_NEIGH,		/* PASS: next hop not resolved yet; the kernel resolves it */
	PGWU_R_PASS_FIB_OTHER,		/* PASS: route lookup says the kernel must handle it (local
					 * delivery, fragmentation needed, unsupported next hop) */
	PGWU_R_DROP_TRUNC_ETH,		/* DROP: shorter than an Ethernet (+802.1Q) header */
	PGWU_R_DROP_TRUNC_IP,		/* DROP: outer IPv4 header truncated */
	PGWU_R_DROP_BAD_IP,		/* DROP: outer IPv4 header invalid (IHL < 5, total length) */
	PGWU_R_DROP_OUTER_FRAG,		/* DROP: outer IPv4 fragment of UDP to the GTP-U address while
					 * no `pgwu reassemble` is registered (else PASS_OUTER_FRAG) */
	PGWU_R_DROP_TRUNC_UDP,		/* DROP: UDP header truncated */
	PGWU_R_DROP_BAD_UDP_LEN,	/* DROP: UDP length disagrees with the IP length */
	PGWU_R_DROP_TRUNC_GTP,		/* DROP: GTP-U header (or its optional fields) truncated */
	PGWU_R_DROP_GTP_VERSION,	/* DROP: GTP version != 1 or PT != 1 (GTP') */
	PGWU_R_DROP_GTP_BAD_LEN,	/* DROP: GTP length disagrees with the UDP length */
	PGWU_R_DROP_GTP_BAD_EXT,	/* DROP: extension header length 0, truncated, or chain too long */
	PGWU_R_DROP_GTP_UNKNOWN_MSG,	/* DROP: GTP-U message type a user plane does not accept */
	PGWU_R_DROP_UNKNOWN_TEID,	/* DROP, or TX when answered with an Error Indication (TS
					 * 29.281 7.3.1, rate-limited per peer): G-PDU for a TEID with
					 * no bearer */
	PGWU_R_DROP_INNER_NOT_IPV4,	/* DROP: G-PDU payload is not IPv4 (empty, other), or is IPv6
					 * for a bearer without a /64 (ul6_prefix) */
	PGWU_R_DROP_INNER_BAD,		/* DROP: inner IPv4 (or IPv6) header truncated or invalid */
	PGWU_R_DROP_SPOOFED,		/* DROP: inner source is not the bearer's UE address (IPv6:
					 * not in its /64) */
	PGWU_R_DROP_TTL_EXPIRED,	/* DROP, or TX when answered with ICMP Time Exceeded (rate-
					 * limited per sender): TTL <= 1 (uplink inner, downlink), IPv6
					 * hop limit <= 1 (ICMPv6 Time Exceeded) */
	PGWU_R_DROP_BAD_IP_DL,		/* DROP: SGi side, IPv4 header truncated or invalid */
	PGWU_R_DROP_UNKNOWN_UE,		/* DROP: SGi side, destination in the UE pool with no bearer */
	PGWU_R_DROP_NO_ROUTE,		/* DROP: route lookup: blackhole, unreachable, prohibited,
					 * no route, or forwarding disabled on the interface */
	PGWU_R_DROP_ADJUST,		/* DROP: bpf_xdp_adjust_head/tail refused (no headroom) */
	PGWU_R_DROP_GTP_EXT_UNSUPPORTED,	/* DROP, or TX as a Supported Extension Headers
					 * Notification: an extension header we don't know, marked
					 * "comprehension required" (type 10xxxxxx or 11xxxxxx) */
	PGWU_R_DROP_ECHO_BAD_SRC,	/* DROP: Echo Request from 0.0.0.0, loopback, multicast,
					 * broadcast or our own address: not answered */
	PGWU_R_DROP_INNER_CSUM,		/* DROP: uplink inner IPv4 header checksum wrong (RFC 1812
					 * 5.2.2), unless config has PGWU_CFG_NO_INNER_CSUM_CHECK */
	PGWU_R_DROP_FRAG_NEEDED,	/* DROP, or TX when answered with ICMP Fragmentation Needed:
					 * downlink packet with DF over the access route's MTU once
					 * encapsulated (without DF: PASS_FIB_OTHER, the kernel
					 * fragments the outer packet) */
	PGWU_R_DROP_QFI_MISMATCH,	/* DROP: uplink G-PDU of a bearer with a QFI without an UL
					 * PDU Session Container carrying that QFI (TS 38.415) */
	PGWU_R_PASS_OUTER_FRAG,		/* PASS: outer IPv4 fragment of UDP to the GTP-U address: the
					 * kernel reassembles it for the registered `pgwu reassemble`
					 * (PGWU_REG_REASM), which handles the whole G-PDU */
	PGWU_R_DROP_NOT_CONFIGURED,	/* DROP: config map entry missing (should never happen) */
	PGWU_R_DROP_GATE_CLOSED,	/* DROP: the bearer's QER gate is closed for this direction
					 * (TS 29.244 8.2.7; qos map, PGWU_QOS_*_CLOSED) */
	PGWU_R_DROP_MBR,		/* DROP: over the bearer's MBR in this direction (TS 29.244
					 * 8.2.8; the qos map's policer, struct pgwu_police) */
	PGWU_R_DROP_QUOTA,		/* DROP: the bearer's volume quota is used up (TS 29.244
					 * 5.2.2.2: without a FAR for quota action, drop) */
	PGWU_R_DROP_NO_PDR,		/* DROP: the bearer has SDF filters (PGWU_B_SDF) in this
					 * direction and the packet matches none of them (no PDR) */
	PGWU_R_DROP_FAR,		/* DROP: the PDR of the filter the packet matched has a FAR
					 * that drops (TS 29.244 8.2.26 Apply Action DROP) */
	PGWU_R_DROP_TOO_BIG,		/* DROP, or TX when answered with ICMPv6 Packet Too Big (RFC
					 * 4443 3.2, rate-limited per sender): an IPv6 packet over
					 * the route's MTU: uplink the SGi route's, downlink the access
					 * route's once encapsulated (when that leaves >= 1280 octets
					 * for it; below, PASS_FIB_OTHER: the kernel fragments the
					 * outer packet) */
	PGWU_R_UL_CP_FWD,		/* REDIRECT/TX: an uplink T-PDU its PDR sends to the CP function
					 * (PGWU_SDF_P_CP: a Router Solicitation, Open5GS's UP2CP PDR)
					 * relayed in a G-PDU to the CP function's address and TEID */
	PGWU_R_DL_CP_FWD,		/* REDIRECT/TX: a T-PDU from the CP function (a G-PDU to its
					 * CP2UP TEID, PGWU_B_CP2UP: a Router Advertisement) relayed
					 * to the UE's tunnel with the downlink PSC of its QFI */
	PGWU_R_DROP_OUTER_UDP_CSUM,	/* DROP: GTP-U over IPv6 (N3 IPv6, xdp_ul_n3v6) whose outer
					 * UDP checksum is 0 or wrong (RFC 8200 8.1: mandatory) */
	PGWU_REASON_MAX,
};

#define PGWU_VERDICT_MAX 5	/* XDP_ABORTED, XDP_DROP, XDP_PASS, XDP_TX, XDP_REDIRECT */

/*
 * Events that are not a packet's verdict: counted in events[] (per CPU, __u64), next to stats.
 * Keep pgwu_event_names[] (pgwu_fmt.c) and gtplab/dataplane.py in step with this list.
 */
enum pgwu_event {
	PGWU_EV_ERR_IND_SENT = 0,	/* an unknown-TEID G-PDU was turned into an Error Indication */
	PGWU_EV_ERR_IND_RATE_LIMITED,	/* ... not, its peer's budget was spent (the G-PDU dropped) */
	PGWU_EV_SUPP_EXT_SENT,		/* a Supported Extension Headers Notification was sent */
	PGWU_EV_SUPP_EXT_RATE_LIMITED,	/* ... not, rate limit */
	PGWU_EV_ICMP_TIME_EXCEEDED_SENT,	/* a packet whose TTL expired was answered (RFC 792) */
	PGWU_EV_ICMP_FRAG_NEEDED_SENT,	/* a downlink packet with DF too big once encapsulated was
					 * answered with Fragmentation Needed (RFC 1191) */
	PGWU_EV_ICMP_RATE_LIMITED,	/* an ICMP error not sent: rate limit (RFC 1812 4.3.2.8) */
	PGWU_EV_ICMP6_TOO_BIG_SENT,	/* an IPv6 packet over the MTU was answered with ICMPv6
					 * Packet Too Big (RFC 4443 3.2) */
	PGWU_EVENT_MAX,
};

/* stats value (per CPU): summed by pgwu over all CPUs. bytes = frame length as received. */
struct pgwu_counter {
	__u64 packets;
	__u64 bytes;
};

/* Bearer flags (pgwu_dl_bearer.flags) */
#define PGWU_B_CSUM_ON	(1U << 0)	/* outer UDP checksum computed */
#define PGWU_B_CSUM_OFF	(1U << 1)	/* outer UDP checksum 0 (TS 29.281 5.1); neither: global default */
/* 5G N3 (pgwu_dl_bearer.flags and pgwu_ul_bearer.flags): the bearer's QoS flow, QFI in bits 8-13.
 * Downlink G-PDUs carry a PDU Session Container with it; uplink ones must carry an UL one with it. */
#define PGWU_B_QFI	(1U << 2)
#define PGWU_B_QFI_SHIFT 8
/* Both halves: the bearer has an entry in qos (keyed by its local TEID) that the packet path
 * enforces: gate, MBR, volume quota. Without the flag the qos map is never looked at. */
#define PGWU_B_QOS	(1U << 3)
#define PGWU_QFI_MAX	63	/* 6 bits (TS 38.415 5.5.3.3) */
/* Both halves: the bearer has SDF filters in this direction (sdf_lists, struct pgwu_sdf_list
 * below): its packets are classified and take their PDR's action, QER and usage counters.
 * Without the flag sdf_lists is never looked at (the fast path is today's). */
#define PGWU_B_SDF	(1U << 4)
/* Uplink half: one of its SDF PDRs forwards to the CP function (cp_relay, struct pgwu_cp_relay):
 * its IPv6 T-PDUs go through xdp_cp first, which relays those that PDR matches. */
#define PGWU_B_CP	(1U << 5)
/* Uplink half of a CP2UP tunnel (a PDR with Source Interface CP-function and its own F-TEID,
 * 29.244 8.2.2): not a bearer; its IPv6 T-PDUs go to xdp_cp, which relays them to the session's
 * downlink tunnel (cp_relay keyed by this TEID). Its ue_addr is 255.255.255.255, which no
 * IPv4 T-PDU carries as its source (those are drop_spoofed). */
#define PGWU_B_CP2UP	(1U << 6)
/* Downlink halves: the peer (SGW, gNB) is IPv6 (N3 over IPv6): sgw_addr holds, in host order, its
 * index in n3v6_peers (struct pgwu_n3v6_peer), not an IPv4 address; the G-PDUs get an outer IPv6
 * header from the config's n3_addr6 (xdp_dl_n3v6). */
#define PGWU_B_PEER6	(1U << 7)
/* Entries of n3v6_peers: the IPv6 peers are gNBs and SGWs, few, and each bearer names its own by
 * index, so a bearer stays 32 octets whatever its peer's family. */
#define PGWU_N3V6_PEERS	1024
#define PGWU_N3V6_PEERS_STR "1024"

struct pgwu_n3v6_peer {
	__u8 addr[16];		/* all zero: a free entry */
};

/* The flags word of a QFI (0..63); the QFI of flags, or -1 when it has none. */
static inline __u32 pgwu_qfi_flags(__u32 qfi)
{
	return PGWU_B_QFI | (qfi & PGWU_QFI_MAX) << PGWU_B_QFI_SHIFT;
}

static inline int pgwu_qfi_of(__u32 flags)
{
	return flags & PGWU_B_QFI ? (int)((flags >> PGWU_B_QFI_SHIFT) & PGWU_QFI_MAX) : -1;
}

/*
 * Who installed a bearer half (both halves' flags, bits 16-31; the packet path ignores them):
 * 0 `pgwu session` (the operator), else the tag of the `pgwu pfcp` session that did. The agent
 * removes or rewrites a half only while it carries its session's tag, so a bearer the operator
 * put in its place (session del + add, same TEID or UE) is never touched by the agent.
 */
#define PGWU_B_OWNER_SHIFT 16
#define PGWU_B_OWNER_MASK 0xffff0000U

static inline __u32 pgwu_owner_of(__u32 flags)
{
	return flags >> PGWU_B_OWNER_SHIFT;
}

/*
 * ul_bearers: key __u32 TEID (the local TEID the SGW sends to), value below.
 * Usage counters are updated with atomic adds, so they are exact when several CPUs forward the
 * same bearer; bytes are the inner IPv4 packet's length (what the UE sent).
 */
struct pgwu_ul_bearer {
	__u32 ue_addr;		/* anti-spoofing: inner source must be this */
	__u32 flags;		/* PGWU_B_QFI and the QFI, else 0 */
	__u64 packets;
	__u64 bytes;
};

/*
 * ul6_prefix: key __u32 local TEID (network order), value below: the bearer's IPv6 /64 (uplink
 * anti-spoofing) and the usage of its IPv6 uplink, counted by xdp_access6 with atomic adds (bytes:
 * the inner IPv6 packet's length, header included), beside the IPv4 half's (pgwu_ul_bearer).
 */
struct pgwu_ul6 {
	__u64 prefix;		/* the /64: the address's first 8 octets as on the wire */
	__u64 packets;
	__u64 bytes;
};

/* dl_bearers: key __u32 UE address, value below. bytes: the IPv4 packet's length before encap. */
struct pgwu_dl_bearer {
	__u32 sgw_addr;		/* outer destination */
	__u32 sgw_teid;		/* TEID written in the G-PDU */
	__u32 local_teid;	/* key of the uplink half, so pgwu can join the two */
	__u32 flags;		/* PGWU_B_* */
	__u64 packets;
	__u64 bytes;
};

/*
 * ul_slots / dl_slots: a direct-mapped index of the bearers, so that the packet path touches one
 * cache line per bearer and no hash bucket: slot (key in host order) & slot_mask[0], where the key is
 * the local TEID (uplink) or the UE address (downlink) and the arrays have a power-of-two size >=
 * the capacity. A slot holds a copy of the bearer (and its usage counters) while state ==
 * PGWU_SLOT_VALID and key == the packet's key; any other packet falls back to the hash maps, which
 * hold every bearer (the slots are an index pgwu keeps, never the only copy). pgwu fills a slot only
 * after the hash entry exists, and empties it before deleting the hash entry; a bearer's usage is
 * the sum of its slot's counters and its hash entry's. Keys that share a slot (operator-chosen
 * values outside the lab's ranges) stay in the hash maps: correct, only slower.
 */
#define PGWU_SLOT_VALID 1U

/* the slot arrays' size for a capacity: the power of two >= it */
static inline __u32 pgwu_slots_for(__u32 cap)
{
	__u32 n = 1;

	while (n < cap && n < (1U << 31))
		n <<= 1;
	return n;
}

struct pgwu_ul_slot {
	__u32 teid;		/* key, network order */
	__u32 state;		/* PGWU_SLOT_VALID, written last */
	struct pgwu_ul_bearer b;
	/*
	 * The same TEID's IPv6 uplink (its ul6_prefix entry) in the same cache line, so that an
	 * IPv6 G-PDU touches one line as an IPv4 one does (xdp_access reads the line for b first):
	 * a second entry with its own key and state, set and emptied on its own (bearer_add_v6,
	 * bearer_remove_v6), under the same rules as the IPv4 one. Readers of the IPv4 entry look
	 * at teid/state/b only.
	 */
	__u32 teid6;		/* key, network order */
	__u32 state6;		/* PGWU_SLOT_VALID, written last */
	struct pgwu_ul6 u6;
};				/* 64 bytes: one cache line */

struct pgwu_dl_slot {
	__u32 ue;		/* key, network order */
	__u32 state;
	struct pgwu_dl_bearer b;
	__u8 pad[24];		/* 64 bytes: one cache line */
};

/*
 * SDF filters (TS 29.244 5.2.1, 8.2.5; IPFilterRule, TS 29.212 5.4.2) of a bearer with several PDRs
 * in a direction. sdf_lists: key pgwu_sdf_key (the local TEID and the direction: one list per
 * bearer half, for its IPv4 and its IPv6 packets both), value pgwu_sdf_list: up to PGWU_SDF_MAX
 * filters in precedence order (the writer sorts them; a PDR with a port list has one filter per
 * port range), each naming its PDR by a rule id, the key of sdf_pdrs (its FAR action and usage
 * counters) and of sdf_qos (its QER's gate/MBR/quota, when PGWU_SDF_P_QOS). The first filter the
 * packet matches wins; none: drop_no_pdr. A PDR without an SDF filter is a filter with fields 0
 * (matches everything). Addresses are stored as the packet carries them in that direction:
 * src is the UE's peer downlink, the UE uplink (the writer swaps the Flow Description's "from" and
 * "to" for an uplink PDR, TS 29.212 5.4.2).
 */
#define PGWU_SDF_MAX		32
#define PGWU_SDF_F_PROTO	(1U << 0)	/* proto: IPv4 protocol / IPv6 upper-layer header */
#define PGWU_SDF_F_SRC		(1U << 1)	/* (saddr & smask) == src */
#define PGWU_SDF_F_DST		(1U << 2)
#define PGWU_SDF_F_SPORT	(1U << 3)	/* sport_lo <= port <= sport_hi (TCP, UDP, SCTP) */
#define PGWU_SDF_F_DPORT	(1U << 4)
#define PGWU_SDF_F_TOS		(1U << 5)	/* (ToS or Traffic Class & tos_mask) == tos */
#define PGWU_SDF_F_FLOW		(1U << 6)	/* IPv6 flow label == flow_label */
#define PGWU_SDF_F_SPI		(1U << 7)	/* ESP or AH SPI == spi */
#define PGWU_SDF_F_V4		(1U << 8)	/* IPv4 packets only (an IPv4 address was given) */
#define PGWU_SDF_F_V6		(1U << 9)	/* IPv6 packets only */

struct pgwu_sdf_filter {
	__u32 rule;		/* the PDR: key of sdf_pdrs and sdf_qos */
	__u32 fields;		/* PGWU_SDF_F_* */
	__u32 src[4], smask[4];	/* network order; IPv4: [0], the rest 0 */
	__u32 dst[4], dmask[4];
	__u16 sport_lo, sport_hi, dport_lo, dport_hi;	/* host order, inclusive */
	__u32 spi;		/* network order */
	__u32 flow_label;	/* host order, 20 bits */
	__u8 proto, tos, tos_mask, pad;
};

/* sdf_urr's key: a session's URR whose volume threshold or quota PDRs of its SDF halves count
 * (PGWU_SDF_P_URR). teid: the local TEID both halves are keyed by (as qos), network order. */
struct pgwu_urr_key {
	__u32 teid;
	__u32 urr_id;
};

struct pgwu_sdf_key {
	__u32 teid;		/* the bearer's local TEID, network order */
	__u32 dir;		/* PGWU_PFCP_UPLINK 0, PGWU_PFCP_DOWNLINK 1 */
};

struct pgwu_sdf_list {
	__u32 n;		/* filters in f[], <= PGWU_SDF_MAX */
	__u32 pad;
	struct pgwu_sdf_filter f[PGWU_SDF_MAX];
};

/* sdf_pdrs: key __u32 rule id (chosen by the writer, unique in the map), value below. Usage:
 * the T-PDUs forwarded by XDP (as the bearer's own counters, which count them too), atomic adds. */
#define PGWU_SDF_P_DROP	(1U << 0)	/* the FAR drops: drop_far */
#define PGWU_SDF_P_QOS	(1U << 1)	/* sdf_qos holds its gate/MBR/quota (struct pgwu_qos) */
#define PGWU_SDF_P_CP	(1U << 2)	/* the FAR forwards to the CP function: cp_relay {rule,
					 * PGWU_CP_UP2CP} holds its tunnel; only xdp_cp sends there
					 * (another path that finds it: drop_far) */
#define PGWU_SDF_P_URR	(1U << 3)	/* sdf_urr {the half's TEID, urr} holds the volume threshold
					 * and quota of a URR it counts in (struct pgwu_qos: flags
					 * QUOTA* / VOLTH* only), which other PDRs may share */

struct pgwu_sdf_pdr {
	__u32 flags;		/* PGWU_SDF_P_* */
	__u32 precedence;	/* as given (the list's order) */
	__u16 pdr_id;		/* the PFCP PDR ID (0: set by `pgwu session add`) */
	__u16 pad;
	__u32 urr;		/* PGWU_SDF_P_URR: the URR ID, sdf_urr's key with the TEID */
	__u64 packets;
	__u64 bytes;
};

/*
 * cp_relay: the tunnels to and from the CP function (TS 29.244 5.2.1, 8.2.24 Destination Interface
 * CP-function; Open5GS's SMF's UP2CP and CP2UP PDRs carry Router Solicitations and Advertisements).
 * Key: {id, kind}. PGWU_CP_UP2CP: id is an sdf_pdrs rule id (PGWU_SDF_P_CP), addr/teid the FAR's
 * Outer Header Creation (IPv4). PGWU_CP_CP2UP: id is the CP2UP tunnel's local TEID (network
 * order, the ul_bearers entry with PGWU_B_CP2UP), prefix the session's /64: its downlink half
 * in dl6_bearers gives the gNB's address, TEID and QFI at each packet (an Update FAR of the
 * downlink FAR moves both). Written by pgwu; xdp_cp reads it and adds to packets/bytes (the
 * relayed T-PDU's length) with atomic adds.
 */
#define PGWU_CP_UP2CP	0
#define PGWU_CP_CP2UP	1

struct pgwu_cp_key {
	__u32 id;
	__u32 kind;		/* PGWU_CP_* */
};

struct pgwu_cp_relay {
	__u32 addr;		/* UP2CP: the CP function's address, network order */
	__u32 teid;		/* UP2CP: its TEID, network order */
	__u64 prefix;		/* CP2UP: the /64 of the session, as dl6_bearers keys it */
	__u64 packets;
	__u64 bytes;
};

/*
 * dl6_slots: the same index for the IPv6 downlink halves (dl6_bearers), slot
 * pgwu_slot6_of(/64) & slot_mask[0]: the /64's octets 4-7 as a host-order number. An operator's
 * /64s come out of a shorter pool (a /32 to a /56) in sequence, so those octets are what differs
 * between them, and consecutive /64s get consecutive slots as consecutive IPv4 UEs do (the lab's
 * fd47:7470:XXXX:YYYY::/64, XXXX:YYYY the bearer's number). Same rules as dl_slots: filled after
 * the hash entry, emptied before it goes, usage = slot + hash entry, colliding keys in the hash
 * map only.
 */
struct pgwu_dl6_slot {
	__u64 prefix;		/* key: the /64's 8 octets as on the wire */
	__u32 state;		/* PGWU_SLOT_VALID, written last */
	__u32 pad0;
	struct pgwu_dl_bearer b;
	__u8 pad[16];		/* 64 bytes: one cache line */
};

static inline __u32 pgwu_slot6_of(__u64 prefix)
{
	const __u8 *p = (const __u8 *)&prefix;

	return (__u32)p[4] << 24 | (__u32)p[5] << 16 | (__u32)p[6] << 8 | p[7];
}

/* A static next hop for one egress side; ifindex 0 = resolve with bpf_fib_lookup instead. */
struct pgwu_nexthop {
	__u32 ifindex;
	__u8 smac[6];
	__u8 dmac[6];
};

/* Global config flags (pgwu_config.flags) */
#define PGWU_CFG_CSUM		(1U << 0)	/* default for bearers with neither CSUM flag: on */
#define PGWU_CFG_FIB_CACHE	(1U << 1)	/* cache route lookups (kept correct by fib_gen) */
/* Off-switches: a config written before they existed (flags 0) has the behaviour on. */
#define PGWU_CFG_NO_ERR_IND	(1U << 2)	/* don't answer (Error Indication, Supported
						 * Extension Headers Notification, ICMP Time
						 * Exceeded): only drop */
#define PGWU_CFG_NO_INNER_CSUM_CHECK (1U << 3)	/* forward uplink inner IPv4 with a bad header
						 * checksum (RFC 1812 5.2.2 says discard) */
#define PGWU_CFG_SPORT_FIXED	(1U << 4)	/* downlink outer UDP source port 2152 for peers
						 * that need it, not pgwu_sport_of() of the inner
						 * flow (TS 29.281 4.4.2.0, 4.4.2.3) */

/*
 * The outer UDP source port of a downlink G-PDU without PGWU_CFG_SPORT_FIXED: 49152-65535 (RFC
 * 6335's dynamic range), from the inner flow: the low 14 bits of MurmurHash3_x86_32 of 12 octets,
 * saddr, daddr and l4 (the first 4 octets of its TCP/UDP header, the ports; 0 for other protocols
 * and fragments), with the protocol as seed. Each word is loaded as a host-order word from
 * network-order bytes, as the program loads them: on a little-endian host that is MurmurHash3's
 * own block order, so the port is murmur3_32(inner octets 12..19 + l4, proto) there.
 * A full mix matters: the bearers of one SGW differ in the UE address's last octets, which are
 * the high bits of such a word; a multiply-and-xor hash carries those only upwards, and gave 65
 * ports for 256 consecutive UEs where this gives 256 (docs/dataplane.md).
 */
static inline __u32 pgwu_rotl32(__u32 x, int r)
{
	return x << r | x >> (32 - r);
}

static inline __u32 pgwu_murmur3_block(__u32 h, __u32 k)
{
	k *= 0xcc9e2d51U;
	k = pgwu_rotl32(k, 15);
	k *= 0x1b873593U;
	h ^= k;
	h = pgwu_rotl32(h, 13);
	return h * 5 + 0xe6546b64U;
}

/* always inlined: clang left it a BPF-to-BPF call in xdp_sgi6 and xdp_dl_n3v6 (a call and return
 * cost 8-10 ns here, as much as the hash), inlined in xdp_sgi */
static inline __attribute__((always_inline)) __u16 pgwu_sport_of(__u32 saddr, __u32 daddr, __u32 l4,
								 __u8 proto)
{
	__u32 h = proto;

	h = pgwu_murmur3_block(h, saddr);
	h = pgwu_murmur3_block(h, daddr);
	h = pgwu_murmur3_block(h, l4);
	h ^= 12;			/* the length, in octets */
	h ^= h >> 16;
	h *= 0x85ebca6bU;
	h ^= h >> 13;
	h *= 0xc2b2ae35U;
	h ^= h >> 16;
	return 0xc000 | (h & 0x3fff);
}

/* config: ARRAY, one entry, written by pgwu, read by every packet. */
struct pgwu_config {
	__u32 local_addr;		/* this gateway's GTP-U address (outer src/dst); 0 = none */
	__u32 flags;			/* PGWU_CFG_* */
	__u32 ue_pool_addr;		/* SGi packets to addresses outside this prefix are passed */
	__u32 ue_pool_mask;		/* network byte order; 0 = every address is a UE address */
	__u16 egress_vlan[PGWU_SIDE_MAX];	/* VLAN id pushed on frames sent out of a side; 0: none */
	__u8 restart_counter;		/* Recovery IE value in Echo Responses (TS 29.281: 0) */
	__u8 pad[3];
	struct pgwu_nexthop nexthop[PGWU_SIDE_MAX];	/* [side we send out of] */
	__u8 local_addr6[16];		/* this gateway's N6 (SGi) IPv6 address: the source of its
					 * ICMPv6 errors; all zero = none (no ICMPv6 errors) */
	__u8 n3_addr6[16];		/* this gateway's N3 (GTP-U) IPv6 address: G-PDUs over IPv6
					 * to it are taken (xdp_ul_n3v6), downlink ones to an IPv6
					 * peer sent from it (xdp_dl_n3v6); all zero = none */
};

/*
 * fib_cache: a direct-mapped per-CPU cache of resolved next hops: slot pgwu_fib_slot_of(dst, ifindex,
 * src or 0)
 * holds the last lookup that hashed there; it is valid while its key matches and gen == fib_gen[0].
 * An array, not a hash map: its lookup is inlined by the verifier, a hash lookup is a helper call.
 */
#define PGWU_FIB_CACHE_BITS 16

static inline __u32 pgwu_fib_slot_of(__u32 dst, __u32 ifindex, __u32 src)
{
	return ((dst ^ (ifindex * 0x9e3779b1U) ^ (src * 0x85ebca6bU)) * 0x9e3779b1U) >>
	       (32 - PGWU_FIB_CACHE_BITS);
}

struct pgwu_fib_key {
	__u32 dst;
	__u32 ifindex;		/* ingress interface the lookup was made for */
	__u32 src;		/* source address when fib_gen[2] is set (policy rules), else 0 */
	__u32 pad;
};

#define PGWU_FIB_BY_SRC 1	/* fib_gen[2]: key the route cache by source too */

/*
 * Registration slots in fib_gen: the tgid of a live helper process, written by the program it runs
 * on itself (watch_register, reasm_register, with BPF_PROG_TEST_RUN) and cleared by
 * fib_gen_watch_exit when that process exits, however it dies. 0: none.
 */
#define PGWU_REG_WATCH	1	/* `pgwu watch`: the route cache is used only while it is set */
#define PGWU_REG_REASM	3	/* `pgwu reassemble`: outer fragments are passed only while it is set */
#define PGWU_FIB_GEN_SLOTS 4

/*
 * reasm_stats: ARRAY (BPF_F_MMAPABLE) of __u64, one per entry below, written only by the registered
 * `pgwu reassemble` (plain stores through mmap: one writer), read by pgwu stats and metrics. Every
 * datagram it reads is counted in RECEIVED and in exactly one other entry.
 * Keep pgwu_reasm_names[] (pgwu_fmt.c) in step with this list.
 */
enum pgwu_reasm_stat {
	PGWU_RA_RECEIVED = 0,		/* reassembled datagrams read from UDP 2152 */
	PGWU_RA_FORWARDED,		/* G-PDU: inner packet sent to SGi (raw socket) */
	PGWU_RA_DROP_NOT_ACCESS,	/* came in on an interface without xdp_access (or locally) */
	PGWU_RA_DROP_TRUNC_GTP,		/* as the PGWU_R_DROP_* of the same name */
	PGWU_RA_DROP_GTP_VERSION,
	PGWU_RA_DROP_GTP_BAD_LEN,
	PGWU_RA_DROP_NOT_GPDU,		/* a message other than a G-PDU (signalling is not reassembled) */
	PGWU_RA_DROP_GTP_BAD_EXT,
	PGWU_RA_DROP_GTP_EXT_UNSUPPORTED,	/* dropped, no Notification sent */
	PGWU_RA_DROP_UNKNOWN_TEID,	/* dropped, no Error Indication sent */
	PGWU_RA_DROP_QFI_MISMATCH,
	PGWU_RA_DROP_INNER_NOT_IPV4,
	PGWU_RA_DROP_INNER_BAD,
	PGWU_RA_DROP_INNER_CSUM,
	PGWU_RA_DROP_SPOOFED,
	PGWU_RA_DROP_TTL_EXPIRED,	/* dropped, no Time Exceeded sent */
	PGWU_RA_DROP_SEND,		/* the kernel refused to send it (no route, over the SGi MTU) */
	PGWU_RA_MAX,
};

struct pgwu_fib_entry {
	__u64 gen;
	__u32 ifindex;		/* egress */
	__u8 smac[6];
	__u8 dmac[6];
	__u16 max_len;		/* largest IPv4 tot_len the lookup's MTU check passed */
	__u16 pad;
};

struct pgwu_fib_slot {
	struct pgwu_fib_key key;
	struct pgwu_fib_entry e;
};

/*
 * fib6_cache: fib_cache for IPv6 destinations, same rules (gen, ingress ifindex, source when
 * fib_gen[2] is set, max_len: the largest IPv6 tot_len, header included, the MTU check passed).
 * Slot pgwu_fib6_slot_of(dst, ifindex, src or ::).
 */
struct pgwu_fib6_key {
	__u32 dst[4];
	__u32 src[4];		/* source address when fib_gen[2] is set (policy rules), else :: */
	__u32 ifindex;		/* ingress interface the lookup was made for */
	__u32 pad;
};

struct pgwu_fib6_slot {
	struct pgwu_fib6_key key;
	struct pgwu_fib_entry e;
};

static inline __u32 pgwu_fib6_slot_of(const __u32 *dst, __u32 ifindex, const __u32 *src)
{
	__u32 d = dst[0] ^ dst[1] ^ (dst[2] * 0x85ebca6bU) ^ (dst[3] * 0xc2b2ae35U);
	__u32 s = src[0] ^ src[1] ^ src[2] ^ src[3];

	return pgwu_fib_slot_of(d, ifindex, s);
}

/*
 * reply_budget: LRU hash, key __u32 peer address (network order), value __u64: the GCRA
 * "theoretical arrival time" in ns of bpf_ktime_get_ns. A reply to a peer is allowed when
 * now >= tat - PGWU_REPLY_BURST * interval; then tat = max(tat, now) + interval. So each peer gets
 * PGWU_REPLY_BURST replies at once and PGWU_REPLY_RATE a second after that, whatever it sends.
 */

/* peers: LRU hash (a flood of forged responses can't fill it for good), key __u32 peer address (network order): GTP-U path state, written by xdp_access
 * on each Echo Response (rsp_*) and by `pgwu path` when it sends an Echo Request (req_*). */
struct pgwu_peer {
	__u64 rsp_ns;		/* bpf_ktime_get_ns (CLOCK_MONOTONIC) of the last Echo Response; 0: none */
	__u64 req_ns;		/* CLOCK_MONOTONIC of the last Echo Request pgwu path sent; 0: none */
	__u64 responses;	/* Echo Responses received */
	__u32 restarts;		/* times the Recovery restart counter changed */
	__u16 req_seq;		/* sequence number of the last request sent */
	__u16 rsp_seq;		/* sequence number of the last response */
	__u8 restart_counter;	/* Recovery IE of the last response */
	__u8 has_recovery;	/* the last response had a Recovery IE */
	__u8 pad[6];
};

/* sig_rx: LRU hash of the signalling received about a tunnel, written by xdp_access. Key: the
 * message type (GTP_ERROR_IND 26 or GTP_END_MARKER 254) and the tunnel it names. An Error
 * Indication names the TEID we sent to and that peer (its IEs Tunnel Endpoint Identifier Data I
 * and GTP-U Peer Address, TS 29.281 7.3.1): a downlink bearer's (SGW, SGW TEID). An End Marker
 * names our local TEID in its header (7.3.2), addr = its sender. A report for `pgwu signalling`,
 * bounded, not state the data path depends on. */
struct pgwu_sig_key {
	__u32 teid;		/* network order */
	__u32 addr;		/* network order */
	__u8 type;
	__u8 pad[3];
};

struct pgwu_sig_val {
	__u64 packets;
	__u64 last_ns;		/* bpf_ktime_get_ns (CLOCK_MONOTONIC) of the last one */
	__u32 from;		/* outer source of the last one */
	__u32 pad;
};

/* peers6 and sig_rx6 (include/n3v6.h): the same for the peers over IPv6 (N3 over IPv6), written by
 * xdp_ul_n3v6 and `pgwu path`. peers6: key the peer's address (16 octets), value struct pgwu_peer.
 * sig_rx6: an Error Indication names the TEID we sent to and the address of its GTP-U Peer
 * Address IE (16 octets; else its sender); an End Marker our local TEID, addr its sender. */
struct pgwu_sig6_key {
	__u32 teid;		/* network order */
	__u8 type;
	__u8 pad[3];
	__u8 addr[16];
};

struct pgwu_sig6_val {
	__u64 packets;
	__u64 last_ns;		/* bpf_ktime_get_ns (CLOCK_MONOTONIC) of the last one */
	__u8 from[16];		/* outer source of the last one */
};

/*
 * qos: HASH, key __u32 local TEID (network order; the uplink half's key, the downlink half's
 * local_teid), value struct pgwu_qos. Written by `pgwu pfcp` (from the QERs and URRs of the
 * session: before the bearer's halves get PGWU_B_QOS, removed after they are gone); read and
 * updated under its lock by both XDP programs for a bearer with PGWU_B_QOS.
 *
 * The policer is a token bucket per direction, shared by every CPU (one value, bpf_spin_lock).
 * Rate: the QER's MBR (TS 29.244 8.2.8, kbit/s, 1 kbit = 1000 bit) over the bytes of the inner IP
 * packets (the T-PDUs: the G-PDU's payload uplink, the IP packet before encapsulation downlink;
 * what the usage counters count; TS 23.401 4.7.3: bit rates exclude the GTP-U/UDP/IP tunnel
 * overhead). Credit is kept in micro-bits (bits x 10^6), so that time adds elapsed_ns x kbps
 * exactly, with no division: a packet of L octets costs L x 8 x 10^6 and passes when the credit
 * covers it (a dropped packet costs nothing). The bucket starts full; depth is set by the agent
 * (--mbr-burst-ms of the rate, at least PGWU_QOS_MIN_DEPTH octets), so over any interval T
 * a direction delivers at most depth + MBR x T.
 */
#define PGWU_QOS_UL_CLOSED	(1U << 0)	/* gate closed uplink: every G-PDU dropped */
#define PGWU_QOS_DL_CLOSED	(1U << 1)
#define PGWU_QOS_QUOTA		(1U << 2)	/* quota_left is enforced */
#define PGWU_QOS_QUOTA_UL	(1U << 3)	/* ... counting uplink octets */
#define PGWU_QOS_QUOTA_DL	(1U << 4)	/* ... counting downlink octets (both: total) */
#define PGWU_QOS_EXHAUSTED	(1U << 5)	/* set by the data path when a packet did not fit */
#define PGWU_QOS_VOLTH		(1U << 6)	/* th: a URR's volume threshold is measured here */
#define PGWU_QOS_VOLTH_UL	(1U << 7)	/* ... counting uplink packets */
#define PGWU_QOS_VOLTH_DL	(1U << 8)	/* ... counting downlink packets (both: total) */
#define PGWU_QOS_VOLTH_CROSSED	(1U << 9)	/* set by the data path: th.at holds a crossing */
#define PGWU_QOS_MICRO		1000000ULL	/* credit units per bit */
#define PGWU_QOS_MIN_DEPTH	3000U		/* octets: two full-size packets always fit */

struct pgwu_police {
	__u64 kbps;		/* MBR, 0: not policed */
	__u64 depth;		/* bucket size, micro-bits */
	__u64 fill_ns;		/* depth / kbps: time an empty bucket takes to fill (caps the
				 * elapsed time, so elapsed_ns x kbps never overflows) */
	__u64 credit;		/* micro-bits; written by the data path */
	__u64 last_ns;		/* bpf_ktime_get_ns of the last refill, 0: bucket full */
};

/* A full bucket for kbps (the MBR, > 0) holding burst_ms of it, at least PGWU_QOS_MIN_DEPTH octets:
 * kbps x 1000 / 8 octets a second, so kbps x burst_ms / 8 octets (the agent's --mbr-burst-ms, the
 * 100 ms of `pgwu session add --filter ... mbr`). The writers' one formula; not used in BPF. */
static inline void pgwu_police_init(struct pgwu_police *p, __u64 kbps, __u64 burst_ms)
{
	__u64 bytes = kbps * burst_ms / 8;

	if (bytes < PGWU_QOS_MIN_DEPTH)
		bytes = PGWU_QOS_MIN_DEPTH;
	p->kbps = kbps;
	p->depth = bytes * 8 * PGWU_QOS_MICRO;
	p->fill_ns = (p->depth + kbps - 1) / kbps;
	p->credit = p->depth;
	p->last_ns = 0;
}

/*
 * The volume threshold of one URR (TS 29.244 5.2.2.2.1, 8.2.13; the session's first URR with
 * VOLTH and a Volume Threshold, PGWU_QOS_VOLTH), measured where the bearer's usage counters are
 * counted, so on the same packets: after its counters, under the entry's lock, each forwarded
 * packet of a direction the URR counts adds to now[]; the packet that brings the volume (total,
 * UL or DL as vol_flags says) to its limit copies now[] to at[] (the usage at the crossing, that
 * packet included), empties now[] (the next threshold counts from there) and sets
 * PGWU_QOS_VOLTH_CROSSED. While it is set no other crossing is looked for: the agent takes at[]
 * (qos_ctl, PGWU_QOS_CTL_TAKE_*) for its VOLTH report, which clears it. Any other report of the
 * URR takes now[] too (PGWU_QOS_CTL_TAKE_ALL): the measurement restarts at every report.
 */
struct pgwu_volth {
	__u64 limit[3];		/* octets: total, UL, DL, each used when its vol_flags bit is set */
	__u64 now[4];		/* UL packets, UL octets, DL packets, DL octets since the start */
	__u64 at[4];		/* the same at the crossing (PGWU_QOS_VOLTH_CROSSED) */
	__u32 urr_id;		/* the URR measured: a SET keeps now/at only for the same one */
	__u32 vol_flags;	/* TOVOL 1, ULVOL 2, DLVOL 4 (8.2.13 octet 5) */
};

struct pgwu_qos {
	struct bpf_spin_lock lock;	/* held by the data path while it updates the policers, the
					 * quota and th; user space writes with BPF_F_LOCK, or with
					 * qos_ctl (below) to keep what the data path counts */
	__u32 flags;			/* PGWU_QOS_* */
	__u64 quota_left;		/* octets still allowed (PGWU_QOS_QUOTA) */
	struct pgwu_police pol[2];	/* [PGWU_PFCP_UPLINK], [PGWU_PFCP_DOWNLINK] */
	struct pgwu_volth th;		/* PGWU_QOS_VOLTH */
};

/*
 * qos_ctl: an XDP program `pgwu pfcp` runs with BPF_PROG_TEST_RUN on a frame that holds this
 * struct (never attached): it changes a qos entry under the entry's lock, in one step, so nothing
 * the data path counts in between is lost (a lookup then an update would overwrite it).
 *   SET            the entry's rules become q's: flags, quota, policers, th's limit and IDs.
 *                  Kept from the entry: each policer's credit and clock when its rate and depth
 *                  are the same; the quota left (and EXHAUSTED) with PGWU_QOS_KEEP_QUOTA when
 *                  both have one; th's now/at (and CROSSED) when both measure the same URR ID,
 *                  else th.now starts from q's (the agent's usage of that URR since its last
 *                  report).
 *   TAKE_CROSSING  out: q.flags and q.th as they were; CROSSED and at cleared (the VOLTH report
 *                  takes at[]; now[] counts on: the next measurement, from the crossing). When
 *                  now[] has reached the limit already (a second crossing while the first was
 *                  not taken: the data path looks for one crossing at a time), it becomes at[]
 *                  with CROSSED, at once: reported late, by what came after it, but reported.
 *   TAKE_ALL       the same, and now[] emptied (the report takes at[] if crossed, and now[]).
 * Out: after, the entry's flags after the op. The program returns XDP_PASS when done, XDP_DROP
 * when the TEID has no entry, XDP_ABORTED on a frame too short or an unknown op.
 */
#define PGWU_QOS_CTL_SET		1
#define PGWU_QOS_CTL_TAKE_CROSSING	2
#define PGWU_QOS_CTL_TAKE_ALL		3
#define PGWU_QOS_CTL_URR		(1U << 8)	/* op's flag: sdf_urr's entry {teid, urr_id},
							 * not qos's */
#define PGWU_QOS_KEEP_QUOTA		(1U << 0)

struct pgwu_qos_ctl {
	__u32 teid;		/* the entry's key, network order */
	__u32 op;		/* PGWU_QOS_CTL_*, with PGWU_QOS_CTL_URR: sdf_urr's entry */
	__u32 keep;		/* SET: PGWU_QOS_KEEP_* */
	__u32 after;		/* out: the entry's flags after the op */
	__u32 urr_id;		/* PGWU_QOS_CTL_URR: the rest of sdf_urr's key */
	__u32 pad;
	struct pgwu_qos q;	/* SET: in (its lock ignored); TAKE_*: out */
};

/*
 * PFCP rules of `pgwu pfcp`'s sessions as the CP gave them (TS 29.244 7.5.2): the model the agent
 * keeps and publishes, the one the data path's enforcement reads when it comes (MBR policing,
 * gate, usage reporting). Published in two pinned hash maps written by the agent only and read by
 * `pgwu session` and `pgwu metrics`:
 *   pfcp_sessions  key __u32 session index (the UP SEID's low 32 bits - 1), value pgwu_pfcp_sess
 *   pfcp_rules     key pgwu_pfcp_rule_key, value pgwu_pfcp_rule (a QER or a URR of a session)
 * Byte order: addresses and TEIDs network order, everything else host order.
 */
#define PGWU_PFCP_MAX_RULES 8	/* QERs, URRs per session (pfcp_msg.h PFCP_MAX_RULES) */
#define PGWU_PFCP_MAX_REFS 4	/* QER IDs, URR IDs per PDR (pfcp_msg.h PFCP_MAX_IDS) */

/* A QER (7.5.2.5): gate (8.2.7: bits 4-3 uplink, 2-1 downlink, 0 open, 1 closed), MBR and GBR
 * in kbit/s (8.2.8, 8.2.9), the QFI marked in downlink G-PDUs (8.2.89). */
#define PGWU_QER_MBR	(1U << 0)
#define PGWU_QER_GBR	(1U << 1)
#define PGWU_QER_QFI	(1U << 2)

struct pgwu_qer {
	__u32 id;
	__u8 gate;
	__u8 qfi;
	__u16 flags;		/* PGWU_QER_*: which values were given */
	__u64 mbr_ul, mbr_dl;
	__u64 gbr_ul, gbr_dl;
};

/* A URR (7.5.2.4): measurement method (8.2.40: DURAT 1, VOLUM 2, EVENT 4), reporting triggers
 * (8.2.19: octet 5 in bits 0-7, octet 6 in 8-15, octet 7 in 16-23), and the values reports are
 * made against; flags says which were given (PGWU_URR_*). Volumes: [0] total, [1] uplink,
 * [2] downlink, in octets, each present when its bit (1, 2, 4) is in the *_flags. */
#define PGWU_URR_PERIOD		(1U << 0)
#define PGWU_URR_VOL_THRESH	(1U << 1)
#define PGWU_URR_VOL_QUOTA	(1U << 2)
#define PGWU_URR_TIME_THRESH	(1U << 3)
#define PGWU_URR_TIME_QUOTA	(1U << 4)
#define PGWU_URR_QHT		(1U << 5)
#define PGWU_URR_MEAS_INFO	(1U << 6)

struct pgwu_urr {
	__u32 id;
	__u32 flags;
	__u32 triggers;
	__u8 method;
	__u8 vol_thresh_flags, vol_quota_flags;
	__u8 meas_info;		/* Measurement Information (8.2.68) octet 5 */
	__u32 period;		/* s */
	__u32 time_threshold, time_quota, quota_holding_time;	/* s */
	__u32 ur_seqn;		/* the next report's UR-SEQN */
	__u64 vol_thresh[3], vol_quota[3];
};

/* A PDR's links (7.5.2.2): its FAR, the QERs it applies and the URRs it counts in, by ID. */
#define PGWU_PFCP_UPLINK 0
#define PGWU_PFCP_DOWNLINK 1

struct pgwu_pfcp_pdr {
	__u16 id;
	__u8 n_qer, n_urr;
	__u32 far_id;
	__u32 qer[PGWU_PFCP_MAX_REFS];
	__u32 urr[PGWU_PFCP_MAX_REFS];
};

#define PGWU_PFCP_S_DL_ON	(1U << 0)	/* the downlink FAR forwards: its half is installed */
#define PGWU_PFCP_S_HAS_SGW	(1U << 1)	/* a usable Outer Header Creation was received */

struct pgwu_pfcp_sess {
	__u64 up_seid, cp_seid;
	__u32 cp_addr;		/* the CP F-SEID's IPv4 address */
	__u32 peer_addr;	/* the owning association's address (where it sends from) */
	__u16 peer_port;
	__u16 assoc;		/* the association's slot in pfcp_peers */
	__u32 teid, ue;		/* the bearer */
	__u32 sgw, sgw_teid;	/* the downlink FAR's outer header (when S_HAS_SGW) */
	__u32 owner;		/* the bearer halves' owner tag (PGWU_B_OWNER_SHIFT) */
	__u32 flags;		/* PGWU_PFCP_S_* */
	__u8 dl_apply;		/* the downlink FAR's Apply Action (8.2.26 octet 5) */
	__u8 n_qer, n_urr;
	__u8 pad;
	__u32 qer_ids[PGWU_PFCP_MAX_RULES], urr_ids[PGWU_PFCP_MAX_RULES];
	struct pgwu_pfcp_pdr pdr[2];	/* PGWU_PFCP_UPLINK, PGWU_PFCP_DOWNLINK */
};

#define PGWU_PFCP_RULE_QER 1
#define PGWU_PFCP_RULE_URR 2

struct pgwu_pfcp_rule_key {
	__u32 sess;		/* session index, as pfcp_sessions */
	__u32 kind;		/* PGWU_PFCP_RULE_* */
	__u32 id;		/* QER ID or URR ID */
};

struct pgwu_pfcp_rule {
	__u32 kind;
	__u32 pad;
	union {
		struct pgwu_qer qer;
		struct pgwu_urr urr;
	};
};

#endif /* PGWU_H */
