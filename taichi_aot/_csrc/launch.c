/* The dispatcher: every launch, of every launch backend, is made here, through its kind's entries (kinds.h: each
   backend gives its own, kinds.c lists them; this file names none).
   Launches from Python in one C call: the close-epoch and thread check, the launch and its error code
   (taichi_aot_launch); recorded sequences replayed with no Python in between (taichi_aot_replay); launches made
   elsewhere than the runtime's thread and stream (taichi_aot_launch_elsewhere: XLA's handler, torch's autograd). Each
   of them, where NVTX ranges are on, inside a range named for its kernel or graph (launch_any). What it asks of the
   C-API is what every runtime has, whichever backend launches on it: the runtime's wait (taichi_aot_runtime_wait) and
   the thread's error slot (where a replay finds an error its launches' codes did not give). */
#include <pthread.h>

#include "taichi_aot.h"
#include "kinds.h"
#include "profile.h"

/* Bumped by Python whenever a native object is closed. */
int64_t taichi_aot_epoch = 0;
int32_t taichi_aot_coming = 0;
static __thread int taichi_aot_marked = 0; /* this thread is counted in taichi_aot_coming */
static pthread_key_t taichi_aot_mark_key;   /* its destructor unmarks a thread that ends marked */
static pthread_once_t taichi_aot_mark_once = PTHREAD_ONCE_INIT;

static void taichi_aot_mark_gone(void *marked) {
    if (marked != NULL) {
        __atomic_sub_fetch(&taichi_aot_coming, 1, __ATOMIC_ACQ_REL);
    }
}

static void taichi_aot_mark_key_make(void) {
    pthread_key_create(&taichi_aot_mark_key, taichi_aot_mark_gone);
}

void taichi_aot_coming_back(void) {
    if (!taichi_aot_marked) {
        pthread_once(&taichi_aot_mark_once, taichi_aot_mark_key_make);
        taichi_aot_marked = 1;
        __atomic_add_fetch(&taichi_aot_coming, 1, __ATOMIC_ACQ_REL);
        pthread_setspecific(taichi_aot_mark_key, &taichi_aot_marked);
    }
}

void taichi_aot_came_back(void) {
    if (taichi_aot_marked) {
        taichi_aot_marked = 0;
        pthread_setspecific(taichi_aot_mark_key, NULL);
        __atomic_sub_fetch(&taichi_aot_coming, 1, __ATOMIC_ACQ_REL);
    }
}

/* Whether a launch holds its runtime's calls: a runtime any thread uses, of a kind that holds them (its entry's hold:
   kinds.h). */
static int holds_calls(const TaichiAotLaunch *l, const TaichiAotKindOps *ops) {
    return (l->flags & TAICHI_AOT_LAUNCH_ANY_THREAD) != 0 && l->runtime != NULL && ops != NULL && ops->hold != NULL;
}

/* The calls of a runtime any thread uses held for this thread, where the launch holds them; what the kind's let_go
   takes, NULL where nothing was held. */
static void *calls_hold(const TaichiAotLaunch *l, const TaichiAotKindOps *ops) {
    return holds_calls(l, ops) ? ops->hold(l->runtime) : NULL;
}

static void calls_let_go(const TaichiAotKindOps *ops, void *held) {
    if (held != NULL) {
        ops->let_go(held);
    }
}

/* One launch of the kind `ops` gives (kinds.h), no check: on the caller's thread and stream, or made elsewhere
   (`where`: taichi_aot_launch_elsewhere), where a kind with no entry for that is refused. An unknown kind (`ops`
   NULL) is refused before anything is done. Returns the launch's error code. */
static int launch_kind(const TaichiAotLaunch *l, const TaichiAotKindOps *ops, const TaichiAotElsewhere *where) {
    if (ops == NULL) {
        return TAICHI_AOT_UNKNOWN_KIND;
    }
    if (where == NULL) {
        return ops->launch(l);
    }
    return ops->elsewhere != NULL ? ops->elsewhere(l, where) : TAICHI_AOT_REFUSED;
}

/* A launch while NVTX ranges are on or a profile is open (profile.c): inside its range, and inside its profile's
   record where its runtime is profiled. */
static int launch_observed(const TaichiAotLaunch *l, const TaichiAotKindOps *ops, const TaichiAotElsewhere *where) {
    int error, ranges = __atomic_load_n(&taichi_aot_nvtx, __ATOMIC_ACQUIRE); /* the library's functions, set
                                                                                  before the switch was */
    int64_t record = __atomic_load_n(&taichi_aot_profiling, __ATOMIC_RELAXED) ? aot_profile_begin(l) : -1;
    if (ranges) {
        taichi_aot_nvtx_push(l->name);
    }
    error = launch_kind(l, ops, where);
    if (ranges) {
        taichi_aot_nvtx_pop();
    }
    if (record >= 0) {
        aot_profile_end(record);
    }
    return error;
}

/* Every launch, as launch_kind makes it; while NVTX ranges are on (nvtx.c), inside a range named for the kernel or
   graph (the record's `name`), pushed on the calling thread before the launch and popped after it; while a profile is
   open, timed (launch_observed). Off, this is two loads and one branch the compiler is told is seldom taken. */
static int launch_any(const TaichiAotLaunch *l, const TaichiAotKindOps *ops, const TaichiAotElsewhere *where) {
    if (__builtin_expect((__atomic_load_n(&taichi_aot_nvtx, __ATOMIC_RELAXED) |
                          __atomic_load_n(&taichi_aot_profiling, __ATOMIC_RELAXED)) == 0, 1)) {
        return launch_kind(l, ops, where);
    }
    return launch_observed(l, ops, where);
}

