// SPDX-License-Identifier: GPL-2.0
/*
 * textpoke_trapcost: what a kprobe hit costs, for the bench's "foreign traps" section
 * (tools/agent/src/bench/trapcost.rs). On x86 every kernel-mode INT3 goes through textpoke's trap
 * handler before kprobes sees it (patch 0007), so a loaded textpoke may make every kprobe hit
 * dearer; on arm64 kprobes use their own BRK immediates, which never reach textpoke. This
 * module knows nothing of textpoke (no textpoke symbol, no textpoke.h), so the agent can load
 * and unload textpoke while it stays loaded and measure the same probe both ways in one boot.
 *
 * At load it registers a kprobe on trapcost_probed(), a function of its own, whose handlers
 * count the hits. trapcost_plain() is its unprobed twin: the same body, so that its loop is
 * what the calls cost without the probe.
 *
 * /sys/kernel/debug/textpoke_trapcost/ (root-only, CAP_SYS_ADMIN):
 *  - control: "run N" (1 <= N <= MAX_RUN) calls trapcost_probed() N times and trapcost_plain()
 *    N times, timing each loop with local_clock(), preemption disabled while timed (interrupts
 *    stay on); the calls go in chunks of CHUNK, the two functions' chunks interleaved, so that
 *    both loops see the same conditions and no CPU goes long without preemption, however large
 *    N is.
 *  - result: the last run, one "key value" line each: n (N), probed_ns and unprobed_ns (the
 *    two loops' times in nanoseconds), hits and post_hits (what the pre- and post-handler
 *    counted during the run; all 0 before the first run). A run measured one hit per call only
 *    if both are N; otherwise it is invalid.
 *
 * Bad input changes nothing, is logged, and each kind fails with its own errno: -EPERM without
 * CAP_SYS_ADMIN, -E2BIG for a line too long, -EFAULT for an unreadable buffer, -EINVAL for an
 * unknown command or a malformed count, -ERANGE for a count out of range; -EINTR if a fatal
 * signal cut the run short (the result then stays the previous run's).
 */

#include <linux/debugfs.h>
#include <linux/kprobes.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/sched/clock.h>
#include <linux/sched/signal.h>
#include <linux/seq_file.h>
#include <linux/uaccess.h>

#define MAX_RUN 10000000
#define CHUNK 1000

/*
 * noinline so that each call is a call; notrace so that the kprobe is a breakpoint on the
 * first instruction rather than an ftrace-based probe, which would not trap at all; the empty
 * asm volatile gives the functions a side effect, so that no call is optimised away; distinct
 * constants, so that the two never fold into one.
 */
static noinline notrace unsigned long trapcost_probed(unsigned long x)
{
	asm volatile("" : "+r"(x));
	return x + 1;
}

static noinline notrace unsigned long trapcost_plain(unsigned long x)
{
	asm volatile("" : "+r"(x));
	return x + 2;
}

static atomic_long_t pre_hits, post_hits;

static int trapcost_pre(struct kprobe *p, struct pt_regs *regs)
{
	atomic_long_inc(&pre_hits);
	return 0;
}

static void trapcost_post(struct kprobe *p, struct pt_regs *regs, unsigned long flags)
{
	atomic_long_inc(&post_hits);
}

/*
 * The post-handler keeps the probe a trap: x86 optimises a probe without one into a jump
 * (CONFIG_OPTPROBES) a few ticks after it is armed, and then no hit would trap and textpoke's
 * handler would never run, whatever it costs.
 */
static struct kprobe probe = {
	.pre_handler = trapcost_pre,
	.post_handler = trapcost_post,
};

static struct {
	struct mutex lock;	/* one run at a time; the result is read whole */
	u64 n, probed_ns, unprobed_ns;
	long hits, post_hits;
} last;

/* Keeps the calls' results alive. */
static unsigned long sink;

static u64 loop(unsigned long (*fn)(unsigned long), unsigned int n)
{
	unsigned long acc = 0;
	unsigned int i;
	u64 start;

	start = local_clock();
	for (i = 0; i < n; i++)
		acc += fn(i);
	WRITE_ONCE(sink, acc);
	return local_clock() - start;
}

