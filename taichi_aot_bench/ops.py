"""Rows of ``taichi-aot bench``'s ops section: kernels as framework ops (taichi_aot.jax, taichi_aot.torch) against
the same kernel launched eagerly with arrays passed again.

JAX (where its devices match the arch: the CPU for x64, a GPU for CUDA): a jitted step calling the op, against the
eager launch (NdArrays passed again, waited for as the op waits on x64) plus XLA's floor for a custom call (a jitted
empty FFI call, measured beside it): target at most 1.1x that sum. torch: a ``torch.compile(fullgraph=True)``d
call of the op against the same compiled call of torch's own ``x.add_(y)`` on the same tensors: target at most
1.3x; beside it, the eager launch of torch tensors passed again plus a compiled call of an op made the same way
whose body is Python doing nothing (what any operator with a Python kernel costs in a compiled graph), and the
compiled call against the op's own eager call (no target: it holds torch.compile's floor, which no op escapes).
``x.add_(y)`` called eagerly stands beside its compiled call: what torch.compile costs an op of torch's own.
The op called eagerly against the kernel called directly with a new
output (x's copy, as the op makes it; waited for on x64): target at most 1.2x. On CUDA, CUDA graphs: a step calling
the op under ``torch.compile(mode="reduce-overhead")`` against the same step's work in torch's own ops under it
(target at most 1.1x), and a ``torch.cuda.graph`` replay of the step. The kernel is the bench's ``tiny3``
over 16 f32 (x read and written, y and z read): the op takes x, y, z and returns x's new values.

On every arch, the NVTX rows (:func:`nvtx_rows`): what naming launches in NVTX ranges costs, and that it costs
nothing while off. The bench's ``tiny`` kernel launched from C (a recorded sequence replayed: the dispatcher, no
Python in between) with ranges off, against the raw C loop of the same launches (no dispatcher: the launch section's
reference), target at most 1.05x as the launch section rates its replay; and the same replay with ranges on (where an
NVTX library is found; no tool attached, so NVIDIA's library records nothing), against the replay with them off.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from taichi_aot import config
from taichi_aot.enums import Arch

from .harness import torch_here
from .launch import _c_launches, _launch_counts
from .measure import measure
from .row import Row

if TYPE_CHECKING:
    from .harness import Bench

__all__ = ["ops"]

TARGET = 1.1
COMPILED_TARGET = 1.3  # the compiled op against torch's own op compiled
EAGER, EMPTY, JITTED = "kernel launched eagerly, arrays passed again", "jax: jitted empty FFI call", "jax: jitted op"
TORCH_EAGER, TORCH_COMPILED = "torch: op called eagerly", "torch: op in torch.compile(fullgraph=True)"
TORCH_LAUNCH = "kernel launched eagerly, torch tensors passed again"
TORCH_EMPTY = "torch: empty op in torch.compile(fullgraph=True)"
BUILTIN_EAGER, BUILTIN_COMPILED = "torch: its own x.add_(y) called eagerly", "torch: its own x.add_(y) compiled"
EAGER_TARGET = 1.2  # the op called eagerly against the kernel called directly with a new output
GRAPHED = "torch (CUDA): a step with the op in torch.compile(mode='reduce-overhead')"
GRAPHED_BUILTIN = "torch (CUDA): the step with torch's own ops in reduce-overhead"
REPLAY = "torch (CUDA): torch.cuda.graph replay of the op's step"
NVTX_RAW = "NVTX rows: raw C loop (no dispatcher)"
NVTX_OFF = "NVTX off: C replay of the launch"
NVTX_ON = "NVTX on: C replay, a range a launch"  # no tool attached: NVIDIA's library records nothing
NVTX_TARGET = 1.05  # the replay with ranges off against raw C, as the launch section rates the replay


def _torch_empty_op(kernel: Any) -> Any:
    """An op made as the op is (taichi_aot.torch.op, the same signature) whose body does nothing but return a
    tensor like its first input (uninitialised): torch's floor for calling such an op."""
    import torch

    from taichi_aot import torch as tt

    class Empty(tt.Op):
        def _launch(self, inputs: Any) -> Any:  # no kernel: a tensor like the first input
            return torch.empty_like(inputs[0])

    empty = Empty(kernel, {0: 0}, name=f"taichi_aot_bench::empty_{len(_EMPTY_OPS)}")
    _EMPTY_OPS.append(empty)
    return empty


_EMPTY_OPS: list[Any] = []


