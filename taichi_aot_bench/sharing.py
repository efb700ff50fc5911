"""Rows of ``taichi-aot bench``'s sharing section: what a runtime costs a program that shares it between threads, and
one that passes host arrays to its kernels (issue "house8").

* Threads (where other threads may use the runtime: every runtime but one of libtaichi's that keeps to its thread,
  as OpenGL's; a CPU runtime's calls are made one at a time, so its threads keep one thread's throughput): THREADS
  threads sharing the bench's
  runtime, each doing rounds of LAUNCHES launches of ``tiny`` on an ndarray of its own and a value read back,
  against one thread doing the same launches and reads in turn (one thread's time / the threads' time: the
  throughput the threads keep; target: at least THREADS_TARGET); and the same with a value every FEW launches
  (FEW_LAUNCHES_EACH launches a thread), where each thread waits often: a thread's value waits for its own work
  while the others record theirs (target: at least FEW_TARGET on a GPU, CPU_FEW_TARGET on a CPU runtime, whose calls
  are made one at a time: issue "vkwait"). Beside it, Python's lock's floor for
  that shape: the same threads alternating as long with the lock held (as much work of a Python loop, as the
  launches hold it) and as long let go (a C loop, as the value's wait lets it go, the whole value counted as let
  go), measured against one thread in turn: what threads of that shape keep on this host where they hand Python's
  lock to each other once a round, at the value (a model of the row, not a bound: a launch that lets the lock go
  shortens what is held). With ``--threads-raw`` (a build of benchmarks/threads_raw.c, on Vulkan and CUDA), the
  same shape in C alone beside them, no Python and no taichi_aot: the ratio each variant keeps (its waits blocking
  or polled on Vulkan; one stream or a stream each on CUDA), with the threads' launches at once, and one at a time
  as Python's lock makes them (what a runtime whose launches keep the lock can reach at best).
* Host arrays: a step of ``saxpy`` over numpy arrays (and torch CPU tensors where torch is installed) passed to the
  kernel as they are, against the same step with ndarrays and the same bytes copied by hand (``from_numpy`` of both
  arrays, the launch, the written one read back with ``to_numpy(out=)``; a tensor's through its ``numpy()``), at a
  size where the launch path's cost shows (SMALL) and one where the bytes do (LARGE); target: at most HOST_TARGET
  times the by-hand step. Paired rounds (measure.py).
"""

from __future__ import annotations

import functools
import json
import re
import statistics
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from taichi_aot.placement.vulkan import facts

from .measure import measure
from .row import Row

if TYPE_CHECKING:
    from .harness import Bench

__all__ = ["floor", "in_turn", "raw_threads", "sharing", "together"]

SECTION = "sharing"
THREADS, LAUNCHES = 4, 200
THREADS_TARGET = 1.0
FEW, FEW_LAUNCHES_EACH, FEW_TARGET = 10, 400, 1.5
CPU_FEW_TARGET = 1.0  # a CPU runtime's (its calls one at a time: one thread's throughput at best)
HOST_TARGET = 1.2
SMALL, LARGE = 1 << 10, 1 << 20
ONE = f"one thread: {THREADS} x ({LAUNCHES} launches of tiny and a value)"
SHARED = f"{THREADS} threads sharing the runtime: {LAUNCHES} launches of tiny and a value each"
ONE_FEW = f"one thread: {THREADS} x ({FEW_LAUNCHES_EACH} launches of tiny, a value every {FEW})"
SHARED_FEW = f"{THREADS} threads sharing the runtime: {FEW_LAUNCHES_EACH} launches of tiny each, a value every {FEW}"
ONE_FLOOR = f"Python's lock alone: one thread: {THREADS} x the same rounds, held, then let go"
SHARED_FLOOR = f"Python's lock alone: {THREADS} threads, each its rounds held, then let go"


def _work(bench: Bench, x: Any, rounds: int, launches: int) -> None:
    tiny = bench.mod.kernels["tiny"]
    for _ in range(rounds):
        for _ in range(launches):
            tiny(x, 1.0)
        x.to_numpy()  # a value: waits for this thread's launches


