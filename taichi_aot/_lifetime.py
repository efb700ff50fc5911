"""Lifetimes of native objects: what every runtime-owned object shares.

Every native handle is held by an :class:`Owned` record. A child (memory, image,
module) *pins* its parent's record, and a live numpy view pins its memory's
record, so a native object is released only once it is closed **and** nothing
that needs it remains:

* ``close()`` (or leaving a ``with`` block, or garbage collection through
  ``weakref.finalize``) marks an object closed at once: every public method then
  raises :class:`~taichi_aot.errors.ClosedError`;
* the native release follows as soon as nothing pins it. A numpy view from
  ``map()`` therefore never dangles: its memory (and runtime) stay mapped and
  alive until the last view is garbage collected.

Closing bumps ``lib.taichi_aot_epoch``. Prepared launches (kernels, bound launches)
compare it in C with the epoch at which they last found their objects open, and
come back to Python to re-check only when it has moved: the hot path stays in C.
"""

from __future__ import annotations

import gc
import os
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Protocol

from ._native import lib
from .drivers import cuda as _cuda
from .enums import Arch
from .errors import ArgumentTypeError, ClosedError, TaichiError

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Self

_pin_lock = threading.RLock()

#: This process's id, kept current in a child of os.fork() (its hook sets it): every ``ensure_open`` compares it,
#: and os.getpid() is a system call (about 0.15 us here; a value read back, ``rt.wait()`` each made two or three).
PID = [os.getpid()]
if hasattr(os, "register_at_fork"):  # pragma: no branch - every POSIX Python has it
    os.register_at_fork(after_in_child=lambda: PID.__setitem__(0, os.getpid()))


class Gate(Protocol):
    """What a launch reads of its runtime's LaunchGate (runtime.py) before it writes anything."""

    @property
    def thread(self) -> int: ...
    @property
    def pending(self) -> Any: ...
    @property
    def ident(self) -> int: ...
    @property
    def recorder(self) -> Any: ...


class LaunchGate:
    """What a launch asks of its runtime before it writes anything (the :class:`Gate` protocol's class), in one record
    that runtime.py sets and launch.py reads (``Runtime.gate``; for the package, not for users): ``thread``, the
    thread that owns the runtime; ``pending``, the runtime's C flags ([0] work may be running, [1] libtaichi's
    launches refused), which each prepared launch struct points to; ``ident``, the thread whose calls may take the
    fast path (``thread``, or -1 while recording: every launch then goes to Python); ``recorder``, the sequence a
    recording appends to."""

    __slots__ = ("ident", "pending", "recorder", "thread")

    def __init__(self, thread: int, pending: Any):
        self.thread = thread
        self.pending = pending
        self.ident = thread
        self.recorder: Any = None  # a replay.LaunchSequence while recording

    def record(self, sequence: Any) -> None:
        """Start (a sequence) or end (None) a recording."""
        self.recorder = sequence
        self.ident = self.thread if sequence is None else -1
        if sequence is not None:
            lib.taichi_aot_epoch += 1  # calls made in C (launch.py) come back to Python while it records


class ForeignPolicy(Protocol):
    """What a runtime's children ask of its foreign-array policy (ForeignArgs, _foreign.py), named here so that no
    room below the runtime imports the policy's (data flows to the launch, not back): an argument made of another
    library's array; and, of a launch (a call plan's, _callplan.py), its staged copies and the steps around packing
    and launching."""

    staged: list[Any]  # this launch's staged copies, where the backend cannot address an array
    allow_copies: bool  # whether a host array the backend cannot address may travel as a copy
    copies: Any  # the runtime's staged copies (_staged.StagedCopies): those in flight, taken before a wait

    @property
    def hits(self) -> dict[int, Any]: ...
    @property
    def unmaps(self) -> dict[int, Any]: ...
    def argument(self, value: Any, spec: Any, what: str) -> Any: ...
    def bound_argument(self, value: Any, spec: Any, what: str) -> Any: ...
    def fit(self, count: int) -> None: ...
    def fresh_plan(self, specs: Sequence[Any]) -> dict[str, Any] | None: ...
    def before_pack(self, count: int) -> None: ...
    def before_launch(self, values: Sequence[Any], specs: Sequence[Any]) -> None: ...
    def discard(self) -> None: ...
    def after_launch(self, keep: Callable[[Any, list[Any]], Any] | None = None) -> Any: ...
    def release(self, flight: Any = None) -> None: ...


