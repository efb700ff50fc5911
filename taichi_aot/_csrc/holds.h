/* The runtimes' calls locks (holds.c): a runtime that any thread may use has one state that makes its calls one at a
   time (a CPU runtime's calls state, backends/cpucalls.c; a Vulkan runtime's own state, backends/vkqueue.c). That
   state registers its hold and let-go for the runtime when it opens and forgets them when it closes, and a launch
   kind that runs on either (libtaichi's, backends/libtaichi.c) asks here: it names neither backend. Both states note
   here the runtimes they close, so that their wrappers of libtaichi's calls refuse a call on one. A private header:
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

/* A module's destroy and look-ups hold the calls of the runtime it was loaded on (a wrapper of libtaichi's, in the
   backend that registered them). aot_holds_loaded: a module `made` on `runtime` with the calls `held` (what
   aot_holds_hold returned, NULL: none registered) noted as the runtime's, no longer one destroyed; those calls let go;
   `made` returned. aot_holds_hold_module: the calls of the module's runtime held (NULL: none noted has it); `*gone`
   set, nothing held, where it was destroyed, or its runtime closed, before or while this thread waited (libtaichi's
   last error then says so). aot_holds_forget_module, after the module is destroyed (its runtime's calls held), and
   aot_holds_forget_modules, when the runtime's state closes: a hold of theirs from then on finds them gone. */
__attribute__((visibility("hidden"))) TiAotModule aot_holds_loaded(void *held, TiRuntime runtime, TiAotModule made);
__attribute__((visibility("hidden"))) void *aot_holds_hold_module(TiAotModule module, int *gone);
__attribute__((visibility("hidden"))) void aot_holds_forget_module(TiAotModule module);
__attribute__((visibility("hidden"))) void aot_holds_forget_modules(TiRuntime runtime);

/* The runtimes closed, by handle, each kept until a runtime is made at the same address again (the last
   AOT_HOLDS_CLOSED closed, the CPU calls states' and the Vulkan states' together), so that a call another thread makes
   on one is refused rather than made on libtaichi's destroyed runtime. aot_holds_note_closed: `runtime` noted closed
   by the state whose `words` (one array of its own, passed by the same pointer each time) are what its refusals say;
   noted before the state's registry lets the runtime go, so that a thread that finds it gone there finds it closed
   here. aot_holds_refused: whether `runtime` was noted closed with these same `words`, libtaichi's last error then set
   to INVALID_STATE with them, on this thread. A state refuses only the runtimes it closed: the own Vulkan launch's
   wrappers call the CPU calls' (backends/vkorder.c), so a Vulkan runtime's destroy, noted closed, goes on through the
   CPU calls' wrapper to libtaichi, and a call on a closed CPU runtime passes the Vulkan wrapper to be refused in the
   CPU's words. aot_holds_forget_closed: every note of `runtime` forgotten, when a runtime is made at its address. */
#define AOT_HOLDS_CLOSED 128
__attribute__((visibility("hidden"))) void aot_holds_note_closed(TiRuntime runtime, const char *words);
__attribute__((visibility("hidden"))) int aot_holds_refused(TiRuntime runtime, const char *words);
__attribute__((visibility("hidden"))) void aot_holds_forget_closed(TiRuntime runtime);

#endif
