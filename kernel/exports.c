// SPDX-License-Identifier: GPL-2.0
/*
 * What Rust cannot express in a 6.12 module: exporting the C API (implemented
 * in kernel/api.rs), the layout checks of its types against the header, the
 * debug module parameter (debug builds only), and the kprobe blacklist entry
 * of the trap handler.
 */

#include <linux/build_bug.h>
#include <linux/kprobes.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/security.h>
#include <linux/stddef.h>
#include <uapi/linux/perf_event.h>

#include "textpoke.h"

EXPORT_SYMBOL_GPL(textpoke_encode);
EXPORT_SYMBOL_GPL(textpoke_register_site);
EXPORT_SYMBOL_GPL(textpoke_unregister_site);
EXPORT_SYMBOL_GPL(textpoke_batch_begin);
EXPORT_SYMBOL_GPL(textpoke_batch_add);
EXPORT_SYMBOL_GPL(textpoke_batch_commit);
EXPORT_SYMBOL_GPL(textpoke_batch_stats);
EXPORT_SYMBOL_GPL(textpoke_batch_end);
EXPORT_SYMBOL_GPL(textpoke_cpu_traps);

/*
 * The header's types as kernel/batch.rs and kernel/insn.rs mirror them: the
 * same numbers are asserted there.
 */
static_assert(sizeof(struct textpoke_batch_stats) == 24);
static_assert(offsetof(struct textpoke_batch_stats, nsecs) == 0);
static_assert(offsetof(struct textpoke_batch_stats, sites) == 8);
static_assert(offsetof(struct textpoke_batch_stats, syncs) == 12);
static_assert(offsetof(struct textpoke_batch_stats, writes) == 16);
static_assert(offsetof(struct textpoke_batch_stats, records) == 20);
static_assert(TEXTPOKE_NOP == 0 && TEXTPOKE_JMP == 1 && TEXTPOKE_CALL == 2 &&
	      TEXTPOKE_RET == 3 && TEXTPOKE_MOV_X9_X30 == 4);
static_assert(TEXTPOKE_MAX_BATCH == 4096);

/* rust/patch_series.rs mirrors the record type kernel/new_text.rs describes module text with. */
static_assert(PERF_RECORD_KSYMBOL_TYPE_OOL == 2);

/*
 * rust/series.rs mirrors struct text_patcher_ops (patch 0008) and asserts the same numbers.
 * The module also builds against a kernel without the series (the check that it refuses to
 * load there), which has no such header.
 */
#if __has_include(<linux/text_patcher.h>)
#include <linux/text_patcher.h>
static_assert(sizeof(struct text_patcher_ops) == 16);
static_assert(offsetof(struct text_patcher_ops, queue) == 0);
static_assert(offsetof(struct text_patcher_ops, apply) == 8);
#endif

/*
 * Whether textpoke offers itself as the kernel's jump label and ftrace patcher at load
 * (kernel/patcher.rs). 0 leaves the kernel its stock paths, for comparing the two in one boot
 * (make bench) or for a kernel whose owner wants only the module API.
 */
bool textpoke_kernel_patcher = true;
module_param_named(kernel_patcher, textpoke_kernel_patcher, bool, 0444);
MODULE_PARM_DESC(kernel_patcher,
		 "Make the kernel's jump label and ftrace changes through textpoke (default 1); read at load");

/* The trap handler must never be probed: a kprobe there would recurse. */
struct pt_regs;
bool textpoke_trap(struct pt_regs *regs);
NOKPROBE_SYMBOL(textpoke_trap);

#ifdef CONFIG_TEXTPOKE_DEBUG_PROTOCOL
/*
 * DEBUG BUILDS ONLY: deliberately break the protocol, so that the guest's
 * checks can be shown to catch a broken engine under the same load the
 * correct one passes. Read once per batch; every batch that uses it says so.
 * Setting it taints the kernel, and is refused under lockdown.
 */
int textpoke_debug_protocol;

static int textpoke_debug_protocol_set(const char *val, const struct kernel_param *kp)
{
	int ret = security_locked_down(LOCKDOWN_MODULE_PARAMETERS);

	if (ret) {
		pr_err("textpoke: refusing %s under lockdown\n", kp->name);
		return ret;
	}
	ret = param_set_int(val, kp);
	if (ret)
		return ret;
	if (*(int *)kp->arg) {
		pr_warn("textpoke: %s=%d breaks the protocol on purpose; tainting the kernel\n",
			kp->name, *(int *)kp->arg);
		add_taint(TAINT_USER, LOCKDEP_STILL_OK);
	}
	return 0;
}

static const struct kernel_param_ops textpoke_debug_protocol_ops = {
	.set = textpoke_debug_protocol_set,
	.get = param_get_int,
};
module_param_cb(debug_protocol, &textpoke_debug_protocol_ops, &textpoke_debug_protocol, 0600);

/*
 * DEBUG BUILDS ONLY: the k-th write of each module batch fails, as a failed
 * text write would (kernel/debug.rs). Same rules as debug_protocol.
 */
int textpoke_fail_write;
module_param_cb(fail_write, &textpoke_debug_protocol_ops, &textpoke_fail_write, 0600);
MODULE_PARM_DESC(fail_write,
		 "DEBUG BUILDS ONLY: the k-th write of each module batch fails (0: none, the default)");

/*
 * DEBUG BUILDS ONLY: after such a failure, recovery waits this many
 * milliseconds (at most 2000) before its first repair, long enough for a
 * listener to start meanwhile (kernel/debug.rs). Same rules as debug_protocol.
 */
int textpoke_fail_pause_ms;
module_param_cb(fail_pause_ms, &textpoke_debug_protocol_ops, &textpoke_fail_pause_ms, 0600);
MODULE_PARM_DESC(fail_pause_ms,
		 "DEBUG BUILDS ONLY: recovery from a failed write waits this long first (0: not at all, the default)");

/*
 * DEBUG BUILDS ONLY: module batches play another patcher writing at their
 * first guarded site before their guards are checked: 1 the old bytes behind
 * the guard (x86), 2 the old instruction over it (kernel/debug.rs).
 */
int textpoke_conflict_write;
module_param_cb(conflict_write, &textpoke_debug_protocol_ops, &textpoke_conflict_write, 0600);
MODULE_PARM_DESC(conflict_write,
		 "DEBUG BUILDS ONLY: write at a batch's first guarded site before its guards are checked (0: no, the default; 1: behind the guard; 2: over it)");

/*
 * DEBUG BUILDS ONLY: the kernel queue refuses to grow past the room it has,
 * as if memory had run out (kernel/debug.rs).
 */
int textpoke_refuse_growth;
module_param_cb(refuse_growth, &textpoke_debug_protocol_ops, &textpoke_refuse_growth, 0600);
MODULE_PARM_DESC(refuse_growth,
		 "DEBUG BUILDS ONLY: the kernel queue cannot grow past the room it has (0: it can, the default)");
MODULE_PARM_DESC(debug_protocol,
		 "DEBUG BUILDS ONLY, breaks the guarantees: 0 guarded (default), 1 record before the guard sync, 2 no sync between tails and first bytes (x86), 3 unguarded nosync writes, 4 BEFORE/AFTER records around nosync writes, 5 trap emulates the old instruction, 6 trap emulates another site's new instruction, 7 skip one site's final write, 8 drop one record, 9 wrong old bytes in one record, 10 swallow foreign traps, 11 register over other patchers' text, 12 skip the listener handshake, 13 release text_mutex on a failed write, 14 ignore other patchers' writes at guarded sites, 15 hand a kernel change back when the queue cannot grow (kernel/defects.rs)");
#endif
