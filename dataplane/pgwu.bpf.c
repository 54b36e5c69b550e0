// SPDX-License-Identifier: GPL-2.0
/* placeholder while the real program is written */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "maps.h"

SEC("xdp")
int xdp_access(struct xdp_md *ctx)
{
	__u32 k = 0;
	struct pgwu_config *c = bpf_map_lookup_elem(&config, &k);
	if (c && bpf_map_lookup_elem(&ul_bearers, &k) && bpf_map_lookup_elem(&fib_cache, &k) &&
	    bpf_map_lookup_elem(&fib_gen, &k) && bpf_map_lookup_elem(&stats, &k) && bpf_map_lookup_elem(&ip_id, &k))
		return XDP_DROP;
	return XDP_PASS;
}

SEC("xdp")
int xdp_sgi(struct xdp_md *ctx)
{
	__u32 k = 0;
	if (bpf_map_lookup_elem(&dl_bearers, &k))
		return XDP_DROP;
	return XDP_PASS;
}

SEC("fentry/rt_cache_flush")
int BPF_PROG(fib_gen_rt_flush)
{
	__u32 k = 0;
	__u64 *g = bpf_map_lookup_elem(&fib_gen, &k);
	if (g)
		__sync_fetch_and_add(g, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
