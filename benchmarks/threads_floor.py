"""What threads sharing one runtime keep of one thread's throughput, per wait policy, beside the floor Python's own
lock sets (the bench's sharing section has the policy the runtime chose; this has each, and the launches alone).

    python benchmarks/threads_floor.py [--arch vulkan cuda x64] [--wait auto block ...] [--rounds 3]
        [--floor WORK_US WAIT_US ...]

- The lock's floor (``taichi_aot_bench.sharing.floor``): THREADS threads, each alternating WORK us of Python (the
  lock held, as a launch holds it) and WAIT us in C with the lock let go (as a polled wait lets it go), against one
  thread doing all of it in turn: what threads of that shape keep on this host where they hand the lock over once a
  round (beside it, the bound with no cost of handing it over).
- Per arch and wait policy, the bench's ``tiny`` kernel on an ndarray of each thread's own: FEW_LAUNCHES_EACH
  launches with a value (``to_numpy``) every FEW (the sharing section's row), and the same launches with one value at
  the end (the launches' own sharing, no waits between). Each figure is one thread's time over the threads' (higher
  is better), the best and worst of ``--rounds`` alternated pairs; every value is checked.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any, Callable

import numpy as np

from taichi_aot_bench.sharing import FEW, FEW_LAUNCHES_EACH, ONE_FLOOR, SHARED_FLOOR, THREADS, floor, in_turn, together


def kept(one: Callable[[], float], many: Callable[[], float], rounds: int) -> tuple[float, float, float]:
    """One thread's time over the threads' (``one``, ``many``: milliseconds), the best and worst of ``rounds``
    alternated pairs, and one thread's milliseconds in the best."""
    pairs = [(one(), many()) for _ in range(rounds)]
    best = max(pairs, key=lambda p: p[0] / p[1])
    return best[0] / best[1], min(a / b for a, b in pairs), best[0]


def _values(tiny: Any, x: Any, done: list[int], i: int) -> None:
    """FEW_LAUNCHES_EACH launches of ``tiny`` on ``x``, a value every FEW, each checked (``done[i]``: what it holds)."""
    for _ in range(FEW_LAUNCHES_EACH // FEW):
        for _ in range(FEW):
            tiny(x, 1.0)
        done[i] += FEW
        got = x.to_numpy()
        if got[0] != done[i]:  # tiny adds its scalar to every element
            raise AssertionError(f"thread {i}: {got[0]} after {done[i]} launches")


def _launches(tiny: Any, x: Any, done: list[int], i: int) -> None:
    """The same launches, one value at the end."""
    for _ in range(FEW_LAUNCHES_EACH):
        tiny(x, 1.0)
    done[i] += FEW_LAUNCHES_EACH
    if x.to_numpy()[0] != done[i]:
        raise AssertionError(f"thread {i}: wrong value after {done[i]} launches")


def arch_rows(arch_name: str, policy: str, rounds: int) -> list[str]:
    from taichi_aot import Arch, Runtime
    from taichi_aot_bench.compile import taichi_module

    rows = []
    with Runtime(Arch[arch_name.upper()], wait=policy) as rt:
        tiny = rt.load_module(taichi_module("bench", arch_name)).kernels["tiny"]
        arrays = [rt.ndarray((16,), np.float32) for _ in range(THREADS)]
        done = [0] * THREADS
        for name, work in ((f"a value every {FEW}", _values), ("one value at the end", _launches)):
            bodies = [functools.partial(work, tiny, arrays[i], done, i) for i in range(THREADS)]
            best, worst, one_ms = kept(functools.partial(in_turn, bodies), functools.partial(together, bodies), rounds)
            counts = rt.device.counts() if hasattr(rt.device, "counts") else {}
            waits = {k: v for k, v in counts.items() if k.startswith("waits")}
            rows.append(f"{arch_name} wait={policy}: {THREADS} threads x {FEW_LAUNCHES_EACH} launches, {name}: "
                        f"{best:.2f}x one thread (worst {worst:.2f}x; one thread {one_ms:.1f} ms) {waits}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--arch", nargs="*", default=["vulkan", "cuda", "x64"])
    parser.add_argument("--wait", nargs="*", default=["auto", "block"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--floor", nargs="*", type=float, default=[30, 20], help="WORK_US WAIT_US [...]")
    args = parser.parse_args()
    for work, wait in zip(args.floor[::2], args.floor[1::2]):
        methods = floor(work, wait, FEW_LAUNCHES_EACH // FEW)
        best, worst, _ = kept(methods[ONE_FLOOR], methods[SHARED_FLOOR], args.rounds)
        ideal = min(THREADS, (work + wait) / work)
        print(f"the lock's floor: {work:g} us of Python, {wait:g} us let go: {best:.2f}x (worst {worst:.2f}x; "
              f"with no cost of handing the lock over {ideal:.2f}x)", flush=True)
    for arch in args.arch:
        for policy in args.wait:
            try:
                for row in arch_rows(arch, policy, args.rounds):
                    print(row, flush=True)
            except Exception as e:  # an arch this host lacks
                print(f"{arch} wait={policy}: not measured ({type(e).__name__}: {e})", flush=True)


if __name__ == "__main__":
    main()
