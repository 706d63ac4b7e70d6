// SPDX-License-Identifier: GPL-2.0
/*
 * Harness check (arm64): a module that executes BRK #0x008, the immediate of
 * textpoke's guards, when loaded. The agent loads it once textpoke has been
 * loaded and unloaded again, so the kernel's trap hook (include/linux/
 * text_patcher.h) is back to its default: the kernel must then treat the BRK
 * as any unknown one ("Oops - BRK"). A default whose type differs from the
 * hook's dies as a CFI failure instead on a kernel with CONFIG_CFI_CLANG.
 */
#include <linux/module.h>

static int __init harness_brk_init(void)
{
#ifdef CONFIG_ARM64
	asm volatile("brk #0x8");
	pr_err("harness_brk: the CPU came back from BRK #0x008\n");
	return 0;
#else
	return -EOPNOTSUPP;
#endif
}
module_init(harness_brk_init);

static void __exit harness_brk_exit(void)
{
}
module_exit(harness_brk_exit);

MODULE_DESCRIPTION("textpoke harness check: executes BRK #0x008 at load (arm64)");
MODULE_LICENSE("GPL");
