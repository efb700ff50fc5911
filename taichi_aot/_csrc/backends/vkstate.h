/* The own Vulkan launch's state, the types its files share: a private header, never handed to cffi, named for no one
   file (every layer includes it). backends/vulkan.c's opening comment says how the launch works. The files are
   layers, each calling only those below it; each layer's functions are declared in the header named for its file
   (vkqueue.h, ...), and a file includes only the headers of the layers it calls (tests/test_c_files.py counts an
   include of X.h as a call of X.c):
     backends/vkprofile.c  a profile's timestamps in a batch (VkStamps, VkStamping: its own types);
     backends/vkqueue.c    the runtime's own state: the registry of open runtimes, the `calls` lock, its memory (the
                           argument ring, temporaries, results), and the teardown of every list it keeps (kernels,
                           their sets, imported pages, the timestamps);
     backends/vkbatch.c    batches: recorded, submitted with their fences, waited for; barriers;
     backends/vkorder.c    libtaichi's calls on the runtime ordered with the batches (its wrappers);
     backends/vulkan.c     the opener, kernels, their sets and the launch;  backends/vkcopy.c  copies on the queue.
   The top two offer the rest of the package only their entries: the C-API's (taichi_aot.h) and the launch kinds'
   (kinds.h), so they have no header of their own.

   The lock order, from the first taken to the last: Python's locks (the launches' RuntimeBackends.lock among them),
   then Python's own lock let go (a C call of the launch), then a runtime's `calls`, then `aot_vk_lock`, then holds.c's
   `holds_lock` (a leaf: the registry notes there, under `aot_vk_lock`, the calls it registers and the runtimes it
   closes). Never the reverse: no Python runs with `calls` held, and `aot_vk_lock` is held for a list's walk or change
   alone (nothing under it waits for `calls` or the GPU). The one exception: a quick launch (kinds.h) waits for another
   thread's brief call with Python's lock kept, for VK_CALLS_SPIN_NS at most (vkqueue.c's vk_calls_soon): bounded,
   and no thread that holds `calls` takes Python's lock. A call that uses a runtime's state or records, submits or
   waits for its batches holds `calls`: the entry points of vulkan.c, vkcopy.c and vkorder.c take it (aot_vk_hold),
   the layers below expect it held, save the registry's own functions, which take `aot_vk_lock`. A user's wait lets
   `calls` go while it waits for fences (aot_vk_wait_free: only where held once), and takes nothing after. */
#ifndef TAICHI_AOT_BACKENDS_VKSTATE_H
#define TAICHI_AOT_BACKENDS_VKSTATE_H

#include <pthread.h>
#include <stdint.h>

#include "interop.h"
#include "taichi_aot.h"
#include "holds.h"
#include "waits.h"
#include "backends/vk.h"

#define VK_SEGMENT (1u << 20)   /* argument bytes of one batch */
#define VK_TEMPS (1u << 20)     /* Taichi's temporaries buffer (kGtmpBufferSize) */
#define VK_RUNTIMES 64          /* runtimes with the own launch open at once */
#define VK_POOL_SETS 512        /* descriptor sets a pool holds */
#define VK_CACHED 4             /* combinations of arrays whose sets a kernel keeps */
#define VK_LIBRARY_ERROR INT32_MIN /* a failure the library's last error tells */
#define VK_HOST_ALIGN 256u      /* where a copy's host side starts at the link's speed (vkcopy.c) */
#define VK_READ_SEGMENT TAICHI_AOT_VK_UPDATE_BYTES /* bytes a batch copies back for the host (vkcopy.c's reads) */
#define VK_FEED_EVERY 8         /* dispatches between two looks at whether the GPU went idle (VkRt.feed) */
/* The launch at which a batch begun after a wait is submitted where waits poll (VkRt.early): the second, so that a
   launch and the value read after it (the copies filling its arrays before it, the copy of the value after it) go in
   one submission, not in two; a launch and rt.wait() are one either way (the wait submits). */
#define VK_EARLY_POLLED 2
/* Threads share a runtime (aot_vk_shared) from a launch of one thread after another's until one thread has made this
   many launches in a row. */
