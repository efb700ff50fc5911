"""The modules a pool's workers load: as the pool is given them (:data:`Modules`), named, checked, and packed as
``.tcm`` bytes for workers on other machines."""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Mapping, Sequence
from typing import Any, Union

from ..errors import ArgumentTypeError, InvalidArgumentError, MissingFileError
from ..metadata.source import nearest_module

#: Modules as a pool takes them: one path (folder or ``.tcm``) or ``.tcm`` bytes, a list of them, or a dict
#: name -> path or bytes (``worker.modules[name]``).
Modules = Union[str, "os.PathLike[str]", bytes, Sequence[Union[str, "os.PathLike[str]", bytes]],
                Mapping[str, Union[str, "os.PathLike[str]", bytes]], None]


def module_sources(modules: Modules, pack: bool) -> dict[str, str | bytes]:
    """Modules by name, paths made absolute and checked; with ``pack`` (Ray: other machines), as ``.tcm`` bytes."""
    out: dict[str, str | bytes] = {}
    for i, (name, source) in enumerate(_named(modules)):
        key, value = _source(i, name, source, pack)
        if not isinstance(key, str) or key in out:
            raise InvalidArgumentError(f"Pool: module name {key!r} given twice (pass a dict to name them)")
        out[key] = value
    return out


def _named(modules: Modules) -> list[tuple[str | None, Any]]:
    """(name given or None, source) of each module."""
    if modules is None:
        return []
    if isinstance(modules, Mapping):
        return list(modules.items())
    if isinstance(modules, (str, os.PathLike, bytes, bytearray, memoryview)):
        return [(None, modules)]
    if isinstance(modules, Sequence):
        return [(None, m) for m in modules]
    raise ArgumentTypeError(f"Pool: modules must be a path, bytes, a list or a dict, got {type(modules).__name__}")


def _source(i: int, name: str | None, source: Any, pack: bool) -> tuple[Any, str | bytes]:
    """The ``i``th module's name (given, else its file's stem, or "module", "module1", ... for bytes) and what its
    workers load: its bytes, or its absolute path (packed as bytes with ``pack``)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return (name if name is not None else f"module{i}" if i else "module"), bytes(source)
    if not isinstance(source, (str, os.PathLike)):
        raise ArgumentTypeError(f"Pool: a module is a path or bytes, got {type(source).__name__}")
    path = os.path.abspath(os.fspath(source))
    if not os.path.exists(path):
        raise MissingFileError(f"Pool: no module at {path!r}{nearest_module(path)}")
    stem = os.path.basename(path.rstrip(os.sep))
    key = name if name is not None else stem[:-4] if stem.endswith(".tcm") else stem
    return key, _pack(path) if pack else path


def _pack(path: str) -> bytes:
    """A module path as ``.tcm`` bytes (a folder zipped), so it reaches workers on other machines."""
    if os.path.isfile(path):
        with open(path, "rb") as f:
            return f.read()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for folder, _, files in os.walk(path):
            for name in sorted(files):
                full = os.path.join(folder, name)
                zf.write(full, os.path.relpath(full, path))
    return buf.getvalue()
