"""``taichi-aot build``: compile a Python file of Taichi kernels into a module, for one arch or several.

Taichi is imported only in the child processes this command starts, one per arch (Taichi 1.7.4 builds
one AOT module per ``ti.init``), each running ``build_part.py`` (by path: the child imports Taichi and not
taichi_aot, so one process never holds two copies of Taichi's runtime).

Convention for FILE.py (imported after ``ti.init(arch=...)``, so it must not call ``ti.init`` itself):

* kernels decorated with ``@ti.aot.export`` or ``@ti.aot.export_as("name", template_types={...})``
  go into the module;
* a function ``export_graphs()``, if present, returns ``{name: compiled_graph}`` (from
  ``ti.graph.GraphBuilder().compile()``); it is called once the file is imported;
* a list ``AOT_CAPS``, if present, names device capabilities for gfx backends
  (e.g. ``["spirv_has_float64"]``), added to those given with ``--caps``;
* an int ``AD_STACK_SIZE``, if present, is the entries of each autodiff stack in reverse-mode kernels (Taichi's
  ``ti.init(ad_stack_size=...)``: by default Taichi sizes them itself, 32 where it cannot tell). A reverse kernel
  whose loops carry more values than that overflows its stack: taichi_aot's x64 launch raises OutOfMemoryError
  saying so, where Taichi's own would write past it.

CPU kernels run on as many threads as Taichi compiled into them: ``--cpu-threads N``, by default (and at most)
the building machine's core count. A pool of CPU workers wants few threads a worker (``--cpu-threads 1``: one
worker per core); one process alone wants many.

What is written (:mod:`taichi_aot.metadata.multi` describes the formats):

* one arch: a module folder, or a ``.tcm`` archive when the output ends in ``.tcm``, as Taichi writes them,
  plus ``taichi_aot.json`` with the kernels' argument names (Taichi's loader never reads it);
* several archs: one multi-arch module file at the path given, whatever its suffix, holding a ``.tcm``
  per arch; ``Runtime.load_module`` takes the part for its arch. A part may also be a module built
  elsewhere (``--with cuda=physics-cuda.tcm``: Taichi compiles for CUDA only where a GPU is); every part
  must declare the same kernels and graphs with the same arguments.

Every LLVM part's ``taichi_aot.json`` (x64, arm64, CUDA: built, or given with ``--with``) also records how each
exported kernel and each graph uses its ndarray arguments (read, write, both, none), which Taichi's LLVM metadata
does not: learned from Taichi's own analysis for gfx backends, taken from the module's gfx part (Vulkan, ...) if it
has one, else from a Vulkan build of the same file into a throwaway folder (the probe, run beside the parts and
never written out). Where that cannot be had (no Vulkan here, a kernel Vulkan cannot compile, ``--no-access``),
the access stays unknown (callers assume every ndarray read and written) and the summary says why.

Each LLVM part built here is sealed last: its ``taichi_aot.json`` records the digest of its files
(``files_sha256``), so that its first load needs no child process while its files are as written
(``_firstload.sealed``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import zipfile
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .. import enums
from ..errors import CorruptedDataError, MissingFileError
from ..metadata import ModuleInfo, extract_archive, read_module
from ..metadata import cpu_threads as _cpu_threads
from ..metadata.multi import FORMAT, SIDECAR
from ..metadata.retarget import CPU_CAP
from ..metadata.source import store_member, zip_folder

#: Taichi's names (``ti.vulkan``, ...) of the gfx backends (enums.GFX_ARCHS), in order of preference.
GFX_ARCHS = tuple(a.name.lower() for a in enums.ARCH_PREFERENCE if a in enums.GFX_ARCHS)
#: Every backend Taichi can compile a module for, by Taichi's name, as the error message lists them.
ARCHS = ("x64", "arm64", "cuda", *GFX_ARCHS)
#: The CPU ones, whose kernels run on a number of threads fixed when they are compiled (--cpu-threads).
CPU_PARTS = ("x64", "arm64")
#: The LLVM ones, whose metadata records no ndarray access (build learns it from a gfx build of the same file).
LLVM_PARTS = tuple(a for a in ARCHS if a not in GFX_ARCHS)
#: Capabilities the access probe (a Vulkan build) takes besides the build's, so that more kernels compile.
PROBE_CAPS = ("spirv_has_int64", "spirv_has_float64", "spirv_has_int8", "spirv_has_int16", "spirv_has_float16")
#: Archive members get this time, so that building the same source twice writes the same bytes.
HERE = os.path.dirname(os.path.abspath(__file__))


class BuildError(Exception):
    """The file could not be built into a module (message says why)."""


# ---------------------------------------------------------------------------
# The command: one child per arch, then the output


def compiler_env(arch: str) -> dict[str, str] | None:
    """The environment of a child running Taichi's compiler for ``arch``: for CUDA, one GPU visible (the first the
    process sees): Taichi 1.7.4 compiles on one, and on a host of several its CUDA runtime aborts the process
    (CUDA_ERROR_INVALID_CONTEXT freeing memory) as it builds graphs; None: this process's."""
    if arch != "cuda":
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    first = "0" if visible is None else visible.split(",")[0].strip()
    return {**os.environ, "CUDA_VISIBLE_DEVICES": first}


