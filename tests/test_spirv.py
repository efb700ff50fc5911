"""A Vulkan module's SPIR-V is checked at load (metadata/spirv.py): damage inside the instruction stream that
keeps the module's structure, bindings and sizes (an operand naming the wrong id, operands flipped, a branch
or merge target moved) crashed the driver at launch; it is refused with CorruptedDataError naming the task's
file, its kernel and the instruction, and what Taichi writes passes."""

from __future__ import annotations

import io
import os
import re
import shutil
import struct
import subprocess
import sys
import zipfile
from collections.abc import Callable

import numpy as np
import pytest

import taichi_aot as ta
from conftest import ROOT
from taichi_aot import Runtime, capi, metadata
from taichi_aot.metadata import spirv

Words = list  # a module's words, changed in place
Inst = tuple  # (word offset, opcode, operand words)

CHAIN, LOAD, STORE, IADD, LABEL, BRANCH, LOOP_MERGE, DECORATE, BOOL, INT, STRUCT, POINTER = (
    65, 61, 62, 128, 248, 249, 246, 71, 20, 21, 30, 32)  # opcodes
CAPABILITY, IMPORT, MEMORY_MODEL, ENTRY, CONDITIONAL, EXTENSION = 17, 11, 14, 15, 250, 10
BINDING, DESCRIPTOR_SET, BUILTIN = 33, 34, 11  # decorations


def _insts(words: Words) -> list[Inst]:
    out, i = [], 5
    while i < len(words):
        count = words[i] >> 16
        out.append((i, words[i] & 0xFFFF, words[i + 1:i + count]))
        i += count
    return out


def _first(insts: list[Inst], op: int) -> Inst:
    return next(inst for inst in insts if inst[1] == op)


def _defined(insts: list[Inst], op: int) -> int:
    """The result id of the first instruction ``op`` (types: their first operand; the others: their second)."""
    _, _, w = _first(insts, op)
    return w[0] if op in (STRUCT, POINTER, LABEL, BOOL, INT) else w[1]


def _set(words: Words, inst: Inst, operand: int, value: int) -> None:
    words[inst[0] + 1 + operand] = value


def _swap(words: Words, inst: Inst, a: int, b: int) -> None:
    words[inst[0] + 1 + a], words[inst[0] + 1 + b] = inst[2][b], inst[2][a]


def _decoration(insts: list[Inst], kind: int) -> Inst:
    return next(inst for inst in insts if inst[1] == DECORATE and inst[2][1] == kind)


def _nops(words: Words, inst: Inst) -> None:
    """The instruction made OpNops, as many as its words."""
    words[inst[0]:inst[0] + 1 + len(inst[2])] = [1 << 16] * (1 + len(inst[2]))


def _delete(words: Words, inst: Inst) -> None:
    """The instruction taken out of the module."""
    del words[inst[0]:inst[0] + 1 + len(inst[2])]


def _work_group(insts: list[Inst]) -> Inst:
    """The constant composite the WorkgroupSize built-in decorates."""
    size = next(w[0] for _, op, w in insts if op == DECORATE and w[1:3] == [BUILTIN, 25])
    return next(inst for inst in insts if inst[1] == 44 and inst[2][1] == size)  # OpConstantComposite


def _work_group_constant(insts: list[Inst]) -> Inst:
    """The constant of the first dimension of the WorkgroupSize built-in."""
    first = _work_group(insts)[2][2]
    return next(inst for inst in insts if inst[1] == 43 and inst[2][1] == first)


def _text(word: str) -> int:
    return int.from_bytes(word.encode(), "little")


def _loop_exit_made_a_loop(words: Words, insts: list[Inst]) -> None:
    """The conditional branch that leaves the first loop for its merge block goes to its other target instead."""
    merge = _first(insts, LOOP_MERGE)[2][0]
    branch = next(inst for inst in insts if inst[1] == CONDITIONAL and merge in inst[2][1:3])
    targets = list(branch[2][1:3])
    _set(words, branch, 1 + targets.index(merge), targets[1 - targets.index(merge)])


