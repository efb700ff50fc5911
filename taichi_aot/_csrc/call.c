/* Kernel and graph calls checked and launched in C: the type `taichi_aot._call.Launcher`, the base
   of taichi_aot's Kernel, ComputeGraph and BoundLaunch (a launcher of no argument), whose call
   (`step(x, v, 0.01)`, `graph(x=a, s=0.5)`, `bound()`) is this file's launcher_call.

   A call is made here, with no Python frame, when every argument is one the launcher can vouch for:
   - an ndarray argument given the very object (an NdArray, or a numpy array the runtime shares) whose
     argument the slot already holds, as the last successful launch left it, with nothing closed since
     (the close epoch unmoved: an object's dtype, shape, runtime and memory are fixed while it is open);
     a numpy array is re-checked besides (data, dtype, shape, strides, writable flag: numpy lets them
     change in place) and its argument written again; a CUDA array of torch, CuPy or JAX is re-checked by
     its PrintHit's reads, made here (pointer, shape, strides, dtype, requires_grad; a JAX array's deletion),
     as the Python packer checks it, then held until the runtime is waited for (this runs the library's
     Python code, so the close epoch is looked at again after packing);
   - an ndarray argument given another array (numpy on a CPU, a torch tensor or a known CUDA array on the runtime's
     device) of its dtype and shape, contiguous: taken anew over the runtime's pool of imported memory (fresh.c);
   - an f32 or i32 argument given an exact Python float or int in range;
   the call comes from the runtime's thread, the runtime is not recording, and no keyword is unknown.
   Anything else goes to the Python method `_slow_call`, which checks, packs and launches as the
   package always did (and raises what is wrong); after a launch it made, the launcher remembers the
   objects it was given, so the next call with them is made here. The Python side forgets nothing it
   packs behind the launcher's back: every write to the shared buffer goes through this call.

   Compiled into the extension taichi_aot._call (call_module.c: its init, and the limited API level). */
#include "call_common.h"
#include "arrays.h"
#include "launcher.h"
#include "fresh.h"
#include "reads.h"
#include "records.h"


static void launcher_forget_slot(taichi_aot_slot *s) {
    Py_CLEAR(s->last);
    Py_CLEAR(s->seen);
    Py_CLEAR(s->hit);
    s->key = NULL;
    reads_unbind(s->read, s->nreads);
    Py_CLEAR(s->cls);
    Py_CLEAR(s->reads);
    Py_CLEAR(s->print);
    s->nreads = 0;
    Py_CLEAR(s->id);
    Py_CLEAR(s->arg_bytes);
    Py_CLEAR(s->held);
}

static void launcher_forget(taichi_aot_launcher *self) {
    Py_ssize_t i;
    for (i = 0; i < self->count; ++i) {
        launcher_forget_slot(&self->slots[i]);
    }
}

static void launcher_release(taichi_aot_launcher *self) {
    Py_ssize_t i;
    launcher_forget(self);
    for (i = 0; i < self->count; ++i) {
        Py_CLEAR(self->slots[i].sig);
        Py_CLEAR(self->slots[i].name);
        fresh_slot_clear(&self->slots[i].fresh);
    }
    PyMem_Free(self->slots);
    self->slots = NULL;
    self->count = -1;
    self->launch = NULL;
    Py_CLEAR(self->ndarray_type);
    Py_CLEAR(self->numpy_type);
    Py_CLEAR(self->hits);
    Py_CLEAR(self->guards);
    self->seen_count = 0; /* borrowed from the twins, which go now */
    Py_CLEAR(self->twins); /* made again for what _prepare gives now */
    fresh_clear(&self->fresh);
}