def taichi_cuda_abort(proc: subprocess.CompletedProcess) -> bool:
    """Whether a child running Taichi 1.7.4's CUDA compiler died of its known abort: freeing memory in its CUDA
    runtime fails (CUDA_ERROR_INVALID_CONTEXT in cuMemFreeAsync), at times, before the module is written."""
    return proc.returncode == -signal.SIGABRT and "CUDA_ERROR_INVALID_CONTEXT" in (proc.stderr or "")


def _run_part(source: str, arch: str, folder: str, caps: list[str], cpu_threads: int | None = None,
              portable: bool = False) -> dict:
    """Build one arch in a child process (build_part.py); write the argument names beside its files, and for a gfx
    part built ``portable`` that it was (its load then says nothing of capabilities its device has beyond it)."""
    from .build_part import SUMMARY

    cmd = [sys.executable, os.path.join(HERE, "build_part.py"), arch, "gfx" if arch in GFX_ARCHS else "llvm",
           os.path.abspath(source), folder, str(cpu_threads) if arch in CPU_PARTS and cpu_threads else "-", *caps]
    env = compiler_env(arch)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if taichi_cuda_abort(proc):  # at times, on a multi-GPU host most: it writes nothing then; once more
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    summary = None
    for line in proc.stdout.splitlines():
        if line.startswith(SUMMARY):
            summary = json.loads(line[len(SUMMARY):])
    if proc.returncode == 0 and summary is not None and os.path.isfile(os.path.join(folder, "metadata.json")):
        sidecar = {"taichi_aot": FORMAT, "arch": arch,
                   "kernels": {name: {"args": args} for name, args in summary["args"].items()}}
        if portable and arch in GFX_ARCHS:
            sidecar["portable"] = True
        with open(os.path.join(folder, SIDECAR), "w", encoding="utf-8") as f:
            json.dump(sidecar, f, indent=1, sort_keys=True)
        return summary
    raise _part_failed(source, arch, proc, summary is not None)


def _part_failed(source: str, arch: str, proc: subprocess.CompletedProcess, summarized: bool) -> BuildError:
    """Why the child building ``arch`` wrote no module: the error it reported, or how it ended and what it said."""
    from .build_part import ERROR

    said = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    errors = [ln for ln in said if ln.startswith(ERROR)]
    if errors:
        return BuildError(errors[-1][len(ERROR):])
    if not summarized and proc.returncode >= 0:
        return BuildError(f"building {source} for {arch} ended (exit status {proc.returncode}) before a module was "
                          "written: does the file call sys.exit() or os._exit()?"
                          + (f" It printed: {' | '.join(said[-3:])[-600:]}" if said else ""))
    how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
    return BuildError(f"building {source} for {arch} failed ({how}): " + " | ".join(said[-5:])[-1500:])


