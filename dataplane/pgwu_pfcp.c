// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#define _GNU_SOURCE
/*
 * pgwu_pfcp.c: `pgwu pfcp`, a PFCP (3GPP TS 29.244) agent on Sx/N4 that turns sessions into bearers
 * in the same tables `pgwu session` writes (bearer_add/bearer_remove/bearer_set_dl in
 * pgwu_session.c). Single-threaded: one UDP socket and a signalfd under poll(); datagrams are
 * read and answered in batches (recvmmsg/sendmmsg), each batch under the PIN_DIR lock that every
 * pgwu writer takes.
 *
 * Every request goes parse (pfcp_msg.c) -> validate into a plan -> apply; a request is rejected
 * before any table is touched, and the one multi-step change (a bearer's two halves) is undone by
 * bearer_add itself when its second step fails. One session is one bearer: an uplink PDR (Access,
 * F-TEID, outer header removal) with a FAR forwarding to Core, and a downlink PDR (Core, UE IP)
 * with a FAR forwarding to Access with GTP-U/UDP/IPv4 outer header creation. docs/pfcp.md has the
 * IEs, the causes and what is not supported.
 *
 * Counters for `pgwu metrics` go to the pinned array map pfcp_stats (layout in pgwu_cli.h),
 * mmap()ed: one writer (this process), plain stores, read by the exporter on each scrape.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <bpf/bpf.h>
#include "pgwu_cli.h"
#include "pfcp_msg.h"

#define BATCH 64
#define DGRAM_MAX 65536
#define RESP_MAX 1024		/* our largest answer: an association response with a 255-octet FQDN */
#define RCACHE_BITS 14		/* answers kept for retransmitted requests (direct-mapped) */
#define MAX_ASSOC 64
#define NTP_UNIX_OFFSET 2208988800UL	/* seconds from 1900 to 1970 */
#define TEID_TRIES 65536
#define LOADED_CHECK_MS 1000	/* how often the agent checks that its maps are still the pinned ones */

struct assoc {
	bool used;
	struct pfcp_node_id id;
	__u32 rts;		/* the CP's Recovery Time Stamp */
	__u32 sessions;
	struct sockaddr_in peer;	/* where its Association Setup Request came from */
	/* path supervision (--heartbeat): our Heartbeat Request in flight, intervals unanswered */
	bool hb_wait;
	__u32 hb_seq, hb_missed;
};

#define S_USED 1
#define S_URR 2
#define S_QER 4
#define S_DL_QER 8	/* the downlink PDR refers to the QER: its QFI marks downlink G-PDUs */

struct sess {
	__u64 up_seid, cp_seid;
	__u32 teid, ue, sgw, sgw_teid;	/* network order */
	__u32 ul_far, dl_far, urr_id, qer_id, ur_seqn;
	__u32 dl_flags;		/* the downlink half's PGWU_B_QFI and QFI (5G N3), or 0; kept
				 * while the downlink FAR buffers, for the half it installs */
	__u64 mbr_ul, mbr_dl;
	__u64 dl_packets, dl_bytes;	/* usage of downlink halves removed while the session lives */
	__u16 ul_pdr, dl_pdr;
	__u16 assoc;
	__u8 flags, gate;
	bool dl_on;		/* the downlink half is installed (its FAR forwards) */
	bool has_sgw;		/* sgw/sgw_teid known (an Outer Header Creation was received) */
};

struct rcache_ent {
	__u32 addr;
	__u16 port;
	__u8 type;
	__u8 valid;
	__u32 seq;
	__u16 len;
	__u8 buf[RESP_MAX];
};

/*
 * The agent's state: one per process, made by do_pfcp and passed to every function as `a`. Only
 * the agent's thread touches it (the exporter reads the counters through pfcp_stats, not here).
 */
struct pfcp_agent {
	struct pgwu_maps m;
	int sock, lock_fd, stats_fd;
	__u64 *stats;
	__u32 local_addr;	/* GTP-U address (config map), network order */
	__u32 n4_addr;		/* our address in F-SEIDs */
	struct pfcp_node_id node_id;
	__u32 rts;		/* our Recovery Time Stamp */
	struct assoc assoc[MAX_ASSOC];
	struct sess *sess;
	__u32 *free_idx;
	__u32 n_free, max_sess, n_sess, gen;
	__u32 next_teid;	/* host order: the next CHOOSE candidate */
	struct rcache_ent *rcache;
	__u32 *ue_tab;		/* UE address -> session index + 1: open addressing, linear probing */
	__u32 ue_mask;
	__u32 hb_interval;	/* seconds between our Heartbeat Requests, 0: none */
	__u32 seq;		/* sequence number of our last request */
	const struct sockaddr_in *peer;	/* the current request's sender */
	struct pfcp_msg msg;
};

/* ---- counters (pgwu_cli.h: PFCP_STAT_*) ---- */

static void stat_add(struct pfcp_agent *a, __u32 i, __u64 v)
{
	if (a->stats && i < PFCP_STAT_N)
		a->stats[i] += v;
}

static void stat_set(struct pfcp_agent *a, __u32 i, __u64 v)
{
	if (a->stats && i < PFCP_STAT_N)
		__atomic_store_n(&a->stats[i], v, __ATOMIC_RELAXED);
}

static int stats_open(struct pfcp_agent *a)
{
	LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = BPF_F_MMAPABLE);
	char path[PATH_MAX];
	__u32 max = 0;
	void *p;
	int fd;

	if (pin_path(path, sizeof(path), PFCP_STATS_MAP))
		return -ENAMETOOLONG;
	fd = bpf_obj_get(path);
	if (fd < 0) {
		fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, PFCP_STATS_MAP, 4, 8, PFCP_STAT_N, &opts);
		if (fd < 0 || bpf_obj_pin(fd, path)) {
			int err = -errno;

			fprintf(stderr, "Couldn't create %s: %s\n", path, strerror(-err));
			if (fd >= 0)
				close(fd);
			return err;
		}
	} else if (map_max_entries(fd, &max) || max != PFCP_STAT_N) {
		fprintf(stderr, "%s is not a pfcp_stats map of this version\n", path);
		close(fd);
		return -EINVAL;
	}
	p = mmap(NULL, PFCP_STAT_N * 8, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int err = -errno;

		fprintf(stderr, "Couldn't map %s: %s\n", path, strerror(-err));
		close(fd);
		return err;
	}
	a->stats_fd = fd;
	a->stats = p;
	return 0;
}

/* ---- sessions ---- */

/*
 * Every session's UE address, so a UE is never given to two sessions, also while one of them has
 * no downlink half in dl_bearers (its FAR buffers or drops). Deletion shifts the entries that
 * follow back (no tombstones).
 */
static __u32 ue_home(struct pfcp_agent *a, __u32 ue)
{
	__u32 h = ue * 0x9e3779b1U;

	return (h ^ (h >> 16)) & a->ue_mask;
}

