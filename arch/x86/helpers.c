// SPDX-License-Identifier: GPL-2.0
/*
 * x86 C shims for what Rust cannot call directly (static inline functions and macros). One-line
 * forwarders, no logic of their own: arch/x86/text.rs documents the contract.
 */

#include <asm/sync_core.h>

void textpoke_x86_sync_core(void);

void textpoke_x86_sync_core(void)
{
	sync_core();
}

/*
 * arch/x86/series.rs mirrors struct text_poke_write (patch 0009) and asserts the same numbers.
 * The module also builds against a kernel without the series (the check that it refuses to
 * load there); the series' own header stands for all of it.
 */
#if __has_include(<linux/text_patcher.h>)
#include <linux/build_bug.h>
#include <linux/stddef.h>
#include <asm/text-patching.h>
static_assert(sizeof(struct text_poke_write) == 24);
static_assert(offsetof(struct text_poke_write, addr) == 0);
static_assert(offsetof(struct text_poke_write, opcode) == 8);
static_assert(offsetof(struct text_poke_write, len) == 16);
#endif
