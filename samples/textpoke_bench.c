// SPDX-License-Identifier: GPL-2.0
/*
 * textpoke_bench: textpoke against the kernel's own text-patching mechanisms, measured in the
 * same boot, on the same kind of sites, under the same load.
 *
 * Modes, each flipping N sites NOP <-> branch at once:
 *
 *   textpoke      one textpoke batch of N sites (its C API: this module is also the proof
 *                 that the API is usable from C);
 *   static_key    static_key_enable()/static_key_disable() of a key with N static_branch
 *                 sites: upstream jump labels (x86: text_poke_bp batches of up to 256 with
 *                 INT3 and 3 IPIs each; arm64: "nosync" writes and one kick_all_cpus_sync());
 *   nosync        arm64 only: what 6.12 jump labels do, on textpoke's kind of sites: one
 *                 aarch64_insn_write() plus cache maintenance per site, then one
 *                 kick_all_cpus_sync(); no guard, no record;
 *   stop_machine  arm64 only: every CPU parked in stop_machine() while one writes all sites
 *                 (what aarch64_insn_patch_text() does, and what was proposed in 2019);
 *   idle          everything but the patching: the baseline of IPIs and stalls that starting
 *                 and stopping the executors costs, which the host subtracts.
 *
 * Each repetition flips from the current state: a mode's sites stay as its last flip left
 * them, so the guest agent can interleave modes one repetition at a time (textpoke, static
 * key, textpoke, ...) and each mode alternates between switching on and switching off.
 * textpoke, nosync and stop_machine share their sites; textpoke refuses (-EIO) to change a
 * site whose text changed behind its back, so when the others left the sites other than
 * textpoke last wrote them, its repetition first puts them back, untimed and before the
 * executors start (with both arm64 modes in every round they never do: nosync undoes
 * textpoke's flip, stop_machine redoes it).
 *
 * While a mode runs, a kthread on every online CPU executes 64 of the sites in a loop and
 * records the longest gap between two of its executions: the worst stall patching caused. It
 * also sorts every gap into a histogram (16 buckets per power of two of nanoseconds), for the
 * 5 ms before the flip and for the flip itself, and separately for the executions that an
 * exception or interrupt interrupted, which the CPU itself tells (see stack_mark_set()): during
 * a flip those are the executions that trapped on a guard, plus the few interrupts the window
 * before shows at its rate. So the host counts the trapped executions and what each cost the
 * same way for textpoke and for the kernel's own mechanism (which counts neither), and checks
 * the count against textpoke's own trap counter.
 *
 * Interface: /sys/kernel/debug/textpoke_bench/{control,result}. Write
 * "run mode=<mode> n=<N> reps=<R>" to control; result then holds one line per repetition:
 * "mode n rep nsecs syncs records max_stall_ns on q=<hist> qx=<hist> f=<hist> fx=<hist>", where
 * on is 1 if the flip switched the branches on, q and f are the gap histograms of the plain
 * executions before and during the flip and qx and fx those of the interrupted ones, summed
 * over CPUs, as "bucket:count" pairs separated by commas (buckets with a count only; see
 * gap_bucket()). Write "reset" to switch every site and key off (untimed); a run with another N
 * than the sites were left at does that first. The guest agent counts IPIs around each
 * command with /proc/interrupts.
 */

#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/jump_label.h>
#include <linux/kthread.h>
#include <linux/module.h>
#include <linux/sched/clock.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/stop_machine.h>
#include <linux/stringify.h>
#include <linux/uaccess.h>
#ifdef CONFIG_ARM64
#include <asm/cacheflush.h>
#include <asm/patching.h>
#endif

#include "../kernel/textpoke.h"

#define MAX_SITES TEXTPOKE_MAX_BATCH
#define STRIDE 32
#define EXEC_SITES 64

/*
 * The executors' gap histograms: gaps below 16 ns one bucket per nanosecond, then 16 buckets
 * per power of two (6% wide) up to 2^30 ns; longer gaps go to the last bucket.
 */
#define GAP_SUB_BITS 4
#define GAP_SUB BIT(GAP_SUB_BITS)
#define GAP_MAX_ORDER 29
#define GAP_BUCKETS (GAP_SUB + (GAP_MAX_ORDER - GAP_SUB_BITS + 1) * GAP_SUB)

/* Which histogram an executor's gaps go to: before the flip, during it, or none (after). */
enum window { W_BEFORE, W_FLIP, W_AFTER };

