/* CUDA kernels launched by taichi_aot itself (a TaichiAotLaunch of kind 2): the arguments libtaichi would get
   (the same TiArgument array every launch path packs) are laid out in the kernel's launch parameters as its
   metadata's args_type says, and each task of the kernel is launched in order with cuLaunchKernel on the
   runtime's stream, with the stream's runtime stand-in; a range_for task's grid (a grid-stride loop, right at any
   size) is trimmed to one thread for each element of the largest ndarray argument. No allocation, no copy, no
   import: an ndarray's device pointer comes from ti_export_cuda_memory (a lookup), or is the argument's memory
   itself (TAICHI_AOT_POINTER_TAG: an array taken anew in C), and the parameters travel with the launch.

   The plan (TaichiAotCudaKernel) was checked by Python when the module was loaded (ptx/plan.py's check, its
   arguments metadata/layout.py's): every offset and size lies inside args_size, which is at most
   TAICHI_AOT_PLAN_MAX_BYTES. */
#include <pthread.h>
#include <string.h>

#include "taichi_aot.h"
#include "backends/cudaprofile.h"
#include "backends/plan.h"
#include "cuda.h"
#include "profile.h"

/* Any thread may launch on a runtime of the own CUDA runtime: a kernel's tasks are queued, and a returning one's
   results read, under the lock of its stand-in (serial tasks leave loop bounds in the stand-in's temporaries for the
   next task; another kernel queued in between would overwrite them). A lock stands for every stand-in whose address
   falls to it: two that share one only wait for each other. */
#define PTX_LOCKS 16
static pthread_mutex_t ptx_locks[PTX_LOCKS] = {[0 ... PTX_LOCKS - 1] = PTHREAD_MUTEX_INITIALIZER};

static pthread_mutex_t *ptx_lock(uint64_t standin) {
    return &ptx_locks[((standin >> 8) * 0x9E3779B97F4A7C15ULL) >> 60]; /* the address's bits mixed: 16 locks */
}

/* The stand-in lock a quick launch (kinds.h) took on this thread before its launch, which the launch's tasks then
   do not take again; let go by aot_cuda_let_go_quick after it. */
static __thread pthread_mutex_t *ptx_quick_held;

/* A quick launch of kernels on the stand-in `standin`: its lock taken only where it is free, as Python's lock is kept
   meanwhile: a thread that has it may be synchronizing a stream for a kernel's values or its autodiff flag, on which
   a host function may need Python's lock; and never while a profile is open. 1: taken (`*held`); 0: busy, the
   launch lets Python's lock go. */
static int ptx_quick_take(uint64_t standin, void **held) {
    pthread_mutex_t *lock = ptx_lock(standin);
    *held = NULL;
    /* inside a profile a launch may wait: for the profile's reference event at its first launch on the context
       (backends/cudaprofile.c) */
    if (__atomic_load_n(&taichi_aot_profiling, __ATOMIC_RELAXED) != 0 || pthread_mutex_trylock(lock) != 0) {
        return 0;
    }
    ptx_quick_held = lock;
    *held = lock;
    return 1;
}

int aot_cuda_kernel_quick(const TaichiAotLaunch *l, int hold, void **held) {
    const TaichiAotCudaKernel *k = (const TaichiAotCudaKernel *)l->handle;
    (void)hold; /* no runtime's calls: the driver takes any thread */
    *held = NULL;
    if (k->overflow != 0 || k->result_size != 0) { /* it waits for the stream after its tasks: never quick */
        return 0;
    }
    return ptx_quick_take(k->runtime->standin, held);
}

int aot_cuda_graph_quick(const TaichiAotLaunch *l, int hold, void **held) {
    const TaichiAotCudaGraph *g = (const TaichiAotCudaGraph *)l->handle;
    uint32_t d;
    (void)hold;
    *held = NULL;
    for (d = 0; d < g->dispatch_count; ++d) {
        const TaichiAotCudaKernel *k = g->kernels[d];
        if (k->overflow != 0 || k->result_size != 0 || k->runtime != g->kernels[0]->runtime) {
            return 0;
        }
    }
    return g->dispatch_count == 0 ? 0 : ptx_quick_take(g->kernels[0]->runtime->standin, held);
}

