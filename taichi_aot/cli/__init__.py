"""The command line, ``python -m taichi_aot`` (or ``taichi-aot``): argparse and one function a command.

    archs             which backends work here, their devices and capabilities
    info MODULE       kernels, graphs and argument tables of a module (--json for JSON)
    build FILE.py     compile the kernels FILE exports with Taichi into a module (folder or .tcm), or
                      for several archs into one multi-arch module file
    stubs MODULE      write typed Python signatures (.pyi) for a module's kernels and graphs
    bench             launch cost, throughput, transfers and graphs against raw C and memcpy (the bench's
                      own room, taichi_aot_bench, adds it: ``main``'s ``extra``)
    demo              run a reaction-diffusion module (shipped precompiled; --compile builds it with
                      Taichi) through taichi_aot on the best backend, print timings, write a PNG
    sweep             a Gray-Scott parameter map: one simulation per (F, k) pair, spread over a
                      pool of workers (local processes or Ray), written as one PNG mosaic

The rest of this folder is what the commands are built from: the demo's kernels (demo_kernels.py), the
sweep's task (sweep.py), ``build`` (build.py), ``stubs`` (stubs.py), the compile cache (cache.py) and a PNG
writer (png.py), an output path's check (paths.py). Nothing in the library imports from here.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, Callable, Optional

from .paths import unwritable


def cmd_archs(args: argparse.Namespace) -> int:
    """``archs``: each backend, available or why not; with ``--caps``, its device capabilities."""
    from .. import Runtime, capi

    capi.arch_status(named=True)  # every arch named: an "unavailable" kept from before is asked again
    if args.json:
        import json

        from ..config import devices as arch_list

        print(json.dumps(arch_list(), indent=1))
        return 0
    print(f"libtaichi_c_api {capi.library.path} (C-API {capi.get_version()}, found via {capi.library.source})")
    for arch, status in capi.arch_status().items():
        if status.available:
            devices = "?" if status.device_count is None else status.device_count
            line = f"  {arch.name.lower():8} available, devices: {devices}"
            if status.software:
                line += " (software rasterizer only: no GPU)"
            for i, device in enumerate(status.devices):
                kind = f"{device.type}: software rasterizer" if device.software else device.type
                line += f"\n      device {i}: {device.name} ({kind}, Vulkan {device.api_version})"
            if args.caps:
                with Runtime(arch) as rt:
                    caps = rt.capabilities
                line += "".join(f"\n      {getattr(c, 'name', c)}={v}" for c, v in caps.items())
            print(line)
        else:
            print(f"  {arch.name.lower():8} unavailable: {_in_archs(status.reason)}")
    return 0


def _in_archs(reason: str) -> str:
    """An arch's reason as ``archs`` prints it: without the pointer to ``archs`` itself that other commands add."""
    from ..enums import ARCHS_COMMAND

    pointer = f"{ARCHS_COMMAND} lists those that work here"
    return reason.replace(f" ({pointer})", "").replace(f": {pointer}", "").replace(f"; {pointer}", "")


def cmd_info(args: argparse.Namespace) -> int:
    """``info``: a module's format, kernels, graphs and argument tables (``--json``: as JSON)."""
    import json

    from .. import metadata

    info = metadata.read_module(args.module)  # MissingFileError / CorruptedDataError: one line, exit 2
    if args.json:
        print(json.dumps({"module": args.module, **info.to_dict()}, indent=2))
        return 0
    version = ".".join(map(str, info.version)) if info.version else "unknown"
    archs = info.arch.name.lower() if info.arch else "/".join(a.name.lower() for a in info.archs) or "unknown"
    print(f"module {args.module}")
    if info.parts:
        print(f"  multi-arch module (Taichi {version}), parts: {', '.join(info.parts)}; kernels as the "
              f"{info.parts[0]} part records them")
    else:
        print(f"  format {info.format} (Taichi {version}), loads on: {archs}")
    if info.required_caps:
        print("  required capabilities: " + ", ".join(f"{k}={v}" for k, v in info.required_caps.items()))
    threads = metadata.cpu_threads(args.module)
    if threads is not None:
        print(f"  CPU kernels: built for {threads} thread{'s' * (threads > 1)}; taichi_aot spreads their parallel "
              "loops over the runtime's threads where it loads them (Runtime('x64', cpu_threads=N); a cap where "
              "build --max-cpu-threads recorded one)")
    kernels = info.exported_kernels()
    internal = f"; {len(info.internal)} more compiled for graphs" if info.internal else ""
    print(f"  kernels ({len(kernels)}{internal}):")
    paths = _launch_paths(args.module, info)
    for k in kernels:
        _print_args(k.name, k.args, f"  [CUDA: {paths.get(k.name, 'taichi: no PTX for it')}]" if paths else "")
    print(f"  graphs ({len(info.graphs)}):")
    for g in info.graphs.values():
        _print_args(g.name, g.args, f" ({len(g.dispatches)} dispatches)")
    return 0