def _jax_methods(bench: Bench, kernel: Any, n: int) -> dict[str, Callable[[], float]]:
    try:
        import jax
        import jax.numpy as jnp

        from taichi_aot import jax as tj
    except ImportError:
        return {}
    platform = "gpu" if bench.rt.arch == Arch.CUDA else "cpu"
    devices = [d for d in jax.devices() if d.platform == platform]
    if not devices:
        return {}
    op = tj.op(kernel, {0: 0})
    x, y, z = (jax.device_put(jnp.full(16, v, jnp.float32), devices[0]) for v in (1.0, 2.0, 3.0))
    step = jax.jit(lambda x, y, z: op(x, y, z, 1.0))
    empty = jax.jit(tj.empty_call)
    last: list[Any] = [None]

    def run_op() -> None:
        last[0] = step(x, y, z)

    def run_empty() -> None:
        last[0] = empty(x)

    def sync() -> None:
        last[0].block_until_ready()

    run_op()
    np.testing.assert_allclose(np.asarray(last[0]), [8.0] + [1.0] * 15)  # x[0] + y[0] * z[0] + a
    return {JITTED: bench.per_call(run_op, n, sync), EMPTY: bench.per_call(run_empty, n, sync)}


def _torch_methods(bench: Bench, kernel: Any, n: int) -> dict[str, Callable[[], float]]:
    found = torch_here(bench)
    if found is None:
        return {}
    torch, device, sync = found
    from taichi_aot import torch as tt

    cuda = device == "cuda"
    op = tt.op(kernel, {0: 0})
    x, y, z = (torch.full((16,), v, device=device) for v in (1.0, 2.0, 3.0))
    compiled = torch.compile(lambda x, y, z: op(x, y, z, 1.0), fullgraph=True)
    compiled(x, y, z)
    empty_op = _torch_empty_op(kernel)
    empty = torch.compile(lambda x, y, z: empty_op(x, y, z, 1.0), fullgraph=True)
    empty(x, y, z)
    def launch(*args: Any) -> None:
        kernel(*args)
        if not cuda:
            bench.rt.wait()  # as the op: waited for on x64
    builtin = torch.compile(lambda x, y: x.add_(y), fullgraph=True)
    builtin(x.clone(), y)
    graphed = _graphed_methods(bench, torch, op, (x, y, z), n, sync) if cuda else {}
    return {**graphed, BUILTIN_EAGER: bench.per_call(lambda: x.add_(y), n, sync),
            BUILTIN_COMPILED: bench.per_call(lambda: builtin(x, y), n, sync),
            TORCH_EAGER: bench.per_call(lambda: op(x, y, z, 1.0), n, sync),
            TORCH_COMPILED: bench.per_call(lambda: compiled(x, y, z), n, sync),
            TORCH_LAUNCH: bench.per_call(lambda: launch(x.clone(), y, z, 1.0), n, sync),
            TORCH_EMPTY: bench.per_call(lambda: empty(x, y, z), n, sync)}


def _graphed_methods(bench: Bench, torch: Any, op: Any, xyz: tuple, n: int,
                     sync: Callable[[], object] | None) -> dict[str, Callable[[], float]]:
    """CUDA graphs: a step calling the op (``op(x, y, z) * 2``) under ``reduce-overhead``, the same step's work in
    torch's own ops (``x[0] += y[0] * z[0] + 1``, then ``* 2``) under it, and a replay of the step captured with
    torch's documented pattern."""
    x, y, z = xyz

    def own(x: Any, y: Any, z: Any) -> Any:
        head = x[:1] + y[:1] * z[:1] + 1.0
        return torch.cat([head, x[1:]]) * 2

    graphed = torch.compile(lambda x, y, z: op(x, y, z, 1.0) * 2, mode="reduce-overhead", fullgraph=True)
    builtin = torch.compile(own, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):  # recorded, then replayed
        torch.testing.assert_close(graphed(x, y, z), own(x, y, z))
        builtin(x, y, z)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            op(x, y, z, 1.0)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = op(x, y, z, 1.0) * 2
    graph.replay()
    torch.testing.assert_close(out, own(x, y, z))
    return {GRAPHED: bench.per_call(lambda: graphed(x, y, z), n, sync),
            GRAPHED_BUILTIN: bench.per_call(lambda: builtin(x, y, z), n, sync),
            REPLAY: bench.per_call(graph.replay, n, sync)}


def _torch_targets(rows: dict[str, Row]) -> None:
    """The eager op against the kernel called directly with a new output; under reduce-overhead, the step with the
    op against the same step in torch's own ops."""
    for row, limit, target in ((rows.get(TORCH_EAGER), TORCH_LAUNCH, EAGER_TARGET),
                               (rows.get(GRAPHED), GRAPHED_BUILTIN, TARGET)):
        if row is not None and limit in rows:
            row.limit, row.ratio = limit, row.median / rows[limit].median
            row.target, row.met = f"<= {target:g}", row.ratio <= target


