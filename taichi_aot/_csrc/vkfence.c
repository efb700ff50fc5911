/* libtaichi's Vulkan, reached through functions of ours for a few names (the rest is the loader's own).

   Vulkan fences reused: libtaichi_c_api 1.7.4 creates a VkFence for every submit (VulkanStream::submit) and
   destroys it at the next wait, which costs about 0.8 ms a fence on NVIDIA's driver: more than half a millisecond
   on every ti_wait and ti_flush, where a submit and wait with a reused fence costs 37 us.

   libtaichi reaches Vulkan through volk, which takes vkGetInstanceProcAddr from the loader with dlsym and every
   other function through it. So the library's dlsym slot (got.c) is pointed at taichi_aot_vk_dlsym, which hands
   out a vkGetInstanceProcAddr of ours; that one and the vkGetDeviceProcAddr it hands out answer the loader's own
   functions for every name but three: vkCreateFence takes a fence from the device's pool where one is there (a
   plain fence: no flags, no extension, no allocator, as libtaichi makes them), vkDestroyFence resets the fence
   and keeps it (up to TAICHI_AOT_FENCES_KEPT a device), vkDestroyDevice destroys the kept ones first. Everything
   else of libtaichi's Vulkan, its errors and device loss included, is untouched. Fences are reset by the
   device that made them, and only once the library let go of them: it destroys a fence after the wait that
   follows its submit (vkQueueWaitIdle), when no queue uses it.

   Semaphores are left as they are: libtaichi signals a new binary semaphore at each submit and waits on none,
   and a binary semaphore signalled and never waited cannot be signalled again; making one costs about 17 us
   (measured on the H100 beside the fence's 800). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "taichi_aot.h"

typedef int32_t TaichiAotVkResult;
typedef void *TaichiAotVkHandle; /* VkInstance, VkDevice: dispatchable handles */
typedef uint64_t TaichiAotVkFence; /* a non-dispatchable handle: 64 bits on 64-bit targets */
typedef void (*TaichiAotVkVoidFunction)(void);
typedef TaichiAotVkVoidFunction (*TaichiAotVkGetProcAddr)(TaichiAotVkHandle, const char *);
typedef struct {
    int32_t sType;
    const void *pNext;
    uint32_t flags;
} TaichiAotVkFenceCreateInfo;
typedef TaichiAotVkResult (*TaichiAotVkCreateFence)(TaichiAotVkHandle, const TaichiAotVkFenceCreateInfo *,
                                                    const void *, TaichiAotVkFence *);
typedef void (*TaichiAotVkDestroyFence)(TaichiAotVkHandle, TaichiAotVkFence, const void *);
typedef TaichiAotVkResult (*TaichiAotVkResetFences)(TaichiAotVkHandle, uint32_t, const TaichiAotVkFence *);
typedef void (*TaichiAotVkDestroyDevice)(TaichiAotVkHandle, const void *);

#define TAICHI_AOT_FENCES_KEPT 64 /* a device's pool: libtaichi holds one fence a submit between two waits */
#define TAICHI_AOT_FENCE_DEVICES 16 /* devices with a pool at once (more: their fences are made as before) */

typedef struct {
    TaichiAotVkHandle device;
    TaichiAotVkCreateFence create;
    TaichiAotVkDestroyFence destroy;
    TaichiAotVkResetFences reset;
    TaichiAotVkDestroyDevice destroy_device;
    uint32_t kept;
    TaichiAotVkFence fences[TAICHI_AOT_FENCES_KEPT];
} TaichiAotFencePool;

static pthread_mutex_t taichi_aot_fence_lock = PTHREAD_MUTEX_INITIALIZER;
static TaichiAotFencePool taichi_aot_pools[TAICHI_AOT_FENCE_DEVICES];
static TaichiAotVkGetProcAddr taichi_aot_real_gipa = NULL; /* the loader's */
static TaichiAotVkGetProcAddr taichi_aot_real_gdpa = NULL;
static volatile int taichi_aot_fences_on = 0;
/* The loader's own functions from vkGetInstanceProcAddr: they serve any device, for one without a pool. */
static TaichiAotVkCreateFence taichi_aot_any_create = NULL;
static TaichiAotVkDestroyFence taichi_aot_any_destroy = NULL;
static TaichiAotVkDestroyDevice taichi_aot_any_destroy_device = NULL;
static uint64_t taichi_aot_fence_counts[3]; /* fences made, taken from a pool, put back */