#define VK_SHARED_LAUNCHES 64
/* How long a quick launch waits, Python's lock kept, for another thread's brief call on the runtime to end before it
   lets the lock go and waits for it (aot_vk_try_hold): a launch or a value's copy and submit holds the calls for a
   few microseconds; handing Python's lock to another thread and taking it back costs a thread's turn. */
#define VK_CALLS_SPIN_NS 30000

typedef struct VkRt VkRt;
/* A profile's timestamps in a batch, and a runtime's way of taking them: vkprofile.c's, known elsewhere by pointer. */
typedef struct VkStamps VkStamps;
typedef struct VkStamping VkStamping;

/* The runtime's counts (VkRt.counts, taichi_aot_vk_counts), each with the name Python gives it
   (taichi_aot_vk_count_name: placement/vulkan.py's COUNTS). */
#define VK_COUNTERS(X)                                                                                      \
    X(DISPATCHES, "dispatches") X(SUBMITS, "submits") X(SETS_MADE, "sets made") X(SETS_KEPT, "sets kept") \
    X(FENCE_WAITS, "fence waits") X(WORKGROUPS, "workgroups") X(COPIES, "copies") X(HOST_COPIES, "host copies") \
    X(WAITS_POLLED, "waits polled") X(WAITS_BLOCKED, "waits blocked") X(QUICK_BUSY, "launches behind a call")     \
    X(QUICK_FULL, "launches behind the GPU") X(WAITS_SHARED, "waits while threads share")
enum {
#define VK_COUNTER(id, name) VK_COUNT_##id,
    VK_COUNTERS(VK_COUNTER)
#undef VK_COUNTER
    VK_COUNTERS_ALL
};
_Static_assert(VK_COUNTERS_ALL == TAICHI_AOT_VK_COUNTS, "taichi_aot.h's TAICHI_AOT_VK_COUNTS is the counters' number");

typedef struct {
    AotVkHandle shader, set_layout, pipeline_layout, pipeline;
    uint32_t group_size, groups, trim, dynamic;
    uint32_t bind_count;
    TaichiAotVkBind binds[TAICHI_AOT_VK_MAX_BINDS];
} VkTaskMade;

typedef struct {
    TiMemory memories[TAICHI_AOT_VK_MAX_ARRAYS];
    AotVkHandle buffers[TAICHI_AOT_VK_MAX_ARRAYS];
    AotVkHandle *sets; /* one a task */
    AotVkHandle pool;
    uint64_t used;  /* the serial of the last batch that bound them */
    uint64_t clock; /* when last used, for the least recently used */
    int valid;
} VkSets;

typedef struct VkKernel {
    VkRt *rt;
    uint64_t id;
    uint32_t task_count, arg_count, args_size, slot, result_size, array_count;
    VkTaskMade *tasks;
    TaichiAotArgPlan args[TAICHI_AOT_OP_MAX_ARGS];
    uint32_t arrays[TAICHI_AOT_VK_MAX_ARRAYS]; /* the argument index of each array the tasks bind */
    void *result;
    AotVkHandle *layouts; /* each task's set layout, for allocating its sets */
    VkSets cache[VK_CACHED];
    uint64_t clock, used;
    struct VkKernel *next;
} VkKernel;

typedef struct {
    AotVkDispatch cb;
    AotVkHandle fence;
    uint64_t serial;
    int state; /* 0 free, 1 recording, 2 submitted */
    int fresh; /* begun ahead by a wait (aot_vk_begin_ahead), nothing recorded into it yet: not submitted */
    int owed;  /* a dispatch's writes not yet ordered before what the batch records next (a barrier owed) */
    uint32_t head, end, dispatches;
    uint32_t launches; /* kernels recorded (a copy is a dispatch, not a launch): what VkRt.early counts */
    uint32_t waiters; /* threads waiting for its fence with the calls let go (atomic): its slot is not begun again
                         until they are out of the wait (vkbatch.c) */
    /* what the command buffer has bound last (a launch that binds the same again records nothing), and the last
       launch's kernel and argument slot (a launch of it with the same bytes takes that slot again) */
    AotVkHandle pipeline, set;
    uint32_t set_offset, last_offset;
    const void *last_kernel;
    unsigned char last_args[TAICHI_AOT_PLAN_MAX_BYTES]; /* its bytes, kept in host memory: the ring's is
                                                          write-combined on a GPU, where a read costs microseconds */
    /* a profile's timestamps (vkprofile.c): taken at the first launch a profile times into the batch, given back
       once the batch is done and they are read; NULL where no profile timed a launch into it */
    VkStamps *stamps;
} VkBatch;

