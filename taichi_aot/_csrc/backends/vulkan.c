/* The own Vulkan launch: a kernel of a Vulkan module dispatched by taichi_aot itself, on the VkDevice and compute
   queue of the runtime's libtaichi (ti_export_vulkan_runtime), where libtaichi_c_api 1.7.4 makes argument buffers and
   descriptor sets anew for every dispatch and sizes a loop over an ndarray's run-time length at 131,072 threads.

   What is made once: per task, a pipeline from the module's SPIR-V with a descriptor set layout of its bindings (the
   arguments as a dynamic uniform buffer, the rest storage buffers), made when the kernel is first looked up (Python:
   backends/vulkan.py). Per runtime: a command pool with TAICHI_AOT_VK_BATCHES command buffers and their fences, one
   host-visible ring of argument slots (each batch its segment), Taichi's temporaries buffer (1 MiB, zeroed once:
   what a serial task leaves for the loops after it), a host-visible buffer for returned values, descriptor pools.
   Per kernel, the descriptor sets of the last few combinations of arrays passed (by their TiMemory), each task's set
   bound with its arguments' slot as the dynamic offset: an array passed again costs no descriptor work.

   A launch writes its arguments into the batch's next slot (the argument plan of backends/plan.c, as Taichi's
   argument struct lays them out), records each task's dispatch (a dispatch of a loop over an ndarray's run-time
   length sized to the largest ndarray argument: Taichi's loops stride over the grid dispatched, so any size gives the
   same result), and submits the batch when it holds TAICHI_AOT_VK_BATCH_DISPATCHES dispatches; where it is the first
   since a wait, at its second launch (TAICHI_AOT_VK_EARLY_LAUNCHES where the runtime's waits block: VkRt.early;
   the GPU, idle, starts on them while the next are recorded or Python comes to its wait); where waits poll, when the
   GPU finished every batch submitted (looked at every VK_FEED_EVERY dispatches: a fence's status, where a wait would
   cost more than it saves on NVIDIA's driver); at a wait; or before libtaichi enqueues anything on the runtime. Where
   threads share the runtime and its policy is auto (vkstate.h: aot_vk_shared), neither early nor fed: a value, a
   wait or a full batch submits it, and its waits block. Taichi's barrier after each dispatch is recorded once
   something follows it in the batch (the batch's end records one for all), and a batch begins with a barrier only where libtaichi enqueued since
   the last (the last batch's end orders the queue's later submissions). What a command buffer has bound is not bound
   again, and a launch with the same argument bytes as its kernel's last takes that slot again. A kernel that returns
   values is submitted and waited for, and its values copied into the kernel's result memory.

   Order with libtaichi: the queue's submissions keep program order. libtaichi's functions that enqueue or wait on a
   runtime (launches, copies, image and event commands, flush, wait) and those that free or destroy what the launches
   use are pointed at wrappers (vkorder.c: the trampolines' slots, once, before the first runtime's own state opens),
   which first submit this runtime's recorded batch; before recording, a launch has libtaichi submit what it holds
   unsubmitted (ti_flush). A wait with nothing of libtaichi's since its last waits only for the own batches.

   Threads: any thread may use the runtime. Its calls are made one at a time (the runtime's recursive `calls` lock,
   held by each launch, a graph's whole launch, copies, waits and every wrapped call of libtaichi's), so one thread's
   launch never records into a batch another is submitting, and libtaichi's runtime, which takes no lock of its own,
   sees one caller at a time. A user's wait (ti_wait) lets it go while the GPU runs what was submitted, so other
   threads record and submit meanwhile (vkbatch.c: aot_vk_wait_free); other waits (a copy's, values') hold it. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interop.h"
#include "taichi_aot.h"
#include "backends/plan.h"
#include "backends/vk.h"
#include "backends/vkstate.h"
#include "backends/vkqueue.h"
#include "backends/vkprofile.h"
#include "backends/vkbatch.h"
#include "backends/vkorder.h"
#include "vulkan.h"
#include "profile.h"

/* The runtime's own state opened (backends/vkqueue.c), with libtaichi's calls wrapped first (backends/vkorder.c), so
   that no call of the library's on it goes unordered with its batches. */
uint64_t taichi_aot_vk_open(TiRuntime runtime, char *error, size_t error_size) {
    aot_vk_hook_library();
    return aot_vk_open_state(runtime, error, error_size);
}

