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

else

TEXTPOKE_CACHE ?= $(HOME)/.cache/textpoke
export TEXTPOKE_CACHE
ARCH ?= x86_64
ARCHES := $(if $(filter command line,$(origin ARCH)),$(ARCH),x86_64 arm64)

.PHONY: deps kernel modules

deps:
	@tools/install-deps.sh

kernel: deps
	@for a in $(ARCHES); do tools/kernel.sh $$a >/dev/null || exit 1; done

modules: kernel
	@for a in $(ARCHES); do tools/modules.sh $$a || exit 1; done

endif
