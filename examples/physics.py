"""Taichi source of the examples' module, compiled into physics.tcm (x64 and Vulkan parts) by

    python -m taichi_aot build examples/physics.py --arch x64 vulkan --cpu-threads 1 --portable -o examples/physics.tcm

(``--cpu-threads 1``: each x64 kernel runs on one thread, so a pool of CPU workers gets one core each). The
examples load physics.tcm and run without Taichi; this file needs it (``pip install 'taichi_aot[build]'``).
(No ``from __future__ import annotations`` here: Taichi reads the annotations.)
"""

import taichi as ti

vec = ti.types.ndarray(dtype=ti.f32, ndim=1)


@ti.aot.export
@ti.kernel
def step(x: vec, dt: ti.f32):
    for i in x:
        x[i] = x[i] + dt * i


@ti.aot.export
@ti.kernel
def advance(x: vec, v: vec, dt: ti.f32):
    for i in x:
        x[i] = x[i] + dt * v[i]  # x read and written, v only read


@ti.aot.export
@ti.kernel
def energy(v: vec, out: ti.types.ndarray(dtype=ti.f32, ndim=0)):
    for i in v:
        out[None] += 0.5 * v[i] * v[i]  # v only read, out read and written (an atomic sum)


def export_graphs():  # compute graphs: several kernel launches as one
    x = ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "x", dtype=ti.f32, ndim=1)
    v = ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "v", dtype=ti.f32, ndim=1)
    dt = ti.graph.Arg(ti.graph.ArgKind.SCALAR, "dt", ti.f32)
    steps = ti.graph.GraphBuilder()
    for _ in range(4):
        steps.dispatch(step, x, dt)
    drift = ti.graph.GraphBuilder()
    for _ in range(8):
        drift.dispatch(advance, x, v, dt)
    return {"step4": steps.compile(), "drift8": drift.compile()}
