"""The binding layer itself: cdef derivation, library discovery, and the sharp edges it hides."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from taichi_aot import _cdef, _library, capi
from taichi_aot._native import lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE = os.path.join(ROOT, "include")
SNAPSHOT = os.path.join(ROOT, "tests", "data", "cdef.txt")


def test_cdef_matches_snapshot():
    # A header update changes this text: review tests/data/cdef.txt in the diff.
    with open(SNAPSHOT, encoding="utf-8") as f:
        assert _cdef.build_cdef(INCLUDE) == f.read()


def test_cdef_cleaner_on_its_own():
    text = textwrap.dedent(
        """
        #pragma once
        #define TI_SOMETHING 42  // kept
        /* block
           comment */
        #ifdef __cplusplus
        extern "C" {
        #endif
        // Function `ti_thing`
        TI_DLL_EXPORT TiRuntime TI_API_CALL
        ti_thing(TiArch arch,
                 uint32_t n);
        #ifdef __cplusplus
        }
        #endif
        """
    )
    cleaned = _cdef.clean_header(text)
    assert cleaned == "#define TI_SOMETHING 42\nTiRuntime ti_thing(TiArch arch, uint32_t n);\n"
    (fn,) = _cdef.functions(cleaned)
    assert fn == _cdef.Function("TiRuntime", "ti_thing", "TiArch arch, uint32_t n", ("arch", "n"))


def test_every_header_function_is_bound_and_wrapped():
    functions = _cdef.functions(_cdef.build_cdef(INCLUDE))
    names = {f.name for f in functions}
    assert len(functions) == 48
    for name in names:
        assert hasattr(lib, name), name
    # one Python function per C function (ti_track_image_ext is track_image)
    for name in names:
        py = name[3:].replace("track_image_ext", "track_image")
        assert callable(getattr(capi, py)), py
    assert _cdef.header_version(INCLUDE) == lib.TI_C_API_VERSION == 1007000


def test_own_header_declared_once_for_cdef_and_c():
    # _csrc/taichi_aot.h is read by the cdef (preprocessor lines stripped) and #included by the C files
    with open(os.path.join(ROOT, "taichi_aot", "_csrc", "taichi_aot.h"), encoding="utf-8") as f:
        cdef = _cdef.extension_cdef(f.read())
    assert "#include" not in cdef and "TAICHI_AOT_H" not in cdef
    assert "#define TAICHI_AOT_STALE ...\n" in cdef and "extern int64_t taichi_aot_epoch;\n" in cdef
    assert lib.TAICHI_AOT_STALE == -100 and isinstance(lib.taichi_aot_epoch, int)
    for name in ("load", "unload", "is_loaded", "has_symbol", "launch", "replay"):
        assert f" taichi_aot_{name}(" in cdef and callable(getattr(lib, f"taichi_aot_{name}")), name


def test_library_located_without_importing_taichi():
    code = "import sys, taichi_aot.capi as c; print(c.get_version()); print('taichi' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1007000", "False"]
    assert out.stderr == ""


def test_ti_lib_dir_set_for_llvm_backends():
    assert os.environ["TI_LIB_DIR"]
    assert os.path.isfile(os.path.join(os.environ["TI_LIB_DIR"], "runtime_x64.bc"))


def run_python(code, **env):
    full = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=full)


def run_python_args(code, *args):
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("setting", ["/nonexistent/taichi_c_api", "EMPTY"])
def test_missing_library_raises_import_error_naming_the_place(setting, tmp_path):
    where = str(tmp_path) if setting == "EMPTY" else setting
    out = run_python("import taichi_aot", TAICHI_C_API_INSTALL_DIR=where)
    assert out.returncode == 1
    assert "ImportError: taichi_aot could not load a compatible libtaichi_c_api" in out.stderr
    assert where in out.stderr
    assert "Segmentation" not in out.stderr


def test_not_a_taichi_library_is_refused(tmp_path):
    (tmp_path / "lib").mkdir()
    # a real shared library that is not libtaichi_c_api
    libz = next(
        p for p in ("/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1") if os.path.exists(p)
    )
    os.symlink(libz, tmp_path / "lib" / "libtaichi_c_api.so")
    out = run_python("import taichi_aot", TAICHI_C_API_INSTALL_DIR=str(tmp_path))
    assert out.returncode == 1 and "not a Taichi C-API library" in out.stderr


def test_version_compatibility_rule():
    assert _library.is_compatible(1007000) and _library.is_compatible(1007004)
    assert not _library.is_compatible(1006000) and not _library.is_compatible(2007000)
    assert _library.format_version(1007004) == "1.7.4"


def test_library_chatter_is_hidden_and_can_be_shown():
    # the library logs a warning for every error it records, and more on runtime creation
    code = (
        "from taichi_aot import capi, Arch, errors\n"
        "rt = capi.create_runtime(Arch.X64)\n"
        "capi.set_last_error(-4, 'shout')\n"
        "errors.clear_last_error()\n"
        "capi.destroy_runtime(rt)\n"
    )
    quiet = run_python(code)
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == ""
    loud = run_python(code, TI_LOG_LEVEL="warn")
    assert loud.returncode == 0 and "C-API error: (invalid argument) shout" in loud.stderr


# -- sharp edges of libtaichi_c_api 1.7.4: raw behaviour next to ours ----------------

RAW = """
import os, sys
from taichi_aot import capi  # loads the library and sets TI_LIB_DIR
from taichi_aot._native import ffi, lib
rt = lib.ti_create_runtime(4, 0)  # x64
case = sys.argv[1]
if case == "tcm_path":
    lib.ti_load_aot_module(rt, sys.argv[2].encode())
