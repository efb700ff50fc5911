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

static TiKernel tiny, copy_kernel, saxpy;
static TiComputeGraph graph;
static TiArgument tiny_args[2];
static TiNamedArgument graph_args[2];
static int cpu;                   /* a CPU backend: no device-to-device copy, memory never freed (1.7.4) */
static uint64_t stream_size = 0;  /* the stream commands' arrays, grown as asked */
static TiMemory stream_memory[2];
static TiArgument stream_args[3];

/* The runtime, the module and its kernels, the small launches' arguments: 0, or 1 where the library failed (said). */
static int setup(const char *arch, const char *dir) {
    static TiMemory small_memory;
    cpu = atoi(arch) == TI_ARCH_X64 || atoi(arch) == TI_ARCH_ARM64;
    runtime = ti_create_runtime((TiArch)atoi(arch), 0);
    if (failed("ti_create_runtime")) return 1;
    module = ti_load_aot_module(runtime, dir);
    if (failed("ti_load_aot_module")) return 1;
    tiny = ti_get_aot_module_kernel(module, "tiny");
    copy_kernel = ti_get_aot_module_kernel(module, "copy");
    saxpy = ti_get_aot_module_kernel(module, "saxpy");
    graph = ti_get_aot_module_compute_graph(module, "tiny16");
    if (failed("ti_get_aot_module_kernel")) return 1;
    tiny_args[0] = ndarray_arg(16, &small_memory);
    tiny_args[1] = f32_arg(1.0f);
    graph_args[0].name = "x";
    graph_args[0].argument = tiny_args[0];
    graph_args[1].name = "a";
    graph_args[1].argument = tiny_args[1];
    return failed("setup");
}

/* The small launches' commands (launch, graph, kernels16) timed into `*seconds`; 0 where `line` is none of them. */
static int small_command(const char *line, double *seconds) {
    unsigned long long n = 0, i, j;
    int which = sscanf(line, "launch %llu", &n) == 1 ? 1 : sscanf(line, "graph %llu", &n) == 1 ? 2
              : sscanf(line, "kernels16 %llu", &n) == 1 ? 3 : 0;
    double t0 = now(); /* after the parse: the loop alone is timed */
    if (which == 1) {
        for (i = 0; i < n; ++i) ti_launch_kernel(runtime, tiny, 2, tiny_args);
    } else if (which == 2) {
        for (i = 0; i < n; ++i) ti_launch_compute_graph(runtime, graph, 2, graph_args);
    } else if (which == 3) {
        for (i = 0; i < n; ++i)
            for (j = 0; j < 16; ++j) ti_launch_kernel(runtime, tiny, 2, tiny_args);
    } else {
        return 0;
    }
    ti_wait(runtime);
    *seconds = now() - t0;
    return 1;
}

/* The stream arrays grown to `size` f32 elements (grow only: CPU backends of 1.7.4 cannot free memory); 0, or 1
   where the library failed (said). */
static int stream_arrays(uint64_t size) {
    if (size > stream_size) {
        if (stream_size != 0 && !cpu) {
            ti_free_memory(runtime, stream_memory[0]);
            ti_free_memory(runtime, stream_memory[1]);
        }
        stream_args[0] = ndarray_arg(size, &stream_memory[0]);
        stream_args[1] = ndarray_arg(size, &stream_memory[1]);
        stream_args[2] = f32_arg(0.5f);
        stream_size = size;
        if (failed("allocate")) return 1;
    }
    stream_args[0].value.ndarray.shape.dims[0] = (uint32_t)size;
    stream_args[1].value.ndarray.shape.dims[0] = (uint32_t)size;
    return 0;
}

/* One stream step: a device-to-device copy of `size` f32 elements (none on CPU backends), or a copy or saxpy
   launch over them. */
static void stream_step(int d2d, const char *kind, uint64_t size) {
    if (d2d) {
        TiMemorySlice src, dst;
        src.memory = stream_memory[0];
        src.offset = 0;
        src.size = size * 4;
        dst = src;
        dst.memory = stream_memory[1];
        ti_copy_memory_device_to_device(runtime, &dst, &src);
    } else if (strcmp(kind, "copy") == 0) {
        ti_launch_kernel(runtime, copy_kernel, 2, stream_args);
    } else {
        ti_launch_kernel(runtime, saxpy, 3, stream_args);
    }
}

/* The stream and d2d commands timed into `*seconds`: 1, 0 where `line` is neither, -1 where the arrays could not be
   allocated (said). */
static int stream_command(const char *line, double *seconds) {
    char kind[32] = "";
    unsigned long long n = 0, size = 0, i;
    int d2d;
    double t0;
    if (sscanf(line, "stream %31s %llu %llu", kind, &size, &n) != 3 && sscanf(line, "d2d %llu %llu", &size, &n) != 2) {
        return 0;
    }
    d2d = strncmp(line, "d2d", 3) == 0;
    if (stream_arrays(size) != 0) return -1;
    if (d2d && cpu) n = 0; /* no device-to-device copy on CPU backends */
    t0 = now();
    for (i = 0; i < n; ++i) {
        stream_step(d2d, kind, size);
    }
    ti_wait(runtime);
    *seconds = now() - t0;
    return 1;
}

int main(int argc, char **argv) {
    char line[256];
    if (argc != 3) {
        fprintf(stderr, "usage: %s ARCH MODULE_DIR\n", argv[0]);
        return 2;
    }
    if (setup(argv[1], argv[2]) != 0) return 1;
    printf("{\"ready\": true}\n");
    fflush(stdout);

    while (fgets(line, sizeof(line), stdin) != NULL) {
        double seconds = 0.0;
        int done = small_command(line, &seconds);
        if (done == 0) done = stream_command(line, &seconds);
        if (done < 0) continue;
        if (done == 0) {
            if (strncmp(line, "quit", 4) == 0) break;
            printf("{\"error\": -4, \"what\": \"unknown command\"}\n");
            fflush(stdout);
            continue;
        }
        if (failed("command")) continue;
        printf("{\"seconds\": %.9f}\n", seconds);
        fflush(stdout);
    }
    ti_destroy_aot_module(module);
    ti_destroy_runtime(runtime);
    return 0;
}
