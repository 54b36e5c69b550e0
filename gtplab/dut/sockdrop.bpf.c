// SPDX-License-Identifier: GPL-2.0
/*
 * The socket-path PGW-U's socket-buffer drops counted per G-PDU, for UDP GRO (docs/socket.md).
 *
 * With UDP_GRO on a socket the kernel merges G-PDUs of one flow into one datagram (one skb, its
 * skb_shinfo()->gso_segs the G-PDUs in it); when the socket's buffer is full it drops the merged
 * datagram whole and counts it once: Udp RcvbufErrors and the socket's drop counter (sk_drops,
 * the "drops" column of /proc/net/udp, SO_MEMINFO) go up by one (kernel 6.18:
 * __udp_queue_rcv_skb, udp_drops_inc; measured the same). This program runs where the kernel
 * frees such a datagram (tracepoint skb:kfree_skb, reason SKB_DROP_REASON_SOCKET_RCVBUFF, the
 * socket it was for in rx_sk) and counts, for the UDP sockets on one port in one network
 * namespace, the datagrams and the G-PDUs in them (max(1, gso_segs): a datagram GRO did not touch
 * has gso_segs 0). User space (gtplab/dut/sockdrop.py) writes sockdrop_cfg and reads
 * sockdrop_counts. Nothing here is read per packet but the kfree_skb of a drop.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

/* The kernel's types, only the fields read (CO-RE: their offsets come from the running kernel's
 * BTF when the object is loaded, so the object is not built for one kernel). */
struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net {
	struct ns_common ns;
} __attribute__((preserve_access_index));

typedef struct {
	struct net *net;
} __attribute__((preserve_access_index)) possible_net_t;

struct sock_common {
	unsigned short skc_num;
	possible_net_t skc_net;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
} __attribute__((preserve_access_index));

struct sk_buff {
	unsigned char *head;
	unsigned int end;		/* an offset from head on 64-bit kernels (sk_buff_data_t) */
} __attribute__((preserve_access_index));

struct skb_shared_info {
	unsigned short gso_segs;
} __attribute__((preserve_access_index));

enum skb_drop_reason {
	SKB_DROP_REASON_SOCKET_RCVBUFF = 6,	/* the value on 6.18; relocated to the kernel's own */
};

struct sockdrop_cfg {
	__u32 netns_ino;		/* the network namespace's inode (ls -iL /run/netns/NAME) */
	__u32 port;			/* the sockets' local port (2152) */
};

enum { SOCKDROP_DATAGRAMS, SOCKDROP_SEGMENTS, SOCKDROP_MAX };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sockdrop_cfg);
} sockdrop_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SOCKDROP_MAX);
	__type(key, __u32);
	__type(value, __u64);
} sockdrop_counts SEC(".maps");

SEC("tp_btf/kfree_skb")
int BPF_PROG(sockdrop_kfree_skb, struct sk_buff *skb, void *location, enum skb_drop_reason reason,
	     struct sock *rx_sk)
{
	struct skb_shared_info *shinfo;
	struct sockdrop_cfg *cfg;
	__u32 k0 = 0, k1 = SOCKDROP_SEGMENTS;
	__u16 segs = 0;
	__u64 *c;

	if (reason != bpf_core_enum_value(enum skb_drop_reason, SKB_DROP_REASON_SOCKET_RCVBUFF) || !rx_sk)
		return 0;
	cfg = bpf_map_lookup_elem(&sockdrop_cfg, &k0);
	if (!cfg || !cfg->netns_ino)
		return 0;
	if (BPF_CORE_READ(rx_sk, __sk_common.skc_num) != cfg->port ||
	    BPF_CORE_READ(rx_sk, __sk_common.skc_net.net, ns.inum) != cfg->netns_ino)
		return 0;
	shinfo = (void *)(BPF_CORE_READ(skb, head) + BPF_CORE_READ(skb, end));
	segs = BPF_CORE_READ(shinfo, gso_segs);
	c = bpf_map_lookup_elem(&sockdrop_counts, &k0);
	if (c)
		__sync_fetch_and_add(c, 1);
	c = bpf_map_lookup_elem(&sockdrop_counts, &k1);
	if (c)
		__sync_fetch_and_add(c, segs > 1 ? segs : 1);
	return 0;
}