/* The device's pool, made with the device's own functions where it has none (NULL: no room, or no
   vkGetDeviceProcAddr yet). Called under the lock. */
static TaichiAotFencePool *taichi_aot_pool(TaichiAotVkHandle device) {
    int i, free_slot = -1;
    TaichiAotFencePool *pool;
    for (i = 0; i < TAICHI_AOT_FENCE_DEVICES; ++i) {
        if (taichi_aot_pools[i].device == device) {
            return &taichi_aot_pools[i];
        }
        if (taichi_aot_pools[i].device == NULL && free_slot < 0) {
            free_slot = i;
        }
    }
    if (free_slot < 0 || taichi_aot_real_gdpa == NULL) {
        return NULL;
    }
    pool = &taichi_aot_pools[free_slot];
    pool->create = (TaichiAotVkCreateFence)taichi_aot_real_gdpa(device, "vkCreateFence");
    pool->destroy = (TaichiAotVkDestroyFence)taichi_aot_real_gdpa(device, "vkDestroyFence");
    pool->reset = (TaichiAotVkResetFences)taichi_aot_real_gdpa(device, "vkResetFences");
    pool->destroy_device = (TaichiAotVkDestroyDevice)taichi_aot_real_gdpa(device, "vkDestroyDevice");
    if (pool->create == NULL || pool->destroy == NULL || pool->reset == NULL || pool->destroy_device == NULL) {
        memset(pool, 0, sizeof(*pool));
        return NULL;
    }
    pool->device = device;
    pool->kept = 0;
    return pool;
}

static TaichiAotVkResult taichi_aot_vk_create_fence(TaichiAotVkHandle device, const TaichiAotVkFenceCreateInfo *info,
                                                    const void *allocator, TaichiAotVkFence *fence) {
    TaichiAotFencePool *pool;
    TaichiAotVkCreateFence create;
    pthread_mutex_lock(&taichi_aot_fence_lock);
    pool = taichi_aot_pool(device);
    if (pool == NULL) {
        pthread_mutex_unlock(&taichi_aot_fence_lock);
        return taichi_aot_any_create != NULL ? taichi_aot_any_create(device, info, allocator, fence)
                                             : -3; /* VK_ERROR_INITIALIZATION_FAILED */
    }
    if (pool->kept > 0 && info != NULL && info->flags == 0 && info->pNext == NULL && allocator == NULL) {
        *fence = pool->fences[--pool->kept];
        ++taichi_aot_fence_counts[1];
        pthread_mutex_unlock(&taichi_aot_fence_lock);
        return 0;
    }
    create = pool->create;
    ++taichi_aot_fence_counts[0];
    pthread_mutex_unlock(&taichi_aot_fence_lock);
    return create(device, info, allocator, fence);
}

static void taichi_aot_vk_destroy_fence(TaichiAotVkHandle device, TaichiAotVkFence fence, const void *allocator) {
    TaichiAotFencePool *pool;
    if (fence == 0) {
        return;
    }
    pthread_mutex_lock(&taichi_aot_fence_lock);
    pool = taichi_aot_pool(device);
    if (pool != NULL && allocator == NULL && taichi_aot_fences_on && pool->kept < TAICHI_AOT_FENCES_KEPT
        && pool->reset(device, 1, &fence) == 0) {
        pool->fences[pool->kept++] = fence;
        ++taichi_aot_fence_counts[2];
        pthread_mutex_unlock(&taichi_aot_fence_lock);
        return;
    }
    pthread_mutex_unlock(&taichi_aot_fence_lock);
    if (pool != NULL) {
        pool->destroy(device, fence, allocator);
    } else if (taichi_aot_any_destroy != NULL) {
        taichi_aot_any_destroy(device, fence, allocator);
    }
}

static void taichi_aot_forget_importing(TaichiAotVkHandle device);

