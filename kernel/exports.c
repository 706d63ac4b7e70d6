// SPDX-License-Identifier: GPL-2.0
/*
 * What Rust cannot express in a 6.12 module: exporting the C API (implemented
 * in kernel/api.rs), the debug module parameter, and the kprobe blacklist
 * entries for the trap path.
 */

#include <linux/kprobes.h>
#include <linux/module.h>
#include <linux/moduleparam.h>

#include "textpoke.h"

EXPORT_SYMBOL_GPL(textpoke_encode);
EXPORT_SYMBOL_GPL(textpoke_register_site);
EXPORT_SYMBOL_GPL(textpoke_unregister_site);
EXPORT_SYMBOL_GPL(textpoke_batch_begin);
EXPORT_SYMBOL_GPL(textpoke_batch_add);
EXPORT_SYMBOL_GPL(textpoke_batch_commit);
EXPORT_SYMBOL_GPL(textpoke_batch_stats);
EXPORT_SYMBOL_GPL(textpoke_batch_end);
EXPORT_SYMBOL_GPL(textpoke_cpu_traps);

/*
 * DEBUG ONLY: deliberately break the protocol, so that the guest's ordering
 * checker can be shown to catch a broken engine under the same load the
 * correct one passes. Read once per batch; every batch that uses it says so.
 */
int textpoke_debug_protocol;
module_param_named(debug_protocol, textpoke_debug_protocol, int, 0600);
MODULE_PARM_DESC(debug_protocol,
		 "DEBUG ONLY, breaks the guarantees: 0 guarded (default), 1 record before the guard sync, 2 no sync between tails and first bytes (x86), 3 unguarded nosync writes");

/* The trap hooks must never be probed: a kprobe there would recurse. */
#ifdef CONFIG_X86
int textpoke_x86_int3_notify(struct notifier_block *nb, unsigned long val, void *data);
NOKPROBE_SYMBOL(textpoke_x86_int3_notify);
#endif
#ifdef CONFIG_ARM64
struct pt_regs;
int textpoke_arm64_brk_hook(struct pt_regs *regs, unsigned long esr);
NOKPROBE_SYMBOL(textpoke_arm64_brk_hook);
#endif