def _launch_paths(module: str, info: Any) -> dict[str, str] | None:
    """How a CUDA module's (or part's) kernels are launched, from its PTX manifest; None: no CUDA, or no PTX."""
    from ..enums import Arch
    from ..ptx import paths_of

    if info.arch != Arch.CUDA and "cuda" not in info.parts:
        return None
    paths = paths_of(module)
    if paths is None:
        print("  CUDA kernels launched through libtaichi (no PTX: python -m taichi_aot ptx adds it)")
    return paths


def printable(text: str) -> str:
    """``text`` as a terminal should get it from a module (names are data): control characters escaped."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _print_args(name: str, args: list, suffix: str = "") -> None:
    print(f"    {printable(name)}{suffix}")
    for a in args:
        label = printable(a.name) if a.name else f"arg{a.index}"
        access = f" ({a.access_word() or 'access unknown'})" if a.kind == "ndarray" else ""
        print(f"      {a.index:>2}  {label:<14} {a.describe()}{access}")
    if not args:
        print("      (no arguments)")


def cmd_build(args: argparse.Namespace) -> int:
    """``build``: compile a Python file's exported kernels and graphs with Taichi, for one arch or several
    (build.py)."""
    from .build import BuildError, build

    try:
        prebuilt = _with_parts(args.with_parts)
        summary = build(args.file, args.arch, args.out, args.caps, prebuilt, args.cpu_threads, not args.no_access,
                        args.portable, args.max_cpu_threads)
    except BuildError as e:
        print(f"taichi-aot: error: {e}", file=sys.stderr)
        return 2
    _print_built(summary)
    return 0


def _with_parts(items: list[str]) -> dict[str, str]:
    """``--with``'s ARCH=MODULE items as ``{arch: module}``."""
    from .build import BuildError

    prebuilt = {}
    for item in items:
        arch, sep, module = item.partition("=")
        if not sep or not module:
            raise BuildError(f"--with takes ARCH=MODULE (e.g. cuda=physics-cuda.tcm), got {item!r}")
        prebuilt[arch] = module
    return prebuilt


def _print_built(summary: dict) -> None:
    """What ``build`` made: the file, its parts, kernels and graphs, CPU threads, where ndarray access came from,
    the PTX."""
    from .build import LLVM_PARTS

    what = {"multi-arch": "a multi-arch module", "tcm": "a .tcm archive", "folder": "a module folder"}[summary["kind"]]
    print(f"built {summary['out']} ({what}) for {', '.join(summary['archs'])}: kernels "
          f"{', '.join(summary['kernels']) or '(none)'}; graphs {', '.join(summary['graphs']) or '(none)'}")
    threads = summary["cpu_threads"]
    if threads is not None:
        most = summary.get("max_cpu_threads")
        if most:
            print(f"  CPU kernels' loops over an ndarray's length run on at most {most} thread{'s' * (most > 1)} "
                  f"wherever they run (--max-cpu-threads: a cap the module keeps; other loops on the {threads} "
                  "they were built for)")
        else:
            print("  CPU kernels' loops over an ndarray's length run on the threads of the runtime that loads them "
                  f"(all the cores it may use by default; --max-cpu-threads N caps them); other loops on the "
                  f"{threads} they were built for")
    learned = summary["access"]
    llvm = ", ".join(a for a in summary["archs"] if a in LLVM_PARTS)
    if learned == "unknown":
        print(f"  ndarray access unknown on {llvm} (taken as read and written): {summary['access_reason']}")
    elif learned is not None:
        how = "a Vulkan build of the file, not kept" if learned == "probe" else f"the {learned}"
        print(f"  ndarray access recorded for {llvm}, from {how}")
    for arch, (caps, where) in summary.get("caps", {}).items():
        print(f"  {arch} capabilities ({where}): {' '.join(caps) or '(none beyond the SPIR-V version)'}")
    if summary["ptx"] is not None:
        _print_ptx(summary["ptx"])
    for kernel, why in summary.get("no_grad", {}).items():
        print(f"  warning: kernel {kernel} built without its reverse-mode kernel (kernel.grad refuses it): Taichi "
              f"could not differentiate it: {why}")


