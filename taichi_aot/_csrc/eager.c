/* The eager call of a torch op in C (taichi_aot.torch.Op's base, EagerOp): a plain eager call (no trace, mode,
   transform or profiler; plain tensors on the op's device, none needing a gradient; every input by position) makes
   the op's outputs, calls the kernel with inputs and outputs in signature order (the kernel's own C call, call.c,
   reads the tensors), waits for it on x64 and returns the outputs, with no Python frame of the op's own. Anything
   else, and an op that _eager_setup was not given, goes to the op's Python call (_python_call), which takes every
   call the same way through torch's dispatcher or its own Python path. #included after call.c. */
#include "call_common.h"
#include "launcher.h"

typedef struct {
    Py_ssize_t count;   /* the op's inputs; -1 until _eager_setup */
    PyObject *truthy;   /* callables: any giving a true value sends the call to Python (a trace, a mode, a profiler) */
    PyObject *nones;    /* callables: any giving other than None does (a functorch level, a jit trace) */
    PyObject *tensor;   /* torch.Tensor: tensors of exactly this class go the C way */
    PyObject *tensors;  /* the positions of the inputs that are tensors */
    PyObject *device;   /* the attribute every tensor input must have true: "is_cpu" or "is_cuda" */
    PyObject *makers;   /* each output: (input position, callable making it from that input) */
    PyObject *order;    /* each kernel argument's place in (inputs..., outputs...) */
    PyObject *kernel;   /* the kernel, called with the arguments in signature order */
    PyObject *wait;     /* called after the launch (x64: the runtime's wait), or None */
    PyObject *held;     /* CUDA: the arrays launches hold (emptied after the launch), or None */
    PyObject *stream;   /* CUDA: torch's current raw stream getter (called with no argument), or None */
    PyObject *runtime;  /* CUDA: the runtime's device, whose stream must be torch's, or None */
} eager_fields;

typedef struct {
    PyObject_HEAD
    eager_fields f; /* a call works on its own strong copy: Python code it runs may set them up anew */
} taichi_aot_eager;

#define EAGER_FIELDS(X) X(truthy) X(nones) X(tensor) X(tensors) X(device) X(makers) X(order) X(kernel) X(wait) \
    X(held) X(stream) X(runtime)

static PyObject *eager_names[2]; /* "requires_grad", "stream", interned once (kept for the process) */

static int eager_traverse(PyObject *op, visitproc visit, void *arg) {
    taichi_aot_eager *self = (taichi_aot_eager *)op;
#define EAGER_VISIT(name) Py_VISIT(self->f.name);
    EAGER_FIELDS(EAGER_VISIT)
#undef EAGER_VISIT
    Py_VISIT((PyObject *)Py_TYPE(op)); /* a heap type's instances keep it alive */
    return 0;
}

/* The fields let go (`f` may be an object's, or a call's copy). */
static void eager_fields_clear(eager_fields *f) {
    f->count = -1; /* first: a call made while they go finds none */
#define EAGER_CLEAR(name) Py_CLEAR(f->name);
    EAGER_FIELDS(EAGER_CLEAR)
#undef EAGER_CLEAR
}

static int eager_clear(PyObject *op) {
    eager_fields_clear(&((taichi_aot_eager *)op)->f);
    return 0;
}

static void eager_dealloc(PyObject *op) {
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    eager_clear(op);
    PyObject_GC_Del(op);
    Py_DECREF((PyObject *)type);
}

static PyObject *eager_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    taichi_aot_eager *self = (taichi_aot_eager *)PyType_GenericAlloc(type, 0);
    (void)args;
    (void)kwargs;
    if (self != NULL) {
        self->f.count = -1;
    }
    return (PyObject *)self;
}

