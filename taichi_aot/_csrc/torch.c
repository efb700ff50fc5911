/* A torch tensor's layout read through torch's own C functions (see taichi_aot.h): the C call of kernels
   (call.c) asks on every launch whether a tensor shared before is still what was shared, and five of torch's
   Python getters per tensor cost more than the rest of the launch path. The functions are the ones torch
   exports with C linkage and a stable ABI for AOTInductor's compiled models (`aoti_torch_get_*` in
   torch/csrc/inductor/aoti_torch/c/shim.h); each takes a tensor handle, the address of an at::Tensor, which
   is one pointer to its TensorImpl: what the tensor's `_cdata` gives. They catch torch's C++ exceptions and
   return an error code instead. */
#include <dlfcn.h>
#include <string.h>

#include "taichi_aot.h"

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
} torch_fns;

static int torch_bound;

/* Look the functions up in `library` (torch's libtorch_cpu, already loaded by `import torch`: it is not
   loaded here where it is not); 1 where all were found. */
int taichi_aot_torch_bind(const char *library) {
    void *handle = dlopen(library, RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
    void *found[7];
    static const char *const names[7] = {"aoti_torch_get_data_ptr", "aoti_torch_get_dim",
                                         "aoti_torch_get_sizes", "aoti_torch_get_strides",
                                         "aoti_torch_get_dtype", "aoti_torch_get_device_type",
                                         "aoti_torch_get_device_index"};
    int i;
    if (handle == NULL) {
        return 0;
    }
    for (i = 0; i < 7; ++i) {
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
    torch_bound = 1;
    return 1;
}

/* Fill `out` with the layout of the tensor whose TensorImpl is at `impl` (its `_cdata`): its data pointer
   (storage offset included), dtype, device, dims, sizes and strides; the bytes past its dims are zero, so that
   two layouts compare with memcmp. 0 where the functions are not bound, torch reports an error (a tensor of
   no storage) or it has more dims than a layout holds. */
int taichi_aot_torch_layout(uintptr_t impl, TaichiAotTorchLayout *out) {
    void *tensor = (void *)impl; /* the at::Tensor: one pointer to the TensorImpl */
    int64_t *sizes, *strides, dim;
    memset(out, 0, sizeof(*out));
    if (!torch_bound || impl == 0 || torch_fns.dim(&tensor, &dim) != 0 || dim < 0 || dim > 16 ||
        torch_fns.data_ptr(&tensor, &out->data) != 0 || torch_fns.dtype(&tensor, &out->dtype) != 0 ||
        torch_fns.device_type(&tensor, &out->device_type) != 0 ||
        torch_fns.device_index(&tensor, &out->device_index) != 0 || torch_fns.sizes(&tensor, &sizes) != 0 ||
        torch_fns.strides(&tensor, &strides) != 0) {
        memset(out, 0, sizeof(*out));
        return 0;
    }
    out->dim = dim;
    memcpy(out->sizes, sizes, (size_t)dim * sizeof(int64_t));
    memcpy(out->strides, strides, (size_t)dim * sizeof(int64_t));
    return 1;
}
