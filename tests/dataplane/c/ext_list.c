/* Prints what include/gtpu.h makes of the GTP-U extension header list, for
 * tests/dataplane/test_ext_list.py: "known T" for each type ext_known() takes, then "ie B B ..." for
 * the Extension Header Type List IE both paths put in a Supported Extension Headers Notification,
 * then "msg T" for each message type gtpu_msg_handled() takes. */
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
	return 0;
}