def _array_chain(insts: list[Inst]) -> Inst:
    """The first access chain to an array's element: (type, result, base, 0, index)."""
    return next(inst for inst in insts if inst[1] == CHAIN and len(inst[2]) == 5)


def _undefined(words: Words, insts: list[Inst]) -> int:
    used = {w[1] for _, _, w in insts if len(w) > 1} | {w[0] for _, _, w in insts if w}
    return next(x for x in range(words[3] - 1, 0, -1) if x not in used)


#: Damage to the add kernel's SPIR-V that crashed the process (in the driver, at launch) before it was checked.
DAMAGE: dict[str, Callable[[Words, list[Inst]], None]] = {
    "a type where a value is due": lambda w, i: _set(w, _first(i, LOAD), 2, _first(i, LOAD)[2][0]),
    "an access chain into a number": lambda w, i: _set(w, _array_chain(i), 2, _first(i, LOAD)[2][1]),
    "an id nothing defines": lambda w, i: _set(w, _first(i, IADD), 2, _undefined(w, i)),
    "an id beyond the bound": lambda w, i: _set(w, _first(i, IADD), 3, w[3] + 7),
    "a label where a value is due": lambda w, i: _set(w, _first(i, STORE), 1, _defined(i, LABEL)),
    "a store's operands flipped": lambda w, i: _swap(w, _first(i, STORE), 0, 1),
    "a load's result type replaced": lambda w, i: _set(w, _first(i, LOAD), 0, _defined(i, BOOL)),
    "an id defined twice": lambda w, i: _set(w, _first(i, IADD), 1, _first(i, LOAD)[2][1]),
    "a loop's merge and continue targets flipped": lambda w, i: _swap(w, _first(i, LOOP_MERGE), 0, 1),
    "a back edge moved to the entry block": lambda w, i: _set(w, [x for x in i if x[1] == BRANCH][-1], 0,
                                                             _defined(i, LABEL)),
    "a Block decoration moved to an integer type": lambda w, i: _set(
        w, next(inst for inst in i if inst[1] == DECORATE and inst[2][1] == 2), 0, _defined(i, INT)),
    "a struct member made a pointer": lambda w, i: _set(w, _first(i, STRUCT), 1, _defined(i, POINTER)),
    # found by benchmarks/fuzz_spirv.py: each crashed lavapipe (a pipeline it refused, which the library then used,
    # or a shader it ran) or hung the process
    "an unknown decoration": lambda w, i: _set(w, _decoration(i, BINDING), 1, 0x4A6FCA7D),
    "a built-in a compute shader has not": lambda w, i: _set(w, _decoration(i, BUILTIN), 2, 23),
    "a built-in input left undecorated": lambda w, i: _nops(w, _decoration(i, BUILTIN)),
    "a descriptor set after a gap": lambda w, i: _set(w, _decoration(i, DESCRIPTOR_SET), 2, 1 << 25),
    "an unknown capability": lambda w, i: _set(w, _first(i, CAPABILITY), 0, 0xFCEA1B9E),
    "an instruction set of another name": lambda w, i: _set(w, _first(i, IMPORT), 1, _text("GLL.")),
    "another memory model": lambda w, i: _set(w, _first(i, MEMORY_MODEL), 0, 1),
    "the entry point renamed": lambda w, i: _set(w, _first(i, ENTRY), 2, _text("mbin")),
    "an unknown loop control": lambda w, i: _set(w, _first(i, LOOP_MERGE), 2, 0x4000),
    # found by the same run once SPIRV-Tools' validator took over the check: each crashed lavapipe
    "a built-in's decoration taken out": lambda w, i: _delete(w, _decoration(i, BUILTIN)),
    "a work group of 2**31 invocations": lambda w, i: _set(w, _work_group_constant(i), 2, 1 << 31),
    # found on the H100: a work group of (1, 1, 128) lost the device (at most 64 along z there)
    "a work group's x and z swapped": lambda w, i: _swap(w, _work_group(i), 2, 4),
}