/* ---------------------------------------------------------------------------------------------------------------
   Kernels: made from their tasks (freed by vkqueue.c, with the runtime's other lists) */

static AotVkResult vk_make_task(VkRt *rt, VkTaskMade *made, const TaichiAotVkTask *task, const char **what) {
    AotVkDescriptorSetLayoutBinding bindings[TAICHI_AOT_VK_MAX_BINDS];
    AotVkDescriptorSetLayoutCreateInfo set_info;
    AotVkPipelineLayoutCreateInfo layout_info;
    AotVkShaderModuleCreateInfo shader_info;
    AotVkComputePipelineCreateInfo pipeline_info;
    AotVkResult code;
    uint32_t b;
    made->group_size = task->group_size;
    made->groups = task->groups;
    made->trim = task->trim;
    made->bind_count = task->bind_count;
    for (b = 0; b < task->bind_count; ++b) {
        made->binds[b] = task->binds[b];
        bindings[b].binding = task->binds[b].binding;
        bindings[b].descriptorType = task->binds[b].kind == TAICHI_AOT_VK_BIND_ARGS
                                         ? AOT_VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER_DYNAMIC
                                         : AOT_VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        bindings[b].descriptorCount = 1;
        bindings[b].stageFlags = AOT_VK_SHADER_STAGE_COMPUTE_BIT;
        bindings[b].pImmutableSamplers = NULL;
        if (task->binds[b].kind == TAICHI_AOT_VK_BIND_ARGS) {
            made->dynamic = 1;
        }
    }
    memset(&shader_info, 0, sizeof(shader_info));
    shader_info.sType = AOT_VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
    shader_info.codeSize = (size_t)task->words * 4;
    shader_info.pCode = task->code;
    *what = "vkCreateShaderModule";
    if ((code = rt->f.CreateShaderModule(rt->device, &shader_info, NULL, &made->shader)) != AOT_VK_SUCCESS) {
        return code;
    }
    memset(&set_info, 0, sizeof(set_info));
    set_info.sType = AOT_VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
    set_info.bindingCount = task->bind_count;
    set_info.pBindings = bindings;
    *what = "vkCreateDescriptorSetLayout";
    if ((code = rt->f.CreateDescriptorSetLayout(rt->device, &set_info, NULL, &made->set_layout)) != AOT_VK_SUCCESS) {
        return code;
    }
    memset(&layout_info, 0, sizeof(layout_info));
    layout_info.sType = AOT_VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
    layout_info.setLayoutCount = 1;
    layout_info.pSetLayouts = &made->set_layout;
    *what = "vkCreatePipelineLayout";
    if ((code = rt->f.CreatePipelineLayout(rt->device, &layout_info, NULL, &made->pipeline_layout)) !=
        AOT_VK_SUCCESS) {
        return code;
    }
    memset(&pipeline_info, 0, sizeof(pipeline_info));
    pipeline_info.sType = AOT_VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
    pipeline_info.stage.sType = AOT_VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    pipeline_info.stage.stage = AOT_VK_SHADER_STAGE_COMPUTE_BIT;
    pipeline_info.stage.module = made->shader;
    pipeline_info.stage.pName = "main";
    pipeline_info.layout = made->pipeline_layout;
    pipeline_info.basePipelineIndex = -1;
    *what = "vkCreateComputePipelines";
    return rt->f.CreateComputePipelines(rt->device, 0, 1, &pipeline_info, NULL, &made->pipeline);
}

/* The kernel's arrays: the argument index of each ndarray a task binds, once each; -1 where one is bound that the
   plan does not lay out as an ndarray. */
static int vk_arrays(VkKernel *k) {
    uint32_t t, b, a;
    for (t = 0; t < k->task_count; ++t) {
        for (b = 0; b < k->tasks[t].bind_count; ++b) {
            TaichiAotVkBind *bind = &k->tasks[t].binds[b];
            if (bind->kind != TAICHI_AOT_VK_BIND_ARRAY) {
                continue;
            }
            if (bind->arg >= k->arg_count || k->args[bind->arg].kind != TAICHI_AOT_PLAN_NDARRAY) {
                return -1;
            }
            for (a = 0; a < k->array_count && k->arrays[a] != bind->arg; ++a) {
            }
            if (a == k->array_count) {
                if (k->array_count == TAICHI_AOT_VK_MAX_ARRAYS) {
                    return -1;
                }
                k->arrays[k->array_count++] = bind->arg;
            }
            bind->arg = a; /* from here on: the index among the kernel's arrays */
        }
    }
    return 0;
}

