/* libtaichi's calls on a runtime with the own Vulkan launch open, ordered with the launch's batches (backends/vulkan.c
   says why): the trampolines' slots of the C-API functions that enqueue, wait, free or destroy pointed at the
   wrappers here, once, before the first such runtime's own state opens, as are those that allocate, map and unmap
   memory, free images, destroy modules and look up their kernels and graphs;
   each holds the runtime's calls (its `calls` lock: libtaichi takes none, and any thread may use the runtime). Every
   other call, and every runtime without the own launch, goes to libtaichi as before. */
#include <pthread.h>
#include <stdint.h>

#include "interop.h"
#include "taichi_aot.h"
#include "taichi/taichi_vulkan.h"
#include "loader.h"
#include "holds.h"
#include "backends/plan.h"
#include "backends/vk.h"
#include "backends/vkstate.h"
#include "backends/vkqueue.h"
#include "backends/vkbatch.h"
#include "backends/vkorder.h"

/* ---------------------------------------------------------------------------------------------------------------
   libtaichi's calls on a runtime with the own launch open, ordered with it */

/* libtaichi's functions wrapped here, one line each: the field of vk_real that keeps the real function (the
   trampoline's slot's before the wrapper took it), and the C-API name; the wrapper is vk_<field>. */
#define VK_WRAPPED(X)                                                                                          \
    X(create_runtime, ti_create_runtime) X(create_vulkan_runtime, ti_create_vulkan_runtime_ext)                \
    X(import_vulkan_runtime, ti_import_vulkan_runtime) X(destroy_runtime, ti_destroy_runtime)                  \
    X(launch_kernel, ti_launch_kernel) X(launch_graph, ti_launch_compute_graph)                                \
    X(copy_memory, ti_copy_memory_device_to_device) X(copy_image, ti_copy_image_device_to_device)              \
    X(transition_image, ti_transition_image) X(allocate_image, ti_allocate_image) X(free_image, ti_free_image) \
    X(load_module, ti_load_aot_module) X(create_module, ti_create_aot_module)                                  \
    X(destroy_module, ti_destroy_aot_module) X(module_kernel, ti_get_aot_module_kernel)                        \
    X(module_graph, ti_get_aot_module_compute_graph) X(flush, ti_flush) X(wait, ti_wait)                       \
    X(allocate_memory, ti_allocate_memory) X(free_memory, ti_free_memory) X(map_memory, ti_map_memory)         \
    X(unmap_memory, ti_unmap_memory)

static struct {
#define VK_REAL(field, name) __typeof__(&name) field;
    VK_WRAPPED(VK_REAL)
#undef VK_REAL
} vk_real;

/* A wrapper's entry: the runtime's calls held (`rt`), or, where another thread closed the runtime, the call refused
   (libtaichi's last error says so) and `refused` returned. */
#define VK_ENTER(rt, runtime, refused)                \
    VkRt *rt = aot_vk_hold(runtime);                  \
    if (rt == NULL && aot_vk_refused(runtime)) {      \
        return refused;                               \
    }
/* The same for a call that enqueues (vk_before_library). */
#define VK_ENQUEUE(rt, runtime, refused)              \
    VkRt *rt = vk_before_library(runtime);            \
    if (rt == NULL && aot_vk_refused(runtime)) {      \
        return refused;                               \
    }

void aot_vk_library_first(VkRt *rt) {
    if (rt->library_pending) {
        vk_real.flush(rt->runtime);
        rt->library_pending = 0;
    }
}

/* Before libtaichi enqueues on `runtime`: its calls held (the caller lets them go), what the own launch recorded
   submitted, libtaichi's work noted. */
static VkRt *vk_before_library(TiRuntime runtime) {
    VkRt *rt = aot_vk_hold(runtime);
    if (rt != NULL) {
        aot_vk_submit(rt);
        rt->library_dirty = rt->library_pending = rt->library_since = 1;
    }
    return rt;
}

/* A wrapper of a call that enqueues and returns nothing: `params` its parameters (the runtime named `runtime`),
   `args` the same names passed on. */
