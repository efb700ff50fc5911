"""A gfx module's metadata is checked field by field (metadata/schema.py) and for agreement with itself
(metadata/consistency.py) before anything reads it: a wrong JSON type, an out-of-range value or metadata that
disagrees with itself is a CorruptedDataError naming the file and the field, from load_module, info and stubs
alike, never a crash, a hang, a bare Python error or a launch on the wrong memory."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import runpy
import shutil
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import taichi_aot as ta
from conftest import ROOT
from taichi_aot.cli import main
from taichi_aot.errors import CorruptedDataError


@functools.cache
def _sweep() -> SimpleNamespace:
    """benchmarks/fuzz_metadata.py, run by path as setup.py runs _bundle.py (the benchmarks folder is no package,
    and stays off sys.path)."""
    return SimpleNamespace(**runpy.run_path(os.path.join(ROOT, "benchmarks", "fuzz_metadata.py")))


def _edited(modules, tmp_path, edit, file: str = "metadata.json") -> str:
    """A copy of the Vulkan test module with ``edit`` applied to one of its JSON files."""
    folder = tmp_path / "m"
    shutil.copytree(modules.path(ta.Arch.VULKAN), folder)
    doc = json.loads((folder / file).read_text())
    edit(doc)
    (folder / file).write_text(json.dumps(doc))
    return str(folder)


def _kernel(doc: dict, name: str) -> dict:
    return next(k for k in doc["kernels"] if k["name"] == name)


def _arg(doc: dict, kernel: str, index: int) -> dict:
    return next(a["value"] for a in _kernel(doc, kernel)["ctx_attribs"]["arg_attribs_vec_"] if a["key"] == [index])


WRONG_TYPES = {
    "Infinity for an integer": (lambda d: _arg(d, "fill_i32", 0).update(field_dim=float("inf")),
                                r"kernels\[\d+\]\.ctx_attribs\.arg_attribs_vec_\[\d+\]\.value\.field_dim: expected an "
                                r"integer 0\.\.16, got Infinity"),
    "a number for a list": (lambda d: _kernel(d, "add").update(tasks_attribs=3),
                            r"kernels\[\d+\]\.tasks_attribs: expected a list of 0 to 1024 entries, got 3"),
    "a list for an object": (lambda d: _kernel(d, "add").update(ctx_attribs=[]),
                             r"kernels\[\d+\]\.ctx_attribs: expected an object, got a list of 0"),
    "2**70 for a thread count": (lambda d: _kernel(d, "add")["tasks_attribs"][0].update(
        advisory_total_num_threads=2**70),
        r"kernels\[\d+\]\.tasks_attribs\[0\]\.advisory_total_num_threads: expected an integer 0\.\.2147483647"),
    "a type kind Taichi does not write": (lambda d: _kernel(d, "add")["ctx_attribs"]["args_type_"].update(
        type_kind=7), r"kernels\[\d+\]\.ctx_attribs\.args_type_\.type_kind: expected an integer 0\.\.3, got 7"),
    "null for a name": (lambda d: _kernel(d, "add").update(name=None), r"kernels\[\d+\]\.name: expected a string"),
}


@pytest.mark.parametrize("case", list(WRONG_TYPES))
def test_a_wrong_json_type_names_the_file_and_the_field(vulkan, modules, tmp_path, case):
    edit, message = WRONG_TYPES[case]
    folder = _edited(modules, tmp_path, edit)
    with pytest.raises(CorruptedDataError, match="metadata.json: " + message):
        ta.metadata.read_module(folder)
    with ta.Runtime(vulkan) as rt, pytest.raises(CorruptedDataError, match=message):
        rt.load_module(folder)
    for argv in (["info", folder], ["info", "--json", folder], ["stubs", folder, "-o", "-"]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
        assert code == 2 and "Traceback" not in err.getvalue(), err.getvalue()[-2000:]
        assert "metadata.json: " in err.getvalue()


def _drop_dispatch_argument(graphs: list) -> None:
    graphs[0]["value"]["dispatches"][0]["symbolic_args"].pop()


INCONSISTENT = {
    # each ran with wrong values, or crashed, before it was checked
    "a graph dispatch binding fewer arguments than its kernel takes": (
        _drop_dispatch_argument, "graphs.json", r"binds \d arguments, the kernel takes \d"),
    "a kernel whose tasks were taken out": (lambda d: _kernel(d, "add").update(tasks_attribs=[]), "metadata.json",
                                            r"kernel 'add' runs tasks \[\], its copy 'add_c80_0'"),
    "a range-for task whose threads are not its range": (
        lambda d: _kernel(d, "add")["tasks_attribs"][0].update(
            range_for_attribs={"begin": 0, "end": 16, "const_begin": True, "const_end": True}),
        "metadata.json", r"the range 0\.\.16 in \d+ threads"),
    "an argument layout with no elements": (
        lambda d: _kernel(d, "add")["ctx_attribs"]["args_type_"]["content"].update(elements_=[]), "metadata.json",
        r"kernel 'add': an argument layout of \[\], not arg_0 \.\.\. arg_2"),
    "two kernels' argument lists swapped": (
        lambda d: (lambda a, b: (a.update(ctx_attribs=b["ctx_attribs"]), b.update(ctx_attribs=dict(a["ctx_attribs"]))))(
            _kernel(d, "add"), _kernel(d, "fill_i32")), "metadata.json", r"kernel '(add|fill_i32)'"),
    "an ndarray whose shape lost its dimensions": (
        lambda d: _kernel(d, "fill_i32")["ctx_attribs"]["args_type_"]["content"]["elements_"][0]["type"]["content"][
            "elements_"][0]["type"]["content"].update(elements_=[]), "metadata.json",
        r"argument 0: an array of 2 dimensions whose layout is no struct of 2 shape integers"),
    "an ndarray's dtype changed, its layout not": (lambda d: _arg(d, "fill_i32", 0).update(dtype=1), "metadata.json",
                                                    r"an ndarray of dtype 1 whose data pointer points to another"),
    "a texture whose extent lost its dimensions": (
        lambda d: _kernel(d, "tex_read")["ctx_attribs"]["args_type_"]["content"]["elements_"][0]["type"]["content"][
            "elements_"][0]["type"]["content"].update(elements_=[]), "metadata.json",
        r"argument 0: an array of 2 dimensions whose layout is no struct of 3 shape integers"),
    "a graph with no dispatches": (lambda g: g[0]["value"].update(dispatches=[]), "graphs.json",
                                   r"\[0\]\.value\.dispatches: expected a list of 1 to 4096 entries, got a list of 0"),
    "an exported kernel and its graph twin with other arguments": (
        lambda d: _arg(d, "accumulate", 2).update(element_shape=[]), "metadata.json",
        r"runs task 'accumulate_c\d+_0_0_t00' as kernel '\w+' does, with other arguments"),
    "a vector whose shape is not its layout's": (lambda d: _arg(d, "scale_vec3", 1).update(element_shape=[5]),
                                                 "metadata.json", r"a vector or matrix of shape \[5\] laid out as 3"),
    "a kernel without a copy whose tasks were taken out": (
        lambda d: _kernel(d, "iota_u8").update(tasks_attribs=[]), "metadata.json",
        r"no task runs iota_u8_c\d+_0_0_t00\.spv"),
    "a buffer of Taichi's own given no root": (
        lambda d: next(b for b in _kernel(d, "add")["tasks_attribs"][0]["buffer_binds"]
                       if b["buffer"]["type"] != 5)["buffer"].update(root_id=[]),
        "metadata.json", r"a buffer of type \d+ at binding \d+ with root \[\]"),
    "arguments not numbered 0, 1, ...": (lambda d: _kernel(d, "add")["ctx_attribs"]["arg_attribs_vec_"][0].update(
        key=[7]), "metadata.json", r"kernel 'add': arguments numbered .*not 0, 1, \.\.\. once each"),
    "argument offsets out of order": (
        lambda d: _kernel(d, "add")["ctx_attribs"]["args_type_"]["content"]["elements_"][0].update(offset=4000),
        "metadata.json", r"kernel 'add': argument offsets \[4000, "),
    "a scalar laid out as another type": (
        lambda d: next(e for e in _kernel(d, "add")["ctx_attribs"]["args_type_"]["content"]["elements_"]
                       if e["type"]["type_kind"] == 0)["type"]["content"].update(type=5),
        "metadata.json", r"a scalar of dtype 1 laid out as another type"),
    "a serial task with a range": (
        lambda d: next(t for k in d["kernels"] for t in k["tasks_attribs"] if t["task_type"] == 0).update(
            range_for_attribs={"begin": 0, "end": 4, "const_begin": True, "const_end": True}),
        "metadata.json", r"a serial task with a range or \d+ threads"),
    "a range-for task without its range": (lambda d: _kernel(d, "add")["tasks_attribs"][0].update(
        range_for_attribs=None), "metadata.json", r"a range-for task without its range"),
    "a dispatch of a kernel the module has not": (
        lambda g: g[0]["value"]["dispatches"][0].update(kernel_name="nope"), "graphs.json",
        r"dispatch of 'nope': no such kernel"),
    "a dispatch binding an array of another dtype": (
        lambda g: next(a for a in g[0]["value"]["dispatches"][0]["symbolic_args"] if a["tag"] == 2).update(
            dtype_id=3), "graphs.json", r"bound as another kind, dtype or dimension"),
    "an argument named twice": (lambda d: _arg(d, "add", 1).update(name="_x"), "metadata.json",
                                r"arguments named \['x', 'x', 'a'\], a name twice"),
}


@pytest.mark.parametrize("case", list(INCONSISTENT))
def test_metadata_that_disagrees_with_itself_is_refused(vulkan, modules, tmp_path, case):
    edit, file, message = INCONSISTENT[case]
    folder = _edited(modules, tmp_path, edit, file)
    with ta.Runtime(vulkan) as rt:
        with pytest.raises(CorruptedDataError, match=message):
            rt.load_module(folder)
        mod = rt.load_module(modules.path(ta.Arch.VULKAN))  # the runtime carries on
        x = rt.ndarray((1, 2), np.int32)
        mod.kernels["fill_i32"](x, 3)
        assert x.to_numpy().tolist() == [[3, 4]]


def test_every_value_replaced_gives_a_typed_error_or_the_right_answer(vulkan, modules):
    """A seeded sample of 250 variants (benchmarks/fuzz_metadata.py runs all ~20,000): one value of
    metadata.json or graphs.json replaced by Infinity, -1, 2**70, "x", [], {} or null; load, launch every kernel
    and graph with the undamaged module's inputs, info, info --json and stubs, in a worker child. Each variant
    gives a typed error or the undamaged module's results: no crash, hang, bare Python error or wrong value."""
    found = _sweep().sweep(modules.path(ta.Arch.VULKAN), sample=250, seed=7, timeout=60)
    bad = [r for r in found if r["outcome"] not in ("typed", "right")]
    assert not bad, bad[:5]
    assert {r["outcome"] for r in found} == {"typed", "right"}