def _print_ptx(manifest: dict | str) -> None:
    if isinstance(manifest, str):
        print(f"  no PTX for the CUDA part (its kernels run through libtaichi): {manifest}")
        return
    print(f"  PTX ({manifest['target']}) for {len(manifest['kernels'])} CUDA kernels: taichi_aot's own launcher")
    for name, why in sorted(manifest["refused"].items()):
        print(f"    {printable(name)} stays on libtaichi: {why}")


def cmd_ptx(args: argparse.Namespace) -> int:
    """``ptx``: add PTX for taichi_aot's own CUDA launcher to a Taichi CUDA module (llvmlite, no Taichi, no GPU)."""
    from ..ptx import add_ptx
    from ..ptx.compile import PtxError

    try:
        manifest = add_ptx(args.module, args.out)
    except PtxError as e:
        print(f"taichi-aot: error: {e}", file=sys.stderr)
        return 2
    if manifest.get("empty"):
        print(f"nothing to do: {args.module} holds no kernels (no PTX to add; nothing written)")
        return 0
    print(f"wrote PTX into {args.out or args.module}")
    _print_ptx(manifest)
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    """``cache [clear]``: what taichi_aot keeps in its cache folder, or remove it."""
    from ..config import cache_entries, cache_home, clear_cache

    if args.action == "clear":
        print(f"removed {clear_cache()} entries from {cache_home()}")
        return 0
    print(f"cache folder {cache_home()}")
    for kind, paths in cache_entries().items():
        print(f"  {kind}: {len(paths)}")
        for path in paths:
            print(f"    {os.path.basename(path)}")
    return 0


def cmd_stubs(args: argparse.Namespace) -> int:
    """``stubs``: write a ``.pyi`` of the module's kernels and graphs (stubs.py)."""
    from .. import metadata
    from .stubs import generate

    text = generate(metadata.read_module(args.module), os.path.basename(os.path.abspath(args.module)))
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {args.out}")
    return 0


def _progress(done: int, total: int, started: float) -> None:
    if not sys.stderr.isatty():  # a log gets no \r frames
        return
    width = 30
    filled = int(width * done / total)
    rate = done / max(time.perf_counter() - started, 1e-9)
    sys.stderr.write(f"\r  [{'#' * filled}{'.' * (width - filled)}] {done}/{total} steps, {rate:,.0f} steps/s ")
    sys.stderr.flush()


