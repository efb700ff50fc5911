"""taichi_aot's own CUDA launcher: PTX made from Taichi's CUDA modules with llvmlite (here, no GPU), the kernels its
gate leaves to libtaichi, the manifest and plans checked against tampering, and (where a GPU is) both launch
paths giving the same values.

The CUDA modules were compiled by Taichi 1.7.4 on a GPU (Taichi compiles for CUDA only there) and are kept as
test data: ``tests/data/cuda-modules.tar.xz`` holds the suite's kernels (tests/kernels.py), the simulation's and
the benchmark's (taichi_aot_bench/*_kernels.py), and tests/ptx_kernels.py's; ``ir/`` one kernel's IR alone with
Taichi's own PTX of it.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import replace

import numpy as np
import pytest

from conftest import ptx_manifest, require_extra, with_ptx_copies
from taichi_aot import Arch, CorruptedDataError, IncompatibleModuleError, NotSupportedError, Runtime, capi, metadata
from taichi_aot.metadata import layout
from taichi_aot.ptx import MANIFEST, add_ptx, add_to_folder, gate, kernel_entries, plan, read_manifest
from taichi_aot.ptx.compile import VERSION

HERE = os.path.dirname(os.path.abspath(__file__))
REFUSED = {"printer": "vprintf", "field_user": "SNode fields"}


@pytest.fixture(scope="module")
def with_ptx(cuda_modules, tmp_path_factory) -> dict[str, str]:
    return with_ptx_copies(cuda_modules, ["tests", "ptx", "sim", "bench", "autodiff"], tmp_path_factory)


def test_every_kernel_of_the_suite_gets_ptx(with_ptx):
    for name in ("tests", "sim", "bench"):
        man = ptx_manifest(with_ptx[name])
        kernels = set(metadata.read_module(with_ptx[name]).kernels)
        assert set(man["kernels"]) == kernels and not man["refused"]
        assert man["runtime"] == {"size": 35256, "temporaries": 32872, "rand_states": 32880, "rand_state_size": 20}
        for kernel, entry in man["kernels"].items():
            with open(os.path.join(with_ptx[name], entry["ptx"]), encoding="utf-8") as f:
                ptx = f.read()
            assert ".target sm_60" in ptx and ".address_size 64" in ptx
            assert not re.search(r"\bcall(\.uni)?\b", ptx), kernel  # every helper inlined
            tasks = [t["name"] for t in plan.from_entry(_entry(with_ptx[name], kernel))["tasks"]]
            launched = [t["name"] for t in plan.from_entry(_entry(with_ptx[name], kernel), _read(
                os.path.join(with_ptx[name], f"{kernel}.ll")))["tasks"]]
            entries = re.findall(r"\.visible \.entry (\w+)\(", ptx)
            assert entries == [f"{t}__w" for t in launched]  # a name PTX holds stays
            # a range-for's serial task that only stores the bound runs in the loop's launch
            assert len(launched) == len(tasks) - (tasks[0].endswith("_serial") and len(tasks) == 2), kernel
            assert not entry["rand"]


def _renamed(cuda_modules: str, out: str, rename) -> str:
    """A copy of the benchmark's CUDA module whose kernels' IR is passed through ``rename(text)``."""
    shutil.copytree(os.path.join(cuda_modules, "bench"), out)
    for name in os.listdir(out):
        if name.endswith(".ll"):
            path = os.path.join(out, name)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            with open(path, "w", encoding="utf-8") as f:
                f.write(rename(text))
    return out


def test_struct_names_that_llvm_suffixed_still_lay_the_runtime_out(with_ptx, cuda_modules, tmp_path):
    """Taichi links each kernel's IR from several LLVM modules, and LLVM renames the struct types that clash
    (``%struct.LLVMRuntime.6``): a module of one kernel holds only such names, and got no PTX."""
    def suffixed(text: str) -> str:
        return re.sub(r"%struct\.(LLVMRuntime|RuntimeContext|RandState|PreallocatedMemoryChunk|ListManager|"
                      r"NodeManager)(?![.\w])", r"%struct.\1.99", text)

    folder = _renamed(cuda_modules, str(tmp_path / "suffixed"), suffixed)
    assert not any(re.search(r"^%struct\.LLVMRuntime = ", _read(os.path.join(folder, n)), re.M)
                   for n in os.listdir(folder) if n.endswith(".ll"))
    man = add_to_folder(folder)
    assert man["runtime"] == ptx_manifest(with_ptx["bench"])["runtime"] and not man["refused"]
    assert set(man["kernels"]) == set(ptx_manifest(with_ptx["bench"])["kernels"])
    for entry in man["kernels"].values():  # the same PTX as from the names unsuffixed
        assert _read(os.path.join(folder, entry["ptx"])) == _read(os.path.join(with_ptx["bench"], entry["ptx"]))


def test_a_task_named_in_cyrillic_gets_ptx(cuda_modules, tmp_path):
    """LLVM quotes a name that is not ASCII (``@"\\D1\\8F..."``); PTX cannot hold it, so its entry is named by
    its digest."""
    from taichi_aot.metadata import llvm_ir
    from taichi_aot.ptx.compile import entry

    task = _entry(os.path.join(cuda_modules, "bench"), "saxpy")["compiled_data"]["tasks"][-1]["name"]  # the loop
    cyrillic = "ядро_" + task
    folder = _renamed(cuda_modules, str(tmp_path / "cyrillic"),
                      lambda text: re.sub(rf"@{task}\b", lambda m: llvm_ir.ref(cyrillic), text))
    meta = os.path.join(folder, "metadata.json")
    with open(meta, encoding="utf-8") as f:
        text = f.read()
    with open(meta, "w", encoding="utf-8") as f:
        f.write(text.replace(f'"{task}"', f'"{cyrillic}"'))
    assert '@"\\D1\\8F\\D0\\B4' in _read(os.path.join(folder, "saxpy.ll"))
    man = add_to_folder(folder)
    assert "saxpy" in man["kernels"], man["refused"]
    ptx = _read(os.path.join(folder, "saxpy.ptx"))
    assert re.match(r"t[0-9a-f]{24}__w$", entry(cyrillic))
    tasks = [t["name"] for t in _entry(folder, "saxpy")["compiled_data"]["tasks"]]
    assert cyrillic in tasks and re.findall(r"\.visible \.entry (\w+)\(", ptx) == [entry(cyrillic)]  # one launch
    assert cyrillic in llvm_ir.tasks(_read(os.path.join(folder, "saxpy.ll")))


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_reverse_kernels_get_ptx_with_gradient_pointers_and_bounded_stacks(with_ptx):
    """tests/autodiff_kernels.py built for CUDA (the data's autodiff module): every kernel, primal and reverse, gets
    PTX; a reverse kernel's plan puts a gradient pointer beside each data pointer, and its PTX bounds Taichi's
    autodiff stacks (a push past one sets taichi_aot_adstack_overflow, which the launcher reads)."""
    folder = with_ptx["autodiff"]
    man = ptx_manifest(folder)
    info = metadata.read_module(folder)
    assert set(man["kernels"]) == set(info.kernels) and not man["refused"]
    reverse = {name for name, k in info.kernels.items() if k.reverse}
    assert reverse == {"sq_grad", "poly_grad", "total_grad", "wave_grad", "long_grad"}
    for kernel in man["kernels"]:
        args = plan.from_entry(_entry(folder, kernel))["args"]
        arrays = [a for a in args if a["kind"] == "ndarray"]
        # {shape, data_ptr, grad_ptr} where the arrays say needs_grad (all but plain's)
        assert arrays and all(a.get("grad") == (None if kernel == "plain" else a["data"] + 8) for a in arrays)
        with open(os.path.join(folder, man["kernels"][kernel]["ptx"]), encoding="utf-8") as f:
            ptx = f.read()
        bounded = ".visible .global .align 4 .u32 taichi_aot_adstack_overflow" in ptx
        assert bounded == (kernel in ("poly_grad", "long_grad")), kernel  # the kernels with loop-carried values
    bad = plan.from_entry(_entry(folder, "sq_grad"))
    bad["args"][0]["grad"] = bad["args"][0]["data"]
    with pytest.raises(CorruptedDataError, match="gradient pointer overlaps"):
        plan.check(bad, "here")


def _entry(folder: str, kernel: str) -> dict:
    from taichi_aot.ptx import kernel_entries

    return kernel_entries(folder)[kernel]


def test_gate_keeps_what_needs_taichis_runtime_on_libtaichi(with_ptx):
    man = ptx_manifest(with_ptx["ptx"])
    assert set(man["kernels"]) == {"rnd", "rangen", "add2d", "grid3", "mathk", "wide", "returner"}
    assert {k: next(w for w in REFUSED.values() if w in why) for k, why in man["refused"].items()} == REFUSED
    assert man["kernels"]["rnd"]["rand"] and not man["kernels"]["rangen"]["rand"]
    # metadata alone keeps a kernel away too: return values, argpacks, dynamic shared memory (grad pointers no
    # more: the own launcher fills a reverse-mode kernel's)
    f32 = {"type_kind": 0, "content": {"type": 1}}
    returning = {"ret_size": 4, "ret_type": {"type_kind": 3, "content": {"elements_": [
        {"name": "ret_0", "offset": 0, "type": f32}]}}}
    assert gate.read_entry(returning) is None
    assert "cannot be read" in gate.read_entry({"ret_size": 4})
    member = {"type_kind": 3, "content": {"elements_": [{"name": "n", "offset": 0, "type": f32}]}}
    struct = {"ret_size": 4, "ret_type": {"type_kind": 3, "content": {"elements_": [
        {"name": "ret_0", "offset": 0, "type": member}]}}}
    assert "struct" in gate.read_entry(struct)
    assert "at most 4096" in gate.read_entry({**returning, "ret_size": 8192})
    assert gate.read_entry({"args": [[[0], {"needs_grad": True}]]}) is None
    assert "argpack" in gate.read_entry({"args": [[[0], {"is_argpack": True}]]})
    assert "shared" in gate.read_entry({"compiled_data": {"tasks": [{"dynamic_shared_array_bytes": 64}]}})


def test_a_returning_kernel_writes_its_value_after_the_stand_in(with_ptx):
    """returner (``-> ti.f32``): the gate takes it, its plan says where its value lies in the result buffer, and its
    PTX stores the value through the pointer it builds from the stand-in's (the bytes after the LLVMRuntime)."""
    man = ptx_manifest(with_ptx["ptx"])
    assert "returner" in man["kernels"] and "returner" not in man["refused"]
    entry = _entry(with_ptx["ptx"], "returner")
    laid = plan.from_entry(entry)
    assert laid["results"] == [{"type": 1, "offset": 0}] and laid["result_size"] == 4
    assert "results" not in plan.from_entry(_entry(with_ptx["ptx"], "rangen"))
    with open(os.path.join(with_ptx["ptx"], man["kernels"]["returner"]["ptx"]), encoding="utf-8") as f:
        ptx = f.read()
    size = man["runtime"]["size"]
    assert re.search(rf"st\.global\.[bf]32\s+\[%rd\d+\+{size}\]", ptx), ptx
    with pytest.raises(CorruptedDataError, match="return value 0"):
        plan.check({**laid, "results": [{"type": 2, "offset": 0}]}, "m")
    with pytest.raises(CorruptedDataError, match="results' size"):
        plan.check({**laid, "result_size": layout.RESULT_BYTES + 8}, "m")


def test_fast_math_as_taichi_and_arguments_in_the_launch_parameters(with_ptx):
    with open(os.path.join(with_ptx["tests"], "add.ptx"), encoding="utf-8") as f:
        ptx = f.read()
    assert "fma.rn.ftz.f32" in ptx  # contraction and flushed f32 denormals, as Taichi's own JIT
    with open(os.path.join(with_ptx["sim"], "grid_update.ptx"), encoding="utf-8") as f:
        divisions = re.findall(r"(?:div|rcp)\.\S+\.f32", f.read())
    # Taichi's unsafe-fp-math f32 division: approximate, by a reciprocal where the divisor repeats
    assert divisions and set(divisions) <= {"div.approx.ftz.f32", "rcp.approx.ftz.f32"}
    assert ".param .align 8 .b8 add_c80_0_kernel_1_range_for__w_param_0[40]" in ptx  # args_size bytes, by value
    # the arguments read from the parameters, the loop's bound too (its serial task folded: no temporaries)
    assert "ld.param" in ptx and "32872" not in ptx
    with open(os.path.join(with_ptx["tests"], "accumulate.ptx"), encoding="utf-8") as f:
        assert "32872" in f.read()  # a kernel whose tasks all launch: the temporaries, by their offset
    args = plan.from_entry(_entry(with_ptx["sim"], "p2g"))["args"]
    assert [a["kind"] for a in args] == ["ndarray"] * 4 and args[2] == {"kind": "ndarray", "offset": 32, "dims": 3,
                                                                         "data": 48, "type": args[2]["type"]}
    from taichi_aot.enums import DataType
    from taichi_aot.metadata.model import _data_type

    assert _data_type(args[2]["type"]) == DataType.F32  # its elements' type, which the x64 launch reads by
    wide = plan.from_entry(_entry(with_ptx["ptx"], "wide"))["args"]
    assert [(a["kind"], a.get("size")) for a in wide] == [("ndarray", None), ("scalar", 8), ("scalar", 8),
                                                          ("scalar", 1)]


#: An f32 division, product or fused multiply-add in PTX (the rounding of each: approximate, contracted or not).
_F32_ROUNDING = re.compile(r"\b(?:div|rcp|mul|fma)\.(?:rn\.|approx\.|full\.)?ftz\.f32\b")


def test_fast_math_holds_for_what_the_optimiser_writes(cuda_modules):
    """The 3-D SPH force loop of benchmarks/vk_programs_kernels.py (``ir/sph3_force.ll``, compiled by Taichi 1.7.4 for
    CUDA; ``sph3_force.taichi.ptx``: Taichi's own JIT's PTX of it, on an H100). LLVM's optimiser rewrites
    ``f -= c * d / r`` as ``(-(c * d)) / r``, a division with only the flags both operands had: without Taichi's
    fast math set again after it, six divisions were ``div.rn`` and three products ``mul.rn`` (the loop 1.31x
    Taichi's GPU time). The PTX step's kinds of f32 rounding are Taichi's."""
    require_extra("llvmlite.binding", "ptx")
    from taichi_aot.metadata import llvm_ir
    from taichi_aot.ptx import compile as ptx_compile

    with open(os.path.join(cuda_modules, "ir", "sph3_force.ll"), encoding="utf-8") as f:
        text = f.read()
    with open(os.path.join(cuda_modules, "ir", "sph3_force.taichi.ptx"), encoding="utf-8") as f:
        theirs = set(_F32_ROUNDING.findall(f.read()))
    ours = set(_F32_ROUNDING.findall(ptx_compile.to_ptx(text, list(llvm_ir.tasks(text)), 256)))
    assert ours == theirs == {"div.approx.ftz.f32", "rcp.approx.ftz.f32", "mul.ftz.f32", "fma.rn.ftz.f32"}, ours


@pytest.mark.parametrize("change, message", [
    (lambda p: p.update(args_size=5000), "args_size"),
    (lambda p: p["args"][0].update(offset=40), "leave the arguments"),
    (lambda p: p["args"][0].update(data=4), "pointer overlap"),
    (lambda p: p["args"][2].update(size=3), "odd-sized"),
    (lambda p: p["args"][2].update(offset=38), "misaligned"),
    (lambda p: p["args"][2].update(count=9), "past the arguments"),
    (lambda p: p["tasks"][1].update(block=4096), "block"),
    (lambda p: p["tasks"][0].update(grid=0), "grid"),
    (lambda p: p.update(tasks=[]), "number of tasks"),
    (lambda p: p["args"][1].update(kind="texture"), "unknown kind"),
])
def test_a_plan_that_would_write_outside_the_parameters_is_refused(with_ptx, change, message):
    good = plan.from_entry(_entry(with_ptx["tests"], "add"))
    plan.check(copy.deepcopy(good), "here")
    bad = copy.deepcopy(good)
    change(bad)
    with pytest.raises(CorruptedDataError, match=message):
        plan.check(bad, "here")


def test_a_tampered_manifest_is_refused(with_ptx):
    with open(os.path.join(with_ptx["tests"], MANIFEST), "rb") as f:
        raw = f.read()
    assert read_manifest(raw, "m")["kernels"]["add"]["ptx"] == "add.ptx"
    assert read_manifest(None, "m") is None
    doc = json.loads(raw)
    for change, message in [(lambda d: d["runtime"].update(temporaries=10**7), "out of range"),
                            (lambda d: d["kernels"]["add"].update(ptx="../../etc/passwd"), "malformed"),
                            (lambda d: d.update(taichi_aot_ptx=2), "format"),
                            (lambda d: d.update(runtime=None), "no runtime layout"),
                            (lambda d: d.pop("refused"), "without kernels")]:
        bad = copy.deepcopy(doc)
        change(bad)
        with pytest.raises(CorruptedDataError, match=message):
            read_manifest(json.dumps(bad).encode(), "m")
    with pytest.raises(CorruptedDataError, match="JSON"):
        read_manifest(b"{not json", "m")


def test_ptx_command_on_folders_archives_and_multi_arch_modules(cuda_modules, tmp_path):
    require_extra("llvmlite.binding", "ptx")
    cli = [sys.executable, "-m", "taichi_aot", "ptx"]
    folder = str(tmp_path / "sim")
    proc = subprocess.run([*cli, os.path.join(cuda_modules, "sim"), "-o", folder], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "PTX (sm_60) for 9 CUDA kernels" in proc.stdout and os.path.isfile(os.path.join(folder, "p2g.ptx"))
    assert not os.path.exists(os.path.join(cuda_modules, "sim", MANIFEST))  # -o: the source is left as it was
    demo = os.path.join(os.path.dirname(metadata.__file__), "..", "cli", "demo.tcm")
    out = str(tmp_path / "demo.tcm")
    manifest = add_ptx(demo, out)
    assert set(manifest["kernels"]) >= {"seed", "react"}
    info = metadata.read_module(out)
    assert info.parts == metadata.read_module(demo).parts  # every part kept, the CUDA part with its PTX
    x64 = str(tmp_path / "x64")
    shutil.copytree(os.path.join(cuda_modules, "tests"), x64)
    with open(os.path.join(x64, "add.ll"), "r+", encoding="utf-8") as f:
        text = f.read().replace('target triple = "nvptx64-nvidia-cuda"', 'target triple = "x86_64-unknown-linux"')
        f.seek(0)
        f.write(text)
        f.truncate()
    proc = subprocess.run([*cli, x64], capture_output=True, text=True)
    assert proc.returncode == 2 and "not a CUDA kernel's IR" in proc.stderr


def test_ptx_on_a_module_with_no_cuda_part_says_how_to_make_one(modules, tmp_path):
    """Nothing is corrupt in a module of other archs: the error names them and the way to a CUDA part, and the
    command prints it as one line with exit status 2, writing nothing."""
    multi = str(tmp_path / "multi.tcm")  # a multi-arch module of x64 and Vulkan parts, as build writes one
    with zipfile.ZipFile(multi, "w", zipfile.ZIP_STORED) as z:
        parts = {"x64": "x64.tcm", "vulkan": "vulkan.tcm"}
        z.writestr("taichi_aot.json", json.dumps({"taichi_aot": 1, "parts": parts}))
        z.write(modules.path(Arch.X64, tcm=True), "x64.tcm")
        z.write(modules.path(Arch.VULKAN, tcm=True), "vulkan.tcm")
    cases = [(modules.path(Arch.X64, tcm=True), "x64"), (modules.path(Arch.X64), "x64"),
             (modules.path(Arch.VULKAN), "vulkan"), (multi, "vulkan, x64")]
    for source, archs in cases:
        with pytest.raises(IncompatibleModuleError) as info:
            add_ptx(source, str(tmp_path / "out"))
        assert f"this module has none (it runs on {archs}" in str(info.value)
        assert "--arch cuda" in str(info.value) and not isinstance(info.value, CorruptedDataError)
        proc = subprocess.run([sys.executable, "-m", "taichi_aot", "ptx", source, "-o", str(tmp_path / "out")],
                              capture_output=True, text=True)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith("taichi-aot: error: IncompatibleModuleError: ") and "--arch cuda" in proc.stderr
        assert not os.path.exists(tmp_path / "out")


def test_ptx_on_a_module_with_no_kernels_has_nothing_to_do(tmp_path):
    """A module Taichi saved with no kernel names no arch: ptx says there is nothing to do, writes nothing, exit 0."""
    from conftest import taichi_env

    empty = str(tmp_path / "empty")
    made = subprocess.run([sys.executable, "-c", "import sys, taichi as ti; ti.init(arch=ti.x64, offline_cache=False);"
                           " ti.aot.Module(ti.x64).save(sys.argv[1])", empty], capture_output=True, text=True,
                          env=taichi_env(), timeout=300)
    assert made.returncode == 0, made.stderr[-2000:]
    before = sorted(os.listdir(empty))
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "ptx", empty], capture_output=True, text=True)
    assert proc.returncode == 0 and "nothing to do" in proc.stdout and "holds no kernels" in proc.stdout, proc.stderr
    assert sorted(os.listdir(empty)) == before and add_ptx(empty)["empty"] is True


