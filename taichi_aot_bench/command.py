"""The ``bench`` command of ``python -m taichi_aot`` (taichi_aot/__main__.py adds it to taichi_aot.cli's table):
its options, their checks, and the run with what it prints and its exit status."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from taichi_aot.cli import Subcommands, add_command, unwritable

from .row import SECTIONS


def add_bench(sub: Subcommands) -> None:
    """Add ``bench`` and its options to the command line's table of subcommands."""
    p = add_command(sub, "bench", cmd_bench, "measure launch cost, throughput and transfers against their limits",
                    check=_check_bench)
    p.add_argument("--quick", action="store_true", help="small sizes and few repeats (seconds)")
    p.add_argument("--arch", nargs="*", choices=["x64", "vulkan", "cuda"], help="archs (default: all available)")
    p.add_argument("--sections", nargs="*",
                   help=f"{' '.join(SECTIONS)} (default: all)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON ('-': to stdout)")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the results (needs matplotlib)")
    p.add_argument("--no-jit", action="store_true", help="skip Taichi's own JIT path")
    p.add_argument("--corpus", metavar="FOLDER", help="the launcher section also times every kernel of every module "
                   "in FOLDER on both CUDA launch paths (GPU time, through torch.profiler)")
    p.add_argument("--vk-raw", metavar="BINARY", help="the placement section (Vulkan) also runs this build of "
                   "benchmarks/vk_raw.c: a launch and a step of 64 dispatches beside raw Vulkan's; the profiler "
                   "section, a kernel's profiled time beside raw Vulkan's timestamps")
    p.add_argument("--threads-raw", metavar="BINARY", help="the sharing section (Vulkan, CUDA) also runs this "
                   "build of benchmarks/threads_raw.c: its rows of threads sharing a runtime beside the same shape in "
                   "C alone")
    p.add_argument("--check", dest="check_targets", action="store_true", help="exit 1 when a figure misses its target")


def _check_bench(args: argparse.Namespace) -> str | None:
    return unwritable(args.json, "--json") or unwritable(args.plot, "--plot")


def cmd_bench(args: argparse.Namespace) -> int:
    """``bench``: run the harness (run.py), print its tables and targets; 1 when a section failed."""
    from taichi_aot import Arch

    from .report import summary
    from .run import run

    archs = [Arch[a.upper()] for a in args.arch] if args.arch else None
    problem = _refused(args, SECTIONS)
    if problem:
        print(f"taichi-aot: error: {problem}", file=sys.stderr)
        return 2
    quiet = args.json == "-"
    results = run(archs, quick=args.quick, sections=args.sections or SECTIONS, jit=not args.no_jit,
                  log=(lambda m: print(m, file=sys.stderr)) if quiet else print,
                  saved=lambda r: _save(args.json, r), corpus=args.corpus, vk_raw=args.vk_raw,
                  threads_raw=args.threads_raw)
    _save(args.json, results)
    if quiet:
        print(json.dumps(results, indent=1))
    if args.plot and not _plotted(results, args.plot):
        return 1
    print(summary(results), file=sys.stderr if quiet else sys.stdout)
    return _status(results, args.check_targets, archs)


def _refused(args: argparse.Namespace, known: Sequence[str]) -> str | None:
    """Why the run cannot start (said before it, not after it), or None."""
    unknown = [s for s in args.sections or () if s not in known]
    if unknown:
        return f"unknown section(s) {unknown}; choose from {', '.join(known)}"
    if args.corpus and not os.path.isdir(args.corpus):
        return f"--corpus {args.corpus!r}: not a folder"
    if args.vk_raw and not (os.path.isfile(args.vk_raw) and os.access(args.vk_raw, os.X_OK)):
        return f"--vk-raw {args.vk_raw!r}: not a program (cc -O2 -o vk_raw benchmarks/vk_raw.c -ldl)"
    if args.threads_raw and not (os.path.isfile(args.threads_raw) and os.access(args.threads_raw, os.X_OK)):
        return (f"--threads-raw {args.threads_raw!r}: not a program "
                "(cc -O2 -o threads_raw benchmarks/threads_raw.c -ldl -lpthread)")
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        return "--plot needs matplotlib (pip install 'taichi_aot[plot]')"
    return None


def _save(path: str | None, results: dict) -> None:
    """Write ``results`` as JSON to ``path`` (none for None or "-": stdout gets them at the end)."""
    if path and path != "-":
        with open(path, "w") as f:
            f.write(json.dumps(results, indent=1))


def _plotted(results: dict, path: str) -> bool:
    """Draw ``results`` into ``path``; False (and a line on stderr) where matplotlib cannot be imported."""
    from .report import plot

    try:
        plot(results, path)
    except ImportError:
        print("taichi-aot: --plot needs matplotlib (pip install 'taichi_aot[plot]')", file=sys.stderr)
        return False
    return True


def _status(results: dict[str, Any], check: bool, archs: Sequence[Any] | None) -> int:
    """The exit status: 1 when a section failed or, with ``check``, a target was missed or an arch asked for is
    not here; else 0."""
    if results["errors"]:
        return 1
    if not check:
        return 0
    missed = [r for r in results.get("rows", []) if r.get("met") is False]
    if missed:
        print(f"taichi-aot: {len(missed)} target(s) missed (--check)", file=sys.stderr)
        return 1
    absent = [a.name.lower() for a in archs or () if a.name.lower() not in results["archs"]]
    if absent:  # a check of a backend that is not here has checked nothing
        print(f"taichi-aot: --check: {', '.join(absent)} not available here, its targets unchecked", file=sys.stderr)
        return 1
    return 0