/* The stand-in lock of a launch's tasks taken, unless the quick launch around it holds it: the lock to give back
   after them, or NULL. */
static pthread_mutex_t *ptx_take(uint64_t standin) {
    pthread_mutex_t *lock = ptx_lock(standin);
    if (ptx_quick_held == lock) { /* the quick launch lets it go after the launch */
        return NULL;
    }
    pthread_mutex_lock(lock);
    return lock;
}

static void ptx_give(pthread_mutex_t *taken) {
    if (taken != NULL) {
        pthread_mutex_unlock(taken);
    }
}

void aot_cuda_let_go_quick(void *held) {
    ptx_quick_held = NULL;
    pthread_mutex_unlock((pthread_mutex_t *)held);
}

typedef int (*taichi_aot_cu_launch)(void *function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                                    unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared,
                                    void *stream, void **params, void **extra);
typedef int (*taichi_aot_cu_current)(void **context);
typedef int (*taichi_aot_cu_push)(void *context);
typedef int (*taichi_aot_cu_pop)(void **context);
typedef int (*taichi_aot_cu_sync)(void *stream);
typedef int (*taichi_aot_cu_dtoh)(void *host, uint64_t device, size_t bytes);
typedef int (*taichi_aot_cu_memset32)(uint64_t device, unsigned value, size_t count, void *stream);
typedef int (*taichi_aot_cu_capturing)(void *stream, int *status);

/* An ndarray argument's device pointer written at `at` in `params`: the argument's memory itself
   (TAICHI_AOT_POINTER_TAG: an array taken anew in C), else looked up with ti_export_cuda_memory (`exported` set). */
static void ptx_pointer(TiRuntime runtime, const TiNdArray *nd, unsigned char *params, uint32_t at, int *exported) {
    TiCudaMemoryInteropInfo info = {NULL, 0};
    if ((uintptr_t)nd->memory & TAICHI_AOT_POINTER_TAG) { /* a pointer itself (fresh.c) */
        uint64_t pointer = (uint64_t)((uintptr_t)nd->memory & ~TAICHI_AOT_POINTER_TAG);
        memcpy(params + at, &pointer, 8);
        return;
    }
    ti_export_cuda_memory(runtime, nd->memory, &info);
    *exported = 1;
    memcpy(params + at, &info.ptr, 8);
}

/* The launch parameters of the kernel's arguments (and a reverse-mode kernel's gradients after them) written
   into `params` (zeroed first); 0, or TAICHI_AOT_PLAN_BAD_ARGS where an argument is not of the kind the plan lays
   out, or the library's error code where an ndarray's memory is not its (ti_export_cuda_memory failed). */
static int ptx_pack(TiRuntime runtime, const TaichiAotCudaKernel *k, const TiArgument *args, unsigned char *params,
                    uint64_t *elements) {
    uint32_t i, gradient = k->arg_count;
    int exported = 0;
    *elements = 0;
    memset(params, 0, k->args_size);
    for (i = 0; i < k->arg_count; ++i) {
        const TaichiAotArgPlan *a = &k->args[i];
        const TiArgument *v = &args[i];
        if (a->kind == TAICHI_AOT_PLAN_NDARRAY) {
            const TiNdArray *nd = &v->value.ndarray;
            if (v->type != TI_ARGUMENT_TYPE_NDARRAY) {
                return TAICHI_AOT_PLAN_BAD_ARGS;
            }
            uint64_t count_elements = taichi_aot_plan_shape(a, nd, params);
            if (count_elements > *elements) {
                *elements = count_elements;
            }
            ptx_pointer(runtime, nd, params, a->data, &exported);
            if (a->grad != 0) { /* its gradient: the next of the arguments after the kernel's own */
                const TiNdArray *g = taichi_aot_plan_gradient(nd, args, k->arg_count + k->grad_count, &gradient);
                if (g == NULL) {
                    return TAICHI_AOT_PLAN_BAD_ARGS;
                }
                ptx_pointer(runtime, g, params, a->grad, &exported);
            }
        } else if (taichi_aot_plan_value(a, v, params) != 0) {
            return TAICHI_AOT_PLAN_BAD_ARGS;
        }
    }
    if (gradient != k->arg_count + k->grad_count) {
        return TAICHI_AOT_PLAN_BAD_ARGS;
    }
    return exported ? (int)ti_get_last_error(NULL, NULL) : 0;
}