static int run(u64 n)
{
	u64 probed = 0, plain = 0, done = 0;
	long hits0, post0;
	bool probed_first = true;

	hits0 = atomic_long_read(&pre_hits);
	post0 = atomic_long_read(&post_hits);
	while (done < n) {
		unsigned int k = min_t(u64, CHUNK, n - done);

		if (fatal_signal_pending(current))
			return -EINTR;
		preempt_disable();
		/* Each function goes first in every other chunk: neither always follows the other. */
		if (probed_first) {
			probed += loop(trapcost_probed, k);
			plain += loop(trapcost_plain, k);
		} else {
			plain += loop(trapcost_plain, k);
			probed += loop(trapcost_probed, k);
		}
		preempt_enable();
		probed_first = !probed_first;
		done += k;
		cond_resched();
	}
	last.n = n;
	last.probed_ns = probed;
	last.unprobed_ns = plain;
	last.hits = atomic_long_read(&pre_hits) - hits0;
	last.post_hits = atomic_long_read(&post_hits) - post0;
	return 0;
}

static ssize_t control_write(struct file *file, const char __user *ubuf, size_t len,
			     loff_t *pos)
{
	char buf[32];
	u64 n;
	int ret;

	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	if (len >= sizeof(buf)) {
		pr_info_ratelimited("textpoke_trapcost: control: refused a write of %zu bytes\n",
				    len);
		return -E2BIG;
	}
	if (copy_from_user(buf, ubuf, len)) {
		pr_info_ratelimited("textpoke_trapcost: control: unreadable buffer\n");
		return -EFAULT;
	}
	buf[len] = 0;
	strim(buf);
	if (strncmp(buf, "run ", 4) || kstrtou64(skip_spaces(buf + 4), 10, &n)) {
		pr_info_ratelimited("textpoke_trapcost: control: unknown command \"%*pE\" (\"run N\")\n",
				    (int)strlen(buf), buf);
		return -EINVAL;
	}
	if (n < 1 || n > MAX_RUN) {
		pr_info_ratelimited("textpoke_trapcost: control: run %llu: N must be 1 to %d\n", n,
				    MAX_RUN);
		return -ERANGE;
	}
	mutex_lock(&last.lock);
	ret = run(n);
	mutex_unlock(&last.lock);
	return ret ? ret : len;
}

static int result_show(struct seq_file *m, void *v)
{
	mutex_lock(&last.lock);
	seq_printf(m, "n %llu\nprobed_ns %llu\nunprobed_ns %llu\nhits %ld\npost_hits %ld\n",
		   last.n, last.probed_ns, last.unprobed_ns, last.hits, last.post_hits);
	mutex_unlock(&last.lock);
	return 0;
}

/* Like every debugfs file of textpoke's, root-only and CAP_SYS_ADMIN. */
static int result_open(struct inode *inode, struct file *file)
{
	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	return single_open(file, result_show, inode->i_private);
}

static const struct file_operations result_fops = {
	.owner = THIS_MODULE,
	.open = result_open,
	.read = seq_read,
	.llseek = seq_lseek,
	.release = single_release,
};

static const struct file_operations control_fops = {
	.owner = THIS_MODULE,
	.write = control_write,
};

static struct dentry *dir;

static int __init trapcost_init(void)
{
	int ret;

	mutex_init(&last.lock);
	probe.addr = (kprobe_opcode_t *)trapcost_probed;
	ret = register_kprobe(&probe);
	if (ret) {
		pr_err("textpoke_trapcost: register_kprobe: %d\n", ret);
		return ret;
	}
	dir = debugfs_create_dir("textpoke_trapcost", NULL);
	debugfs_create_file("control", 0200, dir, NULL, &control_fops);
	debugfs_create_file("result", 0400, dir, NULL, &result_fops);
	return 0;
}
module_init(trapcost_init);

static void __exit trapcost_exit(void)
{
	debugfs_remove(dir);
	unregister_kprobe(&probe);
}
module_exit(trapcost_exit);

MODULE_DESCRIPTION("What a kprobe hit costs, with and without textpoke loaded");
MODULE_LICENSE("GPL");
