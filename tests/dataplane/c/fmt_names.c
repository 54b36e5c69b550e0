// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* fmt_names.c: every name table of dataplane/pgwu_fmt.c, index by index, as "table index name"
 * ("(NULL)" for a slot without a name). tests/dataplane/test_fmt_names.py builds it against
 * pgwu_fmt.c and compares each line with the enumerator of that index in pgwu.h / pgwu_sock.h. */
#include <stdio.h>
#include "pgwu_fmt.h"
#include "pgwu_sock.h"

#define DUMP(tbl, n)                                                                       \
	for (int i = 0; i < (int)(n); i++)                                                 \
		printf("%s %d %s\n", #tbl, i, tbl[i] ? tbl[i] : "(NULL)");

int main(void)
{
	DUMP(pgwu_reason_names, PGWU_REASON_MAX)
	DUMP(pgwu_verdict_names, PGWU_VERDICT_MAX)
	DUMP(pgwu_event_names, PGWU_EVENT_MAX)
	DUMP(pgwu_reasm_names, PGWU_RA_MAX)
	DUMP(pgwu_sock_reason_names, PGWU_SOCK_REASON_MAX - PGWU_REASON_MAX)
	DUMP(pgwu_sock_counter_names, PGWU_SOCK_COUNTER_MAX)
	return 0;
}
