"""Taichi source of the demo module: 2-D reaction-diffusion (Gray-Scott) as a compute graph.

Compiled by ``python -m taichi_aot demo`` in a child process (Taichi allows one AOT
module per ``ti.init``); taichi_aot itself never imports Taichi.
(No ``from __future__ import annotations`` here: Taichi reads the annotations.)
"""
# mypy: ignore-errors
# (Taichi's DSL: kernel parameters are annotated with Taichi type objects, which are no Python types)

import os
import sys

import taichi as ti


def build(arch: str, out: str) -> None:
    """Compile kernels ``seed`` and ``react`` and the graph ``steps16`` for ``arch`` into folder ``out``."""
    ti.init(arch=getattr(ti, arch), log_level=ti.ERROR, offline_cache=False)
    field = ti.types.ndarray(dtype=ti.types.vector(2, ti.f32), ndim=2)

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

    a = ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "a", dtype=ti.types.vector(2, ti.f32), ndim=2)
    b = ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "b", dtype=ti.types.vector(2, ti.f32), ndim=2)
    feed = ti.graph.Arg(ti.graph.ArgKind.SCALAR, "feed", ti.f32)
    kill = ti.graph.Arg(ti.graph.ArgKind.SCALAR, "kill", ti.f32)
    builder = ti.graph.GraphBuilder()
    for _ in range(8):  # one graph launch = 16 steps, ping-ponging between a and b
        builder.dispatch(react, a, b, feed, kill)
        builder.dispatch(react, b, a, feed, kill)
    graph = builder.compile()

    module = ti.aot.Module(getattr(ti, arch))
    module.add_kernel(seed, name="seed")
    module.add_kernel(react, name="react")
    module.add_graph("steps16", graph)
    os.makedirs(out, exist_ok=True)
    module.save(out)


if __name__ == "__main__":
    build(sys.argv[1], sys.argv[2])
    # Taichi 1.7.4 can abort in its CUDA teardown at exit on multi-GPU hosts (CUDA_ERROR_INVALID_CONTEXT in
    # cuMemFreeAsync) after the module is written: leave without it
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