/* Per window, the plain executions' gaps ([0]) and the interrupted ones' ([1]). */
struct gap_hist {
	u32 count[W_AFTER][2][GAP_BUCKETS];
};

#include "stack_mark.h"

static unsigned int gap_bucket(u64 ns)
{
	unsigned int order;

	if (ns < GAP_SUB)
		return ns;
	order = min_t(unsigned int, ilog2(ns), GAP_MAX_ORDER);
	if (order == GAP_MAX_ORDER && ns >= (2ULL << GAP_MAX_ORDER))
		return GAP_BUCKETS - 1;
	return GAP_SUB + (order - GAP_SUB_BITS) * GAP_SUB +
	       ((ns >> (order - GAP_SUB_BITS)) & (GAP_SUB - 1));
}

/*
 * textpoke's (and nosync's, and stop_machine's) sites: MAX_SITES functions at a 32-byte stride,
 * each "site; return 0; taken: return 1", like the exerciser's. Written in assembly so that the
 * site is at a known offset (C functions start with ftrace's call on x86).
 */
#ifdef CONFIG_X86_64
#include <asm/ibt.h>
#include <asm/nospec-branch.h>
#include <linux/objtool.h>
#define SITE_LEN 5
/*
 * The RETs are bare, as a site's neighbours must be exact instructions; objtool is told they
 * are meant (ANNOTATE_RETPOLINE_SAFE), which a kernel with return thunks otherwise refuses.
 */
/* With IBT each function is called through a pointer and starts with ENDBR64: the site follows. */
#define SITE_OFFSET ENDBR_INSN_SIZE
asm(".pushsection .text, \"ax\"\n"
    ".balign 32\n"
    ".globl bench_sites\n"
    "bench_sites:\n"
    ".rept " __stringify(MAX_SITES) "\n"
    ".balign 32\n"
    ASM_ENDBR
    /* The site's address is taken, but it is no indirect branch target (objtool). */
    ANNOTATE_NOENDBR
    ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n"
    "xorl %eax, %eax\n"
    ANNOTATE_RETPOLINE_SAFE "ret\n"
    /* The taken path is 16 bytes after the site (and, like it, no indirect branch target). */
    ".skip 8, 0xcc\n"
    ANNOTATE_NOENDBR
    "movl $1, %eax\n"
    ANNOTATE_RETPOLINE_SAFE "ret\n"
    ".endr\n"
    ".type bench_sites, @function\n"
    ".size bench_sites, . - bench_sites\n"
    /* objtool cannot follow jumps that exist only once patched. */
    ".pushsection .discard.func_stack_frame_non_standard, \"aw\"\n"
    ".long bench_sites - .\n"
    ".popsection\n"
    ".popsection\n");
#else
#define SITE_LEN 4
#define SITE_OFFSET 0
asm(".pushsection .text, \"ax\"\n"
    ".balign 32\n"
    ".globl bench_sites\n"
    "bench_sites:\n"
    ".rept " __stringify(MAX_SITES) "\n"
    ".balign 32\n"
    "nop\n"
    "mov w0, #0\n"
    "ret\n"
    ".balign 16\n"
    "mov w0, #1\n"
    "ret\n"
    ".endr\n"
    ".popsection\n");
#endif
extern const u8 bench_sites[];

static void *site_addr(int i)
{
	return (void *)(bench_sites + (unsigned long)i * STRIDE + SITE_OFFSET);
}

/*
 * The sites are hand-written asm, with no type hash for control-flow integrity
 * (CONFIG_CFI_CLANG) to check an indirect call against: called without the check.
 */
static int __nocfi call_site(int i)
{
	int (*fn)(void) = (void *)(bench_sites + (unsigned long)i * STRIDE);

	return fn();
}

/*
 * Upstream's sites: static_branch_unlikely() uses of four keys, with 1, 16, 256 and 4096 sites,
 * so that each size flips exactly that many sites.
 */
static DEFINE_STATIC_KEY_FALSE(key_1);
static DEFINE_STATIC_KEY_FALSE(key_16);
static DEFINE_STATIC_KEY_FALSE(key_256);
static DEFINE_STATIC_KEY_FALSE(key_4096);

#define REF(key, n)                                               \
	static noinline int ref_##key##n(void)                    \
	{                                                         \
		return static_branch_unlikely(&key) ? 1 : 0;      \
	}
