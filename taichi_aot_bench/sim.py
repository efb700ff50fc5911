"""The simulation section of ``taichi-aot bench``: a whole step loop, taichi_aot against raw C.

The module is ``sim_kernels.py``'s (a particle-in-cell step: 8192 particles on a 64x64 grid). One step launches the
graph ``substep`` (four dispatches) and then the same four kernels one by one; every ``EVERY`` steps ``stats`` runs,
the runtime is waited for and its four floats are read back to the host, as a program that watches its
simulation does. The same loop runs

* in C (``taichi_aot_steps``, steps.py: plain ``ti_launch_*`` calls, ``ti_wait``, and the read back a C program
  would make: map and copy on x64 and Vulkan, ``cuMemcpyDtoH`` on CUDA), over the very handles, memory and packed
  arguments of the Python loops below, in this process and on this runtime;
* as a Python user writes it: ``substep(x=x, ...)``, ``p2g(x, v, grid_v, grid_m)``, ..., ``rt.wait()``,
  ``out.to_numpy(buf)``;
* with bound launches (``bind`` once, ``launch()`` every step), and the read back the same way.

Measured with :mod:`.measure` (paired rounds; the C loop is the reference).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from taichi_aot import Arch
from taichi_aot.enums import CPU_ARCHS

from .compile import taichi_module
from .measure import measure
from .row import Row
from .steps import c_loop, readback

if TYPE_CHECKING:
    from taichi_aot import Runtime

PARTICLES = 8192
GRID = 64
EVERY = 8
DT = 2e-4
GRAVITY = -9.8


class _Simulation:
    """The module, its arrays and the three ways of running ``steps`` steps."""

    def __init__(self, rt: Runtime):
        self.rt = rt
        self.mod = rt.load_module(taichi_module("sim", rt.arch.name.lower()))
        rng = np.random.default_rng(0)
        self.x = rt.ndarray((PARTICLES, 2), np.float32, host_access="none")
        self.x.from_numpy(rng.uniform(0.2, 0.8, (PARTICLES, 2)).astype(np.float32))
        self.v = rt.ndarray((PARTICLES, 2), np.float32, host_access="none")
        self.v.from_numpy(rng.uniform(-1.0, 1.0, (PARTICLES, 2)).astype(np.float32))
        self.grid_v = rt.ndarray((GRID, GRID, 2), np.float32, host_access="none")
        self.grid_m = rt.ndarray((GRID, GRID), np.float32, host_access="none")
        # a small result the host reads: mapped where it can be
        self.out = rt.ndarray((4,), np.float32, host_access="none") if rt.arch == Arch.CUDA else rt.ndarray(
            (4,), np.float32, host_access="read")
        self.buf = np.zeros(4, np.float32)
        self._c_loop: Callable[[int, int], float] = self._c_reference()

    def _kernels(self) -> tuple[Any, ...]:
        k = self.mod.kernels
        return k["clear_grid"], k["p2g"], k["grid_update"], k["g2p"], k["stats"], self.mod.graphs["substep"]

    def dynamic(self, steps: int, every: int = EVERY) -> float:
        """Seconds of ``steps`` steps as a user writes them, per step (a read back every ``every``, 0: never)."""
        clear_grid, p2g, grid_update, g2p, stats, substep = self._kernels()
        x, v, gv, gm, out, buf, rt = self.x, self.v, self.grid_v, self.grid_m, self.out, self.buf, self.rt
        dt, g = DT, GRAVITY
        every = every or steps + 1
        t0 = time.perf_counter()
        for s in range(steps):
            substep(x=x, v=v, grid_v=gv, grid_m=gm, dt=dt, gravity=g)
            clear_grid(gv, gm)
            p2g(x, v, gv, gm)
            grid_update(gv, gm, dt, g)
            g2p(x, v, gv, dt)
            if s % every == every - 1:
                stats(x, v, out)
                rt.wait()
                out.to_numpy(buf)
        rt.wait()
        return (time.perf_counter() - t0) / steps

    def _bound(self) -> tuple[list[Any], Any]:
        clear_grid, p2g, grid_update, g2p, stats, substep = self._kernels()
        x, v, gv, gm = self.x, self.v, self.grid_v, self.grid_m
        step = [substep.bind(x=x, v=v, grid_v=gv, grid_m=gm, dt=DT, gravity=GRAVITY), clear_grid.bind(gv, gm),
                p2g.bind(x, v, gv, gm), grid_update.bind(gv, gm, DT, GRAVITY), g2p.bind(x, v, gv, DT)]
        return step, stats.bind(x, v, self.out)

    def bound(self, steps: int, every: int = EVERY) -> float:
        """Seconds per step with launches bound once."""
        step, stats = self._bound()
        runs = [b.launch for b in step]
        a, b, c, d, e = runs
        report = stats.launch
        out, buf, rt = self.out, self.buf, self.rt
        every = every or steps + 1
        t0 = time.perf_counter()
        for s in range(steps):
            a()
            b()
            c()
            d()
            e()
            if s % every == every - 1:
                report()
                rt.wait()
                out.to_numpy(buf)
        rt.wait()
        return (time.perf_counter() - t0) / steps

    def _c_reference(self) -> Callable[[int, int], float]:
        step, stats = self._bound()
        return c_loop(step, [stats], readback(self.rt, self.out.memory, self.buf))

    def c(self, steps: int, every: int = EVERY) -> float:
        """Seconds per step of the same loop in C."""
        return self._c_loop(steps, every)


def simulation(rt: Runtime, quick: bool) -> list[Row]:
    """The section's rows on ``rt``'s arch: us per step, and each Python form against the C loop."""
    sim = _Simulation(rt)
    name = rt.arch.name.lower()
    cpu = rt.arch in CPU_ARCHS
    steps = 8 if quick else (32 if cpu else 128)
    rounds, reps = (4, 2) if quick else (15, 3)  # quick: the harness works (CI), not figures
    if rt.arch == Arch.CUDA and not quick:  # a GPU host's noise comes in bursts: more, shorter repeats (as the
        steps, reps = 32, 8                  # launch section's) find its quiet moments for every loop alike
    methods = {
        "raw C step loop": lambda: sim.c(steps) * 1e6,
        "dynamic calls (as users write them)": lambda: sim.dynamic(steps) * 1e6,
        "bound launches": lambda: sim.bound(steps) * 1e6,
    }
    m = measure(methods, "raw C step loop", rounds, reps)
    params = {"steps": steps, "rounds": rounds, "reps": reps, "every": EVERY, "particles": PARTICLES, "grid": GRID}
    rows = []
    for method, bests in m.bests.items():
        row = Row("simulation", name, method, "us/step", bests, params=params)
        ratio = m.ratio(method)
        if ratio is not None:
            row.limit, row.ratio, row.spread = "raw C step loop", ratio, m.spread(method)
            row.target, row.met = "<= 1.03", ratio <= 1.03
        rows.append(row)
    if m.warnings:
        rows[0].note = "; ".join(m.warnings)
    return rows
