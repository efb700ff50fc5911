"""Kernels libtaichi_c_api 1.7.4 cannot give all they need, for tests/test_returns.py: kernels that return values
and kernels that take f64, i64, u64 and u8 scalars; and one of 20 arrays, more than a runtime remembered of arrays
passed before. Run as a script, it computes with Taichi's own JIT (x64) what
they return and write: ``python tests/returns_kernels.py OUT.npz``.

(No "from __future__ import annotations" here: Taichi reads the annotations.)
"""

import sys

import numpy as np
import taichi as ti

F = ti.types.ndarray(dtype=ti.f32, ndim=1)
D = ti.types.ndarray(dtype=ti.f64, ndim=1)
AOT_CAPS = ["spirv_has_float64", "spirv_has_int64", "spirv_has_int8"]
#: The inputs: sums of these are exact in f32, so every thread count gives the same bits.
X32 = np.arange(1000, dtype=np.float32)
X64 = np.linspace(-2.0, 3.0, 257)


@ti.aot.export
@ti.kernel
def total(x: F) -> ti.f32:
    s = 0.0
    for i in x:
        s += x[i]  # a reduction: its value is what the kernel gives
    return s


@ti.aot.export
@ti.kernel
def stats(x: D, scale: ti.f64) -> ti.types.vector(3, ti.f64):
    lo, hi = 1e300, -1e300
    for i in x:
        ti.atomic_min(lo, x[i] * scale)
        ti.atomic_max(hi, x[i] * scale)
    return ti.Vector([lo, hi, scale])


@ti.aot.export
@ti.kernel
def count_and_mean(x: F, cut: ti.f32) -> (ti.i32, ti.f32):
    n, s = 0, 0.0
    for i in x:
        if x[i] >= cut:
            n += 1
            s += x[i]
    return n, s / ti.max(n, 1)


@ti.aot.export
@ti.kernel
def wide(x: D, a: ti.f64, k: ti.i64, n: ti.u64, b: ti.u8):
    for i in x:
        x[i] = x[i] * a + ti.cast(k, ti.f64) + ti.cast(n, ti.f64) + ti.cast(b, ti.f64)


@ti.aot.export
@ti.kernel
def plain(x: F, v: ti.f32):
    for i in x:
        x[i] = x[i] + v


@ti.aot.export
@ti.kernel
def many(a0: F, a1: F, a2: F, a3: F, a4: F, a5: F, a6: F, a7: F, a8: F, a9: F, a10: F, a11: F, a12: F, a13: F,
         a14: F, a15: F, a16: F, a17: F, a18: F, a19: F):
    for i in a0:
        a0[i] = a1[i] + a2[i] + a3[i] + a4[i] + a5[i] + a6[i] + a7[i] + a8[i] + a9[i] + a10[i] + a11[i] + a12[i] + \
            a13[i] + a14[i] + a15[i] + a16[i] + a17[i] + a18[i] + a19[i]


#: What the test calls: kernel -> its scalar arguments after its one array.
CALLS = {"total": (), "stats": (1.25,), "count_and_mean": (600.0,), "wide": (0.5, -3 * 2**31, 2**33 + 7, 200)}


def expected() -> dict:
    """Taichi's own JIT: each kernel's returned values and the array ``wide`` writes."""
    ti.init(arch=ti.x64, log_level=ti.ERROR, offline_cache=False)
    x32, x64 = ti.ndarray(ti.f32, X32.shape), ti.ndarray(ti.f64, X64.shape)
    x32.from_numpy(X32)
    x64.from_numpy(X64)
    n, mean = count_and_mean(x32, *CALLS["count_and_mean"])
    wide(x64, *CALLS["wide"])
    return {"total": np.float32(total(x32)), "stats": np.asarray(stats(ti_x64(X64), *CALLS["stats"])),
            "count": np.int32(n), "mean": np.float32(mean), "wide": x64.to_numpy()}


def ti_x64(values):
    x = ti.ndarray(ti.f64, values.shape)
    x.from_numpy(values)
    return x


if __name__ == "__main__":
    np.savez(sys.argv[1], **expected())
