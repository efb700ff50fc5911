/* The eager call of a torch op in C (taichi_aot.torch.Op's base, EagerOp): a plain eager call (no trace, mode,
   transform or profiler; plain tensors on the op's device, none needing a gradient; every input by position) makes
   the op's outputs, calls the kernel with inputs and outputs in signature order (the kernel's own C call, call.c,
   reads the tensors), waits for it on x64 and returns the outputs, with no Python frame of the op's own. Anything
   else, and an op that _eager_setup was not given, goes to the op's Python call (_python_call), which takes every
   call the same way through torch's dispatcher or its own Python path. #included after call.c. */

typedef struct {
    PyObject_HEAD
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
    PyObject *runtime;  /* CUDA: the runtime, whose _cuda_stream must be torch's stream, or None */
} taichi_aot_eager;

#define EAGER_FIELDS(X) X(truthy) X(nones) X(tensor) X(tensors) X(device) X(makers) X(order) X(kernel) X(wait) \
    X(held) X(stream) X(runtime)

static PyObject *eager_names[2]; /* "requires_grad", "_cuda_stream", interned once (kept for the process) */

static int eager_traverse(PyObject *op, visitproc visit, void *arg) {
    taichi_aot_eager *self = (taichi_aot_eager *)op;
#define EAGER_VISIT(name) Py_VISIT(self->name);
    EAGER_FIELDS(EAGER_VISIT)
#undef EAGER_VISIT
    Py_VISIT((PyObject *)Py_TYPE(op)); /* a heap type's instances keep it alive */
    return 0;
}

static int eager_clear(PyObject *op) {
    taichi_aot_eager *self = (taichi_aot_eager *)op;
#define EAGER_CLEAR(name) Py_CLEAR(self->name);
    EAGER_FIELDS(EAGER_CLEAR)
#undef EAGER_CLEAR
    self->count = -1;
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
        self->count = -1;
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
    if (count < 0 || !PyTuple_Check(v[0]) || !PyTuple_Check(v[1]) || !PyType_Check(v[2]) || !PyTuple_Check(v[3]) ||
        !PyUnicode_Check(v[4]) || !PyTuple_Check(v[5]) || !PyTuple_Check(v[6]) || !PyCallable_Check(v[7]) ||
        (v[9] != Py_None && !PyDict_Check(v[9]))) {
        PyErr_SetString(PyExc_TypeError, "_eager_setup: tuples of callables and positions, a type, a name, a "
                                         "kernel, and a dict or None");
        return NULL;
    }
    if (!eager_positions_fit(v[3], count) || !eager_positions_fit(v[6], count + PyTuple_Size(v[5])) ||
        !eager_makers_fit(v[5], count)) {
        PyErr_SetString(PyExc_ValueError, "_eager_setup: a position outside the inputs (tensors, each output's "
                                          "(input, maker)) or outside the inputs and outputs (order)");
        return NULL;
    }
    eager_clear(op);
#define EAGER_TAKE(name) self->name = strong(v[k++]);
    EAGER_FIELDS(EAGER_TAKE)
#undef EAGER_TAKE
    self->count = count;
    Py_RETURN_NONE;
}

/* Whether every callable of `calls` gives a true value (`truthy`) or other than None: 1 where one does (or raised:
   cleared, the Python path asks again), else 0. */
static int eager_any(PyObject *calls, int truthy) {
    Py_ssize_t i;
    for (i = 0; i < PyTuple_Size(calls); ++i) {
        PyObject *got = PyObject_CallObject(PyTuple_GetItem(calls, i), NULL);
        int hit = got == NULL || (truthy ? PyObject_IsTrue(got) != 0 : got != Py_None);
        Py_XDECREF(got);
        if (hit) {
            PyErr_Clear();
            return 1;
        }
    }
    return 0;
}

/* An attribute of `value` that must be exactly `want` (Py_True, Py_False, or an object compared by identity). */
static int eager_attr_is(PyObject *value, PyObject *name, PyObject *want) {
    PyObject *got = PyObject_GetAttr(value, name);
    int same = got == want;
    Py_XDECREF(got);
    if (got == NULL) {
        PyErr_Clear();
    }
    return same;
}

/* Whether a call with `args` may be made here (see the file's comment): 1, or 0 for the Python path. */
static int eager_direct(taichi_aot_eager *self, PyObject *args) {
    Py_ssize_t i;
    PyObject *stream;
    int same;
    if (self->count < 0 || PyTuple_Size(args) != self->count || eager_any(self->truthy, 1) ||
        eager_any(self->nones, 0)) {
        return 0;
    }
    for (i = 0; i < PyTuple_Size(self->tensors); ++i) {
        PyObject *v = PyTuple_GetItem(args, PyLong_AsSsize_t(PyTuple_GetItem(self->tensors, i)));
        if ((PyObject *)Py_TYPE(v) != self->tensor || !eager_attr_is(v, eager_names[0], Py_False) ||
            !eager_attr_is(v, self->device, Py_True)) {
            return 0;
        }
    }
    if (self->held != Py_None && PyDict_Size(self->held) != 0) { /* held by a kernel call before: Python sorts */
        return 0;
    }
    if (self->stream == Py_None) {
        return 1;
    }
    stream = PyObject_CallObject(self->stream, NULL); /* torch's current stream, the runtime's already? */
    if (stream == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (PyObject_IsTrue(stream) != 1) { /* 0: the legacy default stream, which the runtime calls None */
        Py_DECREF(stream);
        stream = strong(Py_None);
    }
    {
        PyObject *now = PyObject_GetAttr(self->runtime, eager_names[1]);
        same = now != NULL ? PyObject_RichCompareBool(now, stream, Py_EQ) : -1;
        Py_XDECREF(now);
    }
    Py_DECREF(stream);
    if (same != 1) { /* another stream: the Python path selects it */
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* The outputs made, the kernel called, waited for: the outputs (one, or a tuple), or NULL with the error set. */
static PyObject *eager_run(taichi_aot_eager *self, PyObject *args) {
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
    taichi_aot_eager *self = (taichi_aot_eager *)op;
    PyObject *out, *type, *value, *trace, *method;
    if ((kwargs != NULL && PyDict_Size(kwargs) != 0) || !eager_direct(self, args)) {
        method = PyObject_GetAttrString(op, "_python_call");
        out = method != NULL ? PyObject_Call(method, args, kwargs) : NULL;
        Py_XDECREF(method);
        return out;
    }
    out = eager_run(self, args);
    if (out != NULL) {
        return out;
    }
    PyErr_Fetch(&type, &value, &trace); /* the op's own message, where its checks find the fault */
    PyErr_NormalizeException(&type, &value, &trace);
    if (trace != NULL && value != NULL) {
        PyException_SetTraceback(value, trace);
    }
    out = PyObject_CallMethod(op, "_eager_failed", "OO", args, value != NULL ? value : Py_None);
    Py_XDECREF(out); /* it raises; where it does not, the error as it was */
    if (out != NULL) {
        PyErr_Restore(type, value, trace);
        return NULL;
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(trace);
    return NULL;
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
    eager_names[1] = PyUnicode_InternFromString("_cuda_stream");
    type = eager_names[0] != NULL && eager_names[1] != NULL ? PyType_FromSpec(&eager_spec) : NULL;
    if (type == NULL || PyModule_AddObject(module, "EagerOp", type) != 0) { /* steals type where it worked */
        Py_XDECREF(type);
        return -1;
    }
    return 0;
}