static struct sess *ue_find(struct pfcp_agent *a, __u32 ue)
{
	for (__u32 i = ue_home(a, ue); a->ue_tab[i]; i = (i + 1) & a->ue_mask)
		if (a->sess[a->ue_tab[i] - 1].ue == ue)
			return &a->sess[a->ue_tab[i] - 1];
	return NULL;
}

static void ue_insert(struct pfcp_agent *a, __u32 ue, __u32 idx)
{
	__u32 i = ue_home(a, ue);

	while (a->ue_tab[i])
		i = (i + 1) & a->ue_mask;
	a->ue_tab[i] = idx + 1;
}

static void ue_remove(struct pfcp_agent *a, __u32 ue)
{
	__u32 i = ue_home(a, ue), j;

	while (a->ue_tab[i] && a->sess[a->ue_tab[i] - 1].ue != ue)
		i = (i + 1) & a->ue_mask;
	if (!a->ue_tab[i])
		return;
	a->ue_tab[i] = 0;
	for (j = (i + 1) & a->ue_mask; a->ue_tab[j]; j = (j + 1) & a->ue_mask) {
		__u32 h = ue_home(a, a->sess[a->ue_tab[j] - 1].ue);

		if (((j - h) & a->ue_mask) >= ((j - i) & a->ue_mask)) {
			a->ue_tab[i] = a->ue_tab[j];
			a->ue_tab[j] = 0;
			i = j;
		}
	}
}

static struct sess *sess_find(struct pfcp_agent *a, __u64 seid)
{
	__u32 idx = (__u32)seid;
	struct sess *s;

	if (!idx || idx > a->max_sess)
		return NULL;
	s = &a->sess[idx - 1];
	return (s->flags & S_USED) && s->up_seid == seid ? s : NULL;
}

static void sess_free(struct pfcp_agent *a, struct sess *s)
{
	__u32 idx = (__u32)s->up_seid;

	a->assoc[s->assoc].sessions--;
	ue_remove(a, s->ue);
	memset(s, 0, sizeof(*s));
	a->free_idx[a->n_free++] = idx - 1;
	a->n_sess--;
	stat_set(a, PFCP_STAT_SESSIONS, a->n_sess);
}

/* Remove a session's bearer and forget it; the usage read just before is in *b. */
static int sess_delete(struct pfcp_agent *a, struct sess *s, struct bearer *b)
{
	int err;

	if (b) {
		if (bearer_get(&a->m, s->teid, s->ue, true, b))
			memset(b, 0, sizeof(*b));
		b->dl_packets += s->dl_packets;
		b->dl_bytes += s->dl_bytes;
	}
	err = bearer_remove(&a->m, s->teid, s->ue, true, s->dl_on);
	if (err) {
		fprintf(stderr, "Couldn't delete the bearer of session 0x%llx: %s\n",
			(unsigned long long)s->up_seid, strerror(-err));
		return err;
	}
	sess_free(a, s);
	return 0;
}

static void assoc_drop_sessions(struct pfcp_agent *a, int ai)
{
	for (__u32 i = 0; i < a->max_sess && a->assoc[ai].sessions; i++)
		if ((a->sess[i].flags & S_USED) && a->sess[i].assoc == ai)
			sess_delete(a, &a->sess[i], NULL);
}

static bool node_id_eq(const struct pfcp_node_id *a, const struct pfcp_node_id *b)
{
	if (a->type != b->type)
		return false;
	switch (a->type) {
	case PFCP_NODE_IPV4:
		return a->ipv4 == b->ipv4;
	case PFCP_NODE_IPV6:
		return !memcmp(a->ipv6, b->ipv6, 16);
	default:
		return !strcasecmp(a->fqdn, b->fqdn);
	}
}

static int assoc_find(struct pfcp_agent *a, const struct pfcp_node_id *id)
{
	for (int i = 0; i < MAX_ASSOC; i++)
		if (a->assoc[i].used && node_id_eq(&a->assoc[i].id, id))
			return i;
	return -1;
}

static void assoc_count(struct pfcp_agent *a)
{
	__u64 n = 0;

	for (int i = 0; i < MAX_ASSOC; i++)
		n += a->assoc[i].used;
	stat_set(a, PFCP_STAT_ASSOCIATIONS, n);
}

/* ---- F-TEID allocation ---- */

/*
 * The next TEID that no bearer uses and whose slot in the direct index is free, so the packet
 * path finds it with one array access: candidates count up from 1, so while fewer than
 * nslots TEIDs have been handed out the TEID is its own slot number. A TEID is given again only
 * after the counter wraps (2^32 allocations) and only if it is free then. 0 when none was found.
 */
static __u32 teid_alloc(struct pfcp_agent *a)
{
	for (__u32 i = 0; i < TEID_TRIES; i++) {
		__u32 t = a->next_teid++, n = htonl(t);
		struct pgwu_ul_bearer ul;

		if (!t)
			continue;
		if (a->m.ul_slots &&
		    __atomic_load_n(&a->m.ul_slots[t & (a->m.nslots - 1)].state, __ATOMIC_ACQUIRE) ==
		    PGWU_SLOT_VALID)
			continue;
		if (!bpf_map_lookup_elem(a->m.ul, &n, &ul))
			continue;
		return n;
	}
	return 0;
}

/* ---- answers ---- */

struct reply {
	__u8 cause;
	__u16 offending;
	bool has_failed_rule;
	__u8 rule_type;
	__u32 rule_id;
};

static void reject(struct reply *r, __u8 cause, __u16 offending)
{
	r->cause = cause;
	r->offending = offending;
}

static void reject_rule(struct reply *r, __u8 cause, __u8 type, __u32 id)
{
	r->cause = cause;
	r->has_failed_rule = true;
	r->rule_type = type;
	r->rule_id = id;
}

static void w_cause(struct pfcp_w *w, const struct reply *r)
{
	pfcp_w_u8(w, PFCP_IE_CAUSE, r->cause);
	if (r->offending)
		pfcp_w_u16(w, PFCP_IE_OFFENDING_IE, r->offending);
	if (r->has_failed_rule) {
		__u8 b[5] = { r->rule_type };
		size_t n = 5;

		if (r->rule_type == PFCP_RULE_PDR) {
			b[1] = r->rule_id >> 8;
			b[2] = r->rule_id;
			n = 3;
		} else {
			__u32 v = htonl(r->rule_id);

			memcpy(b + 1, &v, 4);
		}
		pfcp_w_ie(w, PFCP_IE_FAILED_RULE_ID, b, n);
	}
}

static void w_rts(struct pfcp_agent *a, struct pfcp_w *w)
{
	pfcp_w_u32(w, PFCP_IE_RECOVERY_TIME_STAMP, a->rts);
}

/* ---- node procedures ---- */

