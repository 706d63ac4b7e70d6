// SPDX-License-Identifier: GPL-2.0
/*
 * textpoke_outsider: a module that knows textpoke only through kernel/textpoke.h, and tests it
 * the way an outside user would, including with inputs the header does not list. The guest agent
 * (tools/agent/src/scenarios/outsider.rs) loads it, reads its verdicts from the kernel log and checks the
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
 *  - "kprobe_race N" races kprobes against commits on a site of its own: one thread commits N
 *    changes of the site while this one arms a kprobe there N times, runs the site and disarms
 *    it. Every armed probe must fire at every run, every commit must succeed or find the probe
 *    (-EIO), and the site must end holding a whole instruction textpoke can change again.
 *  - x86: "optprobe_race N" races optimized kprobes against commits of a site they would
 *    cover: one thread commits the site back and forth, another runs its function throughout,
 *    while this one arms a kprobe on the instruction before the site, N times, lets kprobes
 *    optimize it into a jump over both (every other probe over the NOP, registered between two
 *    commits), runs the function and disarms the probe. Every run must
 *    do what textpoke says the site holds, every commit must succeed or be refused (-ETXTBSY
 *    while the probe stands, -EIO while its jump does), none may go through while an
 *    optimized probe stands over the site, and the site must end whole.
 *    "optprobe_unexecuted N" is the same race with nothing running the function, and only the
 *    commits under a probe's copy counted: the seeded defect's control.
 *  - "kernel_traps N" holds textpoke.h to its word on textpoke_cpu_traps(): one thread flips
 *    the module's own static key N times, which textpoke guards as the kernel's patcher, while
 *    this one runs the key's site with interrupts off; every execution an exception
 *    interrupted (the CPU tells: see stack_mark_set()) must have moved the count, and no other.
 *  - arm64: "brk" executes a BRK #0x008, textpoke's own immediate, that is no guard of
 *    textpoke's: textpoke must report it (the kernel dies with "Oops - BRK"), not hide it.
 */

#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/jump_label.h>
#include <linux/kdebug.h>
#include <linux/kprobes.h>
#include <linux/kthread.h>
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
#include <asm/nospec-branch.h>
#include <linux/objtool.h>
#define SITE_LEN 5
/*
 * A bare RET, as the tests need sites made of exact instructions: objtool is told it is meant
 * (a kernel with return thunks allows none otherwise), and that the instruction after a site,
 * whose address the kprobe race takes, is no indirect branch target.
 */
#define SITE_RET ANNOTATE_NOENDBR ANNOTATE_RETPOLINE_SAFE "ret\n"

#define FUNC(name, body)					\
	".balign 16\n.globl " #name "\n" #name ":\n" body	\
	".type " #name ", @function\n.size " #name ", . - " #name "\n"
