/* The own Vulkan launch's state of a runtime (backends/vulkan.c says what the launch is): opened once a runtime from
   the VkDevice and compute queue libtaichi exports, with its command buffers and fences (TAICHI_AOT_VK_BATCHES
   batches, each recorded, submitted and waited for in turn), its memory (the ring of argument slots, Taichi's
   temporaries, the returned values), and the registry of open runtimes; closed with the runtime, which is then noted
   closed in holds.c (with this file's words), so that a call another thread makes on it is refused. */
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "interop.h"
#include "taichi_aot.h"
#include "taichi/taichi_vulkan.h"
#include "loader.h"
#include "holds.h"
#include "backends/plan.h"
#include "backends/vk.h"
#include "backends/vkstate.h"
#include "backends/vkprofile.h"
#include "backends/vkqueue.h"

pthread_mutex_t aot_vk_lock = PTHREAD_MUTEX_INITIALIZER;
static VkRt *vk_runtimes[VK_RUNTIMES];
static TiRuntime vk_handles[VK_RUNTIMES]; /* each open one's runtime: compared before its state is read */
static volatile int vk_open_count = 0;
static uint64_t vk_ids = 0;
/* What a call on a runtime closed here is refused with (aot_vk_refused): holds.c keeps the runtimes closed, each with
   its state's words. */
static const char vk_closed_words[] = "taichi_aot: the Vulkan runtime was closed (on another thread)";

uint64_t aot_vk_next_id(void) { /* under aot_vk_lock */
    return ++vk_ids;
}

VkRt *aot_vk_find(TiRuntime runtime) {
    int i;
    if (__atomic_load_n(&vk_open_count, __ATOMIC_ACQUIRE) == 0) {
        return NULL;
    }
    for (i = 0; i < VK_RUNTIMES; ++i) {
        if (__atomic_load_n(&vk_handles[i], __ATOMIC_ACQUIRE) == runtime) {
            return vk_runtimes[i]; /* open while it is used: Python closes a runtime on no other thread's use */
        }
    }
    return NULL;
}

VkRt *aot_vk_hold_open(VkRt *rt) {
    if (rt != NULL) {
        aot_vk_calls_lock(rt);
        if (rt->closed) { /* closed while this thread waited: nothing of it is left to use */
            aot_vk_calls_unlock(rt);
            return NULL;
        }
    }
    return rt;
}

VkRt *aot_vk_hold(TiRuntime runtime) {
    VkRt *rt = aot_vk_hold_open(aot_vk_find(runtime));
    if (rt != NULL && rt->runtime != runtime) { /* its slot taken by another runtime meanwhile: this one closed */
        aot_vk_let_go(rt);
        rt = NULL;
    }
    return rt;
}

int aot_vk_refused(TiRuntime runtime) {
    return aot_holds_refused(runtime, vk_closed_words);
}

void aot_vk_let_go(VkRt *rt) {
    if (rt != NULL) {
        aot_vk_calls_unlock(rt);
    }
}

/* The state's hold and let-go as registered for its runtime while open (holds.h): libtaichi's launches ask them. */
#define VK_OF(calls) ((VkRt *)((char *)(calls) - offsetof(VkRt, pair)))

static AotCalls *vk_pair_hold(AotCalls *calls, TiRuntime runtime) {
    VkRt *rt = aot_vk_hold_open(VK_OF(calls));
    if (rt != NULL && rt->runtime != runtime) { /* the registry's slot another runtime's since */
        aot_vk_let_go(rt);
        rt = NULL;
    }
    return rt != NULL ? calls : NULL;
}

static void vk_pair_let_go(AotCalls *calls) {
    aot_vk_let_go(VK_OF(calls));
}

void *taichi_aot_vk_hold_calls(TiRuntime runtime) {
    return aot_vk_hold(runtime);
}

/* The calls taken once another thread's brief call ends within VK_CALLS_SPIN_NS (1), polled with Python's lock kept
   (no thread that holds the calls needs that lock, and the wait is bounded: the lock order's one exception); 0 where
   the runtime does not wait so (`spins`), the call is not brief or ends later, a thread waits for the GPU with them
   held, or another thread blocks for them: the caller then waits for them without Python's lock. */