def nvtx_rows(bench: Bench) -> list[Row]:
    """The NVTX rows (see the module docstring), in paired rounds as the launch section's; the ranges are left as
    they were found."""
    n, reps, rounds = _launch_counts(bench)
    tiny = bench.mod.kernels["tiny"]
    x = bench.rt.ndarray((16,), np.float32, host_access="none")
    with bench.rt.record() as seq:
        tiny(x, 1.0)
    was = config.nvtx()["on"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # said below, once
        can = config.set_nvtx(True)

    def replay(on: bool) -> Callable[[], float]:
        def one() -> float:
            config.set_nvtx(on)
            try:
                return bench.timed(lambda: seq.replay(n)) / n * 1e6
            finally:
                config.set_nvtx(False)
        return one

    methods = {NVTX_RAW: _c_launches(tiny.bind(x, 1.0), n), NVTX_OFF: replay(False)}
    if can:
        methods[NVTX_ON] = replay(True)
    else:
        bench.log(f"  ops: no NVTX library here ({'; '.join(config.nvtx()['looked'])}): no NVTX-on row")
    try:
        measured = measure(methods, NVTX_RAW, rounds, reps)
    finally:
        config.set_nvtx(was)
    params = {"launches": n, "rounds": rounds, "reps": reps}
    rows = {k: Row("ops", bench.name, k, "us/launch", v, params=params) for k, v in measured.bests.items()}
    off = rows[NVTX_OFF]
    off.limit, off.ratio, off.spread = NVTX_RAW, measured.ratio(NVTX_OFF), measured.spread(NVTX_OFF)
    off.target, off.met = f"<= {NVTX_TARGET:g}", off.ratio is not None and off.ratio <= NVTX_TARGET
    paired = measured.pair(NVTX_ON, NVTX_OFF)
    if paired is not None:
        on = rows[NVTX_ON]
        on.limit, (on.ratio, on.spread) = NVTX_OFF, paired
        on.note = f"a range pushed and popped: {on.median - off.median:+.3f} us a launch; {config.nvtx()['library']}"
    if measured.warnings:
        rows[NVTX_RAW].note = "; ".join(measured.warnings)
    return list(rows.values())


def ops(bench: Bench) -> list[Row]:
    """The ops rows on this arch (x64 or CUDA; see the module docstring), and the NVTX rows on every arch."""
    rt = bench.rt
    nvtx = nvtx_rows(bench)
    if rt.arch not in (Arch.X64, Arch.CUDA):
        return nvtx
    n = 200 if bench.quick else 2000
    rounds = 2 if bench.quick else 9
    kernel = bench.mod.kernels["tiny3"].declare_access({1: "read", 2: "read"})
    nds = [rt.ndarray((16,), np.float32) for _ in range(3)]

    def eager() -> None:
        kernel(nds[0], nds[1], nds[2], 1.0)
        rt.wait()

    methods = {EAGER: bench.per_call(eager, n), **_jax_methods(bench, kernel, n), **_torch_methods(bench, kernel, n)}
    measured = measure(methods, None, rounds)
    params = {"calls": n, "rounds": rounds, "elements": 16}
    rows = {k: Row("ops", bench.name, k, "us/call", v, params=params) for k, v in measured.bests.items()}
    if JITTED in rows:
        row, floor = rows[JITTED], [a + b for a, b in zip(measured.bests[EAGER], measured.bests[EMPTY])]
        row.limit = f"{EAGER} + {EMPTY}"
        row.ratio = row.median / float(np.median(floor))
        row.target, row.met = f"<= {TARGET:g}", row.ratio <= TARGET
    if TORCH_COMPILED in rows:
        row, floor = rows[TORCH_COMPILED], [a + b for a, b in zip(measured.bests[TORCH_LAUNCH],
                                                                  measured.bests[TORCH_EMPTY])]
        builtin = rows[BUILTIN_COMPILED]
        row.limit, row.ratio = BUILTIN_COMPILED, row.median / builtin.median
        row.target, row.met = f"<= {COMPILED_TARGET:g}", row.ratio <= COMPILED_TARGET
        row.note = (f"{row.median / float(np.median(floor)):.2f}x {TORCH_LAUNCH} + {TORCH_EMPTY}; "
                    f"{row.median / rows[TORCH_EAGER].median:.2f}x the op's eager call")
        builtin.limit, builtin.ratio = BUILTIN_EAGER, builtin.median / rows[BUILTIN_EAGER].median
        builtin.note = (f"torch.compile's own floor: {builtin.median - rows[BUILTIN_EAGER].median:.1f} us a call over "
                        f"the eager op; the op's: {row.median - rows[TORCH_EAGER].median:.1f} us")
    _torch_targets(rows)
    if measured.warnings:
        rows[EAGER].note = "; ".join(measured.warnings)
    for nd in nds:
        nd.close()
    return [*nvtx, *rows.values()]
