"""A Vulkan wait's cost beside raw Vulkan's: taichi_aot's waits with libtaichi's fences reused (the default) and
made for each submit (TAICHI_AOT_VULKAN_FENCES=0), and the floor of a submit and a wait in raw Vulkan
(benchmarks/vk_raw.c, built here with cc where Vulkan's headers are, or given with --raw).

    python benchmarks/vkwait.py [--device NAME] [--rounds N] [--waits N] [--raw BIN] [--check] [--json F]

Each figure is microseconds a round, the best of 5 runs of ``--rounds`` rounds:
- ``wait``: ``rt.wait()`` with nothing queued;
- ``launch_wait``: a small kernel on NdArrays launched and waited for (examples/physics.tcm's ``step``);
- ``numpy_wait``: the same kernel given a numpy array (copied in and back: a staged host array);
- ``launch64_wait``: 64 launches of it, then a wait (a step of many small kernels);
- ``rss_mb``: what the process grew over ``--waits`` waits.
Raw Vulkan's ``dispatch`` (a command buffer recorded with one dispatch of an empty shader, submitted and waited for)
and ``dispatch_64`` (64 dispatches and barriers) are the floors of a launch and of such a step.
Targets (the issues'): ``wait`` and ``launch_wait`` at most 2x raw Vulkan's reused-fence submit and wait, and
``launch_wait`` at most 1.3x raw Vulkan's ``dispatch``; ``numpy_wait`` at most 3x ``launch_wait``; RSS flat (at most
8 MB) over the waits.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = os.path.join(os.path.dirname(HERE), "examples", "physics.tcm")
CHILD = """
import json, sys, time
import numpy as np
from taichi_aot import Arch, Runtime
from taichi_aot.config import vulkan_fences

rounds, waits, module = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

def best(fn):
    runs = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(rounds):
            fn()
        runs.append((time.perf_counter() - t) / rounds * 1e6)
    return min(runs)

