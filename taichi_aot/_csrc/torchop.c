/* A torch op's kernel for torch's dispatcher in C (taichi_aot.torch): what a compiled graph (torch.compile) calls
   for an op whose inputs need no gradient, with no Python between the graph's call and the launch. It is a boxed
   kernel registered through the C functions torch exports with a stable ABI (`aoti_torch_library_impl`,
   torch/csrc/inductor/aoti_torch/c/shim.h): torch hands it a stack of 64-bit values (a tensor: a new at::Tensor
   handle it owns; a float: a double's bits; an int: an int64) and takes its outputs from the same stack. The kernel
   gets no word of which op it serves, so each op takes one of TAICHI_AOT_TORCH_SLOTS functions, each of which reads
   its slot.

   The launch is the op's plan's (opplan.c's TaichiAotOpPlan, made as a JAX op's): the tensors become the launch's
   list of buffers, and taichi_aot_op_launch launches under its runtime cell's lock, on torch's current CUDA stream of the
   op's GPU (x64: waited for). Its outputs are made here by torch's own allocator, each an empty tensor like its
   input: the input's bytes copied in on the stream where the kernel reads and writes it, else zero-filled by the
   plan. Every tensor is checked against what the plan takes (device, dtype, dims, element dims, a dense row-major
   layout, no empty dim) before anything is launched; a fault is thrown to torch as its own error (c10::Error: a
   RuntimeError in Python), after the handles this kernel owns are let go. */

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "opplan.h"
#include "taichi_aot.h"
#include "torch.h"

#define TORCHOP_MESSAGE 768

typedef int32_t (*torchop_handle_fn)(void *tensor);
typedef int32_t (*torchop_empty_fn)(int64_t ndim, const int64_t *sizes, const int64_t *strides, int32_t dtype,
                                    int32_t device_type, int32_t device_index, void **out);
typedef int32_t (*torchop_stream_fn)(int32_t device_index, void **stream);
typedef int32_t (*torchop_guard_fn)(int32_t device_index, void **guard);
typedef int32_t (*torchop_init_fn)(const char *ns, const char *key, const char *file, uint32_t line, void **out);
typedef int32_t (*torchop_impl_fn)(void *library, const char *name, void (*fn)(uint64_t *, uint64_t, uint64_t));
typedef int32_t (*torchop_delete_fn)(void *library);
typedef void (*torchop_fail_fn)(const char *func, const char *file, uint32_t line, const char *message);

/* torch's functions, in the order bind looks them up (each a pointer, as dlsym gives it: no padding between) */
static struct {
    torchop_handle_fn delete_tensor;
    torchop_empty_fn empty_strided;
    torchop_init_fn library_init;
    torchop_impl_fn library_impl;
    torchop_delete_fn library_delete;
    torchop_fail_fn fail;          /* libc10's c10::detail::torchCheckFail(const char *, const char *, uint32_t,
                                      const char *): throws c10::Error */
    torchop_stream_fn cuda_stream; /* libtorch_cuda's (these three); NULL without torch's CUDA */
    torchop_guard_fn cuda_guard;   /* torch's current device set to the op's GPU for the call (CUDAGuard) */
    torchop_handle_fn cuda_guard_delete;
} torchop_fns;

static int torchop_bound;
/* Each slot's op (NULL once let go), and what a call of a slot let go still needs: which stack entries are tensor
   handles it owns (the slot's last op's, kept). A call in flight counts in its op's `busy`, under the lock; release
   waits for none (`torchop_idle`) before the op's memory may go. */
static TaichiAotTorchOp *torchop_slots[TAICHI_AOT_TORCH_SLOTS];
static uint8_t torchop_slot_tensors[TAICHI_AOT_TORCH_SLOTS][TAICHI_AOT_OP_MAX_ARGS];
static uint32_t torchop_slot_counts[TAICHI_AOT_TORCH_SLOTS];
static pthread_mutex_t torchop_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t torchop_idle = PTHREAD_COND_INITIALIZER;
/* What a slot holds while its op is released (its kernel still registered): no call takes it, no op is given it. */
static TaichiAotTorchOp torchop_closing;

