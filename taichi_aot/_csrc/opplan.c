/* An op's launch (a kernel or graph as a framework's op: XLA's handler, xla.c; torch's C kernel, torchop.c) from a
   plain list of buffers, with no Python. A plan (TaichiAotOpPlan, made by Python for one op and one way of passing
   its scalars) says where each kernel argument comes from: an operand buffer, a result buffer the framework
   allocated, a 0-d operand holding a scalar, or the packed TiArguments of the scalars. The buffers are imported into
   the runtime once per address (and size), into a pool kept by the runtime's cell for its life: libtaichi_c_api 1.7.4
   cannot release an import (about 90 bytes each), and the frameworks' allocators hand the same addresses out again.

   One lock per runtime cell: launches of its ops are serialised, and closing the runtime (Python marks the cell
   closed under the lock, first) waits for a launch in flight; a call after that, or after its op was let go, is an
   error, never a launch on a dead handle. libtaichi's last error is thread-local: read and cleared here, on the
   caller's thread. On x64 the launch is waited for before it returns (the caller reads the results next). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kinds.h"
#include "opplan.h"
#include "taichi_aot.h"

#define OP_F16 10 /* XLA FFI's type number of an IEEE half (the plans' numbering) */

void *taichi_aot_op_cell(TiRuntime runtime, int cuda, const TaichiAotCudaRuntime *own, const TaichiAotCudaDriver *cu,
                         int device) {
    TaichiAotOpCell *c = (TaichiAotOpCell *)calloc(1, sizeof(TaichiAotOpCell));
    if (c == NULL) {
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    c->runtime = runtime;
    c->cuda = cuda;
    if (own != NULL) {
        c->own = *own;
    }
    c->cu = cuda ? cu : NULL;
    c->device = device;
    return c;
}

/* What the runtime made since the cell was: its libtaichi runtime (taichi_aot's own CUDA runtime makes one only for a
   module whose kernels need it; NULL: none yet), and the own launcher's record (`own`, where the cell had none: the
   runtime's first module with PTX was loaded since; NULL: no change). Launches use them from now on. */
void taichi_aot_op_cell_update(void *cell, TiRuntime runtime, const TaichiAotCudaRuntime *own) {
    TaichiAotOpCell *c = (TaichiAotOpCell *)cell;
    pthread_mutex_lock(&c->lock);
    c->runtime = runtime;
    if (own != NULL && c->own.driver == NULL) {
        c->own = *own;
    }
    pthread_mutex_unlock(&c->lock);
}

void taichi_aot_op_cell_counts(void *cell, int32_t *pending) {
    ((TaichiAotOpCell *)cell)->pending = pending;
}

/* The runtime is closing: no launch after this one returns. The cell itself stays (plans point to it). */
void taichi_aot_op_cell_close(void *cell) {
    TaichiAotOpCell *c = (TaichiAotOpCell *)cell;
    pthread_mutex_lock(&c->lock);
    c->closed = 1;
    free(c->table);
    c->table = NULL;
    c->count = c->capacity = 0;
    pthread_mutex_unlock(&c->lock);
}

/* The op was let go: its plan is never launched again (the framework may still hold compiled calls naming it). */
void taichi_aot_op_release(TaichiAotOpPlan *plan) {
    TaichiAotOpCell *c = (TaichiAotOpCell *)plan->runtime;
    pthread_mutex_lock(&c->lock);
    plan->closed = 1;
    pthread_mutex_unlock(&c->lock);
}

/* A count of the cell's, read under its lock: its imports (`captured` 0), or its captured launches. */
static uint64_t op_count(void *cell, int captured) {
    TaichiAotOpCell *c = (TaichiAotOpCell *)cell;
    uint64_t n;
    pthread_mutex_lock(&c->lock);
    n = captured ? c->captured : (uint64_t)c->count;
    pthread_mutex_unlock(&c->lock);
    return n;
}

uint64_t taichi_aot_op_cell_captured(void *cell) {
    return op_count(cell, 1);
}

uint64_t taichi_aot_op_cell_imports(void *cell) {
    return op_count(cell, 0);
}

static size_t op_slot(const TaichiAotOpCell *c, uintptr_t address) {
    size_t i = (size_t)((address >> 4) * 0x9E3779B97F4A7C15ull) & (c->capacity - 1);
    while (c->table[i].address != 0 && c->table[i].address != address) {
        i = (i + 1) & (c->capacity - 1);
    }
    return i;
}

static int op_grow(TaichiAotOpCell *c) {
    size_t i, old = c->capacity, capacity = old ? old * 2 : 64;
    TaichiAotOpImport *was = c->table, *table = (TaichiAotOpImport *)calloc(capacity, sizeof(TaichiAotOpImport));
    if (table == NULL) {
        return 0;
    }
    c->table = table;
    c->capacity = capacity;
    for (i = 0; i < old; ++i) {
        if (was[i].address != 0) {
            c->table[op_slot(c, was[i].address)] = was[i];
        }
    }
    free(was);
    return 1;
}

/* The runtime's import of the `bytes` at `data` (imported now where none, or a smaller one); NULL: refused. */
static TiMemory op_memory(TaichiAotOpCell *c, void *data, uint64_t bytes) {
    size_t i;
    TiMemory memory;
    if ((c->count + 1) * 2 > c->capacity && !op_grow(c)) {
        return TI_NULL_HANDLE;
    }
    i = op_slot(c, (uintptr_t)data);
    if (c->table[i].address != 0 && c->table[i].bytes >= bytes) {
        return c->table[i].memory;
    }
    memory = c->cuda ? ti_import_cuda_memory(c->runtime, data, bytes) : ti_import_cpu_memory(c->runtime, data, bytes);
    if (ti_get_last_error(NULL, NULL) != TI_ERROR_SUCCESS || memory == TI_NULL_HANDLE) {
        return TI_NULL_HANDLE;
    }
    if (c->table[i].address == 0) {
        ++c->count;
    }
    c->table[i].address = (uintptr_t)data;
    c->table[i].bytes = bytes;
    c->table[i].memory = memory;
    return memory;
}

/* An IEEE half's value as a float (the C-API carries an f16 scalar as an f32). */
static float op_half(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff, bits;
    float subnormal;
    if (exponent == 0) { /* zero or subnormal: mantissa * 2^-24 */
        subnormal = (float)mantissa * (1.0f / 16777216.0f);
        memcpy(&bits, &subnormal, sizeof bits);
        bits |= sign;
    } else if (exponent == 0x1f) { /* inf or nan */
        bits = sign | 0x7f800000u | (mantissa << 13);
    } else {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    }
    memcpy(&subnormal, &bits, sizeof bits);
    return subnormal;
}

/* The call's buffer that argument `a` takes (an operand or a result, by its index), or NULL where there is none. */
static const TaichiAotOpBuffer *op_buffer(const TaichiAotOpCall *call, const TaichiAotOpArg *a) {
    int result = a->kind == TAICHI_AOT_OP_RESULT;
    const TaichiAotOpBuffer *list = result ? call->rets : call->args;
    uint32_t count = result ? call->ret_count : call->arg_count;
    return a->index < count && list[a->index].rank >= 0 ? &list[a->index] : NULL;
}

/* A 0-d operand's value (host memory) written into its TiArgument (an f16 as the f32 the C-API carries). */
static void op_scalar_operand(const TaichiAotOpArg *a, const TaichiAotOpBuffer *b, TiArgument *out) {
    if (a->dtype == OP_F16) {
        uint16_t h;
        float v;
        memcpy(&h, b->data, sizeof h);
        v = op_half(h);
        memcpy((char *)out + a->value_offset, &v, sizeof v);
    } else {
        memcpy((char *)out + a->value_offset, b->data, a->value_size);
    }
}

/* Argument `k` of the plan into `out`, from the call's buffers: 0, or an error message (into `why`). */
static int op_arg(TaichiAotOpCell *c, const TaichiAotOpPlan *p, uint32_t k, const TaichiAotOpCall *call, void *stream,
                  TiArgument *out, char *why, size_t why_size) {
    const TaichiAotOpArg *a = &p->args[k];
    const TaichiAotOpBuffer *b;
    uint64_t bytes;
    uint32_t i;
    memcpy(out, &p->templates[k], sizeof(TiArgument));
    if (a->kind == TAICHI_AOT_OP_SCALAR_ATTR) {
        if (call->scalars == NULL || call->scalars_size < (size_t)(a->index + 1) * sizeof(TiArgument)) {
            snprintf(why, why_size, "%s argument %u: its scalar attribute is missing", p->what, k);
            return 1;
        }
        memcpy(out, (const char *)call->scalars + (size_t)a->index * sizeof(TiArgument), sizeof(TiArgument));
        return 0;
    }
    b = op_buffer(call, a);
    if (b == NULL) {
        snprintf(why, why_size, "%s argument %u: no buffer %u", p->what, k, a->index);
        return 1;
    }
    if (b->dtype != a->dtype || b->rank != (int64_t)(a->ndim + a->elem_ndim)) {
        snprintf(why, why_size, "%s argument %u: a buffer of type %d and rank %lld, expected type %d and rank %u",
                 p->what, k, (int)b->dtype, (long long)b->rank, (int)a->dtype, a->ndim + a->elem_ndim);
        return 1;
    }
    if (a->kind == TAICHI_AOT_OP_SCALAR_OPERAND) { /* host memory (x64; Python refuses these on CUDA) */
        op_scalar_operand(a, b, out);
        return 0;
    }
    bytes = a->itemsize;
    for (i = 0; i < a->ndim + a->elem_ndim; ++i) {
        if (b->dims[i] <= 0 || b->dims[i] > (int64_t)UINT32_MAX) {
            snprintf(why, why_size, "%s argument %u: dimension %u is %lld (an empty array cannot be passed)",
                     p->what, k, i, (long long)b->dims[i]);
            return 1;
        }
        bytes *= (uint64_t)b->dims[i];
        if (i < a->ndim) {
            out->value.ndarray.shape.dims[i] = (uint32_t)b->dims[i];
        }
    }
    if (a->zero) { /* results are uninitialised: start from zeros, as a new ndarray does */
        if (!c->cuda) {
            memset(b->data, 0, bytes);
        } else if (((int (*)(uint64_t, unsigned char, size_t, void *))c->cu->memset8_async)(
                       (uint64_t)(uintptr_t)b->data, 0, bytes, stream) != 0) {
            snprintf(why, why_size, "%s argument %u: cuMemsetD8Async failed", p->what, k);
            return 1;
        }
    }
    if ((p->flags & TAICHI_AOT_LAUNCH_POINTERS) != 0) { /* the own launches take the pointer themselves */
        out->value.ndarray.memory = (TiMemory)((uintptr_t)b->data | TAICHI_AOT_POINTER_TAG);
        return 0;
    }
    out->value.ndarray.memory = op_memory(c, b->data, bytes);
    if (out->value.ndarray.memory == TI_NULL_HANDLE) {
        snprintf(why, why_size, "%s argument %u: the library refused to import the buffer", p->what, k);
        return 1;
    }
    return 0;
}

/* The driver's name of its error `code` (a CUresult), or a phrase where it gives none. */
static const char *op_driver_error(const TaichiAotOpCell *c, int code) {
    const char *name = NULL;
    if (c->cu == NULL || c->cu->error_name == NULL ||
        ((int (*)(int, const char **))c->cu->error_name)(code, &name) != 0 || name == NULL) {
        name = "an error the driver does not name";
    }
    return name;
}

/* A returning kernel's values, after its launch: each copied from its results' host memory into its result buffer:
   x64's are host memory; CUDA's are device memory, written on the caller's stream (the own launcher waited for the
   kernel and read its results back before this). 0, or a message in `why`. */
static int op_values(const TaichiAotOpCell *c, const TaichiAotOpPlan *p, const TaichiAotOpCall *call, void *stream,
                     char *why, size_t why_size) {
    uint32_t k;
    /* where its kind keeps them for each launching thread, this thread's launch's (another thread's launch of the
       kernel may have written the kernel's values since: the own x64 launch's) */
    const TaichiAotKindOps *ops = taichi_aot_kind_ops(p->kind);
    const char *values = ops != NULL && ops->values != NULL ? (const char *)ops->values(p->handle)
                                                            : (const char *)p->values;
    for (k = 0; k < p->value_count; ++k) {
        uint32_t at = p->value_first + k;
        const char *value = values + p->value_offsets[k];
        const TaichiAotOpBuffer *b;
        int code;
        if (at >= call->ret_count || call->rets[at].rank < 0) {
            snprintf(why, why_size, "%s: no result buffer %u for returned value %u", p->what, at, k);
            return 1;
        }
        b = &call->rets[at];
        if (!c->cuda) {
            memcpy(b->data, value, p->value_sizes[k]);
            continue;
        }
        code = c->cu->htod_async != NULL ? ((int (*)(uint64_t, const void *, size_t, void *))c->cu->htod_async)(
                                               (uint64_t)(uintptr_t)b->data, value, p->value_sizes[k], stream)
                                         : -1;
        if (code != 0) {
            snprintf(why, why_size, "%s: returned value %u: cuMemcpyHtoDAsync into its buffer failed: %s (CUresult "
                     "%d)", p->what, k, op_driver_error(c, code), code);
            return 1;
        }
    }
    return 0;
}

/* What an error code of taichi_aot's own launches means (the Python launch's messages, backends/cuda.py, say more),
   or NULL for libtaichi's (its last error says). */
static const char *op_own_code(int code) {
    switch (code) {
    case TAICHI_AOT_PLAN_BAD_ARGS: return "an argument the kernel's launch plan does not take";
    case TAICHI_AOT_CUDA_CAPTURE_REFUSED: return "launched while its stream is captured into a CUDA graph, which "
                                                 "this launch cannot be";
    case TAICHI_AOT_CUDA_RESULT_CAPTURE_REFUSED: return "the kernel returns values and waits for them: refused while "
                                                        "its stream is captured into a CUDA graph";
    case TAICHI_AOT_UNKNOWN_KIND: return "a launch of a kind the dispatcher does not know (nothing was launched)";
    default: return NULL;
    }
}

/* The launch (the cell's lock held): 0, or a message in `why`. */
static int op_launch(TaichiAotOpCell *c, const TaichiAotOpPlan *p, const TaichiAotOpCall *call, void *stream, char *why,
                     size_t why_size) {
    TiArgument args[TAICHI_AOT_OP_MAX_ARGS];
    TiNamedArgument named[TAICHI_AOT_OP_MAX_ARGS];
    uint32_t k;
    int code;
    for (k = 0; k < p->arg_count; ++k) {
        if (op_arg(c, p, k, call, stream, &args[k], why, why_size)) {
            ti_set_last_error(TI_ERROR_SUCCESS, NULL);
            return 1;
        }
    }
    { /* the dispatcher's (launch.c), on the caller's stream; a kernel of the own launcher with the cell's stand-in */
        TaichiAotLaunch launch;
        TaichiAotCudaRuntime own = c->own;
        TaichiAotElsewhere where;
        memset(&launch, 0, sizeof(launch));
        launch.runtime = c->runtime;
        launch.kind = p->kind;
        launch.flags = p->flags;
        launch.handle = p->handle;
        launch.arg_count = p->arg_count;
        launch.args = args;
        launch.name = p->name; /* its NVTX range (nvtx.c) */
        /* the runtime's mark, by which a profile of it records the launch (profile.c); libtaichi's launches go without
           (they read it for a refusal no op's launch has: a profile knows them by their TiRuntime) */
        if (p->kind != TAICHI_AOT_KIND_KERNEL && p->kind != TAICHI_AOT_KIND_GRAPH) {
            launch.pending = c->pending;
        }
        if (p->kind == TAICHI_AOT_KIND_GRAPH || p->kind == TAICHI_AOT_KIND_CUDA_GRAPH) { /* named arguments */
            for (k = 0; k < p->arg_count; ++k) {
                named[k].name = p->names[k];
                named[k].argument = args[k];
            }
            launch.args = named;
        }
        where.stream = stream;
        where.own = &own;
        where.sync = c->cuda ? (int (*)(void *))c->cu->sync : NULL;
        code = taichi_aot_launch_elsewhere(&launch, &where);
        c->captured += own.captured;
    }
    if (code < TAICHI_AOT_CUDA_ERROR) { /* the driver's error, by name */
        snprintf(why, why_size, "%s: %s failed: %s (CUresult %d)", p->what,
                 (p->flags & TAICHI_AOT_LAUNCH_CODES) == 0 ? "cuStreamSynchronize of the caller's stream" : "the launch",
                 op_driver_error(c, TAICHI_AOT_CUDA_ERROR - code), TAICHI_AOT_CUDA_ERROR - code);
        return 1;
    }
    if (code == TAICHI_AOT_STACK_OVERFLOW) {
        snprintf(why, why_size, "%s overflowed its autodiff stacks (none was written past them): set AD_STACK_SIZE "
                 "(Taichi's ad_stack_size) in the kernel's file to more entries and build again", p->what);
        return 1;
    }
    if (code != 0) {
        char message[512] = "";
        uint64_t size = sizeof(message);
        const char *own = op_own_code(code);
        if (own == NULL && ti_get_last_error(&size, message) != TI_ERROR_SUCCESS) {
            message[sizeof(message) - 1] = 0;
        }
        snprintf(why, why_size, "%s failed (code %d): %s", p->what, code, own != NULL ? own : message);
        ti_set_last_error(TI_ERROR_SUCCESS, NULL);
        return 1;
    }
    return op_values(c, p, call, stream, why, why_size);
}

int taichi_aot_op_launch(TaichiAotOpCell *c, const TaichiAotOpPlan *p, const TaichiAotOpCall *call, void *stream,
                         char *why, size_t why_size) {
    int failed;
    pthread_mutex_lock(&c->lock);
    if (c->closed || p->closed) {
        snprintf(why, why_size, "ClosedError: %s: %s", p->what,
                 c->closed ? "its runtime is closed" : "its op was let go");
        failed = 1;
    } else {
        failed = op_launch(c, p, call, stream, why, why_size);
    }
    pthread_mutex_unlock(&c->lock);
    return failed;
}

int taichi_aot_op_current_device(const TaichiAotOpCell *c, int *device) {
    return c->cu == NULL || c->cu->ctx_device == NULL ? -1 : ((int (*)(int *))c->cu->ctx_device)(device);
}

int taichi_aot_op_copy(const TaichiAotOpCell *c, void *dst, const void *src, size_t bytes, void *stream) {
    return ((int (*)(uint64_t, uint64_t, size_t, void *))c->cu->dtod_async)((uint64_t)(uintptr_t)dst,
                                                                            (uint64_t)(uintptr_t)src, bytes, stream);
}