def _threads(bench: Bench, rounds: int, launches: int = LAUNCHES,
             names: tuple[str, str] = (ONE, SHARED)) -> dict[str, Callable[[], float]]:
    """One thread's and THREADS threads' time (ms) for ``rounds`` rounds each of ``launches`` launches and a value."""
    arrays = [bench.rt.ndarray((16,), np.float32) for _ in range(THREADS)]

    bodies = [functools.partial(_work, bench, x, rounds, launches) for x in arrays]
    return {names[0]: functools.partial(in_turn, bodies), names[1]: functools.partial(together, bodies)}


def in_turn(bodies: Sequence[Callable[[], object]]) -> float:
    """Milliseconds one thread takes to run ``bodies``, one after another (what :func:`together` is paired with)."""
    t0 = time.perf_counter()
    for body in bodies:
        body()
    return (time.perf_counter() - t0) * 1e3


def together(bodies: Sequence[Callable[[], object]]) -> float:
    """Milliseconds threads take to run ``bodies``, a thread each, from a gate they all wait at to the last one's end
    (the first error raised). Not from before the threads are started: starting four threads cost 5-10 % of a 4 ms
    row (x64 here), which one thread in turn does not pay."""
    errors: list[BaseException] = []
    started: list[float] = []
    gate = threading.Barrier(len(bodies) + 1, action=lambda: started.append(time.perf_counter()))

    def run(body: Callable[[], object]) -> None:
        try:
            gate.wait(timeout=60)
            body()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(body,)) for body in bodies]
    try:
        for t in threads:
            t.start()
        gate.wait(timeout=60)
    except BaseException:
        gate.abort()  # the threads started leave the gate (BrokenBarrierError) and end
        raise
    finally:
        for t in threads:
            if t.ident is not None:
                t.join()
    if errors:
        raise errors[0]
    return (time.perf_counter() - started[0]) * 1e3


def _shape(bench: Bench, x: Any) -> tuple[float, float]:
    """Microseconds one thread's round of FEW launches holds Python's lock, and its value takes (medians of 40
    rounds)."""
    tiny = bench.mod.kernels["tiny"]
    held, value = [], []
    for _ in range(40):
        t0 = time.perf_counter()
        for _ in range(FEW):
            tiny(x, 1.0)
        t1 = time.perf_counter()
        x.to_numpy()
        held.append(t1 - t0)
        value.append(time.perf_counter() - t1)
    return statistics.median(held) * 1e6, statistics.median(value) * 1e6


def _held_steps(held_us: float) -> int:
    """How many steps of an empty Python loop take ``held_us`` on one thread here (the best of three timings)."""
    n = 200_000
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            pass
        best = min(best, time.perf_counter() - t0)
    return max(1, round(held_us * 1e-6 / (best / n)))


def floor(held_us: float, let_go_us: float, rounds: int) -> dict[str, Callable[[], float]]:
    """One thread's and THREADS threads' time (ms) for ``rounds`` rounds each of ``held_us`` with Python's lock held
    and ``let_go_us`` with it let go (:data:`ONE_FLOOR`, :data:`SHARED_FLOOR`)."""
    from ._steps import lib

    let_go_ns = int(let_go_us * 1e3)
    steps = _held_steps(held_us)

    def body() -> None:
        for _ in range(rounds):
            for _ in range(steps):  # work, not a deadline: a thread that loses the lock meanwhile does it later
                pass
            lib.taichi_aot_bench_let_go(let_go_ns)

    bodies = [body] * THREADS
    return {ONE_FLOOR: functools.partial(in_turn, bodies), SHARED_FLOOR: functools.partial(together, bodies)}


