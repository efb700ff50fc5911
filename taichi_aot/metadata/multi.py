"""What taichi_aot's ``build`` adds to Taichi's modules: argument names, and one file for several archs.

* **Argument names** (``taichi_aot.json`` inside a module, beside Taichi's own files, which Taichi's loader
  never reads): ``{"taichi_aot": 1, "arch": "x64", "kernels": {"step": {"args": ["x", "dt"]}}}``. LLVM
  metadata records no kernel argument names; with this file keyword calls, ``info`` and stubs show them on
  x64 and CUDA too. Gfx metadata records them as well: the two must agree. It may also record how each
  kernel and graph uses its ndarray arguments, which LLVM metadata does not (``"access": {"x": "read"}`` in
  a kernel's or a graph's entry, ``"graphs": {"g": {"access": {...}}}``): what gfx metadata records wins.
* **A multi-arch module**: a zip archive (any suffix) whose root holds ``taichi_aot.json``
  (``{"taichi_aot": 1, "parts": {"x64": "x64.tcm", "vulkan": "vulkan.tcm"}}``) and, per arch, a plain
  Taichi ``.tcm`` archive stored uncompressed. A runtime loads the part named after its own arch.

Everything read here is checked: a file that breaks these rules is a CorruptedDataError.
"""

from __future__ import annotations

import json
import keyword
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..enums import ARCH_PREFERENCE, Access, Arch
from ..errors import CorruptedDataError, IncompatibleModuleError
from .retarget import cap_of

if TYPE_CHECKING:
    from .model import ModuleInfo
    from .source import _Source

#: The file taichi_aot's build writes into a module and at the root of a multi-arch module.
SIDECAR = "taichi_aot.json"
#: The sidecar's record of the digest of the module's other files as build wrote them (its seal: _firstload.sealed).
SEAL = "files_sha256"
#: The format version both carry (``"taichi_aot": 1``).
FORMAT = 1
#: Taichi's names of the archs a part can be built for, in the order ``Runtime.for_module`` prefers them.
PART_NAMES = tuple(a.name.lower() for a in ARCH_PREFERENCE)


def parse_json(raw: bytes, what: str) -> Any:
    """``raw`` as JSON (UTF-8), or CorruptedDataError naming ``what``."""
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise CorruptedDataError(f"{what} is not valid JSON") from None


def recorded_seal(sidecar: bytes | None) -> str | None:
    """The seal a module's sidecar (its bytes, None: none) records of the module's other files, or None."""
    try:
        doc = json.loads(sidecar.decode("utf-8")) if sidecar is not None else None
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    seal = doc.get(SEAL) if isinstance(doc, dict) else None
    return seal if isinstance(seal, str) else None


def _json(raw: bytes, what: str) -> dict:
    doc = parse_json(raw, what)
    if not isinstance(doc, dict) or doc.get("taichi_aot") != FORMAT:
        raise CorruptedDataError(f"{what}: not a taichi_aot {SIDECAR} of format {FORMAT}")
    return doc


def parts_of(src: _Source) -> dict[str, str] | None:
    """``{arch name: member}`` of a multi-arch module, in order of preference; None for a plain module."""
    names = src.names()
    if SIDECAR not in names or "metadata.json" in names:
        return None
    raw = src.read(SIDECAR)
    assert raw is not None
    parts = _json(raw, SIDECAR).get("parts")
    if not isinstance(parts, dict) or not parts:
        raise CorruptedDataError(f"{SIDECAR}: a multi-arch module without parts")
    for arch, member in parts.items():
        if arch not in PART_NAMES:
            raise CorruptedDataError(f"{SIDECAR}: unknown arch {arch!r} (one of {', '.join(PART_NAMES)})")
        if not isinstance(member, str) or member not in names:
            raise CorruptedDataError(f"{SIDECAR}: the {arch} part {member!r} is not in the archive")
    return {a: parts[a] for a in PART_NAMES if a in parts}


def part_for(parts: dict[str, str], arch: Arch, where: str) -> str:
    """The member holding the part for ``arch``; IncompatibleModuleError naming what the module holds."""
    member = parts.get(arch.name.lower())
    if member is None:
        raise IncompatibleModuleError(
            f"module {where} holds parts for {', '.join(parts)}, none for {arch.name.lower()}: open the runtime "
            f"with Runtime.for_module({where!r}) to take a backend the module has, or rebuild it with "
            f"python -m taichi_aot build FILE.py --arch {' '.join([*parts, arch.name.lower()])} -o {where}"
        )
    return member


