"""Fitting a parameter of a differentiable simulation with torch.optim: ``python examples/fit_torch.py`` (needs torch).

``shoot`` (shoot.py, compiled into shoot.tcm with its reverse-mode kernel) flies projectiles under gravity and
drag. Its op's backward is that reverse kernel, so autograd differentiates through the simulation with no
backward written by hand: Adam finds the launch velocities that land each projectile on its target. On a machine
with an NVIDIA GPU (torch's CUDA build) it runs on CUDA, the reverse kernel on taichi_aot's own launcher, where
the module holds a CUDA part (``build ... --arch x64 vulkan cuda``); else on x64.
"""

import os

import torch

import taichi_aot.torch as tt
from taichi_aot import Runtime, metadata

MODULE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shoot.tcm")
DRAG = 0.5

cuda = torch.cuda.is_available() and "cuda" in metadata.read_module(MODULE).parts
device = "cuda" if cuda else "cpu"

with Runtime("cuda" if cuda else "x64") as rt:  # where torch's tensors are
    shoot = tt.op(rt.load_module(MODULE).kernels["shoot"], {"hit": "v0"})  # hit: new each call, shaped like v0
    targets = torch.tensor([[1.0, 0.0], [2.0, 0.5], [0.5, 1.0], [3.0, -0.5]], device=device)
    v0 = torch.ones(4, 2, device=device, requires_grad=True)  # the parameter: launch velocities
    optimizer = torch.optim.Adam([v0], lr=0.2)
    for _ in range(300):
        optimizer.zero_grad()
        loss = ((shoot(v0, DRAG) - targets) ** 2).sum()
        loss.backward()  # through the kernel's reverse-mode kernel
        optimizer.step()
    print(f"loss after 300 steps: {loss.item():.2e}")
    print("converged:", loss.item() < 1e-6)
    print("on", rt.arch.name.lower())
    print("lands at:", [[round(c, 3) + 0.0 for c in p] for p in shoot(v0, DRAG).tolist()])  # + 0.0: no -0.0