#define VK_ENQUEUES(field, params, args) \
    static void vk_##field params {      \
        VK_ENQUEUE(rt, runtime, )        \
        vk_real.field args;              \
        aot_vk_let_go(rt);               \
    }

VK_ENQUEUES(launch_kernel, (TiRuntime runtime, TiKernel kernel, uint32_t n, const TiArgument *args),
            (runtime, kernel, n, args))
VK_ENQUEUES(launch_graph, (TiRuntime runtime, TiComputeGraph graph, uint32_t n, const TiNamedArgument *args),
            (runtime, graph, n, args))
VK_ENQUEUES(copy_memory, (TiRuntime runtime, const TiMemorySlice *dst, const TiMemorySlice *src), (runtime, dst, src))
VK_ENQUEUES(copy_image, (TiRuntime runtime, const TiImageSlice *dst, const TiImageSlice *src), (runtime, dst, src))
VK_ENQUEUES(transition_image, (TiRuntime runtime, TiImage image, TiImageLayout layout), (runtime, image, layout))

static TiImage vk_allocate_image(TiRuntime runtime, const TiImageAllocateInfo *info) {
    VK_ENQUEUE(rt, runtime, TI_NULL_HANDLE) /* a new image's layout is set by a command of libtaichi's */
    TiImage made = vk_real.allocate_image(runtime, info);
    aot_vk_let_go(rt);
    return made;
}

/* A module loaded: noted as the runtime's (holds.c), whose calls its destroy and lookups then hold. */
static TiAotModule vk_load_module(TiRuntime runtime, const char *path) {
    VK_ENQUEUE(rt, runtime, TI_NULL_HANDLE)
    return aot_holds_loaded(rt != NULL ? &rt->pair : NULL, runtime, vk_real.load_module(runtime, path));
}

static TiAotModule vk_create_module(TiRuntime runtime, const void *data, uint64_t size) {
    VK_ENQUEUE(rt, runtime, TI_NULL_HANDLE)
    return aot_holds_loaded(rt != NULL ? &rt->pair : NULL, runtime, vk_real.create_module(runtime, data, size));
}

/* A module's destroy and its kernels' and graphs' lookups (libtaichi fills a module's caches as it looks up) hold
   the calls of the runtime the module was loaded on (holds.c): a launch of its kernels on another thread comes wholly
   before. The module is forgotten after its destroy: the wrapper this one calls (backends/cpucalls.c's) finds it. */
static void vk_destroy_module(TiAotModule module) {
    int gone;
    void *held = aot_holds_hold_module(module, &gone);
    if (gone) {
        return;
    }
    vk_real.destroy_module(module);
    aot_holds_forget_module(module);
    aot_holds_let_go(held);
}

static TiKernel vk_module_kernel(TiAotModule module, const char *name) {
    int gone;
    void *held = aot_holds_hold_module(module, &gone);
    TiKernel found = gone ? TI_NULL_HANDLE : vk_real.module_kernel(module, name);
    aot_holds_let_go(held);
    return found;
}

static TiComputeGraph vk_module_graph(TiAotModule module, const char *name) {
    int gone;
    void *held = aot_holds_hold_module(module, &gone);
    TiComputeGraph found = gone ? TI_NULL_HANDLE : vk_real.module_graph(module, name);
    aot_holds_let_go(held);
    return found;
}

static void vk_flush(TiRuntime runtime) {
    VK_ENTER(rt, runtime, )
    if (rt == NULL) {
        vk_real.flush(runtime);
        return;
    }
    aot_vk_submit(rt);
    aot_vk_library_first(rt);
    aot_vk_let_go(rt);
}

/* A wait: the own batches submitted; libtaichi's wait where it enqueued since its last (it waits for the whole
   queue), else the own batches' fences alone. */