class Parent(Protocol):
    """What a runtime's children (memory, images, ndarrays, modules, kernels and launches, the argument packers, the
    foreign-array policy, the launch backends) may ask of their runtime: all of it, named here, so that the rooms
    below runtime.py need not know the Runtime class. :class:`~taichi_aot.runtime.Runtime` is the one implementation;
    ``tests/test_layers.py`` keeps the rooms below it from importing it, even for annotations."""

    profiles: list[Any]  # the profiles open on it (taichi_aot.profile: its waits and its close tell them)

    @property
    def arch(self) -> Arch: ...
    @property
    def handle(self) -> Any: ...
    @property
    def owned(self) -> Owned: ...
    @property
    def device_index(self) -> int: ...
    @property
    def device(self) -> Any: ...  # where memory lives and how bytes move (placement.Device)
    @property
    def cpu_threads(self) -> int | None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def cuda_stream(self) -> int | None: ...
    @property
    def gate(self) -> Gate: ...
    @property
    def foreign(self) -> ForeignPolicy: ...
    @property
    def modules(self) -> dict[Any, Any]: ...
    @property
    def backends(self) -> Any: ...  # the launch backends' state of this runtime (backends.RuntimeBackends)
    @property
    def _children(self) -> weakref.WeakSet[Child]: ...
    def ensure_open(self) -> None: ...
    def library_runtime(self) -> Any: ...
    def on_its_thread(self) -> bool: ...
    def wait(self) -> None: ...
    def sync(self) -> None: ...
    def _check_closer(self, what: str) -> None: ...


def unpicklable(instead: str) -> Callable[[Any, Any], Any]:
    """A ``__reduce_ex__`` that refuses pickling (and copying) with an ArgumentTypeError that names the object and
    says what to send instead (``instead``): a native handle means nothing in another process."""

    def refuse(self: Any, protocol: Any) -> Any:
        raise ArgumentTypeError(f"a taichi_aot {type(self).__name__} cannot be pickled or copied: it holds native "
                                f"objects of this process's runtime; {instead}")

    return refuse


def _after_fork_in_child() -> None:
    # Every prepared launch in a forked child must come back to Python, which refuses it (the
    # runtime belongs to the parent process: its driver state is not the child's to use).
    lib.taichi_aot_epoch += 1
    # Fresh locks: another thread of the parent may have held one at the fork (closing a runtime), and the child has
    # no such thread to let it go (a runtime the child makes and closes would wait for it for ever).
    global _pin_lock, _collector_lock
    _pin_lock, _collector_lock = threading.RLock(), threading.Lock()
    # Only the forking thread's blocks without collection go on in the child: the collector on again after them
    _collector[0] = getattr(_held, "depth", 0)
    if _collector[0] == 0 and _collector[1]:
        gc.enable()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Owned:
    """A native handle's release function and what still needs it (pins).

    ``closed`` turns True once at :meth:`close`; ``release`` runs once, when the record is
    closed and unpinned. A record pins its ``parent`` until it is released. Closing moves the epoch that prepared
    launches compare, except for a ``quiet`` record: one whose release frees nothing a launch could still reach
    (a pooled import, which the runtime keeps), so that arrays taken for a call and dropped after it do not send
    every later call back to Python.
    """

    __slots__ = ("__weakref__", "_abandoned", "_parent", "_pid", "_pins", "_quiet", "_release", "_released",
                 "closed")

    def __init__(self, release: Callable[[], object], parent: Owned | None = None, quiet: bool = False):
        self._release = release
        self._pid = os.getpid()  # a forked child never releases its parent's native objects
        self._pins = 0
        self.closed = False
        self._released = False
        self._abandoned = False
        self._quiet = quiet
        self._parent = parent
        if parent is not None:
            parent.pin()

    def pin(self) -> None:
        """Keep the native object alive (until :meth:`unpin`), even once closed."""
        with _pin_lock:
            self._pins += 1

    def unpin(self) -> None:
        """Drop a pin; release now if the record is closed and this was the last one."""
        with _pin_lock:
            self._pins -= 1
            ready = self.closed and self._pins == 0 and not self._released
            if ready:
                self._released = True
        if ready:
            self._do_release()

    @property
    def in_its_process(self) -> bool:
        """Whether this is the process that made the native object (a forked child never releases its parent's)."""
        return self._pid == PID[0]

    def close(self) -> None:
        """Mark closed; release now if nothing pins it. Safe to call twice, never raises."""
        with _pin_lock:
            if self.closed:
                return
            self.closed = True
            if not self._quiet:
                lib.taichi_aot_epoch += 1
            ready = self._pins == 0 and not self._released
            if ready:
                self._released = True
        if ready:
            self._do_release()

    def abandon(self) -> None:
        """Mark closed and never release, nor anything made under it: at interpreter exit, for a runtime another
        thread may be inside of (the operating system takes the memory back)."""
        with _pin_lock:
            self._abandoned = True
            self.closed = True
            lib.taichi_aot_epoch += 1

    @property
    def abandoned(self) -> bool:
        """True once :meth:`abandon` was called."""
        return self._abandoned

    def _gone(self) -> bool:
        owned: Owned | None = self
        while owned is not None:
            if owned._abandoned:
                return True
            owned = owned._parent
        return False

    def _do_release(self) -> None:
        try:
            if self.in_its_process and not self._gone():
                if self._quiet:  # nothing the driver frees: no cost a call
                    self._release()
                else:  # a CUDA free breaks no CUDA graph another library captures
                    _cuda.relaxed(self._release)
        except ClosedError:
            pass  # its runtime was destroyed first, which released it with everything else
        except (TaichiError, OSError):
            pass  # a finalizer never raises; the handle is gone either way
        finally:
            parent, self._parent = self._parent, None
            if parent is not None:
                parent.unpin()