# ---------------------------------------------------------------------------
# On a GPU: both launch paths, the same values

#: Kernels that add floats atomically: the order of their additions is the GPU's, on either path.
ATOMIC_FLOATS = {"accumulate", "p2g", "stats"}


def _inputs(name: str, rng: np.random.Generator) -> list | None:
    """Arguments for kernel ``name`` of the modules above: numpy arrays (elem_ndim 0), (array, elem_ndim) pairs
    (ndarrays of vectors), scalars and vectors."""
    def f(*s):
        return rng.standard_normal(s).astype(np.float32)

    return {"add": [f(4096), f(4096), 0.5], "fill_i32": [np.zeros((4, 5), np.int32), 7],
            "typed_scalars": [np.zeros(4, np.float64), -3, 40000, 0.3, 123456],
            "half_scale": [f(100).astype(np.float16), 0.3], "scale_vec3": [(f(64, 3), 1), (1.0, 2.0, 3.0)],
            "mat_apply": [(f(64, 2, 2), 2), ((1.0, 2.0), (3.0, 4.0))],
            "accumulate": [np.zeros((), np.float32), f(1000), (np.ones(3, np.float32), 1)],
            "iota_u8": [np.zeros(300, np.uint8)], "sum_i64": [np.arange(1000, dtype=np.int64), np.zeros(1, np.int64)],
            "rangen": [f(4096), np.zeros(4096, np.float32), 1000], "add2d": [f(64, 48), f(64, 48), 0.25],
            "grid3": [np.zeros((5, 6, 7), np.int32)], "mathk": [f(4096), np.zeros(4096, np.float32)],
            "wide": [np.zeros(100, np.float64), 0.125, 2**40, 3],
            "saxpy": [f(4096), f(4096), 0.5], "copy": [f(4096), np.zeros(4096, np.float32)],
            "tiny": [f(4), 0.5], "tiny3": [f(4), f(4), f(4), 0.5]}.get(name)


