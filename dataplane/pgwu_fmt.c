// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* pgwu_fmt.c: how pgwu's commands write what they report: the names of the data plane's enums
 * (reasons, verdicts, events, reassembler counters), addresses, prefixes, JSON strings, a bearer's
 * checksum and QFI settings. */
#include <arpa/inet.h>
#include <stdio.h>
#include "pgwu_fmt.h"
#include "pgwu_maps.h"
#include "pgwu_cli.h"
#include "pgwu_sock.h"

/* Names of enum pgwu_reason, in its order: the enum's names lower-cased without PGWU_R_. */
const char *const pgwu_reason_names[PGWU_REASON_MAX] = {
	[PGWU_R_UL_FWD] = "ul_fwd",
	[PGWU_R_DL_FWD] = "dl_fwd",
	[PGWU_R_ECHO_REPLY] = "echo_reply",
	[PGWU_R_PASS_NOT_IPV4] = "pass_not_ipv4",
	[PGWU_R_PASS_NOT_GTPU] = "pass_not_gtpu",
	[PGWU_R_PASS_NOT_UE] = "pass_not_ue",
	[PGWU_R_SIG_ECHO_RESPONSE] = "sig_echo_response",
	[PGWU_R_SIG_ERROR_IND] = "sig_error_ind",
	[PGWU_R_SIG_END_MARKER] = "sig_end_marker",
	[PGWU_R_SIG_SUPP_EXT_NOTIF] = "sig_supp_ext_notif",
	[PGWU_R_PASS_NO_NEIGH] = "pass_no_neigh",
	[PGWU_R_PASS_FIB_OTHER] = "pass_fib_other",
	[PGWU_R_DROP_TRUNC_ETH] = "drop_trunc_eth",
	[PGWU_R_DROP_TRUNC_IP] = "drop_trunc_ip",
	[PGWU_R_DROP_BAD_IP] = "drop_bad_ip",
	[PGWU_R_DROP_OUTER_FRAG] = "drop_outer_frag",
	[PGWU_R_DROP_TRUNC_UDP] = "drop_trunc_udp",
	[PGWU_R_DROP_BAD_UDP_LEN] = "drop_bad_udp_len",
	[PGWU_R_DROP_TRUNC_GTP] = "drop_trunc_gtp",
	[PGWU_R_DROP_GTP_VERSION] = "drop_gtp_version",
	[PGWU_R_DROP_GTP_BAD_LEN] = "drop_gtp_bad_len",
	[PGWU_R_DROP_GTP_BAD_EXT] = "drop_gtp_bad_ext",
	[PGWU_R_DROP_GTP_UNKNOWN_MSG] = "drop_gtp_unknown_msg",
	[PGWU_R_DROP_UNKNOWN_TEID] = "drop_unknown_teid",
	[PGWU_R_DROP_INNER_NOT_IPV4] = "drop_inner_not_ipv4",
	[PGWU_R_DROP_INNER_BAD] = "drop_inner_bad",
	[PGWU_R_DROP_SPOOFED] = "drop_spoofed",
	[PGWU_R_DROP_TTL_EXPIRED] = "drop_ttl_expired",
	[PGWU_R_DROP_BAD_IP_DL] = "drop_bad_ip_dl",
	[PGWU_R_DROP_UNKNOWN_UE] = "drop_unknown_ue",
	[PGWU_R_DROP_NO_ROUTE] = "drop_no_route",
	[PGWU_R_DROP_ADJUST] = "drop_adjust",
	[PGWU_R_DROP_GTP_EXT_UNSUPPORTED] = "drop_gtp_ext_unsupported",
	[PGWU_R_DROP_ECHO_BAD_SRC] = "drop_echo_bad_src",
	[PGWU_R_DROP_INNER_CSUM] = "drop_inner_csum",
	[PGWU_R_DROP_FRAG_NEEDED] = "drop_frag_needed",
	[PGWU_R_DROP_QFI_MISMATCH] = "drop_qfi_mismatch",
	[PGWU_R_PASS_OUTER_FRAG] = "pass_outer_frag",
	[PGWU_R_DROP_NOT_CONFIGURED] = "drop_not_configured",
	[PGWU_R_DROP_GATE_CLOSED] = "drop_gate_closed",
	[PGWU_R_DROP_MBR] = "drop_mbr",
	[PGWU_R_DROP_QUOTA] = "drop_quota",
	[PGWU_R_DROP_NO_PDR] = "drop_no_pdr",
	[PGWU_R_DROP_FAR] = "drop_far",
	[PGWU_R_DROP_TOO_BIG] = "drop_too_big",
	[PGWU_R_UL_CP_FWD] = "ul_cp_fwd",
	[PGWU_R_DL_CP_FWD] = "dl_cp_fwd",
	[PGWU_R_DROP_OUTER_UDP_CSUM] = "drop_outer_udp_csum",
};
/* A reason added to the enum without a name here leaves a NULL slot, which the build does not
 * see: tests/dataplane/test_fmt_names.py checks every table here against its enum, index by index.
 * These asserts only catch an enum grown at its end. */