asm(".pushsection .text, \"ax\"\n"
    FUNC(outsider_site0, ANNOTATE_NOENDBR ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n" SITE_RET)
    FUNC(outsider_site1, ANNOTATE_NOENDBR ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n" SITE_RET)
    FUNC(outsider_site2, ANNOTATE_NOENDBR ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n" SITE_RET)
    FUNC(outsider_site3, ANNOTATE_NOENDBR ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n" SITE_RET)
    FUNC(outsider_int3, ASM_ENDBR ANNOTATE_NOENDBR "int3\n" SITE_RET)
    FUNC(outsider_opt, ANNOTATE_NOENDBR "xor %eax, %eax\n"
	 ANNOTATE_NOENDBR ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n" SITE_RET)
    FUNC(outsider_opt_new, ANNOTATE_NOENDBR "mov $1, %eax\n" SITE_RET)
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
    FUNC(outsider_site3, "nop\nret\n")
    FUNC(outsider_brk, "brk #0x8\nret\n")
    ".popsection\n");
/* BRK #0x004 (kprobes' immediate): a decodable instruction the header does not list. */
static const u8 unlisted[] = { 0x80, 0x00, 0x20, 0xd4 };
static const u8 guard[] = { 0x00, 0x01, 0x20, 0xd4 };
#endif
extern char outsider_site0[], outsider_site1[], outsider_site2[], outsider_site3[];

static void *site(int i)
{
	switch (i) {
	case 3:
		return outsider_site3;
	case 2:
		return outsider_site2;
	case 1:
		return outsider_site1;
	default:
		return outsider_site0;
	}
}

/* Verdict lines printed so far: the agent must find exactly as many. */
static unsigned int verdicts;

/*
 * Runs one of this module's asm functions. They are hand-written, so they carry no type hash
 * for control-flow integrity (CONFIG_CFI_CLANG) to check an indirect call against: the call is
 * made without the check.
 */
static void __nocfi run_asm(void *f)
{
	((void (*)(void))f)();
}

static void verdict(const char *name, int got, int expected)
{
	verdicts++;
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

/* notrace: an ftrace call would overwrite the stack mark kernel_traps() reads. */
static noinline notrace int outsider_keyed(void)
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

static void *traced_site(void);

/*
 * Every instruction of outsider_traced()'s patchable entry, as ftrace writes them: on arm64 the
 * MOV X9, X30 before the call site and, with CALL_OPS, the two words of the ops literal before
 * the function (and a BTI C between them, where the kernel has BTI). Returns how many, at most
 * @max, the call site last.
 */
static int traced_entry(void **out, int max)
{
#ifdef CONFIG_ARM64
	u32 *f = (u32 *)outsider_traced;
	u32 *call;
	int n = 0;

	OPTIMIZER_HIDE_VAR(f);
	/* BTI C, then the MOV X9, X30 (the first NOP, once ftrace initialized it). */
	call = (*f == 0xd503245f ? f + 1 : f) + 1;
	if (IS_ENABLED(CONFIG_DYNAMIC_FTRACE_WITH_CALL_OPS)) {
		u32 *literal = (u32 *)ALIGN_DOWN((unsigned long)call - 12, 8);
		u32 *p;

		for (p = literal; p < call && n < max; p++)
			out[n++] = p;
	} else if (n < max) {
		out[n++] = call - 1;
	}
	if (n < max)
		out[n++] = call;
	return n;
#else
	if (max < 1)
		return 0;
	out[0] = traced_site();
	return 1;
#endif
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

/*
 * Does nothing, but its presence keeps a probe a breakpoint: kprobes never jump-optimizes a probe
 * with a post handler (optimize_kprobe()). An optimized probe is restored by a worker after
 * unregister_kprobe() returns, so the site would hold the probe's jump for a while afterwards.
 */
static void outsider_post(struct kprobe *p, struct pt_regs *regs, unsigned long flags)
{
}
NOKPROBE_SYMBOL(outsider_post);

/*
 * Whether an exception interrupted a call, as the CPU tells it (stack_mark.h): with interrupts
 * off, only a trap does.
 */
#include "stack_mark.h"

/*
 * The length of the jump label instruction at @code: 4 on arm64; on x86 2 (NOP2, JMP rel8) or 5
 * (NOP5, JMP rel32), as the assembler chose (arch_jump_entry_size(), which modules cannot call,
 * decodes it; these are the only forms it accepts). SITE_LEN for anything else, which textpoke
 * then refuses for its own reasons.
 */
static size_t keyed_len(const u8 *code)
{
#ifdef CONFIG_X86_64
	static const u8 nop5[] = { 0x0f, 0x1f, 0x44, 0x00, 0x00 };

	if (code[0] == 0xeb || (code[0] == 0x66 && code[1] == 0x90))
		return 2;
	if (code[0] == 0xe9 || !memcmp(code, nop5, sizeof(nop5)))
		return 5;
#endif
	return SITE_LEN;
}

/* Commits the one change of @addr to @insn, in a batch of its own. */
static int commit_one(void *addr, const u8 *insn)
{
	struct textpoke_batch *b;
	int ret = textpoke_batch_begin(&b);

	if (ret)
		return ret;
	ret = textpoke_batch_add(b, THIS_MODULE, addr, insn, SITE_LEN);
	if (!ret)
		ret = textpoke_batch_commit(b);
	textpoke_batch_end(b);
	return ret;
}

/*
 * Registers the @len-byte site at @addr, which another patcher owns, and logs the verdict
 * @name (-ETXTBSY expected). Should textpoke accept it (the debug build's defect 11), the site
 * is unregistered at once: the text stays its owner's.
 */
static void register_owned(const char *name, void *addr, size_t len)
{
	int ret = addr ? textpoke_register_site(THIS_MODULE, addr, len) : -ENOENT;

	verdict(name, ret, -ETXTBSY);
	if (!ret)
		textpoke_unregister_site(THIS_MODULE, addr);
}

static void other_patchers(void)
{
	struct kprobe kp = { .pre_handler = outsider_pre };
	u8 jmp[SITE_LEN];
	int i, ret, hits;
	void *keyed = keyed_site();

	/* Keep the key and the traced function reachable, so that neither is discarded. */
	verdict("keyed_function_off", outsider_keyed(), 0);
	verdict("traced_function_runs", outsider_traced(), foreign != 0);
	/*
	 * Each of the three registrations below is one textpoke would accept but for its owner:
	 * an instruction textpoke lists, at its own length, in this module's text. So with the
	 * check of other patchers skipped (defect 11) each gives 0, and -ETXTBSY only comes from
	 * that check.
	 */
	if (keyed)
		pr_info("textpoke_outsider: jump label site %px, %zu bytes\n", keyed,
			keyed_len(keyed));
	register_owned("register_jump_label_site", keyed, keyed ? keyed_len(keyed) : SITE_LEN);
	register_owned("register_ftrace_site", traced_site(), SITE_LEN);
	{
		void *entry[6];
		int n = traced_entry(entry, ARRAY_SIZE(entry));
		char name[40];

		/* At least the call site; on arm64 the MOV X9, X30 or the literal before it. */
		verdict("ftrace_entry_found", n >= (IS_ENABLED(CONFIG_ARM64) ? 2 : 1), 1);
		for (i = 0; i < n; i++) {
			snprintf(name, sizeof(name), "register_ftrace_entry_%d", i);
			register_owned(name, entry[i], SITE_LEN);
		}
	}

	/*
	 * A kprobe first, then the site. Registered disabled, the kprobe owns the address in
	 * kprobes' table without its breakpoint in the text, which still holds the NOP textpoke
	 * lists: only the check of other patchers can refuse the site.
	 */
	kp.addr = (kprobe_opcode_t *)site(2);
	kp.flags = KPROBE_FLAG_DISABLED;
	ret = register_kprobe(&kp);
	verdict("kprobe_on_future_site", ret, 0);
	if (!ret) {
		register_owned("register_kprobed_site", site(2), SITE_LEN);
		/* Armed, its breakpoint is in the text too. */
		verdict("kprobe_enabled", enable_kprobe(&kp), 0);
		register_owned("register_armed_kprobed_site", site(2), SITE_LEN);
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
		ret = commit_one(site(0), jmp);
	verdict("change_under_kprobe", ret, -EIO);
	for (i = 0; i < 10; i++)
		run_asm(site(0));
	hits = atomic_read(&kprobe_hits);
	verdict("kprobe_still_fires", hits, 10);
	unregister_kprobe(&kp);
}

/*
 * A kprobe registered disabled on a site already registered: kprobes copied the site's
 * instruction, and knows nothing of textpoke's sites, so it accepts; its breakpoint is not in
 * the text, so only textpoke's check of kprobes at the commit sees it. A change there would
 * leave the probe's copy stale, to be run once the probe is enabled: it must be refused with
 * -ETXTBSY, and the text left as it was.
 */
static void disabled_kprobe_on_site(void)
{
	struct kprobe kp = {
		.pre_handler = outsider_pre,
		.post_handler = outsider_post,
		.flags = KPROBE_FLAG_DISABLED,
		.addr = (kprobe_opcode_t *)site(1),
	};
	u8 before[SITE_LEN], jmp[SITE_LEN];
	int ret;

	ret = register_kprobe(&kp);
	verdict("disabled_kprobe_on_registered_site", ret, 0);
	if (ret)
		return;
	memcpy(before, site(1), SITE_LEN);
	ret = textpoke_encode(TEXTPOKE_JMP, site(1), site(2), SITE_LEN, jmp);
	if (!ret)
		ret = commit_one(site(1), jmp);
	verdict("change_under_disabled_kprobe", ret, -ETXTBSY);
	verdict("disabled_kprobe_site_unchanged", !memcmp(before, site(1), SITE_LEN), 1);
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

/*
 * The kprobe race: a committer thread changes site 3 back and forth, for as long as the control
 * write's thread goes on arming a kprobe there, running the site RACE_RUNS times and disarming
 * the probe, n times: the two overlap throughout, however fast either goes.
 */
#define RACE_RUNS 3

static struct {
	u8 insn[2][SITE_LEN];	/* what the site holds, and the change */
	int commits, refused, commit_errors, first_error;
	atomic_t attempts;	/* commits tried, whatever they returned */
} race;

static int race_committer(void *data)
{
	unsigned int cur = 0;

	while (!kthread_should_stop()) {
		int ret = commit_one(site(3), race.insn[!cur]);

		atomic_inc(&race.attempts);
		if (!ret) {
			race.commits++;
			cur = !cur;
		} else if (ret == -EIO) {
			/* A probe stands there; each refusal logs a line: let the probe's round go on. */
			race.refused++;
			msleep(1);
		} else {
			race.commit_errors++;
			race.first_error = race.first_error ?: ret;
		}
		cond_resched();
	}
	return 0;
}

static int kprobe_race(unsigned int n)
{
	struct task_struct *committer;
	struct kprobe kp;
	int armed = 0, refused = 0, missed = 0, ret, i, last, tries;
	unsigned int runs;
	u8 now[SITE_LEN];

	memset(&race, 0, sizeof(race));
	memcpy(race.insn[0], site(3), SITE_LEN);
	ret = textpoke_encode(TEXTPOKE_JMP, site(3), site(3) + SITE_LEN, SITE_LEN, race.insn[1]);
	if (!ret)
		ret = textpoke_register_site(THIS_MODULE, site(3), SITE_LEN);
	if (ret)
		return ret;
	committer = kthread_run(race_committer, NULL, "outsider_race");
	if (IS_ERR(committer)) {
		textpoke_unregister_site(THIS_MODULE, site(3));
		return PTR_ERR(committer);
	}
	get_task_struct(committer);
	for (runs = 0; runs < n; runs++) {
		memset(&kp, 0, sizeof(kp));
		kp.pre_handler = outsider_pre;
		/* It stands up to 100 ms: kept a breakpoint throughout. */
		kp.post_handler = outsider_post;
		kp.addr = (kprobe_opcode_t *)site(3);
		if (register_kprobe(&kp)) {
			/* A guard stands there: kprobes refuses a breakpoint. */
			refused++;
			cond_resched();
			continue;
		}
		armed++;
		last = atomic_read(&kprobe_hits);
		for (i = 0; i < RACE_RUNS; i++)
			run_asm(site(3));
		missed += RACE_RUNS - (atomic_read(&kprobe_hits) - last);
		/*
		 * Two commits tried while the probe stands (the first may have begun before it was
		 * armed), within 100 ms: every round meets the committer, however the two threads
		 * are scheduled.
		 */
		tries = atomic_read(&race.attempts);
		for (i = 0; i < 1000 && atomic_read(&race.attempts) - tries < 2; i++)
			usleep_range(50, 100);
		unregister_kprobe(&kp);
		cond_resched();
	}
	kthread_stop_put(committer);
	/* The site ends whole, as textpoke has it: one more change must go through. */
	memcpy(now, site(3), SITE_LEN);
	{
		bool is_old = !memcmp(now, race.insn[0], SITE_LEN);

		ret = commit_one(site(3), race.insn[is_old]);
		verdict("kprobe_race_site_whole",
			is_old || !memcmp(now, race.insn[1], SITE_LEN), 1);
	}
	verdict("kprobe_race_site_changes_after", ret, 0);
	pr_info("textpoke_outsider: kprobe race: %u rounds, %d probes armed, %d refused, %d commits, %d refused with -EIO, %d other errors (first %d), %d hits missed\n",
		n, armed, refused, race.commits, race.refused, race.commit_errors,
		race.first_error, missed);
	verdict("kprobe_race_hits_missed", missed, 0);
	verdict("kprobe_race_commit_errors", race.commit_errors, 0);
	/* Not vacuous: probes were armed, commits went through, and some met a probe. */
	verdict("kprobe_race_contended", armed > 0 && race.commits > 0 && race.refused > 0, 1);
	textpoke_unregister_site(THIS_MODULE, site(3));
	return 0;
}

#ifdef CONFIG_X86_64
/*
 * The optimized-kprobe race (x86). outsider_opt is XOR EAX, EAX, a site, RET: it returns 0 while
 * the site holds its NOP, and 1 while it holds a JMP to outsider_opt_new (MOV EAX, 1; RET). A
 * kprobe on the XOR with no post handler is optimized: at registration kprobes copies the XOR and
 * the site into a detour buffer, and about five jiffies later its optimizer writes a JMP to the
 * detour over both, under text_mutex alone. A change of the site after the copy would make the
 * detour run the old instruction; one made while the optimizer writes would tear it.
 */
extern char outsider_opt[], outsider_opt_new[];
#define OPT_SITE (outsider_opt + 2)

/* As run_asm(), for a function that returns a value in its return register. */
static int __nocfi run_asm_int(void *f)
{
	return ((int (*)(void))f)();
}

static struct {
	struct mutex lock;	/* held around each commit, and while runs are checked */
	unsigned int cur;	/* what the site holds, as textpoke has it: 0 the NOP, 1 the JMP */
	u8 insn[2][SITE_LEN];
	int commits, busy, changed, errors, first_error;
	/*
	 * Set, under the lock, from a probe's registration over the NOP to its unregistration:
	 * the probe's copy of the site is taken, and textpoke must refuse every change.
	 * under_copy counts the commits that went through meanwhile.
	 */
	bool copied;
	int under_copy;
	unsigned long runs, odd;
} opt;

static int opt_committer(void *data)
{
	while (!kthread_should_stop()) {
		int ret;

		mutex_lock(&opt.lock);
		ret = commit_one(OPT_SITE, opt.insn[!opt.cur]);
		if (!ret) {
			opt.commits++;
			opt.under_copy += opt.copied;
			opt.cur = !opt.cur;
		} else if (ret == -ETXTBSY) {
			opt.busy++;	/* a probe's copy covers the site */
		} else if (ret == -EIO) {
			opt.changed++;	/* a probe's jump still lies over it */
		} else {
			opt.errors++;
			opt.first_error = opt.first_error ?: ret;
		}
		mutex_unlock(&opt.lock);
		/* Each refusal logs a line: a few per round are enough. */
		if (ret)
			msleep(20);
		cond_resched();
	}
	return 0;
}

/* Runs the function throughout, on another CPU: a torn jump or an orphan guard kills it. */
static int opt_runner(void *data)
{
	while (!kthread_should_stop()) {
		int r = run_asm_int(outsider_opt);

		opt.odd += r != 0 && r != 1;
		/*
		 * A sleep, not a cond_resched(): kprobes' optimizer waits for every task to
		 * switch voluntarily (synchronize_rcu_tasks()) before it writes a jump.
		 */
		if (++opt.runs % 64 == 0)
			usleep_range(50, 100);
	}
	return 0;
}

/*
 * Waits up to @timeout jiffies for the probed instruction's first byte to read @byte. The
 * optimizer writes its jump after synchronize_rcu_tasks(), which takes a while on a preemptible
 * kernel under KASAN.
 */
static bool opt_first_byte_becomes(u8 byte, unsigned long timeout)
{
	unsigned long end = jiffies + timeout;

	while (READ_ONCE(*(u8 *)outsider_opt) != byte && time_before(jiffies, end))
		msleep(1);
	return READ_ONCE(*(u8 *)outsider_opt) == byte;
}

/*
 * @execute false is the seeded defect's variant (a textpoke that ignores other patchers,
 * tools/agent's controls): no thread runs the function, and nothing is checked but the commits
 * made under a probe's copy, since under the defect the function's bytes may be torn.
 */
static int optprobe_race(unsigned int n, bool execute)
{
	struct task_struct *committer, *runner = NULL;
	struct kprobe kp;
	int optimized = 0, failed = 0, stale = 0, under_copy = 0, ret, i;
	unsigned int round, cpu;

	memset(&opt, 0, sizeof(opt));
	mutex_init(&opt.lock);
	memcpy(opt.insn[0], OPT_SITE, SITE_LEN);
	ret = textpoke_encode(TEXTPOKE_JMP, OPT_SITE, outsider_opt_new, SITE_LEN, opt.insn[1]);
	if (!ret)
		ret = textpoke_register_site(THIS_MODULE, OPT_SITE, SITE_LEN);
	if (ret)
		return ret;
	cpu = cpumask_last(cpu_online_mask);
	if (execute) {
		runner = kthread_create_on_cpu(opt_runner, NULL, cpu, "outsider_optrun");
		if (IS_ERR(runner)) {
			textpoke_unregister_site(THIS_MODULE, OPT_SITE);
			return PTR_ERR(runner);
		}
		get_task_struct(runner);
		wake_up_process(runner);
	}
	committer = kthread_run(opt_committer, NULL, "outsider_optcommit");
	if (IS_ERR(committer)) {
		if (runner)
			kthread_stop_put(runner);
		textpoke_unregister_site(THIS_MODULE, OPT_SITE);
		return PTR_ERR(committer);
	}
	get_task_struct(committer);
	for (round = 0; round < n; round++) {
		memset(&kp, 0, sizeof(kp));
		kp.pre_handler = outsider_pre;
		kp.addr = (kprobe_opcode_t *)outsider_opt;
		/*
		 * Every other probe is registered between two commits, so that kprobes copies a
		 * whole instruction and the optimizer then races the commits that follow; the
		 * others whenever they come, a guard in the copy included, which kprobes must
		 * refuse to optimize.
		 */
		if (round % 2 == 0) {
			mutex_lock(&opt.lock);
			/* The NOP, as kprobes optimizes over no near JMP (can_boost()). */
			if (opt.cur && !commit_one(OPT_SITE, opt.insn[0])) {
				opt.commits++;
				opt.cur = 0;
			}
		}
		ret = register_kprobe(&kp);
		if (round % 2 == 0) {
			opt.copied = !ret;
			opt.under_copy = 0;
			mutex_unlock(&opt.lock);
		}
		if (ret) {
			failed++;
			continue;
		}
		/*
		 * Optimized, the XOR's first byte becomes the jump's opcode: every probe registered
		 * over the NOP is; one that copied a guard or the JMP never is.
		 */
		i = opt_first_byte_becomes(0xe9, round % 2 ? HZ / 10 : 10 * HZ);
		optimized += i;
		/* Commits meet the standing probe a while longer. */
		msleep(30);
		mutex_lock(&opt.lock);
		/*
		 * Counted only where the probe was optimized: kprobes had prepared its detour, so
		 * its copy was there from the registration on.
		 */
		if (opt.copied && i)
			under_copy += opt.under_copy;
		opt.copied = false;
		for (i = 0; execute && i < 10; i++)
			stale += run_asm_int(outsider_opt) != opt.cur;
		mutex_unlock(&opt.lock);
		unregister_kprobe(&kp);
		/* kprobes' optimizer takes the jump out later; commits go through again after. */
		opt_first_byte_becomes(0x31, 10 * HZ);
		msleep(30);
	}
	kthread_stop_put(committer);
	if (!execute) {
		pr_info("textpoke_outsider: optprobe race, not executed: %u rounds, %d probes optimized, %d commits, %d under a probe's copy\n",
			n, optimized, opt.commits, under_copy);
		verdict("optprobe_race_commits_under_copy", under_copy, 0);
		textpoke_unregister_site(THIS_MODULE, OPT_SITE);
		return 0;
	}
	kthread_stop_put(runner);
	/* The site ends whole, as textpoke has it, and one more change goes through. */
	verdict("optprobe_race_site_whole", opt_first_byte_becomes(0x31, 10 * HZ) &&
		!memcmp(OPT_SITE, opt.insn[opt.cur], SITE_LEN), 1);
	ret = commit_one(OPT_SITE, opt.insn[!opt.cur]);
	if (!ret)
		opt.cur = !opt.cur;
	verdict("optprobe_race_site_changes_after", ret, 0);
	stale += run_asm_int(outsider_opt) != opt.cur;
	pr_info("textpoke_outsider: optprobe race: %u rounds, %d probes optimized, %d not registered, %d commits, %d refused with -ETXTBSY, %d with -EIO, %d other errors (first %d), %lu runs beside, %d checked runs stale\n",
		n, optimized, failed, opt.commits, opt.busy, opt.changed, opt.errors,
		opt.first_error, opt.runs, stale);
	verdict("optprobe_race_stale_runs", stale, 0);
	verdict("optprobe_race_commits_under_copy", under_copy, 0);
	verdict("optprobe_race_odd_results", (int)opt.odd, 0);
	verdict("optprobe_race_commit_errors", opt.errors + failed, 0);
	/* Not vacuous: probes were optimized, commits went through, and some met a probe. */
	verdict("optprobe_race_contended", optimized > 0 && opt.commits > 0 && opt.busy > 0 &&
		opt.runs > 0, 1);
	textpoke_unregister_site(THIS_MODULE, OPT_SITE);
	return 0;
}
#endif

/*
 * The header's word on textpoke_cpu_traps(): a flipper thread changes the module's own static
 * key, which the kernel hands to textpoke, while this thread runs the key's site with
 * interrupts off and tells from the stack whether an exception interrupted each run.
 */
static unsigned int flips_left;

static int key_flipper(void *data)
{
	while (READ_ONCE(flips_left) && !kthread_should_stop()) {
		if (static_key_enabled(&outsider_key))
			static_branch_disable(&outsider_key);
		else
			static_branch_enable(&outsider_key);
		WRITE_ONCE(flips_left, flips_left - 1);
	}
	while (!kthread_should_stop())
		schedule_timeout_interruptible(1);
	return 0;
}

static struct {
	unsigned long runs, trapped, counted, disagree;
} kt;

/* Runs the key's site on its own CPU until the flips are done. */
static int key_runner(void *data)
{
	unsigned long flags;

	while (READ_ONCE(flips_left) && !kthread_should_stop()) {
		unsigned int cpu;
		u64 before, after;
		bool gone;

		local_irq_save(flags);
		cpu = smp_processor_id();
		before = textpoke_cpu_traps(cpu);
		stack_mark_set();
		outsider_keyed();
		gone = stack_mark_gone();
		after = textpoke_cpu_traps(cpu);
		local_irq_restore(flags);
		kt.runs++;
		kt.trapped += gone;
		kt.counted += after != before;
		kt.disagree += gone != (after != before);
		if (kt.runs % 256 == 0)
			cond_resched();
	}
	while (!kthread_should_stop())
		schedule_timeout_interruptible(1);
	return 0;
}

static int kernel_traps(unsigned int n)
{
	struct task_struct *flipper, *runner;
	unsigned int a, b;

	memset(&kt, 0, sizeof(kt));
	flips_left = n;
	/* Two CPUs, so that the runs meet the guards of the flips. */
	a = cpumask_first(cpu_online_mask);
	b = cpumask_next(a, cpu_online_mask);
	if (b >= nr_cpu_ids)
		return -EOPNOTSUPP;
	runner = kthread_create_on_cpu(key_runner, NULL, a, "outsider_run");
	if (IS_ERR(runner))
		return PTR_ERR(runner);
	flipper = kthread_create_on_cpu(key_flipper, NULL, b, "outsider_flip");
	if (IS_ERR(flipper)) {
		kthread_stop(runner);
		return PTR_ERR(flipper);
	}
	get_task_struct(runner);
	get_task_struct(flipper);
	wake_up_process(runner);
	wake_up_process(flipper);
	while (READ_ONCE(flips_left))
		schedule_timeout_interruptible(HZ / 50);
	kthread_stop_put(flipper);
	kthread_stop_put(runner);
	if (static_key_enabled(&outsider_key))
		static_branch_disable(&outsider_key);
	pr_info("textpoke_outsider: kernel traps: %u flips, %lu runs, %lu interrupted by an exception, %lu counted by textpoke_cpu_traps()\n",
		n, kt.runs, kt.trapped, kt.counted);
	verdict("kernel_traps_counted_as_seen", kt.disagree, 0);
	verdict("kernel_traps_seen", kt.trapped > 0, 1);
	return 0;
}

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
		pr_info("textpoke_outsider: executing a BRK #0x008 that is no guard of textpoke's\n");
		run_asm(outsider_brk);
		pr_err("textpoke_outsider: a BRK #0x008 that is not textpoke's was swallowed\n");
#else
		ret = -EOPNOTSUPP;
#endif
	} else if (sscanf(buf, "kprobe_race %u", &n) == 1) {
		verdicts = 0;
		ret = kprobe_race(n);
		pr_info("textpoke_outsider: %u verdicts\n", verdicts);
	} else if (sscanf(buf, "optprobe_race %u", &n) == 1 ||
		   sscanf(buf, "optprobe_unexecuted %u", &n) == 1) {
#ifdef CONFIG_X86_64
		verdicts = 0;
		ret = optprobe_race(n, !strncmp(buf, "optprobe_race ", 14));
		pr_info("textpoke_outsider: %u verdicts\n", verdicts);
#else
		ret = -EOPNOTSUPP;
#endif
	} else if (sscanf(buf, "kernel_traps %u", &n) == 1) {
		verdicts = 0;
		ret = kernel_traps(n);
		pr_info("textpoke_outsider: %u verdicts\n", verdicts);
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
	disabled_kprobe_on_site();
	atomic_set(&kprobe_hits, 0);
	pr_info("textpoke_outsider: kept sites %px %px\n", site(0), site(1));
	pr_info("textpoke_outsider: %u verdicts\n", verdicts);
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
