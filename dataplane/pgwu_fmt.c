// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* pgwu_fmt.c: how pgwu's commands write what they report: addresses, prefixes, JSON strings, a
 * bearer's checksum and QFI settings. */
#include <arpa/inet.h>
#include <stdio.h>
#include "pgwu_fmt.h"
#include "pgwu_maps.h"

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