/* A kernel's record, its tasks' and layouts' arrays allocated, its plan copied (NULL: out of host memory). */
static VkKernel *vk_new_kernel(VkRt *rt, uint32_t task_count, const TaichiAotArgPlan *args, uint32_t arg_count,
                               uint32_t args_size, uint32_t result_size, void *result) {
    uint32_t c;
    int made;
    VkKernel *k = (VkKernel *)calloc(1, sizeof(VkKernel));
    if (k == NULL) {
        return NULL;
    }
    k->rt = rt;
    k->tasks = (VkTaskMade *)calloc(task_count, sizeof(VkTaskMade));
    k->layouts = (AotVkHandle *)calloc(task_count, sizeof(AotVkHandle));
    made = k->tasks != NULL && k->layouts != NULL;
    for (c = 0; c < VK_CACHED; ++c) {
        k->cache[c].sets = (AotVkHandle *)calloc(task_count, sizeof(AotVkHandle));
        made = made && k->cache[c].sets != NULL;
    }
    if (!made) {
        aot_vk_free_kernel(k);
        return NULL;
    }
    k->arg_count = arg_count;
    k->args_size = args_size;
    k->slot = args_size == 0 ? rt->align : (args_size + rt->align - 1) / rt->align * rt->align;
    k->result_size = result_size;
    k->result = result;
    memcpy(k->args, args, (size_t)arg_count * sizeof(TaichiAotArgPlan));
    return k;
}

/* The kernel's tasks made (`task_count` is its record's once each is made: a failure frees only those); 0, or -1
   with the reason in `error`. */
static int vk_make_tasks(VkKernel *k, const TaichiAotVkTask *tasks, uint32_t task_count, char *error,
                         size_t error_size) {
    const char *what = "";
    AotVkResult code;
    uint32_t t;
    for (t = 0; t < task_count; ++t) {
        if (tasks[t].bind_count > TAICHI_AOT_VK_MAX_BINDS || tasks[t].group_size == 0) {
            snprintf(error, error_size, "task %u: more bindings than the own Vulkan launch takes", t);
            return -1;
        }
        k->task_count = t + 1;
        code = vk_make_task(k->rt, &k->tasks[t], &tasks[t], &what);
        k->layouts[t] = k->tasks[t].set_layout;
        if (code != AOT_VK_SUCCESS) {
            aot_vk_error(error, error_size, what, code);
            return -1;
        }
    }
    if (vk_arrays(k) != 0) {
        snprintf(error, error_size, "a task binds an array the argument plan does not lay out as an ndarray");
        return -1;
    }
    return 0;
}

/* taichi_aot_vk_kernel's making, with the runtime's calls held. */
static uint64_t vk_kernel_made(VkRt *rt, const TaichiAotVkTask *tasks, uint32_t task_count,
                               const TaichiAotArgPlan *args, uint32_t arg_count, uint32_t args_size,
                               uint32_t result_size, void *result, void **handle, char *error, size_t error_size) {
    VkKernel *k;
    if (task_count == 0 || arg_count > TAICHI_AOT_OP_MAX_ARGS || args_size > TAICHI_AOT_PLAN_MAX_BYTES ||
        result_size > TAICHI_AOT_VK_RESULT_BYTES || (result_size > 0 && result == NULL)) {
        snprintf(error, error_size, "a kernel the own Vulkan launch cannot lay out");
        return 0;
    }
    k = vk_new_kernel(rt, task_count, args, arg_count, args_size, result_size, result);
    if (k == NULL) {
        snprintf(error, error_size, "out of host memory");
        return 0;
    }
    if (vk_make_tasks(k, tasks, task_count, error, error_size) != 0) {
        aot_vk_free_kernel(k);
        return 0;
    }
    pthread_mutex_lock(&aot_vk_lock);
    k->id = aot_vk_next_id();
    k->next = rt->kernels;
    rt->kernels = k;
    pthread_mutex_unlock(&aot_vk_lock);
    *handle = k;
    return k->id;
}

