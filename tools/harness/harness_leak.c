// SPDX-License-Identifier: GPL-2.0
/*
 * Harness self-check: a module that leaks allocations at load. Unloaded
 * before kmemleak scans, their backtraces name code that is gone,
 * which the agent's kmemleak check attributes to textpoke's own modules: the
 * check must fail, or it is blind to a leak of theirs.
 */
#include <linux/module.h>
#include <linux/slab.h>

/*
 * Sixteen objects: kmemleak also scans every task's whole kernel stack, stale
 * parts included, where the last pointer or two may linger.
 */
#define HARNESS_LEAKS 16

/* Written through, so that the allocations are not optimized away. */
static void *harness_leak_last;

static int __init harness_leak_init(void)
{
	int i;

	for (i = 0; i < HARNESS_LEAKS; i++) {
		void *p = kmalloc(192, GFP_KERNEL);

		if (!p)
			return -ENOMEM;
		memset(p, 0x5a, 192);
		WRITE_ONCE(harness_leak_last, p);
	}
	/* Nothing refers to any of them from here on. */
	WRITE_ONCE(harness_leak_last, NULL);
	return 0;
}
module_init(harness_leak_init);

static void __exit harness_leak_exit(void)
{
}
module_exit(harness_leak_exit);

MODULE_DESCRIPTION("textpoke harness check: leaks allocations at load");
MODULE_LICENSE("GPL");
