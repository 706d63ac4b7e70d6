// SPDX-License-Identifier: GPL-2.0
/*
 * textpoke_outsider: a module that knows textpoke only through kernel/textpoke.h, and tests it
 * the way an outside user would, including with inputs the header does not list. The guest agent
 * (tools/agent/src/outsider.rs) loads it, reads its verdicts from the kernel log and checks the
 * text through /proc/kcore.
 *
 * At load, with the address of another module's registered site in `foreign=`:
 *  - calls every entry point with bad arguments and logs each result as
 *    "textpoke_outsider: case NAME: got E expected X";
 *  - registers two sites of its own text and, on purpose, never unregisters them: when it is
 *    unloaded textpoke must forget them (the agent then checks that their addresses are no
 *    longer sites);
 *  - tries to change, and to unregister, the foreign site: both must be refused with -EACCES.
 *
 * It also carries the foreign traps of the "never swallow someone else's trap" checks, driven
 * through /sys/kernel/debug/textpoke_outsider/:
 *  - x86: "int3 N" runs a function whose first instruction is INT3 N times; a die notifier
 *    below textpoke's priority claims exactly those traps and counts them (`int3_seen`);
 *  - both arches: "kprobe" arms a kprobe at `kprobe_at=` (an address next to textpoke's sites)
 *    and counts its hits (`kprobe_hits`); "unkprobe" disarms it;
 *  - "try_kprobe ADDR" registers a kprobe at ADDR and at once unregisters it: the write fails
 *    with register_kprobe()'s errno (the agent checks that textpoke's trap path refuses them).
 *  - arm64: "brk" executes a BRK #0x008, textpoke's own immediate, that is no guard of
 *    textpoke's: textpoke must report it (the kernel dies with "Oops - BRK"), not hide it.
 */

#include <linux/debugfs.h>
#include <linux/jump_label.h>
#include <linux/kdebug.h>
#include <linux/kprobes.h>
#include <linux/module.h>
#include <linux/notifier.h>
#include <linux/ptrace.h>
#include <linux/uaccess.h>

#include "../kernel/textpoke.h"

static unsigned long foreign;
module_param(foreign, ulong, 0400);
MODULE_PARM_DESC(foreign, "address of another module's registered site");
static unsigned long kprobe_at;
module_param(kprobe_at, ulong, 0400);
MODULE_PARM_DESC(kprobe_at, "address the kprobe command arms a kprobe at");

/*
 * Three sites in this module's text, each a function "site; return", and the trap function:
 * INT3 then return (x86), BRK #0x008 then return (arm64).
 *
 * x86 with IBT: the trap function is called through a pointer and starts with ENDBR64, so its
 * INT3 is ENDBR_INSN_SIZE bytes in. The sites and the INT3 are no branch targets and say so to
 * objtool (ANNOTATE_NOENDBR), which wants an ENDBR wherever code's address is taken.
 */
#ifdef CONFIG_X86_64
#include <asm/ibt.h>
#include <linux/objtool.h>
#define SITE_LEN 5
#define FUNC(name, body)					\
	".balign 16\n.globl " #name "\n" #name ":\n" body	\
	".type " #name ", @function\n.size " #name ", . - " #name "\n"