def _run(rt, mod, name: str, values: list) -> list[np.ndarray]:
    nds = [rt.ndarray_from_numpy(v) if isinstance(v, np.ndarray) else
           rt.ndarray_from_numpy(v[0], elem_ndim=v[1]) if isinstance(v, tuple) and isinstance(v[0], np.ndarray) else v
           for v in values]
    mod.kernels[name](*nds)
    rt.wait()
    return [n.to_numpy() for n in nds if hasattr(n, "to_numpy")]


def _simulation(rt, mod) -> list[np.ndarray]:
    """Ten steps of the simulation's four kernels (taichi_aot_bench/sim_kernels.py) from the same start."""
    rng = np.random.default_rng(0)
    x = rt.ndarray_from_numpy(rng.uniform(0.2, 0.8, (8192, 2)).astype(np.float32))
    v = rt.ndarray_from_numpy(rng.uniform(-1.0, 1.0, (8192, 2)).astype(np.float32))
    gv, gm = rt.ndarray((64, 64, 2), np.float32), rt.ndarray((64, 64), np.float32)
    k = mod.kernels
    for _ in range(10):
        k["clear_grid"](gv, gm)
        k["p2g"](x, v, gv, gm)
        k["grid_update"](gv, gm, 2e-4, -9.8)
        k["g2p"](x, v, gv, 2e-4)
    rt.wait()
    return [x.to_numpy(), v.to_numpy()]