/* Whether every item of the tuple `positions` is an int in [0, limit). */
static int eager_positions_fit(PyObject *positions, Py_ssize_t limit) {
    Py_ssize_t i;
    for (i = 0; i < PyTuple_Size(positions); ++i) {
        Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GetItem(positions, i));
        if (at < 0 || at >= limit) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

/* Whether every output maker of `makers` is (an input's position below `count`, a callable). */
static int eager_makers_fit(PyObject *makers, Py_ssize_t count) {
    Py_ssize_t i;
    for (i = 0; i < PyTuple_Size(makers); ++i) {
        PyObject *m = PyTuple_GetItem(makers, i);
        Py_ssize_t at = PyTuple_Check(m) && PyTuple_Size(m) == 2 ? PyLong_AsSsize_t(PyTuple_GetItem(m, 0)) : -1;
        if (at < 0 || at >= count || !PyCallable_Check(PyTuple_GetItem(m, 1))) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

/* Whether every item of the tuple `calls` is callable. */
static int eager_callables(PyObject *calls) {
    Py_ssize_t i;
    for (i = 0; i < PyTuple_Size(calls); ++i) {
        if (!PyCallable_Check(PyTuple_GetItem(calls, i))) {
            return 0;
        }
    }
    return 1;
}

/* Whether _eager_setup's fields `v` (in EAGER_FIELDS' order) are of their forms: tuples of callables (truthy,
   nones), a type, tuples (tensors, makers, order), a name, a kernel, a wait (callable or None), a dict or None, and
   a stream getter with its runtime, or neither. */
static int eager_forms_fit(PyObject *const *v) {
    return PyTuple_Check(v[0]) && PyTuple_Check(v[1]) && eager_callables(v[0]) && eager_callables(v[1]) &&
           PyType_Check(v[2]) && PyTuple_Check(v[3]) && PyUnicode_Check(v[4]) && PyTuple_Check(v[5]) &&
           PyTuple_Check(v[6]) && PyCallable_Check(v[7]) && (v[8] == Py_None || PyCallable_Check(v[8])) &&
           (v[9] == Py_None || PyDict_Check(v[9])) && (v[10] == Py_None || PyCallable_Check(v[10])) &&
           (v[10] == Py_None) == (v[11] == Py_None);
}

/* _eager_setup(*, count, truthy, nones, tensor, tensors, device, makers, order, kernel, wait, held, stream,
   runtime): what the C call needs (see taichi_aot_eager), checked for its form. */
static PyObject *eager_setup(PyObject *op, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"count", "truthy", "nones", "tensor", "tensors", "device", "makers", "order", "kernel",
                            "wait", "held", "stream", "runtime", NULL};
    taichi_aot_eager *self = (taichi_aot_eager *)op;
    Py_ssize_t count;
    PyObject *v[12];
    int k = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$nOOOOOOOOOOOO", names, &count, &v[0], &v[1], &v[2], &v[3],
                                     &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &v[11])) {
        return NULL;
    }
    if (count < 0 || !eager_forms_fit(v)) {
        PyErr_SetString(PyExc_TypeError, "_eager_setup: tuples of callables and positions, a type, a name, a "
                                         "kernel, a wait (callable or None), a dict or None, and a stream getter "
                                         "with its runtime, or neither");
        return NULL;
    }
    if (!eager_positions_fit(v[3], count) || !eager_positions_fit(v[6], count + PyTuple_Size(v[5])) ||
        !eager_makers_fit(v[5], count)) {
        PyErr_SetString(PyExc_ValueError, "_eager_setup: a position outside the inputs (tensors, each output's "
                                          "(input, maker)) or outside the inputs and outputs (order)");
        return NULL;
    }
    eager_fields_clear(&self->f);
#define EAGER_TAKE(name) self->f.name = strong(v[k++]);
    EAGER_FIELDS(EAGER_TAKE)
#undef EAGER_TAKE
    self->f.count = count;
    Py_RETURN_NONE;
}

/* Whether any callable of `calls` gives a true value (`truthy`) or other than None: 1 where one does, 0 where
   none does, -1 with the error set where one raised (a KeyboardInterrupt goes on, as the Python path's would). */
static int eager_any(PyObject *calls, int truthy) {
    Py_ssize_t i;
    for (i = 0; i < PyTuple_Size(calls); ++i) {
        PyObject *got = PyObject_CallObject(PyTuple_GetItem(calls, i), NULL);
        int hit = got == NULL ? -1 : truthy ? PyObject_IsTrue(got) : got != Py_None;
        Py_XDECREF(got);
        if (hit != 0) {
            return hit;
        }
    }
    return 0;
}

