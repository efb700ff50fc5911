/* Kernels of an x64 module launched without libtaichi_c_api: those libtaichi's C-API cannot give all they need, as a
   reverse-mode (autodiff) kernel, whose argument struct holds a gradient pointer beside each ndarray's data pointer,
   which libtaichi's TiNdArray cannot fill (its gradients are passed after its arguments, as the CUDA launcher's).

   backends/cpu.py compiles the kernel's IR (the module's NAME.ll, self-contained: Taichi's helpers are inlined) with
   llvmlite and hands over its tasks' addresses; a launch runs them in order on a RuntimeContext of the argument
   struct and a stand-in for Taichi's LLVMRuntime, which holds the temporaries a serial task leaves for the next,
   as its thread_pool a pointer to an int32, how many threads a launch may use, and, as its parallel_for,
   taichi_aot_cpu_parallel_for: a range-for task hands it its splits, which threads of its own take in turn. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "taichi_aot.h"
#include "backends/plan.h"
#include "x64.h"
#include "cpucalls.h"

typedef void (*TaichiAotCpuTask)(void *context);
typedef void (*TaichiAotCpuSplit)(void *context, int32_t thread, int32_t split);

typedef struct {
    void *args;
    void *runtime;
    int32_t cpu_thread_id;
    int64_t *result_buffer;
} TaichiAotCpuContext; /* Taichi 1.7.4's RuntimeContext on x86-64 */

#define TAICHI_AOT_CPU_MAX_THREADS 256

typedef struct {
    TaichiAotCpuSplit task;
    void *context;
    int32_t splits;
    int32_t next; /* the next split to take (atomically) */
} TaichiAotCpuJob;

typedef struct {
    TaichiAotCpuJob *job;
    int32_t thread;
} TaichiAotCpuWorker;

static void *taichi_aot_cpu_work(void *p) {
    TaichiAotCpuWorker *w = (TaichiAotCpuWorker *)p;
    TaichiAotCpuJob *job = w->job;
    int32_t i;
    while ((i = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED)) < job->splits) {
        job->task(job->context, w->thread, i);
    }
    return NULL;
}

/* LLVMRuntime's parallel_for: the splits of a range-for task over at most the kernel's threads (Taichi compiled the
   count in), the pool's (the runtime's CPU threads) and the splits, the calling thread one of them. A thread that
   cannot be started leaves its share to the others. */
static void taichi_aot_cpu_parallel_for(void *pool, int32_t splits, int32_t threads, void *context,
                                        TaichiAotCpuSplit task) {
    TaichiAotCpuJob job = {task, context, splits, 0};
    TaichiAotCpuWorker workers[TAICHI_AOT_CPU_MAX_THREADS];
    pthread_t ids[TAICHI_AOT_CPU_MAX_THREADS];
    int32_t n = threads, started = 0, t;
    int32_t most = pool != NULL ? *(const int32_t *)pool : 1;
    if (splits <= 0) return; /* an empty range */
    if (most < n) n = most;
    if (splits < n) n = splits;
    if (n > TAICHI_AOT_CPU_MAX_THREADS) n = TAICHI_AOT_CPU_MAX_THREADS;
    if (n < 1) n = 1;
    for (t = 0; t < n; ++t) {
        workers[t].job = &job;
        workers[t].thread = t;
    }
    for (t = 1; t < n; ++t) {
        if (pthread_create(&ids[started], NULL, taichi_aot_cpu_work, &workers[t]) != 0) break;
        ++started;
    }
    taichi_aot_cpu_work(&workers[0]);
    for (t = 0; t < started; ++t) {
        pthread_join(ids[t], NULL);
    }
}

void *taichi_aot_cpu_parallel_for_address(void) {
    return (void *)&taichi_aot_cpu_parallel_for;
}

/* The values of this thread's last launch of a kernel that returns them (taichi_aot_cpu_values), and its kernel: in
   memory of the thread's, made at its first such launch and freed when it ends (a dlopened library's thread-local
   storage is a few bytes: a pointer here). */
static __thread const TaichiAotCpuKernel *cpu_values_of;
static __thread int64_t *cpu_values;
static pthread_key_t cpu_values_key;
static pthread_once_t cpu_values_once = PTHREAD_ONCE_INIT;

static void cpu_values_key_make(void) {
    pthread_key_create(&cpu_values_key, free);
}

/* `k`'s values copied for this thread (its runtime's calls held, as they were while its tasks wrote them). */
static void cpu_keep_values(const TaichiAotCpuKernel *k) {
    if (k->result == NULL || k->result_size > TAICHI_AOT_CPU_VALUES_BYTES) {
        return;
    }
    if (cpu_values == NULL) {
        pthread_once(&cpu_values_once, cpu_values_key_make);
        cpu_values = (int64_t *)malloc(TAICHI_AOT_CPU_VALUES_BYTES);
        if (cpu_values == NULL) {
            return;
        }
        pthread_setspecific(cpu_values_key, cpu_values);
    }
    memcpy(cpu_values, k->result, k->result_size);
    cpu_values_of = k;
}