typedef struct {
    AotVkHandle pool, set;
    uint64_t serial;
} VkDead;

/* Host pages imported as a buffer, kept for an array that moves again (vkcopy.c). */
typedef struct VkImport {
    uint64_t id;
    uintptr_t start;
    uint64_t length;
    AotVkHandle buffer, memory;
    struct VkImport *next;
} VkImport;

struct VkRt {
    TiRuntime runtime;
    uint64_t id;
    AotVkFunctions f;
    AotVkDispatch device, queue, physical;
    uint32_t family, align, max_groups, max_range;
    uint64_t host_align; /* minImportedHostPointerAlignment, where host memory is imported (vkcopy.c) */

    AotVkHandle command_pool;
    VkBatch batches[TAICHI_AOT_VK_BATCHES];
    int current, next;
    uint64_t serial, done;
    AotVkHandle args_buffer, args_memory, temps_buffer, temps_memory, rets_buffer, rets_memory;
    AotVkHandle reads_buffer, reads_memory; /* a segment a batch (VK_READ_SEGMENT), host-visible: small reads back */
    unsigned char *args_host, *rets_host, *reads_host;
    int temps_zeroed;
    AotVkHandle pools[64];
    uint32_t pool_count;
    VkDead *dead;
    uint32_t dead_count, dead_cap;
    int library_dirty;   /* libtaichi enqueued since its last wait */
    int library_since;   /* libtaichi enqueued since the last batch began (its work the next batch must follow) */
    int library_pending; /* libtaichi enqueued since its last flush: it may hold work unsubmitted */
    VkKernel *kernels;
    VkKernel *dead_kernels; /* let go by Python (any thread), freed here once no batch runs them */
    VkImport *imports;      /* host pages kept imported */
    uint64_t counts[TAICHI_AOT_VK_COUNTS];
    AotWaitPolicy wait; /* how its fences are waited for (waits.h; taichi_aot_vk_set_wait) */
    /* the GPU kept fed (vulkan.c's launch): a batch is submitted at its `early`-th launch where the GPU is idle since
       a wait (VK_EARLY_POLLED where waits poll: the GPU starts on the first while Python records the next;
       TAICHI_AOT_VK_EARLY_LAUNCHES where they block, as before the policy), and, where waits poll, every
       VK_FEED_EVERY dispatches where the batches submitted are done (aot_vk_gpu_idle) */
    uint32_t early;
    int feed;
    int graphing; /* a graph's dispatches being recorded (with the calls held): one launch, counted after its last */
    /* whether its queue writes timestamps, their period, the batches' spare timestamps (vkprofile.c): NULL until a
       profile first times a launch */
    VkStamping *stamping;
    /* The runtime's calls one at a time, from whichever thread makes them: the own launches, copies and waits, and
       libtaichi's calls on the runtime (vkorder.c's wrappers). Recursive: a wrapper's call reaches another. No Python
       runs while it is held (Python's locks are taken before it, never after). */
    pthread_mutex_t calls;
    AotCalls pair;    /* its hold and let-go, registered for the runtime while open (holds.h: libtaichi's kinds) */
    int depth;        /* how many times the thread that holds `calls` holds it (aot_vk_calls_lock) */
    uint32_t waiting; /* threads in a wait with the calls let go (atomic: aot_vk_wait_free) */
    uint64_t waited;  /* the last serial such a wait saw done (atomic): retired by the next launch or wait */
    /* Closed (with its runtime): its state destroyed, the record itself kept (never freed), so that a thread that
       found it before the close and waits for `calls` finds it closed (aot_vk_hold), not freed memory. */
    int closed;
    /* Threads sharing the runtime (aot_vk_note_launch, with the calls held): the thread that launched last, and its
       launches in a row since another thread's (VK_SHARED_LAUNCHES at first: none shares it yet). While they share
       it (aot_vk_shared) and the policy is auto (a CPU device's auto is block: placement/vulkan.py), waits block at
       once and a batch is not submitted early or fed (values, waits, libtaichi's calls and a full batch submit it).
       Measured on an H200, four threads
       sharing it, 400 launches each and a value every 10 (benchmarks/RESULTS.md, session 49): with this and the quick
       launch's wait for a brief call (VK_CALLS_SPIN_NS), 8.2-8.8 ms in all against 9.6-10.0 before (medians of 12
       and 18; their ten launches 44-50 us a round against 90; one thread's 28-35); either alone gained little. */
    pthread_t last_thread;
    uint32_t in_a_row;
    /* Whether a quick launch waits for a brief call (a GPU's runtime on a host of 4 cores or more: on a CPU device the
       device's own threads need the cores); the holder's call is brief (atomic: a quick launch, a value's copy and
       submit, a copy: aot_vk_brief; cleared as the calls are let go); threads that wait for the GPU with the calls
       held (atomic: aot_vk_stall), or block for them (atomic, aot_vk_calls_lock): a quick launch waits for none of
       these, nor gets ahead of a thread blocked for the calls. */
    int spins;
    uint32_t brief, stalled, blocked;
};

