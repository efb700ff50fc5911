/* The reads of a CUDA array's print, the C call's check that a torch, CuPy or JAX array passed again is still
   the one shared before (call.c, compiled after this file; see taichi_aot._arrays._PRINTS): parsed from the
   Python tuples that name them, bound to the array class's C getters and methods, and made. */
#include "call_common.h"
#include "reads.h"
#include "records.h"


static int read_layout(PyObject *value, TaichiAotTorchLayout *out);

/* Parse a print's reads, a tuple of (first or None, name, call) (see taichi_aot_read; borrowed from `reads`) into
   `out`: how many, or -1 (an error set) where they are not of that form. */
static int reads_parse(PyObject *reads, taichi_aot_read *out) {
    Py_ssize_t n = PyTuple_Check(reads) ? PyTuple_Size(reads) : -1, k;
    if (n < 0 || n > TAICHI_AOT_READS) {
        PyErr_SetString(PyExc_TypeError, "reads: a tuple of at most 8 (first, name, call) tuples");
        return -1;
    }
    for (k = 0; k < n; ++k) {
        PyObject *item = PyTuple_GetItem(reads, k);
        PyObject *first = item != NULL && PyTuple_Check(item) && PyTuple_Size(item) == 3 ? PyTuple_GetItem(item, 0)
                                                                                          : NULL;
        PyObject *name = first != NULL ? PyTuple_GetItem(item, 1) : NULL;
        long call = name != NULL ? PyLong_AsLong(PyTuple_GetItem(item, 2)) : -1;
        if (call < READ_ATTRIBUTE || call > READ_TORCH_LAYOUT || !PyUnicode_Check(name) ||
            (first != Py_None && !PyUnicode_Check(first))) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "reads: each read is (first: str or None, name: str, call: 0, 1 or 2)");
            return -1;
        }
        out[k].first = first != Py_None ? first : NULL;
        out[k].name = name;
        out[k].call = (int)call;
        out[k].descr = NULL;
        out[k].get = NULL;
    }
    return (int)n;
}

/* What one read gives of `value` (a new reference), or NULL with an error set. */
static PyObject *read_one(PyObject *value, const taichi_aot_read *r) {
    PyObject *owner, *got;
    if (r->call == READ_TORCH_LAYOUT) { /* the layout's bytes; where torch could not read it, a new object(),
                                           equal to nothing: such a print is never found again */
        TaichiAotTorchLayout layout;
        int read = read_layout(value, &layout);
        if (read == 0) {
            return PyObject_CallObject((PyObject *)&PyBaseObject_Type, NULL);
        }
        return read > 0 ? PyBytes_FromStringAndSize((const char *)&layout, sizeof(layout)) : NULL;
    }
    if (r->descr != NULL) {
        return r->get != NULL ? r->get(r->descr, value, (PyObject *)Py_TYPE(value))
                              : PyObject_CallFunctionObjArgs(r->descr, value, NULL);
    }
    owner = r->first != NULL ? PyObject_GetAttr(value, r->first) : value;
    if (owner == NULL) {
        return NULL;
    }
    got = r->call ? PyObject_CallMethodObjArgs(owner, r->name, NULL) : PyObject_GetAttr(owner, r->name);
    if (r->first != NULL) {
        Py_DECREF(owner);
    }
    return got;
}

/* What a torch layout read trusts (Launcher._trust_layout): the class of plain tensors, and where in their
   Python object its at::Tensor lies (right after the object's header: torch's THPVariable from torch 2.10 on,
   checked in Python on probe tensors). Read there, no Python code runs (no getter a TorchFunctionMode could
   answer) and no address comes from anything a program can set. */
static PyObject *layout_class;
static Py_ssize_t layout_offset;

static void reads_bind(taichi_aot_read *read, int n, PyTypeObject *cls);

/* requires_grad and is_neg() of plain tensors (layout_class), bound to its getter and method once it is trusted
   (flags_clear, below; kept for the process). */
static taichi_aot_read flag_reads[2];
static int flag_reads_bound;

