/* The bench's raw C loops (steps.c), built into the bench's own extension, taichi_aot_bench._steps (build_ffi.py's
   bench_ffibuilder), not into taichi_aot._native.

   Declared once, read twice: build_ffi.py hands this header to the cffi cdef as it does taichi_aot.h, and steps.c
   #includes it. It names no type of libtaichi_c_api's or of taichi_aot._native's: launches (taichi_aot.h's
   TaichiAotLaunch), handles and functions cross as addresses. */
#ifndef TAICHI_AOT_BENCH_STEPS_H
#define TAICHI_AOT_BENCH_STEPS_H

#include <stdint.h>

/* The functions of taichi_aot._native the loops call, each field named for its function: the trampolines into
   libtaichi_c_api and the own CUDA and Vulkan launches' entries (backends/cuda.c, backends/vulkan.c). Their addresses are handed over once, at import
   (steps.py: taichi_aot_bench_bind). */
typedef struct {
    void *ti_launch_kernel;
    void *ti_launch_compute_graph;
    void *taichi_aot_cuda_launch;
    void *taichi_aot_cuda_graph;
    void *taichi_aot_vk_launch;
    void *taichi_aot_vk_graph;
    void *ti_wait;
    void *ti_get_last_error;
    void *ti_map_memory;
    void *ti_unmap_memory;
    void *ti_import_cpu_memory;
    void *ti_import_cuda_memory;
} TaichiAotBenchCalls;
void taichi_aot_bench_bind(const TaichiAotBenchCalls *calls);

/* What a step loop reads back every `every` steps: kind 0 nothing; 1 map `memory` (a TiMemory of `runtime`, a
   TiRuntime), copy `size` bytes to `dst`, unmap; 2 `cuda_copy(dst, device_pointer, size)` (cuMemcpyDtoH_v2). */
typedef struct {
    uint32_t kind;
    void *runtime;
    void *memory;
    void *dst;
    uint64_t size;
    void *cuda_copy;
    uint64_t device_pointer;
} TaichiAotReadback;

/* `steps` times the `count` launches at `step` (TaichiAotLaunch structs), and every `every` steps (0: never) the
   `every_count` launches at `every_launches`, a wait and the read back; then a wait. Returns the seconds it took,
   or -1 where the library reported an error, -2 (before any launch) where a launch is of a kind it does not time. */
double taichi_aot_steps(const void *step, uint32_t count, const void *every_launches, uint32_t every_count,
                        uint64_t steps, uint64_t every, const TaichiAotReadback *readback);

/* Raw C's launch of arrays handed anew each step: the memory at each of `ptrs` (`size` bytes) imported (CUDA
   memory where `cuda`, else host memory) and written into the first `count` ndarray arguments of the kernel
   launch at `step`, then the launch; `steps` times, then a wait. On taichi_aot's own CUDA runtime (no libtaichi
   runtime) each pointer is written as it is (tagged), as a C program of the driver passes it. The seconds it took,
   or -1. */
double taichi_aot_import_steps(const void *step, const uint64_t *ptrs, uint32_t count, uint64_t size, uint32_t cuda,
                               uint64_t steps);

/* `ns` nanoseconds spent polling the clock, called with Python's lock let go (cffi lets it go around every call):
   the wait of the sharing section's lock floor (sharing.py), a polled wait of that length that waits for nothing. */
void taichi_aot_bench_let_go(uint64_t ns);

#endif
