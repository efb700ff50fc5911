"""The corpus of CUDA modules as users write them (tests/corpus_kernels.py, compiled by Taichi 1.7.4 on a GPU and
kept in ``tests/data/cuda-modules.tar.xz``, folder ``corpus``): every kernel gets PTX here or the gate's refusal
with its reason, ``ptx`` and ``info`` say so, the serial tasks that only compute a loop's bound fold into the loop's
launch, and (where a GPU is) every kernel gives the same values on both launch paths.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import ptx_manifest, require_extra, with_ptx_copies
from taichi_aot import Arch, NotSupportedError, Runtime, TaichiError, capi, metadata
from taichi_aot.ptx import fold, kernel_entries, plan
from taichi_aot_bench.kernel_time import arguments

#: What the gate keeps on libtaichi's path in the corpus, and why (a word of the reason).
REFUSED = {"count": "SNode fields", "nothing": "no tasks"}
#: Kernels libtaichi 1.7.4 itself cannot launch: its CUDA JIT looks a task named in Cyrillic or Han up and fails; its
#: C-API has no u64 or f64 scalar.
LIBTAICHI_CANNOT = {"сложить", "倍", "lcg_u64", "ret_f64", "ret_pair"}
#: Kernels whose sums of products llvmlite's LLVM orders unlike Taichi 1.7.4's LLVM 15 (both reassociate, as Taichi's
#: IR allows): ``m @ p + t`` adds ``t`` into the first fused multiply-add, Taichi's last; the values differ by a
#: rounding (on an H200: 412 of 12288 values, at most 4.8e-7). Checked within four ulps of the array's largest value
#: (a rounding of a sum near zero is large against the sum, not against its terms).
ORDERED_DIFFERENTLY = {"transform"}
#: Kernels whose serial tasks do more than compute a bound (write arrays, start a reduction): every task launched.
UNFOLDED = {"serial_scan", "total_i32", "between", "nothing", "count"}


@pytest.fixture(scope="module")
def corpus(cuda_modules, tmp_path_factory) -> dict[str, str]:
    root = os.path.join(cuda_modules, "corpus")
    return with_ptx_copies(root, sorted(os.listdir(root)), tmp_path_factory)


def test_every_corpus_kernel_gets_ptx_or_a_reason(corpus):
    assert {"one_add", "one_rand", "one_noargs", "shared", "atomics", "names", "graphs"} <= set(corpus)
    seen = {}
    for name, folder in corpus.items():
        man = ptx_manifest(folder)
        kernels = set(metadata.read_module(folder).kernels)
        assert set(man["kernels"]) | set(man["refused"]) == kernels and not set(man["kernels"]) & set(man["refused"])
        for kernel, why in man["refused"].items():
            assert kernel in REFUSED and REFUSED[kernel] in why, (name, kernel, why)
        entries = kernel_entries(folder)
        for kernel, entry in man["kernels"].items():
            with open(os.path.join(folder, entry["ptx"]), encoding="utf-8") as f:
                ptx = f.read()
            assert not re.search(r"\bcall(\.uni)?\b", ptx) and "__local_depot" not in ptx, kernel
            # atomics relaxed at the GPU's scope, as Taichi's: no system-wide fence or atomic (LLVM 22's seq_cst)
            assert not re.search(r"membar\.sys|fence\.sc\.sys|\batom\.(\w+\.)*sys\b", ptx), kernel
            with open(os.path.join(folder, f"{kernel}.ll"), encoding="utf-8") as f:
                ir = f.read()
            launched = [t["name"] for t in plan.from_entry(entries[kernel], ir)["tasks"]]
            from taichi_aot.ptx.compile import entry as ptx_entry
            assert re.findall(r"\.visible \.entry (\w+)\(", ptx) == [ptx_entry(t) for t in launched], kernel
            seen[kernel] = len(launched), len(entries[kernel]["compiled_data"]["tasks"])
    assert set(REFUSED) <= set().union(*(ptx_manifest(f)["refused"] for f in corpus.values()))
    assert "сложить" in seen and "倍" in seen and ptx_manifest(corpus["one_rand"])["kernels"]["noise"]["rand"]


#: The instructions of Taichi's fast math that the PTX step must choose as Taichi's code generator does.
_FAST_MATH = re.compile(r"\b(?:rsqrt|sqrt|rcp|div|ex2|lg2|sin|cos)\.[\w.]+")


def test_fast_math_instructions_are_taichis(corpus, cuda_modules):
    """Square roots and their reciprocals, f32 and f64: the PTX step's instructions are those of Taichi's own PTX
    of the same kernels (``taichi-ptx/``, printed by Taichi 1.7.4's JIT on an H200: ``rsqrt.approx`` where a root's
    reciprocal is taken, ``sqrt.rn`` for a root alone)."""
    reference = os.path.join(cuda_modules, "taichi-ptx")
    checked = []
    for module in sorted(os.listdir(reference)):
        for file in sorted(os.listdir(os.path.join(reference, module))):
            kernel = file.removesuffix(".ptx")
            with open(os.path.join(reference, module, file), encoding="utf-8") as f:
                theirs = sorted(_FAST_MATH.findall(f.read()))
            with open(os.path.join(corpus[module], ptx_manifest(corpus[module])["kernels"][kernel]["ptx"]),
                      encoding="utf-8") as f:
                ours = sorted(_FAST_MATH.findall(f.read()))
            assert ours == theirs and theirs, (module, kernel, ours, theirs)
            checked.append(kernel)
    assert {"forces32", "forces64", "roots64"} <= set(checked)


def test_loops_launch_once_where_the_serial_task_only_computes_the_bound(corpus):
    """A range-for is a serial task storing its bound and the loop reading it: one launch. A serial task that writes
    an array or starts a reduction keeps its launch (and every other task keeps its own)."""
    folded, kept = set(), set()
    for folder in corpus.values():
        entries = kernel_entries(folder)
        for kernel in ptx_manifest(folder)["kernels"]:
            with open(os.path.join(folder, f"{kernel}.ll"), encoding="utf-8") as f:
                ir = f.read()
            tasks = [t["name"] for t in plan.from_entry(entries[kernel])["tasks"]]
            pure = fold.folded(ir, tasks)
            (folded if pure else kept).add(kernel)
            assert all(t.endswith("_serial") for t in pure) and len(pure) < len(tasks)
    assert {"add", "noise", "transform", "block_sum", "atomic_add_i32", "lcg_u64", "nested", "range_ab",
            "сложить", "axpy"} <= folded
    assert {"serial_scan", "total_i32", "between"} <= kept and not folded & UNFOLDED


def test_ptx_and_info_commands_over_the_corpus(corpus, cuda_modules, tmp_path):
    require_extra("llvmlite.binding", "ptx")
    for name in ("one_add", "loops", "no_arguments", "names"):
        out = str(tmp_path / name)
        proc = subprocess.run([sys.executable, "-m", "taichi_aot", "ptx", os.path.join(cuda_modules, "corpus", name),
                               "-o", out], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        man = ptx_manifest(out)
        assert f"PTX (sm_60) for {len(man['kernels'])} CUDA kernel" in proc.stdout, proc.stdout
        info = subprocess.run([sys.executable, "-m", "taichi_aot", "info", out], capture_output=True, text=True)
        assert info.returncode == 0, info.stderr
        for kernel, why in man["refused"].items():
            assert kernel in info.stdout and why in info.stdout
    assert ptx_manifest(str(tmp_path / "one_add"))["kernels"].keys() == {"add"}


#: The corpus's kernels that return values: their arguments, and what Taichi 1.7.4 itself returned for them (run
#: on an H200 with Taichi; a tuple where Taichi returns several values, numpy arrays for its vectors and matrices).
_F32 = [1.25, -2.5, 3.0, 4.5, 5.0, -6.75]
RETURNS = {"ret_i32": (([7, 35, 2], "i4"),), "ret_f64": (([0.1, 0.2], "f8"), 3.0), "atomic_total": ((_F32, "f4"),),
           "ret_vec": ((_F32, "f4"),), "ret_mat": ((_F32, "f4"),), "ret_pair": (([7, 35, 2], "i4"), 0.3),
           "ret_const": ()}
TAICHI_RETURNED = {"ret_i32": 42, "ret_f64": 0.5, "atomic_total": 4.5, "ret_vec": np.array([1.25, -5.0, 4.0]),
                   "ret_mat": np.array([[1.25, -2.5, 3.0], [4.5, 5.0, -6.75]]), "ret_pair": (21, 0.15),
                   "ret_const": 200}


_OPS_RETURN = """
import json, sys
import numpy as np
import jax, jax.numpy as jnp, torch
import taichi_aot.jax as tj, taichi_aot.torch as tt
from taichi_aot import Arch, Runtime
folder, cases = sys.argv[1], json.loads(sys.argv[2])
with Runtime(Arch.CUDA) as rt:
    own = rt.load_module(folder, launcher="cuda")
    for kernel, (data, dtype), want in cases:
        want = np.asarray(want)
        got = tt.op(own.kernels[kernel], {})(torch.tensor(np.array(data, dtype), device="cuda"))
        assert got.is_cuda and tuple(got.shape) == want.shape, (kernel, got)
        np.testing.assert_array_equal(got.cpu().numpy(), want.astype(got.cpu().numpy().dtype))
        jop = tj.op(own.kernels[kernel], {})
        x = jnp.asarray(np.array(data, dtype))
        for value in (jop(x), jax.jit(lambda v: jop(v))(x)):
            assert value.shape == want.shape and next(iter(value.devices())).platform == "gpu", (kernel, value)
            np.testing.assert_array_equal(np.asarray(value), want.astype(np.asarray(value).dtype))
        print(kernel, "torch", got.cpu().numpy().tolist(), "jax", np.asarray(value).tolist())
