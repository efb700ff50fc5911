"""Taichi source of the autodiff examples' module, compiled into shoot.tcm by

    python -m taichi_aot build examples/shoot.py --arch x64 vulkan --cpu-threads 1 -o examples/shoot.tcm

``shoot`` is a small differentiable simulation: each projectile starts at the origin with velocity ``v0[i]`` and
flies ``STEPS`` steps under gravity and linear drag; ``hit[i]`` is where it ends. Its ndarrays say
``needs_grad=True``, so ``build`` exports its reverse-mode kernel, ``shoot_grad``, beside it (in the x64 part:
Taichi 1.7.4's Vulkan reverse kernels bind no gradients), and its torch and JAX ops get their backward from it
(fit_torch.py, fit_jax.py). This file needs Taichi (``pip install 'taichi_aot[build]'``).
(No ``from __future__ import annotations`` here: Taichi reads the annotations.)
"""

import taichi as ti

STEPS, DT, GRAVITY = 50, 0.02, 9.8
AD_STACK_SIZE = 64  # the values each loop carries (STEPS of them) fit Taichi's autodiff stacks: 32 by default
pairs = ti.types.ndarray(dtype=ti.f32, ndim=2, needs_grad=True)  # (projectiles, 2): x and y


@ti.aot.export
@ti.kernel
def shoot(v0: pairs, hit: pairs, drag: ti.f32):
    for i in range(v0.shape[0]):
        x, y, vx, vy = 0.0, 0.0, v0[i, 0], v0[i, 1]
        for _ in range(STEPS):  # loop-carried values: Taichi's adstack keeps them for the reverse pass
            vx -= DT * drag * vx
            vy -= DT * (GRAVITY + drag * vy)
            x += DT * vx
            y += DT * vy
        hit[i, 0] = x
        hit[i, 1] = y
