"""NVTX ranges around launches (``TAICHI_AOT_NVTX=1``, ``taichi_aot.config.set_nvtx``), observed for real: NVIDIA's
own NVTX library (the ``nvidia-nvtx-cu12`` wheel of the test extra) hands every range to a tool loaded by its
documented injection mechanism (``NVTX_INJECTION64_PATH``: the library loads it and calls its
``InitializeInjectionNvtx2``, which takes over the library's range functions), as it hands them to Nsight Systems.
The tool here is a small library of the test's own, compiled with the system's C compiler, that writes every range
pushed (its name) and popped into a file; the test's child process writes a mark into the same file before each way
of launching, so the file reads as the launches were made.

Off, no NVTX library is opened at all; asked for where none can be found, one warning says where it was looked for,
and launches go on. The CUDA variant (the own CUDA launcher, libtaichi's, a torch op on CUDA) runs where a GPU is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import HERE, IN_CI, require_arch, require_extra
from taichi_aot import Arch, capi

#: The tool: NVTX's injection entry point, taking over nvtxRangePushA (slot 9 of the core module's table) and
#: nvtxRangePop (slot 11), as NVTX's documentation of its export table (NvtxExportTableCallbacks, NVTX_ETID_CALLBACKS
#: = 1, NVTX_CB_MODULE_CORE = 1) lays them out.
INJECTION = r"""
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*any_function)(void);
typedef struct {
    size_t struct_size;
    int (*module_table)(int module, any_function ***table, unsigned int *size);
} export_callbacks;

static FILE *out;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void record(const char *what, const char *name) {
    pthread_mutex_lock(&lock);
    fprintf(out, "%s %s\n", what, name);
    fflush(out);
    pthread_mutex_unlock(&lock);
}

static int push(const char *name) { record("push", name); return 0; }
static int pop(void) { record("pop", "-"); return 0; }

int InitializeInjectionNvtx2(const void *(*export_table)(uint32_t id)) {
    const export_callbacks *callbacks = (const export_callbacks *)export_table(1);
    const char *path = getenv("TAICHI_AOT_TEST_RANGES");
    any_function **table = NULL;
    unsigned int size = 0;
    if (callbacks == NULL || path == NULL || !callbacks->module_table(1, &table, &size) || size < 11) {
        return 0;
    }
    out = fopen(path, "a");
    if (out == NULL) {
        return 0;
    }
    *table[9] = (any_function)push;
    *table[11] = (any_function)pop;
    return 1;
}
"""

#: What the child process starts with: marks written into the tool's file, and the file read back as
#: [(mark, [range names pushed, in order])], each range checked popped.
PRELUDE = """
import os
import sys

import numpy as np

sys.path.insert(0, {tests!r})
from taichi_aot import Arch, Runtime, capi, config

RANGES = os.environ.get("TAICHI_AOT_TEST_RANGES", "")


def mark(text):
    with open(RANGES, "a") as f:
        f.write(f"mark {{text}}\\n")
