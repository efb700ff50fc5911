/* What the C call's files (call_module.c's unit) ask of Python objects below any of them: a reference taken, a dict's
   value and a keyword read, a weak reference compared, and Python's lock handed over to threads coming back for it.
   #included first by call_module.c; it calls none of the other files. */
#include "call_common.h"

/* A dict's value for `key` as a new (strong) reference, taken at once; NULL where it has none or the lookup
   raised (cleared: the Python path, which takes the call then, looks again and says what is wrong). */
static PyObject *dict_get(PyObject *dict, PyObject *key) {
    PyObject *value = PyDict_GetItemWithError(dict, key);
    if (value == NULL) {
        PyErr_Clear();
        return NULL;
    }
    Py_INCREF(value);
    return value;
}

/* `o` with one more reference: the caller stores it (Py_NewRef is Python 3.10's). */
static PyObject *strong(PyObject *o) {
    Py_INCREF(o);
    return o;
}

/* A call's keyword argument `name`, borrowed from the call's own keyword dict (which holds it until the call
   returns, and which no code of another can reach), or NULL. */
static PyObject *call_keyword(PyObject *kwargs, PyObject *name) {
    PyObject *value = PyDict_GetItemWithError(kwargs, name);
    if (value == NULL) {
        PyErr_Clear(); /* a str key's hash and comparison do not raise: none set */
    }
    return value;
}

/* Whether the weak reference `ref` is to `value` (an object the caller holds). PyWeakref_GetRef (a strong
   reference) is Python 3.13's; below that level PyWeakref_GetObject's borrowed result is only compared, never
   used, so it cannot outlive its object. */
static int weak_is(PyObject *ref, PyObject *value) {
#if Py_LIMITED_API + 0 >= 0x030d0000
    PyObject *got = NULL;
    int same = PyWeakref_GetRef(ref, &got) > 0 && got == value;
    Py_XDECREF(got);
    PyErr_Clear();
    return same;
#else
    return PyWeakref_GetObject(ref) == value;
#endif
}

/* Python's lock handed to the threads coming back for it (taichi_aot.h: taichi_aot_coming): let go until they have it
   (each unmarks itself then), or for HAND_OVER_NS at most (one that does not take it soon is left to Python's switch
   interval, as before); at most once every HAND_OVER_EVERY_NS in the process. A thread back from a wait takes the lock
   where the launching thread next lets it go (its own value, mostly), or at the next hand-over: where values come back
   often (four threads, a value every 10 launches), handing the lock over at each launch made the threads take turns
   at every launch (a turn costs more than the launch): on an H200 four such threads took 19.7 ms on Vulkan and 20.8
   ms on CUDA for what one thread does in about 12; handed over once a millisecond, 13.9 and 17.8 ms, and no slower
   where each thread's values are 200 launches apart. Called with Python's lock held, which keeps `handed_at` too. */
#define HAND_OVER_NS 1000000L
#define HAND_OVER_EVERY_NS 1000000L
static void launcher_hand_over(void) {
    static struct timespec handed_at;
    struct timespec start, now;
    PyThreadState *state;
    clock_gettime(CLOCK_MONOTONIC, &start);
    if ((start.tv_sec - handed_at.tv_sec) * 1000000000L + (start.tv_nsec - handed_at.tv_nsec) < HAND_OVER_EVERY_NS) {
        return;
    }
    handed_at = start;
    state = PyEval_SaveThread();
    do {
        sched_yield();
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (__atomic_load_n(taichi_aot_api.coming, __ATOMIC_ACQUIRE) > 0 &&
             (now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < HAND_OVER_NS);
    PyEval_RestoreThread(state);
}