/* Look torch's functions up in its libraries, which `import torch` loaded (each opened again by its name, kept open
   for the process): libtorch_cpu and libc10 once, and where given (a CUDA op), libtorch_cuda's current stream. 1 where
   all that was asked was found (torch.c's functions too). */
int taichi_aot_torch_op_bind(const char *torch_cpu, const char *c10, const char *torch_cuda) {
    static const char *const names[5] = {"aoti_torch_delete_tensor_object", "aoti_torch_empty_strided",
                                         "aoti_torch_library_init_impl", "aoti_torch_library_impl",
                                         "aoti_torch_delete_library_object"};
    static const char *const fail[1] = {"_ZN3c106detail14torchCheckFailEPKcS2_jS2_"};
    static const char *const cuda[3] = {"aoti_torch_get_current_cuda_stream", "aoti_torch_create_cuda_guard",
                                        "aoti_torch_delete_cuda_guard"};
    void **slots = (void **)&torchop_fns;
    char why[256];
    pthread_mutex_lock(&torchop_lock);
    if (!torchop_bound && taichi_aot_torch_bind(torch_cpu) &&
        taichi_aot_open_functions(torch_cpu, names, slots, 5, why, sizeof why) != NULL &&
        taichi_aot_open_functions(c10, fail, slots + 5, 1, why, sizeof why) != NULL) {
        torchop_bound = 1;
    }
    if (torchop_bound && torch_cuda != NULL && torchop_fns.cuda_stream == NULL &&
        taichi_aot_open_functions(torch_cuda, cuda, slots + 6, 3, why, sizeof why) == NULL) {
        torchop_fns.cuda_stream = NULL;
    }
    pthread_mutex_unlock(&torchop_lock);
    return torchop_bound && (torch_cuda == NULL || torchop_fns.cuda_stream != NULL);
}

/* What one call holds: the stack's tensors (owned), the outputs made, the launch's buffers (their dims torch's). */
typedef struct {
    void *inputs[TAICHI_AOT_OP_MAX_ARGS];
    void *outputs[TAICHI_AOT_OP_MAX_ARGS];
    TaichiAotOpBuffer in_buffers[TAICHI_AOT_OP_MAX_ARGS], out_buffers[TAICHI_AOT_OP_MAX_ARGS];
    int64_t scalars[TAICHI_AOT_OP_MAX_ARGS];
    char why[TORCHOP_MESSAGE];
} torchop_call;

/* Every handle the call owns let go (inputs, and the outputs where `outputs_too`). */
static void torchop_let_go(const TaichiAotTorchOp *op, torchop_call *t, int outputs_too) {
    uint32_t k;
    for (k = 0; k < op->input_count; ++k) {
        if (t->inputs[k] != NULL) {
            torchop_fns.delete_tensor(t->inputs[k]);
        }
    }
    for (k = 0; outputs_too && k < op->output_count; ++k) {
        if (t->outputs[k] != NULL) {
            torchop_fns.delete_tensor(t->outputs[k]);
        }
    }
}

/* torch's name of dtype `code` (c10::ScalarType's number, which torch's C functions give), or NULL. */
static const char *torchop_dtype(int32_t code) {
    static const char *const names[30] = {
        "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", NULL, NULL, NULL, "bool", NULL,
        NULL, NULL, "bfloat16", NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "uint16",
        "uint32", "uint64"};
    return code >= 0 && code < 30 ? names[code] : NULL;
}

