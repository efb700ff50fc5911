"""Rows of ``taichi-aot bench``'s profiler section: what ``Runtime.profile()`` costs a launch, and whether the time it
records is the kernel's (issue "profile").

* Cost, in paired rounds (measure.py): the bench's ``tiny`` kernel launched N times and waited for, with no profile
  open and inside one (target: inside, at most TARGET times outside).
* Agreement: ``saxpy`` over BIG elements (the device's work, not the launch path's, sets its pace), the wall time a
  launch of LAUNCHES back-to-back launches and a wait (FEW on a CPU or a software rasterizer, where one takes
  a tenth of a second), against the profile's mean time a launch of the same launches
  (its device time where the launch path gives one; a CPU runtime's call), target within AGREE either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .measure import measure
from .row import Row

if TYPE_CHECKING:
    from .harness import Bench

__all__ = ["profiler"]

TARGET = 1.3
AGREE = 0.1
BIG = 1 << 24
LAUNCHES, FEW = 200, 5
OUTSIDE, INSIDE = "tiny launch, no profile open", "tiny launch inside a profile"
WALL, PROFILED = "saxpy @2^24: wall a launch", "saxpy @2^24: the profile's mean"


def _tiny(bench: Bench, n: int, inside: bool) -> Callable[[], float]:
    tiny = bench.mod.kernels["tiny"]
    x = bench.rt.ndarray((16,), np.float32)

    def loop() -> None:
        for _ in range(n):
            tiny(x, 1.0)

    def one() -> float:
        if not inside:
            return bench.timed(loop) / n * 1e6
        with bench.rt.profile():
            return bench.timed(loop) / n * 1e6
    return one


def _big(bench: Bench, rounds: int) -> tuple[list[float], list[float], str]:
    """Wall and profiled microseconds a launch of ``saxpy`` over BIG elements, a pair a round; how it was timed."""
    saxpy = bench.mod.kernels["saxpy"]
    x, y = bench.rt.ndarray((BIG,), np.float32), bench.rt.ndarray((BIG,), np.float32)
    launches = _launches(bench)
    walls, profiled, timed = [], [], ""

    def loop() -> None:
        for _ in range(launches):
            saxpy(x, y, 0.5)

    bench.timed(loop)  # warm
    for _ in range(rounds):
        walls.append(bench.timed(loop) / launches * 1e6)
        with bench.rt.profile() as prof:
            loop()
        row: Any = next(r for r in prof.kernels() if r.name == "saxpy")
        profiled.append(row.mean * 1e6)
        timed = row.timed
    return walls, profiled, timed


def _launches(bench: Bench) -> int:
    return LAUNCHES if bench.gpu and not bench.software else FEW


def profiler(bench: Bench) -> list[Row]:
    """The profiler rows on ``bench``'s arch (see the module docstring)."""
    n, rounds = (200, 3) if bench.quick else (2000, 9)
    measured = measure({OUTSIDE: _tiny(bench, n, False), INSIDE: _tiny(bench, n, True)}, None, rounds, reps=3)
    params = {"launches": n, "rounds": rounds}
    rows = {k: Row("profiler", bench.name, k, "us/launch", v, params=params) for k, v in measured.bests.items()}
    paired = measured.pair(INSIDE, OUTSIDE)
    if paired is not None:
        row = rows[INSIDE]
        row.limit, row.ratio, row.spread = OUTSIDE, paired[0], paired[1]
        row.target, row.met = f"<= {TARGET:g}", row.ratio <= TARGET
    walls, profiled, timed = _big(bench, rounds)
    big = {"elements": BIG, "launches": _launches(bench), "rounds": rounds, "timed": timed}
    wall = Row("profiler", bench.name, WALL, "us/launch", walls, params=big)
    mean = Row("profiler", bench.name, PROFILED, "us/launch", profiled, params=big, limit=WALL,
               note=f"timed: {timed}")
    pairs = sorted(p / w for p, w in zip(profiled, walls))
    mean.ratio = pairs[len(pairs) // 2]
    mean.target, mean.met = f"within {AGREE:.0%}", abs(mean.ratio - 1) <= AGREE
    if measured.warnings:
        rows[OUTSIDE].note = "; ".join(measured.warnings)
    return [*rows.values(), wall, mean]
