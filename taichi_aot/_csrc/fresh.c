/* Arrays a kernel call takes anew in C (call.c's launcher_pack), as the Python path would take them, with no record
   of them: a numpy array on a CPU runtime, or a plain torch tensor (torch.Tensor itself, its layout read through
   torch's C functions: reads.c, torch.c) on the CPU or the runtime's CUDA device. PyTorch, CuPy and JAX programs
   make new arrays at every step (outputs, activations, slices); without this each went through Python.

   An array is taken where it is of the slot's dtype, dims and element shape, C-contiguous (aligned, writable where
   the kernel may write it; for torch, neither requiring grad nor lazily negated), and its memory is found in, or
   added to, the runtime's pool of imports: {address: (bytes, TiMemory)}, shared with Python's Device.pooled.
   An import says only where memory is; the launch gets the live array's own dims and dtype beside it, so memory
   freed and handed to an array of another size or dtype is never taken for the old one. libtaichi_c_api 1.7.4
   cannot release an import: one per address for the runtime's life (as allocators hand addresses out again, few).
   Anything else sends the call to Python, which takes the array its way or raises what is wrong.

   Compiled after reads.c (layout_at, read_layout, flags_clear) and before call.c, which holds a taichi_aot_fresh
   and one taichi_aot_fresh_slot a slot. */
#include "call_common.h"
#include "arrays.h"
#include "fresh.h"
#include "reads.h"
#include "records.h"


static void fresh_clear(taichi_aot_fresh *f) {
    Py_CLEAR(f->imports);
    Py_CLEAR(f->held);
    Py_CLEAR(f->cai_classes);
    Py_CLEAR(f->spill);
}

/* Before a call's first phase (Python code may run here: nothing is read yet): where the held arrays and this
   call's could pass the limit, let Python hand them to a batch let go once their kernels ran (ForeignArgs.spill).
   0 where it raised (the Python path says what). */