#: What refuses each damage: SPIRV-Tools' validator, or one of the package's own rules (spirv_rules.interface) for
#: what libtaichi_c_api's pipelines take for granted.
VALIDATOR = r"SPIRV-Tools' validator \(vulkan1.1\) refuses it: "
REFUSALS = {
    "a descriptor set after a gap": r"descriptor sets \[0, 33554432\]",
    "the entry point renamed": "no GLCompute entry point named main",
    "a built-in's decoration taken out": r"instruction \d+ \(OpVariable\): an Input variable that is no built-in",
    "a work group of 2**31 invocations": r"a work group of \(2147483648, ",
    "a work group's x and z swapped": r"a work group of \(1, 1, 128\)",
}


def _damaged(source: str, tmp_path, damage: Callable[[Words, list[Inst]], None]) -> tuple[str, str]:
    """A copy of the module with the add kernel's SPIR-V damaged; (its folder, the damaged file's name)."""
    folder = tmp_path / "m"
    shutil.copytree(source, folder)
    name = next(n for n in os.listdir(folder) if n.startswith("add_c") and n.endswith(".spv"))
    code = (folder / name).read_bytes()
    words = list(struct.unpack(f"<{len(code) // 4}I", code))
    damage(words, _insts(words))
    (folder / name).write_bytes(struct.pack(f"<{len(words)}I", *words))
    return str(folder), name


@pytest.fixture(scope="module")
def vulkan_rt(vulkan):
    with Runtime(vulkan) as rt:
        yield rt


def _add_runs(rt: Runtime, path: str) -> None:
    mod = rt.load_module(path)
    x, y = rt.ndarray((4,), np.float32), rt.ndarray_from_numpy(np.arange(4, dtype=np.float32))
    mod.kernels["add"](x, y, 2.0)
    rt.wait()
    np.testing.assert_array_equal(x.to_numpy(), 2.0 * np.arange(4))


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_spirv_is_refused_at_load(vulkan_rt, modules, tmp_path, damage):
    good = modules.path(ta.Arch.VULKAN)
    folder, name = _damaged(good, tmp_path, DAMAGE[damage])
    with pytest.raises(ta.CorruptedDataError,
                       match=rf"{name} \(kernel 'add', task '{name[:-4]}'\): ({REFUSALS.get(damage, VALIDATOR)})"):
        vulkan_rt.load_module(folder)
    _add_runs(vulkan_rt, good)  # the process and the runtime carry on


def test_a_kernel_that_would_never_end_is_refused_at_look_up(vulkan_rt, modules, tmp_path):
    """A loop whose exit was moved onto its body (found by the fuzz run: lavapipe hung, NVIDIA's driver lost the
    device) is well formed, as is what Taichi writes for ``while True:`` without a break: the module loads, and
    looking up that kernel is refused, naming why; the module's other kernels run."""
    folder, _ = _damaged(modules.path(ta.Arch.VULKAN), tmp_path, _loop_exit_made_a_loop)
    mod = vulkan_rt.load_module(folder)
    with pytest.raises(ta.NotSupportedError, match=r"kernel 'add' cannot run .* never ends"):
        mod.kernels["add"]
    x = vulkan_rt.ndarray((1, 2), np.int32)
    mod.kernels["fill_i32"](x, 1)
    assert x.to_numpy().tolist() == [[1, 2]]


