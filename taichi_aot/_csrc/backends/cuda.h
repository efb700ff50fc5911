/* The own CUDA launcher's launches (backends/cuda.c), the entries of its kinds in kinds.c's table. A private header: never handed to cffi. */
#ifndef TAICHI_AOT_BACKENDS_CUDA_H
#define TAICHI_AOT_BACKENDS_CUDA_H

#include "taichi_aot.h"

__attribute__((visibility("hidden"))) int aot_cuda_kernel_launch(const TaichiAotLaunch *l);
__attribute__((visibility("hidden"))) int aot_cuda_kernel_elsewhere(const TaichiAotLaunch *l, const TaichiAotElsewhere *where);
__attribute__((visibility("hidden"))) int aot_cuda_graph_launch(const TaichiAotLaunch *l);
__attribute__((visibility("hidden"))) int aot_cuda_graph_elsewhere(const TaichiAotLaunch *l, const TaichiAotElsewhere *where);

#endif
