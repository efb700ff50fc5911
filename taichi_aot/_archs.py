"""Which backend a runtime is made on: the fastest this machine has (:func:`best_arch`), the fastest a module and this
machine both have (:func:`arch_for_module`, ``TAICHI_AOT_ARCH`` choosing among them), or the one named
(:func:`resolve_arch`). A room of its own beside :mod:`runtime`, which makes the runtime on the arch chosen here."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from . import capi, metadata
from .enums import ARCH_PREFERENCE, Arch, arch_name_hint
from .errors import IncompatibleModuleError, InvalidArgumentError, NotSupportedError

if TYPE_CHECKING:  # pragma: no cover
    from .metadata.source import ModuleSource

__all__ = ["arch_for_module", "best_arch", "resolve_arch"]


def best_arch() -> Arch:
    """The fastest backend here: a GPU (CUDA, then Vulkan on a real GPU, Metal), then the CPU, then OpenGL,
    and a software Vulkan device (such as Mesa's lavapipe) only when nothing else works.

    Raises:
        NotSupportedError: no backend can create a runtime here.
    """
    status = capi.arch_status()
    usable = [a for a in ARCH_PREFERENCE if a in status and status[a].available]
    for arch in usable:
        if not status[arch].software:
            return arch
    if usable:
        return usable[0]
    raise NotSupportedError("no Taichi backend can create a runtime on this machine")


def _usable_arch(archs: Any, status: dict) -> Arch | None:
    """Of the module's ``archs`` that work here (``status``), the one asked for (TAICHI_AOT_ARCH), else the first
    on hardware, else the first; None where none works."""
    usable = [a for a in ARCH_PREFERENCE if a in archs and a in status and status[a].available]
    chosen = os.environ.get("TAICHI_AOT_ARCH", "").strip().upper()
    for arch in usable:
        if arch.name == chosen:
            return arch
    for arch in usable:
        if not status[arch].software:
            return arch
    return usable[0] if usable else None


def arch_for_module(source: ModuleSource) -> Arch:
    """The fastest backend that both this machine and the module ``source`` have (order as :func:`best_arch`;
    ``TAICHI_AOT_ARCH`` chooses among them).

    Raises:
        IncompatibleModuleError: none of the archs the module holds works here (the message says why each not).
        MissingFileError, CorruptedDataError: as :meth:`Runtime.load_module`.
    """
    loadable: Any = metadata.loadable(source)  # a path or bytes now
    if isinstance(loadable, (bytearray, memoryview)):
        loadable = bytes(loadable)
    archs = metadata.loads_on(loadable)
    status = capi.arch_status(archs=archs)  # the module's archs alone
    found = _usable_arch(archs, status)
    if found is not None:
        return found
    why = "; ".join(f"{a.name.lower()}: {status[a].reason if a in status else 'unknown here'}" for a in archs)
    raise IncompatibleModuleError(
        f"module {metadata.describe(source)} runs on {', '.join(a.name.lower() for a in archs) or 'no known arch'}, "
        f"and none of them "
        f"works on this machine ({why or 'nothing recorded'}); rebuild it for a backend this machine has "
        f"(python -m taichi_aot archs lists them) with python -m taichi_aot build FILE.py --arch ..."
    )


def resolve_arch(arch: Arch | int | str | None) -> Arch:
    """An Arch from an Arch, int or name; None picks ``TAICHI_AOT_ARCH`` or the best available."""
    if arch is None:
        env = os.environ.get("TAICHI_AOT_ARCH")
        if env:
            arch = env
        else:
            return best_arch()
    if isinstance(arch, str):
        try:
            return Arch[arch.strip().upper()]
        except KeyError:
            names = [a.name.lower() for a in Arch if a is not Arch.RESERVED]
            raise InvalidArgumentError(f"unknown arch {arch!r}{arch_name_hint(arch, names)}") from None
    return capi.enum_arg(Arch, arch, "Runtime: arch")
