/* The argument plan both own launches share (backends/cuda.c, backends/x64.c): a kernel's TiArgument values written
   into its argument bytes where its plan (TaichiAotArgPlan, checked by metadata/layout.py when the module was
   loaded) lays them out, as Taichi's argument struct holds them. */
#include <stdint.h>
#include <string.h>

#include "taichi_aot.h"
#include "backends/plan.h"

/* An f32 (its bits) as the nearest f16, ties to even (how Taichi converts an f16 argument, which the C-API
   carries as an f32). */
static uint16_t plan_half(uint32_t f) {
    uint32_t sign = (f >> 16) & 0x8000u, mant = f & 0x7fffffu, half, rest, mid, shift;
    int e = (int)((f >> 23) & 0xffu) - 127 + 15;
    if (((f >> 23) & 0xffu) == 0xffu) {
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0u)); /* infinity, NaN */
    }
    if (e >= 31) {
        return (uint16_t)(sign | 0x7c00u); /* too large: infinity */
    }
    if (e <= 0) { /* a subnormal f16, or zero */
        if (e < -10) {
            return (uint16_t)sign;
        }
        mant |= 0x800000u;
        shift = (uint32_t)(14 - e);
        half = mant >> shift;
        rest = mant & ((1u << shift) - 1u);
        mid = 1u << (shift - 1u);
    } else {
        half = ((uint32_t)e << 10) | (mant >> 13);
        rest = mant & 0x1fffu;
        mid = 0x1000u;
    }
    if (rest > mid || (rest == mid && (half & 1u))) {
        ++half; /* a carry into the exponent is right: it rounds up to the next power of two, or infinity */
    }
    return (uint16_t)(sign | half);
}

/* Bytes of a TiDataType's value (0: not a scalar type). */
static uint32_t plan_width(TiDataType type) {
    switch (type) {
    case TI_DATA_TYPE_I8: case TI_DATA_TYPE_U8: case TI_DATA_TYPE_U1: return 1;
    case TI_DATA_TYPE_F16: case TI_DATA_TYPE_I16: case TI_DATA_TYPE_U16: return 2;
    case TI_DATA_TYPE_F32: case TI_DATA_TYPE_I32: case TI_DATA_TYPE_U32: return 4;
    case TI_DATA_TYPE_F64: case TI_DATA_TYPE_I64: case TI_DATA_TYPE_U64: return 8;
    default: return 0;
    }
}

/* The bytes of a scalar or vector argument, or NULL where the TiArgument is not what the plan expects (`half`:
   room for an f16 made from the f32 the C-API carries). */
static const void *plan_bytes(const TaichiAotArgPlan *a, const TiArgument *v, uint16_t *half) {
    uint32_t bytes = a->size * a->count;
    if (v->type == TI_ARGUMENT_TYPE_SCALAR && v->value.scalar.type == TI_DATA_TYPE_F16) {
        if (a->kind != TAICHI_AOT_PLAN_SCALAR || bytes != 2) {
            return NULL;
        }
        *half = plan_half(v->value.scalar.value.x32);
        return half;
    }
    switch (v->type) {
    case TI_ARGUMENT_TYPE_I32:
        return a->kind == TAICHI_AOT_PLAN_SCALAR && bytes == 4 ? (const void *)&v->value.i32 : NULL;
    case TI_ARGUMENT_TYPE_F32:
        return a->kind == TAICHI_AOT_PLAN_SCALAR && bytes == 4 ? (const void *)&v->value.f32 : NULL;
    case TI_ARGUMENT_TYPE_SCALAR: /* the union's low bytes (little-endian), of a type of the planned width */
        return a->kind == TAICHI_AOT_PLAN_SCALAR && plan_width(v->value.scalar.type) == a->size
                   ? (const void *)&v->value.scalar.value
                   : NULL;
    case TI_ARGUMENT_TYPE_TENSOR:
        return a->kind == TAICHI_AOT_PLAN_TENSOR && v->value.tensor.contents.length == a->count &&
                       plan_width(v->value.tensor.type) == a->size && bytes <= sizeof(v->value.tensor.contents.data)
                   ? (const void *)&v->value.tensor.contents.data
                   : NULL;
    default:
        return NULL;
    }
}

/* An ndarray argument's shape written at its plan's offset in `params` (as many dimensions as the plan lays out);
   returns its element count (at most 2**40). */
uint64_t taichi_aot_plan_shape(const TaichiAotArgPlan *a, const TiNdArray *nd, unsigned char *params) {
    uint64_t count = 1;
    uint32_t d, n = nd->shape.dim_count < a->size ? nd->shape.dim_count : a->size;
    for (d = 0; d < n; ++d) {
        int32_t dim = (int32_t)nd->shape.dims[d];
        memcpy(params + a->offset + 4 * d, &dim, 4);
        count = count * nd->shape.dims[d] > (1ULL << 40) ? (1ULL << 40) : count * nd->shape.dims[d];
    }
    return count;
}

/* The gradient of ndarray `nd` in a reverse-mode kernel's arguments: `args[*next]` (then advanced), the next of those
   after the kernel's own, which end at `end`; NULL where there is none left or it is not an ndarray of `nd`'s shape
   (the kernel indexes it as its array). */
const TiNdArray *taichi_aot_plan_gradient(const TiNdArray *nd, const TiArgument *args, uint32_t end, uint32_t *next) {
    const TiNdArray *g;
    uint32_t d;
    if (*next >= end || args[*next].type != TI_ARGUMENT_TYPE_NDARRAY) {
        return NULL;
    }
    g = &args[*next].value.ndarray;
    if (g->shape.dim_count != nd->shape.dim_count) {
        return NULL;
    }
    for (d = 0; d < nd->shape.dim_count && d < 16; ++d) {
        if (g->shape.dims[d] != nd->shape.dims[d]) {
            return NULL;
        }
    }
    ++*next;
    return g;
}

/* A scalar or vector argument's bytes written at its plan's offset in `params`; 0, or TAICHI_AOT_PLAN_BAD_ARGS where
   the TiArgument is not what the plan expects. */
int taichi_aot_plan_value(const TaichiAotArgPlan *a, const TiArgument *v, unsigned char *params) {
    uint16_t half;
    const void *src = plan_bytes(a, v, &half);
    if (src == NULL) {
        return TAICHI_AOT_PLAN_BAD_ARGS;
    }
    memcpy(params + a->offset, src, (size_t)a->size * a->count);
    return 0;
}
