/* The own Vulkan launch's batches (backends/vulkan.c says what the launch is): a runtime's TAICHI_AOT_VK_BATCHES
   command buffers, each recorded, submitted with its fence and waited for in turn, and the barriers recorded into
   them. Above the runtime's state (backends/vkqueue.c: what a finished batch lets go is freed there) and its
   timestamps (backends/vkprofile.c: read as a batch finishes); below the kernels, copies and libtaichi's wrapped
   calls, which record into and submit them. Called with the runtime's calls held. */
#include <stdint.h>
#include <string.h>

#include "taichi_aot.h"
#include "waits.h"
#include "backends/vk.h"
#include "backends/vkstate.h"
#include "backends/vkqueue.h"
#include "backends/vkprofile.h"
#include "backends/vkbatch.h"

void aot_vk_barrier(VkRt *rt, AotVkDispatch cb, uint32_t src_stage, uint32_t src_access, uint32_t dst_stage,
                    uint32_t dst_access) {
    AotVkMemoryBarrier barrier = {AOT_VK_STRUCTURE_TYPE_MEMORY_BARRIER, NULL, src_access, dst_access};
    rt->f.CmdPipelineBarrier(cb, src_stage, dst_stage, 0, 1, &barrier, 0, NULL, 0, NULL);
}

/* Fences waited for by the runtime's wait policy (waits.h): polled with vkGetFenceStatus, each in turn, for as long as
   the policy says, then a blocking vkWaitForFences for those left. */
typedef struct {
    VkRt *rt;
    const AotVkHandle *fences;
    uint32_t n, at; /* at: the first not yet seen signalled */
} VkFenceWait;

static int vk_fences_poll(void *ctx) {
    VkFenceWait *w = (VkFenceWait *)ctx;
    while (w->at < w->n) {
        AotVkResult code = w->rt->f.GetFenceStatus(w->rt->device, w->fences[w->at]);
        if (code == AOT_VK_NOT_READY) {
            return 1;
        }
        if (code != AOT_VK_SUCCESS) {
            return code;
        }
        ++w->at;
    }
    return 0;
}

static int vk_fences_block(void *ctx) {
    VkFenceWait *w = (VkFenceWait *)ctx;
    return w->at < w->n ? w->rt->f.WaitForFences(w->rt->device, w->n - w->at, w->fences + w->at, 1, UINT64_MAX) : 0;
}

/* Every one of `n` fences signalled, waited for by the policy (`shared`: aot_vk_shared, read with the calls held,
   before a wait lets them go: auto blocks then); how, counted, a fence wait each (atomic: a wait with the calls let
   go). */
static AotVkResult vk_fences_wait(VkRt *rt, uint32_t n, const AotVkHandle *fences, int shared) {
    VkFenceWait w = {rt, fences, n, 0};
    int how, code;
    code = aot_wait(&rt->wait, vk_fences_poll, vk_fences_block, &w, shared, &how);
    __atomic_add_fetch(&rt->counts[how == AOT_WAITED_POLLED ? VK_COUNT_WAITS_POLLED : VK_COUNT_WAITS_BLOCKED], 1,
                       __ATOMIC_RELAXED);
    if (shared) {
        __atomic_add_fetch(&rt->counts[VK_COUNT_WAITS_SHARED], 1, __ATOMIC_RELAXED);
    }
    return (AotVkResult)code;
}

/* A batch the GPU finished: its timestamps read (where a profile took any), its slot free again. */
static void vk_retire(VkRt *rt, VkBatch *b) {
    aot_vk_stamps_read(rt, b); /* its timestamps, where a profile took any */
    b->state = 0;
    if (b->serial > rt->done) {
        rt->done = b->serial;
    }
}

/* Wait for submitted batches: all of them (`one` NULL), or only `one`. */
AotVkResult aot_vk_wait_batches(VkRt *rt, VkBatch *one) {
    AotVkHandle fences[TAICHI_AOT_VK_BATCHES];
    uint32_t n = 0, i;
    AotVkResult code;
    aot_vk_retire_signalled(rt); /* those a wait with the calls let go saw done: no wait, no fence, again */
    for (i = 0; i < TAICHI_AOT_VK_BATCHES; ++i) {
        if (rt->batches[i].state == 2 && (one == NULL || one == &rt->batches[i])) {
            fences[n++] = rt->batches[i].fence;
        }
    }
    if (n == 0) {
        return AOT_VK_SUCCESS;
    }
    ++rt->counts[VK_COUNT_FENCE_WAITS];
    aot_vk_stall(rt, 1); /* a quick launch on another thread does not wait for it */
    code = vk_fences_wait(rt, n, fences, aot_vk_shared(rt));
    aot_vk_stall(rt, -1);
    if (code != AOT_VK_SUCCESS) {
        return code;
    }
    for (i = 0; i < TAICHI_AOT_VK_BATCHES; ++i) {
        if (rt->batches[i].state == 2 && (one == NULL || one == &rt->batches[i])) {
            vk_retire(rt, &rt->batches[i]);
        }
    }
    aot_vk_bury(rt);
    return AOT_VK_SUCCESS;
}