static void taichi_aot_vk_destroy_device(TaichiAotVkHandle device, const void *allocator) {
    TaichiAotFencePool *pool;
    TaichiAotVkDestroyDevice destroy_device = NULL;
    uint32_t i;
    pthread_mutex_lock(&taichi_aot_fence_lock);
    taichi_aot_forget_importing(device);
    pool = taichi_aot_pool(device);
    if (pool != NULL) {
        for (i = 0; i < pool->kept; ++i) {
            pool->destroy(device, pool->fences[i], NULL);
        }
        destroy_device = pool->destroy_device;
        memset(pool, 0, sizeof(*pool));
    }
    pthread_mutex_unlock(&taichi_aot_fence_lock);
    if (destroy_device == NULL) {
        destroy_device = taichi_aot_any_destroy_device;
    }
    if (destroy_device != NULL) {
        destroy_device(device, allocator);
    }
}

/* The physical device a new runtime is made on: vkEnumeratePhysicalDevices shows libtaichi that one alone while
   taichi_aot_vulkan_select_device has one chosen (-1: every device, as the loader lists them). libtaichi_c_api 1.7.4
   refuses a device index (ti_create_runtime) and picks a device itself: showing it one is how another is taken. */
typedef TaichiAotVkResult (*TaichiAotVkEnumerate)(TaichiAotVkHandle, uint32_t *, TaichiAotVkHandle *);
static volatile int32_t taichi_aot_vk_wanted = -1;
static TaichiAotVkEnumerate taichi_aot_real_enumerate = NULL;

static TaichiAotVkResult taichi_aot_vk_enumerate(TaichiAotVkHandle instance, uint32_t *count,
                                                  TaichiAotVkHandle *devices) {
    int32_t wanted = taichi_aot_vk_wanted;
    uint32_t n = 0;
    TaichiAotVkHandle *all;
    TaichiAotVkResult result;
    if (wanted < 0 || count == NULL) {
        return taichi_aot_real_enumerate(instance, count, devices);
    }
    result = taichi_aot_real_enumerate(instance, &n, NULL);
    if (result < 0 || (uint32_t)wanted >= n) {
        *count = 0;
        return result < 0 ? result : 0;
    }
    all = (TaichiAotVkHandle *)calloc(n, sizeof(TaichiAotVkHandle));
    if (all == NULL) {
        return -1; /* VK_ERROR_OUT_OF_HOST_MEMORY */
    }
    result = taichi_aot_real_enumerate(instance, &n, all);
    if (result >= 0 && (uint32_t)wanted < n) {
        if (devices == NULL) {
            *count = 1;
            result = 0;
        } else if (*count >= 1) {
            devices[0] = all[wanted];
            *count = 1;
            result = 0; /* the one device shown is the whole list, complete */
        } else {
            result = 5; /* VK_INCOMPLETE */
        }
    } else if (result >= 0) {
        *count = 0;
    }
    free(all);
    return result;
}

/* Show libtaichi the loader's physical device `index` alone from now on (-1: every device); the one shown before.
   Called with the library's lock held, around the making of one runtime. */
int32_t taichi_aot_vulkan_select_device(int32_t index) {
    int32_t before = taichi_aot_vk_wanted;
    taichi_aot_vk_wanted = index;
    return before;
}

/* A device made with VK_EXT_external_memory_host where its driver has it (libtaichi enables a list of its own, without
   it): the host's pages can then be imported as buffers, and host arrays copied by the GPU itself, at the link's speed
   (backends/vkcopy.c). VkDeviceCreateInfo as Vulkan lays it out on 64-bit targets: its extension count at byte 48 and
   their names at 56. The devices so made are noted (taichi_aot_vulkan_imports_host). */
typedef TaichiAotVkResult (*TaichiAotVkCreateDevice)(TaichiAotVkHandle, const void *, const void *,
                                                      TaichiAotVkHandle *);
typedef TaichiAotVkResult (*TaichiAotVkEnumerateExtensions)(TaichiAotVkHandle, const char *, uint32_t *, void *);
#define TAICHI_AOT_HOST_MEMORY_EXTENSION "VK_EXT_external_memory_host"
#define TAICHI_AOT_DEVICE_INFO_SIZE 72
static TaichiAotVkCreateDevice taichi_aot_real_create_device = NULL;
static TaichiAotVkEnumerateExtensions taichi_aot_real_extensions = NULL;
static TaichiAotVkHandle taichi_aot_importing[TAICHI_AOT_FENCE_DEVICES]; /* devices made with the extension */

