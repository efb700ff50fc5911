/* The dispatcher: every launch, of every launch backend, is made here (launch_any decides by the launch's kind).
   Launches from Python in one C call: the close-epoch and thread check, the launch and its error code
   (taichi_aot_launch); recorded sequences replayed with no Python in between (taichi_aot_replay); launches made
   elsewhere than the runtime's thread and stream (taichi_aot_launch_elsewhere: XLA's handler, torch's autograd). Each
   of them, where NVTX ranges are on, inside a range named for its kernel or graph (launch_any). */
#include <pthread.h>
#include <stdlib.h>

#include "taichi_aot.h"

/* Bumped by Python whenever a native object is closed. */
int64_t taichi_aot_epoch = 0;

/* The calls of a runtime any thread uses held for this thread where its launch is not the own CUDA launcher's (whose
   driver takes any thread): a Vulkan runtime's, which a release on another thread holds too
   (taichi_aot_vk_hold_calls). Returns what taichi_aot_vk_let_go_calls takes (NULL: nothing held). */
static void *taichi_aot_calls_hold(const TaichiAotLaunch *l) {
    if ((l->flags & TAICHI_AOT_LAUNCH_ANY_THREAD) == 0 || l->runtime == NULL || l->kind == TAICHI_AOT_KIND_CUDA_KERNEL ||
        l->kind == TAICHI_AOT_KIND_CUDA_GRAPH) {
        return NULL;
    }
    return taichi_aot_vk_hold_calls(l->runtime);
}

/* A launch through libtaichi: refused where a non-blocking CUDA stream is set (pending[1]); made elsewhere (`where`),
   first ordered after the caller's stream (libtaichi launches on a stream of its own) and then waited for (x64: the
   caller reads the results next; CUDA: the caller's stream is not ordered with libtaichi's). The library's last
   error, or the wait for the caller's stream's. */
static int launch_library(const TaichiAotLaunch *l, const TaichiAotElsewhere *where) {
    if (where != NULL && where->sync != NULL && where->stream != NULL) {
        int waited = where->sync(where->stream);
        if (waited != 0) {
            return TAICHI_AOT_CUDA_ERROR - waited;
        }
    }
    void *made;
    const void *args;
    if (l->pending != NULL && l->pending[1]) {
        return TAICHI_AOT_REFUSED;
    }
    if (taichi_aot_library_args(l, &args, &made) != 0) { /* the own CUDA runtime's memory as imports (imports.c) */
        return (int)ti_get_last_error(NULL, NULL);
    }
    if (l->kind == TAICHI_AOT_KIND_KERNEL) {
        ti_launch_kernel(l->runtime, (TiKernel)l->handle, l->arg_count, (const TiArgument *)args);
    } else {
        ti_launch_compute_graph(l->runtime, (TiComputeGraph)l->handle, l->arg_count, (const TiNamedArgument *)args);
    }
    free(made);
    if (where != NULL) {
        ti_wait(l->runtime);
    }
    return (int)ti_get_last_error(NULL, NULL);
}

/* A kernel of the own CUDA launcher; made elsewhere (`where`), with the caller's record (its stand-in) on the
   caller's stream, and refused where the caller gives none. */
static int launch_cuda_kernel(const TaichiAotLaunch *l, const TaichiAotElsewhere *where) {
    TaichiAotCudaKernel kernel;
    if (where == NULL) {
        return taichi_aot_cuda_launch(l->runtime, (const TaichiAotCudaKernel *)l->handle, l->arg_count,
                                      (const TiArgument *)l->args);
    }
    if (where->own == NULL || where->own->driver == NULL) { /* no record of the own launcher's (none made yet) */
        return TAICHI_AOT_REFUSED;
    }
    where->own->stream = where->stream;
    kernel = *(const TaichiAotCudaKernel *)l->handle;
    kernel.runtime = where->own;
    return taichi_aot_cuda_launch(l->runtime, &kernel, l->arg_count, (const TiArgument *)l->args);
}

