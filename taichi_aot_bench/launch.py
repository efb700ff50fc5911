"""The sections of the bench about the launch path: launch (each way a kernel is launched, against raw C and
Taichi's JIT), graph (a graph against its kernels one by one), interop (foreign arrays against NdArrays) and
memory (what launches leave behind)."""

from __future__ import annotations

import os
import sys
import tracemalloc
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from taichi_aot import Arch, capi
from taichi_aot.enums import CPU_ARCHS

from .fresh import fresh
from .harness import Bench, Methods, Server, interleave, ratio
from .measure import Measured, measure
from .row import Row
from .steps import c_loop

if TYPE_CHECKING:
    from taichi_aot import AotModule, Kernel, NdArray

HERE = os.path.dirname(os.path.abspath(__file__))
GRAPH_DISPATCHES = 16

Launch = Callable[..., object]  # a kernel, or a kernel with its access declared


# -- launch overhead ------------------------------------------------------------------------------------


def launch_overhead(bench: Bench, jit: bool) -> list[Row]:
    """Per-launch cost of a trivial kernel, each way taichi_aot can launch it, against raw C and Taichi's JIT.

    The reference is a C loop in this process on this runtime (``taichi_aot_steps``: plain ``ti_launch_kernel``
    calls over the same handle and packed arguments), measured in paired rounds (:mod:`.measure`); the
    compiled driver in a process of its own is shown beside it."""
    n, reps, rounds = _launch_counts(bench)
    methods: Methods = {}
    tiny = bench.mod.kernels["tiny"]
    x = bench.rt.ndarray((16,), np.float32, host_access="none")  # as the raw C driver allocates
    methods["raw C"] = _c_launches(tiny.bind(x, 1.0), n)
    driver = bench.driver
    if driver is not None:
        methods["raw C, own process"] = lambda: driver.seconds(f"launch {n}") / n * 1e6
    methods.update(_launch_methods(bench, tiny, x, n))
    methods.update(_launch_parts(bench, tiny, x, n))
    jit_server = _jit_server(bench, n, methods) if jit else None
    try:
        measured = measure(methods, "raw C", rounds, reps)
    finally:
        if jit_server is not None:
            jit_server.close()
    params = {"launches": n, "rounds": rounds, "reps": reps}
    rows = [Row("launch", bench.name, k, "us/launch", v, params=params) for k, v in measured.bests.items()]
    for r in rows:
        if r.name != "raw C":
            r.limit, r.ratio, r.spread = "raw C", measured.ratio(r.name), measured.spread(r.name)
    if measured.warnings:
        rows[0].note = "; ".join(measured.warnings)
    _rate_launches(bench, rows, measured)
    return rows


def _launch_counts(bench: Bench) -> tuple[int, int, int]:
    """Launches a repeat, repeats a round and rounds of the launch section on ``bench``'s arch."""
    fast = not bench.gpu or bench.arch == Arch.CUDA  # launches are cheap there: more of them
    n = (1000 if bench.quick else 4000) if fast else (150 if bench.quick else 600)
    reps = 3
    if bench.arch == Arch.CUDA and not bench.quick:  # a GPU host's noise comes in bursts: more, shorter repeats
        n, reps = n // 3, 8  # find its quiet moments for every method alike (its round bests); not on Vulkan,
    elif bench.gpu and not bench.quick:  # whose final wait (0.5 ms on an H100) would weigh on a shorter repeat
        reps = 5
    return n, reps, 5 if bench.quick else 21


