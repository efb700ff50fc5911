"""``taichi-aot bench``'s startup section: what a fresh process pays before its first result, phase by phase.

Each sample is a new Python process that imports numpy, then taichi_aot, makes a ``Runtime`` of the bench's arch,
loads the bench's module and launches ``tiny`` once, reading its result back; the parent times the process from
its start to its exit. Variants, each its own rows:

* the cache warm (the probe's answer and the module's check kept: a machine's every start after its first);
* a new cache folder each process (a new machine or container: the arch probe and the module's first check run);
* on CUDA, the CUDA driver's cache off as well (``CUDA_CACHE_DISABLE=1``: the PTX compiled anew, as in a new
  container);
* on CUDA, libtaichi's runtime in place of taichi_aot's own (``TAICHI_AOT_CUDA_RUNTIME=taichi``, the cache warm);
* beside them: ``python -c pass`` (the interpreter's own start) and, on CUDA, CuPy: a fresh process importing CuPy,
  loading the same one-line kernel from PTX (``RawModule``), launching it and reading its result; and the floor of a
  CUDA runtime's start: a fresh process's ``cuInit`` and the primary context of device 0 retained (ctypes).

Targets: the statement ``import taichi_aot`` at most 50 ms (``import numpy`` before it is the program's own, as in
every program that hands taichi_aot numpy, torch, JAX or CuPy arrays: a row of its own, in the process's total; what
only building, fetching, probing or a module's reading needs is imported there, not at import); on CUDA, the first
result of a fresh process with a warm cache at most 0.9x CuPy's (whose import brings numpy), and
``Runtime("cuda")`` (the own runtime) at most 1.2x the primary context's floor.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING

from taichi_aot.enums import Arch

from .row import Row

if TYPE_CHECKING:
    from .harness import Bench

__all__ = ["startup"]

IMPORT_TARGET_MS = 50.0
RUNTIME_TARGET = 1.2  # Runtime("cuda") against retaining the primary context, in a fresh process
CUPY_TARGET = 0.9  # a warm start's whole run to its first result against CuPy's from PTX, in the same run
#: A fresh process's phases, printed as JSON (seconds each).
_OURS = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
tn = time.perf_counter()
import taichi_aot
t1 = time.perf_counter()
rt = taichi_aot.Runtime(sys.argv[1])
t2 = time.perf_counter()
mod = rt.load_module(sys.argv[2])
t3 = time.perf_counter()
x = rt.ndarray((16,), np.float32)
mod.kernels["tiny"](x, 1.0)
assert float(x.to_numpy()[0]) == 1.0
t4 = time.perf_counter()
print(json.dumps({"import numpy": tn - t0, "import": t1 - tn, "runtime": t2 - t1, "load": t3 - t2,
                  "first result": t4 - t3}))
"""
#: The floor of a CUDA runtime's start: the driver loaded and initialized, device 0's primary context retained.
_PRIMARY = r"""
import ctypes, json, time
t0 = time.perf_counter()
cu = ctypes.CDLL("libcuda.so.1")
device, context = ctypes.c_int(0), ctypes.c_void_p()
assert cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(device), 0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0
print(json.dumps({"runtime": time.perf_counter() - t0}))
"""
#: The same one-line kernel (x[0] += a) for CuPy, as PTX.
_PTX = r"""
.version 6.2
.target sm_60
.address_size 64
.visible .entry tiny(.param .u64 x, .param .f32 a) {
    .reg .b64 %rd<3>;
    .reg .f32 %f<4>;
    ld.param.u64 %rd1, [x];
    cvta.to.global.u64 %rd2, %rd1;
    ld.param.f32 %f1, [a];
    ld.global.f32 %f2, [%rd2];
    add.f32 %f3, %f2, %f1;
    st.global.f32 [%rd2], %f3;
    ret;
}
"""
_CUPY = r"""
import json, sys, time
t0 = time.perf_counter()
import cupy
t1 = time.perf_counter()
module = cupy.RawModule(path=sys.argv[1])
tiny = module.get_function("tiny")
t2 = time.perf_counter()
x = cupy.zeros(16, cupy.float32)
tiny((1,), (1,), (x, cupy.float32(1.0)))
assert float(x[0]) == 1.0
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "first result": t3 - t2}))
"""


