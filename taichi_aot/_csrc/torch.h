/* What torch.c shares with torchop.c (the C kernel of torch ops): a private header, never handed to cffi. */
#ifndef TAICHI_AOT_TORCH_H
#define TAICHI_AOT_TORCH_H

#include <stdint.h>

#include "taichi_aot.h"

/* Read the tensor whose at::Tensor is at `t` into `out`'s fields before `sizes` (its data pointer, storage offset
   included; the size of its storage; dtype, device, dims), and point `sizes` and `strides` at torch's own arrays: 0
   where torch's functions are not bound, the at::Tensor holds no TensorImpl, torch reports an error (a tensor of no
   storage) or the tensor has more dims than a layout holds. */
__attribute__((visibility("hidden"))) int taichi_aot_torch_read(void *t, TaichiAotTorchLayout *out, int64_t **sizes,
                                                                int64_t **strides);

/* The data pointer of the tensor whose at::Tensor is at `t` (its storage offset included): 0, or nonzero. */
__attribute__((visibility("hidden"))) int taichi_aot_torch_data_ptr(void *t, void **data);

#endif
