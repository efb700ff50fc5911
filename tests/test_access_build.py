"""``build`` records how kernels and graphs use their ndarray arguments in the LLVM parts, which Taichi's LLVM
metadata does not: learned from the module's Vulkan part, or from a Vulkan build of the same file (the probe)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import require_arch
from taichi_aot import Arch, metadata
from taichi_aot.cli.build import build
from taichi_aot.enums import Access
from taichi_aot.metadata.multi import SIDECAR

R, W, RW, NONE = Access.READ, Access.WRITE, Access.READ_WRITE, Access.NONE

SOURCE = '''
import taichi as ti

vec = ti.types.ndarray(dtype=ti.f32, ndim=1)


@ti.aot.export
@ti.kernel
def step(src: vec, dst: vec, acc: vec, k: ti.f32):
    for i in src:
        dst[i] = k * src[i]
        acc[i] += src[i]


@ti.aot.export
@ti.kernel
def size_of(x: vec, out: ti.types.ndarray(dtype=ti.i32, ndim=1)):
    out[0] = x.shape[0]


def export_graphs():
    a, b, c, d = (ti.graph.Arg(ti.graph.ArgKind.NDARRAY, n, ti.f32, ndim=1) for n in "abcd")
    k = ti.graph.Arg(ti.graph.ArgKind.SCALAR, "k", ti.f32)
    g = ti.graph.GraphBuilder()
    g.dispatch(step, a, b, c, k)
    g.dispatch(step, b, d, c, k)  # b written, then read; c read and written twice
    return {"chain": g.compile()}
'''
#: What Vulkan's analysis finds: each exported kernel's and the graph's ndarray arguments, by name.
KERNELS = {"step": {"src": R, "dst": W, "acc": RW}, "size_of": {"x": NONE, "out": W}}
GRAPHS = {"chain": {"a": R, "b": RW, "c": RW, "d": W}}

# Taichi 1.7.4 compiles real functions on LLVM backends only: Vulkan's code generator fails on the call
UNVULKAN = '''
import taichi as ti


@ti.real_func
def twice(v: ti.f32) -> ti.f32:
    return v * 2.0


@ti.aot.export
@ti.kernel
def double(x: ti.types.ndarray(dtype=ti.f32, ndim=1), y: ti.types.ndarray(dtype=ti.f32, ndim=1)):
    for i in x:
        y[i] = twice(x[i])
'''

# a file that exports more on Vulkan: the probe's kernels differ from the x64 part's
DIFFERS = '''
import taichi as ti


@ti.aot.export
@ti.kernel
def fill(x: ti.types.ndarray(dtype=ti.f32, ndim=1)):
    for i in x:
        x[i] = 1.0


if ti.lang.impl.current_cfg().arch == ti.vulkan:
    @ti.aot.export
    @ti.kernel
    def extra(x: ti.types.ndarray(dtype=ti.f32, ndim=1)):
        for i in x:
            x[i] = 2.0
'''


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[str, dict]:
    """The source built five ways (summaries by output name): x64 alone (the probe), x64 with Vulkan (the
    part), x64 with --no-access, Vulkan with that x64 module given (--with), that module without its names
    given alone; and UNVULKAN and DIFFERS for x64."""
    require_arch(Arch.X64)
    require_arch(Arch.VULKAN)
    folder = str(tmp_path_factory.mktemp("access"))
    source = os.path.join(folder, "kernels.py")
    with open(source, "w", encoding="utf-8") as f:
        f.write(SOURCE)
    for name, text in (("unvulkan.py", UNVULKAN), ("differs.py", DIFFERS)):
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(text)
    out = {name: os.path.join(folder, name)
           for name in ("probe", "multi.tcm", "none", "given.tcm", "unnamed.tcm", "unvulkan", "differs")}
    summaries = {
        "probe": build(source, "x64", out["probe"]),
        "multi.tcm": build(source, ["x64", "vulkan"], out["multi.tcm"]),
        "none": build(source, "x64", out["none"], access=False),
    }
    summaries["given.tcm"] = build(source, "vulkan", out["given.tcm"], prebuilt={"x64": out["none"]})
    plain = os.path.join(folder, "plain")  # as Taichi writes it: no argument names
    shutil.copytree(out["none"], plain)
    os.remove(os.path.join(plain, SIDECAR))
    summaries["unnamed.tcm"] = build(source, [], out["unnamed.tcm"], prebuilt={"x64": plain})
    for name in ("unvulkan", "differs"):
        summaries[name] = build(os.path.join(folder, f"{name}.py"), "x64", out[name])
    return folder, summaries


def x64_part(folder: str, name: str) -> metadata.ModuleInfo:
    info = metadata.read_module(os.path.join(folder, name), Arch.X64)
    assert info.format == "llvm" and info.arch == Arch.X64
    return info


def access_of(info: metadata.ModuleInfo) -> tuple[dict, dict]:
    def ndarrays(args: list) -> dict:
        return {a.name: a.access for a in args if a.kind == "ndarray"}

    return ({k.name: ndarrays(k.args) for k in info.exported_kernels()},
            {g.name: ndarrays(g.args) for g in info.graphs.values()})


@pytest.mark.parametrize("name, learned", [("probe", "probe"), ("multi.tcm", "vulkan part"),
                                           ("given.tcm", "vulkan part")])
def test_x64_part_records_what_vulkans_analysis_finds(built, name, learned):
    folder, summaries = built
    assert (summaries[name]["access"], summaries[name]["access_reason"]) == (learned, None)
    info = x64_part(folder, name)
    assert access_of(info) == (KERNELS, GRAPHS)
    assert info.kernels["step"].args[0].access == Access.READ  # by position too: src, dst, acc
    assert [a.access for a in info.kernels["step"].args] == [R, W, RW, None]  # the scalar has none
    assert info.internal and all(a.name is None for k in info.internal for a in info.kernels[k].args)


def test_the_probe_is_not_part_of_the_output(built):
    folder, summaries = built
    assert summaries["probe"]["archs"] == ["x64"] and summaries["probe"]["kind"] == "folder"
    files = os.listdir(os.path.join(folder, "probe"))
    assert not [f for f in files if f.endswith(".spv") or f == "graphs.json"], files
    assert not [f for f in os.listdir(folder) if f.startswith(".taichi_aot_build_")]  # the throwaway folder went
    assert metadata.read_module(os.path.join(folder, "multi.tcm")).parts == ("vulkan", "x64")


def test_no_access_leaves_it_unknown(built):
    """``--no-access`` records none in the module; what a load reads of the kernels' IR (metadata.llvm_access) is
    never "not written" for an argument the gfx build finds written (unknown, or written, where it cannot tell)."""
    folder, summaries = built
    assert summaries["none"]["access"] == "unknown" and "--no-access" in summaries["none"]["access_reason"]
    with open(os.path.join(folder, "none", "taichi_aot.json"), encoding="utf-8") as f:
        sidecar = json.load(f)
    assert not [k for k in sidecar.get("kernels", {}).values() if "access" in k] and not sidecar.get("graphs")
    kernels, graphs = access_of(x64_part(folder, "none"))
    for found, learned in ((kernels, KERNELS), (graphs, GRAPHS)):
        assert set(found) == set(learned)
        for name, args in learned.items():
            for arg, access in args.items():
                got = found[name][arg]
                assert got is None or got == RW or not access & W, (name, arg, got, access)


def test_a_file_vulkan_cannot_compile_builds_with_access_unknown(built):
    folder, summaries = built
    summary = summaries["unvulkan"]
    assert summary["archs"] == ["x64"] and summary["kernels"] == ["double"]
    assert summary["access"] == "unknown"
    assert "could not compile kernel 'double' for vulkan" in summary["access_reason"]
    info = x64_part(folder, "unvulkan")
    assert [(a.name, a.access) for a in info.kernels["double"].args] == [("x", None), ("y", None)]


def test_no_access_where_the_parts_cannot_be_matched_by_name(built, monkeypatch):
    """The build records no access where it cannot match the parts (what a load reads of the IR left aside)."""
    monkeypatch.setattr(metadata, "_infer_access", lambda info: None)
    folder, summaries = built
    summary = summaries["differs"]
    assert summary["kernels"] == ["fill"] and summary["access"] == "unknown"
    assert summary["access_reason"] == "the x64 part's kernels and graphs differ from the Vulkan build's"
    assert [a.access for a in x64_part(folder, "differs").kernels["fill"].args] == [None]
    summary = summaries["unnamed.tcm"]
    assert summary["access"] == "unknown"
    assert summary["access_reason"] == "the x64 part names no arguments to match it by"
    info = x64_part(folder, "unnamed.tcm")
    assert all(a.access is None for k in info.kernels.values() for a in k.args)


def test_gfx_builds_record_their_own(built):
    folder, _ = built
    info = metadata.read_module(os.path.join(folder, "multi.tcm"), Arch.VULKAN)
    assert info.format == "gfx" and access_of(info) == (KERNELS, GRAPHS)


def test_cli_says_where_access_came_from(built, tmp_path):
    folder, _ = built
    source = os.path.join(folder, "kernels.py")

    def cli(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "taichi_aot", "build", *args], capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    said = cli(source, "--arch", "x64", "-o", str(tmp_path / "x64.tcm"))
    assert "ndarray access recorded for x64, from a Vulkan build of the file" in said
    assert access_of(x64_part(str(tmp_path), "x64.tcm")) == (KERNELS, GRAPHS)
    said = cli(source, "--arch", "x64", "--no-access", "-o", str(tmp_path / "none"))
    assert "ndarray access unknown on x64 (taken as read and written): not asked for (--no-access)" in said
    said = cli(source, "--arch", "vulkan", "-o", str(tmp_path / "vulkan"))
    assert "ndarray access" not in said  # gfx metadata records its own
