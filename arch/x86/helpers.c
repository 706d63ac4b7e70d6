// SPDX-License-Identifier: GPL-2.0
/*
 * x86 C shims for what Rust cannot call directly (static inline functions and macros), and
 * the kprobe blacklist entries of the x86 trap hook. One-line forwarders, no logic of their
 * own: arch/x86/trap.rs and text.rs document the contracts.
 */

#include <linux/kdebug.h>
#include <linux/kprobes.h>
#include <linux/ptrace.h>
#include <asm/sync_core.h>

struct pt_regs *textpoke_x86_kernel_int3_regs(unsigned long val, void *data);
void textpoke_x86_sync_core(void);
int textpoke_x86_int3_notify(struct notifier_block *nb, unsigned long val, void *data);

/*
 * The registers of a kernel-mode INT3 reported to a die notifier, or NULL for any other
 * notification (other die events, or INT3 from user mode, which uprobes owns).
 */
struct pt_regs *textpoke_x86_kernel_int3_regs(unsigned long val, void *data)
{
	struct die_args *args = data;

	if (val != DIE_INT3 || user_mode(args->regs))
		return NULL;
	return args->regs;
}

void textpoke_x86_sync_core(void)
{
	sync_core();
}

/* The trap path must never be probed: a kprobe there would recurse. */
NOKPROBE_SYMBOL(textpoke_x86_kernel_int3_regs);
NOKPROBE_SYMBOL(textpoke_x86_int3_notify);
