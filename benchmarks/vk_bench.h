/* What the raw Vulkan programs of the benchmarks (vk_raw.c, vk_copy.c) share: Vulkan's functions looked up by name
   (the loader is opened at run time), a check that returns 1 from main on a failure, and a clock. */
#ifndef TAICHI_AOT_VK_BENCH_H
#define TAICHI_AOT_VK_BENCH_H

#define VK_NO_PROTOTYPES
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vulkan/vulkan.h>

#define LOAD(scope, name) PFN_##name name = (PFN_##name)gipa(scope, #name)
#define LOAD_DEVICE(name) PFN_##name name = (PFN_##name)gdpa(device, #name)
#define CHECK(call)                                                                                                    \
    do {                                                                                                               \
        VkResult r_ = (call);                                                                                          \
        if (r_ != VK_SUCCESS) {                                                                                        \
            fprintf(stderr, "%s failed: %d\n", #call, (int)r_);                                                        \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

/* Seconds on the monotonic clock. */
static inline double vk_bench_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
