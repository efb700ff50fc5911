"""Soak: many launches, allocations and module loads per backend, and what the process keeps afterwards.

    python benchmarks/soak.py [--arch x64 vulkan] [--launches 100000] [--allocations 10000]
                              [--loads 1000] [--cycles 1000] [--json FILE]

For each backend it reports the process's resident memory (RSS) and open file descriptors before and
after each phase, after a garbage collection; and, each in a fresh process, the RSS growth over module
load/close cycles done by taichi_aot and by the raw C functions alone, side by side. Not a test: the
numbers go into RESULTS.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

import numpy as np

from taichi_aot import Runtime, capi
from taichi_aot_bench.compile import taichi_module


def rss_mib() -> float:
    """Resident memory of this process in MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def open_fds() -> int:
    """Open file descriptors of this process."""
    return len(os.listdir("/proc/self/fd"))


def measure() -> tuple[float, int, int]:
    gc.collect()
    return rss_mib(), open_fds(), capi.live_handle_count()


def soak(arch: str, launches: int, allocations: int, loads: int) -> list[dict]:
    module = taichi_module("bench", arch)
    rows = []

    def phase(name: str, count: int, body) -> None:
        before = measure()
        start = time.perf_counter()
        body()
        seconds = time.perf_counter() - start
        after = measure()
        rows.append({"arch": arch, "phase": name, "count": count, "seconds": round(seconds, 2),
                     "rss_before_mib": round(before[0], 1), "rss_after_mib": round(after[0], 1),
                     "fds_before": before[1], "fds_after": after[1],
                     "handles_before": before[2], "handles_after": after[2]})

    with Runtime(arch) as rt:
        mod = rt.load_module(module)
        tiny = mod.kernels["tiny"]
        x = rt.ndarray((16,), np.float32)
        tiny(x, 1.0)
        rt.wait()

        def launch() -> None:
            for i in range(launches):
                tiny(x, 1.0)
                if i % 1000 == 999:
                    rt.wait()
            rt.wait()

        def allocate() -> None:
            for i in range(allocations):
                with rt.ndarray((256 + i % 7,), np.float32) as y:
                    y.fill(1.0)

        def load() -> None:
            for _ in range(loads):
                m = rt.load_module(module)
                m.kernels["tiny"](x, 1.0)
                m.close()
            rt.wait()

        phase("launches", launches, launch)
        phase("allocations", allocations, allocate)
        phase("module loads", loads, load)
    return rows


#: One child's loop of module load/close cycles: ours (rt.load_module/close) or the raw C functions alone
#: (ti_load_aot_module/ti_destroy_aot_module through the extension, no checks, no object layer).
_CYCLES = """
import gc, json, os, sys
from taichi_aot import Runtime, capi
from taichi_aot._native import lib
arch, module, cycles, raw = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "raw"
def rss():
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
with Runtime(arch) as rt:
    path = module.encode()
    def once():
        if raw:
            m = lib.ti_load_aot_module(rt.handle, path)
            assert m != capi.NULL and lib.ti_get_aot_module_kernel(m, b"tiny") != capi.NULL
            lib.ti_destroy_aot_module(m)
        else:
            m = rt.load_module(module)
            m.kernels["tiny"]
            m.close()
    for _ in range(20):  # warm: caches, the driver's pools
        once()
    before = rss()
    for _ in range(cycles):
        once()
    rt.wait()
    print(json.dumps({"before": before, "after": rss()}))
"""


def module_cycles(arch: str, cycles: int) -> list[dict]:
    """RSS growth over ``cycles`` module load/close cycles, ours and raw C's side by side, each in a fresh
    process: is what a process keeps the library's or ours?"""
    import subprocess

    module = taichi_module("bench", arch)
    rows = []
    for way in ("taichi_aot", "raw"):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", _CYCLES, arch, module, str(cycles), way], capture_output=True,
                             text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append({"arch": arch, "phase": f"load/close, {'raw C' if way == 'raw' else way}", "count": cycles,
                     "seconds": round(time.perf_counter() - start, 2), "rss_before_mib": round(r["before"], 1),
                     "rss_after_mib": round(r["after"], 1), "fds_before": 0, "fds_after": 0,
                     "handles_before": 0, "handles_after": 0})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", nargs="+", default=["x64", "vulkan"])
    parser.add_argument("--launches", type=int, default=100_000)
    parser.add_argument("--allocations", type=int, default=10_000)
    parser.add_argument("--loads", type=int, default=1_000)
    parser.add_argument("--cycles", type=int, default=1_000,
                        help="module load/close cycles in a fresh process, ours and raw C's (0: none)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    rows = []
    print(f"{'arch':<8} {'phase':<13} {'count':>7} {'s':>7} {'RSS MiB before->after':>22} {'fds':>9} {'handles':>9}")
    for arch in args.arch:
        cycles = module_cycles(arch, args.cycles) if args.cycles else []
        for r in soak(arch, args.launches, args.allocations, args.loads) + cycles:
            rows.append(r)
            print(f"{r['arch']:<8} {r['phase']:<13} {r['count']:>7} {r['seconds']:>7} "
                  f"{r['rss_before_mib']:>10} -> {r['rss_after_mib']:<9} {r['fds_before']:>3} -> {r['fds_after']:<3} "
                  f"{r['handles_before']:>3} -> {r['handles_after']:<3}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
