"""PTX for the own CUDA launcher, made once, off the GPU, and kept in the module beside Taichi's IR.

``python -m taichi_aot ptx MODULE`` (or ``build --arch cuda``, which calls :func:`add_to_folder`) reads each
kernel's ``NAME.ll`` and metadata entry, keeps on libtaichi's path what the launcher cannot run (:mod:`.gate`,
:mod:`.plan`), and writes ``NAME.ptx`` for the rest (:mod:`.compile`, with llvmlite) and the manifest
``ptx.json``::

    {"taichi_aot_ptx": 1, "target": "sm_60", "llvm": "22.1.0",
     "runtime": {"size": 35256, "temporaries": 32872, "rand_states": 32880, "rand_state_size": 20},
     "kernels": {"add": {"ptx": "add.ptx", "ir_sha256": "...", "rand": false}},
     "refused": {"printer": "calls vprintf (print), which only Taichi's runtime provides"}}

Loading reads the manifest with no llvmlite (:func:`read_manifest`); a kernel's launch plan is read again from
the metadata and checked, and PTX whose IR changed since (its digest) is not used.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import zipfile
from typing import TYPE_CHECKING, Any

from ..enums import Arch
from ..errors import CorruptedDataError, IncompatibleModuleError
from . import gate, plan

if TYPE_CHECKING:  # pragma: no cover
    from ..metadata.model import LlvmCode

#: The manifest's name inside a CUDA module, and its format version.
MANIFEST = "ptx.json"
FORMAT = 1


def kernel_entries(folder: str) -> dict[str, Any]:
    """The kernels' entries of a module's LLVM metadata in ``folder`` (its ``metadata.json``), by name: what the own
    launches lay out and compile (their arguments, results, tasks)."""
    from ..metadata.llvm import parse_text

    with open(os.path.join(folder, "metadata.json"), encoding="utf-8") as f:
        doc = parse_text(f.read())
    kernels = (doc.get("cache") or {}).get("kernels") if isinstance(doc, dict) else None
    if not isinstance(kernels, dict):
        raise CorruptedDataError("metadata.json: no kernels (not an LLVM module)")
    return kernels


def code_in(folder: str) -> LlvmCode:
    """The kernels' entries (:func:`kernel_entries`) and IR of the LLVM module in ``folder``, read here: for a module
    no :mod:`taichi_aot.metadata` reading gave (the ``ptx`` command, ``build``)."""
    from ..metadata.model import LlvmCode

    with open(os.path.join(folder, "metadata.json"), "rb") as f:
        code = LlvmCode(metadata=f.read())
    code.kernels = kernel_entries(folder)
    for name in code.kernels:
        path = os.path.join(folder, f"{name}.ll")
        if os.path.isfile(path):
            with open(path, "rb") as f:
                code.ir[name] = f.read()
    return code


def add_to_folder(folder: str, code: LlvmCode | None = None) -> dict[str, Any]:
    """Write PTX and the manifest into a CUDA module folder; returns the manifest (``refused`` says why a kernel
    has none). ``code``: the module's kernels and IR as :mod:`taichi_aot.metadata` read them (None: read from
    ``folder``, :func:`code_in`). Raises PtxError without llvmlite, CorruptedDataError for a module that is not
    CUDA's."""
    from . import compile as ptx_compile

    code = code if code is not None else code_in(folder)
    llvm = ptx_compile.llvm_version()
    manifest: dict[str, Any] = {"taichi_aot_ptx": FORMAT, "target": ptx_compile.TARGET, "llvm": llvm,
                                "compile": ptx_compile.VERSION, "runtime": None, "kernels": {}, "refused": {}}
    for name, entry in sorted(code.kernels.items()):
        reason = _add_kernel(folder, name, entry, manifest, code)
        if reason is not None:
            manifest["refused"][name] = f"{reason}; {gate.VALUE_LOST}" if gate.returns(entry) else reason
    if manifest["runtime"] is None and manifest["kernels"]:  # no IR lays Taichi's runtime out: no stand-in to make
        why = "the module's IR does not lay Taichi's runtime out"
        manifest["refused"].update({k: why for k in manifest["kernels"]})
        manifest["kernels"] = {}
    with open(os.path.join(folder, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    return manifest


def _add_kernel(folder: str, name: str, entry: dict, manifest: dict[str, Any], code: LlvmCode) -> str | None:
    """PTX for kernel ``name`` (its metadata ``entry``, its IR in ``code``) written into ``folder`` and entered in
    ``manifest`` (with the runtime layout its IR gives, the module's first); or why it gets none."""
    from . import compile as ptx_compile

    ir = code.kernel(name)
    if ir is None:
        return "the module has no IR for it"
    if not ir.targets(ptx_compile.TRIPLE):
        raise CorruptedDataError(f"{os.path.join(folder, f'{name}.ll')}: not a CUDA kernel's IR")
    verdict = gate.read_ir(ir)
    try:
        reason = verdict.reason or gate.read_entry(entry)
        if reason is not None:
            return reason
        layout = plan.from_entry(entry)
    except (CorruptedDataError, KeyError, TypeError, ValueError, AttributeError) as e:
        return f"its metadata cannot be laid out here: {type(e).__name__}: {e}"
    try:
        ptx = ptx_compile.to_ptx(ir, [t["name"] for t in layout["tasks"]], layout["args_size"])
        runtime = ptx_compile.runtime_layout(ir)
    except ptx_compile.PtxError as e:
        return str(e)
    if runtime is not None and manifest["runtime"] not in (None, runtime.__dict__):
        return "its IR lays Taichi's runtime out unlike the module's other kernels"
    if runtime is None and verdict.rand:
        return "it uses random numbers, and its IR does not lay Taichi's runtime out"
    if runtime is not None:
        manifest["runtime"] = dict(runtime.__dict__)
    with open(os.path.join(folder, f"{name}.ptx"), "w", encoding="utf-8") as f:
        f.write(ptx)
    manifest["kernels"][name] = {"ptx": f"{name}.ptx", "rand": verdict.rand,
                                 "ir_sha256": hashlib.sha256(code.ir[name]).hexdigest()}
    return None


def _check_cuda_part(info: Any, source: str) -> None:
    """IncompatibleModuleError unless the module ``info`` (read from ``source``) has a CUDA part."""
    if not ("cuda" in info.parts if info.parts else info.arch is not None and info.arch.name == "CUDA"):
        archs = ", ".join(info.parts or [a.name.lower() for a in info.archs]) or "no known arch"
        raise IncompatibleModuleError(
            f"{source}: ptx adds PTX to a module's CUDA part, and this module has none (it runs on {archs}): build "
            f"it for CUDA with python -m taichi_aot build FILE.py --arch cuda (beside other archs, one multi-arch "
            f"module), which adds the PTX itself")


def add_ptx(source: str, out: str | None = None) -> dict[str, Any]:
    """Add PTX to a Taichi CUDA module: a folder, a ``.tcm`` or a multi-arch module (its CUDA part), written to
    ``out`` (default: in place). Returns the manifest.

    A module with no kernels has nothing to add: nothing is written, and the manifest says ``"empty": True``.

    Raises:
        IncompatibleModuleError: the module has no CUDA part (nothing is written).
        PtxError: no llvmlite. CorruptedDataError, MissingFileError: as :func:`~taichi_aot.metadata.read_module`.
    """
    from ..metadata import read_module
    from ..metadata.multi import SIDECAR
    from ..metadata.source import extract_archive, store_member, zip_folder

    info = read_module(source)
    if not info.parts and info.arch is None and not info.kernels:  # no kernel says which arch: nothing to add
        return {"target": None, "kernels": {}, "refused": {}, "empty": True}
    _check_cuda_part(info, source)
    out = out or source
    with tempfile.TemporaryDirectory(prefix="taichi_aot_ptx_") as tmp:
        if os.path.isdir(source):
            if os.path.abspath(out) != os.path.abspath(source):
                shutil.copytree(source, out, dirs_exist_ok=True)
            return add_to_folder(out)
        if info.parts:
            whole = os.path.join(tmp, "whole")
            extract_archive(source, whole)
            with open(os.path.join(whole, SIDECAR), encoding="utf-8") as f:
                part = json.load(f)["parts"]["cuda"]
            extract_archive(os.path.join(whole, part), os.path.join(tmp, "cuda"))
            manifest = add_to_folder(os.path.join(tmp, "cuda"))
            zip_folder(os.path.join(tmp, "cuda"), os.path.join(whole, part))
            staged = os.path.join(tmp, "out")
            with zipfile.ZipFile(source) as z:
                order = [i.filename for i in z.infolist()]
            with zipfile.ZipFile(staged, "w", zipfile.ZIP_STORED) as z:
                for name in order:
                    with open(os.path.join(whole, name), "rb") as f:
                        store_member(z, name, f.read())
        else:
            extract_archive(source, os.path.join(tmp, "cuda"))
            manifest = add_to_folder(os.path.join(tmp, "cuda"))
            staged = os.path.join(tmp, "out")
            zip_folder(os.path.join(tmp, "cuda"), staged)
        os.replace(staged, out) if os.path.dirname(os.path.abspath(out)) == os.path.dirname(staged) else \
            shutil.move(staged, out)
    return manifest


def _plain_name(name: Any) -> bool:
    """A kernel's or file's name that stays inside the module's folder."""
    return isinstance(name, str) and bool(name) and os.path.basename(name) == name and not name.startswith(".")


def read_manifest(raw: bytes | None, where: str) -> dict[str, Any] | None:
    """The manifest's bytes checked (None: the module has none); CorruptedDataError where they break its
    format."""
    if raw is None:
        return None
    from ..metadata.multi import parse_json

    doc = parse_json(raw, f"{where}: {MANIFEST}")
    if not isinstance(doc, dict) or doc.get("taichi_aot_ptx") != FORMAT:
        raise CorruptedDataError(f"{where}: {MANIFEST} is not a taichi_aot PTX manifest of format {FORMAT}")
    kernels, refused, runtime = doc.get("kernels"), doc.get("refused"), doc.get("runtime")
    if not isinstance(kernels, dict) or not isinstance(refused, dict):
        raise CorruptedDataError(f"{where}: {MANIFEST} without kernels and refused")
    for name, k in kernels.items():
        if not _kernel_entry(name, k):
            raise CorruptedDataError(f"{where}: {MANIFEST}: kernel {name!r} is malformed")
    if not all(isinstance(why, str) for why in refused.values()):
        raise CorruptedDataError(f"{where}: {MANIFEST}: a refusal that is not a text")
    if runtime is not None:
        _check_runtime(runtime, where)
    elif any(k["rand"] for k in kernels.values()) or kernels:
        raise CorruptedDataError(f"{where}: {MANIFEST}: kernels with PTX and no runtime layout")
    return doc


def _kernel_entry(name: Any, k: Any) -> bool:
    """Whether a manifest's kernel entry is well formed: a plain name, its PTX file's (plain too), whether it uses
    random numbers, its IR's digest."""
    return (_plain_name(name) and isinstance(k, dict) and isinstance(k.get("ptx"), str)
            and isinstance(k.get("rand"), bool) and isinstance(k.get("ir_sha256"), str) and _plain_name(k["ptx"]))


def _check_runtime(runtime: Any, where: str) -> None:
    """A manifest's runtime layout (the stand-in C makes for Taichi's runtime): its fields inside its size,
    aligned, a random state of 20 to 64 bytes."""
    fields = ("size", "temporaries", "rand_states", "rand_state_size")
    if not isinstance(runtime, dict) or any(type(runtime.get(f)) is not int for f in fields):
        raise CorruptedDataError(f"{where}: {MANIFEST}: a malformed runtime layout")
    size = runtime["size"]
    if not (0 < size <= 1 << 20 and 0 <= runtime["temporaries"] <= size - 8
            and 0 <= runtime["rand_states"] <= size - 8 and 20 <= runtime["rand_state_size"] <= 64
            and runtime["rand_state_size"] % 4 == 0
            and runtime["temporaries"] % 8 == 0 and runtime["rand_states"] % 8 == 0):
        raise CorruptedDataError(f"{where}: {MANIFEST}: the runtime layout is out of range")


def manifest_of(source: str) -> dict[str, Any] | None:
    """The PTX manifest of a module (a folder, a ``.tcm``, or a multi-arch module's CUDA part), checked; None where
    it has none (not CUDA, or no PTX made)."""
    from ..metadata import open_module
    from ..metadata.source import _Source

    try:
        loadable, info, _ = open_module(source, Arch.CUDA)
    except IncompatibleModuleError:  # a multi-arch module with no CUDA part
        return None
    if info.arch != Arch.CUDA:
        return None
    src = _Source(loadable)
    try:
        return read_manifest(src.read(MANIFEST), str(source))
    finally:
        src.close()


def paths_of(source: str) -> dict[str, str] | None:
    """How each kernel of a CUDA module is launched, as :meth:`AotModule.launchers` says it, from its manifest
    alone: "cuda", or "taichi: <why>"; None where the module has no PTX."""
    manifest = manifest_of(source)
    if manifest is None:
        return None
    out = {name: "cuda" for name in manifest["kernels"]}
    out.update({name: f"taichi: {why}" for name, why in manifest["refused"].items()})
    return out


#: Why a CUDA module without PTX stays on libtaichi's path where llvmlite is missing.
NO_LLVMLITE = ("the module has no PTX, and llvmlite, which makes it at its first load, is not installed (pip install "
               "'taichi_aot[cuda]'), or run `taichi_aot ptx` on the module")


def cached_folder(folder: str, code: LlvmCode | None = None) -> str | None:
    """A folder holding PTX for the CUDA module in ``folder``, which has none of this taichi_aot's PTX step (saved by
    ``ti.aot.Module`` and ``save``, or PTX of an older step): made at the module's first load here with llvmlite and
    kept in the cache folder, keyed by the module's IR and metadata, LLVM's version and the step's, then found there
    while it is this user's alone and its files are those sealed under that key (``_cache.sealed_folder``: a planted,
    damaged or stale folder is made again). The folder holds copies of the IR and metadata the PTX was made from,
    written from ``code`` (the module's kernels and IR as :mod:`taichi_aot.metadata` read them; None: read from
    ``folder``, :func:`code_in`). None without llvmlite (:data:`NO_LLVMLITE`)."""
    import importlib.metadata
    import importlib.util

    try:
        if importlib.util.find_spec("llvmlite") is None:
            return None
    except ValueError:  # its spec set to None (a program that hides it)
        return None
    from .._cache import cache_home, seal_folder, sealed_folder
    from .compile import VERSION

    code = code if code is not None else code_in(folder)
    files = {f"{name}.ll": raw for name, raw in code.ir.items()}
    files["metadata.json"] = code.metadata
    h = hashlib.sha256(f"{FORMAT}\0{VERSION}\0{importlib.metadata.version('llvmlite')}\0".encode())
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name])
    key = f"ptx {h.hexdigest()}"
    home = os.path.join(cache_home(), "ptx")
    out = os.path.join(home, h.hexdigest()[:32])
    if sealed_folder(out, key):  # this user's, made for this very IR and metadata, unchanged since
        return out
    os.makedirs(home, mode=0o700, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".making_", dir=home)
    try:
        for name, raw in files.items():
            with open(os.path.join(tmp, name), "xb") as f:
                f.write(raw)
        add_to_folder(tmp, code)
        seal_folder(tmp, key)
        _put(tmp, out, key)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _put(tmp: str, out: str, key: str) -> None:
    """Move the folder ``tmp`` to ``out`` whole; another process's sealed copy made meanwhile stands, and anything
    else there (damaged, planted, stale) is moved aside and removed first."""
    from .._cache import sealed_folder

    try:
        os.rename(tmp, out)
        return
    except OSError:
        if sealed_folder(out, key):
            return
    aside = tempfile.mkdtemp(prefix=".stale_", dir=os.path.dirname(out))
    try:
        os.rename(out, os.path.join(aside, "old"))
    except OSError:
        pass
    shutil.rmtree(aside, ignore_errors=True)
    os.rename(tmp, out)


