"""Fitting a parameter of a differentiable simulation with optax: ``python examples/fit_jax.py`` (needs JAX and
optax).

``shoot`` (shoot.py, compiled into shoot.tcm with its reverse-mode kernel) flies projectiles under gravity and
drag. Its JAX op's VJP is that reverse kernel, so ``jax.grad`` differentiates through the simulation inside a
jitted training step, with no backward written by hand: Adam finds the launch velocities that land each projectile
on its target. With JAX's CUDA build on an NVIDIA GPU it runs on CUDA (the reverse kernel an op of its own on
XLA's stream) where the module holds a CUDA part; else on x64, JAX's arrays in host memory.
"""

import os

import jax
import jax.numpy as jnp
import optax

import taichi_aot.jax as tj
from taichi_aot import Runtime, metadata

MODULE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shoot.tcm")
DRAG = 0.5
gpus = [d for d in jax.devices() if d.platform == "gpu"]
cuda = bool(gpus) and "cuda" in metadata.read_module(MODULE).parts

with Runtime("cuda" if cuda else "x64") as rt, jax.default_device(gpus[0] if cuda else jax.devices("cpu")[0]):
    shoot = tj.op(rt.load_module(MODULE).kernels["shoot"], {"hit": "v0"})  # hit: new each call, shaped like v0
    targets = jnp.array([[1.0, 0.0], [2.0, 0.5], [0.5, 1.0], [3.0, -0.5]])
    optimizer = optax.adam(0.2)

    def loss(v0):
        return jnp.sum((shoot(v0, DRAG) - targets) ** 2)

    @jax.jit
    def step(v0, state):
        value, grad = jax.value_and_grad(loss)(v0)  # through the kernel's reverse-mode kernel
        updates, state = optimizer.update(grad, state)
        return optax.apply_updates(v0, updates), state, value

    v0 = jnp.ones((4, 2))  # the parameter: launch velocities
    state = optimizer.init(v0)
    for _ in range(300):
        v0, state, value = step(v0, state)
    final = float(loss(v0))
    print(f"loss after 300 steps: {final:.2e}")
    print("converged:", final < 1e-6)
    print("on", rt.arch.name.lower())
    print("lands at:", [[round(float(c), 3) + 0.0 for c in p] for p in shoot(v0, DRAG)])  # + 0.0: no -0.0
