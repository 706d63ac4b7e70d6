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
