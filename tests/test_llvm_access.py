"""An LLVM module's ndarray access read from its kernels' IR (metadata.llvm_access), where neither its metadata nor
its taichi_aot.json records it: written where the code may write the argument, read otherwise, unknown where the
reading cannot follow a pointer. The suite's CUDA modules (compiled by Taichi on a GPU, kept in tests/data) are read
here, on any machine."""

from __future__ import annotations

import os

import pytest

from taichi_aot import Access
from taichi_aot.metadata import llvm_access, llvm_code, read_module

R, RW = Access.READ, Access.READ_WRITE


def _access(folder: str) -> dict[str, list[Access | None]]:
    info = read_module(folder)
    return {k.name: [a.access for a in k.args if a.kind == "ndarray"] for k in info.kernels.values()}


def test_the_suites_kernels_read_what_they_read_and_write_what_they_write(cuda_modules):
    found = _access(os.path.join(cuda_modules, "tests"))
    assert found["add"] == [RW, R]  # x[i] = x[i] + a * y[i]
    assert found["sum_i64"] == [R, RW]  # out[0] += x[i], an atomic
    assert found["accumulate"] == [RW, R, RW]  # total[None] += x[i]; v[None] = v[None] * 2
    assert found["fill_i32"] == [RW] and found["iota_u8"] == [RW]
    sim = _access(os.path.join(cuda_modules, "sim"))
    assert sim["p2g"] == [R, R, RW, RW] and sim["stats"] == [R, R, RW] and sim["g2p"] == [RW, RW, R]


def test_never_unwritten_where_taichi_found_a_write(cuda_modules):
    """The autodiff module's taichi_aot.json records what a gfx build of it found; what the IR says of the same
    kernels is never "not written" where that found a write, and says "written" of each argument it found written."""
    info = read_module(os.path.join(cuda_modules, "autodiff"))
    assert info.llvm is not None
    checked = 0
    for name, kernel in info.kernels.items():
        arrays = {i for i, a in enumerate(kernel.args) if a.kind == "ndarray"}
        written = llvm_access.written_in(info.llvm.ir[name], llvm_code.layout_of(info.llvm.kernels[name], name),
                                         arrays)
        assert written is not None, name
        for i, a in enumerate(kernel.args):
            if a.kind == "ndarray" and a.access is not None and a.access & Access.WRITE:
                assert i in written, (name, i)
                checked += 1
    assert checked >= 4


def _add(cuda_modules: str) -> tuple[str, str]:
    info = read_module(os.path.join(cuda_modules, "tests"))
    assert info.llvm is not None
    return info.llvm.ir["add"].decode(), llvm_code.layout_of(info.llvm.kernels["add"], "add")


@pytest.mark.parametrize("change, expect", [
    ("store", None),  # y's data pointer stored into memory: not followed there
    ("unknown", None),  # the context given to a function the module neither defines nor Taichi's runtime names
    ("atomic", {0, 1}),  # an atomic on y's data
    ("call", {0, 1}),  # y's data given to a function
])
def test_what_the_reading_does_not_follow_leaves_it_unknown_or_written(cuda_modules, change, expect):
    text, layout = _add(cuda_modules)
    assert llvm_access.written(text, layout, {0, 1}) == {0}
    load = next(line for line in text.splitlines() if "= load float*, float** %31" in line)
    y = load.split(" = ")[0].strip()
    extra = {"store": f"  %kept = alloca float*\n  store float* {y}, float** %kept, align 8",
             "atomic": f"  %old = atomicrmw fadd float* {y}, float 1.0 seq_cst",
             "call": f"  call void @consume(float* {y})", "unknown": ""}[change]
    changed = text.replace(load, load + "\n" + extra) if extra else text
    if change == "unknown":
        call = "call %struct.LLVMRuntime* @RuntimeContext_get_runtime(%struct.RuntimeContext* %context)"
        assert call in changed
        changed = changed.replace(call, call.replace("@RuntimeContext_get_runtime", "@mystery"), 1)
        changed += "\ndeclare %struct.LLVMRuntime* @mystery(%struct.RuntimeContext*)\n"
    if change == "call":
        changed += "\ndeclare void @consume(float*)\n"
    assert llvm_access.written(changed, layout, {0, 1}) == expect