static int vk_calls_soon(VkRt *rt) {
    struct timespec start, now;
    if (!rt->spins) {
        return 0;
    }
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        if (!__atomic_load_n(&rt->brief, __ATOMIC_ACQUIRE) || __atomic_load_n(&rt->stalled, __ATOMIC_ACQUIRE) ||
            __atomic_load_n(&rt->blocked, __ATOMIC_ACQUIRE)) {
            return 0;
        }
        if (pthread_mutex_trylock(&rt->calls) == 0) {
            return 1;
        }
        aot_relax();
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) > VK_CALLS_SPIN_NS) {
            return 0;
        }
    }
}

int aot_vk_try_hold(TiRuntime runtime, VkRt **held) {
    VkRt *rt = aot_vk_find(runtime);
    *held = NULL;
    if (rt == NULL) {
        return 1; /* none open: nothing to hold */
    }
    if (pthread_mutex_trylock(&rt->calls) != 0 && !vk_calls_soon(rt)) {
        return 0; /* another thread's call, not a brief one: the caller waits for it without Python's lock */
    }
    ++rt->depth;
    aot_vk_brief(rt); /* a quick launch: brief */
    if (rt->closed || rt->runtime != runtime) { /* closed meanwhile, as aot_vk_hold finds it */
        aot_vk_calls_unlock(rt);
        return 1;
    }
    *held = rt;
    return 1;
}

void taichi_aot_vk_let_go_calls(void *held) {
    aot_vk_let_go((VkRt *)held);
}

void aot_vk_error(char *error, size_t size, const char *what, AotVkResult code) {
    if (error != NULL && size > 0) {
        snprintf(error, size, "%s failed (VkResult %d)", what, (int)code);
    }
}

/* ---------------------------------------------------------------------------------------------------------------
   What the runtime made, let go */

void aot_vk_drop_sets(VkRt *rt, VkKernel *k, VkSets *s) {
    uint32_t t;
    if (!s->valid) {
        return;
    }
    s->valid = 0;
    for (t = 0; t < k->task_count; ++t) {
        if (s->used <= rt->done) {
            rt->f.FreeDescriptorSets(rt->device, s->pool, 1, &s->sets[t]);
            continue;
        }
        if (rt->dead_count == rt->dead_cap) {
            uint32_t cap = rt->dead_cap ? 2 * rt->dead_cap : 64;
            VkDead *grown = (VkDead *)realloc(rt->dead, cap * sizeof(VkDead));
            if (grown == NULL) { /* the sets stay with their pool, freed with it */
                continue;
            }
            rt->dead = grown;
            rt->dead_cap = cap;
        }
        rt->dead[rt->dead_count].pool = s->pool;
        rt->dead[rt->dead_count].set = s->sets[t];
        rt->dead[rt->dead_count].serial = s->used;
        ++rt->dead_count;
    }
}

void aot_vk_free_kernel(VkKernel *k) {
    VkRt *rt = k->rt;
    uint32_t t, c;
    for (c = 0; c < VK_CACHED; ++c) {
        aot_vk_drop_sets(rt, k, &k->cache[c]);
        free(k->cache[c].sets);
    }
    for (t = 0; t < k->task_count; ++t) {
        VkTaskMade *task = &k->tasks[t];
        if (task->pipeline) rt->f.DestroyPipeline(rt->device, task->pipeline, NULL);
        if (task->pipeline_layout) rt->f.DestroyPipelineLayout(rt->device, task->pipeline_layout, NULL);
        if (task->set_layout) rt->f.DestroyDescriptorSetLayout(rt->device, task->set_layout, NULL);
        if (task->shader) rt->f.DestroyShaderModule(rt->device, task->shader, NULL);
    }
    free(k->tasks);
    free(k->layouts);
    free(k);
}

