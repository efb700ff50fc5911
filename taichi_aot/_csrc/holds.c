/* The runtimes' calls locks, by runtime (holds.h says whose). A hold reads the table without a lock, as a launch
   reads it: a slot's runtime is compared, then its calls are asked, and the calls' own hold says whether they are
   still that runtime's (a close, or a slot taken again, between the two is found there). Registering and forgetting
   take `holds_lock`, a leaf: nothing is called under it. Below, the modules of those runtimes, by module, and the
   runtimes closed, by runtime. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "taichi_aot.h"
#include "holds.h"

typedef struct {
    TiRuntime runtime; /* atomic; NULL: a free slot */
    AotCalls *calls;   /* atomic: stored before its runtime, cleared after */
} AotHoldSlot;

static AotHoldSlot holds[AOT_HOLDS_MAX];
static pthread_mutex_t holds_lock = PTHREAD_MUTEX_INITIALIZER;
static int holds_count = 0; /* registered now (atomic): none, no look-up */
static int holds_high = 0;  /* slots ever used (atomic): a look-up reads these */

int aot_holds_register(TiRuntime runtime, AotCalls *calls) {
    int i, free_slot = -1, found = -1, registered;
    if (runtime == TI_NULL_HANDLE || calls == NULL) {
        return 0;
    }
    pthread_mutex_lock(&holds_lock);
    for (i = 0; i < AOT_HOLDS_MAX && found < 0; ++i) {
        if (holds[i].runtime == runtime) {
            found = i;
        } else if (holds[i].runtime == TI_NULL_HANDLE && free_slot < 0) {
            free_slot = i;
        }
    }
    if (found < 0 && free_slot >= 0) {
        __atomic_store_n(&holds[free_slot].calls, calls, __ATOMIC_RELEASE);
        __atomic_store_n(&holds[free_slot].runtime, runtime, __ATOMIC_RELEASE);
        if (free_slot >= holds_high) {
            __atomic_store_n(&holds_high, free_slot + 1, __ATOMIC_RELEASE);
        }
        __atomic_add_fetch(&holds_count, 1, __ATOMIC_ACQ_REL);
    }
    registered = found >= 0 ? holds[found].calls == calls : free_slot >= 0;
    pthread_mutex_unlock(&holds_lock);
    return registered;
}

void aot_holds_forget(TiRuntime runtime, AotCalls *calls) {
    int i;
    pthread_mutex_lock(&holds_lock);
    for (i = 0; i < holds_high; ++i) {
        if (holds[i].runtime == runtime && holds[i].calls == calls) {
            __atomic_store_n(&holds[i].runtime, TI_NULL_HANDLE, __ATOMIC_RELEASE);
            __atomic_store_n(&holds[i].calls, NULL, __ATOMIC_RELEASE);
            __atomic_sub_fetch(&holds_count, 1, __ATOMIC_ACQ_REL);
        }
    }
    pthread_mutex_unlock(&holds_lock);
}

void *aot_holds_hold(TiRuntime runtime) {
    int i, high;
    if (__atomic_load_n(&holds_count, __ATOMIC_ACQUIRE) == 0 || runtime == TI_NULL_HANDLE) {
        return NULL;
    }
    high = __atomic_load_n(&holds_high, __ATOMIC_ACQUIRE);
    for (i = 0; i < high; ++i) {
        if (__atomic_load_n(&holds[i].runtime, __ATOMIC_ACQUIRE) == runtime) {
            AotCalls *calls = __atomic_load_n(&holds[i].calls, __ATOMIC_ACQUIRE);
            return calls != NULL ? calls->hold(calls, runtime) : NULL;
        }
    }
    return NULL;
}

void aot_holds_let_go(void *held) {
    if (held != NULL) {
        AotCalls *calls = (AotCalls *)held;
        calls->let_go(calls);
    }
}