/* Tensor `t` as the buffer of plan argument `arg` into `b` (its dims torch's own array): 0, or a message. */
static int torchop_tensor(const TaichiAotTorchOp *op, void *t, int32_t dtype, const TaichiAotOpArg *arg,
                          const TiArgument *template_, TaichiAotOpBuffer *b, const char *what, char *why) {
    TaichiAotTorchLayout l;
    int64_t *sizes, *strides, expect = 1;
    uint32_t rank = arg->ndim + arg->elem_ndim;
    int64_t i;
    if (!taichi_aot_torch_read(t, &l, &sizes, &strides)) {
        snprintf(why, TORCHOP_MESSAGE, "%s: %s: torch could not say its layout", op->what, what);
        return 1;
    }
    if (l.device_type != op->device_type || (op->device_type != op->cpu_type && l.device_index != op->device_index)) {
        snprintf(why, TORCHOP_MESSAGE, "%s: %s: a tensor on another device than the op's (%s)", op->what, what,
                 op->device);
        return 1;
    }
    if (l.dtype != dtype || l.dim != (int64_t)rank) {
        const char *got = torchop_dtype(l.dtype), *want = torchop_dtype(dtype);
        snprintf(why, TORCHOP_MESSAGE, "%s: %s: a tensor of torch.%s with %lld dims, expected torch.%s with %u",
                 op->what, what, got != NULL ? got : "(another dtype)", (long long)l.dim,
                 want != NULL ? want : "(its dtype)", rank);
        return 1;
    }
    for (i = l.dim - 1; i >= 0; --i) { /* dense, row-major; element dims as the kernel was compiled for */
        if (sizes[i] != 1 && strides[i] != expect) {
            snprintf(why, TORCHOP_MESSAGE, "%s: %s: a tensor that is not contiguous", op->what, what);
            return 1;
        }
        if (i >= arg->ndim && sizes[i] != (int64_t)template_->value.ndarray.elem_shape.dims[i - arg->ndim]) {
            snprintf(why, TORCHOP_MESSAGE, "%s: %s: element dim %lld is %lld, and the kernel takes %u", op->what,
                     what, (long long)(i - arg->ndim), (long long)sizes[i],
                     template_->value.ndarray.elem_shape.dims[i - arg->ndim]);
            return 1;
        }
        expect *= sizes[i];
    }
    b->dtype = arg->dtype;
    b->data = l.data;
    b->rank = l.dim;
    b->dims = sizes; /* torch's own array: valid while the tensor is held */
    return 0;
}

/* Scalar input `k` (a double's or an int64's bits in `value`) as plan argument `arg`'s value in `out`: 0, or a
   message where it does not fit the kernel's type. */
static int torchop_scalar(const TaichiAotTorchOp *op, uint32_t k, uint64_t value, const TaichiAotOpArg *arg,
                          int64_t *out, char *why) {
    double d;
    int64_t v;
    if (op->input_kinds[k] == TAICHI_AOT_TORCH_FLOAT) {
        memcpy(&d, &value, sizeof d);
        if (arg->dtype == 11) {
            float f = (float)d;
            if (isfinite(d) && !isfinite(f)) {
                snprintf(why, TORCHOP_MESSAGE, "%s: input %u: %g is out of range for f32", op->what, k, d);
                return 1;
            }
            memcpy(out, &f, sizeof f);
        } else {
            memcpy(out, &d, sizeof d);
        }
        return 0;
    }
    memcpy(&v, &value, sizeof v);
    {
        static const int64_t low[10] = {0, 0, INT8_MIN, INT16_MIN, INT32_MIN, INT64_MIN, 0, 0, 0, 0};
        static const int64_t high[10] = {0, 1, INT8_MAX, INT16_MAX, INT32_MAX, INT64_MAX, UINT8_MAX, UINT16_MAX,
                                         UINT32_MAX, INT64_MAX};
        if (arg->dtype < 1 || arg->dtype > 9 || v < low[arg->dtype] || v > high[arg->dtype]) {
            snprintf(why, TORCHOP_MESSAGE, "%s: input %u: %lld does not fit the kernel's type (XLA type %d)",
                     op->what, k, (long long)v, (int)arg->dtype);
            return 1;
        }
    }
    memcpy(out, &v, sizeof v); /* little-endian: the low bytes are the narrower type's value */
    return 0;
}

