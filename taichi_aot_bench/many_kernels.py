"""Taichi source of the benchmark's 20-kernel module (``taichi-aot bench --sections validation``): what a module's
load costs with SPIR-V validation and without it.

    python many_kernels.py build ARCH OUT    compile the module

Twenty kernels over ``x`` and ``y`` ((N,) f32), each a different expression of a loop, an atomic or a reduction,
so that every task's SPIR-V differs. taichi_aot never imports this file.

(No ``from __future__ import annotations`` here: Taichi reads the annotations.)
"""
# mypy: ignore-errors
# (Taichi's DSL: kernel parameters are annotated with Taichi type objects, which are no Python types)

import os
import sys

import taichi as ti

#: How many kernels the module holds.
KERNELS = 20


def define() -> dict:
    """The kernels by name (after ``ti.init``): ``k00`` ... ``k19``, kernel ``i`` scaling by ``i + 1`` in its own
    way (a power, a sum of the neighbours, an atomic total, a loop of ``i`` steps)."""
    arr = ti.types.ndarray(dtype=ti.f32, ndim=1)
    out = {}
    for i in range(KERNELS):
        def make(i: int):
            @ti.kernel
            def k(x: arr, y: arr, a: ti.f32):
                for j in x:
                    v = x[j] * (i + 1)
                    if ti.static(i % 4 == 1):
                        v += ti.sin(a * j) ** (i // 4 + 1)
                    if ti.static(i % 4 == 2):
                        ti.atomic_add(y[0], v)
                    if ti.static(i % 4 == 3):
                        for _ in range(i):
                            v = v * a + 1.0
                    y[j] = v
            return k

        out[f"k{i:02d}"] = make(i)
    return out


def build(arch: str, out: str, caps: list[str] | None = None) -> None:
    """Compile the kernels for ``arch`` into folder ``out``."""
    ti.init(arch=getattr(ti, arch), log_level=ti.ERROR, offline_cache=False)
    module = ti.aot.Module(getattr(ti, arch), caps=caps or None)
    for name, kernel in define().items():
        module.add_kernel(kernel, name=name)
    os.makedirs(out, exist_ok=True)
    module.save(out)


if __name__ == "__main__":
    build(sys.argv[2], sys.argv[3], sys.argv[4:])
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)  # as sim_kernels.py: skip Taichi's CUDA teardown at exit
