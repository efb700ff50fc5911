/* fresh.c's arrays taken anew, for the launcher that holds them (call.c; a private header). */
#ifndef TAICHI_AOT_FRESH_H
#define TAICHI_AOT_FRESH_H

#include "call_common.h"

enum { FRESH_NONE = 0, FRESH_NUMPY = 1, FRESH_TORCH = 2, FRESH_CAI = 3, FRESH_CUPY = 4 };

typedef struct {
    int fresh;          /* how this call's value is taken: FRESH_NONE (the slot's remembered value), or anew */
    PyObject *descr;    /* the numpy dtype object the argument takes, or NULL: no array taken anew */
    PyObject *typestr;  /* its typestr in the CUDA array interface ("<f4") */
    PyObject *cai;      /* a CUDA array's interface, read in the first phase for the second, or NULL */
    int read_only;      /* and whether its class is immutable (JAX) */
    intptr_t got_data;  /* a CuPy array's memory and shape, read in the first phase (fresh_read_cupy) */
    intptr_t got_dims[16];
    const void *new_data; /* an import made in the second phase, for the pool once Python code may run (settle) */
    intptr_t new_bytes;
    TiMemory new_memory;
    int32_t data_type;  /* its TiDataType */
    int32_t itemsize;
    int32_t ndim;       /* the argument's dims, before its element's */
    int32_t elem_ndim;
    intptr_t elem_dims[16];
    TiArgument arg;     /* the argument with all but its memory and dims written */
} taichi_aot_fresh_slot;

typedef struct {
    PyObject *imports;    /* the runtime's pool, or NULL: no array is taken anew */
    int host_numpy;       /* numpy arrays are shared here (a CPU runtime) */
    int torch_device;     /* the device type of torch tensors shared here (0 CPU, 1 CUDA), or -1: none */
    int torch_index;      /* and its index (CUDA) */
    PyObject *held;       /* the runtime's held arrays, where queued kernels read them (CUDA), or NULL */
    Py_ssize_t held_limit; /* how many it holds before the Python path waits */
    PyObject *cai_classes; /* {class: immutable?} of CUDA arrays taken by their __cuda_array_interface__, or NULL */
    PyObject *spill;       /* ForeignArgs.spill: lets go of held arrays once their kernels ran (CUDA), or NULL */
    int (*pointer_device)(uint64_t *ordinal, int attribute, uint64_t pointer); /* cuPointerGetAttribute, or NULL */
} taichi_aot_fresh;

/* fresh.c's functions the launcher calls (see there). */
static void fresh_clear(taichi_aot_fresh *f);
static int fresh_spill(const taichi_aot_fresh *f, Py_ssize_t count);
static void fresh_slot_clear(taichi_aot_fresh_slot *s);
static int fresh_slot_set(taichi_aot_fresh_slot *s, PyObject *item);
static PyObject *fresh_set(taichi_aot_fresh *f, Py_ssize_t count, PyObject *args, PyObject *kwargs);
static int fresh_kind(const taichi_aot_fresh *f, taichi_aot_fresh_slot *s, PyObject *value, PyObject *numpy_type);
static void fresh_settle(const taichi_aot_fresh *f, taichi_aot_fresh_slot *s);
static int fresh_take(const taichi_aot_fresh *f, taichi_aot_fresh_slot *s, int writes, PyObject *value,
                      TiRuntime runtime, TiArgument *arg, int own);

#endif
