/* Kernels of an x64 module launched without libtaichi_c_api: reverse-mode (autodiff) kernels, whose argument struct
   holds a gradient pointer beside each ndarray's data pointer, which libtaichi's TiNdArray cannot fill.

   _cpu_launch.py compiles the kernel's IR (the module's NAME.ll, self-contained: Taichi's helpers are inlined) with
   llvmlite and hands over its tasks' addresses; a launch runs them in order on a RuntimeContext of the argument
   struct and a stand-in for Taichi's LLVMRuntime, which holds the temporaries a serial task leaves for the next
   and, as its parallel_for, taichi_aot_cpu_parallel_for: a range-for task hands it its splits. */

typedef void (*TaichiAotCpuTask)(void *context);
typedef void (*TaichiAotCpuSplit)(void *context, int32_t thread, int32_t split);

typedef struct {
    void *args;
    void *runtime;
    int32_t cpu_thread_id;
    int64_t *result_buffer;
} TaichiAotCpuContext; /* Taichi 1.7.4's RuntimeContext on x86-64 */

/* LLVMRuntime's parallel_for: every split of a range-for task, in order, on the calling thread. */
static void taichi_aot_cpu_parallel_for(void *pool, int32_t splits, int32_t threads, void *context,
                                        TaichiAotCpuSplit task) {
    int32_t i;
    (void)pool;
    (void)threads;
    for (i = 0; i < splits; ++i) {
        task(context, 0, i);
    }
}

void *taichi_aot_cpu_parallel_for_address(void) {
    return (void *)&taichi_aot_cpu_parallel_for;
}

void taichi_aot_cpu_launch(void *standin, void *args, void *const *tasks, uint32_t count) {
    TaichiAotCpuContext context = {args, standin, 0, NULL};
    uint32_t i;
    for (i = 0; i < count; ++i) {
        ((TaichiAotCpuTask)tasks[i])(&context);
    }
}
