// SPDX-License-Identifier: GPL-2.0
/*
 * The kprobe blacklist entry of the arm64 trap hook (arch/arm64/trap.rs): a kprobe there
 * would recurse.
 */

#include <linux/kprobes.h>

struct pt_regs;
int textpoke_arm64_brk_hook(struct pt_regs *regs, unsigned long esr);
NOKPROBE_SYMBOL(textpoke_arm64_brk_hook);
