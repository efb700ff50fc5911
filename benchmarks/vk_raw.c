/* Raw Vulkan's cost of a submit and a wait, the floor benchmarks/vkwait.py sets taichi_aot's Vulkan waits against.

   Build: cc -O2 -o vk_raw benchmarks/vk_raw.c -ldl   (Vulkan's headers; the loader is opened at run time)
   Run:   vk_raw [DEVICE_SUBSTRING] [ROUNDS]          one line of JSON: microseconds a round of each loop

   The loops, each on one compute queue of the first device whose name holds DEVICE_SUBSTRING:
   - reused_fence: an empty command buffer submitted with one fence, waited for and reset;
   - reused_fence_polled, dispatch_polled, dispatch_64_polled: reused_fence, dispatch and dispatch_64 with the fence
     polled (vkGetFenceStatus in a loop) instead of waited for in vkWaitForFences: a wait at the GPU's own floor,
     which a blocking wait on NVIDIA's driver misses by 20-30 us;
   - wait_idle: vkQueueWaitIdle with nothing queued;
   - new_fence_and_semaphore: libtaichi 1.7.4's way, a new VkSemaphore (signalled) and a new VkFence each submit,
     vkQueueWaitIdle, both destroyed;
   - new_semaphore: a new semaphore each submit, the fence reused;
   - create_destroy_fence: vkCreateFence and vkDestroyFence alone;
   - dispatch: a launch at its floor: a command buffer recorded anew (a compute pipeline of an empty shader bound, one
     workgroup dispatched), submitted, its fence waited for and reset;
   - dispatch_64: the same with 64 dispatches a command buffer, a compute-to-compute barrier after each (a step of many
     small kernels, as a compute graph or a sequence of launches records them);
   - dispatch_64_stamps: dispatch_64 with each dispatch between two timestamps at the compute stage (a profile's
     floor: what timing each dispatch costs the GPU), dispatch_64_stamp with one timestamp after each, the first
     dispatch's start one before it (consecutive dispatches share a timestamp: one's end is the next one's start).

   With a SPEC file (vk_raw DEVICE ROUNDS SPEC), also a kernel's own time by timestamps ("stamped": microseconds, the
   median and mean of its dispatches), the figure `Runtime.profile()` is checked against (taichi_aot_bench's profiler
   section writes the SPEC from a module's task): one task's SPIR-V dispatched ROUNDS times in one command buffer,
   each dispatch between two timestamps at the compute stage, a compute-to-compute barrier before each but the
   first, as taichi_aot's launches record a profiled launch; and the same task waited for as a launch is, the floors
   of taichi_aot's waited rows for the kernel they launch ("polled": one dispatch recorded, submitted, its fence
   polled, microseconds a round; "polled_64": 64 dispatches with a barrier after each, the pipeline and set bound
   once). The SPEC's lines:
     spirv PATH                          the task's SPIR-V
     groups N                            workgroups a dispatch
     bind BINDING uniform|storage BYTES [HEX]   a buffer bound at BINDING (all in set 0), its first bytes HEX */
#include "vk_bench.h"

/* An empty compute shader (OpCapability Shader; OpMemoryModel Logical GLSL450; OpEntryPoint GLCompute %3 "main";
   OpExecutionMode %3 LocalSize 1 1 1; %1 void; %2 fn() -> void; %3 = OpFunction; OpLabel; OpReturn; OpFunctionEnd). */
static const uint32_t EMPTY_SPIRV[] = {
    0x07230203, 0x00010000, 0, 5, 0,                          /* header: SPIR-V 1.0, bound 5 */
    0x00020011, 1,                                            /* OpCapability Shader */
    0x0003000E, 0, 1,                                         /* OpMemoryModel Logical GLSL450 */
    0x0005000F, 5, 3, 0x6E69616D, 0,                          /* OpEntryPoint GLCompute %3 "main" */
    0x00060010, 3, 17, 1, 1, 1,                               /* OpExecutionMode %3 LocalSize 1 1 1 */
    0x00020013, 1,                                            /* %1 = OpTypeVoid */
    0x00030021, 2, 1,                                         /* %2 = OpTypeFunction %1 */
    0x00050036, 1, 3, 0, 2,                                   /* %3 = OpFunction %1 None %2 */
    0x000200F8, 4,                                            /* %4 = OpLabel */
    0x000100FD,                                               /* OpReturn */
    0x00010038,                                               /* OpFunctionEnd */
};