/* After a launch that must be waited for: the stream synchronized, then a reverse kernel's autodiff stacks' flag
   read (`overflowed` set where one overflowed) and a returning kernel's results copied from the stand-in's result
   buffer into the plan's host memory. Returns 0 or the driver's CUresult. */
static int ptx_after(const TaichiAotCudaDriver *cu, void *stream, const TaichiAotCudaKernel *k, uint64_t standin,
                     int *overflowed) {
    int32_t flag = 0;
    int code = ((taichi_aot_cu_sync)cu->sync)(stream);
    if (code == 0 && k->overflow != 0) {
        code = ((taichi_aot_cu_dtoh)cu->dtoh)(&flag, k->overflow, 4);
        *overflowed = code == 0 && flag != 0;
    }
    if (code == 0 && k->result_size != 0) {
        code = ((taichi_aot_cu_dtoh)cu->dtoh)(k->result, standin + k->result_at, k->result_size);
    }
    return code;
}

/* The runtime's context made current on this thread where another library made its own current since (`*pushed`
   set then): 0, or the driver's error as the launch returns it. */
static int ptx_enter(const TaichiAotCudaDriver *cu, const TaichiAotCudaRuntime *rt, int *pushed) {
    void *current = NULL;
    int code;
    if (((taichi_aot_cu_current)cu->current)(&current) == 0 && current == rt->context) {
        return 0;
    }
    code = ((taichi_aot_cu_push)cu->push)(rt->context);
    if (code != 0) {
        return TAICHI_AOT_CUDA_ERROR - code;
    }
    *pushed = 1;
    return 0;
}

/* Where the runtime's stream is being captured into a CUDA graph (the legacy default stream never is): a launch
   that waits refused (its autodiff stacks or its results are read after it), else the capture noted (the graph
   holds the stand-in's address: Python keeps the stand-in). 0, the refusal, or the driver's error asking;
   `*capturing` set where the stream is being captured. */
static int ptx_capture(const TaichiAotCudaDriver *cu, const TaichiAotCudaRuntime *rt, const TaichiAotCudaKernel *k,
                       int *capturing) {
    int status = 0, code;
    *capturing = 0;
    if (rt->stream == NULL) {
        return 0;
    }
    code = ((taichi_aot_cu_capturing)cu->capturing)(rt->stream, &status);
    if (code != 0 || status == 0) { /* a capture active, or invalidated and not ended yet, both count */
        return code;
    }
    *capturing = 1;
    if (k->overflow != 0 || k->result_size != 0) {
        return k->overflow != 0 ? TAICHI_AOT_CUDA_CAPTURE_REFUSED : TAICHI_AOT_CUDA_RESULT_CAPTURE_REFUSED;
    }
    ((TaichiAotCudaRuntime *)rt)->captured = 1;
    return 0;
}

/* The kernel's tasks launched in order on the runtime's stream; a range_for's grid trimmed to `elements` (one
   thread an element, as the full grid gives them, fewer idle blocks). The driver's error, or 0. */
