"""The metadata reader: graphs, arch, texture formats, the gfx round trip, and hostile input."""

from __future__ import annotations

import json
import os
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import taichi_aot as ta
from conftest import graphs_tcb
from taichi_aot import Arch, Runtime, metadata
from taichi_aot.errors import CorruptedDataError, IncompatibleModuleError


def _all_sources(modules, arch):
    folder, tcm = modules.path(arch), modules.path(arch, tcm=True)
    with open(tcm, "rb") as f:
        data = f.read()
    return [folder, tcm, data]


def test_graphs_arch_and_formats_on_both_formats(arch, modules):
    for source in _all_sources(modules, arch):
        info = metadata.read_module(source)
        graph = info.graphs["add_twice"]
        assert [(a.name, a.kind, a.dtype, a.ndim) for a in graph.args] == [
            ("x", "ndarray", ta.DataType.F32, 1), ("y", "ndarray", ta.DataType.F32, 1),
            ("a", "scalar", ta.DataType.F32, 0)]
        assert len(graph.dispatches) == 2 and all(d.startswith("add") for d in graph.dispatches)
        if arch == Arch.X64:
            assert info.arch == Arch.X64 and info.archs == (Arch.X64,)
        else:
            assert info.arch is None and Arch.VULKAN in info.archs
            tex = info.kernels["tex_write"].args[0]
            assert (tex.kind, tex.ndim, tex.format) == ("rw_texture", 2, ta.Format.R32F)
            assert info.kernels["tex_read"].args[0].kind == "texture"
            assert info.required_caps["spirv_has_float64"] == 1
        doc = info.to_dict()
        assert json.loads(json.dumps(doc)) == doc
        assert doc["kernels"]["add"][2]["dtype"] == "f32"


def test_gfx_round_trip(vulkan, modules, tmp_path):
    folder = modules.path(vulkan)
    with open(os.path.join(folder, "metadata.json")) as f:
        meta = json.load(f)
    with open(os.path.join(folder, "graphs.json")) as f:
        graphs = json.load(f)
    g = metadata.GfxRuntime140.from_module(folder)
    assert g.to_metadata_json() == meta
    assert g.to_graphs_json() == graphs
    # the archive round-trips to its own documents
    tcm = modules.path(vulkan, tcm=True)
    with zipfile.ZipFile(tcm) as z:
        tcm_meta, tcm_graphs = json.loads(z.read("metadata.json")), json.loads(z.read("graphs.json"))
    for source in (tcm, Path(tcm).read_bytes()):
        g2 = metadata.GfxRuntime140.from_module(source)
        assert g2.to_metadata_json() == tcm_meta and g2.to_graphs_json() == tcm_graphs
    # edits to the structured form are written back, and the reader sees them
    add = next(k for k in g.kernels if k.name == "add")
    next(a for a in add.args if a.name == "a").name = "alpha"
    out = tmp_path / "edited"
    shutil.copytree(folder, out)
    (out / "metadata.json").write_text(json.dumps(g.to_metadata_json()))
    assert [a.name for a in metadata.read_module(str(out)).kernels["add"].args] == ["x", "y", "alpha"]
    with pytest.raises(CorruptedDataError, match="not JSON"):
        metadata.GfxRuntime140.from_module(modules.path(Arch.X64))
    with pytest.raises(CorruptedDataError):
        metadata.GfxRuntime140({"kernels": [{"name": "k"}]}, [])


def test_graph_arguments_are_validated(arch, modules):
    with Runtime(arch) as rt:
        mod = rt.load_module(modules.path(arch))
        graph = mod.graphs["add_twice"]
        assert [a.name for a in graph.signature] == ["x", "y", "a"]
        x, y = rt.ndarray_from_numpy(np.ones(4, np.float32)), rt.ndarray_from_numpy(np.full(4, 2, np.float32))
        cases = [
            (dict(x=x, y=y), KeyError, "missing argument"),
            (dict(x=x, y=y, a=1.0, b=2.0), TypeError, "no argument 'b'"),
            (dict(x=x, y=rt.ndarray((4,), np.int32), a=1.0), ValueError, "argument 'y'"),
            (dict(x=x, y=y, a=x), TypeError, "expected f32 scalar"),
            (dict(x=1.0, y=y, a=1.0), TypeError, "expected f32 ndarray"),
            (dict(x=x, y=y, a=True), TypeError, "bool"),
            (dict(x=rt.ndarray((2, 2), np.float32), y=y, a=1.0), ValueError, "ndim 1"),
        ]
        for kwargs, exc, text in cases:
            with pytest.raises(exc, match=text):
                graph(**kwargs)
        graph(x=x, y=y, a=0.5)
        rt.wait()
        assert np.allclose(x.to_numpy(), 3.0)


