"""setuptools entry point: everything is in pyproject.toml but the extensions and the bundled library."""

import os
import runpy

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildPyWithLibrary(build_py):
    """build_py, then libtaichi_c_api copied into the package (taichi_aot/_bundle.py says from where)."""

    def run(self):
        super().run()
        # by path: importing the package would need the extension this build is about to compile
        bundle = runpy.run_path(os.path.join(HERE, "taichi_aot", "_bundle.py"))
        if not bundle["enabled"]():
            return
        # an editable install imports the package from the source tree: the library goes there
        root = HERE if self.editable_mode else self.build_lib
        try:
            bundle["stage"](os.path.join(root, "taichi_aot"), os.path.join(HERE, "LICENSE"))
        except bundle["BundleError"] as e:
            raise SystemExit(f"error: {e}") from None


#: The C call's extension, taichi_aot._call: call_module.c #includes the other files (their order matters).
CALL_FILES = ("call_module.c", "pyhelp.c", "records.c", "arrays.c", "reads.c", "fresh.c", "twins.c",
              "remember.c", "call.c", "eager.c")
#: The private headers of what crosses those files: a change to one must rebuild.
CALL_HEADERS = ("call_common.h", "records.h", "arrays.h", "reads.h", "fresh.h", "launcher.h")
CSRC = os.path.join("taichi_aot", "_csrc")

# The extensions use the stable ABI: cffi builds taichi_aot._native (and the bench's taichi_aot_bench._steps) with
# Py_LIMITED_API, and taichi_aot._call is pinned to the limited API of 3.9 (what it uses is there; PyType_GetSlot of
# a static type works from 3.10 only, and reads.c expects that). One cp39-abi3 wheel serves CPython 3.9 and later
# (not the free-threaded builds: abi3 has no free-threaded form).
call_extension = Extension(
    "taichi_aot._call",
    sources=[os.path.join(CSRC, "call_module.c")],
    depends=[os.path.join(CSRC, name) for name in (*CALL_FILES[1:], *CALL_HEADERS, "taichi_aot.h")],
    include_dirs=["include", CSRC],
    define_macros=[("Py_LIMITED_API", "0x03090000")],
    py_limited_api=True,
    extra_compile_args=["-fvisibility=hidden"],  # only PyInit__call (PyMODINIT_FUNC) is exported
)

setup(
    ext_modules=[call_extension],
    cffi_modules=["build_ffi.py:ffibuilder", "build_ffi.py:bench_ffibuilder"],
    cmdclass={"build_py": BuildPyWithLibrary},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)
