// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* pgwu_stats.c: `pgwu stats`, the counters by reason and verdict, the events, the bearer counts and
 * usage, the route cache and the reassembler, as a table or as JSON. */
#include <stdio.h>
#include <stdlib.h>
#include "pgwu_cli.h"
#include "pgwu_sock.h"

/* ---- the socket path (pgwu_sock.h): its counters summed over threads, and per thread ---- */

static void sock_totals(const __u64 *w, __u64 *tot)
{
	for (size_t k = 0; k < PGWU_SOCK_THREAD_WORDS; k++)
		tot[k] = 0;
	for (int d = 0; d < 2; d++)
		for (int i = 0; i < (int)w[PGWU_SH_THREADS] && i < PGWU_SOCK_MAX_THREADS; i++) {
			const __u64 *b = pgwu_sock_block(w, d, i);

			for (size_t k = 0; k < PGWU_SOCK_CTR_OFF + PGWU_SC_TID; k++)
				tot[k] += b[k];
		}
}

static bool sock_is_gauge(int c)
{
	return c == PGWU_SC_TID || c == PGWU_SC_CPU || c == PGWU_SC_DIRECTION;
}

static void sock_knobs_json(const __u64 *w)
{
	static const char *const fanouts[] = { "hash", "lb", "cpu", "qm" };

	printf("\"threads_per_direction\": %llu, \"batch\": %llu, \"reuseport\": %s, \"rcvbuf\": %llu, "
	       "\"sndbuf\": %llu, \"busy_poll_us\": %llu, \"prefer_busy_poll\": %s, "
	       "\"busy_poll_budget\": %llu, \"gro\": %s, \"fanout\": \"%s\", \"rt_priority\": %llu",
	       (unsigned long long)w[PGWU_SH_THREADS], (unsigned long long)w[PGWU_SH_BATCH],
	       w[PGWU_SH_REUSEPORT] ? "true" : "false", (unsigned long long)w[PGWU_SH_RCVBUF],
	       (unsigned long long)w[PGWU_SH_SNDBUF], (unsigned long long)w[PGWU_SH_BUSY_POLL],
	       w[PGWU_SH_PREFER_BUSY_POLL] ? "true" : "false",
	       (unsigned long long)w[PGWU_SH_BUSY_POLL_BUDGET], w[PGWU_SH_GRO] ? "true" : "false",
	       fanouts[w[PGWU_SH_FANOUT] & 3], (unsigned long long)w[PGWU_SH_RT_PRIORITY]);
}