/* The stack's inputs as the plan's operands: 0, or a message. */
static int torchop_inputs(const TaichiAotTorchOp *op, const uint64_t *stack, torchop_call *t) {
    const TaichiAotOpPlan *p = op->plan;
    uint32_t k;
    char what[32];
    for (k = 0; k < op->input_count; ++k) {
        const TaichiAotOpArg *arg = &p->args[op->input_args[k]];
        TaichiAotOpBuffer *b = &t->in_buffers[k];
        memset(b, 0, sizeof(*b));
        snprintf(what, sizeof what, "input %u", k);
        if (op->input_kinds[k] == TAICHI_AOT_TORCH_TENSOR) {
            if (torchop_tensor(op, t->inputs[k], op->input_dtypes[k], arg, &p->templates[op->input_args[k]], b,
                               what, t->why) != 0) {
                return 1;
            }
            continue;
        }
        if (torchop_scalar(op, k, stack[k], arg, &t->scalars[k], t->why) != 0) {
            return 1;
        }
        b->dtype = arg->dtype;
        b->data = &t->scalars[k];
        b->rank = 0;
    }
    return 0;
}

/* Output `k`'s dims into `dims` (its input's leading ones, then its own): its rank. */
static int64_t torchop_dims(const TaichiAotTorchOp *op, const torchop_call *t, uint32_t k, int64_t *dims) {
    const TaichiAotTorchOutput *o = &op->outputs[k];
    uint32_t i;
    for (i = 0; i < o->lead; ++i) {
        dims[i] = t->in_buffers[o->source].dims[i];
    }
    for (i = o->lead; i < o->rank; ++i) {
        dims[i] = o->dims[i];
    }
    return o->rank;
}

/* Output `k` made: an empty contiguous tensor (its input's bytes copied in on the stream where the kernel reads and
   writes it; else zero-filled by the plan, or a returned value the launch writes) and its buffer: 0, or a message. */
static int torchop_output(const TaichiAotTorchOp *op, torchop_call *t, uint32_t k, void *stream) {
    const TaichiAotTorchOutput *o = &op->outputs[k];
    const TaichiAotOpPlan *p = op->plan;
    const TaichiAotOpCell *cell;
    int64_t dims[16], strides[16], count = 1, i, rank = torchop_dims(op, t, k, dims);
    char what[32];
    for (i = rank - 1; i >= 0; --i) {
        strides[i] = count;
        count *= dims[i];
    }
    if (torchop_fns.empty_strided(rank, dims, strides, o->dtype, op->device_type, op->device_index,
                                  &t->outputs[k]) != 0) {
        t->outputs[k] = NULL;
        snprintf(t->why, TORCHOP_MESSAGE, "%s: torch could not make output %u", op->what, k);
        return 1;
    }
    memset(&t->out_buffers[k], 0, sizeof(t->out_buffers[k]));
    if (o->arg < 0) { /* a returned value: its bytes copied in after the launch (opplan.c's op_values) */
        if (taichi_aot_torch_data_ptr(t->outputs[k], &t->out_buffers[k].data) != 0) {
            snprintf(t->why, TORCHOP_MESSAGE, "%s: torch could not say output %u's memory", op->what, k);
            return 1;
        }
        return 0;
    }
    snprintf(what, sizeof what, "output %u", k);
    if (torchop_tensor(op, t->outputs[k], o->dtype, &p->args[o->arg], &p->templates[o->arg], &t->out_buffers[k],
                       what, t->why) != 0) {
        return 1;
    }
    if (!o->copy) {
        return 0;
    }
    cell = (const TaichiAotOpCell *)p->runtime;
    if (!cell->cuda) { /* x64: host memory */
        memcpy(t->out_buffers[k].data, t->in_buffers[o->source].data, (size_t)count * p->args[o->arg].itemsize);
    } else if (taichi_aot_op_copy(cell, t->out_buffers[k].data, t->in_buffers[o->source].data,
                                  (size_t)count * p->args[o->arg].itemsize, stream) != 0) {
        snprintf(t->why, TORCHOP_MESSAGE, "%s: output %u: cuMemcpyDtoDAsync of its input failed", op->what, k);
        return 1;
    }
    return 0;
}

