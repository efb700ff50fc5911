/* Raw C's own ceiling for threads sharing one GPU: the shape of the bench's sharing row (four threads, each ROUNDS
   rounds of FEW launches of a small kernel and a value read back) in C alone, no Python and no taichi_aot, against
   one thread doing the four's rounds in turn. What Python's lock and taichi_aot's runtime cost the row is measured
   against it (benchmarks/threads_probe.py gives the same shape through taichi_aot).

   Build: cc -O2 -o threads_raw benchmarks/threads_raw.c -ldl -lpthread   (Vulkan's headers; the loaders are opened
          at run time: libvulkan.so.1, libcuda.so.1)
   Run:   threads_raw vulkan [ROUNDS 40] [FEW 10] [PAIRS 3] [DEVICE_SUBSTRING]
          threads_raw cuda [ROUNDS 40] [FEW 10] [PAIRS 3] [SCHED auto|spin|yield|block]

   A line of JSON a variant: each pair's ratio (one thread's time over the four threads'), both times (ms, the four's
   from the first thread's start past a gate they wait at to the last one's end) and, a round, the time in the
   launches and in the value (us; the four's include the wait for a lock). The variants:
   - vulkan: a launch is an empty shader's dispatch recorded with a compute-to-compute barrier after it; the round's
     command buffer is submitted after its last launch (counted with the launches; a command pool, buffer and fence a
     thread, the queue's submissions one at a time under a mutex), and the value is its fence's wait alone, blocking
     (vkWaitForFences) or polled (vkGetFenceStatus): nothing is read back or checked;
   - cuda: a launch is cuLaunchKernel of a kernel that adds 1 to 16 floats, the value a 4-byte copy back on the
     stream and the stream's synchronization, checked against the launches made; the threads launch on one stream
     shared, or a stream each; SCHED is the primary context's scheduling flag;
   - "serial": the same with one mutex held through each round's launches and let go for its value, as launches that
     keep Python's lock do (the value lets it go). */
#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include "vk_bench.h"

#define THREADS 4
#define FAIL(...)                                                                                                      \
    do {                                                                                                               \
        fprintf(stderr, __VA_ARGS__);                                                                                  \
        fflush(stderr);                                                                                                \
        _exit(1); /* no teardown of the drivers while other threads are inside them */                               \
    } while (0)

static const uint32_t EMPTY_SPIRV[] = {
    0x07230203, 0x00010000, 0, 5, 0, 0x00020011, 1, 0x0003000E, 0, 1, 0x0005000F, 5, 3, 0x6E69616D, 0,
    0x00060010, 3, 17, 1, 1, 1, 0x00020013, 1, 0x00030021, 2, 1, 0x00050036, 1, 3, 0, 2, 0x000200F8, 4, 0x000100FD,
    0x00010038,
};

/* An empty shader's dispatch on Vulkan; PTX of `tiny` (adds `v` to the first `n` floats) on CUDA. */
static const char TINY_PTX[] = ".version 7.0\n.target sm_50\n.address_size 64\n"
                               ".visible .entry tiny(.param .u64 p, .param .f32 v, .param .u32 n) {\n"
                               ".reg .pred %p; .reg .b32 %r<3>; .reg .f32 %f<3>; .reg .b64 %rd<4>;\n"
                               "ld.param.u64 %rd1, [p]; ld.param.f32 %f1, [v]; ld.param.u32 %r1, [n];\n"
                               "mov.u32 %r2, %tid.x; setp.ge.u32 %p, %r2, %r1; @%p bra DONE;\n"
                               "cvta.to.global.u64 %rd2, %rd1; mul.wide.u32 %rd3, %r2, 4; add.s64 %rd2, %rd2, %rd3;\n"
                               "ld.global.f32 %f2, [%rd2]; add.f32 %f2, %f2, %f1; st.global.f32 [%rd2], %f2;\n"
                               "DONE: ret;\n}\n";

