/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * What lets the plain-C headers (parsing.h, csum.h, gtpu.h) build for both sides: in the BPF
 * object (clang -target bpf defines __bpf__) they get libbpf's helpers; in user space (pgwu
 * reassemble runs the same G-PDU checks on reassembled datagrams) only what they use of them.
 */
#ifndef PGWU_COMPAT_H
#define PGWU_COMPAT_H

#ifdef __bpf__
#include <bpf/bpf_helpers.h>
#else
#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif
#endif
#include <bpf/bpf_endian.h>

#endif /* PGWU_COMPAT_H */
