/* libtaichi's calls on a CPU runtime (x64, arm64) made one at a time, so that any thread may use the runtime.

   libtaichi_c_api 1.7.4 takes no lock of its own: its CPU runtime keeps one thread pool whose run two threads would
   share at once, one memory registry that an allocation grows under a launch reading it, and a module's caches.
   So each CPU runtime opened here (taichi_aot_cpu_calls_open, placement/host.py) has a `calls` lock, held by:
   - the launches of any thread (kinds.h's hold: libtaichi's and the own x64 launch's, which shares a kernel's
     temporaries between its launches), with the close epoch read inside (launch.c);
   - every call of libtaichi's on the runtime that enqueues, waits, allocates, imports, maps, frees or destroys, or
     loads a module, destroys it or looks up its kernels and graphs: the trampolines' slots of those functions are
     pointed at the wrappers here once, when the library is loaded (before any runtime, and before the own Vulkan
     launch wraps some of the same slots: its wrappers then call these, which pass a call on any other runtime
     through as it is).
   A call on a runtime destroyed meanwhile (another thread closed it) is refused: libtaichi's last error says so
   (INVALID_STATE), on the calling thread, never a call into the destroyed runtime (holds.c keeps the runtimes closed
   here, with this file's words). The lock is held only inside one C call, never while Python runs. A thread that
   holds it already (a launch's hold, then libtaichi's call inside) goes through with a thread-local count, not a
   second lock.

   A launch on a CPU runtime runs its kernel before it returns. The C call makes it with Python's lock kept (a quick
   launch, kinds.h) where the runtime's calls are free and its record's launches have been short: threads launching
   small kernels at once then do not hand Python's lock to each other at every launch (each hand-over costs more than
   such a launch). One that keeps that lock past TAICHI_AOT_CPU_QUICK_NS marks its record TAICHI_AOT_LAUNCH_LONG:
   its later launches let Python's lock go while the kernel runs, as every launch from Python's own path does. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "taichi_aot.h"
#include "loader.h"
#include "holds.h"
#include "cpucalls.h"

#define CPU_RUNTIMES 128
#define TAICHI_AOT_CPU_QUICK_NS 50000 /* a quick launch longer than this (50 us) lets Python's lock go after */
/* A long record's launches counted down in its flags' bits from CPU_RETRY_SHIFT up: after CPU_RETRY_EVERY of them,
   one is tried quick again (its kernel may be short again, or the long one was this thread's time taken away). */
#define CPU_RETRY_SHIFT 20
#define CPU_RETRY_EVERY 1023u

typedef struct {
    AotCalls pair;         /* its hold and let-go, registered for the open runtime (holds.h): what a hold returns */
    pthread_mutex_t calls; /* made once, never destroyed: a thread waiting on it finds the slot given up, or taken */
    TiRuntime runtime;     /* the open runtime (atomic), NULL: a free slot */
} CpuRt;
#define CPU_OF(held) ((CpuRt *)((char *)(held) - offsetof(CpuRt, pair)))

static CpuRt cpu_rts[CPU_RUNTIMES];
static pthread_mutex_t cpu_lock = PTHREAD_MUTEX_INITIALIZER; /* the registry's changes */
static int cpu_open_count = 0;                               /* read without the lock: none open, no look-up */
static int cpu_high = 0;                                     /* slots ever used: a look-up reads these */
static int cpu_hooked = 0;                                   /* the wrappers are in place */
/* What a call on a runtime closed here is refused with: holds.c keeps the runtimes closed, each with its state's
   words, as it keeps each open runtime's modules (whose destroy and look-ups hold its calls) and those destroyed. */
static const char cpu_closed_words[] = "taichi_aot: the CPU runtime was closed (on another thread)";

/* The slot whose calls this thread holds (its first hold), and how many holds deep it is. */
#define CPU_TLS __attribute__((tls_model("initial-exec"))) /* read at every launch: no __tls_get_addr call */
static __thread CpuRt *cpu_mine CPU_TLS = NULL;
static __thread uint32_t cpu_depth CPU_TLS = 0;
/* The quick launch this thread makes (its record, and when its hold began), timed when its hold ends. */
static __thread TaichiAotLaunch *cpu_quick CPU_TLS = NULL;
static __thread int64_t cpu_quick_since CPU_TLS = 0;

