/* The records the Python half hands the C call: types of taichi_aot._call, made by Python with keyword arguments and
   read here by their fields (never by attribute name, never by a tuple's position):
   - NumpyHit: a numpy array shared without a copy, found again by the runtime's record of it (ForeignArgs.hits);
   - PrintHit: a torch, CuPy or JAX array shared before, found again by its print (the reads of its class);
   - CallSlot: what the C call checks itself of one argument of a kernel or graph (Launcher._prepare);
   - FreshSlot: what an array taken anew for one argument must be (Launcher._fresh).
   Each field is named once, in its kind's list below (the enum, names, members and signature are made from it), and
   read from Python as a read-only attribute of that name (_call.pyi declares them; stubtest checks the two agree).
   (#included by call_module.c before call.c.) */
#include "call_common.h"
#include "records.h"

#include <structmember.h>


static const char *const numpy_hit_fields[] = {NUMPY_HIT_LIST(RECORD_NAME) NULL};
static const char *const print_hit_fields[] = {PRINT_HIT_LIST(RECORD_NAME) NULL};
static const char *const slot_fields[] = {SLOT_LIST(RECORD_NAME) NULL};
static const char *const fresh_slot_fields[] = {FRESH_SLOT_LIST(RECORD_NAME) NULL};

static PyMemberDef numpy_hit_members[] = {NUMPY_HIT_LIST(RECORD_MEMBER) RECORD_END};
static PyMemberDef print_hit_members[] = {PRINT_HIT_LIST(RECORD_MEMBER) RECORD_END};
static PyMemberDef slot_members[] = {SLOT_LIST(RECORD_MEMBER) RECORD_END};
static PyMemberDef fresh_slot_members[] = {FRESH_SLOT_LIST(RECORD_MEMBER) RECORD_END};

typedef struct {
    const char *name; /* the type's, qualified */
    const char *doc;
    const char *const *fields;
    int count;
    PyMemberDef *members;
    PyObject *type; /* made at the module's init */
} taichi_aot_record_kind;

static taichi_aot_record_kind record_kinds[RECORD_KINDS] = {
    {"taichi_aot._call.NumpyHit",
     "NumpyHit(*" NUMPY_HIT_LIST(RECORD_KEYWORD) ")\n--\n\n"
     "A numpy array shared without a copy (its TaichiAotArrayKey `key`, at `address`), of the ndarray whose "
     "lifetime record is `owned` and signature `sig`; `ref` holds it weakly.",
     numpy_hit_fields, NUMPY_HIT_FIELDS, numpy_hit_members, NULL},
    {"taichi_aot._call.PrintHit",
     "PrintHit(*" PRINT_HIT_LIST(RECORD_KEYWORD) ")\n--\n\n"
     "An array of class `cls` shared before, found again by its `print` (what its `reads` give); `arg_bytes` is"
     " the TiArgument of the ndarray `nd` "
     "it travels in (`owned`, `sig`), `held` the runtime's held arrays (None: a host array).",
     print_hit_fields, PRINT_HIT_FIELDS, print_hit_members, NULL},
    {"taichi_aot._call.CallSlot",
     "CallSlot(*" SLOT_LIST(RECORD_KEYWORD) ")\n--\n\n"
     "What the C call checks of one argument (kind: TAICHI_AOT_SLOT_*; writes: the kernel may write it; "
     "argument: its TiArgument's address; sig: an ndarray's signature or None; "
     "name: a keyword's name or None).",
     slot_fields, SLOT_FIELDS, slot_members, NULL},
    {"taichi_aot._call.FreshSlot",
     "FreshSlot(*" FRESH_SLOT_LIST(RECORD_KEYWORD) ")\n--\n\n"
     "What an array taken anew for one argument must be (numpy dtype, its typestr, TiDataType, itemsize, dims, "
     "element shape), and its argument's "
     "bytes with all but its memory and dims written.",
     fresh_slot_fields, FRESH_SLOT_FIELDS, fresh_slot_members, NULL},
};

/* Whether `op` is a record of kind `kind` (exactly: the types take no subclass). */
static int record_is(PyObject *op, int kind) {
    return op != NULL && (PyObject *)Py_TYPE(op) == record_kinds[kind].type;
}

static int record_kind_of(PyTypeObject *type) {
    int k;
    for (k = 0; k < RECORD_KINDS; ++k) {
        if ((PyObject *)type == record_kinds[k].type) {
            return k;
        }
    }
    return -1;
}

static PyObject *record_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    int kind = record_kind_of(type), i;
    const taichi_aot_record_kind *k;
    taichi_aot_record *self;
    if (kind < 0) {
        PyErr_SetString(PyExc_TypeError, "not a record type of taichi_aot._call");
        return NULL;
    }
    k = &record_kinds[kind];
    if ((args != NULL && PyTuple_Size(args) != 0) || kwargs == NULL || PyDict_Size(kwargs) != k->count) {
        PyErr_Format(PyExc_TypeError, "%s takes its %d fields as keywords, each once", k->name, k->count);
        return NULL;
    }
    self = (taichi_aot_record *)PyType_GenericAlloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    for (i = 0; i < k->count; ++i) {
        PyObject *value = PyDict_GetItemString(kwargs, k->fields[i]); /* borrowed */
        if (value == NULL) {
            PyErr_Format(PyExc_TypeError, "%s: no field %s given", k->name, k->fields[i]);
            Py_DECREF(self);
            return NULL;
        }
        Py_INCREF(value);
        self->field[i] = value;
    }
    return (PyObject *)self;
}

static int record_traverse(PyObject *op, visitproc visit, void *arg) {
    int i;
    for (i = 0; i < RECORD_FIELDS_MAX; ++i) {
        Py_VISIT(RECORD_FIELD(op, i));
    }
    Py_VISIT((PyObject *)Py_TYPE(op));
    return 0;
}

static int record_clear(PyObject *op) {
    int i;
    for (i = 0; i < RECORD_FIELDS_MAX; ++i) {
        Py_CLEAR(RECORD_FIELD(op, i));
    }
    return 0;
}

static void record_dealloc(PyObject *op) {
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    record_clear(op);
    PyObject_GC_Del(op);
    Py_DECREF((PyObject *)type);
}

/* Make the record types and add them to `module`: 0, or -1 with an error set. */
static int records_install(PyObject *module) {
    int k;
    for (k = 0; k < RECORD_KINDS; ++k) {
        taichi_aot_record_kind *kind = &record_kinds[k];
        PyType_Slot slots[] = {
            {Py_tp_new, (void *)record_new},
            {Py_tp_dealloc, (void *)record_dealloc},
            {Py_tp_traverse, (void *)record_traverse},
            {Py_tp_clear, (void *)record_clear},
            {Py_tp_members, (void *)kind->members},
            {Py_tp_doc, (void *)kind->doc},
            {0, NULL},
        };
        PyType_Spec spec = {kind->name, sizeof(taichi_aot_record), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, NULL};
        const char *short_name = strrchr(kind->name, '.') + 1;
        spec.slots = slots;
        kind->type = PyType_FromSpec(&spec);
        if (kind->type == NULL) {
            return -1;
        }
        Py_INCREF(kind->type); /* one reference the module's, one this table's */
        if (PyModule_AddObject(module, short_name, kind->type) != 0) {
            Py_DECREF(kind->type);
            return -1;
        }
    }
    return 0;
}
