"""Rows of ``taichi-aot bench``'s autodiff section: a kernel's reverse-mode kernel as the backward of its torch op,
against its forward, and against torch's autograd doing the same work in plain torch.

The kernel (autodiff_kernels.py) flies ``projectiles`` projectiles 50 steps each under gravity and drag; its
reverse kernel (``shoot_grad``, exported by ``build``) gives the launch velocities' gradients. Measured in one run,
in paired rounds: the op's forward (torch tensors in and a new one out), the op's forward and backward through
autograd, the reverse kernel alone (``Kernel.grad`` on numpy arrays) beside the forward kernel alone, and the same
simulation written in torch (50 steps of tensor arithmetic over every projectile, forward, then forward and
backward). x64 (numpy arrays, torch's CPU tensors) and CUDA (torch's CUDA tensors throughout; the reverse kernel
on taichi_aot's own launcher, which waits for it to check its autodiff stacks): reverse kernels run on taichi_aot's
own launches only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from taichi_aot.enums import Arch
from taichi_aot.errors import NotSupportedError

from .compile import taichi_module
from .harness import ratio, torch_here
from .measure import measure
from .row import Row

if TYPE_CHECKING:
    from .harness import Bench

__all__ = ["autodiff"]

STEPS, DT, GRAVITY, DRAG = 50, 0.02, 9.8, 0.5
FORWARD, REVERSE = "kernel: forward", "kernel.grad: the reverse kernel"
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
    found = torch_here(bench)
    if found is None:
        return {}
    torch, device, sync = found
    from taichi_aot import torch as tt

    op = tt.op(kernel, {"hit": "v0"})
    start = torch.tensor(v0, device=device)
    leaf = start.clone().requires_grad_(True)
    seed = torch.ones_like(start)
    ours, theirs = op(leaf, DRAG), _torch_shoot(torch, leaf)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)  # the same simulation

    def both(f: Callable[[Any], Any]) -> Callable[[], None]:
        def step() -> None:
            leaf.grad = None
            (f(leaf) * seed).sum().backward()
        return step

    return {OP_FORWARD: _no_grad(torch, bench.per_call(lambda: op(start, DRAG), n, sync)),
            OP_BOTH: bench.per_call(both(lambda t: op(t, DRAG)), n, sync),
            TORCH_FORWARD: _no_grad(torch, bench.per_call(lambda: _torch_shoot(torch, start), n, sync)),
            TORCH_BOTH: bench.per_call(both(lambda t: _torch_shoot(torch, t)), n, sync)}


def _no_grad(torch: Any, method: Callable[[], float]) -> Callable[[], float]:
    def timed() -> float:
        with torch.no_grad():
            return method()
    return timed


def _arrays(bench: Bench, v0: np.ndarray) -> tuple[Any, ...] | None:
    """v0, hit, v0's gradient and hit's (the seed) as the kernel takes them here: numpy arrays on x64, torch's
    CUDA tensors on CUDA (None without torch's CUDA)."""
    if bench.rt.arch == Arch.X64:
        return v0, np.zeros_like(v0), np.zeros_like(v0), np.ones_like(v0)
    found = torch_here(bench)
    if found is None:
        return None
    torch = found[0]
    start = torch.tensor(v0, device="cuda")
    return start, torch.zeros_like(start), torch.zeros_like(start), torch.ones_like(start)


def _reversible(bench: Bench) -> Any:
    """The shoot kernel, with what its reverse kernel needs here (llvmlite on x64, PTX on CUDA); None on another arch,
    and, said once in the log, where that is missing."""
    if bench.rt.arch not in (Arch.X64, Arch.CUDA):
        return None
    kernel = bench.rt.load_module(taichi_module("autodiff", bench.name)).kernels["shoot"]
    try:
        kernel.prepare_grad()
    except NotSupportedError as e:
        bench.log(f"  autodiff: no rows on {bench.name}: {e}")
        return None
    return kernel


def autodiff(bench: Bench) -> list[Row]:
    """The autodiff rows on x64 and CUDA (see the module docstring)."""
    rt = bench.rt
    projectiles = 1024 if bench.quick else 4096
    n = 20 if bench.quick else 100
    rounds = 2 if bench.quick else 7
    kernel = _reversible(bench)
    if kernel is None:
        return []
    arrays = _arrays(bench, np.random.default_rng(0).uniform(0.5, 3.0, (projectiles, 2)).astype(np.float32))
    if arrays is None:
        return []
    v0, hit, v0_grad, seed = arrays
    found = torch_here(bench) if rt.arch == Arch.CUDA else None
    sync = found[2] if found is not None else None

    def forward() -> None:
        kernel(v0, hit, DRAG)
        if sync is None:
            rt.wait()

    def reverse() -> None:
        seed[:] = 1.0  # the reverse kernel clears the output's gradient it reads
        kernel.grad(v0, hit, DRAG, grads=(v0_grad, seed))

    methods = {FORWARD: bench.per_call(forward, n, sync), REVERSE: bench.per_call(reverse, n, sync),
               **_torch_methods(bench, kernel, np.asarray(v0.cpu() if sync else v0), n)}
    measured = measure(methods, None, rounds)
    params = {"calls": n, "rounds": rounds, "projectiles": projectiles, "steps": STEPS,
              "arrays": "numpy" if sync is None else "torch (CUDA)"}
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
