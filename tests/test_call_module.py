"""The C call's own extension, ``taichi_aot._call``: its stub agrees with it (mypy's stubtest), its type is made by
its init, it is pinned to the limited API of 3.9, and it takes taichi_aot._native's functions only as the table
handed to it once."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import check_tool, require_extra

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_stub_matches_the_module():
    require_extra("mypy.stubtest", "check")
    check_tool("mypy")
    proc = subprocess.run([sys.executable, "-m", "mypy.stubtest", "--mypy-config-file", "pyproject.toml",
                           "taichi_aot._call"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_launcher_lives_in_its_own_module():
    from taichi_aot import _call, _native
    from taichi_aot._arrays import Launcher
    from taichi_aot.launch import BoundLaunch, Kernel

    assert Launcher is _call.Launcher and Launcher.__module__ == "taichi_aot._call"
    assert issubclass(Kernel, Launcher) and issubclass(BoundLaunch, Launcher)
    assert not hasattr(_native, "Launcher")  # no type is made in the cffi module any more
    assert _call.LIMITED_API == 0x03090000  # the wheel's cp39-abi3 tag
    assert _call.__file__.endswith(".abi3.so")


# The module loaded alone (under its init's name, not through the package, which binds it at import): unbound, a
# Launcher cannot be prepared, and _bind takes only a table of this build.
ALONE = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("_call", sys.argv[1])
call = importlib.util.module_from_spec(spec)
spec.loader.exec_module(call)
try:
    call.Launcher()._prepare(launch=0, graph=0, ndarray_type=object, numpy_type=object, slots=[], hits=None)
except RuntimeError as e:
    print("prepare:", e)
try:
    call._bind(0)
except ValueError as e:
    print("bind 0:", e)
import ctypes
bad = ctypes.create_string_buffer(128)
try:
    call._bind(ctypes.addressof(bad))
except ImportError as e:
    print("bind bad:", e)
print("read_print:", call.Launcher.read_print(3, ((None, "real", 0),)))
"""


def test_unbound_module_refuses_to_prepare():
    from taichi_aot import _call

    proc = subprocess.run([sys.executable, "-c", ALONE, _call.__file__], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "prepare: _prepare: taichi_aot._call is not bound (_bind) yet" in proc.stdout
    assert "bind 0: _bind: the address of taichi_aot._native's call table" in proc.stdout
    assert "bind bad: _bind: taichi_aot._native's call table is not of this build" in proc.stdout
    assert "read_print: (3,)" in proc.stdout


def test_bound_once_to_the_native_table():
    from taichi_aot import _call
    from taichi_aot._native import ffi, lib

    _call._bind(int(ffi.cast("uintptr_t", lib.taichi_aot_call_table())))  # the same table again: nothing changes
    table = lib.taichi_aot_call_table()
    assert table.size == ffi.sizeof("TaichiAotCallTable")
    assert table.epoch == ffi.addressof(lib, "taichi_aot_epoch")
