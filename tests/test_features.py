"""Modules of the features seed 002 and Taichi 1.7.4's SPIR-V backend offer (tests/features.py): global fields
shared by kernels, a kernel template, block-shared memory, subgroup operations, atomics of every width; one set of
fields a runtime; fields exported by ``build``; a kernel reading fields its module does not record."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import taichi_aot as ta
from conftest import HERE, require_arch
from taichi_aot import (
    Arch,
    CorruptedDataError,
    IncompatibleModuleError,
    NotSupportedError,
    Runtime,
    capi,
)

FEATURES = os.path.join(HERE, "features.py")
N = 16
#: The modules compiled: (arch, flags) by name.
BUILDS = {"vulkan": ("vulkan", []), "x64": ("x64", []), "vulkan-plain": ("vulkan", ["--plain"]),
          "x64-plain": ("x64", ["--plain"])}


@pytest.fixture(scope="session")
def features(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("features")

    def build(name: str) -> tuple[str, str]:
        arch, flags = BUILDS[name]
        out = str(root / name)
        proc = subprocess.run([sys.executable, FEATURES, "--arch", arch, "--out", out, *flags],
                              capture_output=True, text=True, timeout=300)
        return name, out if proc.returncode == 0 else "failed: " + (proc.stdout + proc.stderr)[-3000:]

    with ThreadPoolExecutor(2) as pool:
        built = dict(pool.map(build, BUILDS))
    return built


def module(features: dict[str, str], name: str) -> str:
    path = features[name]
    if path.startswith("failed: "):
        pytest.fail(f"Taichi could not compile the {name} features module: {path[8:]}")
    return path


@pytest.fixture(params=["x64", "vulkan"])
def feature_arch(request) -> Arch:
    arch = Arch[request.param.upper()]
    require_arch(arch)
    return arch


def test_fields_filled_and_read_by_kernels_and_a_template(feature_arch, features):
    with Runtime(feature_arch) as rt:
        mod = rt.load_module(module(features, feature_arch.name.lower()))
        out, vec = np.zeros(N, np.float32), np.zeros((2, 3, 3), np.int32)
        mod.kernels["fill"](1.0)
        mod.kernels["read"](out, vec)
        rt.wait()
        np.testing.assert_array_equal(out, 2 * (1.0 + np.arange(N)))
        want = np.array([[[i, j, i * 10 + j] for j in range(3)] for i in range(2)])
        np.testing.assert_array_equal(vec, want)
        if feature_arch == Arch.VULKAN:  # a template instantiated on the field f (Taichi 1.7.4: gfx only)
            assert "bump|a=f," in mod.kernels  # exported, though Taichi's listing leaves templates out
            mod.kernels["bump|a=f,"]()
            mod.kernels["read"](out, vec)
            rt.wait()
            np.testing.assert_array_equal(out, 2 * (2.0 + np.arange(N)))


def test_atomics_of_every_width(feature_arch, features):
    with Runtime(feature_arch) as rt:
        mod = rt.load_module(module(features, feature_arch.name.lower()))
        x = np.arange(1, 65, dtype=np.int32)
        a = np.array([0, 1 << 30, -(1 << 30)], np.int32)
        u = np.array([0xFFFFFFFF, 0, 0], np.uint32)
        fl, wide, d = np.zeros(2, np.float32), np.zeros(1, np.int64), np.zeros(1, np.float64)
        mod.kernels["atomics"](x, a, u, fl, wide)
        rt.wait()
        assert a.tolist() == [x.sum(), 1, 64]
        assert u.tolist() == [0, np.bitwise_or.reduce(x), np.bitwise_xor.reduce(x)]
        assert fl.tolist() == [x.sum() * 0.5, 64.0]
        assert wide[0] == x.sum() * 10**9
        if feature_arch == Arch.VULKAN and capi.arch_status()[Arch.VULKAN].software:
            # lavapipe aborts the process compiling Vulkan's f64 atomic add: refused at look-up, nothing else is
            with pytest.raises(NotSupportedError, match=r"on a software rasterizer: .*64-bit floats.*lavapipe"):
                mod.kernels["atomic_f64"]
            return
        mod.kernels["atomic_f64"](x, d)
        rt.wait()
        assert d[0] == x.sum() * 0.25


def test_block_shared_memory_and_subgroups(vulkan, features):
    with Runtime(vulkan) as rt:
        mod = rt.load_module(module(features, "vulkan"))
        x, out = np.arange(256, dtype=np.float32), np.zeros(256, np.float32)
        mod.kernels["reverse_blocks"](x, out)
        rt.wait()
        np.testing.assert_array_equal(out, np.concatenate([x[127::-1], x[:127:-1]]))
        ints, sums = np.arange(1, 129, dtype=np.int32), np.zeros(128, np.int32)
        mod.kernels["subgroup_sum"](ints, sums)
        rt.wait()
        size = next(s for s in (1, 2, 4, 8, 16, 32, 64, 128) if sums[0] == ints[:s].sum())  # the device's subgroup
        np.testing.assert_array_equal(sums, np.repeat(ints.reshape(-1, size).sum(axis=1), size))


def test_narrow_atomics_are_refused_at_look_up(vulkan, features):
    with Runtime(vulkan) as rt:
        mod = rt.load_module(module(features, "vulkan"))
        with pytest.raises(NotSupportedError, match="an atomic on an integer of 8 bits"):
            mod.kernels["narrow_atomics"]
        mod.kernels["fill"](0.0)  # the module's other kernels run
        rt.wait()


def test_one_layout_of_fields_a_runtime(feature_arch, features, tmp_path):
    name = feature_arch.name.lower()
    fields, plain = module(features, name), module(features, name + "-plain")
    out, vec = np.zeros(N, np.float32), np.zeros((2, 3, 3), np.int32)
    with Runtime(feature_arch) as rt:
        first = rt.load_module(fields)
        first.kernels["fill"](3.0)
        other = rt.load_module(plain)  # no fields: it loads beside
        x = np.ones(4, np.float32)
        other.kernels["twice"](x)
        first.close()
        again = rt.load_module(fields)  # the same fields: shared, their values kept
        again.kernels["read"](out, vec)
        rt.wait()
        np.testing.assert_array_equal(out, 2 * (3.0 + np.arange(N)))
        np.testing.assert_array_equal(x, 2)
    with Runtime(feature_arch) as rt:
        handle = rt.load_module(plain)
        if feature_arch == Arch.VULKAN:  # the first module's 4-byte root buffer is the one every kernel binds
            with pytest.raises(IncompatibleModuleError, match=r"fields.*laid out by the first module loaded"):
                rt.load_module(fields)
            with pytest.raises(IncompatibleModuleError):  # the flat API the same
                capi.load_aot_module(rt.handle, fields)
        else:  # LLVM allocates a module's fields when it loads
            rt.load_module(fields).kernels["fill"](1.0)
        handle.close()


def test_build_exports_a_files_global_fields(features, tmp_path):
    for arch in (Arch.X64, Arch.VULKAN):
        require_arch(arch)
    source = tmp_path / "with_field.py"
    source.write_text(textwrap.dedent("""
        import taichi as ti

        f = ti.field(ti.f32, shape=8)


        @ti.aot.export
        @ti.kernel
        def fill(v: ti.f32):
            for i in f:
                f[i] = v + i


        @ti.aot.export
        @ti.kernel
        def read(out: ti.types.ndarray(dtype=ti.f32, ndim=1)):
            for i in f:
                out[i] = f[i] * 2
        """))
    out = tmp_path / "with_field.tcm"
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "build", str(source), "--arch", "x64", "vulkan",
                           "-o", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for arch in (Arch.X64, Arch.VULKAN):
        with Runtime(arch) as rt:
            mod = rt.load_module(out)
            got = np.zeros(8, np.float32)
            mod.kernels["fill"](1.0)
            mod.kernels["read"](got)
            rt.wait()
            np.testing.assert_array_equal(got, 2 * (1.0 + np.arange(8)))
            # another layout of fields cannot share the runtime
            with pytest.raises(IncompatibleModuleError, match="laid out otherwise"):
                rt.load_module(module(features, arch.name.lower()))


def test_a_kernel_reading_fields_the_module_does_not_record_is_refused(x64_unrecorded):
    with Runtime(Arch.X64) as rt:
        mod = rt.load_module(x64_unrecorded)
        with pytest.raises(NotSupportedError, match="reads global fields, and the module records none"):
            mod.kernels["fill"]
        mod.kernels["atomics"]  # it reads no field


@pytest.fixture
def x64_unrecorded(features, tmp_path) -> str:
    """The x64 features module as Taichi writes it without Module.add_field: its metadata records no fields."""
    require_arch(Arch.X64)
    folder = tmp_path / "unrecorded"
    shutil.copytree(module(features, "x64"), folder)
    for name in ("metadata.json", "metadata.tcb"):
        os.remove(folder / name)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        sys.argv = ["features.py", "--arch", "x64", "--out", {str(folder)!r}]
        import taichi as ti
        sys.path.insert(0, {HERE!r})
        import features
        ti.init(arch=ti.x64, log_level=ti.ERROR, offline_cache=False)
        fields, kernels, _ = features.define(False)
        module = ti.aot.Module(ti.x64)
        for kernel in kernels.values():
            module.add_kernel(kernel)
        module.save({str(folder)!r})
        """)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.dumps({}) in (folder / "metadata.json").read_text().replace(" ", "")  # "fields": {}
    return str(folder)


