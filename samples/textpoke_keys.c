// SPDX-License-Identifier: GPL-2.0
/*
 * textpoke_keys: module static keys on the kernel's real API, for the checks of textpoke as the
 * kernel's patcher (tools/agent/src/scenarios/kernel_patching.rs). It knows nothing of textpoke: with
 * textpoke loaded, static_branch_enable() and static_branch_disable() reach it through the
 * patch series (kernel/patcher.rs); without it they take the stock path.
 *
 * NKEYS keys: the even ones DEFINE_STATIC_KEY_FALSE tested with static_branch_unlikely(), the
 * odd ones DEFINE_STATIC_KEY_TRUE tested with static_branch_likely(), each at SITES call sites
 * (one function per site, each returning whether it took the key's branch).
 *
 * /sys/kernel/debug/textpoke_keys/:
 *  - control: "start" runs an executor on every online CPU, calling every site in a loop;
 *    "stop" stops them; "flip" turns every key to the opposite state (static_branch_enable or
 *    _disable, one key after the other). After each key's change returns, every site of the key
 *    is called on the flipping CPU and must report the branch static_key_enabled() says: each
 *    that does not is counted in `mismatches`.
 *  - state: "keys N sites S enabled E flips F mismatches M executions X".
 */

#include <linux/debugfs.h>
#include <linux/jump_label.h>
#include <linux/kthread.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#define NKEYS 8
#define SITES 4

DEFINE_STATIC_KEY_FALSE(key0);
DEFINE_STATIC_KEY_TRUE(key1);
DEFINE_STATIC_KEY_FALSE(key2);
DEFINE_STATIC_KEY_TRUE(key3);
DEFINE_STATIC_KEY_FALSE(key4);
DEFINE_STATIC_KEY_TRUE(key5);
DEFINE_STATIC_KEY_FALSE(key6);
DEFINE_STATIC_KEY_TRUE(key7);

static struct static_key *const keys[NKEYS] = {
	&key0.key, &key1.key, &key2.key, &key3.key, &key4.key, &key5.key, &key6.key, &key7.key,
};

/* One site: a function of its own, so that each is a jump label entry of its own. */
#define SITE_F(k, s)						\
static noinline int site_##k##_##s(void)			\
{								\
	if (static_branch_unlikely(&key##k))			\
		return 1;					\
	return 0;						\
}
#define SITE_T(k, s)						\
static noinline int site_##k##_##s(void)			\
{								\
	if (static_branch_likely(&key##k))			\
		return 1;					\
	return 0;						\
}
#define SITES_F(k) SITE_F(k, 0) SITE_F(k, 1) SITE_F(k, 2) SITE_F(k, 3)
#define SITES_T(k) SITE_T(k, 0) SITE_T(k, 1) SITE_T(k, 2) SITE_T(k, 3)
#define ROW(k) { site_##k##_0, site_##k##_1, site_##k##_2, site_##k##_3 }

SITES_F(0)
SITES_T(1)
SITES_F(2)
SITES_T(3)
SITES_F(4)
SITES_T(5)
SITES_F(6)
SITES_T(7)

static int (*const sites[NKEYS][SITES])(void) = {
	ROW(0), ROW(1), ROW(2), ROW(3), ROW(4), ROW(5), ROW(6), ROW(7),
};

static struct {
	struct mutex lock;
	struct task_struct **threads;
	unsigned long flips;
	unsigned long mismatches;
	atomic_long_t executions;
} keys_state;

static int executor(void *data)
{
	unsigned long n = 0;

	while (!kthread_should_stop()) {
		int k, s;

		for (k = 0; k < NKEYS; k++)
			for (s = 0; s < SITES; s++)
				sites[k][s]();
		if (++n % 64 == 0) {
			atomic_long_add(64, &keys_state.executions);
			cond_resched();
		}
	}
	return 0;
}

static void stop_executors(void)
{
	unsigned int cpu;

	for_each_possible_cpu(cpu) {
		if (keys_state.threads[cpu]) {
			kthread_stop_put(keys_state.threads[cpu]);
			keys_state.threads[cpu] = NULL;
		}
	}
}

static int start_executors(void)
{
	unsigned int cpu;

	for_each_online_cpu(cpu) {
		struct task_struct *t;

		if (keys_state.threads[cpu])
			continue;
		t = kthread_create_on_cpu(executor, NULL, cpu, "textpoke_keys/%u");
		if (IS_ERR(t)) {
			stop_executors();
			return PTR_ERR(t);
		}
		get_task_struct(t);
		keys_state.threads[cpu] = t;
		wake_up_process(t);
	}
	return 0;
}

/* Turns every key to its opposite state, checking each key's sites right after. */
static void flip_all(void)
{
	int k, s;

	for (k = 0; k < NKEYS; k++) {
		bool on = !static_key_enabled(keys[k]);

		if (on)
			static_key_enable(keys[k]);
		else
			static_key_disable(keys[k]);
		for (s = 0; s < SITES; s++)
			if (sites[k][s]() != static_key_enabled(keys[k]))
				keys_state.mismatches++;
	}
	keys_state.flips++;
}

static ssize_t control_write(struct file *file, const char __user *ubuf, size_t len,
			     loff_t *ppos)
{
	char buf[16];
	int ret = 0;

	if (len >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	buf[len] = '\0';
	strim(buf);
	mutex_lock(&keys_state.lock);
	if (!strcmp(buf, "start"))
		ret = start_executors();
	else if (!strcmp(buf, "stop"))
		stop_executors();
	else if (!strcmp(buf, "flip"))
		flip_all();
	else
		ret = -EINVAL;
	mutex_unlock(&keys_state.lock);
	return ret ? ret : len;
}

static int state_show(struct seq_file *m, void *v)
{
	int k, enabled = 0;

	mutex_lock(&keys_state.lock);
	for (k = 0; k < NKEYS; k++)
		enabled += static_key_enabled(keys[k]);
	seq_printf(m, "keys %d sites %d enabled %d flips %lu mismatches %lu executions %ld\n",
		   NKEYS, NKEYS * SITES, enabled, keys_state.flips, keys_state.mismatches,
		   atomic_long_read(&keys_state.executions));
	mutex_unlock(&keys_state.lock);
	return 0;
}

DEFINE_SHOW_ATTRIBUTE(state);

static const struct file_operations control_fops = {
	.owner = THIS_MODULE,
	.write = control_write,
};

static struct dentry *dir;

static int __init keys_init(void)
{
	mutex_init(&keys_state.lock);
	keys_state.threads = kcalloc(nr_cpu_ids, sizeof(*keys_state.threads), GFP_KERNEL);
	if (!keys_state.threads)
		return -ENOMEM;
	dir = debugfs_create_dir("textpoke_keys", NULL);
	debugfs_create_file("control", 0200, dir, NULL, &control_fops);
	debugfs_create_file("state", 0400, dir, NULL, &state_fops);
	return 0;
}
module_init(keys_init);

static void __exit keys_exit(void)
{
	debugfs_remove(dir);
	mutex_lock(&keys_state.lock);
	stop_executors();
	mutex_unlock(&keys_state.lock);
	kfree(keys_state.threads);
}
module_exit(keys_exit);

MODULE_DESCRIPTION("Module static keys on the real API, for textpoke's kernel-patcher checks");
MODULE_LICENSE("GPL");
