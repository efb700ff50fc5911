"""Launching kernels and compute graphs: the hot path.

A :class:`Kernel` or :class:`ComputeGraph` owns one packed argument buffer laid out as the C array of ``TiArgument``
/ ``TiNamedArgument``, and a ``TaichiAotLaunch`` struct pointing at it, of the kind its launch backend's
:class:`~taichi_aot.backends.Choice` says (libtaichi's, or the own CUDA launcher's from the same buffer). A call
checks that it comes from the runtime's thread *before* it writes that buffer, packs each argument with its
precomputed packer (:mod:`taichi_aot._arguments`), and makes one C call, ``taichi_aot_launch``, which also checks in
C that nothing was closed since Python last looked (the close epoch) and that the caller is the runtime's thread;
only when that comes back non-zero does Python look again (:func:`_launcher`). :class:`BoundLaunch` keeps a buffer
of its own, packed once; :class:`LaunchSequence` replays bound launches from C (``taichi_aot_replay``) with no
Python in between.

Threads: a runtime of libtaichi is launched on from its own thread; taichi_aot's own CUDA runtime from any thread. A
call from another thread than the runtime's takes Python's path and packs its arguments into a buffer of its own
(the runtime's thread may be launching from the shared one meanwhile), under the runtime's lock, as every launch made
in Python is (``RuntimeBackends.lock``: the staged copies and the foreign arrays' cache are the runtime's).
"""

from __future__ import annotations

import inspect
import keyword
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Protocol, cast

import numpy as np

from ._arguments import ARG_SIZE, Packer, Packing, Slot, by_name, make_packer, prefill
from ._arrays import Launcher, array_like, bound_hold, storage_guards  # Launcher: the C call's type (_csrc/call.c)
from ._call import CallSlot  # what the C call checks of an argument itself (_csrc/records.c)
from ._dtypes import signature
from ._lifetime import ForeignPolicy, Parent, unpicklable
from ._native import ffi, lib
from ._nvtx import first_use, range_name
from .backends import launch_error, library_kind
from .enums import GFX_ARCHS, Access, Arch, DataType
from .errors import (
    ArgumentNotFoundError,
    ArgumentTypeError,
    ClosedError,
    InvalidArgumentError,
    InvalidStateError,
    WrongThreadError,
)
from .image import Image, Texture
from .ndarray import NdArray

if TYPE_CHECKING:  # pragma: no cover
    from ._lifetime import Owned
    from .backends import Choice
    from .metadata import ArgInfo, KernelInfo

__all__ = ["BoundLaunch", "ComputeGraph", "Kernel", "ReturningKernel"]


class Module(Protocol):
    """What a kernel or graph (and the ops above them) asks of its module, named here so that this room need not
    import module.py, which imports it: :class:`~taichi_aot.module.AotModule` is the one implementation, and the public
    type of :attr:`Kernel.module`."""

    @property
    def runtime(self) -> Parent: ...
    @property
    def owned(self) -> Owned: ...
    @property
    def closed(self) -> bool: ...
    @property
    def files(self) -> str | None: ...
    @property
    def kernels(self) -> Mapping[str, Kernel]: ...
    @property
    def graphs(self) -> Mapping[str, ComputeGraph]: ...
    def launchers(self) -> dict[str, str]: ...
    def kernel_info(self, name: str) -> KernelInfo | None: ...
    def ensure_open(self) -> None: ...
    def close(self) -> None: ...


# The C side (taichi_aot/_csrc): one launch, and the code it returns when Python must re-check first.
_launch = lib.taichi_aot_launch
_STALE: int = lib.TAICHI_AOT_STALE
_get_ident = threading.get_ident
_NAMED_SIZE, _NAMED_ARG = ffi.sizeof("TiNamedArgument"), ffi.offsetof("TiNamedArgument", "argument")
_clock = time.perf_counter
_ANY_THREAD = lib.TAICHI_AOT_LAUNCH_ANY_THREAD


def thread_flag(runtime: Any, kind: int) -> int:
    """TAICHI_AOT_LAUNCH_ANY_THREAD where any thread may make a launch of ``kind`` on ``runtime``: its device allows
    it (``any_thread``), for libtaichi's launches (their backend's registration says ``library_any_thread``) only
    where the device makes libtaichi's calls one at a time too (``library_any_thread``)."""
    traits = runtime.device.traits
    allowed = traits.library_any_thread or (traits.any_thread and not library_kind(kind))
    return _ANY_THREAD if allowed else 0

#: What the C call can check itself, per argument (call.c's TAICHI_AOT_SLOT_*): the rest is Python's.
_SLOT_OTHER, _SLOT_NDARRAY, _SLOT_F32, _SLOT_I32 = 0, 1, 2, 3