static int launcher_traverse(PyObject *op, visitproc visit, void *arg) {
    taichi_aot_launcher *self = (taichi_aot_launcher *)op;
    Py_ssize_t i;
    int k;
    for (i = 0; i < self->count; ++i) {
        Py_VISIT(self->slots[i].hit);
        Py_VISIT(self->slots[i].last);
        Py_VISIT(self->slots[i].reads);
        Py_VISIT(self->slots[i].cls);
        for (k = 0; k < self->slots[i].nreads; ++k) {
            Py_VISIT(self->slots[i].read[k].descr);
        }
        Py_VISIT(self->slots[i].print);
        Py_VISIT(self->slots[i].held);
        Py_VISIT(self->slots[i].sig);
        Py_VISIT(self->slots[i].fresh.descr);
        Py_VISIT(self->slots[i].seen);
        Py_VISIT(self->slots[i].fresh.typestr);
        Py_VISIT(self->slots[i].fresh.cai);
    }
    Py_VISIT(self->fresh.imports);
    Py_VISIT(self->fresh.held);
    Py_VISIT(self->fresh.cai_classes);
    Py_VISIT(self->fresh.spill);
    Py_VISIT(self->ndarray_type);
    Py_VISIT(self->numpy_type);
    Py_VISIT(self->hits);
    Py_VISIT(self->guards);
    Py_VISIT(self->twins);
    Py_VISIT((PyObject *)Py_TYPE(op)); /* a heap type's instances keep it alive */
    return 0;
}

static int launcher_clear(PyObject *op) {
    launcher_release((taichi_aot_launcher *)op);
    return 0;
}

static void launcher_dealloc(PyObject *op) {
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    launcher_release((taichi_aot_launcher *)op);
    PyObject_GC_Del(op);
    Py_DECREF((PyObject *)type);
}

static PyObject *launcher_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    taichi_aot_launcher *self = (taichi_aot_launcher *)PyType_GenericAlloc(type, 0);
    (void)args;
    (void)kwargs;
    if (self != NULL) {
        self->count = -1;
    }
    return (PyObject *)self;
}

/* Slot `s` read from the CallSlot record `item`: its kind, access, argument address, signature and name; 0 with an
   exception set where the record is not one. */
static int launcher_read_slot(taichi_aot_slot *s, PyObject *item) {
    PyObject *sig, *name;
    if (!record_is(item, RECORD_SLOT)) {
        PyErr_SetString(PyExc_TypeError, "_prepare: slots must be CallSlot records");
        return 0;
    }
    s->kind = (int)PyLong_AsLong(RECORD_FIELD(item, SLOT_KIND));
    s->writes = PyObject_IsTrue(RECORD_FIELD(item, SLOT_WRITES));
    s->arg = (TiArgument *)PyLong_AsVoidPtr(RECORD_FIELD(item, SLOT_ARGUMENT));
    if (s->arg == NULL || s->writes < 0 || PyErr_Occurred()) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "_prepare: a NULL argument address");
        }
        return 0;
    }
    sig = RECORD_FIELD(item, SLOT_SIG);
    name = RECORD_FIELD(item, SLOT_NAME);
    if (sig != Py_None) {
        Py_INCREF(sig);
        s->sig = sig;
    }
    if (name != Py_None) {
        if (!PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "_prepare: a slot's name is a str or None");
            return 0;
        }
        Py_INCREF(name);
        PyUnicode_InternInPlace(&name);
        s->name = name;
    }
    return 1;
}

/* The slots of the CallSlot records in `list` (`*count` of them), or NULL with an exception set. */
static taichi_aot_slot *launcher_read_slots(PyObject *list, Py_ssize_t *count) {
    Py_ssize_t n, i;
    taichi_aot_slot *slots;
    if (!PyList_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "_prepare: slots must be a list");
        return NULL;
    }
    n = PyList_Size(list);
    slots = (taichi_aot_slot *)PyMem_Malloc((n > 0 ? (size_t)n : 1) * sizeof(taichi_aot_slot));
    if (slots == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    memset(slots, 0, (n > 0 ? (size_t)n : 1) * sizeof(taichi_aot_slot));
    for (i = 0; i < n; ++i) {
        if (!launcher_read_slot(&slots[i], PyList_GetItem(list, i))) {
            for (i = 0; i < n; ++i) {
                Py_XDECREF(slots[i].sig);
                Py_XDECREF(slots[i].name);
            }
            PyMem_Free(slots);
            return NULL;
        }
    }
    *count = n;
    return slots;
}

