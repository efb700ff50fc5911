/* A host <-> CUDA copy in one call: the context pushed, the copy, the context popped, through the driver's
   functions found by Python (ctypes) and handed over as addresses. The small copies of a step loop (a few
   bytes read back every N steps) cost the driver's own time and one call, not three calls through ctypes; the own
   CUDA runtime's small reads (taichi_aot_cuda_read) wait for the runtime's work in the same call. */
#include "taichi_aot.h"

typedef int (*taichi_aot_cu_push)(void *context);
typedef int (*taichi_aot_cu_pop)(void **context);
typedef int (*taichi_aot_cu_htod)(uint64_t dst, const void *src, size_t size);
typedef int (*taichi_aot_cu_dtoh)(void *dst, uint64_t src, size_t size);
typedef int (*taichi_aot_cu_sync)(void *stream);
typedef int (*taichi_aot_cu_capturing)(void *stream, int *status);

int taichi_aot_cuda_transfer(const TaichiAotCudaDriver *cu, uint64_t context, void *host, uint64_t device, uint64_t size,
                         int to_device) {
    int code, popped;
    void *previous = NULL;
    if (context != 0) {
        code = ((taichi_aot_cu_push)cu->push)((void *)(uintptr_t)context);
        if (code != 0) {
            return code;
        }
    }
    if (to_device) {
        code = ((taichi_aot_cu_htod)cu->htod)(device, host, (size_t)size);
    } else {
        code = ((taichi_aot_cu_dtoh)cu->dtoh)(host, device, (size_t)size);
    }
    if (context != 0) {
        popped = ((taichi_aot_cu_pop)cu->pop)(&previous);
        if (code == 0) {
            code = popped;
        }
    }
    return code;
}

int taichi_aot_cuda_read(const TaichiAotCudaDriver *cu, uint64_t context, uint64_t stream, int32_t *pending,
                         void *host, uint64_t device, uint64_t size) {
    int code = 0, popped, status = 0;
    void *previous = NULL;
    if (context != 0 && (code = ((taichi_aot_cu_push)cu->push)((void *)(uintptr_t)context)) != 0) {
        return code;
    }
    if (stream != 0 && (((taichi_aot_cu_capturing)cu->capturing)((void *)(uintptr_t)stream, &status) != 0 ||
                        status != 0)) {
        code = TAICHI_AOT_CUDA_CAPTURING; /* nothing may wait on it: the caller refuses, the capture untouched */
    } else {
        pending[0] = 0; /* first, as a runtime's wait clears it: what another thread counts meanwhile stays counted */
        if (stream != 0) { /* the stream set: its work first (a non-blocking one is not ordered with the copy's) */
            code = ((taichi_aot_cu_sync)cu->sync)((void *)(uintptr_t)stream);
        }
        if (code == 0) { /* the legacy default stream's: after what was queued on it, and on every blocking stream */
            code = ((taichi_aot_cu_dtoh)cu->dtoh)(host, device, (size_t)size);
        }
        taichi_aot_coming_back(); /* it waited with Python's lock let go (the caller unmarks it) */
    }
    if (context != 0) {
        popped = ((taichi_aot_cu_pop)cu->pop)(&previous);
        code = code != 0 ? code : popped;
    }
    return code;
}
