"""Rows of ``taichi-aot bench``'s profiler section: what ``Runtime.profile()`` costs a launch, and whether the time it
records is the kernel's (issue "profile").

* Cost, in paired rounds (measure.py): the bench's ``tiny`` kernel launched N times and waited for, with no profile
  open and inside one (target: inside, at most TARGET times outside).
* Agreement: ``saxpy`` over BIG elements (the device's work, not the launch path's, sets its pace), the wall time a
  launch of LAUNCHES back-to-back launches and a wait (FEW on a CPU or a software rasterizer, where one takes
  a tenth of a second), against the profile's mean time a launch of the same launches
  (its device time where the launch path gives one; a CPU runtime's call), target within AGREE either way.
* A wait's cost: the same launches each waited for (``rt.wait()`` after each), the wall time a launch less the
  profile's mean device time: what a wait adds to a waited kernel (target on a GPU: at most BEYOND microseconds,
  issue "vkwait"; ``Runtime(wait=...)`` says how it waits).
* Beside raw Vulkan (``--vk-raw``, a build of benchmarks/vk_raw.c): the same task of ``saxpy``, its SPIR-V and
  bindings as the module has them, dispatched by vk_raw as many times in one command buffer with as many workgroups as
  the own launch dispatched, each between two timestamps: raw Vulkan's mean against the profile's mean of the same
  launches, target within AGREE either way.
* Beside CUDA events (CuPy's, where it is installed): each of the same launches on CUDA between two events of CuPy's
  recorded on the runtime's stream, their mean against the profile's mean of the same launches, target within AGREE.
* The floor of timing each launch, with no taichi_aot in the loop (no target: what the cost row is set against). On
  Vulkan (``--vk-raw``), vk_raw's 64 empty dispatches a submit with one timestamp after each (as a profile records
  consecutive launches) and with two, over none; on CUDA, ``_csrc/cuda_events.c`` (built here: compile.py's
  :func:`raw_program`): an empty kernel's launch between two events over the launch alone.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import tempfile
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from taichi_aot.cli.cache import CompileError
from taichi_aot.placement.vulkan import SharedMemoryVulkan, facts

from .compile import raw_program
from .measure import measure
from .row import Row

if TYPE_CHECKING:
    from .harness import Bench

__all__ = ["profiler"]

TARGET = 1.3
AGREE = 0.1
BIG = 1 << 24
LAUNCHES, FEW = 200, 5
BEYOND = 15.0
OUTSIDE, INSIDE = "tiny launch, no profile open", "tiny launch inside a profile"
WALL, PROFILED = "saxpy @2^24: wall a launch", "saxpy @2^24: the profile's mean"
RAW = "saxpy @2^24: raw Vulkan's timestamps, mean"
EVENTS = "saxpy @2^24: CuPy's CUDA events around each launch, mean"
WAITED = "saxpy @2^24: wall a launch waited for (rt.wait() after each)"
BEYOND_ROW = "saxpy @2^24: a waited launch beyond the profile's device time"
#: The floors' rows: (name, the raw program's key); the first of each arch is the untimed one the others are over.
_VK_FLOORS = (("raw Vulkan: 64 empty dispatches a submit, untimed", "dispatch_64"),
              ("raw Vulkan: the same, a timestamp after each", "dispatch_64_stamp"),
              ("raw Vulkan: the same, two timestamps each", "dispatch_64_stamps"))
_CUDA_FLOORS = (("raw CUDA: an empty kernel's launch", "plain"),
                ("raw CUDA: the same, between two events", "events_2"))
#: Taichi's buffer kinds a gfx task binds (its ``buffer_binds``): how vk_raw binds each (bytes, or None: the args).
_RAW_BINDS = {1: ("storage", 1 << 20), 2: ("uniform", None), 3: ("storage", 4096), 5: ("storage", 4 * BIG)}


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


def _big(bench: Bench, rounds: int) -> tuple[list[float], list[float], list[float], str]:
    """Wall, profiled and waited microseconds a launch of ``saxpy`` over BIG elements, one each a round; how it was
    timed."""
    saxpy = bench.mod.kernels["saxpy"]
    rt = bench.rt
    x, y = rt.ndarray((BIG,), np.float32), rt.ndarray((BIG,), np.float32)
    launches = _launches(bench)
    walls, profiled, waited, timed = [], [], [], ""

    def loop() -> None:
        for _ in range(launches):
            saxpy(x, y, 0.5)

    def each_waited() -> None:
        for _ in range(launches):
            saxpy(x, y, 0.5)
            rt.wait()

    gpu = bench.gpu and not bench.software  # where _beyond reads the waited launches
    bench.timed(loop)  # warm
    if gpu:
        bench.timed(each_waited)
    for _ in range(rounds):
        walls.append(bench.timed(loop) / launches * 1e6)
        if gpu:
            waited.append(bench.timed(each_waited) / launches * 1e6)
        with rt.profile() as prof:
            loop()
        row: Any = next(r for r in prof.kernels() if r.name == "saxpy")
        profiled.append(row.mean * 1e6)
        timed = row.timed
    return walls, profiled, waited, timed


def _beyond(bench: Bench, waited: list[float], profiled: list[float], big: dict) -> list[Row]:
    """The waited launches' row and what a wait adds beyond the profile's device time (a pair a round), where
    :func:`_big` measured them: on a GPU (a CPU runtime's, or a software device's, profiled time is its call's, which
    the wait shares)."""
    if not waited:
        return []
    params = {**big, "wait": bench.rt.wait_policy}
    row = Row("profiler", bench.name, WAITED, "us/launch", waited, params=params)
    beyond = Row("profiler", bench.name, BEYOND_ROW, "us/launch", [w - p for w, p in zip(waited, profiled)],
                 params=params, note=f"wait policy {bench.rt.wait_policy!r}")
    beyond.target, beyond.met = f"<= {BEYOND:g} us", beyond.median <= BEYOND
    return [row, beyond]


def raw_spec(bench: Bench, groups: int, folder: str, elements: int = BIG) -> str:
    """vk_raw's SPEC of ``saxpy(x, y, 0.5)`` over ``elements`` (benchmarks/vk_raw.c): its one task's SPIR-V and
    bindings as the module has them, its arguments laid out by the module's plan, ``groups`` workgroups."""
    from taichi_aot.metadata import read_module
    from taichi_aot.metadata.gfx import plan_entry
    from taichi_aot.metadata.layout import arguments

    gfx = read_module(bench.module_path).gfx
    assert gfx is not None, "a Vulkan module"
    entry = gfx.kernels["saxpy"]
    (task,) = entry["tasks_attribs"]
    plan = arguments(plan_entry(entry), "saxpy")
    args = bytearray(max(plan["args_size"], 4))
    for arg in plan["args"]:  # x and y: their shape; a: 0.5
        if arg["kind"] == "ndarray":
            struct.pack_into("<i", args, arg["offset"], elements)
        else:
            struct.pack_into("<f", args, arg["offset"], 0.5)
    spirv = os.path.join(folder, "saxpy.spv")
    with open(spirv, "wb") as f:
        f.write(gfx.spirv[task["name"]])
    lines = [f"spirv {spirv}", f"groups {groups}"]
    for bind in task["buffer_binds"]:
        kind, size = _RAW_BINDS[bind["buffer"]["type"]]
        lines.append(f"bind {bind['binding']} {kind} {size or -(-len(args) // 16) * 16}"
                     + (f" {bytes(args).hex()}" if size is None else ""))
    path = os.path.join(folder, "saxpy.spec")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


