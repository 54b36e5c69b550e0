/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * pfcp_msg.h: a bounded PFCP (3GPP TS 29.244) decoder and encoder, the part of `pgwu pfcp` that
 * touches untrusted bytes. No I/O, no globals: pgwu_pfcp.c and fuzz/pfcp_fuzz.c use the same code.
 *
 * Contract of the decoder: every length is checked against what remains of the message and of the
 * parent IE before a byte is read; grouped IEs nest at most PFCP_MAX_DEPTH deep; at most
 * PFCP_MAX_RULES rules of a kind are kept per message. pfcp_decode() returns
 *   0            the header is valid; msg->cause says what to answer: PFCP_CAUSE_ACCEPTED when
 *                every mandatory IE is present and well formed, else the rejection cause and, in
 *                msg->offending_ie, the IE type to name in the Offending IE.
 *   -EBADMSG     the header itself is unusable (too short, length past the datagram, S flag wrong
 *                for the message type): silently discard (TS 29.244 7.6.3).
 *   -EPROTONOSUPPORT  version != 1: answer Version Not Supported (7.6.2).
 *   -ENOMSG      a message type this decoder does not handle: silently discard (7.6.4).
 * Byte order: TEIDs and IPv4 addresses in the structs are network order (as in the bearer maps);
 * SEIDs, sequence numbers, IDs and counters host order.
 */
#ifndef PFCP_MSG_H
#define PFCP_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <linux/types.h>

#define PFCP_PORT 8805
#define PFCP_VERSION 1
#ifndef PFCP_MAX_DEPTH
#define PFCP_MAX_DEPTH 4	/* Create FAR > Forwarding Parameters > IE: 3 levels is the deepest used */
#endif
#ifndef PFCP_MAX_RULES
#define PFCP_MAX_RULES 16	/* PDRs, FARs, URRs, QERs kept per message; one bearer needs 2/2/1/1,
				 * a session with SDF PDRs (the two defaults and 4 filtered PDRs each
				 * way, a FAR each) 10/10/5/5 */
#endif
#define PFCP_MAX_UPD_PDR 8	/* Update PDRs kept per message (more: 75) */
#define PFCP_MAX_IDS 4		/* URR IDs / QER IDs kept per PDR, SDF host filters per PDI */
#define PFCP_FQDN_MAX 255
#define PFCP_MAX_SDF 4		/* SDF Filters kept per PDI (more: the PDR is refused, 73) */
#define PFCP_FD_MAX 191		/* Flow Description octets kept (longer: the PDR is refused, 73) */

/* Message types (TS 29.244 7.3) */
enum pfcp_msg_type {
	PFCP_HEARTBEAT_REQ = 1,
	PFCP_HEARTBEAT_RESP = 2,
	PFCP_ASSOC_SETUP_REQ = 5,
	PFCP_ASSOC_SETUP_RESP = 6,
	PFCP_ASSOC_UPDATE_REQ = 7,
	PFCP_ASSOC_UPDATE_RESP = 8,
	PFCP_ASSOC_RELEASE_REQ = 9,
	PFCP_ASSOC_RELEASE_RESP = 10,
	PFCP_VERSION_NOT_SUPPORTED = 11,
	PFCP_SESS_EST_REQ = 50,
	PFCP_SESS_EST_RESP = 51,
	PFCP_SESS_MOD_REQ = 52,
	PFCP_SESS_MOD_RESP = 53,
	PFCP_SESS_DEL_REQ = 54,
	PFCP_SESS_DEL_RESP = 55,
	PFCP_SESS_REPORT_REQ = 56,
	PFCP_SESS_REPORT_RESP = 57,
};

