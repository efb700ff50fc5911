# The extension built from _csrc/call_module.c (setup.py): the C call of kernels and graphs. Checked against the
# built module by mypy's stubtest (tests/test_call_module.py).
from typing import Any

from typing_extensions import disjoint_base

#: The limited API level the module is compiled against (Py_LIMITED_API: 0x03090000, CPython 3.9).
LIMITED_API: int

def _bind(address: int, /) -> None:
    """taichi_aot._native's call table, at its address (lib.taichi_aot_call_table()), once."""

@disjoint_base  # a C type with a layout of its own (PEP 800): no class derives from it and from another such
class Launcher:
    """The C call of kernels and graphs (_csrc/call.c): the base of Kernel, ComputeGraph and BoundLaunch."""

    def __call__(self, *args: Any, **kwargs: Any) -> None: ...
    @property
    def call_counts(self) -> tuple[int, int]: ...
    def _prepare(self, launch_address: int, graph: int, ndarray_type: type, numpy_type: type,
                 slots: list[tuple[int, int, int, Any, str | None]], hits: dict[int, Any] | None, /) -> None: ...
    def _forget(self) -> None: ...
    def _fresh(self, imports: dict[int, tuple[int, int]], host_numpy: int, torch_device: int, torch_index: int,
               held: dict[int, Any] | None, held_limit: int, cai_classes: dict[type, bool | int] | None,
               pointer_device: int, spill: Any, slots: list[Any], /) -> None: ...
    def _guard(self, guards: tuple[tuple[Any, int, int], ...], /) -> None: ...
    def _guards_hold(self) -> bool: ...
    @staticmethod
    def read_print(value: Any, reads: tuple[tuple[str | None, str, int], ...], /) -> tuple[Any, ...]: ...
    @staticmethod
    def _trust_layout(cls: type, offset: int, /) -> bool: ...
