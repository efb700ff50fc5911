"""Kernels as JAX functions: ``python examples/ops_jax.py`` (needs jax).

``taichi_aot.jax.op`` makes a kernel an XLA FFI custom call: it runs eagerly and inside ``jax.jit`` between XLA's
own ops, XLA allocates the outputs, and the kernel reads XLA's buffers where they lie (x64 here, for JAX on the CPU;
a CUDA runtime for JAX on a GPU). A Python number becomes an attribute of the call; a JAX array an operand.
"""

import os

import jax
import jax.numpy as jnp

import taichi_aot.jax as tj
from taichi_aot import Runtime

MODULE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "physics.tcm")
jax.config.update("jax_default_device", jax.devices("cpu")[0])  # an x64 runtime takes JAX's CPU arrays

with Runtime("x64") as rt:
    mod = rt.load_module(MODULE)
    advance = tj.op(mod.kernels["advance"], {"x": "x"})   # x read and written: aliased to the output
    energy = tj.op(mod.kernels["energy"], {"out": jax.ShapeDtypeStruct((), jnp.float32)})

    x, v = jnp.zeros(8, jnp.float32), jnp.arange(8, dtype=jnp.float32)
    print("advance:", advance(x, v, dt=0.5).tolist())

    @jax.jit
    def step(x, v, dt):                                 # dt traced: an operand, no new compilation per value
        x = advance(jnp.sqrt(x + 1) - 1, v, dt)
        return x, energy(v) + 1.0

    for _ in range(3):
        x, e = step(x, v, jnp.float32(0.5))
    print("jitted: x[7] =", round(float(x[7]), 3), "energy + 1 =", float(e))
