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

/* Largest frame the full-checksum fallback sums (3024-byte frames plus encapsulation). */
#ifndef PGWU_MAX_CSUM_LEN
#define PGWU_MAX_CSUM_LEN 4096
#endif

#define ETH_P_IP_BE	0x0008	/* htons(ETH_P_IP), a constant for switch cases */
#define ETH_P_8021Q_BE	0x0081
#define ETH_P_8021AD_BE	0xA888

#define GTPU_PORT_BE	0x6808	/* htons(2152) */

/* TS 29.281 6.1: message types */
#define GTP_ECHO_REQ		1
#define GTP_ECHO_RSP		2
#define GTP_ERROR_IND		26
#define GTP_SUPP_EXT_NOTIF	31
#define GTP_END_MARKER		254
#define GTP_GPDU		255

#define GTP_IE_RECOVERY		14

#define OUTER_TTL		64
/* IPv4 20 + UDP 8 + GTP-U 8: what encapsulation prepends (no optional fields) */
#define GTPU_ENCAP_LEN		36

#endif /* PGWU_CONSTS_H */