def _graphs(rt, own, lib) -> None:
    """Compute graphs of kernels that all have PTX run on the own launcher too, with libtaichi's results."""
    assert {own.graphs[g].launcher for g in own.graph_names()} == {"cuda"}
    assert {lib.graphs[g].launcher for g in lib.graph_names()} == {"taichi"}
    for mod in (own, lib):
        x, y = rt.ndarray_from_numpy(np.zeros(64, np.float32)), rt.ndarray_from_numpy(np.ones(64, np.float32))
        mod.graphs["add_twice"](x=x, y=y, a=0.25)
        total, v = rt.ndarray((), np.float32), rt.ndarray_from_numpy(np.ones(3, np.float32), elem_ndim=1)
        mod.graphs["accumulate_graph"](total=total, x=y, v=v)
        rt.wait()
        assert x.to_numpy().tolist() == [0.5] * 64 and float(total.to_numpy()) == 64.0
        assert v.to_numpy().tolist() == [2.0] * 3


def test_both_launch_paths_give_the_same_values_on_a_gpu(with_ptx):
    if not capi.arch_status()[Arch.CUDA].available:
        pytest.skip("no CUDA here")
    with Runtime(Arch.CUDA) as rt:
        for name in ("tests", "ptx", "bench", "sim"):
            own = rt.load_module(with_ptx[name], cuda_launcher="own")
            lib = rt.load_module(with_ptx[name], cuda_launcher="taichi")
            paths = own.launchers()
            returning = {k for k, info in metadata.read_module(with_ptx[name]).kernels.items() if info.returns}
            assert all(v.startswith("refused: returns values") if k in returning else v == "taichi"
                       for k, v in lib.launchers().items())  # libtaichi gives no value: refused, not None
            for kernel in own.kernel_names():
                assert paths[kernel] == ("cuda" if kernel not in REFUSED else paths[kernel])
                values = _inputs(kernel, np.random.default_rng(1))
                if values is None:
                    continue
                a = _run(rt, own, kernel, values)
                if kernel == "wide":  # f64, i64 and u8 scalars: libtaichi's C-API cannot pass them
                    np.testing.assert_array_equal(a[0], 0.125 * np.arange(100) + 2.0**40 + 3)
                    continue
                b = _run(rt, lib, kernel, _inputs(kernel, np.random.default_rng(1)))
                for x, y in zip(a, b):
                    if kernel in ATOMIC_FLOATS:
                        np.testing.assert_allclose(x, y, rtol=1e-5, err_msg=kernel)
                    else:
                        np.testing.assert_array_equal(x, y, err_msg=kernel)  # bit for bit
            if name == "sim":
                for x, y in zip(_simulation(rt, own), _simulation(rt, lib)):
                    np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6)
                rng = np.random.default_rng(2)  # grid_update's f32 divisions alone: bit for bit
                gv0, gm0 = rng.standard_normal((64, 64, 2)).astype(np.float32), rng.random((64, 64)).astype(np.float32)
                a, b = (_run(rt, m, "grid_update", [gv0, gm0 + 0.5, 2e-4, -9.8]) for m in (own, lib))
                np.testing.assert_array_equal(a[0], b[0])
            if name == "tests":
                _graphs(rt, own, lib)
            if name == "ptx":
                assert paths["printer"].startswith("taichi: calls vprintf")
                _returner(rt, own, lib)
                r = [_run(rt, m, "rnd", [np.zeros(100_000, np.float32)])[0] for m in (own, lib)]
                np.testing.assert_array_equal(r[0], r[1])  # Taichi's generators, seeded as Taichi seeds them
                assert r[0].min() >= 0 and r[0].max() < 1 and abs(r[0].mean() - 0.5) < 0.01


