# The cffi extension built by build_ffi.py: `ffi` (types, allocation) and `lib` (the C functions,
# constants and globals). cffi describes them at run time only, so to a type checker they are Any.
from typing import Any

ffi: Any
lib: Any

class Launcher:
    """The C call of kernels and graphs (_csrc/call.c): the base of Kernel, ComputeGraph and BoundLaunch."""

    def __call__(self, *args: Any, **kwargs: Any) -> None: ...
    def _prepare(self, launch_address: int, graph: int, ndarray_type: type, numpy_type: type,
                 slots: list[tuple[int, int, int, Any, str | None]]) -> None: ...
    def _forget(self) -> None: ...
    @staticmethod
    def read_print(value: Any, reads: tuple[tuple[str | None, str, int], ...]) -> tuple[Any, ...]: ...
    @staticmethod
    def _trust_layout(cls: type, offset: int) -> bool: ...
