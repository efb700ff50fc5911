"""The benchmark harness runs end to end in quick mode (timings are reported, never asserted)."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest

from conftest import IN_CI, require_arch, require_extra
from taichi_aot import Arch, Runtime, capi
from taichi_aot_bench.profiler import BEYOND_ROW


def test_bench_quick_reports_every_figure_against_its_limit(tmp_path):
    for arch in (Arch.X64, Arch.VULKAN):
        require_arch(arch)
    require_extra("matplotlib", "plot")
    out, picture = tmp_path / "bench.json", tmp_path / "bench.png"
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "bench", "--quick", "--arch", "x64", "vulkan",
                           "--json", str(out), "--plot", str(picture)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "targets:" in proc.stdout and "median" in proc.stdout
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "Warning" not in proc.stderr, proc.stderr
    results = json.loads(out.read_text())
    assert results["c_api_version"] == capi.get_version() and results["quick"] is True
    for arch in ("x64", "vulkan"):
        assert results["archs"][arch]["raw_c"], "the raw C reference must build (a C compiler is needed)"
        rows = [r for r in results["rows"] if r["arch"] == arch]
        names = {r["name"] for r in rows}
        for expected in ("raw C", "recorded sequence (C replay)", "pre-bound launch", "dynamic call (validated)",
                         "dynamic call by keyword", "flat capi.launch_kernel", "dynamic call checked in Python",
                         "graph (bound)",
                         "raw C step loop", "dynamic calls (as users write them)", "bound launches",
                         "16 kernels (dynamic calls)", "taichi_aot saxpy @2^14", "from_numpy @1 MiB",
                         "to_numpy(out=) @1 MiB", "mapped view read (np.copyto) @1 MiB",
                         "dynamic call, 1 array: NdArray", "dynamic call, 3 arrays: NdArray",
                         "dynamic call, 32 arrays: NdArray", "sweep, 1 worker", "warm cache: import",
                         "a new cache: load", "python -c pass: total",
                         "pool cost per task (empty task)", "NVTX rows: raw C loop (no dispatcher)",
                         "NVTX off: C replay of the launch"):
            assert expected in names, (arch, expected)
        assert any(n.startswith("pool cost per task (") and "empty" not in n for n in names), names  # a simulation's
        for r in rows:
            assert r["samples"] and all(math.isfinite(v) for v in r["samples"]), r
            if r["unit"] in ("us/launch", "us/dispatch", "GB/s", "sims/s"):
                assert r["median"] > 0, r
        targets = [r for r in rows if r["target"]]
        assert {r["name"] for r in targets} >= {"recorded sequence (C replay)", "NVTX off: C replay of the launch",
                                                 "pre-bound launch",
                                                 "dynamic calls (as users write them)", "from_numpy @1 MiB"}
        on = [r for r in rows if r["name"] == "NVTX on: C replay, a range a launch"]  # where an NVTX library is
        assert [r["limit"] for r in on] == ["NVTX off: C replay of the launch"] or not _nvtx_library(), on
        keyword = next(r for r in rows if r["name"] == "dynamic call by keyword")  # beside the positional call
        assert keyword["limit"] == "dynamic call (validated)" and keyword["spread"] is not None
        paired = [r for r in rows if r["limit"] in ("raw C", "raw C step loop", "NVTX rows: raw C loop (no dispatcher)",
                                                    "NVTX off: C replay of the launch")]
        assert paired and all(r["spread"] is not None for r in paired)  # measured in paired rounds
        # every target a ratio to its limit, but those bounding a figure itself: memory, start-up, and on a GPU what a
        # wait adds beyond a kernel's device time (microseconds)
        assert all(r["ratio"] is not None or r["section"] in ("memory", "startup") or r["name"] == BEYOND_ROW
                   for r in targets), [r["name"] for r in targets if r["ratio"] is None]
        if arch == "x64":  # a reverse kernel beside its forward (taichi_aot's own x64 launch)
            reverse = next(r for r in rows if r["name"] == "kernel.grad: the reverse kernel")
            assert reverse["limit"] == "kernel: forward" and reverse["ratio"] > 0
        if arch == "x64":  # numpy arrays, shared: compared with NdArrays, 1, 3 and 32 of them
            assert {"dynamic call, 1 array: numpy (zero-copy)", "dynamic call, 3 arrays: numpy (zero-copy)",
                    "dynamic call, 32 arrays: numpy (zero-copy)"} <= {r["name"] for r in targets}
        if results["archs"][arch].get("jit"):
            assert "Taichi JIT (ti.kernel call)" in names
        from taichi_aot_bench import profiler  # a launch's cost inside a profile, and the time it records

        assert by_name(rows, profiler.INSIDE)["limit"] == profiler.OUTSIDE
        assert by_name(rows, profiler.PROFILED)["params"]["timed"] == ("call" if arch == "x64" else "device")
        from taichi_aot_bench import sharing  # threads sharing a runtime; host arrays against copies by hand

        shared = [r["limit"] for r in rows if r["name"] == sharing.SHARED]
        assert shared == [sharing.ONE], shared  # every arch here serves any thread (x64: its calls one at a time)
        few = by_name(rows, sharing.SHARED_FEW)  # a CPU runtime's calls one at a time: one thread's throughput kept
        assert few["target"] == f">= {sharing.CPU_FEW_TARGET if arch == 'x64' else sharing.FEW_TARGET:g} (throughput)"
        numpy_row = by_name(rows, sharing.row_name("numpy", sharing.SMALL))
        assert numpy_row["limit"] == sharing.row_name("by hand", sharing.SMALL) and numpy_row["ratio"] > 0
        if arch == "x64":  # a module built for 2 threads, against itself on 2 threads and Taichi's JIT
            from taichi_aot_bench import cores

            by = {r["name"]: r for r in rows}
            assert by[cores.OWN]["limit"] == cores.BUILT and by[cores.OWN]["ratio"] > 0
            assert by[cores.OWN]["params"]["threads"] == by[cores.OWN]["params"]["cores"]
            assert (cores.JIT in by) == bool(results["archs"][arch].get("jit"))


def by_name(rows: list, name: str) -> dict:
    (row,) = [r for r in rows if r["name"] == name]
    return row


def _nvtx_library() -> bool:
    """An NVTX library is here (the test extra's nvidia-nvtx-cu12 wheel): the bench measures ranges on."""
    from taichi_aot import _nvtx

    return any(where == "the nvidia-nvtx wheel" for where, _ in _nvtx.candidates())


def test_a_figure_that_reads_as_its_target_meets_it():
    """A row's target is met or missed by the figure the report prints: a median of 50.04 ms prints "50.0" and meets
    "<= 50" (before, the table read "50.0 <=50 MISSED"), a ratio of 1.0504 meets "<= 1.05", one of 0.9996 meets
    ">= 1"; a figure that prints past its target still misses it."""
    from taichi_aot_bench.report import format_rows, summary
    from taichi_aot_bench.row import Row

    def row(name: str, samples: list[float], target: str, met: bool, ratio: float | None = None) -> Row:
        return Row("startup", "x64", name, "ms", samples, ratio=ratio, target=target, met=met)

    rows = [row("import", [50.04], "<= 50", 50.04 <= 50), row("ratio", [1.0], "<= 1.05", 1.0504 <= 1.05, 1.0504),
            row("speed", [1.0], ">= 1", 0.9996 >= 1, 0.9996), row("slow import", [50.06], "<= 50", 50.06 <= 50)]
    table = format_rows(rows).splitlines()
    line = {name: next(x for x in table if x.strip().startswith(name + " ")) for name in ("import", "ratio", "speed",
                                                                                          "slow import")}
    assert "50.0" in line["import"] and "<=50 ok" in line["import"], line
    assert "1.05x" in line["ratio"] and "<=1.05 ok" in line["ratio"], line
    assert " 1x " in line["speed"], line
    assert ">=1 ok" in line["speed"], line
    assert "50.1" in line["slow import"] and "MISSED" in line["slow import"], line
    results = {"rows": [r.to_dict() for r in rows]}
    text = summary(results)
    assert "[met   ] x64     import: 50.0 (<= 50)" in text, text
    assert "[MISSED] x64     slow import: 50.1 (<= 50)" in text, text
    assert [r["met"] for r in results["rows"]] == [True, True, True, False]


def test_bench_bad_input():
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "bench", "--quick", "--sections", "nope"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown section" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "bench", "--quick", "--corpus", "no-such-folder"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--corpus 'no-such-folder': not a folder" in proc.stderr, proc.stderr
    folder = os.path.dirname(os.path.abspath(__file__))  # a folder, not a build of vk_raw.c
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "bench", "--quick", "--vk-raw", folder],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and f"--vk-raw {folder!r}: not a program" in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "bench", "--quick", "--threads-raw", folder],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and f"--threads-raw {folder!r}: not a program" in proc.stderr, proc.stderr


