"""Taichi source of benchmarks/vk_programs.py's whole programs, and Taichi's own JIT run of them.

    python vk_programs_kernels.py build ARCH OUT [CAP...] compile the three programs' module (kernels and graphs)
    python vk_programs_kernels.py jit ARCH STEPS ROUNDS   run each program's steps with Taichi's JIT: one JSON line

The programs, each a step of several kernels over ndarrays (the kinds of taichi-aot-demo's):
* ``mpm``: the bench's particle-in-cell substep (taichi_aot_bench/sim_kernels.py: clear, scatter with atomics, grid
  update, gather) as the graph ``mpm_substep``, eight substeps a step, over 32,768 particles;
* ``sph``: neighbour search in cells and two neighbour loops (density, then forces and integration);
* ``sph3``: the same in 3-D as a fuller SPH solver writes it, six kernels over vec3 ndarrays: binning, density with
  a Tait equation of state (``pow``), pressure and viscosity forces, integration and a boundary pass;
* ``fem``: an implicit solve of a 2-D Poisson problem by 20 conjugate-gradient iterations a step, every scalar kept
  on the device (matrix-free stencil, dot products into 0-D ndarrays);
* ``nbody``: gravity among 4,096 bodies, all pairs (O(n^2) a pass) over vec3 ndarrays, then a kick and a drift:
  four such substeps a step.

(No ``from __future__ import annotations`` here: Taichi reads the annotations.)
"""
# mypy: ignore-errors
# (Taichi's DSL: kernel parameters are annotated with Taichi type objects, which are no Python types)

import json
import os
import sys

import numpy as np
import taichi as ti

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # its neighbour, also where PYTHONSAFEPATH is set
from vk_programs_common import (
    ELEM_NDIM,
    FEM_N,
    NBODY_N,
    NBODY_SOFT,
    RESULT,
    SPH3_CELLS,
    SPH3_MASS,
    SPH3_MAX,
    SPH_CELLS,
    SPH_MAX,
    initial,
    steps,
    time_steps,
)


def define() -> dict:
    f1 = ti.types.ndarray(dtype=ti.f32, ndim=1)
    f2 = ti.types.ndarray(dtype=ti.f32, ndim=2)
    f3 = ti.types.ndarray(dtype=ti.f32, ndim=3)
    i1 = ti.types.ndarray(dtype=ti.i32, ndim=1)
    i2 = ti.types.ndarray(dtype=ti.i32, ndim=2)
    i3 = ti.types.ndarray(dtype=ti.i32, ndim=3)
    f0 = ti.types.ndarray(dtype=ti.f32, ndim=0)

    @ti.kernel
    def sph_clear(count: i2):
        for i, j in count:
            count[i, j] = 0

    @ti.kernel
    def sph_bin(x: f2, count: i2, members: i3):
        for p in range(x.shape[0]):
            ci = ti.min(ti.max(ti.cast(x[p, 0] * SPH_CELLS, ti.i32), 0), SPH_CELLS - 1)
            cj = ti.min(ti.max(ti.cast(x[p, 1] * SPH_CELLS, ti.i32), 0), SPH_CELLS - 1)
            slot = ti.atomic_add(count[ci, cj], 1)
            if slot < SPH_MAX:
                members[ci, cj, slot] = p

    @ti.kernel
    def sph_density(x: f2, count: i2, members: i3, rho: f1):
        h = 1.0 / SPH_CELLS
        for p in range(x.shape[0]):
            ci = ti.min(ti.max(ti.cast(x[p, 0] * SPH_CELLS, ti.i32), 0), SPH_CELLS - 1)
            cj = ti.min(ti.max(ti.cast(x[p, 1] * SPH_CELLS, ti.i32), 0), SPH_CELLS - 1)
            d = 0.0
            for di, dj in ti.ndrange((-1, 2), (-1, 2)):
                a, b = ci + di, cj + dj
                if 0 <= a < SPH_CELLS and 0 <= b < SPH_CELLS:
                    for k in range(ti.min(count[a, b], SPH_MAX)):
                        q = members[a, b, k]
                        r2 = (x[p, 0] - x[q, 0]) ** 2 + (x[p, 1] - x[q, 1]) ** 2
                        if r2 < h * h:
                            d += (h * h - r2) ** 3
            rho[p] = d

    @ti.kernel
    def sph_force(x: f2, v: f2, count: i2, members: i3, rho: f1, dt: ti.f32):
        h = 1.0 / SPH_CELLS
        for p in range(x.shape[0]):
            ci = ti.min(ti.max(ti.cast(x[p, 0] * SPH_CELLS, ti.i32), 0), SPH_CELLS - 1)
            cj = ti.min(ti.max(ti.cast(x[p, 1] * SPH_CELLS, ti.i32), 0), SPH_CELLS - 1)
            f = ti.Vector([0.0, -9.8])
            for di, dj in ti.ndrange((-1, 2), (-1, 2)):
                a, b = ci + di, cj + dj
                if 0 <= a < SPH_CELLS and 0 <= b < SPH_CELLS:
                    for k in range(ti.min(count[a, b], SPH_MAX)):
                        q = members[a, b, k]
                        dx = ti.Vector([x[p, 0] - x[q, 0], x[p, 1] - x[q, 1]])
                        r2 = dx.dot(dx)
                        if 0 < r2 < h * h:
                            f += dx * (rho[p] + rho[q]) * 1e12 * (h * h - r2)
            v[p, 0] += dt * f[0]
            v[p, 1] += dt * f[1]
            x[p, 0] = ti.min(ti.max(x[p, 0] + dt * v[p, 0], 0.0), 0.999)
            x[p, 1] = ti.min(ti.max(x[p, 1] + dt * v[p, 1], 0.0), 0.999)

    @ti.kernel
    def fem_matvec(p: f2, ap: f2):
        for i, j in p:
            s = 4.0 * p[i, j]
            if i > 0:
                s -= p[i - 1, j]
            if i < FEM_N - 1:
                s -= p[i + 1, j]
            if j > 0:
                s -= p[i, j - 1]
            if j < FEM_N - 1:
                s -= p[i, j + 1]
            ap[i, j] = s

    @ti.kernel
    def fem_dot(a: f2, b: f2, out: f0):
        out[None] = 0.0
        for i, j in a:
            out[None] += a[i, j] * b[i, j]

    @ti.kernel
    def fem_update_x_r(x: f2, r: f2, p: f2, ap: f2, rr: f0, pap: f0):
        alpha = rr[None] / (pap[None] + 1e-30)
        for i, j in x:
            x[i, j] += alpha * p[i, j]
            r[i, j] -= alpha * ap[i, j]

    @ti.kernel
    def fem_update_p(r: f2, p: f2, rr_new: f0, rr: f0):
        beta = rr_new[None] / (rr[None] + 1e-30)
        for i, j in p:
            p[i, j] = r[i, j] + beta * p[i, j]

    @ti.kernel
    def fem_swap(rr_new: f0, rr: f0):
        rr[None] = rr_new[None]

    own = {k: v for k, v in locals().items() if k.split("_")[0] in ("sph", "fem")}
    own.update(define_sph3())
    own.update(define_nbody())
    return {**{f"mpm_{k}": v for k, v in _sim().define().items()}, **own}


