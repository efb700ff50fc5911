"""The contract of the launch backends: what each shows the room (``backends/__init__.py``).

Every backend of a loaded module is a :class:`Backend`: it has a name (what ``Kernel.launcher`` and
``AotModule.launchers()`` say: "cuda", "x64", "taichi"), answers for each kernel and graph with a :class:`Choice` or
None (not its own), says why it declines a kernel, and lets its code go when the module is released. The room asks
a module's backends in order (the own launches first, libtaichi last) and takes the first answer.

A :class:`Choice` is all the rest of the package sees of a launch: the C launch record's kind and handle, and its
``flags`` (``_csrc/taichi_aot.h``), which C reads where it must know what a launch is. It never compares kinds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

from .._native import lib
from ..errors import InvalidArgumentError, TaichiError

if TYPE_CHECKING:  # pragma: no cover
    from ..metadata import ArgInfo
    from ..metadata.model import GraphInfo, KernelInfo

__all__ = ["AUTO", "CUDA", "LIBTAICHI", "OWN_FLAGS", "VULKAN", "X64", "Backend", "BackendModule", "Choice",
           "ContractError", "RuntimeState", "checked", "launchers", "library_choice", "needed", "own_choice"]

#: The backends' names, as ``Kernel.launcher`` and ``AotModule.launchers()`` say them.
CUDA, X64, VULKAN, LIBTAICHI = "cuda", "x64", "vulkan", "taichi"
#: The environment variable that picks a module's launchers: "auto" (the default: the own launches where they take a
#: kernel, libtaichi for the rest) or "taichi" (libtaichi for every kernel it can launch); "cuda", "x64", "vulkan"
#: and "own" (the old word) read as "auto".
ENV = "TAICHI_AOT_CUDA_LAUNCHER"
AUTO = "auto"
CHOICES = (AUTO, LIBTAICHI, CUDA, X64, VULKAN, "own")


def launchers(given: str | None, where: str = "launcher") -> str:
    """The launchers asked for (``given``, else the environment's, else "auto"), as AUTO or "taichi";
    InvalidArgumentError for another word."""
    value = given if given is not None else os.environ.get(ENV, AUTO)
    if value not in CHOICES:
        raise InvalidArgumentError(f"{where if given is not None else ENV} must be one of {', '.join(CHOICES)}, got "
                                   f"{value!r}")
    return LIBTAICHI if value == LIBTAICHI else AUTO


@dataclass(frozen=True)
class Choice:
    """Which backend launches one kernel or graph, and what its launches need."""

    backend: str  # the backend's name: CUDA, X64, VULKAN or LIBTAICHI
    kind: int  # the TaichiAotLaunch kind (_csrc/taichi_aot.h)
    handle: Any  # what that kind launches: a TaichiAotCudaKernel / TaichiAotCudaGraph, or libtaichi's handle
    library: Any  # libtaichi's handle (TiKernel, TiComputeGraph); None where libtaichi cannot launch it
    widens: bool = False  # takes every scalar type as it is (the own launches), not only the C-API's
    graphable: bool = False  # its launch never waits: XLA may capture it into a command buffer (a CUDA graph)
    results: Any = None  # a kernel that returns values: their reader (plan.Results)
    pointers: bool = False  # an ndarray may be passed as a tagged pointer (the own launches), not only a TiMemory
    codes: bool = False  # it reports its errors by its return code (the own launches), not libtaichi's error slot

    @property
    def flags(self) -> int:
        """What the launch record tells C of it (``TaichiAotLaunch.flags``): C switches on these, never on the
        order of the kind numbers."""
        return ((lib.TAICHI_AOT_LAUNCH_POINTERS if self.pointers else 0) | (lib.TAICHI_AOT_LAUNCH_CODES if self.codes
                else 0) | (lib.TAICHI_AOT_LAUNCH_GRAPHABLE if self.graphable else 0))


#: The flags of a record of one of taichi_aot's own kernel launches: tagged pointers, errors by code (what
#: :func:`own_choice`'s choices carry, graphable aside; a record made by hand, as a launch elsewhere is, takes these).
OWN_FLAGS = lib.TAICHI_AOT_LAUNCH_POINTERS | lib.TAICHI_AOT_LAUNCH_CODES


def own_choice(backend: str, kind: int, handle: Any, library: Any, graphable: bool = False, results: Any = None
               ) -> Choice:
    """A choice of one of taichi_aot's own launches: every scalar type, tagged pointers, errors by code."""
    return Choice(backend, kind, handle, library, True, graphable, results, pointers=True, codes=True)


def library_choice(kind: int, handle: Any) -> Choice:
    """A choice of libtaichi's launch of ``handle``."""
    return Choice(LIBTAICHI, kind, handle, handle)


class Backend(Protocol):
    """What every launch backend of a loaded module answers."""

    name: str

    def kernel(self, name: str, info: KernelInfo, library: Callable[[], Any]) -> tuple[Choice, list[ArgInfo]] | None:
        """Its choice of kernel ``name`` and the signature its launches take, or None where it does not launch it
        (``library()`` gives libtaichi's handle, looked up only when needed)."""

    def graph(self, info: GraphInfo, library: Any) -> Choice | None:
        """Its choice of a compute graph (``library``: libtaichi's handle), or None."""

    def takes(self, name: str, info: KernelInfo | None) -> bool:
        """Whether it launches kernel ``name`` (``launchers()``; it may prepare the kernel to know)."""

    def why_not(self, name: str) -> str | None:
        """Why it does not launch kernel ``name``, where it has a reason to give."""

    def reverse(self, module: Any, name: str, grad: KernelInfo, threads: int | None) -> Any:
        """Kernel ``name``'s reverse-mode kernel ``grad`` as its primal's ``grad`` call where this backend runs it
        (NotSupportedError where it should and cannot), or None: another backend's to say (``module``: the
        AotModule asking; ``threads``: an x64 runtime's)."""

    def unload(self) -> None:
        """The module is being released: its code given back (unless a CUDA graph holds it)."""


class RuntimeState(Protocol):
    """What a backend keeps per runtime (``backends.RuntimeBackends``, under the backend's name), as the runtime asks
    it: launches go on another stream, XLA's handler wants a record to launch with, CUDA graphs may hold its code."""

    def select(self, stream: int | None) -> None:
        """Launch on ``stream`` (None: the legacy default stream) from now on."""

    def xla_record(self) -> Any:
        """The record XLA's handler launches with (``TaichiAotCudaRuntime *``), or None where it has none."""

    def keep_for_graphs(self) -> None:
        """Launches may be captured into graphs out of the runtime's sight: what they use stays."""


class BackendModule:
    """What a registered backend's module gives the room (``backends.register``), checked when it registers (or, for
    a module named by its path, when it is first imported): wgpu-py's needed-attributes rule.

    Needed: ``load(runtime, state, what, folder, choice, meta) -> Backend | None`` (its :class:`Backend` for a module
    just loaded in ``runtime``, or None: it takes nothing of it; ``state``: the runtime's ``RuntimeBackends``, where
    it keeps a :class:`RuntimeState` under its name; ``meta``: the module's metadata as ``taichi_aot.metadata`` read
    and checked it) and ``launch_error(code, what) -> Exception`` (the exception of its launches' error codes).

    The refusals of its arch in its own words, asked whether or not it loaded the module, default to None here (the
    room's own sentence is said): ``returns_refused(why)`` (the end of "kernel 'k' returns values, which ..."),
    ``reverse_refused(name)`` (why a reverse-mode kernel does not run), and, where libtaichi may have no runtime for
    its modules, ``unowned_refused(why)`` (why it does not take a kernel, ``why`` its own reason or None) and
    ``graph_refused(kernels)`` (a graph with a kernel it does not take: ``kernels``, the graph's, listed).

    A backend's module (a Python module of those functions) is read into one by :func:`checked`; a class may derive
    from this one instead."""

    load: Callable[..., Backend | None]
    launch_error: Callable[[int, str], Exception]

    def returns_refused(self, why: str | None) -> str | None:
        return None

    def reverse_refused(self, name: str) -> str | None:
        return None

    def unowned_refused(self, why: str | None) -> str | None:
        return None

    def graph_refused(self, kernels: str) -> str | None:
        return None


class ContractError(TaichiError, TypeError):
    """A launch backend that does not keep the contract (:class:`BackendModule`, :class:`Backend`), or a second
    registration of a backend's name."""


def needed(contract: type) -> tuple[str, ...]:
    """The attributes ``contract`` names (a :class:`Backend`'s, or those of :class:`BackendModule` it gives no default
    for): its annotations and the functions it declares, in that order."""
    names = list(getattr(contract, "__annotations__", {}))
    if contract is not BackendModule:
        names += [n for n, v in vars(contract).items() if callable(v) and not n.startswith("_")]
    return tuple(names)


#: The refusals a backend's module may give in its own words (:class:`BackendModule`'s defaults otherwise).
REFUSALS = tuple(n for n, v in vars(BackendModule).items() if callable(v) and not n.startswith("_"))


def checked(given: Any, name: str, contract: type = BackendModule) -> Any:
    """``given`` as a ``contract`` of backend ``name`` (ContractError naming what it lacks): a :class:`Backend`
    as it is; a :class:`BackendModule`, where ``given`` is a module or an object of its functions, one whose refusals
    are its own where it gives them and the defaults elsewhere."""
    missing = [a for a in needed(contract)
               if not hasattr(given, a) or (a != "name" and not callable(getattr(given, a)))]
    if contract is BackendModule:  # a refusal of its own words is a function too
        missing += [f"{a} (not a function)" for a in REFUSALS if hasattr(given, a) and not callable(getattr(given, a))]
    if missing:
        what = "module" if contract is BackendModule else "backend"
        raise ContractError(f"launch backend {name!r}: its {what} {given!r} lacks {', '.join(missing)} (the contract "
                            f"of backends/choice.py's {contract.__name__}; docs/contributing.md, adding a backend)")
    if contract is not BackendModule or isinstance(given, BackendModule):
        return given
    read = BackendModule()
    for attr in needed(BackendModule) + REFUSALS:
        if hasattr(given, attr):
            vars(read)[attr] = getattr(given, attr)  # its own function, where it gives one (the default elsewhere)
    return read
