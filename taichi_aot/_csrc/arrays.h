/* arrays.c's view of a numpy array's object, for the files that read one (a private header). */
#ifndef TAICHI_AOT_ARRAYS_H
#define TAICHI_AOT_ARRAYS_H

#include <stdint.h>

/* The start of numpy's array object (PyArrayObject_fields in numpy/ndarraytypes.h, the same in numpy 1
   and 2), after CPython's object header (reference count and type). */
typedef struct {
    intptr_t ob_refcnt;
    void *ob_type;
    char *data;
    int nd;
    intptr_t *dimensions;
    intptr_t *strides;
    void *base;
    void *descr;
    int flags;
} taichi_aot_numpy_array;

#define TAICHI_AOT_NPY_ALIGNED 0x0100
#define TAICHI_AOT_NPY_WRITEABLE 0x0400

#endif