def _fresh(code: str, args: list[str], env: dict[str, str]) -> dict[str, float]:
    """One fresh process running ``code``: its phases (ms) and ``total``, from its start to its exit."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600, env=env)
    total = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"a fresh process failed: {proc.stderr.strip()[-600:]}")
    phases = json.loads(proc.stdout.strip().splitlines()[-1]) if code.strip() != "pass" else {}
    return {**{k: v * 1e3 for k, v in phases.items()}, "total": total * 1e3}


def _samples(count: int, code: str, args: list[str], env: dict[str, str], fresh_cache: bool) -> dict[str, list[float]]:
    """``count`` fresh processes' phases (ms), each with a new cache folder where ``fresh_cache``."""
    out: dict[str, list[float]] = {}
    for _ in range(count):
        with tempfile.TemporaryDirectory(prefix="taichi_aot_bench_cache_") as cache:
            run_env = {**env, "TAICHI_AOT_CACHE": cache} if fresh_cache else env
            for phase, ms in _fresh(code, args, run_env).items():
                out.setdefault(phase, []).append(ms)
    return out


def startup(bench: Bench) -> list[Row]:
    """The section's rows on the bench's arch (module docstring)."""
    count = 3 if bench.quick else 7
    env = {k: v for k, v in os.environ.items() if k not in ("TAICHI_AOT_CACHE",)}
    args = [bench.name, bench.module_path]
    _fresh(_OURS, args, env)  # the user's cache warmed: the rows "warm" start from a machine's second start on
    variants = {"warm cache": _samples(count, _OURS, args, env, False),
                "a new cache": _samples(count, _OURS, args, env, True)}
    if bench.arch == Arch.CUDA:
        variants["warm cache, CUDA driver cache off"] = _samples(count, _OURS, args, {**env, "CUDA_CACHE_DISABLE": "1"},
                                                                 False)
        variants["warm cache, libtaichi's runtime"] = _samples(count, _OURS, args,
                                                               {**env, "TAICHI_AOT_CUDA_RUNTIME": "taichi"}, False)
        variants["primary context"] = _samples(count, _PRIMARY, [], env, False)
    variants["python -c pass"] = _samples(count, "pass", [], env, False)
    params = {"processes": count}
    rows = [Row("startup", bench.name, f"{variant}: {phase}", "ms", samples, params=params)
            for variant, phases in variants.items() for phase, samples in phases.items()]
    by = {r.name: r for r in rows}
    imported = by["warm cache: import"]
    imported.target, imported.met = f"<= {IMPORT_TARGET_MS:.0f}", imported.median <= IMPORT_TARGET_MS
    if bench.arch == Arch.CUDA:
        made, floor = by["warm cache: runtime"], by["primary context: runtime"]
        made.limit, made.ratio = "primary context: runtime", made.median / floor.median
        made.target, made.met = f"<= {RUNTIME_TARGET}", made.ratio <= RUNTIME_TARGET
        rows += _against_cupy(bench, by, env, count, params)
    return rows


def _against_cupy(bench: Bench, by: dict[str, Row], env: dict[str, str], count: int, params: dict) -> list[Row]:
    """CuPy's fresh process beside ours, and our warm start's total against its (target: at most CUPY_TARGET)."""
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(_PTX)
    try:
        cupy = _samples(count, _CUPY, [f.name], env, False)
    except RuntimeError as e:
        bench.log(f"  startup: CuPy skipped ({e})")
        return []
    finally:
        os.unlink(f.name)
    rows = [Row("startup", bench.name, f"CuPy from PTX: {phase}", "ms", samples, params=params)
            for phase, samples in cupy.items()]
    ours = by["warm cache: total"]
    ours.limit = "CuPy from PTX: total"
    ours.ratio = ours.median / statistics.median(cupy["total"])
    ours.target, ours.met = f"<= {CUPY_TARGET}", ours.ratio <= CUPY_TARGET
    return rows
