"""What a wait policy costs the host's CPU while the GPU works (issue "vkwait"): a step of about ``--ms``
milliseconds of device work (launches of examples/physics.tcm's ``step`` over 2^24 floats, queued first), then
``--threads`` threads each waiting for it at once (``rt.wait()``), under each policy in turn; the process's CPU
time across the waits over the threads' wall time, a spinning thread's share of a core (1.0: each waiting thread
kept a core busy).

    python benchmarks/waits_cpu.py [--threads N ...] [--ms MS] [--rounds R]

Target: "auto" at most 0.1 where the waiting threads outnumber the cores this process may use (it sleeps at once
then), and where they do not, on a wait far longer than its learned bound (it polls at most about a millisecond).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import threading
import time

import numpy as np

from taichi_aot import Runtime

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = os.path.join(os.path.dirname(HERE), "examples", "physics.tcm")
N = 1 << 24


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _wait_at(go: threading.Barrier, rt: Runtime) -> None:
    go.wait()
    rt.wait()


def share(policy: str, threads: int, ms: float, rounds: int) -> dict:
    """The CPU share of waiting threads under ``policy`` (the median of ``rounds``), and the step's wall time."""
    with Runtime("vulkan", wait=policy) as rt:
        step = rt.load_module(MODULE).kernels["step"]
        x = rt.ndarray((N,), np.float32)
        t = time.perf_counter()
        for _ in range(20):
            step(x, 0.0)
        rt.wait()
        launches = max(1, int(ms / ((time.perf_counter() - t) * 1e3 / 20)))
        shares, walls = [], []
        for _ in range(rounds):
            for _ in range(launches):
                step(x, 0.0)
            go = threading.Barrier(threads + 1)
            waiters = [threading.Thread(target=_wait_at, args=(go, rt)) for _ in range(threads)]
            for w in waiters:
                w.start()
            go.wait()
            c0, t0 = _cpu(), time.perf_counter()
            for w in waiters:
                w.join()
            wall = time.perf_counter() - t0
            shares.append((_cpu() - c0) / (threads * wall))
            walls.append(wall * 1e3)
        return {"policy": policy, "threads": threads, "launches": launches, "share": sorted(shares)[len(shares) // 2],
                "wait_ms": sorted(walls)[len(walls) // 2]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, nargs="*", default=[1, 2 * len(os.sched_getaffinity(0))])
    p.add_argument("--ms", type=float, default=100.0)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    print(f"cores this process may use: {len(os.sched_getaffinity(0))}")
    for threads in args.threads:
        for policy in ("spin", "auto", "block"):
            print(json.dumps(share(policy, threads, args.ms, args.rounds)), flush=True)


if __name__ == "__main__":
    main()