/* The association whose CP sends from this address and port, or -1 */
static int assoc_by_peer(struct pfcp_agent *a, const struct sockaddr_in *peer)
{
	for (int i = 0; i < MAX_ASSOC; i++)
		if (a->assoc[i].used && a->assoc[i].peer.sin_addr.s_addr == peer->sin_addr.s_addr &&
		    a->assoc[i].peer.sin_port == peer->sin_port)
			return i;
	return -1;
}

/* A Recovery Time Stamp from an associated CP: another one than at setup means it restarted and
 * lost its sessions, so they are deleted here too (TS 29.244 6.2.2). */
static void check_peer_rts(struct pfcp_agent *a, int ai, __u32 rts)
{
	if (ai < 0 || a->assoc[ai].rts == rts)
		return;
	fprintf(stderr, "pgwu pfcp: CP %s restarted (recovery time stamp %u -> %u): deleting its "
		"%u sessions\n", inet_ntoa(a->assoc[ai].peer.sin_addr), a->assoc[ai].rts, rts,
		a->assoc[ai].sessions);
	assoc_drop_sessions(a, ai);
	a->assoc[ai].rts = rts;
}

static void on_heartbeat(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w)
{
	if (m->present & PFCP_P_RTS)
		check_peer_rts(a, assoc_by_peer(a, a->peer), m->recovery_ts);
	pfcp_w_hdr(w, PFCP_HEARTBEAT_RESP, false, 0, m->h.seq);
	w_rts(a, w);
	stat_add(a, PFCP_STAT_TX(PFCP_HEARTBEAT_RESP, 0), 1);
}

/* A CP's answer to our Heartbeat Request (heartbeat_tick): the path is up again. */
static void on_heartbeat_resp(struct pfcp_agent *a, const struct pfcp_msg *m)
{
	int ai = assoc_by_peer(a, a->peer);

	if (ai >= 0 && a->assoc[ai].hb_wait && a->assoc[ai].hb_seq == m->h.seq) {
		a->assoc[ai].hb_wait = false;
		a->assoc[ai].hb_missed = 0;
		if (m->present & PFCP_P_RTS)
			check_peer_rts(a, ai, m->recovery_ts);
	}
}

static void on_assoc_setup(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w)
{
	struct reply r = { .cause = m->cause, .offending = m->offending_ie };
	int ai = -1;

	if (r.cause == PFCP_CAUSE_ACCEPTED) {
		ai = assoc_find(a, &m->node_id);
		if (ai >= 0 && a->assoc[ai].rts != m->recovery_ts) {
			/* the CP restarted: its old sessions are gone on its side (TS 29.244 6.2.6) */
			assoc_drop_sessions(a, ai);
		}
		if (ai < 0) {
			for (ai = 0; ai < MAX_ASSOC && a->assoc[ai].used; ai++)
				;
			if (ai == MAX_ASSOC)
				reject(&r, PFCP_CAUSE_NO_RESOURCES, 0);
		}
	}
	if (r.cause == PFCP_CAUSE_ACCEPTED) {
		a->assoc[ai].used = true;
		a->assoc[ai].id = m->node_id;
		a->assoc[ai].rts = m->recovery_ts;
		a->assoc[ai].peer = *a->peer;
		a->assoc[ai].hb_wait = false;
		a->assoc[ai].hb_missed = 0;
		assoc_count(a);
	}
	pfcp_w_hdr(w, PFCP_ASSOC_SETUP_RESP, false, 0, m->h.seq);
	pfcp_w_node_id(w, &a->node_id);
	w_cause(w, &r);
	w_rts(a, w);
	if (r.cause == PFCP_CAUSE_ACCEPTED) {
		__u8 ff[2] = { PFCP_UPFF_FTUP, 0 };

		pfcp_w_ie(w, PFCP_IE_UP_FUNCTION_FEATURES, ff, sizeof(ff));
	}
	stat_add(a, PFCP_STAT_TX(PFCP_ASSOC_SETUP_RESP, r.cause), 1);
}

static void on_assoc_update_release(struct pfcp_agent *a, const struct pfcp_msg *m,
				    struct pfcp_w *w)
{
	struct reply r = { .cause = m->cause, .offending = m->offending_ie };
	__u8 type = m->h.type + 1;
	int ai;

	if (r.cause == PFCP_CAUSE_ACCEPTED) {
		ai = assoc_find(a, &m->node_id);
		if (ai < 0) {
			reject(&r, PFCP_CAUSE_NO_ASSOCIATION, 0);
		} else if (m->h.type == PFCP_ASSOC_RELEASE_REQ) {
			/* the UP deletes the association's sessions locally (TS 29.244 6.2.8) */
			assoc_drop_sessions(a, ai);
			if (a->assoc[ai].sessions)
				reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
			else
				memset(&a->assoc[ai], 0, sizeof(a->assoc[ai]));
			assoc_count(a);
		}
	}
	pfcp_w_hdr(w, type, false, 0, m->h.seq);
	pfcp_w_node_id(w, &a->node_id);
	w_cause(w, &r);
	stat_add(a, PFCP_STAT_TX(type, r.cause), 1);
}

/* ---- session establishment: validate into a plan, then apply ---- */

struct plan {
	const struct pfcp_pdr *ul, *dl;
	const struct pfcp_far *ul_far, *dl_far;
	const struct pfcp_urr *urr;
	const struct pfcp_qer *qer;
	__u32 ue;
	bool dl_fwd;		/* the downlink FAR forwards (else it buffers or drops: no downlink half) */
	__u32 ul_flags;		/* the uplink PDR's PDI QFI: what uplink G-PDUs must carry */
	__u32 dl_flags;		/* the QFI of the QER the downlink PDR refers to: its marking */
};

static const struct pfcp_far *far_by_id(const struct pfcp_far *f, int n, __u32 id)
{
	for (int i = 0; i < n; i++)
		if (f[i].id == id)
			return &f[i];
	return NULL;
}

/* the PDR's URR and QER references must name the session's one URR / QER */
static bool refs_ok(const struct pfcp_pdr *p, const struct pfcp_urr *u, const struct pfcp_qer *q)
{
	for (int i = 0; i < p->n_urr; i++)
		if (!u || p->urr_id[i] != u->id)
			return false;
	for (int i = 0; i < p->n_qer; i++)
		if (!q || p->qer_id[i] != q->id)
			return false;
	return true;
}

/* Apply Action of a downlink FAR this UP can do: FORW alone, or no forwarding (BUFF or DROP,
 * with or without NOCP): the downlink half is then absent and the packet path drops (no buffer). */
static bool dl_apply_ok(__u8 apply)
{
	apply &= 0x1f;
	if (apply & PFCP_AA_FORW)
		return apply == PFCP_AA_FORW;
	return (apply & (PFCP_AA_BUFF | PFCP_AA_DROP)) && !(apply & PFCP_AA_DUPL);
}

static bool ohc_ok(const struct pfcp_ohc *o)
{
	return o->desc == PFCP_OHC_GTPU_UDP_IPV4 && o->teid && o->ipv4;
}