def _write_multi(parts: dict[str, str], out: str, source: str, taichi: str) -> None:
    """The multi-arch module: a manifest, then each part's ``.tcm`` (stored: the parts are read in place)."""
    with open(source, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    manifest = {"taichi_aot": FORMAT, "parts": {arch: f"{arch}.tcm" for arch in parts}, "taichi": taichi,
                "source": os.path.basename(source), "source_sha256": digest}
    with tempfile.TemporaryDirectory(prefix="taichi_aot_parts_") as tmp, \
            zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        store_member(z, SIDECAR, json.dumps(manifest, indent=1, sort_keys=True))
        for arch, folder in parts.items():
            tcm = os.path.join(tmp, f"{arch}.tcm")
            zip_folder(folder, tcm)
            with open(tcm, "rb") as f:
                store_member(z, f"{arch}.tcm", f.read())


def _signature(info: ModuleInfo) -> dict:
    """What must agree between the parts of one module: each exported kernel's and graph's arguments (the
    reverse-mode kernels the LLVM parts add aside: gfx parts have none)."""
    def args(entries: list) -> list:
        return [(a.name, a.kind, a.dtype, a.ndim, a.elem_shape) for a in entries]

    return {"kernels": {k.name: args(k.args) for k in info.exported_kernels() if not k.reverse},
            "graphs": {g.name: args(g.args) for g in info.graphs.values()}}


def _add_prebuilt(arch: str, module: str, folder: str) -> dict:
    """Unpack a module built elsewhere (a folder or ``.tcm``, e.g. CUDA's, built where a GPU is) as the part
    for ``arch``; returns its summary."""
    try:
        info = read_module(module)
    except (MissingFileError, CorruptedDataError) as e:
        raise BuildError(f"--with {arch}={module}: {e}") from None
    if info.parts:
        raise BuildError(f"--with {arch}={module}: a multi-arch module; give one part (a folder or a .tcm)")
    built_for = info.arch.name.lower() if info.arch is not None else "vulkan"
    if built_for != arch and not (info.arch is None and arch in GFX_ARCHS):
        raise BuildError(f"--with {arch}={module}: that module was built for {built_for}")
    if os.path.isdir(module):
        shutil.copytree(module, folder)
    else:
        extract_archive(module, folder)
    version = ".".join(map(str, info.version)) if info.version else "unknown"
    return {"kernels": [k.name for k in info.exported_kernels()], "graphs": list(info.graphs), "arch": arch,
            "taichi": version}


def _write_output(tmp: str, parts: list[str], out: str, source: str, taichi: str) -> str:
    """Move the parts built in ``tmp`` to ``out``: a multi-arch file, a ``.tcm`` or a folder (returned)."""
    staged = os.path.join(tmp, "out")
    if len(parts) > 1:
        _write_multi({a: os.path.join(tmp, a) for a in parts}, staged, source, taichi)
        kind = "multi-arch"
    elif out.endswith(".tcm"):
        zip_folder(os.path.join(tmp, parts[0]), staged)
        kind = "tcm"
    else:
        os.makedirs(out, exist_ok=True)
        folder = os.path.join(tmp, parts[0])
        for name in os.listdir(folder):
            os.replace(os.path.join(folder, name), os.path.join(out, name))
        return "folder"
    os.replace(staged, out)
    return kind


def seal(folder: str) -> None:
    """Record in the part's ``taichi_aot.json`` the digest of its files as built (``_firstload.seal``)."""
    from .._firstload import seal as record

    record(folder)


def _access_words(info: ModuleInfo) -> dict[str, dict[str, dict[str, str]]]:
    """``{"kernels": {kernel: {argument: word}}, "graphs": {...}}``: the access gfx metadata records of each
    exported kernel's and graph's ndarray arguments (internal kernels left out: their graphs carry it)."""
    def words(args: list) -> dict[str, str]:
        return {a.name: a.access_word() for a in args if a.kind == "ndarray" and a.name and a.access is not None}

    return {"kernels": {k.name: words(k.args) for k in info.exported_kernels()},
            "graphs": {g.name: words(g.args) for g in info.graphs.values()}}


def _record_access(folder: str, words: dict[str, dict[str, dict[str, str]]]) -> None:
    """Write ``words`` (from :func:`_access_words`) into the part's ``taichi_aot.json``, matching kernels, graphs
    and arguments by name."""
    path = os.path.join(folder, SIDECAR)
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    for name, entry in doc["kernels"].items():
        access = {n: w for n, w in words["kernels"].get(name, {}).items() if n in entry["args"]}
        if access:
            entry["access"] = access
    graphs = {name: {"access": access} for name, access in words["graphs"].items() if access}
    if graphs:
        doc["graphs"] = {**doc.get("graphs", {}), **graphs}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=True)