"""


def test_returned_values_through_torch_and_jax_ops_on_a_gpu(corpus):
    """A returning kernel of the own CUDA launcher as a torch op and as a JAX op (eagerly and under jax.jit): its
    values come back after its outputs, a tensor or array each on the GPU (0-D for a scalar), Taichi's values. In a
    process of its own: a JAX op keeps its module, and so its CUDA runtime, while it lives (as JAX's caches may)."""
    if not capi.arch_status()[Arch.CUDA].available:
        pytest.skip("no CUDA here")
    require_extra("torch", "interop")
    require_extra("jax", "jax")
    cases = [(k, RETURNS[k][0], np.asarray(TAICHI_RETURNED[k]).tolist()) for k in
             ("ret_i32", "atomic_total", "ret_vec", "ret_mat")]
    proc = subprocess.run([sys.executable, "-c", _OPS_RETURN, corpus["returns"], json.dumps(cases)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("torch") == 4, proc.stdout


def test_returning_kernels_get_ptx_and_a_plan_of_their_results(corpus):
    man = ptx_manifest(corpus["returns"])
    assert set(man["kernels"]) == set(RETURNS) and not man["refused"]
    entries = kernel_entries(corpus["returns"])
    laid = {k: plan.from_entry(entries[k]) for k in RETURNS}
    assert laid["ret_pair"]["results"] == [{"type": 5, "offset": 0}, {"type": 2, "offset": 8}]
    assert laid["ret_pair"]["result_size"] == 16
    assert laid["ret_vec"]["results"] == [{"type": 1, "offset": 0, "shape": [3, 1]}]
    assert laid["ret_mat"]["results"] == [{"type": 1, "offset": 0, "shape": [2, 3]}]
    assert laid["ret_const"]["results"] == [{"type": 8, "offset": 0}] and not laid["ret_const"]["args"]
    assert len(laid["atomic_total"]["tasks"]) >= 2  # the loop, then the serial task that returns


# ---------------------------------------------------------------------------
# On a GPU: both launch paths, the same values

#: Kernels whose parallel loop reads what another of its threads writes: on a GPU their values depend on the order
#: the threads run in, so they get arrays the kernel leaves as they are (a fixed point of the update)
RACY = {
    # a[i, j] = a[i - 1, j] + j: a[i, j] = a[0, j] + i * j, small integers (exact in f32), is its fixed point
    "ndrange2": lambda shape, rng: (rng.integers(-4, 5, shape[1]) + np.outer(np.arange(shape[0]), np.arange(shape[1]))
                                    ).astype(np.float32),
}


def _run(rt, kernel, info, seed: int) -> list[np.ndarray]:
    args = arguments(rt, info, seed)  # the bench's kernel-time rows give the kernels the same
    if info.name in RACY:
        fixed = RACY[info.name](args[0].shape, np.random.default_rng(seed))
        args[0] = rt.ndarray_from_numpy(fixed)
    kernel(*args)
    rt.wait()
    return [a.to_numpy() for a in args if hasattr(a, "to_numpy")]


def test_every_corpus_kernel_gives_the_same_values_on_both_paths(corpus):
    if not capi.arch_status()[Arch.CUDA].available:
        pytest.skip("no CUDA here")
    lines: list[str] = []
    failed: list[str] = []
    cannot: set[str] = set()
    with Runtime(Arch.CUDA) as rt:
        for name, folder in corpus.items():
            own = rt.load_module(folder, launcher="cuda")
            lib = rt.load_module(folder, cuda_launcher="taichi")
            paths = own.launchers()
            infos = metadata.read_module(folder).kernels
            for kernel in own.kernel_names():
                assert (paths[kernel] == "cuda") == (kernel not in REFUSED), (kernel, paths[kernel])
                if kernel in REFUSED:
                    continue
                a = _run(rt, own.kernels[kernel], infos[kernel], 1)
                if infos[kernel].returns:  # refused on libtaichi's path, which gives no value: its values are checked
                    lines.append(f"{name}/{kernel}: {paths[kernel]}; returns values (Taichi's, checked below)")
                    continue
                try:
                    b = _run(rt, lib.kernels[kernel], infos[kernel], 1)
                except TaichiError as e:  # libtaichi's own limits (a task named in Cyrillic is not found)
                    lines.append(f"{name}/{kernel}: {paths[kernel]}; libtaichi cannot launch it: {str(e)[:120]}")
                    cannot.add(kernel)
                    continue
                unequal = [(x != y) & ~(np.isnan(x) & np.isnan(y)) if x.dtype.kind == "f" else x != y
                           for x, y in zip(a, b)]  # bit for bit (NaN where both are)
                if kernel in ORDERED_DIFFERENTLY:  # a rounding apart, and said so
                    unequal = [np.abs(x - y) > 4 * float(np.finfo(x.dtype).eps) * float(np.max(np.abs(y)))
                               for x, y in zip(a, b)]
                count = sum(int(u.sum()) for u in unequal)
                worst = max((float(np.max(np.abs(x[u].astype(np.float64) - y[u]))) for x, y, u in zip(a, b, unequal)
                             if u.any()), default=0.0)
                same = "all within a rounding" if kernel in ORDERED_DIFFERENTLY else "all equal"
                lines.append(f"{name}/{kernel}: {paths[kernel]}; {sum(x.size for x in a)} values, "
                             + (f"{count} UNEQUAL (largest difference {worst:.3g})" if count else same))
                if count:
                    failed.append(lines[-1])
            if name == "graphs":
                outs = []
                for mod in (own, lib):
                    rng = np.random.default_rng(3)
                    x = rt.ndarray_from_numpy(rng.standard_normal(4096).astype(np.float32))
                    y = rt.ndarray_from_numpy(rng.standard_normal(4096).astype(np.float32))
                    mod.graphs["axpy_square"](x=x, y=y, a=0.5)
                    rt.wait()
                    outs.append((x.to_numpy(), y.to_numpy()))
                assert own.graphs["axpy_square"].launcher == "cuda"
                for x, y in zip(*outs):
                    np.testing.assert_array_equal(x, y)
                lines.append("graphs/axpy_square (graph): own; 8192 values equal")
    print("\n" + "\n".join(lines))
    assert not failed and cannot <= LIBTAICHI_CANNOT, (failed, cannot)


def test_returning_kernels_give_taichis_values_on_a_gpu(corpus):
    if not capi.arch_status()[Arch.CUDA].available:
        pytest.skip("no CUDA here")
    with Runtime(Arch.CUDA) as rt:
        own = rt.load_module(corpus["returns"], cuda_launcher="own")
        lib = rt.load_module(corpus["returns"], cuda_launcher="taichi")
        for kernel, args in RETURNS.items():
            values = [rt.ndarray_from_numpy(np.array(a[0], a[1])) if isinstance(a, tuple) else a for a in args]
            got, want = own.kernels[kernel](*values), TAICHI_RETURNED[kernel]
            assert own.launchers()[kernel] == "cuda"
            if isinstance(want, np.ndarray):
                assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got.shape == want.shape, got
                np.testing.assert_array_equal(got, want.astype(np.float32))
            else:
                assert got == want and type(got) is type(want), (kernel, got)
            with pytest.raises(NotSupportedError, match="returns values"):  # libtaichi's C-API gives no value:
                lib.kernels[kernel]  # refused, not a call that returns None
            assert lib.launchers()[kernel].startswith("refused: returns values")