#define D4(m, p) m(p##0) m(p##1) m(p##2) m(p##3)
#define D16(m, p) D4(m, p##0) D4(m, p##1) D4(m, p##2) D4(m, p##3)
#define D64(m, p) D16(m, p##0) D16(m, p##1) D16(m, p##2) D16(m, p##3)
#define D256(m, p) D64(m, p##0) D64(m, p##1) D64(m, p##2) D64(m, p##3)
#define D1024(m, p) D256(m, p##0) D256(m, p##1) D256(m, p##2) D256(m, p##3)
#define D4096(m, p) D1024(m, p##0) D1024(m, p##1) D1024(m, p##2) D1024(m, p##3)
#define SITE_4096(n) REF(key_4096, n)
#define SITE_256(n) REF(key_256, n)
#define SITE_16(n) REF(key_16, n)
#define PTR_4096(n) ref_key_4096##n,
#define PTR_256(n) ref_key_256##n,
#define PTR_16(n) ref_key_16##n,
D4096(SITE_4096, _)
D256(SITE_256, _)
D16(SITE_16, _)
REF(key_1, _0)
static int (*const ref_4096[])(void) = { D4096(PTR_4096, _) };
static int (*const ref_256[])(void) = { D256(PTR_256, _) };
static int (*const ref_16[])(void) = { D16(PTR_16, _) };
static int (*const ref_1[])(void) = { ref_key_1_0 };

static const struct {
	int n;
	struct static_key_false *key;
	int (*const *sites)(void);
} keys[] = {
	{ 1, &key_1, ref_1 },
	{ 16, &key_16, ref_16 },
	{ 256, &key_256, ref_256 },
	{ 4096, &key_4096, ref_4096 },
};

enum mode { M_TEXTPOKE, M_STATIC_KEY, M_NOSYNC, M_STOP_MACHINE, M_IDLE, M_COUNT };
static const char *const mode_names[M_COUNT] = {
	"textpoke", "static_key", "nosync", "stop_machine", "idle"
};

struct rep_result {
	enum mode mode;
	int n, rep;
	bool on;
	u64 nsecs, max_stall;
	u32 syncs, records;
	struct gap_hist *hist;	/* summed over CPUs */
};

static struct {
	struct mutex lock;		/* one command at a time */
	struct rep_result *results;
	int nresults;
	u8 on_bytes[MAX_SITES][SITE_LEN], off_bytes[SITE_LEN];
	/*
	 * Our sites: the first text_n hold their branch, the others the NOP; textpoke last wrote
	 * the first tp_n with their branch (its view; nosync and stop_machine change text_n only).
	 */
	int text_n, tp_n;
	/* executors */
	enum mode exec_mode;
	int (*const *exec_ref)(void);	/* static_key mode: the key's sites */
	int exec_count;
	u64 __percpu *max_gap;
	struct gap_hist __percpu *hist;
	enum window window;
	struct task_struct **threads;
} bench;

static int executor(void *data)
{
	unsigned int cpu = smp_processor_id();
	u64 last = local_clock();
	unsigned long n = 0;

	while (!kthread_should_stop()) {
		int i = n % bench.exec_count;
		enum window w;
		u64 now, gap;
		bool hit;

		stack_mark_set();
		if (bench.exec_mode == M_STATIC_KEY)
			bench.exec_ref[i]();
		else
			call_site(i);
		hit = stack_mark_gone();
		w = READ_ONCE(bench.window);
		now = local_clock();
		gap = now - last;
		if (gap > *per_cpu_ptr(bench.max_gap, cpu))
			*per_cpu_ptr(bench.max_gap, cpu) = gap;
		if (w < W_AFTER)
			per_cpu_ptr(bench.hist, cpu)->count[w][hit][gap_bucket(gap)]++;
		last = now;
		if (++n % 128 == 0) {
			cond_resched();
			/* Time spent yielding is not a patching stall. */
			last = local_clock();
		}
	}
	return 0;
}

/* Starts an executor on every online CPU, running the first sites of what `mode` patches. */
static u64 stop_executors(void);