static int64_t cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static CpuRt *cpu_find(TiRuntime runtime) {
    int i, high;
    if (__atomic_load_n(&cpu_open_count, __ATOMIC_ACQUIRE) == 0 || runtime == TI_NULL_HANDLE) {
        return NULL;
    }
    high = __atomic_load_n(&cpu_high, __ATOMIC_ACQUIRE);
    for (i = 0; i < high; ++i) {
        if (__atomic_load_n(&cpu_rts[i].runtime, __ATOMIC_ACQUIRE) == runtime) {
            return &cpu_rts[i];
        }
    }
    return NULL;
}

/* `rt`'s calls held for this thread (its slot found for `runtime`), or NULL where it was closed meanwhile. */
static CpuRt *cpu_hold_slot(CpuRt *rt, TiRuntime runtime) {
    if (rt == NULL) {
        return NULL;
    }
    if (rt == cpu_mine) {
        ++cpu_depth;
        return rt;
    }
    pthread_mutex_lock(&rt->calls);
    if (__atomic_load_n(&rt->runtime, __ATOMIC_ACQUIRE) != runtime) { /* closed while this thread waited */
        pthread_mutex_unlock(&rt->calls);
        return NULL;
    }
    if (cpu_mine == NULL) {
        cpu_mine = rt;
        cpu_depth = 1;
    }
    return rt;
}

static void cpu_let_go(CpuRt *rt) {
    if (rt == NULL) {
        return;
    }
    if (rt == cpu_mine) {
        if (--cpu_depth > 0) {
            return;
        }
        cpu_mine = NULL;
        if (cpu_quick != NULL) { /* a quick launch's hold: a long one lets Python's lock go from now on */
            if (cpu_now() - cpu_quick_since > TAICHI_AOT_CPU_QUICK_NS) { /* its countdown is 0 here */
                __atomic_or_fetch(&cpu_quick->flags, TAICHI_AOT_LAUNCH_LONG | (CPU_RETRY_EVERY << CPU_RETRY_SHIFT),
                                  __ATOMIC_RELAXED);
            }
            cpu_quick = NULL;
        }
    }
    pthread_mutex_unlock(&rt->calls);
}

static CpuRt *cpu_hold(TiRuntime runtime) {
    CpuRt *mine = cpu_mine;
    if (mine != NULL && __atomic_load_n(&mine->runtime, __ATOMIC_RELAXED) == runtime) {
        ++cpu_depth; /* held by this thread already (a launch's hold): libtaichi's call inside it */
        return mine;
    }
    return cpu_hold_slot(cpu_find(runtime), runtime);
}

/* ---------------------------------------------------------------------------------------------------------------
   The registry */

/* A slot's hold and let-go, registered for its runtime while open (holds.h): libtaichi's launches ask them. */
static AotCalls *cpu_pair_hold(AotCalls *calls, TiRuntime runtime) {
    CpuRt *rt = CPU_OF(calls);
    if (__atomic_load_n(&rt->runtime, __ATOMIC_ACQUIRE) != runtime) { /* given up, or another runtime's since */
        return NULL;
    }
    return cpu_hold_slot(rt, runtime) != NULL ? calls : NULL;
}

static void cpu_pair_let_go(AotCalls *calls) {
    cpu_let_go(CPU_OF(calls));
}