static void flag_reads_bind(void) {
    PyObject *requires_grad = PyUnicode_InternFromString("requires_grad");
    PyObject *is_neg = PyUnicode_InternFromString("is_neg");
    if (requires_grad == NULL || is_neg == NULL) {
        PyErr_Clear();
        Py_XDECREF(requires_grad);
        Py_XDECREF(is_neg);
        return;
    }
    flag_reads[0].first = flag_reads[1].first = NULL;
    flag_reads[0].name = requires_grad; /* kept for the process */
    flag_reads[0].call = READ_ATTRIBUTE;
    flag_reads[1].name = is_neg;
    flag_reads[1].call = READ_METHOD;
    reads_bind(flag_reads, 2, (PyTypeObject *)layout_class);
    flag_reads_bound = 1;
}

/* The address of `value`'s at::Tensor where it is a plain tensor (of exactly the trusted class), else 0. */
static uintptr_t layout_at(PyObject *value) {
    return layout_class != NULL && (PyObject *)Py_TYPE(value) == layout_class
               ? (uintptr_t)value + (uintptr_t)layout_offset
               : 0;
}

/* Whether `value`'s layout is still `expect` (the bytes of a TaichiAotTorchLayout): 1, or 0 where it is not or
   cannot be read, or `value` is no plain tensor (no error set). */
static int layout_same(PyObject *value, PyObject *expect) {
    uintptr_t at = layout_at(value);
    return at != 0 && PyBytes_Check(expect) && PyBytes_Size(expect) == (Py_ssize_t)sizeof(TaichiAotTorchLayout) &&
           taichi_aot_api.torch_same(at, (const TaichiAotTorchLayout *)PyBytes_AsString(expect));
}

/* A torch tensor's layout (a READ_TORCH_LAYOUT read of `value`) into `out`: 1 where read, 0 where torch could
   not read it (a tensor of no storage, of over 16 dims), -1 with an error set: `value` is no plain tensor. */
static int read_layout(PyObject *value, TaichiAotTorchLayout *out) {
    uintptr_t at = layout_at(value);
    if (at == 0) {
        PyErr_SetString(PyExc_TypeError, "a torch layout read of no plain torch tensor");
        return -1;
    }
    return taichi_aot_api.torch_layout(at, out);
}

/* The types of the descriptors a read is bound to (set by reads_install): a C getter's (int.real's)
   and a C method's (int.bit_length's). */
static PyObject *getset_type, *method_type;

/* Bind the reads of arrays of class `cls` to its descriptors where that reads the same (see taichi_aot_read): a
   getter's (a data descriptor: no instance attribute hides it) and a C method's (called with the array, it reads
   the array's own, even where an instance attribute of that name would hide it). The C call checks the array's
   class on every use. */
static void reads_bind(taichi_aot_read *read, int n, PyTypeObject *cls) {
    int k;
    /* only where the class looks attributes up the standard way (no __getattribute__ or __getattr__ of its own) */
    /* PyType_GetSlot: in the limited API since 3.4; before Python 3.10, for a static type, it raises SystemError */
    getattrofunc lookup = (getattrofunc)PyType_GetSlot(cls, Py_tp_getattro);
    PyErr_Clear(); /* before Python 3.10, for a static type: no slot given, nothing bound */
    if (lookup != PyObject_GenericGetAttr) {
        return;
    }
    for (k = 0; k < n; ++k) {
        taichi_aot_read *r = &read[k];
        PyObject *descr = r->first == NULL ? PyObject_GetAttr((PyObject *)cls, r->name) : NULL;
        PyObject *kind = descr != NULL ? (PyObject *)Py_TYPE(descr) : NULL;
        descrgetfunc get = kind != NULL && kind == getset_type && r->call == READ_ATTRIBUTE
                               ? (descrgetfunc)PyType_GetSlot((PyTypeObject *)kind, Py_tp_descr_get)
                               : NULL; /* NULL before Python 3.10, which gives no slot of a static type */
        PyErr_Clear();
        if (get != NULL || (kind != NULL && kind == method_type && r->call == READ_METHOD)) {
            r->descr = descr;
            r->get = get;
        } else {
            Py_XDECREF(descr);
        }
    }
}

/* Launcher._trust_layout(cls, offset): trust torch layout reads of objects of exactly `cls` (torch.Tensor),
   whose at::Tensor lies `offset` bytes into the object; once for the process (later calls change nothing). */
