// SPDX-License-Identifier: GPL-2.0
/*
 * Harness self-check: a module whose KTAP report contains a failure. A boot
 * that loads it must be reported as failed ("not ok"), or the runner is blind.
 */
#include <linux/module.h>
#include <linux/printk.h>

static int __init harness_not_ok_init(void)
{
	pr_info("KTAP version 1\n");
	pr_info("1..2\n");
	pr_info("# harness_not_ok\n");
	pr_info("ok 1 a_test_that_passes\n");
	pr_info("not ok 2 a_test_that_fails\n");
	return 0;
}
module_init(harness_not_ok_init);

static void __exit harness_not_ok_exit(void)
{
}
module_exit(harness_not_ok_exit);

MODULE_DESCRIPTION("textpoke harness check: reports a KTAP failure");
MODULE_LICENSE("GPL");