def _after_launch(code: int, c: Any, validate: Callable[[], None], what: str | Callable[[], str]) -> None:
    """What every launch path does when ``_launch(c)`` returned non-zero: when C reports the launch stale (something
    closed since the last look, or another thread), re-check with ``validate`` (which raises ClosedError /
    WrongThreadError) and launch again; any other code raises. The C call itself stays inline at each launch site:
    one Python frame more would cost a dynamic launch about 3 %."""
    # Re-check until C finds the launch fresh: a finalizer (run by the garbage collector between the check and the
    # launch) may close something else and move the epoch again. validate() raises for those, so this ends.
    while code == _STALE:
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


def _bindable(entry: _Launchable, values: Sequence[Any]) -> list[Any]:
    """``values`` with foreign arrays for ndarray arguments replaced by the ndarrays they travel in (a bound launch
    holds those, and the arrays); an array the backend could take only as a copy is refused (it would be copied
    once, at bind)."""
    entry._foreign.before_pack(len(values))
    return [_bindable_value(entry, spec, value) for spec, value in zip(entry._args, values)]


def _bindable_value(entry: _Launchable, spec: ArgInfo, value: Any) -> Any:
    if spec.kind != "ndarray" or isinstance(value, NdArray) or not array_like(value):
        return value
    foreign = entry._foreign
    nd = foreign.argument(value, spec, f"{entry!r} argument {spec.index}")
    if foreign.staged:
        foreign.discard()
        raise InvalidArgumentError(
            f"{entry!r} argument {spec.index}: {entry._runtime.arch.name} cannot address this array, and a bound "
            "launch would copy it once; pass an NdArray (rt.ndarray_from(array))"
        )
    return nd


class _Packed:
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


