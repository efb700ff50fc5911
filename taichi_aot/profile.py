"""Each kernel's device time in your program: ``with rt.profile() as prof:`` records every launch made on the
runtime, from any thread, until the block ends; ``prof.kernels()`` gives a row a kernel, ``print(prof)`` the table,
``prof.save("trace.json")`` a Chrome trace (Perfetto, ``chrome://tracing``), ``prof.plot("kernels.png")`` a chart.

How a launch is timed (``Launch.timed``):

* ``"device"``: the device's own clock around the work. On Vulkan (the own Vulkan launch), two timestamps written into
  the launch's command batch at the compute stage, before and after its dispatches (a graph's record spans its
  dispatches, each of which is a record of its own, ``<graph>/<kernel>``; a launch recorded right after another takes
  the other's end as its start), read once the batch is done; on CUDA (the own CUDA launcher), two events on the
  launch's stream (none while the stream is captured into a CUDA graph; a graph's dispatches each between their own,
  each a record of its own as on Vulkan), read when the profile is.
* ``"call"``: on a CPU runtime the launch runs in the call, so the call's time is the kernel's.
* ``"enqueue"``: the launch path times nothing on the device (libtaichi's own Vulkan and CUDA launches,
  ``launcher="taichi"``): the figure is the host's call, which only enqueues the work. The table says so.

Nothing is recorded, and nothing paid, outside a profile: the dispatcher (``_csrc/launch.c``) reads one switch. Inside
one a launch takes two clock reads and a record (``_csrc/profile.c``); on Vulkan a timestamp more (two where the
launch does not follow another's), on CUDA two events (``backends/vkprofile.c``, ``backends/cudaprofile.c``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable
from typing import IO, Any, NamedTuple

from ._lifetime import Parent
from ._native import ffi, lib
from .errors import InvalidArgumentError, InvalidStateError, TaichiError

__all__ = ["KernelRow", "Launch", "Profile"]


def _states() -> dict[str, int]:
    """A record's states by name, as the C list gives them (``_csrc/profile.h``'s ``AOT_PROFILE_STATES``)."""
    value = ffi.new("int32_t *")
    states = {}
    for i in range(lib.TAICHI_AOT_PROFILE_STATES):
        name = ffi.string(lib.taichi_aot_profile_state(i, value)).decode()
        states[name] = int(value[0])
    return states


#: A record's states (``TaichiAotProfileRecord.state``) by name: profile.c writes the launches', this file the host's
#: own events (note_wait, note_copy).
STATES = _states()
_DEVICE, _WAIT, _COPY = STATES["device"], STATES["wait"], STATES["copy"]
#: How a record of each state was timed (``Launch.timed``): one that never got its device times shows its enqueue.
_TIMED = {value: "enqueue" if name == "waiting" else name for name, value in STATES.items()}
_TAKE = 4096  # records a call to the C store takes at most


class Launch(NamedTuple):
    """One launch (or a host event: a wait), in seconds of the host's monotonic clock (``time.monotonic``)."""

    name: str
    device: str  # "vulkan:0", "x64:0", ...
    thread: int  # the launching thread's pthread id
    host_start: float  # the call's start and end on the host
    host_end: float
    start: float  # the work's start and end: the device's, placed on the host's clock (see Profile.launches)
    end: float
    timed: str  # "device", "call" (a CPU runtime's), "enqueue" (no device time: the call's), "wait" or "copy"
    bytes: int = 0  # a copy event's: the host arrays' bytes the launch copied in and back
    thread_name: str = ""  # the launching thread's name (threading.Thread.name), where it was known

    @property
    def seconds(self) -> float:
        """The work's time (the device's, or the call's where nothing timed the device)."""
        return self.end - self.start


class KernelRow(NamedTuple):
    """A kernel's (or graph's) launches on one device: how many, and their seconds."""

    name: str
    device: str
    launches: int
    total: float
    min: float
    max: float
    mean: float
    timed: str  # as Launch.timed ("device", "call", "enqueue"); "mixed" where its launches differ
    bytes: int = 0  # the host arrays' bytes its launches copied in and back (staged copies), where any did

    @property
    def graph(self) -> str | None:
        """The graph whose dispatch this row is (its name is ``<graph>/<kernel>``: its time is inside the graph's
        row), or None: a kernel's or a graph's own row."""
        return graph_of(self.name)