static void sock_print_json(const __u64 *w, bool running)
{
	__u64 tot[PGWU_SOCK_THREAD_WORDS];

	if (!w) {
		printf(",\n\"socket\": null");
		return;
	}
	sock_totals(w, tot);
	printf(",\n\"socket\": {\"pid\": %llu, \"running\": %s, \"ticks\": %llu, ",
	       (unsigned long long)w[PGWU_SH_PID], running ? "true" : "false",
	       (unsigned long long)w[PGWU_SH_TICKS]);
	sock_knobs_json(w);
	printf(",\n \"reasons\": {");
	for (int r = 0; r < PGWU_SOCK_REASON_MAX; r++) {
		printf("%s\n  \"%s\": {", r ? "," : "", sock_reason_name(r));
		for (int v = 0; v < PGWU_VERDICT_MAX; v++) {
			const __u64 *c = &tot[(r * PGWU_VERDICT_MAX + v) * 2];

			printf("%s\"%s\": {\"packets\": %llu, \"bytes\": %llu}", v ? ", " : "",
			       pgwu_verdict_names[v], (unsigned long long)c[0], (unsigned long long)c[1]);
		}
		printf("}");
	}
	printf("},\n \"events\": {");
	for (int e = 0; e < PGWU_EVENT_MAX; e++)
		printf("%s\"%s\": %llu", e ? ", " : "", pgwu_event_names[e],
		       (unsigned long long)tot[PGWU_SOCK_EV_OFF + e]);
	printf("},\n \"counters\": {");
	for (int c = 0, first = 1; c < PGWU_SOCK_COUNTER_MAX; c++) {
		if (sock_is_gauge(c))
			continue;
		printf("%s\"%s\": %llu", first ? "" : ", ", pgwu_sock_counter_names[c],
		       (unsigned long long)tot[PGWU_SOCK_CTR_OFF + c]);
		first = 0;
	}
	printf("},\n \"threads\": [");
	for (int d = 0, first = 1; d < 2; d++)
		for (int i = 0; i < (int)w[PGWU_SH_THREADS] && i < PGWU_SOCK_MAX_THREADS; i++) {
			const __u64 *b = pgwu_sock_block(w, d, i);

			printf("%s\n  {\"direction\": \"%s\", \"thread\": %d, \"tid\": %llu, \"cpu\": %lld",
			       first ? "" : ",", d ? "downlink" : "uplink", i,
			       (unsigned long long)b[PGWU_SOCK_CTR_OFF + PGWU_SC_TID],
			       (long long)b[PGWU_SOCK_CTR_OFF + PGWU_SC_CPU]);
			for (int c = 0; c < PGWU_SOCK_COUNTER_MAX; c++)
				if (!sock_is_gauge(c))
					printf(", \"%s\": %llu", pgwu_sock_counter_names[c],
					       (unsigned long long)b[PGWU_SOCK_CTR_OFF + c]);
			printf(", \"reasons\": {");
			for (int r = 0, f2 = 1; r < PGWU_SOCK_REASON_MAX; r++)
				for (int v = 0; v < PGWU_VERDICT_MAX; v++) {
					const __u64 *c = &b[(r * PGWU_VERDICT_MAX + v) * 2];

					if (!c[0])
						continue;
					printf("%s\"%s/%s\": %llu", f2 ? "" : ", ", sock_reason_name(r),
					       pgwu_verdict_names[v], (unsigned long long)c[0]);
					f2 = 0;
				}
			printf("}}");
			first = 0;
		}
	printf("]}");
}

static void sock_print(const __u64 *w, bool running)
{
	__u64 tot[PGWU_SOCK_THREAD_WORDS];

	if (!w)
		return;
	sock_totals(w, tot);
	printf("\nsocket path (pgwu socket): ");
	if (running)
		printf("pid %llu, ", (unsigned long long)w[PGWU_SH_PID]);
	else
		printf("not running (counters of the last run), ");
	printf("%llu thread(s) per direction, batch %llu, %s, rcvbuf %llu, busy poll %llu us, GRO %s\n",
	       (unsigned long long)w[PGWU_SH_THREADS], (unsigned long long)w[PGWU_SH_BATCH],
	       w[PGWU_SH_REUSEPORT] ? "a socket per thread" : "one socket per direction",
	       (unsigned long long)w[PGWU_SH_RCVBUF], (unsigned long long)w[PGWU_SH_BUSY_POLL],
	       w[PGWU_SH_GRO] ? "on" : "off");
	printf("%-22s %-9s %16s %20s\n", "REASON", "VERDICT", "PACKETS", "BYTES");
	for (int r = 0; r < PGWU_SOCK_REASON_MAX; r++)
		for (int v = 0; v < PGWU_VERDICT_MAX; v++) {
			const __u64 *c = &tot[(r * PGWU_VERDICT_MAX + v) * 2];

			if (c[0] || c[1])
				printf("%-22s %-9s %16llu %20llu\n", sock_reason_name(r),
				       pgwu_verdict_names[v], (unsigned long long)c[0],
				       (unsigned long long)c[1]);
		}
	printf("%-9s %6s %4s %8s %14s %14s %12s %12s %12s\n", "DIRECTION", "THREAD", "CPU", "TID",
	       "RX_PACKETS", "SOCK_DROPS", "RX_CALLS", "TX_CALLS", "HASH_LOOKUPS");
	for (int d = 0; d < 2; d++)
		for (int i = 0; i < (int)w[PGWU_SH_THREADS] && i < PGWU_SOCK_MAX_THREADS; i++) {
			const __u64 *c = pgwu_sock_block(w, d, i) + PGWU_SOCK_CTR_OFF;

			printf("%-9s %6d %4lld %8llu %14llu %14llu %12llu %12llu %12llu\n",
			       d ? "downlink" : "uplink", i, (long long)c[PGWU_SC_CPU],
			       (unsigned long long)c[PGWU_SC_TID], (unsigned long long)c[PGWU_SC_RX_PACKETS],
			       (unsigned long long)c[PGWU_SC_SOCK_DROPS],
			       (unsigned long long)c[PGWU_SC_RX_CALLS],
			       (unsigned long long)c[PGWU_SC_TX_CALLS],
			       (unsigned long long)c[PGWU_SC_HASH_LOOKUPS]);
		}
}