class _Launchable(Launcher):
    """A kernel or graph of a module: its name, module, handle, signature and packers.

    A call (``kernel(x, 0.5)``, ``graph(x=a)``) is :class:`Launcher`'s, made in C where every argument is one it
    can vouch for (``_csrc/call.c``: the NdArrays and shared numpy arrays of the last launch, exact floats and
    ints), else by :meth:`_slow_call`: the checks and packing below, and :meth:`_launch_values`.
    """

    __reduce_ex__ = unpicklable("send the module's path and the kernel's or graph's name, and look it up there")
    _args: list[ArgInfo]
    _recorded: list[ArgInfo]  # as the module records them (declare_access may add to ``_args``)
    _c: Any  # the prepared TaichiAotLaunch
    _what: str  # "launch of kernel 'step'", for messages
    _foreign: ForeignPolicy  # its runtime's foreign-array policy
    _slots: list[Slot]  # the slots of the shared buffer that calls pack into
    _again: Any = None  # the last call's staged copies, kept for its arrays passed again (_staged.Again)

    def __init__(self, module: Module, name: str, choice: Choice):
        self._choice = choice  # its launch backend, and the kind and handle of its C launch
        self._module = module
        self._runtime: Parent = module.runtime
        self._foreign = module.runtime.foreign
        self._name = name
        self._handle = choice.library  # libtaichi's handle, where libtaichi can launch it (the flat API's)
        first_use()  # TAICHI_AOT_NVTX, read once
        self._range = range_name(name)  # the NVTX range of its launches (_nvtx.py), held by every record of it

    @property
    def name(self) -> str:
        """The name the module exports it under."""
        return self._name

    @property
    def module(self) -> Module:
        """The module it belongs to."""
        return self._module

    @property
    def launcher(self) -> str:
        """The backend that launches it: "cuda" (taichi_aot's own CUDA launcher, the module's PTX), "x64" (taichi_aot's
        own x64 launch) or "taichi" (libtaichi)."""
        return self._choice.backend

    @property
    def signature(self) -> list[ArgInfo]:
        """The arguments the module records (in order for a kernel, by first use for a graph)."""
        return list(self._args)

    def _what_arg(self, spec: ArgInfo) -> str:
        raise NotImplementedError

    def _set_packers(self) -> None:
        """One packer per argument of ``_args`` (as recorded, or as declared), what introspection shows, and the
        C call's view of the shared buffer's slots."""
        # the own launches take every scalar type
        arch, graph, widens = self._runtime.arch, isinstance(self, ComputeGraph), self._choice.widens
        self._foreign.fit(sum(spec.kind == "ndarray" for spec in self._args))  # remembers as many arrays as it takes
        self._packers: list[Packer] = [make_packer(a, self._what_arg(a), arch, widens) for a in self._args]
        self._twins = threading.local()  # its launcher on each other thread that launches it (_twin), made anew
        self._plan = list(zip(self._packers, self._slots))
        self._introspect()
        slots = [CallSlot(kind=_slot_kind(spec, arch), writes=spec.may_write,
                          argument=int(ffi.cast("uintptr_t", slot.ptr)),
                          sig=signature(spec.dtype, spec.ndim, spec.elem_shape) if spec.dtype is not None else None,
                          name=spec.name)  # a kernel's too: keyword calls are made in C
                 for spec, slot in zip(self._args, self._slots)]
        self._prepare(launch=int(ffi.cast("uintptr_t", self._c)), graph=int(graph), ndarray_type=NdArray,
                      numpy_type=np.ndarray, slots=slots, hits=self._foreign.hits)
        fresh = self._foreign.fresh_plan(self._args)  # arrays the C call may take anew
        if fresh is not None:
            self._fresh(**fresh)

    def _twin(self) -> _Launchable | None:
        """Its launcher for the calling thread, another than the runtime's, where any thread may make its launch (the
        own CUDA and Vulkan launches): a copy with a buffer, slots and launch record of its own, made once a thread
        (kept in a thread-local, and in the C call's table of thread idents, where the thread's next calls, or a
        later thread's given the same ident, find it), whose calls the C call makes as it makes the runtime's
        thread's, instead of packing each call in Python. None on the launcher's own thread, or where the launch
        keeps to the runtime's thread (the Python path says so)."""
        ident = _get_ident()
        if not self._c.flags & _ANY_THREAD or self._c.thread == ident:
            return None
        twins = self._twins  # replaced by declare_access meanwhile: a twin of the old arguments is not kept
        twin: _Launchable | None = getattr(twins, "launcher", None)
        if twin is None:
            self._runtime.ensure_open()  # another process: refused
            twin = type(self).__new__(type(self))
            twin.__dict__.update(self.__dict__)
            packed = twin._new_packed()
            packed.launch.thread = ident  # the C call's "home": this thread
            twin._slots, twin._c = packed.slots, packed.launch
            twin._set_packers()
            if self._twins is twins:
                twins.launcher = twin
                self._add_twin(ident, twin)  # this thread's next calls handed to it in C
        return twin

    def _recording(self) -> bool:
        """Whether the call comes from a thread other than the runtime's (raises) or while it records (the slow
        path then appends a bound launch to the recording instead of launching)."""
        rt = self._runtime
        if _get_ident() == rt.gate.ident:
            return False
        rt.ensure_open()
        return rt.gate.recorder is not None

    def _launch_values(self, values: Sequence[Any]) -> None:
        """The launch of a slow call: pack ``values`` (in signature order) into the shared buffer and launch; from
        another thread than the runtime's (the own CUDA runtime's), into a buffer of the call's own."""
        rt = self._runtime
        c, plan, packed = self._c, self._plan, None
        if not rt.on_its_thread():
            rt.ensure_open()  # another process, or another thread of a runtime of libtaichi: refused
        if c.thread != _get_ident():  # not its launcher's thread (a twin's is its own): a buffer of the call's own
            _here(c, self._what)  # so are libtaichi's launches beside the own CUDA runtime, before anything is packed
            packed = self._new_packed()
            c, plan = packed.launch, list(zip(self._packers, packed.slots))
            c.thread = _get_ident()
        start = time.monotonic_ns() if rt.profiles else 0  # a profile's copy event: the copies' bytes, in and back
        try:
            self._pack_and_launch(values, c, plan, start)
        finally:
            if rt.gate.recorder is not None:  # a launch made while the runtime records (a call that came in before
                c.seen = -1  # the recording began): its record stale again, so its thread's next calls are recorded

    def _pack_and_launch(self, values: Sequence[Any], c: Any, plan: list[tuple[Packer, Any]], start: int) -> None:
        """Pack ``values`` into ``c``'s slots (``plan``) and launch, staged copies and all (``start``: where a profile
        is open, when the call began)."""
        rt, foreign = self._runtime, self._foreign
        with rt.backends.lock:
            if not start and self._run_again(values, c, plan):  # no profile open: kept copies may serve
                return
            if self._again is not None:  # none made inside a profile: the last are given back
                self._again.drop()
                self._again = None
            foreign.before_pack(len(values))
            try:
                for (pack, slot), value in zip(plan, values):
                    pack(value, rt, slot)
                if foreign.staged:  # foreign arrays the backend cannot address travel as copies
                    copied = sum(s.array.nbytes * (s.filled + s.write_back) for s in foreign.staged)
                    self._launch_staged(values, c, keep=not start)
                    for p in list(rt.profiles) if start else ():
                        p.note_copy(rt, self._name, copied, start)
                    return
                code = _launch(c)
                if code:
                    _after_launch(code, c, self._checker(values), self._what)
            except BaseException:
                if foreign.staged:  # no launch: the copies are dropped, never copied back over the caller's arrays
                    foreign.discard()
                raise

    def _after_code(self, code: int) -> None:
        """What the C call does when its launch returned non-zero, other than stale (see :func:`_after_launch`; a
        stale launch of the C call goes to :meth:`_slow_call`, which checks every argument again)."""
        _after_launch(code, self._c, self._module.ensure_open, self._what)

    def _checker(self, values: Sequence[Any]) -> Callable[[], None]:
        """What a launch of ``values`` re-checks before it is made again when C found it stale (something was closed
        since it was packed, on any thread): the module, the runtime and every ndarray and image it binds, so that
        a launch never binds what a close released (ClosedError instead)."""
        owneds = [o for o in map(bound_owned, values) if o is not None]

        def check() -> None:
            self._module.ensure_open()
            if any(o.closed for o in owneds):
                raise ClosedError(f"{self._what}: an ndarray or image it was given was closed (on another thread) "
                                  "before the launch was made")

        return check

    def _bound(self, given: list[Any]) -> BoundLaunch:
        """A bound launch of ``given`` (values in signature order), checked and packed into a buffer of its own (the
        caller found the module open)."""
        rt = self._runtime
        with rt.backends.lock:  # the runtime's staged copies and cache, which another thread may be launching with
            values = _bindable(self, given)
            packed = self._new_packed()
            for pack, slot, value in zip(self._packers, packed.slots, values):
                pack(value, rt, slot)
        return BoundLaunch(cast("Kernel | ComputeGraph", self), packed, values, given)

    def _new_packed(self) -> _Packed:
        raise NotImplementedError

    def _launch_staged(self, values: Sequence[Any], c: Any, keep: bool) -> None:
        """The launch (record ``c``) of packed arguments of which some are staged copies: nothing shared may overlap
        a copy written back; after the launch, each written copy goes back into its array (a failure before that
        leaves the copies to the caller's ``discard``); where ``keep``, the copies kept for the next call with the
        same arrays where they can be (``_again``)."""
        foreign = self._foreign
        foreign.before_launch(values, self._args)
        code = _launch(c)
        if code:
            _after_launch(code, c, self._checker(values), self._what)
        self._again = foreign.after_launch(values if keep else None, self._args)

    def _run_again(self, values: Sequence[Any], c: Any, plan: list[tuple[Packer, Any]]) -> bool:
        """The launch of ``values`` through the copies the last call kept (``_again``: filled, launched, read back)
        where they are its arrays again and copies are allowed; those copies given back where they are not. Whether
        it was made. Under the runtime's launch lock."""
        again = self._again
        if again is None:
            return False
        copies = None
        try:
            copies = again.values(values) if self._foreign.allow_copies else None
        finally:  # not its arrays, copies refused, or a fill refused (a closed runtime): the copies given back
            if copies is None:
                self._again = None
                again.drop()
        if copies is None:
            return False
        self._launch_again(again, copies, c, plan, values)
        return True

    def _launch_again(self, again: Any, copies: list[Any], c: Any, plan: list[tuple[Packer, Any]],
                      values: Sequence[Any]) -> None:
        """The launch of ``copies`` (``values`` with the staged arrays' kept copies, filled, in their place) and
        the written copies read back (``again``: the kept copies, given back where anything fails)."""
        rt = self._runtime
        try:
            self._foreign.before_pack(len(copies))  # CUDA arrays among them are held, within the held limit
            for (pack, slot), value in zip(plan, copies):
                pack(value, rt, slot)
            code = _launch(c)
            if code:
                _after_launch(code, c, self._checker(values), self._what)
            again.after_launch()
        except BaseException:
            self._again = None
            again.drop()
            raise

    def _introspect(self) -> None:
        """What ``inspect.signature`` (and IDEs) and ``help()`` show of this kernel or graph: its arguments as the
        module records them (names where it records names, ``arg0``... else), each annotated with what it takes."""
        graph = isinstance(self, ComputeGraph)
        params = []
        for i, a in enumerate(self._args):
            name = a.name or ""
            named = name.isidentifier() and not keyword.iskeyword(name)
            kind = (inspect.Parameter.KEYWORD_ONLY if graph else inspect.Parameter.POSITIONAL_OR_KEYWORD if named
                    else inspect.Parameter.POSITIONAL_ONLY)
            access = f", {a.access_word() or 'access unknown'}" if a.kind == "ndarray" else ""
            params.append(inspect.Parameter(name if named else f"arg{i}", kind, annotation=a.describe() + access))
        self.__signature__ = inspect.Signature(params, return_annotation=None)
        what = "graph" if graph else "kernel"
        self.__doc__ = (f"{self._name}{self.__signature__}\n\nThe {what} {self._name!r} of {self._module!r}; "
                        f"a call enqueues a launch.\n\n{inspect.getdoc(type(self)) or ''}")

    def _arg_index(self, key: Any) -> int:
        """The position of argument ``key`` (a name, or for a kernel an index); -1 where there is none."""
        raise NotImplementedError

    def declare_access(self, access: Mapping[Any, Any] | None = None, /, **named: Any) -> _Launchable:
        """Declare how ndarray arguments are used, where the module records it not (LLVM modules that
        ``taichi_aot build`` did not make): ``step.declare_access(x="read", v="read_write")``, or by index
        ``step.declare_access({0: "read"})`` (words, or :class:`~taichi_aot.enums.Access`). An argument the
        kernel only reads then takes read-only arrays (a JAX array, a read-only numpy array), shared where the
        backend can address them, and a staged copy of it is not copied back; one it only writes is not copied
        in. A declaration must include what the module records. Returns ``self``.

        Raises:
            ArgumentTypeError: no such argument.
            InvalidArgumentError: not an ndarray argument, not an access, or less than the module records.
        """
        if access is not None and not isinstance(access, Mapping):
            raise ArgumentTypeError(f"declare_access: expected a mapping {{argument: access}} or keywords, got "
                                    f"{type(access).__name__}")
        given = {**dict(access or {}), **named}
        args = list(self._args)
        for key, word in given.items():
            i = self._arg_index(key)
            if i < 0:
                raise ArgumentTypeError(f"{self!r} has no argument {key!r}")
            spec = self._recorded[i]
            what = self._what_arg(spec)
            if spec.kind != "ndarray":
                raise InvalidArgumentError(f"{what}: a {spec.kind} argument has no access to declare")
            try:
                declared = Access.parse(word, what)
            except ValueError as e:
                raise InvalidArgumentError(str(e)) from None
            if spec.access is not None and spec.access & ~declared:
                raise InvalidArgumentError(f"{what}: the module records that the kernel uses it as "
                                           f"{spec.access_word()}; a declaration may add to that, not take away")
            args[i] = replace(spec, access=declared)
        self._args = args  # launches made from now on (bound launches keep what they were bound with)
        self._set_packers()
        return self

    def __repr__(self) -> str:
        names = ", ".join(p for p in getattr(self, "__signature__", inspect.Signature()).parameters)
        return f"<{type(self).__name__} {self._name}({names}) of {self._module!r}>"