static int fresh_spill(const taichi_aot_fresh *f, Py_ssize_t count) {
    PyObject *done;
    if (f->held == NULL || f->spill == NULL || PyDict_Size(f->held) + count < f->held_limit) {
        return 1;
    }
    done = PyObject_CallObject(f->spill, NULL);
    if (done == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(done);
    return 1;
}

static void fresh_slot_clear(taichi_aot_fresh_slot *s) {
    Py_CLEAR(s->descr);
    Py_CLEAR(s->typestr);
    Py_CLEAR(s->cai);
}

/* Slot `s` as _fresh describes it (see launcher_fresh_method in call.c): None (no array taken anew), or a FreshSlot
   record (records.c); 0 with an error set where it is neither, or its fields are not of their types. */
static int fresh_slot_set(taichi_aot_fresh_slot *s, PyObject *item) {
    PyObject *descr, *typestr, *elem, *arg;
    int data_type, itemsize, ndim;
    Py_ssize_t k, elem_ndim;
    fresh_slot_clear(s);
    if (item == Py_None) {
        return 1;
    }
    if (!record_is(item, RECORD_FRESH_SLOT)) {
        PyErr_SetString(PyExc_TypeError, "_fresh: a slot is a FreshSlot record or None");
        return 0;
    }
    descr = RECORD_FIELD(item, FRESH_SLOT_DTYPE);
    typestr = RECORD_FIELD(item, FRESH_SLOT_TYPESTR);
    elem = RECORD_FIELD(item, FRESH_SLOT_ELEMENT_SHAPE);
    arg = RECORD_FIELD(item, FRESH_SLOT_ARGUMENT);
    data_type = (int)PyLong_AsLong(RECORD_FIELD(item, FRESH_SLOT_DATA_TYPE));
    itemsize = (int)PyLong_AsLong(RECORD_FIELD(item, FRESH_SLOT_ITEMSIZE));
    ndim = (int)PyLong_AsLong(RECORD_FIELD(item, FRESH_SLOT_NDIM));
    if (PyErr_Occurred()) {
        return 0;
    }
    elem_ndim = PyTuple_Check(elem) ? PyTuple_Size(elem) : -1;
    if (elem_ndim < 0 || ndim < 0 || ndim + elem_ndim > 16 || itemsize <= 0 || !PyBytes_Check(arg) ||
        !PyUnicode_Check(typestr) ||
        PyBytes_Size(arg) != (Py_ssize_t)sizeof(TiArgument)) {
        PyErr_SetString(PyExc_TypeError, "_fresh: a FreshSlot's fields are a dtype, a str, three ints, a tuple and "
                                         "the bytes of a TiArgument");
        return 0;
    }
    for (k = 0; k < elem_ndim; ++k) {
        s->elem_dims[k] = (intptr_t)PyLong_AsSsize_t(PyTuple_GetItem(elem, k));
        if (PyErr_Occurred()) {
            return 0;
        }
    }
    memcpy(&s->arg, PyBytes_AsString(arg), sizeof(TiArgument));
    s->data_type = data_type;
    s->itemsize = itemsize;
    s->ndim = ndim;
    s->elem_ndim = (int32_t)elem_ndim;
    Py_INCREF(descr);
    s->descr = descr;
    Py_INCREF(typestr);
    s->typestr = typestr;
    return 1;
}

/* `f` from _fresh's keyword arguments (imports, host_numpy, torch_device, torch_index, held, held_limit, cai_classes,
   pointer_device, spill, slots): the list of slots (borrowed, `count` long), or NULL with an error set. */
static PyObject *fresh_set(taichi_aot_fresh *f, Py_ssize_t count, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"imports", "host_numpy", "torch_device", "torch_index", "held", "held_limit",
                               "cai_classes", "pointer_device", "spill", "slots", NULL};
    PyObject *imports, *held, *classes, *device, *spill, *list;
    int host_numpy, torch_device, torch_index;
    Py_ssize_t limit;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OiiiOnOOOO", keywords, &imports, &host_numpy, &torch_device,
                                     &torch_index, &held, &limit, &classes, &device, &spill, &list)) {
        return NULL;
    }
    if (PyTuple_Size(args) != 0 || kwargs == NULL || PyDict_Size(kwargs) != 10) {
        PyErr_SetString(PyExc_TypeError, "_fresh takes its ten arguments as keywords");
        return NULL;
    }
    if (!PyDict_Check(imports) || (held != Py_None && !PyDict_Check(held)) || !PyList_Check(list) ||
        (spill != Py_None && !PyCallable_Check(spill)) ||
        (classes != Py_None && !PyDict_Check(classes)) || !PyLong_Check(device) || PyList_Size(list) != count) {
        PyErr_SetString(PyExc_TypeError, "_fresh: a dict, three ints, a dict or None, an int, a list of the slots");
        return NULL;
    }
    fresh_clear(f);
    Py_INCREF(imports);
    f->imports = imports;
    if (held != Py_None) {
        Py_INCREF(held);
        f->held = held;
    }
    f->host_numpy = host_numpy;
    f->torch_device = torch_device;
    f->torch_index = torch_index;
    f->held_limit = limit;
    if (classes != Py_None) {
        Py_INCREF(classes);
        f->cai_classes = classes;
    }
    if (spill != Py_None) {
        Py_INCREF(spill);
        f->spill = spill;
    }
    f->pointer_device = (int (*)(uint64_t *, int, uint64_t))PyLong_AsVoidPtr(device);
    PyErr_Clear();
    return list;
}

static int fresh_read_cupy(const taichi_aot_fresh *f, taichi_aot_fresh_slot *s, PyObject *value);

/* Whether the plain tensor `value` lies on the runtime's kind of device: a torch CPU tensor passed to a GPU's kernel
   goes to Python (a staged copy) without its flags read first. Its layout is read again in the second phase. */
static int fresh_torch_on(const taichi_aot_fresh *f, PyObject *value) {
    TaichiAotTorchLayout l;
    if (read_layout(value, &l) != 1) {
        PyErr_Clear();
        return 0;
    }
    return l.device_type == f->torch_device;
}

