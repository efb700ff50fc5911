/* The own x64 launch (backends/x64.c), the entries of its kind in kinds.c's table. A private header: never handed to cffi. */
#ifndef TAICHI_AOT_BACKENDS_X64_H
#define TAICHI_AOT_BACKENDS_X64_H

#include "taichi_aot.h"

__attribute__((visibility("hidden"))) int aot_cpu_call_launch(const TaichiAotLaunch *l);
__attribute__((visibility("hidden"))) int aot_cpu_call_elsewhere(const TaichiAotLaunch *l, const TaichiAotElsewhere *where);
/* This thread's last launch's values of the kernel `handle` (a TaichiAotCpuKernel: taichi_aot_cpu_values). */
__attribute__((visibility("hidden"))) const void *aot_cpu_call_values(const void *handle);

#endif