class Kernel(_Launchable):
    """A kernel of a module. Call it to launch: ``kernel(x, y, 0.5)`` (alias ``kernel.launch``).

    Every argument is checked against the signature in the module's metadata before
    C is called (count, kind, dtype, ndim, element shape, scalar range); keyword
    arguments work where the module records argument names (gfx backends).
    :meth:`bind` checks and packs arguments once for repeated launches.

    A call enqueues a launch. Arguments: NdArray, Texture/Image, int, float, numpy scalars,
    small vectors/matrices (numpy arrays or tuples), and other libraries' arrays (numpy,
    torch, CuPy, JAX); checked against the signature.

    Raises:
        ArgumentTypeError: a missing, extra or unknown argument, or one of the wrong kind or dtype.
        InvalidArgumentError: a value out of range, a wrong shape, an object of another runtime.
        ClosedError: the kernel's module, its runtime or an argument is closed.
        WrongThreadError: called from a thread other than the runtime's (before anything is written).
    """

    def __init__(self, module: Module, name: str, choice: Choice, args: list[ArgInfo], reverse: Callable[[], Any]):
        super().__init__(module, name, choice)
        self._args = self._recorded = args
        #: its reverse-mode kernel as its module's backends make it once (``ModuleBackends.reverse``), handed down by
        #: the module (NotSupportedError where there is none)
        self._reverse = reverse
        self._what = f"launch of kernel {name!r}"
        self._names: list[str | None] = [a.name for a in args]
        packed = self._new_packed()
        self._slots = packed.slots
        self._c = packed.launch
        self._set_packers()

    def _what_arg(self, spec: ArgInfo) -> str:
        return f"kernel {self._name!r} argument {spec.index}" + (f" ({spec.name!r})" if spec.name else "")

    def _arg_index(self, key: Any) -> int:
        if isinstance(key, str):
            return self._names.index(key) if key in self._names else -1
        if isinstance(key, int) and not isinstance(key, bool) and 0 <= key < len(self._args):
            return key
        return -1

    def _new_packed(self) -> _Packed:
        choice = self._choice
        packed = _Packed(self._runtime, choice, "TiArgument", len(self._args), ARG_SIZE, 0, self._range)
        packed.prefill(self._args)
        return packed

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """Positional and keyword arguments as one positional tuple, in signature order."""
        if kwargs:
            if None in self._names:
                raise ArgumentTypeError(f"kernel {self._name!r}: this module records no argument names; pass them "
                                        "by position")
            names: list[str] = self._names  # type: ignore[assignment]  # no None in it (checked above)
            args = tuple(by_name(names, args, kwargs, f"kernel {self._name!r}"))
        if len(args) != len(self._packers):
            listing = ", ".join(a.describe() + (f" {a.name}" if a.name else "") for a in self._args)
            raise ArgumentTypeError(
                f"kernel {self._name!r} takes {len(self._packers)} argument(s) ({listing}), got {len(args)}"
            )
        return args

    def _slow_call(self, *args: Any, **kwargs: Any) -> None:
        """A call the C call left to Python: every argument checked and packed here (the same host arrays as the
        last call's, on the runtime's thread: through the copies that call kept, :meth:`_again_call`)."""
        if self._again is not None and not kwargs and self._again_call(args):
            return
        if self._recording():
            self._runtime.gate.recorder.append(self.bind(*args, **kwargs))  # recording
            return
        twin = self._twin()
        if twin is not None:  # another thread's launch: its own launcher's, made in C from the second call on
            twin(*args, **kwargs)
            return
        if kwargs or len(args) != len(self._plan):
            args = self._bind(args, kwargs)
        self._launch_values(args)

    def _again_call(self, args: tuple[Any, ...]) -> bool:
        """The call made through the copies the last call kept for its host arrays (``_again``), where these are
        those arrays again and the call is the runtime's thread's own, outside a recording and a profile (whatever
        else goes to :meth:`_launch_values`, which checks all of it); whether it was made."""
        rt, c = self._runtime, self._c
        if c.thread != _get_ident() or rt.gate.ident != c.thread or rt.profiles or len(args) != len(self._plan) or \
                not rt.on_its_thread():
            return False
        with rt.backends.lock:
            return self._run_again(args, c, self._plan)

    #: ``kernel.launch(x, 0.5)``: the same as ``kernel(x, 0.5)``.
    launch = Launcher.__call__

    def prepare_grad(self) -> None:
        """Find (and on x64 compile) this kernel's reverse-mode kernel now rather than at the first :meth:`grad`:
        the first call must come from the runtime's thread, later ones may come from another (torch's autograd runs
        CUDA backward on a thread of its own; the torch op does this when it is made). Raises as :meth:`grad`."""
        self._reverse()

    def packing(self) -> Packing:
        """What a launch of it made elsewhere needs of its arguments (for the package: a reverse kernel launched from
        another thread packs its scalars with these packers)."""
        return Packing(self._args, self._packers, [self._what_arg(a) for a in self._args])

    def grad(self, *args: Any, grads: Any, **kwargs: Any) -> None:
        """Run this kernel's reverse-mode (autodiff) kernel: ``add.grad(x, y, 0.5, grads=(x_grad, y_grad))``.

        ``build`` exports it, as ``<kernel>_grad``, for kernels whose ndarrays say ``needs_grad=True``. The
        arguments are the kernel's (numpy arrays, torch CPU tensors, or JAX CPU arrays and other host arrays
        with DLPack or an array interface, for its ndarrays); ``grads`` gives a writable
        gradient array for each ndarray that needs one, in argument order (a sequence, or a dict by argument
        index or name), of its array's dtype and shape. As in Taichi: the gradients of what the kernel reads are
        added to (start them at zero), and the gradients of what it writes are read, then cleared. libtaichi_c_api
        cannot hand a reverse kernel its gradients, so it runs on taichi_aot's own launches: on x64 compiled for
        this machine from the module's IR (llvmlite, the ``ptx`` extra), waited for; on CUDA from the module's PTX
        (``build`` with llvmlite, or ``taichi_aot ptx``), on the runtime's stream like any kernel, with the arrays
        a CUDA launch takes (NdArrays, torch, CuPy, JAX arrays on the GPU).

        The reverse kernel is launched as any kernel of the module is (its gradients in the slots after its
        arguments: the same checks and foreign-array policy; inside ``rt.record()`` it is recorded, not run).

        Raises:
            NotSupportedError: no reverse-mode kernel, not x64 or CUDA, no llvmlite (x64), no PTX for it (CUDA), or
                a kernel the own launches cannot run.
            ArgumentTypeError, InvalidArgumentError: an argument or gradient of the wrong kind, dtype or shape.
            ReadOnlyArrayError: a gradient (or an array the kernel may write) its owner made read-only.
        """
        reverse = self._reverse()
        what = [self._what_arg(a) for a in self._args]
        reverse.call(list(self._bind(args, kwargs)), grads, self._names, what, f"kernel {self._name!r}")

    def bind(self, *args: Any, **kwargs: Any) -> BoundLaunch:
        """Check and pack arguments once; the returned :class:`BoundLaunch` launches with them.

        ``bound()`` launches; ``bound.set(index_or_name, value)`` changes one argument (checked).
        """
        self._module.ensure_open()
        return self._bound(list(self._bind(args, kwargs)))


