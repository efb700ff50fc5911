/* A wait for the device by a runtime's wait policy (waits.c), as CUDA's scheduling flags have it: "spin" polls until
   the work is done, "yield" polls and yields the core between polls, "block" sleeps in the driver's wait, and "auto"
   (the default) polls for a bounded time, learned from how long the runtime's waits took (never past the policy's
   cap, about a millisecond), and only while fewer threads of the process spin than it has cores; then blocks. Where
   other threads launch on the runtime (the backend says: `others`), auto blocks at once.
   On NVIDIA's Vulkan a blocking fence wait wakes 20-30 us after the GPU is done; a polled one within a microsecond or
   two. A private header, never handed to cffi. */
#ifndef TAICHI_AOT_WAITS_H
#define TAICHI_AOT_WAITS_H

#include <stdint.h>

#include "taichi_aot.h"

/* A runtime's policy (TAICHI_AOT_WAIT_*), auto's cap on polling (nanoseconds) and what it learned (atomic: the
   average of its waits' lengths, nanoseconds). Zeroed: auto, with the default cap. */
typedef struct {
    int policy;
    uint64_t cap_ns;
    uint64_t learned_ns;
} AotWaitPolicy;

/* What a wait did: polled to the end, polled then blocked, blocked at once. */
enum { AOT_WAITED_POLLED = 0, AOT_WAITED_BLOCKED_AFTER_POLLING = 1, AOT_WAITED_BLOCKED = 2 };

/* `poll(ctx)`: 0 done, 1 not yet, else an error (returned as it is); `block(ctx)`: waits until done, 0 or an error.
   `others`: threads share the runtime (the backend says: the own Vulkan launch's aot_vk_shared), where auto blocks at
   once: threads that poll slow the one that launches, and a value's wait is hidden behind another thread's launches
   there (vkstate.h's VkRt.in_a_row says what it measured). Returns the error (0: done) and, in `*how`, what the wait
   did (AOT_WAITED_*). */
__attribute__((visibility("hidden"))) int aot_wait(AotWaitPolicy *p, int (*poll)(void *), int (*block)(void *),
                                                   void *ctx, int others, int *how);
/* A pause in a loop that polls (the core's hint that it spins). */
static inline void aot_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}
/* Whether the policy is auto (another thread may set it: read atomically). */
static inline int aot_wait_auto(const AotWaitPolicy *p) {
    return __atomic_load_n(&p->policy, __ATOMIC_RELAXED) == TAICHI_AOT_WAIT_AUTO;
}
/* The cores the process may use (its affinity, read once). */
__attribute__((visibility("hidden"))) uint32_t aot_wait_cores(void);
/* The policy set: TAICHI_AOT_WAIT_* (another value: auto), `cap_ns` 0: the default cap. */
__attribute__((visibility("hidden"))) void aot_wait_set(AotWaitPolicy *p, int policy, uint64_t cap_ns);

#endif
