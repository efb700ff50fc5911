/* Raw Vulkan's cost of a submit and a wait, the floor benchmarks/vkwait.py sets taichi_aot's Vulkan waits against.

   Build: cc -O2 -o vk_raw benchmarks/vk_raw.c -ldl   (Vulkan's headers; the loader is opened at run time)
   Run:   vk_raw [DEVICE_SUBSTRING] [ROUNDS]          one line of JSON: microseconds a round of each loop

   The loops, each on one compute queue of the first device whose name holds DEVICE_SUBSTRING:
   - reused_fence: an empty command buffer submitted with one fence, waited for and reset;
   - wait_idle: vkQueueWaitIdle with nothing queued;
   - new_fence_and_semaphore: libtaichi 1.7.4's way, a new VkSemaphore (signalled) and a new VkFence each submit,
     vkQueueWaitIdle, both destroyed;
   - new_semaphore: a new semaphore each submit, the fence reused;
   - create_destroy_fence: vkCreateFence and vkDestroyFence alone;
   - dispatch: a launch at its floor: a command buffer recorded anew (a compute pipeline of an empty shader bound, one
     workgroup dispatched), submitted, its fence waited for and reset;
   - dispatch_64: the same with 64 dispatches a command buffer, a compute-to-compute barrier after each (a step of many
     small kernels, as a compute graph or a sequence of launches records them). */
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
    LOAD_DEVICE(vkCreateSemaphore);
    LOAD_DEVICE(vkDestroySemaphore);
    LOAD_DEVICE(vkQueueSubmit);
    LOAD_DEVICE(vkQueueWaitIdle);
    LOAD_DEVICE(vkCreateShaderModule);
    LOAD_DEVICE(vkCreatePipelineLayout);
    LOAD_DEVICE(vkCreateComputePipelines);
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
    double t, reused, idle, libtaichi, semaphore, create, dispatch, dispatch_64;

    t = now_us();
    for (i = 0; i < rounds; ++i) {
        CHECK(vkQueueSubmit(queue, 1, &si, fence));
        CHECK(vkWaitForFences(device, 1, &fence, VK_TRUE, UINT64_MAX));
        CHECK(vkResetFences(device, 1, &fence));
    }
    reused = (now_us() - t) / rounds;

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

    VkShaderModuleCreateInfo smi = {VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    smi.codeSize = sizeof(EMPTY_SPIRV);
    smi.pCode = EMPTY_SPIRV;
    VkShaderModule shader;
    CHECK(vkCreateShaderModule(device, &smi, NULL, &shader));
    VkPipelineLayoutCreateInfo pli = {VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    VkPipelineLayout layout;
    CHECK(vkCreatePipelineLayout(device, &pli, NULL, &layout));
    VkComputePipelineCreateInfo cpi = {VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    cpi.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    cpi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    cpi.stage.module = shader;
    cpi.stage.pName = "main";
    cpi.layout = layout;
    VkPipeline pipeline;
    CHECK(vkCreateComputePipelines(device, VK_NULL_HANDLE, 1, &cpi, NULL, &pipeline));
    VkMemoryBarrier barrier = {VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    int per_round[2] = {1, 64};
    double *figures[2] = {&dispatch, &dispatch_64};
    for (int kind = 0; kind < 2; ++kind) {
        int n = per_round[kind], r = kind == 0 ? rounds : (rounds + 9) / 10;
        t = now_us();
        for (i = 0; i < r; ++i) {
            CHECK(vkResetCommandPool(device, pool, 0));
            CHECK(vkBeginCommandBuffer(cb, &cbi));
            for (int d = 0; d < n; ++d) {
                vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
                vkCmdDispatch(cb, 1, 1, 1);
                vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                                     &barrier, 0, NULL, 0, NULL);
            }
            CHECK(vkEndCommandBuffer(cb));
            CHECK(vkQueueSubmit(queue, 1, &si, fence));
            CHECK(vkWaitForFences(device, 1, &fence, VK_TRUE, UINT64_MAX));
            CHECK(vkResetFences(device, 1, &fence));
        }
        *figures[kind] = (now_us() - t) / r;
    }

    printf("{\"device\": \"%s\", \"rounds\": %d, \"reused_fence\": %.2f, \"wait_idle\": %.2f, "
           "\"new_fence_and_semaphore\": %.2f, \"new_semaphore\": %.2f, \"create_destroy_fence\": %.2f, "
           "\"dispatch\": %.2f, \"dispatch_64\": %.2f}\n",
           props.deviceName, rounds, reused, idle, libtaichi, semaphore, create, dispatch, dispatch_64);
    return 0;
}
