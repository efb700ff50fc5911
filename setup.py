"""setuptools entry point: everything is in pyproject.toml but the cffi module."""

from setuptools import setup

setup(cffi_modules=["build_ffi.py:ffibuilder"])