class Profile:
    """The launches of one or more runtimes while it is open (``Runtime.profile()``; see the module docstring).
    A profile is read at any time (``kernels()``, ``launches``, ``print``, ``save``, ``plot``): what has finished
    by then; it closes with its ``with`` block (or ``close()``), which waits for the runtimes' work first."""

    def __init__(self, *runtimes: Parent, every: bool = False):
        if not runtimes and not every:
            raise InvalidArgumentError("Profile: give the runtimes to profile (Runtime.profile() makes one)")
        self._every = every  # every runtime made while it is open joins it (python -m taichi_aot profile)
        self._runtimes: list[Parent] = []
        self._raw: list[tuple[Parent, Any]] = []  # (runtime, record) not yet placed on the host's clock
        self._launches: list[Launch] = []
        self._offsets: dict[int, float] = {}  # a runtime's device clock to the host's (seconds added)
        self._lock = threading.Lock()
        self._lost = 0
        self._threads: dict[int, str] = {}  # a thread's id to its name, as seen while the profile was open
        #: (every=True) the profiles of the pools made while it is open: their workers' rows (``pool.profile()``)
        self.pools: list[Any] = []
        self._open = False
        self._pending_runtimes = list(runtimes)

    # -- opening and closing ------------------------------------------------------------------------------------

    def open(self) -> Profile:
        """Start recording (``with`` does): every launch on the runtimes from now on."""
        if self._open:
            return self
        for rt in self._pending_runtimes:
            self.add(rt)
        self._pending_runtimes = []
        self._open = True
        self._name_threads()
        if self._every:
            _EVERY.append(self)
        return self

    def add(self, rt: Parent) -> None:
        """Profile another runtime too, from now on."""
        if rt.closed:
            raise InvalidStateError(f"Profile: {rt!r} is closed")
        with self._lock:
            if any(r is rt for r in self._runtimes):
                return
            # a CPU runtime (one with threads) runs a launch in the call: the call's times are the kernel's
            code = lib.taichi_aot_profile_open(_handle(rt), rt.gate.pending, int(rt.cpu_threads is not None))
            if code < 0:
                raise InvalidStateError("Profile: 64 runtimes are profiled already")
            if code > 0:
                raise InvalidStateError(f"Profile: {rt!r} is profiled already (one profile a runtime at a time)")
            self._runtimes.append(rt)
            rt.profiles.append(self)

    def close(self) -> None:
        """Stop recording: each runtime's work waited for (its last device times read), its records taken."""
        for rt in list(self._runtimes):
            self.runtime_closing(rt)
        for pool in self.pools:  # tasks submitted from now on run unprofiled; those before bring their rows back
            pool.close()
        self._open = False
        if self in _EVERY:
            _EVERY.remove(self)

    def runtime_closing(self, rt: Parent) -> None:
        """A profiled runtime closes (Runtime.close calls this first): its work waited for where this thread may
        (its last device times read), its records taken, its profile ended."""
        if not rt.closed and any(r is rt for r in self._runtimes):
            try:
                rt.wait()
            except TaichiError:  # another thread's runtime, or its device failed: what has finished is taken
                pass
        with self._lock:
            if not any(r is rt for r in self._runtimes):
                return
            self._take(rt, True)
            lib.taichi_aot_profile_close(_handle(rt), rt.gate.pending)
            self._runtimes = [r for r in self._runtimes if r is not rt]
            if self in rt.profiles:
                rt.profiles.remove(self)

    def __enter__(self) -> Profile:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the records -----------------------------------------------------------------------------------------------

    def _take(self, rt: Parent, everything: bool) -> None:
        out = ffi.new("TaichiAotProfileRecord[]", _TAKE)
        lost = ffi.new("uint64_t *")
        while True:
            n = lib.taichi_aot_profile_take(_handle(rt), rt.gate.pending, out, _TAKE, int(everything), lost)
            for i in range(n):
                r = out[i]
                self._raw.append((rt, (ffi.string(r.name).decode("utf-8", "replace"), int(r.thread),
                                       r.host_start, r.host_end, r.device_start, r.device_end, int(r.state), 0)))
            self._lost = max(self._lost, int(lost[0]))
            if n < _TAKE:
                break

    def note_wait(self, rt: Parent, start_ns: int) -> None:
        """A host wait on ``rt`` from ``start_ns`` (time.monotonic_ns) until now, as an event of its own."""
        self._host_event(rt, "wait", start_ns, _WAIT, 0)

    def note_copy(self, rt: Parent, name: str, nbytes: int, start_ns: int) -> None:
        """A launch of kernel ``name`` on ``rt`` whose host arrays were copied (``nbytes`` in and back), from
        ``start_ns`` (time.monotonic_ns: its packing) until now (its copies back), as an event of its own."""
        self._host_event(rt, name, start_ns, _COPY, nbytes)

    def _host_event(self, rt: Parent, name: str, start_ns: int, state: int, nbytes: int) -> None:
        """An event of the host's own (``state``: _WAIT or _COPY) from ``start_ns`` until now."""
        end = time.monotonic_ns()
        with self._lock:
            self._threads[threading.get_ident()] = threading.current_thread().name
            self._raw.append((rt, (name, threading.get_ident(), start_ns, end, start_ns, end, state, nbytes)))

    def _name_threads(self) -> None:
        """Take the names of the threads there are, and were: a thread's launches are read after it may have ended.
        ``threading._dangling`` holds the Thread objects still referenced, ended ones too (the standard library's own
        tests read it; nothing public lists ended threads): their names kept, a live thread's taking precedence."""
        for t in [*list(getattr(threading, "_dangling", ())), *threading.enumerate()]:
            if t.ident is not None:
                self._threads[t.ident] = t.name

    def _collect(self) -> None:
        with self._lock:
            self._name_threads()
            for rt in self._runtimes:
                self._take(rt, False)
            raw, self._raw = self._raw, []
            for rt, rec in raw:  # a device's clock moved onto the host's: no launch's work before its call
                if rec[6] == _DEVICE:
                    need = (rec[2] - rec[4]) / 1e9
                    self._offsets[id(rt)] = max(need, self._offsets.get(id(rt), need))
            self._launches += [self._place(rt, rec) for rt, rec in raw]
            self._launches.sort(key=lambda e: e.start)

    def _place(self, rt: Parent, rec: tuple) -> Launch:
        """A record on the host's clock (seconds): a device's times moved by the runtime's offset, the largest
        that puts some launch's work at the start of its call, and none before it (set as records are read: it only
        grows, a run being read in pieces)."""
        name, thread, h0, h1, d0, d1, state, nbytes = rec
        device = f"{rt.arch.name.lower()}:{rt.device_index}"
        if state == _DEVICE:
            offset = self._offsets[id(rt)]
            start, end = d0 / 1e9 + offset, d1 / 1e9 + offset
        else:
            start, end = h0 / 1e9, h1 / 1e9
        timed = _TIMED[state]
        return Launch(name, device, thread, h0 / 1e9, h1 / 1e9, start, end, timed, nbytes,
                      self._threads.get(thread, ""))

    @property
    def launches(self) -> list[Launch]:
        """Every launch (and wait) recorded so far whose times are known, in the order their work started."""
        self._collect()
        return list(self._launches)

    @property
    def lost(self) -> int:
        """Launches not recorded: the store was full (4,194,304 records a runtime between reads)."""
        return self._lost

    def kernels(self) -> list[KernelRow]:
        """A row a kernel (or graph) and device: kernels and graphs by total time, largest first, each graph's dispatch
        rows (``<graph>/<kernel>``, inside its time) right under it in the order the graph runs them (waits not
        counted; its launches' copies counted in its ``bytes``, not in its times)."""
        groups: dict[tuple[str, str], list[Launch]] = {}  # in the order each first started
        copied: dict[tuple[str, str], int] = {}
        for e in self.launches:
            if e.timed == "copy":
                copied[(e.name, e.device)] = copied.get((e.name, e.device), 0) + e.bytes
            elif e.timed != "wait":
                groups.setdefault((e.name, e.device), []).append(e)
        rows = []
        for (name, device), events in groups.items():
            secs = [e.seconds for e in events]
            kinds = {e.timed for e in events}
            rows.append(KernelRow(name, device, len(secs), sum(secs), min(secs), max(secs), sum(secs) / len(secs),
                                  kinds.pop() if len(kinds) == 1 else "mixed", copied.get((name, device), 0)))
        return nested(rows)

    def table(self) -> str:
        """The kernels' rows as text (``print(prof)``), with their total (a graph's dispatches counted once: in the
        graph's row)."""
        return rows_table(self.kernels(), self._lost)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return f"<Profile of {len(self._runtimes)} runtime(s), {len(self._launches)} launch(es) read>"

    # -- a trace, a plot ---------------------------------------------------------------------------------------------

    def trace(self) -> dict:
        """The Chrome trace format's object (``save`` writes it): one complete event a launch, named by the kernel
        (a graph's dispatches inside their graph's event), a process a device, a track a launching thread named by the
        thread's name; the thread's waits and its launches' host-array copies (``copies: <kernel>``, with their bytes)
        on a track of their own beside it (``<thread>: waits and copies``: they are the host's times, the launches the
        device's); times in microseconds from the first event."""
        return trace_of((e.device, e) for e in self.launches)

    def save(self, path: str | os.PathLike) -> str:
        """Write the Chrome trace (``trace()``) to ``path``; returns the path.

        Raises:
            InvalidArgumentError: ``path`` is a folder, or cannot be written (a missing folder, no permission).
        """
        return write_trace(self.trace(), path, "Profile.save")

    def plot(self, path: str | os.PathLike, top: int = 20) -> str:
        """A bar chart of the ``top`` kernels' and graphs' total times (each graph's dispatches under it), to ``path``
        (PNG, SVG, PDF, ... by its suffix; none: ``.png`` added; needs matplotlib: ``pip install matplotlib``); returns
        the path written.

        Raises:
            InvalidStateError: no launch was recorded (nothing to draw), or matplotlib is not installed.
            InvalidArgumentError: ``path`` is a folder, cannot be written, or has a suffix matplotlib cannot write.
        """
        if not self.kernels():
            raise InvalidStateError("Profile.plot: no launch was recorded, nothing to draw (were the kernels launched "
                                    "inside the profile, on a runtime it profiles?)")
        return plot_rows(self.kernels(), path, top, "Profile.plot")


