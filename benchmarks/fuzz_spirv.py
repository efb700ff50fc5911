"""Damaged SPIR-V against the load-time check and the Vulkan driver: what each damaged module does.

    python benchmarks/fuzz_spirv.py [--cases 2000] [--seed 1] [--module DIR_OR_TCM ...] [--classes a,b,...]
                                    [--jobs 2] [--timeout 20] [--keep DIR] [--out FILE]
    python benchmarks/fuzz_spirv.py --replay KEEP_DIR/case-00042     # one kept case again, in a child

A case copies a source module (default: the test suite's, built by tests/kernels.py, and the Vulkan parts of
taichi_aot/cli/demo.tcm and examples/physics.tcm) and damages one task's ``.spv`` by one class of mutation
(``CLASSES``), from ``--seed`` and its number alone. Worker children (``--jobs``) take cases one after another:
load the module, launch the damaged task's kernel and the graphs that dispatch it (arrays of ones, scalars 1), wait.
Outcomes: *refused* (a TaichiError from load_module), *typed* (a TaichiError at lookup or launch), *untyped*
(another exception), *ran* (the undamaged module's results), *differs* (ran, other results), *crashed* (the
worker died: its signal), *hung* (no answer in ``--timeout`` s: killed). Crashed, hung and untyped cases are
kept under ``--keep`` for ``--replay``. Not a test: a crash or a hang is damage the check let through.
"""

from __future__ import annotations

import argparse
import faulthandler
import hashlib
import json
import os
import random
import select
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the checkout's package, wherever this runs from
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))  # its opcode table
from spirv_opcodes import OPS  # noqa: E402

import taichi_aot as ta  # noqa: E402
from taichi_aot.enums import NUMPY_DTYPES  # noqa: E402

OUTCOMES = ("refused", "typed", "untyped", "ran", "differs", "crashed", "hung")
KEPT = ("crashed", "hung", "untyped")
_LABEL, _FUNCTION, _SWITCH = 248, 54, 251
_BRANCHES = {249: (0,), 250: (1, 2), 247: (0,), 246: (0, 1)}  # the operands that are labels, by opcode
N = 16  # ndarray and image extent per dimension
Mutation = tuple[list[int], dict]


def op_name(op: int) -> str:
    return "Op" + OPS[op][0] if op in OPS else f"opcode {op}"


class Spv:
    """A SPIR-V module's words and its instructions, ``insts``: (first word, word count, opcode) each."""

    def __init__(self, words: list[int]):
        self.words, self.insts, i = words, [], 5  # type: list[int], list[tuple[int, int, int]], int
        while i < len(words) and words[i] >> 16:
            self.insts.append((i, words[i] >> 16, words[i] & 0xFFFF))
            i += words[i] >> 16


def _replace(spv: Spv, word: int, new: int, what: str) -> Mutation:
    k, words = max([k for k, (at, _, _) in enumerate(spv.insts) if at <= word] or [0]), list(spv.words)
    old, words[word] = words[word], new & 0xFFFFFFFF
    return words, {"inst": k, "opcode": op_name(spv.insts[k][2]) if spv.insts else "", "word": word,
                   "old": hex(old), "new": hex(words[word]), "what": f"{what} ({hex(old)} -> {hex(words[word])})"}


def mut_word(spv: Spv, rng: random.Random, bit: bool = False) -> Mutation | None:
    word, flip = rng.randrange(5, len(spv.words)), rng.randrange(32)
    if bit:
        return _replace(spv, word, spv.words[word] ^ (1 << flip), f"bit {flip} flipped")
    new = rng.getrandbits(32) if rng.random() < 0.5 else rng.randrange(spv.words[3] + 16)  # or an id-sized one
    return _replace(spv, word, new, "word replaced by a random value")


def mut_id(spv: Spv, rng: random.Random) -> Mutation | None:
    ids = {spv.words[at + 1 + form.index("R")] for at, count, op in spv.insts  # the result ids
           if (form := OPS.get(op, ("", ""))[1]).startswith(("TR", "R")) and count > form.index("R") + 1}
    spots = [at + j for at, count, _ in spv.insts for j in range(1, count) if spv.words[at + j] in ids]  # literals too
    if not spots or len(ids) < 2:
        return None
    word = rng.choice(spots)
    new = rng.choice(sorted(ids - {spv.words[word]}))
    return _replace(spv, word, new, f"id %{spv.words[word]} replaced by %{new}")