int taichi_aot_cpu_calls_open(TiRuntime runtime) {
    int i, slot = -1;
    if (runtime == TI_NULL_HANDLE || !__atomic_load_n(&cpu_hooked, __ATOMIC_ACQUIRE)) {
        return 0; /* no wrappers: libtaichi's calls from Python would go unheld */
    }
    pthread_mutex_lock(&cpu_lock);
    for (i = 0; i < CPU_RUNTIMES && slot < 0; ++i) {
        if (__atomic_load_n(&cpu_rts[i].runtime, __ATOMIC_ACQUIRE) == runtime) {
            slot = i; /* opened already */
        }
    }
    for (i = 0; i < CPU_RUNTIMES && slot < 0; ++i) {
        if (__atomic_load_n(&cpu_rts[i].runtime, __ATOMIC_ACQUIRE) == TI_NULL_HANDLE) {
            slot = aot_holds_register(runtime, &cpu_rts[i].pair) ? i : CPU_RUNTIMES; /* else kept to its thread */
        }
        if (slot == i) {
            aot_holds_forget_closed(runtime);
            __atomic_store_n(&cpu_rts[i].runtime, runtime, __ATOMIC_RELEASE);
            if (i >= cpu_high) {
                __atomic_store_n(&cpu_high, i + 1, __ATOMIC_RELEASE);
            }
            __atomic_add_fetch(&cpu_open_count, 1, __ATOMIC_ACQ_REL);
        }
    }
    pthread_mutex_unlock(&cpu_lock);
    return slot >= 0 && slot < CPU_RUNTIMES;
}

void taichi_aot_cpu_calls_settle(TiRuntime runtime) {
    cpu_let_go(cpu_hold(runtime)); /* a launch in progress on another thread ends first */
}

int taichi_aot_cpu_calls_max(void) {
    return CPU_RUNTIMES;
}

/* ---------------------------------------------------------------------------------------------------------------
   The dispatcher's hold (kinds.h): a launch any thread may make on a CPU runtime */

void *aot_cpu_hold_calls(TiRuntime runtime) {
    CpuRt *rt = cpu_hold(runtime);
    return rt != NULL ? &rt->pair : NULL;
}

void aot_cpu_let_go_calls(void *held) {
    cpu_let_go(held != NULL ? CPU_OF(held) : NULL);
}

/* The quick hold (kinds.h) of libtaichi's launches and the own x64 launch: on a CPU runtime any thread uses, its
   calls taken where no thread has them and the record's launches have been short (1, `*held` set; the hold's end
   times the launch); anything else busy (0): a GPU runtime's libtaichi launch, a long record, a call under way. */
int aot_cpu_quick_hold(const TaichiAotLaunch *l, int hold, void **held) {
    TaichiAotLaunch *record = (TaichiAotLaunch *)l; /* the record's memory is Python's, writable: const to launches */
    uint32_t flags = __atomic_load_n(&record->flags, __ATOMIC_RELAXED);
    CpuRt *rt;
    *held = NULL;
    if (!hold || cpu_mine != NULL) {
        return 0;
    }
    if ((flags & TAICHI_AOT_LAUNCH_LONG) != 0) {
        if ((flags >> CPU_RETRY_SHIFT) != 0) {
            __atomic_sub_fetch(&record->flags, 1u << CPU_RETRY_SHIFT, __ATOMIC_RELAXED);
            return 0;
        }
        __atomic_and_fetch(&record->flags, ~(uint32_t)TAICHI_AOT_LAUNCH_LONG, __ATOMIC_RELAXED); /* tried again */
    }
    rt = cpu_find(l->runtime);
    if (rt == NULL || pthread_mutex_trylock(&rt->calls) != 0) {
        return 0;
    }
    if (__atomic_load_n(&rt->runtime, __ATOMIC_ACQUIRE) != l->runtime) { /* closed meanwhile */
        pthread_mutex_unlock(&rt->calls);
        return 0;
    }
    cpu_mine = rt;
    cpu_depth = 1;
    cpu_quick = record;
    cpu_quick_since = cpu_now();
    *held = &rt->pair; /* what aot_cpu_let_go_calls and aot_holds_let_go (libtaichi's kinds) take */
    return 1;
}

/* ---------------------------------------------------------------------------------------------------------------
   libtaichi's calls on a CPU runtime, one at a time */