def _probe(source: str, folder: str, caps: list[str]) -> str:
    """Build ``source`` for Vulkan into ``folder`` (returned) only to read what its metadata records."""
    _run_part(source, "vulkan", folder, [*caps, *PROBE_CAPS])
    return folder


def _learn_access(tmp: str, every: list[str], signatures: dict[str, dict],
                  probe: Future[str] | None) -> tuple[str, str | None]:
    """Record the ndarray access in each LLVM part of ``every`` (built in ``tmp``) from the gfx part, else from the
    probe's Vulkan build (``probe``, whose result is its folder); returns where it came from and, when unknown,
    why."""
    llvm = [a for a in every if a in LLVM_PARTS]
    unnamed = [a for a in llvm if not os.path.isfile(os.path.join(tmp, a, SIDECAR))]
    if unnamed:
        return "unknown", f"the {unnamed[0]} part names no arguments to match it by"
    gfx = next((a for a in every if a in GFX_ARCHS), None)
    if gfx is not None:
        learned, what, info = f"{gfx} part", f"{gfx} part", read_module(os.path.join(tmp, gfx))
    else:
        assert probe is not None
        learned, what = "probe", "Vulkan build"
        try:
            info = read_module(probe.result())
        except (BuildError, MissingFileError, CorruptedDataError) as e:
            return "unknown", f"the Vulkan build that learns it failed: {e}"
    differ = [a for a in llvm if signatures[a] != _signature(info)]
    if differ:
        return "unknown", f"the {differ[0]} part's kernels and graphs differ from the {what}'s"
    words = _access_words(info)
    for a in llvm:
        _record_access(os.path.join(tmp, a), words)
    return learned, None


def build(source: str, archs: str | list[str], out: str, caps: list[str] | None = None,
          prebuilt: dict[str, str] | None = None, cpu_threads: int | None = None, access: bool = True,
          portable: bool = False, max_cpu_threads: int | None = None) -> dict:
    """Compile ``source`` for each of ``archs`` into ``out`` (module docstring: what is written), with the
    modules of ``prebuilt`` (``{arch: folder or .tcm}``, built elsewhere) as parts too, CPU kernels compiled for
    ``cpu_threads`` threads (default: this machine's cores, which also bound it; their loads spread them over the
    runtime's threads all the same) and run on at most ``max_cpu_threads`` wherever they run (a cap the module
    records; None: none), the LLVM parts' ndarray access
    learned from a gfx part or, with none, from a Vulkan build of ``source`` (``access=False``: left unknown).
    Returns a summary: ``kernels``, ``graphs``, ``archs``, ``out``, ``kind`` ("folder", "tcm" or "multi-arch"),
    ``cpu_threads`` (what the CPU part's kernels run on, or None), ``access`` (where the LLVM parts' access came
    from: "vulkan part" (or another gfx arch's), "probe" or "unknown"; None without an LLVM part: gfx metadata
    records its own), ``access_reason`` (why it is unknown, else None), ``caps`` (``{arch: (capabilities, where
    they came from)}`` of the gfx parts: those given, else, for Vulkan, this machine's device's unless ``portable``:
    :func:`device_caps`), ``ptx`` (with a CUDA part: the PTX
    manifest, :mod:`taichi_aot.ptx`, or why none was made) and ``no_grad`` ({"kernel (arch)": Taichi's reason} of
    the differentiable kernels built without their reverse-mode kernel, which Taichi could not compile)."""
    archs, prebuilt = _checked(source, archs, prebuilt, cpu_threads)
    if max_cpu_threads is not None and (isinstance(max_cpu_threads, bool) or not isinstance(max_cpu_threads, int)
                                        or max_cpu_threads < 1):
        raise BuildError(f"--max-cpu-threads takes a number >= 1, got {max_cpu_threads!r}")
    out = os.path.abspath(out)
    every = [*archs, *prebuilt]
    _check_output(out, [source, *prebuilt.values()], len(every) > 1)
    parent = os.path.dirname(out)
    made = _missing_folders(parent)  # made for the output: removed again if the build fails
    try:
        os.makedirs(parent, exist_ok=True)
        return _build_into(source, archs, prebuilt, every, out, parent, caps, cpu_threads, access, portable,
                           max_cpu_threads)
    except OSError as e:  # the output's folder cannot be made or written: said of the path given, not of a temporary
        _remove_made(made)
        raise BuildError(f"-o {out}: cannot write there ({e.strerror or e})") from None
    except BaseException:
        _remove_made(made)
        raise


