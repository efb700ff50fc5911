"""Build the cffi extensions: ``taichi_aot._native`` (API mode, out of line) and the bench's
``taichi_aot_bench._steps`` (its raw C loops: :func:`make_bench_ffibuilder`).

The extension is compiled against the vendored headers in ``include/taichi`` and
does not link libtaichi_c_api: each C-API function is a small compiled
trampoline calling through a pointer that ``taichi_aot_load()`` fills with
``dlopen``/``dlsym`` at import time. So building needs no Taichi install and no
environment variable, and the library can be chosen at run time
(``TAICHI_C_API_INSTALL_DIR`` or the ``taichi`` wheel).

One translation unit: the vendored headers, the trampolines generated from them
(``_cdef.trampolines``), then our own C files from ``taichi_aot/_csrc``
(``#include``d, so compiler messages name those files and lines). The cdef is the
headers' (``_cdef.build_cdef``) followed by ``_csrc/taichi_aot.h``'s and the Python
functions the C calls (``_cdef.PYTHON_CALLBACKS``).
"""

from __future__ import annotations

import importlib.util
import os

from cffi import FFI  # type: ignore[import-untyped]  # cffi ships no type information

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE_DIR = os.path.join(HERE, "include")
CSRC_DIR = os.path.join(HERE, "taichi_aot", "_csrc")
#: Our header, declared once for the cdef and the C files.
HEADER = "taichi_aot.h"
#: Our C files, compiled after the trampolines (loader.c fills their table).
#: The C call's files (CPython-facing: setup.py's ``CALL_FILES``) are not among them: they make the extension
#: ``taichi_aot._call``, which gets what it uses of this module from table.c's table, once.
#: Each launch backend's C lies in ``backends/`` (libtaichi's too), its kinds' entries listed in kinds.c, which
#: launch.c, the dispatcher, calls through.
C_FILES = ("loader.c", "waits.c", "holds.c", "backends/plan.c", "backends/libtaichi.c", "backends/cuda.c",
           "backends/x64.c", "backends/cpucalls.c",
           "backends/vkqueue.c", "backends/vkbatch.c", "backends/vulkan.c", "backends/vkcopy.c", "backends/vkorder.c",
           "opplan.c", "xla.c", "nvtx.c", "imports.c", "kinds.c", "launch.c", "arrays.c", "got.c", "threads.c",
           "vkfence.c", "cuda.c", "torch.c", "torchop.c", "spirv.c", "logsink.c", "table.c", "hostcopy.c", "profile.c",
           "backends/vkprofile.c", "backends/cudaprofile.c")
#: The private headers the C files share (never handed to cffi): a change to one must rebuild.
PRIVATE_HEADERS = ("interop.h", "xla_ffi.h", "loader.h", "holds.h", "arrays.h", "opplan.h", "torch.h", "kinds.h",
                   "profile.h", "waits.h", "backends/plan.h", "backends/cudaprofile.h", "backends/vk.h",
                   "backends/vkstate.h", "backends/vkqueue.h", "backends/vkprofile.h", "backends/vkbatch.h",
                   "backends/vkorder.h", "backends/libtaichi.h", "backends/cuda.h", "backends/x64.h",
                   "backends/cpucalls.h", "backends/vulkan.h")
SYSTEM_HEADERS = ("dlfcn.h", "math.h", "pthread.h", "stdbool.h", "stddef.h", "stdint.h", "stdio.h", "string.h",
                  "time.h")


def _load_cdef_module():
    # Load taichi_aot/_cdef.py by path: importing the package would need the
    # extension this script is about to build.
    spec = importlib.util.spec_from_file_location("_taichi_aot_cdef", os.path.join(HERE, "taichi_aot", "_cdef.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_cdef = _load_cdef_module()


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def make_ffibuilder() -> FFI:
    """The builder: cdef and source as the module docstring describes."""
    cdef = _cdef.build_cdef(INCLUDE_DIR)
    own_cdef = _cdef.extension_cdef(_read(os.path.join(CSRC_DIR, HEADER)))
    source = (
        "".join(f"#include <{name}>\n" for name in SYSTEM_HEADERS)
        + '#include "interop.h"\n'  # the Vulkan and OpenGL types the interop headers name
        + '#include "taichi/taichi.h"\n'
        + "".join(f'#include "taichi/{name}"\n' for name in _cdef.HEADERS)
        + '#include "loader.h"\n'  # the trampolines' table type
        + _cdef.trampolines(_cdef.functions(cdef))
        + "".join(f'#include "{name}"\n' for name in C_FILES)
    )
    builder = FFI()
    builder.cdef(cdef + own_cdef + _cdef.PYTHON_CALLBACKS)
    builder.set_source(
        "taichi_aot._native",
        source,
        include_dirs=[INCLUDE_DIR, CSRC_DIR],
        # the C files reach the compiler through #include: a change to one must rebuild
        depends=[os.path.join(CSRC_DIR, name) for name in (HEADER, *PRIVATE_HEADERS, *C_FILES)],
        libraries=["dl", "pthread"],
        # torchop.c's boxed kernel throws torch's error through its own frame (torch's unwinder needs its tables)
        extra_compile_args=["-fexceptions"],
    )
    return builder


#: The bench's C (its room, taichi_aot_bench, not the package's): its header, declared once for the cdef and C.
BENCH_CSRC_DIR = os.path.join(HERE, "taichi_aot_bench", "_csrc")
BENCH_HEADER = "steps.h"


def make_bench_ffibuilder() -> FFI:
    """The bench's builder: cdef from ``taichi_aot_bench/_csrc/steps.h``, source ``steps.c``, which reads
    launches laid out by ``taichi_aot.h`` and calls ``taichi_aot._native``'s functions through the addresses it is
    handed (no library to link, no trampoline of its own)."""
    builder = FFI()
    builder.cdef(_cdef.extension_cdef(_read(os.path.join(BENCH_CSRC_DIR, BENCH_HEADER))))
    builder.set_source(
        "taichi_aot_bench._steps",
        '#include "steps.c"\n',
        include_dirs=[INCLUDE_DIR, CSRC_DIR, BENCH_CSRC_DIR],
        depends=[os.path.join(BENCH_CSRC_DIR, name) for name in (BENCH_HEADER, "steps.c")]
        + [os.path.join(CSRC_DIR, HEADER)],
    )
    return builder


ffibuilder = make_ffibuilder()
bench_ffibuilder = make_bench_ffibuilder()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
    bench_ffibuilder.compile(verbose=True)