def _names(kernel: str, entry: Any, count: int) -> list[str]:
    names = entry.get("args") if isinstance(entry, dict) else None
    if not isinstance(names, list):
        raise CorruptedDataError(f"{SIDECAR}: kernel {kernel!r} has no list of argument names")
    if len(names) != count:
        raise CorruptedDataError(f"{SIDECAR} names {len(names)} arguments of kernel {kernel!r}, which has {count}")
    for n in names:
        if not isinstance(n, str) or not n.isidentifier() or keyword.iskeyword(n):
            raise CorruptedDataError(f"{SIDECAR}: argument name {n!r} of kernel {kernel!r} is not an identifier")
    if len(set(names)) != len(names):
        raise CorruptedDataError(f"{SIDECAR}: kernel {kernel!r} names two arguments alike")
    return names


def apply_names(info: ModuleInfo, src: _Source) -> None:
    """Give the kernels of ``info`` the argument names the module's ``taichi_aot.json`` records, if it has one."""
    raw = src.read(SIDECAR)
    if raw is None:
        return
    doc = _json(raw, SIDECAR)
    if "parts" in doc:
        raise CorruptedDataError(f"{SIDECAR}: a multi-arch module inside a module")
    info.portable = doc.get("portable") is True  # build --portable: Taichi's default capabilities on purpose
    if info.llvm is not None:
        info.llvm.cap = cap_of(doc)
        info.llvm.sidecar = raw
    kernels = doc.get("kernels")
    if not isinstance(kernels, dict):
        raise CorruptedDataError(f"{SIDECAR}: no 'kernels' mapping")
    for name, entry in kernels.items():
        _name_kernel(info, name, entry)
    graphs = doc.get("graphs") or {}
    if not isinstance(graphs, dict):
        raise CorruptedDataError(f"{SIDECAR}: 'graphs' is not a mapping")
    for name, entry in graphs.items():
        _graph_access(info, name, entry)


def _graph_access(info: ModuleInfo, name: str, entry: Any) -> None:
    """Graph ``name``'s ndarray arguments get the access its sidecar ``entry`` records, where none is known."""
    g = info.graphs.get(name)
    if g is None or not isinstance(entry, dict):
        raise CorruptedDataError(f"{SIDECAR} describes graph {name!r}, which the module lacks")
    access = _access(f"graph {name!r}", entry.get("access"), [a.name or "" for a in g.args])
    g.args = [replace(a, access=access.get(a.name or "")) if a.kind == "ndarray" and a.access is None else a
              for a in g.args]


def _name_kernel(info: ModuleInfo, name: str, entry: Any) -> None:
    """Kernel ``name``'s arguments get the names its sidecar ``entry`` records (agreeing with any its metadata has)
    and, where the metadata records none, their access."""
    k = info.kernels.get(name)
    if k is None:
        raise CorruptedDataError(f"{SIDECAR} names the arguments of kernel {name!r}, which the module lacks")
    names = _names(name, entry, len(k.args))
    for a, n in zip(k.args, names):
        if a.name is not None and a.name != n:
            raise CorruptedDataError(
                f"{SIDECAR} calls argument {a.index} of kernel {name!r} {n!r}; the module's metadata, {a.name!r}"
            )
    access = _access(f"kernel {name!r}", entry.get("access"), names)
    k.args = [replace(a, name=n, access=a.access if a.access is not None or a.kind != "ndarray" else access.get(n))
              for a, n in zip(k.args, names)]


def _access(what: str, recorded: Any, names: list[str]) -> dict[str, Access]:
    """{argument name: access} of a sidecar's ``access`` mapping (None or absent: nothing recorded)."""
    if recorded is None:
        return {}
    if not isinstance(recorded, dict):
        raise CorruptedDataError(f"{SIDECAR}: the access of {what} is not a mapping")
    out = {}
    for arg, word in recorded.items():
        if arg not in names:
            raise CorruptedDataError(f"{SIDECAR} records the access of argument {arg!r} of {what}, which it lacks")
        if word is None:
            continue
        try:
            out[arg] = Access.parse(word, f"{SIDECAR}: argument {arg!r} of {what}")
        except ValueError as e:
            raise CorruptedDataError(str(e)) from None
    return out