/* The outputs made (torchop_output): 0, or a message. */
static int torchop_outputs(const TaichiAotTorchOp *op, torchop_call *t, void *stream) {
    uint32_t k;
    for (k = 0; k < op->output_count; ++k) {
        if (torchop_output(op, t, k, stream) != 0) {
            return 1;
        }
    }
    return 0;
}

/* The launch on `stream` (torch's current stream of the op's GPU; x64: none), under the cell's lock: 0, or a
   message. */
static int torchop_launch(const TaichiAotTorchOp *op, torchop_call *t, void *stream) {
    const TaichiAotOpCall call = {t->in_buffers, op->input_count, t->out_buffers, op->output_count, NULL, 0};
    return taichi_aot_op_launch((TaichiAotOpCell *)op->plan->runtime, op->plan, &call, stream, t->why,
                                TORCHOP_MESSAGE);
}

/* torch's current stream of the op's GPU into `*stream` (x64: NULL): 0, or a message. */
static int torchop_stream(const TaichiAotTorchOp *op, torchop_call *t, void **stream) {
    *stream = NULL;
    if (op->device_type != op->cpu_type &&
        (torchop_fns.cuda_stream == NULL || torchop_fns.cuda_stream(op->device_index, stream) != 0)) {
        snprintf(t->why, TORCHOP_MESSAGE, "%s: torch gave no current CUDA stream", op->what);
        return 1;
    }
    return 0;
}

/* Whether the call comes from the process that owns the op's runtime and from a thread that may launch on it: any
   (`thread` 0: taichi_aot's own CUDA runtime), else the runtime's own (libtaichi's runtimes). 0, or a message. */
static int torchop_thread(const TaichiAotTorchOp *op, torchop_call *t) {
    if ((op->thread == 0 || (uint64_t)pthread_self() == op->thread) && getpid() == op->pid) {
        return 0;
    }
    snprintf(t->why, TORCHOP_MESSAGE, "WrongThreadError: %s: its runtime belongs to thread %llu of process %d; it "
             "was called from thread %llu of process %d (libtaichi's runtime is used from the thread that made it: "
             "create one runtime per thread%s)", op->what, (unsigned long long)op->thread, (int)op->pid,
             (unsigned long long)pthread_self(), (int)getpid(),
             op->device_type != op->cpu_type ? ", or taichi_aot's own CUDA runtime, which any thread may use" : "");
    return 1;
}

/* torch's current device made the op's GPU for the call (`*guard`, deleted after it) where the current CUDA context
   is another GPU's or none (its copies and fills run in the current context): 0, or a message. */
static int torchop_device(const TaichiAotTorchOp *op, torchop_call *t, void **guard) {
    const TaichiAotOpCell *c = (const TaichiAotOpCell *)op->plan->runtime;
    int device = -1;
    *guard = NULL;
    if (!c->cuda || (taichi_aot_op_current_device(c, &device) == 0 && device == c->device)) {
        return 0;
    }
    if (torchop_fns.cuda_guard == NULL || torchop_fns.cuda_guard(op->device_index, guard) != 0) {
        *guard = NULL;
        snprintf(t->why, TORCHOP_MESSAGE, "%s: torch could not make %s its current device", op->what, op->device);
        return 1;
    }
    return 0;
}

/* The stack's tensor handles of a call that found its slot let go, or the stack not of its op's size, let go. */
static void torchop_refuse(uint32_t slot, uint64_t *stack, uint64_t count) {
    uint64_t k;
    pthread_mutex_lock(&torchop_lock);
    for (k = 0; k < count && k < torchop_slot_counts[slot]; ++k) {
        if (torchop_slot_tensors[slot][k] && stack[k] != 0) {
            torchop_fns.delete_tensor((void *)(uintptr_t)stack[k]);
        }
    }
    pthread_mutex_unlock(&torchop_lock);
}