/* ---------------------------------------------------------------------------------------------------------------
   A module's runtime: a module's destroy and its look-ups (libtaichi fills a module's caches as it looks up) hold the
   calls of the runtime it was loaded on, so that a launch of its kernels on another thread comes wholly before. The
   modules of a runtime with calls registered, under `holds_lock`; those destroyed (alone or with their runtime) kept
   until a module is loaded at the same address again: a look-up or destroy on one is refused, not made on libtaichi's
   destroyed module. */

typedef struct {
    TiAotModule module;
    TiRuntime runtime;
} AotHeldModule;

static AotHeldModule *held_modules = NULL;
static uint32_t held_module_count = 0, held_module_cap = 0; /* the count atomic: none, and none gone, no look-up */
#define AOT_GONE_MODULES 512
static TiAotModule gone_modules[AOT_GONE_MODULES];
static int gone_next = 0;
static int gone_count = 0; /* atomic */

static void holds_note_module(TiAotModule module, TiRuntime runtime) { /* under holds_lock */
    if (held_module_count == held_module_cap) {
        uint32_t cap = held_module_cap ? held_module_cap * 2 : 16;
        AotHeldModule *grown = (AotHeldModule *)realloc(held_modules, cap * sizeof(AotHeldModule));
        if (grown != NULL) {
            held_modules = grown;
            held_module_cap = cap;
        }
    }
    if (held_module_count < held_module_cap) { /* else, out of memory: its destroy holds no calls */
        held_modules[held_module_count].module = module;
        held_modules[held_module_count].runtime = runtime;
        __atomic_add_fetch(&held_module_count, 1, __ATOMIC_ACQ_REL);
    }
}

TiAotModule aot_holds_loaded(void *held, TiRuntime runtime, TiAotModule made) {
    int i;
    if (made != TI_NULL_HANDLE) {
        pthread_mutex_lock(&holds_lock);
        for (i = 0; gone_count > 0 && i < AOT_GONE_MODULES; ++i) { /* its address another module's now */
            if (gone_modules[i] == made) {
                gone_modules[i] = TI_NULL_HANDLE;
            }
        }
        if (held != NULL) {
            holds_note_module(made, runtime);
        }
        pthread_mutex_unlock(&holds_lock);
    }
    aot_holds_let_go(held);
    return made;
}

/* Module `module` forgotten as destroyed, or every module of `runtime` (`module` NULL). */
static void holds_forget_modules(TiAotModule module, TiRuntime runtime) {
    uint32_t i = 0;
    pthread_mutex_lock(&holds_lock);
    while (i < held_module_count) {
        if (module != TI_NULL_HANDLE ? held_modules[i].module == module : held_modules[i].runtime == runtime) {
            gone_modules[gone_next] = held_modules[i].module;
            gone_next = (gone_next + 1) % AOT_GONE_MODULES;
            if (gone_count < AOT_GONE_MODULES) {
                __atomic_add_fetch(&gone_count, 1, __ATOMIC_ACQ_REL);
            }
            held_modules[i] = held_modules[held_module_count - 1];
            __atomic_sub_fetch(&held_module_count, 1, __ATOMIC_ACQ_REL);
        } else {
            ++i;
        }
    }
    pthread_mutex_unlock(&holds_lock);
}

void aot_holds_forget_module(TiAotModule module) {
    if (module != TI_NULL_HANDLE) {
        holds_forget_modules(module, TI_NULL_HANDLE);
    }
}

void aot_holds_forget_modules(TiRuntime runtime) {
    if (runtime != TI_NULL_HANDLE) {
        holds_forget_modules(TI_NULL_HANDLE, runtime);
    }
}

