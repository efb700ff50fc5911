"""The install table of benchmarks/RESULTS.md: taichi_aot's wheel against the taichi wheel, each in a fresh venv.

    python benchmarks/install_table.py WHEEL [--python PYTHON] [--runs 7]

For each: the wheel's size, what the venv holds (total, and the package with the dependencies it brings),
``import`` time and the time to a first x64 runtime (``Runtime("x64")``; ``ti.init(arch=ti.x64)``), as medians
of fresh interpreters, and how long ``pip install`` took (from pip's cache where it has the files). Prints a
Markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def _size(path: str) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            p = os.path.join(folder, name)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return total


def _venv(root: str, python: str, what: list[str]) -> tuple[str, float, int]:
    subprocess.run([python, "-m", "venv", root], check=True)
    py = os.path.join(root, "bin", "python")
    empty = _size(root)
    t0 = time.perf_counter()
    subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", *what], check=True,
                   stderr=subprocess.DEVNULL)
    return py, time.perf_counter() - t0, _size(root) - empty


def _timed(py: str, code: str, runs: int, cwd: str) -> float:
    """Median seconds of ``code`` in fresh interpreters (the measurement is inside: interpreter start left out)."""
    probe = f"import time; t0 = time.perf_counter()\n{code}\nprint(time.perf_counter() - t0)"
    out = []
    for _ in range(runs):
        proc = subprocess.run([py, "-c", probe], capture_output=True, text=True, cwd=cwd, check=True)
        out.append(float(proc.stdout.strip().splitlines()[-1]))
    return statistics.median(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ours, t_ours, s_ours = _venv(os.path.join(tmp, "ours"), args.python, [os.path.abspath(args.wheel)])
        theirs, t_theirs, s_theirs = _venv(os.path.join(tmp, "taichi"), args.python, ["taichi==1.7.4"])
        package = _size(os.path.join(tmp, "ours", "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}",
                                     "site-packages", "taichi_aot"))
        # the first runtime: of the given arch; and of the best arch, which the probe chooses (its answer cached
        # as a second run on the machine finds it, or cold: a new cache folder)
        first = "from taichi_aot import Runtime\nRuntime('x64').close()"
        best = "from taichi_aot import Runtime\nRuntime().close()"
        cold = f"import os; os.environ['XDG_CACHE_HOME'] = {os.path.join(tmp, 'c')!r} + str(time.perf_counter_ns())\n"
        rows.append(("wheel", f"{os.path.getsize(args.wheel) / 1e6:.1f} MB", "56.2-56.3 MB (per CPython 3.9-3.13)"))
        rows.append(("installed into a fresh venv (package + dependencies)", f"{s_ours / 1e6:.0f} MB "
                     f"(taichi_aot {package / 1e6:.0f} MB)", f"{s_theirs / 1e6:.0f} MB"))
        rows.append(("pip install (files in pip's cache)", f"{t_ours:.1f} s", f"{t_theirs:.1f} s"))
        rows.append(("import", f"{_timed(ours, 'import taichi_aot', args.runs, tmp) * 1e3:.0f} ms",
                     f"{_timed(theirs, 'import taichi', args.runs, tmp) * 1e3:.0f} ms"))
        ti_first = _timed(theirs, "import taichi as ti; ti.init(arch=ti.x64)", args.runs, tmp)
        rows.append(("first x64 runtime, import included (`Runtime('x64')`; `ti.init(arch=ti.x64)`)",
                     f"{_timed(ours, first, args.runs, tmp) * 1e3:.0f} ms", f"{ti_first * 1e3:.0f} ms"))
        rows.append(("first runtime on the best backend (`Runtime()`), the probe's answer cached",
                     f"{_timed(ours, best, args.runs, tmp) * 1e3:.0f} ms", "-"))
        rows.append(("the same, first run on the machine (probed in child processes)",
                     f"{_timed(ours, cold + best, args.runs, tmp) * 1e3:.0f} ms", "-"))
    print("| | taichi_aot | taichi 1.7.4 |")
    print("| --- | ---: | ---: |")
    for name, a, b in rows:
        print(f"| {name} | {a} | {b} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
