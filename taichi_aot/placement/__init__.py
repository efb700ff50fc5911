"""Where a runtime's memory lives and how bytes move: one :class:`Device` a runtime, chosen once when it is made; and
the runtime's native part itself (:func:`open_native`: libtaichi's runtime, or taichi_aot's own CUDA runtime), which
the device's room makes.

The object layer (``memory.py``, ``ndarray.py``, ``_foreign.py``, ``runtime.py``) asks its runtime's device and
never decides by arch itself (``tests/test_layers.py`` keeps it so). A :class:`Device` is composed of small parts
(:mod:`.parts`), each a room's own class where the room differs:

* :attr:`Device.traits` (:class:`Traits`): what the device is, fixed when it is made: among it ``zeroed`` (new
  memory is zero-filled already) and ``kernel_copies_on_device`` (a host array a kernel takes is copied into device
  memory, else into host-visible memory the kernel reads in place);
* :attr:`Device.transfers` (:class:`Transfers`): how bytes move: ``read(memory, out)``, ``write(memory, array)``,
  ``fill(memory)`` (a writer for the same memory again and again) and ``read_later(memory, into)``, each pinning the
  memory and saying whether it waits for the queued kernels; ``copy`` between two blocks of the runtime; the
  staging buffers (``release`` after each wait, ``close`` with the runtime) and ``host_array``;
* :attr:`Device.library` (:class:`Library`): libtaichi's runtime as the device has it (what its calls run inside,
  one made beside the own CUDA runtime, why there is none);
* :attr:`Device.stream` (:class:`Stream`): the CUDA stream the kernels run on (``select``, ``synchronize``,
  ``capturing``: what ``Runtime.set_cuda_stream`` asks);
* and the device's own few: :meth:`Device.default_access` (what ``host_access=None`` means), :meth:`Device.allocate`
  (a :class:`Block` of ``size`` bytes: who allocates, who frees), :meth:`Device.host_visible` (whether the host
  addresses a block as it is: ``__array__``, DLPack), :meth:`Device.close` before the native runtime goes.

The rooms, each registered here (:func:`register`: its name, module, the arches it serves, its priority) and asked
in priority order, as the launch backends are: ``host.py`` (the CPU backends), ``cuda.py`` (CUDA: libtaichi's
runtime and the own one), ``vulkan.py`` (the policy of Vulkan devices: device memory on a discrete GPU, host-visible
memory where the host and the GPU share it), ``base.py`` (libtaichi's runtime and memory as the C-API makes them,
for every other arch: the fallback). A room's module gives ``open_native(arch, device_index, cpu_threads,
cuda_runtime)``, its native runtime or None (not its own: the next room is asked), and ``device(runtime, native)``,
the runtime's :class:`Device`; it is imported at the first runtime of one of its arches. ``parts.py`` holds the
parts as libtaichi's runtime has them, ``staging.py`` the host-visible buffers kept mapped and reused; this file,
the registry and the choice.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, NamedTuple

from .. import _library
from ..enums import CPU_ARCHS, Arch
from ..errors import InvalidArgumentError
from .base import Block, Device, Native, Traits
from .parts import Filler, Library, Mover, Stream, Transfers

if TYPE_CHECKING:  # pragma: no cover
    from .._lifetime import Parent

__all__ = ["Block", "Device", "Filler", "Library", "Mover", "Native", "Registration", "Stream", "Traits", "Transfers",
           "device_for", "open_native", "register", "registered"]


class Registration(NamedTuple):
    """A device room as registered: its name (what ``Native.room`` holds), module (relative to this package), the
    arches it serves (None: every arch) and its priority (rooms are asked highest first)."""

    name: str
    module: str
    arches: frozenset[Arch] | None
    priority: int

    def serves(self, arch: Arch) -> bool:
        return self.arches is None or arch in self.arches


_registered: list[Registration] = []


def register(name: str, module: str, arches: frozenset[Arch] | None = None, priority: int = 0) -> None:
    """Register a device room: asked, in priority order, for the native runtime and the device of a runtime of one of
    ``arches`` (module docstring). A name registered already is refused (InvalidArgumentError naming the room that
    has it), as the launch backends' is: one room a name."""
    for r in _registered:
        if r.name == name:
            raise InvalidArgumentError(f"device room {name!r} is registered already (by module {r.module!r})")
    _registered.append(Registration(name, module, arches, priority))
    _registered.sort(key=lambda r: -r.priority)  # stable: equal priorities keep their order


def registered() -> list[Registration]:
    """The device rooms, in the order they are asked."""
    return list(_registered)


def _rooms(arch: Arch) -> Iterator[tuple[Registration, ModuleType]]:
    """The rooms serving ``arch`` and their modules, in order. A room's file is imported at the first runtime of its
    arch, under the library's busy lock: a fork waits for it (a child forked while another thread imports a module
    inherits that module's import lock held, and hangs importing it)."""
    for registration in _registered:
        if registration.serves(arch):
            with _library.busy:
                room = importlib.import_module(registration.module, __name__)
            yield registration, room


def open_native(arch: Arch, device_index: int | None, cpu_threads: int | None, cuda_runtime: str | None) -> Native:
    """The native runtime of ``arch`` on ``device_index`` (None: the backend's default), made by the first room that
    makes it (the own CUDA runtime where ``cuda_runtime`` chooses it; libtaichi's Vulkan runtime on the device asked
    for; libtaichi's runtime for the rest: ``base.library_native``)."""
    for registration, room in _rooms(arch):
        native = room.open_native(arch, device_index, cpu_threads, cuda_runtime)
        if native is not None:
            return native._replace(room=registration.name)
    raise AssertionError(f"no device room makes a runtime of {arch.name}")  # base's serves every arch


def device_for(runtime: Parent, native: Native) -> Device:
    """The device of a runtime being made (its arch and handle set) on ``native``: the room's that made it."""
    for registration, room in _rooms(runtime.arch):
        if registration.name == native.room:
            return room.device(runtime, native)
    raise AssertionError(f"no device room named {native.room!r}")


register("cuda", ".cuda", frozenset({Arch.CUDA}), priority=100)
register("vulkan", ".vulkan", frozenset({Arch.VULKAN}), priority=100)
register("host", ".host", CPU_ARCHS, priority=100)
register("library", ".base")