_Static_assert(PGWU_R_PASS_OUTER_FRAG == PGWU_REASON_MAX - 11,
	       "enum pgwu_reason changed: update pgwu_reason_names[]");
_Static_assert(PGWU_R_DROP_OUTER_UDP_CSUM == PGWU_REASON_MAX - 1,
	       "enum pgwu_reason changed: update pgwu_reason_names[]");

/* Names of enum pgwu_event, in its order: the enum's names lower-cased without PGWU_EV_. */
const char *const pgwu_event_names[PGWU_EVENT_MAX] = {
	[PGWU_EV_ERR_IND_SENT] = "err_ind_sent",
	[PGWU_EV_ERR_IND_RATE_LIMITED] = "err_ind_rate_limited",
	[PGWU_EV_SUPP_EXT_SENT] = "supp_ext_sent",
	[PGWU_EV_SUPP_EXT_RATE_LIMITED] = "supp_ext_rate_limited",
	[PGWU_EV_ICMP_TIME_EXCEEDED_SENT] = "icmp_time_exceeded_sent",
	[PGWU_EV_ICMP_FRAG_NEEDED_SENT] = "icmp_frag_needed_sent",
	[PGWU_EV_ICMP_RATE_LIMITED] = "icmp_rate_limited",
	[PGWU_EV_ICMP6_TOO_BIG_SENT] = "icmp6_too_big_sent",
};

/* Names of enum pgwu_reasm_stat, in its order: lower-cased without PGWU_RA_. */
const char *const pgwu_reasm_names[PGWU_RA_MAX] = {
	[PGWU_RA_RECEIVED] = "received",
	[PGWU_RA_FORWARDED] = "forwarded",
	[PGWU_RA_DROP_NOT_ACCESS] = "drop_not_access",
	[PGWU_RA_DROP_TRUNC_GTP] = "drop_trunc_gtp",
	[PGWU_RA_DROP_GTP_VERSION] = "drop_gtp_version",
	[PGWU_RA_DROP_GTP_BAD_LEN] = "drop_gtp_bad_len",
	[PGWU_RA_DROP_NOT_GPDU] = "drop_not_gpdu",
	[PGWU_RA_DROP_GTP_BAD_EXT] = "drop_gtp_bad_ext",
	[PGWU_RA_DROP_GTP_EXT_UNSUPPORTED] = "drop_gtp_ext_unsupported",
	[PGWU_RA_DROP_UNKNOWN_TEID] = "drop_unknown_teid",
	[PGWU_RA_DROP_QFI_MISMATCH] = "drop_qfi_mismatch",
	[PGWU_RA_DROP_INNER_NOT_IPV4] = "drop_inner_not_ipv4",
	[PGWU_RA_DROP_INNER_BAD] = "drop_inner_bad",
	[PGWU_RA_DROP_INNER_CSUM] = "drop_inner_csum",
	[PGWU_RA_DROP_SPOOFED] = "drop_spoofed",
	[PGWU_RA_DROP_TTL_EXPIRED] = "drop_ttl_expired",
	[PGWU_RA_DROP_SEND] = "drop_send",
};
_Static_assert(PGWU_RA_DROP_SEND == PGWU_RA_MAX - 1,
	       "enum pgwu_reasm_stat changed: update pgwu_reasm_names[]");

