"""Kernels' own GPU time on both CUDA launch paths, apart from what launching them costs: for every kernel of a
folder of modules (``bench --corpus FOLDER``; the test suite's corpus is ``tests/data/cuda-modules.tar.xz``'s
``corpus``), the time the GPU spends in the kernel's tasks, as CUPTI records each task's start and end on the
device (through ``torch.profiler``, which brings CUPTI), on the own launcher and on libtaichi's launch of the same
module, in paired rounds (measure.py). The host's launch cost is out of the figure; a task libtaichi launches and the
own launcher folds away (a serial task that only computes a loop's bound) counts for libtaichi.

Target per kernel: the own launcher's GPU time at most 1.03x libtaichi's (issue "ptxspeed").

The kernels get the arguments :func:`arguments` makes, the same the corpus test gives them."""

from __future__ import annotations

import os
import statistics
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from taichi_aot import metadata
from taichi_aot.enums import NUMPY_DTYPES
from taichi_aot.errors import TaichiError

from .measure import measure
from .row import Row

if TYPE_CHECKING:
    from .harness import Bench

__all__ = ["TARGET", "arguments", "corpus_rows", "value"]

TARGET = 1.03
#: Tasks CUPTI does not time as kernels: the copies and fills around a launch (libtaichi copies its arguments).
_NOT_KERNELS = ("Memcpy", "Memset")


def value(arg: Any, kernel: str, rng: np.random.Generator) -> Any:
    """A value for argument ``arg`` (metadata's ArgInfo) of ``kernel``: an ndarray argument gets ``(numpy array,
    element dimensions)`` of random values (small integers where floats are added atomically, in kernels named
    ``atomic_*``, so any order of the additions gives the same sum); scalars and vectors get values that keep loops
    inside the arrays."""
    if arg.kind == "ndarray":
        dtype = NUMPY_DTYPES[arg.dtype]
        shape = {0: (), 1: (4096,), 2: (64, 48), 3: (8, 6, 5)}[arg.ndim] + tuple(arg.elem_shape)
        if dtype.kind == "f":
            data = (rng.integers(-4, 5, shape) if kernel.startswith("atomic") else rng.standard_normal(shape))
        else:
            data = rng.integers(1, 100, shape)
        return data.astype(dtype), len(arg.elem_shape)
    count = arg.length or 1
    if arg.dtype is not None and NUMPY_DTYPES[arg.dtype].kind == "f":
        vals = [0.75 - 0.5 * k for k in range(count)]
    else:
        vals = [5 + 16 * arg.index + k for k in range(count)]
    if arg.kind == "scalar":
        return vals[0]
    side = round(count ** 0.5)
    return (tuple(tuple(vals[r * side:(r + 1) * side]) for r in range(side)) if len(arg.elem_shape) == 2
            else tuple(vals))


def arguments(rt: Any, info: Any, seed: int) -> list[Any]:
    """The arguments of a call of the kernel ``info`` describes, on runtime ``rt``: :func:`value`'s, its arrays as
    NdArrays of ``rt``."""
    rng = np.random.default_rng(seed)
    out = []
    for arg in info.args:
        v = value(arg, info.name, rng)
        if arg.kind == "ndarray":
            v = rt.ndarray_from_numpy(v[0], elem_ndim=v[1])
        out.append(v)
    return out


def _profiler() -> Any:
    """torch.profiler's ``profile`` and the CUDA activity, or None where torch (and so CUPTI) is not importable."""
    try:
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return None
    return lambda: profile(activities=[ProfilerActivity.CUDA])


def _gpu_us(profile: Callable[[], Any], call: Callable[[], object], launches: int, wait: Callable[[], None],
            seen: set[str]) -> float:
    """Microseconds of GPU time a call of ``call`` takes: the kernels CUPTI saw run during ``launches`` calls (and
    the wait after them), summed, over ``launches``; their names go into ``seen``."""
    with profile() as prof:
        for _ in range(launches):
            call()
        wait()
    total = 0.0
    for event in prof.events():
        if event.device_type.name == "CUDA" and not event.name.startswith(_NOT_KERNELS):
            total += event.device_time  # us
            seen.add(event.name)
    return total / launches