static PyObject *launcher_trust_layout(PyObject *unused, PyObject *args) {
    PyObject *cls, *modules = PyImport_GetModuleDict(), *torch, *tensor;
    Py_ssize_t offset;
    int torch_tensor;
    (void)unused;
    if (!PyArg_ParseTuple(args, "On", &cls, &offset)) {
        return NULL;
    }
    torch = modules != NULL ? PyDict_GetItemString(modules, "torch") : NULL; /* borrowed */
    tensor = torch != NULL ? PyObject_GetAttrString(torch, "Tensor") : NULL;
    torch_tensor = tensor != NULL && tensor == cls && PyType_Check(cls);
    Py_XDECREF(tensor);
    PyErr_Clear();
    if (taichi_aot_api.size == 0) {
        PyErr_SetString(PyExc_RuntimeError, "_trust_layout: taichi_aot._call is not bound (_bind) yet");
        return NULL;
    }
    if (!torch_tensor || offset < (Py_ssize_t)sizeof(PyObject) || offset > 64 || offset % sizeof(void *) != 0) {
        PyErr_SetString(PyExc_TypeError, "_trust_layout: torch.Tensor and the offset of its at::Tensor");
        return NULL;
    }
    if (layout_class == NULL) {
        Py_INCREF(cls);
        layout_class = cls;
        layout_offset = offset;
        flag_reads_bind();
    }
    return PyBool_FromLong(layout_class == cls && layout_offset == offset);
}

/* Whether the plain tensor `value` (of layout_class) is neither requiring grad nor a lazily negated view: the two
   flags a tensor taken anew by the C call must have clear (its exports depend on them; see _arrays._TORCH_LAYOUT),
   read by torch's getter and method. 0 (no error set) where either is set or cannot be read. */