"""


def _library() -> str:
    """The NVTX library of the test extra (the nvidia-nvtx-cu12 wheel); skip (fail under CI) without it."""
    require_extra("nvidia", "test")
    from taichi_aot import _nvtx

    found = [path for where, path in _nvtx.candidates() if where == "the nvidia-nvtx wheel"]
    if not found:
        message = "no NVTX library of the nvidia-nvtx-cu12 wheel (the test extra: pip install -e '.[test]')"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return found[0]


@pytest.fixture(scope="module")
def tool(tmp_path_factory) -> str:
    """The tool, compiled: its path."""
    _library()
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        message = "no C compiler (cc) to build the NVTX tool"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    root = tmp_path_factory.mktemp("nvtx")
    source, out = root / "ranges.c", root / "libranges.so"
    source.write_text(INJECTION)
    proc = subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(out), str(source)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return str(out)


def _child(script: str, args: list[str], tmp_path, tool: str | None, nvtx: str | None
           ) -> tuple[subprocess.CompletedProcess, list[tuple[str, list[str]]]]:
    """Run ``script`` (after PRELUDE and LAUNCHES) in a child with ``TAICHI_AOT_NVTX=nvtx`` (None: unset) and the
    tool attached (None: none); its output, and what the tool recorded under each mark (every range popped)."""
    ranges = tmp_path / "ranges.txt"
    ranges.write_text("")
    env = {k: v for k, v in os.environ.items() if k not in ("TAICHI_AOT_NVTX", "NVTX_INJECTION64_PATH")}
    env["TAICHI_AOT_TEST_RANGES"] = str(ranges)
    if tool is not None:
        env["NVTX_INJECTION64_PATH"] = tool
    if nvtx is not None:
        env["TAICHI_AOT_NVTX"] = nvtx
    code = PRELUDE.format(tests=HERE) + LAUNCHES + textwrap.dedent(script)
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, _read(ranges.read_text())


def _read(text: str) -> list[tuple[str, list[str]]]:
    """The tool's file as [(mark, names pushed after it)]; every range pushed is popped before the next mark."""
    out: list[tuple[str, list[str]]] = [("", [])]
    depth = 0
    for line in text.splitlines():
        what, _, name = line.partition(" ")
        if what == "mark":
            assert depth == 0, f"a range still open at mark {name!r}: {text}"
            out.append((name, []))
        elif what == "push":
            depth += 1
            out[-1][1].append(name)
        else:
            assert what == "pop" and depth > 0, text
            depth -= 1
    assert depth == 0, text
    return out


#: Every way the dispatcher is reached from the runtime's thread, on the runtime ``rt`` of the child (its module's
#: kernel ``add`` and graph ``add_twice``), each after its mark; the values checked at the end.
LAUNCHES = """
def launches(rt, mod, arch, flat_api=True):
    add, twice = mod.kernels["add"], mod.graphs["add_twice"]
    x, y = rt.ndarray((4,), np.float32), rt.ndarray((4,), np.float32)
    y.from_numpy(np.ones(4, np.float32))
    mark("call")
    add(x, y, 1.0)
    rt.wait()
    bound = add.bind(x, y, 1.0)
    mark("bound")
    bound()
    rt.wait()
    with rt.record() as seq:
        add(x, y, 1.0)
    mark("replay")
    seq.replay(2)
    rt.wait()
    mark("graph")
    twice(x=x, y=y, a=1.0)
    rt.wait()
    assert x.to_numpy().tolist() == [6.0] * 4, x.to_numpy()
    if flat_api:
        mark("flat")
        flat(arch)
        mark("end")


def flat(arch):
    from capi_args import nd

    runtime = capi.create_runtime(arch)
    try:
        module = capi.load_aot_module(runtime, sys.argv[1])
        add = capi.get_aot_module_kernel(module, "add")
        mx, my = (capi.allocate_memory(runtime, size=16, usage=1) for _ in range(2))
        capi.launch_kernel(runtime, add, [nd(mx, (4,)), nd(my, (4,)), 1.0])
        capi.wait(runtime)
        capi.destroy_aot_module(module)  # the memory goes with the runtime
    finally:
        capi.destroy_runtime(runtime)
"""

#: What the tool records of LAUNCHES: a range for every launch, named for the kernel or graph.
EXPECTED = [("call", ["taichi_aot:add"]), ("bound", ["taichi_aot:add"]),
            ("replay", ["taichi_aot:add", "taichi_aot:add"]), ("graph", ["taichi_aot:add_twice"]),
            ("flat", ["taichi_aot:add"]), ("end", [])]