def _handle(rt: Parent) -> Any:
    """The runtime's TiRuntime, or NULL where it has none (the own CUDA runtime without libtaichi's)."""
    handle = rt.handle
    return handle if handle else ffi.NULL


#: The open profiles that every new runtime joins (Profile(every=True)).
_EVERY: list[Profile] = []


def adopt(rt: Parent) -> None:
    """A runtime just made joins the open profiles of every runtime (Runtime.__init__ calls this)."""
    for p in _EVERY:
        p.add(rt)


def adopt_pool(pool: Any) -> None:
    """A pool just made: the open profiles of every runtime profile its workers' tasks too (Pool.__init__ calls this;
    its rows are the profile's ``pools``)."""
    for p in _EVERY:
        p.pools.append(pool.profile())


# -- what a runtime's profile and a pool's share: rows in order, the table, the trace, the chart -----------------------


def graph_of(name: str) -> str | None:
    """The graph a row named ``<graph>/<kernel>`` is a dispatch of (kernel and graph names have no ``/``), or None."""
    graph, sep, _ = name.partition("/")
    return graph if sep else None


def _where(row: Any) -> tuple:
    """Where a row's launches ran: its device, and a pool's worker slot."""
    return row.device, getattr(row, "slot", None)


def nested(rows: list[Any]) -> list[Any]:
    """``rows`` as a table lists them: kernels' and graphs' rows by total time, largest first, each graph's dispatch
    rows right under their graph's row on the same device (and worker), in the order given."""
    parts: dict[tuple, list[Any]] = {}
    top = []
    for r in rows:
        graph = graph_of(r.name)
        if graph is None:
            top.append(r)
        else:
            parts.setdefault((graph, *_where(r)), []).append(r)
    top.sort(key=lambda r: -r.total)
    out = []
    for r in top:
        out += [r, *parts.pop((r.name, *_where(r)), [])]
    return out + [r for left in parts.values() for r in left]  # a dispatch row whose graph's row is not there


