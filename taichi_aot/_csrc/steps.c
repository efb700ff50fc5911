/* A step loop driven by C alone: the raw C reference of `taichi-aot bench` (its launch and simulation
   sections), run in the benchmark's own process, on its runtime, with the handles and packed arguments
   of the launches it compares, so that both sides launch the same work on the same device queue. The
   launches are plain ti_launch_kernel / ti_launch_compute_graph calls (or the own CUDA launcher's, ptx.c): no
   check of any kind. */
#include "taichi_aot.h"

static double taichi_aot_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void taichi_aot_raw_launch(const TaichiAotLaunch *l) {
    (void)launch_any(l); /* launch.c's: a kernel, a graph, or a kernel of the own CUDA launcher */
}

typedef int (*taichi_aot_cuda_copy)(void *dst, uint64_t src, size_t size); /* cuMemcpyDtoH_v2 */

static int taichi_aot_read_back(const TaichiAotReadback *r) {
    if (r->kind == 1) {
        void *mapped = ti_map_memory(r->runtime, r->memory);
        if (mapped == NULL) {
            return -1;
        }
        memcpy(r->dst, mapped, (size_t)r->size);
        ti_unmap_memory(r->runtime, r->memory);
    } else if (r->kind == 2) {
        return ((taichi_aot_cuda_copy)r->cuda_copy)(r->dst, r->device_pointer, (size_t)r->size) == 0 ? 0 : -1;
    }
    return 0;
}

double taichi_aot_steps(const TaichiAotLaunch *step, uint32_t count, const TaichiAotLaunch *every_launches,
                        uint32_t every_count, uint64_t steps, uint64_t every, const TaichiAotReadback *readback) {
    uint64_t s;
    uint32_t i;
    double t0 = taichi_aot_now();
    for (s = 0; s < steps; ++s) {
        for (i = 0; i < count; ++i) {
            taichi_aot_raw_launch(&step[i]);
        }
        if (every != 0 && s % every == every - 1) {
            for (i = 0; i < every_count; ++i) {
                taichi_aot_raw_launch(&every_launches[i]);
            }
            ti_wait(step[0].runtime);
            if (taichi_aot_read_back(readback) != 0) {
                return -1.0;
            }
        }
    }
    ti_wait(step[0].runtime);
    if (ti_get_last_error(NULL, NULL) != TI_ERROR_SUCCESS) {
        return -1.0;
    }
    return taichi_aot_now() - t0;
}

/* What raw C pays to launch an array it is handed anew each time (the floor under taichi-aot bench's rows of new
   arrays): `steps` times, the memory at each of `ptrs` (`size` bytes) imported into the runtime (CUDA memory where
   `cuda`, else host memory) and written into the kernel launch `step`'s first `count` ndarray arguments, then the
   launch; then a wait. libtaichi_c_api 1.7.4 cannot release an import, so none is. The arguments' memory is put back
   as it was. Returns the seconds it took, or -1 where the library reported an error. */
double taichi_aot_import_steps(const TaichiAotLaunch *step, const uint64_t *ptrs, uint32_t count, uint64_t size,
                               uint32_t cuda, uint64_t steps) {
    TiArgument *args = (TiArgument *)step->args;
    TiMemory kept[16];
    uint64_t s;
    uint32_t i;
    double t0, t1;
    if (step->kind != 0 || count > 16 || count > step->arg_count) {
        return -1.0;
    }
    for (i = 0; i < count; ++i) {
        kept[i] = args[i].value.ndarray.memory;
    }
    t0 = taichi_aot_now();
    for (s = 0; s < steps; ++s) {
        for (i = 0; i < count; ++i) {
            args[i].value.ndarray.memory = cuda ? ti_import_cuda_memory(step->runtime, (void *)ptrs[i], size)
                                                : ti_import_cpu_memory(step->runtime, (void *)ptrs[i], size);
        }
        taichi_aot_raw_launch(step);
    }
    ti_wait(step->runtime);
    t1 = taichi_aot_now();
    for (i = 0; i < count; ++i) {
        args[i].value.ndarray.memory = kept[i];
    }
    return ti_get_last_error(NULL, NULL) != TI_ERROR_SUCCESS ? -1.0 : t1 - t0;
}
