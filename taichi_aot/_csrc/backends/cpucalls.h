/* A CPU runtime's calls lock (backends/cpucalls.c): its hold for a launch any thread makes and its quick hold,
   entries of the CPU runtime's kinds in kinds.c's table (the hold is registered for the runtime too, holds.h, which
   libtaichi's kinds ask; what either hold returns, both let-goes take). A private header: never handed to cffi. */
#ifndef TAICHI_AOT_BACKENDS_CPUCALLS_H
#define TAICHI_AOT_BACKENDS_CPUCALLS_H

#include "taichi_aot.h"

__attribute__((visibility("hidden"))) void *aot_cpu_hold_calls(TiRuntime runtime);
__attribute__((visibility("hidden"))) void aot_cpu_let_go_calls(void *held);
__attribute__((visibility("hidden"))) int aot_cpu_quick_hold(const TaichiAotLaunch *l, int hold, void **held);

#endif
