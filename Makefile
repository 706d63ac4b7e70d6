# SPDX-License-Identifier: GPL-2.0
#
# One file, two roles:
#  - Kbuild, when the kernel build includes it (`make -C $KDIR M=$PWD LLVM=1`);
#  - the developer entry points otherwise (`make run`, `make test`, ...), which build out of
#    tree into $(TEXTPOKE_CACHE) so the source tree stays clean and a second run is incremental.

ifneq ($(KERNELRELEASE),)

obj-m += textpoke.o
textpoke-y := kernel/textpoke.o kernel/exports.o rust/helpers.o
obj-m += samples/
obj-m += tools/harness/

else

TEXTPOKE_CACHE ?= $(HOME)/.cache/textpoke
export TEXTPOKE_CACHE
# `make test ARCH=arm64` limits a target to one arch; both by default.
ARCHES := $(if $(filter command line,$(origin ARCH)),$(ARCH),x86_64 arm64)
# `make CLIPPY=1 modules` runs clippy-driver over the Rust modules, as for in-tree code.
export CLIPPY

.PHONY: run test bench deps kernel modules clean distclean

## Demo: build what is missing, boot both arches, print the results.
run: deps
	@tools/run.sh $(ARCHES)

## Every test: host tests, guest boots on both arches, harness checks; ends with "N passed, M failed".
test: deps
	@tools/test.sh "$(ARCHES)"

## Benchmarks against the kernel's own mechanisms, measured in the same boot (not part of test).
bench: deps
	@tools/bench.sh $(ARCHES)

deps:
	@tools/install-deps.sh

kernel: deps
	@for a in $(ARCHES); do tools/kernel.sh $$a >/dev/null || exit 1; done

# tools/modules.sh brings the kernel up to date itself.
modules: deps
	@for a in $(ARCHES); do tools/modules.sh $$a >/dev/null || exit 1; done

## Remove build products (modules, host and guest binaries, initramfs, run logs); keep kernels.
clean:
	rm -rf $(TEXTPOKE_CACHE)/modules $(TEXTPOKE_CACHE)/cargo-* $(TEXTPOKE_CACHE)/initramfs* \
		$(TEXTPOKE_CACHE)/runs $(TEXTPOKE_CACHE)/bench target

## Also remove the kernel trees and downloads.
distclean: clean
	rm -rf $(TEXTPOKE_CACHE)

endif
