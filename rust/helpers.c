// SPDX-License-Identifier: GPL-2.0
/*
 * C shims for what Rust cannot call directly: static inline functions and macros.
 *
 * Like the kernel's own rust/helpers, each is a one-line forwarder with no logic of its own;
 * the Rust wrappers in this directory document the contracts. They are linked into every
 * textpoke module that needs them (samples include this file), so none is exported.
 */

#include <linux/cpuhplock.h>
#include <linux/kprobes.h>
#include <linux/preempt.h>
#include <linux/ptrace.h>
#include <linux/sched.h>
#include <linux/sched/clock.h>
#include <linux/smp.h>

#include "helpers.h"

#ifdef CONFIG_X86
#include <linux/kdebug.h>
#include <asm/sync_core.h>
#endif

unsigned int textpoke_helper_cpu(void)
{
	return raw_smp_processor_id();
}
/* Called from textpoke's trap hooks, which must never recurse into a kprobe. */
NOKPROBE_SYMBOL(textpoke_helper_cpu);

u64 textpoke_helper_local_clock(void)
{
	return local_clock();
}

void textpoke_helper_cond_resched(void)
{
	cond_resched();
}

void textpoke_helper_cpus_read_lock(void)
{
	cpus_read_lock();
}

void textpoke_helper_cpus_read_unlock(void)
{
	cpus_read_unlock();
}

void textpoke_helper_preempt_disable(void)
{
	preempt_disable();
}

void textpoke_helper_preempt_enable(void)
{
	preempt_enable();
}

#ifdef CONFIG_X86
/*
 * The registers of a kernel-mode INT3 reported to a die notifier, or NULL for any other
 * notification (other die events, or INT3 from user mode, which uprobes owns).
 */
struct pt_regs *textpoke_helper_kernel_int3_regs(unsigned long val, void *data)
{
	struct die_args *args = data;

	if (val != DIE_INT3 || user_mode(args->regs))
		return NULL;
	return args->regs;
}
NOKPROBE_SYMBOL(textpoke_helper_kernel_int3_regs);

void textpoke_helper_sync_core(void)
{
	sync_core();
}
#endif
