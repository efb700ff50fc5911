/* A profile's CUDA events around the own CUDA launcher's launches (backends/cudaprofile.c, called by
   backends/cuda.c): a private header, never handed to cffi. */
#ifndef TAICHI_AOT_BACKENDS_CUDAPROFILE_H
#define TAICHI_AOT_BACKENDS_CUDAPROFILE_H

#include <stdint.h>

#include "taichi_aot.h"

/* An event recorded on `stream` before a launch of the profile's record `token` (the context current), or NULL where
   none is (no profile's record, or the driver refused; the launcher opens none on a stream being captured); its twin
   after the launch, the pair then handed to the profile (read when its records are taken), its span given to
   `parent` too (a graph's record, `token` its dispatch's; -1: none). */
__attribute__((visibility("hidden"))) void *aot_cuda_stamp_open(const TaichiAotCudaRuntime *rt, int64_t token,
                                                                int64_t parent);
/* 1 where the twin was recorded; 0 where the driver refused it (the records told they get no device times). */
__attribute__((visibility("hidden"))) int aot_cuda_stamp_close(void *stamp);

#endif
