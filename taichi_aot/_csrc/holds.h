/* The runtimes' calls locks (holds.c): a runtime that any thread may use has one state that makes its calls one at a
   time (a CPU runtime's calls state, backends/cpucalls.c; a Vulkan runtime's own state, backends/vkqueue.c). That
   state registers its hold and let-go for the runtime when it opens and forgets them when it closes, and a launch
   kind that runs on either (libtaichi's, backends/libtaichi.c) asks here: it names neither backend. A private header:
   never handed to cffi. */
#ifndef TAICHI_AOT_HOLDS_H
#define TAICHI_AOT_HOLDS_H

#include "taichi_aot.h"

typedef struct AotCalls AotCalls;

/* A state's hold and let-go, kept inside the state's record. The record outlives its state's close (a static slot, a
   record never freed), so that a thread that found it just before the close and then holds it finds it closed. */
struct AotCalls {
    /* The calls held for this thread (recursive), `calls` returned; NULL, nothing held, where the state is no longer
       open for `runtime` (closed meanwhile, or its record another runtime's since). */
    AotCalls *(*hold)(AotCalls *calls, TiRuntime runtime);
    /* What `hold` held let go. */
    void (*let_go)(AotCalls *calls);
};

/* The runtimes registered at once, at most (the CPU calls states' and the Vulkan states' together). */
#define AOT_HOLDS_MAX 256

/* `calls` registered for `runtime` when its state opens: 1, or 0 where the table is full or the runtime has another
   state's calls registered (nothing changed; registered again, the same calls are kept). */
__attribute__((visibility("hidden"))) int aot_holds_register(TiRuntime runtime, AotCalls *calls);
/* `calls` forgotten for `runtime` when its state closes: a hold from then on finds nothing. */
__attribute__((visibility("hidden"))) void aot_holds_forget(TiRuntime runtime, AotCalls *calls);
/* A kind's hold and let-go (kinds.h): the calls registered for `runtime` held for this thread (what
   aot_holds_let_go takes), or NULL, nothing held, where none are (a runtime kept to its thread, or closed). */
__attribute__((visibility("hidden"))) void *aot_holds_hold(TiRuntime runtime);
__attribute__((visibility("hidden"))) void aot_holds_let_go(void *held);

#endif