def define_sph3() -> dict:
    """The 3-D SPH program's kernels (poly6 density, spiky pressure gradient, a viscosity term)."""
    v3 = ti.types.ndarray(dtype=ti.math.vec3, ndim=1)
    f1 = ti.types.ndarray(dtype=ti.f32, ndim=1)
    i3 = ti.types.ndarray(dtype=ti.i32, ndim=3)
    i4 = ti.types.ndarray(dtype=ti.i32, ndim=4)
    h = 1.0 / SPH3_CELLS
    poly6 = SPH3_MASS * 315.0 / (64.0 * 3.14159265 * h ** 9)
    spiky = 45.0 / (3.14159265 * h ** 6)

    @ti.func
    def cell(p):
        return ti.min(ti.max(ti.cast(p * SPH3_CELLS, ti.i32), 0), SPH3_CELLS - 1)

    @ti.kernel
    def sph3_clear(count: i3):
        for c in ti.grouped(count):
            count[c] = 0

    @ti.kernel
    def sph3_bin(x: v3, count: i3, members: i4):
        for p in x:
            c = cell(x[p])
            slot = ti.atomic_add(count[c], 1)
            if slot < SPH3_MAX:
                members[c.x, c.y, c.z, slot] = p

    @ti.kernel
    def sph3_density(x: v3, count: i3, members: i4, rho: f1, pressure: f1):
        for p in x:
            c = cell(x[p])
            d = 0.0
            for off in ti.grouped(ti.ndrange((-1, 2), (-1, 2), (-1, 2))):
                n = c + off
                if (n >= 0).all() and (n < SPH3_CELLS).all():
                    for k in range(ti.min(count[n], SPH3_MAX)):
                        r2 = (x[p] - x[members[n.x, n.y, n.z, k]]).norm_sqr()
                        if r2 < h * h:
                            d += poly6 * (h * h - r2) ** 3
            rho[p] = d
            pressure[p] = 50.0 * (ti.pow(d, 7.0) - 1.0)

    @ti.kernel
    def sph3_force(x: v3, v: v3, count: i3, members: i4, rho: f1, pressure: f1, force: v3):
        for p in x:
            c = cell(x[p])
            f = ti.Vector([0.0, 0.0, -9.8]) * rho[p]
            for off in ti.grouped(ti.ndrange((-1, 2), (-1, 2), (-1, 2))):
                n = c + off
                if (n >= 0).all() and (n < SPH3_CELLS).all():
                    for k in range(ti.min(count[n], SPH3_MAX)):
                        q = members[n.x, n.y, n.z, k]
                        d = x[p] - x[q]
                        r = d.norm()
                        if 0 < r < h:
                            w = spiky * (h - r)
                            share = pressure[p] / rho[p] ** 2 + pressure[q] / rho[q] ** 2
                            f -= SPH3_MASS * share * w * (h - r) * d / r
                            f += 0.01 * SPH3_MASS * (v[q] - v[p]) / rho[q] * w
            force[p] = f

    @ti.kernel
    def sph3_integrate(x: v3, v: v3, rho: f1, force: v3, dt: ti.f32):
        for p in x:
            v[p] += dt * force[p] / rho[p]
            x[p] += dt * v[p]

    @ti.kernel
    def sph3_boundary(x: v3, v: v3):
        for p in x:
            for i in ti.static(range(3)):
                if x[p][i] < 0.05:
                    x[p][i], v[p][i] = 0.05, -0.5 * v[p][i]
                elif x[p][i] > 0.95:
                    x[p][i], v[p][i] = 0.95, -0.5 * v[p][i]

    return {k: v for k, v in locals().items() if k.startswith("sph3_")}


