/* Prints what include/gtpu.h makes of the GTP-U extension header list, for
 * tests/dataplane/test_ext_list.py: "known T" for each type ext_known() takes, then "ie B B ..." for
 * the Extension Header Type List IE both paths put in a Supported Extension Headers Notification,
 * then "msg T" for each message type gtpu_msg_handled() takes, "sig T R" for each type both paths
 * count under reason R once consumed (gtpu_sig_reason), and "errind K R TEID ADDR" for the Error
 * Indication IEs of case K (gtpu_err_ind_ies: R its result, the sender being 0x0a0b0c0d). */
#include <stdio.h>
#include "gtpu.h"

int main(void)
{
	__u8 ie[GTPU_EXT_LIST_IE_LEN + 1];
	int t, i;

	for (t = 0; t < 256; t++)
		if (ext_known((__u8)t))
			printf("known %d\n", t);
	ie[GTPU_EXT_LIST_IE_LEN] = 0xee;	/* nothing written past the IE */
	gtpu_ext_list_ie(ie);
	printf("ie");
	for (i = 0; i <= GTPU_EXT_LIST_IE_LEN; i++)
		printf(" %d", ie[i]);
	printf("\n");
	for (t = 0; t < 256; t++)
		if (gtpu_msg_handled((__u8)t))
			printf("msg %d\n", t);
	for (t = 0; t < 256; t++)
		if (gtpu_sig_reason((__u8)t))
			printf("sig %d %u\n", t, gtpu_sig_reason((__u8)t));
	{
		/* 0: both IEs, IPv4 peer 1.2.3.4; 1: TEID Data I only; 2: the peer address is IPv6;
		 * 3: cut inside TEID Data I; 4: another IE first */
		static const __u8 ies[][24] = {
			{ 16, 0, 0, 0, 7, 133, 0, 4, 1, 2, 3, 4 },
			{ 16, 0, 0, 0, 7 },
			{ 16, 0, 0, 0, 7, 133, 0, 16, 0x20, 1 },
			{ 16, 0, 0, 0, 7 },
			{ 14, 5, 16, 0, 0, 0, 7 },
		};
		static const int lens[] = { 12, 5, 24, 4, 7 };

		for (i = 0; i < 5; i++) {
			__be32 teid = 0, addr = 0;
			int r = gtpu_err_ind_ies(ies[i], ies[i] + lens[i], ies[i] + lens[i],
						 htonl(0x0a0b0c0d), &teid, &addr);

			printf("errind %d %d %u %u\n", i, r, ntohl(teid), ntohl(addr));
		}
	}
	return 0;
}
