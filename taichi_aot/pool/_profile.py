"""A profile of a pool's workers (``with pool.profile() as prof:``): every task submitted while it is open runs inside a
profile of its worker's runtimes (:class:`~taichi_aot.profile.Profile`), whose kernel rows and launches come back with
the task's value, each with the worker's slot; ``prof.kernels()`` sums the rows by kernel, device and slot,
``print(prof)`` is the table, ``prof.save()`` the Chrome trace (a process a worker's device), ``prof.plot()`` the chart,
as a runtime's profile gives them."""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, NamedTuple

from ..errors import InvalidStateError
from ..profile import Launch, graph_of, nested, plot_rows, rows_table, trace_of, write_trace

__all__ = ["PoolKernelRow", "PoolProfile", "Profiled"]


class PoolKernelRow(NamedTuple):
    """A kernel's (or graph's) launches on one device of one worker (``slot``): how many, and their seconds."""

    name: str
    device: str
    slot: int
    launches: int
    total: float
    min: float
    max: float
    mean: float
    timed: str  # as taichi_aot.profile.KernelRow's
    bytes: int = 0

    @property
    def graph(self) -> str | None:
        """The graph whose dispatch this row is (``<graph>/<kernel>``), or None (as KernelRow's)."""
        return graph_of(self.name)


class ProfiledValue(NamedTuple):
    """A profiled task's value, and its worker's rows (``KernelRow`` fields, as tuples), slot and launches
    (``Launch`` fields)."""

    value: Any
    rows: list[tuple]
    slot: int
    launches: tuple[tuple, ...] = ()


class Profiled:
    """A task function run inside a profile of its worker's runtimes (module level: it travels to the workers by
    reference, with the function it wraps)."""

    def __init__(self, fn: Callable[[Any, Any], Any]):
        self.fn = fn

    def __call__(self, worker: Any, item: Any) -> ProfiledValue:
        from ..profile import Profile

        with Profile(*worker.runtimes) as prof:
            value = self.fn(worker, item)
        return ProfiledValue(value, [tuple(r) for r in prof.kernels()], worker.slot,
                             tuple(tuple(e) for e in prof.launches))


class PoolProfile:
    """The rows the pool's profiled tasks brought back (see the module docstring); open until its block ends."""

    def __init__(self, close: Callable[[PoolProfile], None]):
        self._close = close
        self._lock = threading.Lock()
        self._rows: list[PoolKernelRow] = []
        self._launches: list[tuple[int, Launch]] = []  # (slot, launch)
        self.open = True

    def add(self, reply: ProfiledValue) -> Any:
        """Take a profiled task's rows and launches; its value."""
        with self._lock:
            self._rows += [PoolKernelRow(r[0], r[1], reply.slot, *r[2:]) for r in reply.rows]
            self._launches += [(reply.slot, Launch(*e)) for e in reply.launches]
        return reply.value

    @property
    def launches(self) -> list[tuple[int, Launch]]:
        """Each profiled task's launches (and waits), with its worker's slot, in the order the tasks came back."""
        with self._lock:
            return list(self._launches)

    def kernels(self) -> list[PoolKernelRow]:
        """A row a kernel, device and slot, summed over the tasks, largest total first."""
        groups: dict[tuple[str, str, int], list[PoolKernelRow]] = {}
        with self._lock:
            for r in self._rows:
                groups.setdefault((r.name, r.device, r.slot), []).append(r)
        rows = []
        for (name, device, slot), found in groups.items():
            launches = sum(r.launches for r in found)
            total = sum(r.total for r in found)
            kinds = {r.timed for r in found}
            rows.append(PoolKernelRow(name, device, slot, launches, total, min(r.min for r in found),
                                      max(r.max for r in found), total / launches if launches else 0.0,
                                      kinds.pop() if len(kinds) == 1 else "mixed", sum(r.bytes for r in found)))
        return nested(rows)

    def table(self) -> str:
        """The rows as text (``print(prof)``), as a runtime's profile's table with the worker's slot."""
        return rows_table(self.kernels(), slots=True)

    def trace(self) -> dict:
        """The Chrome trace of the workers' launches (``Profile.trace``'s events), a process a worker's device
        (``worker <slot> <device>``). Workers on this machine share its monotonic clock; Ray's on other machines have
        their own (each process is right, their places against each other are not)."""
        return trace_of((f"worker {slot} {e.device}", e) for slot, e in self.launches)

    def save(self, path: str | os.PathLike) -> str:
        """Write the Chrome trace (``trace()``) to ``path``; returns the path.

        Raises:
            InvalidArgumentError: ``path`` is a folder, or cannot be written.
        """
        return write_trace(self.trace(), path, "PoolProfile.save")

    def plot(self, path: str | os.PathLike, top: int = 20) -> str:
        """A bar chart of the ``top`` kernels' and graphs' total times by worker (``Profile.plot``'s); the path
        written.

        Raises:
            InvalidStateError: no profiled task brought launches back (nothing to draw), or no matplotlib.
            InvalidArgumentError: ``path`` is a folder, cannot be written, or has a suffix matplotlib cannot write.
        """
        rows = self.kernels()
        if not rows:
            raise InvalidStateError("PoolProfile.plot: no profiled task brought a launch back, nothing to draw (were "
                                    "the tasks submitted while the profile was open?)")
        return plot_rows(rows, path, top, "PoolProfile.plot")

    def __str__(self) -> str:
        return self.table()

    def close(self) -> None:
        """Stop profiling the tasks submitted from now on (those submitted before still bring their rows back)."""
        if self.open:
            self.open = False
            self._close(self)

    def __enter__(self) -> PoolProfile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