uint64_t taichi_aot_vk_kernel(uint64_t id, const TaichiAotVkTask *tasks, uint32_t task_count,
                              const TaichiAotArgPlan *args, uint32_t arg_count, uint32_t args_size,
                              uint32_t result_size, void *result, void **handle, char *error, size_t error_size) {
    VkRt *rt;
    uint64_t kernel_id;
    pthread_mutex_lock(&aot_vk_lock);
    rt = aot_vk_by_id(id);
    pthread_mutex_unlock(&aot_vk_lock);
    rt = aot_vk_hold_open(rt); /* not made while another thread closes the runtime */
    if (rt == NULL) {
        snprintf(error, error_size, "the runtime's own Vulkan launch is closed");
        return 0;
    }
    kernel_id = vk_kernel_made(rt, tasks, task_count, args, arg_count, args_size, result_size, result, handle, error,
                               error_size);
    aot_vk_let_go(rt);
    return kernel_id;
}

/* A kernel let go (from any thread: Python's finalizers), with its runtime's calls held (a launch of it on another
   thread comes wholly before): freed once no batch runs it (the next wait, or the next batch done), or with its
   runtime. */
void taichi_aot_vk_kernel_free(uint64_t runtime_id, uint64_t kernel_id) {
    VkRt *rt;
    VkKernel **at;
    pthread_mutex_lock(&aot_vk_lock);
    rt = aot_vk_by_id(runtime_id);
    pthread_mutex_unlock(&aot_vk_lock);
    rt = aot_vk_hold_open(rt); /* after a launch another thread is in, which may use it still */
    pthread_mutex_lock(&aot_vk_lock);
    for (at = rt != NULL ? &rt->kernels : NULL; at != NULL && *at != NULL; at = &(*at)->next) {
        if ((*at)->id == kernel_id) {
            VkKernel *k = *at;
            *at = k->next;
            k->next = rt->dead_kernels;
            rt->dead_kernels = k;
            break;
        }
    }
    pthread_mutex_unlock(&aot_vk_lock);
    aot_vk_let_go(rt);
}

/* ---------------------------------------------------------------------------------------------------------------
   Launches */

static AotVkResult vk_new_pool(VkRt *rt) {
    AotVkDescriptorPoolSize sizes[2] = {{AOT_VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, VK_POOL_SETS * 8},
                                         {AOT_VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER_DYNAMIC, VK_POOL_SETS}};
    AotVkDescriptorPoolCreateInfo info = {AOT_VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, NULL,
                                          AOT_VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT, VK_POOL_SETS, 2, sizes};
    if (rt->pool_count == sizeof(rt->pools) / sizeof(rt->pools[0])) {
        return AOT_VK_ERROR_OUT_OF_POOL_MEMORY;
    }
    return rt->f.CreateDescriptorPool(rt->device, &info, NULL, &rt->pools[rt->pool_count++]);
}

