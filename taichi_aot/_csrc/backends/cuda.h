/* The own CUDA launcher's launches (backends/cuda.c), the entries of its kinds in kinds.c's table. A private header: never handed to cffi. */
#ifndef TAICHI_AOT_BACKENDS_CUDA_H
#define TAICHI_AOT_BACKENDS_CUDA_H

#include "taichi_aot.h"

__attribute__((visibility("hidden"))) int aot_cuda_kernel_launch(const TaichiAotLaunch *l);
__attribute__((visibility("hidden"))) int aot_cuda_kernel_elsewhere(const TaichiAotLaunch *l, const TaichiAotElsewhere *where);
__attribute__((visibility("hidden"))) int aot_cuda_graph_launch(const TaichiAotLaunch *l);
__attribute__((visibility("hidden"))) int aot_cuda_graph_elsewhere(const TaichiAotLaunch *l, const TaichiAotElsewhere *where);
/* A quick launch's hold (kinds.h): the stand-in's lock, taken where free, for a kernel or graph that waits for
   nothing; let go after the launch. */
__attribute__((visibility("hidden"))) int aot_cuda_kernel_quick(const TaichiAotLaunch *l, int hold, void **held);
__attribute__((visibility("hidden"))) int aot_cuda_graph_quick(const TaichiAotLaunch *l, int hold, void **held);
__attribute__((visibility("hidden"))) void aot_cuda_let_go_quick(void *held);

#endif
