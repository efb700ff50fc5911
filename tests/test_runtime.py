"""Runtime, modules, kernels and graphs through the object layer, on x64 and Vulkan."""

from __future__ import annotations

import io
import re
import shutil
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest

import taichi_aot as ta
from conftest import require_arch
from taichi_aot import Arch, Capability, Runtime, _cache, capi


def _zipped(members: dict[str, bytes]) -> bytes:
    """A zip archive of ``members`` (name: bytes), as bytes."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return out.getvalue()


@pytest.fixture(params=["folder", "tcm", "bytes"])
def mod(request, rt, arch, modules):
    if request.param == "folder":
        return rt.load_module(modules.path(arch))
    path = modules.path(arch, tcm=True)
    return rt.load_module(path if request.param == "tcm" else Path(path).read_bytes())


def test_quickstart_as_written(arch, modules):
    # the README quickstart, on every arch
    with Runtime(arch) as rt:
        mod = rt.load_module(modules.path(arch, tcm=True))
        x = rt.ndarray((1024,), np.float32)
        y = rt.ndarray_from_numpy(np.arange(1024, dtype=np.float32))
        mod.kernels["add"](x, y, 0.01)
        rt.wait()
        np.testing.assert_allclose(x.to_numpy(), np.arange(1024, dtype=np.float32) * np.float32(0.01))


def test_runtime_properties(rt, arch):
    assert rt.arch == arch and rt.device_index == 0 and not rt.closed
    caps = rt.capabilities
    if arch == Arch.VULKAN:
        assert Capability.SPIRV_VERSION in caps
        rt.set_capabilities(spirv_version=0x10300)
        assert rt.capabilities == {Capability.SPIRV_VERSION: 0x10300}
        with pytest.raises(ta.InvalidArgumentError):
            rt.set_capabilities(no_such_cap=1)
    else:
        assert caps == {}
    rt.flush()
    rt.wait()
    assert repr(rt).startswith(f"<Runtime {arch.name}")


def test_runtime_default_arch_and_env(monkeypatch):
    with Runtime() as rt:  # the fastest backend: a GPU, then x64, then a software Vulkan device
        status = capi.arch_status()
        if Arch.CUDA not in capi.get_available_archs()[1]:
            vulkan = status[Arch.VULKAN]
            gpu_vulkan = vulkan.available and not vulkan.software
            assert rt.arch == (Arch.VULKAN if gpu_vulkan else Arch.X64)
        assert rt.arch == ta.runtime.best_arch()
    monkeypatch.setenv("TAICHI_AOT_ARCH", "x64")
    with Runtime() as rt:
        assert rt.arch == Arch.X64
    with Runtime("X64") as rt:
        assert rt.arch == Arch.X64
    with pytest.raises(ta.InvalidArgumentError, match="unknown arch"):
        Runtime("quantum")
    with pytest.raises(ta.NotSupportedError):
        Runtime(Arch.METAL)


def test_an_unknown_arch_name_says_what_to_write_instead(monkeypatch):
    for name, near in (("vulkn", "'vulkan'"), ("VULCAN", "'vulkan'"), ("cdua", "'cuda'"), ("x86", "'x64'")):
        with pytest.raises(ta.InvalidArgumentError, match=f"unknown arch {name!r}: did you mean {near}\\?") as info:
            Runtime(name)
        assert "python -m taichi_aot archs lists those that work here" in str(info.value)
    with pytest.raises(ta.InvalidArgumentError) as info:  # a kind of device, not a backend: the backends for one
        Runtime("gpu")
    message = str(info.value)
    assert "taichi_aot names backends, not device kinds: for a GPU use 'cuda'" in message and "'vulkan'" in message
    assert "did you mean" not in message and "python -m taichi_aot archs" in message
    with pytest.raises(ta.InvalidArgumentError) as info:  # nothing near: the names and the command alone
        Runtime("quantum")
    assert "did you mean" not in str(info.value) and "python -m taichi_aot archs" in str(info.value)
    monkeypatch.setenv("TAICHI_AOT_ARCH", "vulkn")  # the variable's name is checked alike
    with pytest.raises(ta.InvalidArgumentError, match="did you mean 'vulkan'"):
        Runtime()


def test_closed_runtime_raises_everywhere(arch, modules):
    rt = Runtime(arch)
    mod = rt.load_module(modules.path(arch))
    k = mod.kernels["add"]
    x = rt.ndarray((4,), np.float32)
    rt.close()
    rt.close()  # idempotent
    assert rt.closed and x.closed and mod.closed
    for call in (rt.wait, rt.flush, lambda: rt.capabilities, lambda: rt.ndarray((2,)),
                 lambda: rt.load_module(modules.path(arch)), lambda: k(x, x, 1.0), x.to_numpy,
                 lambda: mod.kernels["add"], lambda: x.fill(1), rt.__enter__):
        with pytest.raises(ta.ClosedError):
            call()


def test_kernels_and_graphs_numbers(rt, mod):
    n = 257
    a = np.linspace(-1, 1, n, dtype=np.float32)
    x = rt.ndarray_from_numpy(a)
    y = rt.ndarray_from_numpy(np.full(n, 2, np.float32))
    mod.kernels["add"](x, y, 0.25)
    np.testing.assert_allclose(x.to_numpy(), a + 0.5)
    mod.graphs["add_twice"](x=x, y=y, a=1.0)
    np.testing.assert_allclose(x.to_numpy(), a + 4.5)
    mod.graphs["add_twice"].launch({"x": x, "y": y, "a": np.float32(-1.0)})
    np.testing.assert_allclose(x.to_numpy(), a + 0.5)

    m = rt.ndarray((3, 5), np.int32)
    mod.kernels["fill_i32"].launch(m, np.int32(7))
    np.testing.assert_array_equal(m.to_numpy(), 7 + np.arange(3)[:, None] * 100 + np.arange(5)[None, :])


def test_vector_and_matrix_arguments(rt, mod):
    v = rt.ndarray((5,), np.float32, (3,))
    mod.kernels["scale_vec3"](v, np.array([1.0, -1.0, 0.5], np.float32))
    np.testing.assert_allclose(v.to_numpy(), np.array([1.0, -1.0, 0.5]) * np.arange(1, 6)[:, None])
    mod.kernels["scale_vec3"](v, (2.0, 0.0, 1.0))  # a tuple of floats is an f32 vector
    np.testing.assert_allclose(v.to_numpy()[:, 0], 2.0 * np.arange(1, 6))
    mats = rt.ndarray_from_numpy(np.arange(12, dtype=np.float32).reshape(3, 2, 2), elem_ndim=2)
    assert mats.shape == (3,) and mats.elem_shape == (2, 2)
    m = np.array([[1, 2], [3, 4]], np.float32)
    mod.kernels["mat_apply"](mats, m)
    np.testing.assert_allclose(mats.to_numpy(), m @ np.arange(12, dtype=np.float32).reshape(3, 2, 2))


def test_numpy_scalar_arguments(rt, mod):
    out = rt.ndarray((4,), np.float64)
    mod.kernels["typed_scalars"](out, np.int16(-300), np.uint16(65535), np.float16(-2.5), np.int64(123))
    np.testing.assert_array_equal(out.to_numpy(), [-300, 65535, -2.5, 123])
    h = rt.ndarray_from_numpy(np.array([1, 2, 3], np.float16))
    mod.kernels["half_scale"](h, np.float16(0.5))
    np.testing.assert_array_equal(h.to_numpy(), np.array([0.5, 1, 1.5], np.float16))


def test_every_dtype_round_trips(rt, arch):
    for dtype in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                  np.uint32, np.uint64):
        info = np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else np.finfo(dtype)
        a = np.array([info.min, 0, 1, info.max], dtype)
        x = rt.ndarray_from_numpy(a)
        assert x.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(x.to_numpy(), a)
        with rt.ndarray_from_numpy(a, host_access="readwrite").map() as view:  # mapped: host-visible memory
            np.testing.assert_array_equal(view, a)


def test_u8_and_i64_kernels(rt, mod):
    u = rt.ndarray((600,), np.uint8)
    mod.kernels["iota_u8"](u)
    np.testing.assert_array_equal(u.to_numpy(), (np.arange(600) % 256).astype(np.uint8))
    vals = rt.ndarray_from_numpy(np.arange(1, 51, dtype=np.int64) << 34)
    total = rt.ndarray((1,), np.int64)
    mod.kernels["sum_i64"](vals, total)
    assert total.to_numpy()[0] == (np.arange(1, 51, dtype=np.int64) << 34).sum()


def test_unknown_names_list_what_exists(mod):
    with pytest.raises(ta.NameNotFoundError) as info:
        mod.kernels["nope"]
    assert isinstance(info.value, KeyError)
    assert "add" in str(info.value) and "fill_i32" in str(info.value)
    with pytest.raises(KeyError, match="add_twice"):
        mod.graphs["nope"]
    with pytest.raises(TypeError):
        mod.kernels[3]
    assert "add" in mod.kernels and "nope" not in mod.kernels
    gfx = {"tex_write_graph", "tex_read_graph"} if mod.runtime.arch == Arch.VULKAN else set()
    assert set(mod.graphs) == {"add_twice", "accumulate_graph"} | gfx and len(mod.graphs) == 2 + len(gfx)
    assert mod.kernels["add"] is mod.kernels["add"]


def test_a_graph_looked_up_as_a_kernel_names_where_it_is(mod):
    """A graph's name under ``kernels`` (and a kernel's under ``graphs``) says which it is and where to look it up."""
    with pytest.raises(ta.NameNotFoundError, match=r"'add_twice' is a graph of module .*, not a kernel: use "
                                                   r"module\.graphs\['add_twice'\]") as info:
        mod.kernels["add_twice"]
    assert isinstance(info.value, KeyError)
    with pytest.raises(ta.NameNotFoundError, match=r"'add' is a kernel of module .*, not a graph: use "
                                                   r"module\.kernels\['add'\]"):
        mod.graphs["add"]
    assert mod.graphs["add_twice"] and mod.kernels["add"]


def test_a_list_for_an_array_says_what_to_pass(env):
    """A Python list or tuple where a kernel or graph takes an array says to pass np.asarray with the kernel's dtype
    or an ndarray, on both call paths (the first call packs in Python, the next in C)."""
    rt, mod = env
    x = rt.ndarray_from_numpy(np.ones(4, np.float32))
    fix = r"got (list|tuple) .*: pass np\.asarray\(value, np\.float32\) or an ndarray \(rt\.ndarray_from_numpy"
    for _ in range(2):
        with pytest.raises(ta.ArgumentTypeError, match=r"argument 0.*" + fix):
            mod.kernels["add"]([1.0, 2.0, 3.0, 4.0], x, 1.0)
        with pytest.raises(ta.ArgumentTypeError, match=r"argument 1.*" + fix):
            mod.kernels["add"](x, (1.0, 2.0, 3.0, 4.0), 1.0)
        mod.kernels["add"](x, x, 1.0)
    with pytest.raises(ta.ArgumentTypeError, match=fix):
        mod.graphs["add_twice"](x=[1.0, 2.0, 3.0, 4.0], y=x, a=1.0)
    mod.kernels["add"](x, np.asarray([1.0, 2.0, 3.0, 4.0], np.float32), 1.0)  # what it says to pass runs
    rt.wait()
    np.testing.assert_array_equal(x.to_numpy(), [5.0, 6.0, 7.0, 8.0])


def test_bad_kernel_arguments_raise(rt, mod, arch):
    x = rt.ndarray((4,), np.float32)
    add = mod.kernels["add"]
    for bad in (True, "s", object(), np.complex64(1), np.zeros(100, np.float32), [[[1.0]]], np.array([True]), x):
        with pytest.raises(TypeError):
            add(x, x, bad)
    with Runtime(arch) as other:
        y = other.ndarray((4,), np.float32)
        with pytest.raises(ta.InvalidArgumentError, match="another runtime"):
            add(x, y, 1.0)
    with pytest.raises(TypeError):
        mod.graphs["add_twice"].launch([x])
    with pytest.raises(ta.ArgumentNotFoundError):
        mod.graphs["add_twice"](x=x, a=1.0)


def test_load_module_errors(rt, arch, modules, tmp_path):
    with pytest.raises(ta.MissingFileError):
        rt.load_module(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError):
        rt.load_module(str(tmp_path / "nothing.tcm"))
    (tmp_path / "empty.tcm").write_bytes(b"")
    with pytest.raises(ta.CorruptedDataError):
        rt.load_module(tmp_path / "empty.tcm")
    (tmp_path / "junk.tcm").write_bytes(b"not a zip at all")
    with pytest.raises(ta.CorruptedDataError):
        rt.load_module(tmp_path / "junk.tcm")
    with pytest.raises(ta.CorruptedDataError):
        rt.load_module(b"junk")
    with pytest.raises(ta.CorruptedDataError):
        rt.load_module(b"")
    data = Path(modules.path(arch, tcm=True)).read_bytes()
    with pytest.raises(ta.CorruptedDataError):
        rt.load_module(data[: len(data) // 2])  # truncated archive
    (tmp_path / "emptydir").mkdir()
    with pytest.raises(ta.CorruptedDataError, match=r"is not a Taichi AOT module: it has no metadata\.json \(it is "
                                                    r"empty\)\. A module, as `taichi_aot build`"):
        rt.load_module(tmp_path / "emptydir")
    (tmp_path / "project" / "src").mkdir(parents=True)  # a folder holding a module, not one
    (tmp_path / "project" / "kernels.py").write_text("")
    shutil.copy(modules.path(arch, tcm=True), tmp_path / "project" / "physics.tcm")
    with pytest.raises(ta.CorruptedDataError, match=r"no metadata\.json \(it holds kernels\.py, physics\.tcm, src/\)"
                                                    r".*: pass such a folder or a \.tcm file; did you mean "
                                                    rf"{re.escape(repr(str(tmp_path / 'project' / 'physics.tcm')))}\?"):
        rt.load_module(tmp_path / "project")
    with pytest.raises(ta.CorruptedDataError, match=r"the \.tcm archive is not a Taichi AOT module: it has no "
                                                    r"metadata\.json \(it holds notes\.txt\)"):
        rt.load_module(_zipped({"notes.txt": b"x"}))
    with pytest.raises(TypeError):
        rt.load_module(12)
    # the runtime is intact after all that
    m = rt.load_module(modules.path(arch))
    x = rt.ndarray_from_numpy(np.ones(3, np.float32))
    m.kernels["add"](x, x, 1.0)
    np.testing.assert_array_equal(x.to_numpy(), [2, 2, 2])


def test_a_missing_module_names_the_nearest_one(rt, arch, modules, tmp_path):
    shutil.copytree(modules.path(arch), tmp_path / "physics")
    shutil.copy(modules.path(arch, tcm=True), tmp_path / "physics.tcm")
    (tmp_path / "physics.py").write_text("")  # the kernels' source: no module, never suggested
    (tmp_path / "physics.txt").write_text("")
    with pytest.raises(ta.MissingFileError) as info:
        rt.load_module(str(tmp_path / "physicss.tcm"))
    message = str(info.value)
    assert message.startswith(f"load_module: no module at {str(tmp_path / 'physicss.tcm')!r}: did you mean "
                              f"{str(tmp_path / 'physics.tcm')!r}"), message
    assert "physics.py'" not in message and "physics.txt" not in message
    with pytest.raises(FileNotFoundError, match=f"did you mean {str(tmp_path / 'physics')!r}"):  # a folder too
        rt.load_module(tmp_path / "Phisics")
    assert rt.load_module(tmp_path / "physics.tcm").kernels["add"]  # what it suggests loads
    for nothing_near in (tmp_path / "zzz.tcm", tmp_path / "nowhere" / "physics.tcm"):  # no name near, no folder
        with pytest.raises(ta.MissingFileError) as info:
            rt.load_module(nothing_near)
        assert "did you mean" not in str(info.value)


def test_hostile_archives_are_refused(rt, tmp_path):
    import zipfile

    for member in ("../evil.txt", "/abs.txt", "a/../../evil.txt"):
        path = tmp_path / "evil.tcm"
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr(member, "x")
            zf.writestr("__content__", "kernel:add\n")
        with pytest.raises(ta.CorruptedDataError):
            rt.load_module(path)
        assert not (tmp_path.parent / "evil.txt").exists()
        # the extractor itself refuses the member, whatever the metadata says
        with pytest.raises(ta.CorruptedDataError, match=r"unsafe|escapes"):
            ta.metadata.source.extract_archive(str(path), str(tmp_path / "out"))
        assert not (tmp_path / "evil.txt").exists()
    info = zipfile.ZipInfo("link")
    info.external_attr = 0o120777 << 16  # a symlink member
    with zipfile.ZipFile(tmp_path / "link.tcm", "w") as zf:
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(ta.TaichiError):
        rt.load_module(tmp_path / "link.tcm")
    with pytest.raises(ta.CorruptedDataError, match="not a regular file"):
        ta.metadata.source.extract_archive(str(tmp_path / "link.tcm"), str(tmp_path / "out2"))
    # a member whose deflated bytes are damaged (zlib's own error before)
    payload = bytes(range(256)) * 64
    with zipfile.ZipFile(tmp_path / "damaged.tcm", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("data.bin", payload)
    raw = bytearray((tmp_path / "damaged.tcm").read_bytes())
    start = raw.index(b"data.bin") + len("data.bin")  # the member's compressed bytes follow its local header
    raw[start + 4 : start + 40] = b"\xff" * 36
    (tmp_path / "damaged.tcm").write_bytes(bytes(raw))
    with pytest.raises(ta.CorruptedDataError, match="damaged"):
        ta.metadata.extract_archive(str(tmp_path / "damaged.tcm"), str(tmp_path / "out3"))


def test_module_close_keeps_others_working(rt, arch, modules):
    m1 = rt.load_module(modules.path(arch))
    m2 = rt.load_module(modules.path(arch))
    k1 = m1.kernels["add"]
    m1.close()
    with pytest.raises(ta.ClosedError):
        k1(rt.ndarray((2,)), rt.ndarray((2,)), 1.0)
    x = rt.ndarray_from_numpy(np.ones(2, np.float32))
    m2.kernels["add"](x, x, 1.0)
    np.testing.assert_array_equal(x.to_numpy(), [2, 2])


def test_wrong_thread_is_refused(arch, modules):
    """A runtime of libtaichi that keeps to its thread (OpenGL, libtaichi's CUDA) refuses another thread; a Vulkan or
    CPU runtime serves it (its calls one at a time)."""
    with Runtime(arch) as rt:
        mod = rt.load_module(modules.path(arch))
        x = rt.ndarray((4,), np.float32)
        errors = []
        if rt.device.traits.any_thread:
            assert arch in (Arch.VULKAN, Arch.X64)
            _served_in_another_thread(rt, mod, x)
            return

        def other():
            for call in (rt.wait, x.to_numpy, lambda: mod.kernels["add"](x, x, 1.0), lambda: rt.ndarray((2,))):
                try:
                    call()
                except ta.WrongThreadError as e:
                    errors.append(e)
            # a runtime of its own works in this thread
            with Runtime(arch) as mine:
                y = mine.ndarray_from_numpy(np.ones(2, np.float32))
                mine.load_module(modules.path(arch)).kernels["add"](y, y, 1.0)
                errors.append(y.to_numpy().tolist())

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert len(errors) == 5 and all(isinstance(e, ta.WrongThreadError) for e in errors[:4])
        assert "libtaichi's runtime is used from the thread that made it" in str(errors[0])
        assert errors[4] == [2.0, 2.0]
        np.testing.assert_array_equal(x.to_numpy(), np.zeros(4))  # untouched


def _served_in_another_thread(rt, mod, x):
    """Every call of a worker thread on a runtime made on this one: arrays made, copied, launched, waited for,
    closed, a module loaded, and its results right; then the runtime still serves this thread."""
    got = {}

    def other():
        y = rt.ndarray_from_numpy(np.arange(4, dtype=np.float32))
        mod.kernels["add"](x, y, 2.0)
        rt.wait()
        got["x"] = x.to_numpy().tolist()
        with rt.ndarray((2,)) as z:
            z.from_numpy(np.ones(2, np.float32))
            got["z"] = z.to_numpy().tolist()
        mine = rt.load_module(mod.source)
        mine.kernels["add"](x, y, 1.0)
        got["value"] = mine.runtime is rt
        y.close()

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert got == {"x": [0.0, 2.0, 4.0, 6.0], "z": [1.0, 1.0], "value": True}
    mod.kernels["add"](x, x, 1.0)  # x was 0, 3, 6, 9
    np.testing.assert_array_equal(x.to_numpy(), [0, 6, 12, 18])


def test_archives_with_two_members_of_one_name_or_huge_expansion_are_refused(arch, modules, tmp_path):
    import zipfile

    # two members named alike: only one of them could be read (the module used to load with no kernels)
    dup = tmp_path / "dup.tcm"
    with zipfile.ZipFile(modules.path(arch, tcm=True)) as src, zipfile.ZipFile(dup, "w") as zf:
        for info in src.infolist():
            zf.writestr(info, src.read(info))
        with pytest.warns(UserWarning, match="Duplicate name"):
            zf.writestr("__content__", "kernel:nothing\n")
    with Runtime(arch) as rt, pytest.raises(ta.CorruptedDataError, match="more than one member named '__content__'"):
        rt.load_module(dup)
    with pytest.raises(ta.CorruptedDataError, match="more than one member"):
        ta.metadata.extract_archive(str(dup), str(tmp_path / "out"))
    # 600 MiB of zeros in a ~600 KB archive: refused before anything is written
    bomb = tmp_path / "bomb.tcm"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf, zf.open("blob", "w", force_zip64=True) as f:
        chunk = bytes(1 << 20)
        for _ in range(600):
            f.write(chunk)
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(ta.CorruptedDataError, match="expands"):
        ta.metadata.extract_archive(str(bomb), str(tmp_path / "out2"))
    assert not (tmp_path / "out2" / "blob").exists()
    # and on every backend, by path and by bytes (a gfx backend reads the archive itself), in C and in Python
    with Runtime(arch) as rt:
        for source in (str(bomb), bomb.read_bytes()):
            with pytest.raises(ta.CorruptedDataError, match="expands 1"):
                rt.load_module(source)
        with pytest.raises(ta.CorruptedDataError, match="expands 1"):
            capi.create_aot_module(rt._handle, bomb.read_bytes()) if arch == Arch.VULKAN else \
                capi.load_aot_module(rt._handle, str(bomb))


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null"])
def test_a_device_file_is_no_module(path):
    # reading /dev/zero as an archive never ended
    with Runtime(Arch.X64) as rt, pytest.raises(ta.CorruptedDataError, match="neither a module folder nor a file"):
        rt.load_module(path)
    with pytest.raises(ta.CorruptedDataError, match="neither a module folder nor a file"):
        ta.metadata.read_module(path)


def test_probe_lists_vulkan_devices_and_is_cached(tmp_path, vulkan):
    import json
    import subprocess
    import sys

    from taichi_aot import _probe

    devices, why = _probe.vulkan_devices()
    assert devices, why
    assert all(d.type in _probe.VULKAN_DEVICE_TYPES.values() and d.name for d in devices)
    status = capi.arch_status()[Arch.VULKAN]
    assert status.devices == tuple(devices) and status.device_count == len(devices)
    if any("llvmpipe" in d.name for d in devices):  # Mesa's lavapipe is a CPU device: software
        assert any(d.software for d in devices)

    # a fresh process answers from the user's cache folder, and a change of what the answer depends on
    # (here: the Vulkan driver list) makes it probe again
    env = {**{k: v for k, v in __import__("os").environ.items() if k != "TAICHI_AOT_CACHE"},  # the default folder
           "XDG_CACHE_HOME": str(tmp_path)}
    code = "from taichi_aot import capi; print([a.name for a in capi.get_available_archs()[1]])"
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0, first.stderr
    files = list((tmp_path / "taichi_aot").glob("probe-*.json"))
    assert len(files) == 1
    kept = json.loads(files[0].read_text().partition("\n")[2])  # an entry: its digest's line, then the answer
    for row in kept["rows"]:  # doctor the cached answer (as this user, written right): the next process takes it
        if row[0] == "X64":
            row[1], row[3] = False, "doctored"
    key = files[0].name[len("probe-"):-len(".json")]
    assert _cache.write_entry(str(files[0]), f"probe-{key}", json.dumps(kept))
    second = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert "X64" not in second.stdout and "X64" in first.stdout
    third = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                           env={**env, "VK_ADD_DRIVER_FILES": "/nonexistent.json"})
    assert "X64" in third.stdout
    assert len(list((tmp_path / "taichi_aot").glob("probe-*.json"))) == 2


def test_show_config_and_devices_say_what_this_installation_is(capsys):
    import io
    import json
    import os
    import subprocess
    import sys

    found = ta.devices()
    by_arch = {d["arch"]: d for d in found}
    assert [d["arch"] for d in found][:2] == ["cuda", "vulkan"]  # in order of preference
    assert by_arch["x64"]["available"] and by_arch["metal"]["reason"]
    if by_arch["vulkan"]["available"]:
        assert by_arch["vulkan"]["devices"] and all({"name", "type", "software"} <= set(d)
                                                    for d in by_arch["vulkan"]["devices"])
    text = io.StringIO()
    ta.show_config(text)
    shown = text.getvalue()
    from taichi_aot.metadata import spirv

    validator = spirv.validator()  # SPIRV-Tools, bundled: its version and path are shown
    assert validator.version.startswith("v20") and os.path.isfile(validator.path)
    for needed in (ta.__version__, capi.library.path, "C-API 1007000", "x64      available", "cache: ",
                   "environment:", f"SPIR-V validator: SPIRV-Tools {validator.version} ({validator.path})"):
        assert needed in shown, needed
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "archs", "--json"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and json.loads(proc.stdout) == found


def test_one_cache_folder_listed_and_cleared(tmp_path):
    """Probe answers and compiled modules live in one folder (TAICHI_AOT_CACHE here); cache clear removes what
    taichi_aot put there and nothing else."""
    import subprocess
    import sys

    env = {**__import__("os").environ, "TAICHI_AOT_CACHE": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", "from taichi_aot import Runtime; Runtime().close()"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert list(tmp_path.glob("probe-*.json"))  # the probe's answer went there
    (tmp_path / "mine.txt").write_text("not taichi_aot's")
    listing = subprocess.run([sys.executable, "-m", "taichi_aot", "cache"], env=env, capture_output=True, text=True)
    assert listing.returncode == 0 and f"cache folder {tmp_path}" in listing.stdout
    assert "probe answers: 1" in listing.stdout
    cleared = subprocess.run([sys.executable, "-m", "taichi_aot", "cache", "clear"], env=env, capture_output=True,
                             text=True)
    assert cleared.returncode == 0 and "removed 1 entries" in cleared.stdout, cleared.stdout + cleared.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]


def test_the_librarys_log_goes_to_python_logging(modules, caplog):
    """libtaichi_c_api's log lines reach logging.getLogger("taichi_aot") at their own level (a C-API error line,
    raised as an exception anyway, at DEBUG), and nothing reaches stderr unless logging is configured."""
    import logging

    from taichi_aot import NameNotFoundError

    require_arch(Arch.X64)
    caplog.set_level(logging.DEBUG, logger="taichi_aot")
    runtime = capi.create_runtime(Arch.X64)
    try:
        module = capi.load_aot_module(runtime, modules.path(Arch.X64))
        with pytest.raises(NameNotFoundError):
            capi.get_aot_module_kernel(module, "no_such_kernel")  # the library logs, then we raise
        capi.destroy_aot_module(module)
    finally:
        capi.destroy_runtime(runtime)
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "taichi_aot"]
    assert any(level == logging.ERROR and "no_such_kernel" in text for level, text in lines), lines
    assert any(level == logging.DEBUG and "C-API error:" in text for level, text in lines), lines
    assert all(text.startswith("libtaichi_c_api: ") for _, text in lines)
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("taichi_aot").handlers)


def test_children_import_this_package_whatever_the_working_directory_holds(tmp_path, modules):
    """The probe's and the module check's child processes import the taichi_aot in use, not one a program's
    working directory holds (an unbuilt checkout there made every arch 'unavailable' and every LLVM module
    'crashed', answers then kept in the cache)."""
    import subprocess
    import sys

    require_arch(Arch.X64)
    shadow = tmp_path / "cwd" / "taichi_aot"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not this taichi_aot')\n")
    app = tmp_path / "app.py"
    app.write_text("import sys, taichi_aot as ta\n"
                   "with ta.Runtime('x64') as rt:\n"
                   "    rt.load_module(sys.argv[1]).close()\n"
                   "print('ok', ta.capi.arch_status()[ta.Arch.X64].available)\n")
    env = {**__import__("os").environ, "TAICHI_AOT_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, str(app), modules.path(Arch.X64)], cwd=tmp_path / "cwd", env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok True", proc.stderr[-2000:]


def test_vulkan_fences_are_kept_and_reused(vulkan, modules):
    """libtaichi makes a VkFence for every submit and destroys it at the next wait (0.8 ms on NVIDIA's driver):
    taichi_aot keeps them, a pool a device, so waits make no fence once warm; two runtimes at once keep theirs (the
    kernels launched by libtaichi: the own Vulkan launch makes its fences once)."""
    from taichi_aot.config import vulkan_fences

    before = vulkan_fences()
    assert before["on"], before["reason"]
    with Runtime(vulkan) as a, Runtime(vulkan) as b:
        kernels = [rt.load_module(modules.path(vulkan), launcher="taichi").kernels["fill_i32"] for rt in (a, b)]
        arrays = [rt.ndarray((2, 3), np.int32) for rt in (a, b)]
        for i in range(100):
            for rt, fill, x in zip((a, b), kernels, arrays):
                fill(x, i)
                rt.wait()
        for x in arrays:
            np.testing.assert_array_equal(x.to_numpy(), 99 + np.arange(2)[:, None] * 100 + np.arange(3))
    after = vulkan_fences()
    assert after["hooked"]
    # made: at most a few of libtaichi's, and each runtime's own Vulkan state's fences (one a batch: 8), made once
    assert after["reused"] - before["reused"] >= 190 and after["made"] - before["made"] <= 8 + 2 * 8


def test_vulkan_fences_can_be_left_to_libtaichi(vulkan, modules):
    import subprocess
    import sys

    child = (
        "import numpy as np, taichi_aot\n"
        "from taichi_aot import Arch, Runtime\n"
        "from taichi_aot.config import vulkan_fences\n"
        "with Runtime(Arch.VULKAN) as rt:\n"
        "    x = rt.ndarray((2, 3), np.int32)\n"
        f"    rt.load_module({modules.path(vulkan)!r}).kernels['fill_i32'](x, 5)\n"
        "    rt.wait()\n"
        "    assert x.to_numpy()[1, 2] == 107\n"
        "f = vulkan_fences()\n"
        "print(f['on'], f['hooked'], f['made'], f['reason'])\n"
    )
    import os

    env = {**os.environ, "TAICHI_AOT_VULKAN_FENCES": "0"}
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[:3] == ["False", "False", "0"] and "TAICHI_AOT_VULKAN_FENCES=0" in proc.stdout