static int start_executors(enum mode mode, int n, int (*const *ref)(void))
{
	unsigned int cpu;

	bench.exec_mode = mode;
	bench.exec_ref = ref;
	bench.exec_count = min(n, EXEC_SITES);
	WRITE_ONCE(bench.window, W_BEFORE);
	for_each_possible_cpu(cpu) {
		*per_cpu_ptr(bench.max_gap, cpu) = 0;
		memset(per_cpu_ptr(bench.hist, cpu), 0, sizeof(struct gap_hist));
	}
	for_each_online_cpu(cpu) {
		struct task_struct *t = kthread_create_on_cpu(executor, NULL, cpu, "textpoke_bench/%u");

		if (IS_ERR(t)) {
			stop_executors();
			return PTR_ERR(t);
		}
		get_task_struct(t);
		bench.threads[cpu] = t;
		wake_up_process(t);
	}
	return 0;
}

/* Stops the executors; returns the worst gap and adds their histograms to sum (if any). */
static u64 stop_executors_into(struct gap_hist *sum)
{
	unsigned int cpu;
	u64 worst = 0;
	int w, x, b;

	for_each_possible_cpu(cpu) {
		struct gap_hist *h = per_cpu_ptr(bench.hist, cpu);

		if (bench.threads[cpu]) {
			kthread_stop_put(bench.threads[cpu]);
			bench.threads[cpu] = NULL;
		}
		worst = max(worst, *per_cpu_ptr(bench.max_gap, cpu));
		for (w = 0; sum && w < W_AFTER; w++)
			for (x = 0; x < 2; x++)
				for (b = 0; b < GAP_BUCKETS; b++)
					sum->count[w][x][b] += h->count[w][x][b];
	}
	return worst;
}

static u64 stop_executors(void)
{
	return stop_executors_into(NULL);
}

/* Writes the first n sites with their branch (on) or the NOP in one textpoke batch. */
static int flip_textpoke(int n, bool on, struct rep_result *r)
{
	struct textpoke_batch_stats stats;
	struct textpoke_batch *batch;
	int i, ret;

	ret = textpoke_batch_begin(&batch);
	if (ret)
		return ret;
	for (i = 0; i < n && !ret; i++)
		ret = textpoke_batch_add(batch, THIS_MODULE, site_addr(i),
					 on ? bench.on_bytes[i] : bench.off_bytes, SITE_LEN);
	if (!ret)
		ret = textpoke_batch_commit(batch);
	if (!ret && !textpoke_batch_stats(batch, &stats)) {
		r->syncs = stats.syncs;
		r->records = stats.records;
	}
	textpoke_batch_end(batch);
	return ret;
}

#ifdef CONFIG_ARM64
static int write_site(int i, bool on)
{
	u32 insn;
	int ret;

	memcpy(&insn, on ? bench.on_bytes[i] : bench.off_bytes, sizeof(insn));
	ret = aarch64_insn_write(site_addr(i), le32_to_cpu((__force __le32)insn));
	if (!ret)
		caches_clean_inval_pou((unsigned long)site_addr(i),
				       (unsigned long)site_addr(i) + SITE_LEN);
	return ret;
}

static int flip_nosync(int n, bool on)
{
	int i, ret = 0;

	for (i = 0; i < n && !ret; i++)
		ret = write_site(i, on);
	kick_all_cpus_sync();
	return ret;
}

struct stop_args {
	int n;
	bool on;
	atomic_t cpus;
	int ret;
};

static int stop_cb(void *data)
{
	struct stop_args *a = data;
	int i;

	/* The last CPU to arrive patches, the others wait: aarch64_insn_patch_text_cb(). */
	if (atomic_inc_return(&a->cpus) == num_online_cpus()) {
		for (i = 0; i < a->n && !a->ret; i++)
			a->ret = write_site(i, a->on);
		atomic_inc(&a->cpus);
	} else {
		while (atomic_read(&a->cpus) <= num_online_cpus())
			cpu_relax();
		isb();
	}
	return 0;
}

static int flip_stop_machine(int n, bool on)
{
	struct stop_args a = { .n = n, .on = on, .cpus = ATOMIC_INIT(0) };
	int ret = stop_machine(stop_cb, &a, cpu_online_mask);

	return ret ?: a.ret;
}

/*
 * nosync or stop_machine left the sites other than textpoke last wrote them: put textpoke's
 * view back (untimed), or it would refuse them with -EIO.
 */
static int restore_textpoke_view(void)
{
	int ret;

	if (bench.text_n == bench.tp_n)
		return 0;
	if (bench.tp_n)
		ret = flip_nosync(bench.tp_n, true);
	else
		ret = flip_nosync(bench.text_n, false);
	if (!ret)
		bench.text_n = bench.tp_n;
	return ret;
}
#else
static int restore_textpoke_view(void)
{
	/* Only textpoke writes the sites. */
	return 0;
}
#endif