const void *taichi_aot_cpu_values(const TaichiAotCpuKernel *kernel) {
    return cpu_values_of == kernel && cpu_values != NULL ? (const void *)cpu_values : kernel->result;
}

static void cpu_run(const TaichiAotCpuKernel *kernel, void *args) {
    TaichiAotCpuContext context = {args, kernel->standin, 0, (int64_t *)kernel->result};
    uint32_t i;
    for (i = 0; i < kernel->count; ++i) {
        ((TaichiAotCpuTask)kernel->tasks[i])(&context);
    }
}

/* An ndarray argument's host address: the argument's memory itself (TAICHI_AOT_POINTER_TAG: an array taken anew
   in C), else libtaichi's memory mapped (on x64 its address; unmapping it is a no-op); 0 where it is not the
   library's (its error is left in the library's slot). */
static uint64_t cpu_address(TiRuntime runtime, const TiNdArray *nd) {
    void *mapped;
    if ((uintptr_t)nd->memory & TAICHI_AOT_POINTER_TAG) {
        return (uint64_t)((uintptr_t)nd->memory & ~TAICHI_AOT_POINTER_TAG);
    }
    mapped = ti_map_memory(runtime, nd->memory);
    if (mapped != NULL) {
        ti_unmap_memory(runtime, nd->memory);
    }
    return (uint64_t)(uintptr_t)mapped;
}

/* An ndarray's host address written at `at` in `params`; 0, or the library's error (else TAICHI_AOT_PLAN_BAD_ARGS)
   where its memory is not the library's. */
static int cpu_pointer(TiRuntime runtime, const TiNdArray *nd, unsigned char *params, uint32_t at) {
    uint64_t address = cpu_address(runtime, nd);
    if (address == 0) {
        int error = (int)ti_get_last_error(NULL, NULL);
        return error != 0 ? error : TAICHI_AOT_PLAN_BAD_ARGS;
    }
    memcpy(params + at, &address, 8);
    return 0;
}

int taichi_aot_cpu_call(TiRuntime runtime, const TaichiAotCpuKernel *k, uint32_t count, const TiArgument *args) {
    unsigned char params[TAICHI_AOT_PLAN_MAX_BYTES] __attribute__((aligned(16)));
    uint32_t i, gradient = k->arg_count, end = k->arg_count + k->grad_count;
    int code;
    if (count != end || k->args_size > TAICHI_AOT_PLAN_MAX_BYTES) {
        return TAICHI_AOT_PLAN_BAD_ARGS;
    }
    memset(params, 0, k->args_size);
    for (i = 0; i < k->arg_count; ++i) {
        const TaichiAotArgPlan *a = &k->args[i];
        const TiArgument *v = &args[i];
        if (a->kind == TAICHI_AOT_PLAN_NDARRAY) {
            const TiNdArray *nd = &v->value.ndarray;
            if (v->type != TI_ARGUMENT_TYPE_NDARRAY) {
                return TAICHI_AOT_PLAN_BAD_ARGS;
            }
            taichi_aot_plan_shape(a, nd, params);
            if ((code = cpu_pointer(runtime, nd, params, a->data)) != 0) {
                return code;
            }
            if (a->grad != 0) { /* its gradient: the next of the arguments after the kernel's own */
                const TiNdArray *g = taichi_aot_plan_gradient(nd, args, end, &gradient);
                if (g == NULL) {
                    return TAICHI_AOT_PLAN_BAD_ARGS;
                }
                if ((code = cpu_pointer(runtime, g, params, a->grad)) != 0) {
                    return code;
                }
            }
        } else if (taichi_aot_plan_value(a, v, params) != 0) {
            return TAICHI_AOT_PLAN_BAD_ARGS;
        }
    }
    if (gradient != end) {
        return TAICHI_AOT_PLAN_BAD_ARGS;
    }
    cpu_run(k, params);
    cpu_keep_values(k);
    if (k->overflow != NULL && __atomic_exchange_n(k->overflow, 0, __ATOMIC_RELAXED) != 0) {
        return TAICHI_AOT_STACK_OVERFLOW;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------------------------
   The dispatcher's entries (kinds.h): the call runs on this thread wherever it is made. A kernel's temporaries and
   result memory are one for all its launches: a launch any thread makes holds its runtime's calls (the dispatcher's
   hold, backends/cpucalls.c), and so does one made elsewhere (torch's autograd, XLA's handler). */

int aot_cpu_call_launch(const TaichiAotLaunch *l) {
    return taichi_aot_cpu_call(l->runtime, (const TaichiAotCpuKernel *)l->handle, l->arg_count,
                               (const TiArgument *)l->args);
}

const void *aot_cpu_call_values(const void *handle) {
    return taichi_aot_cpu_values((const TaichiAotCpuKernel *)handle);
}

int aot_cpu_call_elsewhere(const TaichiAotLaunch *l, const TaichiAotElsewhere *where) {
    void *held = aot_cpu_hold_calls(l->runtime);
    int code;
    (void)where;
    code = aot_cpu_call_launch(l);
    aot_cpu_let_go_calls(held);
    return code;
}