def _shared_memory(floats: int, spec: bool = False) -> Callable[[Words, list[Inst]], None]:
    """The entry function stores into a Workgroup array of ``floats`` f32 (``spec``: its length a specialization
    constant, whose value a pipeline may change): valid SPIR-V, which SPIRV-Tools' validator takes (it knows no
    device's limit on shared memory)."""

    def damage(words: Words, insts: list[Inst]) -> None:
        uint = next(w[0] for _, op, w in insts if op == INT and w[1:] == [32, 0])
        f32 = next(w[0] for _, op, w in insts if op == 22 and w[1:] == [32])
        n = words[3]
        length, array, pointer, var, element, zero, one, chain = range(n, n + 8)
        words[3] = n + 8
        declared = [(50 if spec else 43, [uint, length, floats]), (28, [array, f32, length]), (32, [pointer, 4, array]),
                    (59, [pointer, var, 4]), (32, [element, 4, f32]), (43, [uint, zero, 0]),
                    (43, [f32, one, 0x3F800000])]
        stored = [(65, [element, chain, var, zero]), (62, [chain, one])]
        at_label = _first(insts, LABEL)[0] + 2
        at_function = _first(insts, 54)[0]
        words[at_label:at_label] = [x for op, w in stored for x in ((len(w) + 1) << 16 | op, *w)]
        words[at_function:at_function] = [x for op, w in declared for x in ((len(w) + 1) << 16 | op, *w)]

    return damage


REFUSED_LOOK_UP = """
import sys
import numpy as np
import taichi_aot as ta
rt = ta.Runtime(ta.Arch.VULKAN)
mod = rt.load_module(sys.argv[1])
for _ in range(2):
    try:
        mod.kernels["add"]
        print("made")
    except ta.NotSupportedError as e:
        print("refused:", e)
x = rt.ndarray((1, 3), np.int32)
mod.kernels["fill_i32"](x, 7)
print(x.to_numpy().tolist())
"""


@pytest.mark.parametrize("floats", [1 << 14, 1 << 28, "spec"])
def test_more_shared_memory_than_drivers_give_is_refused_at_look_up(modules, tmp_path, floats):
    """Valid SPIR-V declaring 64 KiB or 1 GiB of shared memory: NVIDIA's driver made its pipeline (an H100) and
    failed the submit that launched it, on which libtaichi_c_api 1.7.4 aborts the process (48 KiB ran). The module
    loads; looking the kernel up is refused, at every look-up, naming why; the module's other kernels run. (In a
    child process: the look-up watches stderr, for pipelines a driver refuses, only while no other Python thread
    runs.)"""
    spec = floats == "spec"  # 1 MiB by a specialization constant (read by its default, which pipelines keep)
    folder, _ = _damaged(modules.path(ta.Arch.VULKAN), tmp_path, _shared_memory(1 << 18 if spec else floats, spec))
    proc = subprocess.run([sys.executable, "-c", REFUSED_LOOK_UP, folder], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[-1] == "[[7, 8, 9]]"
    size = 4 * (1 << 18 if spec else floats)
    assert all(re.match(rf"refused: .*kernel 'add' cannot run .*{size} bytes of shared memory", x)
               for x in lines[:2]), lines


def test_a_look_up_works_with_no_stderr(modules):
    """A kernel's look-up watches what the library writes to file descriptor 2; a process that closed it (a
    daemon) looks kernels up as any other."""
    script = ("import os, sys, taichi_aot as ta\n"
              "rt = ta.Runtime(ta.Arch.VULKAN)\nmod = rt.load_module(sys.argv[1])\nos.close(2)\n"
              "print(mod.kernels['add'].name)\n")
    proc = subprocess.run([sys.executable, "-c", script, modules.path(ta.Arch.VULKAN)], capture_output=True,
                          text=True, timeout=120)
    assert (proc.returncode, proc.stdout.strip()) == (0, "add"), proc.stderr[-2000:]


def test_the_flat_api_refuses_damaged_spirv_too(vulkan_rt, modules, tmp_path):
    folder, _ = _damaged(modules.path(ta.Arch.VULKAN), tmp_path, DAMAGE["a store's operands flipped"])
    with pytest.raises(ta.CorruptedDataError, match="OpStore"):
        capi.load_aot_module(vulkan_rt.handle, folder)
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        for n in sorted(os.listdir(folder)):
            z.write(os.path.join(folder, n), n)
    with pytest.raises(ta.CorruptedDataError, match="OpStore"):
        vulkan_rt.load_module(archive.getvalue())  # a .tcm's bytes


def test_what_taichi_writes_passes(vulkan_rt, modules):
    """Every task of the test module, the demo and the physics example passes the check and loads."""
    sources = [modules.path(ta.Arch.VULKAN)]
    for path in (os.path.join(ROOT, "taichi_aot", "cli", "demo.tcm"), os.path.join(ROOT, "examples", "physics.tcm")):
        with zipfile.ZipFile(path) as z:
            sources.append(z.read("vulkan.tcm"))
    for source in sources:
        info = metadata.read_module(source)
        assert info.kernels
    folder = sources[0]
    for name in os.listdir(folder):
        if name.endswith(".spv"):
            with open(os.path.join(folder, name), "rb") as f:
                code = f.read()
            words = struct.unpack(f"<{len(code) // 4}I", code)
            spirv.check(words, spirv.instructions(words, name), name)
    vulkan_rt.load_module(folder)


def test_kernels_of_many_shapes_pass_and_run(vulkan_rt, tmp_path):
    """What Taichi writes for loops with break and continue, while loops, functions returning from inside loops,
    matrices, math, bit operations, every width, atomics and textures (tests/spirv_zoo.py) passes the check, the
    driver makes every pipeline, and each kernel runs (``grid`` returns its total: the own Vulkan launch gives it)."""
    out = tmp_path / "zoo"
    out.mkdir()
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "spirv_zoo.py"), str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    mod = vulkan_rt.load_module(str(out))
    assert sorted(mod.kernel_names()) == ["bits", "grid", "loops", "maths", "textures"]
    n = 16
    x = vulkan_rt.ndarray_from_numpy(np.linspace(-2, 2, n, dtype=np.float32))
    y = vulkan_rt.ndarray((n,), np.int32)
    mod.kernels["loops"](x, y)
    steps = [0, 1, 7, 2, 5, 8, 16, 3, 19, 6, 14, 9, 9, 17, 17, 4]  # the Collatz steps of 1..16
    assert (y.to_numpy() >= np.array(steps)).all()
    m, v = vulkan_rt.ndarray((n,), np.float32, (3, 3)), vulkan_rt.ndarray((n,), np.float32, (3,))
    mod.kernels["maths"](x, m, v)
    a = vulkan_rt.ndarray_from_numpy(np.ones((3, 4), np.float32))
    assert mod.kernels["grid"](a, 2.0, 4) == 24.0  # its total, which the own Vulkan launch gives back
    expect = np.full((3, 4), 2.0, np.float32)
    expect[0, 0] += 0 + 1 + 2 + 3
    expect[0, 1] += 4
    np.testing.assert_array_equal(a.to_numpy(), expect)
    for name in ("bits", "textures"):
        assert mod.kernels[name].signature  # its pipelines were made
    vulkan_rt.wait()


