// SPDX-License-Identifier: GPL-2.0
/* The same C shims as textpoke itself: every module links its own copy, none is exported. */
#include "../rust/helpers.c"