class ReturningKernel(Kernel):
    """A kernel that returns values, on the own CUDA launcher: ``value = kernel(a)`` (a Python int or float; a
    vector or matrix as a numpy array; several values as a tuple).

    Its launch waits: the stream is synchronized and the results copied back before the call returns, so it is
    refused (NotSupportedError) on a stream being captured into a CUDA graph. Every call takes Python's path (the C
    call returns nothing); a bound launch or a replay runs it, and its value is that of the last launch, read by
    :meth:`last_value`. On libtaichi's path a kernel's return value is lost (Taichi 1.7.4's C-API gives none): it is
    a plain :class:`Kernel`, whose call returns None, and ``module.launchers()`` says so."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._recording():  # appended to the recording: nothing runs now
            self._runtime.gate.recorder.append(self.bind(*args, **kwargs))  # recording
            return None
        if kwargs or len(args) != len(self._plan):
            args = self._bind(args, kwargs)
        with self._runtime.backends.lock:  # its results are read before another thread's launch writes them
            self._launch_values(args)
            return self._choice.results.read()

    #: ``kernel.launch(a)``: the same as ``kernel(a)``.
    launch = __call__

    def last_value(self) -> Any:
        """The values its last launch returned (a bound launch's or a replay's too), as a call returns them."""
        return self._choice.results.read()

    @property
    def returned(self) -> list[tuple[np.dtype, tuple[int, ...] | None]]:
        """Each value it returns: its numpy dtype and shape (None: a scalar; a vector 1-D, a matrix 2-D)."""
        return self._choice.results.layout()


class ComputeGraph(_Launchable):
    """A compute graph of a module. Call with named arguments: ``graph(x=a, y=b, s=0.5)``, which enqueues a launch.

    Arguments are checked against the graph's recorded signature before C is called:
    every name present and known, and each value's kind, dtype, ndim and element shape.
    """

    def __init__(self, module: Module, name: str, choice: Choice, args: list[ArgInfo]):
        super().__init__(module, name, choice)
        self._args = self._recorded = args
        self._what = f"launch of graph {name!r}"
        self._order: list[str] = [a.name or "" for a in args]
        self._index = {n: i for i, n in enumerate(self._order)}
        self._cnames = [ffi.new("char[]", n.encode()) for n in self._order]
        packed = self._new_packed()
        self._slots = packed.slots
        self._c = packed.launch
        self._set_packers()

    def _what_arg(self, spec: ArgInfo) -> str:
        return f"graph {self._name!r} argument {spec.name!r}"

    def _arg_index(self, key: Any) -> int:
        return self._index.get(key, -1) if isinstance(key, str) else -1

    def _new_packed(self) -> _Packed:
        choice = self._choice
        packed = _Packed(self._runtime, choice, "TiNamedArgument", len(self._args), _NAMED_SIZE,
                         _NAMED_ARG, self._range)
        for i, cname in enumerate(self._cnames):
            packed.array[i].name = cname
        packed.keep = list(self._cnames)
        packed.prefill(self._args)
        return packed

    def _values(self, args: Mapping[str, Any]) -> list[Any]:
        """The values of ``args`` in signature order; raises for a missing or unknown name."""
        if not isinstance(args, Mapping):
            raise ArgumentTypeError(f"graph {self._name!r}: arguments must be a mapping of name to value")
        index = self._index
        if len(args) != len(index) or any(n not in index for n in args):
            unknown = [n for n in args if n not in index]
            if unknown:
                raise ArgumentTypeError(f"graph {self._name!r} has no argument {unknown[0]!r} "
                                        f"(it takes {', '.join(self._order)})")
            missing = [n for n in self._order if n not in args]
            raise ArgumentNotFoundError(f"graph {self._name!r}: missing argument(s) {', '.join(missing)}")
        return [args[n] for n in self._order]

    def _slow_call(self, *positional: Any, **args: Any) -> None:
        """A call the C call left to Python: every argument checked and packed here."""
        if positional:
            raise ArgumentTypeError(f"graph {self._name!r} takes named arguments only: "
                                    f"graph({', '.join(n + '=...' for n in self._order)})")
        if self._recording():
            self._runtime.gate.recorder.append(self.bind(args))  # recording
            return
        twin = self._twin()
        if twin is not None:  # another thread's launch: its own launcher's (Kernel._slow_call)
            twin(**args)
            return
        self._launch_values(self._values(args))

    def launch(self, args: Mapping[str, Any]) -> None:
        """Enqueue the graph with ``{name: value}`` arguments: ``graph.launch(d)`` is ``graph(**d)``.

        Raises:
            ArgumentTypeError: an unknown argument, or one of the wrong kind or dtype.
            ArgumentNotFoundError: a missing argument.
            InvalidArgumentError, ClosedError, WrongThreadError: as for a kernel launch.
        """
        if not isinstance(args, Mapping):
            raise ArgumentTypeError(f"graph {self._name!r}: arguments must be a mapping of name to value")
        odd = [n for n in args if n.__class__ is not str]  # no keyword: the rest is _values' to check
        if odd:
            raise ArgumentTypeError(f"graph {self._name!r} has no argument {odd[0]!r} "
                                    f"(it takes {', '.join(self._order)})")
        self(**args)

    def bind(self, *mapping: Mapping[str, Any], **args: Any) -> BoundLaunch:
        """Check and pack named arguments once; returns a :class:`BoundLaunch`."""
        self._module.ensure_open()
        if mapping:
            if len(mapping) != 1 or args:
                raise ArgumentTypeError(f"graph {self._name!r}: bind(mapping) or bind(**named), not both")
            args = mapping[0]  # type: ignore[assignment]  # a Mapping is all _values needs
        return self._bound(self._values(args))


class BoundLaunch(Launcher):
    """A kernel or graph with its arguments checked and packed: call it to launch.

    Holds its arguments (they stay alive). A launch re-checks that the kernel, the runtime and
    each bound object are open whenever anything was closed since the last check, so a closed
    object raises ClosedError; otherwise a launch is one comparison and one C call, made by
    :class:`Launcher`'s call with no argument to check (no Python frame). A launch bound to torch tensors
    checks first that their storages kept the memory it was bound to (``resize_`` moves it).
    """
    __reduce_ex__ = unpicklable("send the module's path, the kernel's name and its arguments, and bind there")

    __slots__ = ("__weakref__", "_c", "_entry", "_given", "_owneds", "_packed", "_runtime", "_values")

    def __init__(self, entry: Kernel | ComputeGraph, packed: _Packed, values: list[Any], given: list[Any]):
        self._entry = entry
        self._packed = packed
        self._runtime = entry._runtime
        self._values = values  # foreign arrays replaced by their ndarrays
        self._given = [bound_hold(v) for v in given]  # the arrays themselves: their ndarrays do not hold them
        self._c = packed.launch
        self._owneds: tuple[Owned, ...] = ()
        self._refresh()
        self._prepare(launch=int(ffi.cast("uintptr_t", self._c)), graph=0, ndarray_type=NdArray, numpy_type=np.ndarray,
                      slots=[], hits=None)
        self._guard(storage_guards(self._given))  # checked before every launch (in C; _validate asks C too)

    def _refresh(self) -> None:
        owneds = [self._entry.module.owned, self._runtime.owned]
        owneds += [o for o in map(bound_owned, self._values) if o is not None]
        self._owneds = tuple(owneds)
        self._c.seen = -1

    @property
    def entry(self) -> Kernel | ComputeGraph:
        """The kernel or graph this launch belongs to."""
        return self._entry

    def _validate(self) -> None:
        for o in self._owneds:
            if o.closed:
                raise ClosedError(f"{self._entry!r}: a bound argument, the module or the runtime is closed")
        self._runtime.ensure_open()
        if not self._guards_hold():
            raise InvalidStateError(f"{self._entry!r}: the memory of a bound torch tensor moved since it was bound "
                                    "(resize_ reallocated its storage, freeing what the launch uses): bind again")

    def _slow_call(self, *args: Any, **kwargs: Any) -> None:
        """A launch the C call left to Python: something was closed since the last one (or it is the first, or
        from another thread): check, then launch."""
        if args or kwargs:
            raise ArgumentTypeError(f"launch of {self._entry!r}: a bound launch takes no arguments (set() changes "
                                    "one)")
        self._after_code(_STALE)

    def _after_code(self, code: int) -> None:
        """What the C call does when its launch returned non-zero (see :func:`_after_launch`)."""
        _after_launch(code, self._c, self._validate, lambda: f"launch of {self._entry!r}")

    #: The launch (``bound()``), as a method: ``run = bound.launch`` then ``run()``.
    launch = Launcher.__call__

    def set(self, key: int | str, value: Any) -> None:
        """Replace one argument (by index, or by name where the module records names), checked.

        Raises:
            ArgumentTypeError: no such argument, or a value of the wrong kind.
            InvalidArgumentError, ClosedError, WrongThreadError: as for a launch.
        """
        entry = self._entry
        self._runtime.ensure_open()  # the buffer may be read by a launch of the runtime's thread
        index = entry._arg_index(key)
        if index < 0:
            raise ArgumentTypeError(f"{entry!r} has no argument {key!r}")
        bound = _bindable_value(entry, entry._args[index], value)
        entry._packers[index](bound, self._runtime, self._packed.slots[index])
        self._values[index] = bound
        self._given[index] = bound_hold(value)
        self._guard(storage_guards(self._given))
        self._refresh()

    def __repr__(self) -> str:
        return f"<BoundLaunch of {self._entry!r}>"