F64_EXTREMA = """
import sys
import taichi as ti
ti.init(arch=ti.vulkan, log_level=ti.ERROR, offline_cache=False)
@ti.kernel
def extrema_f64(x: ti.types.ndarray(dtype=ti.f64, ndim=1), out: ti.types.ndarray(dtype=ti.f64, ndim=1)):
    for i in x:
        ti.atomic_min(out[0], x[i])
        ti.atomic_max(out[1], x[i])
@ti.kernel
def smallest_u8(x: ti.types.ndarray(dtype=ti.u8, ndim=1)):
    for i in x:
        ti.atomic_min(x[0], x[i])
@ti.kernel
def total_f64(x: ti.types.ndarray(dtype=ti.f64, ndim=1), out: ti.types.ndarray(dtype=ti.f64, ndim=1)):
    for i in x:
        out[0] += x[i]
x = ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "x", ti.f64, ndim=1)
out = ti.graph.Arg(ti.graph.ArgKind.NDARRAY, "out", ti.f64, ndim=1)
builder = ti.graph.GraphBuilder()
builder.dispatch(total_f64, x, out)
builder.dispatch(extrema_f64, x, out)
module = ti.aot.Module(ti.vulkan, caps=["spirv_has_int8", "spirv_has_int64", "spirv_has_float64"])
module.add_kernel(extrema_f64)
module.add_kernel(smallest_u8)
module.add_kernel(total_f64)
module.add_graph("both", builder.compile())
module.save(sys.argv[1])
"""