static bool bearer_active(const struct bearer *b)
{
	return b->ul_packets || b->dl_packets;
}

static void stats_print_json(const struct pgwu_snapshot *s, const __u64 *ev, bool bearers,
			     const __u64 *sock, bool sock_running)
{
	struct pgwu_counter tot[PGWU_VERDICT_MAX] = {};
	const struct bearer_table *t = &s->bearers;
	bool first = true;

	printf("{\"reasons\": {");
	for (int r = 0; r < PGWU_REASON_MAX; r++) {
		printf("%s\n  \"%s\": {", r ? "," : "", pgwu_reason_names[r]);
		for (int v = 0; v < PGWU_VERDICT_MAX; v++) {
			const struct pgwu_counter *c = &s->stats[r * PGWU_VERDICT_MAX + v];

			printf("%s\"%s\": {\"packets\": %llu, \"bytes\": %llu}", v ? ", " : "",
			       pgwu_verdict_names[v], (unsigned long long)c->packets,
			       (unsigned long long)c->bytes);
			tot[v].packets += c->packets;
			tot[v].bytes += c->bytes;
		}
		printf("}");
	}
	printf("\n},\n\"verdicts\": {");
	for (int v = 0; v < PGWU_VERDICT_MAX; v++)
		printf("%s\"%s\": {\"packets\": %llu, \"bytes\": %llu}", v ? ", " : "",
		       pgwu_verdict_names[v], (unsigned long long)tot[v].packets,
		       (unsigned long long)tot[v].bytes);
	printf("},\n\"bearers\": {\"uplink\": %zu, \"downlink\": %zu, \"capacity\": %u, "
	       "\"usage\": {\"uplink\": {\"packets\": %llu, \"bytes\": %llu}, "
	       "\"downlink\": {\"packets\": %llu, \"bytes\": %llu}}},\n",
	       t->n_ul, t->n_dl, t->cap_ul < t->cap_dl ? t->cap_ul : t->cap_dl,
	       (unsigned long long)s->ul_packets, (unsigned long long)s->ul_bytes,
	       (unsigned long long)s->dl_packets, (unsigned long long)s->dl_bytes);
	printf("\"events\": {");
	for (int e = 0; e < PGWU_EVENT_MAX; e++)
		printf("%s\"%s\": %llu", e ? ", " : "", pgwu_event_names[e], (unsigned long long)ev[e]);
	printf("},\n");
	printf("\"fib_generation\": %llu, \"fib_watcher_pid\": %llu", (unsigned long long)s->fib_gen,
	       (unsigned long long)s->fib_watcher);
	printf(",\n\"reassembler\": {\"pid\": %llu", (unsigned long long)s->reasm_pid);
	for (int i = 0; i < PGWU_RA_MAX; i++)
		printf(", \"%s\": %llu", pgwu_reasm_names[i], (unsigned long long)s->reasm[i]);
	printf("}");
	sock_print_json(sock, sock_running);
	if (bearers) {
		printf(",\n\"active_bearers\": [");
		for (size_t i = 0; i < t->n; i++) {
			if (!bearer_active(&t->b[i]))
				continue;
			printf(first ? "\n  " : ",\n  ");
			bearer_print_json(stdout, &t->b[i]);
			first = false;
		}
		printf("\n]");
	}
	printf("}\n");
}