static int taichi_aot_has_extension(TaichiAotVkHandle physical, const char *name) {
    uint32_t count = 0, i;
    char *found;
    int has = 0;
    if (taichi_aot_real_extensions == NULL || taichi_aot_real_extensions(physical, NULL, &count, NULL) != 0) {
        return 0;
    }
    found = (char *)calloc(count ? count : 1, 260); /* VkExtensionProperties: a name of 256 bytes, a version */
    if (found != NULL && taichi_aot_real_extensions(physical, NULL, &count, found) >= 0) {
        for (i = 0; i < count && !has; ++i) {
            has = strncmp(found + (size_t)i * 260, name, 256) == 0;
        }
    }
    free(found);
    return has;
}

static TaichiAotVkResult taichi_aot_vk_create_device(TaichiAotVkHandle physical, const void *info,
                                                      const void *allocator, TaichiAotVkHandle *device) {
    unsigned char copy[TAICHI_AOT_DEVICE_INFO_SIZE];
    uint32_t count, i;
    const char *const *names;
    const char **more;
    TaichiAotVkResult result;
    if (info == NULL || !taichi_aot_has_extension(physical, TAICHI_AOT_HOST_MEMORY_EXTENSION)) {
        return taichi_aot_real_create_device(physical, info, allocator, device);
    }
    memcpy(copy, info, sizeof(copy));
    memcpy(&count, copy + 48, 4);
    memcpy(&names, copy + 56, sizeof(names));
    for (i = 0; i < count; ++i) {
        if (strcmp(names[i], TAICHI_AOT_HOST_MEMORY_EXTENSION) == 0) {
            return taichi_aot_real_create_device(physical, info, allocator, device);
        }
    }
    more = (const char **)calloc(count + 1, sizeof(char *));
    if (more == NULL) {
        return taichi_aot_real_create_device(physical, info, allocator, device);
    }
    memcpy(more, names, count * sizeof(char *));
    more[count++] = TAICHI_AOT_HOST_MEMORY_EXTENSION;
    memcpy(copy + 48, &count, 4);
    memcpy(copy + 56, &more, sizeof(more));
    result = taichi_aot_real_create_device(physical, copy, allocator, device);
    free(more);
    if (result == 0) {
        pthread_mutex_lock(&taichi_aot_fence_lock);
        for (i = 0; i < TAICHI_AOT_FENCE_DEVICES; ++i) {
            if (taichi_aot_importing[i] == NULL) {
                taichi_aot_importing[i] = *device;
                break;
            }
        }
        pthread_mutex_unlock(&taichi_aot_fence_lock);
    }
    return result;
}

/* Whether `device` was made with VK_EXT_external_memory_host (libtaichi's, through the hook). */
int taichi_aot_vulkan_imports_host(void *device) {
    int i, found = 0;
    pthread_mutex_lock(&taichi_aot_fence_lock);
    for (i = 0; i < TAICHI_AOT_FENCE_DEVICES && !found; ++i) {
        found = device != NULL && taichi_aot_importing[i] == device;
    }
    pthread_mutex_unlock(&taichi_aot_fence_lock);
    return found;
}

/* A destroyed device's note gone (another may be made at its address). */
static void taichi_aot_forget_importing(TaichiAotVkHandle device) {
    int i;
    for (i = 0; i < TAICHI_AOT_FENCE_DEVICES; ++i) {
        if (taichi_aot_importing[i] == device) {
            taichi_aot_importing[i] = NULL;
        }
    }
}

/* The three functions above for their names, else NULL. */
static TaichiAotVkVoidFunction taichi_aot_vk_ours(const char *name) {
    if (name == NULL) {
        return NULL;
    }
    if (strcmp(name, "vkCreateFence") == 0) {
        return (TaichiAotVkVoidFunction)&taichi_aot_vk_create_fence;
    }
    if (strcmp(name, "vkDestroyFence") == 0) {
        return (TaichiAotVkVoidFunction)&taichi_aot_vk_destroy_fence;
    }
    if (strcmp(name, "vkDestroyDevice") == 0) {
        return (TaichiAotVkVoidFunction)&taichi_aot_vk_destroy_device;
    }
    return NULL;
}

