/* Kernels and compute graphs as XLA FFI custom calls (taichi_aot.jax): the handler XLA calls, on any of its
   threads, with no Python, thin over the op's launch (opplan.c): the frame's buffers and the attribute "scalars"
   (the packed TiArguments of an op whose scalars travel as attributes) become the launch's list of buffers. The
   plan's address travels as the attribute "plan". On CUDA, the plan of the GPU XLA runs the op on (its twin, made
   by Python the first time: jax.pmap, shard_map) is the one launched. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opplan.h"
#include "taichi_aot.h"
#include "xla_ffi.h"

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

/* A list of the frame's buffers as the op's launch takes them (`out`, at most `room`; an item that is no buffer has
   rank -1): its count, or -1 where the frame has more. */
static int64_t xla_buffers(const tao_ffi_list *list, TaichiAotOpBuffer *out, int64_t room) {
    int64_t i;
    if (list->size > room) {
        return -1;
    }
    for (i = 0; i < list->size; ++i) {
        const tao_ffi_buffer *b = (const tao_ffi_buffer *)list->items[i];
        if (list->types[i] == 1) {
            out[i].dtype = b->dtype;
            out[i].data = b->data;
            out[i].rank = b->rank;
            out[i].dims = b->dims;
        } else {
            memset(&out[i], 0, sizeof(out[i]));
            out[i].rank = -1;
        }
    }
    return list->size;
}

/* The op's launch with the frame's buffers and scalars, under the cell's lock (opplan.c): 0, or a message. */
static int xla_launch(TaichiAotOpCell *c, const TaichiAotOpPlan *p, const tao_ffi_frame *f, void *stream, char *why,
                      size_t why_size) {
    TaichiAotOpBuffer args[2 * TAICHI_AOT_OP_MAX_ARGS], rets[2 * TAICHI_AOT_OP_MAX_ARGS];
    const tao_ffi_array *scalars = (const tao_ffi_array *)xla_attr(f, "scalars", 1);
    TaichiAotOpCall call;
    int64_t n_args = xla_buffers(&f->args, args, 2 * TAICHI_AOT_OP_MAX_ARGS);
    int64_t n_rets = xla_buffers(&f->rets, rets, 2 * TAICHI_AOT_OP_MAX_ARGS);
    if (n_args < 0 || n_rets < 0) {
        if (!p->closed && !c->closed) {
            snprintf(why, why_size, "%s: more buffers than an op takes (%d)", p->what, 2 * TAICHI_AOT_OP_MAX_ARGS);
            return 1;
        }
        n_args = n_rets = 0; /* a closed op or runtime: the launch says so */
    }
    call.args = args;
    call.arg_count = (uint32_t)n_args;
    call.rets = rets;
    call.ret_count = (uint32_t)n_rets;
    call.scalars = scalars != NULL ? scalars->data : NULL;
    call.scalars_size = scalars != NULL ? scalars->size : 0;
    return taichi_aot_op_launch(c, p, &call, stream, why, why_size);
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
static TaichiAotOpPlan *xla_twin_plan(const TaichiAotOpPlan *p, int32_t device, char *why, size_t why_size) {
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
        return (TaichiAotOpPlan *)made;
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
    return (TaichiAotOpPlan *)made;
}

/* xla_twin_plan as the handler asks for it, for the tests: 0 (`devices[device]` set), or 1 with why not. */
int32_t taichi_aot_xla_make_twin(const TaichiAotOpPlan *p, int32_t device, char *why, size_t why_size) {
    return xla_twin_plan(p, device, why, why_size) == NULL;
}

/* CUDA: XLA's stream (`*stream`), and the plan and cell of the GPU XLA runs the op on (the op's plan there, where
   its runtime drives another: jax.pmap, shard_map; made there at its first run). 0, or 1 with the message in `why`
   (`*stream` NULL: no stream). */
static int xla_on_device(const tao_ffi_frame *f, TaichiAotOpPlan **plan, TaichiAotOpCell **cell, void **stream, char *why,
                         size_t why_size) {
    tao_ffi_stream_args s;
    TaichiAotOpPlan *p = *plan, *twin;
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
    if (taichi_aot_op_current_device(*cell, &device) != 0 || device == (*cell)->device ||
        p->closed || (*cell)->closed) { /* a closed op or runtime: said by the caller, its twins never run */
        return 0;
    }
    twin = xla_twin_plan(p, device, made, sizeof(made));
    if (twin != NULL) { /* the op's plan on the GPU XLA runs it on */
        *plan = twin;
        *cell = (TaichiAotOpCell *)twin->runtime;
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
    TaichiAotOpPlan *p;
    TaichiAotOpCell *c;
    char why[1280];
    void *stream = NULL;
    if (f->extension_start != NULL && f->extension_start->type == 1) {
        return xla_metadata(f, graphable);
    }
    address = (const tao_ffi_scalar *)xla_attr(f, "plan", 3);
    if (f->stage != 3 || address == NULL || address->dtype != 5) {
        return xla_error(f, 3, "taichi_aot: a call without its plan (an s64 attribute), or at another stage");
    }
    p = (TaichiAotOpPlan *)(uintptr_t)(*(const int64_t *)address->value);
    c = (TaichiAotOpCell *)p->runtime;
    if (c->cuda != cuda) {
        snprintf(why, sizeof(why), "%s: its runtime is %s, and XLA runs it on %s: put its arrays %s", p->what,
                 c->cuda ? "CUDA" : "x64", cuda ? "a GPU" : "the CPU",
                 c->cuda ? "on the GPU" : "on the CPU (jax.devices(\"cpu\"), jax.default_device)");
        return xla_error(f, 3, why);
    }
    if (c->cuda && xla_on_device(f, &p, &c, &stream, why, sizeof(why)) != 0) {
        return xla_error(f, stream == NULL ? 13 : 9, why);
    }
    return xla_launch(c, p, f, stream, why, sizeof(why)) != 0 ? xla_error(f, 9, why) : NULL;
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