#define CPU_WRAPPED(X)                                                                                     \
    X(create_runtime, ti_create_runtime) X(destroy_runtime, ti_destroy_runtime)                            \
    X(launch_kernel, ti_launch_kernel) X(launch_graph, ti_launch_compute_graph)                            \
    X(copy_memory, ti_copy_memory_device_to_device) X(flush, ti_flush) X(wait, ti_wait)                    \
    X(allocate_memory, ti_allocate_memory) X(free_memory, ti_free_memory) X(map_memory, ti_map_memory)     \
    X(unmap_memory, ti_unmap_memory) X(import_memory, ti_import_cpu_memory)                                \
    X(load_module, ti_load_aot_module) X(create_module, ti_create_aot_module)                              \
    X(destroy_module, ti_destroy_aot_module) X(module_kernel, ti_get_aot_module_kernel)                    \
    X(module_graph, ti_get_aot_module_compute_graph)

static struct {
#define CPU_REAL(field, name) __typeof__(&name) field;
    CPU_WRAPPED(CPU_REAL)
#undef CPU_REAL
} cpu_real;

/* A wrapper's entry: the runtime's calls held (`rt`; NULL: not a CPU runtime opened here), or, where another thread
   closed it, the call refused (libtaichi's last error says so) and `refused` returned. */
#define CPU_ENTER(rt, runtime, refused)                                \
    CpuRt *rt = cpu_hold(runtime);                                     \
    if (rt == NULL && aot_holds_refused(runtime, cpu_closed_words)) { \
        return refused;                                                \
    }

/* A wrapper of a call on a runtime that returns nothing: `params` its parameters (the runtime named `runtime`),
   `args` the same names passed on. */
#define CPU_VOID(field, params, args) \
    static void cpu_##field params {  \
        CPU_ENTER(rt, runtime, )      \
        cpu_real.field args;          \
        cpu_let_go(rt);               \
    }

/* The same for a call that returns a value of `type` (`refused`: what a refused call returns). */
#define CPU_VALUE(field, type, refused, params, args) \
    static type cpu_##field params {                  \
        CPU_ENTER(rt, runtime, refused)               \
        type made = cpu_real.field args;              \
        cpu_let_go(rt);                               \
        return made;                                  \
    }

CPU_VOID(launch_kernel, (TiRuntime runtime, TiKernel kernel, uint32_t n, const TiArgument *args),
         (runtime, kernel, n, args))
CPU_VOID(launch_graph, (TiRuntime runtime, TiComputeGraph graph, uint32_t n, const TiNamedArgument *args),
         (runtime, graph, n, args))
CPU_VOID(copy_memory, (TiRuntime runtime, const TiMemorySlice *dst, const TiMemorySlice *src), (runtime, dst, src))
CPU_VOID(flush, (TiRuntime runtime), (runtime))
CPU_VOID(wait, (TiRuntime runtime), (runtime))
CPU_VOID(free_memory, (TiRuntime runtime, TiMemory memory), (runtime, memory))
CPU_VOID(unmap_memory, (TiRuntime runtime, TiMemory memory), (runtime, memory))
CPU_VALUE(allocate_memory, TiMemory, TI_NULL_HANDLE, (TiRuntime runtime, const TiMemoryAllocateInfo *info),
          (runtime, info))
CPU_VALUE(map_memory, void *, NULL, (TiRuntime runtime, TiMemory memory), (runtime, memory))
CPU_VALUE(import_memory, TiMemory, TI_NULL_HANDLE, (TiRuntime runtime, void *memory, uint64_t size),
          (runtime, memory, size))

/* A module loaded: noted as the runtime's (holds.c), whose calls its destroy and look-ups then hold. */
static TiAotModule cpu_load_module(TiRuntime runtime, const char *path) {
    CPU_ENTER(rt, runtime, TI_NULL_HANDLE)
    return aot_holds_loaded(rt != NULL ? &rt->pair : NULL, runtime, cpu_real.load_module(runtime, path));
}

static TiAotModule cpu_create_module(TiRuntime runtime, const void *data, uint64_t size) {
    CPU_ENTER(rt, runtime, TI_NULL_HANDLE)
    return aot_holds_loaded(rt != NULL ? &rt->pair : NULL, runtime, cpu_real.create_module(runtime, data, size));
}

