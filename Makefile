# SPDX-License-Identifier: GPL-2.0
#
# One file, two roles:
#  - Kbuild, when the kernel build includes it (`make -C $KDIR M=$PWD LLVM=1`);
#  - the developer entry points otherwise (`make run`, `make test`, ...), which build out of
#    tree into $(TEXTPOKE_CACHE) so the source tree stays clean and a second run is incremental.

ifneq ($(KERNELRELEASE),)

# In a kernel tree the options come from Kconfig (./Kconfig); out of tree (`make -C $KDIR M=...`)
# they are make variables, with these defaults, and the configuration symbols the code tests
# are defined here since no autoconf.h has them.
ifneq ($(KBUILD_EXTMOD),)
# Exported: each directory's Kbuild file is read by its own make.
export CONFIG_TEXTPOKE ?= m
export CONFIG_TEXTPOKE_SAMPLES ?= m
ifeq ($(CONFIG_TEXTPOKE_DEBUG_PROTOCOL),y)
ccflags-y += -DCONFIG_TEXTPOKE_DEBUG_PROTOCOL
rustflags-y += --cfg CONFIG_TEXTPOKE_DEBUG_PROTOCOL
endif
# The harness checks' modules (tools/test.sh) exist only out of tree.
obj-m += tools/harness/
endif

obj-$(CONFIG_TEXTPOKE) += textpoke.o
textpoke-y := kernel/textpoke.o kernel/exports.o rust/helpers.o
textpoke-$(CONFIG_X86_64) += arch/x86/helpers.o
# None of textpoke's own C is traced (its Rust has no ftrace sites at all): the trap path calls
# some of it, and the function tracer must never put a guard on the path that handles guards
# (kernel/trap.rs).
ccflags-remove-y += $(CC_FLAGS_FTRACE)
obj-$(CONFIG_TEXTPOKE_SAMPLES) += samples/

else

TEXTPOKE_CACHE ?= $(HOME)/.cache/textpoke
export TEXTPOKE_CACHE
# `make test ARCH=arm64` limits a target to one arch; both by default.
ARCHES := $(if $(filter command line,$(origin ARCH)),$(ARCH),x86_64 arm64)
# `make CLIPPY=1 modules` runs clippy-driver over the Rust modules, as for in-tree code.
export CLIPPY

.PHONY: run test test-debug test-full mutants-guest bench deps deps-test kernel modules clean distclean

## Demo: build what is missing, boot both arches, print the results.
run: deps
	@tools/run.sh $(ARCHES)

## Every test: host tests, guest boots on both arches, harness checks; ends with "N passed, M failed".
test: deps-test
	@tools/test.sh "$(ARCHES)"

## The guest suite and the unload stress on a KASAN + lockdep kernel, per arch; ends with "N passed, M failed".
test-debug: deps-test
	@tools/boots.sh test-debug $(ARCHES)

## The guest suite with all of the kernel's ftracetest cases that change text (hours; in no other target).
test-full: deps-test
	@tools/boots.sh test-full $(ARCHES)

## Each kernel-only mutant built into the guest and booted: its named check must fail (not part of test).
mutants-guest: deps-test
	@tools/mutants-guest.sh

## Benchmarks against the kernel's own mechanisms, measured in the same boot (not part of test).
bench: deps
	@tools/bench.sh $(ARCHES)

# What the demo and the benchmarks need; the tests add cargo-fuzz.
deps:
	@tools/install-deps.sh run

deps-test:
	@tools/install-deps.sh test

kernel: deps
	@for a in $(ARCHES); do tools/kernel.sh $$a >/dev/null || exit 1; done

# tools/modules.sh brings the kernel up to date itself.
modules: deps
	@for a in $(ARCHES); do tools/modules.sh $$a >/dev/null || exit 1; done

## Remove build products (modules, host and guest binaries, initramfs, run logs); keep kernels.
clean:
	rm -rf $(TEXTPOKE_CACHE)/build $(TEXTPOKE_CACHE)/cargo-fuzz $(TEXTPOKE_CACHE)/initramfs* \
		$(TEXTPOKE_CACHE)/runs $(TEXTPOKE_CACHE)/bench target

## Also remove the kernel trees and downloads.
distclean: clean
	rm -rf $(TEXTPOKE_CACHE)

endif