/* The kernel's sets for these arrays: those kept, else made (in the entry least recently used). */
static VkSets *vk_sets(VkKernel *k, const TiMemory *memories, AotVkResult *code) {
    VkRt *rt = k->rt;
    VkSets *s = NULL;
    AotVkWriteDescriptorSet writes[TAICHI_AOT_VK_MAX_BINDS];
    AotVkDescriptorBufferInfo infos[TAICHI_AOT_VK_MAX_BINDS];
    AotVkDescriptorSetAllocateInfo alloc;
    uint32_t c, t, b, a;
    for (c = 0; c < VK_CACHED; ++c) {
        VkSets *kept = &k->cache[c];
        if (kept->valid && memcmp(kept->memories, memories, k->array_count * sizeof(TiMemory)) == 0) {
            kept->clock = ++k->clock;
            ++rt->counts[VK_COUNT_SETS_KEPT];
            return kept;
        }
        if (s == NULL || (s->valid && (!kept->valid || kept->clock < s->clock))) {
            s = kept; /* the first unused entry, else the least recently used */
        }
    }
    aot_vk_drop_sets(rt, k, s);
    for (a = 0; a < k->array_count; ++a) {
        s->buffers[a] = aot_vk_buffer_of(rt, memories[a], 0, 0);
        if (s->buffers[a] == 0) {
            *code = VK_LIBRARY_ERROR; /* its memory unknown to the library, whose error says so */
            return NULL;
        }
        s->memories[a] = memories[a];
    }
    memset(&alloc, 0, sizeof(alloc));
    alloc.sType = AOT_VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
    alloc.descriptorSetCount = k->task_count;
    alloc.pSetLayouts = k->layouts;
    *code = AOT_VK_ERROR_OUT_OF_POOL_MEMORY;
    if (rt->pool_count > 0) {
        alloc.descriptorPool = rt->pools[rt->pool_count - 1];
        *code = rt->f.AllocateDescriptorSets(rt->device, &alloc, s->sets);
    }
    if (*code != AOT_VK_SUCCESS) {
        if ((*code = vk_new_pool(rt)) != AOT_VK_SUCCESS) {
            return NULL;
        }
        alloc.descriptorPool = rt->pools[rt->pool_count - 1];
        if ((*code = rt->f.AllocateDescriptorSets(rt->device, &alloc, s->sets)) != AOT_VK_SUCCESS) {
            return NULL;
        }
    }
    s->pool = alloc.descriptorPool;
    for (t = 0; t < k->task_count; ++t) {
        const VkTaskMade *task = &k->tasks[t];
        for (b = 0; b < task->bind_count; ++b) {
            const TaichiAotVkBind *bind = &task->binds[b];
            memset(&writes[b], 0, sizeof(writes[b]));
            writes[b].sType = AOT_VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
            writes[b].dstSet = s->sets[t];
            writes[b].dstBinding = bind->binding;
            writes[b].descriptorCount = 1;
            writes[b].descriptorType = AOT_VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
            writes[b].pBufferInfo = &infos[b];
            infos[b].offset = 0;
            infos[b].range = AOT_VK_WHOLE_SIZE;
            switch (bind->kind) {
            case TAICHI_AOT_VK_BIND_ARGS:
                writes[b].descriptorType = AOT_VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER_DYNAMIC;
                infos[b].buffer = rt->args_buffer;
                infos[b].range = k->args_size > 0 ? k->args_size : 16;
                break;
            case TAICHI_AOT_VK_BIND_RETS:
                infos[b].buffer = rt->rets_buffer;
                break;
            case TAICHI_AOT_VK_BIND_TEMPS:
                infos[b].buffer = rt->temps_buffer;
                break;
            default:
                infos[b].buffer = s->buffers[bind->arg];
                break;
            }
        }
        rt->f.UpdateDescriptorSets(rt->device, task->bind_count, writes, 0, NULL);
    }
    s->valid = 1;
    s->clock = ++k->clock;
    ++rt->counts[VK_COUNT_SETS_MADE];
    *code = AOT_VK_SUCCESS;
    return s;
}

static uint32_t vk_groups(const VkRt *rt, const VkTaskMade *task, uint64_t largest) {
    uint64_t groups = task->groups;
    if (task->trim) {
        uint64_t needed = (largest + task->group_size - 1) / task->group_size;
        groups = needed < groups ? needed : groups;
    }
    if (groups == 0) {
        groups = 1;
    }
    return (uint32_t)(groups < rt->max_groups ? groups : rt->max_groups);
}

/* Whether every ndarray the plan lays out is passed as one. */
static int vk_args_fit(const VkKernel *k, uint32_t count, const TiArgument *args) {
    uint32_t i;
    if (count != k->arg_count) {
        return 0;
    }
    for (i = 0; i < k->arg_count; ++i) {
        if (k->args[i].kind == TAICHI_AOT_PLAN_NDARRAY && args[i].type != TI_ARGUMENT_TYPE_NDARRAY) {
            return 0;
        }
    }
    return 1;
}

/* The arguments written into the slot `params` by the plan; the largest ndarray's elements, or -1 where a value is
   not what the plan expects (nothing is recorded then: the slot is taken again by the next launch). */
static int64_t vk_write_args(const VkKernel *k, const TiArgument *args, unsigned char *params) {
    uint64_t largest = 0;
    uint32_t i;
    memset(params, 0, k->args_size);
    for (i = 0; i < k->arg_count; ++i) {
        if (k->args[i].kind == TAICHI_AOT_PLAN_NDARRAY) {
            uint64_t n = taichi_aot_plan_shape(&k->args[i], &args[i].value.ndarray, params);
            largest = n > largest ? n : largest;
        } else if (taichi_aot_plan_value(&k->args[i], &args[i], params) != 0) {
            return -1;
        }
    }
    return (int64_t)largest;
}

