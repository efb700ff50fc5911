"""Rows of ``taichi-aot bench``'s autodiff section: a kernel's reverse-mode kernel as the backward of its torch op,
against its forward, and against torch's autograd doing the same work in plain torch.

The kernel (autodiff_kernels.py) flies ``projectiles`` projectiles 50 steps each under gravity and drag; its
reverse kernel (``shoot_grad``, exported by ``build``) gives the launch velocities' gradients. Measured in one run,
in paired rounds: the op's forward (torch tensors in and a new one out), the op's forward and backward through
autograd, the reverse kernel alone (``Kernel.grad`` on numpy arrays) beside the forward kernel alone, and the same
simulation written in torch (50 steps of tensor arithmetic over every projectile, forward, then forward and
backward). x64 only: reverse kernels run on taichi_aot's own x64 launch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..enums import Arch
from .bench_harness import ratio
from .bench_measure import measure
from .bench_row import Row
from .cache import taichi_module

if TYPE_CHECKING:
    from .bench_harness import Bench

__all__ = ["autodiff"]

STEPS, DT, GRAVITY, DRAG = 50, 0.02, 9.8, 0.5
FORWARD, REVERSE = "kernel: forward, numpy arrays", "kernel.grad: the reverse kernel, numpy arrays"
OP_FORWARD, OP_BOTH = "torch op: forward", "torch op: forward + backward (the reverse kernel)"
TORCH_FORWARD, TORCH_BOTH = "plain torch: forward", "plain torch: forward + backward (autograd)"


def _torch_shoot(torch: Any, v0: Any) -> Any:
    """The kernel's simulation in torch: every projectile at once, step by step."""
    vx, vy = v0[:, 0], v0[:, 1]
    x, y = torch.zeros_like(vx), torch.zeros_like(vy)
    for _ in range(STEPS):
        vx = vx - DT * DRAG * vx
        vy = vy - DT * (GRAVITY + DRAG * vy)
        x = x + DT * vx
        y = y + DT * vy
    return torch.stack([x, y], 1)


def _torch_methods(bench: Bench, kernel: Any, v0: np.ndarray, n: int) -> dict[str, Callable[[], float]]:
    try:
        import torch

        from .. import torch as tt
    except ImportError:
        return {}
    op = tt.op(kernel, {"hit": "v0"})
    start = torch.tensor(v0)
    leaf = start.clone().requires_grad_(True)
    seed = torch.ones_like(start)
    ours, theirs = op(leaf, DRAG), _torch_shoot(torch, leaf)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)  # the same simulation

    def both(f: Callable[[Any], Any]) -> Callable[[], None]:
        def step() -> None:
            leaf.grad = None
            (f(leaf) * seed).sum().backward()
        return step

    with torch.no_grad():
        forward_ours = bench.per_call(lambda: op(start, DRAG), n)
        forward_theirs = bench.per_call(lambda: _torch_shoot(torch, start), n)
    return {OP_FORWARD: _no_grad(torch, forward_ours), OP_BOTH: bench.per_call(both(lambda t: op(t, DRAG)), n),
            TORCH_FORWARD: _no_grad(torch, forward_theirs),
            TORCH_BOTH: bench.per_call(both(lambda t: _torch_shoot(torch, t)), n)}


def _no_grad(torch: Any, method: Callable[[], float]) -> Callable[[], float]:
    def timed() -> float:
        with torch.no_grad():
            return method()
    return timed


def autodiff(bench: Bench) -> list[Row]:
    """The autodiff rows on x64 (see the module docstring)."""
    rt = bench.rt
    if rt.arch != Arch.X64:
        return []
    projectiles = 1024 if bench.quick else 4096
    n = 20 if bench.quick else 100
    rounds = 2 if bench.quick else 7
    kernel = rt.load_module(taichi_module("autodiff", "x64")).kernels["shoot"]
    v0 = np.random.default_rng(0).uniform(0.5, 3.0, (projectiles, 2)).astype(np.float32)
    hit, v0_grad, seed = np.zeros_like(v0), np.zeros_like(v0), np.ones_like(v0)

    def forward() -> None:
        kernel(v0, hit, DRAG)
        rt.wait()

    def reverse() -> None:
        seed[:] = 1.0  # the reverse kernel clears the output's gradient it reads
        kernel.grad(v0, hit, DRAG, grads=(v0_grad, seed))

    methods = {FORWARD: bench.per_call(forward, n), REVERSE: bench.per_call(reverse, n),
               **_torch_methods(bench, kernel, v0, n)}
    measured = measure(methods, None, rounds)
    params = {"calls": n, "rounds": rounds, "projectiles": projectiles, "steps": STEPS}
    rows = [Row("autodiff", bench.name, k, "us/call", v, params=params) for k, v in measured.bests.items()]
    ratio(rows, REVERSE, FORWARD)
    ratio(rows, TORCH_BOTH, TORCH_FORWARD)
    ratio(rows, OP_BOTH, TORCH_BOTH)  # the same work: the reverse kernel against torch's autograd
    by = {r.name: r for r in rows}
    if OP_BOTH in by and TORCH_BOTH in by:
        by[OP_BOTH].note = f"{by[OP_BOTH].median / by[OP_FORWARD].median:.2f}x its forward"
    if measured.warnings:
        rows[0].note = "; ".join(measured.warnings)
    return rows