def test_taichis_f64_atomic_min_and_max_are_refused_per_kernel(vulkan_rt, tmp_path):
    """Taichi 1.7.4 writes f64 (and f16) atomic min and max on Vulkan as GLSL's FMin or FMax with an f32 result,
    bit-cast to the float's width: NVIDIA's driver crashed the process when such a kernel ran (an H100), lavapipe's
    when the f16 pipeline was made; and atomics on 8- and 16-bit integers, which Vulkan does not have. The module
    loads; looking up such a kernel, or a graph that dispatches it, is refused naming why (object layer and flat
    API alike), and the module's other kernels run."""
    out, script = tmp_path / "extrema", tmp_path / "extrema.py"  # Taichi reads a kernel's source from its file
    out.mkdir()
    script.write_text(F64_EXTREMA)
    proc = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    info = metadata.read_module(str(out))
    assert set(info.refused()) == {("kernel", "extrema_f64"), ("kernel", "smallest_u8"), ("graph", "both")}
    mod = vulkan_rt.load_module(str(out))
    with pytest.raises(ta.NotSupportedError, match="atomic min and max of f16 and f64"):
        mod.kernels["extrema_f64"]
    with pytest.raises(ta.NotSupportedError, match="atomic min and max of f16 and f64"):
        mod.graphs["both"]
    with pytest.raises(ta.NotSupportedError, match="an atomic on an integer of 8 bits"):
        mod.kernels["smallest_u8"]  # NVIDIA's compiler crashed the process making this pipeline (an H100)
    flat = capi.load_aot_module(vulkan_rt.handle, str(out))
    with pytest.raises(ta.NotSupportedError, match="kernel 'extrema_f64' cannot run on this backend"):
        capi.get_aot_module_kernel(flat, "extrema_f64")
    assert capi.get_aot_module_kernel(flat, "total_f64")
    capi.destroy_aot_module(flat)
    x = vulkan_rt.ndarray_from_numpy(np.arange(5, dtype=np.float64))
    total = vulkan_rt.ndarray((2,), np.float64)
    mod.kernels["total_f64"](x, total)
    assert total.to_numpy()[0] == 10.0


def test_the_validator_sees_what_taichi_leaves_out_and_the_driver_gets_the_module_unchanged(vulkan_rt, modules):
    """Taichi 1.7.4 writes a 64-bit atomic without declaring ``Int64Atomics`` (sum_i64 of the test module): the
    validator refuses the module as written and takes the copy ``taichi_fixes`` makes; a float-atomic capability
    without its extension gets the extension in the copy. The module loads, the driver runs it from its own
    unchanged bytes, and the kernel's result is right."""
    folder = modules.path(ta.Arch.VULKAN)
    name = next(n for n in os.listdir(folder) if n.startswith("sum_i64_c") and n.endswith(".spv"))
    with open(os.path.join(folder, name), "rb") as f:
        code = f.read()
    words = struct.unpack(f"<{len(code) // 4}I", code)
    insts = spirv.instructions(words, name)
    assert "64-bit atomics require the Int64Atomics capability" in spirv.validate(words, name)
    fixed = spirv.taichi_fixes(words, insts)
    assert spirv.validate(fixed, name) == "" and len(fixed) == len(words) + 2  # one OpCapability more
    float_add = (2 << 16 | CAPABILITY, 6033)  # OpCapability AtomicFloat32AddEXT, with no OpExtension
    plain = list(fixed[:5])  # the module without its float-atomic extensions (built where the device has them)
    for at, op, operands in _insts(list(fixed)):
        if not (op == EXTENSION and b"atomic_float" in struct.pack(f"<{len(operands)}I", *operands)):
            plain += fixed[at:at + 1 + len(operands)]
    with_float = (*plain[:5], *float_add, *plain[5:])
    assert "Capability AtomicFloat32AddEXT is not allowed" in spirv.validate(with_float, name)
    refixed = spirv.taichi_fixes(with_float, spirv.instructions(with_float, name))
    assert spirv.validate(refixed, name) == ""
    assert spirv.taichi_fixes(refixed, spirv.instructions(refixed, name)) == refixed  # nothing more to add
    mod = vulkan_rt.load_module(folder)
    x = vulkan_rt.ndarray_from_numpy(np.arange(10, dtype=np.int64))
    out = vulkan_rt.ndarray((1,), np.int64)
    mod.kernels["sum_i64"](x, out)
    assert out.to_numpy()[0] == 45


