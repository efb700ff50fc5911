/* The raw C reference for `taichi-aot bench`: the same library, module and kernels, driven
 * from C with no Python. Compiled at bench time with the system compiler and linked against
 * the libtaichi_c_api that taichi_aot loads.
 *
 * usage: driver ARCH MODULE_DIR     (ARCH: the TiArch number)
 * Commands on stdin, one per line; each answers one line of JSON on stdout:
 *   launch N              N launches of tiny(x, 1.0), then ti_wait
 *   graph N               N launches of graph tiny16(x, a)
 *   kernels16 N           N times 16 launches of tiny (the graph's work, one kernel at a time)
 *   stream KIND SIZE N    N launches of copy or saxpy over SIZE f32 elements, then ti_wait
 *   d2d SIZE N            N device-to-device copies of SIZE f32 elements (GPU backends)
 *   quit
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "taichi/taichi_core.h"

static TiRuntime runtime;
static TiAotModule module;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int failed(const char *what) {
    char message[512];
    uint64_t size = sizeof(message);
    TiError error = ti_get_last_error(&size, message);
    if (error == TI_ERROR_SUCCESS) return 0;
    message[sizeof(message) - 1] = 0;
    printf("{\"error\": %d, \"what\": \"%s\"}\n", (int)error, what);
    fflush(stdout);
    return 1;
}

static TiArgument ndarray_arg(uint64_t count, TiMemory *out) {
    TiMemoryAllocateInfo info;
    TiArgument arg;
    memset(&info, 0, sizeof(info));
    info.size = count * 4;
    info.usage = TI_MEMORY_USAGE_STORAGE_BIT;
    *out = ti_allocate_memory(runtime, &info);
    memset(&arg, 0, sizeof(arg));
    arg.type = TI_ARGUMENT_TYPE_NDARRAY;
    arg.value.ndarray.memory = *out;
    arg.value.ndarray.shape.dim_count = 1;
    arg.value.ndarray.shape.dims[0] = (uint32_t)count;
    arg.value.ndarray.elem_type = TI_DATA_TYPE_F32;
    return arg;
}

static TiArgument f32_arg(float v) {
    TiArgument arg;
    memset(&arg, 0, sizeof(arg));
    arg.type = TI_ARGUMENT_TYPE_F32;
    arg.value.f32 = v;
    return arg;
}

int main(int argc, char **argv) {
    char line[256];
    TiKernel tiny, copy, saxpy;
    TiComputeGraph graph;
    TiMemory small_memory;
    TiArgument tiny_args[2];
    TiNamedArgument graph_args[2];
    uint64_t stream_size = 0;
    TiMemory stream_memory[2];
    TiArgument stream_args[3];
    int cpu;
    if (argc != 3) {
        fprintf(stderr, "usage: %s ARCH MODULE_DIR\n", argv[0]);
        return 2;
    }
    cpu = atoi(argv[1]) == TI_ARCH_X64 || atoi(argv[1]) == TI_ARCH_ARM64;
    runtime = ti_create_runtime((TiArch)atoi(argv[1]), 0);
    if (failed("ti_create_runtime")) return 1;
    module = ti_load_aot_module(runtime, argv[2]);
    if (failed("ti_load_aot_module")) return 1;
    tiny = ti_get_aot_module_kernel(module, "tiny");
    copy = ti_get_aot_module_kernel(module, "copy");
    saxpy = ti_get_aot_module_kernel(module, "saxpy");
    graph = ti_get_aot_module_compute_graph(module, "tiny16");
    if (failed("ti_get_aot_module_kernel")) return 1;
    tiny_args[0] = ndarray_arg(16, &small_memory);
    tiny_args[1] = f32_arg(1.0f);
    graph_args[0].name = "x";
    graph_args[0].argument = tiny_args[0];
    graph_args[1].name = "a";
    graph_args[1].argument = tiny_args[1];
    if (failed("setup")) return 1;
    printf("{\"ready\": true}\n");
    fflush(stdout);

    while (fgets(line, sizeof(line), stdin) != NULL) {
        char kind[32];
        unsigned long long n = 0, size = 0, i, j;
        double t0, t1;
        if (sscanf(line, "launch %llu", &n) == 1) {
            t0 = now();
            for (i = 0; i < n; ++i) ti_launch_kernel(runtime, tiny, 2, tiny_args);
            ti_wait(runtime);
            t1 = now();
        } else if (sscanf(line, "graph %llu", &n) == 1) {
            t0 = now();
            for (i = 0; i < n; ++i) ti_launch_compute_graph(runtime, graph, 2, graph_args);
            ti_wait(runtime);
            t1 = now();
        } else if (sscanf(line, "kernels16 %llu", &n) == 1) {
            t0 = now();
            for (i = 0; i < n; ++i)
                for (j = 0; j < 16; ++j) ti_launch_kernel(runtime, tiny, 2, tiny_args);
            ti_wait(runtime);
            t1 = now();
        } else if (sscanf(line, "stream %31s %llu %llu", kind, &size, &n) == 3 ||
                   sscanf(line, "d2d %llu %llu", &size, &n) == 2) {
            int d2d = strncmp(line, "d2d", 3) == 0;
            if (size > stream_size) { /* grow only: CPU backends of 1.7.4 cannot free memory */
                if (stream_size != 0 && !cpu) {
                    ti_free_memory(runtime, stream_memory[0]);
                    ti_free_memory(runtime, stream_memory[1]);
                }
                stream_args[0] = ndarray_arg(size, &stream_memory[0]);
                stream_args[1] = ndarray_arg(size, &stream_memory[1]);
                stream_args[2] = f32_arg(0.5f);
                stream_size = size;
                if (failed("allocate")) continue;
            }
            stream_args[0].value.ndarray.shape.dims[0] = (uint32_t)size;
            stream_args[1].value.ndarray.shape.dims[0] = (uint32_t)size;
            t0 = now();
            for (i = 0; i < n; ++i) {
                if (d2d) {
                    TiMemorySlice src, dst;
                    src.memory = stream_memory[0];
                    src.offset = 0;
                    src.size = size * 4;
                    dst = src;
                    dst.memory = stream_memory[1];
                    if (cpu) break; /* no device-to-device copy on CPU backends */
                    ti_copy_memory_device_to_device(runtime, &dst, &src);
                } else if (strcmp(kind, "copy") == 0) {
                    ti_launch_kernel(runtime, copy, 2, stream_args);
                } else {
                    ti_launch_kernel(runtime, saxpy, 3, stream_args);
                }
            }
            ti_wait(runtime);
            t1 = now();
        } else if (strncmp(line, "quit", 4) == 0) {
            break;
        } else {
            printf("{\"error\": -4, \"what\": \"unknown command\"}\n");
            fflush(stdout);
            continue;
        }
        if (failed("command")) continue;
        printf("{\"seconds\": %.9f}\n", t1 - t0);
        fflush(stdout);
    }
    ti_destroy_aot_module(module);
    ti_destroy_runtime(runtime);
    return 0;
}
