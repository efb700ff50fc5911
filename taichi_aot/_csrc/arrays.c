/* numpy arrays recognised from C (see taichi_aot.h): the argument packer's fast path asks whether the
   array it was given is, in every respect a kernel sees, the one it shared before. */
#include <math.h>
#include <string.h>

#include "taichi_aot.h"
#include "arrays.h"


/* Fill `key` from the array at `array`; 0 (and nothing kept) where it has more dimensions than a key holds. */
int taichi_aot_array_key(uintptr_t array, TaichiAotArrayKey *key) {
    const taichi_aot_numpy_array *a = (const taichi_aot_numpy_array *)array;
    int i;
    if (a->nd < 0 || a->nd > 16) {
        return 0;
    }
    key->data = a->data;
    key->descr = a->descr;
    key->nd = a->nd;
    key->writable = (a->flags & TAICHI_AOT_NPY_WRITEABLE) != 0;
    for (i = 0; i < a->nd; i++) {
        key->dims[i] = a->dimensions[i];
        key->strides[i] = a->strides[i];
    }
    return 1;
}

/* Whether the array at `array` has the key's memory, dtype object, shape and strides (and is writable
   where `need_writable`). */
int taichi_aot_array_same(uintptr_t array, const TaichiAotArrayKey *key, int need_writable) {
    const taichi_aot_numpy_array *a = (const taichi_aot_numpy_array *)array;
    int i;
    if (a->data != key->data || a->descr != key->descr || a->nd != key->nd) {
        return 0;
    }
    if (need_writable && !(a->flags & TAICHI_AOT_NPY_WRITEABLE)) {
        return 0;
    }
    for (i = 0; i < a->nd; i++) {
        if (a->dimensions[i] != key->dims[i] || a->strides[i] != key->strides[i]) {
            return 0;
        }
    }
    return 1;
}

/* Where the array at `array` is the key's (see taichi_aot_array_same): write the key's argument into `slot`,
   return 1; else leave the slot alone and return 0. */
int taichi_aot_array_pack(uintptr_t array, const TaichiAotArrayKey *key, int need_writable, TiArgument *slot) {
    if (!taichi_aot_array_same(array, key, need_writable)) {
        return 0;
    }
    memcpy(slot, &key->argument, sizeof(TiArgument));
    return 1;
}

/* An f32 scalar argument's value from a double (see taichi_aot.h): 1 where written, 0 where a finite `d` rounds past
   f32's range (its caller refuses it). */
int taichi_aot_f32_pack(double d, TiArgument *slot) {
    float f = (float)d;
    if (isinf(f) && !isinf(d)) {
        return 0;
    }
    slot->value.f32 = f;
    return 1;
}