typedef struct {
    /* Vulkan */
    PFN_vkResetCommandPool ResetCommandPool;
    PFN_vkBeginCommandBuffer BeginCommandBuffer;
    PFN_vkEndCommandBuffer EndCommandBuffer;
    PFN_vkCmdBindPipeline CmdBindPipeline;
    PFN_vkCmdDispatch CmdDispatch;
    PFN_vkCmdPipelineBarrier CmdPipelineBarrier;
    PFN_vkQueueSubmit QueueSubmit;
    PFN_vkWaitForFences WaitForFences;
    PFN_vkGetFenceStatus GetFenceStatus;
    PFN_vkResetFences ResetFences;
    VkDevice device;
    VkQueue queue;
    VkPipeline pipeline;
    /* CUDA */
    int (*CtxSetCurrent)(void *);
    int (*LaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **,
                        void **);
    int (*MemcpyDtoHAsync)(void *, unsigned long long, size_t, void *);
    int (*StreamSynchronize)(void *);
    void *context, *function;
    /* both */
    int vulkan, polled, serial, rounds, few;
    pthread_mutex_t queue_lock, round_lock;
    pthread_barrier_t gate;
} Shared;

typedef struct {
    Shared *s;
    VkCommandPool pool;
    VkCommandBuffer cb;
    VkFence fence;
    void *stream;
    unsigned long long data;
    uint32_t done; /* launches made on its array: what its value reads (a float, exact to 2^24: main's bound) */
    double launches_us, value_us;
    double started, ended; /* its run's first and last moments on its own thread (seconds) */
} Body;