static TaichiAotVkVoidFunction taichi_aot_vk_gdpa(TaichiAotVkHandle device, const char *name) {
    TaichiAotVkVoidFunction real = taichi_aot_real_gdpa(device, name);
    TaichiAotVkVoidFunction ours = real != NULL ? taichi_aot_vk_ours(name) : NULL;
    return ours != NULL ? ours : real;
}

static TaichiAotVkVoidFunction taichi_aot_vk_gipa(TaichiAotVkHandle instance, const char *name) {
    TaichiAotVkVoidFunction real = taichi_aot_real_gipa(instance, name), ours;
    if (real == NULL || name == NULL) {
        return real;
    }
    if (strcmp(name, "vkGetDeviceProcAddr") == 0) {
        taichi_aot_real_gdpa = (TaichiAotVkGetProcAddr)real; /* the loader's: the same for every instance */
        return (TaichiAotVkVoidFunction)&taichi_aot_vk_gdpa;
    }
    if (strcmp(name, "vkGetInstanceProcAddr") == 0) {
        return (TaichiAotVkVoidFunction)&taichi_aot_vk_gipa;
    }
    if (strcmp(name, "vkEnumeratePhysicalDevices") == 0) {
        taichi_aot_real_enumerate = (TaichiAotVkEnumerate)real; /* the loader's trampoline: any instance's */
        return (TaichiAotVkVoidFunction)&taichi_aot_vk_enumerate;
    }
    if (strcmp(name, "vkCreateDevice") == 0) {
        taichi_aot_real_create_device = (TaichiAotVkCreateDevice)real; /* the loader's trampolines */
        taichi_aot_real_extensions = (TaichiAotVkEnumerateExtensions)taichi_aot_real_gipa(
            instance, "vkEnumerateDeviceExtensionProperties");
        return (TaichiAotVkVoidFunction)&taichi_aot_vk_create_device;
    }
    ours = taichi_aot_vk_ours(name);
    if (ours == (TaichiAotVkVoidFunction)&taichi_aot_vk_create_fence) {
        taichi_aot_any_create = (TaichiAotVkCreateFence)real;
    } else if (ours == (TaichiAotVkVoidFunction)&taichi_aot_vk_destroy_fence) {
        taichi_aot_any_destroy = (TaichiAotVkDestroyFence)real;
    } else if (ours == (TaichiAotVkVoidFunction)&taichi_aot_vk_destroy_device) {
        taichi_aot_any_destroy_device = (TaichiAotVkDestroyDevice)real;
    }
    return ours != NULL ? ours : real;
}

/* libtaichi's dlsym: the loader's vkGetInstanceProcAddr becomes ours, every other symbol is dlsym's. */
static void *taichi_aot_vk_dlsym(void *handle, const char *name) {
    void *found = dlsym(handle, name);
    if (found != NULL && name != NULL && strcmp(name, "vkGetInstanceProcAddr") == 0) {
        taichi_aot_real_gipa = (TaichiAotVkGetProcAddr)found;
        return (void *)&taichi_aot_vk_gipa;
    }
    return found;
}

/* Point libtaichi's dlsym at ours, once, before its first Vulkan runtime; a later call only turns the keeping of
   fences on or off (`on`). The slots patched (0: the library calls no dlsym), or -1 where they cannot be. */
int taichi_aot_hook_vulkan_fences(int on) {
    static int patched = -2;
    taichi_aot_fences_on = on != 0;
    if (patched == -2) {
        patched = taichi_aot_patch_library_calls("dlsym", (void *)&taichi_aot_vk_dlsym);
    }
    return patched;
}

/* Whether libtaichi reaches Vulkan through ours (it asked dlsym for the loader since the hook). */
int taichi_aot_vulkan_fences_hooked(void) {
    return taichi_aot_real_gipa != NULL;
}

/* The counts since the library was loaded: [0] fences made, [1] taken from a pool, [2] put back. */
void taichi_aot_vulkan_fence_counts(uint64_t *out) {
    pthread_mutex_lock(&taichi_aot_fence_lock);
    memcpy(out, taichi_aot_fence_counts, sizeof(taichi_aot_fence_counts));
    pthread_mutex_unlock(&taichi_aot_fence_lock);
}
