/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* pgwu_fmt.h: how pgwu's commands write what they report (pgwu_fmt.c). */
#ifndef PGWU_FMT_H
#define PGWU_FMT_H

#include <stdio.h>
#include <linux/types.h>
#include "pgwu.h"

struct bearer;

/* The names of enum pgwu_reason, pgwu_verdict, pgwu_event and pgwu_reasm_stat, in their order */
extern const char *const pgwu_reason_names[PGWU_REASON_MAX];
extern const char *const pgwu_verdict_names[PGWU_VERDICT_MAX];
extern const char *const pgwu_event_names[PGWU_EVENT_MAX];
extern const char *const pgwu_reasm_names[PGWU_RA_MAX];
/* The socket path's (pgwu_sock.h): its own reasons and its per-thread counters; sock_reason_name
 * names any reason it counts (enum pgwu_reason, then enum pgwu_sock_reason). */
extern const char *const pgwu_sock_reason_names[];
extern const char *const pgwu_sock_counter_names[];
const char *sock_reason_name(int r);

const char *ip_str(__u32 addr, char buf[16]);
const char *mac_str(const __u8 mac[6], char buf[18]);
int mask_len(__u32 mask);		/* prefix length, -1 if not contiguous */
void json_str(FILE *f, const char *s);
const char *bearer_csum_str(__u32 flags);
/* The downlink half's peer: its IPv4 address, or the IPv6 one (PGWU_B_PEER6); buf >= 46 octets. */
const char *bearer_sgw_str(const struct bearer *b, char *buf);
/* "N" when both halves have QFI N (or the one half there is), "-" with none, "UL/DL" when they
 * differ ("-" for a half without); buf of at least 8. */
const char *bearer_qfi_str(const struct bearer *b, char buf[8]);

#endif /* PGWU_FMT_H */
