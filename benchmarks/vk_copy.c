/* Raw Vulkan's host copies: what copies between device memory and a host array imported as it is
   (VK_EXT_external_memory_host, as the own Vulkan state's host copies are made: _csrc/backends/vkcopy.c) reach, and
   what they depend on.

   Build: cc -O2 -o vk_copy benchmarks/vk_copy.c -ldl   (Vulkan's headers; the loader is opened at run time)
   Run:   vk_copy [DEVICE_SUBSTRING] [MIB] [ROUNDS]    one line of JSON: GB/s, the best of ROUNDS copies

   Each copy of MIB MiB is recorded, submitted alone and its fence waited for, from device memory to the host array
   ("to_host") and back ("to_device"), on the first device whose name holds DEVICE_SUBSTRING:
   - "families": on one queue of each queue family (every buffer shared by all of them);
   - "host_types": on family 0, through each memory type the driver offers for imported host memory;
   - "pages": into host pages small (4 KiB) or huge (2 MiB), with and without the barriers the own Vulkan state records
     around a copy;
   - "offsets": the host side at an offset of 16 bytes (as malloc's large blocks, and so numpy's arrays, lie), and
     moved to the next 256 bytes with the device's side off alignment instead. */
#include <sys/mman.h>

#include "vk_bench.h"

#define FAMILIES 16

typedef struct {
    VkDevice device;
    VkQueue queues[FAMILIES];
    VkCommandBuffer cbs[FAMILIES];
    VkFence fences[FAMILIES];
    PFN_vkResetCommandBuffer reset;
    PFN_vkBeginCommandBuffer begin;
    PFN_vkEndCommandBuffer end;
    PFN_vkCmdCopyBuffer copy;
    PFN_vkCmdPipelineBarrier barrier;
    PFN_vkQueueSubmit submit;
    PFN_vkWaitForFences wait;
    PFN_vkResetFences reset_fences;
    int rounds;
} Bench;

/* One memory barrier (a source and a destination stage and access). */
static void bench_barrier(const Bench *b, VkCommandBuffer cb, VkPipelineStageFlags src, VkAccessFlags src_access,
                          VkPipelineStageFlags dst, VkAccessFlags dst_access) {
    VkMemoryBarrier mb = {VK_STRUCTURE_TYPE_MEMORY_BARRIER, NULL, src_access, dst_access};
    b->barrier(cb, src, dst, 0, 1, &mb, 0, NULL, 0, NULL);
}

/* The best GB/s of `rounds` copies of `region` from `src` to `dst` on family `f`'s queue, each submitted alone and
   waited for; with the own Vulkan state's barriers around it where `barriers`. 0 where Vulkan failed. */
static double bench_copy(const Bench *b, uint32_t f, VkBuffer src, VkBuffer dst, VkBufferCopy region, int barriers) {
    VkCommandBufferBeginInfo begin = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, NULL,
                                      VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT, NULL};
    VkSubmitInfo si = {VK_STRUCTURE_TYPE_SUBMIT_INFO, NULL, 0, NULL, NULL, 1, &b->cbs[f], 0, NULL};
    const VkPipelineStageFlags work = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    double best = 0;
    for (int r = 0; r < b->rounds; ++r) {
        double t0 = vk_bench_seconds(), rate;
        if (b->reset(b->cbs[f], 0) != VK_SUCCESS || b->begin(b->cbs[f], &begin) != VK_SUCCESS) {
            return 0;
        }
        if (barriers) {
            bench_barrier(b, b->cbs[f], VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | VK_PIPELINE_STAGE_HOST_BIT,
                          VK_ACCESS_MEMORY_WRITE_BIT | VK_ACCESS_HOST_WRITE_BIT, work,
                          VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT);
        }
        b->copy(b->cbs[f], src, dst, 1, &region);
        if (barriers) {
            bench_barrier(b, b->cbs[f], work, VK_ACCESS_TRANSFER_WRITE_BIT, work | VK_PIPELINE_STAGE_HOST_BIT,
                          VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_HOST_READ_BIT);
        }
        if (b->end(b->cbs[f]) != VK_SUCCESS || b->submit(b->queues[f], 1, &si, b->fences[f]) != VK_SUCCESS ||
            b->wait(b->device, 1, &b->fences[f], VK_TRUE, UINT64_MAX) != VK_SUCCESS ||
            b->reset_fences(b->device, 1, &b->fences[f]) != VK_SUCCESS) {
            return 0;
        }
        rate = (double)region.size / (vk_bench_seconds() - t0) / 1e9;
        best = rate > best ? rate : best;
    }
    return best;
}

/* `"to_host": GB/s, "to_device": GB/s` of `size` bytes between `device_buffer` and `host_buffer` on family `f`,
   the host's side at `host_at`, the device's at `device_at`. */
static void bench_both(const Bench *b, uint32_t f, VkBuffer device_buffer, VkBuffer host_buffer, uint64_t device_at,
                       uint64_t host_at, uint64_t size, int barriers) {
    VkBufferCopy out = {device_at, host_at, size}, in = {host_at, device_at, size};
    printf("\"to_host\": %.1f, \"to_device\": %.1f", bench_copy(b, f, device_buffer, host_buffer, out, barriers),
           bench_copy(b, f, host_buffer, device_buffer, in, barriers));
}