/* The boxed kernel of slot `slot`: see the file's head. */
static void torchop_run(uint32_t slot, uint64_t *stack, uint64_t count, uint64_t returns) {
    TaichiAotTorchOp *op;
    torchop_call t;
    void *stream = NULL, *guard = NULL;
    uint32_t k;
    int failed;
    pthread_mutex_lock(&torchop_lock);
    op = torchop_slots[slot];
    if (op != NULL && op != &torchop_closing && count == op->input_count && returns == op->output_count) {
        op->busy += 1; /* its memory stays until the call is done (release waits) */
    } else {
        op = NULL;
    }
    pthread_mutex_unlock(&torchop_lock);
    if (op == NULL) {
        torchop_refuse(slot, stack, count);
        torchop_fns.fail("taichi_aot", __FILE__, __LINE__, "ClosedError: taichi_aot: a torch op's kernel called "
                         "after its op was let go, or with a stack of another size (nothing was launched)");
        return;
    }
    memset(t.inputs, 0, sizeof(t.inputs));
    memset(t.outputs, 0, sizeof(t.outputs));
    t.why[0] = 0;
    for (k = 0; k < op->input_count; ++k) {
        if (op->input_kinds[k] == TAICHI_AOT_TORCH_TENSOR) {
            t.inputs[k] = (void *)(uintptr_t)stack[k];
        }
    }
    failed = torchop_thread(op, &t) || torchop_device(op, &t, &guard) || torchop_stream(op, &t, &stream) ||
             torchop_inputs(op, stack, &t) || torchop_outputs(op, &t, stream) || torchop_launch(op, &t, stream);
    torchop_let_go(op, &t, failed);
    if (guard != NULL) {
        torchop_fns.cuda_guard_delete(guard);
    }
    for (k = 0; !failed && k < op->output_count; ++k) {
        stack[k] = (uint64_t)(uintptr_t)t.outputs[k]; /* torch takes them over */
    }
    pthread_mutex_lock(&torchop_lock);
    op->busy -= 1;
    pthread_cond_broadcast(&torchop_idle);
    pthread_mutex_unlock(&torchop_lock);
    if (failed) {
        ti_set_last_error(TI_ERROR_SUCCESS, NULL);
        torchop_fns.fail("taichi_aot", __FILE__, __LINE__, t.why); /* throws: the message is copied first */
    }
}

#define TORCHOP_SLOT(g, j) \
    static void torchop_slot_##g##_##j(uint64_t *stack, uint64_t count, uint64_t returns) { \
        torchop_run((g) * 8 + (j), stack, count, returns); \
    }
#define TORCHOP_EIGHT(g) TORCHOP_SLOT(g, 0) TORCHOP_SLOT(g, 1) TORCHOP_SLOT(g, 2) TORCHOP_SLOT(g, 3) \
    TORCHOP_SLOT(g, 4) TORCHOP_SLOT(g, 5) TORCHOP_SLOT(g, 6) TORCHOP_SLOT(g, 7)
TORCHOP_EIGHT(0)
TORCHOP_EIGHT(1)
TORCHOP_EIGHT(2)
TORCHOP_EIGHT(3)
TORCHOP_EIGHT(4)
TORCHOP_EIGHT(5)
TORCHOP_EIGHT(6)
TORCHOP_EIGHT(7)
TORCHOP_EIGHT(8)
TORCHOP_EIGHT(9)
TORCHOP_EIGHT(10)
TORCHOP_EIGHT(11)
TORCHOP_EIGHT(12)
TORCHOP_EIGHT(13)
TORCHOP_EIGHT(14)
TORCHOP_EIGHT(15)
TORCHOP_EIGHT(16)
TORCHOP_EIGHT(17)
TORCHOP_EIGHT(18)
TORCHOP_EIGHT(19)
TORCHOP_EIGHT(20)
TORCHOP_EIGHT(21)
TORCHOP_EIGHT(22)
TORCHOP_EIGHT(23)
TORCHOP_EIGHT(24)
TORCHOP_EIGHT(25)
TORCHOP_EIGHT(26)
TORCHOP_EIGHT(27)
TORCHOP_EIGHT(28)
TORCHOP_EIGHT(29)
TORCHOP_EIGHT(30)
TORCHOP_EIGHT(31)
#define TORCHOP_NAMES(g) torchop_slot_##g##_0, torchop_slot_##g##_1, torchop_slot_##g##_2, torchop_slot_##g##_3, \
    torchop_slot_##g##_4, torchop_slot_##g##_5, torchop_slot_##g##_6, torchop_slot_##g##_7