/* The buffer and memory of imported pages let go (the record is the caller's). */
void aot_vk_release_import(VkRt *rt, const VkImport *pages) {
    rt->f.DestroyBuffer(rt->device, pages->buffer, NULL);
    rt->f.FreeMemory(rt->device, pages->memory, NULL);
}

/* The sets of kept arrays that bind `memory` let go (it is being freed), for each of the runtime's kernels. */
void aot_vk_forget_memory(VkRt *rt, TiMemory memory) {
    VkKernel *k;
    uint32_t c, a;
    pthread_mutex_lock(&aot_vk_lock);
    for (k = rt->kernels; k != NULL; k = k->next) {
        for (c = 0; c < VK_CACHED; ++c) {
            for (a = 0; k->cache[c].valid && a < k->array_count; ++a) {
                if (k->cache[c].memories[a] == memory) {
                    aot_vk_drop_sets(rt, k, &k->cache[c]);
                }
            }
        }
    }
    pthread_mutex_unlock(&aot_vk_lock);
}

/* Descriptor sets and kernels let go once the batches that use them are done. */
void aot_vk_bury(VkRt *rt) {
    uint32_t i = 0;
    VkKernel **at, *freed = NULL;
    pthread_mutex_lock(&aot_vk_lock);
    for (at = &rt->dead_kernels; *at != NULL;) {
        VkKernel *k = *at;
        if (k->used <= rt->done) {
            *at = k->next;
            k->next = freed;
            freed = k;
        } else {
            at = &k->next;
        }
    }
    pthread_mutex_unlock(&aot_vk_lock);
    while (freed != NULL) {
        VkKernel *k = freed;
        freed = k->next;
        aot_vk_free_kernel(k);
    }
    while (i < rt->dead_count) {
        if (rt->dead[i].serial <= rt->done) {
            rt->f.FreeDescriptorSets(rt->device, rt->dead[i].pool, 1, &rt->dead[i].set);
            rt->dead[i] = rt->dead[--rt->dead_count];
        } else {
            ++i;
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------------
   Memory of the runtime's own: the argument ring, the temporaries, the returned values */

int aot_vk_memory_type(VkRt *rt, uint32_t bits, uint32_t need, uint32_t prefer) {
    AotVkPhysicalDeviceMemoryProperties props;
    uint32_t i;
    int found = -1;
    memset(&props, 0, sizeof(props));
    rt->f.GetPhysicalDeviceMemoryProperties(rt->physical, &props);
    for (i = 0; i < props.memoryTypeCount && i < 32; ++i) {
        uint32_t flags = props.memoryTypes[i].propertyFlags;
        if (!(bits & (1u << i)) || (flags & need) != need) {
            continue;
        }
        if ((flags & prefer) == prefer) {
            return (int)i;
        }
        if (found < 0) {
            found = (int)i;
        }
    }
    return found;
}

/* The alignment host memory is imported at, where it can be (0: it cannot; vkcopy.c imports). */
static uint64_t vk_host_alignment(VkRt *rt) {
    AotVkPhysicalDeviceExternalMemoryHostPropertiesEXT host;
    unsigned char props[16 + AOT_VK_PROPERTIES_SIZE];
    long page = sysconf(_SC_PAGESIZE);
    int32_t type = AOT_VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    void *next = &host;
    if (rt->f.GetMemoryHostPointerPropertiesEXT == NULL || rt->f.GetPhysicalDeviceProperties2 == NULL || page <= 0) {
        return 0;
    }
    memset(&host, 0, sizeof(host));
    host.sType = AOT_VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT;
    memset(props, 0, sizeof(props)); /* VkPhysicalDeviceProperties2: sType, pNext, then the properties */
    memcpy(props, &type, 4);
    memcpy(props + 8, &next, sizeof(next));
    rt->f.GetPhysicalDeviceProperties2(rt->physical, props);
    if (host.minImportedHostPointerAlignment == 0) { /* not said: the page (Mesa's CPU driver) */
        return (uint64_t)page;
    }
    /* an alignment above the page's would import pages the array has no byte in, which may not be mapped */
    return host.minImportedHostPointerAlignment <= (uint64_t)page ? (uint64_t)page : 0;
}

/* A memory's VkBuffer, or 0 (unknown to the library: its error says so). */
AotVkHandle aot_vk_buffer_of(VkRt *rt, TiMemory memory, uint64_t offset, uint64_t size) {
    TiVulkanMemoryInteropInfo info;
    memset(&info, 0, sizeof(info));
    ti_export_vulkan_memory(rt->runtime, memory, &info);
    if (info.buffer != NULL && (offset > info.size || size > info.size - offset)) {
        /* the callers check their ranges in Python: this keeps a write past the end off the GPU all the same */
        ti_set_last_error(TI_ERROR_ARGUMENT_OUT_OF_RANGE, "taichi_aot: a copy past the end of a memory");
        return 0;
    }
    return (AotVkHandle)(uintptr_t)info.buffer;
}

static AotVkResult vk_buffer(VkRt *rt, uint64_t size, uint32_t usage, int host,
                             AotVkHandle *buffer, AotVkHandle *memory, unsigned char **mapped) {
    AotVkBufferCreateInfo info;
    AotVkMemoryRequirements req;
    AotVkMemoryAllocateInfo alloc;
    AotVkResult code;
    int type;
    memset(&info, 0, sizeof(info));
    info.sType = AOT_VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
    info.size = size;
    info.usage = usage;
    if ((code = rt->f.CreateBuffer(rt->device, &info, NULL, buffer)) != AOT_VK_SUCCESS) {
        return code;
    }
    rt->f.GetBufferMemoryRequirements(rt->device, *buffer, &req);
    type = host ? aot_vk_memory_type(rt, req.memoryTypeBits,
                                 AOT_VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | AOT_VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                                 host == 2 ? AOT_VK_MEMORY_PROPERTY_HOST_CACHED_BIT : AOT_VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)
                : aot_vk_memory_type(rt, req.memoryTypeBits, 0, AOT_VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (type < 0) {
        return -2; /* VK_ERROR_OUT_OF_DEVICE_MEMORY: no type to hold it */
    }
    memset(&alloc, 0, sizeof(alloc));
    alloc.sType = AOT_VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
    alloc.allocationSize = req.size;
    alloc.memoryTypeIndex = (uint32_t)type;
    if ((code = rt->f.AllocateMemory(rt->device, &alloc, NULL, memory)) != AOT_VK_SUCCESS ||
        (code = rt->f.BindBufferMemory(rt->device, *buffer, *memory, 0)) != AOT_VK_SUCCESS) {
        return code;
    }
    if (host) {
        return rt->f.MapMemory(rt->device, *memory, 0, AOT_VK_WHOLE_SIZE, 0, (void **)mapped);
    }
    return AOT_VK_SUCCESS;
}

/* ---------------------------------------------------------------------------------------------------------------
   The runtime's own Vulkan state: opened, closed */

#define VK_DEVICE_FUNCTIONS(X) \
    X(CreateCommandPool) X(DestroyCommandPool) X(AllocateCommandBuffers) X(BeginCommandBuffer) X(EndCommandBuffer) \
    X(ResetCommandBuffer) X(QueueSubmit) X(QueueWaitIdle) X(DeviceWaitIdle) X(CreateFence) X(DestroyFence) \
    X(WaitForFences) X(ResetFences) X(GetFenceStatus) X(CreateShaderModule) X(DestroyShaderModule) \
    X(CreateDescriptorSetLayout) X(DestroyDescriptorSetLayout) X(CreatePipelineLayout) X(DestroyPipelineLayout) \
    X(CreateComputePipelines) X(DestroyPipeline) X(CreateDescriptorPool) X(DestroyDescriptorPool) \
    X(AllocateDescriptorSets) X(FreeDescriptorSets) X(UpdateDescriptorSets) X(CreateBuffer) X(DestroyBuffer) \
    X(GetBufferMemoryRequirements) X(AllocateMemory) X(FreeMemory) X(BindBufferMemory) X(MapMemory) \
    X(CmdBindPipeline) X(CmdBindDescriptorSets) X(CmdDispatch) X(CmdPipelineBarrier) X(CmdFillBuffer) \
    X(CmdCopyBuffer) X(CmdUpdateBuffer) X(CreateQueryPool) X(DestroyQueryPool) X(CmdResetQueryPool) \
    X(CmdWriteTimestamp) X(GetQueryPoolResults)

/* The device's entry points; the name of the first missing, or NULL. */
static const char *vk_functions(VkRt *rt, AotVkGetProcAddr gipa, AotVkDispatch instance) {
    AotVkGetProcAddr gdpa = (AotVkGetProcAddr)gipa(instance, "vkGetDeviceProcAddr");
    if (gdpa == NULL) {
        return "vkGetDeviceProcAddr";
    }
    *(void **)&rt->f.GetPhysicalDeviceProperties = (void *)gipa(instance, "vkGetPhysicalDeviceProperties");
    *(void **)&rt->f.GetPhysicalDeviceMemoryProperties = (void *)gipa(instance, "vkGetPhysicalDeviceMemoryProperties");
    if (rt->f.GetPhysicalDeviceProperties == NULL || rt->f.GetPhysicalDeviceMemoryProperties == NULL) {
        return "vkGetPhysicalDeviceProperties";
    }
#define VK_LOOK_UP(name)                                                      \
    *(void **)&rt->f.name = (void *)gdpa(rt->device, "vk" #name);             \
    if (rt->f.name == NULL) {                                                 \
        return "vk" #name;                                                    \
    }
    VK_DEVICE_FUNCTIONS(VK_LOOK_UP)
#undef VK_LOOK_UP
    *(void **)&rt->f.GetPhysicalDeviceProperties2 = (void *)gipa(instance, "vkGetPhysicalDeviceProperties2");
    *(void **)&rt->f.GetPhysicalDeviceQueueFamilyProperties =
        (void *)gipa(instance, "vkGetPhysicalDeviceQueueFamilyProperties");
    if (taichi_aot_vulkan_imports_host(rt->device)) { /* the device was made with the extension (vkfence.c) */
        *(void **)&rt->f.GetMemoryHostPointerPropertiesEXT =
            (void *)gdpa(rt->device, "vkGetMemoryHostPointerPropertiesEXT");
    }
    return NULL;
}

void aot_vk_unwaited(VkRt *rt, const VkBatch *b) {
    while (__atomic_load_n(b != NULL ? &b->waiters : &rt->waiting, __ATOMIC_ACQUIRE) > 0) {
        sched_yield(); /* each is past its fence's signal, or about to wait on it: out at once */
    }
}

/* Everything the runtime's own state made destroyed (the device idle first); the record itself stays. */
static void vk_destroy_state(VkRt *rt) {
    uint32_t i;
    if (rt->f.DeviceWaitIdle != NULL && rt->device != NULL) {
        rt->f.DeviceWaitIdle(rt->device);
    }
    aot_vk_unwaited(rt, NULL); /* a wait with the calls let go (vkbatch.c) is out of its fences before they go */
    rt->done = rt->serial;
    while (rt->imports != NULL) {
        VkImport *i = rt->imports;
        rt->imports = i->next;
        aot_vk_release_import(rt, i);
        free(i);
    }
    while (rt->kernels != NULL) {
        VkKernel *k = rt->kernels;
        rt->kernels = k->next;
        aot_vk_free_kernel(k);
    }
    aot_vk_bury(rt); /* the dead kernels with the sets: nothing runs now */
    for (i = 0; i < rt->pool_count; ++i) {
        rt->f.DestroyDescriptorPool(rt->device, rt->pools[i], NULL);
    }
    for (i = 0; i < TAICHI_AOT_VK_BATCHES; ++i) {
        if (rt->batches[i].fence) {
            rt->f.DestroyFence(rt->device, rt->batches[i].fence, NULL);
        }
    }
    aot_vk_stamps_free(rt);
    if (rt->command_pool) {
        rt->f.DestroyCommandPool(rt->device, rt->command_pool, NULL);
    }
    if (rt->f.DestroyBuffer != NULL) {
        AotVkHandle buffers[4] = {rt->args_buffer, rt->temps_buffer, rt->rets_buffer, rt->reads_buffer};
        AotVkHandle memories[4] = {rt->args_memory, rt->temps_memory, rt->rets_memory, rt->reads_memory};
        for (i = 0; i < 4; ++i) {
            if (buffers[i]) {
                rt->f.DestroyBuffer(rt->device, buffers[i], NULL);
            }
            if (memories[i]) {
                rt->f.FreeMemory(rt->device, memories[i], NULL); /* unmapped with it */
            }
        }
    }
    free(rt->dead);
    rt->dead = NULL;
}

/* A state that never opened: destroyed, record and all. */
static void vk_destroy(VkRt *rt) {
    vk_destroy_state(rt);
    pthread_mutex_destroy(&rt->calls);
    free(rt);
}

static AotVkResult vk_make(VkRt *rt, const char **what) {
    unsigned char props[AOT_VK_PROPERTIES_SIZE];
    AotVkCommandPoolCreateInfo pool = {AOT_VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, NULL,
                                       AOT_VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, rt->family};
    AotVkCommandBufferAllocateInfo alloc = {AOT_VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, NULL, 0,
                                            AOT_VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1};
    AotVkFenceCreateInfo fence = {AOT_VK_STRUCTURE_TYPE_FENCE_CREATE_INFO, NULL, 0};
    AotVkResult code;
    uint64_t align;
    uint32_t i, type;
    memset(props, 0, sizeof(props));
    rt->f.GetPhysicalDeviceProperties(rt->physical, props);
    memcpy(&align, props + AOT_VK_LIMIT_MIN_UNIFORM_BUFFER_OFFSET_ALIGNMENT, 8);
    memcpy(&rt->max_groups, props + AOT_VK_LIMIT_MAX_COMPUTE_WORK_GROUP_COUNT, 4);
    memcpy(&rt->max_range, props + AOT_VK_LIMIT_MAX_UNIFORM_BUFFER_RANGE, 4);
    memcpy(&type, props + AOT_VK_PROPERTIES_DEVICE_TYPE, 4);
    rt->spins = type != AOT_VK_PHYSICAL_DEVICE_TYPE_CPU && aot_wait_cores() >= 4;
    rt->align = align >= 16 && align <= 4096 ? (uint32_t)align : 256;
    rt->host_align = vk_host_alignment(rt);
    if (rt->max_groups == 0) {
        rt->max_groups = 65535;
    }
    *what = "vkCreateCommandPool";
    if ((code = rt->f.CreateCommandPool(rt->device, &pool, NULL, &rt->command_pool)) != AOT_VK_SUCCESS) {
        return code;
    }
    alloc.commandPool = rt->command_pool;
    for (i = 0; i < TAICHI_AOT_VK_BATCHES; ++i) {
        *what = "vkAllocateCommandBuffers";
        if ((code = rt->f.AllocateCommandBuffers(rt->device, &alloc, &rt->batches[i].cb)) != AOT_VK_SUCCESS) {
            return code;
        }
        *what = "vkCreateFence";
        if ((code = rt->f.CreateFence(rt->device, &fence, NULL, &rt->batches[i].fence)) != AOT_VK_SUCCESS) {
            return code;
        }
    }
    *what = "the argument buffer";
    code = vk_buffer(rt, (uint64_t)VK_SEGMENT * TAICHI_AOT_VK_BATCHES, AOT_VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT, 1,
                     &rt->args_buffer, &rt->args_memory, &rt->args_host);
    if (code != AOT_VK_SUCCESS) {
        return code;
    }
    *what = "the temporaries buffer";
    code = vk_buffer(rt, VK_TEMPS, AOT_VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | AOT_VK_BUFFER_USAGE_TRANSFER_DST_BIT, 0,
                     &rt->temps_buffer, &rt->temps_memory, NULL);
    if (code != AOT_VK_SUCCESS) {
        return code;
    }
    *what = "the results buffer";
    code = vk_buffer(rt, TAICHI_AOT_VK_RESULT_BYTES, AOT_VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, 2, &rt->rets_buffer,
                     &rt->rets_memory, &rt->rets_host);
    if (code != AOT_VK_SUCCESS) {
        return code;
    }
    *what = "the reads buffer"; /* host-cached where the device has such memory: the host reads it */
    return vk_buffer(rt, (uint64_t)VK_READ_SEGMENT * TAICHI_AOT_VK_BATCHES, AOT_VK_BUFFER_USAGE_TRANSFER_DST_BIT, 2,
                     &rt->reads_buffer, &rt->reads_memory, &rt->reads_host);
}

uint64_t aot_vk_open_state(TiRuntime runtime, char *error, size_t error_size) {
    TiVulkanRuntimeInteropInfo info;
    VkRt *rt;
    const char *missing, *what = "";
    AotVkResult code;
    int i, slot = -1;
    memset(&info, 0, sizeof(info));
    ti_export_vulkan_runtime(runtime, &info);
    if (info.device == NULL || info.compute_queue == NULL || info.get_instance_proc_addr == NULL) {
        snprintf(error, error_size, "libtaichi_c_api exported no Vulkan device for the runtime");
        return 0;
    }
    rt = (VkRt *)calloc(1, sizeof(VkRt));
    if (rt == NULL) {
        snprintf(error, error_size, "out of host memory");
        return 0;
    }
    {
        pthread_mutexattr_t recursive;
        pthread_mutexattr_init(&recursive);
        pthread_mutexattr_settype(&recursive, PTHREAD_MUTEX_RECURSIVE);
        pthread_mutex_init(&rt->calls, &recursive);
        pthread_mutexattr_destroy(&recursive);
    }
    rt->runtime = runtime;
    rt->pair.hold = vk_pair_hold;
    rt->pair.let_go = vk_pair_let_go;
    rt->device = (AotVkDispatch)info.device;
    rt->queue = (AotVkDispatch)info.compute_queue;
    rt->family = info.compute_queue_family_index;
    rt->physical = (AotVkDispatch)info.physical_device;
    rt->current = -1;
    rt->feed = 1; /* the wait policy's default, auto (taichi_aot_vk_set_wait) */
    rt->early = VK_EARLY_POLLED;
    rt->in_a_row = VK_SHARED_LAUNCHES; /* no thread shares it yet */
    /* libtaichi may hold work enqueued before this opened (an upload into an array the first launch reads) */
    rt->library_dirty = rt->library_pending = rt->library_since = 1;
    missing = vk_functions(rt, (AotVkGetProcAddr)info.get_instance_proc_addr, (AotVkDispatch)info.instance);
    if (missing != NULL) {
        snprintf(error, error_size, "the Vulkan driver lacks %s", missing);
        pthread_mutex_destroy(&rt->calls);
        free(rt);
        return 0;
    }
    code = vk_make(rt, &what);
    if (code != AOT_VK_SUCCESS) {
        aot_vk_error(error, error_size, what, code);
        vk_destroy(rt);
        return 0;
    }
    pthread_mutex_lock(&aot_vk_lock);
    for (i = 0; i < VK_RUNTIMES; ++i) {
        if (vk_runtimes[i] == NULL && slot < 0) {
            slot = i;
        }
        if (vk_runtimes[i] != NULL && vk_runtimes[i]->runtime == runtime) {
            slot = -2; /* opened already */
            break;
        }
    }
    if (slot >= 0 && !aot_holds_register(runtime, &rt->pair)) {
        slot = -3; /* the calls registry full (or the runtime's calls another state's) */
    }
    if (slot >= 0) {
        rt->id = aot_vk_next_id();
        vk_runtimes[slot] = rt;
        __atomic_store_n(&vk_handles[slot], runtime, __ATOMIC_RELEASE);
        __atomic_add_fetch(&vk_open_count, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&aot_vk_lock);
    if (slot < 0) {
        snprintf(error, error_size, slot == -2   ? "the runtime's own Vulkan launch is open already"
                                    : slot == -3 ? "too many runtimes that any thread uses at once"
                                                 : "too many Vulkan runtimes with the own launch at once");
        vk_destroy(rt);
        return 0;
    }
    return rt->id;
}

/* The runtime's own state closed (its kernels with it): its calls held by the caller once this returns (NULL: none
   was open). Where libtaichi destroys the runtime next (`destroyed`), held until libtaichi's runtime is gone, and its
   handle noted closed (before the registry lets it go: a thread that finds it gone finds it closed); a runtime whose
   own state alone is closed (taichi_aot_vk_close) stays libtaichi's to use and destroy. */
VkRt *aot_vk_close_runtime(TiRuntime runtime, int destroyed) {
    VkRt *rt = NULL;
    int i;
    pthread_mutex_lock(&aot_vk_lock);
    for (i = 0; i < VK_RUNTIMES; ++i) {
        if (vk_runtimes[i] != NULL && vk_runtimes[i]->runtime == runtime) {
            rt = vk_runtimes[i];
            if (destroyed) {
                aot_holds_note_closed(runtime, vk_closed_words);
            }
            aot_holds_forget(runtime, &rt->pair);
            aot_holds_forget_modules(runtime);
            __atomic_store_n(&vk_handles[i], NULL, __ATOMIC_RELEASE);
            vk_runtimes[i] = NULL;
            __atomic_sub_fetch(&vk_open_count, 1, __ATOMIC_RELEASE);
            break;
        }
    }
    pthread_mutex_unlock(&aot_vk_lock);
    if (rt != NULL) { /* after the call another thread is in (if any); a thread waiting for it then finds it closed */
        aot_vk_calls_lock(rt);
        vk_destroy_state(rt);
        rt->closed = 1;
    }
    return rt;
}

void taichi_aot_vk_close(TiRuntime runtime) {
    aot_vk_let_go(aot_vk_close_runtime(runtime, 0));
}

/* The runtime's own state by its id (0: none open, or closed since). */
VkRt *aot_vk_by_id(uint64_t id) {
    int i;
    for (i = 0; i < VK_RUNTIMES; ++i) {
        if (vk_runtimes[i] != NULL && vk_runtimes[i]->id == id) {
            return vk_runtimes[i];
        }
    }
    return NULL;
}

void taichi_aot_vk_counts(uint64_t id, uint64_t *out) {
    VkRt *rt;
    pthread_mutex_lock(&aot_vk_lock);
    rt = aot_vk_by_id(id);
    if (rt != NULL) {
        memcpy(out, rt->counts, sizeof(rt->counts));
    } else {
        memset(out, 0, sizeof(uint64_t) * TAICHI_AOT_VK_COUNTS);
    }
    pthread_mutex_unlock(&aot_vk_lock);
}

void taichi_aot_vk_set_wait(uint64_t id, int policy, uint64_t cap_ns) {
    VkRt *rt;
    pthread_mutex_lock(&aot_vk_lock);
    rt = aot_vk_by_id(id);
    pthread_mutex_unlock(&aot_vk_lock);
    rt = aot_vk_hold_open(rt); /* the launches read `feed` and `early` with the calls held (records are never freed) */
    if (rt != NULL) {
        aot_wait_set(&rt->wait, policy, cap_ns);
        rt->feed = policy != TAICHI_AOT_WAIT_BLOCK;
        rt->early = rt->feed ? VK_EARLY_POLLED : TAICHI_AOT_VK_EARLY_LAUNCHES;
    }
    aot_vk_let_go(rt);
}

const char *taichi_aot_vk_count_name(uint32_t index) {
    static const char *const names[] = {
#define VK_COUNT_NAME(id, name) name,
        VK_COUNTERS(VK_COUNT_NAME)
#undef VK_COUNT_NAME
    };
    return index < VK_COUNTERS_ALL ? names[index] : NULL;
}
