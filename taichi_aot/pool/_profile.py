"""A profile of a pool's workers (``with pool.profile() as prof:``): every task submitted while it is open runs inside a
profile of its worker's runtimes (:class:`~taichi_aot.profile.Profile`), whose kernel rows come back with the task's
value, each with the worker's slot; ``prof.kernels()`` sums them by kernel, device and slot, ``print(prof)`` is the
table."""

from __future__ import annotations

import threading
from typing import Any, Callable, NamedTuple

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


class ProfiledValue(NamedTuple):
    """A profiled task's value, and its worker's rows (``KernelRow`` fields, as tuples) and slot."""

    value: Any
    rows: list[tuple]
    slot: int


class Profiled:
    """A task function run inside a profile of its worker's runtimes (module level: it travels to the workers by
    reference, with the function it wraps)."""

    def __init__(self, fn: Callable[[Any, Any], Any]):
        self.fn = fn

    def __call__(self, worker: Any, item: Any) -> ProfiledValue:
        from ..profile import Profile

        with Profile(*worker.runtimes) as prof:
            value = self.fn(worker, item)
        return ProfiledValue(value, [tuple(r) for r in prof.kernels()], worker.slot)


class PoolProfile:
    """The rows the pool's profiled tasks brought back (see the module docstring); open until its block ends."""

    def __init__(self, close: Callable[[PoolProfile], None]):
        self._close = close
        self._lock = threading.Lock()
        self._rows: list[PoolKernelRow] = []
        self.open = True

    def add(self, reply: ProfiledValue) -> Any:
        """Take a profiled task's rows; its value."""
        with self._lock:
            self._rows += [PoolKernelRow(r[0], r[1], reply.slot, *r[2:]) for r in reply.rows]
        return reply.value

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
        rows.sort(key=lambda r: -r.total)
        return rows

    def table(self) -> str:
        """The rows as text (``print(prof)``)."""
        rows = self.kernels()
        head = f"{'kernel':<32} {'device':<10} {'slot':>4} {'launches':>8} {'total ms':>10} {'mean us':>10} " \
               f"{'min us':>10} {'max us':>10}  timed"
        lines = [head, "-" * len(head)]
        lines += [f"{r.name[:32]:<32} {r.device:<10} {r.slot:>4} {r.launches:>8} {r.total * 1e3:>10.3f} "
                  f"{r.mean * 1e6:>10.1f} {r.min * 1e6:>10.1f} {r.max * 1e6:>10.1f}  {r.timed}" for r in rows]
        return "\n".join(lines if rows else [*lines, "(no launches)"])

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