def rows_table(rows: list, lost: int = 0, slots: bool = False) -> str:
    """Rows (``nested``) as text: a graph's dispatch rows indented under it, the bytes copied where any launch
    copied host arrays, the worker's slot where ``slots``; the total, a graph's dispatches counted in their graph's
    row only."""
    copies = any(r.bytes for r in rows)
    head = f"{'kernel':<32} {'device':<10}" + (f" {'slot':>4}" if slots else "") + \
        f" {'launches':>8} {'total ms':>10} {'mean us':>10} {'min us':>10} {'max us':>10}" + \
        (f" {'copied MB':>10}" if copies else "") + "  timed"
    lines = [head, "-" * len(head), *(_row_line(r, slots, copies) for r in rows), _total_line(rows, slots)]
    if any(r.timed in ("enqueue", "mixed") for r in rows):
        lines.append("timed 'enqueue': the launch path gives no device time here; the figure is the call's")
    if lost:
        lines.append(f"{lost} launch(es) not recorded: the store was full")
    return "\n".join(lines)


def _row_line(r: Any, slots: bool, copies: bool) -> str:
    """One row of :func:`rows_table`: a graph's dispatch indented under its graph."""
    name = r.name if r.graph is None else "  " + r.name
    return (f"{name[:32]:<32} {r.device:<10}" + (f" {r.slot:>4}" if slots else "") +
            f" {r.launches:>8} {r.total * 1e3:>10.3f} {r.mean * 1e6:>10.1f} {r.min * 1e6:>10.1f} "
            f"{r.max * 1e6:>10.1f}" + (f" {r.bytes / 1e6:>10.3f}" if copies else "") + f"  {r.timed}")


def _total_line(rows: list, slots: bool) -> str:
    """:func:`rows_table`'s total: the rows outside a graph (a graph's dispatch rows are inside its row)."""
    if not rows:
        return "(no launches)"
    top = [r for r in rows if r.graph is None]
    inside = " (a graph's dispatch rows are inside its row: not added again)" if len(top) < len(rows) else ""
    return (f"{'total':<32} {'':<10}" + (f" {'':>4}" if slots else "") +
            f" {sum(r.launches for r in top):>8} {sum(r.total for r in top) * 1e3:>10.3f}{inside}")


_HOST_TIMED = {_TIMED[_WAIT], _TIMED[_COPY]}


def trace_of(events: Iterable[tuple[str, Launch]]) -> dict:
    """The Chrome trace of ``(process, launch)`` pairs (``Profile.trace`` says what it holds): a process a name given,
    a track a launching thread, and one beside it for the thread's waits and copies, each named by metadata events
    (``process_name``, ``thread_name``, ``thread_sort_index``)."""
    events = list(events)
    t0 = min((e.start for _, e in events), default=0.0)
    pids: dict[str, int] = {}
    tids: dict[tuple[int, int, bool], int] = {}  # (process, thread, host's own events) -> track
    names: dict[tuple[int, int], str] = {}
    out: list[dict] = []
    for process, e in events:
        pid = pids.setdefault(process, len(pids) + 1)
        host = e.timed in _HOST_TIMED
        tid = tids.setdefault((pid, e.thread, host), len(tids) + 1)
        if e.thread_name or (pid, e.thread) not in names:
            names[(pid, e.thread)] = e.thread_name or names.get((pid, e.thread), "")
        args = {"call_us": (e.host_end - e.host_start) * 1e6, "timed": e.timed,
                **({"bytes": e.bytes} if e.timed == "copy" else {})}
        out.append({"name": f"copies: {e.name}" if e.timed == "copy" else e.name, "cat": e.timed, "ph": "X",
                    "pid": pid, "tid": tid, "ts": (e.start - t0) * 1e6, "dur": max(e.seconds, 0.0) * 1e6,
                    "args": args})
    for process, pid in pids.items():
        out.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": process}})
    unnamed: dict[int, int] = {}
    order = {key: i for i, key in enumerate(names)}  # a thread's tracks side by side: its launches', then its waits'
    for (pid, thread, host), tid in tids.items():
        name = names[(pid, thread)] or f"thread {unnamed.setdefault(thread, len(unnamed) + 1)}"
        out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                    "args": {"name": f"{name}: waits and copies" if host else name}})
        out.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                    "args": {"sort_index": 2 * order[(pid, thread)] + host}})
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def _open_for_writing(path: str | os.PathLike, what: str, mode: str = "w") -> IO:
    """``path`` opened for writing, or InvalidArgumentError naming it and why not (a folder, a missing folder, no
    permission)."""
    try:
        return open(path, mode, encoding=None if "b" in mode else "utf-8")
    except IsADirectoryError:
        raise InvalidArgumentError(f"{what}: {os.fspath(path)!r} is a folder; give a file's path") from None
    except FileNotFoundError:
        raise InvalidArgumentError(f"{what}: cannot write {os.fspath(path)!r}: its folder "
                                   f"{os.path.dirname(os.path.abspath(path))!r} does not exist") from None
    except NotADirectoryError:
        raise InvalidArgumentError(f"{what}: cannot write {os.fspath(path)!r}: a part of its folder is a file, not "
                                   "a folder") from None
    except OSError as e:
        raise InvalidArgumentError(f"{what}: cannot write {os.fspath(path)!r}: {e.strerror or e}") from None


def write_trace(trace: dict, path: str | os.PathLike, what: str) -> str:
    """Write a Chrome trace's object to ``path``; the path (InvalidArgumentError: it cannot be written)."""
    with _open_for_writing(path, what) as f:
        json.dump(trace, f)
    return os.fspath(path)


def plot_target(path: str | os.PathLike, what: str = "Profile.plot") -> tuple[str, str]:
    """Where a chart of ``path`` is written, and its format: ``path`` itself, or with ``.png`` added where it has no
    suffix (as matplotlib does). Raises InvalidStateError without matplotlib, InvalidArgumentError for a folder or a
    suffix matplotlib cannot write."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError as e:
        raise InvalidStateError(f"{what} needs matplotlib: pip install matplotlib") from e
    path = os.fspath(path)
    if os.path.isdir(path):
        raise InvalidArgumentError(f"{what}: {path!r} is a folder; give a file's path")
    suffix = os.path.splitext(path)[1][1:].lower()
    if not suffix:
        return path + ".png", "png"
    known = FigureCanvasBase.get_supported_filetypes()
    if suffix not in known:
        raise InvalidArgumentError(f"{what}: matplotlib cannot write .{suffix} files ({path!r}); give a path ending "
                                   f"in one of {', '.join('.' + k for k in sorted(known))}")
    return path, suffix


def _shown_rows(rows: list, top: int) -> list:
    """The rows a chart shows, bottom first: the ``top`` kernels and graphs, each graph's dispatch rows with it."""
    keep = {id(r) for r in [r for r in rows if r.graph is None][:top]}
    shown, kept = [], False
    for r in rows:  # a dispatch row follows its graph's: shown where its graph is
        kept = id(r) in keep if r.graph is None else kept
        if kept:
            shown.append(r)
    return shown[::-1]


def plot_rows(rows: list, path: str | os.PathLike, top: int, what: str) -> str:
    """A bar chart of ``rows`` (``nested``): the ``top`` kernels and graphs by total time, each graph's dispatch rows
    under it in a lighter colour; to ``path`` (``plot_target``); the path written."""
    target, fmt = plot_target(path, what)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = _shown_rows(rows, top)
    with _open_for_writing(target, what, "wb") as f:
        fig, ax = plt.subplots(figsize=(8, 0.4 * max(len(shown), 3) + 1.2))
        labels = [r.name + " (" + ", ".join(
            [r.device] + ([f"worker {r.slot}"] if hasattr(r, "slot") else [])) + ")" for r in shown]
        colours = [("#a1b9dd" if r.graph else "#4c72b0") if r.timed == "device" else "#999999" for r in shown]
        ax.barh(range(len(shown)), [r.total * 1e3 for r in shown], color=colours)
        ax.set_yticks(range(len(shown)), labels)
        for i, r in enumerate(shown):
            ax.text(r.total * 1e3, i, f" {r.launches} x {r.mean * 1e6:.1f} us", va="center", fontsize=8)
        ax.set_xlim(0, max((r.total for r in shown), default=0.0) * 1e3 * 1.35 or 1.0)  # room for the labels
        ax.set_xlabel("total time (ms); light: a graph's dispatches, inside its bar; grey: the call's time")
        ax.set_title("taichi_aot profile: kernels and graphs by total time")
        fig.tight_layout()
        fig.savefig(f, format=fmt)
        plt.close(fig)
    return target
