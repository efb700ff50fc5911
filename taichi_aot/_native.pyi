# The cffi extension built by build_ffi.py: `ffi` (types, allocation) and `lib` (the C functions,
# constants and globals). cffi describes them at run time only, so to a type checker they are Any. The C call's
# type, Launcher, is the extension taichi_aot._call's (_call.pyi).
from typing import Any

ffi: Any
lib: Any