def test_texture_format_dimension_and_usage_are_checked(vulkan, modules):
    with Runtime(vulkan) as rt:
        mod = rt.load_module(modules.path(vulkan))
        write = mod.kernels["tex_write"]
        wrong_format = rt.allocate_image("2d", (4, 4), "rgba8")
        with pytest.raises(ValueError, match="R32F texels, the image is RGBA8"):
            write(wrong_format, 1.0, 4, 4)
        wrong_dim = rt.allocate_image("3d", (4, 4, 2), "r32f")
        with pytest.raises(ValueError, match="DIM_3D image"):
            write(wrong_dim, 1.0, 4, 4)
        sampled_only = rt.allocate_image("2d", (4, 4), "r32f", usage="sampled")
        with pytest.raises(ValueError, match="STORAGE usage"):
            write(sampled_only, 1.0, 4, 4)
        write(rt.allocate_image("2d", (4, 4), "r32f"), 1.0, 4, 4)
        rt.wait()


def test_a_missing_module_names_the_nearest_module_of_its_folder(modules, tmp_path):
    """Entries that look like a module (a .tcm file, a file of the path's own suffix, a folder) near the name asked
    for, case aside; nothing where none is near or the folder is missing (``info``, ``stubs`` and loads read it)."""
    shutil.copy(modules.path(Arch.X64, tcm=True), tmp_path / "physics.tcm")
    shutil.copytree(modules.path(Arch.VULKAN), tmp_path / "shoot")
    shutil.copy(modules.path(Arch.X64, tcm=True), tmp_path / "multi.taichi")  # a multi-arch file's own suffix
    for name in ("physics.py", ".physics.tcm", "physics.json"):  # source, hidden, another kind: never suggested
        (tmp_path / name).write_text("")
    near = {"Physics.TCM": "physics.tcm", "physicss.tcm": "physics.tcm", "shot": "shoot", "mult.taichi": "multi.taichi"}
    for asked, found in near.items():
        with pytest.raises(ta.MissingFileError) as info:
            metadata.read_module(str(tmp_path / asked))
        assert str(info.value).startswith(f"no module at {str(tmp_path / asked)!r}: did you mean "
                                          f"{str(tmp_path / found)!r}"), str(info.value)
        assert "physics.py" not in str(info.value) and ".physics" not in str(info.value)
        assert metadata.nearest_module(str(tmp_path / asked)) in str(info.value)
    for asked in ("zzz.tcm", "physics.json.tcm/x", "nowhere/physics.tcm"):
        assert metadata.nearest_module(str(tmp_path / asked)) == ""
    assert metadata.nearest_module(str(tmp_path / "physics.tcm")) == ""  # it exists: nothing to suggest


def test_llvm_module_for_another_arch_is_incompatible(modules, tmp_path):
    from conftest import require_arch

    require_arch(Arch.X64)
    folder = tmp_path / "cuda_like"
    shutil.copytree(modules.path(Arch.X64), folder)
    for name in os.listdir(folder):
        if name.endswith(".ll"):
            p = folder / name
            p.write_bytes(p.read_bytes().replace(b'target triple = "x86_64', b'target triple = "nvptx64'))
    assert metadata.read_module(str(folder)).arch == Arch.CUDA
    message = "compiled for CUDA; this runtime is X64"
    with Runtime(Arch.X64) as rt, pytest.raises(IncompatibleModuleError, match=message):
        rt.load_module(str(folder))


def test_binary_graphs_reader_and_hostile_input():
    good = graphs_tcb([("g", [("k", [("m", 1, 1, 2, [2, 3]), ("s", 5, 0, 0, [])])])])
    g = metadata._llvm_graphs(good)["g"]
    assert [(a.name, a.kind, a.dtype, a.elem_shape) for a in g.args] == [
        ("m", "ndarray", ta.DataType.F32, (2, 3)), ("s", "scalar", ta.DataType.I32, ())]
    bad = [good[:-3], good + b"\0", struct.pack("<Q", len(good)) + good[8:16] + b"\xff" * 8 + good[24:],
           struct.pack("<QQ", 16, 2**62), b"", b"\x01"]
    for data in bad:
        with pytest.raises(CorruptedDataError):
            metadata._llvm_graphs(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=600))
def test_fuzz_binary_graphs(data):
    try:
        metadata._llvm_graphs(data)
    except CorruptedDataError:
        pass


_TEXT_ALPHABET = st.sampled_from([*'{}[],:"ptr 0123456789-.eE\\abc_\n', "true", "null", "ptr {"])


@settings(max_examples=400, deadline=None)
@given(st.lists(_TEXT_ALPHABET, max_size=200).map("".join))
def test_fuzz_text_parser(text):
    try:
        metadata.parse_text(text)
    except CorruptedDataError:
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_mutated_modules(modules, tmp_path_factory, data):
    """Real metadata, truncated or with bytes flipped: read_module answers or raises CorruptedDataError."""
    arch = data.draw(st.sampled_from([Arch.X64, Arch.VULKAN]))
    folder = modules.path(arch)
    name = data.draw(st.sampled_from(["metadata.json", "graphs.json" if arch == Arch.VULKAN else "graphs.tcb"]))
    raw = bytearray(Path(folder, name).read_bytes())
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    for _ in range(data.draw(st.integers(0, 4))):
        if raw:
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    out = tmp_path_factory.mktemp("mutant")
    for f in os.listdir(folder):
        shutil.copy(os.path.join(folder, f), out / f)
    (out / name).write_bytes(bytes(raw))
    try:
        metadata.read_module(str(out))
    except CorruptedDataError:
        pass