/* IE types (TS 29.244 8.1.2), those this code reads or writes */
enum pfcp_ie_type {
	PFCP_IE_CREATE_PDR = 1,
	PFCP_IE_PDI = 2,
	PFCP_IE_CREATE_FAR = 3,
	PFCP_IE_FORWARDING_PARAMS = 4,
	PFCP_IE_CREATE_URR = 6,
	PFCP_IE_CREATE_QER = 7,
	PFCP_IE_CREATED_PDR = 8,
	PFCP_IE_UPDATE_PDR = 9,
	PFCP_IE_UPDATE_FAR = 10,
	PFCP_IE_UPDATE_FORWARDING_PARAMS = 11,
	PFCP_IE_UPDATE_URR = 13,
	PFCP_IE_UPDATE_QER = 14,
	PFCP_IE_REMOVE_PDR = 15,
	PFCP_IE_REMOVE_FAR = 16,
	PFCP_IE_REMOVE_URR = 17,
	PFCP_IE_REMOVE_QER = 18,
	PFCP_IE_CAUSE = 19,
	PFCP_IE_SOURCE_INTERFACE = 20,
	PFCP_IE_FTEID = 21,
	PFCP_IE_SDF_FILTER = 23,
	PFCP_IE_APPLICATION_ID = 24,
	PFCP_IE_GATE_STATUS = 25,
	PFCP_IE_PFCPSMREQ_FLAGS = 49,
	PFCP_IE_MBR = 26,
	PFCP_IE_GBR = 27,
	PFCP_IE_PRECEDENCE = 29,
	PFCP_IE_VOLUME_THRESHOLD = 31,
	PFCP_IE_TIME_THRESHOLD = 32,
	PFCP_IE_REPORTING_TRIGGERS = 37,
	PFCP_IE_REPORT_TYPE = 39,
	PFCP_IE_OFFENDING_IE = 40,
	PFCP_IE_DESTINATION_INTERFACE = 42,
	PFCP_IE_UP_FUNCTION_FEATURES = 43,
	PFCP_IE_APPLY_ACTION = 44,
	PFCP_IE_PDR_ID = 56,
	PFCP_IE_FSEID = 57,
	PFCP_IE_NODE_ID = 60,
	PFCP_IE_MEASUREMENT_METHOD = 62,
	PFCP_IE_USAGE_REPORT_TRIGGER = 63,
	PFCP_IE_MEASUREMENT_PERIOD = 64,
	PFCP_IE_VOLUME_MEASUREMENT = 66,
	PFCP_IE_DURATION_MEASUREMENT = 67,
	PFCP_IE_QUOTA_HOLDING_TIME = 71,
	PFCP_IE_QUERY_URR = 77,
	PFCP_IE_VOLUME_QUOTA = 73,
	PFCP_IE_TIME_QUOTA = 74,
	PFCP_IE_START_TIME = 75,
	PFCP_IE_END_TIME = 76,
	PFCP_IE_USAGE_REPORT_SMR = 78,
	PFCP_IE_USAGE_REPORT_SDR = 79,
	PFCP_IE_USAGE_REPORT_SRR = 80,
	PFCP_IE_URR_ID = 81,
	PFCP_IE_OUTER_HEADER_CREATION = 84,
	PFCP_IE_CREATE_BAR = 85,
	PFCP_IE_UE_IP_ADDRESS = 93,
	PFCP_IE_MEASUREMENT_INFORMATION = 100,
	PFCP_IE_OUTER_HEADER_REMOVAL = 95,
	PFCP_IE_RECOVERY_TIME_STAMP = 96,
	PFCP_IE_UR_SEQN = 104,
	PFCP_IE_FAR_ID = 108,
	PFCP_IE_QER_ID = 109,
	PFCP_IE_FAILED_RULE_ID = 114,
	PFCP_IE_QFI = 124,
	PFCP_IE_ETHERNET_PACKET_FILTER = 132,
};

/* Cause values (TS 29.244 8.2.1) */
enum pfcp_cause {
	PFCP_CAUSE_ACCEPTED = 1,
	PFCP_CAUSE_REJECTED = 64,
	PFCP_CAUSE_SESSION_NOT_FOUND = 65,
	PFCP_CAUSE_MANDATORY_IE_MISSING = 66,
	PFCP_CAUSE_CONDITIONAL_IE_MISSING = 67,
	PFCP_CAUSE_INVALID_LENGTH = 68,
	PFCP_CAUSE_MANDATORY_IE_INCORRECT = 69,
	PFCP_CAUSE_NO_ASSOCIATION = 72,
	PFCP_CAUSE_RULE_FAILURE = 73,
	PFCP_CAUSE_NO_RESOURCES = 75,
	PFCP_CAUSE_SERVICE_NOT_SUPPORTED = 76,
	PFCP_CAUSE_SYSTEM_FAILURE = 77,
	PFCP_CAUSE_NO_DYN_ADDR = 79,	/* all dynamic addresses are occupied (Rel-16) */
};

