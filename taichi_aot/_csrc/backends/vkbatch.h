/* backends/vkbatch.c's functions, for the layers above it (backends/vkstate.h says which): batches recorded,
   submitted, waited for; barriers. A private header. */
#ifndef TAICHI_AOT_BACKENDS_VKBATCH_H
#define TAICHI_AOT_BACKENDS_VKBATCH_H

#include <stdint.h>
#include "backends/vk.h"
#include "backends/vkstate.h"

/* The one being recorded (begun where none is), submitted, waited for (`one`, or all: NULL), all of it submitted
   and waited for; whether any is recorded or submitted (busy) or submitted since the last wait; a barrier recorded. */
__attribute__((visibility("hidden"))) VkBatch *aot_vk_begin(VkRt *rt, AotVkResult *code);
__attribute__((visibility("hidden"))) AotVkResult aot_vk_submit(VkRt *rt);
/* After a submission a wait waits for: the next batch begun now, where something was submitted and its slot is free,
   while the GPU runs (the driver's reset and begin of a command buffer, 1-2 us on an H200, off the next launch's
   path); kept as the one being recorded, submitted only once something is recorded into it (`fresh`). */
__attribute__((visibility("hidden"))) void aot_vk_begin_ahead(VkRt *rt);
__attribute__((visibility("hidden"))) AotVkResult aot_vk_wait_batches(VkRt *rt, VkBatch *one);
__attribute__((visibility("hidden"))) AotVkResult aot_vk_finish(VkRt *rt);
/* aot_vk_wait_batches(rt, NULL) for a wait from outside (vkorder.c's ti_wait): where this thread holds the calls once
   and no profile is open, they are let go while the GPU runs what was submitted (other threads record, submit and
   wait meanwhile; on an H200, four threads sharing a runtime, 200 launches and a value each, kept 0.81-0.94x one
   thread's throughput with the calls held through the wait, 1.21-1.62x with them let go) and 1 is returned: the
   caller holds none then. The batches it waited for are retired by the next launch or wait (aot_vk_retire_signalled:
   `waited`), or a begin that reaches their slot; until then they read as submitted, their fences signalled. Else 0,
   waited with the calls held. A slot a thread waits on so is passed over by a begin, or not begun until it is out
   of the wait (`waiters`): its fence is not reset under it. aot_vk_retire_signalled: those batches retired (nothing
   where there are none), with the calls held. */
__attribute__((visibility("hidden"))) int aot_vk_wait_free(VkRt *rt);
/* Batch `b` (submitted) waited for by this thread alone: as aot_vk_wait_free, with the calls let go where it holds them
   once and no profile is open (1: the caller holds none; `b`'s slot is not begun again, nor the state destroyed, until
   the caller says aot_vk_wait_one_done, after it read what `b` wrote for it), else with the calls held (0). `*code`:
   the wait's VkResult. */
__attribute__((visibility("hidden"))) int aot_vk_wait_one(VkRt *rt, VkBatch *b, AotVkResult *code);
__attribute__((visibility("hidden"))) void aot_vk_wait_one_done(VkRt *rt, VkBatch *b);
__attribute__((visibility("hidden"))) void aot_vk_retire_signalled(VkRt *rt);

__attribute__((visibility("hidden"))) int aot_vk_busy(const VkRt *rt);
/* Whether every batch submitted is done (the newest one's fence signalled: the GPU has nothing of the runtime's). */
__attribute__((visibility("hidden"))) int aot_vk_gpu_idle(VkRt *rt);
/* Whether recording `slot` more argument bytes in `dispatches` dispatches after the first (a graph's: a batch full of
   dispatches is submitted, the next begun) would wait for the device (the next batch's slot still running). */
__attribute__((visibility("hidden"))) int aot_vk_would_wait(VkRt *rt, uint32_t slot, uint32_t dispatches);
__attribute__((visibility("hidden"))) int aot_vk_busy_since_wait(const VkRt *rt);
__attribute__((visibility("hidden"))) void aot_vk_barrier(VkRt *rt, AotVkDispatch cb, uint32_t src_stage,
                                                          uint32_t src_access, uint32_t dst_stage,
                                                          uint32_t dst_access);

#endif