def cmd_demo(args: argparse.Namespace) -> int:
    """``demo``: the reaction-diffusion demo on the best (or the given) backend; writes a PNG."""
    import numpy as np

    from .. import Runtime, arch_for_module
    from .cache import CompileError, demo_module, demo_start
    from .png import colormap, write_png

    arch_choice = args.arch if args.arch or args.compile else arch_for_module(demo_module(""))
    with Runtime(arch_choice) as rt:
        arch = rt.arch.name.lower()
        print(f"demo: Gray-Scott reaction-diffusion, {args.size}x{args.size}, {args.steps} steps on {arch}")
        t0 = time.perf_counter()
        try:
            path = demo_module(arch, compile=args.compile)
        except CompileError as e:
            raise SystemExit(f"demo: {e}") from None
        t1 = time.perf_counter()
        mod = rt.load_module(path)
        a = rt.ndarray((args.size, args.size), np.float32, (2,), host_access="none")
        b = rt.ndarray((args.size, args.size), np.float32, (2,), host_access="none")
        a.from_numpy(demo_start(args.size))
        step16 = mod.graphs["steps16"]
        rt.wait()
        t2 = time.perf_counter()
        launches = max(args.steps // 16, 1)
        started = time.perf_counter()
        for i in range(launches):
            step16(a=a, b=b, feed=0.037, kill=0.06)
            if (i + 1) % max(launches // 20, 1) == 0 or i + 1 == launches:
                rt.wait()
                _progress((i + 1) * 16, launches * 16, started)
        rt.wait()
        t3 = time.perf_counter()
        if sys.stderr.isatty():
            sys.stderr.write("\n")
        v = a.to_numpy()[..., 1]
        image = colormap((v - v.min()) / max(float(v.max() - v.min()), 1e-6))
        write_png(args.out, image)
        steps = launches * 16
        if args.compile:
            print(f"  compile (Taichi, cached after the first run): {t1 - t0:.2f} s")
        print(f"  load module + allocate + seed:                {t2 - t1:.3f} s")
        print(f"  {steps} steps ({launches} graph launches):      {t3 - t2:.3f} s, "
              f"{steps / (t3 - t2):,.0f} steps/s, {(t3 - t2) / steps * 1e6:.1f} us/step")
        print(f"  wrote {args.out} ({args.size}x{args.size}, v in [{v.min():.3f}, {v.max():.3f}])")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    """``sweep``: the Gray-Scott parameter map over a pool of workers (sweep.py); writes the mosaic PNG."""
    from ..runtime import arch_for_module, resolve_arch
    from .cache import demo_module
    from .sweep import run_sweep

    module = demo_module("")
    arch = (resolve_arch(args.arch) if args.arch else arch_for_module(module)).name.lower()
    devices = [int(d) for d in args.devices.split(",")] if args.devices else None
    print(f"sweep: Gray-Scott parameter map, {args.grid}x{args.grid} simulations of {args.size}x{args.size}, "
          f"{args.steps} steps each, on {arch}")
    baseline = min(args.baseline, args.grid * args.grid)
    run_sweep(module, arch, args.grid, args.size, args.steps, args.workers, devices, args.backend, baseline, args.out)
    return 0


def check_sweep(args: argparse.Namespace) -> str | None:
    """What is wrong with the sweep's options, or None."""
    if args.grid < 1 or args.size < 32 or args.steps < 16 or args.baseline < 0:
        return "--grid must be at least 1, --size at least 32, --steps at least 16, --baseline at least 0"
    if args.workers is not None and args.workers < 1:
        return "--workers must be at least 1"
    if args.devices and not all(d.strip().isdigit() for d in args.devices.split(",")):
        return f"--devices takes device numbers separated by commas, got {args.devices!r}"
    return unwritable(args.out, "--out")


def check_demo(args: argparse.Namespace) -> str | None:
    """What is wrong with the demo's options, or None."""
    if args.size < 32 or args.steps < 16:
        return "--size must be at least 32 and --steps at least 16"
    return unwritable(args.out, "--out")


def _check_stubs(args: argparse.Namespace) -> str | None:
    return unwritable(args.out, "-o")  # a missing folder is a mistake in the path: nothing is created


def _check_build(args: argparse.Namespace) -> str | None:
    return unwritable(args.out, "-o", folder=True, makes_folders=True)


def _check_profile(args: argparse.Namespace) -> str | None:
    from .profile import check_profile

    return check_profile(args)


def _cmd_profile(args: argparse.Namespace) -> int:
    from .profile import cmd_profile

    return cmd_profile(args)


Command = Callable[[argparse.Namespace], int]
#: A command's own check of its options: a message for ``parser.error``, or None when they are fine.
Check = Callable[[argparse.Namespace], Optional[str]]


#: argparse's table of subcommands (``add_subparsers()``), whose type has no public name.
Subcommands = argparse._SubParsersAction


def add_command(sub: Subcommands, name: str, func: Command, help: str,
                check: Check | None = None) -> argparse.ArgumentParser:
    """Add the command ``name`` to the table ``sub``: ``func`` runs it, ``check`` checks its options first."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=help)
    p.set_defaults(func=func, check_options=check)
    return p


def _quiet_finalizers(hook: Callable[[Any], object], unraisable: Any) -> None:
    """``sys.unraisablehook`` after an interrupt: a finalizer's error left unsaid, anything else handed to ``hook``."""
    if unraisable.err_msg is not None:
        hook(unraisable)


#: Adds a command of a room above this one to the table of subcommands (``add_command`` does the work).
AddCommand = Callable[[Subcommands], None]


def main(argv: list[str] | None = None, extra: Sequence[AddCommand] = ()) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the command, return its exit status. ``extra`` adds the
    commands of rooms above this one (``python -m taichi_aot`` adds the bench's: taichi_aot/__main__.py)."""
    from .. import __version__, capi

    parser = argparse.ArgumentParser(prog="taichi-aot", description="Run ahead-of-time compiled Taichi kernels.",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version",
                        version=f"taichi_aot {__version__}, libtaichi_c_api C-API {capi.get_version()} "
                                f"({capi.library.source}: {capi.library.path})")
    sub = parser.add_subparsers(dest="command", required=True)
    p = add_command(sub, "archs", cmd_archs, "which backends work here")
    p.add_argument("--caps", action="store_true", help="also list each backend's device capabilities")
    p.add_argument("--json", action="store_true", help="print every arch and its devices as JSON (no capabilities)")
    p = add_command(sub, "info", cmd_info, "describe a module's kernels and graphs")
    p.add_argument("module", help="module folder or .tcm file")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = add_command(sub, "build", cmd_build, "compile a Python file's exported kernels and graphs into a module",
                 check=_check_build)
    p.add_argument("file", help="Python file with @ti.aot.export kernels and an optional export_graphs()")
    p.add_argument("--arch", nargs="+", default=[],
                   help="one or more of x64, arm64, cuda, vulkan, metal, opengl, gles (several: one multi-arch file)")
    p.add_argument("--with", dest="with_parts", nargs="+", default=[], metavar="ARCH=MODULE",
                   help="a module built elsewhere (folder or .tcm) as the part for ARCH, e.g. cuda=physics-cuda.tcm")
    p.add_argument("-o", "--out", required=True,
                   help="one arch: a folder, or a file ending in .tcm; several: the multi-arch module file")
    p.add_argument("--caps", nargs="*", default=[], help="device capabilities for gfx backends (default for "
                   "Vulkan: this machine's Vulkan device's, as `archs --caps` lists them)")
    p.add_argument("--portable", action="store_true",
                   help="gfx parts with Taichi's default capabilities alone, for any device (Vulkan without --caps "
                        "otherwise takes this machine's device's)")
    p.add_argument("--cpu-threads", type=int, default=None, metavar="N",
                   help="compile CPU kernels for N threads (default: this machine's cores); where they run, their "
                        "loops are spread over the runtime's threads all the same")
    p.add_argument("--max-cpu-threads", type=int, default=None, metavar="N",
                   help="CPU kernels run on at most N threads wherever they run: a cap the module records (default: "
                        "none, the threads of the runtime that loads them)")
    p.add_argument("--no-access", action="store_true",
                   help="record no ndarray access in the LLVM parts (skips the Vulkan build that learns it)")
    p = add_command(sub, "ptx", cmd_ptx, "add PTX for taichi_aot's own CUDA launcher to a Taichi CUDA module")
    p.add_argument("module", help="a CUDA module folder, .tcm, or multi-arch module with a CUDA part")
    p.add_argument("-o", "--out", default=None, help="write the result here (default: in place)")
    p = add_command(sub, "cache", cmd_cache, "list what taichi_aot keeps in its cache folder, or clear it")
    p.add_argument("action", nargs="?", choices=["list", "clear"], default="list",
                   help="list (the default): the cache folder and each kind of entry in it (probe answers, module "
                        "verdicts, PTX made at load, compiled modules, libraries fetched by builds), counted and "
                        "named; clear: remove those entries, this user's alone (nothing else in the folder is "
                        "touched; each is made again when needed)")
    p = add_command(sub, "stubs", cmd_stubs, "write typed signatures (.pyi) for a module", check=_check_stubs)
    p.add_argument("module", help="module folder or .tcm file")
    p.add_argument("-o", "--out", required=True, help="the .pyi file to write ('-' for stdout)")
    p = add_command(sub, "profile", _cmd_profile, "run a Python script and print each kernel's device time",
                    check=_check_profile)
    p.usage = "%(prog)s [--trace FILE] [--plot FILE] [--] SCRIPT.py [ARGS ...]"
    p.description = ("Profile's options come before the script (as python -m cProfile -o FILE SCRIPT takes them): "
                     "everything after the script is the script's. --trace or --plot after it is refused; where the "
                     "script itself takes them, put -- before the script.")
    p.allow_abbrev = False  # --tr FILE after the script is as much a slip as --trace FILE
    p.add_argument("--trace", default=None, metavar="FILE", help="also write a Chrome trace (Perfetto opens it)")
    p.add_argument("--plot", default=None, metavar="FILE", help="also draw the kernels' times (needs matplotlib)")
    p.add_argument("script", help="the Python script to run, as python SCRIPT.py would")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")
    for add in extra:  # the commands of rooms above this one: the bench (taichi_aot_bench.command)
        add(sub)
    p = add_command(sub, "demo", cmd_demo, "run a reaction-diffusion demo and write a picture", check=check_demo)
    p.add_argument("--arch", default=None, help="backend (default: the best available)")
    p.add_argument("--size", type=int, default=256, help="grid side (default 256)")
    p.add_argument("--steps", type=int, default=4000, help="simulation steps (default 4000)")
    p.add_argument("--out", default="taichi_aot_demo.png", help="PNG to write (default taichi_aot_demo.png)")
    p.add_argument("--compile", action="store_true",
                   help="compile the demo's kernels with Taichi (the build extra) instead of the shipped module")
    p = add_command(sub, "sweep", cmd_sweep, "a Gray-Scott parameter map over a pool of workers", check=check_sweep)
    p.add_argument("--arch", default=None, help="backend (default: the best available)")
    p.add_argument("--workers", type=int, default=None,
                   help="number of workers (default: one per GPU; on the CPU as many as fit the cores, the "
                        "module's threads each)")
    p.add_argument("--devices", default=None, help="GPUs to use, e.g. 0,1 (default: all)")
    p.add_argument("--backend", choices=["local", "ray"], default="local", help="worker processes or Ray actors")
    p.add_argument("--grid", type=int, default=8, help="tiles per side: grid x grid simulations (default 8)")
    p.add_argument("--size", type=int, default=128, help="grid side of each simulation (default 128)")
    p.add_argument("--steps", type=int, default=2000, help="steps per simulation (default 2000)")
    p.add_argument("--baseline", type=int, default=4,
                   help="simulations first run on one worker, for the speed-up (default 4; 0: none)")
    p.add_argument("--out", default="taichi_aot_sweep.png", help="PNG to write (default taichi_aot_sweep.png)")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # as given (profile reads its script's arguments here)
    problem = args.check_options(args) if args.check_options is not None else None
    if problem:
        parser.error(problem)
    from ..errors import TaichiError

    try:
        status: int = args.func(args)
        sys.stdout.flush()
    except TaichiError as e:  # what the user gave (a module, an arch, a file) is wrong: one line, exit 2
        print(f"taichi-aot: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader left (`info --json | head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's last flush at exit fails no more
        return 1
    except KeyboardInterrupt:
        # an object the interrupt left half made (a ZipFile stopped inside its __init__) may fail in its finalizer
        # as the process ends: after Ctrl-C that is noise, not the user's to read (a finalizer's message has no
        # err_msg; an atexit callback's and the rest still reach the hook there was)
        sys.unraisablehook = functools.partial(_quiet_finalizers, sys.unraisablehook)
        print("taichi-aot: interrupted", file=sys.stderr)
        return 130
    except OSError as e:  # a file the user named cannot be read or written
        print(f"taichi-aot: error: {e.strerror or e}: {e.filename or ''}".rstrip(": "), file=sys.stderr)
        return 2
    return status