/* A module destroyed with its runtime's calls held (whichever backend registered them: the own Vulkan launch's
   wrapper calls this one), and forgotten after, so that the wrapper around this one still finds it. */
static void cpu_destroy_module(TiAotModule module) {
    int gone;
    void *held = aot_holds_hold_module(module, &gone);
    if (gone) {
        return;
    }
    cpu_real.destroy_module(module);
    aot_holds_forget_module(module);
    aot_holds_let_go(held);
}

/* A look-up of a module's kernel or graph (libtaichi fills the module's caches as it looks up) of `type`. */
#define CPU_LOOKUP(field, type)                                                     \
    static type cpu_##field(TiAotModule module, const char *name) {                 \
        int gone;                                                                   \
        void *held = aot_holds_hold_module(module, &gone);                          \
        type found = gone ? TI_NULL_HANDLE : cpu_real.field(module, name);          \
        aot_holds_let_go(held);                                                     \
        return found;                                                               \
    }

CPU_LOOKUP(module_kernel, TiKernel)
CPU_LOOKUP(module_graph, TiComputeGraph)

/* The runtime destroyed with its calls held throughout: a call another thread is in ends first, and one it makes
   after finds the slot given up and is refused (the runtime noted closed before the slot is given up). */
static void cpu_destroy_runtime(TiRuntime runtime) {
    CpuRt *rt = cpu_hold(runtime);
    if (rt != NULL) {
        pthread_mutex_lock(&cpu_lock);
        aot_holds_note_closed(runtime, cpu_closed_words);
        aot_holds_forget(runtime, &rt->pair);
        __atomic_store_n(&rt->runtime, TI_NULL_HANDLE, __ATOMIC_RELEASE);
        __atomic_sub_fetch(&cpu_open_count, 1, __ATOMIC_ACQ_REL);
        pthread_mutex_unlock(&cpu_lock);
        aot_holds_forget_modules(runtime);
    } else if (aot_holds_refused(runtime, cpu_closed_words)) {
        return; /* destroyed already, on another thread */
    }
    cpu_real.destroy_runtime(runtime);
    cpu_let_go(rt);
}

/* A runtime made: a closed one's address noted before is another's now. */
static TiRuntime cpu_create_runtime(TiArch arch, uint32_t device_index) {
    TiRuntime made = cpu_real.create_runtime(arch, device_index);
    aot_holds_forget_closed(made);
    return made;
}

/* One trampoline's slot pointed at `wrapper`, its function kept in `*real`. */
static int cpu_hook_one(const char *name, void **real, void *wrapper) {
    void **slot = taichi_aot_symbol_slot(name);
    if (slot == NULL || *slot == NULL) {
        return 0;
    }
    *real = *slot;
    __atomic_store_n(slot, wrapper, __ATOMIC_RELEASE);
    return 1;
}

static void cpu_hook_all(void) {
    pthread_mutexattr_t recursive;
    int i, all = 1;
    pthread_mutexattr_init(&recursive);
    pthread_mutexattr_settype(&recursive, PTHREAD_MUTEX_RECURSIVE);
    for (i = 0; i < CPU_RUNTIMES; ++i) {
        pthread_mutex_init(&cpu_rts[i].calls, &recursive);
        cpu_rts[i].pair.hold = cpu_pair_hold;
        cpu_rts[i].pair.let_go = cpu_pair_let_go;
    }
    pthread_mutexattr_destroy(&recursive);
#define CPU_HOOK(field, name) all &= cpu_hook_one(#name, (void **)&cpu_real.field, (void *)cpu_##field);
    CPU_WRAPPED(CPU_HOOK)
#undef CPU_HOOK
    __atomic_store_n(&cpu_hooked, all, __ATOMIC_RELEASE); /* else a runtime opened here would have calls unheld */
}

/* The wrappers in place, once, after the library is loaded and before its first runtime (_library.py); whether they
   are (a runtime opened without them keeps to its thread). */
int taichi_aot_cpu_calls_hook(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, cpu_hook_all);
    return __atomic_load_n(&cpu_hooked, __ATOMIC_ACQUIRE);
}
