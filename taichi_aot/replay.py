"""Launches recorded once and replayed from C (``taichi_aot_replay`` in ``_csrc/launch.c``), with no Python in
between: :class:`LaunchSequence`, made by ``Runtime.record()`` or of :class:`~taichi_aot.launch.BoundLaunch`
objects appended."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from ._lifetime import Parent, unpicklable
from ._native import ffi, lib
from .backends import launch_error
from .enums import CPU_ARCHS
from .errors import ArgumentTypeError, InvalidArgumentError, WrongThreadError
from .launch import BoundLaunch

_STALE = lib.TAICHI_AOT_STALE

__all__ = ["LaunchSequence"]

_clock = time.perf_counter
_CHUNK_SECONDS, _CHUNK_GROWTH = 0.02, 16  # a replay returns to Python at least this often (once its chunks grew)
# On GPUs, a replay waits for the device after self._queue launches: at first _QUEUE_LAUNCHES, then as many as
# the device runs in about _DRAIN_SECONDS (by what the last wait took), changed at most _QUEUE_GROWTH times at once.
_QUEUE_LAUNCHES, _QUEUE_MIN, _QUEUE_MAX, _QUEUE_GROWTH, _DRAIN_SECONDS = 512, 16, 1 << 16, 8.0, 0.05


class LaunchSequence:
    """Launches recorded once and replayed by C code in the extension, with no Python in between.

    Build with ``rt.record()`` (``with rt.record() as seq: kernel(x, 1.0); graph(a=x)``) or
    :meth:`append` of :class:`BoundLaunch` objects; then ``seq.replay(times)``.
    """
    __reduce_ex__ = unpicklable("send what it launches and record it there")

    def __init__(self, runtime: Parent):
        self._runtime = runtime
        self._launches: list[BoundLaunch] = []
        self._steps: Any = None
        self._done: Any = ffi.new("uint64_t *")  # how many launches the last replay made before it stopped
        self._pass_seconds = 0.0  # what one pass took in the last chunk replayed (0: none yet)
        self._last_chunk = 1  # that chunk's passes: the next grows at most _CHUNK_GROWTH times
        self._queue = _QUEUE_LAUNCHES  # on GPUs, launches queued before the replay waits for the device

    def append(self, launch: BoundLaunch) -> None:
        """Add a bound launch (of this runtime) at the end.

        Raises:
            ArgumentTypeError: not a BoundLaunch.
            InvalidArgumentError: a launch of another runtime.
        """
        if not isinstance(launch, BoundLaunch):
            raise ArgumentTypeError(f"a LaunchSequence holds BoundLaunch objects, got {type(launch).__name__}")
        if launch._runtime is not self._runtime:
            raise InvalidArgumentError("the launch belongs to another runtime")
        self._launches.append(launch)
        self._steps = None

    def __len__(self) -> int:
        return len(self._launches)

    def __iter__(self) -> Iterator[BoundLaunch]:
        return iter(self._launches)

    def replay(self, times: int = 1) -> None:
        """Launch the whole sequence ``times`` times, in order, from C.

        Raises:
            ArgumentTypeError: ``times`` is not an int >= 0.
            InvalidArgumentError: ``times`` is more than the C replay counts (2**64 - 1).
            ClosedError, WrongThreadError: a recorded object is closed, or another thread calls.
        """
        _check_times(times)
        seen = lib.taichi_aot_epoch  # read first: a close after it makes C refuse the chunk (STALE)
        self._check_here()
        if not self._launches or not times:
            return
        count = len(self._launches)
        if self._steps is None:
            steps = ffi.new("TaichiAotLaunch[]", count)
            for i, launch in enumerate(self._launches):
                steps[i] = launch._c[0]
            self._steps = steps
        # In chunks of about _CHUNK_SECONDS each, sized by what a pass took in the last chunk (the first chunk
        # ever is one pass, and a chunk grows at most _CHUNK_GROWTH times the last): Python gets control back
        # between them, so Ctrl-C (or any signal handler) acts promptly, however long the whole replay, and a
        # short replay, once the sequence has run, is one C call. Where launches only enqueue work (GPUs), the
        # queue holds at most about _DRAIN_SECONDS of the device's work: the replay waits for the device after
        # self._queue launches, a number set by how long the last such wait took. What an interrupted replay
        # leaves to drain stays short (on a software Vulkan device too), and on a fast GPU the waits come
        # seldom enough to cost nothing (each costs a fixed half millisecond on an H100 with Vulkan).
        replay, steps, done = lib.taichi_aot_replay, self._steps, self._done
        rt = self._runtime
        cpu = rt.arch in CPU_ARCHS
        passes, queued = 0, 0
        while passes < times:
            most = times if cpu else max(1, self._queue // count)
            n = min(self._chunk(), times - passes, most - queued)
            start = _clock()
            code = replay(steps, count, n, done, seen)
            if code == _STALE:  # something was closed since the check (another thread): checked again, nothing run
                seen = lib.taichi_aot_epoch
                self._check_here()
                continue
            self._pass_seconds, self._last_chunk = max(_clock() - start, 1e-9) / n, n
            if code:
                made = passes * count + done[0]
                if done[0] < count:
                    where = f"replay step {done[0]} ({self._launches[done[0]]._entry!r}) after {made} launches"
                else:
                    where = f"a replay of {made} launches"
                # a step's own error, or the library's found after the passes (read as libtaichi's)
                kind = steps[done[0] % count].kind if done[0] < n * count else None
                raise launch_error(code, where, kind)
            passes += n
            queued += n
            if queued >= most and passes < times:
                self._drain()
                queued = 0

    def _check_here(self) -> None:
        """Raise unless every launch recorded, and the runtime, may be launched here (a runtime of libtaichi, and
        libtaichi's launches beside the own CUDA runtime, from the runtime's thread only: launch.thread_flag)."""
        for launch in self._launches:
            launch._validate()
        self._runtime.ensure_open()
        if not self._runtime.on_its_thread() and any(
                not step._c.flags & lib.TAICHI_AOT_LAUNCH_ANY_THREAD for step in self._launches):
            raise WrongThreadError("replay: a launch of the sequence is made through libtaichi, whose runtime is used "
                                   "from the thread that made it; replay it there")

    def _chunk(self) -> int:
        """Passes in the next chunk: about _CHUNK_SECONDS of them, at most _CHUNK_GROWTH times the last chunk."""
        per = self._pass_seconds
        return min(max(1, int(_CHUNK_SECONDS / per)) if per else 1, self._last_chunk * _CHUNK_GROWTH)

    def _drain(self) -> None:
        """Wait for the device in a replay on a GPU, and size the queue by what the wait took."""
        start = _clock()
        self._runtime.wait()
        took = max(_clock() - start, 1e-6)
        self._queue = min(_QUEUE_MAX, max(_QUEUE_MIN, int(self._queue * min(_QUEUE_GROWTH, _DRAIN_SECONDS / took))))

    def __repr__(self) -> str:
        return f"<LaunchSequence of {len(self._launches)} launches>"


def _check_times(times: Any) -> None:
    """ArgumentTypeError unless ``times`` is an int >= 0; InvalidArgumentError past what the C replay counts."""
    if isinstance(times, bool) or not isinstance(times, int) or times < 0:
        raise ArgumentTypeError(f"replay times must be an int >= 0, got {times!r}")
    if times >= 1 << 64:
        raise InvalidArgumentError(f"replay times must be below 2**64 (the C replay's count), got {times}")