static int memory_type(const VkPhysicalDeviceMemoryProperties *mp, uint32_t bits, VkMemoryPropertyFlags need) {
    for (uint32_t i = 0; i < mp->memoryTypeCount; ++i) {
        if ((bits & (1u << i)) && (mp->memoryTypes[i].propertyFlags & need) == need) {
            return (int)i;
        }
    }
    return -1;
}

int main(int argc, char **argv) {
    const char *want = argc > 1 ? argv[1] : "";
    uint64_t size = (uint64_t)(argc > 2 ? atoi(argv[2]) : 64) << 20;
    Bench b;
    memset(&b, 0, sizeof(b));
    b.rounds = argc > 3 ? atoi(argv[3]) : 10;
    void *loader = dlopen("libvulkan.so.1", RTLD_NOW);
    if (loader == NULL) {
        fprintf(stderr, "no Vulkan loader\n");
        return 1;
    }
    PFN_vkGetInstanceProcAddr gipa = (PFN_vkGetInstanceProcAddr)dlsym(loader, "vkGetInstanceProcAddr");
    LOAD(NULL, vkCreateInstance);
    VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO, NULL, "vk_copy", 1, NULL, 0, VK_API_VERSION_1_1};
    VkInstanceCreateInfo ici = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, NULL, 0, &app, 0, NULL, 0, NULL};
    VkInstance instance;
    CHECK(vkCreateInstance(&ici, NULL, &instance));
    LOAD(instance, vkEnumeratePhysicalDevices);
    LOAD(instance, vkGetPhysicalDeviceProperties);
    LOAD(instance, vkGetPhysicalDeviceQueueFamilyProperties);
    LOAD(instance, vkGetPhysicalDeviceMemoryProperties);
    LOAD(instance, vkCreateDevice);
    LOAD(instance, vkGetDeviceProcAddr);
    VkPhysicalDevice physicals[8], physical = NULL;
    uint32_t count = 8, families = FAMILIES;
    VkPhysicalDeviceProperties props;
    CHECK(vkEnumeratePhysicalDevices(instance, &count, physicals));
    for (uint32_t i = 0; i < count && physical == NULL; ++i) {
        vkGetPhysicalDeviceProperties(physicals[i], &props);
        physical = strstr(props.deviceName, want) != NULL ? physicals[i] : NULL;
    }
    if (physical == NULL) {
        fprintf(stderr, "no device named like %s\n", want);
        return 1;
    }
    VkQueueFamilyProperties fprops[FAMILIES];
    vkGetPhysicalDeviceQueueFamilyProperties(physical, &families, fprops);
    float priority = 1.0f;
    VkDeviceQueueCreateInfo qci[FAMILIES];
    uint32_t indices[FAMILIES];
    for (uint32_t f = 0; f < families; ++f) {
        VkDeviceQueueCreateInfo q = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, NULL, 0, f, 1, &priority};
        qci[f] = q;
        indices[f] = f;
    }
    const char *extensions[] = {"VK_KHR_external_memory", "VK_EXT_external_memory_host"};
    VkDeviceCreateInfo dci = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, NULL, 0, families, qci, 0, NULL, 2, extensions,
                              NULL};
    VkDevice device;
    CHECK(vkCreateDevice(physical, &dci, NULL, &device));
    PFN_vkGetDeviceProcAddr gdpa = vkGetDeviceProcAddr;
    LOAD_DEVICE(vkGetDeviceQueue);
    LOAD_DEVICE(vkCreateBuffer);
    LOAD_DEVICE(vkGetBufferMemoryRequirements);
    LOAD_DEVICE(vkAllocateMemory);
    LOAD_DEVICE(vkBindBufferMemory);
    LOAD_DEVICE(vkCreateCommandPool);
    LOAD_DEVICE(vkAllocateCommandBuffers);
    LOAD_DEVICE(vkCreateFence);
    LOAD_DEVICE(vkGetMemoryHostPointerPropertiesEXT);
    b.device = device;
    b.reset = (PFN_vkResetCommandBuffer)gdpa(device, "vkResetCommandBuffer");
    b.begin = (PFN_vkBeginCommandBuffer)gdpa(device, "vkBeginCommandBuffer");
    b.end = (PFN_vkEndCommandBuffer)gdpa(device, "vkEndCommandBuffer");
    b.copy = (PFN_vkCmdCopyBuffer)gdpa(device, "vkCmdCopyBuffer");
    b.barrier = (PFN_vkCmdPipelineBarrier)gdpa(device, "vkCmdPipelineBarrier");
    b.submit = (PFN_vkQueueSubmit)gdpa(device, "vkQueueSubmit");
    b.wait = (PFN_vkWaitForFences)gdpa(device, "vkWaitForFences");
    b.reset_fences = (PFN_vkResetFences)gdpa(device, "vkResetFences");
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(physical, &mp);
    for (uint32_t f = 0; f < families; ++f) {
        VkCommandPool pool;
        VkCommandPoolCreateInfo pci = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, NULL,
                                       VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, f};
        VkCommandBufferAllocateInfo cai = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, NULL, 0,
                                           VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1};
        VkFenceCreateInfo fci = {VK_STRUCTURE_TYPE_FENCE_CREATE_INFO, NULL, 0};
        vkGetDeviceQueue(device, f, 0, &b.queues[f]);
        CHECK(vkCreateCommandPool(device, &pci, NULL, &pool));
        cai.commandPool = pool;
        CHECK(vkAllocateCommandBuffers(device, &cai, &b.cbs[f]));
        CHECK(vkCreateFence(device, &fci, NULL, &b.fences[f]));
    }

    /* device memory, and host arrays imported (every buffer shared by every family) */
    VkBufferCreateInfo bci = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, NULL, 0, size,
                              VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                              families > 1 ? VK_SHARING_MODE_CONCURRENT : VK_SHARING_MODE_EXCLUSIVE, families, indices};
    VkMemoryRequirements req;
    VkBuffer dbuf, hbufs[6];
    VkDeviceMemory dmem, hmem;
    CHECK(vkCreateBuffer(device, &bci, NULL, &dbuf));
    vkGetBufferMemoryRequirements(device, dbuf, &req);
    VkMemoryAllocateInfo mai = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, NULL, req.size,
                                (uint32_t)memory_type(&mp, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)};
    CHECK(vkAllocateMemory(device, &mai, NULL, &dmem));
    CHECK(vkBindBufferMemory(device, dbuf, dmem, 0));
    VkExternalMemoryBufferCreateInfo ext = {VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO, NULL,
                                            VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT};
    VkImportMemoryHostPointerInfoEXT imp = {VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT, NULL,
                                            VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT, NULL};
    VkMemoryHostPointerPropertiesEXT hp = {VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT, NULL, 0};
    uint32_t types[4], type_count = 0, host_type = 0;
    bci.pNext = &ext;
    /* hbufs[0..1]: pages small and huge (the first host memory type); hbufs[2..]: one each host memory type */
    for (int h = 0; h < 6; ++h) {
        char *pages = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        madvise(pages, size, h == 1 ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
        memset(pages, h, size);
        CHECK(vkCreateBuffer(device, &bci, NULL, &hbufs[h]));
        vkGetBufferMemoryRequirements(device, hbufs[h], &req);
        CHECK(vkGetMemoryHostPointerPropertiesEXT(device, VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT,
                                                  pages, &hp));
        if (h == 0) {
            for (uint32_t t = 0; t < mp.memoryTypeCount && type_count < 4; ++t) {
                types[type_count] = t;
                type_count += (hp.memoryTypeBits & req.memoryTypeBits & (1u << t)) != 0;
            }
            host_type = types[0];
        }
        if (h >= 2 && (uint32_t)(h - 2) >= type_count) {
            break;
        }
        imp.pHostPointer = pages;
        VkMemoryAllocateInfo hai = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, &imp, size,
                                    h >= 2 ? types[h - 2] : host_type};
        CHECK(vkAllocateMemory(device, &hai, NULL, &hmem));
        CHECK(vkBindBufferMemory(device, hbufs[h], hmem, 0));
    }

    printf("{\"device\": \"%s\", \"mib\": %d, \"families\": [", props.deviceName, (int)(size >> 20));
    for (uint32_t f = 0; f < families; ++f) {
        printf("%s{\"family\": %u, \"flags\": %u, ", f ? ", " : "", f, (unsigned)fprops[f].queueFlags);
        bench_both(&b, f, dbuf, hbufs[0], 0, 0, size, 0);
        printf("}");
    }
    printf("], \"host_types\": [");
    for (uint32_t t = 0; t < type_count; ++t) {
        printf("%s{\"type\": %u, \"flags\": %u, ", t ? ", " : "", types[t], (unsigned)mp.memoryTypes[types[t]].propertyFlags);
        bench_both(&b, 0, dbuf, hbufs[2 + t], 0, 0, size, 0);
        printf("}");
    }
    printf("], \"pages\": [");
    for (int v = 0; v < 4; ++v) {
        printf("%s{\"huge\": %d, \"barriers\": %d, ", v ? ", " : "", v & 1, v >> 1);
        bench_both(&b, 0, dbuf, hbufs[v & 1], 0, 0, size, v >> 1);
        printf("}");
    }
    printf("], \"offsets\": [");
    {
        uint64_t at[3][2] = {{0, 0}, {0, 16}, {240, 256}}; /* {device side, host side} */
        for (int v = 0; v < 3; ++v) {
            printf("%s{\"device_offset\": %d, \"host_offset\": %d, ", v ? ", " : "", (int)at[v][0], (int)at[v][1]);
            bench_both(&b, 0, dbuf, hbufs[0], at[v][0], at[v][1], size - 4096, 0);
            printf("}");
        }
    }
    printf("]}\n");
    return 0;
}
