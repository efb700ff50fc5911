"""Which calls the C call (_csrc/call.c) makes itself, argument kind by argument kind, and what it keeps.

``call_counts`` is ``(made in C, made in Python)``: after the first calls, through which the launcher learns its
arguments, a repeated call with each kind of argument below adds to the first only. The C call is handed the
runtime's records once (``ForeignArgs.hits``, in ``_prepare``) and reads a record's fields (``NumpyHit``,
``PrintHit``, C types of its own: ``_csrc/records.c``) by field. A hundred thousand calls leave every reference count
as it was."""

from __future__ import annotations

import gc
import os
import re
import sys

import numpy as np
import pytest

import taichi_aot
from conftest import named_module, require_arch, require_extra
from taichi_aot import Arch, Runtime

TIMES = 20  # repeated calls a test makes after the first


def in_c(launcher, call, times: int = TIMES) -> tuple[int, int]:
    """Make ``call`` twice (the launcher learns its arguments: an array it takes anew the first time, in C, Python
    learns the second), then ``times`` more: how many of those were made in C and how many in Python."""
    call()
    call()
    before = launcher.call_counts
    for _ in range(times):
        call()
    after = launcher.call_counts
    return after[0] - before[0], after[1] - before[1]


@pytest.fixture
def x64(modules):
    require_arch(Arch.X64)
    with Runtime(Arch.X64) as rt:
        yield rt, rt.load_module(modules.path(Arch.X64))


@pytest.fixture
def torch():
    return require_extra("torch", "interop")


def _torch_layout_read(torch) -> bool:
    """Whether this torch's tensors are read by torch's C functions (torch 2.10 on, checked when first used)."""
    from taichi_aot._arrays import _TORCH_LAYOUT, print_of

    fast = print_of(torch.Tensor) is _TORCH_LAYOUT
    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    assert fast or version < (2, 10), "torch's C functions should read tensors of torch 2.10 on"
    return fast


# ---------------------------------------------------------------------------
# Every backend: NdArrays, scalars, keywords, bound launches, graphs


def test_ndarrays_passed_again(env):
    rt, mod = env
    x, y = rt.ndarray((16,), np.float32), rt.ndarray_from_numpy(np.ones(16, np.float32))
    add = mod.kernels["add"]
    assert in_c(add, lambda: add(x, y, 1.0)) == (TIMES, 0)
    rt.wait()
    assert np.array_equal(x.to_numpy(), np.full(16, TIMES + 2, np.float32))


def test_scalars_of_each_kind(env):
    rt, mod = env
    add, fill = mod.kernels["add"], mod.kernels["fill_i32"]
    x, y = rt.ndarray((16,), np.float32), rt.ndarray_from_numpy(np.ones(16, np.float32))
    m = rt.ndarray((2, 3), np.int32)
    values = iter(range(10 * TIMES))
    assert in_c(add, lambda: add(x, y, float(next(values)) / 2)) == (TIMES, 0)  # a float for an f32, new each call
    assert in_c(add, lambda: add(x, y, next(values))) == (TIMES, 0)  # an int for an f32
    assert in_c(fill, lambda: fill(m, next(values) - 2**31)) == (TIMES, 0)  # an int for an i32, down to its least
    rt.wait()
    assert m.to_numpy()[0, 0] == next(values) - 1 - 2**31


def test_keyword_calls(arch, modules, tmp_path):
    with Runtime(arch) as rt:
        add = rt.load_module(named_module(arch, modules, tmp_path)).kernels["add"]
        x, y = rt.ndarray((16,), np.float32), rt.ndarray_from_numpy(np.ones(16, np.float32))
        assert in_c(add, lambda: add(x, y, a=1.0)) == (TIMES, 0)
        assert in_c(add, lambda: add(x, y=y, a=2)) == (TIMES, 0)
        assert in_c(add, lambda: add(a=0.5, y=y, x=x)) == (TIMES, 0)
        if arch == Arch.X64:  # host arrays are shared there: found again by keyword too
            xn, yn = np.zeros(16, np.float32), np.ones(16, np.float32)
            assert in_c(add, lambda: add(xn, y=yn, a=1.0)) == (TIMES, 0)
            assert in_c(add, lambda: add(x=np.zeros(16, np.float32), y=yn, a=1.0)) == (TIMES, 0)


def test_bound_launches(env):
    rt, mod = env
    add = mod.kernels["add"]
    x, y = rt.ndarray((16,), np.float32), rt.ndarray_from_numpy(np.ones(16, np.float32))
    bound = add.bind(x, y, 1.0)
    assert in_c(bound, bound) == (TIMES, 0)
    run = bound.launch
    assert in_c(bound, run) == (TIMES, 0)
    rt.wait()
    assert np.array_equal(x.to_numpy(), np.full(16, 2 * TIMES + 4, np.float32))