static double now_us(void) {
    return vk_bench_seconds() * 1e6;
}

/* The fence waited for: blocking in the driver, or polled until signalled. */
#define WAIT_FENCE(polled)                                                        \
    do {                                                                          \
        if (polled) {                                                             \
            VkResult status_;                                                     \
            while ((status_ = vkGetFenceStatus(device, fence)) == VK_NOT_READY) { \
            }                                                                     \
            CHECK(status_);                                                       \
        } else {                                                                  \
            CHECK(vkWaitForFences(device, 1, &fence, VK_TRUE, UINT64_MAX));       \
        }                                                                         \
    } while (0)

#define MAX_BINDS 32

typedef struct {
    char spirv[4096];
    uint32_t groups, count;
    uint32_t binding[MAX_BINDS], storage[MAX_BINDS];
    uint64_t bytes[MAX_BINDS];
    unsigned char head[MAX_BINDS][256];
    uint32_t head_bytes[MAX_BINDS];
} Spec;

/* The SPEC file read (0), or 1 with the reason on stderr. */
static int read_spec(const char *path, Spec *spec) {
    char line[4608], kind[16], hex[1024];
    FILE *f = fopen(path, "r");
    memset(spec, 0, sizeof(*spec));
    if (f == NULL) {
        fprintf(stderr, "cannot open %s\n", path);
        return 1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        uint32_t b = spec->count, i;
        unsigned long long bytes;
        hex[0] = 0;
        if (sscanf(line, "spirv %4095s", spec->spirv) == 1 || sscanf(line, "groups %u", &spec->groups) == 1) {
            continue;
        }
        if (b < MAX_BINDS && sscanf(line, "bind %u %15s %llu %1023s", &spec->binding[b], kind, &bytes, hex) >= 3) {
            spec->storage[b] = strcmp(kind, "storage") == 0;
            spec->bytes[b] = bytes;
            for (i = 0; hex[2 * i] && hex[2 * i + 1] && i < sizeof(spec->head[b]); ++i) {
                unsigned v;
                sscanf(hex + 2 * i, "%2x", &v);
                spec->head[b][i] = (unsigned char)v;
            }
            spec->head_bytes[b] = i;
            ++spec->count;
        }
    }
    fclose(f);
    if (spec->spirv[0] == 0 || spec->groups == 0) {
        fprintf(stderr, "%s: no spirv or groups line\n", path);
        return 1;
    }
    return 0;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A compute pipeline of `code` (`bytes` long, entry "main") and its layout (of `set_layout`'s one set, or none). */
static int make_pipeline(PFN_vkGetDeviceProcAddr gdpa, VkDevice device, const uint32_t *code, size_t bytes,
                         const VkDescriptorSetLayout *set_layout, VkPipelineLayout *layout, VkPipeline *pipeline) {
    LOAD_DEVICE(vkCreateShaderModule);
    LOAD_DEVICE(vkCreatePipelineLayout);
    LOAD_DEVICE(vkCreateComputePipelines);
    VkPipelineLayoutCreateInfo pli = {VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    pli.setLayoutCount = set_layout != NULL;
    pli.pSetLayouts = set_layout;
    CHECK(vkCreatePipelineLayout(device, &pli, NULL, layout));
    VkShaderModuleCreateInfo smi = {VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    smi.codeSize = bytes;
    smi.pCode = code;
    VkShaderModule shader;
    CHECK(vkCreateShaderModule(device, &smi, NULL, &shader));
    VkComputePipelineCreateInfo cpi = {VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    cpi.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    cpi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    cpi.stage.module = shader;
    cpi.stage.pName = "main";
    cpi.layout = *layout;
    CHECK(vkCreateComputePipelines(device, VK_NULL_HANDLE, 1, &cpi, NULL, pipeline));
    return 0;
}

/* A memory type of `bits` with `need` (the first; -1: none). */
static int memory_type(const VkPhysicalDeviceMemoryProperties *mp, uint32_t bits, VkMemoryPropertyFlags need) {
    for (uint32_t i = 0; i < mp->memoryTypeCount; ++i) {
        if ((bits & (1u << i)) && (mp->memoryTypes[i].propertyFlags & need) == need) {
            return (int)i;
        }
    }
    return -1;
}

/* The SPEC's task dispatched `rounds` times in one command buffer, each between two timestamps (the file's opening
   comment): the median and mean of its dispatches' own times, in microseconds. */
static int stamped(PFN_vkGetDeviceProcAddr gdpa, VkDevice device, const VkPhysicalDeviceMemoryProperties *mp,
                   double period, uint32_t valid_bits, VkQueue queue, VkCommandBuffer cb, VkCommandPool pool,
                   VkFence fence, uint32_t rounds, const Spec *spec, double *median, double *mean, double *polled) {
    LOAD_DEVICE(vkCreateDescriptorSetLayout);
    LOAD_DEVICE(vkCreateBuffer);
    LOAD_DEVICE(vkGetBufferMemoryRequirements);
    LOAD_DEVICE(vkAllocateMemory);
    LOAD_DEVICE(vkBindBufferMemory);
    LOAD_DEVICE(vkMapMemory);
    LOAD_DEVICE(vkCreateDescriptorPool);
    LOAD_DEVICE(vkAllocateDescriptorSets);
    LOAD_DEVICE(vkUpdateDescriptorSets);
    LOAD_DEVICE(vkCreateQueryPool);
    LOAD_DEVICE(vkGetQueryPoolResults);
    LOAD_DEVICE(vkResetCommandPool);
    LOAD_DEVICE(vkBeginCommandBuffer);
    LOAD_DEVICE(vkEndCommandBuffer);
    LOAD_DEVICE(vkCmdResetQueryPool);
    LOAD_DEVICE(vkCmdWriteTimestamp);
    LOAD_DEVICE(vkCmdPipelineBarrier);
    LOAD_DEVICE(vkCmdBindPipeline);
    LOAD_DEVICE(vkCmdBindDescriptorSets);
    LOAD_DEVICE(vkCmdDispatch);
    LOAD_DEVICE(vkQueueSubmit);
    LOAD_DEVICE(vkWaitForFences);
    LOAD_DEVICE(vkResetFences);
    LOAD_DEVICE(vkGetFenceStatus);
    static uint32_t code[1 << 20];
    FILE *f = fopen(spec->spirv, "rb");
    size_t words = f != NULL ? fread(code, 4, sizeof(code) / 4, f) : 0;
    if (f != NULL) {
        fclose(f);
    }
    if (words == 0) {
        fprintf(stderr, "cannot read %s\n", spec->spirv);
        return 1;
    }
    VkDescriptorSetLayoutBinding binds[MAX_BINDS];
    VkDescriptorBufferInfo infos[MAX_BINDS];
    VkWriteDescriptorSet writes[MAX_BINDS];
    uint32_t uniforms = 0, storages = 0;
    memset(binds, 0, sizeof(binds));
    memset(writes, 0, sizeof(writes));
    for (uint32_t b = 0; b < spec->count; ++b) {
        binds[b].binding = spec->binding[b];
        binds[b].descriptorType = spec->storage[b] ? VK_DESCRIPTOR_TYPE_STORAGE_BUFFER : VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER;
        binds[b].descriptorCount = 1;
        binds[b].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
        uniforms += !spec->storage[b];
        storages += spec->storage[b];
    }
    VkDescriptorSetLayoutCreateInfo dli = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    dli.bindingCount = spec->count;
    dli.pBindings = binds;
    VkDescriptorSetLayout set_layout;
    CHECK(vkCreateDescriptorSetLayout(device, &dli, NULL, &set_layout));
    VkPipelineLayout layout;
    VkPipeline pipeline;
    if (make_pipeline(gdpa, device, code, words * 4, &set_layout, &layout, &pipeline) != 0) {
        return 1;
    }
    VkDescriptorPoolSize sizes[2] = {{VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER, uniforms ? uniforms : 1},
                                     {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, storages ? storages : 1}};
    VkDescriptorPoolCreateInfo dpi = {VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    dpi.maxSets = 1;
    dpi.poolSizeCount = 2;
    dpi.pPoolSizes = sizes;
    VkDescriptorPool dpool;
    CHECK(vkCreateDescriptorPool(device, &dpi, NULL, &dpool));
    VkDescriptorSetAllocateInfo dai = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    dai.descriptorPool = dpool;
    dai.descriptorSetCount = 1;
    dai.pSetLayouts = &set_layout;
    VkDescriptorSet set;
    CHECK(vkAllocateDescriptorSets(device, &dai, &set));
    for (uint32_t b = 0; b < spec->count; ++b) {
        VkBufferCreateInfo bci = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
        bci.size = spec->bytes[b];
        bci.usage = spec->storage[b] ? VK_BUFFER_USAGE_STORAGE_BUFFER_BIT : VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT;
        VkBuffer buffer;
        CHECK(vkCreateBuffer(device, &bci, NULL, &buffer));
        VkMemoryRequirements req;
        vkGetBufferMemoryRequirements(device, buffer, &req);
        VkMemoryPropertyFlags need = spec->head_bytes[b] ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                     VK_MEMORY_PROPERTY_HOST_COHERENT_BIT : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
        int type = memory_type(mp, req.memoryTypeBits, need);
        if (type < 0) {
            type = memory_type(mp, req.memoryTypeBits, 0);
        }
        VkMemoryAllocateInfo mai = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
        mai.allocationSize = req.size;
        mai.memoryTypeIndex = (uint32_t)type;
        VkDeviceMemory memory;
        CHECK(vkAllocateMemory(device, &mai, NULL, &memory));
        CHECK(vkBindBufferMemory(device, buffer, memory, 0));
        if (spec->head_bytes[b]) {
            void *mapped;
            CHECK(vkMapMemory(device, memory, 0, VK_WHOLE_SIZE, 0, &mapped));
            memset(mapped, 0, spec->bytes[b]);
            memcpy(mapped, spec->head[b], spec->head_bytes[b]);
        }
        infos[b].buffer = buffer;
        infos[b].offset = 0;
        infos[b].range = VK_WHOLE_SIZE;
        writes[b].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
        writes[b].dstSet = set;
        writes[b].dstBinding = spec->binding[b];
        writes[b].descriptorCount = 1;
        writes[b].descriptorType = binds[b].descriptorType;
        writes[b].pBufferInfo = &infos[b];
    }
    vkUpdateDescriptorSets(device, spec->count, writes, 0, NULL);
    VkQueryPoolCreateInfo qpi = {VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qpi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qpi.queryCount = 2 * rounds;
    VkQueryPool queries;
    CHECK(vkCreateQueryPool(device, &qpi, NULL, &queries));
    VkMemoryBarrier barrier = {VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    barrier.srcAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    VkCommandBufferBeginInfo cbi = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    VkSubmitInfo si = {VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cb;
    uint64_t *ticks = calloc(2 * rounds, sizeof(uint64_t));
    double *spans = calloc(rounds, sizeof(double)), total = 0;
    uint64_t mask = valid_bits >= 64 ? UINT64_MAX : (1ull << valid_bits) - 1;
    for (int pass = 0; pass < 2; ++pass) { /* the first warms the pipeline and the memory */
        CHECK(vkResetCommandPool(device, pool, 0));
        CHECK(vkBeginCommandBuffer(cb, &cbi));
        vkCmdResetQueryPool(cb, queries, 0, 2 * rounds);
        vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
        vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, &set, 0, NULL);
        for (uint32_t i = 0; i < rounds; ++i) {
            vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, queries, 2 * i);
            if (i > 0) {
                vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                                     &barrier, 0, NULL, 0, NULL);
            }
            vkCmdDispatch(cb, spec->groups, 1, 1);
            vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, queries, 2 * i + 1);
        }
        CHECK(vkEndCommandBuffer(cb));
        CHECK(vkQueueSubmit(queue, 1, &si, fence));
        CHECK(vkWaitForFences(device, 1, &fence, VK_TRUE, UINT64_MAX));
        CHECK(vkResetFences(device, 1, &fence));
    }
    CHECK(vkGetQueryPoolResults(device, queries, 0, 2 * rounds, 2 * rounds * sizeof(uint64_t), ticks,
                                sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
    for (uint32_t i = 0; i < rounds; ++i) {
        uint64_t start = ticks[2 * i] & mask, end = ticks[2 * i + 1] & mask;
        spans[i] = (double)(end >= start ? end - start : 0) * period / 1000.0;
        total += spans[i];
    }
    qsort(spans, rounds, sizeof(double), compare_doubles);
    *median = spans[rounds / 2];
    *mean = total / rounds;
    free(ticks);
    free(spans);
    /* the same task waited for as a launch is (polled[0]: one dispatch a submit; polled[1]: 64, a barrier between
       each two), its pipeline and set bound once a command buffer, each recorded anew, submitted, its fence polled */
    for (int kind = 0; kind < 2; ++kind) {
        uint32_t n = kind == 0 ? 1 : 64, r = kind == 0 ? rounds : (rounds + 9) / 10;
        double t = 0;
        for (uint32_t i = 0; i <= r; ++i) {
            double start = now_us();
            CHECK(vkResetCommandPool(device, pool, 0));
            CHECK(vkBeginCommandBuffer(cb, &cbi));
            vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
            vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, &set, 0, NULL);
            for (uint32_t d = 0; d < n; ++d) {
                vkCmdDispatch(cb, spec->groups, 1, 1);
                vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0,
                                     1, &barrier, 0, NULL, 0, NULL);
            }
            CHECK(vkEndCommandBuffer(cb));
            CHECK(vkQueueSubmit(queue, 1, &si, fence));
            WAIT_FENCE(1);
            CHECK(vkResetFences(device, 1, &fence));
            if (i > 0) { /* the first warms */
                t += now_us() - start;
            }
        }
        polled[kind] = t / r;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *want = argc > 1 ? argv[1] : "";
    int rounds = argc > 2 ? atoi(argv[2]) : 2000, i;
    void *loader = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (loader == NULL) {
        fprintf(stderr, "no Vulkan loader: %s\n", dlerror());
        return 1;
    }
    PFN_vkGetInstanceProcAddr gipa = (PFN_vkGetInstanceProcAddr)dlsym(loader, "vkGetInstanceProcAddr");
    LOAD(NULL, vkCreateInstance);
    VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.apiVersion = VK_API_VERSION_1_1;
    VkInstanceCreateInfo ici = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ici.pApplicationInfo = &app;
    VkInstance instance;
    CHECK(vkCreateInstance(&ici, NULL, &instance));
    LOAD(instance, vkEnumeratePhysicalDevices);
    LOAD(instance, vkGetPhysicalDeviceProperties);
    LOAD(instance, vkGetPhysicalDeviceQueueFamilyProperties);
    LOAD(instance, vkCreateDevice);
    LOAD(instance, vkGetDeviceProcAddr);
    PFN_vkGetDeviceProcAddr gdpa = vkGetDeviceProcAddr;
    uint32_t count = 16;
    VkPhysicalDevice physicals[16];
    CHECK(vkEnumeratePhysicalDevices(instance, &count, physicals));
    VkPhysicalDevice physical = VK_NULL_HANDLE;
    VkPhysicalDeviceProperties props;
    for (i = 0; i < (int)count && physical == VK_NULL_HANDLE; ++i) {
        vkGetPhysicalDeviceProperties(physicals[i], &props);
        if (strstr(props.deviceName, want) != NULL) {
            physical = physicals[i];
        }
    }
    if (physical == VK_NULL_HANDLE) {
        fprintf(stderr, "no Vulkan device named like '%s'\n", want);
        return 1;
    }
    uint32_t families = 16, family = 0;
    VkQueueFamilyProperties fprops[16];
    vkGetPhysicalDeviceQueueFamilyProperties(physical, &families, fprops);
    while (family < families && !(fprops[family].queueFlags & VK_QUEUE_COMPUTE_BIT)) {
        ++family;
    }
    float priority = 1.0f;
    VkDeviceQueueCreateInfo qci = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    qci.queueFamilyIndex = family;
    qci.queueCount = 1;
    qci.pQueuePriorities = &priority;
    VkDeviceCreateInfo dci = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    dci.queueCreateInfoCount = 1;
    dci.pQueueCreateInfos = &qci;
    VkDevice device;
    CHECK(vkCreateDevice(physical, &dci, NULL, &device));
    LOAD_DEVICE(vkGetDeviceQueue);
    LOAD_DEVICE(vkCreateCommandPool);
    LOAD_DEVICE(vkAllocateCommandBuffers);
    LOAD_DEVICE(vkBeginCommandBuffer);
    LOAD_DEVICE(vkEndCommandBuffer);
    LOAD_DEVICE(vkCreateFence);
    LOAD_DEVICE(vkDestroyFence);
    LOAD_DEVICE(vkResetFences);
    LOAD_DEVICE(vkWaitForFences);
    LOAD_DEVICE(vkGetFenceStatus);
    LOAD_DEVICE(vkCreateSemaphore);
    LOAD_DEVICE(vkDestroySemaphore);
    LOAD_DEVICE(vkQueueSubmit);
    LOAD_DEVICE(vkQueueWaitIdle);
    LOAD_DEVICE(vkCmdBindPipeline);
    LOAD_DEVICE(vkCmdDispatch);
    LOAD_DEVICE(vkCmdPipelineBarrier);
    LOAD_DEVICE(vkResetCommandPool);
    VkQueue queue;
    vkGetDeviceQueue(device, family, 0, &queue);
    VkCommandPoolCreateInfo pci = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pci.queueFamilyIndex = family;
    VkCommandPool pool;
    CHECK(vkCreateCommandPool(device, &pci, NULL, &pool));
    VkCommandBufferAllocateInfo cai = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    cai.commandPool = pool;
    cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    cai.commandBufferCount = 1;
    VkCommandBuffer cb;
    CHECK(vkAllocateCommandBuffers(device, &cai, &cb));
    VkCommandBufferBeginInfo cbi = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    CHECK(vkBeginCommandBuffer(cb, &cbi));
    CHECK(vkEndCommandBuffer(cb));
    VkFenceCreateInfo fci = {VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkSemaphoreCreateInfo sci = {VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
    VkFence fence;
    CHECK(vkCreateFence(device, &fci, NULL, &fence));
    VkSubmitInfo si = {VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cb;
    double t, reused = -1, reused_polled = -1, idle, libtaichi, semaphore, create, dispatch, dispatch_64, stamps_2 = -1,
        stamps_1 = -1, dispatch_polled = -1, dispatch_64_polled = -1;

    for (int polled = 0; polled < 2; ++polled) {
        t = now_us();
        for (i = 0; i < rounds; ++i) {
            CHECK(vkQueueSubmit(queue, 1, &si, fence));
            WAIT_FENCE(polled);
            CHECK(vkResetFences(device, 1, &fence));
        }
        *(polled ? &reused_polled : &reused) = (now_us() - t) / rounds;
    }

    t = now_us();
    for (i = 0; i < rounds; ++i) {
        CHECK(vkQueueWaitIdle(queue));
    }
    idle = (now_us() - t) / rounds;

    t = now_us();
    for (i = 0; i < rounds; ++i) {
        VkSemaphore s;
        VkFence f;
        CHECK(vkCreateSemaphore(device, &sci, NULL, &s));
        CHECK(vkCreateFence(device, &fci, NULL, &f));
        VkSubmitInfo sub = si;
        sub.signalSemaphoreCount = 1;
        sub.pSignalSemaphores = &s;
        CHECK(vkQueueSubmit(queue, 1, &sub, f));
        CHECK(vkQueueWaitIdle(queue));
        vkDestroyFence(device, f, NULL);
        vkDestroySemaphore(device, s, NULL);
    }
    libtaichi = (now_us() - t) / rounds;

    t = now_us();
    for (i = 0; i < rounds; ++i) {
        VkSemaphore s;
        CHECK(vkCreateSemaphore(device, &sci, NULL, &s));
        VkSubmitInfo sub = si;
        sub.signalSemaphoreCount = 1;
        sub.pSignalSemaphores = &s;
        CHECK(vkQueueSubmit(queue, 1, &sub, fence));
        CHECK(vkWaitForFences(device, 1, &fence, VK_TRUE, UINT64_MAX));
        CHECK(vkResetFences(device, 1, &fence));
        vkDestroySemaphore(device, s, NULL);
    }
    semaphore = (now_us() - t) / rounds;

    t = now_us();
    for (i = 0; i < rounds; ++i) {
        VkFence f;
        CHECK(vkCreateFence(device, &fci, NULL, &f));
        vkDestroyFence(device, f, NULL);
    }
    create = (now_us() - t) / rounds;

    VkPipelineLayout layout;
    VkPipeline pipeline;
    if (make_pipeline(gdpa, device, EMPTY_SPIRV, sizeof(EMPTY_SPIRV), NULL, &layout, &pipeline) != 0) {
        return 1;
    }
    VkMemoryBarrier barrier = {VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    LOAD_DEVICE(vkCreateQueryPool);
    LOAD_DEVICE(vkCmdResetQueryPool);
    LOAD_DEVICE(vkCmdWriteTimestamp);
    VkQueryPoolCreateInfo qpi = {VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qpi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qpi.queryCount = 129;
    VkQueryPool queries = VK_NULL_HANDLE;
    int stamps_here = fprops[family].timestampValidBits > 0 &&
                      vkCreateQueryPool(device, &qpi, NULL, &queries) == VK_SUCCESS;
    int per_round[6] = {1, 64, 1, 64, 64, 64}, stamps_of[6] = {0, 0, 0, 0, 2, 1}, polls[6] = {0, 0, 1, 1, 0, 0};
    double *figures[6] = {&dispatch, &dispatch_64, &dispatch_polled, &dispatch_64_polled, &stamps_2, &stamps_1};
    for (int kind = 0; kind < (stamps_here ? 6 : 4); ++kind) {
        int n = per_round[kind], r = n == 1 ? rounds : (rounds + 9) / 10, stamps = stamps_of[kind];
        t = now_us();
        for (i = 0; i < r; ++i) {
            uint32_t q = 0;
            CHECK(vkResetCommandPool(device, pool, 0));
            CHECK(vkBeginCommandBuffer(cb, &cbi));
            if (stamps > 0) {
                vkCmdResetQueryPool(cb, queries, 0, 129);
            }
            for (int d = 0; d < n; ++d) {
                if (stamps == 2 || (stamps == 1 && d == 0)) {
                    vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, queries, q++);
                }
                vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
                vkCmdDispatch(cb, 1, 1, 1);
                if (stamps > 0) {
                    vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, queries, q++);
                }
                vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0,
                                     1, &barrier, 0, NULL, 0, NULL);
            }
            CHECK(vkEndCommandBuffer(cb));
            CHECK(vkQueueSubmit(queue, 1, &si, fence));
            WAIT_FENCE(polls[kind]);
            CHECK(vkResetFences(device, 1, &fence));
        }
        *figures[kind] = (now_us() - t) / r;
    }

    printf("{\"device\": \"%s\", \"rounds\": %d, \"reused_fence\": %.2f, \"wait_idle\": %.2f, "
           "\"new_fence_and_semaphore\": %.2f, \"new_semaphore\": %.2f, \"create_destroy_fence\": %.2f, "
           "\"dispatch\": %.2f, \"dispatch_64\": %.2f, \"dispatch_64_stamps\": %.2f, "
           "\"dispatch_64_stamp\": %.2f, \"reused_fence_polled\": %.2f, \"dispatch_polled\": %.2f, "
           "\"dispatch_64_polled\": %.2f",
           props.deviceName, rounds, reused, idle, libtaichi, semaphore, create, dispatch, dispatch_64, stamps_2,
           stamps_1, reused_polled, dispatch_polled, dispatch_64_polled);
    if (argc > 3) {
        Spec spec;
        VkPhysicalDeviceMemoryProperties mp;
        double median, mean, polled[2];
        uint32_t stamp_rounds = rounds < 1 ? 1 : rounds > 4096 ? 4096 : (uint32_t)rounds;
        LOAD(instance, vkGetPhysicalDeviceMemoryProperties);
        vkGetPhysicalDeviceMemoryProperties(physical, &mp);
        if (read_spec(argv[3], &spec) != 0 || fprops[family].timestampValidBits == 0 ||
            stamped(gdpa, device, &mp, props.limits.timestampPeriod, fprops[family].timestampValidBits, queue, cb,
                    pool, fence, stamp_rounds, &spec, &median, &mean, polled) != 0) {
            fprintf(stderr, "no timestamps of the SPEC's kernel\n");
            return 1;
        }
        printf(", \"stamped\": {\"median\": %.3f, \"mean\": %.3f, \"dispatches\": %u, \"polled\": %.2f, "
               "\"polled_64\": %.2f}", median, mean, stamp_rounds, polled[0], polled[1]);
    }
    printf("}\n");
    return 0;
}