/* Names of enum pgwu_sock_reason (pgwu_sock.h), lower-cased without PGWU_SR_. */
const char *const pgwu_sock_reason_names[PGWU_SOCK_REASON_MAX - PGWU_REASON_MAX] = {
	[PGWU_SR_DROP_TX_FULL - PGWU_REASON_MAX] = "drop_tx_full",
	[PGWU_SR_DROP_SEND - PGWU_REASON_MAX] = "drop_send",
	[PGWU_SR_DROP_TRUNC - PGWU_REASON_MAX] = "drop_trunc",
};
_Static_assert(PGWU_SR_DROP_TRUNC == PGWU_SOCK_REASON_MAX - 1,
	       "enum pgwu_sock_reason changed: update pgwu_sock_reason_names[]");

/* Names of enum pgwu_sock_counter, lower-cased without PGWU_SC_. */
const char *const pgwu_sock_counter_names[PGWU_SOCK_COUNTER_MAX] = {
	[PGWU_SC_RX_CALLS] = "rx_calls",
	[PGWU_SC_RX_EMPTY] = "rx_empty",
	[PGWU_SC_RX_PACKETS] = "rx_packets",
	[PGWU_SC_TX_CALLS] = "tx_calls",
	[PGWU_SC_GRO_DATAGRAMS] = "gro_datagrams",
	[PGWU_SC_HASH_LOOKUPS] = "hash_lookups",
	[PGWU_SC_SOCK_DROPS] = "sock_drops",
	[PGWU_SC_TID] = "tid",
	[PGWU_SC_CPU] = "cpu",
	[PGWU_SC_DIRECTION] = "direction",
};
_Static_assert(PGWU_SC_DIRECTION == PGWU_SOCK_COUNTER_MAX - 1,
	       "enum pgwu_sock_counter changed: update pgwu_sock_counter_names[]");

const char *sock_reason_name(int r)
{
	return r < PGWU_REASON_MAX ? pgwu_reason_names[r] : pgwu_sock_reason_names[r - PGWU_REASON_MAX];
}

const char *const pgwu_verdict_names[PGWU_VERDICT_MAX] = {
	"aborted", "drop", "pass", "tx", "redirect"
};

const char *const pfcp_restart_policy_names[PFCP_RESTART_MAX + 1] = {
	[PFCP_RESTART_DELETE] = "delete",
	[PFCP_RESTART_ON_SETUP] = "on-setup",
	[PFCP_RESTART_KEEP] = "keep",
	NULL,
};

const char *ip_str(__u32 addr, char buf[16])
{
	const __u8 *p = (const __u8 *)&addr;

	snprintf(buf, 16, "%u.%u.%u.%u", p[0], p[1], p[2], p[3]);
	return buf;
}

const char *mac_str(const __u8 mac[6], char buf[18])
{
	snprintf(buf, 18, "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3], mac[4],
		 mac[5]);
	return buf;
}

int mask_len(__u32 mask)
{
	__u32 m = ntohl(mask);
	int len = __builtin_popcount(m);

	if (len && m != 0xffffffffU << (32 - len))
		return -1;
	return len;
}

void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = *s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

const char *bearer_csum_str(__u32 flags)
{
	if (flags & PGWU_B_CSUM_ON)
		return "on";
	if (flags & PGWU_B_CSUM_OFF)
		return "off";
	return "default";
}

const char *bearer_qfi_str(const struct bearer *b, char buf[8])
{
	int ul = b->has_ul ? pgwu_qfi_of(b->ul_flags) : -2;	/* -2: no such half */
	int dl = b->has_dl ? pgwu_qfi_of(b->flags) : -2;
	char u[4] = "-", d[4] = "-";

	if (ul == -2 || dl == -2 || ul == dl) {	/* one half, or both agree */
		int q = ul == -2 ? dl : ul;

		if (q < 0)
			return "-";
		snprintf(buf, 8, "%d", q);
		return buf;
	}
	if (ul >= 0)
		snprintf(u, sizeof(u), "%d", ul);
	if (dl >= 0)
		snprintf(d, sizeof(d), "%d", dl);
	snprintf(buf, 8, "%s/%s", u, d);
	return buf;
}

const char *bearer_sgw_str(const struct bearer *b, char *buf)
{
	if (b->flags & PGWU_B_PEER6)
		return inet_ntop(AF_INET6, b->sgw6, buf, INET6_ADDRSTRLEN) ? buf : "?";
	return ip_str(b->sgw, buf);
}