asm(".pushsection .text, \"ax\"\n"
    FUNC(outsider_site0, ANNOTATE_NOENDBR ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\nret\n")
    FUNC(outsider_site1, ANNOTATE_NOENDBR ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\nret\n")
    FUNC(outsider_site2, ANNOTATE_NOENDBR ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\nret\n")
    FUNC(outsider_int3, ASM_ENDBR ANNOTATE_NOENDBR "int3\nret\n")
    ".popsection\n");
static const u8 unlisted[] = { 0x0f, 0x0b, 0x90, 0x90, 0x90 };	/* UD2 + NOPs */
static const u8 guard[] = { 0xcc, 0x90, 0x90, 0x90, 0x90 };
#else
#define SITE_LEN 4
#define FUNC(name, body)					\
	".balign 16\n.globl " #name "\n" #name ":\n" body	\
	".type " #name ", %function\n.size " #name ", . - " #name "\n"
asm(".pushsection .text, \"ax\"\n"
    FUNC(outsider_site0, "nop\nret\n")
    FUNC(outsider_site1, "nop\nret\n")
    FUNC(outsider_site2, "nop\nret\n")
    FUNC(outsider_brk, "brk #0x8\nret\n")
    ".popsection\n");
/* BRK #0x004 (kprobes' immediate): a decodable instruction the header does not list. */
static const u8 unlisted[] = { 0x80, 0x00, 0x20, 0xd4 };
static const u8 guard[] = { 0x00, 0x01, 0x20, 0xd4 };
#endif
extern char outsider_site0[], outsider_site1[], outsider_site2[];

static void *site(int i)
{
	return i == 2 ? outsider_site2 : i ? outsider_site1 : outsider_site0;
}

static void verdict(const char *name, int got, int expected)
{
	pr_info("textpoke_outsider: case %s: got %d expected %d\n", name, got, expected);
}

/* The header's contract, from C, with inputs it does not list. */
static void contract(void)
{
	struct textpoke_batch *b;
	struct textpoke_batch_stats stats;
	u8 out[8];
	u8 nop[SITE_LEN];
	int ret;

	verdict("encode_unknown_op", textpoke_encode(99, site(0), NULL, SITE_LEN, out), -EINVAL);
	verdict("encode_null_out", textpoke_encode(TEXTPOKE_NOP, site(0), NULL, SITE_LEN, NULL),
		-EINVAL);
	verdict("encode_len_0", textpoke_encode(TEXTPOKE_NOP, site(0), NULL, 0, out), -EMSGSIZE);
	verdict("encode_len_8", textpoke_encode(TEXTPOKE_NOP, site(0), NULL, 8, out), -EMSGSIZE);
	verdict("register_null_owner", textpoke_register_site(NULL, site(0), SITE_LEN), -EINVAL);
	verdict("register_len_0", textpoke_register_site(THIS_MODULE, site(0), 0), -EMSGSIZE);
	verdict("register_len_6", textpoke_register_site(THIS_MODULE, site(0), 6), -EMSGSIZE);
	verdict("register_kernel_text", textpoke_register_site(THIS_MODULE, _printk, SITE_LEN),
		-EFAULT);
	verdict("unregister_unknown", textpoke_unregister_site(THIS_MODULE, site(0)), -ENOENT);
	verdict("begin_null", textpoke_batch_begin(NULL), -EINVAL);
	verdict("add_null_batch", textpoke_batch_add(NULL, THIS_MODULE, site(0), out, SITE_LEN),
		-EINVAL);
	verdict("commit_null_batch", textpoke_batch_commit(NULL), -EINVAL);
	verdict("stats_null_batch", textpoke_batch_stats(NULL, &stats), -EINVAL);
	textpoke_batch_end(NULL);

	ret = textpoke_register_site(THIS_MODULE, site(0), SITE_LEN);
	verdict("register_own_site", ret, 0);
	if (ret)
		return;
	if (textpoke_batch_begin(&b)) {
		verdict("begin", -1, 0);
		return;
	}
	memcpy(nop, site(0), SITE_LEN);
	verdict("add_null_owner", textpoke_batch_add(b, NULL, site(0), nop, SITE_LEN), -EINVAL);
	verdict("add_null_insn", textpoke_batch_add(b, THIS_MODULE, site(0), NULL, SITE_LEN),
		-EINVAL);
	verdict("add_len_0", textpoke_batch_add(b, THIS_MODULE, site(0), nop, 0), -EMSGSIZE);
	verdict("add_unlisted", textpoke_batch_add(b, THIS_MODULE, site(0), unlisted, SITE_LEN),
		-EOPNOTSUPP);
	verdict("add_guard", textpoke_batch_add(b, THIS_MODULE, site(0), guard, SITE_LEN),
		-EILSEQ);
	verdict("stats_null_out", textpoke_batch_stats(b, NULL), -EINVAL);
	verdict("commit_empty", textpoke_batch_commit(b), -ENODATA);
	textpoke_batch_end(b);
	verdict("unregister_own_site", textpoke_unregister_site(THIS_MODULE, site(0)), 0);
}

/* Another module's site: neither changed nor unregistered by this one. */
static void foreign_site(void)
{
	struct textpoke_batch *b;
	u8 bytes[SITE_LEN];

	if (!foreign || textpoke_batch_begin(&b))
		return;
	memcpy(bytes, (void *)foreign, SITE_LEN);
	verdict("add_foreign_site", textpoke_batch_add(b, THIS_MODULE, (void *)foreign, bytes,
						       SITE_LEN), -EACCES);
	textpoke_batch_end(b);
	verdict("unregister_foreign_site", textpoke_unregister_site(THIS_MODULE, (void *)foreign),
		-EACCES);
}

/*
 * Text other patchers own: a jump label site, an ftrace location, and text a kprobe probes.
 * Each must be refused as a site, with -ETXTBSY; and a kprobe armed on a registered site makes
 * textpoke refuse the next change there (-EIO), changing nothing, while the kprobe fires on.
 */
static DEFINE_STATIC_KEY_FALSE(outsider_key);

static noinline int outsider_keyed(void)
{
	if (static_branch_unlikely(&outsider_key))
		return 1;
	return 0;
}

/* A C function: ftrace owns its entry (fentry, or arm64's patchable entry). */
static noinline int outsider_traced(void)
{
	return READ_ONCE(foreign) != 0;
}

static void *keyed_site(void)
{
#ifdef CONFIG_JUMP_LABEL
	struct jump_entry *e = THIS_MODULE->jump_entries;
	unsigned int i;

	for (i = 0; i < THIS_MODULE->num_jump_entries; i++)
		if (jump_entry_key(&e[i]) == &outsider_key.key)
			return (void *)jump_entry_code(&e[i]);
#endif
	return NULL;
}

static void *traced_site(void)
{
	u8 *f = (u8 *)outsider_traced;

	/*
	 * Computed at run time: a constant outsider_traced+4 would be a relocation past the
	 * ENDBR, which objtool reports on an IBT kernel.
	 */
	OPTIMIZER_HIDE_VAR(f);
#ifdef CONFIG_X86_64
	/* After ENDBR64, where the kernel has IBT. */
	static const u8 endbr[] = { 0xf3, 0x0f, 0x1e, 0xfa };

	return memcmp(f, endbr, sizeof(endbr)) ? f : f + sizeof(endbr);
#else
	/* The BL slot, after the MOV X9, X30 one. */
	return f + 4;
#endif
}

static atomic_t kprobe_hits = ATOMIC_INIT(0);

static int outsider_pre(struct kprobe *p, struct pt_regs *regs)
{
	atomic_inc(&kprobe_hits);
	return 0;
}
NOKPROBE_SYMBOL(outsider_pre);

static void other_patchers(void)
{
	struct kprobe kp = { .pre_handler = outsider_pre };
	struct textpoke_batch *b;
	u8 jmp[SITE_LEN];
	int i, ret, hits;
	void *keyed = keyed_site();

	/* Keep the key and the traced function reachable, so that neither is discarded. */
	verdict("keyed_function_off", outsider_keyed(), 0);
	verdict("traced_function_runs", outsider_traced(), foreign != 0);
	verdict("register_jump_label_site",
		keyed ? textpoke_register_site(THIS_MODULE, keyed, SITE_LEN) : -ENOENT, -ETXTBSY);
	verdict("register_ftrace_site",
		textpoke_register_site(THIS_MODULE, traced_site(), SITE_LEN), -ETXTBSY);

	/* A kprobe first, then the site. */
	kp.addr = (kprobe_opcode_t *)site(2);
	ret = register_kprobe(&kp);
	verdict("kprobe_on_future_site", ret, 0);
	if (!ret) {
		verdict("register_kprobed_site",
			textpoke_register_site(THIS_MODULE, site(2), SITE_LEN), -ETXTBSY);
		unregister_kprobe(&kp);
		ret = textpoke_register_site(THIS_MODULE, site(2), SITE_LEN);
		verdict("register_after_kprobe_gone", ret, 0);
		if (!ret)
			textpoke_unregister_site(THIS_MODULE, site(2));
	}

	/* The site first (site 0 is registered by now), then a kprobe on it. */
	memset(&kp, 0, sizeof(kp));
	kp.pre_handler = outsider_pre;
	kp.addr = (kprobe_opcode_t *)site(0);
	ret = register_kprobe(&kp);
	verdict("kprobe_on_registered_site", ret, 0);
	if (ret)
		return;
	atomic_set(&kprobe_hits, 0);
	ret = textpoke_encode(TEXTPOKE_JMP, site(0), site(1), SITE_LEN, jmp);
	if (!ret)
		ret = textpoke_batch_begin(&b);
	if (!ret) {
		ret = textpoke_batch_add(b, THIS_MODULE, site(0), jmp, SITE_LEN);
		if (!ret)
			ret = textpoke_batch_commit(b);
		textpoke_batch_end(b);
	}
	verdict("change_under_kprobe", ret, -EIO);
	for (i = 0; i < 10; i++)
		((void (*)(void))site(0))();
	hits = atomic_read(&kprobe_hits);
	verdict("kprobe_still_fires", hits, 10);
	unregister_kprobe(&kp);
}

static atomic_t int3_seen = ATOMIC_INIT(0);
static bool kprobe_armed;

static struct kprobe probe = {
	.pre_handler = outsider_pre,
};

#ifdef CONFIG_X86_64
extern char outsider_int3[];
void outsider_run_int3(void);

/* Claims the INT3 of outsider_int3 only, below textpoke's notifier. */
static int outsider_int3_notify(struct notifier_block *nb, unsigned long val, void *data)
{
	struct die_args *args = data;

	if (val != DIE_INT3 || user_mode(args->regs) ||
	    args->regs->ip - 1 != (unsigned long)outsider_int3 + ENDBR_INSN_SIZE)
		return NOTIFY_DONE;
	atomic_inc(&int3_seen);
	return NOTIFY_STOP;
}
NOKPROBE_SYMBOL(outsider_int3_notify);

static struct notifier_block outsider_nb = {
	.notifier_call = outsider_int3_notify,
	.priority = 0,
};

static void run_int3(unsigned int n)
{
	void (*f)(void) = (void (*)(void))outsider_int3;

	while (n--) {
		f();
		cond_resched();
	}
}
#else
extern char outsider_brk[];
#endif

static ssize_t control_write(struct file *file, const char __user *ubuf, size_t len,
			     loff_t *pos)
{
	char buf[48];
	unsigned int n;
	int ret = 0;

	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	if (len >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	buf[len] = 0;
	if (sscanf(buf, "int3 %u", &n) == 1) {
#ifdef CONFIG_X86_64
		run_int3(n);
#else
		ret = -EOPNOTSUPP;
#endif
	} else if (!strncmp(buf, "brk", 3)) {
#ifdef CONFIG_ARM64
		void (*f)(void) = (void (*)(void))outsider_brk;

		pr_info("textpoke_outsider: executing a BRK #0x008 that is no guard of textpoke's\n");
		f();
		pr_err("textpoke_outsider: a BRK #0x008 that is not textpoke's was swallowed\n");
#else
		ret = -EOPNOTSUPP;
#endif
	} else if (!strncmp(buf, "try_kprobe ", 11)) {
		struct kprobe kp = { .pre_handler = outsider_pre };
		unsigned long addr;

		if (kstrtoul(buf + 11, 16, &addr))
			return -EINVAL;
		kp.addr = (kprobe_opcode_t *)addr;
		ret = register_kprobe(&kp);
		if (!ret)
			unregister_kprobe(&kp);
	} else if (!strncmp(buf, "kprobe", 6)) {
		if (kprobe_armed || !kprobe_at)
			return -EINVAL;
		probe.addr = (kprobe_opcode_t *)kprobe_at;
		ret = register_kprobe(&probe);
		kprobe_armed = !ret;
	} else if (!strncmp(buf, "unkprobe", 8)) {
		if (!kprobe_armed)
			return -EINVAL;
		unregister_kprobe(&probe);
		kprobe_armed = false;
	} else {
		ret = -EINVAL;
	}
	return ret ? ret : len;
}

static int counters_show(struct seq_file *m, void *v)
{
	seq_printf(m, "int3_seen %d\nkprobe_hits %d\n", atomic_read(&int3_seen),
		   atomic_read(&kprobe_hits));
	return 0;
}

static int counters_open(struct inode *inode, struct file *file)
{
	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	return single_open(file, counters_show, NULL);
}

static const struct file_operations control_fops = {
	.owner = THIS_MODULE,
	.write = control_write,
};

static const struct file_operations counters_fops = {
	.owner = THIS_MODULE,
	.open = counters_open,
	.read = seq_read,
	.llseek = seq_lseek,
	.release = single_release,
};

static struct dentry *dir;

static int __init outsider_init(void)
{
	int ret;

	contract();
	foreign_site();
	/* Registered for good: this module's exit leaves them to textpoke to forget. */
	ret = textpoke_register_site(THIS_MODULE, site(0), SITE_LEN);
	verdict("register_kept_site_0", ret, 0);
	ret = textpoke_register_site(THIS_MODULE, site(1), SITE_LEN);
	verdict("register_kept_site_1", ret, 0);
	other_patchers();
	atomic_set(&kprobe_hits, 0);
	pr_info("textpoke_outsider: kept sites %px %px\n", site(0), site(1));
#ifdef CONFIG_X86_64
	ret = register_die_notifier(&outsider_nb);
	if (ret)
		return ret;
#endif
	dir = debugfs_create_dir("textpoke_outsider", NULL);
	debugfs_create_file("control", 0200, dir, NULL, &control_fops);
	debugfs_create_file("counters", 0400, dir, NULL, &counters_fops);
	return 0;
}
module_init(outsider_init);

static void __exit outsider_exit(void)
{
	debugfs_remove(dir);
	if (kprobe_armed)
		unregister_kprobe(&probe);
#ifdef CONFIG_X86_64
	unregister_die_notifier(&outsider_nb);
#endif
	/* The kept sites stay registered on purpose (see the top of the file). */
}
module_exit(outsider_exit);

MODULE_DESCRIPTION("textpoke tested from outside, through kernel/textpoke.h only");
MODULE_LICENSE("GPL");