def _remove_made(made: list[str]) -> None:
    """Remove the folders a failed build made for its output (deepest first), unless something else wrote there."""
    for folder in made:
        try:
            os.rmdir(folder)
        except OSError:  # not empty (something else wrote there meanwhile): left as it is
            break


def _check_output(out: str, inputs: list[str], one_file: bool) -> None:
    """Refuse an output path the build must not write: one of its inputs (the source, a module given with --with),
    a folder for a module of several archs, or something that exists and is not a module (a file of the user's, a
    folder with other files). An existing module there is replaced: naming it as the output asks for that."""
    for given in inputs:
        if os.path.abspath(given) == out or (os.path.exists(out) and os.path.exists(given) and
                                             os.path.samefile(out, given)):
            instead = os.path.splitext(out)[0] + ".tcm"
            raise BuildError(f"-o {out} is one of the build's inputs ({given}): nothing was written; name another "
                             "output" + (f", e.g. {instead}" if instead != out and not os.path.exists(instead) else ""))
    if one_file and os.path.isdir(out):
        raise BuildError(f"-o {out} is a folder; a module for several archs is one file")
    if not os.path.lexists(out) or (os.path.isdir(out) and not os.listdir(out)):
        return
    try:
        read_module(out)
    except (MissingFileError, CorruptedDataError, OSError):
        what = "a folder of other files" if os.path.isdir(out) else "a file that is not a taichi_aot module"
        raise BuildError(f"-o {out} exists and is {what}: build replaces only a module; remove it or name another "
                         "output") from None


def _checked(source: str, archs: str | list[str], prebuilt: dict[str, str] | None, cpu_threads: int | None
             ) -> tuple[list[str], dict[str, str]]:
    """``build``'s request checked before any work: the archs to build (each once) and the parts given."""
    if cpu_threads is not None and (not isinstance(cpu_threads, int) or cpu_threads < 1):
        raise BuildError(f"--cpu-threads takes a number >= 1, got {cpu_threads!r}")
    archs, prebuilt = _parts(archs, prebuilt)
    if not os.path.isfile(source):
        raise BuildError(f"no such file: {source}")
    if archs and importlib.util.find_spec("taichi") is None:
        raise BuildError("building needs Taichi 1.7.4 (pip install 'taichi_aot[build]'); running modules does not")
    return archs, prebuilt