def test_llvm_metadata_of_the_wrong_type_is_a_typed_error(modules):
    """The LLVM format's metadata.json (Taichi's text serializer, read by our parser for info, stubs and the
    argument checks; C reads metadata.tcb): a seeded sample of its values replaced by each of Infinity, -1,
    2**70, "x", [], {} and null gives the module's metadata or a CorruptedDataError, never another exception."""
    import random

    from taichi_aot.metadata.llvm import _llvm

    with open(os.path.join(modules.path(ta.Arch.X64), "metadata.json")) as f:
        tree = ta.metadata.parse_text(f.read())
    sweep = _sweep()
    variants = [(p, v) for p in sweep.paths(tree) for v in sweep.REPLACEMENTS.values()]
    for path, value in random.Random(3).sample(variants, 800):
        try:
            _llvm(sweep.replaced(tree, path, value))
        except CorruptedDataError:
            pass


def test_a_damaged_metadata_tcb_is_a_typed_error_or_runs_right(modules):
    """libtaichi_c_api reads an LLVM module's metadata.tcb (a binary copy of metadata.json): seeded sets of 1 and
    4 flipped bits in the x64 test module's give, from load, launches, info and stubs, a typed error (the first
    load runs in a child process, which meets the crash) or the undamaged module's results: no signal, no hang,
    no wrong value. (benchmarks/fuzz_metadata.py --tcb N sweeps more, or every byte with --tcb 0.)"""
    sweep = _sweep()
    folder = modules.path(ta.Arch.X64)
    todo = sweep.tcb_variants(folder, 4, 1, seed=11) + sweep.tcb_variants(folder, 4, 4, seed=12)
    found = sweep.sweep(folder, timeout=60, todo=todo)
    bad = [r for r in found if r["outcome"] not in ("typed", "right")]
    assert not bad and len(found) == 8, bad


