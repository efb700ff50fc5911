"""One module file for every backend, and argument names on every backend: what ``build`` writes beside
Taichi's files (taichi_aot/metadata/multi.py), as the loader, ``info``, ``stubs`` and C see it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from conftest import require_arch
from taichi_aot import Arch, CorruptedDataError, IncompatibleModuleError, Runtime, arch_for_module, capi, metadata
from taichi_aot.metadata.multi import SIDECAR

HERE = os.path.dirname(os.path.abspath(__file__))
# export_sample.py (saxpy, scale_f64, the graph saxpy_twice) and a kernel with a template parameter
with open(os.path.join(HERE, "export_sample.py"), encoding="utf-8") as _f:
    SOURCE = _f.read() + '''

@ti.kernel
def fill(x: ti.types.ndarray(dtype=ti.f32, ndim=1), base: ti.template(), step: ti.f32):
    for i in x:
        x[i] = base + step * i


# with template_types, Taichi 1.7.4 wants an instance for each ndarray parameter too
ti.aot.export_as("fill_from_2", template_types={"x": ti.ndarray(ti.f32, 4), "base": 2.0})(fill)
'''


def build(folder, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "taichi_aot", "build", "sample.py", *args], cwd=folder,
                          capture_output=True, text=True, timeout=600)


#: The folder ``built`` made, once a session: test_ops_jax and test_ops_torch take the fixture too (read only).
_BUILT: list[str] = []


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> str:
    """sample.py built as multi.tcm (x64 and Vulkan), x64 (a folder) and vulkan.tcm."""
    require_arch(Arch.X64)
    require_arch(Arch.VULKAN)
    if _BUILT:
        return _BUILT[0]
    folder = tmp_path_factory.mktemp("multi")
    (folder / "sample.py").write_text(SOURCE)
    for args in (["--arch", "x64", "vulkan", "-o", "multi.tcm"], ["--arch", "x64", "-o", "x64"],
                 ["--arch", "vulkan", "-o", "vulkan.tcm"]):
        proc = build(folder, *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    _BUILT.append(str(folder))
    return _BUILT[0]


def run(rt: Runtime, source: object) -> tuple[list, list]:
    mod = rt.load_module(source)
    x = rt.ndarray_from_numpy(np.arange(4, dtype=np.float32))
    y = rt.ndarray_from_numpy(np.ones(4, np.float32))
    mod.kernels["saxpy"](y=y, a=2.0, x=x)  # keywords, in any order
    mod.graphs["saxpy_twice"](x=x, y=y, a=1.0)
    z = rt.ndarray((4,), np.float32)
    mod.kernels["fill_from_2"](z, step=0.5)  # the template parameter is baked in, not an argument
    rt.wait()
    return y.to_numpy().tolist(), z.to_numpy().tolist()


@pytest.mark.parametrize("arch", [Arch.X64, Arch.VULKAN], ids=["x64", "vulkan"])
def test_one_file_runs_on_every_arch_it_holds_with_keywords(built, arch):
    expected = ([1.0, 5.0, 9.0, 13.0], [2.0, 2.5, 3.0, 3.5])
    with Runtime(arch) as rt:
        assert run(rt, os.path.join(built, "multi.tcm")) == expected
        with open(os.path.join(built, "multi.tcm"), "rb") as f:
            assert run(rt, f.read()) == expected  # bytes too
        single = os.path.join(built, "x64" if arch == Arch.X64 else "vulkan.tcm")
        assert run(rt, single) == expected  # and the single-arch outputs, names included on x64
        mod = rt.load_module(os.path.join(built, "multi.tcm"))
        assert mod.metadata.parts == ("vulkan", "x64") and f"({arch.name.lower()} part)" in mod.source
        assert [a.name for a in mod.kernels["saxpy"].signature] == ["x", "y", "a"]
        assert [a.name for a in mod.kernels["fill_from_2"].signature] == ["x", "step"]


def test_argument_names_agree_with_taichis_own_where_it_records_them(built):
    x64 = metadata.read_module(os.path.join(built, "x64"))
    vulkan = metadata.read_module(os.path.join(built, "vulkan.tcm"))  # gfx metadata names them itself
    assert x64.format == "llvm" and vulkan.format == "gfx"
    for name in ("saxpy", "fill_from_2"):
        assert [a.name for a in x64.kernels[name].args] == [a.name for a in vulkan.kernels[name].args]


def test_info_and_stubs_show_parts_and_names(built, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "info", "multi.tcm", "--json"], cwd=built,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["parts"] == ["vulkan", "x64"] and info["archs"] == ["vulkan", "x64"]
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "info", "multi.tcm"], cwd=built,
                          capture_output=True, text=True)
    assert "multi-arch module (Taichi 1.7.4), parts: vulkan, x64" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "stubs", "x64", "-o", "-"], cwd=built,
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "def __call__(self, x:" in proc.stdout and "arg0" not in proc.stdout, proc.stdout


def test_for_module_takes_the_fastest_arch_both_have(built, monkeypatch):
    # a GPU before the CPU; but lavapipe is a software rasterizer: where x64 is there too, the CPU wins
    software = capi.arch_status()[Arch.VULKAN].software
    assert arch_for_module(os.path.join(built, "multi.tcm")) == (Arch.X64 if software else Arch.VULKAN)
    assert arch_for_module(os.path.join(built, "vulkan.tcm")) == Arch.VULKAN
    assert metadata.loads_on(os.path.join(built, "multi.tcm")) == (Arch.VULKAN, Arch.X64)  # from the manifest
    assert metadata.loads_on(os.path.join(built, "x64")) == (Arch.X64,)
    with Runtime.for_module(os.path.join(built, "x64")) as rt:
        assert rt.arch == Arch.X64
    monkeypatch.setenv("TAICHI_AOT_ARCH", "vulkan")
    assert arch_for_module(os.path.join(built, "multi.tcm")) == Arch.VULKAN  # chosen among the module's


def _rewrite(source: str, target: str, change) -> None:
    """Copy the zip archive ``source`` to ``target`` with ``change(name, data) -> data or None (drop)``."""
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w") as zout:
        for info in zin.infolist():
            data = change(info.filename, zin.read(info))
            if data is not None:
                zout.writestr(info.filename, data)


def _manifest(change):
    def edit(name, data):
        if name != SIDECAR:
            return data
        return json.dumps(change(json.loads(data))).encode()
    return edit


def test_a_missing_part_names_what_the_module_holds_and_the_way_out(built, tmp_path):
    only_x64 = str(tmp_path / "only_x64.bin")
    _rewrite(os.path.join(built, "multi.tcm"), only_x64, _manifest(lambda m: {**m, "parts": {"x64": "x64.tcm"}}))
    with Runtime(Arch.X64) as rt:
        rt.load_module(only_x64)
    with Runtime(Arch.VULKAN) as rt, pytest.raises(IncompatibleModuleError) as e:
        rt.load_module(only_x64)
    assert "holds parts for x64, none for vulkan" in str(e.value)
    assert "Runtime.for_module" in str(e.value) and "--arch x64 vulkan" in str(e.value)
    # and a single-arch module on another backend says the same
    with Runtime(Arch.VULKAN) as rt, pytest.raises(IncompatibleModuleError, match=r"Runtime\.for_module"):
        rt.load_module(os.path.join(built, "x64"))


def test_no_arch_of_the_module_works_here(built, tmp_path):
    if capi.arch_status()[Arch.CUDA].available:
        pytest.skip("CUDA works here")
    cuda_only = str(tmp_path / "cuda_only.tcm")
    _rewrite(os.path.join(built, "multi.tcm"), cuda_only,
             _manifest(lambda m: {**m, "parts": {"cuda": "x64.tcm"}}))
    with pytest.raises(IncompatibleModuleError, match="runs on cuda, and none of them works on this machine"):
        Runtime.for_module(cuda_only)


def test_the_c_api_is_never_given_a_multi_arch_file(built):
    path = os.path.join(built, "multi.tcm")
    with Runtime(Arch.VULKAN) as rt:
        with pytest.raises(IncompatibleModuleError, match="multi-arch module"):
            capi.load_aot_module(rt._handle, path)
        with open(path, "rb") as f, pytest.raises(IncompatibleModuleError, match="multi-arch module"):
            capi.create_aot_module(rt._handle, f.read())


BAD_SIDECARS = {
    "count": ({"saxpy": {"args": ["x", "y"]}}, "names 2 arguments of kernel 'saxpy', which has 3"),
    "identifier": ({"saxpy": {"args": ["x", "y", "a; import os"]}}, "is not an identifier"),
    "keyword": ({"saxpy": {"args": ["x", "y", "lambda"]}}, "is not an identifier"),
    "twice": ({"saxpy": {"args": ["x", "x", "a"]}}, "names two arguments alike"),
    "unknown kernel": ({"nope": {"args": []}}, "which the module lacks"),
    "not a list": ({"saxpy": {"args": "xya"}}, "no list of argument names"),
    "other names": ({"saxpy": {"args": ["u", "v", "w"]}}, "the module's metadata, 'x'"),  # gfx disagrees
}


@pytest.mark.parametrize("case", list(BAD_SIDECARS))
def test_a_bad_names_file_is_corrupted_data(built, tmp_path, case):
    kernels, message = BAD_SIDECARS[case]
    if case == "other names":  # gfx metadata names arguments itself: the two must agree
        source, arch = os.path.join(built, "vulkan.tcm"), Arch.VULKAN
        target = str(tmp_path / "m.tcm")
        _rewrite(source, target, _manifest(lambda m: {**m, "kernels": kernels}))
    else:
        arch, target = Arch.X64, str(tmp_path / "m")
        shutil.copytree(os.path.join(built, "x64"), target)
        with open(os.path.join(target, SIDECAR), "w") as f:
            json.dump({"taichi_aot": 1, "arch": "x64", "kernels": kernels}, f)
    with pytest.raises(CorruptedDataError, match=message):
        metadata.read_module(target)
    with Runtime(arch) as rt, pytest.raises(CorruptedDataError, match=message):
        rt.load_module(target)


BAD_MULTI = {
    "a part that is not there": (_manifest(lambda m: {**m, "parts": {"x64": "gone.tcm"}}), "is not in the archive"),
    "an unknown arch": (_manifest(lambda m: {**m, "parts": {"riscv": "x64.tcm"}}), "unknown arch 'riscv'"),
    "no parts": (_manifest(lambda m: {**m, "parts": {}}), "without parts"),
    "another format": (_manifest(lambda m: {**m, "taichi_aot": 99}), "of format 1"),
    "not JSON": (lambda n, d: b"{" if n == SIDECAR else d, "is not valid JSON"),
    "a part that is garbage": (lambda n, d: b"PK\x03\x04garbage" if n == "x64.tcm" else d, "archive"),
}


@pytest.mark.parametrize("case", list(BAD_MULTI))
def test_a_bad_multi_arch_file_is_corrupted_data(built, tmp_path, case):
    change, message = BAD_MULTI[case]
    target = str(tmp_path / "bad.tcm")
    _rewrite(os.path.join(built, "multi.tcm"), target, change)
    with Runtime(Arch.X64) as rt, pytest.raises(CorruptedDataError, match=message):
        rt.load_module(target)


def test_a_multi_arch_file_inside_a_part_is_refused(built, tmp_path):
    with open(os.path.join(built, "multi.tcm"), "rb") as f:
        whole = f.read()
    target = str(tmp_path / "nested.tcm")
    _rewrite(os.path.join(built, "multi.tcm"), target, lambda n, d: whole if n == "x64.tcm" else d)
    with Runtime(Arch.X64) as rt, pytest.raises(CorruptedDataError, match="not a plain module"):
        rt.load_module(target)


def test_parts_built_elsewhere_join_with_with(built, tmp_path):
    folder = tmp_path / "w"
    folder.mkdir()
    (folder / "sample.py").write_text(SOURCE)
    proc = build(str(folder), "--arch", "x64", "--with", f"vulkan={built}/vulkan.tcm", "-o", "joined.tcm")
    assert proc.returncode == 0, proc.stderr
    assert "for x64, vulkan" in proc.stdout
    with Runtime(Arch.VULKAN) as rt:
        assert run(rt, str(folder / "joined.tcm"))[0] == [1.0, 5.0, 9.0, 13.0]
    # a part of another source, of another arch, or a multi-arch file is refused, saying why
    (folder / "other.py").write_text(SOURCE.replace("step: ti.f32", "step: ti.i32"))
    assert subprocess.run([sys.executable, "-m", "taichi_aot", "build", "other.py", "--arch", "vulkan", "-o",
                           "other.tcm"], cwd=folder, capture_output=True).returncode == 0
    for given, said in ((f"vulkan={folder}/other.tcm", "differ"), (f"vulkan={built}/x64", "built for x64"),
                        (f"vulkan={built}/multi.tcm", "a multi-arch module"), ("vulkan", "ARCH=MODULE"),
                        (f"x64={built}/x64", "both built")):
        proc = build(str(folder), "--arch", "x64", "--with", given, "-o", "bad.tcm")
        assert proc.returncode == 2 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert not (folder / "bad.tcm").exists()


def test_a_build_that_ends_early_says_so(tmp_path):
    (tmp_path / "sample.py").write_text(SOURCE + "\nimport sys\nsys.exit(0)\n")
    proc = build(str(tmp_path), "--arch", "x64", "-o", "m.tcm")
    assert proc.returncode == 2 and "before a module was written" in proc.stderr, proc.stderr
    assert not (tmp_path / "m.tcm").exists()


def test_a_plain_tcm_with_names_is_still_taichis_format(built):
    # Taichi's C-API loads build's single-arch .tcm as it is: our names file rides along, ignored by it
    with zipfile.ZipFile(os.path.join(built, "vulkan.tcm")) as z:
        assert SIDECAR in z.namelist() and "metadata.json" in z.namelist()
    with Runtime(Arch.VULKAN) as rt:
        with open(os.path.join(built, "vulkan.tcm"), "rb") as f:
            handle = capi.create_aot_module(rt._handle, f.read())
        capi.destroy_aot_module(handle)


def test_the_shipped_demo_module_is_built_from_its_source():
    """taichi_aot/cli/demo.tcm is what scripts/demo_module.sh builds from demo_kernels.py (rebuild it there
    after changing the kernels)."""
    import hashlib

    from taichi_aot.cli.cache import DEMO_MODULE, HERE

    with zipfile.ZipFile(DEMO_MODULE) as z:
        manifest = json.loads(z.read(SIDECAR))
    with open(os.path.join(HERE, "demo_kernels.py"), "rb") as f:
        assert manifest["source_sha256"] == hashlib.sha256(f.read()).hexdigest(), "run scripts/demo_module.sh"
    info = metadata.read_module(DEMO_MODULE)
    assert set(info.parts) >= {"x64", "vulkan", "cuda"} and info.version == (1, 7, 4)
    for arch in info.parts:
        part = metadata.read_module(DEMO_MODULE, Arch[arch.upper()])
        assert [a.name for a in part.kernels["react"].args] == ["src", "dst", "feed", "kill"]
        assert [a.name for a in part.graphs["steps16"].args] == ["a", "b", "feed", "kill"]
    from taichi_aot.ptx import paths_of

    assert set(paths_of(DEMO_MODULE).values()) == {"cuda"}  # its CUDA kernels run on taichi_aot's own launcher
