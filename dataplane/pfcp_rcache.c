// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pfcp_rcache.c: the answers `pgwu pfcp` keeps for retransmitted requests (TS 29.244 6.4). A
 * retransmission is the same request sent again by the same peer: same address and port, same
 * sequence number and message type, the same bytes (a keyed SipHash digest of the whole message
 * and its length), within the peer's retransmission window (T1 x (N1 + 1): --cp-t1, --cp-n1).
 * Such a request gets the first answer again and is not applied again. Anything else (another
 * content under a reused sequence number, as a restarted CP sends; the same bytes after the
 * window) is a new request. A peer's answers are dropped when it restarts or its association
 * ends (rcache_flush_peer).
 *
 * The table is direct-mapped by (peer, sequence number): 65,536 entries, each with the answer
 * inline when it fits (most do), else in its own allocation. An entry is overwritten by a later
 * request that maps to it, so at R requests/s an answer lasts about 65,536 / R s at most.
 */
#include <stdlib.h>
#include <string.h>
#include "pfcp_agent.h"

#define RCACHE_BITS 16
#define RC_INLINE 160		/* answers up to this size live in the entry */

struct rcache_ent {
	__u32 addr;
	__u16 port;
	__u8 type;
	__u8 valid;
	__u32 seq;
	__u32 req_len;
	__u64 req_digest;
	__u64 t_ms;		/* when the request was first answered */
	__u8 *heap;		/* the answer when longer than RC_INLINE (else NULL) */
	__u16 len;
	__u8 buf[RC_INLINE];
};

struct rcache_ent *rcache_alloc(void)
{
	return calloc(1U << RCACHE_BITS, sizeof(struct rcache_ent));
}

void rcache_free(struct rcache_ent *rc)
{
	if (!rc)
		return;
	for (__u32 i = 0; i < 1U << RCACHE_BITS; i++)
		free(rc[i].heap);
	free(rc);
}

/* SipHash-2-4 (Aumasson, Bernstein 2012) of n bytes under the agent's random key: a peer can't
 * make another request collide with one it sent earlier without knowing the key. */
#define ROTL(x, b) (__u64)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND do { \
	v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32); \
	v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2; \
	v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0; \
	v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32); \
} while (0)

static __u64 siphash(const __u64 k[2], const __u8 *p, size_t n)
{
	__u64 v0 = 0x736f6d6570736575ULL ^ k[0], v1 = 0x646f72616e646f6dULL ^ k[1];
	__u64 v2 = 0x6c7967656e657261ULL ^ k[0], v3 = 0x7465646279746573ULL ^ k[1];
	__u64 b = (__u64)n << 56, w;
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		memcpy(&w, p + i, 8);	/* host order: only which keyed hash this is depends on it */
		v3 ^= w;
		SIPROUND;
		SIPROUND;
		v0 ^= w;
	}
	for (size_t j = 0; i + j < n; j++)
		b |= (__u64)p[i + j] << (8 * j);
	v3 ^= b;
	SIPROUND;
	SIPROUND;
	v0 ^= b;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

static struct rcache_ent *rcache_slot(struct pfcp_agent *a, const struct sockaddr_in *peer,
				      __u32 seq)
{
	__u32 h = (peer->sin_addr.s_addr * 0x9e3779b1U) ^ (peer->sin_port * 0x85ebca6bU) ^
		  (seq * 0xc2b2ae35U);

	return &a->rcache[(h ^ (h >> 15)) & ((1U << RCACHE_BITS) - 1)];
}

size_t rcache_answer(struct pfcp_agent *a, const struct pfcp_msg *m, __u8 *out)
{
	const struct sockaddr_in *peer = a->peer;
	const struct rcache_ent *rc = rcache_slot(a, peer, m->h.seq);

	if (!(rc->valid && rc->addr == peer->sin_addr.s_addr && rc->port == peer->sin_port &&
	      rc->seq == m->h.seq && rc->type == m->h.type && rc->req_len == m->h.msg_len &&
	      rc->req_digest == siphash(a->rc_key, a->req, m->h.msg_len)))
		return 0;
	if (a->now_ms - rc->t_ms > a->rc_window_ms) {
		/* the same request after the CP stopped retransmitting it: a new one */
		stat_add(a, PFCP_STAT_RCACHE_EXPIRED, 1);
		return 0;
	}
	memcpy(out, rc->len > RC_INLINE ? rc->heap : rc->buf, rc->len);
	return rc->len;
}

void rcache_keep(struct pfcp_agent *a, const struct pfcp_msg *m, const __u8 *ans, size_t len)
{
	struct rcache_ent *rc = rcache_slot(a, a->peer, m->h.seq);

	if (len > RC_INLINE) {
		if (!rc->heap && !(rc->heap = malloc(RESP_MAX))) {
			rc->valid = 0;	/* no memory: this answer is not kept */
			return;
		}
	} else if (rc->heap) {
		free(rc->heap);
		rc->heap = NULL;
	}
	rc->valid = 1;
	rc->addr = a->peer->sin_addr.s_addr;
	rc->port = a->peer->sin_port;
	rc->seq = m->h.seq;
	rc->type = m->h.type;
	rc->req_len = m->h.msg_len;
	rc->req_digest = siphash(a->rc_key, a->req, m->h.msg_len);
	rc->t_ms = a->now_ms;
	rc->len = len;
	memcpy(len > RC_INLINE ? rc->heap : rc->buf, ans, len);
}

void rcache_flush_peer(struct pfcp_agent *a, const struct sockaddr_in *peer)
{
	__u64 n = 0;

	for (__u32 i = 0; i < 1U << RCACHE_BITS; i++) {
		struct rcache_ent *rc = &a->rcache[i];

		if (rc->valid && rc->addr == peer->sin_addr.s_addr && rc->port == peer->sin_port) {
			rc->valid = 0;
			n++;
		}
	}
	stat_add(a, PFCP_STAT_RCACHE_FLUSHED, n);
}