def _returner(rt, own, lib) -> None:
    """``returner(a) -> ti.f32`` (``a[0] * 2.0``): its value on the own launcher, computed as Taichi computes it
    (f32); a kernel without one still returns None; on libtaichi's path (its C-API gives no value) its look-up is
    refused."""
    a = rt.ndarray_from_numpy(np.array([1.7, -3.0, 9.0], np.float32))
    returner = own.kernels["returner"]
    value = returner(a)
    assert type(value) is float and value == float(np.float32(1.7) * np.float32(2.0))
    assert returner.launch(a) == value
    a.from_numpy(np.array([-0.5, 0, 0], np.float32))
    assert returner(a) == -1.0 and returner.last_value() == -1.0
    bound = returner.bind(a)
    a.from_numpy(np.array([4.25, 0, 0], np.float32))
    assert bound() is None and returner.last_value() == 8.5  # a bound launch runs it: its value kept
    out = rt.ndarray((4096,), np.float32)
    assert own.kernels["rangen"](rt.ndarray_from_numpy(np.ones(4096, np.float32)), out, 10) is None
    with pytest.raises(NotSupportedError, match="returns values"):  # libtaichi's C-API gives no value
        lib.kernels["returner"]


def test_a_returning_kernel_waits_and_is_refused_inside_a_cuda_graph_capture(with_ptx, cuda_torch):

    torch = cuda_torch
    with Runtime(Arch.CUDA) as rt:
        returner = rt.load_module(with_ptx["ptx"]).kernels["returner"]
        a = torch.full((4,), 1.5, device="cuda")
        assert returner(a) == 3.0  # a torch tensor: the value read back after the stream is waited for
        g = torch.cuda.CUDAGraph()
        with pytest.raises(NotSupportedError, match="returns a value"), torch.cuda.graph(g):
            rt.set_cuda_stream(torch.cuda.current_stream())
            returner(a)
        rt.set_cuda_stream(None)
        assert returner(a) == 3.0