def test_hostile_spirv_and_deep_json(vulkan, modules, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(modules.path(vulkan), folder)
    spv = next(p for p in folder.iterdir() if p.name.startswith("tex_write") and p.name.endswith("t01.spv"))
    spv.write_bytes(spv.read_bytes()[:-6])
    with pytest.raises(CorruptedDataError, match="SPIR-V"):
        metadata.read_module(str(folder))
    shutil.copy(os.path.join(modules.path(vulkan), spv.name), spv)
    (folder / "graphs.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(CorruptedDataError):
        metadata.read_module(str(folder))


def test_damaged_shaders_are_refused_before_the_driver_sees_them(vulkan, modules, tmp_path):
    # a SPIR-V module cut at an instruction boundary used to load and then crash the process at launch
    folder = tmp_path / "m"
    shutil.copytree(modules.path(vulkan), folder)
    spv = folder / next(n for n in os.listdir(folder) if n.startswith("add_c") and n.endswith(".spv"))
    code = spv.read_bytes()
    for cut in (len(code) // 2 // 4 * 4, len(code) - 4, 20):
        spv.write_bytes(code[:cut])
        with Runtime(vulkan) as rt, pytest.raises(CorruptedDataError):
            rt.load_module(str(folder))
    spv.unlink()
    with Runtime(vulkan) as rt, pytest.raises(CorruptedDataError, match="missing"):
        rt.load_module(str(folder))


def _tasks_of(meta: dict, kernel: str) -> list:
    return next(k for k in meta["kernels"] if k["name"] == kernel)["tasks_attribs"]


def _set_word(folder, prefix: str, index: int, value: int) -> None:
    spv = folder / next(n for n in os.listdir(folder) if n.startswith(prefix) and n.endswith(".spv"))
    code = bytearray(spv.read_bytes())
    code[4 * index:4 * index + 4] = value.to_bytes(4, "little")
    spv.write_bytes(bytes(code))


#: Damage to a Vulkan module's metadata or SPIR-V that loads in libtaichi_c_api and then crashes at launch
#: or computes on the wrong memory: each is refused at load, by name.
GFX_DAMAGE = {
    "a task listed twice": lambda m, f: _tasks_of(m, "add").append(dict(_tasks_of(m, "add")[0])),
    "zero threads per group": lambda m, f: _tasks_of(m, "add")[0].update(advisory_num_threads_per_group=0),
    "threads per group unlike the shader's": lambda m, f: _tasks_of(m, "add")[0].update(
        advisory_num_threads_per_group=_tasks_of(m, "add")[0]["advisory_num_threads_per_group"] // 2),
    "a negative total": lambda m, f: _tasks_of(m, "add")[0].update(advisory_total_num_threads=-5),
    "a negative binding": lambda m, f: _tasks_of(m, "add")[0]["buffer_binds"][0].update(binding=-1),
    "a binding the shader does not declare": lambda m, f: _tasks_of(m, "add")[0]["buffer_binds"][0].update(
        binding=77),
    "a binding given twice": lambda m, f: _tasks_of(m, "add")[0]["buffer_binds"].append(
        dict(_tasks_of(m, "add")[0]["buffer_binds"][0])),
    "a binding left out": lambda m, f: _tasks_of(m, "add")[0]["buffer_binds"].pop(),
    "an ndarray buffer naming a scalar argument": lambda m, f: next(
        b for b in _tasks_of(m, "add")[0]["buffer_binds"] if b["buffer"]["type"] == 5)["buffer"].update(
        root_id=[2]),
    "an unknown buffer type": lambda m, f: _tasks_of(m, "add")[0]["buffer_binds"][0]["buffer"].update(type=42),
    "a texture binding naming an ndarray": lambda m, f: next(
        t for t in (_tasks_of(m, "tex_write")) if t.get("texture_binds"))["texture_binds"][0].update(arg_id=[99]),
    "a huge id bound": lambda m, f: _set_word(f, "add_c", 3, 0xFFFFFFF0),
}


@pytest.mark.parametrize("damage", list(GFX_DAMAGE))
def test_damaged_vulkan_modules_are_refused_at_load(vulkan, modules, tmp_path, damage):
    folder = tmp_path / "m"
    shutil.copytree(modules.path(vulkan), folder)
    meta = json.loads((folder / "metadata.json").read_text())
    GFX_DAMAGE[damage](meta, folder)
    (folder / "metadata.json").write_text(json.dumps(meta))
    with Runtime(vulkan) as rt:
        with pytest.raises(CorruptedDataError):
            rt.load_module(str(folder))
        rt.load_module(modules.path(vulkan)).close()  # the runtime and the good module are unharmed
