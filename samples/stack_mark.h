/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The stack mark the samples use to tell, as the CPU tells it, whether a call of a site was
 * interrupted (samples/textpoke_bench.c, samples/textpoke_outsider.c).
 */
#ifndef TEXTPOKE_SAMPLES_STACK_MARK_H
#define TEXTPOKE_SAMPLES_STACK_MARK_H

#include <linux/stringify.h>
#include <linux/types.h>

/*
 * Whether an exception or an interrupt arrived while a caller called a site. The CPU and the
 * entry code save the interrupted registers on the current stack, below its pointer (x86: the
 * hardware frame and pt_regs, 168 bytes; arm64: pt_regs, 336 bytes), where nothing else
 * writes: the kernel has no red zone, and a call of a site goes less than STACK_MARK_OFFSET
 * deep (the return address, a frame record at most). So a mark left there before the call is
 * gone after it exactly when something interrupted the call: a trap on a guard, an IPI, a tick.
 * Both asm statements address the mark from the same stack pointer: the caller's loop does
 * not move it.
 */
#define STACK_MARK_OFFSET 96
#define STACK_MARK 0x7e47b0a75eed2024UL

static __always_inline void stack_mark_set(void)
{
#ifdef CONFIG_X86_64
	asm volatile("movq %0, -" __stringify(STACK_MARK_OFFSET) "(%%rsp)"
		     : : "r"(STACK_MARK) : "memory");
#else
	asm volatile("stur %0, [sp, #-" __stringify(STACK_MARK_OFFSET) "]"
		     : : "r"(STACK_MARK) : "memory");
#endif
}

static __always_inline bool stack_mark_gone(void)
{
	unsigned long mark;

#ifdef CONFIG_X86_64
	asm volatile("movq -" __stringify(STACK_MARK_OFFSET) "(%%rsp), %0"
		     : "=r"(mark) : : "memory");
#else
	asm volatile("ldur %0, [sp, #-" __stringify(STACK_MARK_OFFSET) "]"
		     : "=r"(mark) : : "memory");
#endif
	return mark != STACK_MARK;
}

#endif /* TEXTPOKE_SAMPLES_STACK_MARK_H */
