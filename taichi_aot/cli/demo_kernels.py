"""Taichi source of the demo module: 2-D reaction-diffusion (Gray-Scott) as a compute graph.

Kernels ``seed`` and ``react`` and the graph ``steps16`` (16 steps, ping-ponging between ``a`` and ``b``), in
the convention of ``python -m taichi_aot build``. The package ships them compiled (``demo.tcm`` beside this
file, a multi-arch module built by ``python -m taichi_aot build demo_kernels.py --arch x64 vulkan [cuda] -o
demo.tcm``), so the demo and the sweep run without Taichi; ``demo --compile`` builds them anew.
taichi_aot itself never imports this file. (No ``from __future__ import annotations`` here: Taichi reads
the annotations.)
"""
# mypy: ignore-errors
# (Taichi's DSL: kernel parameters are annotated with Taichi type objects, which are no Python types)

import taichi as ti

field = ti.types.ndarray(dtype=ti.types.vector(2, ti.f32), ndim=2)


@ti.aot.export
@ti.kernel
def seed(uv: field, n_spots: ti.i32):
    w, h = uv.shape
    for i, j in uv:
        uv[i, j] = ti.Vector([1.0, 0.0])
    for _spot in range(n_spots):
        ci = int(ti.random() * (w - 20)) + 10
        cj = int(ti.random() * (h - 20)) + 10
        for di, dj in ti.ndrange((-4, 5), (-4, 5)):
            uv[ci + di, cj + dj] = ti.Vector([0.5, 0.25])


@ti.aot.export
@ti.kernel
def react(src: field, dst: field, feed: ti.f32, kill: ti.f32):
    w, h = src.shape
    for i, j in src:
        c = src[i, j]
        lap = -c
        lap += 0.2 * (src[(i + 1) % w, j] + src[(i - 1 + w) % w, j] + src[i, (j + 1) % h] + src[i, (j - 1 + h) % h])
        lap += 0.05 * (
            src[(i + 1) % w, (j + 1) % h]
            + src[(i - 1 + w) % w, (j + 1) % h]
            + src[(i + 1) % w, (j - 1 + h) % h]
            + src[(i - 1 + w) % w, (j - 1 + h) % h]
        )
        uvv = c[0] * c[1] * c[1]
        du = 1.0 * lap[0] - uvv + feed * (1.0 - c[0])
        dv = 0.5 * lap[1] + uvv - (feed + kill) * c[1]
        dst[i, j] = c + ti.Vector([du, dv])


def export_graphs():
    a = ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "a", dtype=ti.types.vector(2, ti.f32), ndim=2)
    b = ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "b", dtype=ti.types.vector(2, ti.f32), ndim=2)
    feed = ti.graph.Arg(ti.graph.ArgKind.SCALAR, "feed", ti.f32)
    kill = ti.graph.Arg(ti.graph.ArgKind.SCALAR, "kill", ti.f32)
    builder = ti.graph.GraphBuilder()
    for _ in range(8):  # one graph launch = 16 steps, ping-ponging between a and b
        builder.dispatch(react, a, b, feed, kill)
        builder.dispatch(react, b, a, feed, kill)
    return {"steps16": builder.compile()}