def define_nbody() -> dict:
    """The n-body program's kernels: every body's acceleration from all the others, then velocities and positions."""
    v3 = ti.types.ndarray(dtype=ti.math.vec3, ndim=1)
    mass = 1.0 / NBODY_N

    @ti.kernel
    def nbody_accel(x: v3, acc: v3):
        for i in range(x.shape[0]):
            a = ti.math.vec3(0.0)
            xi = x[i]
            for j in range(x.shape[0]):
                d = x[j] - xi
                r2 = d.dot(d) + NBODY_SOFT
                a += d * (mass / (r2 * ti.sqrt(r2)))
            acc[i] = a

    @ti.kernel
    def nbody_kick_drift(x: v3, v: v3, acc: v3, dt: ti.f32):
        for i in range(x.shape[0]):
            v[i] += dt * acc[i]
            x[i] += dt * v[i]

    return {"nbody_accel": nbody_accel, "nbody_kick_drift": nbody_kick_drift}


def _sim():
    """The bench's particle-in-cell kernels (taichi_aot_bench/sim_kernels.py), the MPM-like program's, read from
    their file (the bench's package is not imported in a process that runs Taichi)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "taichi_aot_bench", "sim_kernels.py")
    spec = importlib.util.spec_from_file_location("sim_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(arch: str, out: str, caps: list) -> None:
    ti.init(arch=getattr(ti, arch), log_level=ti.ERROR, offline_cache=False)
    kernels = define()
    m = ti.aot.Module(getattr(ti, arch), caps=caps)
    for kernel in kernels.values():
        m.add_kernel(kernel)
    args = [ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "x", ti.f32, ndim=2),
            ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "v", ti.f32, ndim=2),
            ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "grid_v", ti.f32, ndim=3),
            ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "grid_m", ti.f32, ndim=2),
            ti.graph.Arg(ti.graph.ArgKind.SCALAR, "dt", ti.f32),
            ti.graph.Arg(ti.graph.ArgKind.SCALAR, "gravity", ti.f32)]
    x, v, grid_v, grid_m, dt, gravity = args
    g = ti.graph.GraphBuilder()
    g.dispatch(kernels["mpm_clear_grid"], grid_v, grid_m)
    g.dispatch(kernels["mpm_p2g"], x, v, grid_v, grid_m)
    g.dispatch(kernels["mpm_grid_update"], grid_v, grid_m, dt, gravity)
    g.dispatch(kernels["mpm_g2p"], x, v, grid_v, dt)
    m.add_graph("mpm_substep", g.compile())
    os.makedirs(out, exist_ok=True)
    m.save(out)


def jit(arch: str, n: int, rounds: int) -> None:
    ti.init(arch=getattr(ti, arch), log_level=ti.ERROR, offline_cache=True)
    kernels = define()
    arrays = {}
    for program, named in initial().items():
        arrays[program] = {}
        for name, value in named.items():
            dtype = ti.f32 if value.dtype == np.float32 else ti.i32
            if ELEM_NDIM.get((program, name)):
                dtype = ti.types.vector(value.shape[-1], dtype)
            nd = ti.ndarray(dtype, value.shape[:len(value.shape) - ELEM_NDIM.get((program, name), 0)])
            nd.from_numpy(value)
            arrays[program][name] = nd
    result = {}
    for program, step in steps(kernels, arrays).items():
        print(f"Taichi JIT: {program}", file=sys.stderr, flush=True)
        samples = time_steps(step, ti.sync, n, rounds)
        out = arrays[program][RESULT[program]].to_numpy()
        result[program] = {"ms": samples, "checksum": float(np.abs(out).sum())}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        jit(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