/* One launch of any kind, no check: the one switch on the kind, an unknown one refused before anything is done.
   `where`: the caller's stream and records where the launch is made elsewhere (taichi_aot_launch_elsewhere), else
   NULL. Returns the launch's error code (the library's last error for libtaichi's kinds). */
static int launch_kind(const TaichiAotLaunch *l, const TaichiAotElsewhere *where) {
    switch (l->kind) {
    case TAICHI_AOT_KIND_KERNEL:
    case TAICHI_AOT_KIND_GRAPH:
        return launch_library(l, where);
    case TAICHI_AOT_KIND_CUDA_KERNEL:
        return launch_cuda_kernel(l, where);
    case TAICHI_AOT_KIND_CUDA_GRAPH:
        if (where != NULL && (where->own == NULL || where->own->driver == NULL)) { /* its dispatches need one */
            return TAICHI_AOT_REFUSED;
        }
        if (where != NULL) {
            where->own->stream = where->stream;
        }
        return taichi_aot_cuda_graph_elsewhere(l->runtime, (const TaichiAotCudaGraph *)l->handle, l->arg_count,
                                               (const TiNamedArgument *)l->args, where != NULL ? where->own : NULL);
    case TAICHI_AOT_KIND_CPU_CALL:
        return taichi_aot_cpu_call(l->runtime, (const TaichiAotCpuKernel *)l->handle, l->arg_count,
                                   (const TiArgument *)l->args);
    case TAICHI_AOT_KIND_VULKAN_KERNEL:
    case TAICHI_AOT_KIND_VULKAN_GRAPH:
        if (where != NULL) { /* a Vulkan runtime's launches are its own thread's */
            return TAICHI_AOT_REFUSED;
        }
        return l->kind == TAICHI_AOT_KIND_VULKAN_KERNEL
                   ? taichi_aot_vk_launch(l->runtime, l->handle, l->arg_count, (const TiArgument *)l->args)
                   : taichi_aot_vk_graph(l->runtime, (const TaichiAotVkGraph *)l->handle, l->arg_count,
                                         (const TiNamedArgument *)l->args);
    default:
        return TAICHI_AOT_UNKNOWN_KIND;
    }
}

/* Every launch, as launch_kind makes it; while NVTX ranges are on (nvtx.c), inside a range named for the kernel or
   graph (the record's `name`), pushed on the calling thread before the launch and popped after it. Off, this is one
   load and one branch the compiler is told is seldom taken. */
static int launch_any(const TaichiAotLaunch *l, const TaichiAotElsewhere *where) {
    int error;
    if (__builtin_expect(__atomic_load_n(&taichi_aot_nvtx, __ATOMIC_RELAXED) == 0, 1)) {
        return launch_kind(l, where);
    }
    __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the library's functions, set before the switch was */
    taichi_aot_nvtx_push(l->name);
    error = launch_kind(l, where);
    taichi_aot_nvtx_pop();
    return error;
}

/* Counts a launch through libtaichi in the runtime's pending[0]. On a runtime that bounds its queue (pending[2] > 0:
   gfx backends, whose libtaichi keeps every submitted command buffer, with its argument buffers, until a wait), the
   launch that finds pending[2] launches queued waits for them, as a CUDA launch blocks when its queue is full.
   Returns the launch's error, else the wait's. */
static int count_launch(const TaichiAotLaunch *l, int error) {
    int32_t *pending = l->pending;
    if (error == TAICHI_AOT_UNKNOWN_KIND) { /* nothing was launched */
        return error;
    }
    /* the bound is libtaichi's (it keeps what each launch made until a wait); the own launches bound their own */
    if (pending[2] > 0 && error == 0 && pending[0] >= pending[2] &&
        (l->kind == TAICHI_AOT_KIND_KERNEL || l->kind == TAICHI_AOT_KIND_GRAPH)) {
        ti_wait(l->runtime);
        pending[0] = 0;
        return (int)ti_get_last_error(NULL, NULL);
    }
    if (pending[0] < INT32_MAX) {
        ++pending[0];
    }
    return error;
}