def test_gfx_fields_must_lie_in_the_root_buffer(vulkan, features, tmp_path):
    source = module(features, "vulkan")
    cases = {
        "outside": (lambda m: m["fields"][0].update(mem_offset_in_parent=m["root_buffer_size"]), "ends at byte"),
        "dtype name": (lambda m: m["fields"][0].update(dtype_name="i8"), "named 'i8'"),
        "twice": (lambda m: m["fields"].append(dict(m["fields"][0])), "listed twice"),
        "no root buffer": (lambda m: m.update(root_buffer_size=0), "ends at byte|root buffer, of 0 bytes"),
        "another tree": (lambda m: _root(m).update(root_id=[1]), r"a buffer of type 0 at binding \d+ with root \[1\]"),
        "zero threads": (lambda m: _ranged(m).update(advisory_total_num_threads=0), "known at launch, in 0 threads"),
    }
    for name, (damage, message) in cases.items():
        folder = tmp_path / name.replace(" ", "_")
        shutil.copytree(source, folder)
        meta = json.loads((folder / "metadata.json").read_text())
        damage(meta)
        (folder / "metadata.json").write_text(json.dumps(meta))
        with Runtime(vulkan) as rt, pytest.raises(CorruptedDataError, match=message):
            rt.load_module(folder)


