/* The C call's launcher and its slots (call.c's Launcher), for the files that fill them (remember.c, eager.c,
   twins.c; a private header): types named for no one file, and the functions call.c takes of those below it. */
#ifndef TAICHI_AOT_LAUNCHER_H
#define TAICHI_AOT_LAUNCHER_H

#include "call_common.h"
#include "fresh.h"
#include "reads.h"

enum {
    TAICHI_AOT_SLOT_OTHER = 0, /* always checked in Python */
    TAICHI_AOT_SLOT_NDARRAY = 1,
    TAICHI_AOT_SLOT_F32 = 2,
    TAICHI_AOT_SLOT_I32 = 3
};


typedef struct {
    int kind;
    int writes;                   /* the kernel may write the argument (a numpy array must be writable) */
    TiArgument *arg;              /* the slot in the launch's buffer */
    PyObject *sig;                /* the signature a numpy array's hit must have, or NULL */
    PyObject *name;               /* a graph argument's name (interned) */
    PyObject *last;               /* a weak reference to the value whose argument the slot holds, or NULL */
    PyObject *hit;                /* for a numpy value: its NumpyHit, whose key is checked on every call; for a
                                     foreign array found by its print: its PrintHit */
    const TaichiAotArrayKey *key; /* the NumpyHit's key */
    PyObject *cls;                /* a CUDA array's class, which its reads were bound to, */
    PyObject *reads;              /* the PrintHit's reads (see taichi_aot_read; NULL: not a CUDA array), */
    PyObject *print;              /* the print they must give (the array unchanged), */
    taichi_aot_read read[TAICHI_AOT_READS]; /* the reads, parsed (borrowed from `reads`), */
    PyObject *expect[TAICHI_AOT_READS];     /* and what each must give (borrowed from `print`) */
    int nreads;
    PyObject *value;              /* borrowed: the array of the call being packed, from launcher_pack's first phase
                                     to its second */
    PyObject *id;                 /* the array's id (the key of `held`), */
    PyObject *arg_bytes;          /* the argument its ndarray gets (bytes of a TiArgument), */
    PyObject *held;               /* and the runtime's held arrays (queued kernels read them until a wait; None
                                     for a host array: CPU kernels have run when the launch returns) */
    taichi_aot_fresh_slot fresh;  /* what an array taken anew must be (fresh.c), set by _fresh */
    TiArgument saved;             /* the remembered value's argument, for the call after one that took another */
    int dirty;                    /* the slot holds an array taken anew's argument, not `saved` */
    PyObject *seen;               /* a weak reference to the array last taken anew: given again, Python learns it */
} taichi_aot_slot;

#define TWINS_SEEN 8 /* threads whose twins a launcher finds without a lookup */

typedef struct {
    PyObject_HEAD
    TaichiAotLaunch *launch;
    Py_ssize_t count; /* -1 until _prepare */
    int graph;
    taichi_aot_slot *slots;
    PyObject *ndarray_type;
    PyObject *numpy_type;
    PyObject *hits;   /* the runtime's remembered arrays (ForeignArgs.hits: id -> NumpyHit or PrintHit), handed over once by
                         _prepare (NULL: none, a bound launch), read by launcher_remember after a slow call */
    PyObject *guards; /* a bound launch's torch storages, (storage, data_ptr, nbytes) each, or NULL (_guard) */
    int packing;   /* inside launcher_pack, whose reads may run Python code (and let other threads run) */
    taichi_aot_fresh fresh;  /* arrays taken anew (fresh.c), set by _fresh */
    int disturbed; /* a call came in meanwhile (see launcher_call): what the pack wrote may be overwritten */
    unsigned long long in_c, in_python; /* calls launched here, calls handed to _slow_call (call_counts) */
    PyObject *twins; /* {thread ident: its launcher} (_add_twin: launch.py's _twin), or NULL: none yet */
    /* the twins of the threads that called last, borrowed from `twins` (which holds them; emptied before it changes):
       a thread's call finds its own without a key made and a dict looked up (twins.c) */
    unsigned long seen_threads[TWINS_SEEN];
    PyObject *seen_twins[TWINS_SEEN];
    int seen_count;
} taichi_aot_launcher;

/* remember.c's: what the launcher remembers after a slow call (see there). */
static void launcher_remember(taichi_aot_launcher *self, PyObject *args, PyObject *kwargs);
/* twins.c's: the calling thread's own launcher (a new reference, or NULL), and the method that hands one over. */
static PyObject *launcher_twin(taichi_aot_launcher *self);
static PyObject *launcher_add_twin(PyObject *op, PyObject *args);

#endif
