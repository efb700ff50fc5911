"""The worker side of a pool: one Runtime on one device with its modules loaded once, and the task loop.

The same :class:`Worker` serves both backends: a local worker process runs :func:`serve` on its end of
a pipe; a Ray actor (``_ray.py``) holds a Worker and calls :func:`run_task` for each task. Replies are
named tuples of this module (which both sides import), so the parent never unpickles anything the worker
could not build: :class:`Started` or :class:`StartFailed` once, then :class:`TaskDone` or :class:`TaskFailed`
for each task.

A handle (``_local.LocalHandle``, ``_ray.RayHandle``) is what the pool drives: :class:`WorkerHandle`.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Protocol, Union

from ..errors import WorkerStartError

#: A module as the pool is given it: a folder or ``.tcm`` path, or ``.tcm`` bytes.
ModuleSource = Union[str, bytes]


@dataclass
class WorkerConfig:
    """What a worker needs to start; pickled into the worker process (or Ray actor)."""

    slot: int  # which of the pool's workers this is (0..N-1), kept by its replacements
    arch: str | None  # an Arch name, or None: the fastest here
    device_index: int  # the runtime's device index (on CUDA 0 where the worker sees only its GPUs)
    device: int | None  # the device given to this worker (a CUDA ordinal or Vulkan index), None on the CPU
    cuda_visible: str | None  # CUDA_VISIBLE_DEVICES for the worker process, set before CUDA starts
    more_devices: tuple[int, ...] = ()  # CUDA: the device indices of the worker's other runtimes, one a GPU it holds
    devices: tuple[int, ...] = ()  # every device given to this worker, ``device`` first (empty: none, or Ray's)
    modules: dict[str, ModuleSource] = field(default_factory=dict)
    setup: Callable[[Worker], Any] | None = None
    env: dict[str, str] = field(default_factory=dict)
    cpus: tuple[int, ...] | None = None  # the cores a CPU worker runs on (its share), None: wherever
    threads: int | None = None  # the threads of a CPU worker's runtime (what Ray reserves for it); None on a GPU

    def held(self) -> dict[str, list[int]]:
        """``{"devices": [...]}``, every device given to the worker, where it was given any; else ``{}``."""
        return {"devices": list(self.devices)} if self.devices else {}


class Started(NamedTuple):
    """A worker is ready: what the parent learns of it (:meth:`Worker.describe`)."""

    info: dict[str, Any]


class StartFailed(NamedTuple):
    """A worker could not start: why, and where (its traceback)."""

    message: str
    traceback: str


class TaskDone(NamedTuple):
    """A task's return value."""

    value: Any


class TaskFailed(NamedTuple):
    """A task's exception: pickled where it could be rebuilt, with its type's name, message and traceback."""

    payload: bytes | None
    type_name: str
    message: str
    traceback: str


Reply = Union[TaskDone, TaskFailed]


class WorkerHandle(Protocol):
    """One worker as the pool drives it (a local process or a Ray actor). ``ready`` and ``run`` and ``stop``
    are called by the slot's own thread only; ``kill`` by any thread."""

    backend: str
    pid: int | None
    info: dict[str, Any]

    def ready(self, timeout: float | None) -> None:
        """Wait for the worker's :class:`Started`; WorkerStartError when it failed or died, TimeoutError when late."""

    def run(self, fn: Callable[..., Any], item: Any) -> Reply:
        """Run one task and return its reply; WorkerDiedError when the worker ends first."""

    def kill(self) -> None:
        """End the worker now (its owner then sees WorkerDiedError)."""

    def stop(self, timeout: float) -> None:
        """Ask the worker to stop, wait up to ``timeout`` s, then make sure it is gone."""

    def release(self) -> None:
        """Make sure the worker is gone and free what the handle holds."""


class WorkerDiedError(Exception):
    """A worker (process or Ray actor) ended while it held a task (or while starting): what every handle kind
    raises for the pool to replace it. ``exitcode``: the process's, where known; ``node_lost``: the Ray node it
    ran on left the cluster (the worker did not die of itself)."""

    def __init__(self, exitcode: int | None, node_lost: bool = False):
        super().__init__(exitcode)
        self.exitcode = exitcode
        self.node_lost = node_lost


