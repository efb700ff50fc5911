/* What a call made by Python leaves the launcher of call.c to remember (#included after call.c, whose records
   these are): after _slow_call launched, the NdArrays, shared numpy arrays and CUDA arrays of other libraries it was
   given, so that the next call with them is made in C. */

/* Remember the CUDA array `value` of slot `s` by its PrintHit `hit` (of its class, signature and access). */
static void launcher_remember_foreign(taichi_aot_slot *s, PyObject *value, PyObject *hit) {
    PyObject *cls = PyObject_GetAttrString(hit, "cls");
    PyObject *sig = PyObject_GetAttrString(hit, "sig");
    PyObject *read_only = PyObject_GetAttrString(hit, "read_only");
    PyObject *reads = PyObject_GetAttrString(hit, "reads");
    PyObject *print = PyObject_GetAttrString(hit, "print");
    PyObject *arg_bytes = PyObject_GetAttrString(hit, "arg_bytes");
    PyObject *held = PyObject_GetAttrString(hit, "held");
    PyObject *id = PyLong_FromVoidPtr(value);
    int writable = read_only != NULL && PyObject_IsTrue(read_only) == 0;
    int n = reads != NULL ? reads_parse(reads, s->read) : -1, k;
    if (cls == (PyObject *)Py_TYPE(value) && sig == s->sig && (writable || !s->writes) && n >= 0 &&
        print != NULL && PyTuple_Check(print) && PyTuple_Size(print) == n && arg_bytes != NULL &&
        PyBytes_Check(arg_bytes) && PyBytes_Size(arg_bytes) == (Py_ssize_t)sizeof(TiArgument) && held != NULL &&
        (PyDict_Check(held) || held == Py_None) && id != NULL) {
        s->last = PyWeakref_NewRef(value, NULL);
        if (s->last != NULL) {
            Py_INCREF(hit);
            s->hit = hit;
            for (k = 0; k < n; ++k) {
                s->expect[k] = PyTuple_GetItem(print, k);
            }
            reads_bind(s->read, n, Py_TYPE(value));
            Py_INCREF(cls);
            s->cls = cls;
            s->nreads = n;
            s->reads = reads; /* the slot's now: the parsed reads and expected items are borrowed from these */
            s->print = print;
            s->id = id;
            s->arg_bytes = arg_bytes;
            s->held = held;
            reads = print = id = arg_bytes = held = NULL;
        }
    }
    PyErr_Clear();
    Py_XDECREF(cls);
    Py_XDECREF(sig);
    Py_XDECREF(read_only);
    Py_XDECREF(reads);
    Py_XDECREF(print);
    Py_XDECREF(id);
    Py_XDECREF(arg_bytes);
    Py_XDECREF(held);
}

/* After a launch made by _slow_call: remember the NdArrays it was given, and the shared numpy and CUDA arrays found in
   the runtime's hits (handed over by _prepare: no attribute looked up by name). */
static void launcher_remember(taichi_aot_launcher *self, PyObject *args, PyObject *kwargs) {
    Py_ssize_t i;
    PyObject *hits = self->hits; /* held here: Python code run by a read below could hand the launcher another */
    Py_XINCREF(hits);
    for (i = 0; i < self->count; ++i) {
        taichi_aot_slot *s = &self->slots[i];
        PyObject *value, *hit, *sig, *address, *id;
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
        sig = PyObject_GetAttrString(hit, "sig");
        address = sig == s->sig ? PyObject_GetAttrString(hit, "address") : NULL;
        key = address != NULL ? PyLong_AsVoidPtr(address) : NULL;
        Py_XDECREF(sig);
        Py_XDECREF(address);
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