/* A Create FAR (or an Update FAR, where every field is optional) for the downlink */
static bool dl_far_ok(const struct pfcp_far *f)
{
	return (!f->has_apply || dl_apply_ok(f->apply)) &&
	       (!f->has_dst_if || f->dst_if == PFCP_IF_ACCESS) &&
	       (!f->has_ohc || ohc_ok(&f->ohc));
}

static bool plan_est(struct pfcp_agent *a, const struct pfcp_msg *m, struct plan *p,
		     struct reply *r)
{
	memset(p, 0, sizeof(*p));
	for (int i = 0; i < m->n_create_pdr; i++) {
		const struct pfcp_pdr *d = &m->create_pdr[i];

		if (d->src_if == PFCP_IF_ACCESS && !p->ul)
			p->ul = d;
		else if ((d->src_if == PFCP_IF_CORE || d->src_if == PFCP_IF_SGI_LAN) && !p->dl)
			p->dl = d;
		else
			goto bad_pdr;	/* a second PDR per direction, or another interface */
		continue;
bad_pdr:
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, d->id);
		return false;
	}
	if (!p->ul || !p->dl) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, m->create_pdr[0].id);
		return false;
	}
	if (m->n_create_far > 2) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, m->create_far[2].id);
		return false;
	}
	if (m->n_create_urr > 1) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_URR, m->create_urr[1].id);
		return false;
	}
	if (m->n_create_qer > 1) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_QER, m->create_qer[1].id);
		return false;
	}
	p->urr = m->n_create_urr ? &m->create_urr[0] : NULL;
	p->qer = m->n_create_qer ? &m->create_qer[0] : NULL;
	if (p->urr && !(p->urr->method & PFCP_MM_VOLUM)) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_URR, p->urr->id);
		return false;
	}

	/* uplink PDR: Access, an IPv4 F-TEID (given or CHOOSE), GTP-U/UDP/IPv4 removed */
	if (!p->ul->has_fteid) {
		reject(r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_FTEID);
		return false;
	}
	if (!p->ul->has_ohr) {
		reject(r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_OUTER_HEADER_REMOVAL);
		return false;
	}
	if (!p->ul->has_far_id) {
		reject(r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_FAR_ID);
		return false;
	}
	if (!p->ul->fteid.v4 || (!p->ul->fteid.ch && !p->ul->fteid.teid) ||
	    (!p->ul->fteid.ch && a->local_addr && p->ul->fteid.ipv4 != a->local_addr) ||
	    (p->ul->ohr != PFCP_OHR_GTPU_UDP_IPV4 && p->ul->ohr != PFCP_OHR_GTPU_UDP_IP) ||
	    (p->ul->has_ue_ip && (!p->ul->ue_ip.v4 || p->ul->ue_ip.chv4)) ||
	    p->ul->n_qfi > 1 ||	/* a list of QFIs: the data plane checks one */
	    !refs_ok(p->ul, p->urr, p->qer))
		goto bad_ul;

	/* downlink PDR: Core, the UE's IPv4 address, no F-TEID */
	if (!p->dl->has_ue_ip) {
		reject(r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_UE_IP_ADDRESS);
		return false;
	}
	if (!p->dl->has_far_id) {
		reject(r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_FAR_ID);
		return false;
	}
	if (!p->dl->ue_ip.v4 || p->dl->ue_ip.chv4 || !p->dl->ue_ip.ipv4 || p->dl->has_fteid ||
	    (p->ul->has_ue_ip && p->ul->ue_ip.ipv4 != p->dl->ue_ip.ipv4) ||
	    !refs_ok(p->dl, p->urr, p->qer))
		goto bad_dl;
	p->ue = p->dl->ue_ip.ipv4;
	/*
	 * 5G N3 (QFI IE, TS 29.244 8.2.89): uplink G-PDUs must carry the QFI of the uplink PDI
	 * (the data plane drops the others); downlink ones get the QFI of the QER the downlink PDR
	 * applies. A QFI in the downlink PDI would match on N6 packets, which carry none: accepted,
	 * not used.
	 */
	p->ul_flags = p->ul->n_qfi ? pgwu_qfi_flags(p->ul->qfi) : 0;
	p->dl_flags = p->qer && p->qer->has_qfi && p->dl->n_qer ? pgwu_qfi_flags(p->qer->qfi) : 0;

	/* FARs: uplink forwards to Core as is; downlink forwards to Access inside GTP-U/UDP/IPv4 */
	p->ul_far = far_by_id(m->create_far, m->n_create_far, p->ul->far_id);
	if (!p->ul_far)
		goto bad_ul;
	p->dl_far = far_by_id(m->create_far, m->n_create_far, p->dl->far_id);
	if (!p->dl_far || p->dl_far == p->ul_far)
		goto bad_dl;
	p->dl_fwd = p->dl_far->apply & PFCP_AA_FORW;
	if (!p->ul_far->has_fwd || (p->dl_fwd && !p->dl_far->has_fwd)) {
		reject(r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_FORWARDING_PARAMS);
		return false;
	}
	if (p->dl_fwd && !p->dl_far->has_ohc) {
		reject(r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_OUTER_HEADER_CREATION);
		return false;
	}
	if (!(p->ul_far->apply & PFCP_AA_FORW) || (p->ul_far->apply & ~PFCP_AA_FORW & 0x1f) ||
	    (p->ul_far->dst_if != PFCP_IF_CORE && p->ul_far->dst_if != PFCP_IF_SGI_LAN) ||
	    p->ul_far->has_ohc) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, p->ul_far->id);
		return false;
	}
	if (!dl_far_ok(p->dl_far)) {
		reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, p->dl_far->id);
		return false;
	}
	return true;
bad_ul:
	reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, p->ul->id);
	return false;
bad_dl:
	reject_rule(r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, p->dl->id);
	return false;
}

