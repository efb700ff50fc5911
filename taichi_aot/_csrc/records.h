/* records.c's record kinds and their fields, for the C call's files that read them (a private header). */
#ifndef TAICHI_AOT_RECORDS_H
#define TAICHI_AOT_RECORDS_H

#include "call_common.h"

#define RECORD_FIELDS_MAX 10

typedef struct {
    PyObject_HEAD
    PyObject *field[RECORD_FIELDS_MAX];
} taichi_aot_record;

/* The fields of each kind, each named once here, in order: X(KIND, FIELD, name). The enum of each kind's field
   indexes (KIND_FIELD, then KIND_FIELDS, their count), its names, its read-only members and its signature's
   keywords are all made from these lists. */
#define NUMPY_HIT_LIST(X) X(NUMPY_HIT, ADDRESS, address) X(NUMPY_HIT, KEY, key) X(NUMPY_HIT, OWNED, owned) \
    X(NUMPY_HIT, REF, ref) X(NUMPY_HIT, SIG, sig)
#define PRINT_HIT_LIST(X) X(PRINT_HIT, ARG_BYTES, arg_bytes) X(PRINT_HIT, CLS, cls) X(PRINT_HIT, HELD, held) \
    X(PRINT_HIT, ND, nd) X(PRINT_HIT, OWNED, owned) X(PRINT_HIT, PRINT, print) X(PRINT_HIT, READ_ONLY, read_only) \
    X(PRINT_HIT, READS, reads) X(PRINT_HIT, REF, ref) X(PRINT_HIT, SIG, sig)
#define SLOT_LIST(X) X(SLOT, KIND, kind) X(SLOT, WRITES, writes) X(SLOT, ARGUMENT, argument) X(SLOT, SIG, sig) \
    X(SLOT, NAME, name)
#define FRESH_SLOT_LIST(X) X(FRESH_SLOT, DTYPE, dtype) X(FRESH_SLOT, TYPESTR, typestr) \
    X(FRESH_SLOT, DATA_TYPE, data_type) X(FRESH_SLOT, ITEMSIZE, itemsize) X(FRESH_SLOT, NDIM, ndim) \
    X(FRESH_SLOT, ELEMENT_SHAPE, element_shape) X(FRESH_SLOT, ARGUMENT, argument)

#define RECORD_ENUM(k, f, n) k##_##f,
#define RECORD_NAME(k, f, n) #n,
#define RECORD_MEMBER(k, f, n) \
    {#n, T_OBJECT_EX, offsetof(taichi_aot_record, field) + (k##_##f) * sizeof(PyObject *), READONLY, NULL},
#define RECORD_KEYWORD(k, f, n) ", " #n
#define RECORD_END {NULL, 0, 0, 0, NULL}

enum { NUMPY_HIT_LIST(RECORD_ENUM) NUMPY_HIT_FIELDS };
enum { PRINT_HIT_LIST(RECORD_ENUM) PRINT_HIT_FIELDS };
enum { SLOT_LIST(RECORD_ENUM) SLOT_FIELDS };
enum { FRESH_SLOT_LIST(RECORD_ENUM) FRESH_SLOT_FIELDS };
enum { RECORD_NUMPY_HIT, RECORD_PRINT_HIT, RECORD_SLOT, RECORD_FRESH_SLOT, RECORD_KINDS };

#define RECORD_FIELD(op, i) (((taichi_aot_record *)(op))->field[i])

/* Whether `op` is a record of kind `kind` (exactly: the types take no subclass). */
static int record_is(PyObject *op, int kind);

#endif