/* What _prepare refuses before reading its slots: a call not of its six keywords, `hits` not a dict or None, an
   unbound module or a launcher packing a call; 0 with an exception set. */
static int launcher_prepare_ok(taichi_aot_launcher *self, PyObject *args, PyObject *kwargs, PyObject *hits) {
    if (PyTuple_Size(args) != 0 || kwargs == NULL || PyDict_Size(kwargs) != 6) {
        PyErr_SetString(PyExc_TypeError, "_prepare takes launch, graph, ndarray_type, numpy_type, slots and hits, "
                                         "as keywords");
        return 0;
    }
    if (hits != Py_None && !PyDict_Check(hits)) {
        PyErr_SetString(PyExc_TypeError, "_prepare: hits must be a dict or None");
        return 0;
    }
    if (taichi_aot_api.size == 0 || self->packing) {
        PyErr_SetString(PyExc_RuntimeError, self->packing ? "_prepare: the launcher is packing a call"
                                                           : "_prepare: taichi_aot._call is not bound (_bind) yet");
        return 0;
    }
    return 1;
}

/* _prepare(*, launch, graph, ndarray_type, numpy_type, slots, hits): `launch` the address of the TaichiAotLaunch,
   `slots` a list of CallSlot records (records.c), one per argument in buffer order; `hits` the runtime's dict of
   remembered arrays (ForeignArgs.hits), or None. */
static PyObject *launcher_prepare(PyObject *op, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"launch", "graph", "ndarray_type", "numpy_type", "slots", "hits", NULL};
    taichi_aot_launcher *self = (taichi_aot_launcher *)op;
    PyObject *address, *ndarray_type, *numpy_type, *list, *hits;
    int graph;
    Py_ssize_t n = 0;
    taichi_aot_slot *slots;
    void *launch;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OiOOOO", keywords, &address, &graph, &ndarray_type,
                                     &numpy_type, &list, &hits) ||
        !launcher_prepare_ok(self, args, kwargs, hits)) {
        return NULL;
    }
    launch = PyLong_AsVoidPtr(address);
    if (launch == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "_prepare: a NULL launch address");
        }
        return NULL;
    }
    slots = launcher_read_slots(list, &n);
    if (slots == NULL) {
        return NULL;
    }
    launcher_release(self);
    self->launch = (TaichiAotLaunch *)launch;
    self->graph = graph;
    self->slots = slots;
    self->count = n;
    Py_INCREF(ndarray_type);
    self->ndarray_type = ndarray_type;
    Py_INCREF(numpy_type);
    self->numpy_type = numpy_type;
    if (hits != Py_None) {
        Py_INCREF(hits);
        self->hits = hits;
    }
    Py_RETURN_NONE;
}

/* _fresh(*, imports, host_numpy, torch_device, torch_index, held, held_limit, cai_classes, pointer_device, spill,
   slots), after _prepare: the arrays a call may take anew (fresh.c: fresh_set, fresh_slot_set). */