/* Switches every site and key off, untimed. */
static int reset_all(void)
{
	struct rep_result scratch = {};
	int i, ret;

	ret = restore_textpoke_view();
	if (!ret && bench.tp_n) {
		ret = flip_textpoke(bench.tp_n, false, &scratch);
		if (!ret)
			bench.tp_n = bench.text_n = 0;
	}
	for (i = 0; i < ARRAY_SIZE(keys); i++)
		if (static_key_enabled(keys[i].key))
			static_branch_disable(keys[i].key);
	return ret;
}

/* Switches the first n sites (or key) on or off the way mode patches; r gets what it cost. */
static int flip(enum mode mode, int n, bool on, struct static_key_false *key,
		struct rep_result *r)
{
	switch (mode) {
	case M_TEXTPOKE:
		return flip_textpoke(n, on, r);
	case M_STATIC_KEY:
		if (on)
			static_branch_enable(key);
		else
			static_branch_disable(key);
		return 0;
#ifdef CONFIG_ARM64
	case M_NOSYNC:
		r->syncs = 1;
		return flip_nosync(n, on);
	case M_STOP_MACHINE:
		r->syncs = 1;
		return flip_stop_machine(n, on);
#endif
	case M_IDLE:
		return 0;
	default:
		return -EINVAL;
	}
}

/* Which way the next flip of mode goes: the opposite of where it left its sites. */
static bool next_state(enum mode mode, struct static_key_false *key)
{
	switch (mode) {
	case M_TEXTPOKE:
		return !bench.tp_n;
	case M_STATIC_KEY:
		return !static_key_enabled(key);
	case M_IDLE:
		return false;
	default:
		return !bench.text_n;
	}
}

/* Frees the last command's results (only the repetitions that completed have histograms). */
static void free_results(void)
{
	int i;

	for (i = 0; i < bench.nresults; i++)
		kfree(bench.results[i].hist);
	kfree(bench.results);
	bench.results = NULL;
	bench.nresults = 0;
}

static int run_mode(enum mode mode, int n, int reps)
{
	struct static_key_false *key = NULL;
	int (*const *ref)(void) = NULL;
	struct rep_result *results;
	int rep, i, ret = 0;

	if (n < 1 || n > MAX_SITES || reps < 1 || reps > 1000)
		return -EINVAL;
	for (i = 0; i < ARRAY_SIZE(keys); i++) {
		if (keys[i].n == n) {
			key = keys[i].key;
			ref = keys[i].sites;
		}
	}
#ifndef CONFIG_ARM64
	if (mode == M_NOSYNC || mode == M_STOP_MACHINE)
		return -EOPNOTSUPP;
#endif
	if (mode == M_STATIC_KEY && !key)
		return -EINVAL;	/* keys come in sizes 1, 16, 256 and 4096 */
	/* The sites were left on at another size: start from everything off. */
	if ((bench.text_n && bench.text_n != n) || (bench.tp_n && bench.tp_n != n)) {
		ret = reset_all();
		if (ret)
			return ret;
	}
	results = kcalloc(reps, sizeof(*results), GFP_KERNEL);
	if (!results)
		return -ENOMEM;
	for (rep = 0; rep < reps && !ret; rep++) {
		struct rep_result *r = &results[rep];
		u64 start;

		if (mode == M_TEXTPOKE) {
			ret = restore_textpoke_view();
			if (ret)
				break;
		}
		r->mode = mode;
		r->n = n;
		r->rep = rep;
		r->on = next_state(mode, key);
		ret = start_executors(mode, n, ref);
		if (ret)
			break;
		msleep(5);
		WRITE_ONCE(bench.window, W_FLIP);
		start = local_clock();
		ret = flip(mode, n, r->on, key, r);
		r->nsecs = local_clock() - start;
		WRITE_ONCE(bench.window, W_AFTER);
		msleep(5);
		r->hist = kzalloc(sizeof(*r->hist), GFP_KERNEL);
		r->max_stall = stop_executors_into(r->hist);
		if (!r->hist && !ret)
			ret = -ENOMEM;
		if (ret) {
			kfree(r->hist);
			break;
		}
		if (mode == M_TEXTPOKE)
			bench.tp_n = bench.text_n = r->on ? n : 0;
		else if (mode == M_NOSYNC || mode == M_STOP_MACHINE)
			bench.text_n = r->on ? n : 0;
	}
	free_results();
	bench.results = results;
	bench.nresults = rep;
	return ret;
}

