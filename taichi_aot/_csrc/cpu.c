/* Kernels of an x64 module launched without libtaichi_c_api: reverse-mode (autodiff) kernels, whose argument struct
   holds a gradient pointer beside each ndarray's data pointer, which libtaichi's TiNdArray cannot fill.

   backends/cpu.py compiles the kernel's IR (the module's NAME.ll, self-contained: Taichi's helpers are inlined) with
   llvmlite and hands over its tasks' addresses; a launch runs them in order on a RuntimeContext of the argument
   struct and a stand-in for Taichi's LLVMRuntime, which holds the temporaries a serial task leaves for the next,
   as its thread_pool a pointer to an int32, how many threads a launch may use, and, as its parallel_for,
   taichi_aot_cpu_parallel_for: a range-for task hands it its splits, which threads of its own take in turn. */

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

void taichi_aot_cpu_launch(const TaichiAotCpuKernel *kernel, void *args) {
    TaichiAotCpuContext context = {args, kernel->standin, 0, NULL};
    uint32_t i;
    for (i = 0; i < kernel->count; ++i) {
        ((TaichiAotCpuTask)kernel->tasks[i])(&context);
    }
}
