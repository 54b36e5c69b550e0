// SPDX-License-Identifier: GPL-2.0
/*
 * Drop the IPv4 packets to one prefix, and optionally the IPv6 packets to another (at most a /64),
 * at tc ingress (tcx); let everything else go on.
 *
 * The socket-path lab puts it on SGi with the UE pool and the UEs' IPv6 range (gtplab/lab/topology.py,
 * docs/socket.md):
 * `pgwu socket`'s packet socket, a tap, has its copy by then, and the kernel's own stack never
 * sees those packets. At tcx ingress skb->data is at the Ethernet header and any VLAN tag is
 * already taken off. User space (gtplab.kernel.bpf.tc_drop_dst_prog) sets the prefix in rodata
 * before load, network byte order: the verifier then sees constants, as in the hand-assembled
 * program this replaces.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "GPL";

/* The one variable of .rodata (user space writes it whole at offset 0). */
const volatile struct {
	__u32 net;	/* the prefix's address, network byte order */
	__u32 mask;	/* its netmask, network byte order */
	__u64 net6;	/* the IPv6 prefix's first 8 octets, as in the packet */
	__u64 mask6;	/* its netmask's first 8 octets */
	__u32 has6;	/* 0: IPv6 is let go on, whatever its destination */
	__u32 pad;
} tc_drop_cfg = {};

SEC("tc")
int tc_drop_dst(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	int verdict = TC_ACT_OK;

	if (tc_drop_cfg.has6 && (void *)(eth + 1) <= data_end && eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + sizeof(*eth);
		__u64 d;

		if ((void *)(ip6 + 1) > data_end)
			goto out;
		__builtin_memcpy(&d, &ip6->daddr, 8);
		if ((d & tc_drop_cfg.mask6) == tc_drop_cfg.net6)
			verdict = TC_ACT_SHOT;
		goto out;
	}
	/* Ethernet and a minimal IPv4 header (no IHL check: only daddr is read) */
	if ((void *)(ip + 1) > data_end)
		goto out;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		goto out;
	if ((ip->daddr & tc_drop_cfg.mask) == tc_drop_cfg.net)
		verdict = TC_ACT_SHOT;
out:
	return verdict;
}