/* The batch with room for the kernel's slot: the one being recorded, else the next. */
static VkBatch *vk_batch_for(VkRt *rt, const VkKernel *k, AotVkResult *code) {
    VkBatch *b = aot_vk_begin(rt, code);
    if (b != NULL && b->head + k->slot > b->end) { /* the batch's arguments are full: the next batch */
        *code = aot_vk_submit(rt);
        b = *code == AOT_VK_SUCCESS ? aot_vk_begin(rt, code) : NULL;
    }
    return b;
}

/* The kernel's tasks recorded into batch `b`, its arguments at `offset`. */
static void vk_record(VkRt *rt, VkBatch *b, const VkKernel *k, const VkSets *s, uint32_t offset, uint64_t largest) {
    uint32_t t;
    for (t = 0; t < k->task_count; ++t) {
        const VkTaskMade *task = &k->tasks[t];
        uint32_t groups = vk_groups(rt, task, largest);
        if (b->pipeline != task->pipeline) {
            rt->f.CmdBindPipeline(b->cb, AOT_VK_PIPELINE_BIND_POINT_COMPUTE, task->pipeline);
            b->pipeline = task->pipeline;
            b->set = 0; /* a new layout: the set bound again */
        }
        if (b->set != s->sets[t] || b->set_offset != offset) {
            rt->f.CmdBindDescriptorSets(b->cb, AOT_VK_PIPELINE_BIND_POINT_COMPUTE, task->pipeline_layout, 0, 1,
                                        &s->sets[t], task->dynamic, &offset);
            b->set = s->sets[t];
            b->set_offset = offset;
        }
        if (b->owed) {
            /* the last dispatch's writes before this one's reads and writes (Taichi's barrier after every dispatch,
               compute to compute), recorded once another follows: a copy records its own, the batch's end its own */
            aot_vk_barrier(rt, b->cb, AOT_VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, AOT_VK_ACCESS_SHADER_WRITE_BIT,
                           AOT_VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                           AOT_VK_ACCESS_SHADER_READ_BIT | AOT_VK_ACCESS_SHADER_WRITE_BIT);
        }
        rt->f.CmdDispatch(b->cb, groups, 1, 1);
        rt->counts[VK_COUNT_WORKGROUPS] += groups;
        b->owed = 1;
    }
    b->dispatches += k->task_count;
    rt->counts[VK_COUNT_DISPATCHES] += k->task_count;
}

/* The argument slot of a launch of `k` with bytes `params` in batch `b`: the last launch's again where that was `k`'s
   with the same bytes, else the next one, written. */
static uint32_t vk_args_slot(VkRt *rt, VkBatch *b, const VkKernel *k, const unsigned char *params) {
    if (b->last_kernel != k || memcmp(b->last_args, params, k->args_size) != 0) {
        memcpy(rt->args_host + b->head, params, k->args_size); /* written once, never read back */
        memcpy(b->last_args, params, k->args_size);
        b->last_kernel = k;
        b->last_offset = b->head;
        b->head += k->slot;
    }
    return b->last_offset;
}

/* Whether batch `b` is submitted after what was just recorded into it: a launch's `tasks` dispatches, or a graph's
   last dispatch (`graph`, a graph's dispatches before it: `tasks` 0 then): full, the `early`-th launch since a wait
   (a graph one launch: its dispatches in one submission), or the GPU idle again (it starts on them while the next
   are recorded). */
static int vk_submit_now(VkRt *rt, const VkBatch *b, uint32_t tasks) {
    if (aot_wait_auto(&rt->wait) && aot_vk_shared(rt)) { /* threads share it: a value, a wait or a full batch submits */
        return b->dispatches >= TAICHI_AOT_VK_BATCH_DISPATCHES;
    }
    return b->dispatches >= TAICHI_AOT_VK_BATCH_DISPATCHES ||
           (!rt->graphing && b->launches >= rt->early && !aot_vk_busy_since_wait(rt)) ||
           (rt->feed && b->dispatches / VK_FEED_EVERY != (b->dispatches - tasks) / VK_FEED_EVERY &&
            aot_vk_gpu_idle(rt)); /* a multiple of VK_FEED_EVERY dispatches passed by this launch's tasks */
}