/* Interface values (Source/Destination Interface, 8.2.2 / 8.2.24) */
enum { PFCP_IF_ACCESS = 0, PFCP_IF_CORE = 1, PFCP_IF_SGI_LAN = 2, PFCP_IF_CP = 3 };

/* Apply Action (8.2.26), octet 5 */
#define PFCP_AA_DROP 0x01
#define PFCP_AA_FORW 0x02
#define PFCP_AA_BUFF 0x04
#define PFCP_AA_NOCP 0x08
#define PFCP_AA_DUPL 0x10

/* Outer Header Creation description (8.2.56), octets 5-6 as a big-endian __u16 */
#define PFCP_OHC_GTPU_UDP_IPV4 0x0100
#define PFCP_OHC_GTPU_UDP_IPV6 0x0200
#define PFCP_OHC_UDP_IPV4 0x0400
#define PFCP_OHC_UDP_IPV6 0x0800
#define PFCP_OHC_IPV4 0x1000
#define PFCP_OHC_IPV6 0x2000
#define PFCP_OHC_CTAG 0x4000
#define PFCP_OHC_STAG 0x8000

/* Outer Header Removal description (8.2.64) */
#define PFCP_OHR_GTPU_UDP_IPV4 0
#define PFCP_OHR_GTPU_UDP_IPV6 1
#define PFCP_OHR_GTPU_UDP_IP 6

/* Node ID type (8.2.38) */
enum { PFCP_NODE_IPV4 = 0, PFCP_NODE_IPV6 = 1, PFCP_NODE_FQDN = 2 };

/* Measurement Method (8.2.40) */
#define PFCP_MM_DURAT 0x01
#define PFCP_MM_VOLUM 0x02
#define PFCP_MM_EVENT 0x04

/* UP Function Features (8.2.25) octet 5 */
#define PFCP_UPFF_FTUP 0x10
#define PFCP_UPFF3_UEIP 0x04	/* octet 7 bit 3: the UP allocates UE addresses (CHV4/CHV6) */

/* Failed Rule ID types (8.2.80) */
enum { PFCP_RULE_PDR = 0, PFCP_RULE_FAR = 1, PFCP_RULE_QER = 2, PFCP_RULE_URR = 3 };

struct pfcp_hdr {
	__u8 version;
	__u8 flags;		/* octet 1: bit 1 S, bit 2 MP, bit 3 FO */
	__u8 type;
	bool has_seid;		/* S flag */
	__u16 length;		/* as in the header: the message minus its first 4 octets */
	__u64 seid;
	__u32 seq;		/* 24 bits */
	size_t hdr_len;		/* 8 or 16 */
	size_t msg_len;		/* 4 + length: bytes past it in the datagram are ignored */
};

/* One IE as found in the message: v points into the message, len bytes are readable there. */
struct pfcp_ie {
	__u16 type;
	__u16 len;		/* value length (after the Enterprise ID of a vendor IE) */
	__u16 enterprise;	/* vendor IEs (type >= 32768) only */
	const __u8 *v;
};

/* A bounded cursor over a run of IEs: the message body or a grouped IE's value. */
struct pfcp_cur {
	const __u8 *p, *end;
	int depth;		/* 0: the message body */
};

void pfcp_cur_init(struct pfcp_cur *c, const __u8 *p, size_t len);
/* 1: *ie is the next IE; 0: the run ended exactly; -EBADMSG: an IE header or value does not fit
 * in the run (ie->type holds the type when its two octets were readable, else 0). */
int pfcp_ie_next(struct pfcp_cur *c, struct pfcp_ie *ie);
/* Descend into a grouped IE: -ELOOP past PFCP_MAX_DEPTH. */
int pfcp_ie_enter(const struct pfcp_cur *parent, const struct pfcp_ie *ie, struct pfcp_cur *child);

int pfcp_hdr_parse(const __u8 *b, size_t n, struct pfcp_hdr *h);

/* ---- decoded IEs ---- */

struct pfcp_node_id {
	__u8 type;		/* PFCP_NODE_* */
	__u32 ipv4;
	__u8 ipv6[16];
	char fqdn[PFCP_FQDN_MAX + 1];	/* dotted text, from the DNS labels of the IE */
};

struct pfcp_fseid {
	__u64 seid;
	bool v4, v6;
	__u32 ipv4;
	__u8 ipv6[16];
};

