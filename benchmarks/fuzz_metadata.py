"""Every value of a real Vulkan module's metadata replaced, one at a time, against load, launch, info and stubs.

    python benchmarks/fuzz_metadata.py [--module DIR] [--sample N] [--seed S] [--timeout 20] [--out FILE]
    python benchmarks/fuzz_metadata.py --tcb N [--bits 4] [--module LLVM_DIR] ...   # metadata.tcb, bits flipped

A variant replaces one value of ``metadata.json`` or ``graphs.json`` (every value: objects and lists too, not
only their leaves) by one of ``Infinity``, ``-1``, ``2**70``, ``"x"``, ``[]``, ``{}`` and ``null``. A worker child
takes the variants one after another: loads the module, launches every kernel and graph with the undamaged
module's inputs and compares what they leave with the undamaged module's results, and runs ``info``,
``info --json`` and ``stubs`` on it. Outcomes: *typed* (a TaichiError, or a command's exit status 2 with its
message), *right* (everything as the undamaged module), *wrong* (a result differs, no error), *untyped* (another
exception), *crashed* (the worker died) and *hung* (no answer in ``--timeout`` s). Only typed and right are
acceptable. ``--sample N`` takes N variants drawn with ``--seed`` (the test suite's run); the default is all.
``--tcb`` damages an x64 module's ``metadata.tcb`` instead (the binary copy of the metadata that libtaichi_c_api
reads): seeded sets of flipped bits, or every byte inverted in turn. The reader compares it with
``metadata.json`` (``taichi_aot/metadata/tcb.py``), so each should be typed without a crash behind it.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__":  # a script: the checkout's package, or (a worker) the package its parent imported
    sys.path.insert(0, os.environ.get("TAICHI_AOT_FUZZ_PACKAGE", ROOT))
import taichi_aot as ta  # noqa: E402
from taichi_aot.enums import NUMPY_DTYPES  # noqa: E402

REPLACEMENTS: dict[str, Any] = {"Infinity": float("inf"), "-1": -1, "2**70": 2**70, '"x"': "x", "[]": [], "{}": {},
                                "null": None}
FILES = ("metadata.json", "graphs.json")
OUTCOMES = ("typed", "right", "wrong", "untyped", "crashed", "hung")
N = 8  # array extent per dimension


def paths(doc: Any, at: tuple = ()) -> list[tuple]:
    """The path (keys and indices) of every value under ``doc``."""
    out = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        out.append((*at, key))
        out += paths(value, (*at, key))
    return out


def _at(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


#: Fields of graphs.json that Taichi 1.7.4 leaves uninitialized (a symbolic argument's ``field_dim`` and
#: ``num_channels``, where its kind reads none): whatever memory held, -1 or 0 at times.
_UNINITIALIZED = ("field_dim", "num_channels")


def variants(folder: str) -> list[tuple[str, tuple, str]]:
    """(file, path, replacement name) of every variant of the module in ``folder`` (a replacement equal to the
    value it replaces is none, except in a field Taichi leaves uninitialized: there every replacement is one, so
    that the list, and a seeded sample of it, is the same for every build of the module)."""
    out = []
    for file in FILES:
        if os.path.isfile(os.path.join(folder, file)):
            with open(os.path.join(folder, file)) as f:
                doc = json.load(f)
            out += [(file, p, name) for p in paths(doc) for name, value in REPLACEMENTS.items()
                    if (file == "graphs.json" and p[-1] in _UNINITIALIZED)
                    or not (type(_at(doc, p)) is type(value) and _at(doc, p) == value)]
    return out


def replaced(doc: Any, path: tuple, value: Any) -> Any:
    """A copy of ``doc`` with the value at ``path`` replaced by ``value``."""
    doc = copy.deepcopy(doc)
    _at(doc, path[:-1])[path[-1]] = copy.deepcopy(value)
    return doc


def _value(rt: Any, arg: Any, arrays: list) -> Any:
    if arg.kind == "ndarray":
        dt, shape = NUMPY_DTYPES.get(arg.dtype, np.dtype(np.float32)), (N,) * arg.ndim
        full = shape + tuple(arg.elem_shape)
        arrays.append(rt.ndarray(shape, dt, arg.elem_shape))
        arrays[-1].from_numpy((np.arange(int(np.prod(full))) % 7 + 1).reshape(full).astype(dt))
        return arrays[-1]
    if arg.kind in ("texture", "rw_texture"):
        return rt.allocate_image(f"{arg.ndim}d", (N,) * arg.ndim, arg.format or "r32f")
    return [1] * (arg.length or 1) if arg.kind == "tensor" else 1


def results(rt: Any, folder: str, entries: list[str],
            given: dict[str, list[Any]] | None = None) -> dict[str, list[np.ndarray]]:
    """Launch each entry ("kernel NAME", "graph NAME") of the module in ``folder`` with inputs made for the arguments
    ``given`` records (the undamaged module's: what a program written for it passes), else for the module's own;
    the arrays each left."""
    out = {}
    with rt.load_module(folder) as mod:
        for entry in entries:
            kind, name = entry.split(" ", 1)
            launchable = mod.kernels[name] if kind == "kernel" else mod.graphs[name]
            signature = given[entry] if given is not None else launchable.signature
            arrays: list = []
            values = [_value(rt, a, arrays) for a in signature]
            if kind == "kernel":  # by position: LLVM modules record no argument names
                launchable(*values)
            else:  # a graph's arguments go by name
                launchable(**{a.name: v for a, v in zip(signature, values)})
            rt.wait()
            out[entry] = [a.to_numpy() for a in arrays]
    return out


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    """Whether two launches left the same arrays (floats within 1e-5: atomic float sums vary in their last bits)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.dtype.kind == "f" and not np.allclose(x, y, rtol=1e-5, atol=1e-6, equal_nan=True):
            return False
        if x.dtype.kind != "f" and not np.array_equal(x, y):
            return False
    return True


def _commands(folder: str) -> str | None:
    """``info``, ``info --json`` and ``stubs`` on the module: None, or what was wrong (an untyped failure)."""
    from taichi_aot.cli import main

    for argv in (["info", folder], ["info", "--json", folder], ["stubs", folder, "-o", "-"]):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
        if code not in (0, 2) or "Traceback" in err.getvalue():
            return f"{' '.join(argv[:2])}: exit {code}: {err.getvalue()[-300:]}"
    return None


def tcb_variants(folder: str, flips: int, bits: int, seed: int) -> list[tuple[str, tuple, str]]:
    """Variants of an LLVM module's ``metadata.tcb`` (what libtaichi_c_api reads): each byte inverted
    (``flips`` 0), or ``flips`` seeded sets of ``bits`` flipped bits."""
    size = os.path.getsize(os.path.join(folder, "metadata.tcb"))
    if not flips:
        return [("metadata.tcb", (at,), "byte") for at in range(size)]
    rng = random.Random(seed)
    return [("metadata.tcb", tuple(rng.sample(range(size * 8), bits)), "bits") for _ in range(flips)]


def _write_variant(source: str, work: str, variant: tuple[str, tuple, str]) -> None:
    file, path, name = variant
    if file.endswith(".tcb"):
        with open(os.path.join(source, file), "rb") as f:
            data = bytearray(f.read())
        for at in path:
            if name == "byte":
                data[at] ^= 0xFF
            else:
                data[at // 8] ^= 1 << (at % 8)
        with open(os.path.join(work, file), "wb") as f:
            f.write(data)
        return
    with open(os.path.join(source, file)) as f:
        doc = json.load(f)
    with open(os.path.join(work, file), "w") as f:
        json.dump(replaced(doc, path, REPLACEMENTS[name]), f)


def run_variant(rt: Any, work: str, source: str, variant: tuple[str, tuple, str],
                reference: dict[str, list[np.ndarray] | None], given: dict[str, list[Any]]) -> dict:
    file = variant[0]
    _write_variant(source, work, variant)
    untyped = _commands(work)
    if untyped:
        return {"outcome": "untyped", "error": untyped}
    try:
        got = results(rt, work, list(reference), given)
    except ta.TaichiError as e:
        return {"outcome": "typed", "error": f"{type(e).__name__}: {e}"[:300]}
    except Exception as e:  # any other exception: what the sweep looks for
        return {"outcome": "untyped", "error": f"{type(e).__name__}: {e}"[:300]}
    finally:
        shutil.copy(os.path.join(source, file), os.path.join(work, file))
    right = all(want is None or same(got[e], want) for e, want in reference.items())
    return {"outcome": "right" if right else "wrong"}


def worker(source: str) -> None:
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the library prints goes to stderr: the results keep stdout
    info = ta.metadata.read_module(source)
    rt = ta.Runtime(ta.Arch.X64 if info.format == "llvm" else ta.Arch.VULKAN)
    entries = [f"kernel {k.name}" for k in info.exported_kernels()]
    entries += [f"graph {g}" for g in info.graphs]
    first, again = results(rt, source, entries), results(rt, source, entries)
    given = {e: list((info.kernels if e.startswith("kernel ") else info.graphs)[e.split(" ", 1)[1]].args)
             for e in entries}  # the undamaged module's arguments (what its launchables' signatures are)
    # an entry whose results differ from run to run, or that samples a texture (nothing writes the harness's new
    # images, whose texels Vulkan leaves undefined: their content varies with what ran before), is launched, not
    # compared
    reference = {e: first[e] if same(first[e], again[e]) and all(a.kind != "texture" for a in given[e]) else None
                 for e in entries}
    with tempfile.TemporaryDirectory(prefix="fuzz_metadata-") as work:
        for name in os.listdir(source):
            shutil.copy(os.path.join(source, name), os.path.join(work, name))
        for line in sys.stdin:
            file, path, name = json.loads(line)
            print(json.dumps(run_variant(rt, work, source, (file, tuple(path), name), reference, given)),
                  file=out, flush=True)


class Worker:
    """A worker child, started again after it dies or is killed."""

    def __init__(self, source: str, timeout: float):
        self.source, self.timeout, self.proc = source, timeout, None  # type: str, float, Any

    def run(self, variant: tuple) -> dict:
        import select

        if self.proc is None or self.proc.poll() is not None:
            env = {**os.environ, "TAICHI_AOT_FUZZ_PACKAGE": os.path.dirname(os.path.dirname(ta.__file__))}
            self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", self.source],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         env=env)
        self.proc.stdin.write((json.dumps(variant) + "\n").encode())
        self.proc.stdin.flush()
        ready = select.select([self.proc.stdout], [], [], self.timeout)[0]
        line = self.proc.stdout.readline() if ready else b""
        if line:
            return json.loads(line)
        hung = self.proc.poll() is None
        self.proc.kill()
        code = self.proc.wait()
        self.close()
        return {"outcome": "hung" if hung else "crashed", "error": "" if hung else f"exit {code}"}

    def close(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            self.proc.wait()
            self.proc.stdout.close()
            self.proc = None


def sweep(source: str, sample: int | None = None, seed: int = 1, timeout: float = 20.0,
          todo: list[tuple[str, tuple, str]] | None = None) -> list[dict]:
    """Run the variants (``todo``, else the JSON files' every value; all, or ``sample`` of them drawn with
    ``seed``) of the module in ``source``."""
    todo = variants(source) if todo is None else todo
    if sample is not None and sample < len(todo):
        todo = random.Random(seed).sample(todo, sample)
    w = Worker(source, timeout)
    try:
        return [{"file": f, "path": list(p), "value": n, **w.run((f, p, n))} for f, p, n in todo]
    finally:
        w.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--module", help="a Vulkan module folder (default: the test suite's, built by tests/kernels.py)")
    p.add_argument("--sample", type=int)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=20.0)
    p.add_argument("--out")
    p.add_argument("--tcb", type=int, metavar="N", help="an LLVM module's metadata.tcb instead: N seeded sets of "
                   "--bits flipped bits (0: every byte inverted in turn)")
    p.add_argument("--bits", type=int, default=4)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="fuzz_metadata-src-") as tmp:
        source = args.module
        if source is None:
            source = os.path.join(tmp, "tests")
            arch = "x64" if args.tcb is not None else "vulkan"
            subprocess.run([sys.executable, os.path.join(ROOT, "tests", "kernels.py"), "--arch", arch, "--out",
                            source], check=True, capture_output=True)
        start = time.perf_counter()
        todo = tcb_variants(source, args.tcb, args.bits, args.seed) if args.tcb is not None else None
        found = sweep(source, args.sample, args.seed, args.timeout, todo)
    counts = Counter(r["outcome"] for r in found)
    print(f"{len(found)} variants in {time.perf_counter() - start:.0f} s: "
          + ", ".join(f"{k} {counts[k]}" for k in OUTCOMES))
    for r in found:
        if r["outcome"] not in ("typed", "right"):
            print(r["outcome"], r["file"], ".".join(map(str, r["path"])), "=", r["value"], r.get("error", ""))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"counts": counts, "results": found}, f, indent=1)


if __name__ == "__main__":
    worker(sys.argv[2]) if sys.argv[1:2] == ["--worker"] else main()
