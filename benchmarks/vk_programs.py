"""Whole programs on a GPU's Vulkan: taichi_aot with default ndarrays against Taichi's own Vulkan JIT, same steps.

    python benchmarks/vk_programs.py [--arch vulkan] [--steps 20] [--rounds 5] [--json OUT]

The programs (benchmarks/vk_programs_kernels.py): an MPM-like particle-in-cell step launched as a compute graph,
an SPH-like step of neighbour loops, an FEM-like implicit solve by conjugate gradients (100 small dispatches a
step). Taichi compiles the module and runs its JIT in child processes; this process runs the module with
taichi_aot alone, with the ndarrays a user gets by default, and, beside them, with ``"none"`` and (``--readwrite``,
one step) ``host_access="readwrite"`` (host-visible memory: the default before placement followed the device).
Printed: milliseconds a step (median of the rounds), each against Taichi's JIT (target <= 1.05 for the default),
and each run's checksum of its result (atomic sums make the last digits differ between runs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from vk_programs_common import RESULT, initial, steps, time_steps  # noqa: E402

from taichi_aot import Arch, Runtime  # noqa: E402

TARGET = 1.05
#: What a desktop GPU's Vulkan has (``python -m taichi_aot archs --caps``), as ``build --caps`` takes them.
CAPS = ("spirv_has_int64 spirv_has_float64 spirv_has_atomic_float spirv_has_atomic_float_add "
        "spirv_has_subgroup_basic spirv_has_subgroup_vote spirv_has_subgroup_arithmetic spirv_has_subgroup_ballot")


def child(*args: str) -> str:
    print(f"{time.strftime('%T')} vk_programs_kernels.py {' '.join(args)}", file=sys.stderr, flush=True)
    proc = subprocess.run([sys.executable, os.path.join(HERE, "vk_programs_kernels.py"), *args], stdout=subprocess.PIPE,
                          text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"vk_programs_kernels.py {args[0]} failed (exit code {proc.returncode})")
    return proc.stdout


def run_aot(arch: str, module: str, n: int, rounds: int, host_access: str | None) -> dict:
    """Each program's milliseconds a step and checksum through taichi_aot (``host_access``: None, the default)."""
    access = {} if host_access is None else {"host_access": host_access}
    result = {}
    with Runtime(arch) as rt:
        mod = rt.load_module(module)
        kernels = {name: mod.kernels[name] for name in mod.kernels}
        arrays = {p: {name: rt.ndarray_from_numpy(value, **access) for name, value in named.items()}
                  for p, named in initial().items()}
        for program, step in steps(kernels, arrays, graph=mod.graphs["mpm_substep"]).items():
            print(f"{time.strftime('%T')} taichi_aot ({host_access or 'default'}): {program}", file=sys.stderr,
                  flush=True)
            samples = time_steps(step, rt.wait, n, rounds)
            out = arrays[program][RESULT[program]].to_numpy()
            result[program] = {"ms": samples, "checksum": float(np.abs(out).sum())}
        result["policy"] = rt.device.describe()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="vulkan")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--grids", default="", help="also the default ndarrays with these TAICHI_AOT_VULKAN_GRID "
                        "values (comma-separated, e.g. module,1048576)")
    parser.add_argument("--caps", default=CAPS, help="the device capabilities the module is compiled for (Taichi's "
                        "JIT takes the device's own): without spirv_has_atomic_float_add a float atomic is a "
                        "compare-and-swap loop")
    parser.add_argument("--readwrite", action="store_true", help="also host-visible ndarrays (one step)")
    parser.add_argument("--json")
    args = parser.parse_args()
    module = os.path.join(tempfile.mkdtemp(prefix="vk_programs_"), "module")
    child("build", args.arch, module, *args.caps.split())
    jit = json.loads(child("jit", args.arch, str(args.steps), str(args.rounds)).strip().splitlines()[-1])
    runs = {"default": run_aot(args.arch, module, args.steps, args.rounds, None),
            "none": run_aot(args.arch, module, args.steps, args.rounds, "none")}
    if args.readwrite:  # one step: on a discrete GPU every atomic crosses the bus (minutes at full length)
        runs["readwrite"] = run_aot(args.arch, module, 1, 1, "readwrite")
    for grid in filter(None, args.grids.split(",")):
        os.environ["TAICHI_AOT_VULKAN_GRID"] = grid
        runs[f"grid={grid}"] = run_aot(args.arch, module, args.steps, args.rounds, None)
    os.environ.pop("TAICHI_AOT_VULKAN_GRID", None)
    print(f"{Arch[args.arch.upper()].name}: {runs['default']['policy']}")
    heads = f"{'Taichi JIT ms':>14} {'default ms':>11} {'ratio':>7} {'readwrite':>10} {'none':>7}"
    print(f"{'program':8} {heads}  checksums")
    report = {"jit": jit, "aot": runs, "ratios": {}}
    for program in jit:
        base = statistics.median(jit[program]["ms"])
        med = {k: statistics.median(r[program]["ms"]) for k, r in runs.items()}
        ratios = {k: m / base for k, m in med.items()}
        report["ratios"][program] = ratios
        met = "met" if ratios["default"] <= TARGET else "NOT met"
        sums = ", ".join(f"{r['checksum']:.6g}" for r in [jit[program], *(run[program] for run in runs.values())])
        rw = f"{ratios['readwrite']:9.2f}x" if "readwrite" in ratios else f"{'-':>10}"
        print(f"{program:8} {base:14.3f} {med['default']:11.3f} {ratios['default']:6.2f}x {rw} "
              f"{ratios['none']:6.2f}x  {sums}  (target <= {TARGET}: {met})")
        for k in (k for k in ratios if k.startswith("grid=")):
            print(f"{'':8} default ndarrays, {k}: {med[k]:.3f} ms, {ratios[k]:.2f}x")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
