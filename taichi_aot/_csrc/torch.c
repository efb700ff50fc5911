/* A torch tensor's layout read through torch's own C functions (see taichi_aot.h): the C call of kernels
   (call.c) asks on every launch whether a tensor shared before is still what was shared, and five of torch's
   Python getters per tensor cost more than the rest of the launch path. The functions are the ones torch
   exports with C linkage and a stable ABI for AOTInductor's compiled models (`aoti_torch_get_*` in
   torch/csrc/inductor/aoti_torch/c/shim.h); each takes a tensor handle, the address of an at::Tensor (one
   pointer to its TensorImpl), reads through it, neither keeping nor releasing it, and returns an error code
   for any C++ exception. The handle is the at::Tensor inside the tensor's Python object (see reads.c). */
#include <dlfcn.h>
#include <string.h>

#include "taichi_aot.h"
#include "torch.h"

typedef int32_t (*taichi_aot_torch_ptr_fn)(void *tensor, void **out);
typedef int32_t (*taichi_aot_torch_i64_fn)(void *tensor, int64_t *out);
typedef int32_t (*taichi_aot_torch_i64p_fn)(void *tensor, int64_t **out);
typedef int32_t (*taichi_aot_torch_i32_fn)(void *tensor, int32_t *out);

static struct {
    taichi_aot_torch_ptr_fn data_ptr;
    taichi_aot_torch_i64_fn dim;
    taichi_aot_torch_i64p_fn sizes;
    taichi_aot_torch_i64p_fn strides;
    taichi_aot_torch_i32_fn dtype;
    taichi_aot_torch_i32_fn device_type;
    taichi_aot_torch_i32_fn device_index;
    taichi_aot_torch_i64_fn storage_size;
} torch_fns;

static int torch_bound;

/* torch's dtype codes (aoti_torch_dtype_*), by Taichi data type (TiDataType), -1 where torch has none or does not
   say: what a tensor taken anew by the C call must have (call.c). */
static int32_t torch_codes[TI_DATA_TYPE_U64 + 1];

static void torch_bind_codes(void *handle) {
    static const char *const names[TI_DATA_TYPE_U64 + 1] = {
        "aoti_torch_dtype_float16", "aoti_torch_dtype_float32", "aoti_torch_dtype_float64",
        "aoti_torch_dtype_int8",    "aoti_torch_dtype_int16",   "aoti_torch_dtype_int32",
        "aoti_torch_dtype_int64",   "aoti_torch_dtype_bool",    "aoti_torch_dtype_uint8",
        "aoti_torch_dtype_uint16",  "aoti_torch_dtype_uint32",  "aoti_torch_dtype_uint64"};
    int i;
    for (i = 0; i <= TI_DATA_TYPE_U64; ++i) {
        int32_t (*code)(void) = (int32_t(*)(void))dlsym(handle, names[i]);
        torch_codes[i] = code != NULL ? code() : -1;
    }
}

int32_t taichi_aot_torch_code(int32_t data_type) {
    return torch_bound && data_type >= 0 && data_type <= TI_DATA_TYPE_U64 ? torch_codes[data_type] : -1;
}

/* Look the functions up in `library` (torch's libtorch_cpu, already loaded by `import torch`: it is not
   loaded here where it is not); 1 where all were found. */
int taichi_aot_torch_bind(const char *library) {
    void *handle, *found[8];
    static const char *const names[8] = {"aoti_torch_get_data_ptr", "aoti_torch_get_dim",
                                         "aoti_torch_get_sizes", "aoti_torch_get_strides",
                                         "aoti_torch_get_dtype", "aoti_torch_get_device_type",
                                         "aoti_torch_get_device_index", "aoti_torch_get_storage_size"};
    int i;
    if (torch_bound) { /* once: the functions stay where they are while the process runs */
        return 1;
    }
    handle = dlopen(library, RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
    if (handle == NULL) {
        return 0;
    }
    for (i = 0; i < 8; ++i) {
        found[i] = dlsym(handle, names[i]);
        if (found[i] == NULL) {
            return 0; /* the handle is kept: torch stays loaded for the process anyway */
        }
    }
    torch_fns.data_ptr = (taichi_aot_torch_ptr_fn)found[0];
    torch_fns.dim = (taichi_aot_torch_i64_fn)found[1];
    torch_fns.sizes = (taichi_aot_torch_i64p_fn)found[2];
    torch_fns.strides = (taichi_aot_torch_i64p_fn)found[3];
    torch_fns.dtype = (taichi_aot_torch_i32_fn)found[4];
    torch_fns.device_type = (taichi_aot_torch_i32_fn)found[5];
    torch_fns.device_index = (taichi_aot_torch_i32_fn)found[6];
    torch_fns.storage_size = (taichi_aot_torch_i64_fn)found[7];
    torch_bind_codes(handle);
    torch_bound = 1;
    return 1;
}

/* torch.h says what it reads. */
int taichi_aot_torch_read(void *t, TaichiAotTorchLayout *out, int64_t **sizes, int64_t **strides) {
    out->pad = 0;
    return torch_bound && *(void *const *)t != NULL && torch_fns.dim(t, &out->dim) == 0 && out->dim >= 0 &&
           out->dim <= 16 && torch_fns.data_ptr(t, &out->data) == 0 &&
           torch_fns.storage_size(t, &out->storage_size) == 0 && torch_fns.dtype(t, &out->dtype) == 0 &&
           torch_fns.device_type(t, &out->device_type) == 0 && torch_fns.device_index(t, &out->device_index) == 0 &&
           torch_fns.sizes(t, sizes) == 0 && torch_fns.strides(t, strides) == 0;
}

/* Fill `out` with the layout of the tensor whose at::Tensor is at `tensor` (see taichi_aot_torch_read), its sizes and
   strides copied; the bytes past its dims are zero, so that two layouts compare with memcmp. 0 (and `out` all
   zero) where it cannot be read. */
int taichi_aot_torch_layout(uintptr_t tensor, TaichiAotTorchLayout *out) {
    int64_t *sizes, *strides;
    memset(out, 0, sizeof(*out));
    if (!taichi_aot_torch_read((void *)tensor, out, &sizes, &strides)) {
        memset(out, 0, sizeof(*out));
        return 0;
    }
    memcpy(out->sizes, sizes, (size_t)out->dim * sizeof(int64_t));
    memcpy(out->strides, strides, (size_t)out->dim * sizeof(int64_t));
    return 1;
}

/* Whether the tensor whose at::Tensor is at `tensor` still has the layout `expect` (as taichi_aot_torch_layout
   fills it): the C call's check, which copies no sizes or strides and clears no record. */
int taichi_aot_torch_same(uintptr_t tensor, const TaichiAotTorchLayout *expect) {
    TaichiAotTorchLayout now; /* only its fields before `sizes` are read */
    int64_t *sizes, *strides;
    size_t n = (size_t)expect->dim * sizeof(int64_t);
    return taichi_aot_torch_read((void *)tensor, &now, &sizes, &strides) &&
           memcmp(&now, expect, offsetof(TaichiAotTorchLayout, sizes)) == 0 && memcmp(sizes, expect->sizes, n) == 0 &&
           memcmp(strides, expect->strides, n) == 0;
}

int taichi_aot_torch_data_ptr(void *t, void **data) {
    return torch_bound ? torch_fns.data_ptr(t, data) : -1;
}