@pytest.fixture
def cuda_torch():
    """torch, where a GPU is (the tests below run there only)."""
    if not capi.arch_status()[Arch.CUDA].available:
        pytest.skip("no CUDA here")
    return require_extra("torch", "interop")


def test_captured_cuda_graphs_and_torch_streams_on_the_own_launcher(with_ptx, cuda_torch):
    torch = cuda_torch
    with Runtime(Arch.CUDA) as rt:
        add = rt.load_module(with_ptx["tests"]).kernels["add"]
        wide = rt.load_module(with_ptx["ptx"]).kernels["wide"]
        out = rt.ndarray((8,), np.float64)
        wide(out, 0.125, 2**40, 3)  # f64, i64 and u8 scalars: the C-API has no room for them, the own launcher has
        np.testing.assert_array_equal(out.to_numpy(), 0.125 * np.arange(8) + 2.0**40 + 3)
        x, y = torch.zeros(4096, device="cuda"), torch.ones(4096, device="cuda")
        side = torch.cuda.Stream()  # non-blocking: the own launcher takes it
        rt.set_cuda_stream(side)
        add(x, y, 0.5)  # seen once before the capture (its first call checks in Python)
        rt.wait()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            add(x, y, 0.5)
            x.mul_(2)
        x.zero_()
        for _ in range(3):
            graph.replay()  # x = (x + 0.5 y) * 2
        torch.cuda.synchronize()
        assert x.eq(7.0).all()  # 0 -> 1 -> 3 -> 7
        y.fill_(2.0)  # an input changed in place shows in the next replay
        graph.replay()
        torch.cuda.synchronize()
        assert x.eq(16.0).all()
        with torch.cuda.stream(side):  # launches between torch's ops on the stream, ordered with no sync
            y.fill_(4.0)
            add(x, y, 0.25)
            x.sub_(1.0)
        rt.wait()
        assert x.eq(16.0).all()
        rt.set_cuda_stream(None)