def manifest_in(folder: str, where: str) -> dict[str, Any] | None:
    """The PTX manifest in ``folder`` (:func:`ptx_folder`'s), checked; None where it has none."""
    path = os.path.join(folder, MANIFEST)
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        return read_manifest(f.read(), where)


def kernel_ptx(folder: str, k: dict[str, Any]) -> bytes | str:
    """The PTX a manifest's kernel entry ``k`` names, in ``folder``, or why it cannot be read."""
    try:
        with open(os.path.join(folder, k["ptx"]), "rb") as f:
            return f.read()
    except OSError as e:
        return f"its PTX cannot be read ({e.strerror})"


def ptx_folder(folder: str, code: LlvmCode | None = None) -> tuple[str | None, str]:
    """Where the own CUDA launcher reads a CUDA module's PTX: the module's own folder where this PTX step made it
    there, else :func:`cached_folder`'s (of ``code``, the module's kernels and IR as :mod:`taichi_aot.metadata` read
    them); ``(None, why)`` where there is none."""
    from .compile import VERSION

    try:
        with open(os.path.join(folder, MANIFEST), "rb") as f:
            if json.loads(f.read()).get("compile") == VERSION:
                return folder, ""
    except FileNotFoundError:
        pass
    except (OSError, ValueError, AttributeError):  # a damaged manifest: the launcher's load says what is wrong
        return folder, ""
    try:
        made = cached_folder(folder, code)
    except (OSError, CorruptedDataError) as e:
        return None, f"the module has no PTX, and making it at its load failed: {type(e).__name__}: {e}"
    return (made, "") if made is not None else (None, NO_LLVMLITE)
