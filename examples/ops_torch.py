"""Kernels as PyTorch operators: ``python examples/ops_torch.py`` (needs torch).

``taichi_aot.torch.op`` makes a kernel a ``torch.library`` custom op: torch allocates its outputs, the kernel reads
and writes torch's memory without a copy (x64 here; CUDA too), and ``torch.compile(fullgraph=True)`` traces it with
no graph break. ``advance`` reads and writes x (so x is an input and an output), ``energy`` only adds into out.
"""

import os

import torch

import taichi_aot.torch as tt
from taichi_aot import Runtime

MODULE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "physics.tcm")

with Runtime("x64") as rt:                            # ops run where torch's memory is: x64 for CPU tensors
    mod = rt.load_module(MODULE)
    advance = tt.op(mod.kernels["advance"], {"x": "x"})  # x read and written: taken in, returned anew
    energy = tt.op(mod.kernels["energy"], {"out": ((), torch.float32)})  # out: a new 0-d tensor, zero-filled

    x, v = torch.zeros(8), torch.arange(8.0)
    print("advance:", advance(x, v, dt=0.5).tolist())   # x itself is left as it was

    @torch.compile(fullgraph=True)
    def step(x, v):
        x = advance(x, v, 0.25)
        return x, energy(v * 2)

    x2, e = step(x, v)
    print("compiled: x[7] =", float(x2[7]), "energy =", float(e))
