/* libtaichi's launch (the TAICHI_AOT_KIND_KERNEL and TAICHI_AOT_KIND_GRAPH kinds, kinds.h's entries): the reference
   and the fallback, ti_launch_kernel / ti_launch_compute_graph with the record's arguments. */
#include <stdlib.h>

#include "taichi_aot.h"
#include "holds.h"
#include "libtaichi.h"

/* A launch through libtaichi: refused where a non-blocking CUDA stream is set (pending[1]); made elsewhere (`where`),
   first ordered after the caller's stream (libtaichi launches on a stream of its own) and then waited for (x64: the
   caller reads the results next; CUDA: the caller's stream is not ordered with libtaichi's). The library's last
   error, or the wait for the caller's stream's. */
static int launch_library(const TaichiAotLaunch *l, const TaichiAotElsewhere *where) {
    if (where != NULL && where->sync != NULL && where->stream != NULL) {
        int waited = where->sync(where->stream);
        if (waited != 0) {
            return TAICHI_AOT_CUDA_ERROR - waited;
        }
    }
    void *made;
    const void *args;
    if (l->pending != NULL && l->pending[1]) {
        return TAICHI_AOT_REFUSED;
    }
    if (taichi_aot_library_args(l, &args, &made) != 0) { /* the own CUDA runtime's memory as imports (imports.c) */
        return (int)ti_get_last_error(NULL, NULL);
    }
    if (l->kind == TAICHI_AOT_KIND_KERNEL) {
        ti_launch_kernel(l->runtime, (TiKernel)l->handle, l->arg_count, (const TiArgument *)args);
    } else {
        ti_launch_compute_graph(l->runtime, (TiComputeGraph)l->handle, l->arg_count, (const TiNamedArgument *)args);
    }
    free(made);
    if (where != NULL) {
        ti_wait(l->runtime);
    }
    return (int)ti_get_last_error(NULL, NULL);
}

int aot_library_launch(const TaichiAotLaunch *l) {
    return launch_library(l, NULL);
}

int aot_library_elsewhere(const TaichiAotLaunch *l, const TaichiAotElsewhere *where) {
    return launch_library(l, where);
}

/* The hold of a launch any thread may make (kinds.h): the calls of whatever state lets any thread use the runtime,
   as registered for it (holds.h); NULL, nothing held, where none is. */
void *aot_library_hold_calls(TiRuntime runtime) {
    return aot_holds_hold(runtime);
}

void aot_library_let_go_calls(void *held) {
    aot_holds_let_go(held);
}

/* The queue bound's wait (kinds.h's `drain`): libtaichi keeps each launch's command buffer and argument buffers until
   a wait, so a runtime that bounds its queue waits once pending[2] of its launches are queued, as a CUDA launch
   blocks when its queue is full. */
int aot_library_drain(const TaichiAotLaunch *l) {
    ti_wait(l->runtime);
    return (int)ti_get_last_error(NULL, NULL);
}