static PyObject *launcher_fresh_method(PyObject *op, PyObject *args, PyObject *kwargs) {
    taichi_aot_launcher *self = (taichi_aot_launcher *)op;
    PyObject *list;
    Py_ssize_t i;
    if (self->packing || self->count < 0) {
        PyErr_SetString(PyExc_RuntimeError, "_fresh: before _prepare, or while the launcher packs a call");
        return NULL;
    }
    list = fresh_set(&self->fresh, self->count, args, kwargs);
    for (i = 0; list != NULL && i < self->count; ++i) {
        if (!fresh_slot_set(&self->slots[i].fresh, PyList_GetItem(list, i))) {
            return NULL;
        }
    }
    if (list == NULL) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* _guard(guards): the (storage, data pointer, bytes) of each torch storage a bound launch holds, checked before
   each launch made here (a storage whose memory moved sends the call to Python, which raises); () for none. */
static PyObject *launcher_guard(PyObject *op, PyObject *guards) {
    taichi_aot_launcher *self = (taichi_aot_launcher *)op;
    if (!PyTuple_Check(guards)) {
        PyErr_SetString(PyExc_TypeError, "_guard: a tuple of (storage, data_ptr, nbytes)");
        return NULL;
    }
    Py_CLEAR(self->guards);
    if (PyTuple_Size(guards) > 0) {
        Py_INCREF(guards);
        self->guards = guards;
    }
    Py_RETURN_NONE;
}

/* _guards_hold(): whether every guarded storage kept the memory it was bound with (reads.c: guards_hold), for the
   checks made in Python (a replay's, the slow call's). */
static PyObject *launcher_guards_hold_method(PyObject *op, PyObject *unused) {
    (void)unused;
    return PyBool_FromLong(guards_hold(((taichi_aot_launcher *)op)->guards));
}

static PyObject *launcher_forget_method(PyObject *op, PyObject *unused) {
    (void)unused;
    if (((taichi_aot_launcher *)op)->packing) {
        PyErr_SetString(PyExc_RuntimeError, "_forget: the launcher is packing a call");
        return NULL;
    }
    launcher_forget((taichi_aot_launcher *)op);
    Py_RETURN_NONE;
}

/* The slot past the `n` positional ones, not yet given a value, named `key`: found by identity (a call's keywords are
   its code's interned names, as the slots' are), else by equality; -1 where there is none (Python's path raises). */
static Py_ssize_t launcher_slot_named(taichi_aot_launcher *self, Py_ssize_t n, PyObject *key) {
    Py_ssize_t i;
    for (i = n; i < self->count; ++i) {
        if (self->slots[i].name == key && self->slots[i].value == NULL) {
            return i;
        }
    }
    for (i = n; i < self->count && PyUnicode_Check(key); ++i) {
        taichi_aot_slot *s = &self->slots[i];
        if (s->name != NULL && s->value == NULL && PyUnicode_Compare(s->name, key) == 0) {
            return i;
        }
    }
    PyErr_Clear();
    return -1;
}

/* Each slot's value for this call (`value`, borrowed: the call's args and kwargs hold it), in one pass over the
   keywords (no lookup a slot): 0 where a keyword names no slot left (unknown, or given twice). launcher_shape_ok
   counted them (count - n), so every slot is given one. */
static int launcher_gather(taichi_aot_launcher *self, PyObject *args, PyObject *kwargs) {
    Py_ssize_t n = PyTuple_Size(args), i, k, pos = 0;
    PyObject *key, *value;
    for (i = 0; i < self->count; ++i) {
        self->slots[i].value = i < n ? PyTuple_GetItem(args, i) : NULL;
    }
    for (k = n; k < self->count; ++k) {
        if (kwargs == NULL || !PyDict_Next(kwargs, &pos, &key, &value) || (i = launcher_slot_named(self, n, key)) < 0) {
            return 0;
        }
        self->slots[i].value = value;
    }
    return 1;
}


/* A CUDA array of torch, CuPy or JAX found again in its slot: whether it is still the one remembered, by the rule
   the Python packer keeps too (reads.c: print_hit_fits held when it was remembered, and nothing was closed since;
   print_same now), in two phases: `layouts` 0, its class and the reads that may run Python code, made for every
   slot first; `layouts` 1, after all of those, the torch layout reads; then its ndarray's argument is written to the
   slot and the array held until the runtime is waited for. */
static int launcher_foreign_same(taichi_aot_slot *s, PyObject *value, int layouts) {
    int held;
    if ((PyObject *)Py_TYPE(value) != s->cls || /* its class changed: the reads were bound to the old one's */
        !print_same(value, s->read, s->expect, s->nreads, layouts ? PRINT_LAYOUTS : PRINT_CALLS)) {
        return 0;
    }
    if (!layouts) {
        return 1;
    }
    held = s->held == Py_None || PyDict_Contains(s->held, s->id) == 1 || /* None: a host array, read by now */
           PyDict_SetItem(s->held, s->id, value) == 0;
    if (!held) {
        PyErr_Clear();
        return 0;
    }
    memcpy(s->arg, PyBytes_AsString(s->arg_bytes), sizeof(TiArgument)); /* its size checked when remembered */
    return 1;
}

/* The second phase of launcher_pack, after every read that may run Python code: numpy arrays (read from their
   objects) and the layouts of torch tensors compared, their arguments written, foreign arrays held. */
static int launcher_pack_arrays(taichi_aot_launcher *self) {
    Py_ssize_t i;
    for (i = 0; i < self->count; ++i) {
        taichi_aot_slot *s = &self->slots[i];
        PyObject *value = s->value; /* the call's args hold it */
        if (s->kind != TAICHI_AOT_SLOT_NDARRAY) {
            continue;
        }
        if (s->fresh.fresh != FRESH_NONE) {
            if (!fresh_take(&self->fresh, &s->fresh, s->writes, value, self->launch->runtime, s->arg,
                            (self->launch->flags & TAICHI_AOT_LAUNCH_POINTERS) != 0)) {
                return 0;
            }
            continue;
        }
        if (s->dirty) { /* the remembered value again, after an array taken anew */
            memcpy(s->arg, &s->saved, sizeof(TiArgument));
            s->dirty = 0;
        }
        if (s->key != NULL && !taichi_aot_array_pack((uintptr_t)value, s->key, s->writes, s->arg)) {
            return 0;
        }
        if (s->reads != NULL && !launcher_foreign_same(s, value, 1)) {
            return 0;
        }
    }
    return 1;
}

/* An ndarray slot's value: the array the slot remembers (its foreign reads unchanged), or one taken anew whose
   kind is known here; 0 sends the call to Python. */
static int launcher_pack_array_slot(taichi_aot_launcher *self, taichi_aot_slot *s, PyObject *value) {
    s->fresh.fresh = FRESH_NONE;
    if (s->last == NULL || !weak_is(s->last, value)) {
        /* an array taken anew (the first time it is seen), or Python's, which remembers it */
        return !(s->seen != NULL && weak_is(s->seen, value)) &&
               fresh_kind(&self->fresh, &s->fresh, value, self->numpy_type);
    }
    return s->reads == NULL || launcher_foreign_same(s, value, 0);
}

/* An f32 slot's value written: an exact float, or an exact int, within f32's range, converted as the Python call
   converts it (taichi_aot_f32_pack, arrays.c); 0 sends the call to Python (which raises for a value out of range). */
static int launcher_pack_f32(taichi_aot_slot *s, PyObject *value) {
    double d;
    if (PyFloat_CheckExact(value)) {
        d = PyFloat_AsDouble(value);
    } else if (PyLong_CheckExact(value)) {
        d = PyLong_AsDouble(value);
        if (d == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
    } else {
        return 0;
    }
    return taichi_aot_f32_pack(d, s->arg);
}

/* An i32 slot's value written: an exact int within i32's range; 0 sends the call to Python. */
static int launcher_pack_i32(taichi_aot_slot *s, PyObject *value) {
    int overflow = 0;
    long v;
    if (!PyLong_CheckExact(value)) {
        return 0;
    }
    v = PyLong_AsLongAndOverflow(value, &overflow);
    if (overflow || v < INT32_MIN || v > INT32_MAX || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    s->arg->value.i32 = (int32_t)v;
    return 1;
}

/* Whether the values can be vouched for here (see the file's comment), writing the scalars into their slots on
   the way and then the arrays' (launcher_pack_arrays); 0 sends the call to Python, which writes every slot
   anew. */
static int launcher_pack(taichi_aot_launcher *self, PyObject *args, PyObject *kwargs) {
    Py_ssize_t i;
    if (!launcher_gather(self, args, kwargs) || !fresh_spill(&self->fresh, self->count)) {
        return 0;
    }
    for (i = 0; i < self->count; ++i) {
        taichi_aot_slot *s = &self->slots[i];
        int ok = s->kind == TAICHI_AOT_SLOT_NDARRAY ? launcher_pack_array_slot(self, s, s->value)
                 : s->kind == TAICHI_AOT_SLOT_F32   ? launcher_pack_f32(s, s->value)
                 : s->kind == TAICHI_AOT_SLOT_I32   ? launcher_pack_i32(s, s->value)
                                                    : 0;
        if (!ok) {
            return 0;
        }
    }
    /* the first phase may have run Python code that closed something (the second calls the library) or called us */
    return self->launch->seen == *taichi_aot_api.epoch && !self->disturbed && launcher_pack_arrays(self);
}

/* After a pack, when Python code may run again: the slots' new imports into the pool (fresh_settle); where the call
   launched, the slots that took an array anew hold its argument, not the remembered value's (dirty). */
static void launcher_settle(taichi_aot_launcher *self, int launched) {
    Py_ssize_t i;
    for (i = 0; i < self->count; ++i) {
        taichi_aot_slot *s = &self->slots[i];
        fresh_settle(&self->fresh, &s->fresh);
        if (launched && s->kind == TAICHI_AOT_SLOT_NDARRAY && s->fresh.fresh != FRESH_NONE) {
            s->dirty = 1;
            Py_CLEAR(s->seen);
            s->seen = PyWeakref_NewRef(s->value, NULL); /* the call's args still hold it */
            PyErr_Clear();
        }
    }
}

/* Whether the call's arguments have the shape the fast path reads: a graph's all named, a kernel's positional then
   named, as many as it takes (each slot past the positional ones then finds its own keyword, or the call goes to
   Python: so every keyword is used once). */
static int launcher_shape_ok(taichi_aot_launcher *self, PyObject *args, PyObject *kwargs) {
    Py_ssize_t n = PyTuple_Size(args), named = kwargs != NULL ? PyDict_Size(kwargs) : 0;
    return (self->graph ? n == 0 : n <= self->count) && n + named == self->count;
}

/* The packed launch: with Python's lock kept where it only enqueues and its runtime's calls are free, or soon free
   (threads launching at once then do not hand the lock to each other at every launch), else with it let go while it
   waits. */
static int launcher_launch(const TaichiAotLaunch *c) {
    int code;
    if (__builtin_expect(__atomic_load_n(taichi_aot_api.coming, __ATOMIC_RELAXED) > 0, 0)) {
        taichi_aot_api.came_back(); /* this thread has the lock: not coming back for it (a mark Python left) */
    }
    code = taichi_aot_api.launch_quick(c);
    if (code == TAICHI_AOT_BUSY) {
        PyThreadState *state = PyEval_SaveThread();
        int shared = (c->flags & TAICHI_AOT_LAUNCH_ANY_THREAD) != 0; /* a runtime other threads launch on */
        code = taichi_aot_api.launch(c);
        if (shared) {
            taichi_aot_api.coming_back(); /* it may have waited: handed the lock by a launching thread */
        }
        PyEval_RestoreThread(state);
        if (shared) {
            taichi_aot_api.came_back();
        }
    } else if (__builtin_expect(__atomic_load_n(taichi_aot_api.coming, __ATOMIC_RELAXED) > 0, 0)) {
        /* after the launch: what the pack checked under the lock (the close epoch) stays true up to it */
        launcher_hand_over();
    }
    return code;
}

/* A call of the launcher's own thread made here: packed into its slots and launched, its result in `*result` (None, or
   what _after_code gives for a launch's non-zero code); 0 where the Python path takes it (something was closed
   since the last pack, an argument C cannot vouch for, a call that came in during the pack, a stale launch). */
static int launcher_fast(PyObject *op, PyObject *args, PyObject *kwargs, PyObject **result) {
    taichi_aot_launcher *self = (taichi_aot_launcher *)op;
    TaichiAotLaunch *c = self->launch;
    int packed, code;
    if (c->seen != *taichi_aot_api.epoch) {
        return 0;
    }
    self->packing = 1;
    self->disturbed = 0;
    packed = launcher_shape_ok(self, args, kwargs) && launcher_pack(self, args, kwargs) && guards_hold(self->guards);
    self->packing = 0;
    /* the epoch again after packing: a CUDA array's print runs Python code (its library's), which may collect and
       close what another slot holds */
    if (!packed || self->disturbed || c->seen != *taichi_aot_api.epoch) {
        return 0;
    }
    code = launcher_launch(c);
    /* stale: something was closed (on another thread) since the pack, and nothing was launched: the Python path
       checks every argument again, so a launch never binds what a close released */
    if (code == TAICHI_AOT_STALE) {
        return 0;
    }
    self->in_c++;
    launcher_settle(self, 1);
    if (code) { /* raises */
        *result = PyObject_CallMethod(op, "_after_code", "i", code);
    } else {
        Py_INCREF(Py_None);
        *result = Py_None;
    }
    return 1;
}

static PyObject *launcher_call(PyObject *op, PyObject *args, PyObject *kwargs) {
    taichi_aot_launcher *self = (taichi_aot_launcher *)op;
    TaichiAotLaunch *c = self->launch;
    PyObject *method, *result;
    int home;
    if (self->packing) {
        /* a call while this launcher packs (a read ran Python code, which let another thread in or called the
           kernel itself): the Python path, which raises or writes every slot anew; the slots' records are left
           to the pack under way, which will not launch what it packed */
        self->disturbed = 1;
        self->in_python++;
        method = PyObject_GetAttrString(op, "_slow_call");
        result = method != NULL ? PyObject_Call(method, args, kwargs) : NULL;
        Py_XDECREF(method);
        return result;
    }
    /* the runtime's thread: the shared buffer and the slots' records are its own (another thread may launch where
       its runtime allows: Python packs its call into a buffer of its own, and the slots stay as they are) */
    home = self->count >= 0 && (unsigned long)pthread_self() == c->thread;
    if (!home && self->twins != NULL) { /* another thread's call: its own launcher's, where it has one */
        PyObject *twin = launcher_twin(self);
        if (twin != NULL || PyErr_Occurred()) {
            /* a Twin calls as this type's instances do (it adds no __call__): called here, not through Python's call */
            if (twin == NULL) {
                result = NULL;
            } else if (PyType_GetSlot(Py_TYPE(twin), Py_tp_call) == (void *)launcher_call) {
                result = launcher_call(twin, args, kwargs);
            } else {
                result = PyObject_Call(twin, args, kwargs);
            }
            Py_XDECREF(twin);
            return result;
        }
    }
    if (home && launcher_fast(op, args, kwargs, &result)) {
        return result;
    }
    if (self->count >= 0) {
        launcher_settle(self, 0);
    }
    if (home) {
        launcher_forget(self); /* the slow call writes every slot anew */
    }
    self->in_python++;
    method = PyObject_GetAttrString(op, "_slow_call");
    if (method == NULL) {
        return NULL;
    }
    result = PyObject_Call(method, args, kwargs);
    Py_DECREF(method);
    if (result != NULL && home && self->launch->seen == *taichi_aot_api.epoch &&
        launcher_shape_ok(self, args, kwargs)) {
        launcher_remember(self, args, kwargs); /* it launched with them, every check passed */
    }
    return result;
}

static PyObject *launcher_call_counts(PyObject *op, void *closure) {
    (void)closure;
    return Py_BuildValue("(KK)", ((taichi_aot_launcher *)op)->in_c, ((taichi_aot_launcher *)op)->in_python);
}

static PyGetSetDef launcher_getset[] = {
    {"call_counts", launcher_call_counts, NULL, "(calls launched in C, calls handed to the Python path) so far", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* _slow_call(*args, **kwargs) and _after_code(code): what the C call hands to Python by name (the slow path, a
   launch's non-zero code). Each subclass provides its own; these say so where one does not. */
static PyObject *launcher_slow_call(PyObject *op, PyObject *args, PyObject *kwargs) {
    (void)op;
    (void)args;
    (void)kwargs;
    PyErr_SetString(PyExc_NotImplementedError, "this Launcher provides no _slow_call (its subclass must)");
    return NULL;
}

static PyObject *launcher_after_code(PyObject *op, PyObject *code) {
    (void)op;
    (void)code;
    PyErr_SetString(PyExc_NotImplementedError, "this Launcher provides no _after_code (its subclass must)");
    return NULL;
}

static PyMethodDef launcher_methods[] = {
    {"_slow_call", (PyCFunction)(void (*)(void))launcher_slow_call, METH_VARARGS | METH_KEYWORDS,
     "_slow_call(*args, **kwargs): the Python path of a call C cannot vouch for (each subclass provides it)"},
    {"_after_code", launcher_after_code, METH_O,
     "_after_code(code): a launch's non-zero code, raised or re-checked (each subclass provides it)"},
    {"_prepare", (PyCFunction)(void (*)(void))launcher_prepare, METH_VARARGS | METH_KEYWORDS,
     "_prepare(*, launch, graph, ndarray_type, numpy_type, slots, hits): the launch struct's address, its CallSlot "
     "records and the runtime's remembered arrays"},
    {"_add_twin", launcher_add_twin, METH_VARARGS,
     "_add_twin(ident, twin): the launcher that calls from thread `ident` are handed to (_callplan.py's Twin)"},
    {"_forget", launcher_forget_method, METH_NOARGS, "_forget(): forget the values remembered in the slots"},
    {"_fresh", (PyCFunction)(void (*)(void))launcher_fresh_method, METH_VARARGS | METH_KEYWORDS,
     "_fresh(*, imports, host_numpy, torch_device, torch_index, held, held_limit, cai_classes, pointer_device, spill, "
     "slots): arrays taken anew (slots: a FreshSlot record or None each)"},
    {"_guard", launcher_guard, METH_O, "_guard(guards): the torch storages checked before each launch"},
    {"_guards_hold", launcher_guards_hold_method, METH_NOARGS,
     "_guards_hold(): whether every guarded storage kept its memory"},
    {"read_print", launcher_read_print, METH_VARARGS | METH_STATIC,
     "read_print(value, reads): the print of a CUDA array, a tuple of what each of its reads gives"},
    {"print_hit_accepts", launcher_print_hit_accepts, METH_VARARGS | METH_STATIC,
     "print_hit_accepts(hit, value, sig, writes): whether value is the CUDA array its PrintHit remembers, as the C "
     "call takes one passed again"},
    {"_trust_layout", launcher_trust_layout, METH_VARARGS | METH_STATIC,
     "_trust_layout(cls, offset): torch layout reads of objects of exactly cls, its at::Tensor at offset"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot launcher_type_slots[] = {
    {Py_tp_new, (void *)launcher_new},
    {Py_tp_dealloc, (void *)launcher_dealloc},
    {Py_tp_traverse, (void *)launcher_traverse},
    {Py_tp_clear, (void *)launcher_clear},
    {Py_tp_call, (void *)launcher_call},
    {Py_tp_methods, (void *)launcher_methods},
    {Py_tp_getset, (void *)launcher_getset},
    {Py_tp_doc, (void *)"The C call of kernels and graphs (the base of Kernel, ComputeGraph and BoundLaunch)."},
    {0, NULL},
};

static PyType_Spec launcher_spec = {
    "taichi_aot._call.Launcher",
    sizeof(taichi_aot_launcher),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    launcher_type_slots,
};