/* Whether the attribute `name` of `value` is `want` (compared by identity): 1 or 0, or -1 with the error set. */
static int eager_attr_is(PyObject *value, PyObject *name, PyObject *want) {
    PyObject *got = PyObject_GetAttr(value, name);
    int same = got == NULL ? -1 : got == want;
    Py_XDECREF(got);
    return same;
}

/* Whether torch's current stream is the runtime's (`f->stream` given): 1 or 0, or -1 with the error set. */
static int eager_same_stream(const eager_fields *f) {
    PyObject *stream = PyObject_CallObject(f->stream, NULL), *now;
    int same, set;
    if (stream == NULL) {
        return -1;
    }
    set = PyObject_IsTrue(stream);
    if (set < 0) {
        Py_DECREF(stream);
        return -1;
    }
    if (!set) { /* 0: the legacy default stream, which the runtime calls None */
        Py_DECREF(stream);
        stream = strong(Py_None);
    }
    now = PyObject_GetAttr(f->runtime, eager_names[1]);
    same = now != NULL ? PyObject_RichCompareBool(now, stream, Py_EQ) : -1;
    Py_XDECREF(now);
    Py_DECREF(stream);
    return same;
}

/* Whether a call with `args` may be made here (see the file's comment): 1, 0 for the Python path, or -1 with the
   error set (a check raised). */
static int eager_direct(const eager_fields *f, PyObject *args) {
    Py_ssize_t i;
    int hit;
    if (f->count < 0 || PyTuple_Size(args) != f->count) {
        return 0;
    }
    if ((hit = eager_any(f->truthy, 1)) != 0 || (hit = eager_any(f->nones, 0)) != 0) {
        return hit < 0 ? -1 : 0;
    }
    for (i = 0; i < PyTuple_Size(f->tensors); ++i) {
        PyObject *v = PyTuple_GetItem(args, PyLong_AsSsize_t(PyTuple_GetItem(f->tensors, i)));
        if ((PyObject *)Py_TYPE(v) != f->tensor) {
            return 0;
        }
        if ((hit = eager_attr_is(v, eager_names[0], Py_False)) != 1 ||
            (hit = eager_attr_is(v, f->device, Py_True)) != 1) {
            return hit;
        }
    }
    if (f->held != Py_None && PyDict_Size(f->held) != 0) { /* held by a kernel call before: Python sorts */
        return 0;
    }
    return f->stream == Py_None ? 1 : eager_same_stream(f); /* another stream: the Python path selects it */
}

/* The outputs made, the kernel called, waited for: the outputs (one, or a tuple), or NULL with the error set. */
static PyObject *eager_run(const eager_fields *self, PyObject *args) {
    Py_ssize_t nout = PyTuple_Size(self->makers), n = PyTuple_Size(self->order), i;
    PyObject *outs = PyTuple_New(nout), *values = NULL, *got = NULL;
    for (i = 0; outs != NULL && i < nout; ++i) {
        PyObject *m = PyTuple_GetItem(self->makers, i);
        PyObject *made = PyObject_CallFunctionObjArgs(PyTuple_GetItem(m, 1),
                                                      PyTuple_GetItem(args, PyLong_AsSsize_t(PyTuple_GetItem(m, 0))),
                                                      NULL);
        if (made == NULL) {
            Py_CLEAR(outs);
        } else {
            PyTuple_SetItem(outs, i, made); /* steals made */
        }
    }
    values = outs != NULL ? PyTuple_New(n) : NULL;
    for (i = 0; values != NULL && i < n; ++i) {
        Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GetItem(self->order, i));
        PyTuple_SetItem(values, i, strong(at < self->count ? PyTuple_GetItem(args, at)
                                                            : PyTuple_GetItem(outs, at - self->count)));
    }
    got = values != NULL ? PyObject_Call(self->kernel, values, NULL) : NULL;
    Py_XDECREF(values);
    if (self->held != Py_None) { /* the op holds none of its tensors past its call, as torch's own ops */
        PyDict_Clear(self->held);
    }
    if (got != NULL && self->wait != Py_None) {
        Py_DECREF(got);
        got = PyObject_CallObject(self->wait, NULL);
    }
    if (got == NULL) {
        Py_XDECREF(outs);
        return NULL;
    }
    Py_DECREF(got);
    if (nout == 1) {
        PyObject *one = strong(PyTuple_GetItem(outs, 0));
        Py_DECREF(outs);
        return one;
    }
    return outs;
}

