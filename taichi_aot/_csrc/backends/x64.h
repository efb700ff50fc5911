/* The own x64 launch (backends/x64.c), the entries of its kind in kinds.c's table. A private header: never handed to cffi. */
#ifndef TAICHI_AOT_BACKENDS_X64_H
#define TAICHI_AOT_BACKENDS_X64_H

#include "taichi_aot.h"

__attribute__((visibility("hidden"))) int aot_cpu_call_launch(const TaichiAotLaunch *l);
__attribute__((visibility("hidden"))) int aot_cpu_call_elsewhere(const TaichiAotLaunch *l, const TaichiAotElsewhere *where);

#endif
