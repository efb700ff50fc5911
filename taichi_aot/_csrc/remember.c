/* What a call made by Python leaves the launcher of call.c to remember (#included before call.c, which calls it;
   the slots these fill are launcher.h's): after _slow_call launched, the NdArrays, shared numpy arrays and CUDA arrays
   of other libraries it was given, so that the next call with them is made in C. Their records (NumpyHit, PrintHit)
   are records.c's: read by field. */
#include "call_common.h"
#include "launcher.h"
#include "records.h"

/* The value given for slot i, borrowed: a kernel's positional argument, else the keyword of the slot's name; NULL
   where there is none (a keyword missing, or a module that records no names). */
static PyObject *launcher_value(taichi_aot_launcher *self, Py_ssize_t i, PyObject *args, PyObject *kwargs) {
    if (!self->graph && i < PyTuple_Size(args)) {
        return PyTuple_GetItem(args, i);
    }
    return kwargs != NULL && self->slots[i].name != NULL ? call_keyword(kwargs, self->slots[i].name) : NULL;
}

/* Remember the CUDA array `value` of slot `s` by its PrintHit `hit` (of its class, signature and access). */
static void launcher_remember_foreign(taichi_aot_slot *s, PyObject *value, PyObject *hit) {
    PyObject *cls, *reads, *print, *arg_bytes, *held, *id;
    int n, k;
    if (!record_is(hit, RECORD_PRINT_HIT)) {
        return;
    }
    cls = RECORD_FIELD(hit, PRINT_HIT_CLS);
    reads = RECORD_FIELD(hit, PRINT_HIT_READS);
    print = RECORD_FIELD(hit, PRINT_HIT_PRINT);
    arg_bytes = RECORD_FIELD(hit, PRINT_HIT_ARG_BYTES);
    held = RECORD_FIELD(hit, PRINT_HIT_HELD);
    n = reads_parse(reads, s->read);
    if (!print_hit_fits(hit, value, s->sig, s->writes) || /* the rule's first half (reads.c), held from now on */
        n < 0 || !PyTuple_Check(print) || PyTuple_Size(print) != n || !PyBytes_Check(arg_bytes) ||
        PyBytes_Size(arg_bytes) != (Py_ssize_t)sizeof(TiArgument) || !(PyDict_Check(held) || held == Py_None)) {
        PyErr_Clear();
        return;
    }
    id = PyLong_FromVoidPtr(value);
    s->last = id != NULL ? PyWeakref_NewRef(value, NULL) : NULL;
    if (s->last == NULL) {
        PyErr_Clear();
        Py_XDECREF(id);
        return;
    }
    s->hit = strong(hit);
    for (k = 0; k < n; ++k) {
        s->expect[k] = PyTuple_GetItem(print, k);
    }
    reads_bind(s->read, n, Py_TYPE(value));
    s->cls = strong(cls);
    s->nreads = n;
    s->reads = strong(reads); /* the slot's: the parsed reads and expected items are borrowed from these */
    s->print = strong(print);
    s->id = id;
    s->arg_bytes = strong(arg_bytes);
    s->held = strong(held);
}

/* After a launch made by _slow_call: remember the NdArrays it was given, and the shared numpy and CUDA arrays found in
   the runtime's hits (handed over by _prepare). */
static void launcher_remember(taichi_aot_launcher *self, PyObject *args, PyObject *kwargs) {
    Py_ssize_t i;
    PyObject *hits = self->hits; /* held here: Python code run by a read below could hand the launcher another */
    Py_XINCREF(hits);
    for (i = 0; i < self->count; ++i) {
        taichi_aot_slot *s = &self->slots[i];
        PyObject *value, *hit, *id;
        void *key;
        if (s->kind != TAICHI_AOT_SLOT_NDARRAY) {
            continue;
        }
        value = launcher_value(self, i, args, kwargs);
        if (value == NULL) {
            continue;
        }
        memcpy(&s->saved, s->arg, sizeof(TiArgument)); /* the slow call packed every slot with these values */
        s->dirty = 0;
        if ((PyObject *)Py_TYPE(value) == self->ndarray_type) {
            s->last = PyWeakref_NewRef(value, NULL);
            if (s->last == NULL) {
                PyErr_Clear();
            }
            continue;
        }
        if (s->sig == NULL || hits == NULL) {
            continue;
        }
        id = PyLong_FromVoidPtr(value);
        hit = id != NULL ? dict_get(hits, id) : NULL; /* a strong reference: the reads below run Python code */
        Py_XDECREF(id);
        if (hit == NULL) {
            PyErr_Clear();
            continue;
        }
        if ((PyObject *)Py_TYPE(value) != self->numpy_type) {
            launcher_remember_foreign(s, value, hit);
            Py_DECREF(hit);
            continue;
        }
        key = record_is(hit, RECORD_NUMPY_HIT) && RECORD_FIELD(hit, NUMPY_HIT_SIG) == s->sig
                  ? PyLong_AsVoidPtr(RECORD_FIELD(hit, NUMPY_HIT_ADDRESS)) : NULL;
        if (key == NULL) {
            PyErr_Clear();
            Py_DECREF(hit);
            continue;
        }
        s->last = PyWeakref_NewRef(value, NULL);
        if (s->last == NULL) {
            PyErr_Clear();
            Py_DECREF(hit);
            continue;
        }
        s->hit = hit; /* takes dict_get's reference */
        s->key = (const TaichiAotArrayKey *)key;
    }
    Py_XDECREF(hits);
}
