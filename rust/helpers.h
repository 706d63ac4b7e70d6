/* SPDX-License-Identifier: GPL-2.0 */
/* Prototypes of rust/helpers.c, for the compiler's prototype checks; Rust declares its own. */
#ifndef _TEXTPOKE_RUST_HELPERS_H
#define _TEXTPOKE_RUST_HELPERS_H

#include <linux/types.h>

unsigned int textpoke_helper_cpu(void);
u64 textpoke_helper_local_clock(void);
void textpoke_helper_cond_resched(void);
void textpoke_helper_cpus_read_lock(void);
void textpoke_helper_cpus_read_unlock(void);
void textpoke_helper_cpu_relax(void);
void textpoke_helper_preempt_disable(void);
void textpoke_helper_preempt_enable(void);
unsigned long textpoke_helper_irq_save(void);
void textpoke_helper_irq_restore(unsigned long flags);
long textpoke_read_text_nofault(u8 *dst, const u8 *src, size_t len);

#endif
