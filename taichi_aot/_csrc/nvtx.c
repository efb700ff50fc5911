/* NVTX ranges around launches (TAICHI_AOT_NVTX=1, taichi_aot.config.set_nvtx): NVIDIA's NVTX library
   (libnvToolsExt.so.1, or the libnvtx3interop.so.1 of newer CUDA wheels) opened at run time, its two exported C
   functions nvtxRangePushA and nvtxRangePop looked up by name (their C declarations are written here, none of
   NVIDIA's headers is used). A tool that records ranges (Nsight Systems) is attached by the library itself, through
   its injection variables.

   The library is opened once and never closed; the functions are set before the switch turns on, and the switch
   (taichi_aot_nvtx) is the one thing a launch reads when ranges are off (launch.c). */
#include <pthread.h>
#include <stdio.h>

#include "taichi_aot.h"

int taichi_aot_nvtx = 0;

static struct {
    void *handle;
    int (*push)(const char *message); /* nvtxRangePushA: the range's depth, or a negative value */
    int (*pop)(void);                 /* nvtxRangePop */
    pthread_mutex_t lock;
} nvtx = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Opens the library at `path` (dlopen's search where it names no folder) and looks up its two functions; once one
   has been opened, later calls keep it. Returns 0, or -1 with dlerror's message (or which function it lacks) in
   `error`. */
int taichi_aot_nvtx_load(const char *path, char *error, size_t error_size) {
    static const char *const names[] = {"nvtxRangePushA", "nvtxRangePop"};
    void *found[2];
    int result = 0;
    pthread_mutex_lock(&nvtx.lock);
    if (nvtx.handle == NULL) {
        void *handle = taichi_aot_open_functions(path, names, found, 2, error, error_size);
        if (handle == NULL) {
            result = -1;
        } else {
            *(void **)&nvtx.push = found[0];
            *(void **)&nvtx.pop = found[1];
            __atomic_store_n(&nvtx.handle, handle, __ATOMIC_RELEASE); /* after the functions: launches read it */
        }
    }
    pthread_mutex_unlock(&nvtx.lock);
    return result;
}

int taichi_aot_nvtx_loaded(void) {
    return __atomic_load_n(&nvtx.handle, __ATOMIC_ACQUIRE) != NULL;
}

/* Ranges on (`on` nonzero, where the library is open) or off; returns whether they are on now. */
int taichi_aot_nvtx_enable(int on) {
    int now = on != 0 && taichi_aot_nvtx_loaded();
    __atomic_store_n(&taichi_aot_nvtx, now, __ATOMIC_RELEASE);
    return now;
}

/* A range named `name` (NULL: "taichi_aot") pushed on the calling thread, and the thread's innermost range popped.
   Called only while the switch is on, so the library is open (it is never closed). */
void taichi_aot_nvtx_push(const char *name) {
    (void)nvtx.push(name != NULL ? name : "taichi_aot");
}

void taichi_aot_nvtx_pop(void) {
    (void)nvtx.pop();
}