/* The first phase (its reads may run Python code): whether slot `s` can take `value`, which is not the value it
   remembers, anew: its kind, and a torch tensor's flags. */
static int fresh_kind(const taichi_aot_fresh *f, taichi_aot_fresh_slot *s, PyObject *value, PyObject *numpy_type) {
    static PyObject *cai_name; /* "__cuda_array_interface__", interned once (kept for the process) */
    PyObject *immutable;
    int kind; /* of the class in cai_classes: -1 none, 0 mutable, 1 immutable, 2 CuPy's */
    Py_CLEAR(s->cai);
    if (s->descr == NULL || f->imports == NULL) {
        return 0;
    }
    if ((PyObject *)Py_TYPE(value) == numpy_type) {
        s->fresh = FRESH_NUMPY;
        return f->host_numpy;
    }
    if (layout_at(value) != 0) {
        s->fresh = FRESH_TORCH;
        return f->torch_device >= 0 && fresh_torch_on(f, value) && flags_clear(value);
    }
    immutable = f->cai_classes != NULL ? dict_get(f->cai_classes, (PyObject *)Py_TYPE(value)) : NULL;
    kind = immutable == NULL ? -1 : PyLong_CheckExact(immutable) && PyLong_AsLong(immutable) == 2 ? 2
                                                                       : immutable == Py_True;
    Py_XDECREF(immutable);
    if (kind < 0 || (cai_name == NULL && (cai_name = PyUnicode_InternFromString("__cuda_array_interface__"))
                                             == NULL)) {
        PyErr_Clear();
        return 0;
    }
    if (kind == 2) { /* cupy.ndarray: its own attributes */
        s->fresh = FRESH_CUPY;
        return fresh_read_cupy(f, s, value);
    }
    s->fresh = FRESH_CAI;
    s->read_only = kind;
    s->cai = PyObject_GetAttr(value, cai_name); /* the library's code: a CuPy, JAX or Numba array's interface */
    if (s->cai == NULL || !PyDict_CheckExact(s->cai)) {
        PyErr_Clear();
        Py_CLEAR(s->cai);
        return 0;
    }
    return 1;
}

