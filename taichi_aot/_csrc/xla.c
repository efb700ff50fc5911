/* Kernels and compute graphs as XLA FFI custom calls (taichi_aot.jax): the handler XLA calls, on any of its
   threads, with no Python. A plan (TaichiAotXlaPlan, made by Python for one op and one way of passing its scalars)
   says where each kernel argument comes from: an operand buffer, a result buffer XLA allocated, a 0-d operand
   holding a scalar, or the packed TiArguments of the attribute "scalars". Its address travels as the attribute
   "plan". XLA's buffers are imported into the runtime once per address (and size), into a pool kept by the
   runtime's cell (TaichiAotXlaRuntime) for its life: libtaichi_c_api 1.7.4 cannot release an import (about 90
   bytes each), and XLA's allocators hand the same addresses out again.

   One lock per runtime cell: launches of its ops are serialised, and closing the runtime (Python marks the cell
   closed under the lock, first) waits for a launch in flight; a call after that, or after its op was let go, is an
   error XLA raises, never a launch on a dead handle. libtaichi's last error is thread-local: read and cleared here,
   on XLA's thread. On x64 the handler waits for the kernel before it returns (XLA reads the results next). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "taichi_aot.h"
#include "xla_ffi.h"

#define XLA_F16 10 /* XLA_FFI_DataType of an IEEE half */

typedef int (*xla_cu_memset)(uint64_t pointer, unsigned char value, size_t count, void *stream);
typedef int (*xla_cu_sync)(void *stream);
typedef int (*xla_cu_htod)(uint64_t device, const void *host, size_t bytes, void *stream);
typedef int (*xla_cu_dtod)(uint64_t dst, uint64_t src, size_t bytes, void *stream);
typedef int (*xla_cu_error_name)(int code, const char **name);
typedef int (*xla_cu_ctx_device)(int *device);

typedef struct {
    uintptr_t address;
    uint64_t bytes;
    TiMemory memory;
} xla_import;

typedef struct {
    pthread_mutex_t lock;
    TiRuntime runtime;
    int cuda;
    int closed;
    TaichiAotCudaRuntime own;  /* CUDA: the own launcher's runtime with XLA's stream and the cell's stand-in */
    xla_cu_memset memset_async; /* cuMemsetD8Async */
    xla_cu_sync sync;          /* cuStreamSynchronize */
    xla_cu_htod htod_async;    /* cuMemcpyHtoDAsync_v2: a returning kernel's values into XLA's device buffers */
    xla_cu_dtod dtod_async;    /* cuMemcpyDtoDAsync_v2: an input's bytes into a torch op's output (torchop.c) */
    xla_cu_error_name error_name; /* cuGetErrorName: a driver error said by name */
    xla_cu_ctx_device ctx_device; /* cuCtxGetDevice: the GPU XLA runs the op on (its context is current) */
    int device;                /* the GPU the runtime drives: its CUdevice (cuDeviceGet of its ordinal) */
    xla_import *table;         /* open addressing by address; capacity a power of two, at most half full */
    size_t count, capacity;
    uint64_t captured;         /* launches made while XLA captured its stream into a command buffer (a CUDA graph) */
} xla_cell;

