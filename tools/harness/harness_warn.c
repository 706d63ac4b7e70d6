// SPDX-License-Identifier: GPL-2.0
/*
 * Harness self-check: a module that hits WARN_ON() when loaded. With
 * panic_on_warn=1 the guest panics; the runner must report the splat even
 * though QEMU exits normally (panic=-1 reboots, and -no-reboot exits).
 */
#include <linux/bug.h>
#include <linux/module.h>

static int __init harness_warn_init(void)
{
	WARN_ON(1);
	return 0;
}
module_init(harness_warn_init);

static void __exit harness_warn_exit(void)
{
}
module_exit(harness_warn_exit);

MODULE_DESCRIPTION("textpoke harness check: hits WARN_ON at load");
MODULE_LICENSE("GPL");
