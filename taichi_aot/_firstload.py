"""A module's first load, tried where a crash costs nothing: what the library reads of an LLVM module (metadata.tcb,
graphs.tcb, the kernels' code) is not what taichi_aot's reader checks (metadata.json), and libtaichi_c_api 1.7.4
segfaults on a damaged metadata.tcb. So an LLVM module folder is first loaded by the library in a child process
(every kernel and graph looked up too); a crash there is the module's fault, and this process never loads it. The
verdict is kept under the digest of the folder's files, the arch and the library, so each module costs one child,
once; a module sealed by ``taichi_aot build`` (its files as built, recorded beside them) needs none.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import Any

from ._cache import read_entry, write_entry
from ._child import NoChildError, run_child, started
from ._probe import _MARK, build_identity, cache_folder, library_identity
from .enums import Arch
from .metadata.multi import SEAL, SIDECAR, recorded_seal
from .metadata.source import ModuleFiles, hash_file, module_file_names

__all__ = ["hash_module_files", "module_crash", "module_seal", "seal", "sealed"]

_MODULE_TIMEOUT = 300.0


#: Verdicts this process already has, by the module's files as they stand (name, size, modification time), the
#: arch and the library: a module loaded again is neither read through nor asked of the cache folder again.
_verdicts: dict[tuple[Any, ...], str] = {}


def _stat_key(folder: str, arch: Arch, library: str) -> tuple[Any, ...]:
    """What :data:`_verdicts` is keyed by; its fourth item is the library's identity (:func:`library_identity`)."""
    files = []
    for name in module_file_names(folder):
        try:
            st = os.stat(os.path.join(folder, name))
        except FileNotFoundError:  # gone meanwhile
            continue
        if stat.S_ISREG(st.st_mode):
            files.append((name, st.st_size, st.st_mtime_ns))
    return (os.path.abspath(folder), int(arch), library, library_identity(library), tuple(files))


def _module_digest(folder: str, arch: Arch, identity: str, files: str | None = None) -> str:
    """What a verdict is kept under: the arch, the library, this build, and the module's files' digest (``files``, as
    metadata/ read them; None: hashed from the folder now)."""
    import hashlib

    if files is None:
        h = hashlib.sha256()
        hash_module_files(h, folder)
        files = h.hexdigest()
    return hashlib.sha256(f"{int(arch)}\0{identity}\0{build_identity()}\0{files}".encode()).hexdigest()


def hash_module_files(h: Any, folder: str, skip: str = "") -> None:
    """Feed the hash ``h`` a module folder's files, names and contents in order (not the loader's lock file, nor
    ``skip``), as metadata's ModuleFiles digests them."""
    for name in module_file_names(folder):
        if name == skip:
            continue
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    continue
                hash_file(h, name, f.read())
        except (FileNotFoundError, IsADirectoryError):  # gone meanwhile, or a folder
            continue


def module_seal(folder: str) -> str:
    """The digest of a module folder's files but its sidecar: what ``build`` records in the sidecar of each part it
    made (:func:`sealed`)."""
    import hashlib

    h = hashlib.sha256()
    hash_module_files(h, folder, skip=SIDECAR)
    return h.hexdigest()


def seal(folder: str) -> None:
    """Record in the module folder's sidecar the digest of its files (:func:`module_seal`): what ``build`` does for the
    parts it made, and the package for its private copy of a sealed module it changed itself (metadata.retarget)."""
    import json

    path = os.path.join(folder, SIDECAR)
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    doc[SEAL] = module_seal(folder)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=True)


def sealed(folder: str) -> bool:
    """Whether an LLVM module folder holds the very files ``taichi_aot build`` wrote (Taichi's output, then the PTX
    step's), as its sidecar's seal records them: the package's own checks of what libtaichi reads (the binary
    metadata compared byte for byte, the arguments' layout against the code) then vouch for it, and its first load
    needs no child process. A seal is against damage, not forgery: whoever may write the module may write it."""
    try:
        with open(os.path.join(folder, SIDECAR), "rb") as f:
            seal = recorded_seal(f.read())
    except OSError:
        return False
    return seal is not None and seal == module_seal(folder)