/* A launch and its error check in one call from Python. Returns the TiError code (0: success),
   or TAICHI_AOT_STALE without launching when something was closed since `seen` or the caller is
   not the runtime's thread: Python then re-checks (and raises) before launching again. The
   error message stays in the library's thread-local slot for the error funnel to take. */
int taichi_aot_launch(const TaichiAotLaunch *l) {
    int error;
    void *held;
    if ((unsigned long)pthread_self() != l->thread) {
        return TAICHI_AOT_STALE;
    }
    /* a runtime any thread uses: the epoch read with its calls held, which a release on another thread takes too */
    held = taichi_aot_calls_hold(l);
    if (l->seen != __atomic_load_n(&taichi_aot_epoch, __ATOMIC_ACQUIRE)) {
        taichi_aot_vk_let_go_calls(held);
        return TAICHI_AOT_STALE;
    }
    error = count_launch(l, launch_any(l, NULL));
    taichi_aot_vk_let_go_calls(held);
    return error;
}

/* A runtime's wait from Python (Runtime.wait, on a device whose work is all counted in `pending`): libtaichi's wait
   (its wrapper waits for the own Vulkan launch's batches too) where anything was queued since the last, or `always`
   (a runtime any thread uses: another thread's wait may have cleared the count while this thread's work still ran;
   the own Vulkan launch's wait costs little with nothing queued), the count cleared; the library's error code (0:
   none), left for the error funnel. One C call: the flat function's checks cost a fifth of a launch and its wait on
   a GPU. */
int taichi_aot_runtime_wait(TiRuntime runtime, int32_t *pending, int always) {
    if (pending[0] || always) {
        pending[0] = 0; /* first: what another thread counts meanwhile stays counted */
        ti_wait(runtime);
    }
    return (int)ti_get_last_error(NULL, NULL);
}

/* One launch of any kind, with no check: the flat API's (taichi_aot.capi checked its arguments). */
int taichi_aot_dispatch(const TaichiAotLaunch *l) {
    return launch_any(l, NULL);
}

/* Replay recorded launches `repeat` times with no Python in between. The first pass checks the
   error slot after every launch and stops at the first failure (`*done` counts the launches made
   before it); later passes repeat the same launches with the same arguments, so they are checked
   once, at the end (the sticky error slot keeps any failure until then). */
int taichi_aot_replay(const TaichiAotLaunch *launches, uint32_t count, uint64_t repeat, uint64_t *done, int64_t seen) {
    uint64_t r;
    uint32_t i;
    int error = 0;
    /* held for the whole replay on a runtime any thread uses (every launch is the first's runtime's); nothing is
       launched where anything was closed since Python checked (`seen`) */
    void *held = count > 0 ? taichi_aot_calls_hold(&launches[0]) : NULL;
    *done = 0;
    if (seen != __atomic_load_n(&taichi_aot_epoch, __ATOMIC_ACQUIRE)) {
        taichi_aot_vk_let_go_calls(held);
        return TAICHI_AOT_STALE;
    }
    for (r = 0; r < repeat && error == 0; ++r) {
        for (i = 0; i < count; ++i) {
            const TaichiAotLaunch *l = &launches[i];
            error = count_launch(l, launch_any(l, NULL));
            /* the error codes of launches that report by code are checked every time */
            if (error != 0 && (r == 0 || (l->flags & TAICHI_AOT_LAUNCH_CODES) != 0)) {
                break;
            }
            error = 0;
            ++*done;
        }
    }
    taichi_aot_vk_let_go_calls(held);
    return error != 0 ? error : (int)ti_get_last_error(NULL, NULL);
}

int taichi_aot_launch_elsewhere(const TaichiAotLaunch *l, TaichiAotElsewhere *where) {
    return launch_any(l, where);
}