struct pfcp_fteid {
	bool v4, v6, ch, chid;
	__u32 teid;		/* network order; 0 when ch */
	__u32 ipv4;
	__u8 ipv6[16];		/* v6 and not ch */
	__u8 choose_id;
};

/* UE IP Address (8.2.62): octet 5 flags, [IPv4], [IPv6], [IPv6 Prefix Delegation Bits if
 * IPv6D], [IPv6 Prefix Length if IPv6PL] */
struct pfcp_ue_ip {
	bool v4, v6, sd, chv4, chv6;	/* CHV4/CHV6: the UP is asked to allocate it */
	bool ipv6d, ipv6pl;	/* the two optional octets are there */
	__u8 pd_bits;		/* IPv6D: bits of prefix delegation, relative to /64 (/60: 4) */
	__u8 plen;		/* IPv6PL: the IPv6 prefix length */
	__u32 ipv4;
	__u8 ipv6[16];
};

struct pfcp_ohc {
	__u16 desc;		/* PFCP_OHC_* */
	__u32 teid;		/* network order */
	__u32 ipv4;
	__u8 ipv6[16];		/* GTP-U/UDP/IPv6, UDP/IPv6, IPv6 */
};

/*
 * SDF Filter (8.2.5), as far as this UP needs it: whether the filter lets the PDR match all of the
 * bearer's traffic. Only a Flow Description (TS 29.212 5.4.2, IPFilterRule of RFC 6733) of the
 * form "permit out|in ip from E to E" qualifies, each end E being "any", "assigned" or 0.0.0.0/0
 * (PFCP_SDF_ALL), or one end a single IPv4 host A or A/32 (PFCP_SDF_HOST: all of A's traffic);
 * anything else (ports, a protocol, options, ToS, SPI, flow label, a filter named by its ID only)
 * is PFCP_SDF_NARROW.
 */
enum pfcp_sdf_kind { PFCP_SDF_ALL, PFCP_SDF_HOST, PFCP_SDF_NARROW };

/* classify a Flow Description's text (not NUL-terminated); *host: the host of PFCP_SDF_HOST */
enum pfcp_sdf_kind pfcp_flow_desc_kind(const __u8 *s, size_t n, __u32 *host);

/* One SDF Filter (8.2.5) as received: octet 5's flags, then each field it says is there. */
#define PFCP_SDF_FD 0x01	/* Flow Description */
#define PFCP_SDF_TTC 0x02	/* ToS / Traffic Class and its mask */
#define PFCP_SDF_SPI 0x04	/* Security Parameter Index */
#define PFCP_SDF_FL 0x08	/* Flow Label */
#define PFCP_SDF_BID 0x10	/* SDF Filter ID */

struct pfcp_sdf {
	__u8 flags;		/* PFCP_SDF_* */
	__u8 tos, tos_mask;
	bool fd_long;		/* the Flow Description is over PFCP_FD_MAX octets: not kept */
	__u32 spi;		/* host order */
	__u32 fl;		/* 20 bits */
	__u32 id;
	char fd[PFCP_FD_MAX + 1];	/* NUL-terminated (a NUL inside: fd_long) */
};

struct pfcp_pdr {
	__u16 id;
	__u32 precedence;
	__u8 src_if;
	bool has_precedence, has_fteid, has_ue_ip, has_ohr, has_far_id;
	struct pfcp_fteid fteid;
	struct pfcp_ue_ip ue_ip;
	__u8 ohr;
	__u8 qfi;		/* the PDI's first QFI IE (8.2.89), when n_qfi */
	int n_qfi;		/* QFI IEs in the PDI (a list of QFIs to match: 7.5.2.2) */
	int n_fteid;		/* F-TEID IEs in the PDI (one is allowed) */
	/* SDF Filters of the PDI (several: the PDR matches what any of them matches) */
	int n_sdf;
	bool sdf_all;		/* one of them is PFCP_SDF_ALL */
	int n_sdf_host;		/* PFCP_SDF_HOST ones, their hosts (network order) */
	__u32 sdf_host[PFCP_MAX_IDS];
	struct pfcp_sdf sdf[PFCP_MAX_SDF];	/* the first PFCP_MAX_SDF of them, as received */
	__u16 narrow_ie;	/* a PDI IE that narrows the match in a way no SDF Filter can
				 * widen again (Application ID, Ethernet Packet Filter): the first
				 * one's type, 0 none */
	__u32 far_id;
	__u32 urr_id[PFCP_MAX_IDS], qer_id[PFCP_MAX_IDS];
	int n_urr, n_qer;
};

