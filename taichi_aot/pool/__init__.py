"""A pool of runtimes: one worker process per device (or per CPU share), each with its modules loaded once.

    from taichi_aot.pool import Pool

    def simulate(worker, params):             # at module level: it travels to the workers by name
        rt, mod = worker.runtime, worker.module
        ...                                   # allocate, launch, read back: numpy arrays or plain values
        return result

    if __name__ == "__main__":                # workers are spawned: they import this file again
        with Pool("physics.tcm", arch="cuda") as pool:   # one worker per GPU, each seeing only its own
            results = pool.map(simulate, params)          # in the order of params

A worker is a process with its runtimes, one a device it holds (one, by default): processes work side by side
without sharing an interpreter or a lock. Workers are local processes
(spawned, never forked) by default, or Ray actors with ``backend="ray"`` (``pip install
'taichi_aot[ray]'``) to spread over a cluster with the same code.

What comes back: ``fn``'s return value, or its exception (its own type, the worker's traceback as
``__cause__``). A worker that dies (segfault, abort, ``kill -9``) is replaced and its task retried,
``retries`` times, then the task fails with :class:`WorkerCrashedError`; with Ray the same holds for an actor
that dies and for a node that leaves the cluster. ``pool.lost_workers`` says what was lost and what became of
each task (:class:`WorkerLost`). A worker that cannot start fails the pool's start with :class:`WorkerStartError`
and its reason. Closing the pool (or leaving its ``with`` block, or Ctrl-C) leaves no worker process behind.
"""

from __future__ import annotations

import concurrent.futures
import os
import pickle
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any, Callable

from ..enums import CPU_ARCHS, Arch
from ..errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    PoolClosedError,
    PoolError,
    WorkerCrashedError,
    WorkerStartError,
    WorkerTaskError,
)
from ..profile import adopt_pool
from ..runtime import resolve_arch
from ._local import LocalHandle, exit_if_unserved
from ._modules import Modules, module_sources
from ._plan import plan_cpus, plan_devices
from ._profile import PoolKernelRow, PoolProfile, Profiled
from ._progress import Progress
from ._report import WorkerLost, lost_worker
from ._worker import Reply, TaskDone, Worker, WorkerConfig, WorkerDiedError, WorkerHandle

__all__ = [
    "Pool",
    "PoolClosedError",
    "PoolError",
    "PoolKernelRow",
    "PoolProfile",
    "RemoteTraceback",
    "Worker",
    "WorkerCrashedError",
    "WorkerLost",
    "WorkerStartError",
    "WorkerTaskError",
]

#: Variables a Ray worker is given from the driver (a local worker inherits the whole environment).
_RAY_ENV_PREFIXES = ("TAICHI_C_API_INSTALL_DIR", "TAICHI_AOT_", "VK_ICD_FILENAMES", "VK_DRIVER_FILES")