def _raw(bench: Bench, launches: int, groups: int, runs: int = 3) -> tuple[list[float], list[dict]] | str:
    """vk_raw's mean microseconds a dispatch of the same task (see the module docstring), a figure a run of ``runs``,
    and each run's whole answer (its floors), or why there is none."""
    if not bench.vk_raw:
        return "no vk_raw build (--vk-raw)"
    means, answers = [], []
    with tempfile.TemporaryDirectory(prefix="vk_raw_spec_") as folder:
        spec, name = raw_spec(bench, groups, folder), facts(bench.rt.handle).name  # the runtime's own device
        for _ in range(runs):
            run = subprocess.run([bench.vk_raw, name, str(launches), spec], capture_output=True, text=True,
                                 timeout=600)
            if run.returncode != 0:
                return f"vk_raw failed: {run.stderr.strip()[-300:]}"
            answers.append(json.loads(run.stdout))
            means.append(float(answers[-1]["stamped"]["mean"]))
    return means, answers


def _floor_rows(bench: Bench, floors: tuple[tuple[str, str], ...], answers: list[dict], per: int) -> list[Row]:
    """The floors' rows from raw programs' answers (microseconds a round of ``per`` launches): the untimed first, each
    other over it, a sample a run."""
    rows: list[Row] = []
    for name, key in floors:
        samples = [a[key] / per for a in answers if a.get(key, -1) >= 0]
        if not samples:
            return []
        row = Row("profiler", bench.name, name, "us/launch", samples, note="the floor: no taichi_aot in the loop")
        if rows:
            row.limit = rows[0].name
            row.ratio = sorted(t / u for t, u in zip(samples, rows[0].samples))[len(samples) // 2]
        rows.append(row)
    return rows


def _cuda_floors(bench: Bench, runs: int = 3) -> list[Row]:
    """On CUDA, cuda_events's empty launches with and without two events each (the module docstring)."""
    if bench.arch.name != "CUDA":
        return []
    try:
        program = raw_program("cuda_events")
    except CompileError as e:
        bench.log(f"  profiler: no raw CUDA floor: {str(e).splitlines()[0]}")
        return []
    answers = []
    for _ in range(runs):
        run = subprocess.run([program, str(2000)], capture_output=True, text=True, timeout=600)
        if run.returncode != 0:
            bench.log(f"  profiler: no raw CUDA floor: {run.stderr.strip()[-300:]}")
            return []
        answers.append(json.loads(run.stdout))
    return _floor_rows(bench, _CUDA_FLOORS, answers, 1)


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
    walls, profiled, waited, timed = _big(bench, rounds)
    big = {"elements": BIG, "launches": _launches(bench), "rounds": rounds, "timed": timed}
    wall = Row("profiler", bench.name, WALL, "us/launch", walls, params=big)
    mean = Row("profiler", bench.name, PROFILED, "us/launch", profiled, params=big, limit=WALL,
               note=f"timed: {timed}")
    pairs = sorted(p / w for p, w in zip(profiled, walls))
    mean.ratio = pairs[len(pairs) // 2]
    mean.target, mean.met = f"within {AGREE:.0%}", abs(mean.ratio - 1) <= AGREE
    if measured.warnings:
        rows[OUTSIDE].note = "; ".join(measured.warnings)
    raw, floors = _beside_raw(bench, mean, big)
    floors = floors or _cuda_floors(bench)
    if floors and floors[1].ratio is not None and paired is not None:
        rows[INSIDE].note = f"the floor, raw: {floors[1].ratio:.2f}x ({floors[1].name})"
    return [*rows.values(), wall, mean, *_beyond(bench, waited, profiled, big), *raw, *_beside_events(bench, big),
            *floors]


def _beside_raw(bench: Bench, mean: Row, big: dict) -> tuple[list[Row], list[Row]]:
    """On Vulkan, raw Vulkan's timestamps of the same task beside the profile's mean, and raw Vulkan's floors (the
    module docstring)."""
    device = bench.rt.device
    if not isinstance(device, SharedMemoryVulkan):  # not Vulkan
        return [], []
    saxpy = bench.mod.kernels["saxpy"]
    x, y = bench.rt.ndarray((BIG,), np.float32), bench.rt.ndarray((BIG,), np.float32)
    before = device.counts()
    bench.timed(lambda: saxpy(x, y, 0.5))
    after = device.counts()  # the own launch's grid, as it dispatched the launches measured
    groups = (after["workgroups"] - before["workgroups"]) // max(after["dispatches"] - before["dispatches"], 1)
    raw = _raw(bench, big["launches"], groups)
    if isinstance(raw, str):
        bench.log(f"  profiler: no raw Vulkan timestamps: {raw}")
        return [], []
    row = Row("profiler", bench.name, RAW, "us/launch", raw[0], params={**big, "groups": groups})
    profiled = mean.median
    mean_vs_raw = Row("profiler", bench.name, f"{PROFILED} (median round) over raw Vulkan's", "us/launch",
                      [profiled], params=big, limit=RAW)
    mean_vs_raw.ratio = profiled / row.median
    mean_vs_raw.target, mean_vs_raw.met = f"within {AGREE:.0%}", abs(mean_vs_raw.ratio - 1) <= AGREE
    return [row, mean_vs_raw], _floor_rows(bench, _VK_FLOORS, raw[1], 64)


def _beside_events(bench: Bench, big: dict) -> list[Row]:
    """On CUDA, each launch of ``saxpy`` between two of CuPy's events on the runtime's stream, inside a profile: the
    events' mean beside the profile's mean of the same launches (the module docstring)."""
    if bench.arch.name != "CUDA":
        return []
    try:
        import cupy
    except ImportError:
        bench.log("  profiler: no CUDA events beside the profile: CuPy is not installed")
        return []
    saxpy, launches = bench.mod.kernels["saxpy"], big["launches"]
    x, y = bench.rt.ndarray((BIG,), np.float32), bench.rt.ndarray((BIG,), np.float32)
    stream = cupy.cuda.ExternalStream(bench.rt.cuda_stream or 0)
    events, profiled = [], []
    for _ in range(big["rounds"]):
        pairs = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(launches)]
        with bench.rt.profile() as prof:
            for start, end in pairs:
                start.record(stream)
                saxpy(x, y, 0.5)
                end.record(stream)
            bench.rt.wait()
        pairs[-1][1].synchronize()
        events.append(sum(cupy.cuda.get_elapsed_time(a, b) for a, b in pairs) / launches * 1e3)
        profiled.append(next(r for r in prof.kernels() if r.name == "saxpy").mean * 1e6)
    row = Row("profiler", bench.name, EVENTS, "us/launch", events, params=big)
    mean = Row("profiler", bench.name, f"{PROFILED}, the same launches", "us/launch", profiled, params=big,
               limit=EVENTS)
    mean.ratio = sorted(p / e for p, e in zip(profiled, events))[len(events) // 2]
    mean.target, mean.met = f"within {AGREE:.0%}", abs(mean.ratio - 1) <= AGREE
    return [row, mean]