void *taichi_aot_xla_runtime(TiRuntime runtime, int cuda, const TaichiAotCudaRuntime *own, void *memset_async,
                             void *sync, void *htod_async, void *dtod_async, void *error_name, void *ctx_device,
                             int device) {
    xla_cell *c = (xla_cell *)calloc(1, sizeof(xla_cell));
    if (c == NULL) {
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    c->runtime = runtime;
    c->cuda = cuda;
    if (own != NULL) {
        c->own = *own;
    }
    c->memset_async = (xla_cu_memset)memset_async;
    c->sync = (xla_cu_sync)sync;
    c->htod_async = (xla_cu_htod)htod_async;
    c->dtod_async = (xla_cu_dtod)dtod_async;
    c->error_name = (xla_cu_error_name)error_name;
    c->ctx_device = (xla_cu_ctx_device)ctx_device;
    c->device = device;
    return c;
}

/* What the runtime made since the cell was: its libtaichi runtime (taichi_aot's own CUDA runtime makes one only for a
   module whose kernels need it; NULL: none yet), and the own launcher's record (`own`, where the cell had none: the
   runtime's first module with PTX was loaded since; NULL: no change). Launches use them from now on. */
void taichi_aot_xla_update(void *cell, TiRuntime runtime, const TaichiAotCudaRuntime *own) {
    xla_cell *c = (xla_cell *)cell;
    pthread_mutex_lock(&c->lock);
    c->runtime = runtime;
    if (own != NULL && c->own.driver == NULL) {
        c->own = *own;
    }
    pthread_mutex_unlock(&c->lock);
}

/* The runtime is closing: no launch after this one returns. The cell itself stays (plans point to it). */
void taichi_aot_xla_close(void *cell) {
    xla_cell *c = (xla_cell *)cell;
    pthread_mutex_lock(&c->lock);
    c->closed = 1;
    free(c->table);
    c->table = NULL;
    c->count = c->capacity = 0;
    pthread_mutex_unlock(&c->lock);
}

/* The op was let go: its plan is never launched again (XLA may still hold compiled calls naming it). */
void taichi_aot_xla_release(TaichiAotXlaPlan *plan) {
    xla_cell *c = (xla_cell *)plan->runtime;
    pthread_mutex_lock(&c->lock);
    plan->closed = 1;
    pthread_mutex_unlock(&c->lock);
}

/* A count of the cell's, read under its lock: its imports (`captured` 0), or its captured launches. */
static uint64_t xla_count(void *cell, int captured) {
    xla_cell *c = (xla_cell *)cell;
    uint64_t n;
    pthread_mutex_lock(&c->lock);
    n = captured ? c->captured : (uint64_t)c->count;
    pthread_mutex_unlock(&c->lock);
    return n;
}

uint64_t taichi_aot_xla_captured(void *cell) {
    return xla_count(cell, 1);
}

uint64_t taichi_aot_xla_imports(void *cell) {
    return xla_count(cell, 0);
}

static size_t xla_slot(const xla_cell *c, uintptr_t address) {
    size_t i = (size_t)((address >> 4) * 0x9E3779B97F4A7C15ull) & (c->capacity - 1);
    while (c->table[i].address != 0 && c->table[i].address != address) {
        i = (i + 1) & (c->capacity - 1);
    }
    return i;
}

static int xla_grow(xla_cell *c) {
    size_t i, old = c->capacity, capacity = old ? old * 2 : 64;
    xla_import *was = c->table, *table = (xla_import *)calloc(capacity, sizeof(xla_import));
    if (table == NULL) {
        return 0;
    }
    c->table = table;
    c->capacity = capacity;
    for (i = 0; i < old; ++i) {
        if (was[i].address != 0) {
            c->table[xla_slot(c, was[i].address)] = was[i];
        }
    }
    free(was);
    return 1;
}

/* The runtime's import of the `bytes` at `data` (imported now where none, or a smaller one); NULL: refused. */
static TiMemory xla_memory(xla_cell *c, void *data, uint64_t bytes) {
    size_t i;
    TiMemory memory;
    if ((c->count + 1) * 2 > c->capacity && !xla_grow(c)) {
        return TI_NULL_HANDLE;
    }
    i = xla_slot(c, (uintptr_t)data);
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

static void *xla_error(const tao_ffi_frame *f, int32_t code, const char *message) {
    tao_ffi_error_args args;
    memset(&args, 0, sizeof(args));
    args.struct_size = TAO_FFI_SIZE(tao_ffi_error_args, errc);
    args.message = message;
    args.errc = code;
    return f->api->error_create(&args);
}

/* The frame's attribute `name`, of type `type` (3 scalar, 1 array), or NULL. */
static void *xla_attr(const tao_ffi_frame *f, const char *name, int32_t type) {
    int64_t i;
    size_t n = strlen(name);
    for (i = 0; i < f->attrs.size; ++i) {
        const tao_ffi_span *s = f->attrs.names[i];
        if (s->len == n && memcmp(s->ptr, name, n) == 0) {
            return f->attrs.types[i] == type ? f->attrs.attrs[i] : NULL;
        }
    }
    return NULL;
}

/* Argument `k` of the plan into `out`, from the frame: 0, or an error message (into `why`). */
/* An IEEE half's value as a float (the C-API carries an f16 scalar as an f32). */
static float xla_half(uint16_t h) {
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

static int xla_arg(xla_cell *c, const TaichiAotXlaPlan *p, uint32_t k, const tao_ffi_frame *f,
                   const tao_ffi_array *scalars, void *stream, TiArgument *out, char *why, size_t why_size) {
    const TaichiAotXlaArg *a = &p->args[k];
    const tao_ffi_list *list = a->kind == TAICHI_AOT_XLA_RESULT ? &f->rets : &f->args;
    const tao_ffi_buffer *b;
    uint64_t bytes;
    uint32_t i;
    memcpy(out, &p->templates[k], sizeof(TiArgument));
    if (a->kind == TAICHI_AOT_XLA_SCALAR_ATTR) {
        if (scalars == NULL || scalars->size < (size_t)(a->index + 1) * sizeof(TiArgument)) {
            snprintf(why, why_size, "%s argument %u: its scalar attribute is missing", p->what, k);
            return 1;
        }
        memcpy(out, (const char *)scalars->data + (size_t)a->index * sizeof(TiArgument), sizeof(TiArgument));
        return 0;
    }
    if ((int64_t)a->index >= list->size || list->types[a->index] != 1) {
        snprintf(why, why_size, "%s argument %u: no buffer %u", p->what, k, a->index);
        return 1;
    }
    b = (const tao_ffi_buffer *)list->items[a->index];
    if (b->dtype != a->dtype || b->rank != (int64_t)(a->ndim + a->elem_ndim)) {
        snprintf(why, why_size, "%s argument %u: a buffer of XLA type %d and rank %lld, expected type %d and rank %u",
                 p->what, k, (int)b->dtype, (long long)b->rank, (int)a->dtype, a->ndim + a->elem_ndim);
        return 1;
    }
    if (a->kind == TAICHI_AOT_XLA_SCALAR_OPERAND) { /* host memory (x64; Python refuses these on CUDA) */
        if (a->dtype == XLA_F16) {
            uint16_t h;
            float v;
            memcpy(&h, b->data, sizeof h);
            v = xla_half(h);
            memcpy((char *)out + a->value_offset, &v, sizeof v);
        } else {
            memcpy((char *)out + a->value_offset, b->data, a->value_size);
        }
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
    if (a->zero) { /* XLA's results are uninitialised: start from zeros, as a new ndarray does */
        if (!c->cuda) {
            memset(b->data, 0, bytes);
        } else if (c->memset_async((uint64_t)(uintptr_t)b->data, 0, bytes, stream) != 0) {
            snprintf(why, why_size, "%s argument %u: cuMemsetD8Async failed", p->what, k);
            return 1;
        }
    }
    if ((p->flags & TAICHI_AOT_LAUNCH_POINTERS) != 0) { /* the own launches take the pointer themselves */
        out->value.ndarray.memory = (TiMemory)((uintptr_t)b->data | TAICHI_AOT_POINTER_TAG);
        return 0;
    }
    out->value.ndarray.memory = xla_memory(c, b->data, bytes);
    if (out->value.ndarray.memory == TI_NULL_HANDLE) {
        snprintf(why, why_size, "%s argument %u: the library refused to import XLA's buffer", p->what, k);
        return 1;
    }
    return 0;
}

/* The driver's name of its error `code` (a CUresult), or a phrase where it gives none. */
static const char *xla_driver_error(const xla_cell *c, int code) {
    const char *name = NULL;
    if (c->error_name == NULL || c->error_name(code, &name) != 0 || name == NULL) {
        name = "an error the driver does not name";
    }
    return name;
}

/* A returning kernel's values, after its launch: each copied from its results' host memory into its XLA result
   buffer: x64's are host memory; CUDA's are device memory, written on XLA's stream (the own launcher waited for the
   kernel and read its results back before this). 0, or a message in `why`. */
static int xla_values(const xla_cell *c, const TaichiAotXlaPlan *p, const tao_ffi_frame *f, void *stream, char *why,
                      size_t why_size) {
    uint32_t k;
    for (k = 0; k < p->value_count; ++k) {
        uint32_t at = p->value_first + k;
        const char *value = (const char *)p->values + p->value_offsets[k];
        const tao_ffi_buffer *b;
        int code;
        if ((int64_t)at >= f->rets.size || f->rets.types[at] != 1) {
            snprintf(why, why_size, "%s: no result buffer %u for returned value %u", p->what, at, k);
            return 1;
        }
        b = (const tao_ffi_buffer *)f->rets.items[at];
        if (!c->cuda) {
            memcpy(b->data, value, p->value_sizes[k]);
            continue;
        }
        code = c->htod_async != NULL ? c->htod_async((uint64_t)(uintptr_t)b->data, value, p->value_sizes[k], stream)
                                     : -1;
        if (code != 0) {
            snprintf(why, why_size, "%s: returned value %u: cuMemcpyHtoDAsync into XLA's buffer failed: %s (CUresult "
                     "%d)", p->what, k, xla_driver_error(c, code), code);
            return 1;
        }
    }
    return 0;
}

/* What an error code of taichi_aot's own launches means (the Python launch's messages, backends/cuda.py, say more),
   or NULL for libtaichi's (its last error says). */
static const char *xla_own_code(int code) {
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
static int xla_launch(xla_cell *c, const TaichiAotXlaPlan *p, const tao_ffi_frame *f, void *stream, char *why,
                      size_t why_size) {
    TiArgument args[TAICHI_AOT_XLA_MAX_ARGS];
    TiNamedArgument named[TAICHI_AOT_XLA_MAX_ARGS];
    const tao_ffi_array *scalars = (const tao_ffi_array *)xla_attr(f, "scalars", 1);
    uint32_t k;
    int code;
    for (k = 0; k < p->arg_count; ++k) {
        if (xla_arg(c, p, k, f, scalars, stream, &args[k], why, why_size)) {
            ti_set_last_error(TI_ERROR_SUCCESS, NULL);
            return 1;
        }
    }
    { /* the dispatcher's (launch.c), on XLA's stream; a kernel of the own launcher with the cell's stand-in */
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
        if (p->kind == TAICHI_AOT_KIND_GRAPH || p->kind == TAICHI_AOT_KIND_CUDA_GRAPH) { /* named arguments */
            for (k = 0; k < p->arg_count; ++k) {
                named[k].name = p->names[k];
                named[k].argument = args[k];
            }
            launch.args = named;
        }
        where.stream = stream;
        where.own = &own;
        where.sync = c->cuda ? c->sync : NULL;
        code = taichi_aot_launch_elsewhere(&launch, &where);
        c->captured += own.captured;
    }
    if (code < TAICHI_AOT_CUDA_ERROR) { /* the driver's error, by name */
        snprintf(why, why_size, "%s: %s failed: %s (CUresult %d)", p->what,
                 (p->flags & TAICHI_AOT_LAUNCH_CODES) == 0 ? "cuStreamSynchronize of XLA's stream" : "the launch",
                 xla_driver_error(c, TAICHI_AOT_CUDA_ERROR - code), TAICHI_AOT_CUDA_ERROR - code);
        return 1;
    }
    if (code == TAICHI_AOT_CUDA_STACK_OVERFLOW) {
        snprintf(why, why_size, "%s overflowed its autodiff stacks (none was written past them): set AD_STACK_SIZE "
                 "(Taichi's ad_stack_size) in the kernel's file to more entries and build again", p->what);
        return 1;
    }
    if (code != 0) {
        char message[512] = "";
        uint64_t size = sizeof(message);
        const char *own = xla_own_code(code);
        if (own == NULL && ti_get_last_error(&size, message) != TI_ERROR_SUCCESS) {
            message[sizeof(message) - 1] = 0;
        }
        snprintf(why, why_size, "%s failed (code %d): %s", p->what, code, own != NULL ? own : message);
        ti_set_last_error(TI_ERROR_SUCCESS, NULL);
        return 1;
    }
    return xla_values(c, p, f, stream, why, why_size);
}

/* The launch under the cell's lock, refused where the runtime or the op (`p`) was closed: 0, or a message in `why`.
   XLA's handler and torch's boxed kernel (torchop.c) launch through it. */
static int xla_launch_open(xla_cell *c, const TaichiAotXlaPlan *p, const tao_ffi_frame *f, void *stream, char *why,
                           size_t why_size) {
    int failed;
    pthread_mutex_lock(&c->lock);
    if (c->closed || p->closed) {
        snprintf(why, why_size, "ClosedError: %s: %s", p->what,
                 c->closed ? "its runtime is closed" : "its op was let go");
        failed = 1;
    } else {
        failed = xla_launch(c, p, f, stream, why, why_size);
    }
    pthread_mutex_unlock(&c->lock);
    return failed;
}

/* What XLA asks of a handler before it runs it: its API version and traits (`graphable`: its launches may be captured
   into XLA's command buffers, XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE). */
static void *xla_metadata(tao_ffi_frame *f, uint32_t traits) {
    tao_ffi_metadata_ext *ext = (tao_ffi_metadata_ext *)f->extension_start;
    ext->metadata->api_version.struct_size = TAO_FFI_SIZE(tao_ffi_version, minor_version);
    ext->metadata->api_version.extension_start = NULL;
    ext->metadata->api_version.major_version = 0;
    ext->metadata->api_version.minor_version = 1;
    ext->metadata->traits = traits;
    return NULL;
}

/* Python's (taichi_aot.jax, cffi's extern "Python": it takes the GIL): the op's plan on GPU `device` (`*made`) of the
   plan whose `twin` handle `op` is. 0, or nonzero with why not in `why`. */
static int32_t taichi_aot_xla_twin(void *op, int32_t device, void **made, char *why, size_t why_size);

/* Set at the interpreter's exit (atexit): from then on no twin is made, Python is not entered from XLA's threads. */
static volatile int xla_twins_stopped;

void taichi_aot_xla_stop_twins(void) {
    xla_twins_stopped = 1;
}

/* The plan's twin on GPU `device` (by CUDA device), made the first time it is asked for: XLA running the op there.
   The module is loaded on that GPU then, once, and only on the GPUs the program runs the op on. The table entry is
   published with release order and read with acquire order (XLA's threads read it with no lock). The twin's plan,
   or NULL with why not in `why`. */
static TaichiAotXlaPlan *xla_twin_plan(const TaichiAotXlaPlan *p, int32_t device, char *why, size_t why_size) {
    void *made;
    why[0] = '\0';
    if (p->devices == NULL) {
        snprintf(why, why_size, "an op's twin runs on its own GPU only");
        return NULL;
    }
    if (device < 0 || device >= p->device_count) {
        snprintf(why, why_size, "JAX had no GPU %d when the op was traced", (int)device);
        return NULL;
    }
    made = __atomic_load_n(&p->devices[device], __ATOMIC_ACQUIRE);
    if (made != NULL) {
        return (TaichiAotXlaPlan *)made;
    }
    if (p->twin == NULL || xla_twins_stopped) {
        snprintf(why, why_size, "%s", p->twin == NULL ? "no twin is made for it" : "the interpreter is exiting");
        return NULL;
    }
    if (taichi_aot_xla_twin(p->twin, device, &made, why, why_size) != 0 || made == NULL) {
        if (why[0] == '\0') { /* an exception the maker did not catch (KeyboardInterrupt): its traceback on stderr */
            snprintf(why, why_size, "Python failed to make it (its traceback is on standard error)");
        }
        return NULL;
    }
    __atomic_store_n(&p->devices[device], made, __ATOMIC_RELEASE);
    return (TaichiAotXlaPlan *)made;
}

/* xla_twin_plan as the handler asks for it, for the tests: 0 (`devices[device]` set), or 1 with why not. */
int32_t taichi_aot_xla_make_twin(const TaichiAotXlaPlan *p, int32_t device, char *why, size_t why_size) {
    return xla_twin_plan(p, device, why, why_size) == NULL;
}

/* CUDA: XLA's stream (`*stream`), and the plan and cell of the GPU XLA runs the op on (the op's plan there, where
   its runtime drives another: jax.pmap, shard_map; made there at its first run). 0, or 1 with the message in `why`
   (`*stream` NULL: no stream). */
static int xla_on_device(const tao_ffi_frame *f, TaichiAotXlaPlan **plan, xla_cell **cell, void **stream, char *why,
                         size_t why_size) {
    tao_ffi_stream_args s;
    TaichiAotXlaPlan *p = *plan, *twin;
    int device = -1;
    char made[512];
    memset(&s, 0, sizeof(s));
    s.struct_size = TAO_FFI_SIZE(tao_ffi_stream_args, stream);
    s.ctx = f->ctx;
    if (f->api->stream_get(&s) != NULL) {
        snprintf(why, why_size, "taichi_aot: XLA gave no CUDA stream");
        return 1;
    }
    *stream = s.stream;
    if ((*cell)->ctx_device == NULL || (*cell)->ctx_device(&device) != 0 || device == (*cell)->device ||
        p->closed || (*cell)->closed) { /* a closed op or runtime: said by the caller, its twins never run */
        return 0;
    }
    twin = xla_twin_plan(p, device, made, sizeof(made));
    if (twin != NULL) { /* the op's plan on the GPU XLA runs it on */
        *plan = twin;
        *cell = (xla_cell *)twin->runtime;
        return 0;
    }
    snprintf(why, why_size, "%s: XLA runs it on GPU %d, and its runtime drives GPU %d; it cannot run on GPU %d as "
             "well: %s", p->what, device, (*cell)->device, device, made);
    return 1;
}

/* The handler of both platforms: `cuda`, whether XLA calls it for a GPU; `graphable`, whether it told XLA its launches
   may be captured (kernels of the own CUDA launcher whose launch never waits: Python picks the target). */
static void *xla_call(void *frame, int cuda, uint32_t graphable) {
    tao_ffi_frame *f = (tao_ffi_frame *)frame;
    const tao_ffi_scalar *address;
    TaichiAotXlaPlan *p;
    xla_cell *c;
    char why[1280];
    void *stream = NULL;
    if (f->extension_start != NULL && f->extension_start->type == 1) {
        return xla_metadata(f, graphable);
    }
    address = (const tao_ffi_scalar *)xla_attr(f, "plan", 3);
    if (f->stage != 3 || address == NULL || address->dtype != 5) {
        return xla_error(f, 3, "taichi_aot: a call without its plan (an s64 attribute), or at another stage");
    }
    p = (TaichiAotXlaPlan *)(uintptr_t)(*(const int64_t *)address->value);
    c = (xla_cell *)p->runtime;
    if (c->cuda != cuda) {
        snprintf(why, sizeof(why), "%s: its runtime is %s, and XLA runs it on %s: put its arrays %s", p->what,
                 c->cuda ? "CUDA" : "x64", cuda ? "a GPU" : "the CPU",
                 c->cuda ? "on the GPU" : "on the CPU (jax.devices(\"cpu\"), jax.default_device)");
        return xla_error(f, 3, why);
    }
    if (c->cuda && xla_on_device(f, &p, &c, &stream, why, sizeof(why)) != 0) {
        return xla_error(f, stream == NULL ? 13 : 9, why);
    }
    return xla_launch_open(c, p, f, stream, why, sizeof(why)) != 0 ? xla_error(f, 9, why) : NULL;
}

/* The handlers: XLA_FFI_Error *(XLA_FFI_CallFrame *), registered for the platforms "cpu" and "CUDA". */
void *taichi_aot_xla_call_cpu(void *frame) {
    return xla_call(frame, 0, 0);
}

void *taichi_aot_xla_call_cuda(void *frame) {
    return xla_call(frame, 1, 0);
}

void *taichi_aot_xla_call_graphable(void *frame) {
    return xla_call(frame, 1, 1);
}

/* An FFI call that does nothing: XLA's own floor for a custom call (the bench measures it beside ops). */
void *taichi_aot_xla_empty(void *frame) {
    tao_ffi_frame *f = (tao_ffi_frame *)frame;
    if (f->extension_start != NULL && f->extension_start->type == 1) {
        return xla_metadata(f, 0);
    }
    return NULL;
}
