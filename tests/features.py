"""A module of the features seed 002 and Taichi 1.7.4's SPIR-V backend offer beyond tests/kernels.py: global fields
exported with Module.add_field and kernels that fill and read them, a kernel template instantiated on a field
(Vulkan: Taichi 1.7.4 has no templates on LLVM), block-shared memory, subgroup operations, and atomics of every
width (tests/test_features.py runs them). Run as a script (Taichi reads a kernel's source from its file):

    python tests/features.py --arch vulkan --out FOLDER
    python tests/features.py --arch vulkan --out FOLDER --plain   # one kernel and no fields

(No "from __future__ import annotations" here: Taichi reads the annotations.)
"""

import argparse
import os

import taichi as ti

#: What the Vulkan part asks of the device: 64-bit and float atomics, subgroups.
GFX_CAPS = ["spirv_has_int8", "spirv_has_int16", "spirv_has_int64", "spirv_has_float64", "spirv_has_atomic_int64",
            "spirv_has_atomic_float", "spirv_has_atomic_float_add", "spirv_has_atomic_float64",
            "spirv_has_atomic_float64_add", "spirv_has_atomic_float_minmax", "spirv_has_subgroup_basic",
            "spirv_has_subgroup_arithmetic"]
N = 16  # the fields' length
F32, I32 = ti.types.ndarray(dtype=ti.f32, ndim=1), ti.types.ndarray(dtype=ti.i32, ndim=1)
BLOCK = 128  # block-shared memory: threads a block, elements of the shared array


def define(gfx: bool):
    f = ti.field(ti.f32, shape=N)
    v = ti.Vector.field(3, ti.i32, shape=(2, 3))
    kernels = {}

    @ti.kernel
    def fill(s: ti.f32):
        for i in f:
            f[i] = s + i
        for i, j in v:
            v[i, j] = [i, j, i * 10 + j]

    @ti.kernel
    def read(out: F32, vec: ti.types.ndarray(dtype=ti.i32, ndim=3)):
        for i in f:
            out[i] = f[i] * 2
        for i, j in v:
            for k in ti.static(range(3)):
                vec[i, j, k] = v[i, j][k]

    @ti.kernel
    def tick():
        for i in range(N):
            f[i] += 1

    @ti.kernel
    def bump(a: ti.template()):
        for i in a:
            a[i] += 1

    @ti.kernel
    def reverse_blocks(x: F32, out: F32):
        ti.loop_config(block_dim=BLOCK)
        for i in range(2 * BLOCK):
            tid = i % BLOCK
            pad = ti.simt.block.SharedArray((BLOCK,), ti.f32)
            pad[tid] = x[i]
            ti.simt.block.sync()
            out[i] = pad[BLOCK - 1 - tid]

    @ti.kernel
    def subgroup_sum(x: I32, out: I32):
        for i in x:
            out[i] = ti.simt.subgroup.reduce_add(x[i])

    @ti.kernel
    def atomics(x: I32, a: I32, u: ti.types.ndarray(dtype=ti.u32, ndim=1), fl: F32,
                wide: ti.types.ndarray(dtype=ti.i64, ndim=1)):
        for i in x:
            k = x[i]
            ti.atomic_add(a[0], k)
            ti.atomic_min(a[1], k)
            ti.atomic_max(a[2], k)
            ti.atomic_and(u[0], ti.u32(k))
            ti.atomic_or(u[1], ti.u32(k))
            ti.atomic_xor(u[2], ti.u32(k))
            ti.atomic_add(fl[0], ti.f32(k) * 0.5)
            ti.atomic_max(fl[1], ti.f32(k))
            ti.atomic_add(wide[0], ti.i64(k) * 1000000000)

    @ti.kernel
    def atomic_f64(x: I32, d: ti.types.ndarray(dtype=ti.f64, ndim=1)):  # Vulkan: lavapipe refuses it
        for i in x:
            ti.atomic_add(d[0], ti.f64(x[i]) * 0.25)

    @ti.kernel
    def narrow_atomics(x: ti.types.ndarray(dtype=ti.i8, ndim=1)):
        for _ in x:
            ti.atomic_add(x[0], ti.i8(1))

    kernels.update(fill=fill, read=read, tick=tick, atomics=atomics, atomic_f64=atomic_f64)
    if gfx:
        kernels.update(reverse_blocks=reverse_blocks, subgroup_sum=subgroup_sum, narrow_atomics=narrow_atomics)
    return {"f": f, "v": v}, kernels, bump


def plain():
    @ti.kernel
    def twice(x: ti.types.ndarray(dtype=ti.f32, ndim=1)):
        for i in x:
            x[i] = x[i] * 2

    return twice


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", required=True, choices=["x64", "vulkan"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--plain", action="store_true")
    args = parser.parse_args()
    gfx = args.arch == "vulkan"
    ti.init(arch=getattr(ti, args.arch), log_level=ti.ERROR, offline_cache=False)
    if args.plain:
        module = ti.aot.Module(getattr(ti, args.arch), caps=GFX_CAPS if gfx else None)
        module.add_kernel(plain())
    else:
        fields, kernels, bump = define(gfx)  # before the module: it finalizes the fields
        module = ti.aot.Module(getattr(ti, args.arch), caps=GFX_CAPS if gfx else None)
        for name, field in fields.items():
            module.add_field(name, field)
        for kernel in kernels.values():
            module.add_kernel(kernel)
        if gfx:
            with module.add_kernel_template(bump) as template:
                template.instantiate(a=fields["f"])
    os.makedirs(args.out, exist_ok=True)
    module.save(args.out)


if __name__ == "__main__":
    main()
