/* libtaichi's launches (backends/libtaichi.c), the entries of kinds 0 and 1 in kinds.c's table. A private header: never handed to cffi. */
#ifndef TAICHI_AOT_BACKENDS_LIBTAICHI_H
#define TAICHI_AOT_BACKENDS_LIBTAICHI_H

#include "taichi_aot.h"

__attribute__((visibility("hidden"))) int aot_library_launch(const TaichiAotLaunch *l);
__attribute__((visibility("hidden"))) int aot_library_elsewhere(const TaichiAotLaunch *l, const TaichiAotElsewhere *where);
__attribute__((visibility("hidden"))) int aot_library_drain(const TaichiAotLaunch *l);
__attribute__((visibility("hidden"))) void *aot_library_hold_calls(TiRuntime runtime);
__attribute__((visibility("hidden"))) void aot_library_let_go_calls(void *held);

#endif
