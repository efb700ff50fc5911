"""setuptools entry point: everything is in pyproject.toml but the cffi module."""

from setuptools import setup

# The extension uses the stable ABI (cffi builds it with Py_LIMITED_API): one cp39-abi3 wheel serves
# CPython 3.9 and later.
setup(cffi_modules=["build_ffi.py:ffibuilder"], options={"bdist_wheel": {"py_limited_api": "cp39"}})
