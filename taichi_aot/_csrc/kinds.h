/* The dispatcher's table of launch kinds: what launch.c calls for a launch of each kind. Each launch backend's C file
   gives the entries of its kinds, declared in the header named for it (backends/libtaichi.h, cuda.h, x64.h,
   cpucalls.h, vulkan.h), kinds.c lists them by kind, and launch.c names none of them: it keeps the close epoch, the
   thread check, the counts and the NVTX range. A private header: never handed to cffi. */
#ifndef TAICHI_AOT_KINDS_H
#define TAICHI_AOT_KINDS_H

#include "taichi_aot.h"

typedef struct {
    /* A launch on the caller's thread, on the runtime's stream; its error code (0: none). */
    int (*launch)(const TaichiAotLaunch *l);
    /* A launch made elsewhere (taichi_aot_launch_elsewhere: XLA's handler, torch's autograd thread); NULL: the kind
       is never launched elsewhere (TAICHI_AOT_REFUSED). */
    int (*elsewhere)(const TaichiAotLaunch *l, const TaichiAotElsewhere *where);
    /* For a launch any thread may make (TAICHI_AOT_LAUNCH_ANY_THREAD): the runtime's calls held for this thread
       while the close epoch is read and the launch made, where its runtime keeps them one at a time (NULL returned:
       nothing held; a NULL entry: the kind's driver takes any thread itself), and let go. */
    void *(*hold)(TiRuntime runtime);
    void (*let_go)(void *held);
    /* For a kind the runtime's queue bound (pending[2]) counts (libtaichi's: it keeps what each of its launches made
       until a wait): the wait for what is queued when the bound is reached, its error code (0: none). NULL: a launch
       of the kind never waits at the bound (its own launches bound their own queue); it is still counted. */
    int (*drain)(const TaichiAotLaunch *l);
    /* 1: a launch of the kind only enqueues work (a record into a command batch, a driver's launch), or runs a CPU
       kernel its record's launches found short (its quick_hold says which), so that the C call makes it without
       letting Python's lock go where the runtime's calls are free (taichi_aot_launch_quick): threads that launch at
       once do not hand that lock to each other at every launch. 0: it may take long (libtaichi's launch on a GPU).
       A quick kind's launch that could block on what a thread without Python's lock holds is not quick at that
       launch (its quick_hold: the own CUDA launcher's stand-in lock, held across a stream's synchronization for a
       kernel's values or its autodiff flag, where a host function on that stream may need Python's lock, is taken
       only where free). */
    int quick;
    /* For a quick kind: whether the launch can be made now without blocking: the runtime's calls taken (where `hold`:
       it holds them) only where no other thread has them (the own Vulkan launch waits a few microseconds for another
       thread's brief call: backends/vkqueue.c's vk_calls_soon), and nothing in it waits for the device (a full ring of
       batches, a kernel's values). 1: go, *held as hold returns it; 0: busy, nothing held. */
    int (*quick_hold)(const TaichiAotLaunch *l, int hold, void **held);
    /* For a kind that keeps a returning kernel's values for each launching thread: this thread's last launch's
       values of the kernel `handle` (opplan.c's op copies them); NULL: the plan's host memory holds them. */
    const void *(*values)(const void *handle);
} TaichiAotKindOps;

/* The entry of `kind`; NULL: no such kind (nothing is launched: TAICHI_AOT_UNKNOWN_KIND). */
__attribute__((visibility("hidden"))) const TaichiAotKindOps *taichi_aot_kind_ops(uint32_t kind);

#endif
