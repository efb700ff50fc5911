"""The own Vulkan launch (``taichi_aot/backends/vulkan.py``, ``_csrc/backends/vulkan.c``): every kernel and graph of the
test module gives what libtaichi's launch gives; launches, libtaichi's copies and launches and waits keep program
order; launches batch, arrays passed again reuse their descriptor sets, freed arrays never linger in them, loops over
an ndarray's run-time length are dispatched for its elements; errors stay typed; the C declarations of Vulkan's
structures agree with Vulkan's own headers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import numpy as np
import pytest

from conftest import HERE, IN_CI
from taichi_aot import Arch, ArgumentTypeError, ClosedError, InvalidArgumentError, Runtime
from taichi_aot._native import lib

ROOT = os.path.dirname(HERE)
CSRC = os.path.join(ROOT, "taichi_aot", "_csrc")


def _counts(rt: Runtime) -> dict[str, int]:
    state = rt.backends.get("vulkan")
    assert state is not None and state.id, getattr(state, "why", "no own Vulkan state")
    return state.counts()


def run_all(rt: Runtime, mod) -> dict[str, np.ndarray]:
    """Every plain kernel and graph of the test module run once, in one batch, then read."""
    k, g = mod.kernels, mod.graphs
    out: dict[str, np.ndarray] = {}
    x = rt.ndarray_from_numpy(np.arange(64, dtype=np.float32))
    y = rt.ndarray_from_numpy(np.linspace(-1, 1, 64).astype(np.float32))
    k["add"](x, y, 0.5)
    g["add_twice"](x=x, y=y, a=0.25)
    filled = rt.ndarray((5, 7), np.int32)
    k["fill_i32"](filled, 3)
    vec = rt.ndarray((9,), np.float32, (3,))
    k["scale_vec3"](vec, np.array([1.0, -2.0, 0.5], np.float32))
    mat = rt.ndarray((6,), np.float32, (2, 2))
    mat.from_numpy(np.arange(24, dtype=np.float32).reshape(6, 2, 2))
    k["mat_apply"](mat, np.array([[0.0, 1.0], [2.0, -1.0]], np.float32))
    typed = rt.ndarray((4,), np.float64)
    k["typed_scalars"](typed, -7, 65000, 1.5, -123456)
    half = rt.ndarray_from_numpy(np.linspace(0, 2, 33).astype(np.float16))
    k["half_scale"](half, 0.75)
    u8 = rt.ndarray((300,), np.uint8)
    k["iota_u8"](u8)
    big = rt.ndarray_from_numpy(np.arange(1000, dtype=np.int64) * 3)
    summed = rt.ndarray((1,), np.int64)
    k["sum_i64"](big, summed)
    total, v = rt.ndarray((), np.float32), rt.ndarray((), np.float32, (3,))
    v.from_numpy(np.array([1.0, 2.0, 3.0], np.float32))
    k["accumulate"](total, x, v)
    g["accumulate_graph"](total=total, x=x, v=v)
    rt.wait()
    for name, array in dict(x=x, filled=filled, vec=vec, mat=mat, typed=typed, half=half, u8=u8, summed=summed,
                            total=total, v=v).items():
        out[name] = array.to_numpy()
    return out


def test_the_own_launch_takes_every_kernel_but_those_on_textures(vulkan, modules):
    """What it gives against libtaichi's launch: test_backends' conformance test, over every registered backend."""
    with Runtime(vulkan) as rt:
        own = rt.load_module(modules.path(vulkan))
        said = own.launchers()
        assert {n: w for n, w in said.items() if not n.startswith("tex_")} == dict.fromkeys(
            [n for n in said if not n.startswith("tex_")], "vulkan")
        assert said["tex_write"].startswith("taichi: ") and "texture" in said["tex_write"]
        assert own.kernels["add"].launcher == "vulkan" and own.graphs["add_twice"].launcher == "vulkan"


def test_launches_keep_order_with_libtaichis_copies_and_launches(vulkan, modules):
    """No wait between: an own launch, libtaichi's device copy of its result, libtaichi's launch of the same
    kernel, the own launch again, a copy back; each step sees the one before."""
    with Runtime(vulkan) as rt:
        own = rt.load_module(modules.path(vulkan)).kernels["add"]
        library = rt.load_module(modules.path(vulkan), launcher="taichi").kernels["add"]
        x = rt.ndarray_from_numpy(np.zeros(1000, np.float32))
        y = rt.ndarray_from_numpy(np.ones(1000, np.float32))
        z = rt.ndarray((1000,), np.float32)
        expect = np.zeros(1000, np.float32)
        for _ in range(20):
            own(x, y, 1.0)
            z.copy_from(x)  # libtaichi's ti_copy_memory_device_to_device
            library(z, y, 2.0)
            own(z, y, 3.0)
            x.copy_from(z)
            expect = expect + 6.0
        rt.wait()
        np.testing.assert_array_equal(x.to_numpy(), expect)


def test_work_libtaichi_queued_before_the_module_loaded_comes_first(vulkan, modules):
    """A copy libtaichi holds unsubmitted when the runtime's first module is loaded (an upload into device memory,
    on a discrete GPU) runs before the first own launch that reads its result."""
    for _ in range(3):
        with Runtime(vulkan) as rt:
            src = rt.ndarray_from_numpy(np.full(256, 5.0, np.float32))
            rt.wait()
            x = rt.ndarray((256,), np.float32)
            x.copy_from(src)  # enqueued by libtaichi, no wait
            add = rt.load_module(modules.path(vulkan)).kernels["add"]
            add(x, src, 1.0)
            rt.wait()
            assert (x.to_numpy() == 10).all()


def test_launches_batch_and_arrays_passed_again_keep_their_sets(vulkan, modules):
    with Runtime(vulkan) as rt:
        add = rt.load_module(modules.path(vulkan)).kernels["add"]
        x, y = rt.ndarray((16,), np.float32), rt.ndarray_from_numpy(np.ones(16, np.float32))
        before = _counts(rt)
        for _ in range(2000):
            add(x, y, 1.0)
        rt.wait()
        after = _counts(rt)
        assert (x.to_numpy() == 2000).all()
        assert after["dispatches"] - before["dispatches"] == 2000
        assert 2000 // 256 <= after["submits"] - before["submits"] <= 2000 // 16 + 2  # batches, not one a launch
        assert after["sets made"] - before["sets made"] <= 1 and after["sets kept"] - before["sets kept"] >= 1999
        assert after["workgroups"] - before["workgroups"] == 2000  # 16 elements: one workgroup, not 1,024


def host_arrays_come_back_whole(add: Any) -> None:
    """numpy arrays of a MiB and more passed to ``add`` again and again, a strided one and one of another byte order
    (copied back through a copy): every value is the kernel's (test_cudart's too)."""
    n = 1 << 19  # 2 MiB of f32
    x, y = np.zeros(n, np.float32), np.arange(n, dtype=np.float32)
    for k in range(1, 4):
        add(x, y, 1.0)
        np.testing.assert_array_equal(x, y * k)
    np.testing.assert_array_equal(y, np.arange(n, dtype=np.float32))  # read only: never copied back over
    wide = np.zeros(2 * n, np.float32)
    add(wide[::2], y, 2.0)
    np.testing.assert_array_equal(wide[::2], y * 2)
    assert not wide[1::2].any()
    swapped = np.zeros(n, np.dtype(np.float32).newbyteorder())
    add(swapped, y, 3.0)
    np.testing.assert_array_equal(swapped, y * 3)


def test_host_arrays_a_kernel_writes_come_back_whole(vulkan, modules):
    """On a GPU with memory of its own, the copy back is read straight into the caller's array (through its
    imported pages once it moves again)."""
    with Runtime(vulkan) as rt:
        host_arrays_come_back_whole(rt.load_module(modules.path(vulkan)).kernels["add"])


def test_a_loop_over_an_ndarray_is_dispatched_for_its_elements(vulkan, modules):
    with Runtime(vulkan) as rt:
        add = rt.load_module(modules.path(vulkan)).kernels["add"]
        for n in (1, 127, 128, 129, 100_000, 300_000):
            x = rt.ndarray_from_numpy(np.arange(n, dtype=np.float32))
            y = rt.ndarray_from_numpy(np.full(n, 2.0, np.float32))
            before = _counts(rt)["workgroups"]
            add(x, y, 0.5)
            rt.wait()
            groups = _counts(rt)["workgroups"] - before
            loop = rt.device.loop_threads() or 131072
            assert groups == max(1, min(-(-n // 128), -(-loop // 128))), n
            np.testing.assert_array_equal(x.to_numpy(), np.arange(n, dtype=np.float32) + 1.0)  # every element


def test_a_freed_array_never_lingers_in_a_kept_set(vulkan, modules):
    """An array freed and a new one made (libtaichi may give it the freed one's handle): the kernel writes the new
    one, launched before and after, with and without a wait between."""
    with Runtime(vulkan) as rt:
        add = rt.load_module(modules.path(vulkan)).kernels["add"]
        y = rt.ndarray_from_numpy(np.ones(64, np.float32))
        for i in range(30):
            x = rt.ndarray((64,), np.float32)
            add(x, y, float(i))
            if i % 2:
                rt.wait()
            got = x.to_numpy()
            np.testing.assert_array_equal(got, np.full(64, i, np.float32))
            x.close()


def test_errors_stay_typed_and_leave_the_runtime_working(vulkan, modules):
    with Runtime(vulkan) as rt:
        mod = rt.load_module(modules.path(vulkan))
        add = mod.kernels["add"]
        x, y = rt.ndarray((8,), np.float32), rt.ndarray((8,), np.float32)
        with pytest.raises(InvalidArgumentError, match="int32 ndarray"):
            add(x, rt.ndarray((8,), np.int32), 1.0)
        with pytest.raises(ArgumentTypeError):
            add(x, y, "1")
        errors = []
        worker = threading.Thread(target=lambda: errors.append(_raises(add, x, y, 1.0)))
        worker.start()
        worker.join()
        assert errors == [None]  # any thread may launch on a Vulkan runtime (y is zeros: x unchanged)
        y.from_numpy(np.ones(8, np.float32))
        add(x, y, 4.0)
        rt.wait()
        assert (x.to_numpy() == 4).all()
        pending = mod.kernels["fill_i32"]
        pending(rt.ndarray((4, 4), np.int32), 1)  # recorded, not waited for: the close waits
    with pytest.raises(ClosedError):
        add(x, y, 1.0)


def _raises(fn, *args):
    try:
        fn(*args)
    except Exception as e:  # the type is what the test reads
        return type(e)
    return None


def test_modules_and_runtimes_come_and_go_with_work_in_flight(vulkan, modules):
    """Modules closed with their launches still queued, runtimes closed without a wait, two runtimes at once:
    no crash, and each runtime's results its own."""
    for _ in range(5):
        with Runtime(vulkan) as a, Runtime(vulkan) as b:
            xs = []
            for rt in (a, b):
                mod = rt.load_module(modules.path(vulkan))
                x = rt.ndarray_from_numpy(np.zeros(32, np.float32))
                y = rt.ndarray_from_numpy(np.ones(32, np.float32))
                for _ in range(300):
                    mod.kernels["add"](x, y, 1.0 if rt is a else 2.0)
                mod.close()
                xs.append(x)
            assert (xs[0].to_numpy() == 300).all() and (xs[1].to_numpy() == 600).all()


def test_vk_h_agrees_with_vulkans_own_headers(tmp_path):
    """Every structure backends/vk.h declares by layout has the size and member offsets of Vulkan's own, and every
    constant its value: compiled beside Vulkan's headers where they are installed (libvulkan-dev)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not os.path.isfile("/usr/include/vulkan/vulkan_core.h"):
        if IN_CI:
            pytest.fail("Vulkan's headers (libvulkan-dev) and a C compiler check backends/vk.h in CI")
        pytest.skip("Vulkan's headers are not installed here (apt-get install libvulkan-dev)")
    with open(os.path.join(CSRC, "backends", "vk.h"), encoding="utf-8") as f:
        text = f.read()
    import re

    checks = []
    for body, struct in re.findall(r"typedef struct \{(.*?)\} AotVk(\w+);", text, re.S):
        if struct == "Functions":
            continue
        vk = f"Vk{struct}"
        checks.append(f"_Static_assert(sizeof(AotVk{struct}) == sizeof({vk}), \"{struct}\");")
        for member in re.findall(r"\b(\w+)(?:\[\d+\])?;", body):
            checks.append(f"_Static_assert(offsetof(AotVk{struct}, {member}) == offsetof({vk}, {member}), "
                          f"\"{struct}.{member}\");")
    for name, value in re.findall(r"#define AOT_(VK_\w+) (\S+)", text):
        if name.startswith(("VK_LIMIT_", "VK_PROPERTIES_")):
            continue
        checks.append(f"_Static_assert((long long)({value}) == (long long){name}, \"{name}\");")
    checks.append("_Static_assert(AOT_VK_PROPERTIES_SIZE == sizeof(VkPhysicalDeviceProperties), \"properties\");")
    checks.append("_Static_assert(AOT_VK_PROPERTIES_DEVICE_TYPE == offsetof(VkPhysicalDeviceProperties, deviceType), "
                  "\"deviceType\");")
    for limit, member in (("MAX_UNIFORM_BUFFER_RANGE", "maxUniformBufferRange"),
                          ("MAX_COMPUTE_WORK_GROUP_COUNT", "maxComputeWorkGroupCount"),
                          ("MIN_UNIFORM_BUFFER_OFFSET_ALIGNMENT", "minUniformBufferOffsetAlignment")):
        checks.append(f"_Static_assert(AOT_VK_LIMIT_{limit} == offsetof(VkPhysicalDeviceProperties, limits) + "
                      f"offsetof(VkPhysicalDeviceLimits, {member}), \"{limit}\");")
    source = tmp_path / "check.c"
    source.write_text("#include <stddef.h>\n#include <vulkan/vulkan.h>\n#include \"backends/vk.h\"\n"
                      + "\n".join(checks) + "\n")
    proc = subprocess.run([cc, "-fsyntax-only", "-std=gnu11", "-I", CSRC, str(source)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(checks) > 120


@pytest.fixture
def vulkan():
    from conftest import require_arch

    require_arch(Arch.VULKAN)
    return Arch.VULKAN


def test_build_takes_this_machines_capabilities_and_a_module_without_them_says_so(vulkan, tmp_path):
    """``build --arch vulkan`` uses the capabilities of this machine's Vulkan device (a float atomic becomes the
    device's own instruction, not a compare-and-swap loop); ``--portable`` Taichi's defaults, recorded as chosen.
    Loading a module built without a float-atomic capability its device has (as Taichi's own ``ti.aot.Module``
    makes it) warns once, naming the build line that fixes it; a module built ``--portable`` says nothing."""
    import json
    import sys
    import warnings
    import zipfile

    source = os.path.join(ROOT, "examples", "physics.py")  # its energy kernel sums with a float atomic
    outs = {}
    for name, extra in (("here", []), ("portable", ["--portable"])):
        outs[name] = str(tmp_path / f"{name}.tcm")
        proc = subprocess.run([sys.executable, "-m", "taichi_aot", "build", source, "--arch", "vulkan", *extra,
                               "-o", outs[name]], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        with zipfile.ZipFile(outs[name]) as zf:
            caps = {c["key"] for c in json.loads(zf.read("metadata.json"))["required_caps"]}
        if name == "here":
            assert "capabilities (this machine's" in proc.stdout and "spirv_has_atomic_float_add" in caps
        else:
            assert "(--portable)" in proc.stdout and "spirv_has_atomic_float_add" not in caps
    with Runtime(vulkan) as rt:
        if not rt.capabilities.get(next(c for c in rt.capabilities if "ATOMIC_FLOAT_ADD" in str(c))):
            pytest.skip("this Vulkan device has no float atomic add")
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            rt.load_module(outs["here"])
        assert not [w for w in seen if "compare-and-swap" in str(w.message)]
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            rt.load_module(outs["portable"])  # portable on purpose
        assert not [w for w in seen if "compare-and-swap" in str(w.message)]
        plain = str(tmp_path / "plain.tcm")  # the same module with no word of --portable
        with zipfile.ZipFile(outs["portable"]) as src, zipfile.ZipFile(plain, "w") as dst:
            for info in src.infolist():
                data = src.read(info)
                if info.filename == "taichi_aot.json":
                    sidecar = json.loads(data)
                    assert sidecar.pop("portable") is True
                    data = json.dumps(sidecar).encode()
                dst.writestr(info, data)
        with pytest.warns(RuntimeWarning, match=r"compare-and-swap.*taichi_aot build FILE.py --arch vulkan"):
            rt.load_module(plain)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            rt.load_module(plain)  # once
        assert not [w for w in seen if "compare-and-swap" in str(w.message)]


@pytest.mark.parametrize("choice", ["vulkan", "taichi"])
def test_threads_share_one_runtime(vulkan, modules, choice):
    """One Vulkan runtime made here, used by four threads at once (and this one): each makes its arrays, copies
    them in and out (staged and through imported pages), launches kernels, graphs and numpy arguments, waits, and
    closes what it made; every result is its own, under either launch (libtaichi's calls are made one at a time
    too), and the runtime serves this thread after."""
    with Runtime(vulkan) as rt:
        mod = rt.load_module(modules.path(vulkan), launcher=choice)
        add, twice = mod.kernels["add"], mod.graphs["add_twice"]
        assert add.launcher == choice
        failures: list[BaseException] = []
        counts: dict[int, tuple] = {}
        go = threading.Barrier(5)

        def work(seed: int) -> None:
            try:
                go.wait()
                for round_ in range(12):
                    size = 64 + 8 * seed + round_
                    base = np.arange(size, dtype=np.float32) * (seed + 1)
                    x = rt.ndarray_from_numpy(base)
                    y = rt.ndarray_from_numpy(np.ones(size, np.float32))
                    for _ in range(5):
                        add(x, y, 1.0)
                    twice(x=x, y=y, a=float(seed))  # + 2 * seed
                    host = np.zeros(size, np.float32)
                    add(host, y, float(round_))  # a numpy argument: copied in and back
                    if round_ % 3 == 0:
                        rt.wait()
                    got = x.to_numpy()
                    np.testing.assert_array_equal(got, base + 5 + 2 * seed)
                    np.testing.assert_array_equal(host, np.full(size, round_, np.float32))
                    big = np.full((1 << 18,), seed, np.float32)  # 1 MiB: through its own pages where imported
                    z = rt.ndarray((1 << 18,), np.float32)
                    z.from_numpy(big)
                    np.testing.assert_array_equal(z.to_numpy(), big)
                    for a in (x, y, z):
                        a.close()
                if seed < 4:  # another thread's launches: its own launcher's, made in C as this thread's are
                    counts[seed] = (add._twin().call_counts, twice._twin().call_counts)
            except BaseException as e:  # the test reads them
                failures.append(e)

        threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        work(4)
        for t in threads:
            t.join()
        assert failures == []
        # each thread back from a wait or a copy took Python's lock and unmarked itself (_csrc/launch.c)
        assert lib.taichi_aot_coming == 0
        for (in_c, in_python), graph in counts.values():  # new arrays each round, and others' closes, go to Python
            assert in_c > 0 and in_c + in_python == 12 * 6 and sum(graph) == 12, counts
        assert add._twin() is None  # this thread's launcher is the kernel itself
        x = rt.ndarray_from_numpy(np.zeros(8, np.float32))
        add(x, rt.ndarray_from_numpy(np.ones(8, np.float32)), 3.0)
        np.testing.assert_array_equal(x.to_numpy(), np.full(8, 3, np.float32))


def test_modules_released_on_one_thread_beside_launches_and_arrays_on_another(vulkan, modules, monkeypatch):
    """The owner thread loads modules and releases them (none kept idle: libtaichi destroys each) while a worker
    makes and frees arrays and launches a kernel of a module the owner closes under it: no deadlock between the
    runtime's calls and Python's locks, no launch of a released kernel (each launch comes wholly before its module's
    release, or raises ClosedError), and the runtime serves both threads after."""
    from taichi_aot import module as module_room

    monkeypatch.setattr(module_room, "KEEP_IDLE", 0)
    path = modules.path(vulkan)
    with Runtime(vulkan) as rt:
        x, y = rt.ndarray((256,), np.float32), rt.ndarray_from_numpy(np.ones(256, np.float32))
        current = {"add": rt.load_module(path).kernels["add"]}
        stop, counts, failures = threading.Event(), {"launched": 0, "closed": 0, "arrays": 0}, []

        def worker() -> None:
            try:
                while not stop.is_set():
                    try:
                        current["add"](x, y, 1.0)
                        counts["launched"] += 1
                    except ClosedError:
                        counts["closed"] += 1
                    with rt.ndarray((64,), np.float32) as z:
                        z.from_numpy(np.full(64, 2.0, np.float32))
                    counts["arrays"] += 1
            except BaseException as e:  # the test reads it
                failures.append(e)

        t = threading.Thread(target=worker)
        t.start()
        deadline = time.monotonic() + 3.0
        try:
            while time.monotonic() < deadline:
                current["add"].module.close()  # released now (KEEP_IDLE 0), under the worker's launches
                current["add"] = rt.load_module(path).kernels["add"]  # loaded anew: none of its content is open
                time.sleep(0.002)  # the worker's launches of this one
        finally:
            stop.set()
            t.join(timeout=60)
        assert not t.is_alive(), "the worker hangs: a deadlock between the runtime's calls and Python's locks"
        assert failures == [] and counts["launched"] > 0 and counts["arrays"] > 0, (failures, counts)
        rt.wait()
        launched = counts["launched"]
        assert (x.to_numpy() == launched).all()  # every launch that returned added its 1.0 once


def _calls_until_closed(rt, add, x, y, stop, errors) -> None:
    """A worker's launches, arrays, copies and waits on ``rt`` until it is closed (a typed error then ends them) or
    ``stop`` is set; anything else raised goes into ``errors``."""
    from taichi_aot import TaichiError

    while not stop.is_set():
        try:
            add(x, y, 1.0)
            with rt.ndarray((64,), np.float32) as z:
                z.from_numpy(np.ones(64, np.float32))
                z.to_numpy()
            rt.wait()
        except TaichiError:
            if rt.closed:
                return
        except BaseException as e:  # the test reads it
            errors.append(e)
            return


@pytest.mark.parametrize("policy", ["auto", "device"])
def test_a_runtime_closed_under_a_workers_calls(vulkan, modules, monkeypatch, policy):
    """The owner thread closes the runtime while a worker launches, makes, copies, reads and waits on it (its arrays
    where the device puts them, and in device memory through staging buffers): every call of the worker's comes
    wholly before the close or raises a typed error (ClosedError, or InvalidStateError from a call libtaichi refuses
    on the closed runtime); nothing crashes, and the worker ends."""
    monkeypatch.setenv("TAICHI_AOT_VULKAN_MEMORY", policy)
    for round_ in range(8):
        rt = Runtime(vulkan)
        add = rt.load_module(modules.path(vulkan)).kernels["add"]
        x, y = rt.ndarray((1024,), np.float32), rt.ndarray_from_numpy(np.ones(1024, np.float32))
        stop, errors = threading.Event(), []
        t = threading.Thread(target=_calls_until_closed, args=(rt, add, x, y, stop, errors))
        t.start()
        time.sleep(0.01 + 0.005 * round_)
        rt.close()
        stop.set()
        t.join(timeout=60)
        assert not t.is_alive() and errors == [], errors


def test_a_closed_runtime_destroyed_again_through_the_c_api_is_refused(vulkan):
    """libtaichi destroys a runtime twice where a C program (or a binding of its own) asks twice, and crashes; the
    wrapper the own Vulkan launch puts around ti_destroy_runtime refuses the second, as every other call on a closed
    runtime is refused (INVALID_STATE), in a child (a crash fails the test)."""
    code = textwrap.dedent("""
        from taichi_aot import Runtime
        from taichi_aot._native import ffi, lib
        rt = Runtime("vulkan")
        handle = rt.handle
        rt.close()
        for _ in range(3):
            lib.ti_destroy_runtime(handle)
            error = lib.ti_get_last_error(ffi.NULL, ffi.NULL)
            assert error == lib.TI_ERROR_INVALID_STATE, error
        lib.ti_set_last_error(lib.TI_ERROR_SUCCESS, ffi.NULL)  # read: cleared, as a C program clears it
        again = Runtime("vulkan")  # a runtime made again, at that address or another: used and closed as any
        again.ndarray((4,), "float32").close()
        again.close()
        print("survived")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0 and "survived" in proc.stdout, proc.stderr[-2000:]


@pytest.mark.parametrize("first", ["ndarrays", "numpy"])  # numpy: staged copies, launched on another path
def test_a_thread_whose_first_launch_raced_a_recording_has_its_next_calls_recorded(vulkan, modules, first,
                                                                                  monkeypatch):
    """Another thread's first call that passed the recording check just before the owner began recording launches
    (it came first); its launcher, made then, is not taken as fresh: its next calls during the recording are
    recorded, as every other thread's are, and run at the replay."""
    from test_errors_guide import _on_another_thread

    from taichi_aot._callplan import CallPlan

    with Runtime(vulkan) as rt:
        add = rt.load_module(modules.path(vulkan)).kernels["add"]
        x, y = rt.ndarray_from_numpy(np.zeros(8, np.float32)), rt.ndarray_from_numpy(np.ones(8, np.float32))
        xh, yh = np.zeros(8, np.float32), np.ones(8, np.float32)

        def raced() -> None:  # the first call, as the slow path makes it once past the recording check
            twin = add._twin()
            assert twin is not None
            with monkeypatch.context() as m:  # the check it passed before the owner began recording (the owner waits)
                m.setattr(CallPlan, "recording", lambda _: False)
                twin(*((x, y) if first == "ndarrays" else (xh, yh)), 1.0)

        def then_a_call() -> None:
            raced()  # launched at once: 1
            for _ in range(3):  # the same thread's next calls, in C by its launcher: recorded
                add(x, y, 10.0)

        with rt.record() as seq:
            raised = _on_another_thread(then_a_call)
            add(x, y, 100.0)  # the owner's: recorded
        assert raised is None, raised
        launched = 1 if first == "ndarrays" else 0  # the raced call's: on x, or on the numpy array
        np.testing.assert_array_equal(x.to_numpy(), np.full(8, launched, np.float32))
        np.testing.assert_array_equal(xh, np.full(8, 1 - launched, np.float32))
        assert len(seq) == 4
        seq.replay()
        np.testing.assert_array_equal(x.to_numpy(), np.full(8, 130 + launched, np.float32))