/* PFCPSMReq-Flags (8.2.31) octet 5: in Update Forwarding Parameters (SNDEM), at the top of a
 * Session Modification Request (QAURR) */
#define PFCP_SMREQ_DROBU 0x01
#define PFCP_SMREQ_SNDEM 0x02	/* send End Marker packets on the old tunnel */
#define PFCP_SMREQ_QAURR 0x04	/* query all URRs */

struct pfcp_far {
	__u32 id;
	__u8 apply;		/* PFCP_AA_*; 0 when absent (Update FAR) */
	__u8 smreq;		/* Update Forwarding Parameters' PFCPSMReq-Flags, 0 when absent */
	bool has_apply, has_fwd, has_dst_if, has_ohc;
	__u8 dst_if;
	struct pfcp_ohc ohc;
};

/* URR parameters (Create URR, Update URR): present with a value, or (Update URR) present with
 * a null length, which removes the parameter (TS 29.244 5.6.3). */
#define PFCP_URR_PERIOD		(1U << 0)	/* Measurement Period (8.2.42) */
#define PFCP_URR_VOL_THRESH	(1U << 1)	/* Volume Threshold (8.2.13) */
#define PFCP_URR_VOL_QUOTA	(1U << 2)	/* Volume Quota (8.2.50) */
#define PFCP_URR_TIME_THRESH	(1U << 3)	/* Time Threshold (8.2.14) */
#define PFCP_URR_TIME_QUOTA	(1U << 4)	/* Time Quota (8.2.51) */
#define PFCP_URR_QHT		(1U << 5)	/* Quota Holding Time (8.2.48) */
#define PFCP_URR_MEAS_INFO	(1U << 6)	/* Measurement Information (8.2.68) */
#define PFCP_URR_METHOD		(1U << 7)	/* Measurement Method (8.2.40) */
#define PFCP_URR_TRIGGERS	(1U << 8)	/* Reporting Triggers (8.2.19) */

/* Volume Threshold / Volume Quota flags (octet 5) and the order of their values */
#define PFCP_VOL_TOVOL 0x01
#define PFCP_VOL_ULVOL 0x02
#define PFCP_VOL_DLVOL 0x04
enum { PFCP_VOL_TOTAL, PFCP_VOL_UL, PFCP_VOL_DL };

struct pfcp_urr {
	__u32 id;
	__u32 present;		/* PFCP_URR_*: given with a value */
	__u32 cleared;		/* PFCP_URR_*: given with a null length (Update URR only) */
	__u8 method;		/* PFCP_MM_* */
	__u32 triggers;		/* Reporting Triggers: octet 5 in bits 0-7, 6 in 8-15, 7 in 16-23 */
	__u32 period, time_threshold, time_quota, quota_holding_time;	/* seconds */
	__u8 vol_thresh_flags, vol_quota_flags;	/* PFCP_VOL_*: which of the values below */
	__u8 meas_info;		/* Measurement Information octet 5 */
	__u64 vol_thresh[3], vol_quota[3];	/* octets, PFCP_VOL_TOTAL/UL/DL */
};

struct pfcp_qer {
	__u32 id;
	bool has_gate, has_mbr, has_gbr, has_qfi;
	__u8 gate;		/* bits 4-3 UL, 2-1 DL: 0 open, 1 closed */
	__u8 qfi;		/* the QFI the UP inserts in downlink G-PDUs (8.2.89), 0..63 */
	__u64 mbr_ul, mbr_dl;	/* kbit/s */
	__u64 gbr_ul, gbr_dl;	/* kbit/s */
};

/* Which top-level IEs a message had (pfcp_msg.present) */
#define PFCP_P_NODE_ID	(1U << 0)
#define PFCP_P_FSEID	(1U << 1)
#define PFCP_P_RTS	(1U << 2)
#define PFCP_P_CAUSE	(1U << 3)
#define PFCP_P_UPFF	(1U << 4)