def test_every_launch_is_named_in_an_nvtx_range(modules, tool, tmp_path):
    """With TAICHI_AOT_NVTX=1, the C call, a bound launch, a replay, a graph and the flat API's launch each push
    one range named for the kernel or graph, and pop it; config reports the library; set_nvtx(False) stops the
    ranges at once, set_nvtx(True) brings them back."""
    require_arch(Arch.X64)
    script = """
    with Runtime(Arch.X64) as rt:
        mod = rt.load_module(sys.argv[1])
        launches(rt, mod, Arch.X64)
        status = config.nvtx()
        assert status["on"] and status["library"] and status["asked"], status
        add, x = mod.kernels["add"], rt.ndarray((4,), np.float32)
        config.set_nvtx(False)
        mark("off")
        add(x, x, 1.0)
        assert not config.nvtx()["on"]
        assert config.set_nvtx(True)
        mark("on")
        add(x, x, 1.0)
        rt.wait()
    print(status["library"])
    """
    proc, ranges = _child(script, [modules.path(Arch.X64)], tmp_path, tool, "1")
    assert ranges == [("", []), *EXPECTED, ("off", []), ("on", ["taichi_aot:add"])], proc.stderr
    assert os.path.basename(proc.stdout.strip()) in ("libnvToolsExt.so.1", "libnvtx3interop.so.1"), proc.stdout


def test_set_nvtx_turns_ranges_on_without_the_variable(modules, tool, tmp_path):
    """Without TAICHI_AOT_NVTX, launches push nothing until ``taichi_aot.config.set_nvtx(True)``; show_config says
    which library."""
    require_arch(Arch.X64)
    script = """
    import io

    with Runtime(Arch.X64) as rt:
        mod = rt.load_module(sys.argv[1])
        add, x = mod.kernels["add"], rt.ndarray((4,), np.float32)
        mark("before")
        add(x, x, 1.0)
        assert config.set_nvtx(True)
        mark("after")
        add(x, x, 1.0)
        rt.wait()
    shown = io.StringIO()
    config.show_config(shown)
    print([line for line in shown.getvalue().splitlines() if line.startswith("NVTX")][0])
    """
    proc, ranges = _child(script, [modules.path(Arch.X64)], tmp_path, tool, None)
    assert ranges == [("", []), ("before", []), ("after", ["taichi_aot:add"])]
    assert proc.stdout.startswith("NVTX ranges: on, every launch named taichi_aot:<kernel>"), proc.stdout


def test_off_no_nvtx_library_is_opened(modules, tool, tmp_path):
    """Without TAICHI_AOT_NVTX (and with it 0), launches push no range and no NVTX library is mapped into the process,
    though the tool is attached."""
    require_arch(Arch.X64)
    script = """
    with Runtime(Arch.X64) as rt:
        launches(rt, rt.load_module(sys.argv[1]), Arch.X64)
    with open("/proc/self/maps") as f:
        mapped = [line for line in f if "nvToolsExt" in line or "nvtx3interop" in line]
    assert not mapped, mapped
    status = config.nvtx()
    assert not status["on"] and status["library"] is None, status
    """
    for value in (None, "0"):
        _, ranges = _child(script, [modules.path(Arch.X64)], tmp_path, tool, value)
        assert ranges == [("", []), *((mark, []) for mark, _ in EXPECTED)]


def test_no_library_found_warns_once_and_launches_go_on(modules, tmp_path):
    """Asked for where no NVTX library opens: one RuntimeWarning naming every place looked in (the variable's first
    use and a later set_nvtx(True) alike), the ranges off, and the launches made."""
    require_arch(Arch.X64)
    script = """
    import warnings

    from taichi_aot import _nvtx

    _nvtx.candidates = lambda: [("the system's search path", "libnvToolsExt-none.so.1"),
                                ("the CUDA toolkit", "/nonexistent/lib64/libnvToolsExt.so.1")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Runtime(Arch.X64) as rt:
            mod = rt.load_module(sys.argv[1])
            add, x = mod.kernels["add"], rt.ndarray((4,), np.float32)
            add(x, x, 1.0)
            assert not config.set_nvtx(True)
            add(x, x, 1.0)
            rt.wait()
            assert x.to_numpy().tolist() == [0.0] * 4
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1, said
    assert "libnvToolsExt-none.so.1" in said[0] and "/nonexistent/lib64/libnvToolsExt.so.1" in said[0], said
    assert "TAICHI_AOT_NVTX=1" in said[0], said
    status = config.nvtx()
    assert not status["on"] and status["library"] is None and len(status["looked"]) >= 2, status
    """
    _child(script, [modules.path(Arch.X64)], tmp_path, None, "1")