/* The ints of `tuple` (exact ints, `n` of them) into `out`; 0 where it is not such a tuple. */
static int fresh_ints(PyObject *tuple, int n, intptr_t *out) {
    int i;
    if (!PyTuple_CheckExact(tuple) || PyTuple_Size(tuple) != n) {
        return 0;
    }
    for (i = 0; i < n; ++i) {
        PyObject *item = PyTuple_GetItem(tuple, i);
        out[i] = PyLong_CheckExact(item) ? (intptr_t)PyLong_AsSsize_t(item) : -1;
        if (out[i] == -1 && (!PyLong_CheckExact(item) || PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

/* Row-major strides (bytes) of the slot's dims `dims`, into `strides`. */
static void fresh_row_major(const taichi_aot_fresh_slot *s, const intptr_t *dims, intptr_t *strides) {
    intptr_t bytes = s->itemsize;
    int i;
    for (i = s->ndim + s->elem_ndim - 1; i >= 0; --i) {
        strides[i] = bytes;
        bytes *= dims[i] > 0 ? dims[i] : 1;
    }
}

/* A cupy.ndarray read in the first phase by the attributes CuPy keeps (cheaper than its interface, a dict built on
   each read): its memory and device (`data.ptr`, `data.device_id`), `shape`, `_c_contiguous` and `dtype` (numpy's own
   dtype object); 1 where it is of the slot's dtype and dims, contiguous, on the runtime's device. */
static int fresh_read_cupy(const taichi_aot_fresh *f, taichi_aot_fresh_slot *s, PyObject *value) {
    static PyObject *names[6]; /* interned once, kept for the process */
    static const char *const texts[6] = {"data", "ptr", "device_id", "shape", "_c_contiguous", "dtype"};
    PyObject *got[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    int k, ok;
    for (k = 0; k < 6; ++k) {
        if (names[k] == NULL && (names[k] = PyUnicode_InternFromString(texts[k])) == NULL) {
            PyErr_Clear();
            return 0;
        }
    }
    got[0] = PyObject_GetAttr(value, names[0]);
    for (k = 1; k < 6; ++k) {
        got[k] = k < 3 ? (got[0] != NULL ? PyObject_GetAttr(got[0], names[k]) : NULL) : PyObject_GetAttr(value, names[k]);
    }
    ok = got[1] != NULL && PyLong_CheckExact(got[1]) && got[2] != NULL && PyLong_CheckExact(got[2]) &&
         PyLong_AsLong(got[2]) == f->torch_index && got[4] == Py_True && got[5] == s->descr &&
         fresh_ints(got[3], s->ndim + s->elem_ndim, s->got_dims);
    s->got_data = ok ? (intptr_t)PyLong_AsVoidPtr(got[1]) : 0;
    for (k = 0; k < 6; ++k) {
        Py_XDECREF(got[k]);
    }
    PyErr_Clear();
    return s->got_data != 0;
}

/* Whether a CUDA array interface `cai` is one C can read: its data a pair, its shape `nd` ints (into `dims`), no
   mask, and no stream of its own but the legacy default ones (1, 2). */
static int fresh_cai_plain(PyObject *cai, int nd, intptr_t *dims) {
    PyObject *item = PyDict_GetItemString(cai, "data"), *stream = PyDict_GetItemString(cai, "stream");
    long ordinal;
    if (item == NULL || !PyTuple_CheckExact(item) || PyTuple_Size(item) != 2 ||
        !fresh_ints(PyDict_GetItemString(cai, "shape"), nd, dims) || PyDict_GetItemString(cai, "mask") != NULL) {
        return 0;
    }
    if (stream == NULL || stream == Py_None) {
        return 1;
    }
    ordinal = PyLong_CheckExact(stream) ? PyLong_AsLong(stream) : 0;
    return ordinal >= 1 && ordinal <= 2;
}

/* A CUDA array's memory, dims and strides from its interface (read in the first phase): 0 where it is not of the
   slot's dims and dtype, is read-only where the kernel may write it, has a mask, names a stream of its own (Python
   synchronizes it), or lies on another device. */
static int fresh_read_cai(const taichi_aot_fresh *f, const taichi_aot_fresh_slot *s, int writes, const void **data,
                          intptr_t *dims, intptr_t *strides) {
    PyObject *cai = s->cai, *item, *pair;
    int nd = s->ndim + s->elem_ndim;
    intptr_t address, ro;
    uint64_t ordinal = 0;
    if (!fresh_cai_plain(cai, nd, dims)) {
        PyErr_Clear();
        return 0;
    }
    pair = PyDict_GetItemString(cai, "data");
    address = PyLong_CheckExact(PyTuple_GetItem(pair, 0)) ? (intptr_t)PyLong_AsVoidPtr(PyTuple_GetItem(pair, 0)) : 0;
    ro = PyTuple_GetItem(pair, 1) == Py_True ? 1 : PyTuple_GetItem(pair, 1) == Py_False ? 0 : -1;
    item = PyDict_GetItemString(cai, "typestr");
    if (ro < 0 || (writes && (ro || s->read_only)) || item == NULL || !PyUnicode_Check(item) ||
        PyUnicode_Compare(item, s->typestr) != 0) {
        PyErr_Clear();
        return 0;
    }
    item = PyDict_GetItemString(cai, "strides");
    if (item == NULL || item == Py_None) {
        fresh_row_major(s, dims, strides);
    } else if (!fresh_ints(item, nd, strides)) {
        return 0;
    }
    *data = (const void *)address;
    return address != 0 && (f->pointer_device == NULL || f->pointer_device(&ordinal, 9, (uint64_t)address) != 0 ||
                            (int)ordinal == f->torch_index); /* 9: CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL */
}

/* Import the `bytes` at `data` into `runtime` and add it to the pool under `key`: the handle, or NULL (nothing kept,
   no error set) where the library refused it. The library's thread-local error slot is left as it was: clear. */
static void *fresh_import(const taichi_aot_fresh *f, taichi_aot_fresh_slot *s, TiRuntime runtime, const void *data,
                          intptr_t bytes) {
    TiMemory memory;
    if (s->new_memory != TI_NULL_HANDLE || taichi_aot_api.get_last_error(NULL, NULL) != TI_ERROR_SUCCESS) {
        return NULL; /* an error not taken yet: Python's to report */
    }
    memory = f->torch_device == 1 ? taichi_aot_api.import_cuda_memory(runtime, (void *)data, (uint64_t)bytes)
                                  : taichi_aot_api.import_cpu_memory(runtime, (void *)data, (uint64_t)bytes);
    if (taichi_aot_api.get_last_error(NULL, NULL) != TI_ERROR_SUCCESS || memory == TI_NULL_HANDLE) {
        taichi_aot_api.set_last_error(TI_ERROR_SUCCESS, NULL);
        return NULL;
    }
    s->new_data = data; /* a tuple made here could start a garbage collection: Python code, after layouts were read */
    s->new_bytes = bytes;
    s->new_memory = memory;
    return (void *)memory;
}

/* After the launch (or where there is none), when Python code may run again: the slot's new import into the pool,
   and its CUDA array interface let go. */
static void fresh_settle(const taichi_aot_fresh *f, taichi_aot_fresh_slot *s) {
    if (s->new_memory != TI_NULL_HANDLE) {
        PyObject *key = PyLong_FromVoidPtr((void *)s->new_data);
        PyObject *entry = Py_BuildValue("(nN)", (Py_ssize_t)s->new_bytes, PyLong_FromVoidPtr((void *)s->new_memory));
        if (key == NULL || entry == NULL || f->imports == NULL || PyDict_SetItem(f->imports, key, entry) != 0) {
            PyErr_Clear(); /* the import stays the library's, as every import does; made again next time */
        }
        Py_XDECREF(key);
        Py_XDECREF(entry);
        s->new_memory = TI_NULL_HANDLE;
    }
    Py_CLEAR(s->cai);
}

/* The array's memory, dims and row-major strides (bytes), read with no Python code run: 0 where it is not of the
   slot's dtype, dims and device (or a numpy array not writable where the kernel may write it, or misaligned). */
static int fresh_read(const taichi_aot_fresh *f, const taichi_aot_fresh_slot *s, int writes, PyObject *value,
                      const void **data, intptr_t *dims, intptr_t *strides) {
    int i;
    if (s->fresh == FRESH_CAI) {
        return fresh_read_cai(f, s, writes, data, dims, strides);
    }
    if (s->fresh == FRESH_CUPY) { /* read in the first phase; C-contiguous */
        memcpy(dims, s->got_dims, (size_t)(s->ndim + s->elem_ndim) * sizeof(intptr_t));
        fresh_row_major(s, dims, strides);
        *data = (const void *)s->got_data;
        return 1;
    }
    if (s->fresh == FRESH_NUMPY) {
        const taichi_aot_numpy_array *a = (const taichi_aot_numpy_array *)value;
        if (a->descr != (void *)s->descr || (writes && !(a->flags & TAICHI_AOT_NPY_WRITEABLE)) ||
            !(a->flags & TAICHI_AOT_NPY_ALIGNED) || a->nd != s->ndim + s->elem_ndim) {
            return 0;
        }
        *data = a->data;
        for (i = 0; i < a->nd; ++i) {
            dims[i] = a->dimensions[i];
            strides[i] = a->strides[i];
        }
        return 1;
    } else {
        TaichiAotTorchLayout l;
        int32_t code = taichi_aot_api.torch_code(s->data_type);
        if (read_layout(value, &l) != 1) {
            PyErr_Clear();
            return 0;
        }
        if (code < 0 || l.dtype != code || l.device_type != f->torch_device ||
            (f->torch_device != 0 && l.device_index != f->torch_index) || l.dim != s->ndim + s->elem_ndim) {
            return 0;
        }
        *data = l.data;
        for (i = 0; i < (int)l.dim; ++i) {
            dims[i] = (intptr_t)l.sizes[i];
            strides[i] = (intptr_t)l.strides[i] * s->itemsize;
        }
        return 1;
    }
}

/* The bytes of a C-contiguous array of the slot's dims (`nd` of them, an element's dims as the slot's; a dimension of
   one addresses nothing else), or 0 where it is not one. */
static intptr_t fresh_bytes(const taichi_aot_fresh_slot *s, int nd, const intptr_t *dims, const intptr_t *strides) {
    intptr_t bytes = s->itemsize;
    int i;
    for (i = nd - 1; i >= 0; --i) {
        if (dims[i] <= 0 || dims[i] > (intptr_t)UINT32_MAX || (i >= s->ndim && dims[i] != s->elem_dims[i - s->ndim]) ||
            (dims[i] != 1 && strides[i] != bytes) || bytes > INTPTR_MAX / dims[i]) {
            return 0;
        }
        bytes *= dims[i];
    }
    return bytes;
}

/* The TiMemory the launch gets for the `bytes` at `data`: the pointer itself, tagged, for a launch that takes
   pointers (`own`: nothing imported, nothing kept), else the pool's import of it (made now where the pool has none
   as large); NULL where the library refused it. */
static void *fresh_handle(const taichi_aot_fresh *f, taichi_aot_fresh_slot *s, TiRuntime runtime, const void *data,
                          intptr_t bytes, int own) {
    PyObject *key, *entry;
    void *handle;
    if (own) {
        return (void *)((uintptr_t)data | TAICHI_AOT_POINTER_TAG);
    }
    if ((key = PyLong_FromVoidPtr((void *)data)) == NULL) {
        return NULL;
    }
    entry = dict_get(f->imports, key);
    handle = entry != NULL && PyTuple_Check(entry) && PyTuple_Size(entry) == 2 &&
                     PyLong_AsSsize_t(PyTuple_GetItem(entry, 0)) >= bytes
                 ? PyLong_AsVoidPtr(PyTuple_GetItem(entry, 1))
                 : fresh_import(f, s, runtime, data, bytes);
    Py_XDECREF(entry);
    Py_DECREF(key);
    return handle;
}

/* On CUDA, `value` held until the runtime is waited for (queued kernels read it); 0 where the held arrays are at
   their limit (Python waits first) or it cannot be held. */
static int fresh_hold(const taichi_aot_fresh *f, PyObject *value) {
    PyObject *key;
    int held;
    if (f->held == NULL) {
        return 1;
    }
    if (PyDict_Size(f->held) >= f->held_limit) {
        return 0;
    }
    key = PyLong_FromVoidPtr(value);
    held = key != NULL && PyDict_SetItem(f->held, key, value) == 0;
    Py_XDECREF(key);
    if (!held) {
        PyErr_Clear();
    }
    return held;
}

/* The second phase, after every read that may run Python code: take `value` (its kind found by fresh_kind) into
   the launch's `arg`, holding a CUDA array until the runtime is waited for; 0 where it cannot be taken here. */
static int fresh_take(const taichi_aot_fresh *f, taichi_aot_fresh_slot *s, int writes, PyObject *value,
                      TiRuntime runtime, TiArgument *arg, int own) {
    intptr_t dims[16], strides[16], bytes;
    const void *data = NULL;
    int i, nd = s->ndim + s->elem_ndim;
    void *handle;
    if (!fresh_read(f, s, writes, value, &data, dims, strides)) { /* s->cai is let go in fresh_settle */
        return 0;
    }
    bytes = fresh_bytes(s, nd, dims, strides);
    if (bytes == 0 || data == NULL) {
        return 0;
    }
    handle = fresh_handle(f, s, runtime, data, bytes, own);
    if (handle == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (!fresh_hold(f, value)) {
        return 0;
    }
    memcpy(arg, &s->arg, sizeof(TiArgument));
    arg->value.ndarray.memory = (TiMemory)handle;
    for (i = 0; i < s->ndim; ++i) {
        arg->value.ndarray.shape.dims[i] = (uint32_t)dims[i];
    }
    return 1;
}