def mut_swap(spv: Spv, rng: random.Random) -> Mutation | None:
    at, count, _ = rng.choice(spv.insts)
    pairs = [(i, j) for i in range(1, count) for j in range(i + 1, count) if spv.words[at + i] != spv.words[at + j]]
    if not pairs:
        return None
    i, j = rng.choice(pairs)
    words, desc = _replace(spv, at + i, spv.words[at + j], f"operands {i - 1} and {j - 1} swapped")
    words[at + j] = spv.words[at + i]
    return words, desc


def mut_branch(spv: Spv, rng: random.Random) -> Mutation | None:
    labels: list[list[int]] = []  # each function's
    spots = []  # (word, function) of each label a branch, switch or merge names (a switch: with a 32-bit selector)
    for at, count, op in spv.insts:
        labels += [[]] if op == _FUNCTION else []
        if labels and op == _LABEL and count > 1:
            labels[-1].append(spv.words[at + 1])
        places = _BRANCHES.get(op, ()) if op != _SWITCH else (1, *range(3, count - 1, 2))
        spots += [(at + 1 + p, len(labels) - 1) for p in places if p < count - 1 and labels]
    rng.shuffle(spots)
    for word, f in spots:
        others = [x for x in labels[f] if x != spv.words[word]]
        if others:
            new = rng.choice(others)
            return _replace(spv, word, new, f"target %{spv.words[word]} replaced by label %{new}")
    return None


def mut_opcode(spv: Spv, rng: random.Random) -> Mutation | None:
    at, count, op = rng.choice(spv.insts)
    roll, same = rng.random(), sorted({o for _, c, o in spv.insts if c == count and o != op})
    if roll < 0.6 and same:
        new, how = rng.choice(same), "one of the same word count"
    elif roll < 0.9:
        new, how = rng.choice([o for o in OPS if o != op]), "a known one"
    else:
        new, how = rng.getrandbits(16), "a random one"
    return _replace(spv, at, (count << 16) | new, f"{op_name(op)} made {op_name(new)} ({how})")


def mut_move(spv: Spv, rng: random.Random) -> Mutation | None:
    k = rng.randrange(len(spv.insts))
    at, count, op = spv.insts[k]
    how, piece = rng.choice(("deleted", "duplicated", "moved")), spv.words[at:at + count]
    base = list(spv.words) if how == "duplicated" else spv.words[:at] + spv.words[at + count:]
    starts = [a - count * (a > at) for a, _, _ in spv.insts if how == "duplicated" or a != at] + [len(base)]
    to = rng.randrange(len(starts))
    words = base if how == "deleted" else base[:starts[to]] + piece + base[starts[to]:]
    return words, {"inst": k, "opcode": op_name(op), "word": at, "old": "", "new": "",
                   "what": f"{op_name(op)} {how}" + (f" to before instruction {to}" if how != "deleted" else "")}


CLASSES: dict[str, tuple[Callable[[Spv, random.Random], Mutation | None], str]] = {
    "a": (mut_word, "a word of the instruction stream replaced by a random value"),
    "b": (mut_id, "an id operand replaced by another id the module defines"),
    "c": (mut_swap, "two operands of an instruction swapped"),
    "d": (mut_branch, "a branch, switch or merge target replaced by another label of its function"),
    "e": (mut_opcode, "an opcode replaced by another (one seen with the same word count, any known one, a random one)"),
    "f": (lambda spv, rng: mut_word(spv, rng, bit=True), "a bit flipped after the header"),
    "g": (mut_move, "an instruction moved, duplicated or deleted"),
}