/* One launch, with the runtime's calls held (taichi_aot_vk_launch, taichi_aot_vk_graph). */
/* A launch of `k`; `profiled`: the profile's record of it (-1: none), `parent` the record its span is also given to
   (a graph's, -1: none); `*stamped` (where given) set where its timestamps were written. */
static int vk_launch(VkRt *rt, VkKernel *k, uint32_t count, const TiArgument *args, int64_t profiled, int64_t parent,
                     int *stamped) {
    TiMemory memories[TAICHI_AOT_VK_MAX_ARRAYS];
    unsigned char params[TAICHI_AOT_PLAN_MAX_BYTES];
    int64_t largest;
    uint32_t i, offset, stamp;
    VkBatch *b;
    VkSets *s;
    AotVkResult code = AOT_VK_SUCCESS;
    if (!vk_args_fit(k, count, args)) {
        return TAICHI_AOT_PLAN_BAD_ARGS;
    }
    for (i = 0; i < k->array_count; ++i) {
        memories[i] = args[k->arrays[i]].value.ndarray.memory;
    }
    aot_vk_library_first(rt);
    aot_vk_retire_signalled(rt); /* what a wait that let the calls go saw done (nothing, mostly) */
    aot_vk_note_launch(rt);
    b = vk_batch_for(rt, k, &code);
    if (b == NULL) {
        return TAICHI_AOT_VK_ERROR - code;
    }
    s = vk_sets(k, memories, &code);
    if (s == NULL) {
        return code == VK_LIBRARY_ERROR ? (int)ti_get_last_error(NULL, NULL) : TAICHI_AOT_VK_ERROR - code;
    }
    largest = vk_write_args(k, args, params);
    if (largest < 0) {
        return TAICHI_AOT_PLAN_BAD_ARGS;
    }
    offset = vk_args_slot(rt, b, k, params);
    stamp = profiled >= 0 ? aot_vk_stamp_open(rt, b, profiled, parent) : VK_NO_STAMP;
    if (stamped != NULL) {
        *stamped = stamp != VK_NO_STAMP;
    }
    vk_record(rt, b, k, s, offset, (uint64_t)largest);
    b->launches += !rt->graphing; /* a graph's dispatches one launch, counted after its last */
    if (stamp != VK_NO_STAMP) {
        aot_vk_stamp_close(rt, b, stamp);
    }
    k->used = s->used = b->serial;
    if (k->result_size > 0) { /* its values: the batch run now, and read */
        code = aot_vk_finish(rt);
        if (code == AOT_VK_SUCCESS) {
            memcpy(k->result, rt->rets_host, k->result_size);
        }
    } else if (vk_submit_now(rt, b, k->task_count)) {
        code = aot_vk_submit(rt);
    }
    return code == AOT_VK_SUCCESS ? 0 : TAICHI_AOT_VK_ERROR - code;
}

int taichi_aot_vk_launch(TiRuntime runtime, const void *handle, uint32_t count, const TiArgument *args) {
    VkKernel *k = (VkKernel *)handle;
    int code;
    (void)runtime;
    aot_vk_calls_lock(k->rt);
    code = vk_launch(k->rt, k, count, args, aot_profile_current(), -1, NULL);
    aot_vk_calls_unlock(k->rt);
    return code;
}

/* A graph's dispatch: `k` with `args` (aot_profile_dispatch's launch; `*stamped`: its timestamps were written). */
typedef struct {
    VkKernel *k;
    const TiArgument *args;
} VkDispatch;

static int vk_dispatch(void *ctx, int64_t profiled, int64_t parent, int *stamped) {
    const VkDispatch *d = (const VkDispatch *)ctx;
    return vk_launch(d->k->rt, d->k, d->k->arg_count, d->args, profiled, parent, stamped);
}