static void vk_wait(TiRuntime runtime) {
    VK_ENTER(rt, runtime, )
    if (rt == NULL) {
        vk_real.wait(runtime);
        return;
    }
    aot_vk_submit(rt);
    aot_vk_begin_ahead(rt);
    if (rt->library_dirty) {
        aot_vk_stall(rt, 1); /* as aot_vk_wait_batches: waited with the calls held */
        vk_real.wait(runtime);
        aot_vk_stall(rt, -1);
        rt->library_dirty = rt->library_pending = 0;
    }
    if (!aot_vk_wait_free(rt)) { /* done already where libtaichi waited: their fences are signalled */
        aot_vk_let_go(rt);
    }
}

/* Memory freed: nothing of the own launch may still use it, and no set kept binds it. */
static void vk_free_memory(TiRuntime runtime, TiMemory memory) {
    VK_ENTER(rt, runtime, )
    if (rt != NULL) {
        if (aot_vk_busy(rt)) {
            aot_vk_finish(rt);
        }
        aot_vk_forget_memory(rt, memory);
    }
    vk_real.free_memory(runtime, memory);
    aot_vk_let_go(rt);
}

static TiMemory vk_allocate_memory(TiRuntime runtime, const TiMemoryAllocateInfo *info) {
    VK_ENTER(rt, runtime, TI_NULL_HANDLE)
    TiMemory made = vk_real.allocate_memory(runtime, info);
    aot_vk_let_go(rt);
    return made;
}

static void *vk_map_memory(TiRuntime runtime, TiMemory memory) {
    VK_ENTER(rt, runtime, NULL)
    void *mapped = vk_real.map_memory(runtime, memory);
    aot_vk_let_go(rt);
    return mapped;
}

static void vk_unmap_memory(TiRuntime runtime, TiMemory memory) {
    VK_ENTER(rt, runtime, )
    vk_real.unmap_memory(runtime, memory);
    aot_vk_let_go(rt);
}

static void vk_free_image(TiRuntime runtime, TiImage image) {
    VK_ENTER(rt, runtime, )
    vk_real.free_image(runtime, image);
    aot_vk_let_go(rt);
}

/* The runtime destroyed with its calls held throughout: a call another thread is in ends first, and one it makes
   after finds the runtime closed and is refused. */
static void vk_destroy_runtime(TiRuntime runtime) {
    VkRt *rt;
    if (aot_vk_refused(runtime)) { /* destroyed already (here, or on another thread): never twice */
        return;
    }
    rt = aot_vk_close_runtime(runtime, 1);
    vk_real.destroy_runtime(runtime);
    aot_vk_let_go(rt);
}

/* A runtime made, by any of libtaichi's makers: a closed one's address noted before is another's now. */
static TiRuntime vk_create_runtime(TiArch arch, uint32_t device_index) {
    TiRuntime made = vk_real.create_runtime(arch, device_index);
    aot_holds_forget_closed(made);
    return made;
}

static TiRuntime vk_create_vulkan_runtime(uint32_t api_version, uint32_t instance_extension_count,
                                          const char **instance_extensions, uint32_t device_extension_count,
                                          const char **device_extensions) {
    TiRuntime made = vk_real.create_vulkan_runtime(api_version, instance_extension_count, instance_extensions,
                                                   device_extension_count, device_extensions);
    aot_holds_forget_closed(made);
    return made;
}

static TiRuntime vk_import_vulkan_runtime(const TiVulkanRuntimeInteropInfo *interop_info) {
    TiRuntime made = vk_real.import_vulkan_runtime(interop_info);
    aot_holds_forget_closed(made);
    return made;
}

/* One trampoline's slot pointed at `wrapper`, its function kept in `*real`. */
static void vk_hook_one(const char *name, void **real, void *wrapper) {
    void **slot = taichi_aot_symbol_slot(name);
    if (slot != NULL && *slot != NULL) {
        *real = *slot;
        __atomic_store_n(slot, wrapper, __ATOMIC_RELEASE);
    }
}

static void vk_hook_all(void) {
#define VK_HOOK(field, name) vk_hook_one(#name, (void **)&vk_real.field, (void *)vk_##field);
    VK_WRAPPED(VK_HOOK)
#undef VK_HOOK
}

/* The wrappers in place, once (before the first runtime's own state opens). */
void aot_vk_hook_library(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, vk_hook_all);
}