def _parts(archs: str | list[str], prebuilt: dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
    """The archs to build (each once) and the parts given, checked: known archs, at least one, none both."""
    archs = [archs] if isinstance(archs, str) else list(dict.fromkeys(archs))
    prebuilt = dict(prebuilt or {})
    unknown = [a for a in [*archs, *prebuilt] if a not in ARCHS]
    if not (archs or prebuilt):
        raise BuildError(f"no arch given: name the backends to compile for with --arch, e.g. --arch x64 vulkan "
                         f"(any of {', '.join(ARCHS)}; several make one multi-arch module)")
    if unknown:
        hint = enums.arch_name_hint(unknown[0], ARCHS, archs_command=False) if len(unknown) == 1 else \
            f" (expected one of {', '.join(ARCHS)})"
        raise BuildError(f"unknown arch {', '.join(map(repr, unknown))}{hint}")
    twice = sorted(set(archs) & set(prebuilt))
    if twice:
        raise BuildError(f"{', '.join(twice)}: both built (--arch) and given (--with)")
    return archs, prebuilt


def _missing_folders(folder: str) -> list[str]:
    """``folder`` and those of its parents that do not exist, deepest first."""
    missing = []
    while folder and not os.path.isdir(folder):
        missing.append(folder)
        up = os.path.dirname(folder)
        if up == folder:
            break
        folder = up
    return missing


def device_caps(arch: str) -> tuple[list[str], str]:
    """The capabilities this machine's device of ``arch`` has that Taichi's code generation takes (its
    ``spirv_has_*`` ones that are on), and where they came from; ``([], why not)`` where no device of it answers.
    A Vulkan module built with them uses what the device does natively (float atomics: Taichi otherwise writes each as
    a compare-and-swap loop)."""
    from .. import Runtime
    from ..errors import TaichiError

    try:
        with Runtime(arch) as rt:
            found = sorted(str(getattr(c, "name", c)).lower() for c, v in rt.capabilities.items() if v)
            name = rt.device.device_name() or arch
    except TaichiError as e:
        return [], f"no {arch} device answered here ({str(e)[:200]}): Taichi's defaults"
    return [c for c in found if c.startswith("spirv_has_")], f"this machine's {name}"


def _part_caps(archs: list[str], caps: list[str] | None, portable: bool) -> dict[str, tuple[list[str], str]]:
    """Each gfx part's capabilities and where they came from: ``caps`` where given, else this machine's Vulkan
    device's for a Vulkan part (not where ``portable``), else Taichi's defaults."""
    out = {}
    for a in archs:
        if a not in GFX_ARCHS:
            continue
        if caps:
            out[a] = (list(caps), "--caps")
        elif a == "vulkan" and not portable:
            out[a] = device_caps(a)
        else:
            out[a] = ([], "Taichi's defaults (--portable)" if portable else "Taichi's defaults")
    return out


def _build_into(source: str, archs: list[str], prebuilt: dict[str, str], every: list[str], out: str, parent: str,
                caps: list[str] | None, cpu_threads: int | None, access: bool, portable: bool = False,
                max_cpu_threads: int | None = None) -> dict:
    """``build`` once its arguments are checked and ``out``'s folder exists."""
    has_llvm = any(a in LLVM_PARTS for a in every)
    with tempfile.TemporaryDirectory(prefix=".taichi_aot_build_", dir=parent) as tmp, \
            ThreadPoolExecutor(1) as pool:  # left first, waiting for the probe, before tmp is removed
        probe = None
        if access and has_llvm and not any(a in GFX_ARCHS for a in every):  # built beside the parts
            probe = pool.submit(_probe, source, os.path.join(tmp, "access-probe"), list(caps or []))
        gfx_caps = _part_caps(archs, caps, portable)
        summaries = {a: _run_part(source, a, os.path.join(tmp, a),
                                  gfx_caps[a][0] if a in gfx_caps else list(caps or []), cpu_threads, portable)
                     for a in archs}
        summaries.update({a: _add_prebuilt(a, m, os.path.join(tmp, a)) for a, m in prebuilt.items()})
        _name_prebuilt(tmp, every, prebuilt)
        signatures = _one_signature(tmp, every)
        learned, reason = _access_of(tmp, every, signatures, probe, access) if has_llvm else (None, None)
        finished = _finish_parts(tmp, archs, every, max_cpu_threads)
        kind = _write_output(tmp, every, out, source, summaries[every[0]]["taichi"])
    first = summaries[every[0]]
    no_grad = {f"{name} ({a})": why for a, s in summaries.items() for name, why in (s.get("no_grad") or {}).items()}
    return {"kernels": first["kernels"], "graphs": first["graphs"], "archs": every, "out": out, "kind": kind,
            "access": learned, "access_reason": reason, "no_grad": no_grad, "caps": gfx_caps, **finished}


def _record(folder: str, key: str, value: Any) -> None:
    """Write ``key: value`` into the part's sidecar (``taichi_aot.json``; made where Taichi wrote none)."""
    path = os.path.join(folder, SIDECAR)
    doc = {"taichi_aot": FORMAT}
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    doc[key] = value
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=True)


