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
from ..errors import InvalidArgumentError

if TYPE_CHECKING:  # pragma: no cover
    from ..metadata import ArgInfo
    from ..metadata.model import GraphInfo, KernelInfo

__all__ = ["AUTO", "CUDA", "LIBTAICHI", "OWN_FLAGS", "VULKAN", "X64", "Backend", "Choice", "RuntimeState", "launchers",
           "library_choice", "own_choice"]

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
