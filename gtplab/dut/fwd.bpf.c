// SPDX-License-Identifier: GPL-2.0
/*
 * The lab's reference DUT: a plain XDP forwarder between the two DUT ports. A frame that arrives
 * on one port gets the other port's MAC as source and the generator's MAC behind it as
 * destination, and is redirected out of it. Nothing else is looked at: it is the least work a
 * DUT can do per packet on this machine, so the PGW-U's NDR divided by this one's says how much
 * of the machine the PGW-U's own work takes (docs/lab.md). User space (gtplab/dut/fwd.py) fills
 * fwd_ports and reads fwd_stats; the program uses the same redirect as the PGW-U (bpf_redirect).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include "fwd.h"

char LICENSE[] SEC("license") = "GPL";

/* Written by user space when the lab is built, read per packet. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FWD_MAX_PORTS);
	__type(key, __u32);
	__type(value, struct fwd_port);
} fwd_ports SEC(".maps");

/* Written per packet (one per reason), read by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FWD_R_MAX);
	__type(key, __u32);
	__type(value, struct fwd_counter);
} fwd_stats SEC(".maps");

SEC("xdp")
int xdp_fwd(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 key = ctx->ingress_ifindex, reason = FWD_R_DROP_SHORT;
	struct fwd_counter *c;
	struct fwd_port *p;
	int verdict = XDP_DROP;

	if ((void *)(eth + 1) > data_end)
		goto out;
	p = bpf_map_lookup_elem(&fwd_ports, &key);
	if (!p) {
		reason = FWD_R_DROP_NO_PORT;
		goto out;
	}
	__builtin_memcpy(eth->h_source, p->src, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, p->dst, ETH_ALEN);
	reason = FWD_R_FWD;
	verdict = bpf_redirect(p->out_ifindex, 0);
out:
	c = bpf_map_lookup_elem(&fwd_stats, &reason);
	if (c) {
		c->packets++;
		c->bytes += data_end - data;
	}
	return verdict;
}
