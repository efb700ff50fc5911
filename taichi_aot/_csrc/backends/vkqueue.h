/* backends/vkqueue.c's functions, for the layers above it (backends/vkstate.h says which): the runtime's own state,
   the registry of open runtimes, its memory. A private header. */
#ifndef TAICHI_AOT_BACKENDS_VKQUEUE_H
#define TAICHI_AOT_BACKENDS_VKQUEUE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "taichi_aot.h"
#include "backends/vk.h"
#include "backends/vkstate.h"

/* The registry of open runtimes, and the lock that guards it and each runtime's lists (kernels, imports). */
extern __attribute__((visibility("hidden"))) pthread_mutex_t aot_vk_lock;
__attribute__((visibility("hidden"))) uint64_t aot_vk_next_id(void);
/* The runtime's own state opened and registered: its id, or 0 with the reason in `error`. */
__attribute__((visibility("hidden"))) uint64_t aot_vk_open_state(TiRuntime runtime, char *error, size_t error_size);
__attribute__((visibility("hidden"))) VkRt *aot_vk_find(TiRuntime runtime);
/* The runtime's own state with its calls held for this thread (NULL, nothing held: none open, or closed meanwhile);
   let go. aot_vk_hold_open: the same for a state already found (NULL where it closed). */
__attribute__((visibility("hidden"))) VkRt *aot_vk_hold_open(VkRt *rt);
__attribute__((visibility("hidden"))) VkRt *aot_vk_hold(TiRuntime runtime);
__attribute__((visibility("hidden"))) void aot_vk_let_go(VkRt *rt);
/* aot_vk_hold without blocking: 0 where another thread has the calls (nothing held); else 1, `*held` as aot_vk_hold
   returns it. */
__attribute__((visibility("hidden"))) int aot_vk_try_hold(TiRuntime runtime, VkRt **held);
__attribute__((visibility("hidden"))) VkRt *aot_vk_by_id(uint64_t id);
__attribute__((visibility("hidden"))) VkRt *aot_vk_close_runtime(TiRuntime runtime, int destroyed);
/* Whether `runtime` was closed here (holds.c keeps it until a runtime is made at its address again): libtaichi's last
   error then says so, in the Vulkan state's words, and the caller makes no call on it. */
__attribute__((visibility("hidden"))) int aot_vk_refused(TiRuntime runtime);
/* "WHAT failed (VkResult CODE)" in `error`. */
__attribute__((visibility("hidden"))) void aot_vk_error(char *error, size_t size, const char *what, AotVkResult code);
/* The first memory type of `bits` with the properties `need`, one with `prefer` too where there is one; -1: none. */
__attribute__((visibility("hidden"))) int aot_vk_memory_type(VkRt *rt, uint32_t bits, uint32_t need, uint32_t prefer);
/* A memory's VkBuffer for `size` bytes from `offset` (0, 0: the whole; a binding's); 0: unknown to the library, or
   the bytes past the memory's end (TI_ERROR_ARGUMENT_OUT_OF_RANGE), the library's last error says which. */
__attribute__((visibility("hidden"))) AotVkHandle aot_vk_buffer_of(VkRt *rt, TiMemory memory, uint64_t offset,
                                                                   uint64_t size);
/* What the runtime made, let go: a kernel freed; the sets it keeps for some arrays (at once where no batch uses them,
   else once those are done: aot_vk_bury); the sets that bind a memory being freed; imported pages' buffer and memory;
   the dead kernels and sets whose batches are done. */
__attribute__((visibility("hidden"))) void aot_vk_free_kernel(VkKernel *k);
__attribute__((visibility("hidden"))) void aot_vk_drop_sets(VkRt *rt, VkKernel *k, VkSets *s);
__attribute__((visibility("hidden"))) void aot_vk_forget_memory(VkRt *rt, TiMemory memory);
__attribute__((visibility("hidden"))) void aot_vk_release_import(VkRt *rt, const VkImport *pages);
__attribute__((visibility("hidden"))) void aot_vk_bury(VkRt *rt);
/* The threads in a wait with the calls let go (vkbatch.c's aot_vk_wait_free) for batch `b` (NULL: any of the
   runtime's) out of it, with the calls held and its fences signalled (a slot begun again, the state destroyed). */
__attribute__((visibility("hidden"))) void aot_vk_unwaited(VkRt *rt, const VkBatch *b);

#endif
