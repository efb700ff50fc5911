"""setuptools entry point: everything is in pyproject.toml but the cffi module and the bundled library."""

import os
import runpy

from setuptools import setup
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


# The extension uses the stable ABI (cffi builds it with Py_LIMITED_API): one cp39-abi3 wheel serves
# CPython 3.9 and later.
setup(
    cffi_modules=["build_ffi.py:ffibuilder"],
    cmdclass={"build_py": BuildPyWithLibrary},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)
