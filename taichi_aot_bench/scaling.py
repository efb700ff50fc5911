"""The benchmark's scaling section: the Gray-Scott sweep (sweep.py) on a pool of 1..N workers.

For each worker count n, a pool of n workers (one per device on a GPU; on the CPU one per core, up to every
core this process may use, each worker's runtime on one thread and the demo's kernels built for one thread, so
that a worker is one core's work) runs the same simulation, 16 times a worker on a GPU, 8 on the CPU, after a
warm-up: three rounds on a GPU, five on the CPU, the best kept (a shared machine only ever slows a round down).
The pools run speculatively (``Pool(speculative=True)``: a straggler is copied onto an idle worker at the map's
end; each row counts the copies). The section reports throughput (simulations/s) and scaling efficiency,
``throughput(n) / (n * throughput(1))``, all measured in one run. On the CPU, n independent processes without a
pool run the largest count's work beside it (independent.py): the machine's ceiling, and the pool's share
of it (target: INDEPENDENT_TARGET). On a GPU the series runs again with tasks of about 10 ms (SHORT_TASK_S, 64 a
worker; SHORT_TARGET at 2 GPUs), where the pool's own cost shows most. It also reports what the pool costs per
task: a task that does nothing, through a one-worker pool, against the same call in this process, and each
simulation through the pool against its time inside the worker (the difference is the pool's: the task's own
work, its read-back included, is inside).
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Callable

from taichi_aot import Arch, Runtime, _cpus, capi
from taichi_aot.cli.cache import demo_module
from taichi_aot.cli.sweep import array_back, noop, params, simulate, timed, warm_up
from taichi_aot.enums import CPU_ARCHS

from .independent import independent
from .row import Row

#: Scaling efficiency a pool must reach on GPUs (one worker per device).
EFFICIENCY_TARGET = 0.9
#: The GPU series of short tasks (about this long each, in one process) and its efficiency target at 2 GPUs.
SHORT_TASK_S = 0.010
SHORT_TARGET = 0.95
#: ... and on CPU cores (one worker a core): (up to this many workers, the efficiency), the first that applies
CPU_EFFICIENCY_TARGETS = ((2, 0.9), (8, 0.85), (16, 0.8))
#: The pool of n CPU workers against n independent processes doing the same work (independent.py).
INDEPENDENT_TARGET = 0.95


def _cpu_target(workers: int) -> float | None:
    return next((target for most, target in CPU_EFFICIENCY_TARGETS if workers <= most), None)


def _counts(arch: Arch, workers: int | None) -> tuple[list[int], list[int] | None]:
    """The worker counts to measure, and the devices (None on the CPU)."""
    if arch in CPU_ARCHS:
        cores = _cpus.usable_cpus()
        top = workers or cores
        counts = sorted({n for n in (1, 2, 4, 8, 16, 32, 64) if n < top} | {top})
        return counts, None
    status = capi.arch_status()[arch]
    if arch == Arch.VULKAN and status.devices:
        devices = [i for i, d in enumerate(status.devices) if not d.software] or [0]
    else:
        devices = list(range(status.device_count or 1))
    top = min(workers or len(devices), len(devices))
    return list(range(1, top + 1)), devices


def _device_names(arch: Arch, devices: list[int] | None) -> list[str]:
    """The model of each device of ``devices`` (CUDA ordinals, Vulkan indices); empty on the CPU."""
    if not devices:
        return []
    if arch == Arch.VULKAN:
        found = capi.arch_status()[arch].devices
        return [found[i].name if i < len(found) else "unknown" for i in devices]
    import ctypes

    from taichi_aot.drivers import cuda as _cuda

    names = []
    for i in devices:
        cu, device, name = _cuda.driver(), ctypes.c_int(0), ctypes.create_string_buffer(256)
        ok = cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(device), i) == 0 and cu.cuDeviceGetName(
            name, 256, device.value) == 0
        names.append(name.value.decode(errors="replace") if ok else "unknown")
    return names


def scaling(rt: Runtime, quick: bool, log: Callable[[str], None], workers: int | None = None,
            backend: str = "local") -> list[Row]:
    """Throughput and efficiency of the sweep on 1..N workers of ``rt``'s arch, and the pool's cost per task
    (the in-process reference runs on ``rt``: a process holds one CUDA runtime at a time). On a GPU the series
    runs again with tasks of about SHORT_TASK_S, where the pool's own cost per task shows."""
    s = _setup(rt.arch, quick, workers, backend)
    # every task is the same simulation (the grid's middle), so that n workers do exactly n times one worker's
    # work: a simulation's cost depends on its parameters (one whose pattern dies out computes with subnormal
    # floats, several times slower on some CPUs), and a mix of costs would measure how the tasks happen to pack
    same = s.grid[len(s.grid) // 2 + 4]
    # what a task receives, in this process: the bench's runtime with the same module
    here = SimpleNamespace(runtime=rt, module=rt.load_module(s.module), cache={})
    try:
        warm_up(here)
        rows = _series(s, same, "", log)
        short = _short_task(here, same) if s.gpu and not quick else None
        if short is not None:
            rows += _series(s, short, f", {short[3]} steps (~{SHORT_TASK_S * 1e3:.0f} ms tasks)", log, 4)
        if not s.gpu and s.counts[-1] > 1:
            n = s.counts[-1]
            rows += _independent_rows(s.name, s.module, n, [same] * (s.per_worker * n), s.repeats,
                                      max(rows[0].samples), max(rows[-1].samples), log)
        rows += _pool_cost(s, here, [same] + ([short] if short else []), log)
    finally:
        here.cache.clear()
        here.module.close()
    return rows


def _series(s: SimpleNamespace, task: tuple, label: str, log: Callable[[str], None], more: int = 1) -> list[Row]:
    """``task`` run ``more * s.per_worker`` times a worker on pools of every count of ``s.counts``: a row each."""
    rows: list[Row] = []
    base = None
    for n in s.counts:
        tasks = [task] * (more * s.per_worker * n)
        run = _sweep(s, n, tasks)
        base = base or run
        row = _sweep_row(s, n, tasks, run, base, label)
        rows.append(row)
        log(f"   {n} worker(s){label}: {max(run.samples):.2f} sims/s, efficiency {row.ratio:.3f}, "
            f"{run.inside * 1e3:.2f} ms a task inside a worker")
    return rows


def _short_task(here: SimpleNamespace, task: tuple) -> tuple:
    """``task`` with as many steps (a multiple of 16) as take about SHORT_TASK_S in this process."""
    feed, kill, size, steps = task
    simulate(here, task)
    t0 = time.perf_counter()
    simulate(here, task)
    per_step = (time.perf_counter() - t0) / steps
    return feed, kill, size, max(16, round(SHORT_TASK_S / per_step / 16) * 16)


def _setup(arch: Arch, quick: bool, workers: int | None, backend: str) -> SimpleNamespace:
    """What the section runs on ``arch``: the module, the sizes, the worker counts and devices, the sweep's grid."""
    gpu = arch not in CPU_ARCHS
    name = arch.name.lower()
    module = demo_module(name, cpu_threads=None if gpu else 1)  # CPU: one thread a worker, a core each
    # a CPU worker is one core running one-thread kernels: smaller simulations keep the section to minutes
    size = 64 if quick else 256 if gpu else 128
    steps = 64 if quick else 4000 if gpu else 1000
    counts, devices = _counts(arch, workers)
    return SimpleNamespace(
        arch=arch, name=name, module=module, devices=devices, gpu=gpu, quick=quick, grid=params(8, size, steps),
        size=size, steps=steps, backend=backend, counts=counts,
        per_worker=(3 if quick else 16) if gpu else (3 if quick else 8), repeats=1 if quick else 3 if gpu else 5,
        models=_device_names(arch, devices))  # recorded beside each figure: runs on other hosts compare by it


def _sweep(s: SimpleNamespace, n: int, tasks: list) -> SimpleNamespace:
    """``tasks`` on a pool of ``n`` workers, ``s.repeats`` times: ``samples`` (sims/s of each time), ``inside``
    (the seconds a task took inside its worker, on average, in the fastest time), and how many speculative
    ``copies`` the pool made and how many of them ``won`` (ended first)."""
    from taichi_aot.pool import Pool

    with Pool(s.module, arch=s.arch, workers=n, devices=s.devices[:n] if s.devices else None, backend=s.backend,
              threads=None if s.gpu else 1, setup=warm_up, speculative=True) as pool:
        pool.map(simulate, tasks[:2 * n], progress=False)  # warm: every worker has run full-size simulations
        samples, insides = [], []
        copies, won = pool.speculated, pool.speculation_won
        for _ in range(s.repeats):
            t0 = time.perf_counter()
            within = [seconds for _, seconds in pool.map(timed, tasks, progress=False)]
            samples.append(len(tasks) / (time.perf_counter() - t0))
            insides.append(sum(within) / len(within))
        return SimpleNamespace(samples=samples, inside=insides[samples.index(max(samples))],
                               copies=pool.speculated - copies, won=pool.speculation_won - won)


def _sweep_row(s: SimpleNamespace, n: int, tasks: list, run: SimpleNamespace, base: SimpleNamespace,
               label: str = "") -> Row:
    """The row of ``n`` workers (``run``, :func:`_sweep`'s): sims/s, the efficiency against ``n`` times one worker's
    (``base``), and how much of what is lost the tasks lost inside the workers (the machine's share: host cores,
    memory, the driver) rather than between them (the pool's)."""
    samples = run.samples
    throughput = max(samples)
    wall = len(tasks) / throughput
    efficiency = throughput / (n * max(base.samples))
    machine = base.inside / run.inside  # the efficiency the tasks' own times allow
    devices, models = s.devices, s.models
    steps = tasks[0][3]
    row = Row("scaling", s.name, f"sweep, {n} worker{'s' * (n > 1)}{label}", "sims/s", samples, ratio=efficiency,
              limit=f"{n} x 1 worker",
              params={"workers": n, "tasks": len(tasks), "size": s.size, "steps": steps, "backend": s.backend,
                      "devices": devices[:n] if devices else None, "repeats": s.repeats, "best_wall_s": wall,
                      "gpus_on_host": len(devices) if devices else 0, "gpu_models": models[:n],
                      "speculative_copies": run.copies, "copies_first": run.won, "inside_ms": run.inside * 1e3,
                      "inside_efficiency": machine, "pool_efficiency": efficiency / machine})
    target = (SHORT_TARGET if label and n == 2 else EFFICIENCY_TARGET) if s.gpu else _cpu_target(n)
    if n > 1 and target is not None:
        row.target, row.met = f">= {target}", efficiency >= target
    row.note = (f"efficiency {efficiency:.3f} = {machine:.3f} inside the workers ({run.inside * 1e3:.2f} ms a task, "
                f"{base.inside * 1e3:.2f} alone) x {efficiency / machine:.3f} the pool's, "
                f"{wall / len(tasks) * 1e3:.1f} ms per simulation") + (
        f"; {n} of {len(devices)} GPUs: {', '.join(sorted(set(models[:n])))}" if s.gpu and devices else "")
    return row


def _independent_rows(name: str, module: str, n: int, tasks: list, repeats: int, base: float, pooled: float,
                      log: Callable[[str], None]) -> list[Row]:
    """``n`` independent processes running what the pool's ``n`` workers ran (the machine's ceiling), and the
    pool's throughput against theirs (target: INDEPENDENT_TARGET)."""
    samples = independent(module, n, tasks, repeats)
    best = max(samples)
    ceiling = Row("scaling", name, f"sweep, {n} independent processes (no pool)", "sims/s", samples,
                  ratio=best / (n * base), limit=f"{n} x 1 worker", params={"workers": n, "tasks": len(tasks)})
    ceiling.note = f"efficiency {best / (n * base):.3f}: the machine's ceiling for {n} one-core workers"
    versus = Row("scaling", name, f"pool of {n} against {n} independent processes", "ratio", [pooled / best],
                 ratio=pooled / best, limit=f"{n} independent processes")
    versus.target, versus.met = f">= {INDEPENDENT_TARGET}", pooled / best >= INDEPENDENT_TARGET
    log(f"   {n} independent processes: {best:.2f} sims/s (efficiency {best / (n * base):.3f}); the pool "
        f"{pooled / best:.3f} of them")
    return [ceiling, versus]


def _pool_cost(s: SimpleNamespace, here: SimpleNamespace, sims: list[tuple], log: Callable[[str], None]
               ) -> list[Row]:
    """What the pool costs per task: a task that does nothing, through a one-worker pool, against the same call in
    this process (``here``: the bench's runtime and module); and each simulation of ``sims`` through the pool,
    against the time the task took inside the worker (its read-back included), so that the difference is the
    pool's (sending the task, the result's way back, the worker's loop), not the task's own work."""
    from taichi_aot.pool import Pool

    calls = 200 if s.quick else 2000
    count = 4 if s.quick else 16
    pooled: list[tuple[float, float]] = []  # (wall seconds a task through the pool, seconds inside the worker)
    with Pool(s.module, arch=s.arch, workers=1, devices=s.devices[:1] if s.devices else None, backend=s.backend,
              threads=None if s.gpu else 1, setup=warm_up) as pool:
        pool.map(noop, range(50), progress=False)
        t0 = time.perf_counter()
        pool.map(noop, range(calls), progress=False)
        pooled_noop = (time.perf_counter() - t0) / calls
        big = 1 << 20  # 4 MiB of f32 back (through the worker's shared memory, pool/_arena.py)
        pool.map(array_back, [big] * 4, progress=False)
        t0 = time.perf_counter()
        pool.map(array_back, [big] * count, progress=False)
        pooled_big = (time.perf_counter() - t0) / count
        for task in sims:
            pool.map(timed, [task], progress=False)
            t0 = time.perf_counter()
            within = [seconds for _, seconds in pool.map(timed, [task] * count, progress=False)]
            pooled.append(((time.perf_counter() - t0) / count, sum(within) / count))
    t0 = time.perf_counter()
    for i in range(calls):
        noop(here, i)
    local_noop = (time.perf_counter() - t0) / calls
    overhead = Row("scaling", s.name, "pool cost per task (empty task)", "us/task", [(pooled_noop - local_noop) * 1e6],
                   params={"calls": calls, "pooled_us": pooled_noop * 1e6, "in_process_us": local_noop * 1e6})
    overhead.note = f"{pooled_noop * 1e6:.0f} us through the pool vs {local_noop * 1e6:.2f} us in-process"
    t0 = time.perf_counter()
    for _ in range(count):
        array_back(here, big)
    local_big = (time.perf_counter() - t0) / count
    large = Row("scaling", s.name, "pool cost per task (a 4 MiB array back)", "us/task",
                [(pooled_big - local_big) * 1e6], params={"bytes": 4 * big, "pooled_us": pooled_big * 1e6,
                                                          "in_process_us": local_big * 1e6, "tasks": count})
    large.note = f"{pooled_big * 1e6:.0f} us through the pool vs {local_big * 1e6:.0f} us in-process"
    rows = [overhead, large]
    for task, (wall, inside) in zip(sims, pooled):
        what = f"{task[2]}x{task[2]}, {task[3]} steps"
        row = Row("scaling", s.name, f"pool cost per task ({what})", "us/task", [(wall - inside) * 1e6],
                  limit="the task's time inside the worker", ratio=wall / inside,
                  params={"size": task[2], "steps": task[3], "pooled_ms": wall * 1e3, "inside_ms": inside * 1e3,
                          "tasks": count})
        row.note = (f"{wall * 1e3:.2f} ms a task through a one-worker pool, {inside * 1e3:.2f} ms of it inside the "
                    "worker (the simulation and its read-back)")
        rows.append(row)
        log(f"   a simulation ({what}): {wall * 1e3:.2f} ms through the pool, {inside * 1e3:.2f} ms inside the worker")
    log(f"   pool cost per empty task: {(pooled_noop - local_noop) * 1e6:.0f} us")
    return rows