with Runtime(Arch.VULKAN) as rt:
    step = rt.load_module(module).kernels["step"]
    x = rt.ndarray((1024,), np.float32)
    host = np.zeros(1024, np.float32)
    def launch():
        step(x, 0.5)
        rt.wait()
    def staged():
        step(host, 0.5)
        rt.wait()
    def launch64():
        for _ in range(64):
            step(x, 0.5)
        rt.wait()
    for fn in (rt.wait, launch, staged, launch64):
        fn()
    out = {"wait": best(rt.wait), "launch_wait": best(launch), "numpy_wait": best(staged)}
    rounds = max(1, rounds // 10)
    out["launch64_wait"] = best(launch64)
    rt.wait()
    before = rss_mb()
    for _ in range(waits):
        rt.wait()
    out["rss_mb"] = rss_mb() - before
    out["fences"] = vulkan_fences()
print(json.dumps(out))
"""


def _raw(binary: str | None, device: str, rounds: int) -> dict:
    """Raw Vulkan's figures: ``binary`` run, or vk_raw.c built here first."""
    if binary is None:
        cc = shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            return {"error": "no C compiler to build benchmarks/vk_raw.c (give --raw)"}
        binary = os.path.join(tempfile.mkdtemp(prefix="vk_raw_"), "vk_raw")
        built = subprocess.run([cc, "-O2", "-o", binary, os.path.join(HERE, "vk_raw.c"), "-ldl"], capture_output=True,
                               text=True)
        if built.returncode != 0:
            return {"error": "benchmarks/vk_raw.c did not build (Vulkan's headers?): " + built.stderr[-300:]}
    run = subprocess.run([binary, device, str(rounds)], capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        return {"error": run.stderr[-300:]}
    return json.loads(run.stdout)


def _ours(fences: bool, rounds: int, waits: int) -> dict:
    env = {**os.environ, "TAICHI_AOT_VULKAN_FENCES": "1" if fences else "0"}
    run = subprocess.run([sys.executable, "-c", CHILD, str(rounds), str(waits), MODULE], capture_output=True,
                         text=True, env=env, timeout=1200)
    if run.returncode != 0:
        raise SystemExit(f"the taichi_aot run failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="", help="part of the Vulkan device's name, for raw Vulkan (taichi_aot "
                        "takes the library's device: set VK_DRIVER_FILES to make them one)")
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--waits", type=int, default=100_000)
    parser.add_argument("--raw", help="a built vk_raw binary")
    parser.add_argument("--check", action="store_true", help="exit 1 where a target is missed")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    started = time.time()
    raw = _raw(args.raw, args.device, args.rounds)
    pooled = _ours(True, args.rounds, args.waits)
    plain = _ours(False, args.rounds, 0)
    floor = raw.get("reused_fence")
    print(f"Vulkan device: {raw.get('device', '?')}; {args.rounds} rounds, best of 5; us a round")
    print(f"{'':34}{'fences reused':>15}{'fences made':>13}{'raw Vulkan':>12}")
    rows = [("rt.wait(), nothing queued", "wait", "wait_idle"), ("launch + wait (NdArray)", "launch_wait", None),
            ("launch + wait (numpy in and out)", "numpy_wait", None),
            ("64 launches + wait (NdArray)", "launch64_wait", "dispatch_64")]
    for label, key, raw_key in rows:
        raw_text = f"{raw[raw_key]:12.1f}" if raw_key and raw_key in raw else f"{'':12}"
        print(f"{label:34}{pooled[key]:15.1f}{plain[key]:13.1f}{raw_text}")
    if floor is not None:
        print(f"{'raw: submit + wait, fence reused':34}{'':28}{floor:12.1f}")
        print(f"{'raw: libtaichi way (new fence+sem)':34}{'':28}{raw['new_fence_and_semaphore']:12.1f}")
        print(f"{'raw: vkCreateFence + vkDestroyFence':34}{'':28}{raw['create_destroy_fence']:12.2f}")
        if "dispatch" in raw:
            print(f"{'raw: a dispatch recorded + wait':34}{'':28}{raw['dispatch']:12.1f}")
    else:
        print(f"raw Vulkan: {raw.get('error')}")
    ratios = {"wait / raw": pooled["wait"] / floor if floor else None,
              "launch_wait / raw": pooled["launch_wait"] / floor if floor else None,
              "launch_wait / raw dispatch": pooled["launch_wait"] / raw["dispatch"] if "dispatch" in raw else None,
              "64 launches / raw 64 dispatches": (pooled["launch64_wait"] / raw["dispatch_64"]
                                                  if "dispatch_64" in raw else None),
              "numpy_wait / launch_wait": pooled["numpy_wait"] / pooled["launch_wait"]}
    targets = {"wait / raw": 2.0, "launch_wait / raw": 2.0, "launch_wait / raw dispatch": 1.3,
               "64 launches / raw 64 dispatches": None, "numpy_wait / launch_wait": 3.0}
    missed = []
    for name, value in ratios.items():
        if value is None:
            continue
        target = targets[name]
        if target is None:
            print(f"  {name}: {value:.2f}x")
            continue
        ok = value <= target
        missed += [] if ok else [name]
        print(f"  {name}: {value:.2f}x (target {target}x) {'met' if ok else 'MISSED'}")
    rss_ok = pooled["rss_mb"] <= 8
    missed += [] if rss_ok else ["rss"]
    print(f"  RSS over {args.waits} waits: {pooled['rss_mb']:+.1f} MB {'flat' if rss_ok else 'GREW'}; fences made "
          f"{pooled['fences']['made']}, reused {pooled['fences']['reused']}")
    print(f"({time.time() - started:.0f} s)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"raw": raw, "fences_reused": pooled, "fences_made": plain, "ratios": ratios,
                       "missed": missed}, f, indent=1)
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
