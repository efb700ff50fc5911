"""Taichi source of the cores section's kernel (cores.py): a compute-bound loop over an ndarray's length, built with
a fixed thread count as a small machine builds it, and Taichi's JIT path for the same kernel on this machine.

Run in child processes by ``python -m taichi_aot bench --sections cores``; taichi_aot never imports Taichi.

    python cores_kernels.py build ARCH OUT THREADS   compile the module with Taichi's CPU threads set to THREADS
    python cores_kernels.py jit ARCH                 answer 'run N STEPS' with the seconds N calls take (JIT)

(No ``from __future__ import annotations`` here: Taichi reads the annotations.)
"""
# mypy: ignore-errors
# (Taichi's DSL: kernel parameters are annotated with Taichi type objects, which are no Python types)

import json
import os
import sys

import numpy as np
import taichi as ti

# bench_kernels lies beside this file: a script's folder is on its path, but not under PYTHONSAFEPATH=1 (or -P),
# which the bench's child processes inherit
HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
from bench_kernels import serve  # noqa: E402

#: elements of the array the kernel runs over (cores.py makes the same)
LENGTH = 1 << 16


def define():
    """The kernel (after ``ti.init``): each element relaxed ``steps`` times, no element reading another's."""
    @ti.kernel
    def relax(x: ti.types.ndarray(dtype=ti.f32, ndim=1), steps: ti.i32):
        for i in x:
            v = x[i]
            for _ in range(steps):
                v = v * 0.999 + ti.cos(v) * 0.01
            x[i] = v

    return relax


def build(arch: str, out: str, threads: int) -> None:
    """Compile ``relax`` for ``arch`` into folder ``out`` with Taichi's CPU threads set to ``threads``."""
    ti.init(arch=getattr(ti, arch), log_level=ti.ERROR, offline_cache=False, cpu_max_num_threads=threads)
    module = ti.aot.Module(getattr(ti, arch))
    module.add_kernel(define(), name="relax")
    os.makedirs(out, exist_ok=True)
    module.save(out)
    with open(os.path.join(out, "taichi_aot.json"), "w", encoding="utf-8") as f:  # as build records the names
        json.dump({"taichi_aot": 1, "arch": arch, "kernels": {"relax": {"args": ["x", "steps"]}}}, f, indent=1)


def jit(arch: str) -> None:
    """Answer 'run N STEPS' with the seconds N calls of ``relax`` take through Taichi's JIT (its default threads:
    this machine's cores)."""
    ti.init(arch=getattr(ti, arch), log_level=ti.ERROR, offline_cache=False)
    relax = define()
    x = ti.ndarray(ti.f32, LENGTH)
    x.from_numpy(np.linspace(0.0, 1.0, LENGTH, dtype=np.float32))
    serve(arch, lambda words: relax(x, int(words[2])))


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        jit(sys.argv[2])