static int flags_clear(PyObject *value) {
    int k;
    if (!flag_reads_bound) {
        return 0;
    }
    for (k = 0; k < 2; ++k) {
        PyObject *got = read_one(value, &flag_reads[k]);
        int clear = got == Py_False;
        Py_XDECREF(got);
        if (!clear) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

static void reads_unbind(taichi_aot_read *read, int n) {
    int k;
    for (k = 0; k < n; ++k) {
        Py_CLEAR(read[k].descr);
        read[k].get = NULL;
    }
}

/* Find the descriptor types reads are bound to, once (kept for the process; the module init, call_module.c). */
static void reads_install(void) {
    if (getset_type == NULL) {
        PyObject *real = PyObject_GetAttrString((PyObject *)&PyLong_Type, "real");
        PyObject *bit_length = PyObject_GetAttrString((PyObject *)&PyLong_Type, "bit_length");
        if (real != NULL && bit_length != NULL) {
            getset_type = (PyObject *)Py_TYPE(real);
            method_type = (PyObject *)Py_TYPE(bit_length);
            Py_INCREF(getset_type);
            Py_INCREF(method_type);
        }
        PyErr_Clear();
        Py_XDECREF(real);
        Py_XDECREF(bit_length);
    }
}

/* Launcher.read_print(value, reads): the print of a CUDA array, the tuple of what each read gives (the Python
   packer's check, the same as the C call's below). */
static PyObject *launcher_read_print(PyObject *unused, PyObject *args) {
    taichi_aot_read read[TAICHI_AOT_READS];
    PyObject *value, *reads, *print;
    int n, k;
    (void)unused;
    if (!PyArg_ParseTuple(args, "OO", &value, &reads) || (n = reads_parse(reads, read)) < 0) {
        return NULL;
    }
    print = PyTuple_New(n);
    for (k = 0; print != NULL && k < n; ++k) {
        PyObject *got = read_one(value, &read[k]);
        if (got == NULL) {
            Py_CLEAR(print);
        } else {
            PyTuple_SetItem(print, k, got); /* steals got */
        }
    }
    return print;
}


static int print_same(PyObject *value, const taichi_aot_read *read, PyObject *const *expect, int n, int phases) {
    int phase, k, same;
    for (phase = PRINT_CALLS; phase <= PRINT_LAYOUTS; phase <<= 1) {
        for (k = 0; (phases & phase) && k < n; ++k) {
            int layout = read[k].call == READ_TORCH_LAYOUT;
            if (layout != (phase == PRINT_LAYOUTS)) {
                continue;
            }
            if (layout) { /* compared field by field: no bytes made */
                same = layout_same(value, expect[k]) ? 1 : -1;
            } else {
                PyObject *got = read_one(value, &read[k]);
                same = got != NULL ? PyObject_RichCompareBool(got, expect[k], Py_EQ) : -1;
                Py_XDECREF(got);
            }
            if (same != 1) { /* another value, or a read that raised (the slow path says what is wrong) */
                PyErr_Clear();
                return 0;
            }
        }
    }
    return 1;
}

/* The first half of the rule: whether the PrintHit `hit` fits `value` passed where a kernel of signature `sig`
   (writing it where `writes`) takes it. 1 or 0, no error set. */
static int print_hit_fits(PyObject *hit, PyObject *value, PyObject *sig, int writes) {
    static PyObject *closed_name;
    PyObject *closed;
    int read_only, is_closed;
    if (!record_is(hit, RECORD_PRINT_HIT) || RECORD_FIELD(hit, PRINT_HIT_CLS) != (PyObject *)Py_TYPE(value) ||
        RECORD_FIELD(hit, PRINT_HIT_SIG) != sig) {
        return 0;
    }
    read_only = PyObject_IsTrue(RECORD_FIELD(hit, PRINT_HIT_READ_ONLY));
    if (read_only < 0 || (read_only && writes)) {
        PyErr_Clear();
        return 0;
    }
    if (closed_name == NULL) {
        closed_name = PyUnicode_InternFromString("closed"); /* kept for the process */
    }
    closed = closed_name != NULL ? PyObject_GetAttr(RECORD_FIELD(hit, PRINT_HIT_OWNED), closed_name) : NULL;
    is_closed = closed != NULL ? PyObject_IsTrue(closed) : -1;
    Py_XDECREF(closed);
    if (is_closed != 0) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* Launcher.print_hit_accepts(hit, value, sig, writes): the whole rule, for the Python packer: whether `value` is
   the array its PrintHit `hit` remembers, as the C call would take it. */
static PyObject *launcher_print_hit_accepts(PyObject *unused, PyObject *args) {
    taichi_aot_read read[TAICHI_AOT_READS];
    PyObject *expect[TAICHI_AOT_READS];
    PyObject *hit, *value, *sig, *print;
    int writes, n, k;
    (void)unused;
    if (!PyArg_ParseTuple(args, "OOOp", &hit, &value, &sig, &writes)) {
        return NULL;
    }
    if (!print_hit_fits(hit, value, sig, writes)) {
        Py_RETURN_FALSE;
    }
    print = RECORD_FIELD(hit, PRINT_HIT_PRINT);
    n = reads_parse(RECORD_FIELD(hit, PRINT_HIT_READS), read);
    if (n < 0 || !PyTuple_Check(print) || PyTuple_Size(print) != n) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    for (k = 0; k < n; ++k) {
        expect[k] = PyTuple_GetItem(print, k);
    }
    return PyBool_FromLong(print_same(value, read, expect, n, PRINT_ALL));
}

/* Whether every torch storage of a bound launch's `guards` ((storage, data pointer, bytes) each, or NULL: none)
   still has the memory it was bound with (Launcher._guard, call.c). */
static int guards_hold(PyObject *guards) {
    Py_ssize_t i, n = guards != NULL ? PyTuple_Size(guards) : 0;
    static PyObject *names[2]; /* "data_ptr", "nbytes", interned once (kept for the process) */
    if (names[0] == NULL || names[1] == NULL) {
        names[0] = PyUnicode_InternFromString("data_ptr");
        names[1] = PyUnicode_InternFromString("nbytes");
        if (names[0] == NULL || names[1] == NULL) {
            PyErr_Clear();
            return 0;
        }
    }
    for (i = 0; i < n; ++i) {
        PyObject *g = PyTuple_GetItem(guards, i);
        int k;
        if (g == NULL || !PyTuple_Check(g) || PyTuple_Size(g) != 3) {
            PyErr_Clear();
            return 0;
        }
        for (k = 0; k < 2; ++k) {
            PyObject *got = PyObject_CallMethodObjArgs(PyTuple_GetItem(g, 0), names[k], NULL);
            int same = got != NULL ? PyObject_RichCompareBool(got, PyTuple_GetItem(g, k + 1), Py_EQ) : -1;
            Py_XDECREF(got);
            if (same != 1) {
                PyErr_Clear();
                return 0;
            }
        }
    }
    return 1;
}