#: A kernel's op on x64, called on y (8 f32) and 2.0: (the extra, its imports, making the op, the input, the values).
OPS = {
    "torch": ("interop", "import torch\nimport taichi_aot.torch as framework", "framework.op",
              "torch.arange(8, dtype=torch.float32)", "out.tolist()"),
    "jax": ("jax", "import jax\nimport jax.numpy as jnp\nimport taichi_aot.jax as framework", "framework.op",
            "jax.device_put(jnp.arange(8, dtype=jnp.float32), jax.devices('cpu')[0])",  # an x64 op: on the CPU
            "np.asarray(out).tolist()"),
}


@pytest.mark.parametrize("framework", [
    "torch",
    "jax",
])
def test_an_op_is_named_in_its_kernels_range(modules, tool, tmp_path, framework):
    """A kernel's torch op called eagerly on x64 (the C call), and its JAX op (XLA's handler, launched elsewhere),
    launch inside the kernel's range."""
    require_arch(Arch.X64)
    extra, imports, make, given, values = OPS[framework]
    require_extra(framework, extra)
    script = imports + textwrap.dedent(f"""

    with Runtime(Arch.X64) as rt:
        add = {make}(rt.load_module(sys.argv[1]).kernels["add"], {{0: 1}})
        y = {given}
        mark("op")
        out = add(y, 2.0)
        mark("end")
        assert {values} == [2.0 * i for i in range(8)], out
    """)
    _, ranges = _child(script, [modules.path(Arch.X64)], tmp_path, tool, "1")
    assert ranges == [("", []), ("op", ["taichi_aot:add"]), ("end", [])]


def test_cuda_launches_are_named_in_nvtx_ranges(tool, tmp_path, tmp_path_factory):
    """On CUDA (where a GPU is): the same launches on the own CUDA launcher (the module's PTX) and on libtaichi, and a
    torch op on CUDA tensors, each inside its kernel's or graph's range."""
    status = capi.arch_status()[Arch.CUDA]
    if not status.available:
        pytest.skip(f"no CUDA here: {status.reason}")
    from conftest import KERNELS, taichi_env
    from taichi_aot.ptx import add_ptx

    path = str(tmp_path_factory.mktemp("nvtx_cuda") / "cuda")
    proc = subprocess.run([sys.executable, KERNELS, "--arch", "cuda", "--out", path], capture_output=True, text=True,
                          timeout=600, env=taichi_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    add_ptx(path)
    script = """
    for launcher in ("auto", "taichi"):
        with Runtime(Arch.CUDA) as rt:
            mark(launcher)
            mod = rt.load_module(sys.argv[1], launcher=launcher)
            print(launcher, mod.kernels["add"].launcher, mod.graphs["add_twice"].launcher)
            launches(rt, mod, Arch.CUDA, flat_api=False)  # libtaichi allows one CUDA runtime: the flat API's after
        mark("flat")
        flat(Arch.CUDA)
        mark("end")
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        import taichi_aot.torch as tt

        with Runtime(Arch.CUDA) as rt:
            add = tt.op(rt.load_module(sys.argv[1]).kernels["add"], {0: 1})
            y = torch.arange(8, dtype=torch.float32, device="cuda")
            mark("op")
            out = add(y, 2.0)
            mark("op-end")
            torch.testing.assert_close(out, 2 * y)
    """
    proc, ranges = _child(script, [path], tmp_path, tool, "1")
    assert proc.stdout.splitlines()[0].startswith("auto cuda"), proc.stdout  # the own launcher, where PTX is
    want = [("", []), ("auto", []), *EXPECTED, ("taichi", []), *EXPECTED]
    if "mark op" in (tmp_path / "ranges.txt").read_text():
        want += [("op", ["taichi_aot:add"]), ("op-end", [])]
    assert ranges == want, proc.stdout