static PyObject *eager_call(PyObject *op, PyObject *args, PyObject *kwargs) {
    eager_fields f = ((taichi_aot_eager *)op)->f; /* the call's own references: what it runs may set them up anew */
    PyObject *out = NULL, *type, *value, *trace, *method;
    int direct;
#define EAGER_HOLD(name) Py_XINCREF(f.name);
    EAGER_FIELDS(EAGER_HOLD)
#undef EAGER_HOLD
    direct = kwargs != NULL && PyDict_Size(kwargs) != 0 ? 0 : eager_direct(&f, args);
    if (direct == 0) {
        method = PyObject_GetAttrString(op, "_python_call");
        out = method != NULL ? PyObject_Call(method, args, kwargs) : NULL;
        Py_XDECREF(method);
    } else if (direct > 0 && (out = eager_run(&f, args)) == NULL) {
        PyErr_Fetch(&type, &value, &trace); /* the op's own message, where its checks find the fault */
        PyErr_NormalizeException(&type, &value, &trace);
        if (trace != NULL && value != NULL) {
            PyException_SetTraceback(value, trace);
        }
        out = PyObject_CallMethod(op, "_eager_failed", "OO", args, value != NULL ? value : Py_None);
        Py_XDECREF(out); /* it raises; where it does not, the error as it was */
        out = NULL;
        if (!PyErr_Occurred()) {
            PyErr_Restore(type, value, trace);
        } else {
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(trace);
        }
    }
    eager_fields_clear(&f);
    return out;
}

/* What the C call hands to Python by name: the subclass provides both (these raise NotImplementedError). */
static PyObject *eager_python_call(PyObject *op, PyObject *args, PyObject *kwargs) {
    (void)op;
    (void)args;
    (void)kwargs;
    PyErr_SetString(PyExc_NotImplementedError, "EagerOp._python_call: the subclass takes the calls C does not");
    return NULL;
}

static PyObject *eager_failed(PyObject *op, PyObject *args) {
    (void)op;
    (void)args;
    PyErr_SetString(PyExc_NotImplementedError, "EagerOp._eager_failed: the subclass says what a failed call met");
    return NULL;
}

static PyMethodDef eager_methods[] = {
    {"_python_call", (PyCFunction)(void (*)(void))eager_python_call, METH_VARARGS | METH_KEYWORDS,
     "_python_call(*args, **kwargs): the op's Python call, for a call C does not make (the subclass provides it)"},
    {"_eager_failed", eager_failed, METH_VARARGS,
     "_eager_failed(args, error): raise the op's own message for a failed call, else error (the subclass's)"},
    {"_eager_setup", (PyCFunction)(void (*)(void))eager_setup, METH_VARARGS | METH_KEYWORDS,
     "_eager_setup(*, count, truthy, nones, tensor, tensors, device, makers, order, kernel, wait, held, stream, "
     "runtime): what the eager call in C needs"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot eager_type_slots[] = {
    {Py_tp_new, (void *)eager_new},
    {Py_tp_dealloc, (void *)eager_dealloc},
    {Py_tp_traverse, (void *)eager_traverse},
    {Py_tp_clear, (void *)eager_clear},
    {Py_tp_call, (void *)eager_call},
    {Py_tp_methods, (void *)eager_methods},
    {Py_tp_doc, (void *)"The eager call of a torch op in C (the base of taichi_aot.torch.Op)."},
    {0, NULL},
};

static PyType_Spec eager_spec = {
    "taichi_aot._call.EagerOp",
    sizeof(taichi_aot_eager),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    eager_type_slots,
};

/* The type, added to the module; 0, or -1 with an error set. */
static int eager_install(PyObject *module) {
    PyObject *type;
    eager_names[0] = PyUnicode_InternFromString("requires_grad");
    eager_names[1] = PyUnicode_InternFromString("stream");
    type = eager_names[0] != NULL && eager_names[1] != NULL ? PyType_FromSpec(&eager_spec) : NULL;
    if (type == NULL || PyModule_AddObject(module, "EagerOp", type) != 0) { /* steals type where it worked */
        Py_XDECREF(type);
        return -1;
    }
    return 0;
}
