"""Where threads sharing a runtime spend their time: four threads, each rounds of FEW launches of the bench's ``tiny``
kernel on an ndarray of its own and a value (``to_numpy``), against one thread doing all the rounds in turn; per
round, the time in the launches (Python's lock held, or waited for) and in the value, one thread's and the four's;
the own Vulkan state's counts over the runs (submissions, waits polled and blocked, launches that let Python's lock
go). A tool for the next step of the sharing rows (issue "vkwait"): the bench's sharing section gives the ratio
alone, ``threads_floor.py`` its model.

    python benchmarks/threads_probe.py [--arch vulkan cuda x64] [--wait auto block] [--few 10] [--each 400]
        [--pairs 3]
"""

from __future__ import annotations

import argparse
import functools
import time
from typing import Any

import numpy as np

from taichi_aot_bench.sharing import THREADS, in_turn, together


def _rounds(tiny: Any, x: Any, few: int, each: int, spent: list[float]) -> None:
    """``each`` launches of ``tiny`` on ``x``, a value every ``few``, each checked; the seconds in the launches and
    in the values added to ``spent``."""
    done = int(x.to_numpy()[0])
    for _ in range(each // few):
        t0 = time.perf_counter()
        for _ in range(few):
            tiny(x, 1.0)
        t1 = time.perf_counter()
        got = x.to_numpy()[0]
        spent[0] += t1 - t0
        spent[1] += time.perf_counter() - t1
        done += few
        if got != done:  # tiny adds its scalar to every element
            raise AssertionError(f"{got} after {done} launches")


def probe(arch: str, policy: str, few: int, each: int, pairs: int) -> None:
    from taichi_aot import Arch, Runtime
    from taichi_aot_bench.compile import taichi_module

    with Runtime(Arch[arch.upper()], wait=policy) as rt:
        tiny = rt.load_module(taichi_module("bench", arch)).kernels["tiny"]
        arrays = [rt.ndarray((16,), np.float32) for _ in range(THREADS)]
        counts = getattr(rt.device, "counts", dict)
        before = counts()
        rounds = THREADS * (each // few)
        spent = [[0.0, 0.0] for _ in range(THREADS)]  # a thread's seconds in its launches and its values
        bodies = [functools.partial(_rounds, tiny, arrays[i], few, each, spent[i]) for i in range(THREADS)]
        for _ in range(pairs):
            for s in spent:
                s[:] = [0.0, 0.0]
            one = in_turn(bodies)
            one_in = [sum(s[k] for s in spent) / rounds * 1e6 for k in (0, 1)]
            for s in spent:
                s[:] = [0.0, 0.0]
            four = together(bodies)
            four_in = [sum(s[k] for s in spent) / rounds * 1e6 for k in (0, 1)]
            print(f"{arch} wait={policy}, a value every {few}: {one / four:.2f}x one thread; one {one:.1f} ms "
                  f"(launches {one_in[0]:.1f}, value {one_in[1]:.1f} us a round), {THREADS} threads {four:.1f} ms "
                  f"(launches {four_in[0]:.1f}, value {four_in[1]:.1f} us a round, Python's lock waited for "
                  "included)", flush=True)
        after = counts()
        moved = {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}
        print(f"  counts over the runs: {moved}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--arch", nargs="*", default=["vulkan", "cuda", "x64"])
    parser.add_argument("--wait", nargs="*", default=["auto"])
    parser.add_argument("--few", type=int, default=10)
    parser.add_argument("--each", type=int, default=400)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    for arch in args.arch:
        for policy in args.wait:
            try:
                probe(arch, policy, args.few, args.each, args.pairs)
            except Exception as e:  # an arch this host lacks
                print(f"{arch} wait={policy}: not measured ({type(e).__name__}: {e})", flush=True)


if __name__ == "__main__":
    main()
