/* What timing each launch with CUDA events costs at the driver, the floor `Runtime.profile()` is set against on CUDA.

   Build: cc -O2 -o cuda_events taichi_aot_bench/_csrc/cuda_events.c -ldl   (no CUDA headers: the driver is opened at
   run time; the bench's profiler section builds it on CUDA, compile.py's raw_program)
   Run:   cuda_events [LAUNCHES]         one line of JSON: microseconds a launch of each loop, the median of 9 rounds

   An empty kernel (PTX, taking one pointer, one block of 32 threads) launched LAUNCHES times on a stream of its own
   and the stream synchronized, in each round:
   - plain: cuLaunchKernel alone;
   - events_2: each launch between two events recorded on the stream (cuEventRecord before and after it), as the own
     CUDA launcher records a profiled launch;
   - events_1: one event recorded after each launch (the cost of half the pairs);
   - host_2: the two cuEventRecord calls of events_2 alone, no launch between them (the host's side of a pair). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int (*fn_init)(unsigned);
typedef int (*fn_device_get)(int *, int);
typedef int (*fn_ctx_create)(void **, unsigned, int);
typedef int (*fn_module_load)(void **, const void *);
typedef int (*fn_get_function)(void **, void *, const char *);
typedef int (*fn_stream_create)(void **, unsigned);
typedef int (*fn_stream_sync)(void *);
typedef int (*fn_launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **,
                         void **);
typedef int (*fn_event_create)(void **, unsigned);
typedef int (*fn_event_record)(void *, void *);
typedef int (*fn_mem_alloc)(uint64_t *, size_t);

static const char PTX[] = ".version 7.0\n.target sm_50\n.address_size 64\n"
                          ".visible .entry empty(.param .u64 p)\n{\n ret;\n}\n";

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define CHECK(call)                                                                                                    \
    do {                                                                                                               \
        int code_ = (call);                                                                                            \
        if (code_ != 0) {                                                                                              \
            fprintf(stderr, "%s: CUDA error %d\n", #call, code_);                                                      \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

int main(int argc, char **argv) {
    int launches = argc > 1 ? atoi(argv[1]) : 2000, device = 0, kind, round, i;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    void *context, *module, *kernel, *stream, **events;
    uint64_t memory;
    double figures[4], rounds[9];
    const char *names[4] = {"plain", "events_2", "events_1", "host_2"};
    if (cuda == NULL || launches < 1) {
        fprintf(stderr, "no CUDA driver (libcuda.so.1), or no launches\n");
        return 1;
    }
    fn_init init = (fn_init)dlsym(cuda, "cuInit");
    fn_device_get device_get = (fn_device_get)dlsym(cuda, "cuDeviceGet");
    fn_ctx_create ctx_create = (fn_ctx_create)dlsym(cuda, "cuCtxCreate_v2");
    fn_module_load module_load = (fn_module_load)dlsym(cuda, "cuModuleLoadData");
    fn_get_function get_function = (fn_get_function)dlsym(cuda, "cuModuleGetFunction");
    fn_stream_create stream_create = (fn_stream_create)dlsym(cuda, "cuStreamCreate");
    fn_stream_sync stream_sync = (fn_stream_sync)dlsym(cuda, "cuStreamSynchronize");
    fn_launch launch = (fn_launch)dlsym(cuda, "cuLaunchKernel");
    fn_event_create event_create = (fn_event_create)dlsym(cuda, "cuEventCreate");
    fn_event_record event_record = (fn_event_record)dlsym(cuda, "cuEventRecord");
    fn_mem_alloc mem_alloc = (fn_mem_alloc)dlsym(cuda, "cuMemAlloc_v2");
    CHECK(init(0));
    CHECK(device_get(&device, 0));
    CHECK(ctx_create(&context, 0, device));
    CHECK(module_load(&module, PTX));
    CHECK(get_function(&kernel, module, "empty"));
    CHECK(stream_create(&stream, 1)); /* CU_STREAM_NON_BLOCKING */
    CHECK(mem_alloc(&memory, 256));
    events = malloc(2 * (size_t)launches * sizeof(void *));
    for (i = 0; i < 2 * launches; ++i) {
        CHECK(event_create(&events[i], 0)); /* timed events, as a profile's */
    }
    void *params[1] = {&memory};
    for (kind = -1; kind < 4; ++kind) { /* -1: a warm-up round */
        int k = kind < 0 ? 0 : kind;
        for (round = 0; round < (kind < 0 ? 1 : 9); ++round) {
            double t = seconds();
            for (i = 0; i < launches; ++i) {
                if (k == 1 || k == 3) {
                    CHECK(event_record(events[2 * i], stream));
                }
                if (k != 3) {
                    CHECK(launch(kernel, 1, 1, 1, 32, 1, 1, 0, stream, params, NULL));
                }
                if (k >= 1) {
                    CHECK(event_record(events[2 * i + 1], stream));
                }
            }
            CHECK(stream_sync(stream));
            rounds[round] = (seconds() - t) * 1e6 / launches;
        }
        if (kind >= 0) {
            qsort(rounds, 9, sizeof(double), compare);
            figures[kind] = rounds[4];
        }
    }
    printf("{\"launches\": %d", launches);
    for (kind = 0; kind < 4; ++kind) {
        printf(", \"%s\": %.3f", names[kind], figures[kind]);
    }
    printf(", \"events_2_over_plain\": %.3f}\n", figures[1] / figures[0]);
    return 0;
}
