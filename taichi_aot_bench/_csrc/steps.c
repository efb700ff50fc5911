/* A step loop driven by C alone: the raw C reference of `taichi-aot bench` (its launch and simulation
   sections), run in the benchmark's own process, on its runtime, with the handles and packed arguments
   of the launches it compares, so that both sides launch the same work on the same device queue. The
   launches are plain ti_launch_kernel / ti_launch_compute_graph calls (or the own CUDA launcher's, backends/cuda.c): no
   check of any kind. The functions are taichi_aot._native's, called through the addresses it handed over
   (steps.h: TaichiAotBenchCalls). */
#include <string.h>
#include <time.h>

#include "steps.h"
#include "taichi/taichi_cpu.h"
#include "taichi/taichi_cuda.h"
#include "taichi_aot.h"

static TaichiAotBenchCalls calls;

/* The bound function `name` (a field of TaichiAotBenchCalls), with the type of its declaration. */
#define CALL(name) ((__typeof__(&name))calls.name)

void taichi_aot_bench_bind(const TaichiAotBenchCalls *c) {
    calls = *c;
}

static double taichi_aot_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void taichi_aot_bench_let_go(uint64_t ns) {
    double end = taichi_aot_now() + (double)ns * 1e-9;
    while (taichi_aot_now() < end) {
    }
}

/* One launch, the work launch.c's launch_any makes for every launch from Python: a kernel of the own CUDA
   launcher or a graph of them, else, where libtaichi's launches are not refused (pending[1]), a kernel or a graph
   through libtaichi and a read of its error slot. A kind this loop does not time (the own x64 launches) or knows
   not: -1, before anything is launched (taichi_aot_steps checks every launch first). */
static int taichi_aot_raw_launch(const TaichiAotLaunch *l, int launch) {
    switch (l->kind) {
    case TAICHI_AOT_KIND_CUDA_KERNEL:
        if (launch) {
            (void)CALL(taichi_aot_cuda_launch)(l->runtime, (const TaichiAotCudaKernel *)l->handle, l->arg_count,
                                               (const TiArgument *)l->args);
        }
        return 0;
    case TAICHI_AOT_KIND_CUDA_GRAPH:
        if (launch) {
            (void)CALL(taichi_aot_cuda_graph)(l->runtime, (const TaichiAotCudaGraph *)l->handle, l->arg_count,
                                              (const TiNamedArgument *)l->args);
        }
        return 0;
    case TAICHI_AOT_KIND_VULKAN_KERNEL:
        if (launch) {
            (void)CALL(taichi_aot_vk_launch)(l->runtime, l->handle, l->arg_count, (const TiArgument *)l->args);
        }
        return 0;
    case TAICHI_AOT_KIND_VULKAN_GRAPH:
        if (launch) {
            (void)CALL(taichi_aot_vk_graph)(l->runtime, (const TaichiAotVkGraph *)l->handle, l->arg_count,
                                            (const TiNamedArgument *)l->args);
        }
        return 0;
    case TAICHI_AOT_KIND_KERNEL:
        if (launch && !l->pending[1]) {
            CALL(ti_launch_kernel)(l->runtime, (TiKernel)l->handle, l->arg_count, (const TiArgument *)l->args);
            (void)CALL(ti_get_last_error)(NULL, NULL);
        }
        return 0;
    case TAICHI_AOT_KIND_GRAPH:
        if (launch && !l->pending[1]) {
            CALL(ti_launch_compute_graph)(l->runtime, (TiComputeGraph)l->handle, l->arg_count,
                                          (const TiNamedArgument *)l->args);
            (void)CALL(ti_get_last_error)(NULL, NULL);
        }
        return 0;
    case TAICHI_AOT_KIND_CPU_CALL: /* the own x64 launch: not timed by this loop */
    default:
        return -1;
    }
}

typedef int (*taichi_aot_cuda_copy)(void *dst, uint64_t src, size_t size); /* cuMemcpyDtoH_v2 */
typedef int (*taichi_aot_bench_push)(void *context);
typedef int (*taichi_aot_bench_pop)(void **context);
typedef int (*taichi_aot_bench_sync)(void *stream);

/* The own CUDA launcher's runtime record of a launch of its kinds, else NULL. */
static const TaichiAotCudaRuntime *taichi_aot_own_record(const TaichiAotLaunch *l) {
    if (l->kind == TAICHI_AOT_KIND_CUDA_KERNEL) {
        return ((const TaichiAotCudaKernel *)l->handle)->runtime;
    }
    if (l->kind == TAICHI_AOT_KIND_CUDA_GRAPH && ((const TaichiAotCudaGraph *)l->handle)->dispatch_count > 0) {
        return ((const TaichiAotCudaGraph *)l->handle)->kernels[0]->runtime;
    }
    return NULL;
}

/* A loop's wait for its launches, as a C program makes it: libtaichi's ti_wait where they have its runtime; on
   taichi_aot's own CUDA runtime (no libtaichi runtime: NULL), the launcher's stream synchronized in its context.
   0, or -1 where the wait reports an error. */
