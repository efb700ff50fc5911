# The cffi extension built by build_ffi.py: `ffi` (types, allocation) and `lib` (the C functions,
# constants and globals). cffi describes them at run time only, so to a type checker they are Any.
from typing import Any

ffi: Any
lib: Any
