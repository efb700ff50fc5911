"""An LLVM module's ndarray access read from its kernels' IR (metadata.llvm_access), where neither its metadata nor
its taichi_aot.json records it: written where the code may write the argument, read otherwise, unknown where the
reading cannot follow a pointer. The suite's CUDA modules (compiled by Taichi on a GPU, kept in tests/data) are read
here, on any machine."""

from __future__ import annotations

import os

import pytest

from taichi_aot import Access
from taichi_aot.metadata import llvm_access, read_module

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
        written = llvm_access.written_in(info.llvm.ir[name], info.llvm.layouts[name], arrays)
        assert written is not None, name
        for i, a in enumerate(kernel.args):
            if a.kind == "ndarray" and a.access is not None and a.access & Access.WRITE:
                assert i in written, (name, i)
                checked += 1
    assert checked >= 4


def _add(cuda_modules: str) -> tuple[str, str]:
    info = read_module(os.path.join(cuda_modules, "tests"))
    assert info.llvm is not None
    return info.llvm.ir["add"].decode(), info.llvm.layouts["add"]


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


def test_kernels_with_quoted_names_are_read(cuda_modules):
    """A kernel named in Cyrillic: its functions' names are quoted in the IR; its context is followed as any's."""
    found = _access(os.path.join(cuda_modules, "corpus", "names"))
    assert found["сложить"] == [RW, R]


#: Changes to add's IR (an outside review's reproducers of holes found in an earlier reading), each with what the
#: reading must answer: the context kept in a slot and reloaded in a block listed after its use (x still written);
#: the context reloaded as another type, or reached from a read-only field's address, or given to a pointer the
#: module does not name, or to a function through a cast of its type (unknown).
_ALLOCS = "allocs:\n  %3 = alloca i32, align 4\n  br label %entry\n"
_X_GEP = "  %10 = getelementptr %struct.RuntimeContext, %struct.RuntimeContext* %0, i32 0, i32 0"


def _reloaded_later(text: str) -> str:
    text = text.replace(_ALLOCS, "allocs:\n  %3 = alloca i32, align 4\n  %cslot = alloca %struct.RuntimeContext*, "
                        "align 8\n  store %struct.RuntimeContext* %0, %struct.RuntimeContext** %cslot, align 8\n"
                        "  br label %reload\n")
    text = text.replace(_X_GEP, _X_GEP.replace("* %0,", "* %ctx2,"))
    return text.replace("  store float %40, float* %20, align 4\n  br label %final\n}",
                        "  store float %40, float* %20, align 4\n  br label %final\n\nreload:\n  %ctx2 = load "
                        "%struct.RuntimeContext*, %struct.RuntimeContext** %cslot, align 8\n  br label %entry\n}")


def _retyped(text: str) -> str:
    text = text.replace(_ALLOCS, "allocs:\n  %3 = alloca i32, align 4\n  %cslot = alloca %struct.RuntimeContext*, "
                        "align 8\n  store %struct.RuntimeContext* %0, %struct.RuntimeContext** %cslot, align 8\n"
                        "  %cs8 = bitcast %struct.RuntimeContext** %cslot to i8**\n  %c8 = load i8*, i8** %cs8\n"
                        "  %ctx3 = bitcast i8* %c8 to %struct.RuntimeContext*\n  br label %entry\n")
    return text.replace(_X_GEP, _X_GEP.replace("* %0,", "* %ctx3,"))


def _from_a_field(text: str) -> str:
    anchor = "  %26 = load float, float* %25, align 4\n"
    return text.replace(anchor, anchor + "  %ap = bitcast float* %25 to float**\n  %ys = getelementptr float*, "
                        "float** %ap, i64 -1\n  %yd = load float*, float** %ys\n  store float 0.0, float* %yd\n")


def _host_pointer(text: str) -> str:
    return text.replace(_X_GEP, "  %rt = getelementptr %struct.LLVMRuntime, %struct.LLVMRuntime* %5, i32 0, i32 3\n"
                        "  %fp = load void (%struct.RuntimeContext*)*, void (%struct.RuntimeContext*)** %rt\n"
                        "  call void %fp(%struct.RuntimeContext* %0)\n" + _X_GEP)


def _cast_callee(text: str) -> str:
    return text.replace(_X_GEP, "  call void bitcast (void (i8*)* @poke to void (%struct.RuntimeContext*)*)("
                        "%struct.RuntimeContext* %0)\n" + _X_GEP) + "\ndefine internal void @poke(i8* %p) {\n" \
        "  ret void\n}\n"


@pytest.mark.parametrize("change, expect", [(_reloaded_later, {0}), (_retyped, None), (_from_a_field, None),
                                            (_host_pointer, None), (_cast_callee, None)])
def test_what_the_reading_cannot_follow_leaves_it_unknown(cuda_modules, change, expect):
    text, layout = _add(cuda_modules)
    changed = change(text)
    assert changed != text
    assert llvm_access.written(changed, layout, {0, 1}) == expect