static int ptx_tasks(const TaichiAotCudaDriver *cu, const TaichiAotCudaRuntime *rt, const TaichiAotCudaKernel *k,
                     void **kernel_params, uint64_t elements) {
    uint32_t t;
    int code = 0;
    for (t = 0; t < k->task_count && code == 0; ++t) {
        const TaichiAotCudaTask *task = &k->tasks[t];
        uint32_t grid = task->grid;
        if (task->trim && elements > 0) {
            uint64_t needed = (elements + task->block - 1) / task->block;
            grid = needed < grid ? (uint32_t)needed : grid;
        }
        code = ((taichi_aot_cu_launch)cu->launch)(task->function, grid, 1, 1, task->block, 1, 1, 0, rt->stream,
                                                  kernel_params, NULL);
    }
    return code;
}

/* A launch of `k`; in a profile between two events for its record `profiled` (-1: none), their span given to
   `parent` too (a graph's record, -1: none), `*stamped` set where they were recorded. */
static int cuda_launch(TiRuntime runtime, const TaichiAotCudaKernel *k, uint32_t count, const TiArgument *args,
                       int64_t profiled, int64_t parent, int *stamped) {
    unsigned char params[TAICHI_AOT_PLAN_MAX_BYTES] __attribute__((aligned(16)));
    const TaichiAotCudaRuntime *rt = k->runtime;
    const TaichiAotCudaDriver *cu = rt->driver;
    uint64_t standin = rt->standin, elements;
    void *kernel_params[2];
    void *popped = NULL;
    pthread_mutex_t *taken;
    int code, pushed = 0, overflowed = 0, capturing = 0;
    if (count != k->arg_count + k->grad_count || k->args_size > TAICHI_AOT_PLAN_MAX_BYTES) {
        return TAICHI_AOT_PLAN_BAD_ARGS;
    }
    code = ptx_pack(runtime, k, args, params, &elements);
    if (code != 0) {
        return code;
    }
    kernel_params[0] = params;
    kernel_params[1] = &standin;
    code = ptx_enter(cu, rt, &pushed); /* the runtime's context, current on its thread as a rule */
    if (code != 0) {
        return code;
    }
    taken = ptx_take(standin);
    code = ptx_capture(cu, rt, k, &capturing);
    if (code == 0 && k->overflow != 0) { /* its autodiff stacks' flag, cleared in stream order */
        code = ((taichi_aot_cu_memset32)cu->memset)(k->overflow, 0, 1, rt->stream);
    }
    if (code == 0) {
        /* inside a profile of the runtime and not captured: between two events (backends/cudaprofile.c) */
        void *stamp = profiled >= 0 && !capturing ? aot_cuda_stamp_open(rt, profiled, parent) : NULL;
        code = ptx_tasks(cu, rt, k, kernel_params, elements);
        if (stamp != NULL) {
            *stamped = aot_cuda_stamp_close(stamp);
        }
    }
    if (code == 0 && (k->overflow != 0 || k->result_size != 0)) { /* known once it ran: a wait */
        code = ptx_after(cu, rt->stream, k, standin, &overflowed);
    }
    ptx_give(taken);
    if (pushed) {
        ((taichi_aot_cu_pop)cu->pop)(&popped);
    }
    if (code == TAICHI_AOT_CUDA_CAPTURE_REFUSED || code == TAICHI_AOT_CUDA_RESULT_CAPTURE_REFUSED) {
        return code;
    }
    if (overflowed) {
        return TAICHI_AOT_STACK_OVERFLOW;
    }
    return code != 0 ? TAICHI_AOT_CUDA_ERROR - code : 0;
}

int taichi_aot_cuda_launch(TiRuntime runtime, const TaichiAotCudaKernel *k, uint32_t count, const TiArgument *args) {
    int stamped = 0;
    return cuda_launch(runtime, k, count, args, aot_profile_current(), -1, &stamped);
}

/* A graph's dispatch: `k` with `args` on `runtime` (aot_profile_dispatch's launch; `*stamped`: its events were
   recorded). */
typedef struct {
    TiRuntime runtime;
    const TaichiAotCudaKernel *k;
    const TiArgument *args;
} CudaDispatch;