def _floor_rows(bench: Bench, times: int, rounds: int, reps: int) -> list[Row]:
    """The lock's floor for the shape of a value every FEW launches on ``bench``'s runtime (ONE_FLOOR, SHARED_FLOOR:
    ``times`` rounds a thread), paired."""
    held, let_go = _shape(bench, bench.rt.ndarray((16,), np.float32))
    measured = measure(floor(held, let_go, times), ONE_FLOOR, rounds, reps=reps)
    params = {"threads": THREADS, "held us": round(held, 1), "let go us": round(let_go, 1), "rounds": times}
    timed = [Row(SECTION, bench.name, k, "ms", v, params=params) for k, v in measured.bests.items()]
    paired = measured.pair(ONE_FLOOR, SHARED_FLOOR)
    if paired is not None:
        row = timed[1]
        row.limit, row.ratio, row.spread = ONE_FLOOR, paired[0], paired[1]
        row.note = (f"{held:.0f} us held, {let_go:.0f} us let go a round: the row of a value every {FEW} "
                    "with nothing launched")
    return timed


def raw_threads(binary: str, arch: str, rounds: int, pairs: int, device: str = "") -> dict[str, list[float]]:
    """benchmarks/threads_raw.c's answer (a build of it, ``binary``) on ``arch`` ("vulkan": the first device named
    like ``device``; "cuda": device 0): each variant's pair ratios (one thread's time over THREADS threads', for
    ``rounds`` rounds each of FEW launches and a value). RuntimeError saying why where it gives none."""
    argv = [binary, arch, str(rounds), str(FEW), str(pairs)] + ([device] if arch == "vulkan" else [])
    try:
        run = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"threads_raw did not run: {e}") from None
    ratios: dict[str, list[float]] = {}
    for line in run.stdout.splitlines():
        try:
            answer = json.loads(line)
            ratios[str(answer["variant"])] = [float(p["ratio"]) for p in answer["pairs"]]
        except (ValueError, KeyError, TypeError):
            continue
    if run.returncode != 0 or not ratios:
        raise RuntimeError(f"threads_raw gave no figures (exit {run.returncode}): {run.stderr.strip()[-300:]}")
    return ratios


def raw_row_name(variant: str) -> str:
    """The bench's name of threads_raw's ``variant``: "launches in turn" where its launches are made one at a time
    (as under Python's lock), then its waits (Vulkan) or streams (CUDA)."""
    arch, _, rest = variant.partition(" ")
    rest = re.sub(r"sched=\w+, ", "", rest)
    serial = rest.endswith(", serial")
    rest = rest.removesuffix(", serial")
    how = f"waits {rest}" if arch == "vulkan" else rest
    return f"raw C{', launches in turn' if serial else ''}, {how}: {THREADS} threads, a value every {FEW}"


def _raw_rows(bench: Bench) -> list[Row]:
    """The shape of a value every FEW launches in C alone (:func:`raw_threads`) on ``bench``'s GPU (Vulkan: the
    runtime's device, by name; CUDA: device 0, the bench's), a row a variant: the median of its pair ratios (a line
    in the log where it gives none)."""
    try:
        device = facts(bench.rt.handle).name if bench.name == "vulkan" else ""
        ratios = raw_threads(str(bench.threads_raw), bench.name, FEW_LAUNCHES_EACH // FEW, 3 if bench.quick else 7,
                             device)
    except Exception as e:  # the program's failure, or the device's name unread: a line, the section's rows kept
        bench.log(f"  sharing: no rows of threads_raw: {type(e).__name__}: {e}")
        return []
    rows = []
    for variant, values in ratios.items():
        row = Row(SECTION, bench.name, raw_row_name(variant), "x one thread", values,
                  params={"threads": THREADS, "launches": FEW_LAUNCHES_EACH, "few": FEW})
        row.note = "throughput kept, in C alone (benchmarks/threads_raw.c)" + (
            "; launches in turn: one at a time, as Python's lock makes them" if variant.endswith(", serial") else
            "; launches at once")
        rows.append(row)
    return rows


