"""Whole programs on a GPU's Vulkan: taichi_aot with default ndarrays against Taichi's own Vulkan JIT, same steps.

    python benchmarks/vk_programs.py [--arch vulkan] [--steps 20] [--rounds 5] [--json OUT]
    python benchmarks/vk_programs.py --arch cuda --launchers [--profile]

The programs (benchmarks/vk_programs_kernels.py): an MPM-like particle-in-cell step launched as a compute graph,
SPH-like steps of neighbour loops (2-D, and a fuller one in 3-D over vec3 ndarrays), an FEM-like implicit solve by
conjugate gradients (100 small dispatches a step), an n-body step (all pairs, four substeps). Taichi compiles the
module and runs its JIT in child processes; this process runs the module with taichi_aot alone, with the ndarrays
a user gets by default, and, beside them, with ``"none"`` and (``--readwrite``, one step)
``host_access="readwrite"`` (host-visible memory: the default before placement followed the device).
Printed: milliseconds a step (median of the rounds), each against Taichi's JIT (target <= 1.05 for the default),
and each run's checksum of its result (atomic sums make the last digits differ between runs).

On CUDA, ``--launchers`` runs the module on libtaichi's launch too (``launcher="taichi"``) and sets the own
launcher's step against it (target <= 1.03, issue "cudart2"); ``--profile`` adds each kernel's GPU time a step on both
launch paths, as CUPTI records it (through ``torch.profiler``), to find the kernel a difference comes from.
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

from vk_programs_common import ELEM_NDIM, RESULT, initial, steps, time_steps  # noqa: E402

from taichi_aot import Arch, Runtime  # noqa: E402

TARGET = 1.05
#: The own CUDA launcher's step against libtaichi's launch of the same module.
LAUNCH_TARGET = 1.03
#: What a desktop GPU's Vulkan has (``python -m taichi_aot archs --caps``), as ``build --caps`` takes them.
CAPS = ("spirv_has_int64 spirv_has_float64 spirv_has_atomic_float spirv_has_atomic_float_add "
        "spirv_has_subgroup_basic spirv_has_subgroup_vote spirv_has_subgroup_arithmetic spirv_has_subgroup_ballot")


def child(*args: str) -> str:
    print(f"{time.strftime('%T')} vk_programs_kernels.py {' '.join(args)}", file=sys.stderr, flush=True)
    env = dict(os.environ)
    if args[1] == "cuda":  # Taichi 1.7.4's CUDA compiler and JIT on one GPU (several confuse its contexts)
        env.setdefault("CUDA_VISIBLE_DEVICES", "0")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "vk_programs_kernels.py"), *args], stdout=subprocess.PIPE,
                          text=True, timeout=900, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"vk_programs_kernels.py {args[0]} failed (exit code {proc.returncode})")
    return proc.stdout


def gpu_times(step, sync, n: int) -> dict:
    """Microseconds of GPU time a step of ``step`` spends in each kernel (CUPTI's name), over ``n`` steps."""
    from torch.profiler import ProfilerActivity, profile

    totals: dict = {}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        sync()
    for event in prof.events():
        if event.device_type.name == "CUDA" and not event.name.startswith(("Memcpy", "Memset")):
            totals[event.name] = totals.get(event.name, 0.0) + event.device_time / n
    return totals


def run_aot(arch: str, module: str, n: int, rounds: int, host_access: str | None, launcher: str | None = None,
            profile: bool = False) -> dict:
    """Each program's milliseconds a step and checksum through taichi_aot (``host_access``: None, the default;
    ``launcher``: the module's launch path, None the default); with ``profile``, each kernel's GPU time a step."""
    access = {} if host_access is None else {"host_access": host_access}
    result = {}
    with Runtime(arch) as rt:
        mod = rt.load_module(module) if launcher is None else rt.load_module(module, launcher=launcher)
        kernels = {name: mod.kernels[name] for name in mod.kernels}
        arrays = {p: {name: rt.ndarray_from_numpy(value, ELEM_NDIM.get((p, name), 0), **access)
                      for name, value in named.items()}
                  for p, named in initial().items()}
        for program, step in steps(kernels, arrays, graph=mod.graphs["mpm_substep"]).items():
            print(f"{time.strftime('%T')} taichi_aot ({host_access or 'default'}): {program}", file=sys.stderr,
                  flush=True)
            samples = time_steps(step, rt.wait, n, rounds)
            out = arrays[program][RESULT[program]].to_numpy()
            result[program] = {"ms": samples, "checksum": float(np.abs(out).sum())}
            if profile:
                result[program]["gpu_us"] = gpu_times(step, rt.wait, n)
        result["policy"] = rt.device.describe()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="vulkan")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--grids", default="", help="also the default ndarrays with these TAICHI_AOT_VULKAN_GRID "
                        "values (comma-separated, e.g. module,1048576)")
    parser.add_argument("--launchers", action="store_true", help="CUDA: also libtaichi's launch of the module")
    parser.add_argument("--profile", action="store_true", help="CUDA: each kernel's GPU time on each launch path")
    parser.add_argument("--caps", default=None, help="the device capabilities the module is compiled for (Taichi's "
                        "JIT takes the device's own): without spirv_has_atomic_float_add a float atomic is a "
                        "compare-and-swap loop (default: a desktop GPU's on Vulkan, none elsewhere)")
    parser.add_argument("--readwrite", action="store_true", help="also host-visible ndarrays (one step)")
    parser.add_argument("--json")
    args = parser.parse_args()
    module = os.path.join(tempfile.mkdtemp(prefix="vk_programs_"), "module")
    caps = args.caps if args.caps is not None else (CAPS if args.arch == "vulkan" else "")
    child("build", args.arch, module, *caps.split())
    jit = json.loads(child("jit", args.arch, str(args.steps), str(args.rounds)).strip().splitlines()[-1])
    runs = {"default": run_aot(args.arch, module, args.steps, args.rounds, None, profile=args.profile),
            "none": run_aot(args.arch, module, args.steps, args.rounds, "none")}
    if args.launchers:
        runs["libtaichi"] = run_aot(args.arch, module, args.steps, args.rounds, None, "taichi", args.profile)
    if args.readwrite:  # one step: on a discrete GPU every atomic crosses the bus (minutes at full length)
        runs["readwrite"] = run_aot(args.arch, module, 1, 1, "readwrite")
    for grid in filter(None, args.grids.split(",")):
        os.environ["TAICHI_AOT_VULKAN_GRID"] = grid
        runs[f"grid={grid}"] = run_aot(args.arch, module, args.steps, args.rounds, None)
    os.environ.pop("TAICHI_AOT_VULKAN_GRID", None)
    print(f"{Arch[args.arch.upper()].name}: {runs['default']['policy']}")
    report = {"jit": jit, "aot": runs, "ratios": {}}
    table(jit, runs, report)
    if "libtaichi" in runs:
        launch_paths(runs, report)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)