class Child:
    """What every object owned by a runtime shares: closing, ``closed``, context manager, checks.

    A subclass's constructor makes the native object, then calls :meth:`_attach` with the
    record that releases it.
    """

    _kind = "object"
    _runtime: Parent
    _owned: Owned
    _finalizer: weakref.finalize

    def _attach(self, runtime: Parent, owned: Owned) -> None:
        self._runtime = runtime
        self._owned = owned
        self._finalizer = weakref.finalize(self, owned.close)
        runtime._children.add(self)

    def ensure_open(self) -> None:
        """Raise ClosedError or WrongThreadError unless this object (and its runtime) may be used here."""
        if self._owned.closed:
            raise ClosedError(f"this {self._kind} is closed")
        self._runtime.ensure_open()

    @property
    def runtime(self) -> Parent:
        """The runtime this object belongs to (a :class:`~taichi_aot.runtime.Runtime`, typed by the protocol its
        children know it by, so that this room need not import the one above it)."""
        return self._runtime

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called (or the object or its runtime was finalized)."""
        return self._owned.closed

    @property
    def owned(self) -> Owned:
        """The record of the native object's lifetime (for the package: ``owned.closed`` is the cheapest test)."""
        return self._owned

    def close(self) -> None:
        """Release the native object (deferred while something still needs it). Safe to call twice.

        Raises:
            WrongThreadError: called from another thread while the runtime's own thread still runs.
        """
        if not self._owned.closed:
            self._runtime._check_closer(f"{type(self).__name__}.close()")
        self._finalizer()

    def __enter__(self) -> Self:
        self.ensure_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_held = threading.local()  # ``depth``: how many blocks of without_collection this thread is in (its runtimes made
# where no collection may run)
_collector_lock = threading.Lock()
_collector = [0, False]  # blocks inside without_collection on every thread; whether the collector was on before


def collection_held() -> bool:
    """Whether this thread is inside :func:`without_collection` (a runtime made there collects nothing first)."""
    return getattr(_held, "depth", 0) > 0


@contextmanager
def without_collection() -> Iterator[None]:
    """No collection in the block: Python's automatic one off (on again when the last such block on any thread
    ends, where it was on), and runtimes made in it make none first. XLA's handler makes a JAX op's twin on XLA's
    thread, where other objects' finalizers must not run (one may wait for the whole GPU, which a command buffer
    capture under way refuses)."""
    with _collector_lock:
        if _collector[0] == 0:
            _collector[1] = gc.isenabled()
            gc.disable()
        _collector[0] += 1
    _held.depth = getattr(_held, "depth", 0) + 1  # this thread's blocks (a forked child keeps only its own)
    try:
        yield
    finally:
        _held.depth -= 1
        with _collector_lock:
            _collector[0] -= 1
            if _collector[0] == 0 and _collector[1]:
                gc.enable()
