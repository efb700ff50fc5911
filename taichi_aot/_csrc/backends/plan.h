/* backends/plan.c's functions, for the own launches (backends/cuda.c, backends/x64.c): a private header, never
   handed to cffi. */
#ifndef TAICHI_AOT_BACKENDS_PLAN_H
#define TAICHI_AOT_BACKENDS_PLAN_H

#include <stdint.h>

#include "taichi_aot.h"

/* An ndarray argument's shape written at its plan's offset in `params` (as many dimensions as the plan lays out);
   returns its element count (at most 2**40). */
/* Hidden: called directly, never through the PLT (nothing looks them up by name). */
__attribute__((visibility("hidden"))) uint64_t taichi_aot_plan_shape(const TaichiAotArgPlan *a, const TiNdArray *nd, unsigned char *params);

/* The gradient of ndarray `nd` in a reverse-mode kernel's arguments: `args[*next]` (then advanced), which must be an
   ndarray of `nd`'s shape before `end`; else NULL. */
__attribute__((visibility("hidden"))) const TiNdArray *taichi_aot_plan_gradient(const TiNdArray *nd, const TiArgument *args, uint32_t end, uint32_t *next);

/* A scalar or vector argument's bytes written at its plan's offset in `params`; 0, or TAICHI_AOT_PLAN_BAD_ARGS where
   the TiArgument is not what the plan expects. */
__attribute__((visibility("hidden"))) int taichi_aot_plan_value(const TaichiAotArgPlan *a, const TiArgument *v, unsigned char *params);

#endif