def table(jit: dict, runs: dict, report: dict) -> None:
    """Each program's step against Taichi's JIT, printed, its ratios into ``report``."""
    heads = f"{'Taichi JIT ms':>14} {'default ms':>11} {'ratio':>7} {'readwrite':>10} {'none':>7}"
    print(f"{'program':8} {heads}  checksums")
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


def launch_paths(runs: dict, report: dict) -> None:
    """The own launcher's step against libtaichi's launch of the same module, and where profiled, each kernel's GPU
    time on both (printed, and into ``report``)."""
    own, lib = runs["default"], runs["libtaichi"]
    report["launch_paths"] = {}
    for program in (p for p in own if p != "policy"):
        ratio = statistics.median(own[program]["ms"]) / statistics.median(lib[program]["ms"])
        met = "met" if ratio <= LAUNCH_TARGET else "NOT met"
        report["launch_paths"][program] = ratio
        print(f"{program:8} own launcher {statistics.median(own[program]['ms']):.3f} ms, libtaichi's launch "
              f"{statistics.median(lib[program]['ms']):.3f} ms: {ratio:.3f}x (target <= {LAUNCH_TARGET}: {met})")
        mine, theirs = own[program].get("gpu_us", {}), lib[program].get("gpu_us", {})
        for name in sorted(set(mine) | set(theirs), key=lambda k: -max(mine.get(k, 0.0), theirs.get(k, 0.0))):
            a, b = mine.get(name, 0.0), theirs.get(name, 0.0)
            share = f"{a / b:.3f}x" if a and b else "-"
            print(f"{'':8} GPU us a step {a:9.1f} own {b:9.1f} libtaichi {share:>7}  {name[:70]}")


if __name__ == "__main__":
    main()
