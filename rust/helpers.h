/* SPDX-License-Identifier: GPL-2.0 */
/* Prototypes of rust/helpers.c, for the compiler's prototype checks; Rust declares its own. */
#ifndef _TEXTPOKE_RUST_HELPERS_H
#define _TEXTPOKE_RUST_HELPERS_H

#include <linux/types.h>

struct pt_regs;

unsigned int textpoke_helper_cpu(void);
u64 textpoke_helper_local_clock(void);
void textpoke_helper_cond_resched(void);
void textpoke_helper_cpus_read_lock(void);
void textpoke_helper_cpus_read_unlock(void);
void textpoke_helper_preempt_disable(void);
void textpoke_helper_preempt_enable(void);
struct pt_regs *textpoke_helper_kernel_int3_regs(unsigned long val, void *data);
void textpoke_helper_sync_core(void);

#endif