static void on_sess_est(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w)
{
	struct reply r = { .cause = m->cause, .offending = m->offending_ie };
	struct pgwu_dl_bearer dl = {}, old_dl;
	struct sess *s = NULL;
	struct plan p;
	__u32 teid = 0, idx;
	int ai = -1, err;

	if (r.cause != PFCP_CAUSE_ACCEPTED)
		goto out;
	ai = assoc_find(a, &m->node_id);
	if (ai < 0) {
		reject(&r, PFCP_CAUSE_NO_ASSOCIATION, 0);
		goto out;
	}
	if (!plan_est(a, m, &p, &r))
		goto out;
	if (!a->n_free) {
		reject(&r, PFCP_CAUSE_NO_RESOURCES, 0);
		goto out;
	}
	/* the UE must be free: in this agent's sessions (some have no downlink half) and the table */
	if (ue_find(a, p.ue) || (!p.dl_fwd && !bpf_map_lookup_elem(a->m.dl, &p.ue, &old_dl))) {
		reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, p.dl->id);
		goto out;
	}
	teid = p.ul->fteid.ch ? teid_alloc(a) : p.ul->fteid.teid;
	if (!teid) {
		reject(&r, PFCP_CAUSE_NO_RESOURCES, 0);
		goto out;
	}
	dl.sgw_addr = p.dl_far->ohc.ipv4;
	dl.sgw_teid = p.dl_far->ohc.teid;
	dl.local_teid = teid;
	dl.flags = p.dl_flags;
	err = bearer_add(&a->m, teid, p.ue, p.ul_flags, p.dl_fwd ? &dl : NULL);
	if (err == -EEXIST)		/* the F-TEID the CP chose is in use */
		reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, p.ul->id);
	else if (err == -EADDRINUSE)	/* the UE address has a bearer */
		reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, p.dl->id);
	else if (err == -E2BIG)
		reject(&r, PFCP_CAUSE_NO_RESOURCES, 0);
	else if (err)
		reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
	if (err)
		goto out;

	idx = a->free_idx[--a->n_free];
	s = &a->sess[idx];
	memset(s, 0, sizeof(*s));
	a->gen++;
	s->up_seid = (__u64)(a->gen ? a->gen : ++a->gen) << 32 | (idx + 1);
	s->cp_seid = m->fseid.seid;
	s->teid = teid;
	s->ue = p.ue;
	s->sgw = dl.sgw_addr;
	s->sgw_teid = dl.sgw_teid;
	s->ul_pdr = p.ul->id;
	s->dl_pdr = p.dl->id;
	s->ul_far = p.ul_far->id;
	s->dl_far = p.dl_far->id;
	s->dl_on = p.dl_fwd;
	s->has_sgw = p.dl_far->has_ohc;
	s->dl_flags = p.dl_flags;
	s->assoc = ai;
	s->flags = S_USED;
	ue_insert(a, p.ue, idx);
	if (p.urr) {
		s->flags |= S_URR;
		s->urr_id = p.urr->id;
	}
	if (p.qer) {
		s->flags |= S_QER | (p.dl->n_qer ? S_DL_QER : 0);
		s->qer_id = p.qer->id;
		s->gate = p.qer->gate;
		s->mbr_ul = p.qer->mbr_ul;
		s->mbr_dl = p.qer->mbr_dl;
	}
	a->assoc[ai].sessions++;
	a->n_sess++;
	stat_set(a, PFCP_STAT_SESSIONS, a->n_sess);
out:
	/* the CP's SEID when it was readable (TS 29.244 7.2.2.4.2), else 0 */
	pfcp_w_hdr(w, PFCP_SESS_EST_RESP, true, m->present & PFCP_P_FSEID ? m->fseid.seid : 0,
		   m->h.seq);
	pfcp_w_node_id(w, &a->node_id);
	w_cause(w, &r);
	if (s) {
		pfcp_w_fseid(w, s->up_seid, a->n4_addr);
		if (p.ul->fteid.ch) {
			size_t g = pfcp_w_group_begin(w, PFCP_IE_CREATED_PDR);

			pfcp_w_u16(w, PFCP_IE_PDR_ID, p.ul->id);
			pfcp_w_fteid(w, teid, a->local_addr);
			pfcp_w_group_end(w, g);
		}
	}
	stat_add(a, PFCP_STAT_TX(PFCP_SESS_EST_RESP, r.cause), 1);
}

/* ---- modification: Update FAR (downlink: a new SGW F-TEID, as at handover), Update QER ---- */

static void on_sess_mod(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w)
{
	struct reply r = { .cause = m->cause, .offending = m->offending_ie };
	struct sess *s = sess_find(a, m->h.seid);
	const struct pfcp_far *dl_upd = NULL;
	const struct pfcp_qer *q = NULL;
	__u32 sgw = 0, sgw_teid = 0, dl_flags = 0;
	bool want_fwd = false;
	int err;

	if (!s) {
		reject(&r, PFCP_CAUSE_SESSION_NOT_FOUND, 0);
		goto out;
	}
	if (r.cause != PFCP_CAUSE_ACCEPTED)
		goto out;
	sgw = s->sgw;
	sgw_teid = s->sgw_teid;
	want_fwd = s->dl_on;
	dl_flags = s->dl_flags;
	if (m->n_other_rules || m->n_create_far || m->n_create_urr || m->n_create_qer) {
		reject(&r, PFCP_CAUSE_RULE_FAILURE, m->n_other_rules ? m->other_rule_ie :
		       m->n_create_far ? PFCP_IE_CREATE_FAR : m->n_create_urr ?
		       PFCP_IE_CREATE_URR : PFCP_IE_CREATE_QER);
		goto out;
	}
	if (m->n_create_pdr) {
		reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_PDR, m->create_pdr[0].id);
		goto out;
	}
	for (int i = 0; i < m->n_update_far; i++) {
		const struct pfcp_far *f = &m->update_far[i];
		bool fwd_ok = !f->has_apply ||
			      ((f->apply & PFCP_AA_FORW) && !(f->apply & ~PFCP_AA_FORW & 0x1f));

		if (f->id == s->dl_far && !dl_upd && dl_far_ok(f)) {
			dl_upd = f;
			continue;
		}
		if (f->id == s->ul_far && fwd_ok && !f->has_ohc &&
		    (!f->has_dst_if || f->dst_if == PFCP_IF_CORE || f->dst_if == PFCP_IF_SGI_LAN))
			continue;	/* nothing in the tables to change */
		reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, f->id);
		goto out;
	}
	if (dl_upd) {
		want_fwd = dl_upd->has_apply ? !!(dl_upd->apply & PFCP_AA_FORW) : s->dl_on;
		sgw = dl_upd->has_ohc ? dl_upd->ohc.ipv4 : s->sgw;
		sgw_teid = dl_upd->has_ohc ? dl_upd->ohc.teid : s->sgw_teid;
		if (want_fwd && !dl_upd->has_ohc && !s->has_sgw) {
			reject(&r, PFCP_CAUSE_CONDITIONAL_IE_MISSING, PFCP_IE_OUTER_HEADER_CREATION);
			goto out;
		}
	}
	for (int i = 0; i < m->n_update_qer; i++) {
		if (!(s->flags & S_QER) || m->update_qer[i].id != s->qer_id || q) {
			reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_QER, m->update_qer[i].id);
			goto out;
		}
		q = &m->update_qer[i];
	}
	/* a new QFI of the QER the downlink PDR applies: a new marking for the downlink half */
	if (q && q->has_qfi && (s->flags & S_DL_QER))
		dl_flags = pgwu_qfi_flags(q->qfi);
	/* everything checked: the one table change (without dl_upd, want_fwd == s->dl_on) */
	if (want_fwd && s->dl_on &&
	    (sgw != s->sgw || sgw_teid != s->sgw_teid || dl_flags != s->dl_flags)) {
		err = bearer_set_dl_flags(&a->m, s->ue, sgw, sgw_teid, dl_flags);
		if (err) {
			reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
			goto out;
		}
	} else if (dl_upd && want_fwd && !s->dl_on) {
		struct pgwu_dl_bearer dl = { .sgw_addr = sgw, .sgw_teid = sgw_teid,
					     .local_teid = s->teid, .flags = dl_flags };

		err = bearer_add_dl(&a->m, s->ue, &dl);
		if (err == -EADDRINUSE)
			reject_rule(&r, PFCP_CAUSE_RULE_FAILURE, PFCP_RULE_FAR, dl_upd->id);
		else if (err == -E2BIG)
			reject(&r, PFCP_CAUSE_NO_RESOURCES, 0);
		else if (err)
			reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
		if (err)
			goto out;
	} else if (dl_upd && !want_fwd && s->dl_on) {
		struct bearer b;

		if (!bearer_get(&a->m, s->teid, s->ue, true, &b)) {
			s->dl_packets += b.dl_packets;
			s->dl_bytes += b.dl_bytes;
		}
		err = bearer_remove(&a->m, s->teid, s->ue, false, true);
		if (err) {
			reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
			goto out;
		}
	}
	if (dl_upd) {
		s->dl_on = want_fwd;
		s->sgw = sgw;
		s->sgw_teid = sgw_teid;
		s->has_sgw |= dl_upd->has_ohc;
	}
	s->dl_flags = dl_flags;
	if (q) {
		if (q->has_gate)
			s->gate = q->gate;
		if (q->has_mbr) {
			s->mbr_ul = q->mbr_ul;
			s->mbr_dl = q->mbr_dl;
		}
	}
