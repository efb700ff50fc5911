# The bench's cffi extension built by build_ffi.py (bench_ffibuilder): `ffi` and `lib` (_csrc/steps.h's loops and
# the binding of taichi_aot._native's functions). cffi describes them at run time only: to a type checker, Any.
from typing import Any

ffi: Any
lib: Any
