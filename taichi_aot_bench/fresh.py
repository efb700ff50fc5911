"""Rows of ``taichi-aot bench``'s interop section for arrays made anew at every call, as PyTorch, CuPy, JAX and numpy
programs make them (an output each step, new inputs, slices of a bigger array), against the same launch with the
arrays passed again, and raw C's floor for an array handed anew (import it, launch; libtaichi_c_api 1.7.4 cannot
release an import).

Every form makes the same arrays in its loop: its reference ("..., again") makes them and leaves them unused,
launching with arrays passed again, so that each ratio is what taking a new array costs the launch, not what the
library costs to make one (both are shown, in us). On
Vulkan, host arrays travel as staged copies: their forms are compared with the launch with NdArrays instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from taichi_aot.enums import CPU_ARCHS, Arch

from .measure import measure
from .row import Row
from .steps import import_loop

if TYPE_CHECKING:
    from .harness import Bench

__all__ = ["fresh"]

#: The targets: a new array at most 1.2x the launch that passes arrays again (zero-copy); a staged copy (Vulkan,
#: host arrays) at most 3x the launch with NdArrays.
SHARED_TARGET, STAGED_TARGET = 1.2, 3.0

Maker = Callable[[int], Any]  # one f32 array of n elements
WAITED = "NdArrays, a wait each call"


def _kinds(arch: Arch) -> list[tuple[str, Maker, bool]]:
    """(label, maker, writable?) of each library here whose arrays a kernel on ``arch`` takes; JAX's are immutable."""
    kinds: list[tuple[str, Maker, bool]] = []
    if arch != Arch.CUDA:
        kinds.append(("numpy", lambda n: np.zeros(n, np.float32), True))
        if arch in CPU_ARCHS:
            try:
                import torch
                kinds.append(("torch CPU", lambda n: torch.zeros(n), True))
            except ImportError:
                pass
        return kinds
    try:
        import torch
        if torch.cuda.is_available():
            kinds.append(("torch CUDA", lambda n: torch.empty(n, device="cuda"), True))
    except ImportError:
        pass
    try:
        import cupy
        kinds.append(("CuPy", lambda n: cupy.empty(n, cupy.float32), True))
    except ImportError:
        pass
    try:
        import jax
        import jax.numpy as jnp
        gpus = [d for d in jax.devices() if d.platform == "gpu"]
        if gpus:
            kinds.append(("JAX", lambda n: jax.device_put(jnp.zeros(n, jnp.float32), gpus[0]), False))
    except (ImportError, RuntimeError):
        pass
    return kinds


Body = Callable[[], object]


def _forms(kind: str, make: Maker, writable: bool, kernel: Any, nd: Any, staged: bool) -> dict[str, tuple[Body, Body]]:
    """Each form of new arrays: (its call, the call of the same launch with the arrays passed again, making the same
    arrays unused). Where the library's arrays are immutable (JAX) the kernel's x is an NdArray and y, z are new;
    so too for staged copies (Vulkan), whose copies only read need no wait."""
    a, b, c = make(16), make(16), make(16)
    big = make(4096)
    if not writable or staged:
        inputs = {"new inputs (y, z)": (lambda: kernel(nd, make(16), make(16), 1.0),
                                        lambda: (make(16), make(16), kernel(nd, b, c, 1.0)))}
    if not writable:
        return {
            "new inputs (y, z)": (lambda: kernel(nd, make(16), make(16), 1.0),
                                  lambda: (make(16), make(16), kernel(nd, b, c, 1.0))),
            "2 slices (y, z)": (lambda: kernel(nd, big[16:32], big[32:48], 1.0),
                                lambda: (big[16:32], big[32:48], kernel(nd, b, c, 1.0))),
        }
    return {
        **(inputs if staged else {}),
        "new output": (lambda: kernel(make(16), b, c, 1.0), lambda: (make(16), kernel(a, b, c, 1.0))),
        "3 new arrays": (lambda: kernel(make(16), make(16), make(16), 1.0),
                         lambda: (make(16), make(16), make(16), kernel(a, b, c, 1.0))),
        "3 slices": (lambda: kernel(big[0:16], big[16:32], big[32:48], 1.0),
                     lambda: (big[0:16], big[16:32], big[32:48], kernel(a, b, c, 1.0))),
    }