out:
	pfcp_w_hdr(w, PFCP_SESS_MOD_RESP, true, s ? s->cp_seid : 0, m->h.seq);
	w_cause(w, &r);
	stat_add(a, PFCP_STAT_TX(PFCP_SESS_MOD_RESP, r.cause), 1);
}

/* ---- deletion, with the final usage report (TS 29.244 7.5.7.2) ---- */

static void w_usage_report(struct pfcp_w *w, struct sess *s, const struct bearer *b)
{
	__u8 trig[3] = { 0, 0x08, 0 };	/* TERMR: termination report */
	__u8 vol[1 + 6 * 8];
	__u64 v[6] = {
		b->ul_bytes + b->dl_bytes, b->ul_bytes, b->dl_bytes,
		b->ul_packets + b->dl_packets, b->ul_packets, b->dl_packets,
	};
	size_t g;

	vol[0] = 0x3f;	/* TOVOL ULVOL DLVOL TONOP ULNOP DLNOP */
	for (int i = 0; i < 6; i++)
		for (int k = 0; k < 8; k++)
			vol[1 + i * 8 + k] = v[i] >> (56 - 8 * k);
	g = pfcp_w_group_begin(w, PFCP_IE_USAGE_REPORT_SDR);
	pfcp_w_u32(w, PFCP_IE_URR_ID, s->urr_id);
	pfcp_w_u32(w, PFCP_IE_UR_SEQN, s->ur_seqn++);
	pfcp_w_ie(w, PFCP_IE_USAGE_REPORT_TRIGGER, trig, sizeof(trig));
	pfcp_w_ie(w, PFCP_IE_VOLUME_MEASUREMENT, vol, sizeof(vol));
	pfcp_w_group_end(w, g);
}

static void on_sess_del(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w)
{
	struct reply r = { .cause = m->cause, .offending = m->offending_ie };
	struct sess *s = sess_find(a, m->h.seid), copy;
	__u64 cp_seid = s ? s->cp_seid : 0;
	struct bearer b = {};
	bool report = false;

	if (!s)
		reject(&r, PFCP_CAUSE_SESSION_NOT_FOUND, 0);
	if (r.cause == PFCP_CAUSE_ACCEPTED) {
		copy = *s;
		if (sess_delete(a, s, &b))
			reject(&r, PFCP_CAUSE_SYSTEM_FAILURE, 0);
		else
			report = copy.flags & S_URR;
	}
	pfcp_w_hdr(w, PFCP_SESS_DEL_RESP, true, cp_seid, m->h.seq);
	w_cause(w, &r);
	if (report)
		w_usage_report(w, &copy, &b);
	stat_add(a, PFCP_STAT_TX(PFCP_SESS_DEL_RESP, r.cause), 1);
}

/* ---- the answers kept for retransmitted requests ---- */

