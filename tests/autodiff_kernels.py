"""Differentiable kernels for tests/test_autodiff.py: ``taichi_aot build`` exports each with its reverse-mode
kernel (``<name>_grad``). Run as a script, it computes with Taichi's own JIT (``kernel.grad``) the gradients the
test compares with: ``python tests/autodiff_kernels.py OUT.npz``.

(No "from __future__ import annotations" here: Taichi reads the annotations.)
"""

import os
import sys

import numpy as np
import taichi as ti

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from autodiff_cases import CASES, INDEX, SEED, N, X

A = ti.types.ndarray(dtype=ti.f32, ndim=1, needs_grad=True)


@ti.aot.export
@ti.kernel
def sq(x: A, y: A):
    for i in x:
        y[i] = x[i] * x[i]


@ti.aot.export
@ti.kernel
def poly(x: A, y: A, k: ti.f32):
    for i in x:
        s = 0.0
        for j in range(4):  # a loop-carried value: Taichi's adstack
            s = s * x[i] + k * j
        y[i] = ti.sin(s)


@ti.aot.export
@ti.kernel
def total(x: A, s: A):
    for i in x:
        s[0] += ti.sin(x[i])  # a reduction into one element


@ti.aot.export
@ti.kernel
def wave(x: ti.types.ndarray(dtype=ti.f64, ndim=1, needs_grad=True),
         y: ti.types.ndarray(dtype=ti.f64, ndim=1, needs_grad=True), k: ti.f32):
    for i in x:
        y[i] = x[i] * x[i] * x[i] + k * x[i] * x[i]  # f64: for torch.autograd.gradcheck


@ti.aot.export
@ti.kernel
def squash(x: A, k: ti.f32):
    for i in x:
        x[i] = x[i] * x[i] * k  # read and written: its gradient seeded by the output's, given for the input


@ti.aot.export
@ti.kernel
def spin(x: A, y: A, n: ti.i32):
    for i in x:
        s = x[i]
        for _ in range(n):  # a count known at launch: n values carried
            s = ti.sin(s) + 0.5 * s
        y[i] = s


@ti.aot.export
@ti.kernel
def long(x: A, y: A):
    for i in x:
        s = x[i]
        for _ in range(40):  # 40 values carried: past the 32 entries Taichi gives each autodiff stack here
            s = ti.sin(s) + 0.5 * s
        y[i] = s


@ti.aot.export
@ti.kernel
def tanh_loop(x: A, y: A, n: ti.i32):
    for i in x:
        s = x[i]
        for _ in range(n):  # Taichi 1.7.4 differentiates this wrongly (docs/guide/limitations.md): as Taichi does
            s = ti.tanh(s)
        y[i] = s


@ti.aot.export
@ti.kernel
def loss0(x: A, loss: ti.types.ndarray(dtype=ti.f32, ndim=0, needs_grad=True)):
    for i in x:
        loss[None] += x[i] * x[i] * 0.5  # Taichi's usual 0-D loss


@ti.aot.export
@ti.kernel
def gather(x: A, idx: ti.types.ndarray(dtype=ti.i32, ndim=1), y: A, k: ti.f32):
    for i in y:
        y[i] = ti.sin(x[idx[i]]) * k  # a gather through an index array, which carries no gradient


@ti.aot.export
@ti.kernel
def loopy(x: A, y: A):
    for i in x:
        s = x[i]
        while s < 10.0:  # Taichi 1.7.4 cannot differentiate a while loop: built without its reverse kernel
            s = ti.abs(s) * 2.0 + 1.0
        y[i] = s


@ti.aot.export
@ti.kernel
def vnorm(v: ti.types.ndarray(dtype=ti.math.vec3, ndim=1, needs_grad=True), out: A):
    for i in v:
        out[i] = v[i].dot(v[i])  # an array of vectors with gradients: d/dv = 2 v


@ti.aot.export
@ti.kernel
def side(x: A, y: A, z: ti.types.ndarray(dtype=ti.f32, ndim=1)):
    for i in x:
        y[i] = x[i] * x[i]
        z[i] = x[i] + 100.0  # a plain array the primal writes: its reverse kernel writes it again


AOT_CAPS = ["spirv_has_float64", "spirv_has_int64"]  # wave's f64, in the Vulkan part


@ti.aot.export
@ti.kernel
def plain(x: ti.types.ndarray(dtype=ti.f32, ndim=1)):
    for i in x:
        x[i] += 1


def expected() -> dict:
    """Taichi's own JIT: each kernel's outputs and the gradients its reverse kernel gives."""
    ti.init(arch=ti.x64, log_level=ti.ERROR, offline_cache=False)
    out = {}
    for name, (n, scalars) in CASES.items():
        kernel = globals()[name]
        x, y = ti.ndarray(ti.f32, N, needs_grad=True), ti.ndarray(ti.f32, n, needs_grad=True)
        x.from_numpy(X)
        kernel(x, y, *scalars)
        y.grad.from_numpy(SEED[:n])
        kernel.grad(x, y, *scalars)
        out[f"{name}_y"], out[f"{name}_xgrad"], out[f"{name}_ygrad"] = y.to_numpy(), x.grad.to_numpy(), \
            y.grad.to_numpy()
    out.update(_mixed())
    return out


def _mixed() -> dict:
    """Taichi's own gradients of the 0-D loss and of the gather through indices."""
    x = ti.ndarray(ti.f32, N, needs_grad=True)
    x.from_numpy(X)
    loss = ti.ndarray(ti.f32, (), needs_grad=True)
    loss0(x, loss)
    loss.grad[None] = 1.0
    loss0.grad(x, loss)
    out = {"loss0_loss": loss.to_numpy(), "loss0_xgrad": x.grad.to_numpy()}
    x.grad.fill(0)
    idx, y = ti.ndarray(ti.i32, N), ti.ndarray(ti.f32, N, needs_grad=True)
    idx.from_numpy(INDEX)
    gather(x, idx, y, 1.5)
    y.grad.from_numpy(SEED)
    gather.grad(x, idx, y, 1.5)
    out.update({"gather_y": y.to_numpy(), "gather_xgrad": x.grad.to_numpy()})
    return out


if __name__ == "__main__":
    np.savez(sys.argv[1], **expected())