class Worker:
    """What a task function receives: this worker's runtime, its modules and a place to keep things.

    Attributes:
        slot: the worker's number in the pool (a replacement keeps its predecessor's number).
        device: the device it was given (CUDA ordinal or Vulkan device index; its first where it holds several),
            None on the CPU.
        runtime: its :class:`~taichi_aot.Runtime` (used from the worker's own thread only).
        runtimes: a runtime for each GPU it holds (``Pool(devices=[[0, 1], [2, 3]])``), ``runtime`` first.
        modules: its loaded modules by name; ``module`` is the first (or only) one. ``modules_on[k]``: those of
            ``runtimes[k]``.
        cache: a dict kept between tasks: allocate ndarrays once, reuse them in every task.
    """

    def __init__(self, config: WorkerConfig):
        from ..runtime import Runtime

        self.slot = config.slot
        self.device = config.device
        self._held = config.held()
        self.pid = os.getpid()
        self.cache: dict[str, Any] = {}
        if config.cpus and hasattr(os, "sched_setaffinity"):  # before the runtime starts its threads
            os.sched_setaffinity(0, config.cpus)
        self.runtime = Runtime(config.arch, config.device_index, cpu_threads=config.threads)
        self.runtimes = [self.runtime]
        try:
            for k in config.more_devices:  # one at a time: each closed below where a later one fails
                self.runtimes.append(Runtime(config.arch, k))
            self.modules_on = [{name: rt.load_module(source) for name, source in config.modules.items()}
                               for rt in self.runtimes]
            self.modules = self.modules_on[0]
            if config.setup is not None:
                config.setup(self)
            for rt in self.runtimes:
                rt.wait()
        except BaseException:
            for rt in self.runtimes:
                rt.close()
            raise

    @property
    def module(self):  # -> AotModule (the first one given to the pool)
        """The pool's first (usually only) module; KeyError-free: None when the pool was given no module."""
        return next(iter(self.modules.values()), None)

    @property
    def arch(self):  # -> Arch
        """The runtime's arch."""
        return self.runtime.arch

    def describe(self) -> dict[str, Any]:
        """What the parent learns when the worker is ready (pid, arch, device, and every device it was given as
        ``devices``)."""
        return {"slot": self.slot, "pid": self.pid, "arch": self.runtime.arch.name.lower(), "device": self.device,
                **self._held, "host": os.uname().nodename}

    def close(self) -> None:
        """Close the runtime (and with it every module and ndarray of the worker)."""
        self.cache.clear()
        for rt in self.runtimes:
            rt.close()

    def __repr__(self) -> str:
        return f"<Worker slot={self.slot} pid={self.pid} {self.runtime.arch.name.lower()} device={self.device}>"


def apply_environment(config: WorkerConfig) -> None:
    """Set the worker process's environment before anything starts a backend (CUDA reads it once)."""
    if config.cuda_visible is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = config.cuda_visible
    os.environ.update(config.env)


def failure(exc: BaseException) -> TaskFailed:
    """The reply for an exception: itself pickled when it can be, with its type, message and traceback."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        payload: bytes | None = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(payload)  # type: ignore[arg-type]  # an exception whose constructor cannot take its args back fails here, not there
    except Exception:
        payload = None
    name = f"{type(exc).__module__}.{type(exc).__qualname__}"
    return TaskFailed(payload, name, str(exc), text)


def run_task(worker: Worker, fn: Callable[[Worker, Any], Any], item: Any) -> Reply:
    """Run ``fn(worker, item)``; its reply."""
    try:
        value = fn(worker, item)
    except Exception as e:
        return failure(e)
    return TaskDone(value)


def unsendable(reply: Reply, error: Exception) -> TaskFailed:
    """The reply for a result (or exception) that cannot be pickled back: the parent raises WorkerTaskError."""
    what = (f"result of type {type(reply.value).__name__}" if isinstance(reply, TaskDone)
            else f"exception {reply.type_name}")
    return TaskFailed(None, "TypeError", f"the task's {what} cannot be pickled: {error}", "")


def start_worker(config: WorkerConfig) -> tuple[Worker | None, Started | StartFailed]:
    """Start a worker; ``(worker, Started)`` or ``(None, StartFailed)``."""
    try:
        apply_environment(config)
        worker = Worker(config)
    except BaseException as e:
        text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        return None, StartFailed(f"{type(e).__name__}: {e}", text)
    return worker, Started(worker.describe())


def _watch_parent(parent: int) -> None:
    """End this process when its parent is gone (a task may run long, away from the pipe)."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(3)


def serve(conn: Any, config: WorkerConfig, parent: int, arena: str | None = None) -> None:
    """A local worker process: start, say whether it is ready, then answer tasks until told to stop.

    Messages in are pickled ``(fn, item)`` tuples (bytes), or ``None`` to stop; out, the replies, their large
    buffers through the parent's ``arena`` where it has one (_arena.py).
    """
    from ._arena import dumps as dumps_reply
    from ._arena import open_arena

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops the workers
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="taichi_aot-parent-watch").start()
    shared = open_arena(arena)  # before the hello: then the parent lets its descriptor of the arena go
    worker, hello = start_worker(config)
    conn.send(hello)
    if worker is None:
        return
    loads, dumps, protocol = pickle.loads, pickle.dumps, pickle.HIGHEST_PROTOCOL
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            break  # the parent closed the pipe (or is gone)
        reply: Reply
        try:
            message = loads(data)
        except Exception as e:  # the item's class is not importable here, say
            reply = failure(e)
        else:
            if message is None:
                break
            reply = run_task(worker, message[0], message[1])
        try:
            out = dumps_reply(reply, shared)
        except Exception as e:  # the result cannot be pickled: say so instead of dying
            out = dumps(unsendable(reply, e), protocol)
        try:
            conn.send_bytes(out)
        except (EOFError, OSError):
            break
    worker.close()
    conn.close()
    sys.stdout.flush()


def start_error(slot: int, reply: Started | StartFailed | None, exitcode: int | None = None,
                detail: Mapping[str, Any] | None = None) -> WorkerStartError:
    """The error for a worker that did not start: its own reason, or how its process ended."""
    where = f"worker {slot}" + (f" ({', '.join(f'{k} {v}' for k, v in detail.items())})" if detail else "")
    if isinstance(reply, StartFailed):
        return WorkerStartError(f"{where} could not start: {reply.message}", reply.traceback)
    return WorkerStartError(f"{where} died while starting ({describe_exit(exitcode)})")


def describe_exit(exitcode: int | None) -> str:
    """'killed by SIGKILL', 'exit status 1', ... for a process's exit code (negative: a signal)."""
    if exitcode is None:
        return "no exit status"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit status {exitcode}"