def test_graphs(env):
    rt, mod = env
    graph = mod.graphs["add_twice"]
    x, y = rt.ndarray((16,), np.float32), rt.ndarray_from_numpy(np.ones(16, np.float32))
    assert in_c(graph, lambda: graph(x=x, y=y, a=1.0)) == (TIMES, 0)
    assert in_c(graph, lambda: graph(a=2, y=y, x=x)) == (TIMES, 0)
    bound = graph.bind(x=x, y=y, a=1.0)
    assert in_c(bound, bound) == (TIMES, 0)


# ---------------------------------------------------------------------------
# Host arrays, shared on a CPU backend (on Vulkan they travel as staged copies, made in Python)


def test_numpy_arrays_passed_again(x64):
    _rt, mod = x64
    add, graph = mod.kernels["add"], mod.graphs["add_twice"]
    x, y = np.zeros(16, np.float32), np.ones(16, np.float32)
    assert in_c(add, lambda: add(x, y, 1.0)) == (TIMES, 0)  # found again: NumpyHit
    assert np.array_equal(x, np.full(16, TIMES + 2, np.float32))
    assert in_c(graph, lambda: graph(x=x, y=y, a=1.0)) == (TIMES, 0)
    nd = _rt.ndarray_from_numpy(np.ones(16, np.float32))
    assert in_c(add, lambda: add(x, nd, 1.0)) == (TIMES, 0)  # a numpy array beside an NdArray


def test_new_numpy_arrays_each_call(x64):
    _rt, mod = x64
    add, graph = mod.kernels["add"], mod.graphs["add_twice"]
    y = np.ones(16, np.float32)
    assert in_c(add, lambda: add(np.zeros(16, np.float32), y, 1.0)) == (TIMES, 0)  # taken anew: fresh.c
    assert in_c(add, lambda: add(np.zeros(16, np.float32), np.ones(16, np.float32), 1.0)) == (TIMES, 0)
    big = np.zeros(64, np.float32)
    assert in_c(add, lambda: add(big[16:32], y, 1.0)) == (TIMES, 0)  # a new view each call
    assert np.array_equal(big[16:32], np.full(16, TIMES + 2, np.float32))
    assert in_c(graph, lambda: graph(x=np.zeros(16, np.float32), y=y, a=1.0)) == (TIMES, 0)


def test_torch_tensors_passed_again(x64, torch):
    _rt, mod = x64
    add, graph = mod.kernels["add"], mod.graphs["add_twice"]
    x, y = torch.zeros(16), torch.ones(16)
    assert in_c(add, lambda: add(x, y, 1.0)) == (TIMES, 0)  # found again by its print: PrintHit
    assert x.tolist() == [TIMES + 2.0] * 16
    assert in_c(graph, lambda: graph(x=x, y=y, a=1.0)) == (TIMES, 0)
    bound = add.bind(x, y, 1.0)  # its storages guarded in C
    assert in_c(bound, bound) == (TIMES, 0)


def test_new_torch_tensors_each_call(x64, torch):
    _rt, mod = x64
    add = mod.kernels["add"]
    y = torch.ones(16)
    expected = (TIMES, 0) if _torch_layout_read(torch) else (0, TIMES)  # read by torch's C functions, or Python
    assert in_c(add, lambda: add(torch.zeros(16), y, 1.0)) == expected
    assert in_c(add, lambda: add(torch.zeros(16), torch.ones(16), 1.0)) == expected


# ---------------------------------------------------------------------------
# The records Python hands the C call: C types of its own, read by field


def test_the_c_calls_records_are_c_types_made_with_keywords(x64):
    """The records the C call is handed (a call's slots, what arrays taken anew must be, the arrays seen before) are
    types of taichi_aot._call, made with keywords only and read-only; ``_prepare`` and ``_fresh`` take keywords and
    refuse a tuple where a record stands, leaving the kernel as it was; no C source reads a record by attribute."""
    from taichi_aot import _call
    from taichi_aot._native import ffi

    slot = _call.CallSlot(kind=1, writes=True, argument=8, sig=None, name="x")
    assert (slot.kind, slot.writes, slot.argument, slot.sig, slot.name) == (1, True, 8, None, "x")
    with pytest.raises(AttributeError):
        slot.kind = 2  # type: ignore[misc]
    for bad in (lambda: _call.CallSlot(1, True, 8, None, "x"), lambda: _call.CallSlot(kind=1),
                lambda: _call.CallSlot(kind=1, writes=True, argument=8, sig=None, name="x", extra=0)):
        with pytest.raises(TypeError, match="as keywords"):
            bad()
    rt, mod = x64
    add = mod.kernels["add"]
    x, y = np.zeros(16, np.float32), np.ones(16, np.float32)
    add(x, y, 1.0)
    hit = rt.foreign.hits[id(x)]
    assert type(hit) is _call.NumpyHit and hit.ref() is x
    launch = int(ffi.cast("uintptr_t", add._callplan.launch))
    with pytest.raises(TypeError, match="CallSlot records"):
        add._prepare(launch=launch, graph=0, ndarray_type=type(hit), numpy_type=np.ndarray, slots=[(1, 1, 8, None,
                     None)], hits=None)
    with pytest.raises(TypeError, match="positional"):
        add._prepare(launch, 0, type(hit), np.ndarray, [], None)  # type: ignore[misc]
    with pytest.raises(TypeError, match="keyword"):
        add._fresh(**{**rt.foreign.fresh_plan(add.signature), "extra": 0})  # type: ignore[arg-type]
    assert in_c(add, lambda: add(x, y, 1.0)) == (TIMES, 0)  # as it was
    csrc = os.path.join(os.path.dirname(taichi_aot.__file__), "_csrc")
    for folder, _, names in os.walk(csrc):  # the C files, the backends' among them
        for name in names:
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                assert not re.search(r'GetAttrString\((hit|item|slot)\b', f.read()), f"{name} reads a record by name"