/* The runtime module `module` was loaded on (NULL: none noted has it); `*gone` set where it was destroyed. */
static TiRuntime holds_module_runtime(TiAotModule module, int *gone) {
    TiRuntime found = TI_NULL_HANDLE;
    uint32_t i;
    *gone = 0;
    if (__atomic_load_n(&held_module_count, __ATOMIC_ACQUIRE) == 0 &&
        __atomic_load_n(&gone_count, __ATOMIC_ACQUIRE) == 0) {
        return TI_NULL_HANDLE;
    }
    pthread_mutex_lock(&holds_lock);
    for (i = 0; i < held_module_count && found == TI_NULL_HANDLE; ++i) {
        if (held_modules[i].module == module) {
            found = held_modules[i].runtime;
        }
    }
    for (i = 0; found == TI_NULL_HANDLE && gone_count > 0 && i < AOT_GONE_MODULES && !*gone; ++i) {
        *gone = gone_modules[i] == module;
    }
    pthread_mutex_unlock(&holds_lock);
    return found;
}

void *aot_holds_hold_module(TiAotModule module, int *gone) {
    int destroyed, again;
    TiRuntime runtime = holds_module_runtime(module, &destroyed);
    void *held = runtime != TI_NULL_HANDLE ? aot_holds_hold(runtime) : NULL;
    *gone = destroyed ||
            (runtime != TI_NULL_HANDLE && (held == NULL || holds_module_runtime(module, &again) != runtime));
    if (*gone) {
        aot_holds_let_go(held);
        ti_set_last_error(TI_ERROR_INVALID_STATE, "taichi_aot: the module was destroyed (on another thread)");
        return NULL;
    }
    return held;
}

/* ---------------------------------------------------------------------------------------------------------------
   The runtimes closed: one ring, under `holds_lock`, of the CPU calls states' closes and the Vulkan states', each
   with its state's words. A state notes a close under its registry's lock (backends/cpucalls.c's cpu_lock,
   backends/vkqueue.c's aot_vk_lock), as it forgets its calls here, and its wrappers ask with at most a runtime's
   calls held: the order is a runtime's calls, then the registry's lock, then `holds_lock`, never the reverse. */

typedef struct {
    TiRuntime runtime; /* NULL: forgotten, or never used */
    const char *words; /* the closing state's: its refusals' message */
} AotClosed;

static AotClosed holds_closed[AOT_HOLDS_CLOSED];
static int holds_closed_next = 0;
static int holds_closed_count = 0; /* slots filled (atomic): none, no look-up */

void aot_holds_note_closed(TiRuntime runtime, const char *words) {
    pthread_mutex_lock(&holds_lock);
    holds_closed[holds_closed_next].runtime = runtime;
    holds_closed[holds_closed_next].words = words;
    holds_closed_next = (holds_closed_next + 1) % AOT_HOLDS_CLOSED;
    if (holds_closed_count < AOT_HOLDS_CLOSED) {
        __atomic_add_fetch(&holds_closed_count, 1, __ATOMIC_ACQ_REL);
    }
    pthread_mutex_unlock(&holds_lock);
}

int aot_holds_refused(TiRuntime runtime, const char *words) {
    int i, found = 0;
    if (__atomic_load_n(&holds_closed_count, __ATOMIC_ACQUIRE) == 0 || runtime == TI_NULL_HANDLE) {
        return 0;
    }
    pthread_mutex_lock(&holds_lock);
    for (i = 0; i < AOT_HOLDS_CLOSED && !found; ++i) {
        found = holds_closed[i].runtime == runtime && holds_closed[i].words == words;
    }
    pthread_mutex_unlock(&holds_lock);
    if (found) {
        ti_set_last_error(TI_ERROR_INVALID_STATE, words);
    }
    return found;
}

void aot_holds_forget_closed(TiRuntime runtime) {
    int i;
    if (runtime == TI_NULL_HANDLE || __atomic_load_n(&holds_closed_count, __ATOMIC_ACQUIRE) == 0) {
        return;
    }
    pthread_mutex_lock(&holds_lock);
    for (i = 0; i < AOT_HOLDS_CLOSED; ++i) {
        if (holds_closed[i].runtime == runtime) {
            holds_closed[i].runtime = TI_NULL_HANDLE;
        }
    }
    pthread_mutex_unlock(&holds_lock);
}