def _jit_server(bench: Bench, n: int, methods: Methods) -> Server | None:
    """Taichi's JIT path in a process of its own (bench_kernels.py), added to ``methods``; None where it cannot
    start (said in the log)."""
    try:
        server = Server([sys.executable, os.path.join(HERE, "bench_kernels.py"), "jit", bench.name],
                        f"Taichi JIT ({bench.name})")
    except (RuntimeError, OSError) as e:
        bench.log(f"Taichi JIT path not measured on {bench.name}: {e}")
        return None
    jn = max(n // 4, 100)
    methods["Taichi JIT (ti.kernel call)"] = lambda: server.seconds(f"launch {jn}") / jn * 1e6
    return server


def _c_launches(bound: Any, n: int) -> Callable[[], float]:
    """``n`` launches of ``bound`` by the extension's raw C loop, then a wait (us per launch)."""
    loop = c_loop([bound])
    return lambda: loop(n, 0) * 1e6


def _launch_methods(bench: Bench, tiny: Kernel, x: NdArray, n: int) -> Methods:
    """Each way the objects launch ``tiny(x, 1.0)``, timed over ``n`` launches (us per launch)."""
    bound = tiny.bind(x, 1.0)
    with bench.rt.record() as seq:
        tiny(x, 1.0)

    def dynamic() -> float:
        def loop() -> None:
            for _ in range(n):
                tiny(x, 1.0)
        return bench.timed(loop) / n * 1e6

    def prebound() -> float:
        launch = bound.launch

        def loop() -> None:
            for _ in range(n):
                launch()
        return bench.timed(loop) / n * 1e6

    def prebound_call() -> float:
        def loop() -> None:
            for _ in range(n):
                bound()
        return bench.timed(loop) / n * 1e6

    def recorded() -> float:
        return bench.timed(lambda: seq.replay(n)) / n * 1e6

    methods = {"recorded sequence (C replay)": recorded, "pre-bound launch": prebound,
               "pre-bound launch, bound() form": prebound_call, "dynamic call (validated)": dynamic}
    name = tiny.signature[1].name
    if name is not None:  # the module records argument names (bench_kernels.py writes them): tiny(x, a=1.0)
        methods[KEYWORD] = _keyword_calls(bench, tiny, x, {name: 1.0}, n)
    return methods


#: The dynamic call in the form the documents teach, ``tiny(x, a=1.0)``, rated against the positional one.
KEYWORD = "dynamic call by keyword"


def _keyword_calls(bench: Bench, tiny: Kernel, x: NdArray, named: dict[str, Any], n: int) -> Callable[[], float]:
    def keywords() -> float:
        def loop() -> None:
            for _ in range(n):
                tiny(x, **named)
        return bench.timed(loop) / n * 1e6
    return keywords


def _launch_parts(bench: Bench, tiny: Kernel, x: NdArray, n: int) -> Methods:
    """What the dynamic call saves: the flat capi launch (where the runtime is libtaichi's), and the same call checked
    and packed in Python (the path a call takes that the C call leaves to Python)."""
    keep = tiny.bind(x, 1.0)
    rh, kh, array = bench.rt.handle, tiny._handle, keep._packed.array
    slow = tiny._slow_call

    def flat() -> float:
        launch = capi.launch_kernel

        def loop() -> None:
            for _ in range(n):
                launch(rh, kh, array)
        return bench.timed(loop) / n * 1e6

    def checked_in_python() -> float:
        def loop() -> None:
            for _ in range(n):
                slow(x, 1.0)
        return bench.timed(loop) / n * 1e6

    if not rh or kh is None:  # taichi_aot's own CUDA runtime: no libtaichi runtime, no flat launch of the kernel
        return {"dynamic call checked in Python": checked_in_python}
    return {"flat capi.launch_kernel": flat, "dynamic call checked in Python": checked_in_python}


def _rate_launches(bench: Bench, rows: list[Row], measured: Measured) -> None:
    """Set the launch rows' targets (their ratios are set); rate the call by keyword against the positional one
    (paired rounds: within 5 %, but on a software Vulkan device); add the speed-up over Taichi's JIT when measured."""
    targets = {"recorded sequence (C replay)": 1.05, "pre-bound launch": 1.3 if not bench.gpu else 1.05,
               "dynamic call (validated)": 1.5 if not bench.gpu else (None if bench.software else 1.05)}
    by = {r.name: r for r in rows}
    paired = measured.pair(KEYWORD, "dynamic call (validated)")
    if paired is not None:
        keyword = by[KEYWORD]
        keyword.limit, (keyword.ratio, keyword.spread) = "dynamic call (validated)", paired
        if not bench.software:  # a software Vulkan device's launches wander by more than the 5 % rated
            keyword.target, keyword.met = "<= 1.05", keyword.ratio <= 1.05
    for name, target in targets.items():
        row = by.get(name)
        if row is not None and target is not None and row.ratio is not None:
            row.target, row.met = f"<= {target:g}", row.ratio <= target
    if "Taichi JIT (ti.kernel call)" in by:
        jit_row, dyn = by["Taichi JIT (ti.kernel call)"], by["dynamic call (validated)"]
        speedup = jit_row.median / dyn.median
        target = 7.0 if bench.arch == Arch.X64 else None
        rows.append(Row("launch", bench.name, "speed-up of dynamic call over Taichi JIT", "x", [speedup],
                        limit="Taichi JIT (ti.kernel call)", ratio=speedup,
                        target=f">= {target:g}" if target else None,
                        met=(speedup >= target) if target else None))


# -- graph against kernels ------------------------------------------------------------------------------


def graph_vs_kernels(bench: Bench) -> list[Row]:
    """A 16-dispatch graph against the same 16 kernels launched one by one, per dispatch."""
    x = bench.rt.ndarray((16,), np.float32, host_access="none")  # as the raw C driver allocates
    n = 100 if bench.quick else 1000
    if bench.gpu and bench.arch != Arch.CUDA:
        n = max(n // 10, 20)
    repeats = 3 if bench.quick else 9
    d = GRAPH_DISPATCHES
    methods: Methods = {}
    driver = bench.driver
    if driver is not None:
        methods["raw C: graph"] = lambda: driver.seconds(f"graph {n}") / (n * d) * 1e6
        methods["raw C: 16 kernel launches"] = lambda: driver.seconds(f"kernels16 {n}") / (n * d) * 1e6
    for name, loop in _dispatch_loops(bench.mod, x, n).items():
        methods[name] = _per_dispatch(bench, loop, n * d)
    samples = interleave(methods, repeats)
    rows = [Row("graph", bench.name, k, "us/dispatch", v, params={"dispatches": d, "launches": n})
            for k, v in samples.items()]
    ratio(rows, "graph (bound)", "raw C: graph")
    ratio(rows, "graph (dynamic call)", "raw C: graph")
    ratio(rows, "16 kernels (bound)", "raw C: 16 kernel launches")
    ratio(rows, "16 kernels (dynamic calls)", "raw C: 16 kernel launches")
    return rows


def _dispatch_loops(mod: AotModule, x: NdArray, n: int) -> dict[str, Callable[[], None]]:
    """``n`` launches of the graph ``tiny16``, and ``n`` times its 16 dispatches as launches of ``tiny``: each
    bound and called."""
    graph, tiny = mod.graphs["tiny16"], mod.kernels["tiny"]
    bound_graph = graph.bind(x=x, a=1.0)
    bound = tiny.bind(x, 1.0)
    d = GRAPH_DISPATCHES

    def graph_loop() -> None:
        for _ in range(n):
            bound_graph()

    def graph_dynamic_loop() -> None:
        for _ in range(n):
            graph(x=x, a=1.0)

    def kernels_bound_loop() -> None:
        for _ in range(n):
            for _ in range(d):
                bound()

    def kernels_dynamic_loop() -> None:
        for _ in range(n):
            for _ in range(d):
                tiny(x, 1.0)

    return {"graph (bound)": graph_loop, "graph (dynamic call)": graph_dynamic_loop,
            "16 kernels (bound)": kernels_bound_loop, "16 kernels (dynamic calls)": kernels_dynamic_loop}


def _per_dispatch(bench: Bench, loop: Callable[[], None], dispatches: int) -> Callable[[], float]:
    """us per dispatch of ``loop``, which makes ``dispatches`` of them."""
    return lambda: bench.timed(loop) / dispatches * 1e6


# -- foreign arrays -------------------------------------------------------------------------------------


#: The arrays of the interop section's many-array launch (bench_kernels.py's tiny32).
MANY = 32


def interop(bench: Bench) -> list[Row]:
    """Dynamic launches with the caller's own arrays against the same launches with NdArrays, with 1 and with 3
    array arguments: numpy on the CPU (zero-copy) and on Vulkan (staged copies), torch, CuPy and JAX on CUDA
    (zero-copy), what taking a foreign array costs after its first call. ``tiny3`` writes x and only reads y
    and z (declared here: LLVM modules record no access), so a JAX array, immutable, travels as y or z."""
    fast = not bench.gpu or bench.arch == Arch.CUDA
    n = (2000 if bench.quick else 3000) if fast else (300 if bench.quick else 1500)
    rounds = 3 if bench.quick else 11
    mod = bench.mod
    tiny, tiny3 = mod.kernels["tiny"], mod.kernels["tiny3"].declare_access({1: "read", 2: "read"})
    # tiny32: a module compiled before it had it (a GPU's, carried) measures 1 and 3 arrays only
    tiny32 = mod.kernels["tiny32"].declare_access({i: "read" for i in range(1, MANY)}) if "tiny32" in mod.kernels \
        else None
    nds = [bench.rt.ndarray((16,), np.float32) for _ in range(MANY)]
    methods = {"1 array: NdArray": _launches(bench, tiny, (nds[0], 1.0), n),
               "3 arrays: NdArray": _launches(bench, tiny3, (*nds[:3], 1.0), n)}
    if tiny32 is not None:
        methods[f"{MANY} arrays: NdArray"] = _launches(bench, tiny32, (*nds, 1.0), n)
    compared = _add_foreign(bench, methods, nds, (tiny, tiny3, tiny32), n)
    measured = measure(methods, None, rounds)  # paired rounds: each foreign form against its NdArray form
    rows = [Row("interop", bench.name, f"dynamic call, {k}", "us/launch", v,
                params={"launches": n, "rounds": rounds}) for k, v in measured.bests.items()]
    _rate_foreign(rows, measured, compared)
    if measured.warnings:
        rows[0].note = "; ".join(measured.warnings)
    for nd in nds:
        nd.close()
    return rows + fresh(bench)  # arrays made anew each call (fresh.py)


def _add_foreign(bench: Bench, methods: dict[str, Callable[[], float]], nds: list[Any], kernels: tuple, n: int
                 ) -> list[tuple[str, str, bool]]:
    """The launches with each library's arrays here added to ``methods``; (foreign form, its NdArray form,
    zero-copy?) of each."""
    compared: list[tuple[str, str, bool]] = []
    for kind, make, zero_copy in _foreign_kinds(bench.arch):
        try:
            arrays = [make() for _ in range(MANY)]
        except Exception as e:  # the library cannot allocate here (no GPU for it)
            bench.log(f"  interop: {kind} skipped ({type(e).__name__}: {e})")
            continue
        for name, kernel, args, limit in _foreign_forms(kind, arrays, nds, kernels, zero_copy):
            methods[name] = _launches(bench, kernel, args, n)
            compared.append((name, limit, zero_copy))
    return compared


def _foreign_kinds(arch: Arch) -> list[tuple[str, Callable[[], Any], bool]]:
    """(label, a maker of one 16-element f32 array, shared without a copy?) of each library here whose arrays a
    kernel on ``arch`` takes."""
    kinds: list[tuple[str, Callable[[], Any], bool]] = []
    if arch != Arch.CUDA:
        shared = arch in CPU_ARCHS
        kinds.append((f"numpy ({'zero-copy' if shared else 'staged copies'})", lambda: np.zeros(16, np.float32),
                      shared))
        try:
            if shared:  # (staged, a tensor costs what a numpy array does)
                import torch
                kinds.append(("torch CPU tensor (zero-copy)", lambda: torch.zeros(16), True))
        except ImportError:
            pass
        return kinds
    try:
        import torch
        if torch.cuda.is_available():
            kinds.append(("torch CUDA tensor", lambda: torch.zeros(16, device="cuda"), True))
    except ImportError:
        pass
    try:
        import cupy
        kinds.append(("CuPy array", lambda: cupy.zeros(16, cupy.float32), True))
    except ImportError:
        pass
    try:
        import jax
        import jax.numpy as jnp
        gpus = [d for d in jax.devices() if d.platform == "gpu"]
        if gpus:
            kinds.append(("JAX array", lambda: jax.device_put(jnp.zeros(16, jnp.float32), gpus[0]), True))
    except (ImportError, RuntimeError):
        pass
    return kinds


def _foreign_forms(kind: str, arrays: list[Any], nds: list[NdArray], kernels: tuple[Launch, Launch, Launch | None],
                   shared: bool) -> list[tuple[str, Launch, tuple, str]]:
    """The launches that take ``kind``'s ``arrays`` (MANY of them): (name, kernel, arguments, the NdArray form it is
    compared with), ``kernels`` being tiny, tiny3 and tiny32. A JAX array is immutable: it goes only to the arguments
    ``tiny3`` and ``tiny32`` read (all but x), x an NdArray. MANY arrays a call, where they are ``shared`` (not
    staged copies, which nothing remembers) and the module has ``tiny32``: more than a runtime remembers of arrays
    passed before unless it sizes its records by the calls it makes (``ForeignArgs.fit``)."""
    tiny, tiny3, tiny32 = kernels
    jax = kind.startswith("JAX")
    if jax:
        forms = [(f"1 array: {kind}", tiny3, (nds[0], arrays[1], nds[2], 1.0), "3 arrays: NdArray"),
                 (f"3 arrays: {kind} as y and z, x an NdArray", tiny3, (nds[0], *arrays[1:3], 1.0),
                  "3 arrays: NdArray")]
    else:
        forms = [(f"1 array: {kind}", tiny, (arrays[0], 1.0), "1 array: NdArray"),
                 (f"3 arrays: {kind}", tiny3, (*arrays[:3], 1.0), "3 arrays: NdArray")]
    if shared and tiny32 is not None:
        forms.append((f"{MANY} arrays: {kind} as all but x" if jax else f"{MANY} arrays: {kind}", tiny32,
                      (nds[0], *arrays[1:], 1.0) if jax else (*arrays, 1.0), f"{MANY} arrays: NdArray"))
    return forms


def _launches(bench: Bench, kernel: Launch, args: tuple, n: int) -> Callable[[], float]:
    """us per launch of ``n`` dynamic calls ``kernel(*args)``."""
    def one() -> float:
        def loop() -> None:
            for _ in range(n):
                kernel(*args)
        return bench.timed(loop) / n * 1e6
    return one


def _rate_foreign(rows: list[Row], measured: Measured, compared: list[tuple[str, str, bool]]) -> None:
    """Set each foreign form's ratio to its NdArray form (paired rounds); a zero-copy form is to stay within
    1.1 of it."""
    by = {r.name: r for r in rows}
    for name, limit, zero_copy in compared:
        paired = measured.pair(name, limit)
        if paired is None:
            continue
        row = by[f"dynamic call, {name}"]
        row.limit, (row.ratio, row.spread) = f"dynamic call, {limit}", paired
        if zero_copy:
            row.target, row.met = "<= 1.1", row.ratio <= 1.1


# -- memory growth -------------------------------------------------------------------------------------


def memory_growth(bench: Bench) -> list[Row]:
    """What launches leave behind: the Python heap's and the process's growth over dynamic and bound launches,
    against the raw C driver's growth over as many."""
    rt, tiny = bench.rt, bench.mod.kernels["tiny"]
    x = rt.ndarray((16,), np.float32, host_access="none")  # as the raw C driver allocates
    n = 10_000 if bench.quick else 100_000
    bound = tiny.bind(x, 1.0)
    for _ in range(1000):
        tiny(x, 1.0)
    rt.wait()
    tracemalloc.start()
    before_py = tracemalloc.get_traced_memory()[0]
    before_rss = _rss()
    for i in range(n):
        tiny(x, 1.0)
        bound()
        if i % 500 == 499:  # a wait every 1000 launches, as the raw C reference does
            rt.wait()
    rt.wait()
    after_py = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    after_rss = _rss()
    py = (after_py - before_py) / 1024
    rss = (after_rss - before_rss) / 1024
    params = {"launches": 2 * n}
    rows = [Row("memory", bench.name, f"Python heap growth over {2 * n} launches", "KiB", [py], target="<= 64",
                met=py <= 64, params=params)]
    c_rss = None
    if bench.driver is not None:  # the library's own growth for as many launches, for comparison
        pid = bench.driver.proc.pid
        bench.driver.seconds("launch 1000")
        c_before = _rss(pid)
        for _ in range(2 * n // 1000):
            bench.driver.seconds("launch 1000")
        c_rss = (_rss(pid) - c_before) / 1024
        rows.append(Row("memory", bench.name, f"raw C: RSS growth over {2 * n} launches", "KiB", [c_rss],
                        params=params))
    ours = Row("memory", bench.name, f"RSS growth over {2 * n} launches", "KiB", [rss], params=params)
    allowed = 1024 + max(c_rss or 0.0, 0.0)
    ours.target, ours.met = f"<= {allowed:.0f}", rss <= allowed
    if c_rss:
        ours.limit, ours.note = rows[-1].name, "target: raw C's growth + 1 MiB"
    rows.append(ours)
    return rows


def _rss(pid: int | str = "self") -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # pragma: no cover - not Linux
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