struct pfcp_msg {
	struct pfcp_hdr h;
	__u8 cause;		/* what to answer: PFCP_CAUSE_ACCEPTED or a rejection */
	__u16 offending_ie;	/* with a rejection: the IE to name, 0 none */
	__u32 present;		/* PFCP_P_* */
	int unknown_ies;	/* IEs skipped (unknown or not used here), at any depth */
	struct pfcp_node_id node_id;
	struct pfcp_fseid fseid;
	__u32 recovery_ts;	/* seconds since 1900 */
	__u8 resp_cause;	/* the Cause IE of a response */
	struct pfcp_pdr create_pdr[PFCP_MAX_RULES];
	struct pfcp_far create_far[PFCP_MAX_RULES];
	struct pfcp_urr create_urr[PFCP_MAX_RULES];
	struct pfcp_qer create_qer[PFCP_MAX_RULES];
	struct pfcp_far update_far[PFCP_MAX_RULES];
	struct pfcp_qer update_qer[PFCP_MAX_RULES];
	struct pfcp_urr update_urr[PFCP_MAX_RULES];
	int n_create_pdr, n_create_far, n_create_urr, n_create_qer, n_update_far, n_update_qer,
	    n_update_urr;
	__u32 query_urr[PFCP_MAX_RULES];	/* Query URR (7.5.4.10): the URR IDs asked for */
	int n_query_urr;
	/* Remove PDR / FAR / URR / QER (7.5.4.6-9): the IDs named (a PDR ID in 16 bits) */
	__u32 remove_pdr[PFCP_MAX_RULES], remove_far[PFCP_MAX_RULES];
	__u32 remove_urr[PFCP_MAX_RULES], remove_qer[PFCP_MAX_RULES];
	int n_remove_pdr, n_remove_far, n_remove_urr, n_remove_qer;
	__u8 smreq;		/* the top-level PFCPSMReq-Flags (QAURR), 0 when absent */
	int n_fseid;		/* F-SEID IEs at the top level (one is allowed) */
	/* Update PDR (7.5.4.2): the IEs given (has_precedence, has_far_id, has_ohr; a PDI when
	 * upd_pdi; URR / QER IDs when n_urr / n_qer: the whole new list) */
	struct pfcp_pdr update_pdr[PFCP_MAX_UPD_PDR];
	bool upd_pdi[PFCP_MAX_UPD_PDR];
	int n_update_pdr;
	/* rule operations this agent does not implement: counted, so it can refuse them */
	int n_other_rules;
	__u16 other_rule_ie;	/* type of the first of them */
};

int pfcp_decode(const __u8 *buf, size_t n, struct pfcp_msg *m);

/* ---- encoder: a bounded writer; an overflow sets err and writes nothing more ---- */

struct pfcp_w {
	__u8 *b;
	size_t cap, len;
	int err;		/* -ENOSPC after an overflow */
};

void pfcp_w_init(struct pfcp_w *w, __u8 *buf, size_t cap);
/* Message header; seid used only when has_seid. */
void pfcp_w_hdr(struct pfcp_w *w, __u8 type, bool has_seid, __u64 seid, __u32 seq);
void pfcp_w_ie(struct pfcp_w *w, __u16 type, const void *v, size_t len);
void pfcp_w_u8(struct pfcp_w *w, __u16 type, __u8 v);
void pfcp_w_u16(struct pfcp_w *w, __u16 type, __u16 v);
void pfcp_w_u32(struct pfcp_w *w, __u16 type, __u32 v);
size_t pfcp_w_group_begin(struct pfcp_w *w, __u16 type);
void pfcp_w_group_end(struct pfcp_w *w, size_t at);
void pfcp_w_node_id(struct pfcp_w *w, const struct pfcp_node_id *id);
void pfcp_w_fseid(struct pfcp_w *w, __u64 seid, __u32 ipv4);
void pfcp_w_fteid(struct pfcp_w *w, __u32 teid, __u32 ipv4);
/* An F-TEID with V4 (ipv4 != 0) and/or V6 (ipv6 != NULL) */
void pfcp_w_fteid46(struct pfcp_w *w, __u32 teid, __u32 ipv4, const __u8 *ipv6);
/* patch the header's length: the message's size, or -ENOSPC */
int pfcp_w_finish(struct pfcp_w *w);

/* Encode an FQDN ("a.b.c") as DNS labels into out; its length, or -EINVAL. */
int pfcp_fqdn_encode(const char *s, __u8 *out, size_t cap);

const char *pfcp_msg_name(__u8 type);	/* "session_establishment_request" ..., NULL if unknown */
const char *pfcp_cause_name(__u8 cause);	/* "request_accepted" ..., 0: "none", NULL if unknown */

#endif /* PFCP_MSG_H */