static ssize_t control_write(struct file *file, const char __user *ubuf, size_t len, loff_t *pos)
{
	char buf[96], mode_name[16];
	int n, reps, ret;
	enum mode mode;

	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	if (len >= sizeof(buf))
		return -E2BIG;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	buf[len] = 0;
	if (sysfs_streq(buf, "reset")) {
		mutex_lock(&bench.lock);
		ret = reset_all();
		mutex_unlock(&bench.lock);
		return ret ?: len;
	}
	if (sscanf(buf, "run mode=%15s n=%d reps=%d", mode_name, &n, &reps) != 3)
		return -EINVAL;
	for (mode = 0; mode < M_COUNT; mode++)
		if (!strcmp(mode_name, mode_names[mode]))
			break;
	if (mode == M_COUNT)
		return -EINVAL;
	mutex_lock(&bench.lock);
	ret = run_mode(mode, n, reps);
	mutex_unlock(&bench.lock);
	return ret ?: len;
}

static int result_show(struct seq_file *m, void *v)
{
	int i;

	mutex_lock(&bench.lock);
	for (i = 0; i < bench.nresults; i++) {
		struct rep_result *r = &bench.results[i];

		static const char *const names[W_AFTER][2] = {
			{ " q=", " qx=" }, { " f=", " fx=" }
		};
		int w, x, b;

		seq_printf(m, "%s %d %d %llu %u %u %llu %d", mode_names[r->mode], r->n, r->rep,
			   r->nsecs, r->syncs, r->records, r->max_stall, r->on);
		for (w = 0; w < W_AFTER; w++) {
			for (x = 0; x < 2; x++) {
				const u32 *count = r->hist->count[w][x];
				const char *sep = "";

				seq_puts(m, names[w][x]);
				for (b = 0; b < GAP_BUCKETS; b++) {
					if (!count[b])
						continue;
					seq_printf(m, "%s%d:%u", sep, b, count[b]);
					sep = ",";
				}
			}
		}
		seq_putc(m, '\n');
	}
	mutex_unlock(&bench.lock);
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

static int __init bench_init(void)
{
	int i, ret;

	mutex_init(&bench.lock);
	bench.max_gap = alloc_percpu(u64);
	bench.hist = alloc_percpu(struct gap_hist);
	bench.threads = kcalloc(nr_cpu_ids, sizeof(*bench.threads), GFP_KERNEL);
	if (!bench.max_gap || !bench.hist || !bench.threads) {
		ret = -ENOMEM;
		goto fail;
	}
	memcpy(bench.off_bytes, site_addr(0), SITE_LEN);
	for (i = 0; i < MAX_SITES; i++) {
		ret = textpoke_encode(TEXTPOKE_JMP, site_addr(i), site_addr(i) + 16, SITE_LEN,
				      bench.on_bytes[i]);
		if (!ret)
			ret = textpoke_register_site(THIS_MODULE, site_addr(i), SITE_LEN);
		if (ret) {
			while (--i >= 0)
				textpoke_unregister_site(THIS_MODULE, site_addr(i));
			goto fail;
		}
	}
	dir = debugfs_create_dir("textpoke_bench", NULL);
	debugfs_create_file("control", 0200, dir, NULL, &control_fops);
	debugfs_create_file("result", 0400, dir, NULL, &result_fops);
	return 0;
fail:
	kfree(bench.threads);
	free_percpu(bench.hist);
	free_percpu(bench.max_gap);
	return ret;
}
module_init(bench_init);

static void __exit bench_exit(void)
{
	int i;

	debugfs_remove(dir);
	mutex_lock(&bench.lock);
	reset_all();
	mutex_unlock(&bench.lock);
	for (i = 0; i < MAX_SITES; i++)
		textpoke_unregister_site(THIS_MODULE, site_addr(i));
	free_results();
	kfree(bench.threads);
	free_percpu(bench.hist);
	free_percpu(bench.max_gap);
}
module_exit(bench_exit);

MODULE_DESCRIPTION("textpoke against the kernel's own text patching, in the same boot");
MODULE_LICENSE("GPL");
