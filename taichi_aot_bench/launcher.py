"""``taichi-aot bench``'s launcher section (CUDA): taichi_aot's own CUDA launcher beside libtaichi's path and CuPy's
``RawKernel``, measured in one run, round by round (measure.py).

* ``saxpy`` over 4096 f32 with NdArrays, torch and CuPy arrays passed again: the own launcher against CuPy's
  ``RawKernel`` doing the same work in one launch (target: at most 1.2x each) and against libtaichi's path (the
  same module loaded with ``cuda_launcher="taichi"``); torch's own op (``torch.add(out=)``) beside them;
* a new output each call: made in the loop (``cupy.empty``, ``torch.empty``) against CuPy's ``RawKernel`` with a
  new ``cupy.empty`` output each call (target: at most 1.1x), torch's ``torch.add`` beside them; and made before
  the loop, each passed once, against arrays passed again (target: at most 1.1x), on both paths;
* the simulation's step, its four kernels called one by one from Python (``sim_kernels.py``), on both paths
  (target: the own launcher's below libtaichi's);
* a kernel's own time, apart from its launch: an n-body force kernel (``bench_kernels.py``'s ``nbody``, O(n^2)
  work: a launch costs microseconds of its milliseconds) on both paths, a few launches and a wait, ms a launch
  (target: the own launcher's code at most 1.03x libtaichi's);
* with ``--corpus FOLDER``, every kernel of those modules: its GPU time on both paths, as CUPTI records it
  (kernel_time.py; target: at most 1.03x libtaichi's each).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from taichi_aot.enums import Arch

from .compile import taichi_module
from .measure import measure
from .row import Row
from .sim import DT, GRAVITY, GRID, PARTICLES

if TYPE_CHECKING:
    from .harness import Bench

__all__ = ["launcher"]

N = 4096
CUPY_TARGET, NEW_TARGET, SIM_TARGET, KERNEL_TARGET = 1.2, 1.1, 1.0, 1.03
BODIES = 8192  # the n-body kernel's bodies: about 0.5 ms a launch on an H200
_SAXPY = r"""extern "C" __global__ void saxpy(const float* x, float* y, float a, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a * x[i] + y[i];
}"""


def _call(kernel: Any, x: Any, y: Any) -> Callable[[], object]:
    return lambda: kernel(x, y, 0.5)


def _cupy(bench: Bench, n: int) -> dict[str, Callable[[], float]]:
    """CuPy's ``RawKernel`` doing saxpy's work in one launch: arrays passed again, and a new ``cupy.empty`` output
    each call."""
    try:
        import cupy
    except ImportError:
        return {}
    kernel = cupy.RawKernel(_SAXPY, "saxpy")
    x, y = cupy.ones(N, cupy.float32), cupy.zeros(N, cupy.float32)
    a, count = np.float32(0.5), np.int32(N)
    sync = cupy.cuda.Device().synchronize
    return {"CuPy RawKernel: saxpy": bench.per_call(lambda: kernel((N // 128,), (128,), (x, y, a, count)), n, sync),
            "CuPy RawKernel: a new output each call": bench.per_call(
                lambda: kernel((N // 128,), (128,), (x, cupy.empty(N, cupy.float32), a, count)), n, sync)}


def _torch_op(bench: Bench, n: int) -> dict[str, Callable[[], float]]:
    """torch's own op for saxpy's work: ``torch.add(y, x, alpha=a)`` into ``y`` and into a new tensor."""
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    x, y = torch.ones(N, device="cuda"), torch.zeros(N, device="cuda")
    return {"torch.add(out=): saxpy": bench.per_call(lambda: torch.add(y, x, alpha=0.5, out=y), n),
            "torch.add: a new output each call": bench.per_call(lambda: torch.add(y, x, alpha=0.5), n)}


def _makers(empty: bool = False) -> dict[str, Callable[[], Any]]:
    """Each library here whose CUDA arrays kernels take: a maker of one f32 array of N elements (zeroed, or
    ``empty`` as each library's cheapest)."""
    makers: dict[str, Callable[[], Any]] = {}
    try:
        import torch
        if torch.cuda.is_available():
            makers["torch"] = ((lambda: torch.empty(N, device="cuda")) if empty else
                               (lambda: torch.zeros(N, device="cuda")))
    except ImportError:
        pass
    try:
        import cupy
        makers["CuPy"] = (lambda: cupy.empty(N, cupy.float32)) if empty else (lambda: cupy.zeros(N, cupy.float32))
    except ImportError:
        pass
    return makers


def _array_forms(bench: Bench, saxpy: dict[str, Any], n: int) -> dict[str, Callable[[], float]]:
    methods = {}
    for lib, make in _makers().items():
        x, y = make(), make()
        for path, kernel in saxpy.items():
            methods[f"{path}: {lib} arrays again"] = bench.per_call(_call(kernel, x, y), n)

            def new_output(k: Any = kernel, make: Callable[[], Any] = make, x: Any = x) -> float:
                outs = [make() for _ in range(n)]  # made before the clock starts
                it = iter(outs)
                return bench.per_call(lambda: k(x, next(it), 0.5), n)()
            methods[f"{path}: a new {lib} output each call"] = new_output
            def made_each_call(k: Any = kernel, x: Any = x, made: Callable[[], Any] = _makers(empty=True)[lib]) -> None:
                k(x, made(), 0.5)
            methods[f"{path}: a new {lib} output made each call"] = bench.per_call(made_each_call, n)
    return methods


def _simulation(bench: Bench, steps: int) -> dict[str, Callable[[], float]]:
    rt = bench.rt
    path = taichi_module("sim", "cuda")
    rng = np.random.default_rng(0)
    x = rt.ndarray_from_numpy(rng.uniform(0.2, 0.8, (PARTICLES, 2)).astype(np.float32))
    v = rt.ndarray_from_numpy(rng.uniform(-1.0, 1.0, (PARTICLES, 2)).astype(np.float32))
    gv, gm = rt.ndarray((GRID, GRID, 2), np.float32), rt.ndarray((GRID, GRID), np.float32)
    methods = {}
    for launcher in ("own", "taichi"):
        k = rt.load_module(path, launcher="auto" if launcher == "own" else launcher).kernels
        clear, p2g, update, g2p = k["clear_grid"], k["p2g"], k["grid_update"], k["g2p"]

        def step(clear: Any = clear, p2g: Any = p2g, update: Any = update, g2p: Any = g2p) -> None:
            clear(gv, gm)
            p2g(x, v, gv, gm)
            update(gv, gm, DT, GRAVITY)
            g2p(x, v, gv, DT)
        methods[f"{launcher}: simulation step (4 kernels)"] = bench.per_call(step, steps)
    return methods


def _kernel_time(bench: Bench, paths: dict[str, Any], quick: bool) -> list[Row]:
    """The n-body kernel's time a launch on each path (``paths``: "own" and "taichi" -> the module loaded so), ms,
    in paired rounds; none where the module has no such kernel (one compiled before it had it)."""
    if "nbody" not in bench.mod.kernels:
        bench.log("  launcher: the bench module has no nbody kernel: no kernel-time rows")
        return []
    rt = bench.rt
    p = rt.ndarray_from_numpy(np.random.default_rng(0).standard_normal((BODIES, 3)).astype(np.float32), elem_ndim=1)
    f = rt.ndarray((BODIES,), np.float32, (3,))
    launches, rounds = (3, 3) if quick else (10, 9)
    def launch(kernel: Any) -> Callable[[], object]:
        return lambda: kernel(p, f, BODIES)
    methods = {f"{path}: n-body kernel ({BODIES} bodies)": bench.per_call(launch(mod.kernels["nbody"]), launches)
               for path, mod in paths.items()}
    measured = measure(methods, None, rounds)
    params = {"launches": launches, "rounds": rounds, "bodies": BODIES}
    rows = {k: Row("launcher", bench.name, k, "ms/launch", [v / 1e3 for v in samples], params=params)
            for k, samples in measured.bests.items()}
    own, lib = (f"{path}: n-body kernel ({BODIES} bodies)" for path in ("own", "taichi"))
    paired = measured.pair(own, lib)
    if paired is not None:
        row = rows[own]
        row.limit, (row.ratio, row.spread) = lib, paired
        row.target, row.met = f"<= {KERNEL_TARGET:g}", row.ratio <= KERNEL_TARGET
    return list(rows.values())


def launcher(bench: Bench) -> list[Row]:
    """The rows of the launcher section on CUDA (none elsewhere: the own launcher is CUDA's)."""
    if bench.rt.arch != Arch.CUDA:
        return []
    n, rounds = (500, 3) if bench.quick else (5000, 9)
    paths = {"own": bench.mod, "taichi": bench.rt.load_module(bench.module_path, launcher="taichi")}
    saxpy = {path: mod.kernels["saxpy"] for path, mod in paths.items()}
    if bench.mod.launchers()["saxpy"] != "cuda":
        bench.log(f"  launcher: the bench module has no PTX ({bench.mod.launchers()['saxpy']}); both rows are "
                  "libtaichi's")
    x, y = bench.rt.ndarray((N,), np.float32), bench.rt.ndarray((N,), np.float32)
    methods: dict[str, Callable[[], float]] = {
        f"{path}: saxpy, NdArrays again": bench.per_call(_call(k, x, y), n) for path, k in saxpy.items()}
    methods.update(_cupy(bench, n))
    methods.update(_torch_op(bench, n))
    methods.update(_array_forms(bench, saxpy, n))
    methods.update(_simulation(bench, n // 10))
    measured = measure(methods, None, rounds)
    params = {"launches": n, "rounds": rounds, "elements": N}
    rows = {k: Row("launcher", bench.name, k, "us/launch" if "simulation" not in k else "us/step", v, params=params)
            for k, v in measured.bests.items()}
    compared = [("own: saxpy, NdArrays again", "CuPy RawKernel: saxpy", f"<= {CUPY_TARGET:g}"),
                ("taichi: saxpy, NdArrays again", "own: saxpy, NdArrays again", None),
                ("own: simulation step (4 kernels)", "taichi: simulation step (4 kernels)", f"< {SIM_TARGET:g}")]
    for lib in _makers():
        compared += [(f"own: {lib} arrays again", "CuPy RawKernel: saxpy", f"<= {CUPY_TARGET:g}"),
                     (f"own: a new {lib} output made each call", "CuPy RawKernel: a new output each call",
                      f"<= {NEW_TARGET:g}"),
                     (f"own: a new {lib} output each call", f"own: {lib} arrays again", f"<= {NEW_TARGET:g}"),
                     (f"taichi: a new {lib} output each call", f"taichi: {lib} arrays again", None)]
    compared += [("torch.add(out=): saxpy", "CuPy RawKernel: saxpy", None),
                 ("torch.add: a new output each call", "CuPy RawKernel: a new output each call", None)]
    for name, reference, target in compared:
        paired = measured.pair(name, reference)
        if paired is None:
            continue
        row = rows[name]
        row.limit, (row.ratio, row.spread) = reference, paired
        if target is not None:
            bound = float(target.split()[-1])
            row.target, row.met = target, row.ratio <= bound if target.startswith("<=") else row.ratio < bound
    out = list(rows.values())
    if measured.warnings:
        out[0].note = "; ".join(measured.warnings)
    out += _kernel_time(bench, paths, bench.quick)
    if bench.corpus:
        from .kernel_time import corpus_rows

        out += corpus_rows(bench, bench.corpus)
    return out