static int taichi_aot_wait(const TaichiAotLaunch *l) {
    const TaichiAotCudaRuntime *rt = taichi_aot_own_record(l);
    void *was = NULL;
    int code;
    if (l->runtime != NULL) { /* libtaichi's runtime (beside the own one, where a module needed it) */
        CALL(ti_wait)(l->runtime);
    }
    if (rt == NULL) { /* libtaichi's launches: its wait was all */
        return l->runtime != NULL ? 0 : -1;
    }
    if (((taichi_aot_bench_push)rt->driver->push)(rt->context) != 0) {
        return -1;
    }
    code = ((taichi_aot_bench_sync)rt->driver->sync)(rt->stream);
    ((taichi_aot_bench_pop)rt->driver->pop)(&was);
    return code == 0 ? 0 : -1;
}

static int taichi_aot_read_back(const TaichiAotReadback *r) {
    if (r->kind == 1) {
        TiRuntime runtime = (TiRuntime)r->runtime;
        TiMemory memory = (TiMemory)r->memory;
        void *mapped = CALL(ti_map_memory)(runtime, memory);
        if (mapped == NULL) {
            return -1;
        }
        memcpy(r->dst, mapped, (size_t)r->size);
        CALL(ti_unmap_memory)(runtime, memory);
    } else if (r->kind == 2) {
        return ((taichi_aot_cuda_copy)r->cuda_copy)(r->dst, r->device_pointer, (size_t)r->size) == 0 ? 0 : -1;
    }
    return 0;
}

double taichi_aot_steps(const void *step_launches, uint32_t count, const void *every_launches, uint32_t every_count,
                        uint64_t steps, uint64_t every, const TaichiAotReadback *readback) {
    const TaichiAotLaunch *step = (const TaichiAotLaunch *)step_launches;
    const TaichiAotLaunch *others = (const TaichiAotLaunch *)every_launches;
    uint64_t s;
    uint32_t i;
    double t0;
    for (i = 0; i < count; ++i) { /* every launch of a kind this loop launches, or none is made */
        if (taichi_aot_raw_launch(&step[i], 0) != 0) {
            return -2.0;
        }
    }
    for (i = 0; every != 0 && i < every_count; ++i) { /* launched only every `every` steps */
        if (taichi_aot_raw_launch(&others[i], 0) != 0) {
            return -2.0;
        }
    }
    t0 = taichi_aot_now();
    for (s = 0; s < steps; ++s) {
        for (i = 0; i < count; ++i) {
            (void)taichi_aot_raw_launch(&step[i], 1);
        }
        if (every != 0 && s % every == every - 1) {
            for (i = 0; i < every_count; ++i) {
                (void)taichi_aot_raw_launch(&others[i], 1);
            }
            if (taichi_aot_wait(&step[0]) != 0 || taichi_aot_read_back(readback) != 0) {
                return -1.0;
            }
        }
    }
    if (taichi_aot_wait(&step[0]) != 0 || CALL(ti_get_last_error)(NULL, NULL) != TI_ERROR_SUCCESS) {
        return -1.0;
    }
    return taichi_aot_now() - t0;
}

/* libtaichi_c_api 1.7.4 cannot release an import, so none is. The arguments' memory is put back as it was. */
double taichi_aot_import_steps(const void *launch, const uint64_t *ptrs, uint32_t count, uint64_t size, uint32_t cuda,
                               uint64_t steps) {
    const TaichiAotLaunch *step = (const TaichiAotLaunch *)launch;
    TiArgument *args = (TiArgument *)step->args;
    TiMemory kept[16];
    int failed;
    uint64_t s;
    uint32_t i;
    double t0, t1;
    if ((step->kind != TAICHI_AOT_KIND_KERNEL && !(step->runtime == NULL && step->kind == TAICHI_AOT_KIND_CUDA_KERNEL))
        || count > 16 || count > step->arg_count) {
        return -1.0;
    }
    for (i = 0; i < count; ++i) {
        kept[i] = args[i].value.ndarray.memory;
    }
    t0 = taichi_aot_now();
    for (s = 0; s < steps; ++s) {
        for (i = 0; i < count; ++i) {
            args[i].value.ndarray.memory = step->runtime == NULL /* the own CUDA runtime: the pointer itself */
                                               ? (TiMemory)(uintptr_t)(ptrs[i] | TAICHI_AOT_POINTER_TAG)
                                           : cuda ? CALL(ti_import_cuda_memory)(step->runtime, (void *)ptrs[i], size)
                                                  : CALL(ti_import_cpu_memory)(step->runtime, (void *)ptrs[i], size);
        }
        (void)taichi_aot_raw_launch(step, 1);
    }
    failed = taichi_aot_wait(step);
    t1 = taichi_aot_now();
    for (i = 0; i < count; ++i) {
        args[i].value.ndarray.memory = kept[i];
    }
    return failed != 0 || CALL(ti_get_last_error)(NULL, NULL) != TI_ERROR_SUCCESS ? -1.0 : t1 - t0;
}