def test_show_config_says_which_fast_reads_are_active(x64, modules, torch, monkeypatch):
    import io

    from taichi_aot import _foreign, _seen, capi, config, show_config

    reads = {r["name"]: r for r in config.fast_reads()}
    assert reads["C call"]["active"]
    assert reads["numpy arrays passed again"]["active"] and reads["new numpy arrays each call"]["active"]  # x64
    assert reads["torch tensors by torch's C functions"]["active"] == _torch_layout_read(torch)
    cuda = capi.arch_status()[Arch.CUDA]
    found = reads["CUDA arrays (torch, CuPy, __cuda_array_interface__)"]
    assert found["active"] == cuda.available and (cuda.available or cuda.reason in found["reason"])
    text = io.StringIO()
    show_config(text)
    for r in reads.values():
        assert f"  {r['name']}: {'active' if r['active'] else 'not active'}: {r['reason']}" in text.getvalue()
    for room in (_seen, _foreign):  # numpy's objects not laid out as the extension reads them (where each reads it)
        monkeypatch.setattr(room, "ARRAY_KEYS", False)
    off = {r["name"]: r for r in config.fast_reads()}
    assert not off["numpy arrays passed again"]["active"] and not off["new numpy arrays each call"]["active"]
    assert "not laid out" in off["numpy arrays passed again"]["reason"]
    add = x64[0].load_module(modules.path(Arch.X64)).kernels["add"]
    x, y = np.zeros(16, np.float32), np.ones(16, np.float32)
    assert in_c(add, lambda: add(x, y, 1.0)) == (0, TIMES)  # and so every such call takes the Python path
    assert in_c(add, lambda: add(np.zeros(16, np.float32), y, 1.0)) == (0, TIMES)
    assert x[0] == TIMES + 2


# ---------------------------------------------------------------------------
# References over many calls


def test_a_hundred_thousand_calls_keep_no_reference(x64, modules, torch):
    rt, mod = x64
    kernels = [rt.load_module(modules.path(Arch.X64)).kernels["add"] for _ in range(5)]  # a launcher an argument kind
    graph, scale = mod.graphs["add_twice"], mod.kernels["scale_vec3"]
    xn, yn = np.zeros(16, np.float32), np.ones(16, np.float32)
    xt, yt = torch.zeros(16), torch.ones(16)
    xd, yd = rt.ndarray((16,), np.float32), rt.ndarray_from_numpy(np.ones(16, np.float32))
    v = rt.ndarray((4,), np.float32, (3,))
    bound = mod.kernels["add"].bind(xd, yd, 1.0)
    f32 = np.dtype(np.float32)  # every numpy array of f32 holds it: a leaked new array shows in its count
    numpy_again, torch_again, ndarray_again, numpy_new, torch_new = kernels
    calls = [lambda: numpy_again(xn, yn, 1.0), lambda: torch_again(xt, yt, 1.0), lambda: ndarray_again(xd, yd, 1.0),
             lambda: numpy_new(np.empty(16, np.float32), yn, 1.0), lambda: torch_new(torch.empty(16), yt, 1.0),
             lambda: graph(x=xd, y=yn, a=0.5), bound,
             lambda: scale(v, (1.0, 2.0, 3.0))]  # a vector: the Python path every call
    for call in calls * 3:
        call()
    rounds = 100_000 // len(calls)
    watched = (xn, yn, xt, yt, xd, yd, v, bound, graph, scale, mod, rt, f32, *kernels)
    gc.collect()
    refs = [sys.getrefcount(o) for o in watched]
    live = len(gc.get_objects())
    counts = [k.call_counts for k in (*kernels, graph, bound, scale)]
    for _ in range(rounds):
        for call in calls:
            call()
    gc.collect()
    assert [sys.getrefcount(o) for o in watched] == refs
    assert len(gc.get_objects()) - live < 50
    made = [(now[0] - was[0], now[1] - was[1]) for now, was in zip((k.call_counts for k in (*kernels, graph, bound,
                                                                                                 scale)), counts)]
    torch_new_in_c = (rounds, 0) if _torch_layout_read(torch) else (0, rounds)
    assert made == [(rounds, 0)] * 4 + [torch_new_in_c] + [(rounds, 0)] * 2 + [(0, rounds)]
    assert xn[0] == xt[0] == rounds + 3
