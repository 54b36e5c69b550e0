// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* pgwu_stats.c: `pgwu stats`, the counters by reason and verdict, the events, the bearer counts and
 * usage, the route cache and the reassembler, as a table or as JSON. */
#include <stdio.h>
#include "pgwu_cli.h"

static bool bearer_active(const struct bearer *b)
{
	return b->ul_packets || b->dl_packets;
}

static void stats_print_json(const struct pgwu_snapshot *s, const __u64 *ev, bool bearers)
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

static void stats_print(const struct pgwu_snapshot *s, const __u64 *ev, bool bearers)
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
	__u64 ev[PGWU_EVENT_MAX];
	struct pgwu_snapshot s;
	int err;

	err = snapshot_read(&s);
	if (err)
		return err;
	err = events_read(ev);
	if (err) {
		snapshot_free(&s);
		return err;
	}
	if (o->json.set)
		stats_print_json(&s, ev, o->bearers.set);
	else
		stats_print(&s, ev, o->bearers.set);
	snapshot_free(&s);
	return 0;
}
