// SPDX-License-Identifier: GPL-2.0
/*
 * C shims for what Rust cannot call directly: static inline functions and macros.
 *
 * Like the kernel's own rust/helpers, each is a one-line forwarder with no logic of its own;
 * the Rust wrappers in this directory document the contracts. They are linked into every
 * textpoke module that needs them (samples include this file), so none is exported.
 */

#include <linux/cpuhplock.h>
#include <linux/irqflags.h>
#include <linux/uaccess.h>
#include <linux/kprobes.h>
#include <linux/rcupdate.h>
#include <linux/preempt.h>
#include <linux/processor.h>
#include <linux/sched.h>
#include <linux/sched/clock.h>
#include <linux/smp.h>

#include "helpers.h"

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

/*
 * Also a quiescent state for RCU Tasks: the callers are long loops in module code (executors,
 * pokers, a batch), never inside a trampoline, and on a preemptible kernel booted with
 * preempt=none a plain cond_resched() is not one. Without it an executor spinning on every CPU
 * held up synchronize_rcu_tasks() (a kprobe's unregistration) for good (x86 KASAN boot).
 */
void textpoke_helper_cond_resched(void)
{
	cond_resched_tasks_rcu_qs();
}

void textpoke_helper_cpus_read_lock(void)
{
	cpus_read_lock();
}

void textpoke_helper_cpus_read_unlock(void)
{
	cpus_read_unlock();
}

void textpoke_helper_cpu_relax(void)
{
	cpu_relax();
}

void textpoke_helper_preempt_disable(void)
{
	preempt_disable();
}

void textpoke_helper_preempt_enable(void)
{
	preempt_enable();
}

unsigned long textpoke_helper_irq_save(void)
{
	unsigned long flags;

	local_irq_save(flags);
	return flags;
}

void textpoke_helper_irq_restore(unsigned long flags)
{
	local_irq_restore(flags);
}

/*
 * copy_from_kernel_nofault() for the trap path: the same fault-tolerant loads, inlined here
 * (__get_kernel_nofault() with exception-table fixups) so that nothing the handler calls can be
 * kprobed. Returns 0, or -EFAULT if any byte could not be read.
 */
long textpoke_read_text_nofault(u8 *dst, const u8 *src, size_t len)
{
	size_t i;

	pagefault_disable();
	for (i = 0; i < len; i++)
		__get_kernel_nofault(dst + i, src + i, u8, fault);
	pagefault_enable();
	return 0;
fault:
	pagefault_enable();
	return -EFAULT;
}
NOKPROBE_SYMBOL(textpoke_read_text_nofault);
