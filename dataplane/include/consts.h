/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Limits and constants of the BPF data plane. Each limit can be overridden with -D at build time. */
#ifndef PGWU_CONSTS_H
#define PGWU_CONSTS_H

/* Default bearer capacity; pgwu load --max-bearers sets the real one before load. */
#ifndef PGWU_MAX_BEARERS
#define PGWU_MAX_BEARERS 1048576
#endif

/* Route-lookup cache slots per CPU (PGWU_FIB_CACHE_BITS in pgwu.h): next hops are few, but uplink
 * keys are inner destinations. */
#define PGWU_FIB_CACHE_SIZE (1U << PGWU_FIB_CACHE_BITS)

/* Longest GTP-U extension-header chain walked; the verifier needs a bound, real chains are 1-2. */
#ifndef PGWU_MAX_EXT_HDRS
#define PGWU_MAX_EXT_HDRS 8
#endif

/* The largest frame the full-checksum fallback sums: CSUM_MAX_LEN in csum.h. */

/* Replies the PGW-U builds from a bad packet (Error Indication, Supported Extension Headers
 * Notification): at most PGWU_REPLY_BURST at once and PGWU_REPLY_RATE a second per peer, so a
 * flood can't make the gateway an amplifier; PGWU_REPLY_PEERS peers are remembered (LRU). */
#ifndef PGWU_SDF_LISTS
#define PGWU_SDF_LISTS 65536	/* bearer halves with SDF filters (sdf_lists); allocated per entry */
#endif
#ifndef PGWU_SDF_RULES
#define PGWU_SDF_RULES 262144	/* PDRs of those (sdf_pdrs, sdf_qos): 4 a half on average */
#endif

#ifndef PGWU_REPLY_RATE
#define PGWU_REPLY_RATE 10
#endif
#ifndef PGWU_REPLY_BURST
#define PGWU_REPLY_BURST 10
#endif
#ifndef PGWU_REPLY_PEERS
#define PGWU_REPLY_PEERS 16384
#endif

/* GTP-U peers whose Echo Responses are remembered (LRU), and signalling reports (sig_rx, LRU) */
#ifndef PGWU_MAX_PEERS
#define PGWU_MAX_PEERS 4096
#endif
#ifndef PGWU_MAX_SIG_RX
#define PGWU_MAX_SIG_RX 65536
#endif

#define ETH_P_IP_BE	0x0008	/* htons(ETH_P_IP), a constant for switch cases */
#define ETH_P_8021Q_BE	0x0081
#define ETH_P_8021AD_BE	0xA888
#define ETH_P_IPV6_BE	0xDD86	/* htons(ETH_P_IPV6) */

#define GTPU_PORT_BE	0x6808	/* htons(2152) */

/* TS 29.281 6.1: message types */
#define GTP_ECHO_REQ		1
#define GTP_ECHO_RSP		2
#define GTP_ERROR_IND		26
#define GTP_SUPP_EXT_NOTIF	31
#define GTP_END_MARKER		254
#define GTP_GPDU		255

/* TS 29.281 8: information elements */
#define GTP_IE_RECOVERY		14	/* TV, 1 octet */
#define GTP_IE_TEID_DATA_I	16	/* TV, 4 octets */
#define GTP_IE_PEER_ADDR	133	/* TLV, 4 (IPv4) or 16 octets */
#define GTP_IE_EXT_HDR_LIST	141	/* TLV, 1 octet per extension header type */

/* TS 29.281 5.2.1: the two high bits of an extension header type say who must comprehend it:
 * 00, 01: nobody (skip it); 10: the endpoint receiver; 11: every receiver. The PGW-U is the
 * endpoint: an unknown type with the high bit set must be understood, so the G-PDU is dropped and
 * answered with a Supported Extension Headers Notification (7.2.3). */
#define GTP_EXT_COMPREHENSION_REQUIRED 0x80
#define GTP_EXT_PDU_SESSION_CONTAINER 0x85	/* TS 38.415 5.5.2 */

#define OUTER_TTL		64
/* IPv4 20 + UDP 8 + GTP-U 8: what encapsulation prepends (no optional fields) */
#define GTPU_ENCAP_LEN		36

#endif /* PGWU_CONSTS_H */
