"""Taichi source of the benchmark's simulation (``taichi-aot bench --sections simulation``): a particle-in-cell
step in 2-D, the work of an MPM solver's substep without its material model.

    python sim_kernels.py build ARCH OUT    compile the module

Kernels over ``x``, ``v`` (particles, (N, 2) f32), ``grid_v`` ((G, G, 2) f32), ``grid_m`` ((G, G) f32): clear_grid,
p2g (scatter with atomics), grid_update (gravity, walls), g2p (gather, move); the graph ``substep`` dispatches the
four; ``stats`` sums kinetic energy and height into ``out`` ((4,) f32). taichi_aot never imports this file.

(No ``from __future__ import annotations`` here: Taichi reads the annotations.)
"""
# mypy: ignore-errors
# (Taichi's DSL: kernel parameters are annotated with Taichi type objects, which are no Python types)

import os
import sys

import taichi as ti

#: Grid cells per side.
GRID = 64


def define() -> dict:
    """The simulation's kernels by name (after ``ti.init``)."""
    particles = ti.types.ndarray(dtype=ti.f32, ndim=2)
    cells = ti.types.ndarray(dtype=ti.f32, ndim=3)
    masses = ti.types.ndarray(dtype=ti.f32, ndim=2)
    vec1 = ti.types.ndarray(dtype=ti.f32, ndim=1)

    @ti.kernel
    def clear_grid(grid_v: cells, grid_m: masses):
        for i, j in grid_m:
            grid_v[i, j, 0] = 0.0
            grid_v[i, j, 1] = 0.0
            grid_m[i, j] = 0.0

    @ti.kernel
    def p2g(x: particles, v: particles, grid_v: cells, grid_m: masses):
        for p in range(x.shape[0]):
            px = ti.Vector([x[p, 0], x[p, 1]]) * GRID
            base = ti.max(ti.min(ti.cast(px - 0.5, ti.i32), GRID - 3), 0)
            fx = px - ti.cast(base, ti.f32)
            w = [0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1.0) ** 2, 0.5 * (fx - 0.5) ** 2]
            for i, j in ti.static(ti.ndrange(3, 3)):
                weight = w[i][0] * w[j][1]
                ti.atomic_add(grid_v[base[0] + i, base[1] + j, 0], weight * v[p, 0])
                ti.atomic_add(grid_v[base[0] + i, base[1] + j, 1], weight * v[p, 1])
                ti.atomic_add(grid_m[base[0] + i, base[1] + j], weight)

    @ti.kernel
    def grid_update(grid_v: cells, grid_m: masses, dt: ti.f32, gravity: ti.f32):
        for i, j in grid_m:
            m = grid_m[i, j]
            if m > 1e-10:
                vx = grid_v[i, j, 0] / m
                vy = grid_v[i, j, 1] / m + dt * gravity
                if (i < 3 and vx < 0) or (i > GRID - 3 and vx > 0):
                    vx = 0.0
                if (j < 3 and vy < 0) or (j > GRID - 3 and vy > 0):
                    vy = 0.0
                grid_v[i, j, 0] = vx
                grid_v[i, j, 1] = vy

    @ti.kernel
    def g2p(x: particles, v: particles, grid_v: cells, dt: ti.f32):
        for p in range(x.shape[0]):
            px = ti.Vector([x[p, 0], x[p, 1]]) * GRID
            base = ti.max(ti.min(ti.cast(px - 0.5, ti.i32), GRID - 3), 0)
            fx = px - ti.cast(base, ti.f32)
            w = [0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1.0) ** 2, 0.5 * (fx - 0.5) ** 2]
            nv = ti.Vector([0.0, 0.0])
            for i, j in ti.static(ti.ndrange(3, 3)):
                weight = w[i][0] * w[j][1]
                nv += weight * ti.Vector([grid_v[base[0] + i, base[1] + j, 0], grid_v[base[0] + i, base[1] + j, 1]])
            v[p, 0] = nv[0]
            v[p, 1] = nv[1]
            x[p, 0] = ti.min(ti.max(x[p, 0] + dt * nv[0], 0.05), 0.95)
            x[p, 1] = ti.min(ti.max(x[p, 1] + dt * nv[1], 0.05), 0.95)

    @ti.kernel
    def stats(x: particles, v: particles, out: vec1):
        for _ in range(1):
            out[0] = 0.0
            out[1] = 0.0
        for p in range(x.shape[0]):
            ti.atomic_add(out[0], 0.5 * (v[p, 0] ** 2 + v[p, 1] ** 2))
            ti.atomic_add(out[1], x[p, 1])

    return {"clear_grid": clear_grid, "p2g": p2g, "grid_update": grid_update, "g2p": g2p, "stats": stats}


def build(arch: str, out: str, caps: list[str] | None = None) -> None:
    """Compile the kernels and the graph ``substep`` for ``arch`` into folder ``out``."""
    ti.init(arch=getattr(ti, arch), log_level=ti.ERROR, offline_cache=False)
    k = define()
    nd = ti.graph.ArgKind.NDARRAY
    x = ti.graph.Arg(nd, "x", ti.f32, ndim=2)
    v = ti.graph.Arg(nd, "v", ti.f32, ndim=2)
    grid_v = ti.graph.Arg(nd, "grid_v", ti.f32, ndim=3)
    grid_m = ti.graph.Arg(nd, "grid_m", ti.f32, ndim=2)
    dt = ti.graph.Arg(ti.graph.ArgKind.SCALAR, "dt", ti.f32)
    gravity = ti.graph.Arg(ti.graph.ArgKind.SCALAR, "gravity", ti.f32)
    builder = ti.graph.GraphBuilder()
    builder.dispatch(k["clear_grid"], grid_v, grid_m)
    builder.dispatch(k["p2g"], x, v, grid_v, grid_m)
    builder.dispatch(k["grid_update"], grid_v, grid_m, dt, gravity)
    builder.dispatch(k["g2p"], x, v, grid_v, dt)
    module = ti.aot.Module(getattr(ti, arch), caps=caps or None)
    for name, kernel in k.items():
        module.add_kernel(kernel, name=name)
    module.add_graph("substep", builder.compile())
    os.makedirs(out, exist_ok=True)
    module.save(out)


if __name__ == "__main__":
    build(sys.argv[2], sys.argv[3], sys.argv[4:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # as bench_kernels.py: skip Taichi's CUDA teardown at exit