def test_a_loop_continuing_into_another_construct_is_refused_at_look_up(vulkan_rt):
    """The demo's seed task with its outer loop's continue target moved onto the inner loop's header: valid SPIR-V
    (SPIRV-Tools takes it), on which NVIDIA's compiler crashed the process making the pipeline (an H100, found by
    benchmarks/fuzz_spirv.py). The module loads; looking the kernel up is refused naming why; the others run."""
    with zipfile.ZipFile(os.path.join(ROOT, "taichi_aot", "cli", "demo.tcm")) as z:
        part = z.read("vulkan.tcm")
    damaged = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(part)) as src, zipfile.ZipFile(damaged, "w") as out:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.startswith("seed_") and info.filename.endswith("_t02.spv"):
                words = list(struct.unpack(f"<{len(data) // 4}I", data))
                insts, label, headers = _insts(words), 0, []
                for at, op, w in insts:
                    label = w[0] if op == LABEL else label
                    headers += [(at, label)] if op == LOOP_MERGE else []
                (outer, _), (_, inner) = headers[:2]
                words[outer + 2] = inner  # the outer loop's continue target: the inner loop's header
                data = struct.pack(f"<{len(words)}I", *words)
                assert spirv.validate(tuple(words), info.filename) == ""
            out.writestr(info, data)
    mod = vulkan_rt.load_module(damaged.getvalue())
    with pytest.raises(ta.NotSupportedError, match="continue target %145 heads a construct of its own"):
        mod.kernels["seed"]
    assert mod.kernels["react"].signature


def _deeply_nested_structs(words: Words, insts: list[Inst]) -> None:
    """Seven levels of structs of eight members each (8**7 floats), declared and unused: valid SPIR-V on which
    SPIRV-Tools' validator spends minutes."""
    f32 = next(w[0] for _, op, w in insts if op == 22 and w[1:] == [32])
    n = words[3]
    levels = list(range(n, n + 7))
    words[3] = n + 7
    declared = [(STRUCT, [level, *([levels[i - 1] if i else f32] * 8)]) for i, level in enumerate(levels)]
    at_function = _first(insts, 54)[0]
    words[at_function:at_function] = [x for op, w in declared for x in ((len(w) + 1) << 16 | op, *w)]


def test_a_task_is_checked_once_until_its_verdict_is_forgotten(modules, monkeypatch):
    """Loading the same SPIR-V again reads it no more (verdicts are kept by digest); metadata.forget_shaders()
    makes the next load check it again."""
    calls = [0]
    validate = spirv.validate

    def counted(*args):
        calls[0] += 1
        return validate(*args)

    monkeypatch.setattr(spirv, "validate", counted)
    path = modules.path(ta.Arch.VULKAN)
    metadata.forget_shaders()  # what earlier tests loaded
    metadata.read_module(path)
    checked, calls[0] = calls[0], 0
    metadata.read_module(path)
    assert calls[0] == 0
    metadata.forget_shaders()
    metadata.read_module(path)
    assert calls[0] == checked > 0


def test_types_nested_past_what_validation_takes_in_time_are_refused(vulkan_rt, modules, tmp_path):
    folder, name = _damaged(modules.path(ta.Arch.VULKAN), tmp_path, _deeply_nested_structs)
    with pytest.raises(ta.CorruptedDataError, match=rf"{name} .*: types of 2097152 members nested in one struct"):
        vulkan_rt.load_module(folder)
