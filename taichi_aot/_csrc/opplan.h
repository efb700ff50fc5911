/* Private to the package's C (never handed to cffi): an op's launch from a plain list of buffers (opplan.c), which
   XLA's handler (xla.c) and torch's C kernel (torchop.c) make from what their framework hands them. */
#ifndef TAICHI_AOT_OPPLAN_H
#define TAICHI_AOT_OPPLAN_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "taichi_aot.h"

/* One buffer of an op's call: its type (XLA FFI's numbering, as the plan's `dtype`), data, rank and dims (the
   caller's array, valid for the call). `rank` -1: the framework passed no buffer there. */
typedef struct {
    int32_t dtype;
    void *data;
    int64_t rank;
    const int64_t *dims;
} TaichiAotOpBuffer;

/* One call's buffers: the operands, the results, and the packed TiArguments of the plan's scalar attributes
   (`scalars`, `scalars_size` bytes; NULL: none given). */
typedef struct {
    const TaichiAotOpBuffer *args;
    uint32_t arg_count;
    const TaichiAotOpBuffer *rets;
    uint32_t ret_count;
    const void *scalars;
    size_t scalars_size;
} TaichiAotOpCall;

typedef struct {
    uintptr_t address;
    uint64_t bytes;
    TiMemory memory;
} TaichiAotOpImport;

/* A runtime's cell (taichi_aot_op_cell): its lock, the runtime, on CUDA the own launcher's record to launch with the
   caller's stream and the driver's table, and the pool of the buffers it imported. */
typedef struct {
    pthread_mutex_t lock;
    TiRuntime runtime;
    int cuda;
    int closed;
    TaichiAotCudaRuntime own;       /* CUDA: the own launcher's runtime with the cell's stand-in */
    const TaichiAotCudaDriver *cu;  /* CUDA: the driver's table (memset8_async, sync, htod_async, dtod_async,
                                       error_name, ctx_device); NULL on x64 */
    int device;                     /* the GPU the runtime drives: its CUdevice (cuDeviceGet of its ordinal) */
    TaichiAotOpImport *table;       /* open addressing by address; capacity a power of two, at most half full */
    size_t count, capacity;
    uint64_t captured;              /* launches made while the caller's stream was captured into a CUDA graph */
    int32_t *pending;               /* the runtime's counts: its launches' mark for a profile (never written here) */
} TaichiAotOpCell;

/* The launch of plan `p` with `call`'s buffers on `stream` (x64: NULL), under the cell's lock, refused where the
   runtime or the op was closed: 0, or a message in `why`. */
__attribute__((visibility("hidden"))) int taichi_aot_op_launch(TaichiAotOpCell *c, const TaichiAotOpPlan *p,
                                                               const TaichiAotOpCall *call, void *stream, char *why,
                                                               size_t why_size);

/* The GPU current on the calling thread, as a CUdevice (cuCtxGetDevice): 0 and `*device`, or nonzero. */
__attribute__((visibility("hidden"))) int taichi_aot_op_current_device(const TaichiAotOpCell *c, int *device);

/* `bytes` copied between device pointers on `stream` (cuMemcpyDtoDAsync): the driver's CUresult. */
__attribute__((visibility("hidden"))) int taichi_aot_op_copy(const TaichiAotOpCell *c, void *dst, const void *src,
                                                             size_t bytes, void *stream);

#endif