elif case == "missing_dir":
    lib.ti_load_aot_module(rt, b"/nonexistent/module")
elif case == "use_after_destroy":
    lib.ti_destroy_runtime(rt)
    info = ffi.new("TiMemoryAllocateInfo *", {"size": 64, "usage": 1})
    for _ in range(100):
        lib.ti_allocate_memory(rt, info)
        lib.ti_destroy_runtime(rt)
print("survived")
"""


def raw(case, *args):
    return subprocess.run([sys.executable, "-c", RAW, case, *args], capture_output=True, text=True, timeout=120)


def test_raw_library_crashes_on_tcm_path_on_x64_and_we_do_not(modules):
    from taichi_aot import Arch, errors

    tcm = modules.path(Arch.X64, tcm=True)
    assert raw("tcm_path", tcm).returncode != 0  # the raw library dies
    rt = capi.create_runtime(Arch.X64)
    try:
        with pytest.raises(errors.NotSupportedError):
            capi.load_aot_module(rt, tcm)
        with pytest.raises(errors.MissingFileError):
            capi.load_aot_module(rt, "/nonexistent/module")
    finally:
        capi.destroy_runtime(rt)


def test_raw_library_crashes_on_missing_module_dir_on_x64():
    assert raw("missing_dir").returncode != 0


def test_raw_library_crashes_on_use_after_destroy_and_we_do_not():
    from taichi_aot import Arch, errors

    out = raw("use_after_destroy")
    assert out.returncode != 0 and "survived" not in out.stdout
    rt = capi.create_runtime(Arch.X64)
    capi.destroy_runtime(rt)
    with pytest.raises(errors.ClosedError):
        capi.allocate_memory(rt, size=64)
    with pytest.raises(errors.ClosedError):
        capi.destroy_runtime(rt)


APP_OUTPUT = """
import logging, sys, threading
import numpy as np
from taichi_aot import Arch, Runtime, capi
logging.basicConfig(stream=sys.stderr, format="%(message)s", level=logging.INFO)
N = 4000
stop = threading.Event()

def printer():
    for i in range(N):
        print(f"line {i}", flush=(i % 50 == 0))

def logger():
    for i in range(N):
        logging.info("log %d", i)

threads = [threading.Thread(target=printer), threading.Thread(target=logger)]
for t in threads:
    t.start()
for _ in range(3):  # the library at work meanwhile: its chatty calls and its errors
    with Runtime(Arch(int(sys.argv[1]))) as rt:
        x = rt.ndarray((64,), np.float32, host_access="readwrite")
        with x.map() as view:
            view[:] = 1
        mod = rt.load_module(sys.argv[2])
        mod.kernels["add"](x, x, 1.0)
        rt.wait()
        try:
            rt.load_module("/nonexistent")
        except Exception:
            pass
        capi.set_last_error(-4, "an error the library logs")
        capi.clear_last_error()
for t in threads:
    t.join()
"""


def test_application_output_is_never_lost(arch, modules):
    # the library's log is hidden without redirecting the process's stdout/stderr: a printing thread
    # and a logging thread, running through runtime creation, allocation, mapping, loading and launches,
    # lose no line, and none of the library's lines appear
    proc = run_python_args(APP_OUTPUT, str(int(arch)), modules.path(arch))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == [f"line {i}" for i in range(4000)]
    assert proc.stderr.splitlines() == [f"log {i}" for i in range(4000)]
