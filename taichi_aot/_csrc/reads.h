/* reads.c's reads of a CUDA array's print, for the C call's files that make them (a private header). */
#ifndef TAICHI_AOT_READS_H
#define TAICHI_AOT_READS_H

#include "call_common.h"

/* One read of a CUDA array's print: `first` (an attribute read first, as CuPy's `data` of `data.ptr`, or NULL),
   then the attribute `name` (READ_ATTRIBUTE), the method `name` called with no argument (READ_METHOD), or a torch
   tensor's layout (READ_TORCH_LAYOUT: the bytes of a TaichiAotTorchLayout, read through torch's C functions from
   the at::Tensor in the tensor's object, the `_cdata` that `name` says: see read_layout). */
enum { READ_ATTRIBUTE = 0, READ_METHOD = 1, READ_TORCH_LAYOUT = 2 };

typedef struct {
    PyObject *first;
    PyObject *name;
    int call; /* READ_* */
    /* bound to the array's class where the read is of the array itself (`first` NULL) and its class gives `name`
       by a C getter or method, so that the C call goes to it directly, without the attribute lookup: */
    PyObject *descr; /* the class's descriptor (a new reference), or NULL: looked up by name each time */
    descrgetfunc get; /* a getter descriptor's get function, or NULL: `descr` is a method, called with the array */
} taichi_aot_read;

#define TAICHI_AOT_READS 8 /* the most reads a print takes */

/* The one rule for a CUDA array of torch, CuPy or JAX passed again: the C call's slot (call.c) and the Python
   packer (Launcher.print_hit_accepts, taichi_aot._arguments) both take an array found again by it. First what its
   record (a PrintHit: remember.c) fixed when it was shared: the same class, the kernel's signature, writable where
   the kernel writes, its memory not closed (print_hit_fits); then its print (print_same): every read of `phases`
   gives what it gave then. PRINT_CALLS are the reads that may run Python code (a library's getter or method, which
   a TorchFunctionMode may answer); PRINT_LAYOUTS torch's layout reads, which run none, compared in place; the C
   call makes every slot's PRINT_CALLS before any PRINT_LAYOUTS, so that no Python code changes an array after its
   layout was compared. */
enum { PRINT_CALLS = 1, PRINT_LAYOUTS = 2, PRINT_ALL = 3 };

/* reads.c's functions the other files call (see there). */
static int reads_parse(PyObject *reads, taichi_aot_read *out);
static void reads_bind(taichi_aot_read *read, int n, PyTypeObject *cls);
static void reads_unbind(taichi_aot_read *read, int n);
static uintptr_t layout_at(PyObject *value);
static int read_layout(PyObject *value, TaichiAotTorchLayout *out);
static int flags_clear(PyObject *value);
static int print_same(PyObject *value, const taichi_aot_read *read, PyObject *const *expect, int n, int phases);
static int print_hit_fits(PyObject *hit, PyObject *value, PyObject *sig, int writes);
static int guards_hold(PyObject *guards);
static PyObject *launcher_trust_layout(PyObject *unused, PyObject *args);
static PyObject *launcher_read_print(PyObject *unused, PyObject *args);
static PyObject *launcher_print_hit_accepts(PyObject *unused, PyObject *args);

#endif
