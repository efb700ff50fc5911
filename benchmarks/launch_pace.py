"""Launches of the bench's ``tiny`` kernel at length, three ways, each then waited for, with the own Vulkan state's
counts: the extension's C loop (the launch rows' raw C), a recorded sequence's replay, and a pre-bound launch in a
Python loop. The bench's launch rows time short runs; this shows where the ways meet once the GPU sets the pace.

    python benchmarks/launch_pace.py [--arch vulkan] [--launches 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

import numpy as np

from taichi_aot import Arch, Runtime
from taichi_aot_bench.compile import taichi_module
from taichi_aot_bench.steps import c_loop

COUNTED = ("submits", "fence waits", "waits polled", "waits blocked")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--arch", default="vulkan")
    parser.add_argument("--launches", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n = args.launches
    with Runtime(Arch[args.arch.upper()]) as rt:
        tiny = rt.load_module(taichi_module("bench", args.arch)).kernels["tiny"]
        x = rt.ndarray((16,), np.float32, host_access="none")
        with rt.record() as seq:
            tiny(x, 1.0)
        loop = c_loop([tiny.bind(x, 1.0)])
        launch = tiny.bind(x, 1.0).launch

        def timed(run: Callable[[], object]) -> float:
            t0 = time.perf_counter()
            run()
            rt.wait()
            return (time.perf_counter() - t0) / n * 1e6

        def prebound() -> None:
            for _ in range(n):
                launch()

        ways: dict[str, Callable[[], float]] = {
            "raw C": lambda: loop(n, 0) * 1e6, "replay": lambda: timed(lambda: seq.replay(n)),
            "pre-bound": lambda: timed(prebound)}
        for _ in range(args.rounds):
            for name, way in ways.items():
                counts = getattr(rt.device, "counts", dict)
                before = counts()
                us = way()
                after = counts()
                moved = {k: after[k] - before[k] for k in COUNTED if after.get(k, 0) - before.get(k, 0)}
                print(f"{name:10s} {us:.2f} us a launch {moved}", flush=True)


if __name__ == "__main__":
    main()
