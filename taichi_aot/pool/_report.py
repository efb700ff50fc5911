"""What a pool reports of the workers it lost: one :class:`WorkerLost` record for each worker that died under a task.

A worker is lost when its process ends (segfault, abort, ``kill -9``) or, with Ray, when its actor dies or the
node it ran on leaves the cluster. The pool writes the record before the task can end (retried by the next free
worker, or failed with :class:`~taichi_aot.errors.WorkerCrashedError`), so ``pool.lost_workers`` is complete when
``map`` returns.
"""

from __future__ import annotations

import time as _clock
from dataclasses import dataclass, field
from typing import Any

from ._worker import WorkerDiedError, describe_exit


@dataclass(frozen=True)
class WorkerLost:
    """One worker that died under a task, where it ran, and what became of the task.

    Attributes:
        slot: the worker's number in the pool (its replacement keeps it).
        pid: the worker's process id (None when it died before saying).
        host: the name of the machine it ran on.
        node: the id of the Ray node it ran on (as ``ray.get_runtime_context().get_node_id()`` gives it, and
            ``pool.workers`` as ``"node"``); None for a local worker.
        node_lost: True when that node itself left the cluster (every worker on it was lost with it), False when
            the worker died on its own.
        exitcode: the process's exit status where the pool saw it (local workers: negative for a signal), else None.
        index: the task's position in the items of its ``map``; None for a task given to ``submit``.
        task: the task as errors name it: ``"item 3 (0.25)"``.
        attempt: how many workers this task has lost, this one included (1: the first).
        retried: True when the task was given to the next free worker again; False when it had lost
            ``retries + 1`` workers and failed with :class:`~taichi_aot.errors.WorkerCrashedError`.
        time: when the pool saw the loss (seconds since the epoch, as ``time.time()``).
    """

    slot: int
    pid: int | None
    host: str | None
    node: str | None
    node_lost: bool
    exitcode: int | None
    index: int | None
    task: str
    attempt: int
    retried: bool
    time: float = field(default_factory=_clock.time)

    @property
    def cause(self) -> str:
        """How the worker ended, in words: ``"killed by SIGKILL"``, ``"its node 84d4215e... left the cluster"``."""
        if self.node_lost:
            return f"its node {self.node} left the cluster"
        if self.exitcode is not None:
            return describe_exit(self.exitcode)
        return "the worker died"

    def __str__(self) -> str:
        where = ", ".join(f"{k} {v}" for k, v in (("pid", self.pid), ("node", self.node)) if v is not None)
        then = "retried" if self.retried else "failed"
        return (f"worker {self.slot}{f' ({where})' if where else ''} lost under {self.task}: {self.cause}; "
                f"the task {then} (attempt {self.attempt})")


def lost_worker(slot: int, info: dict[str, Any], death: WorkerDiedError, task: str, index: int | None,
                attempt: int, retried: bool) -> WorkerLost:
    """The record of a worker that died under a task; ``info`` is what the worker said when it started."""
    return WorkerLost(slot=slot, pid=info.get("pid"), host=info.get("host"), node=info.get("node"),
                      node_lost=death.node_lost, exitcode=death.exitcode, index=index, task=task, attempt=attempt,
                      retried=retried)