def _raw_c(bench: Bench, kernel: Any, nds: list[Any], count: int, n: int) -> Callable[[], float] | None:
    """Raw C's launch of ``count`` arrays handed anew (``taichi_aot_import_steps``: import each, launch), or None
    where this arch imports no memory (Vulkan) or the kernel is on the own CUDA launcher."""
    arch = bench.rt.arch
    if (arch not in CPU_ARCHS and arch != Arch.CUDA) or kernel.launcher == "cuda":
        return None  # the own CUDA launcher takes pointers, never imports: there is no libtaichi loop to compare
    bound = kernel.bind(*nds, 1.0)
    cuda = arch == Arch.CUDA
    if cuda:
        ptrs = [x.__cuda_array_interface__["data"][0] for x in nds[:count]]
    else:
        ptrs = [x.host_span()[0] for x in nds[:count]]
    loop = import_loop(bound, ptrs, count, nds[0].nbytes, cuda)
    return lambda: loop(n) * 1e6


def _waited(kernel: Any, nds: list[Any], rt: Any) -> Body:
    def launch_and_wait() -> None:
        kernel(nds[0], nds[1], nds[2], 1.0)
        rt.wait()
    return launch_and_wait


def _methods(bench: Bench, tiny3: Any, nds: list[Any], n: int, staged: bool
             ) -> tuple[dict[str, Callable[[], float]], list[tuple[str, str, str]]]:
    """What the section times (name -> us per launch), and (form, its reference, target) of each form."""
    methods: dict[str, Callable[[], float]] = {"NdArrays passed again": bench.per_call(
        lambda: tiny3(nds[0], nds[1], nds[2], 1.0), n)}
    if staged:  # what a right result of a written copy needs at least: the launch, and a wait
        methods[WAITED] = bench.per_call(_waited(tiny3, nds, bench.rt), n)
    for count in (1, 3):
        raw = _raw_c(bench, tiny3, nds, count, n)
        if raw is not None:
            methods[f"raw C: import {count}, launch"] = raw
    compared: list[tuple[str, str, str]] = []
    for kind, make, writable in _kinds(bench.rt.arch):
        try:
            forms = _forms(kind, make, writable, tiny3, nds[0], staged)
        except Exception as e:  # the library cannot allocate here
            bench.log(f"  interop: {kind} new arrays skipped ({type(e).__name__}: {e})")
            continue
        m = n if writable else max(n // 20, 50)  # a JAX array costs about a millisecond to make
        for form, (call, again) in forms.items():
            name, reference = f"{kind}: {form}", f"{kind}: {form}, again"
            methods[name] = bench.per_call(call, m)
            if staged:
                compared.append((name, "NdArrays passed again", f"<= {STAGED_TARGET:g}"))
            else:
                methods[reference] = bench.per_call(again, m)
                compared.append((name, reference, f"<= {SHARED_TARGET:g}"))
    return methods, compared


def fresh(bench: Bench) -> list[Row]:
    """The rows of new arrays on this arch (see the module docstring)."""
    arch = bench.rt.arch
    staged = arch not in CPU_ARCHS and arch != Arch.CUDA
    n = (100 if bench.quick else 600) if staged else (300 if bench.quick else 3000)
    rounds = 2 if bench.quick else 11
    tiny3 = bench.mod.kernels["tiny3"].declare_access({1: "read", 2: "read"})
    nds = [bench.rt.ndarray((16,), np.float32) for _ in range(3)]
    methods, compared = _methods(bench, tiny3, nds, n, staged)
    measured = measure(methods, None, rounds)
    params = {"launches": n, "rounds": rounds, "elements": 16}
    rows = [Row("interop", bench.name, f"new arrays: {k}", "us/launch", v, params=params)
            for k, v in measured.bests.items()]
    by = {r.name.removeprefix("new arrays: "): r for r in rows}
    for name, reference, target in compared:
        paired = measured.pair(name, reference)
        if paired is None:
            continue
        row = by[name]
        row.limit, (row.ratio, row.spread) = f"new arrays: {reference}", paired
        row.target, row.met = target, row.ratio <= float(target.split()[-1])
        if staged and WAITED in by:
            row.note = f"{row.median / by[WAITED].median:.2f}x {WAITED}"
    if measured.warnings:
        rows[0].note = "; ".join(measured.warnings)
    for nd in nds:
        nd.close()
    return rows