def test_new_arrays_on_the_own_launcher_are_never_imported(with_ptx, cuda_torch):
    torch = cuda_torch
    with Runtime(Arch.CUDA) as rt:
        own = rt.load_module(with_ptx["tests"]).kernels["add"]
        lib = rt.load_module(with_ptx["tests"], cuda_launcher="taichi").kernels["add"]
        big, y = torch.zeros(2000 * 256, device="cuda"), torch.ones(256, device="cuda")
        for kernel in (own, lib):
            kernel(big[:256], y, 0.5)  # the first call: Python's path, which imports
            before = len(rt.foreign.imports)
            for i in range(1, 1000):  # 999 arrays at new addresses, taken anew in C
                kernel(big[i * 256:(i + 1) * 256], y, 0.5)
            rt.wait()
            grown = len(rt.foreign.imports) - before
            assert grown == (0 if kernel is own else 999)  # libtaichi keeps each import for the runtime's life
        rows = big.view(2000, 256)
        assert rows[:1000].eq(1.0).all() and rows[1000:].eq(0).all()  # each path added 0.5 y once


def test_what_a_load_reads_again_rather_than_trusting_theptx_manifest(with_ptx, tmp_path):
    from taichi_aot.backends.cuda import _read
    from taichi_aot.metadata import read_module

    folder = str(tmp_path / "ptx")
    shutil.copytree(with_ptx["ptx"], folder)
    man, code = ptx_manifest(folder), read_module(folder).llvm
    assert code is not None  # the module's records and IR, as metadata/ read them once: the launcher opens no IR
    entries = code.kernels

    def read(name: str, k: dict, entry: dict | None = None, ir: bytes | None = None):
        kernels = {n: e for n, e in {**entries, name: entry or entries[name]}.items() if n != name or entry != {}}
        return _read(folder, replace(code, kernels=kernels, ir={**code.ir, **({name: ir} if ir else {})}), name, k,
                     "m")

    _, layout, rand = read("rnd", {**man["kernels"]["rnd"], "rand": False})
    assert rand and layout["args_size"] == 16  # random states by the IR, whatever the manifest says
    assert "no entry" in read("rangen", man["kernels"]["rangen"], {**entries["rangen"], "args_size": 48})
    # (the PTX takes 40 argument bytes: launched with more, it would read garbage)
    broken = copy.deepcopy(entries["rangen"])
    del broken["compiled_data"]["tasks"][0]["grid_dim"]
    assert "cannot be laid out" in read("rangen", man["kernels"]["rangen"], broken)
    assert "no entry for it" in read("rangen", man["kernels"]["rangen"], {})
    assert "other IR" in read("rangen", man["kernels"]["rangen"], ir=code.ir["rangen"] + b"\n; changed\n")
    os.remove(os.path.join(folder, man["kernels"]["rangen"]["ptx"]))
    assert "PTX cannot be read" in read("rangen", man["kernels"]["rangen"])
    for change, message in [(lambda d: d["runtime"].update(rand_state_size=2), "out of range"),
                            (lambda d: d["kernels"].update({"../x": d["kernels"]["rnd"]}), "malformed"),
                            (lambda d: d["refused"].update(printer=3), "not a text")]:
        bad = copy.deepcopy(man)
        change(bad)
        with pytest.raises(CorruptedDataError, match=message):
            read_manifest(json.dumps(bad).encode(), "m")


def test_hostile_metadata_leaves_a_kernel_on_libtaichi_when_ptx_is_made(cuda_modules, tmp_path):
    require_extra("llvmlite.binding", "ptx")
    folder = str(tmp_path / "tests")
    shutil.copytree(os.path.join(cuda_modules, "tests"), folder)
    path = os.path.join(folder, "metadata.json")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with open(path, "w", encoding="utf-8") as f:  # the first grid_dim, which a task of sum_i64 records, goes
        f.write(text.replace('"grid_dim": 1,', '"grid_dim": "x",', 1))
    man = add_to_folder(folder)
    assert len(man["refused"]) == 1 and "cannot be laid out" in next(iter(man["refused"].values()))
    assert man["compile"] == VERSION and len(man["kernels"]) == 10