/* The batches a wait with the calls let go saw signalled (their serials up to `waited`), retired, with the calls held:
   no fence is asked (they are done), so a wait after them finds what it found before they were waited for. */
void aot_vk_retire_signalled(VkRt *rt) {
    uint64_t upto = __atomic_load_n(&rt->waited, __ATOMIC_ACQUIRE);
    int i;
    if (upto <= rt->done) {
        return;
    }
    for (i = 0; i < TAICHI_AOT_VK_BATCHES; ++i) {
        VkBatch *b = &rt->batches[i];
        if (b->state == 2 && b->serial <= upto) {
            vk_retire(rt, b);
        }
    }
    rt->done = upto; /* each batch up to it is done, those begun again since among them */
    aot_vk_bury(rt);
}

/* The last serial a wait with the calls let go saw done raised to `upto` (atomic: threads wait at once). */
static void vk_waited_upto(VkRt *rt, uint64_t upto) {
    uint64_t seen = __atomic_load_n(&rt->waited, __ATOMIC_ACQUIRE);
    while (seen < upto &&
           !__atomic_compare_exchange_n(&rt->waited, &seen, upto, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    }
}

/* Whether a wait may let the runtime's calls go: this thread holds them once, and no profile is open (its timestamps
   are read as a batch is retired, before the wait returns). Else the wait holds them. */
static int vk_may_let_go(const VkRt *rt) {
    return rt->depth == 1 && !__atomic_load_n(&taichi_aot_profiling, __ATOMIC_ACQUIRE);
}

/* The calls let go for a wait: counted as a fence wait, and the thread as one waiting (a close waits for it to leave:
   aot_vk_unwaited). */
static void vk_let_go_for_wait(VkRt *rt) {
    ++rt->counts[VK_COUNT_FENCE_WAITS];
    __atomic_add_fetch(&rt->waiting, 1, __ATOMIC_ACQ_REL);
    aot_vk_calls_unlock(rt);
}

int aot_vk_wait_free(VkRt *rt) {
    VkBatch *which[TAICHI_AOT_VK_BATCHES];
    uint32_t n = 0, i, j;
    uint64_t upto;
    AotVkResult failed = AOT_VK_SUCCESS;
    int shared = aot_vk_shared(rt);
    if (!vk_may_let_go(rt)) {
        aot_vk_wait_batches(rt, NULL);
        return 0;
    }
    aot_vk_retire_signalled(rt);
    for (i = 0; i < TAICHI_AOT_VK_BATCHES; ++i) {
        VkBatch *b = &rt->batches[i];
        if (b->state == 2) {
            for (j = n++; j > 0 && which[j - 1]->serial > b->serial; --j) {
                which[j] = which[j - 1]; /* in the order they were submitted */
            }
            which[j] = b;
            __atomic_add_fetch(&b->waiters, 1, __ATOMIC_ACQ_REL);
        }
    }
    if (n == 0) {
        return 0;
    }
    upto = which[n - 1]->serial; /* read while its slot is this wait's: once let go, a begin gives it a new serial */
    vk_let_go_for_wait(rt);
    for (i = 0; i < n; ++i) { /* each let go once signalled: a slot begun again waits for this thread no longer */
        AotVkResult code = vk_fences_wait(rt, 1, &which[i]->fence, shared);
        failed = failed != AOT_VK_SUCCESS ? failed : code;
        __atomic_sub_fetch(&which[i]->waiters, 1, __ATOMIC_ACQ_REL);
    }
    if (failed == AOT_VK_SUCCESS) {
        vk_waited_upto(rt, upto);
    } else { /* the device lost: nothing marked done; the caller's error slot says so */
        ti_set_last_error(TI_ERROR_INVALID_STATE, "taichi_aot: a wait for the Vulkan device's fences failed (the "
                                                  "device was lost?)");
    }
    __atomic_sub_fetch(&rt->waiting, 1, __ATOMIC_ACQ_REL);
    return 1;
}

int aot_vk_wait_one(VkRt *rt, VkBatch *b, AotVkResult *code) {
    int shared = aot_vk_shared(rt);
    if (!vk_may_let_go(rt)) {
        *code = aot_vk_wait_batches(rt, b);
        return 0;
    }
    __atomic_add_fetch(&b->waiters, 1, __ATOMIC_ACQ_REL);
    vk_let_go_for_wait(rt);
    *code = vk_fences_wait(rt, 1, &b->fence, shared);
    if (*code == AOT_VK_SUCCESS) {
        vk_waited_upto(rt, b->serial); /* it, and each batch submitted before it (the fence's first scope) */
    }
    return 1;
}

void aot_vk_wait_one_done(VkRt *rt, VkBatch *b) {
    __atomic_sub_fetch(&b->waiters, 1, __ATOMIC_ACQ_REL);
    __atomic_sub_fetch(&rt->waiting, 1, __ATOMIC_ACQ_REL);
}

/* The slot the next batch begins in: the next one no thread waits on with the calls let go (aot_vk_wait_free), whose
   fence a begin resets; the next one where every slot is waited on (a begin then waits for those threads). */
static int vk_next_slot(const VkRt *rt) {
    int i;
    for (i = 0; i < TAICHI_AOT_VK_BATCHES; ++i) {
        int slot = (rt->next + i) % TAICHI_AOT_VK_BATCHES;
        if (__atomic_load_n(&rt->batches[slot].waiters, __ATOMIC_ACQUIRE) == 0) {
            return slot;
        }
    }
    return rt->next;
}

/* What a batch records before anything else, at its first use (a batch begun ahead meets libtaichi's work enqueued
   after its begin): the temporaries zeroed, the first time; what libtaichi enqueued before (its launches and copies)
   before this batch's reads (the last batch's own barrier orders it before this one: a barrier's scopes run on over
   later submissions to the queue, and the submission itself the host's writes). */
static void vk_first_use(VkRt *rt, VkBatch *b) {
    b->fresh = 0;
    if (!rt->temps_zeroed) {
        rt->f.CmdFillBuffer(b->cb, rt->temps_buffer, 0, AOT_VK_WHOLE_SIZE, 0);
        rt->temps_zeroed = 1;
    }
    if (rt->library_since) {
        aot_vk_barrier(rt, b->cb, AOT_VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | AOT_VK_PIPELINE_STAGE_HOST_BIT,
                       AOT_VK_ACCESS_MEMORY_WRITE_BIT | AOT_VK_ACCESS_HOST_WRITE_BIT | VK_ACCESS, VK_STAGES, VK_ACCESS);
        rt->library_since = 0;
    }
}

/* Batch `b` (its slot's last batch done) begun as the one being recorded. */
static AotVkResult vk_begin_in(VkRt *rt, VkBatch *b) {
    AotVkResult code;
    AotVkCommandBufferBeginInfo begin = {AOT_VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, NULL,
                                         AOT_VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT, NULL};
    aot_vk_unwaited(rt, b); /* no thread waits on the fence reset here */
    if ((code = rt->f.ResetFences(rt->device, 1, &b->fence)) != AOT_VK_SUCCESS ||
        (code = rt->f.ResetCommandBuffer(b->cb, 0)) != AOT_VK_SUCCESS ||
        (code = rt->f.BeginCommandBuffer(b->cb, &begin)) != AOT_VK_SUCCESS) {
        return code;
    }
    b->owed = 0;
    b->state = 1;
    b->serial = ++rt->serial;
    b->head = (uint32_t)rt->next * VK_SEGMENT;
    b->end = b->head + VK_SEGMENT;
    b->dispatches = b->launches = 0;
    aot_vk_stamps_drop(rt, b); /* where its last recording was never submitted: not read, given back */
    b->pipeline = b->set = 0;
    b->last_kernel = NULL;
    rt->current = rt->next;
    rt->next = (rt->next + 1) % TAICHI_AOT_VK_BATCHES;
    return AOT_VK_SUCCESS;
}

/* The batch being recorded, begun where there is none (the next slot's, waited for where it is still running). */
VkBatch *aot_vk_begin(VkRt *rt, AotVkResult *code) {
    VkBatch *b;
    if (rt->current >= 0) {
        b = &rt->batches[rt->current];
        if (b->fresh) {
            vk_first_use(rt, b);
        }
        return b;
    }
    rt->next = vk_next_slot(rt);
    b = &rt->batches[rt->next];
    if (b->state == 2) {
        *code = aot_vk_wait_batches(rt, b);
        if (*code != AOT_VK_SUCCESS) {
            return NULL;
        }
    }
    if ((*code = vk_begin_in(rt, b)) != AOT_VK_SUCCESS) {
        return NULL;
    }
    vk_first_use(rt, b);
    return b;
}

void aot_vk_begin_ahead(VkRt *rt) {
    VkBatch *b;
    if (rt->current >= 0 || rt->closed || !aot_vk_busy_since_wait(rt)) {
        return; /* one being recorded, or nothing submitted for the GPU to run meanwhile */
    }
    rt->next = vk_next_slot(rt);
    b = &rt->batches[rt->next];
    if (b->state != 0 || __atomic_load_n(&b->waiters, __ATOMIC_ACQUIRE) > 0) {
        return; /* its slot still running, or waited on: begun by the next launch, as before */
    }
    if (vk_begin_in(rt, b) == AOT_VK_SUCCESS) { /* else the next begin tries again, and says why where it fails */
        b->fresh = 1;
    }
}

/* The batch being recorded ended and submitted (nothing where none is). */
AotVkResult aot_vk_submit(VkRt *rt) {
    VkBatch *b;
    AotVkResult code;
    AotVkSubmitInfo submit;
    if (rt->current < 0) {
        return AOT_VK_SUCCESS;
    }
    b = &rt->batches[rt->current];
    if (b->fresh) { /* begun ahead, nothing in it: kept for what is recorded next */
        return AOT_VK_SUCCESS;
    }
    rt->current = -1;
    /* its writes (the last dispatch's owed barrier among them), for the host (a map after the wait) and whatever the
       queue runs next */
    b->owed = 0;
    aot_vk_barrier(rt, b->cb, VK_STAGES, VK_ACCESS, VK_STAGES | AOT_VK_PIPELINE_STAGE_HOST_BIT,
               VK_ACCESS | AOT_VK_ACCESS_HOST_READ_BIT);
    code = rt->f.EndCommandBuffer(b->cb);
    if (code != AOT_VK_SUCCESS) {
        b->state = 0;
        return code;
    }
    memset(&submit, 0, sizeof(submit));
    submit.sType = AOT_VK_STRUCTURE_TYPE_SUBMIT_INFO;
    submit.commandBufferCount = 1;
    submit.pCommandBuffers = &b->cb;
    code = rt->f.QueueSubmit(rt->queue, 1, &submit, b->fence);
    if (code != AOT_VK_SUCCESS) {
        b->state = 0;
        return code;
    }
    b->state = 2;
    ++rt->counts[VK_COUNT_SUBMITS];
    return AOT_VK_SUCCESS;
}

/* Whether a batch was submitted since the last wait for all (the GPU may still run it). */
int aot_vk_busy_since_wait(const VkRt *rt) {
    int i;
    for (i = 0; i < TAICHI_AOT_VK_BATCHES; ++i) {
        if (rt->batches[i].state == 2) {
            return 1;
        }
    }
    return 0;
}

int aot_vk_gpu_idle(VkRt *rt) {
    const VkBatch *newest = NULL;
    int i;
    for (i = 0; i < TAICHI_AOT_VK_BATCHES; ++i) {
        const VkBatch *b = &rt->batches[i];
        if (b->state == 2 && (newest == NULL || b->serial > newest->serial)) {
            newest = b;
        }
    }
    return newest == NULL || rt->f.GetFenceStatus(rt->device, newest->fence) == AOT_VK_SUCCESS;
}

int aot_vk_busy(const VkRt *rt) {
    int i;
    for (i = 0; i < TAICHI_AOT_VK_BATCHES; ++i) {
        if (rt->batches[i].state != 0 && !rt->batches[i].fresh) {
            return 1;
        }
    }
    return 0;
}

int aot_vk_would_wait(VkRt *rt, uint32_t slot, uint32_t dispatches) {
    const VkBatch *b = rt->current >= 0 ? &rt->batches[rt->current] : NULL;
    if (b != NULL && b->head + slot <= b->end && b->dispatches + dispatches < TAICHI_AOT_VK_BATCH_DISPATCHES) {
        return 0; /* it goes into the batch being recorded, which is not submitted before it ends */
    }
    if (slot > VK_SEGMENT || dispatches >= TAICHI_AOT_VK_BATCH_DISPATCHES) {
        return 1; /* more than a batch holds: past the next one too */
    }
    b = &rt->batches[vk_next_slot(rt)]; /* as a begin chooses it: one still waited on would be waited for */
    return (b->state == 2 && rt->f.GetFenceStatus(rt->device, b->fence) != AOT_VK_SUCCESS) ||
           __atomic_load_n(&b->waiters, __ATOMIC_ACQUIRE) > 0;
}

/* Everything recorded submitted and waited for. */
AotVkResult aot_vk_finish(VkRt *rt) {
    AotVkResult code = aot_vk_submit(rt);
    aot_vk_begin_ahead(rt);
    AotVkResult waited = aot_vk_wait_batches(rt, NULL);
    return code != AOT_VK_SUCCESS ? code : waited;
}
