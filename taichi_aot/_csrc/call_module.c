/* The extension taichi_aot._call: the C call of kernels and graphs (call.c, the type Launcher) with the records
   Python hands it (records.c) and what it reads of Python objects (arrays.c, reads.c, fresh.c, remember.c), built by
   setup.py apart from the cffi module taichi_aot._native, which keeps the C-API bindings.

   Compiled against the limited API of Python 3.9 (setup.py defines Py_LIMITED_API 0x03090000, the level of the
   wheel's cp39-abi3 tag). What it takes of taichi_aot._native (the launch, the close epoch, torch's layout reads,
   libtaichi's imports and error slot) comes in one table (TaichiAotCallTable, table.c), handed over once by its
   address (`_bind`, called by taichi_aot._arrays at import): no symbol is looked up by name. Until then a Launcher
   cannot be prepared. The types are made here, in the module's init, and nowhere else. */
#include "call_common.h" /* Python's headers, the system's, taichi_aot.h; taichi_aot_api, pyhelp.c's helpers */

#include "pyhelp.c"
#include "records.c"
#include "arrays.c"
#include "reads.c"
#include "fresh.c"
#include "twins.c"
#include "remember.c"
#include "call.c"
#include "eager.c"

/* _bind(address): the table of taichi_aot._native at `address` (lib.taichi_aot_call_table()), copied once. */
static PyObject *call_bind(PyObject *module, PyObject *address) {
    const TaichiAotCallTable *table = (const TaichiAotCallTable *)PyLong_AsVoidPtr(address);
    (void)module;
    if (table == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "_bind: the address of taichi_aot._native's call table");
        }
        return NULL;
    }
    if (table->size != sizeof(TaichiAotCallTable) || table->epoch == NULL || table->launch == NULL) {
        PyErr_SetString(PyExc_ImportError, "_bind: taichi_aot._native's call table is not of this build");
        return NULL;
    }
    if (taichi_aot_api.size != 0 && memcmp(&taichi_aot_api, table, sizeof(TaichiAotCallTable)) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "_bind: bound to another table already");
        return NULL;
    }
    taichi_aot_api = *table;
    Py_RETURN_NONE;
}

/* came_back(): this thread, marked as coming back for Python's lock by a C call that let it go (taichi_aot.h:
   taichi_aot_coming_back), has it again: unmarked (nothing where it was not marked). */
static PyObject *call_came_back(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    if (taichi_aot_api.size != 0) {
        taichi_aot_api.came_back();
    }
    Py_RETURN_NONE;
}

static PyMethodDef call_module_methods[] = {
    {"_bind", call_bind, METH_O, "_bind(address): taichi_aot._native's call table, at its address, once"},
    {"came_back", call_came_back, METH_NOARGS,
     "came_back(): this thread, back from a C call that let Python's lock go, has it again"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef call_module = {
    PyModuleDef_HEAD_INIT,
    "taichi_aot._call",
    "The C call of kernels and graphs: the type Launcher (taichi_aot/_csrc/call.c), and EagerOp (eager.c).",
    -1,
    call_module_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__call(void) {
    PyObject *module = PyModule_Create(&call_module);
    PyObject *type = module != NULL ? PyType_FromSpec(&launcher_spec) : NULL;
    Py_XINCREF(type);
    launcher_base = type; /* _add_twin's check, kept for the process */
    if (type == NULL || PyModule_AddObject(module, "Launcher", type) != 0) { /* steals type where it worked */
        Py_XDECREF(type);
        Py_XDECREF(module);
        return NULL;
    }
    if (records_install(module) != 0 || eager_install(module) != 0 ||
        PyModule_AddIntConstant(module, "LIMITED_API", Py_LIMITED_API) != 0) {
        Py_DECREF(module);
        return NULL;
    }
    reads_install();
    return module;
}
