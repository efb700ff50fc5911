/* The runtimes' calls locks, by runtime (holds.h says whose). A hold reads the table without a lock, as a launch
   reads it: a slot's runtime is compared, then its calls are asked, and the calls' own hold says whether they are
   still that runtime's (a close, or a slot taken again, between the two is found there). Registering and forgetting
   take `holds_lock`, a leaf: nothing is called under it. */
#include <pthread.h>
#include <stddef.h>

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