def make_case(sources: list[dict], seed: int, cid: int, cls: str, dest: str) -> dict:
    """Case ``cid``: a damaged copy of one source in ``dest``; returns its description."""
    rng = random.Random(f"{seed}/{cid}")
    for _ in range(50):
        src = rng.choice(sources)
        name = rng.choice(sorted(src["kernel"]))
        with open(os.path.join(src["folder"], name), "rb") as f:
            data = f.read()
        if done := CLASSES[cls][0](Spv(np.frombuffer(data[:len(data) // 4 * 4], "<u4").tolist()), rng):
            break
    else:
        raise RuntimeError(f"case {cid}: class {cls} found nothing to damage")
    shutil.copytree(src["folder"], dest)
    with open(os.path.join(dest, name), "wb") as f:
        f.write(np.array(done[0], "<u4").tobytes())
    return {"case": cid, "class": cls, "source": src["name"], "file": name, "kernel": src["kernel"][name], **done[1]}


# ---- the worker child: a case a line of stdin; JSON lines (its stages, then its result) on the saved stdout ----

def _value(rt: Any, arg: Any, arrays: list) -> Any:
    if arg.kind == "ndarray":
        dt, shape = NUMPY_DTYPES.get(arg.dtype, np.dtype(np.float32)), (N,) * arg.ndim
        arrays.append(rt.ndarray(shape, dt, arg.elem_shape))
        arrays[-1].from_numpy(np.ones(shape + tuple(arg.elem_shape), dt))
        return arrays[-1]
    if arg.kind in ("texture", "rw_texture"):
        return rt.allocate_image(f"{arg.ndim}d", (N,) * arg.ndim, arg.format or "r32f")
    return [1] * (arg.length or 1) if arg.kind == "tensor" else 1


def _launch(rt: Any, entry: Any) -> str:
    """Launch a kernel or graph with ones everywhere, wait; a digest of its arrays afterwards."""
    arrays: list = []
    entry(**{a.name: _value(rt, a, arrays) for a in entry.signature})
    rt.wait()
    return hashlib.sha256(b"".join(nd.to_numpy().tobytes() for nd in arrays)).hexdigest()


def _failed(e: Exception, outcome: str, stage: str) -> dict:  # ``outcome``: what a TaichiError counts as
    return {"outcome": outcome if isinstance(e, ta.TaichiError) else "untyped", "stage": stage,
            "error": f"{type(e).__name__}: {e}"[:400]}


def run_case(rt: Any, folder: str, only: list[str] | None, stage: Callable[[str], None]) -> dict:
    """Load ``folder`` with ``rt``, launch the kernels ``only`` names and the graphs that dispatch them (None: all)."""
    stage("load")
    try:
        mod = rt.load_module(folder)
    except Exception as e:
        return _failed(e, "refused", "load")
    digests, errors = {}, []  # type: dict[str, str], list[dict]
    try:
        names = set(only or mod.metadata.kernels)  # None: every kernel, and so every graph
        entries = [f"kernel {n}" for n in mod.kernel_names() if n in names]
        entries += [f"graph {g.name}" for g in mod.metadata.graphs.values() if names & {*g.dispatches}]
        for entry in entries:
            stage(entry)
            try:
                kind, name = entry.split(" ")
                digests[entry] = _launch(rt, mod.kernels[name] if kind == "kernel" else mod.graphs[name])
            except Exception as e:
                errors.append(_failed(e, "typed", entry))
    finally:
        mod.close()
    # a lost device (a GPU's fault, or its watchdog) shows at the next submit: make it this case's
    stage("device check")
    a, b = rt.ndarray((4,), np.float32), rt.ndarray((4,), np.float32)
    b.copy_from(a)
    rt.wait()
    errors.sort(key=lambda e: e["outcome"] == "typed")  # an untyped error first
    return {**errors[0], "errors": len(errors)} if errors else {"outcome": "ran", "digests": digests}


def worker() -> None:
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever the C library prints goes to stderr: the results keep stdout
    faulthandler.enable()

    def say(msg: dict) -> None:
        print(json.dumps(msg), file=out, flush=True)

    rt = ta.Runtime(ta.Arch.VULKAN)
    for line in sys.stdin:
        case = json.loads(line)
        say(run_case(rt, case["folder"], case["only"], lambda s: say({"stage": s})))


class Worker:
    """A worker child, started again after it dies or is killed; its stderr goes to ``log``."""

    def __init__(self, timeout: float, log: str):
        self.timeout, self.log, self.buf, self.proc = timeout, log, b"", None  # type: float, str, bytes, Any

    def _next(self, deadline: float) -> dict | None:  # the worker's next line; None once it dies or time is up
        while b"\n" not in self.buf:
            ready = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]
            if not (chunk := os.read(self.proc.stdout.fileno(), 1 << 16) if ready else b""):
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def run(self, folder: str, only: list[str] | None) -> dict:
        """Run one case; its result, or what became of the worker."""
        if self.proc is None or self.proc.poll() is not None:  # a case's time includes a new worker's start
            with open(self.log, "ab") as err:
                self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"],
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        start, stage, deadline = os.path.getsize(self.log), "sent", time.monotonic() + self.timeout
        try:
            self.proc.stdin.write(json.dumps({"folder": folder, "only": only}).encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        while (msg := self._next(deadline)) is not None:
            if "outcome" in msg:
                return msg
            stage = msg["stage"]
        if hung := self.proc.poll() is None and time.monotonic() >= deadline:
            self.proc.kill()
        code, self.proc, self.buf = self.proc.wait(), None, b""
        with open(self.log, "rb") as f:
            f.seek(start)
            said = f.read(1500).decode(errors="replace")  # the driver's words come before Python's traceback
        how = f"signal {-code}" if code < 0 else f"exit {code}"
        return {"outcome": "hung" if hung else "crashed", "signal": "" if hung else how, "stage": stage, "stderr": said}

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()  # the end of its input: the worker leaves
            self.proc.wait()


def load_sources(modules: list[str], tmp: str, timeout: float) -> list[dict]:
    """The sources (.tcm files extracted), their tasks' kernels and what the undamaged module's launches leave."""
    if not modules:
        modules = [os.path.join(tmp, "tests")]
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "kernels.py"), "--arch", "vulkan", "--out",
                        modules[0]], check=True, capture_output=True)
        modules += [p for p in (os.path.join(ROOT, "taichi_aot", "cli", "demo.tcm"),
                                os.path.join(ROOT, "examples", "physics.tcm")) if os.path.exists(p)]
    out, base = [], Worker(timeout, os.path.join(tmp, "baseline.log"))  # type: list[dict], Worker
    for path in modules:
        name = os.path.splitext(os.path.basename(path.rstrip("/")))[0]
        if not os.path.isdir(path):
            with zipfile.ZipFile(path) as z:
                inner = zipfile.ZipFile(z.open("vulkan.tcm")) if "vulkan.tcm" in z.namelist() else z
                inner.extractall(path := os.path.join(tmp, "src-" + name))
        with open(os.path.join(path, "metadata.json")) as f:
            kernels = json.load(f)["kernels"]
        tasks = [(t["name"] + ".spv", k["name"]) for k in kernels for t in k.get("tasks_attribs", [])]
        spv = {f: [k for g, k in tasks if g == f] for f, _ in tasks}  # a graph dispatches copies of its kernels
        res = base.run(os.path.abspath(path), None)
        print(f"source {name}: {len(spv)} tasks, undamaged: {res['outcome']} {res.get('error', '')}")
        out.append({"name": name, "folder": path, "kernel": spv, "digests": res.get("digests", {})})
    base.close()
    return out


def run_cases(args: argparse.Namespace, sources: list[dict], tmp: str) -> list[dict]:
    """Run ``args.cases`` cases on ``args.jobs`` workers (each every jobs-th case); their descriptions."""

    def serve(i: int) -> list[dict]:
        w, results = Worker(args.timeout, os.path.join(tmp, f"worker{i}.log")), []
        for cid in range(i, args.cases, args.jobs):
            folder = os.path.join(tmp, f"case-{cid}")
            desc = make_case(sources, args.seed, cid, args.classes[cid % len(args.classes)], folder)
            desc.update(w.run(folder, desc["kernel"]))
            base = next(s for s in sources if s["name"] == desc["source"])["digests"]
            if desc["outcome"] == "ran" and any(base.get(e) != d for e, d in desc.pop("digests").items()):
                desc["outcome"] = "differs"
            if desc["outcome"] in KEPT and args.keep:
                keep = os.path.join(args.keep, f"case-{cid:05d}")
                shutil.copytree(folder, os.path.join(keep, "module"), dirs_exist_ok=True)
                with open(os.path.join(keep, "case.json"), "w") as f:
                    json.dump(desc, f, indent=1)
            shutil.rmtree(folder)
            results.append(desc)
            if len(results) % 200 == 0:
                print(f"  worker {i}: {len(results)} cases, {dict(Counter(r['outcome'] for r in results))}", flush=True)
        w.close()
        return results

    with ThreadPoolExecutor(args.jobs) as pool:
        return sorted((r for part in pool.map(serve, range(args.jobs)) for r in part), key=lambda r: r["case"])


def table(results: list[dict], classes: str) -> tuple[str, dict]:
    """The outcomes by mutation class, as text and as a dict."""
    counts = {c: Counter(r["outcome"] for r in results if r["class"] == c) for c in classes}
    counts["all"] = Counter(r["outcome"] for r in results)
    lines = [f"{'class':<6}" + "".join(f"{o:>9}" for o in OUTCOMES) + f"{'total':>9}"]
    lines += [f"{c:<6}" + "".join(f"{n[o]:>9}" for o in OUTCOMES) + f"{sum(n.values()):>9}" for c, n in counts.items()]
    return "\n".join(lines), {c: dict(n) for c, n in counts.items()}


def describe(r: dict) -> str:
    return (f"case {r['case']} [{r['class']}] {r['outcome']} {r.get('signal', '')} {r['source']}/{r['file']} inst "
            f"{r['inst']} {r['opcode']} word {r['word']}: {r['what']}; at {r.get('stage')}")


def replay(path: str, timeout: float) -> None:
    """Run a kept case (or any module folder: all its kernels and graphs) once more, in a worker child."""
    case, folder = {}, os.path.join(path, "module") if os.path.isdir(os.path.join(path, "module")) else path
    if os.path.exists(os.path.join(path, "case.json")):
        with open(os.path.join(path, "case.json")) as f:
            case = json.load(f)
        print("kept:  ", describe(case), case.get("error", ""))
    with tempfile.NamedTemporaryFile() as log:
        w = Worker(timeout, log.name)
        print("replay:", json.dumps(w.run(os.path.abspath(folder), case.get("kernel")), indent=1))
        w.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=2000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--module", nargs="*", default=[], help="Vulkan module folders or .tcm files")
    p.add_argument("--classes", default="".join(CLASSES), type=lambda s: s.replace(",", ""),
                   help="; ".join(f"{c}: {w}" for c, (_, w) in CLASSES.items()))
    p.add_argument("--jobs", type=int, default=2, help="worker children side by side")
    p.add_argument("--timeout", type=float, default=20.0, help="seconds a case may take before it counts as hung")
    p.add_argument("--keep", help="folder for the crashed, hung and untyped cases")
    p.add_argument("--out", help="JSON file: the parameters, the table and every case")
    p.add_argument("--replay", help="a kept case (or a module folder) to run once more")
    args = p.parse_args()
    if args.replay:
        return replay(args.replay, args.timeout)
    if not args.classes or set(args.classes) - set(CLASSES):
        p.error(f"--classes: some of {','.join(CLASSES)}")
    with tempfile.TemporaryDirectory(prefix="fuzz_spirv-") as tmp:
        print(f"seed {args.seed}, {args.cases} cases, classes {args.classes}, {args.jobs} workers, {args.timeout} s")
        sources = load_sources(args.module, tmp, args.timeout)
        start, results = time.perf_counter(), run_cases(args, sources, tmp)
    elapsed = time.perf_counter() - start
    text, summary = table(results, args.classes)
    print(f"\n{len(results)} cases in {elapsed:.0f} s\n{text}")
    for r in (r for r in results if r["outcome"] in KEPT):
        print(describe(r), r.get("error", ""))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({**{k: v for k, v in vars(args).items() if v is not None}, "seconds": round(elapsed, 1),
                       "summary": summary, "results": results}, f, indent=1)


if __name__ == "__main__":
    worker() if sys.argv[1:] == ["--worker"] else main()