def module_crash(folder: str, arch: Arch, kernels: list[str], graphs: list[str], library: str,
                 files: ModuleFiles | None = None, was_sealed: bool = False) -> str:
    """Why libtaichi_c_api cannot read the LLVM module ``folder`` on ``arch`` without crashing ("" where it can):
    found by a child process that loads it and looks up ``kernels`` and ``graphs``, remembered by content; none for
    a module :func:`sealed` as ``build`` wrote it. ``files``: the folder's files' digests as metadata/ read them
    (``was_sealed``: whether its seal was theirs), which the folder is then not read again for; None: read now.
    ``TAICHI_AOT_CHECK_MODULES=0`` skips it (modules of your own build, trusted)."""
    if os.environ.get("TAICHI_AOT_CHECK_MODULES", "") == "0":
        return ""
    seen = _stat_key(folder, arch, library)
    if seen in _verdicts:
        return _verdicts[seen]
    trusted = was_sealed if files is not None else sealed(folder)
    verdict = "" if trusted else _module_verdict(folder, arch, kernels, graphs, seen[3],
                                                 files.digest if files is not None else None)
    _verdicts[seen] = verdict
    return verdict


def _module_verdict(folder: str, arch: Arch, kernels: list[str], graphs: list[str], identity: str,
                    files: str | None) -> str:
    """:func:`module_crash`'s answer from the cache folder (by the module's content), else from a child."""
    import json
    import subprocess

    digest = _module_digest(folder, arch, identity, files)
    path = os.path.join(cache_folder(), "modules", f"{digest[:32]}.txt")
    kept = read_entry(path, f"module {digest}")
    if kept:
        return f"{kept} [a verdict kept in the cache: {path}; python -m taichi_aot cache clear has it found again]"
    if kept is not None:
        return kept
    names = json.dumps([kernels, graphs])
    try:
        proc = run_child("import sys; from taichi_aot._firstload import _module_child; "
                          "sys.exit(_module_child(sys.argv[1], int(sys.argv[2]), sys.argv[3]))",
                          os.path.abspath(folder), str(int(arch)), names, timeout=_MODULE_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"did not finish loading it in {_MODULE_TIMEOUT:.0f} s (in a child process)"
    except NoChildError:  # a frozen app that serves no child: its own modules, trusted (and checked again next time)
        return ""
    if not started(proc):  # not the package's code: no verdict to keep
        return ""
    if any(line.strip() == f"{_MARK}ok" for line in proc.stdout.splitlines()):
        verdict = ""
    elif proc.returncode < 0:
        verdict = f"crashed loading it (signal {-proc.returncode}, in a child process)"
    else:
        tail = (proc.stderr or "").strip().splitlines()[-1:] or [""]
        verdict = f"could not load it in a child process (exit status {proc.returncode}) {tail[0][:300]}".strip()
    write_entry(path, f"module {digest}", verdict)  # where it cannot be kept: checked again next time
    return verdict


def _module_child(folder: str, arch_value: int, names: str) -> int:
    # Runs in the child: load the module and look up every kernel and graph, with the library alone (no checks of
    # ours: they are what this tests). Errors the library reports are no crash: the parent meets them again.
    import json

    from ._library import Quiet
    from ._native import ffi, lib

    kernels, graphs = json.loads(names)
    with Quiet():
        runtime = lib.ti_create_runtime(arch_value, 0)
        if runtime != ffi.NULL:
            module = lib.ti_load_aot_module(runtime, os.fsencode(folder))
            if module != ffi.NULL:
                for name in kernels:
                    lib.ti_get_aot_module_kernel(module, name.encode())
                for name in graphs:
                    lib.ti_get_aot_module_compute_graph(module, name.encode())
                lib.ti_destroy_aot_module(module)
            lib.ti_destroy_runtime(runtime)
    print(f"{_MARK}ok", flush=True)
    sys.stdout.flush()
    os._exit(0)  # no teardown of the library's globals: what was to be tested is done