def _root(meta: dict) -> dict:
    """The buffer of the first task that binds the fields' root buffer."""
    return next(b["buffer"] for k in meta["kernels"] for t in k["tasks_attribs"] for b in t["buffer_binds"]
                if b["buffer"]["type"] == 0)


def _ranged(meta: dict) -> dict:
    """The first range-for task whose range is known only at launch (over an ndarray)."""
    return next(t for k in meta["kernels"] for t in k["tasks_attribs"]
                if t["range_for_attribs"] and not t["range_for_attribs"]["const_end"])


QUEUE_CHILD = """
import sys
import numpy as np
from taichi_aot import Arch, Runtime

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

with Runtime(Arch.VULKAN) as rt:
    tick = rt.load_module(sys.argv[1]).kernels["tick"]  # one task over 16: lavapipe runs 1e5 in seconds
    for _ in range(2000):
        tick()
    rt.wait()
    before, most = rss_mb(), 0
    for i in range(100_000):
        tick()
        most = max(most, rt.gate.pending[0])
    print(rss_mb() - before, most, rt.gate.pending[2])
"""


def test_launches_without_a_wait_are_bounded_on_vulkan(vulkan, features):
    """libtaichi keeps every submitted command buffer until a wait (about 2 KB a launch): a launch that finds
    TAICHI_AOT_MAX_QUEUED launches queued waits for them, so 1e5 launches without a wait stay within 32 MB."""
    proc = subprocess.run([sys.executable, "-c", QUEUE_CHILD, module(features, "vulkan")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    grown, most, bound = map(float, proc.stdout.split())
    assert bound == 4096 and most <= bound
    assert grown <= 32, f"RSS grew {grown:.1f} MB over 1e5 launches without a wait"


def test_the_queue_bound_is_set_by_a_variable(vulkan, features, monkeypatch):
    monkeypatch.setenv("TAICHI_AOT_MAX_QUEUED", "3")
    with Runtime(vulkan) as rt:
        mod = rt.load_module(module(features, "vulkan"))
        seen = []
        for _ in range(8):
            mod.kernels["fill"](1.0)
            seen.append(rt.gate.pending[0])
        assert max(seen) == 3 and 0 in seen  # the fourth launch waited
        raw = capi.get_aot_module_kernel(mod.handle, "fill")  # the flat API's launches count too
        for _ in range(8):
            capi.launch_kernel(rt.handle, raw, [1.0])
            assert rt.gate.pending[0] <= 3
    monkeypatch.setenv("TAICHI_AOT_MAX_QUEUED", "0")  # no bound
    with Runtime(vulkan) as rt:
        fill = rt.load_module(module(features, "vulkan")).kernels["fill"]
        for _ in range(5000):
            fill(1.0)
        assert rt.gate.pending[0] == 5000
    for wrong in ("-1", "many", "1e3"):
        monkeypatch.setenv("TAICHI_AOT_MAX_QUEUED", wrong)
        with pytest.raises(ta.InvalidArgumentError, match="TAICHI_AOT_MAX_QUEUED"):
            Runtime(vulkan)