/* The slots' functions, by slot (32 x 8 = TAICHI_AOT_TORCH_SLOTS). */
static void (*const torchop_fns_by_slot[TAICHI_AOT_TORCH_SLOTS])(uint64_t *, uint64_t, uint64_t) = {
    TORCHOP_NAMES(0), TORCHOP_NAMES(1), TORCHOP_NAMES(2), TORCHOP_NAMES(3),
    TORCHOP_NAMES(4), TORCHOP_NAMES(5), TORCHOP_NAMES(6), TORCHOP_NAMES(7),
    TORCHOP_NAMES(8), TORCHOP_NAMES(9), TORCHOP_NAMES(10), TORCHOP_NAMES(11),
    TORCHOP_NAMES(12), TORCHOP_NAMES(13), TORCHOP_NAMES(14), TORCHOP_NAMES(15),
    TORCHOP_NAMES(16), TORCHOP_NAMES(17), TORCHOP_NAMES(18), TORCHOP_NAMES(19),
    TORCHOP_NAMES(20), TORCHOP_NAMES(21), TORCHOP_NAMES(22), TORCHOP_NAMES(23),
    TORCHOP_NAMES(24), TORCHOP_NAMES(25), TORCHOP_NAMES(26), TORCHOP_NAMES(27),
    TORCHOP_NAMES(28), TORCHOP_NAMES(29), TORCHOP_NAMES(30), TORCHOP_NAMES(31)};

/* Register `op`'s kernel for operator `ns`::`name` at dispatch key `key` ("CPU", "CUDA") in a slot of its own: the
   slot, or -1 where torch's functions are not bound or every slot is taken, -2 where torch refused. */
int taichi_aot_torch_op_register(TaichiAotTorchOp *op, const char *ns, const char *name, const char *key) {
    int slot = -1, i;
    void *library = NULL;
    if (!torchop_bound) {
        return -1;
    }
    pthread_mutex_lock(&torchop_lock);
    for (i = 0; i < TAICHI_AOT_TORCH_SLOTS && slot < 0; ++i) {
        if (torchop_slots[i] == NULL) {
            slot = i;
        }
    }
    if (slot >= 0) {
        if (torchop_fns.library_init(ns, key, "taichi_aot/_csrc/torchop.c", (uint32_t)__LINE__, &library) != 0 ||
            torchop_fns.library_impl(library, name, torchop_fns_by_slot[slot]) != 0) {
            if (library != NULL) {
                torchop_fns.library_delete(library);
            }
            slot = -2;
        } else {
            uint32_t k;
            op->library = library;
            op->slot = slot;
            torchop_slots[slot] = op;
            torchop_slot_counts[slot] = op->input_count;
            for (k = 0; k < op->input_count && k < TAICHI_AOT_OP_MAX_ARGS; ++k) {
                torchop_slot_tensors[slot][k] = op->input_kinds[k] == TAICHI_AOT_TORCH_TENSOR;
            }
        }
    }
    pthread_mutex_unlock(&torchop_lock);
    return slot;
}

/* The op's kernel unregistered from torch and its slot freed (its op is let go), once no call of it is in flight:
   its memory may go after this returns. */
void taichi_aot_torch_op_release(TaichiAotTorchOp *op) {
    int mine;
    pthread_mutex_lock(&torchop_lock);
    mine = op->slot >= 0 && torchop_slots[op->slot] == op;
    if (mine) {
        torchop_slots[op->slot] = &torchop_closing; /* first: a call from now on finds none, nor does a new op */
    }
    while (op->busy > 0) {
        pthread_cond_wait(&torchop_idle, &torchop_lock);
    }
    if (op->library != NULL) {
        torchop_fns.library_delete(op->library);
        op->library = NULL;
    }
    if (mine) {
        torchop_slots[op->slot] = NULL; /* the slot free once its kernel is unregistered */
    }
    pthread_mutex_unlock(&torchop_lock);
}