/* A graph's dispatches, one launch each, held together: another thread's launches come before or after them. */
int taichi_aot_vk_graph(TiRuntime runtime, const TaichiAotVkGraph *g, uint32_t count, const TiNamedArgument *args) {
    TiArgument local[TAICHI_AOT_OP_MAX_ARGS];
    const uint32_t *map = g->maps;
    uint32_t d, i;
    int code = 0;
    VkRt *rt = g->dispatch_count > 0 ? ((const VkKernel *)g->kernels[0])->rt : NULL;
    int64_t graph = aot_profile_current(); /* the profile's record of the graph (-1: none) */
    (void)runtime;
    if (rt != NULL) {
        aot_vk_calls_lock(rt);
        rt->graphing = 1; /* its dispatches one launch: counted once, after the last */
    }
    for (d = 0; d < g->dispatch_count && code == 0; ++d) {
        VkKernel *k = (VkKernel *)g->kernels[d];
        for (i = 0; i < k->arg_count && code == 0; ++i) {
            if (map[i] >= count) {
                code = TAICHI_AOT_PLAN_BAD_ARGS;
            } else {
                local[i] = args[map[i]].argument;
            }
        }
        map += k->arg_count;
        if (code == 0) {
            VkDispatch dispatch = {k, local};
            code = aot_profile_dispatch(graph, g->names != NULL ? g->names[d] : NULL, vk_dispatch, &dispatch);
        }
    }
    if (rt != NULL) {
        rt->graphing = 0;
        if (code == 0 && rt->current >= 0 && !rt->batches[rt->current].fresh) { /* begun ahead: not the graph's */
            VkBatch *b = &rt->batches[rt->current];
            ++b->launches;
            if (vk_submit_now(rt, b, 0)) {
                AotVkResult submitted = aot_vk_submit(rt);
                code = submitted == AOT_VK_SUCCESS ? 0 : TAICHI_AOT_VK_ERROR - submitted;
            }
        }
    }
    aot_vk_let_go(rt);
    return code;
}

/* ---------------------------------------------------------------------------------------------------------------
   The dispatcher's entries (kinds.h): a Vulkan runtime's launches are made on a thread of the caller's, never
   elsewhere (no entry for that). */

int aot_vk_kernel_launch(const TaichiAotLaunch *l) {
    return taichi_aot_vk_launch(l->runtime, l->handle, l->arg_count, (const TiArgument *)l->args);
}

/* A quick launch (kinds.h): the runtime's calls taken where `hold` and free, and nothing of `slot` argument bytes in
   `dispatches` dispatches waits for the device (aot_vk_would_wait); a launch that returns values (`returns`) waits:
   never quick. The kernel's record is read here before launch_held checks the close epoch: the C call checked it
   with Python's lock held, which every release takes, moving the epoch first (free-threaded Python would need the
   check here too). */
static int vk_quick(const TaichiAotLaunch *l, VkRt *rt, int hold, uint32_t slot, uint32_t dispatches, int returns,
                    void **held) {
    VkRt *taken = NULL;
    *held = NULL;
    if (returns) {
        return 0;
    }
    if (hold && !aot_vk_try_hold(l->runtime, &taken)) {
        __atomic_add_fetch(&rt->counts[VK_COUNT_QUICK_BUSY], 1, __ATOMIC_RELAXED);
        return 0;
    }
    if ((!hold || taken != NULL) && !rt->closed && aot_vk_would_wait(rt, slot, dispatches)) { /* calls held */
        ++rt->counts[VK_COUNT_QUICK_FULL];
        aot_vk_let_go(taken);
        return 0;
    }
    *held = taken;
    return 1;
}

int aot_vk_kernel_quick(const TaichiAotLaunch *l, int hold, void **held) {
    const VkKernel *k = (const VkKernel *)l->handle;
    return vk_quick(l, k->rt, hold, k->slot, 0, k->result_size > 0, held); /* its dispatches in one batch */
}

int aot_vk_graph_quick(const TaichiAotLaunch *l, int hold, void **held) {
    const TaichiAotVkGraph *g = (const TaichiAotVkGraph *)l->handle;
    uint32_t d, slots = 0, dispatches = 0;
    int returns = 0;
    for (d = 0; d < g->dispatch_count; ++d) {
        const VkKernel *k = (const VkKernel *)g->kernels[d];
        slots += k->slot;
        dispatches += k->task_count;
        returns |= k->result_size > 0;
    }
    return g->dispatch_count == 0 ? 0 : vk_quick(l, ((const VkKernel *)g->kernels[0])->rt, hold, slots, dispatches,
                                                 returns, held);
}

int aot_vk_graph_launch(const TaichiAotLaunch *l) {
    return taichi_aot_vk_graph(l->runtime, (const TaichiAotVkGraph *)l->handle, l->arg_count,
                               (const TiNamedArgument *)l->args);
}
