"""Launching kernels and compute graphs: the hot path.

A :class:`Kernel` or :class:`ComputeGraph` calls through one call plan a thread (:mod:`taichi_aot._callplan`): a
packed argument buffer laid out as the C array of ``TiArgument`` / ``TiNamedArgument``, its slots, a
``TaichiAotLaunch`` struct pointing at it, of the kind its launch backend's :class:`~taichi_aot.backends.Choice` says
(libtaichi's, or an own launcher's from the same buffer), and the copies its last call kept of host arrays. A call
packs each argument with its precomputed packer (:mod:`taichi_aot._arguments`) and makes one C call,
``taichi_aot_launch``, which also checks in C that nothing was closed since Python last looked (the close epoch) and
that the caller is the record's thread; only when that comes back non-zero does Python look again
(:func:`~taichi_aot._callplan.after_launch`). :class:`BoundLaunch` keeps a buffer of its own, packed once;
:class:`LaunchSequence` replays bound launches from C (``taichi_aot_replay``) with no Python in between.

Threads: a runtime of libtaichi is launched on from its own thread; an own launcher's runtime from any thread, each
other thread through a plan of its own (its :class:`~taichi_aot._callplan.Twin`, to which the C call hands that
thread's calls), under the runtime's lock where Python launches (``RuntimeBackends.lock``).
"""

from __future__ import annotations

import inspect
import keyword
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Protocol, cast

import numpy as np

from ._arguments import ARG_SIZE, Packer, Packing, by_name, make_packer
from ._arrays import Launcher, array_like, bound_hold, storage_guards  # Launcher: the C call's type (_csrc/call.c)
from ._callplan import STALE, CallPlan, Packed, Twin, after_launch, bound_owned, prepare
from ._lifetime import ForeignPolicy, Parent, unpicklable
from ._native import ffi, lib
from ._nvtx import first_use, range_name
from .enums import Access
from .errors import ArgumentNotFoundError, ArgumentTypeError, ClosedError, InvalidArgumentError, InvalidStateError
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


_get_ident = threading.get_ident
_NAMED_SIZE, _NAMED_ARG = ffi.sizeof("TiNamedArgument"), ffi.offsetof("TiNamedArgument", "argument")
_ANY_THREAD = lib.TAICHI_AOT_LAUNCH_ANY_THREAD


def _bindable(entry: _Launchable, values: Sequence[Any]) -> list[Any]:
    """``values`` with foreign arrays for ndarray arguments replaced by the ndarrays they travel in (a bound launch
    holds those, and the arrays); an array the backend could take only as a copy is refused (it would be copied
    once, at bind)."""
    entry._foreign.before_pack(len(values))
    return [_bindable_value(entry, spec, value) for spec, value in zip(entry._args, values)]


def _bindable_value(entry: _Launchable, spec: ArgInfo, value: Any) -> Any:
    if spec.kind != "ndarray" or isinstance(value, NdArray) or not array_like(value):
        return value
    return entry._foreign.bound_argument(value, spec, f"{entry!r} argument {spec.index}")