EDGES = """
import sys
import taichi as ti
ti.init(arch=ti.vulkan, log_level=ti.ERROR, offline_cache=False)
@ti.kernel
def empty(x: ti.types.ndarray(dtype=ti.f32, ndim=1)):
    pass
@ti.kernel
def none(x: ti.types.ndarray(dtype=ti.f32, ndim=1)):
    for i in range(0):
        x[i] = 1.0
@ti.kernel
def first3(x: ti.types.ndarray(dtype=ti.f32, ndim=1)) -> ti.types.vector(3, ti.f32):
    x[0] += 1.0
    return ti.Vector([x[0], x[1], x[2]])
module = ti.aot.Module(ti.vulkan)
for k in (empty, none, first3):
    module.add_kernel(k)
module.save(sys.argv[1])
"""


def test_what_taichi_writes_at_the_edges_loads_and_runs(vulkan, tmp_path):
    """Modules Taichi 1.7.4 writes that the schema once refused: a kernel with an empty body (no tasks), a loop
    over range(0) (no threads), a kernel returning a vector (a tensor type: the module loads, and the kernel, whose
    value Vulkan cannot give back, is refused at its look-up saying so)."""
    import subprocess

    out, script = tmp_path / "edges", tmp_path / "edges.py"  # Taichi reads a kernel's source from its file
    out.mkdir()
    script.write_text(EDGES)
    proc = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with ta.Runtime(vulkan) as rt:
        mod = rt.load_module(str(out))
        x = rt.ndarray_from_numpy(np.arange(4, dtype=np.float32))
        mod.kernels["empty"](x)
        mod.kernels["none"](x)
        assert mod.launchers()["first3"] == "vulkan"  # the own Vulkan launch gives what it returns
        assert mod.kernels["first3"](x).tolist() == [1.0, 1.0, 2.0]
        rt.wait()
        assert x.to_numpy().tolist() == [1.0, 1.0, 2.0, 3.0]
        library = rt.load_module(str(out), launcher="taichi")
        with pytest.raises(ta.NotSupportedError, match="returns values"):
            library.kernels["first3"]
        assert library.launchers()["first3"].startswith("refused: returns values")