static int cuda_dispatch(void *ctx, int64_t profiled, int64_t parent, int *stamped) {
    const CudaDispatch *d = (const CudaDispatch *)ctx;
    return cuda_launch(d->runtime, d->k, d->k->arg_count, d->args, profiled, parent, stamped);
}

int taichi_aot_cuda_graph(TiRuntime runtime, const TaichiAotCudaGraph *g, uint32_t count, const TiNamedArgument *args) {
    return taichi_aot_cuda_graph_elsewhere(runtime, g, count, args, NULL);
}

int taichi_aot_cuda_graph_elsewhere(TiRuntime runtime, const TaichiAotCudaGraph *g, uint32_t count,
                                    const TiNamedArgument *args, TaichiAotCudaRuntime *own) {
    TiArgument local[TAICHI_AOT_CUDA_GRAPH_ARGS];
    TaichiAotCudaKernel elsewhere;
    CudaDispatch dispatch = {runtime, NULL, local};
    const uint32_t *map = g->maps;
    uint32_t d, i;
    int code;
    int64_t graph = aot_profile_current(); /* the profile's record of the graph (-1: none) */
    for (d = 0; d < g->dispatch_count; ++d) {
        const TaichiAotCudaKernel *k = g->kernels[d];
        if (own != NULL) { /* every dispatch with the caller's record (its stand-in, its stream) */
            elsewhere = *k;
            elsewhere.runtime = own;
            k = &elsewhere;
        }
        if (k->arg_count > TAICHI_AOT_CUDA_GRAPH_ARGS) {
            return TAICHI_AOT_PLAN_BAD_ARGS;
        }
        for (i = 0; i < k->arg_count; ++i) {
            if (map[i] >= count) {
                return TAICHI_AOT_PLAN_BAD_ARGS;
            }
            local[i] = args[map[i]].argument;
        }
        map += k->arg_count;
        dispatch.k = k;
        code = aot_profile_dispatch(graph, g->names != NULL ? g->names[d] : NULL, cuda_dispatch, &dispatch);
        if (code != 0) {
            return code;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------------------------
   The dispatcher's entries (kinds.h) */

int aot_cuda_kernel_launch(const TaichiAotLaunch *l) {
    return taichi_aot_cuda_launch(l->runtime, (const TaichiAotCudaKernel *)l->handle, l->arg_count,
                                  (const TiArgument *)l->args);
}

/* Made elsewhere with the caller's record (its stand-in), on the caller's stream; refused where the caller gives none
   (no record of the own launcher's made yet). */
int aot_cuda_kernel_elsewhere(const TaichiAotLaunch *l, const TaichiAotElsewhere *where) {
    TaichiAotCudaKernel kernel;
    if (where->own == NULL || where->own->driver == NULL) {
        return TAICHI_AOT_REFUSED;
    }
    where->own->stream = where->stream;
    kernel = *(const TaichiAotCudaKernel *)l->handle;
    kernel.runtime = where->own;
    return taichi_aot_cuda_launch(l->runtime, &kernel, l->arg_count, (const TiArgument *)l->args);
}

int aot_cuda_graph_launch(const TaichiAotLaunch *l) {
    return taichi_aot_cuda_graph_elsewhere(l->runtime, (const TaichiAotCudaGraph *)l->handle, l->arg_count,
                                           (const TiNamedArgument *)l->args, NULL);
}

/* Every dispatch with the caller's record, on the caller's stream; refused where the caller gives none. */
int aot_cuda_graph_elsewhere(const TaichiAotLaunch *l, const TaichiAotElsewhere *where) {
    if (where->own == NULL || where->own->driver == NULL) {
        return TAICHI_AOT_REFUSED;
    }
    where->own->stream = where->stream;
    return taichi_aot_cuda_graph_elsewhere(l->runtime, (const TaichiAotCudaGraph *)l->handle, l->arg_count,
                                           (const TiNamedArgument *)l->args, where->own);
}