/* Counts a launch in the runtime's pending[0]. On a runtime that bounds its queue (pending[2] > 0: gfx backends), a
   launch of a kind the bound counts (its entry's `drain`) that finds pending[2] launches queued drains them first.
   Returns the launch's error, else the drain's. */
static int count_launch(const TaichiAotLaunch *l, const TaichiAotKindOps *ops, int error) {
    int32_t *pending = l->pending;
    if (error == TAICHI_AOT_UNKNOWN_KIND) { /* nothing was launched */
        return error;
    }
    if (pending[2] > 0 && error == 0 && pending[0] >= pending[2] && ops->drain != NULL) {
        pending[0] = 0;
        return ops->drain(l);
    }
    if (pending[0] < INT32_MAX) {
        ++pending[0];
    }
    return error;
}

/* The launch with its runtime's calls `held` (NULL: none held): on a runtime any thread uses, the epoch read with
   them held, which a release on another thread takes too (TAICHI_AOT_STALE, nothing launched, where it moved); then
   let go. */
static int launch_held(const TaichiAotLaunch *l, const TaichiAotKindOps *ops, void *held) {
    int error;
    if (l->seen != __atomic_load_n(&taichi_aot_epoch, __ATOMIC_ACQUIRE)) {
        calls_let_go(ops, held);
        return TAICHI_AOT_STALE;
    }
    error = count_launch(l, ops, launch_any(l, ops, NULL));
    calls_let_go(ops, held);
    return error;
}

/* A launch and its error check in one call from Python. Returns the TiError code (0: success),
   or TAICHI_AOT_STALE without launching when something was closed since `seen` or the caller is
   not the runtime's thread: Python then re-checks (and raises) before launching again. The
   error message stays in the library's thread-local slot for the error funnel to take. */
int taichi_aot_launch(const TaichiAotLaunch *l) {
    const TaichiAotKindOps *ops;
    if ((unsigned long)pthread_self() != l->thread) {
        return TAICHI_AOT_STALE;
    }
    ops = taichi_aot_kind_ops(l->kind);
    return launch_held(l, ops, calls_hold(l, ops));
}

/* taichi_aot_launch without blocking, for a caller that holds Python's lock (the C call): TAICHI_AOT_BUSY, nothing
   launched, where the launch's kind is not quick (kinds.h), another thread has its runtime's calls (beyond a brief
   call's few microseconds, on Vulkan) or the launch would wait for the device; the caller then lets Python's lock go
   and makes taichi_aot_launch. */
int taichi_aot_launch_quick(const TaichiAotLaunch *l) {
    const TaichiAotKindOps *ops = taichi_aot_kind_ops(l->kind);
    void *held = NULL;
    if (ops == NULL || !ops->quick || (unsigned long)pthread_self() != l->thread) {
        return TAICHI_AOT_BUSY;
    }
    if (ops->quick_hold == NULL || !ops->quick_hold(l, holds_calls(l, ops), &held)) {
        return TAICHI_AOT_BUSY;
    }
    return launch_held(l, ops, held);
}

/* A runtime's wait from Python (Runtime.wait, on a device whose work is all counted in `pending`): libtaichi's wait
   (a backend that queues work of its own points it at a wrapper that waits for that too) where anything was queued
   since the last, or `always` (a runtime any thread uses: another thread's wait may have cleared the count while this
   thread's work still ran; such a wait costs little with nothing queued), the count cleared; the library's error code (0:
   none), left for the error funnel. One C call: the flat function's checks cost a fifth of a launch and its wait on
   a GPU. */
int taichi_aot_runtime_wait(TiRuntime runtime, int32_t *pending, int always) {
    if (pending[0] || always) {
        pending[0] = 0; /* first: what another thread counts meanwhile stays counted */
        ti_wait(runtime);
        taichi_aot_coming_back(); /* the caller unmarks it (_call.came_back) */
    }
    return (int)ti_get_last_error(NULL, NULL);
}

/* One launch of any kind, with no check: the flat API's (taichi_aot.capi checked its arguments). */
int taichi_aot_dispatch(const TaichiAotLaunch *l) {
    return launch_any(l, taichi_aot_kind_ops(l->kind), NULL);
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
    const TaichiAotKindOps *first = count > 0 ? taichi_aot_kind_ops(launches[0].kind) : NULL;
    void *held = count > 0 ? calls_hold(&launches[0], first) : NULL;
    *done = 0;
    if (seen != __atomic_load_n(&taichi_aot_epoch, __ATOMIC_ACQUIRE)) {
        calls_let_go(first, held);
        return TAICHI_AOT_STALE;
    }
    for (r = 0; r < repeat && error == 0; ++r) {
        for (i = 0; i < count; ++i) {
            const TaichiAotLaunch *l = &launches[i];
            const TaichiAotKindOps *ops = taichi_aot_kind_ops(l->kind);
            error = ops != NULL ? count_launch(l, ops, launch_any(l, ops, NULL)) : TAICHI_AOT_UNKNOWN_KIND;
            /* the error codes of launches that report by code are checked every time */
            if (error != 0 && (r == 0 || (l->flags & TAICHI_AOT_LAUNCH_CODES) != 0)) {
                break;
            }
            error = 0;
            ++*done;
        }
    }
    calls_let_go(first, held);
    return error != 0 ? error : (int)ti_get_last_error(NULL, NULL);
}

int taichi_aot_launch_elsewhere(const TaichiAotLaunch *l, TaichiAotElsewhere *where) {
    return launch_any(l, taichi_aot_kind_ops(l->kind), where);
}
