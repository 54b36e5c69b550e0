// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pfcp_rcache.c: the answers `pgwu pfcp` keeps for retransmitted requests (TS 29.244 6.4): a
 * direct-mapped table keyed by the peer's address and port and the sequence number; a request
 * that finds its entry (same peer, sequence number and message type) gets the same answer and is
 * not applied again.
 */
#include <stdlib.h>
#include <string.h>
#include "pfcp_agent.h"

#define RCACHE_BITS 14		/* answers kept for retransmitted requests (direct-mapped) */

struct rcache_ent {
	__u32 addr;
	__u16 port;
	__u8 type;
	__u8 valid;
	__u32 seq;
	__u16 len;
	__u8 buf[RESP_MAX];
};

struct rcache_ent *rcache_alloc(void)
{
	return calloc(1U << RCACHE_BITS, sizeof(struct rcache_ent));
}

static struct rcache_ent *rcache_slot(struct pfcp_agent *a, const struct sockaddr_in *peer,
				      __u32 seq)
{
	__u32 h = (peer->sin_addr.s_addr * 0x9e3779b1U) ^ (peer->sin_port * 0x85ebca6bU) ^
		  (seq * 0xc2b2ae35U);

	return &a->rcache[(h ^ (h >> 15)) & ((1U << RCACHE_BITS) - 1)];
}

/* A retransmitted request gets the answer the first one got (TS 29.244 6.4): that answer copied
 * into out and its length, or 0 when the request is not one answered before. */
size_t rcache_answer(struct pfcp_agent *a, const struct sockaddr_in *peer,
		     const struct pfcp_msg *m, __u8 *out)
{
	const struct rcache_ent *rc = rcache_slot(a, peer, m->h.seq);

	if (!(rc->valid && rc->addr == peer->sin_addr.s_addr && rc->port == peer->sin_port &&
	      rc->seq == m->h.seq && rc->type == m->h.type))
		return 0;
	memcpy(out, rc->buf, rc->len);
	return rc->len;
}

/* Keep the answer to a request for its retransmissions. */
void rcache_keep(struct pfcp_agent *a, const struct sockaddr_in *peer,
		 const struct pfcp_msg *m, const __u8 *ans, size_t len)
{
	struct rcache_ent *rc = rcache_slot(a, peer, m->h.seq);

	rc->valid = 1;
	rc->addr = peer->sin_addr.s_addr;
	rc->port = peer->sin_port;
	rc->seq = m->h.seq;
	rc->type = m->h.type;
	rc->len = len;
	memcpy(rc->buf, ans, len);
}