class _Launchable(Launcher):
    """A kernel or graph of a module: its name, module, handle, signature and packers.

    A call (``kernel(x, 0.5)``, ``graph(x=a)``) is :class:`Launcher`'s, made in C where every argument is one it
    can vouch for (``_csrc/call.c``: the NdArrays and shared numpy arrays of the last launch, exact floats and
    ints), else by :meth:`_slow_call`: the checks below, and the packing and launch of its thread's call plan
    (:class:`~taichi_aot._callplan.CallPlan`: the kernel's own on its runtime's thread, a twin's elsewhere).
    """

    __reduce_ex__ = unpicklable("send the module's path and the kernel's or graph's name, and look it up there")
    _args: list[ArgInfo]
    _recorded: list[ArgInfo]  # as the module records them (declare_access may add to ``_args``)
    _callplan: CallPlan  # its runtime's thread's calls: the buffer they pack into, the record, the kept copies
    _what: str  # "launch of kernel 'step'", for messages
    _foreign: ForeignPolicy  # its runtime's foreign-array policy
    bind: Callable[..., BoundLaunch]  # Kernel.bind(*args, **kwargs), ComputeGraph.bind(**named)

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
        runtime's thread's call plan, made anew (the C call's view of its slots)."""
        # the own launches take every scalar type
        arch, widens = self._runtime.arch, self._choice.widens
        self._foreign.fit(sum(spec.kind == "ndarray" for spec in self._args))  # remembers as many arrays as it takes
        self._packers: list[Packer] = [make_packer(a, self._what_arg(a), arch, widens) for a in self._args]
        self._twins = threading.local()  # its launcher on each other thread that launches it (_twin), made anew
        self._introspect()
        old, self._callplan = getattr(self, "_callplan", None), self._plan(self._runtime.gate.thread)
        prepare(self, self._callplan)
        if old is not None:  # declared anew: the copies the old plan kept are given back
            old.give_back()

    def _plan(self, thread: int) -> CallPlan:
        """A call plan of ``thread``'s calls: a buffer, slots and launch record of its own."""
        return CallPlan(self._new_packed(), thread, self._packers, self._args, self._runtime, self._module, self._name,
                        self._what, isinstance(self, ComputeGraph))

    def _slow_call(self, *args: Any, **kwargs: Any) -> None:
        """A call the C call left to Python, on the runtime's thread or handed to its twin (:meth:`_call_on`)."""
        self._call_on(self._callplan, args, kwargs)

    def _call_on(self, plan: CallPlan, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A call the C call left to Python, of the thread whose plan is ``plan``: every argument checked, packed and
        launched (the same host arrays as the last call's, on the runtime's thread: through the copies it kept)."""
        raise NotImplementedError

    def _elsewhere(self, plan: CallPlan, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether a call on ``plan`` went elsewhere: recorded (the runtime records; another thread's call that came
        in before the recording began launches), or handed to its thread's twin (the runtime's plan's call from
        another thread, where any thread may make its launch, made in C from the second call on)."""
        if plan.recording():
            self._runtime.gate.recorder.append(self.bind(*args, **kwargs))  # recording
            return True
        twin = self._twin() if plan is self._callplan else None
        if twin is not None:
            twin(*args, **kwargs)
        return twin is not None

    def _twin(self) -> Twin | None:
        """Its launcher for the calling thread, another than the runtime's, where any thread may make its launch (the
        own CUDA, Vulkan and x64 launches): a :class:`~taichi_aot._callplan.Twin` of a call plan of its own, made
        once a thread (kept in a thread-local, and in the C call's table of thread idents, where the thread's next
        calls, or a later thread's given the same ident, find it), whose calls the C call makes as it makes the
        runtime's thread's, instead of packing each call in Python. None on the runtime's thread, or where the launch
        keeps to the runtime's thread (the Python path says so)."""
        ident, c = _get_ident(), self._callplan.launch
        if not c.flags & _ANY_THREAD or c.thread == ident:
            return None
        twins = self._twins  # replaced by declare_access meanwhile: a twin of the old arguments is not kept
        twin: Twin | None = getattr(twins, "launcher", None)
        if twin is None:
            self._runtime.ensure_open()  # another process: refused
            twin = Twin(self._plan(ident), self._call_on)
            if self._twins is twins:
                twins.launcher = twin
                self._add_twin(ident, twin)  # this thread's next calls handed to it in C
        return twin

    def _after_code(self, code: int) -> None:
        """What the C call does when its launch returned non-zero, other than stale (see
        :func:`~taichi_aot._callplan.after_launch`; a stale launch of the C call goes to :meth:`_slow_call`, which
        checks every argument again)."""
        self._callplan.after_code(code)

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

    def _new_packed(self) -> Packed:
        raise NotImplementedError

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
        self._set_packers()

    def _what_arg(self, spec: ArgInfo) -> str:
        return f"kernel {self._name!r} argument {spec.index}" + (f" ({spec.name!r})" if spec.name else "")

    def _arg_index(self, key: Any) -> int:
        if isinstance(key, str):
            return self._names.index(key) if key in self._names else -1
        if isinstance(key, int) and not isinstance(key, bool) and 0 <= key < len(self._args):
            return key
        return -1

    def _new_packed(self) -> Packed:
        choice = self._choice
        packed = Packed(self._runtime, choice, "TiArgument", len(self._args), ARG_SIZE, 0, self._range)
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

    def _call_on(self, plan: CallPlan, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not kwargs and plan.kept is not None and plan.call_kept(args):  # its host arrays again: the kept copies
            return
        if self._elsewhere(plan, args, kwargs):
            return
        if kwargs or len(args) != len(self._packers):
            args = self._bind(args, kwargs)
        plan.call(args)

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
        if self._callplan.recording():  # appended to the recording: nothing runs now
            self._runtime.gate.recorder.append(self.bind(*args, **kwargs))  # recording
            return None
        if kwargs or len(args) != len(self._packers):
            args = self._bind(args, kwargs)
        twin = self._twin()  # another thread's: its plan's
        with self._runtime.backends.lock:  # its results are read before another thread's launch writes them
            (self._callplan if twin is None else twin.plan).call(args)
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
        self._set_packers()

    def _what_arg(self, spec: ArgInfo) -> str:
        return f"graph {self._name!r} argument {spec.name!r}"

    def _arg_index(self, key: Any) -> int:
        return self._index.get(key, -1) if isinstance(key, str) else -1

    def _new_packed(self) -> Packed:
        choice = self._choice
        packed = Packed(self._runtime, choice, "TiNamedArgument", len(self._args), _NAMED_SIZE,
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

    def _call_on(self, plan: CallPlan, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if args:
            raise ArgumentTypeError(f"graph {self._name!r} takes named arguments only: "
                                    f"graph({', '.join(n + '=...' for n in self._order)})")
        if not self._elsewhere(plan, args, kwargs):
            plan.call(self._values(kwargs))

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

    def __init__(self, entry: Kernel | ComputeGraph, packed: Packed, values: list[Any], given: list[Any]):
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
        self._after_code(STALE)

    def _after_code(self, code: int) -> None:
        """What the C call does when its launch returned non-zero (see :func:`~taichi_aot._callplan.after_launch`)."""
        after_launch(code, self._c, self._validate, lambda: f"launch of {self._entry!r}")

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