def test_threads_raw_gives_the_sharing_shape_in_c_alone(tmp_path):
    """benchmarks/threads_raw.c (the sharing section's ``--threads-raw``) builds beside Vulkan's headers and, on
    this host's Vulkan device, gives every variant's ratios (four threads' throughput against one thread's), which
    the section makes rows of, each noting whether its launches ran at once or in turn; a device it has not, an arch
    it does not know, a count that is none, or a program that fails or prints no figures is said, never raised into
    the section."""
    require_arch(Arch.VULKAN)
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not os.path.isfile("/usr/include/vulkan/vulkan_core.h"):
        if IN_CI:
            pytest.fail("Vulkan's headers (libvulkan-dev) and a C compiler build benchmarks/threads_raw.c in CI")
        pytest.skip("Vulkan's headers are not installed here (apt-get install libvulkan-dev)")
    from taichi_aot.placement.vulkan import facts
    from taichi_aot_bench.sharing import _raw_rows, raw_row_name, raw_threads

    binary = str(tmp_path / "threads_raw")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    built = subprocess.run([cc, "-O2", "-o", binary, os.path.join(root, "benchmarks", "threads_raw.c"), "-ldl",
                            "-lpthread"], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    with Runtime(Arch.VULKAN) as rt:
        name = facts(rt.handle).name
        ratios = raw_threads(binary, "vulkan", 4, 2, name)
        variants = {"vulkan blocking", "vulkan polled", "vulkan blocking, serial", "vulkan polled, serial"}
        assert set(ratios) == variants
        assert all(len(v) == 2 and all(math.isfinite(r) and r > 0 for r in v) for v in ratios.values()), ratios
        logged: list[str] = []
        bench = SimpleNamespace(rt=rt, name="vulkan", quick=True, threads_raw=binary, log=logged.append)
        rows = _raw_rows(bench)
        assert {r.name for r in rows} == {raw_row_name(v) for v in variants} and not logged
        assert all(r.unit == "x one thread" and len(r.samples) == 3 and r.median > 0 for r in rows)
        assert all(r.note.endswith("in turn: one at a time, as Python's lock makes them") == ("in turn" in r.name)
                   for r in rows)
        for program in ("/bin/false", "/bin/echo"):  # fails; prints no figures
            bench.threads_raw = program
            assert _raw_rows(bench) == [] and "no rows of threads_raw" in logged[-1], logged
    assert raw_row_name("vulkan polled, serial") == "raw C, launches in turn, waits polled: 4 threads, a value every 10"
    assert raw_row_name("cuda sched=auto, a stream each") == "raw C, a stream each: 4 threads, a value every 10"
    with pytest.raises(RuntimeError, match="no device named like 'no such device'"):
        raw_threads(binary, "vulkan", 4, 1, "no such device")
    with pytest.raises(RuntimeError, match="vulkan or cuda, not 'metal'"):
        raw_threads(binary, "metal", 4, 1)
    with pytest.raises(RuntimeError, match="counts from 1"):
        raw_threads(binary, "vulkan", 0, 1, name)


def test_threads_gil_gives_python_locks_ceiling_for_cuda(tmp_path):
    """benchmarks/threads_gil.py (four Python threads driving the CUDA driver through ctypes): where a CUDA driver and
    GPU answer, every variant's ratio, each value checked (a wrong one or a failed call: exit 1, which fails here);
    else exit 2 saying there is no CUDA, no traceback; a count that is none, or runs past what a value can count,
    are refused."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = os.path.join(root, "benchmarks", "threads_gil.py")
    spec = importlib.util.spec_from_file_location("threads_gil", script)
    assert spec is not None and spec.loader is not None
    threads_gil = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(threads_gil)  # its figures run only as a program
    streams = threads_gil.STREAMS
    out = tmp_path / "gil.json"
    proc = subprocess.run([sys.executable, script, "--rounds", "3", "--pairs", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode == 2:
        assert proc.stderr.startswith("threads_gil: no CUDA here: ") and "Traceback" not in proc.stderr, proc.stderr
        assert not out.exists()
    else:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        rows = json.loads(out.read_text())["rows"]
        assert [r["variant"] for r in rows] == [f"launch {how} Python's lock, {on}"
                                                for how in ("keeps", "lets go") for on in streams]
        assert all(r["ratio"] > 0 and r["one_ms"] > 0 and r["four_ms"] > 0 for r in rows), rows
        assert len(proc.stdout.splitlines()) == 2 * len(streams)
    refused = subprocess.run([sys.executable, script, "--pairs", "0"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "counts from 1" in refused.stderr
    refused = subprocess.run([sys.executable, script, "--rounds", "100000", "--pairs", "10"], capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode == 2 and "its value: a float" in refused.stderr


def test_start_now_refuses_an_arch_it_does_not_measure():
    """benchmarks/start_now.py (the vkwait rows with APIs the issue's start has too) takes vulkan or cuda alone: any
    other argument, or none, exits non-zero with its usage, no traceback."""
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "start_now.py")
    for argv in (["metal"], [], ["vulkan", "cuda"]):
        proc = subprocess.run([sys.executable, script, *argv], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1 and "usage: python benchmarks/start_now.py vulkan|cuda" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def test_bench_builds_the_raw_cuda_floor(tmp_path, monkeypatch):
    """The profiler section's raw CUDA floor (taichi_aot_bench/_csrc/cuda_events.c) builds with the system compiler,
    once; where a CUDA driver is, it times the same launches with and without events (events dearer), else it says
    there is none."""
    monkeypatch.setenv("TAICHI_AOT_CACHE", str(tmp_path))
    from taichi_aot_bench.compile import raw_program

    program = raw_program("cuda_events")
    assert raw_program("cuda_events") == program and os.access(program, os.X_OK)
    proc = subprocess.run([program, "200"], capture_output=True, text=True, timeout=300)
    try:
        ctypes.CDLL("libcuda.so.1")
        driver = True
    except OSError:
        driver = False
    if driver:
        answer = json.loads(proc.stdout)
        assert proc.returncode == 0 and answer["launches"] == 200
        assert 0 < answer["plain"] < answer["events_2"] and answer["events_2_over_plain"] > 1
    else:
        assert proc.returncode == 1 and "no CUDA driver" in proc.stderr, proc.stderr


_NO_LLVMLITE = """
import sys
class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "llvmlite":
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, _Absent())
"""


def test_bench_as_the_readmes_install_leaves_it(tmp_path):
    """Without the ptx extra (llvmlite: the README's install route leaves it out) the autodiff section says why it
    has no rows on x64, no traceback, exit 0; where targets are missed on a host of fewer cores than the targets were
    set on, the summary says so."""
    require_arch(Arch.X64)
    from taichi_aot_bench.measure import usable_cores
    from taichi_aot_bench.report import SET_ON_CORES

    (tmp_path / "sitecustomize.py").write_text(_NO_LLVMLITE)
    out = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "bench", "--quick", "--arch", "x64", "--sections",
                           "autodiff", "startup", "--json", str(out)], capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout[-3000:] + proc.stderr
    assert "autodiff: no rows on x64: " in proc.stdout and "pip install 'taichi_aot[ptx]'" in proc.stdout
    results = json.loads(out.read_text())
    assert results["errors"] == [] and results["cores"] == usable_cores()
    missed = any(r["target"] and not r["met"] for r in results["rows"])
    assert ("usable CPU core" in proc.stdout) == (missed and usable_cores() < SET_ON_CORES), proc.stdout[-2000:]


def test_bench_check_exits_1_exactly_when_a_target_is_missed(tmp_path):
    require_arch(Arch.X64)
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "bench", "--quick", "--arch", "x64", "--sections",
                           "launch", "--check", "--json", str(out)], capture_output=True, text=True, timeout=600)
    results = json.loads(out.read_text())
    missed = [r["name"] for r in results["rows"] if r["met"] is False]
    assert proc.returncode == (1 if missed else 0), (missed, proc.stderr[-2000:])
    assert ("target(s) missed" in proc.stderr) == bool(missed)


def test_the_bench_compiles_its_modules_under_pythonsafepath(tmp_path):
    """Under ``PYTHONSAFEPATH=1`` (which the bench's child processes inherit) a script's folder is not on its path:
    the cores section's kernels still find their sibling (bench_kernels) and compile."""
    require_arch(Arch.X64)
    require_extra("taichi", "build")
    code = "from taichi_aot_bench.compile import taichi_module; print(taichi_module('cores', 'x64', '2'))"
    env = dict(os.environ, PYTHONSAFEPATH="1", TAICHI_AOT_CACHE=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert os.path.isfile(os.path.join(proc.stdout.strip(), "__content__")), proc.stdout
