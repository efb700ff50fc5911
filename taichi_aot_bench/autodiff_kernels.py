"""Taichi source of the bench's autodiff section: a differentiable projectile simulation (each projectile flies
``STEPS`` steps under gravity and linear drag from its launch velocity), exported with its reverse-mode kernel.

Run in a child process by ``python -m taichi_aot bench``; taichi_aot never imports Taichi.

    python autodiff_kernels.py build ARCH OUT    compile the module (taichi_aot's build: the reverse kernel too)

(No "from __future__ import annotations" here: Taichi reads the annotations.)
"""
# mypy: ignore-errors
# (Taichi's DSL: kernel parameters are annotated with Taichi type objects, which are no Python types)

import os
import subprocess
import sys

import taichi as ti

STEPS, DT, GRAVITY = 50, 0.02, 9.8
AD_STACK_SIZE = 64  # the STEPS values each loop carries fit Taichi's autodiff stacks
pairs = ti.types.ndarray(dtype=ti.f32, ndim=2, needs_grad=True)  # (projectiles, 2): x and y


@ti.aot.export
@ti.kernel
def shoot(v0: pairs, hit: pairs, drag: ti.f32):
    for i in range(v0.shape[0]):
        x, y, vx, vy = 0.0, 0.0, v0[i, 0], v0[i, 1]
        for _ in range(STEPS):
            vx -= DT * drag * vx
            vy -= DT * (GRAVITY + drag * vy)
            x += DT * vx
            y += DT * vy
        hit[i, 0] = x
        hit[i, 1] = y


if __name__ == "__main__" and sys.argv[1:2] == ["build"]:
    arch, out = sys.argv[2], sys.argv[3]
    sys.exit(subprocess.call([sys.executable, "-m", "taichi_aot", "build", os.path.abspath(__file__), "--arch", arch,
                              "--no-access", "-o", out]))