static struct rcache_ent *rcache_alloc(void)
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
static size_t rcache_answer(struct pfcp_agent *a, const struct sockaddr_in *peer,
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
static void rcache_keep(struct pfcp_agent *a, const struct sockaddr_in *peer,
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

/* ---- dispatch: the (message type -> handler) table ---- */

static const struct {
	__u8 type;
	void (*fn)(struct pfcp_agent *a, const struct pfcp_msg *m, struct pfcp_w *w);
} handlers[] = {
	{ PFCP_HEARTBEAT_REQ, on_heartbeat },
	{ PFCP_ASSOC_SETUP_REQ, on_assoc_setup },
	{ PFCP_ASSOC_UPDATE_REQ, on_assoc_update_release },
	{ PFCP_ASSOC_RELEASE_REQ, on_assoc_update_release },
	{ PFCP_SESS_EST_REQ, on_sess_est },
	{ PFCP_SESS_MOD_REQ, on_sess_mod },
	{ PFCP_SESS_DEL_REQ, on_sess_del },
};

/* Answer one datagram into out; the answer's length, or 0: nothing to send. */
static size_t handle(struct pfcp_agent *a, const __u8 *buf, size_t n,
		     const struct sockaddr_in *peer, __u8 *out)
{
	struct pfcp_msg *m = &a->msg;
	struct pfcp_w w;
	size_t i;
	int err, len;

	err = pfcp_decode(buf, n, m);
	pfcp_w_init(&w, out, RESP_MAX);
	if (err == -EPROTONOSUPPORT) {
		/* TS 29.244 7.6.2: answer with the version we speak, the request's sequence number */
		pfcp_w_hdr(&w, PFCP_VERSION_NOT_SUPPORTED, false, 0, m->h.seq);
		stat_add(a, PFCP_STAT_TX(PFCP_VERSION_NOT_SUPPORTED, 0), 1);
		len = pfcp_w_finish(&w);
		return len > 0 ? len : 0;
	}
	if (err) {
		stat_add(a, PFCP_STAT_DROPPED, 1);
		return 0;
	}
	stat_add(a, PFCP_STAT_RX(m->h.type), 1);
	a->peer = peer;
	if (m->h.type == PFCP_HEARTBEAT_RESP) {
		on_heartbeat_resp(a, m);
		return 0;
	}
	for (i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++)
		if (handlers[i].type == m->h.type)
			break;
	if (i == sizeof(handlers) / sizeof(handlers[0]))
		return 0;	/* a response (heartbeat ...) or a request this UP does not serve */

	len = rcache_answer(a, peer, m, out);
	if (len) {
		stat_add(a, PFCP_STAT_RETRANSMISSIONS, 1);
		return len;
	}
	handlers[i].fn(a, m, &w);
	len = pfcp_w_finish(&w);
	if (len <= 0) {
		fprintf(stderr, "Couldn't encode the answer to %s seq %u\n", pfcp_msg_name(m->h.type),
			m->h.seq);
		return 0;
	}
	rcache_keep(a, peer, m, out, len);
	return len;
}

/* ---- setup and the loop ---- */

static int parse_hostport(const char *s, struct sockaddr_in *sa)
{
	char host[INET_ADDRSTRLEN];
	const char *colon = strrchr(s, ':');
	size_t hl = colon ? (size_t)(colon - s) : strlen(s);
	__u32 port = PFCP_PORT;

	if (hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, hl);
	host[hl] = '\0';
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
		return -EINVAL;
	if (colon && (parse_u32(colon + 1, &port) || port > 65535))
		return -EINVAL;
	sa->sin_port = htons(port);
	return 0;
}

static void shutdown_sessions(struct pfcp_agent *a)
{
	__u32 n = 0;

	if (flock(a->lock_fd, LOCK_EX))
		return;
	for (__u32 i = 0; i < a->max_sess; i++)
		if ((a->sess[i].flags & S_USED) && !sess_delete(a, &a->sess[i], NULL))
			n++;
	flock(a->lock_fd, LOCK_UN);
	if (n)
		printf("pgwu pfcp: removed the %u bearers of its sessions\n", n);
	stat_set(a, PFCP_STAT_SESSIONS, 0);
	stat_set(a, PFCP_STAT_ASSOCIATIONS, 0);
}

/*
 * Path supervision: every --heartbeat seconds a Heartbeat Request to each associated CP. A request
 * still unanswered at the next tick counts as missed (pgwu_pfcp_heartbeats_missed_total) and is
 * replaced by a new one; nothing is torn down (the CP may come back with the same Recovery Time
 * Stamp: its sessions are still valid). Sent outside the PIN_DIR lock.
 */
static void heartbeat_tick(struct pfcp_agent *a)
{
	__u8 buf[64];
	struct pfcp_w w;

	for (int i = 0; i < MAX_ASSOC; i++) {
		struct assoc *as = &a->assoc[i];
		int len;

		if (!as->used)
			continue;
		if (as->hb_wait) {
			as->hb_missed++;
			stat_add(a, PFCP_STAT_HB_MISSED, 1);
			if (as->hb_missed == 3)
				fprintf(stderr, "pgwu pfcp: no heartbeat answer from CP %s for 3 intervals\n",
					inet_ntoa(as->peer.sin_addr));
		}
		a->seq = (a->seq + 1) & 0xffffff;
		pfcp_w_init(&w, buf, sizeof(buf));
		pfcp_w_hdr(&w, PFCP_HEARTBEAT_REQ, false, 0, a->seq);
		pfcp_w_u32(&w, PFCP_IE_RECOVERY_TIME_STAMP, a->rts);
		len = pfcp_w_finish(&w);
		if (len > 0 && sendto(a->sock, buf, len, 0, (struct sockaddr *)&as->peer,
				      sizeof(as->peer)) == len) {
			as->hb_wait = true;
			as->hb_seq = a->seq;
			stat_add(a, PFCP_STAT_TX(PFCP_HEARTBEAT_REQ, 0), 1);
		}
	}
}

/* The id of a map, 0 on error */
static __u32 map_id(int fd)
{
	struct bpf_map_info info = {};
	__u32 len = sizeof(info);

	return bpf_obj_get_info_by_fd(fd, &info, &len) ? 0 : info.id;
}

/* Are the maps this agent writes still the ones pinned in PIN_DIR (pgwu not unloaded/reloaded)? */
static bool still_pinned(__u32 ul_id)
{
	char path[PATH_MAX];
	__u32 id;
	int fd;

	if (pin_path(path, sizeof(path), "ul_bearers"))
		return false;
	fd = bpf_obj_get(path);
	if (fd < 0)
		return false;
	id = map_id(fd);
	close(fd);
	return id == ul_id;
}

static int serve(struct pfcp_agent *a, int sfd, int tfd)
{
	static __u8 in[BATCH][DGRAM_MAX], out[BATCH][RESP_MAX];
	struct mmsghdr rx[BATCH], tx[BATCH];
	struct sockaddr_in peers[BATCH];
	struct iovec riov[BATCH], tiov[BATCH];
	struct pollfd pfd[3] = { { .fd = a->sock, .events = POLLIN }, { .fd = sfd, .events = POLLIN },
				 { .fd = tfd, .events = POLLIN } };
	__u32 ul_id = map_id(a->m.ul);

	for (;;) {
		int n, nt = 0, r;

		r = poll(pfd, tfd >= 0 ? 3 : 2, LOADED_CHECK_MS);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "Couldn't wait for messages: %s\n", strerror(errno));
			return -errno;
		}
		if (r == 0) {
			/* like `pgwu watch`: end when the PGW-U it serves is unloaded (or reloaded) */
			if (!still_pinned(ul_id)) {
				fprintf(stderr, "pgwu pfcp: the bearer tables in %s are gone (pgwu unloaded "
					"or reloaded), exiting\n", pin_dir);
				return -ENOENT;
			}
			continue;
		}
		if (pfd[1].revents) {
			struct signalfd_siginfo si;

			if (read(sfd, &si, sizeof(si)) == sizeof(si))
				printf("pgwu pfcp: signal %u, exiting\n", si.ssi_signo);
			return 0;
		}
		if (tfd >= 0 && pfd[2].revents) {
			__u64 ticks;

			if (read(tfd, &ticks, sizeof(ticks)) == sizeof(ticks))
				heartbeat_tick(a);
		}
		if (!pfd[0].revents)
			continue;
		for (int i = 0; i < BATCH; i++) {
			riov[i] = (struct iovec){ in[i], DGRAM_MAX };
			rx[i].msg_hdr = (struct msghdr){ .msg_name = &peers[i],
				.msg_namelen = sizeof(peers[i]), .msg_iov = &riov[i], .msg_iovlen = 1 };
		}
		n = recvmmsg(a->sock, rx, BATCH, MSG_DONTWAIT, NULL);
		if (n <= 0)
			continue;
		if (flock(a->lock_fd, LOCK_EX)) {
			fprintf(stderr, "Couldn't lock %s: %s\n", pin_dir, strerror(errno));
			return -errno;
		}
		for (int i = 0; i < n; i++) {
			size_t len;

			if (rx[i].msg_hdr.msg_flags & MSG_TRUNC) {
				stat_add(a, PFCP_STAT_DROPPED, 1);
				continue;
			}
			len = handle(a, in[i], rx[i].msg_len, &peers[i], out[nt]);
			if (!len)
				continue;
			tiov[nt] = (struct iovec){ out[nt], len };
			tx[nt].msg_hdr = (struct msghdr){ .msg_name = &peers[i],
				.msg_namelen = sizeof(peers[i]), .msg_iov = &tiov[nt], .msg_iovlen = 1 };
			nt++;
		}
		flock(a->lock_fd, LOCK_UN);
		for (int done = 0; done < nt;) {
			int s = sendmmsg(a->sock, tx + done, nt - done, 0);

			if (s <= 0)
				break;	/* the peer retransmits: UDP, as the spec expects */
			done += s;
		}
	}
}

