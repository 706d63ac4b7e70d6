// SPDX-License-Identifier: GPL-2.0
/* The same C shims as textpoke itself: every module links its own copy, none is exported. */
#include "../rust/helpers.c"

#include <linux/moduleparam.h>

/*
 * The exerciser's one parameter (the Rust `module!` of 6.12 has none): at most this many sites
 * of each pool are registered, 0 for all. A load registers every site with textpoke; the unload
 * stress (tools/agent/src/scenarios/stress.rs), which loads the exerciser a hundred times and needs only
 * a few sites, keeps loads short with it.
 */
unsigned int textpoke_ex_pool_sites;
module_param_named(pool_sites, textpoke_ex_pool_sites, uint, 0444);
MODULE_PARM_DESC(pool_sites, "sites registered per pool, at most (0: all)");