/* The stages and accesses of Taichi's barrier (its memory_barrier): compute and transfer. Between two dispatches of
   the own launch, compute to compute (a copy recorded after a dispatch records its own barrier first). */
#define VK_STAGES (AOT_VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | AOT_VK_PIPELINE_STAGE_TRANSFER_BIT)
#define VK_ACCESS (AOT_VK_ACCESS_SHADER_READ_BIT | AOT_VK_ACCESS_SHADER_WRITE_BIT | AOT_VK_ACCESS_TRANSFER_READ_BIT | \
                   AOT_VK_ACCESS_TRANSFER_WRITE_BIT)

/* The runtime's calls taken and let go by the thread that holds them, counted (`depth`): a wait lets them go only where
   it holds them once (aot_vk_wait_free). */
static inline void aot_vk_calls_lock(VkRt *rt) {
    if (pthread_mutex_trylock(&rt->calls) != 0) {
        __atomic_add_fetch(&rt->blocked, 1, __ATOMIC_ACQ_REL);
        pthread_mutex_lock(&rt->calls);
        __atomic_sub_fetch(&rt->blocked, 1, __ATOMIC_ACQ_REL);
    }
    ++rt->depth;
}
static inline void aot_vk_calls_unlock(VkRt *rt) {
    if (--rt->depth == 0) {
        __atomic_store_n(&rt->brief, 0, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&rt->calls);
}
/* The call that holds the calls once is brief (a quick launch on another thread waits for it: aot_vk_try_hold). */
static inline void aot_vk_brief(VkRt *rt) {
    if (rt->depth == 1) {
        __atomic_store_n(&rt->brief, 1, __ATOMIC_RELEASE);
    }
}
/* A wait for the GPU with the calls held begins (+1) or ends (-1). */
static inline void aot_vk_stall(VkRt *rt, int by) {
    __atomic_add_fetch(&rt->stalled, (uint32_t)by, __ATOMIC_ACQ_REL);
}

/* This thread's launch noted, with the calls held: one after another thread's makes the threads share the runtime,
   until one thread has made VK_SHARED_LAUNCHES in a row (aot_vk_shared). A thread that only reads or waits shares
   nothing. */
static inline void aot_vk_note_launch(VkRt *rt) {
    pthread_t self = pthread_self();
    if (!pthread_equal(self, rt->last_thread)) {
        if (rt->last_thread != 0) {
            rt->in_a_row = 0;
        }
        rt->last_thread = self;
    } else if (rt->in_a_row < VK_SHARED_LAUNCHES) {
        ++rt->in_a_row;
    }
}

/* Whether threads share the runtime now (aot_vk_note_launch), with the calls held. */
static inline int aot_vk_shared(const VkRt *rt) {
    return rt->in_a_row < VK_SHARED_LAUNCHES;
}

#endif