def _kernels(rt: Any, folder: str) -> tuple[dict[str, Any], list[str]]:
    """The kernels of the module in ``folder`` to time, each ``name -> (own kernel, libtaichi's kernel, arguments)``,
    and a line for each left out and why (refused on a path; returning values, which libtaichi's path refuses)."""
    own = rt.load_module(folder, launcher="cuda")
    lib = rt.load_module(folder, launcher="taichi")
    infos = metadata.read_module(folder).kernels
    name = os.path.basename(folder)
    kept, left = {}, []
    for kernel, path in own.launchers().items():
        other = lib.launchers()[kernel]
        if path != "cuda" or other != "taichi":
            why = f"the own launcher's {path}" if path != "cuda" else f"libtaichi's path {other}"
            left.append(f"{name}/{kernel}: {why[:90]}")
            continue
        args = arguments(rt, infos[kernel], 1)
        try:
            for k in (own.kernels[kernel], lib.kernels[kernel]):
                k(*args)
            rt.wait()
        except TaichiError as e:  # libtaichi's own limits (a task named in Cyrillic or Han is not found)
            left.append(f"{name}/{kernel}: {str(e)[:90]}")
            continue
        kept[kernel] = (own.kernels[kernel], lib.kernels[kernel], args)
    return kept, left


def corpus_rows(bench: Bench, folder: str) -> list[Row]:
    """A row per kernel of every module in ``folder``: its GPU time a launch on the own launcher against libtaichi's
    (target :data:`TARGET`), and a summary row (the largest and the median ratio); none where torch.profiler is not
    importable (a line in the log)."""
    profile = _profiler()
    if profile is None:
        bench.log("  launcher: no torch.profiler (CUPTI) here: no corpus kernel-time rows")
        return []
    rt = bench.rt
    launches, rounds = (5, 3) if bench.quick else (20, 7)
    rows: list[Row] = []
    left: list[str] = []
    for module in sorted(os.listdir(folder)):
        kernels, skipped = _kernels(rt, os.path.join(folder, module))
        left += skipped
        for kernel, (own, lib, args) in kernels.items():
            seen: dict[str, set[str]] = {"own": set(), "taichi": set()}

            def timer(k: Any, names: set[str], args: list[Any] = args) -> Callable[[], float]:
                return lambda: _gpu_us(profile, lambda: k(*args), launches, rt.wait, names)
            methods = {"own": timer(own, seen["own"]), "taichi": timer(lib, seen["taichi"])}
            measured = measure(methods, None, rounds, reps=1)
            paired = measured.pair("own", "taichi")
            name = f"corpus GPU time: {module}/{kernel}"
            row = Row("launcher", bench.name, name, "us/launch", measured.bests["own"],
                      params={"launches": launches, "rounds": rounds, "taichi_us": measured.bests["taichi"],
                              "gpu_kernels": {path: sorted(names) for path, names in seen.items()}})
            row.limit = f"taichi: {module}/{kernel}"
            if paired is not None:
                (row.ratio, row.spread) = paired
                row.target, row.met = f"<= {TARGET:g}", row.ratio <= TARGET
            rows.append(row)
    ratios = [r.ratio for r in rows if r.ratio is not None]
    if ratios:
        worst = max(rows, key=lambda r: r.ratio or 0.0)
        summary = Row("launcher", bench.name, f"corpus GPU time: {len(ratios)} kernels, the largest ratio",
                      "ratio", [max(ratios)], ratio=max(ratios), target=f"<= {TARGET:g}", met=max(ratios) <= TARGET,
                      note=f"{worst.name.split(': ', 1)[1]}; median ratio {statistics.median(ratios):.3f}; "
                      f"left out: {'; '.join(left) or 'none'}")
        rows.insert(0, summary)
    return rows