int do_pfcp(const void *cfg)
{
	static struct pfcp_agent agent;	/* static: its message buffer and tables are large */
	struct pfcp_agent *a = &agent;
	const struct pfcp_opts *o = cfg;
	struct sockaddr_in sa;
	struct pgwu_config c;
	sigset_t mask, old;
	socklen_t salen = sizeof(sa);
	int sfd = -1, tfd = -1, err, one = 1;
	char addr[16], g[16], l[16];
	__u32 cap = 0;

	memset(a, 0, sizeof(*a));
	a->sock = a->lock_fd = a->stats_fd = -1;
	if (parse_hostport(o->listen.s, &sa)) {
		fprintf(stderr, "Invalid --listen '%s': expected IPV4ADDR[:PORT]\n", o->listen.s);
		return -EUSAGE;
	}
	if (o->node_id.set) {
		if (inet_pton(AF_INET, o->node_id.s, &a->node_id.ipv4) == 1) {
			a->node_id.type = PFCP_NODE_IPV4;
		} else {
			__u8 tmp[PFCP_FQDN_MAX];

			a->node_id.type = PFCP_NODE_FQDN;
			if (strlen(o->node_id.s) > PFCP_FQDN_MAX ||
			    pfcp_fqdn_encode(o->node_id.s, tmp, sizeof(tmp)) < 0) {
				fprintf(stderr, "Invalid --node-id '%s': an IPv4 address or an FQDN\n",
					o->node_id.s);
				return -EUSAGE;
			}
			snprintf(a->node_id.fqdn, sizeof(a->node_id.fqdn), "%s", o->node_id.s);
		}
	}
	err = maps_open(&a->m);
	if (err)
		return err;
	err = config_read(a->m.config, &c);
	if (err)
		goto out;
	a->local_addr = c.local_addr;
	if (!a->local_addr) {
		fprintf(stderr, "pgwu has no GTP-U address: set one first (pgwu config --local-addr A); "
			"the agent hands it out in F-TEIDs\n");
		err = -EINVAL;
		goto out;
	}
	a->n4_addr = sa.sin_addr.s_addr ? sa.sin_addr.s_addr : a->local_addr;
	if (!o->node_id.set) {
		a->node_id.type = PFCP_NODE_IPV4;
		a->node_id.ipv4 = a->n4_addr;
	}
	err = map_max_entries(a->m.ul, &cap);
	if (err)
		goto out;
	a->max_sess = o->max_sessions.set && o->max_sessions.v < cap ? o->max_sessions.v : cap;
	a->sess = calloc(a->max_sess, sizeof(*a->sess));
	a->free_idx = malloc((size_t)a->max_sess * sizeof(*a->free_idx));
	a->rcache = rcache_alloc();
	a->ue_mask = pgwu_slots_for(a->max_sess) * 2 - 1;
	a->ue_tab = calloc((size_t)a->ue_mask + 1, sizeof(*a->ue_tab));
	if (!a->sess || !a->free_idx || !a->rcache || !a->ue_tab) {
		err = -ENOMEM;
		fprintf(stderr, "Couldn't allocate %u sessions: %s\n", a->max_sess, strerror(ENOMEM));
		goto out;
	}
	for (__u32 i = 0; i < a->max_sess; i++)
		a->free_idx[i] = a->max_sess - 1 - i;	/* index 0 is handed out first */
	a->n_free = a->max_sess;
	a->next_teid = 1;
	a->rts = (__u32)(time(NULL) + NTP_UNIX_OFFSET);
	a->lock_fd = open(pin_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (a->lock_fd < 0) {
		err = -errno;
		fprintf(stderr, "Couldn't open %s: %s\n", pin_dir, strerror(-err));
		goto out;
	}
	err = stats_open(a);
	if (err)
		goto out;
	stat_set(a, PFCP_STAT_SESSIONS, 0);
	stat_set(a, PFCP_STAT_ASSOCIATIONS, 0);

	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigprocmask(SIG_BLOCK, &mask, &old);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	a->sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sfd < 0 || a->sock < 0) {
		err = -errno;
		fprintf(stderr, "Couldn't create a socket: %s\n", strerror(-err));
		goto out_sig;
	}
	setsockopt(a->sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	one = 4 << 20;
	setsockopt(a->sock, SOL_SOCKET, SO_RCVBUF, &one, sizeof(one));
	if (bind(a->sock, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockname(a->sock, (struct sockaddr *)&sa, &salen)) {
		err = -errno;
		fprintf(stderr, "Couldn't listen on %s: %s\n", o->listen.s, strerror(-err));
		goto out_sig;
	}
	printf("pgwu pfcp: listening on %s:%u, node id %s, GTP-U address %s, up to %u sessions\n",
	       ip_str(sa.sin_addr.s_addr, addr), ntohs(sa.sin_port),
	       a->node_id.type == PFCP_NODE_IPV4 ? ip_str(a->node_id.ipv4, g) : a->node_id.fqdn,
	       ip_str(a->local_addr, l), a->max_sess);
	fflush(stdout);
	a->hb_interval = o->heartbeat.v;
	if (a->hb_interval) {
		struct itimerspec its = { .it_interval = { .tv_sec = a->hb_interval },
					  .it_value = { .tv_sec = a->hb_interval } };

		tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
		if (tfd < 0 || timerfd_settime(tfd, 0, &its, NULL)) {
			err = -errno;
			fprintf(stderr, "Couldn't create the heartbeat timer: %s\n", strerror(-err));
			goto out_sig;
		}
	}
	err = serve(a, sfd, tfd);
	shutdown_sessions(a);
out_sig:
	sigprocmask(SIG_SETMASK, &old, NULL);
out:
	if (sfd >= 0)
		close(sfd);
	if (tfd >= 0)
		close(tfd);
	if (a->sock >= 0)
		close(a->sock);
	if (a->lock_fd >= 0)
		close(a->lock_fd);
	if (a->stats)
		munmap(a->stats, PFCP_STAT_N * 8);
	if (a->stats_fd >= 0)
		close(a->stats_fd);
	free(a->sess);
	free(a->free_idx);
	free(a->rcache);
	free(a->ue_tab);
	maps_close(&a->m);
	return err;
}