def _finish_parts(tmp: str, archs: list[str], every: list[str], cap: int | None = None) -> dict:
    """The parts in ``tmp`` finished: the CPU part's threads read, PTX added to the CUDA part, the LLVM parts made
    here sealed last (their first load needs no child: ``_firstload.sealed``); ``cpu_threads`` and ``ptx`` for the
    summary."""
    cpu = next((a for a in every if a in CPU_PARTS), None)
    threads = _cpu_threads(os.path.join(tmp, cpu)) if cpu else None
    if cpu in archs and cap is not None:  # asked for: a cap its loads keep (they spread the loops over the runtime's
        _record(os.path.join(tmp, cpu), CPU_CAP, cap)  # threads up to it; without one, over all of them)
    threads = min(threads, cap) if threads is not None and cap is not None and cpu in archs else threads
    ptx = _add_ptx(os.path.join(tmp, "cuda")) if "cuda" in every else None
    for a in archs:
        if a in LLVM_PARTS:
            seal(os.path.join(tmp, a))
    return {"cpu_threads": threads, "max_cpu_threads": cap if cpu in archs else None, "ptx": ptx}


def _access_of(tmp: str, every: list[str], signatures: dict, probe: Future[str] | None, access: bool
               ) -> tuple[str, str | None]:
    """Where the LLVM parts' ndarray access came from (:func:`_learn_access`), or "unknown" where not asked for."""
    return _learn_access(tmp, every, signatures, probe) if access else ("unknown", "not asked for (--no-access)")


def _name_prebuilt(tmp: str, every: list[str], prebuilt: dict[str, str]) -> None:
    """A plain Taichi module given (no argument names recorded): the names the other parts record, where they
    agree (checked next)."""
    named = next((a for a in every if os.path.isfile(os.path.join(tmp, a, SIDECAR))), None)
    for a in prebuilt:
        if named is not None and not os.path.isfile(os.path.join(tmp, a, SIDECAR)):
            with open(os.path.join(tmp, named, SIDECAR), encoding="utf-8") as f:
                sidecar = {**json.load(f), "arch": a}
            with open(os.path.join(tmp, a, SIDECAR), "w", encoding="utf-8") as f:
                json.dump(sidecar, f, indent=1, sort_keys=True)


def _one_signature(tmp: str, every: list[str]) -> dict[str, dict]:
    """Each part's signature (:func:`_signature`), checked to be the same for every part."""
    try:
        signatures = {a: _signature(read_module(os.path.join(tmp, a))) for a in every}
    except CorruptedDataError as e:
        raise BuildError(f"the parts do not describe one module: {e}") from None
    for a in every[1:]:
        if signatures[a] != signatures[every[0]]:
            raise BuildError(f"the {a} part's kernels and graphs differ from the {every[0]} part's: "
                             f"{signatures[a]} against {signatures[every[0]]}")
    return signatures


def _add_ptx(folder: str) -> dict | str:
    """PTX for the CUDA part's kernels (taichi_aot's own launcher): the manifest, or why there is none."""
    from ..ptx import add_to_folder
    from ..ptx.compile import PtxError

    try:
        return add_to_folder(folder)
    except PtxError as e:
        return str(e)
