# SPDX-License-Identifier: GPL-2.0
# Shared build rules for gtplab's C components (as xdp-tools' lib/common.mk). A component's
# Makefile sets
#   BPF_OBJS        = foo.bpf.o ...  (BPF programs; each also gets a foo.skel.h from bpftool)
#   USER_TARGETS    = foo ...        (user-space programs, built from foo.c with foo.skel.h)
#   USER_EXTRA_SRCS = ...            (more sources linked into each user-space program)
#   INCLUDE_DIRS    = include ...    (its own header folders, besides its own folder)
# and then includes this file (include ../lib/common.mk). Nothing else belongs in a component's
# Makefile. Every component also builds against lib/include/, the headers they share (csum.h).

CLANG ?= clang
BPFTOOL ?= bpftool
CC ?= cc

LIB_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
ARCH := $(shell uname -m | sed 's/x86_64/x86/;s/aarch64/arm64/')

# -I for the multiarch asm/ headers: with -target bpf clang does not look there itself.
INCLUDES := -I. $(addprefix -I,$(INCLUDE_DIRS)) -I$(LIB_DIR)/include
BPF_CFLAGS ?= -O2 -g -Wall -Wno-unused-function -target bpf -mcpu=v3 -D__TARGET_ARCH_$(ARCH) \
	$(if $(MULTIARCH),-I/usr/include/$(MULTIARCH))
CFLAGS ?= -O2 -g -Wall -Wextra -Wno-unused-parameter
LDLIBS ?= $(shell pkg-config --libs libbpf 2>/dev/null || echo -lbpf) -lelf -lz

BPF_HDRS := $(filter-out %.skel.h,$(wildcard *.h $(addsuffix /*.h,$(INCLUDE_DIRS)) $(LIB_DIR)/include/*.h))
SKELS := $(BPF_OBJS:.bpf.o=.skel.h)

all: $(BPF_OBJS) $(SKELS) $(USER_TARGETS)

%.bpf.o: %.bpf.c $(BPF_HDRS)
	$(CLANG) $(BPF_CFLAGS) $(INCLUDES) -c $< -o $@

%.skel.h: %.bpf.o
	$(BPFTOOL) gen skeleton $< > $@.tmp && mv $@.tmp $@

$(USER_TARGETS): %: %.c $(SKELS) $(BPF_HDRS) $(USER_EXTRA_SRCS)
	$(CC) $(CFLAGS) $(INCLUDES) $< $(USER_EXTRA_SRCS) -o $@ $(LDLIBS)

# Fuzz targets (optional: `make fuzz`): a component sets FUZZ_TARGETS = fuzz/foo_fuzz and
# FUZZ_SRCS = the parser's sources; each is a libFuzzer binary with ASan and UBSan.
FUZZ_CFLAGS ?= -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined

fuzz: $(FUZZ_TARGETS)

fuzz/%_fuzz: fuzz/%_fuzz.c $(FUZZ_SRCS) $(BPF_HDRS)
	$(CLANG) $(FUZZ_CFLAGS) $(INCLUDES) $< $(FUZZ_SRCS) -o $@

clean:
	rm -f *.o *.skel.h *.tmp $(USER_TARGETS) $(FUZZ_TARGETS)

.PHONY: all clean fuzz
.DELETE_ON_ERROR:
