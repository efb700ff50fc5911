"""A call plan: one kernel's or graph's calls on one thread (STYLE.md, "A call is a plan").

A :class:`CallPlan` holds what one thread's calls of a launcher write and keep: the packed argument buffer (laid out
as the C array of ``TiArgument`` / ``TiNamedArgument``), its slots, the ``TaichiAotLaunch`` record that points at it,
and the copies its last call kept of the host arrays it staged (:class:`KeptCopies`), for those arrays passed again.
A kernel or graph has one plan for its runtime's thread, whose C launcher is the kernel itself, and, where any thread
may make its launch, one for each other thread that calls it, whose C launcher is a :class:`Twin` (the C call hands
that thread's calls to it: ``_add_twin``). Each plan's kept copies are its own.

A call takes a route by its arguments, never by who watches: through the kept copies where its host arrays are those
they were made for, else by the policy (``_foreign``: describe, decide, carry out). A profile observes the call: the
copies' bytes in and back are a copy event of its, whichever route moved them. The lock is the plan's runtime's
(``RuntimeBackends.lock``): the staged copies and the foreign arrays' cache are the runtime's.
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ._arguments import Packer, Slot, prefill
from ._arrays import Launcher, host_array, print_of, read_print
from ._call import CallSlot  # what the C call checks of an argument itself (_csrc/records.c)
from ._dtypes import signature
from ._native import ffi, lib
from ._staged import SPARE_BYTES, Staged, StagedCopies, fill_copy, takes_directly
from .backends import launch_error, library_kind
from .enums import GFX_ARCHS, Arch, DataType
from .errors import ArgumentTypeError, ClosedError, InvalidArgumentError, InvalidStateError, WrongThreadError
from .image import Image, Texture
from .ndarray import NdArray

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence

    from ._lifetime import Owned, Parent
    from .backends import Choice
    from .metadata import ArgInfo

__all__ = ["STALE", "CallPlan", "KeptCopies", "Packed", "Twin", "after_launch", "bound_owned", "prepare", "thread_flag"]

# The C side (taichi_aot/_csrc): one launch, and the code it returns when Python must re-check first.
_launch = lib.taichi_aot_launch
STALE: int = lib.TAICHI_AOT_STALE
_get_ident = threading.get_ident
_ANY_THREAD = lib.TAICHI_AOT_LAUNCH_ANY_THREAD

#: What the C call can check itself, per argument (call.c's TAICHI_AOT_SLOT_*): the rest is Python's.
_SLOT_OTHER, _SLOT_NDARRAY, _SLOT_F32, _SLOT_I32 = 0, 1, 2, 3


def thread_flag(runtime: Any, kind: int) -> int:
    """TAICHI_AOT_LAUNCH_ANY_THREAD where any thread may make a launch of ``kind`` on ``runtime``: its device allows
    it (``any_thread``), for libtaichi's launches (their backend's registration says ``library_any_thread``) only
    where the device makes libtaichi's calls one at a time too (``library_any_thread``)."""
    traits = runtime.device.traits
    allowed = traits.library_any_thread or (traits.any_thread and not library_kind(kind))
    return _ANY_THREAD if allowed else 0


def after_launch(code: int, c: Any, validate: Callable[[], None], what: str | Callable[[], str]) -> None:
    """What every launch path does when ``_launch(c)`` returned non-zero: when C reports the launch stale (something
    closed since the last look, or another thread), re-check with ``validate`` (which raises ClosedError /
    WrongThreadError) and launch again; any other code raises. The C call itself stays inline at each launch site:
    one Python frame more would cost a dynamic launch about 3 %."""
    # Re-check until C finds the launch fresh: a finalizer (run by the garbage collector between the check and the
    # launch) may close something else and move the epoch again. validate() raises for those, so this ends.
    while code == STALE:
        epoch = lib.taichi_aot_epoch
        validate()
        c.seen = epoch
        if c.thread != _get_ident():  # another thread than the runtime's, which validate() let launch
            c = _here(c, what)
        code = _launch(c)
    if code:
        raise launch_error(code, what if isinstance(what, str) else what(), c.kind)


def _here(c: Any, what: str | Callable[[], str]) -> Any:
    """A copy of launch record ``c`` for this thread (the record's is the runtime's): a launch of the own CUDA
    launcher; libtaichi's launches keep to the runtime's thread (WrongThreadError)."""
    if not c.flags & _ANY_THREAD:
        raise WrongThreadError(
            f"{what if isinstance(what, str) else what()}: launched through libtaichi (module.launchers() says why), "
            f"whose launches on this runtime are made from the thread that made it ({c.thread}), not from thread "
            f"{_get_ident()}; any thread may make the launches of the kernels an own launcher takes "
            "(module.launchers() says which, and why not the others)")
    here = ffi.new("TaichiAotLaunch *", c[0])
    here.thread = _get_ident()
    return here


def bound_owned(value: Any) -> Owned | None:
    """The lifetime record of what a launch binds of argument ``value`` (an ndarray's memory, an image), else None."""
    if isinstance(value, NdArray):
        return value.owned
    if isinstance(value, (Image, Texture)):
        return (value.image if isinstance(value, Texture) else value).owned
    return None


def _slot_kind(spec: ArgInfo, arch: Arch) -> int:
    """What the C call checks of the argument ``spec`` describes itself (``_SLOT_OTHER``: Python checks it)."""
    if spec.kind == "ndarray":
        return _SLOT_OTHER if spec.dtype == DataType.U1 and arch in GFX_ARCHS else _SLOT_NDARRAY
    if spec.kind == "scalar" and spec.dtype == DataType.F32:
        return _SLOT_F32
    if spec.kind == "scalar" and spec.dtype == DataType.I32:
        return _SLOT_I32
    return _SLOT_OTHER


def prepare(launcher: Launcher, plan: CallPlan) -> None:
    """``launcher``'s C call made from ``plan``: its record, what it checks of each slot itself, and the arrays it may
    take anew."""
    launcher._prepare(**plan.c_view())
    fresh = plan.fresh_view()
    if fresh is not None:
        launcher._fresh(**fresh)


class Packed:
    """One launch's arguments: a byte buffer laid out as the C array, its slots, and the launch struct (named
    ``name``: the NVTX range its launches are made inside, which it holds)."""

    __slots__ = ("array", "buf", "keep", "launch", "name", "slots")

    def __init__(self, runtime: Parent, choice: Choice, ctype: str, count: int, stride: int, arg_offset: int,
                 name: Any):
        self.buf = bytearray(max(count, 1) * stride)
        self.array: Any = ffi.from_buffer(ctype + "[]", self.buf) if count else ffi.NULL
        base: Any = ffi.cast("char *", self.array) if count else None
        self.slots = [
            Slot(self.buf, i * stride + arg_offset, ffi.cast("TiArgument *", base + i * stride + arg_offset),
                 runtime.foreign.hits)
            for i in range(count)
        ]
        self.keep: list[Any] = []  # what the C array points to (argument names of graphs)
        c = ffi.new("TaichiAotLaunch *")
        c.runtime, c.kind, c.handle = runtime.handle, choice.kind, choice.handle
        c.flags = choice.flags | thread_flag(runtime, choice.kind)
        c.arg_count, c.args = count, self.array
        c.seen = -1  # stale: the first launch checks in Python
        c.thread, c.pending = runtime.gate.thread, runtime.gate.pending
        c.name = self.name = name
        self.launch: Any = c

    def prefill(self, specs: list[ArgInfo]) -> None:
        """Write the constant parts of the arguments (the types of i32/f32 slots)."""
        prefill(self.buf, [s.off for s in self.slots], specs)


class CallPlan:
    """One thread's calls of a kernel or graph (the module docstring): ``packed`` (its buffer, ``slots`` and launch
    record ``launch``, whose thread is the plan's), each argument's packer beside its slot (``pairs``), and ``kept``,
    the copies its last call kept of the host arrays it staged (None: none). ``module``, ``name`` and ``what`` name
    the kernel (``graph``: a graph) for its checks and messages."""

    __slots__ = ("_foreign", "_graph", "_module", "_name", "_runtime", "_specs", "_what", "kept", "launch", "lock",
                 "packed", "pairs")

    def __init__(self, packed: Packed, thread: int, packers: list[Packer], specs: list[ArgInfo], runtime: Parent,
                 module: Any, name: str, what: str, graph: bool):
        self.packed = packed
        self.launch: Any = packed.launch
        self.launch.thread = thread  # the C call's "home": the calls it makes with this record are this thread's
        self.pairs = list(zip(packers, packed.slots))
        self.kept: KeptCopies | None = None
        self.lock = runtime.backends.lock
        self._specs, self._runtime, self._foreign = specs, runtime, runtime.foreign
        self._module, self._name, self._what = module, name, what
        self._graph = graph  # a graph's: its arguments named

    @property
    def slots(self) -> list[Slot]:
        """The slots of its buffer, one an argument."""
        return self.packed.slots

    def c_view(self) -> dict[str, Any]:
        """What its C launcher's ``_prepare`` takes: the record, and what the C call checks of each slot itself."""
        arch = self._runtime.arch
        slots = [CallSlot(kind=_slot_kind(spec, arch), writes=spec.may_write,
                          argument=int(ffi.cast("uintptr_t", slot.ptr)),
                          sig=signature(spec.dtype, spec.ndim, spec.elem_shape) if spec.dtype is not None else None,
                          name=spec.name)  # a kernel's too: keyword calls are made in C
                 for spec, slot in zip(self._specs, self.packed.slots)]
        return {"launch": int(ffi.cast("uintptr_t", self.launch)), "graph": int(self._graph), "ndarray_type": NdArray,
                "numpy_type": np.ndarray, "slots": slots, "hits": self._foreign.hits}

    def fresh_view(self) -> dict[str, Any] | None:
        """What its C launcher's ``_fresh`` takes (the arrays the C call may take anew), or None."""
        return self._foreign.fresh_plan(self._specs)

    def after_code(self, code: int) -> None:
        """A non-zero code of a launch the C call made with this plan's record (:func:`after_launch`)."""
        after_launch(code, self.launch, self._module.ensure_open, self._what)

    def recording(self) -> bool:
        """Whether the call comes while the runtime records (the call is then appended to the recording as a bound
        launch instead of launched); from another process, or a thread libtaichi's runtime refuses, it raises."""
        rt = self._runtime
        if _get_ident() == rt.gate.ident:
            return False
        rt.ensure_open()
        return rt.gate.recorder is not None

    def call(self, values: Sequence[Any]) -> None:
        """The launch of a call the C call left to Python: ``values`` (in signature order) packed into its slots
        and launched, through its kept copies or the policy's, under its runtime's lock; a profile open on its
        runtime is told of the copies' bytes."""
        rt, c = self._runtime, self.launch
        if not rt.on_its_thread():
            rt.ensure_open()  # another process, or another thread of a runtime of libtaichi: refused
        if c.thread != _get_ident():  # another thread's plan: libtaichi's launch keeps to its thread (raises)
            _here(c, self._what)
            raise InvalidStateError(f"{self._what}: thread {_get_ident()} called through thread {c.thread}'s plan")
        start = time.monotonic_ns() if rt.profiles else 0
        try:
            with self.lock:
                copied = self._launch(values)
        finally:
            if rt.gate.recorder is not None:  # a launch made while the runtime records (a call that came in before
                c.seen = -1  # the recording began): its record stale again, so its thread's next calls are recorded
        if copied and start:
            self._observed(copied, start)

    def call_kept(self, values: Sequence[Any]) -> bool:
        """The runtime's thread's call through the kept copies, where ``values`` are the arrays they were made for
        and nothing records (whatever else is :meth:`call`'s, which checks all of it); whether it was made."""
        rt, c, kept = self._runtime, self.launch, self.kept
        if kept is None or c.thread != _get_ident() or rt.gate.ident != c.thread or len(values) != len(self.pairs) \
                or not rt.on_its_thread():
            return False
        start = time.monotonic_ns() if rt.profiles else 0
        with self.lock:
            if not self._run_kept(kept, values):
                return False
        if start:
            self._observed(kept.nbytes, start)
        return True

    def give_back(self) -> None:
        """Its kept copies given back to the runtime's spares (the plan is replaced: ``declare_access``)."""
        kept, self.kept = self.kept, None
        if kept is not None:
            with self.lock:
                kept.drop()

    def _observed(self, copied: int, start: int) -> None:
        """The copies of a call begun at ``start`` (``copied`` bytes, in and back): each open profile's copy event."""
        rt = self._runtime
        for p in list(rt.profiles):
            p.note_copy(rt, self._name, copied, start)

    def _launch(self, values: Sequence[Any]) -> int:
        """Pack ``values`` and launch, through the kept copies where they serve, else the policy's (staged copies
        and all); the bytes copied in and back. Under the runtime's lock."""
        kept = self.kept
        if kept is not None and self._run_kept(kept, values):
            return kept.nbytes
        rt, foreign, c = self._runtime, self._foreign, self.launch
        foreign.before_pack(len(values))
        try:
            for (pack, slot), value in zip(self.pairs, values):
                pack(value, rt, slot)
            if foreign.staged:  # foreign arrays the backend cannot address travel as copies
                copied = sum(s.array.nbytes * (s.filled + s.write_back) for s in foreign.staged)
                self._launch_staged(values)
                return copied
            code = _launch(c)
            if code:
                after_launch(code, c, self._checker(values), self._what)
            return 0
        except BaseException:
            if foreign.staged:  # no launch: the copies are dropped, never copied back over the caller's arrays
                foreign.discard()
            raise

    def _launch_staged(self, values: Sequence[Any]) -> None:
        """The launch of packed arguments of which some are staged copies: nothing shared may overlap a copy written
        back; after the launch, each written copy goes back into its array (a failure before that leaves the copies
        to the caller's ``discard``), and the copies are kept for the next call with the same arrays where they can
        be."""
        foreign, c, specs = self._foreign, self.launch, self._specs
        foreign.before_launch(values, specs)
        code = _launch(c)
        if code:
            after_launch(code, c, self._checker(values), self._what)
        self.kept = foreign.after_launch(lambda copies, pending: KeptCopies.made(copies, pending, values, specs))

    def _run_kept(self, kept: KeptCopies, values: Sequence[Any]) -> bool:
        """The launch of ``values`` through ``kept`` (filled, launched, read back) where they are its arrays again
        and copies are allowed; the copies given back where they are not, or where anything fails. Whether it was
        made."""
        copies = None
        try:
            copies = kept.values(values) if self._foreign.allow_copies else None
        finally:  # not its arrays, copies refused, or a fill refused (a closed runtime): the copies given back
            if copies is None:
                self.kept = None
                kept.drop()
        if copies is None:
            return False
        rt, c = self._runtime, self.launch
        try:
            self._foreign.before_pack(len(copies))  # CUDA arrays among them are held, within the held limit
            for (pack, slot), value in zip(self.pairs, copies):
                pack(value, rt, slot)
            code = _launch(c)
            if code:
                after_launch(code, c, self._checker(values), self._what)
            kept.after_launch()
        except BaseException:
            self.kept = None
            kept.drop()
            raise
        return True

    def _checker(self, values: Sequence[Any]) -> Callable[[], None]:
        """What a launch of ``values`` re-checks before it is made again when C found it stale (something was closed
        since it was packed, on any thread): the module, the runtime and every ndarray and image it binds, so that
        a launch never binds what a close released (ClosedError instead)."""
        owneds = [o for o in map(bound_owned, values) if o is not None]
        module, what = self._module, self._what

        def check() -> None:
            module.ensure_open()
            if any(o.closed for o in owneds):
                raise ClosedError(f"{what}: an ndarray or image it was given was closed (on another thread) "
                                  "before the launch was made")

        return check


class Twin(Launcher):
    """The C launcher of a :class:`CallPlan` of another thread than the runtime's, where any thread may make the
    kernel's launch (the own CUDA, Vulkan and x64 launches): the kernel's C call hands that thread's calls to it
    (``_add_twin``), which makes them in C as the kernel makes its own thread's, from the plan's record and slots;
    what it leaves to Python goes to the kernel's ``calls`` with the plan (held weakly: the kernel holds its twins)."""

    __slots__ = ("_calls", "plan")

    def __init__(self, plan: CallPlan, calls: Callable[[CallPlan, tuple[Any, ...], dict[str, Any]], None]):
        self.plan = plan
        self._calls = weakref.WeakMethod(calls)  # a bound method of the kernel
        prepare(self, plan)

    def _slow_call(self, *args: Any, **kwargs: Any) -> None:
        calls = self._calls()
        if calls is None:  # pragma: no cover - the kernel, which calls this, holds it
            raise ClosedError(f"{self.plan._what}: the kernel is gone")
        calls(self.plan, args, kwargs)

    def _after_code(self, code: int) -> None:
        self.plan.after_code(code)


class KeptCopies:
    """A launch's staged copies kept by its call plan for the next call with the same host arrays (a loop's next
    step): that call fills the copies, launches and copies back through them, without describing, deciding and
    staging each array again. Made on a device whose copies are queued on the device (discrete GPUs: no mapped view
    is written under a queued kernel). It holds the arrays weakly. A plan keeps its last; a call with other arrays
    gives the copies back (:meth:`drop`) and takes the policy's path.

    Each call checks that each array is still what the copies were made for: a numpy array its layout and
    writability; a torch tensor its print (``_arrays.read_print``: memory, layout, requires_grad, read in C), whose
    numpy view made with the copies is then the tensor's memory still. A copy is filled through the device's fill
    (:func:`_filler`: a few bytes written by the device's own command, no staging buffer) where it has one, else as
    ``from_numpy`` fills it."""

    __slots__ = ("_copies", "_direct", "_layouts", "_now", "_prints", "_refs", "_staged", "nbytes")

    def __init__(self, copies: StagedCopies, staged: list[tuple[Staged, tuple[int, ...]]],
                 hosts: dict[int, np.ndarray | None], values: Sequence[Any], specs: Sequence[ArgInfo]):
        self._copies = copies
        # each copy as a record without its array (held weakly, in refs), the positions of the values it takes, and
        # how it is filled (None: from_numpy)
        self._staged = [(Staged(s.nd, None, _NO_ARRAY, s.dims, s.what, s.filled, s.write_back), positions,
                         _filler(s.nd, s.array) if s.filled else None) for s, positions in staged]
        #: the bytes a call copies in and back (a profile's copy event), as the policy's path counts them
        self.nbytes = sum(s.nd.nbytes * (s.filled + s.write_back) for s, _ in staged)
        # the host arrays checked at each call: torch tensors by their print (their numpy views held until the
        # tensor goes: a weak reference's callback lets them go), whatever else by its layout
        self._prints: list[tuple[int, Any, Any, list[np.ndarray]]] = []
        self._layouts: list[tuple[int, tuple[Any, ...]]] = []
        views: dict[int, list[np.ndarray]] = {}
        for i, a in hosts.items():
            if a is None:
                continue
            printed = _printed(values[i]) if a.flags.c_contiguous else None  # a strided one: its layout (the
            # print of torch's getters, before 2.10, has no strides)
            if printed is not None:
                views[i] = [a]
                self._prints.append((i, printed[0], printed[1], views[i]))
            else:
                self._layouts.append((i, _layout(a, values[i])))
        # every array argument held weakly (TypeError where one cannot be: nothing kept)
        self._refs = [(i, weakref.ref(v) if i not in views else weakref.ref(v, _letting_go(views[i])))
                      for i, (spec, v) in enumerate(zip(specs, values)) if spec.kind == "ndarray"]
        written = [(k, s) for k, (s, _) in enumerate(staged) if s.write_back]
        # the one written copy read straight into its array (to_numpy(out=): its layout is checked at each call), and
        # which of the call's arrays that is
        self._direct = (written[0][1].nd, written[0][0]) if len(written) == 1 and takes_directly(
            written[0][1].array, written[0][1].nd) else None
        self._now: list[Any] = []  # the call's host arrays, a copy each

    @classmethod
    def made(cls, copies: StagedCopies, pending: list[Staged], values: Sequence[Any],
             specs: Sequence[ArgInfo]) -> KeptCopies | None:
        """The kept copies of a launch of ``values`` whose staged copies were ``pending`` (None where they cannot be
        kept: an array that is not a plain numpy array passed as it is, a mapped or large copy, an argument of no
        weak reference)."""
        try:
            hosts = {i: _view(v, "") for i, (spec, v) in enumerate(zip(specs, values))
                     if spec.kind == "ndarray" and not isinstance(v, NdArray)}
        except Exception:  # whatever another library raises reading its array again: nothing kept
            return None
        staged = _covering(pending, hosts)
        if staged is None:
            return None
        try:
            kept = cls(copies, staged, hosts, values, specs)
        except Exception:  # an argument of no weak reference, another library's array read again: nothing kept
            return None
        copies.keep(pending)
        return kept

    def _hosts(self, values: Sequence[Any]) -> dict[int, np.ndarray] | None:
        """The host array of each of ``values`` the copies take; None where one is not what they were made for."""
        hosts = {}
        for i, layout in self._layouts:
            v = values[i]
            a = v if v.__class__ is np.ndarray else _view(v, "")  # a numpy array as it is (no call: a hot path)
            if a is None or _layout(a, v) != layout:
                return None
            hosts[i] = a
        for i, reads, printed, views in self._prints:
            try:
                if not views or read_print(values[i], reads) != printed:
                    return None
            except Exception:  # the library's getter refuses now: the policy's path says why
                return None
            hosts[i] = views[0]
        return hosts

    def values(self, values: Sequence[Any]) -> list[Any] | None:
        """``values`` with each staged array's copy in its place, the copies filled from them; None where they are
        not the arrays (and layouts) the copies were made for. A copy closed with the runtime raises as a closed
        runtime does."""
        for i, ref in self._refs:
            if ref() is not values[i]:
                return None
        hosts = self._hosts(values)
        if hosts is None:
            return None
        out, now = list(values), []
        for s, positions, fill in self._staged:
            a = hosts[positions[0]]
            if fill is not None:
                fill(a)
            elif s.filled:
                s.nd.from_numpy(a)
            elif s.write_back:  # zeros where only written, as a new copy starts
                fill_copy(s.nd, None, None)
            for i in positions:
                out[i] = s.nd
            now.append(a)
        self._now = now
        return out

    def after_launch(self) -> None:
        """The written copies read back into their arrays (:meth:`StagedCopies.write_back`)."""
        now, self._now = self._now, []
        direct = self._direct
        if direct is not None:  # one read, which orders itself after the kernel and waits
            direct[0].to_numpy(out=now[direct[1]])
            return
        self._copies.write_back([Staged(s.nd, None, a, s.dims, s.what, s.filled, s.write_back)
                                 for (s, _, _), a in zip(self._staged, now)])

    def drop(self) -> None:
        """The copies given back to the runtime's spares (free once queued kernels are done with them)."""
        self._now = []
        self._copies.give_back([s for s, _, _ in self._staged])


def _filler(nd: NdArray, a: np.ndarray) -> Callable[[np.ndarray], None] | None:
    """How the kept copy ``nd`` of host array ``a`` is filled at each call: the device's fill where ``a`` is as the
    copy is (C-contiguous, of its dtype and size: checked again at each call by its layout or print; what the write
    itself cannot carry it hands to the device's staged copy); None: ``from_numpy``. The one place the plan asks the
    device for its fill."""
    if not (a.flags.c_contiguous and a.dtype == nd.dtype and a.nbytes == nd.nbytes):
        return None
    return nd.runtime.device.transfers.fill(nd.memory, checked=False)  # the plan checks its arrays at each call


def _letting_go(views: list[np.ndarray]) -> Callable[[Any], None]:
    """A weak reference's callback that lets a collected tensor's numpy views go."""
    return lambda _: views.clear()


def _printed(value: Any) -> tuple[Any, Any] | None:
    """A plain torch tensor's reads and print (``_arrays.print_of``), by which a call finds it unchanged; None for
    any other array (or a torch whose tensors have no print)."""
    torch = sys.modules.get("torch")
    if torch is None or value.__class__ is not torch.Tensor:
        return None
    reads = print_of(value.__class__)
    return None if reads is None else (reads, read_print(value, reads))


_NO_ARRAY = np.empty(0)  # a kept copy's record holds no array of the caller's


def _covering(pending: list[Staged],
              hosts: dict[int, np.ndarray | None]) -> list[tuple[Staged, tuple[int, ...]]] | None:
    """Each staged copy of ``pending`` with the positions of the host arrays it was made for, where a plan can keep
    them: each host array of the call in exactly one copy (packing the copies then stages nothing more), none mapped
    or over SPARE_BYTES; else None."""
    staged: list[tuple[Staged, tuple[int, ...]]] = []
    covered: list[int] = []
    for s in pending:
        positions = _positions(s.array, hosts)
        if not positions or s.view is not None or s.nd.nbytes > SPARE_BYTES:
            return None
        staged.append((s, positions))
        covered += positions
    return staged if sorted(covered) == sorted(i for i, a in hosts.items() if a is not None) else None


def _positions(array: np.ndarray, hosts: dict[int, np.ndarray | None]) -> tuple[int, ...]:
    """Where a staged copy's array was passed: the values whose host arrays are it, or views of its memory alike."""
    start = array.__array_interface__["data"][0]
    return tuple(i for i, a in hosts.items() if a is array or (
        a is not None and a.__array_interface__["data"][0] == start and _layout(a) == _layout(array)))


def _layout(a: np.ndarray, value: Any = None) -> tuple[Any, ...]:
    """What a kept copy needs to hold of the host array ``a`` passed as ``value``: its layout, writability, and where
    ``value`` is another library's array, its memory (a numpy array passed again is the same memory)."""
    where = None if value is None or a is value else a.__array_interface__["data"][0]
    return a.shape, a.strides, a.dtype, bool(a.flags.writeable), where


def _view(value: Any, what: str) -> np.ndarray | None:
    """The host array over ``value``'s memory, as the policy takes it (None: none, or no longer one). A plain torch
    CPU tensor's through its own ``numpy()`` (under a microsecond, where DLPack's export takes several), which refuses
    what the policy refuses (a tensor on a device, one that requires grad, a lazily negated or conjugated one)."""
    if value.__class__ is np.ndarray:
        return value
    torch = sys.modules.get("torch")
    if torch is not None and value.__class__ is torch.Tensor:
        try:
            return value.numpy()
        except Exception:  # refused: the policy's path says why
            return None
    try:
        return host_array(value, what)
    except (ArgumentTypeError, InvalidArgumentError):
        return None