static void stats_print(const struct pgwu_snapshot *s, const __u64 *ev, bool bearers,
			const __u64 *sock, bool sock_running)
{
	struct pgwu_counter tot[PGWU_VERDICT_MAX] = {};
	const struct bearer_table *t = &s->bearers;

	printf("%-22s %-9s %16s %20s\n", "REASON", "VERDICT", "PACKETS", "BYTES");
	for (int r = 0; r < PGWU_REASON_MAX; r++) {
		for (int v = 0; v < PGWU_VERDICT_MAX; v++) {
			const struct pgwu_counter *c = &s->stats[r * PGWU_VERDICT_MAX + v];

			tot[v].packets += c->packets;
			tot[v].bytes += c->bytes;
			if (!c->packets && !c->bytes)
				continue;
			printf("%-22s %-9s %16llu %20llu\n", pgwu_reason_names[r],
			       pgwu_verdict_names[v], (unsigned long long)c->packets,
			       (unsigned long long)c->bytes);
		}
	}
	printf("\n%-32s %16s %20s\n", "TOTAL BY VERDICT", "PACKETS", "BYTES");
	for (int v = 0; v < PGWU_VERDICT_MAX; v++)
		printf("%-32s %16llu %20llu\n", pgwu_verdict_names[v],
		       (unsigned long long)tot[v].packets, (unsigned long long)tot[v].bytes);
	printf("\n%-32s %16s\n", "EVENT", "COUNT");
	for (int e = 0; e < PGWU_EVENT_MAX; e++)
		printf("%-32s %16llu\n", pgwu_event_names[e], (unsigned long long)ev[e]);
	printf("\nbearers: %zu uplink, %zu downlink, capacity %u\n", t->n_ul, t->n_dl,
	       t->cap_ul < t->cap_dl ? t->cap_ul : t->cap_dl);
	printf("bearer usage: uplink %llu packets %llu bytes, downlink %llu packets %llu bytes\n",
	       (unsigned long long)s->ul_packets, (unsigned long long)s->ul_bytes,
	       (unsigned long long)s->dl_packets, (unsigned long long)s->dl_bytes);
	printf("FIB generation: %llu, watcher: %s", (unsigned long long)s->fib_gen,
	       s->fib_watcher ? "pid " : "none (the cache is unused)");
	if (s->fib_watcher)
		printf("%llu", (unsigned long long)s->fib_watcher);
	printf("\n");
	printf("\nreassembler (outer fragments): ");
	if (s->reasm_pid)
		printf("pgwu reassemble pid %llu\n", (unsigned long long)s->reasm_pid);
	else
		printf("none (outer fragments are dropped)\n");
	for (int i = 0; i < PGWU_RA_MAX; i++)
		if (i < 2 || s->reasm[i])	/* received and forwarded always, drops when any */
			printf("  %-30s %16llu\n", pgwu_reasm_names[i], (unsigned long long)s->reasm[i]);
	sock_print(sock, sock_running);
	if (!bearers)
		return;
	printf("\nactive bearers:\n");
	bearer_print_header(stdout);
	for (size_t i = 0; i < t->n; i++)
		if (bearer_active(&t->b[i]))
			bearer_print_row(stdout, &t->b[i]);
}

int do_stats(const void *cfg)
{
	const struct stats_opts *o = cfg;
	__u64 ev[PGWU_EVENT_MAX], *sock = NULL;
	struct pgwu_snapshot s;
	bool running;
	int err;

	err = snapshot_read(&s);
	if (err)
		return err;
	err = events_read(ev);
	if (!err)
		err = sock_stats_read(&sock, &running);
	if (err) {
		snapshot_free(&s);
		return err;
	}
	if (o->json.set)
		stats_print_json(&s, ev, o->bearers.set, sock, running);
	else
		stats_print(&s, ev, o->bearers.set, sock, running);
	free(sock);
	snapshot_free(&s);
	return 0;
}
