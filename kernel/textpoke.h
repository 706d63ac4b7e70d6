/* SPDX-License-Identifier: GPL-2.0 */
/*
 * textpoke: breakpoint-guarded patching of module text, with an unambiguous
 * PERF_RECORD_TEXT_POKE for every change.
 *
 * A module registers the sites of its own text it wants to patch, then changes
 * any number of them together in a batch. Committing a batch writes a guard
 * (x86 INT3, arm64 BRK #0x008) over every site, synchronizes every CPU, emits
 * one TEXT_POKE record per site, writes the new instructions and synchronizes
 * again. A CPU that executes a guard meanwhile traps, and textpoke emulates the
 * site's NEW instruction, so every execution either precedes the record with
 * the old instruction or behaves as the new one: a tracer can switch its copy
 * of the text at the record's timestamp. The exact steps are kernel/plan.rs's.
 *
 * On arm64 the architecture allows an instruction to change while another CPU
 * may execute it only between B, BL, BRK, NOP, SVC, HVC, SMC and ISB. A change
 * from or to any other instruction (here MOV X9, X30 and RET) is made in a
 * stop_machine() step of the same batch, with its record emitted while every
 * other CPU is parked; it costs one more all-CPU rendezvous.
 *
 * All of that is for a tracer. When no perf event asks for TEXT_POKE records
 * (perf_text_poke_listening(), decided under text_mutex, which the batch then
 * holds to its end so that no listener can arrive half way), a batch emits no
 * record, and on arm64 writes the new instructions without guards and
 * synchronizes once, as the kernel's own arm64 patching does; x86 keeps its
 * guards, which a torn instruction rules out (docs/protocol.md).
 *
 * Only registered sites of a module's own core text can be patched, never
 * textpoke's own text (its trap path), and only by the module that
 * registered them. Sites of a module that goes away are forgotten. Every
 * function returns 0 or a negative errno, logs a line on refusal, and changes
 * nothing when it refuses (the canonical table is kernel/refusal.rs):
 *
 *   -ENOENT      address is not a registered site
 *   -EADDRINUSE  address is inside, or overlaps, a registered site
 *   -EPERM       site in textpoke's own text (the trap path)
 *   -EFAULT      site outside its module's text, or misaligned
 *   -EACCES      site registered by another module
 *   -EOPNOTSUPP  instruction not listed below
 *   -EMSGSIZE    instruction of the wrong size for the site
 *   -ERANGE      branch target out of range (textpoke_encode())
 *   -EILSEQ      new instruction is the guard itself
 *   -EEXIST      site twice in one batch
 *   -EBUSY       site owned by another batch in flight
 *   -ETXTBSY     site in text a jump label, static call, ftrace or kprobe owns
 *   -ENODATA     commit of an empty batch
 *   -E2BIG       more than TEXTPOKE_MAX_BATCH sites in a batch
 *   -EALREADY    batch already committed
 *   -ENOSPC      16 batches committing at this moment; retry the commit
 *   -EIO         site text changed behind textpoke's back
 *   -ENODEV      the site's module is going away, or textpoke is
 *   -EINVAL      a null pointer or an unknown operation
 *
 * Any number of batches may be begun and hold sites; at most 16 commit at the
 * same moment. A commit refused with -ENOSPC wrote nothing, and the batch can
 * be committed again.
 *
 * Listed instructions, the only ones a site may hold or a batch may write:
 * x86-64 NOP2 (66 90), NOP5 (0f 1f 44 00 00), JMP rel8, JMP rel32,
 * CALL rel32, RET (padded with INT3 to the site's length); arm64 NOP, B, BL,
 * MOV X9, X30, RET. On an x86-64 kernel built with return thunks
 * (CONFIG_MITIGATION_RETHUNK), RET is not listed: a bare RET would bypass them.
 */
#ifndef _TEXTPOKE_H
#define _TEXTPOKE_H

#include <linux/types.h>

struct module;
struct textpoke_batch;

/* Most sites in one batch. */
#define TEXTPOKE_MAX_BATCH 4096

/* Instructions textpoke_encode() builds. */
enum textpoke_op {
	TEXTPOKE_NOP = 0,	/* x86: NOP2 (len 2), NOP5 (len 5); arm64: NOP */
	TEXTPOKE_JMP = 1,	/* x86: JMP rel8 (len 2), JMP rel32 (len 5); arm64: B */
	TEXTPOKE_CALL = 2,	/* x86: CALL rel32 (len 5); arm64: BL */
	TEXTPOKE_RET = 3,	/* x86: RET padded with INT3 to len; arm64: RET */
	TEXTPOKE_MOV_X9_X30 = 4,	/* arm64 only: MOV X9, X30 */
};

/* What a commit cost. */
struct textpoke_batch_stats {
	u64 nsecs;	/* wall time of the commit */
	u32 sites;	/* sites changed */
	u32 syncs;	/* all-CPU syncs (IPI rounds; a stop_machine() step counts one) */
	u32 writes;	/* text writes */
	u32 records;	/* PERF_RECORD_TEXT_POKE records emitted (0: none listened) */
};

/* Encode @op at @site (jumping or calling to @target), @len bytes, into @out. */
int textpoke_encode(enum textpoke_op op, const void *site, const void *target,
		    size_t len, u8 *out);

/*
 * Register the @len-byte site at @addr in @owner's core text (pass
 * THIS_MODULE). The instruction there must be a listed one of @len bytes.
 * Unregister every site before the module's exit returns; sites still
 * registered when a module goes away are forgotten (with a log line).
 */
int textpoke_register_site(struct module *owner, const void *addr, size_t len);
int textpoke_unregister_site(struct module *owner, const void *addr);

/*
 * Batches. begin() stores a new empty batch in @out. add() claims @owner's
 * site at @addr for this batch (pass THIS_MODULE: only the module that
 * registered a site may change it) and records its new instruction @insn
 * (@len bytes). commit() applies every change (process context; sleeps); once
 * it has written anything it cannot be called again. stats() reports what the
 * commit cost. end() frees the batch and gives back the sites of an
 * uncommitted one. A site another patcher took since it was registered is
 * refused at commit, the batch writing nothing: -EIO where it changed the
 * text, -ETXTBSY where a kprobe holds a copy of it (one registered there
 * disabled, or an optimized one beside it). While a batch exists it pins textpoke and the modules
 * owning its sites.
 */
int textpoke_batch_begin(struct textpoke_batch **out);
int textpoke_batch_add(struct textpoke_batch *batch, struct module *owner,
		       const void *addr, const u8 *insn, size_t len);
int textpoke_batch_commit(struct textpoke_batch *batch);
int textpoke_batch_stats(struct textpoke_batch *batch,
			 struct textpoke_batch_stats *out);
void textpoke_batch_end(struct textpoke_batch *batch);

/*
 * Guard traps emulated on @cpu so far: at the guards of every batch, the
 * modules' and the kernel's own jump label and ftrace changes alike. A thread
 * that reads it before and after executing a site on @cpu with interrupts
 * disabled learns whether that execution trapped (only an NMI that trapped
 * meanwhile would count too).
 */
u64 textpoke_cpu_traps(unsigned int cpu);

#endif /* _TEXTPOKE_H */