def _host(bench: Bench, n: int) -> dict[str, Callable[[], float]]:
    """Microseconds a step of saxpy over ``n`` elements: by hand, with numpy arrays, with torch CPU tensors."""
    rt, saxpy = bench.rt, bench.mod.kernels["saxpy"]
    xh, yh = np.ones(n, np.float32), np.zeros(n, np.float32)
    x, y = rt.ndarray((n,), np.float32), rt.ndarray((n,), np.float32)
    steps = 20 if n >= LARGE or bench.software else 200

    def timed(step: Callable[[], object]) -> Callable[[], float]:
        return bench.per_call(step, steps)  # microseconds a step, the runtime waited for at the end

    def by_hand(xh: np.ndarray = xh, yh: np.ndarray = yh) -> None:
        x.from_numpy(xh)
        y.from_numpy(yh)
        saxpy(x, y, 0.5)
        y.to_numpy(out=yh)

    def host() -> None:
        saxpy(xh, yh, 0.5)
        rt.sync()  # the step's result in yh, as by hand

    methods = {row_name("by hand", n): timed(by_hand), row_name("numpy", n): timed(host)}
    try:
        import torch
    except ImportError:
        return methods
    xt, yt = torch.ones(n), torch.zeros(n)
    xv, yv = xt.numpy(), yt.numpy()  # the tensors' own memory, as a user copying them by hand passes it

    def tensors() -> None:
        saxpy(xt, yt, 0.5)
        rt.sync()

    methods[row_name("torch by hand", n)] = timed(lambda: by_hand(xv, yv))
    methods[row_name("torch CPU", n)] = timed(tensors)
    return methods


def row_name(how: str, n: int) -> str:
    arrays = {"by hand": "ndarrays, the bytes copied by hand", "numpy": "numpy arrays passed as they are",
              "torch by hand": "ndarrays, a torch tensor's bytes copied by hand",
              "torch CPU": "torch CPU tensors passed as they are"}[how]
    return f"saxpy @{n}: {arrays}"


def sharing(bench: Bench) -> list[Row]:
    """The sharing rows on ``bench``'s arch (see the module docstring)."""
    quick = bench.quick
    rounds, reps = (3, 1) if quick else (7, 2)
    per = 1 if quick or bench.software else 5
    rows: list[Row] = []
    if bench.rt.device.traits.any_thread:  # a runtime other threads may use (CPU, CUDA, Vulkan)
        rows += _thread_rows(bench, rounds, reps, per)
    for n in (SMALL,) if bench.software else (SMALL, LARGE):
        host = measure(_host(bench, n), row_name("by hand", n), rounds, reps=reps)
        made = {k: Row(SECTION, bench.name, k, "us/step", v, params={"elements": n}) for k, v in host.bests.items()}
        for how, reference in (("numpy", "by hand"), ("torch CPU", "torch by hand")):
            name, limit = row_name(how, n), row_name(reference, n)
            paired = host.pair(name, limit) if name in made else None
            if paired is not None:
                row = made[name]
                row.limit, row.ratio, row.spread = limit, paired[0], paired[1]
                row.target, row.met = f"<= {HOST_TARGET:g}", row.ratio <= HOST_TARGET
        rows += made.values()
    return rows


def _thread_rows(bench: Bench, rounds: int, reps: int, per: int) -> list[Row]:
    """The threads' rows (a value every LAUNCHES launches, then every FEW), the lock's floor, and with
    ``--threads-raw`` the shape in C alone."""
    rows: list[Row] = []
    for launches, times, (one, shared), target in (
            (LAUNCHES, per, (ONE, SHARED), THREADS_TARGET),
            (FEW, per * FEW_LAUNCHES_EACH // FEW, (ONE_FEW, SHARED_FEW),
             FEW_TARGET if bench.gpu else CPU_FEW_TARGET)):
        measured = measure(_threads(bench, times, launches, (one, shared)), one, rounds, reps=reps)
        params = {"threads": THREADS, "launches": launches, "rounds": times}
        timed = [Row(SECTION, bench.name, k, "ms", v, params=dict(params)) for k, v in measured.bests.items()]
        paired = measured.pair(one, shared)  # throughput kept: one thread's time over the threads'
        if paired is not None:
            row = timed[1]
            row.limit, row.ratio, row.spread = one, paired[0], paired[1]
            row.target, row.met = f">= {target:g} (throughput)", row.ratio >= target
        rows += timed
    rows += _floor_rows(bench, per * FEW_LAUNCHES_EACH // FEW, rounds, reps)
    if bench.threads_raw and bench.name in ("vulkan", "cuda"):
        rows += _raw_rows(bench)
    return rows