def test_a_wrong_launcher_choice_is_a_typed_error_on_every_arch(modules, monkeypatch):
    from taichi_aot import ArgumentTypeError, InvalidArgumentError

    with Runtime(Arch.X64) as rt:
        path = modules.path(Arch.X64)
        assert rt.load_module(path, cuda_launcher="taichi").kernels["add"].launcher == "taichi"  # the old name
        assert rt.load_module(path, launcher="taichi").kernels["add"].launcher == "taichi"
        assert rt.load_module(path, launcher="x64", cuda_launcher="own").kernels["add"].launcher == "taichi"
        with pytest.raises(InvalidArgumentError, match="launcher must be one of auto, taichi, cuda, x64, vulkan, own"):
            rt.load_module(path, launcher="fast")
        with pytest.raises(InvalidArgumentError, match="cuda_launcher must be one of"):
            rt.load_module(path, cuda_launcher="fast")
        with pytest.raises(InvalidArgumentError, match="disagree"):
            rt.load_module(path, launcher="auto", cuda_launcher="taichi")
        with pytest.raises(ArgumentTypeError, match="cuda_launcher"):
            rt.load_module(path, cuda_launcher=1)
        with pytest.raises(ArgumentTypeError, match="launcher"):
            rt.load_module(path, launcher=1)
        monkeypatch.setenv("TAICHI_AOT_CUDA_LAUNCHER", "nope")
        with pytest.raises(InvalidArgumentError, match="TAICHI_AOT_CUDA_LAUNCHER"):
            rt.load_module(path)


def test_a_module_saved_without_ptx_gets_it_at_its_first_load_and_keeps_it(cuda_modules, tmp_path, monkeypatch):
    """A CUDA module as ``ti.aot.Module(ti.cuda).save`` writes it (no PTX): its PTX is made once, where llvmlite is,
    into the cache folder under a key of its IR and metadata, LLVM's and the step's versions; found there next
    time; the module's own folder untouched; a changed IR a new entry. Without llvmlite: why, for launchers()."""
    require_extra("llvmlite.binding", "ptx")
    from taichi_aot.ptx import NO_LLVMLITE, ptx_folder

    monkeypatch.setenv("TAICHI_AOT_CACHE", str(tmp_path / "cache"))
    module = str(tmp_path / "sim")
    shutil.copytree(os.path.join(cuda_modules, "sim"), module)
    before = sorted(os.listdir(module))
    made, why = ptx_folder(module)
    assert made is not None and why == "" and made.startswith(str(tmp_path / "cache"))
    assert sorted(os.listdir(module)) == before  # nothing written into the module
    manifest = ptx_manifest(made)
    assert manifest["kernels"] and set(manifest["kernels"]) <= set(kernel_entries(module))
    stamp = os.stat(os.path.join(made, MANIFEST)).st_mtime_ns
    assert ptx_folder(module) == (made, "") and os.stat(os.path.join(made, MANIFEST)).st_mtime_ns == stamp
    name = next(iter(manifest["kernels"]))
    with open(os.path.join(module, f"{name}.ll"), "a", encoding="utf-8") as f:
        f.write("\n; changed\n")
    again, _ = ptx_folder(module)
    assert again is not None and again != made
    script = ("import sys; sys.modules['llvmlite'] = None\n"
              "from taichi_aot.ptx import ptx_folder; print(ptx_folder(sys.argv[1])[1])")
    fresh = str(tmp_path / "fresh")
    shutil.copytree(os.path.join(cuda_modules, "bench"), fresh)
    out = subprocess.run([sys.executable, "-c", script, fresh], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TAICHI_AOT_CACHE": str(tmp_path / "other")})
    assert out.returncode == 0 and out.stdout.strip() == NO_LLVMLITE, out.stderr[-2000:]


def test_a_module_saved_without_ptx_runs_on_the_own_launcher_on_a_gpu(cuda_modules, tmp_path, monkeypatch):
    require_extra("llvmlite.binding", "ptx")
    if not capi.arch_status()[Arch.CUDA].available:
        pytest.skip("no CUDA here")
    monkeypatch.setenv("TAICHI_AOT_CACHE", str(tmp_path / "cache"))
    with Runtime(Arch.CUDA) as rt:
        plain = rt.load_module(os.path.join(cuda_modules, "bench"))  # as Taichi saved it: no PTX
        assert plain.launchers()["saxpy"] == "cuda"
        x = rt.ndarray_from_numpy(np.arange(4096, dtype=np.float32))
        y = rt.ndarray_from_numpy(np.ones(4096, np.float32))
        plain.kernels["saxpy"](x, y, 0.5)
        rt.wait()
        np.testing.assert_array_equal(y.to_numpy(), 0.5 * np.arange(4096, dtype=np.float32) + 1)
        lib = rt.load_module(os.path.join(cuda_modules, "bench"), cuda_launcher="taichi")
        assert lib.launchers()["saxpy"] == "taichi"


def test_cuda_driver_errors_are_named():
    """A CUDA driver error in a message is its name and number where the driver is here, its number elsewhere."""
    from taichi_aot._native import lib
    from taichi_aot.backends import launch_error
    from taichi_aot.drivers import cuda as _cuda

    named = "CUDA_ERROR_ILLEGAL_ADDRESS (700)" if capi.arch_status()[Arch.CUDA].available else "700"
    assert _cuda.error_name(700) == named
    for kind in (lib.TAICHI_AOT_KIND_CUDA_KERNEL, lib.TAICHI_AOT_KIND_KERNEL):  # the own launcher's; a wait before
        # libtaichi's launch made elsewhere
        assert str(launch_error(lib_code(700), "launch of kernel 'k'", kind)).endswith(f"the launch ({named})")


def lib_code(cuda_error: int) -> int:
    """The own launcher's code for a CUDA driver error (backends/cuda.c: TAICHI_AOT_CUDA_ERROR minus the CUresult)."""
    from taichi_aot._native import lib

    return lib.TAICHI_AOT_CUDA_ERROR - cuda_error
