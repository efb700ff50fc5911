"""CUDA kernels for the own launcher's tests: what its gate takes (random numbers, 2-D and 3-D loops, range
loops, f64/i64 scalars, maths) and what it leaves to libtaichi (print, fields, return values).

Compiled on a machine with a GPU (Taichi compiles for CUDA only there); the module is kept as test data
(``tests/data/cuda-modules.tar.xz``, with the suite's other CUDA modules), since its IR is text:

    python tests/ptx_kernels.py OUT_DIR

(No "from __future__ import annotations" here: Taichi reads the annotations.)
"""

import os
import sys

import taichi as ti

F32_1D = ti.types.ndarray(dtype=ti.f32, ndim=1)


def define_kernels():
    return {**_taken(), **_maths(), **_refused()}


def _taken():
    @ti.kernel
    def rnd(a: F32_1D):
        for i in a:
            a[i] = ti.random()

    @ti.kernel
    def rangen(a: F32_1D, c: F32_1D, n: ti.i32):
        for i in range(n):
            c[i] = a[i] * 2.0 + 1.0

    @ti.kernel
    def add2d(x: ti.types.ndarray(dtype=ti.f32, ndim=2), y: ti.types.ndarray(dtype=ti.f32, ndim=2), s: ti.f32):
        for i, j in x:
            x[i, j] = x[i, j] * y[i, j] + s * y[i, j]

    @ti.kernel
    def grid3(x: ti.types.ndarray(dtype=ti.i32, ndim=3)):
        for i, j, k in x:
            x[i, j, k] = i * 10000 + j * 100 + k

    return dict(rnd=rnd, rangen=rangen, add2d=add2d, grid3=grid3)


def _maths():
    @ti.kernel
    def mathk(a: F32_1D, c: F32_1D):
        for i in a:
            c[i] = ti.sin(a[i]) + ti.exp(a[i] * 0.1) + ti.sqrt(ti.abs(a[i])) + ti.log(1.0 + ti.abs(a[i]))

    @ti.kernel
    def wide(out: ti.types.ndarray(dtype=ti.f64, ndim=1), k: ti.f64, m: ti.i64, flag: ti.u8):
        for i in out:
            out[i] = k * i + ti.f64(m) + ti.f64(flag)

    return dict(mathk=mathk, wide=wide)


def _refused():
    counter = ti.field(ti.i32, shape=())

    @ti.kernel
    def printer(a: F32_1D):
        for i in a:
            print("value", a[i])

    @ti.kernel
    def field_user(a: F32_1D):
        for i in a:
            ti.atomic_add(counter[None], 1)
            a[i] = counter[None]

    @ti.kernel
    def returner(a: F32_1D) -> ti.f32:
        return a[0] * 2.0

    return dict(printer=printer, field_user=field_user, returner=returner)


def build(out: str) -> None:
    ti.init(arch=ti.cuda, log_level=ti.ERROR, offline_cache=False)
    kernels = define_kernels()  # before the module: it finalizes the fields
    module = ti.aot.Module(ti.cuda)
    for name, kernel in kernels.items():
        try:
            module.add_kernel(kernel, name=name)
        except Exception as e:
            print(f"{name}: not exported ({type(e).__name__}: {e})", file=sys.stderr)
    os.makedirs(out, exist_ok=True)
    module.save(out)


if __name__ == "__main__":
    build(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