class RemoteTraceback(Exception):  # noqa: N818  (a traceback, never raised: named as concurrent.futures names its own)
    """The worker's traceback, attached as ``__cause__`` of an exception raised by a task."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return "\n\n" + self.text.rstrip()


class _Task:
    __slots__ = ("copies", "delivered", "fn", "future", "index", "item", "losses", "profiles", "running", "started",
                 "twice")

    def __init__(self, fn: Callable[[Worker, Any], Any], item: Any, index: int | None,
                 profiles: Sequence[PoolProfile] = ()):
        # run inside a profile of its worker's runtimes where the pool's profiles are open (their rows come back)
        self.fn, self.item, self.index = Profiled(fn) if profiles else fn, item, index
        self.profiles = tuple(profiles)
        self.future: concurrent.futures.Future = concurrent.futures.Future()
        self.losses: tuple[WorkerLost, ...] = ()  # the workers it was running on when they died
        self.running = False
        self.started = 0.0  # when its first copy started (time.monotonic)
        self.copies = 0  # how many workers run it now (2 while a speculative copy runs)
        self.twice = 0.0  # when its speculative copy started (at most one; 0: none)
        self.delivered = False  # its future was given its outcome (the first copy to end gives it)

    def label(self) -> str:
        text = repr(self.item)
        text = text if len(text) <= 60 else text[:57] + "..."
        return f"item {self.index} ({text})" if self.index is not None else f"item {text}"


class _Slot:
    """One worker place in the pool: its current handle and the thread that feeds it."""

    def __init__(self, config: WorkerConfig):
        self.config = config
        self.handle: WorkerHandle | None = None
        self.thread: threading.Thread | None = None
        self.lost: BaseException | None = None
        #: "starting" (first start, or a dead worker's replacement), "running", "lost" (could not be replaced)
        #: or "stopped" (the pool closed it); set before ``handle`` is cleared and after it is set
        self.state = "starting"

    def describe(self) -> dict[str, Any]:
        """What ``Pool.workers`` says of this place."""
        state, handle = self.state, self.handle
        if state == "running" and handle is not None:
            return {**handle.info, "state": "running"}
        c = self.config
        about = {"slot": c.slot, "pid": None, "arch": c.arch and c.arch.lower(), "device": c.device, **c.held(),
                 "state": "stopped" if state == "running" else state}  # running: its handle just let go
        return {**about, "error": str(self.lost)} if state == "lost" else about


class Pool:
    """Worker processes (or Ray actors), each holding one Runtime on one device with the modules loaded.

    Args:
        modules: a module path (folder or ``.tcm``) or ``.tcm`` bytes, a list of them, or a dict
            ``name -> module``. Workers get them as ``worker.modules`` (by name: a path's file name without
            ``.tcm``) and the first as ``worker.module``.
        arch: the backend (an :class:`Arch`, its name, or None for the fastest here).
        devices: the devices to use, one worker each: CUDA ordinals (among the visible ones) or Vulkan
            device indices; on CUDA an entry may be a list, the GPUs one worker holds, a runtime each
            (``worker.runtimes``). Default: every GPU the probe found (Vulkan: every non-software device, else
            device 0); ignored on the CPU.
        cuda_visible: CUDA: each worker sees only its GPUs (CUDA_VISIBLE_DEVICES set in it: its first GPU is
            device 0 there, as torch's ``"cuda"`` is; the default), or with False every GPU, its runtimes taking
            theirs by index (taichi_aot's own CUDA runtime drives any GPU).
        workers: how many workers; default one per device on a GPU, and on the CPU one per ``threads`` of
            the cores this process may use (its affinity, within a container's CPU quota). More workers than
            devices share them round-robin.
        threads: CPU only: the threads each worker's runtime starts (its kernels run on at most this many,
            and at most as many as their module was built for: ``build --cpu-threads``). Default: the cores
            divided among the workers (1 when ``workers`` is not given either: one worker per core is the
            most throughput for many independent tasks). Each local worker is pinned to its own share of the
            cores; a Ray worker asks Ray for ``num_cpus=threads``.
        backend: ``"local"`` (spawned processes, the default) or ``"ray"`` (Ray actors spread over the nodes;
            CUDA workers ask for ``num_gpus=1``, the others for ``num_cpus=threads``).
        setup: ``setup(worker)``, run once in each worker after its modules load (allocate buffers into
            ``worker.cache``, warm kernels up); a failure there fails the start.
        retries: how many times a task whose worker died is given to a new worker before it fails
            with :class:`WorkerCrashedError`.
        start_timeout: seconds a worker may take to start.
        ray_init: with ``backend="ray"``, call ``ray.init()`` when Ray is not initialized yet (and
            ``ray.shutdown()`` at close); False: the caller initializes Ray (a cluster address, say).
        speculative: once no task waits, a worker left idle also runs a copy of a task that has run longer
            than the pool's median task (the longest-running first, at most one copy each); the first copy to
            end gives the result (each item's result still comes back once) and the other's is dropped. For
            tasks that may run twice: a straggler (a slow core, a loaded node) then holds a map back less.

    Raises:
        WorkerStartError: a worker could not start (its reason and traceback are in the error).
        MissingFileError: a module path does not exist.
        InvalidArgumentError: bad devices, workers, threads, backend or retries.
        ArgumentTypeError: modules of another type; speculative not a bool.
        ArgumentOutOfRangeError: a device that does not exist.
    """

    def __init__(self, modules: Modules = None, *, arch: Arch | str | int | None = None,
                 devices: Sequence[int | Sequence[int]] | None = None, workers: int | None = None,
                 threads: int | None = None, backend: str = "local", cuda_visible: bool = True,
                 setup: Callable[[Worker], Any] | None = None, retries: int = 2, start_timeout: float = 300.0,
                 ray_init: bool = True, speculative: bool = False):
        if backend not in ("local", "ray"):
            raise InvalidArgumentError(f"Pool: backend must be 'local' or 'ray', got {backend!r}")
        if backend == "local":
            exit_if_unserved()  # a frozen app's worker that runs the app's script makes no pool of its own
        if not isinstance(cuda_visible, bool):
            raise ArgumentTypeError(f"Pool: cuda_visible must be True or False, got {cuda_visible!r}")
        if not isinstance(speculative, bool):
            raise ArgumentTypeError(f"Pool: speculative must be True or False, got {speculative!r}")
        if not isinstance(retries, int) or retries < 0:
            raise InvalidArgumentError(f"Pool: retries must be an int >= 0, got {retries!r}")
        self.arch = resolve_arch(arch)
        self.backend = backend
        self._retries = retries
        self._start_timeout = float(start_timeout)
        self._cv = threading.Condition()
        self._queue: deque[_Task] = deque()
        self._profiles: list[PoolProfile] = []  # open: the tasks submitted meanwhile are profiled
        self._stopping = False
        self._terminating = False
        self._closed = False
        self._owns_ray = False
        self._lost = 0
        self._broken: BaseException | None = None
        self._lost_workers: list[WorkerLost] = []
        self._speculative = speculative
        self._running: set[_Task] = set()
        self._durations: deque[float] = deque(maxlen=64)  # of the latest tasks run to their end
        #: how many speculative copies were started, and how many of them ended first
        self.speculated = self.speculation_won = 0
        sources = module_sources(modules, pack=backend == "ray")
        plan = plan_devices(self.arch, devices, workers, backend, cuda_visible)
        cpus: list[tuple[int, ...] | None]
        if self.arch in CPU_ARCHS:
            threads, cpus = plan_cpus(workers, threads, backend)
            plan = [(None, (0,), None, ())] * len(cpus)
        elif threads is not None:
            raise InvalidArgumentError(f"Pool: threads is for CPU workers, not {self.arch.name}")
        else:
            cpus = [None] * len(plan)
        #: the threads each CPU worker's runtime starts (its kernels run on at most this many); None on a GPU
        self.threads = threads
        env = {k: v for k, v in os.environ.items() if k.startswith(_RAY_ENV_PREFIXES)} if backend == "ray" else {}
        self._slots = [
            _Slot(WorkerConfig(slot=i, arch=self.arch.name, device_index=index[0], device=device, cuda_visible=visible,
                               modules=sources, setup=setup, env=env, cpus=cpus[i], threads=threads,
                               more_devices=index[1:], devices=given))
            for i, (device, index, visible, given) in enumerate(plan)
        ]
        if backend == "ray":
            self._start_ray(ray_init)
        self._start_all()
        for slot in self._slots:
            slot.thread = threading.Thread(target=self._feed, args=(slot,), daemon=True,
                                           name=f"taichi_aot-pool-slot-{slot.config.slot}")
            slot.thread.start()
        self._finalizer = weakref.finalize(self, _kill_handles, self._slots)
        adopt_pool(self)  # where python -m taichi_aot profile profiles every runtime: the workers' too

    # -- starting -------------------------------------------------------------------------

    def _start_ray(self, ray_init: bool) -> None:
        from ._ray import _ray

        ray = _ray()
        if not ray.is_initialized():
            if not ray_init:
                raise WorkerStartError("backend='ray' with ray_init=False: call ray.init() first")
            ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False)
            self._owns_ray = True

    def _new_handle(self, config: WorkerConfig) -> WorkerHandle:
        if self.backend == "ray":
            from ._ray import RayHandle

            return RayHandle(config, cuda=self.arch == Arch.CUDA)
        return LocalHandle(config)

    def _start_all(self) -> None:
        """Start every worker at once and wait for all; on any failure stop the others and raise it."""
        try:
            handles = []
            for slot in self._slots:
                slot.handle = self._new_handle(slot.config)
                handles.append(slot.handle)
            deadline = time.monotonic() + self._start_timeout
            for handle in handles:
                handle.ready(max(deadline - time.monotonic(), 0.1))
            for slot in self._slots:
                slot.state = "running"
        except BaseException as e:
            for slot in self._slots:
                if slot.handle is not None:
                    slot.handle.kill()
                    slot.handle.release()
            if self._owns_ray:
                self._shutdown_ray()
            if isinstance(e, TimeoutError):
                raise WorkerStartError(str(e)) from None
            raise

    def _replace(self, slot: _Slot) -> Any:
        """A new worker in a dead one's place; None (the slot is lost) when two tries fail."""
        for _ in range(2):
            if self._terminating:
                return None
            handle = None
            try:
                handle = self._new_handle(slot.config)
                handle.ready(self._start_timeout)
                return handle
            except Exception as e:  # spawning, Ray: any failure loses the place, saying why
                if handle is not None:
                    handle.release()
                slot.lost = e if isinstance(e, WorkerStartError) else WorkerStartError(f"{type(e).__name__}: {e}")
        return None

    # -- the slot threads -----------------------------------------------------------------

    def _take(self) -> _Task | None:
        with self._cv:
            while True:
                while not self._queue and not self._stopping:
                    copy, wait = self._second_copy()
                    if copy is not None:
                        return copy
                    self._cv.wait(wait)
                if not self._queue or self._terminating:
                    return None
                task = self._queue.popleft()
                if task.delivered:  # its other copy ended while it waited for a retry
                    continue
                if task.running or task.future.set_running_or_notify_cancel():
                    task.running = True
                    if not task.copies:
                        task.started = time.monotonic()
                    task.copies += 1
                    self._running.add(task)
                    return task

    def _second_copy(self) -> tuple[_Task | None, float | None]:
        """Under the lock, with no task waiting: a running task to copy onto this idle worker (speculative), or
        how long to wait before one could be due (None: until notified)."""
        if not self._speculative or len(self._durations) < 3 or not self._running:
            return None, None
        due = sorted(self._durations)[len(self._durations) // 2]  # the median task
        now = time.monotonic()
        single = [t for t in self._running if not t.twice and t.copies == 1 and not t.delivered]
        if not single:
            return None, None
        oldest = min(single, key=lambda t: t.started)
        if now - oldest.started < due:
            return None, max(oldest.started + due - now, 0.001)
        oldest.twice = now
        oldest.copies += 1
        self.speculated += 1
        return oldest, None

    def _ended(self, task: _Task, started: float) -> bool:
        """A copy of ``task`` (started at ``started``) ended: whether it is the one to give the outcome."""
        with self._cv:
            task.copies -= 1
            if not task.copies:
                self._running.discard(task)
            if task.delivered:
                return False
            task.delivered = True
            self._durations.append(time.monotonic() - started)
            if task.twice and started >= task.twice:  # this copy started after the copy was made: it is the copy
                self.speculation_won += 1
            if self._speculative:
                self._cv.notify_all()  # idle workers look again for a task to copy
            return True

    def _feed(self, slot: _Slot) -> None:
        handle = slot.handle
        while handle is not None:
            task = self._take()
            if task is None:
                break
            started = time.monotonic()
            try:
                reply = handle.run(task.fn, task.item)
            except WorkerDiedError as death:
                handle.release()
                info, handle = handle.info, None
                slot.state = "stopped" if self._terminating else "starting"  # its replacement, below
                slot.handle = None
                if self._terminating:
                    if self._ended(task, started):
                        task.future.set_exception(PoolClosedError(f"the pool was closed while {task.label()} ran"))
                    break
                self._crashed(slot, task, death, info)
                handle = slot.handle = self._replace(slot)
                slot.state = "running" if handle is not None else "stopped" if self._terminating else "lost"
                continue
            except Exception as e:  # not sent, not carried back, or anything else the transport raises
                self._failed(task, started, e)
                continue  # (a terminating pool gives no next task)
            if self._ended(task, started):
                _deliver(task, reply)
        if handle is not None:
            slot.state = "stopped"
            if self._terminating:
                handle.kill()
                handle.release()
            else:
                handle.stop(30.0)
            slot.handle = None
        elif not self._terminating:
            self._slot_lost(slot)

    def _failed(self, task: _Task, started: float, e: Exception) -> None:
        """A copy of ``task`` raised ``e`` in the transport, its worker alive (a task or result that cannot be pickled:
        ArgumentTypeError, WorkerTaskError), or anything else a transport raises (a killed worker's pipe, Ray's own
        errors; PoolClosedError while the pool terminates): the task's future ends with it, never left pending."""
        if isinstance(e, (ArgumentTypeError, WorkerTaskError)):
            error: Exception = type(e)(f"Pool: {task.label()}: {e}")
        elif self._terminating:
            error = PoolClosedError(f"the pool was closed while {task.label()} ran")
        else:
            error = e
        if self._ended(task, started):
            task.future.set_exception(error)

    def _crashed(self, slot: _Slot, task: _Task, death: WorkerDiedError, info: dict[str, Any]) -> None:
        """Record the lost worker, then give its task to the next free worker, or fail it after ``retries``."""
        attempt = len(task.losses) + 1
        with self._cv:  # recorded before the task's future can end: map returns with it counted
            task.copies -= 1
            elsewhere = task.copies > 0 or task.delivered  # its other copy goes on (or gave the result)
            if not task.copies:
                self._running.discard(task)
            lost = lost_worker(slot.config.slot, info, death, task.label(), task.index, attempt,
                               elsewhere or attempt <= self._retries)
            task.losses += (lost,)
            self._lost_workers.append(lost)
            if elsewhere:
                return
            if lost.retried:
                self._queue.appendleft(task)  # first in line for the next free worker
                self._cv.notify()
                return
        how = ", ".join(loss.cause for loss in task.losses)
        task.future.set_exception(WorkerCrashedError(
            f"{task.label()} crashed its worker {attempt} time(s) ({how}); retries={self._retries}",
            task.item, task.index, attempt, tuple(loss.exitcode for loss in task.losses)))

    def _slot_lost(self, slot: _Slot) -> None:
        """A worker could not be replaced: when none is left, every waiting task fails with the reason."""
        with self._cv:
            self._lost += 1
            if self._lost < len(self._slots):
                return
            self._broken = slot.lost or WorkerStartError("every worker of the pool died and none could be restarted")
            pending, self._queue = list(self._queue), deque()
        for task in pending:
            if task.running or task.future.set_running_or_notify_cancel():
                task.future.set_exception(self._broken)

    # -- the API ----------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """The number of workers."""
        return len(self._slots)

    def __len__(self) -> int:
        return len(self._slots)

    @property
    def workers(self) -> list[dict[str, Any]]:
        """One entry a worker place, in slot order: what its worker said when it started (slot, pid, host, arch,
        device, every device it was given as ``devices`` where it was given any, and a Ray worker's node id), with
        ``"state": "running"``. While a dead worker's replacement starts
        (on the same device), the place says ``"state": "starting"`` with its slot, arch and device (``pid`` None);
        a place whose worker could not be replaced, ``"state": "lost"`` and the ``"error"``; while the pool closes,
        ``"stopped"`` for a place whose worker has stopped. Empty once the pool is closed."""
        if self._closed:
            return []
        return [s.describe() for s in self._slots]

    @property
    def lost_workers(self) -> list[WorkerLost]:
        """Every worker that died under a task, oldest first: where it ran (slot, pid, host, Ray node, and whether
        that node left the cluster) and what became of its task (index, attempt, retried or failed)."""
        with self._cv:
            return list(self._lost_workers)

    @property
    def restarts(self) -> int:
        """How many workers died under a task (each replaced where a new one starts): ``len(pool.lost_workers)``."""
        return len(self._lost_workers)

    @property
    def closed(self) -> bool:
        """True once ``close`` or ``terminate`` began."""
        return self._stopping

    def _check_open(self) -> None:
        if self._stopping:
            raise PoolClosedError("the pool is closed")
        if self._broken is not None:
            raise self._broken

    def _check_fn(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise ArgumentTypeError(f"Pool: fn must be callable as fn(worker, item), got {type(fn).__name__}")
        if self.backend == "local":
            try:
                pickle.dumps(fn)
            except Exception as e:
                raise ArgumentTypeError(
                    f"Pool: {getattr(fn, '__qualname__', fn)!s} cannot be sent to a worker process ({e}); a local "
                    "pool needs a function defined at module level (not a lambda or a nested function)") from None

    def _submit(self, fn: Callable[[Worker, Any], Any], item: Any, index: int | None) -> _Task:
        task = _Task(fn, item, index, self._profiles)
        with self._cv:
            self._check_open()
            self._queue.append(task)
            self._cv.notify()
        return task

    def profile(self) -> PoolProfile:
        """``with pool.profile() as prof:``: each task submitted while it is open runs inside a profile of its
        worker's runtimes, whose rows come back with its value (:mod:`taichi_aot.pool._profile`): ``prof.kernels()``,
        a row a kernel, device and worker slot; ``print(prof)``, the table."""
        self._check_open()
        made = PoolProfile(self._profiles.remove)
        self._profiles.append(made)
        return made

    def submit(self, fn: Callable[[Worker, Any], Any], item: Any) -> concurrent.futures.Future:
        """Run ``fn(worker, item)`` on the next free worker; a :class:`concurrent.futures.Future` of its result.

        Raises:
            ArgumentTypeError: ``fn`` is not callable, or (local pool) cannot be pickled;
            PoolClosedError: the pool is closed.
        """
        self._check_fn(fn)
        return self._submit(fn, item, None).future

    def map(self, fn: Callable[[Worker, Any], Any], items: Iterable[Any], *,
            progress: bool | Callable[[int, int], object] | None = None) -> list:
        """``[fn(worker, item) for item in items]``, spread over the workers; results in the order of ``items``.

        The first task in input order that fails raises its exception here, as ``Executor.map`` does (its own
        type, the worker's traceback as ``__cause__``); tasks of this map not started yet are cancelled.
        ``progress``: True, a progress bar on standard error (default: when it is a terminal and the map has more
        tasks than workers); or a function ``progress(done, total)``, called as tasks end (a notebook's widget,
        ``tqdm``'s ``update``: it runs in the pool's threads).

        Raises:
            the task's own exception; WorkerCrashedError: a task killed its worker ``retries + 1`` times;
            PoolClosedError: the pool was closed (terminated) during the map.
        """
        self._check_fn(fn)
        items = list(items)
        tasks = [self._submit(fn, item, i) for i, item in enumerate(items)]
        futures = [t.future for t in tasks]
        bar = self._progress(progress, futures)
        try:
            if bar is not None:
                for f in futures:
                    f.add_done_callback(bar.step)
            done, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
            _raise_first_failure(futures, done)
            return [f.result() for f in futures]
        finally:
            for f in futures:
                f.cancel()  # what has not started (after an error or Ctrl-C) is not run
            if bar is not None:
                bar.finish()

    def _progress(self, progress: bool | Callable[[int, int], object] | None, futures: list[concurrent.futures.Future]
                  ) -> Progress | None:
        """The progress of a map of ``futures`` as ``map`` says (None: not shown)."""
        show = progress if progress is not None else (sys.stderr.isatty() and len(futures) > len(self._slots))
        return Progress(len(futures), len(self._slots), show if callable(show) else None) if show and futures else None

    def close(self) -> None:
        """Finish every submitted task, then stop the workers (each closes its runtime) and reap them."""
        with self._cv:
            if self._closed:
                return
            self._stopping = True
            self._cv.notify_all()
        try:
            for slot in self._slots:
                if slot.thread is not None:
                    slot.thread.join()
        except BaseException:  # Ctrl-C while waiting: stop at once instead
            self.terminate()
            raise
        self._end()

    def terminate(self) -> None:
        """Stop now: cancel what has not started, kill the workers (running tasks fail with PoolClosedError)."""
        with self._cv:
            if self._closed:
                return
            self._stopping = self._terminating = True
            pending, self._queue = list(self._queue), deque()
            self._cv.notify_all()
        for task in pending:
            if task.running:
                task.future.set_exception(PoolClosedError(f"the pool was closed before {task.label()} could run"))
            else:
                task.future.cancel()
        for slot in self._slots:
            if slot.handle is not None:
                slot.handle.kill()
        for slot in self._slots:
            if slot.thread is not None:
                slot.thread.join()
        self._end()

    def _end(self) -> None:
        for slot in self._slots:  # a slot whose thread never ran (start failed after it) holds its handle still
            if slot.handle is not None:
                slot.handle.kill()
                slot.handle.release()
                slot.handle = None
        self._closed = True
        self._finalizer.detach()
        if self._owns_ray:
            self._shutdown_ray()

    def _shutdown_ray(self) -> None:
        from ._ray import _ray

        self._owns_ray = False
        _ray().shutdown()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:  # an error or Ctrl-C in the block: do not wait for the rest
            self.terminate()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._slots)} workers"
        return f"<Pool {self.backend} {self.arch.name.lower()} {state}>"


def _deliver(task: _Task, reply: Reply) -> None:
    if isinstance(reply, TaskDone):
        value = reply.value
        for p in task.profiles:  # a profiled task's value, its rows taken by each profile open when it was submitted
            value = p.add(reply.value)
        task.future.set_result(value)
        return
    payload, type_name, message, text = reply
    exc: BaseException | None = None
    if payload is not None:
        try:
            exc = pickle.loads(payload)
        except Exception:  # its class is not importable here
            exc = None
    if not isinstance(exc, BaseException):
        exc = WorkerTaskError(f"{task.label()} raised {type_name}: {message}", type_name, text)
    exc.__cause__ = RemoteTraceback(text)
    task.future.set_exception(exc)


def _failed(f: concurrent.futures.Future) -> bool:
    return f.cancelled() or f.exception() is not None


def _raise_first_failure(futures: list[concurrent.futures.Future], done: set[concurrent.futures.Future]) -> None:
    """The first failure in input order among ``futures`` (``done`` holds those that ended), raised as
    ``Executor.map`` does: the tasks before it, which may fail too, are waited for, those after it cancelled. A
    cancelled task or one the pool's closing ended is a PoolClosedError."""
    failed = [i for i, f in enumerate(futures) if f in done and _failed(f)]
    if not failed:
        return
    for f in futures[failed[0] + 1:]:
        f.cancel()
    concurrent.futures.wait(futures[:failed[0]])
    first = next(f for f in futures if f.done() and _failed(f))
    if first.cancelled() or isinstance(first.exception(), PoolClosedError):
        ended = sum(1 for f in futures if f.done() and not _failed(f))
        raise PoolClosedError(f"the pool was closed during the map: {ended} of {len(futures)} tasks done")
    raise first.exception()  # type: ignore[misc]


def _kill_handles(slots: list[_Slot]) -> None:
    """At exit (or when a pool is dropped unclosed): no worker outlives its pool."""
    for slot in slots:
        if slot.handle is not None:
            slot.handle.kill()
