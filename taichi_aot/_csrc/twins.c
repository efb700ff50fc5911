/* Each other thread's launcher of a kernel or graph (_callplan.py's Twin: the C launcher of the thread's CallPlan, a
   buffer, slots and launch record of its own, made at the thread's first call), which call.c's launcher hands that
   thread's calls to here in C (#included before call.c). */
#include "call_common.h"
#include "launcher.h"

/* The type Launcher (call_module.c sets it, once): a twin is one of its instances. */
static PyObject *launcher_base;

/* The calling thread's own launcher (_callplan.py's Twin, handed over by _add_twin), a new reference; NULL: none (an
   exception set where the lookup failed). */
static PyObject *launcher_twin(taichi_aot_launcher *self) {
    unsigned long me = (unsigned long)pthread_self();
    PyObject *key, *twin;
    int i;
    for (i = 0; i < self->seen_count; ++i) {
        if (self->seen_threads[i] == me) {
            Py_INCREF(self->seen_twins[i]);
            return self->seen_twins[i];
        }
    }
    key = PyLong_FromUnsignedLong(me);
    twin = key != NULL ? PyDict_GetItemWithError(self->twins, key) : NULL;
    Py_XDECREF(key);
    if (twin != NULL && self->seen_count < TWINS_SEEN) { /* borrowed: the dict holds it until it changes */
        self->seen_threads[self->seen_count] = me;
        self->seen_twins[self->seen_count++] = twin;
    }
    Py_XINCREF(twin);
    return twin;
}

/* _add_twin(ident, twin): the launcher of thread `ident` (_callplan.py's Twin: its CallPlan's buffer, slots and launch
   record), to which this launcher hands that thread's calls here in C; kept for TWINS thread idents at
   most (a thread past them is handed over by Python; a thread given an ident again finds the twin made for it,
   whose record checks its slots anew), and until _prepare is called again. */
#define TWINS 64
static PyObject *launcher_add_twin(PyObject *op, PyObject *args) {
    taichi_aot_launcher *self = (taichi_aot_launcher *)op;
    PyObject *ident, *twin;
    if (!PyArg_ParseTuple(args, "OO", &ident, &twin)) {
        return NULL;
    }
    if (!PyLong_Check(ident) || launcher_base == NULL || PyObject_IsInstance(twin, launcher_base) != 1 || twin == op) {
        PyErr_Clear(); /* what PyObject_IsInstance may have set: the TypeError below says it */
        PyErr_SetString(PyExc_TypeError, "_add_twin: a thread ident and another Launcher");
        return NULL;
    }
    if (self->twins == NULL && (self->twins = PyDict_New()) == NULL) {
        return NULL;
    }
    self->seen_count = 0; /* a twin replaced goes (and may run code that calls): none borrowed is found meanwhile */
    if ((PyDict_Size(self->twins) < TWINS || PyDict_Contains(self->twins, ident) == 1) &&
        PyDict_SetItem(self->twins, ident, twin) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}