/* One round: FEW launches, then the value (checked). */
static void vk_round(Body *b) {
    Shared *s = b->s;
    VkCommandBufferBeginInfo cbi = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    VkMemoryBarrier barrier = {VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    VkSubmitInfo si = {VK_STRUCTURE_TYPE_SUBMIT_INFO};
    VkResult r;
    barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    si.commandBufferCount = 1;
    si.pCommandBuffers = &b->cb;
    if (s->ResetCommandPool(s->device, b->pool, 0) != VK_SUCCESS || s->BeginCommandBuffer(b->cb, &cbi) != VK_SUCCESS) {
        FAIL("vulkan: begin failed\n");
    }
    for (int d = 0; d < s->few; ++d) {
        s->CmdBindPipeline(b->cb, VK_PIPELINE_BIND_POINT_COMPUTE, s->pipeline);
        s->CmdDispatch(b->cb, 1, 1, 1);
        s->CmdPipelineBarrier(b->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                              &barrier, 0, NULL, 0, NULL);
    }
    if (s->EndCommandBuffer(b->cb) != VK_SUCCESS) {
        FAIL("vulkan: end failed\n");
    }
    pthread_mutex_lock(&s->queue_lock);
    r = s->QueueSubmit(s->queue, 1, &si, b->fence);
    pthread_mutex_unlock(&s->queue_lock);
    if (r != VK_SUCCESS) {
        FAIL("vulkan: submit failed: %d\n", (int)r);
    }
}

static void vk_value(Body *b) {
    Shared *s = b->s;
    VkResult r;
    if (s->polled) {
        while ((r = s->GetFenceStatus(s->device, b->fence)) == VK_NOT_READY) {
        }
    } else {
        r = s->WaitForFences(s->device, 1, &b->fence, VK_TRUE, UINT64_MAX);
    }
    if (r != VK_SUCCESS || s->ResetFences(s->device, 1, &b->fence) != VK_SUCCESS) {
        FAIL("vulkan: wait failed: %d\n", (int)r);
    }
}

static void cuda_launches(Body *b) {
    Shared *s = b->s;
    float v = 1.0f;
    unsigned n = 16;
    void *params[3] = {&b->data, &v, &n};
    for (int d = 0; d < s->few; ++d) {
        if (s->LaunchKernel(s->function, 1, 1, 1, 32, 1, 1, 0, b->stream, params, NULL) != 0) {
            FAIL("cuda: launch failed\n");
        }
    }
}

static void cuda_value(Body *b) {
    Shared *s = b->s;
    float got = -1;
    if (s->MemcpyDtoHAsync(&got, b->data, sizeof(got), b->stream) != 0 || s->StreamSynchronize(b->stream) != 0) {
        FAIL("cuda: read failed\n");
    }
    b->done += (uint32_t)s->few;
    if (got != (float)b->done) {
        FAIL("cuda: %g after %u launches\n", got, b->done);
    }
}

static void run_rounds(Body *b) {
    Shared *s = b->s;
    for (int i = 0; i < s->rounds; ++i) {
        double t0 = vk_bench_seconds(), t1;
        if (s->serial) {
            pthread_mutex_lock(&s->round_lock);
        }
        if (s->vulkan) {
            vk_round(b);
        } else {
            cuda_launches(b);
        }
        if (s->serial) {
            pthread_mutex_unlock(&s->round_lock);
        }
        t1 = vk_bench_seconds();
        if (s->vulkan) {
            vk_value(b);
        } else {
            cuda_value(b);
        }
        b->launches_us += (t1 - t0) * 1e6;
        b->value_us += (vk_bench_seconds() - t1) * 1e6;
    }
}

static void *thread_main(void *arg) {
    Body *b = arg;
    if (!b->s->vulkan && b->s->CtxSetCurrent(b->s->context) != 0) {
        FAIL("cuda: no context on a thread\n");
    }
    pthread_barrier_wait(&b->s->gate);
    b->started = vk_bench_seconds();
    run_rounds(b);
    b->ended = vk_bench_seconds();
    return NULL;
}

/* The bodies' time a round in their launches and values (us), summed over the bodies, then zeroed. */
static void spent(Body *bodies, double *in) {
    int rounds = THREADS * bodies[0].s->rounds;
    in[0] = in[1] = 0;
    for (int i = 0; i < THREADS; ++i) {
        in[0] += bodies[i].launches_us / rounds;
        in[1] += bodies[i].value_us / rounds;
        bodies[i].launches_us = bodies[i].value_us = 0;
    }
}

/* The four bodies' rounds by one thread in turn, then by four threads at once from a gate: ms each, and each's time
   a round in the launches and the value. */
static void pair(Body *bodies, double *one, double *four, double *one_in, double *four_in) {
    Shared *s = bodies[0].s;
    pthread_t threads[THREADS];
    double t0;
    spent(bodies, one_in);
    t0 = vk_bench_seconds();
    for (int i = 0; i < THREADS; ++i) {
        run_rounds(&bodies[i]);
    }
    *one = (vk_bench_seconds() - t0) * 1e3;
    spent(bodies, one_in);
    if (pthread_barrier_init(&s->gate, NULL, THREADS + 1) != 0) {
        FAIL("no gate for the threads\n");
    }
    for (int i = 0; i < THREADS; ++i) {
        if (pthread_create(&threads[i], NULL, thread_main, &bodies[i]) != 0) {
            FAIL("no thread\n");
        }
    }
    pthread_barrier_wait(&s->gate);
    double first = 0, last = 0;
    for (int i = 0; i < THREADS; ++i) {
        pthread_join(threads[i], NULL);
        first = i == 0 || bodies[i].started < first ? bodies[i].started : first;
        last = i == 0 || bodies[i].ended > last ? bodies[i].ended : last;
    }
    *four = (last - first) * 1e3;
    spent(bodies, four_in);
    pthread_barrier_destroy(&s->gate);
}

/* PAIRS pairs of the variant: one JSON line, its ratios (one thread's time over the four's) and times. */
static void report(const char *name, Body *bodies, int pairs) {
    printf("{\"variant\": \"%s\", \"threads\": %d, \"rounds\": %d, \"few\": %d, \"pairs\": [", name, THREADS,
           bodies[0].s->rounds, bodies[0].s->few);
    for (int p = 0; p < pairs; ++p) {
        double one, four, one_in[2], four_in[2];
        pair(bodies, &one, &four, one_in, four_in);
        printf("%s{\"ratio\": %.6g, \"one_ms\": %.3f, \"four_ms\": %.3f, \"one_launches_us\": %.1f, "
               "\"one_value_us\": %.1f, \"four_launches_us\": %.1f, \"four_value_us\": %.1f}",
               p ? ", " : "", one / four, one, four, one_in[0], one_in[1], four_in[0], four_in[1]);
    }
    printf("]}\n");
    fflush(stdout);
}

static void vulkan_rows(int rounds, int few, int pairs, const char *want) {
    static Shared s;
    Body bodies[THREADS];
    void *loader = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (loader == NULL) {
        FAIL("no Vulkan loader: %s\n", dlerror());
    }
    PFN_vkGetInstanceProcAddr gipa = (PFN_vkGetInstanceProcAddr)dlsym(loader, "vkGetInstanceProcAddr");
    PFN_vkCreateInstance create_instance = (PFN_vkCreateInstance)gipa(NULL, "vkCreateInstance");
    VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO};
    VkInstanceCreateInfo ici = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    VkInstance instance;
    app.apiVersion = VK_API_VERSION_1_1;
    ici.pApplicationInfo = &app;
    if (create_instance(&ici, NULL, &instance) != VK_SUCCESS) {
        FAIL("vulkan: no instance\n");
    }
    PFN_vkEnumeratePhysicalDevices enumerate = (PFN_vkEnumeratePhysicalDevices)gipa(instance,
                                                                                     "vkEnumeratePhysicalDevices");
    PFN_vkGetPhysicalDeviceQueueFamilyProperties families_of =
        (PFN_vkGetPhysicalDeviceQueueFamilyProperties)gipa(instance, "vkGetPhysicalDeviceQueueFamilyProperties");
    PFN_vkCreateDevice create_device = (PFN_vkCreateDevice)gipa(instance, "vkCreateDevice");
    PFN_vkGetDeviceProcAddr gdpa = (PFN_vkGetDeviceProcAddr)gipa(instance, "vkGetDeviceProcAddr");
    PFN_vkGetPhysicalDeviceProperties properties_of =
        (PFN_vkGetPhysicalDeviceProperties)gipa(instance, "vkGetPhysicalDeviceProperties");
    uint32_t count = 16, families = 16, family = 0;
    VkPhysicalDevice physicals[16], physical = VK_NULL_HANDLE;
    VkPhysicalDeviceProperties props;
    VkQueueFamilyProperties fprops[16];
    if (enumerate(instance, &count, physicals) < 0) {
        FAIL("vulkan: no device\n");
    }
    for (uint32_t i = 0; i < count && physical == VK_NULL_HANDLE; ++i) {
        properties_of(physicals[i], &props);
        if (strstr(props.deviceName, want) != NULL) {
            physical = physicals[i];
        }
    }
    if (physical == VK_NULL_HANDLE) {
        FAIL("vulkan: no device named like '%s'\n", want);
    }
    families_of(physical, &families, fprops);
    while (family < families && !(fprops[family].queueFlags & VK_QUEUE_COMPUTE_BIT)) {
        ++family;
    }
    float priority = 1.0f;
    VkDeviceQueueCreateInfo qci = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    VkDeviceCreateInfo dci = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    VkDevice device;
    qci.queueFamilyIndex = family;
    qci.queueCount = 1;
    qci.pQueuePriorities = &priority;
    dci.queueCreateInfoCount = 1;
    dci.pQueueCreateInfos = &qci;
    if (create_device(physical, &dci, NULL, &device) != VK_SUCCESS) {
        FAIL("vulkan: no device made\n");
    }
    LOAD_DEVICE(vkGetDeviceQueue);
    LOAD_DEVICE(vkCreateCommandPool);
    LOAD_DEVICE(vkAllocateCommandBuffers);
    LOAD_DEVICE(vkCreateFence);
    LOAD_DEVICE(vkCreateShaderModule);
    LOAD_DEVICE(vkCreatePipelineLayout);
    LOAD_DEVICE(vkCreateComputePipelines);
    s.device = device;
    vkGetDeviceQueue(device, family, 0, &s.queue);
#define TAKE(name) s.name = (PFN_vk##name)gdpa(device, "vk" #name)
    TAKE(ResetCommandPool);
    TAKE(BeginCommandBuffer);
    TAKE(EndCommandBuffer);
    TAKE(CmdBindPipeline);
    TAKE(CmdDispatch);
    TAKE(CmdPipelineBarrier);
    TAKE(QueueSubmit);
    TAKE(WaitForFences);
    TAKE(GetFenceStatus);
    TAKE(ResetFences);
#undef TAKE
    VkPipelineLayoutCreateInfo pli = {VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    VkShaderModuleCreateInfo smi = {VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    VkComputePipelineCreateInfo cpi = {VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    VkPipelineLayout layout;
    VkShaderModule shader;
    smi.codeSize = sizeof(EMPTY_SPIRV);
    smi.pCode = EMPTY_SPIRV;
    if (vkCreatePipelineLayout(device, &pli, NULL, &layout) != VK_SUCCESS ||
        vkCreateShaderModule(device, &smi, NULL, &shader) != VK_SUCCESS) {
        FAIL("vulkan: no shader\n");
    }
    cpi.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    cpi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    cpi.stage.module = shader;
    cpi.stage.pName = "main";
    cpi.layout = layout;
    if (vkCreateComputePipelines(device, VK_NULL_HANDLE, 1, &cpi, NULL, &s.pipeline) != VK_SUCCESS) {
        FAIL("vulkan: no pipeline\n");
    }
    for (int i = 0; i < THREADS; ++i) {
        VkCommandPoolCreateInfo pci = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
        VkCommandBufferAllocateInfo cai = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
        VkFenceCreateInfo fci = {VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        memset(&bodies[i], 0, sizeof(bodies[i]));
        bodies[i].s = &s;
        pci.queueFamilyIndex = family;
        if (vkCreateCommandPool(device, &pci, NULL, &bodies[i].pool) != VK_SUCCESS) {
            FAIL("vulkan: no pool\n");
        }
        cai.commandPool = bodies[i].pool;
        cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        cai.commandBufferCount = 1;
        if (vkAllocateCommandBuffers(device, &cai, &bodies[i].cb) != VK_SUCCESS ||
            vkCreateFence(device, &fci, NULL, &bodies[i].fence) != VK_SUCCESS) {
            FAIL("vulkan: no command buffer\n");
        }
    }
    s.vulkan = 1;
    s.rounds = rounds;
    s.few = few;
    pthread_mutex_init(&s.queue_lock, NULL);
    pthread_mutex_init(&s.round_lock, NULL);
    for (int serial = 0; serial < 2; ++serial) {
        for (int polled = 0; polled < 2; ++polled) {
            char name[96];
            s.polled = polled;
            s.serial = serial;
            snprintf(name, sizeof(name), "vulkan %s%s", polled ? "polled" : "blocking", serial ? ", serial" : "");
            for (int i = 0; i < THREADS; ++i) {
                run_rounds(&bodies[i]); /* warm: every body's first uses before the pairs */
            }
            report(name, bodies, pairs);
        }
    }
}

static void *cuda_symbol(void *lib, const char *name) {
    void *f = dlsym(lib, name);
    if (f == NULL) {
        FAIL("cuda: no %s\n", name);
    }
    return f;
}

static void cuda_rows(int rounds, int few, int pairs, const char *sched) {
    static Shared s;
    Body bodies[THREADS];
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL), *module, *shared_stream;
    int device;
    unsigned flags = strcmp(sched, "spin") == 0 ? 1 : strcmp(sched, "yield") == 0 ? 2 : strcmp(sched, "block") == 0 ? 4
                                                                                                                   : 0;
    if (flags == 0 && strcmp(sched, "auto") != 0) {
        FAIL("SCHED: auto, spin, yield or block, not '%s'\n", sched);
    }
    if (lib == NULL) {
        FAIL("no libcuda: %s\n", dlerror());
    }
    int (*Init)(unsigned) = cuda_symbol(lib, "cuInit");
    int (*DeviceGet)(int *, int) = cuda_symbol(lib, "cuDeviceGet");
    int (*SetFlags)(int, unsigned) = cuda_symbol(lib, "cuDevicePrimaryCtxSetFlags_v2");
    int (*Retain)(void **, int) = cuda_symbol(lib, "cuDevicePrimaryCtxRetain");
    int (*ModuleLoadData)(void **, const void *) = cuda_symbol(lib, "cuModuleLoadData");
    int (*ModuleGetFunction)(void **, void *, const char *) = cuda_symbol(lib, "cuModuleGetFunction");
    int (*MemAlloc)(unsigned long long *, size_t) = cuda_symbol(lib, "cuMemAlloc_v2");
    int (*MemsetD32)(unsigned long long, unsigned, size_t) = cuda_symbol(lib, "cuMemsetD32_v2");
    int (*StreamCreate)(void **, unsigned) = cuda_symbol(lib, "cuStreamCreate");
    int (*CtxSynchronize)(void) = cuda_symbol(lib, "cuCtxSynchronize");
    s.CtxSetCurrent = cuda_symbol(lib, "cuCtxSetCurrent");
    s.LaunchKernel = cuda_symbol(lib, "cuLaunchKernel");
    s.MemcpyDtoHAsync = cuda_symbol(lib, "cuMemcpyDtoHAsync_v2");
    s.StreamSynchronize = cuda_symbol(lib, "cuStreamSynchronize");
    int code;
    if ((code = Init(0)) != 0 || (code = DeviceGet(&device, 0)) != 0 || (code = SetFlags(device, flags)) != 0 ||
        (code = Retain(&s.context, device)) != 0 || (code = s.CtxSetCurrent(s.context)) != 0 ||
        (code = ModuleLoadData(&module, TINY_PTX)) != 0 || (code = ModuleGetFunction(&s.function, module, "tiny")) != 0 ||
        (code = StreamCreate(&shared_stream, 1)) != 0) {
        FAIL("cuda: no context, module or stream (CUresult %d)\n", code);
    }
    s.rounds = rounds;
    s.few = few;
    pthread_mutex_init(&s.round_lock, NULL);
    void *own[THREADS];
    for (int i = 0; i < THREADS; ++i) {
        memset(&bodies[i], 0, sizeof(bodies[i]));
        bodies[i].s = &s;
        if (MemAlloc(&bodies[i].data, 64) != 0 || MemsetD32(bodies[i].data, 0, 16) != 0 ||
            StreamCreate(&own[i], 1) != 0) {
            FAIL("cuda: no memory or stream\n");
        }
    }
    if (CtxSynchronize() != 0) { /* the zeroing (on the legacy stream) done before the first launch reads it */
        FAIL("cuda: the arrays' zeroing failed\n");
    }
    for (int serial = 0; serial < 2; ++serial) {
        for (int each = 0; each < 2; ++each) {
            char name[96];
            s.serial = serial;
            for (int i = 0; i < THREADS; ++i) {
                bodies[i].stream = each ? own[i] : shared_stream;
            }
            snprintf(name, sizeof(name), "cuda sched=%s, %s%s", sched, each ? "a stream each" : "one stream",
                     serial ? ", serial" : "");
            for (int i = 0; i < THREADS; ++i) {
                run_rounds(&bodies[i]); /* warm, and every body's count where the checks expect it */
            }
            report(name, bodies, pairs);
        }
    }
}

/* argv[i] as a count from 1 to `most` (`fallback` where absent); exits saying why where it is none. */
static int count_arg(int argc, char **argv, int i, int fallback, long most) {
    char *end;
    long v;
    if (argc <= i) {
        return fallback;
    }
    errno = 0;
    v = strtol(argv[i], &end, 10);
    if (errno != 0 || end == argv[i] || *end != 0 || v < 1 || v > most) {
        FAIL("'%s': ROUNDS, FEW and PAIRS are counts from 1\n", argv[i]);
    }
    return (int)v;
}

int main(int argc, char **argv) {
    const char *kind = argc > 1 ? argv[1] : "vulkan";
    int rounds = count_arg(argc, argv, 2, 40, 1L << 24), few = count_arg(argc, argv, 3, 10, 1L << 24),
        pairs = count_arg(argc, argv, 4, 3, 1000);
    const char *last = argc > 5 ? argv[5] : "";
    /* a body's launches over the run: four variants, each a warm pass and two passes a pair (in turn, at once); its
       count is read back as a float, exact to 2^24 */
    if ((long long)rounds * few * 4 * (1 + 2LL * pairs) > (1LL << 24)) {
        FAIL("ROUNDS x FEW x (1 + 2 x PAIRS) x 4 variants: at most 2^24 launches of a body in all\n");
    }
    if (strcmp(kind, "vulkan") == 0) {
        vulkan_rows(rounds, few, pairs, last);
    } else if (strcmp(kind, "cuda") == 0) {
        cuda_rows(rounds, few, pairs, last[0] ? last : "auto");
    } else {
        FAIL("vulkan or cuda, not '%s'\n", kind);
    }
    return 0;
}
