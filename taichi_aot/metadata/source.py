"""Where a module's files come from: a folder, a ``.tcm`` path or ``.tcm`` bytes.

Reads are bounded (:data:`MAX_METADATA_BYTES` a file) and :func:`extract_archive` unpacks a ``.tcm``
archive (a zip file) safely for the backends that cannot load one themselves. Every failure to read
is a CorruptedDataError.
"""

from __future__ import annotations

import difflib
import io
import os
import shutil
import stat
import zipfile
from typing import TYPE_CHECKING, Any, NamedTuple, Union
from zlib import error as zlib_error

from ..errors import CorruptedDataError, MissingFileError

if TYPE_CHECKING:  # pragma: no cover
    from importlib.abc import Traversable

#: What a module is loaded from: a path (folder, ``.tcm``, multi-arch file), ``.tcm`` bytes, or a package's resource
#: (``importlib.resources.files(...) / "physics.tcm"``).
ModuleSource = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, "Traversable"]

#: The largest file read as metadata.
MAX_METADATA_BYTES = 256 << 20
#: Limits when extracting a .tcm archive (a zip file) for the LLVM backends: members, bytes, and how
#: many times its compressed size an archive may expand to (past a size below which nothing is refused).
MAX_ARCHIVE_MEMBERS = 10_000
MAX_ARCHIVE_BYTES = 4 << 30
MAX_EXPANSION_RATIO = 200
SMALL_ARCHIVE_BYTES = 64 << 20

# what zipfile raises for damaged archives besides BadZipFile (truncated streams, bad headers)
_ZIP_ERRORS = (zipfile.BadZipFile, OSError, ValueError, EOFError, RuntimeError)


def is_zip(data: bytes) -> bool:
    """Whether ``data`` starts like a zip archive (a ``.tcm`` module), by its magic number."""
    return data[:4] == b"PK\x03\x04"


def _source_hint(path: str) -> str:
    """What to do with ``path`` where it is a Python file (the kernels' source, not a module built from it)."""
    if not path.endswith((".py", ".pyw")):
        return ""
    stem = os.path.splitext(os.path.basename(path))[0]
    return (f"{path} is Python source, not a module compiled from it: compile its exported kernels first (needs "
            f"Taichi: pip install 'taichi_aot[build]'), e.g. python -m taichi_aot build {path} --arch x64 vulkan -o "
            f"{stem}.tcm, then use {stem}.tcm")


def nearest_module(path: str) -> str:
    """What a message that finds no module at ``path`` suggests: the entries of its folder (where that folder exists)
    that look like a module (a ``.tcm`` file, a file of ``path``'s own suffix, a folder) and whose names are near its
    name (``: did you mean 'examples/physics.tcm'?``); ``""`` where none is, or ``path`` exists."""
    path = os.fsdecode(path)
    folder, name = os.path.split(path.rstrip("/" + os.sep) or path)
    if not name or os.path.exists(path):
        return ""
    try:
        entries = os.listdir(folder or os.curdir)
    except OSError:  # no such folder, or one that cannot be listed
        return ""
    suffix = os.path.splitext(name)[1].lower()
    kinds = (".tcm", suffix) if suffix not in ("", ".py", ".pyw") else (".tcm",)
    modules = {e.lower(): e for e in entries
               if (not e.startswith(".") or name.startswith(".")) and e != "__pycache__"
               and (e.lower().endswith(kinds) or os.path.isdir(os.path.join(folder, e)))}
    near = difflib.get_close_matches(name.lower(), list(modules), n=3, cutoff=0.6)
    if not near:
        return ""
    return f": did you mean {' or '.join(repr(os.path.join(folder, modules[n])) for n in near)}?"


def module_file_names(folder: str) -> list[str]:
    """The names of a module folder's entries that may be its files, sorted: not the lock file Taichi's loader makes
    beside them while it reads (``metadata.lock``), which comes and goes as other processes load the module."""
    return sorted(n for n in os.listdir(folder) if not n.endswith(".lock"))


def hash_file(h: Any, name: str, data: bytes) -> None:
    """Feed the hash ``h`` one file of a module: its name, then its bytes (a module's digest is its files' so fed, in
    the order of their names)."""
    h.update(name.encode("utf-8", "surrogateescape") + b"\0")
    h.update(data)


class ModuleFiles(NamedTuple):
    """A module folder's files as metadata/ read them (:meth:`_Source.files`): the digest of them all (names and
    bytes, in order), the digest of all but its sidecar (the seal ``taichi_aot build`` records in the sidecar), and
    their bytes by name (what a load that changes the module starts from, instead of reading the folder again)."""

    digest: str
    seal: str
    contents: dict[str, bytes]


class _Source:
    """The files of a module folder, ``.tcm`` path or ``.tcm`` bytes, read on demand with a size limit, each once (a
    file read again is served from what was read: whatever reads the module after, its files are one version)."""

    def __init__(self, source: str | bytes | os.PathLike):
        self._zip: zipfile.ZipFile | None = None
        self._members: dict[str, zipfile.ZipInfo] = {}
        self._dir = ""  # the folder, when the source is one
        self._read: dict[str, bytes] = {}  # the files read whole, by name
        if isinstance(source, (bytes, bytearray, memoryview)):
            self._open_zip(io.BytesIO(bytes(source)))
            return
        path = os.fsdecode(os.fspath(source))
        if os.path.isdir(path):
            self._dir = path
        elif os.path.isfile(path):
            self._open_zip(path, _source_hint(path))
        elif os.path.exists(path):  # a device, a pipe, a socket: reading one may never end
            raise CorruptedDataError(f"{path!r} is neither a module folder nor a file")
        else:
            raise MissingFileError(f"no module at {path!r}{nearest_module(path)}")

    def _open_zip(self, what: str | io.BytesIO, hint: str = "") -> None:
        try:
            zf = zipfile.ZipFile(what)
        except _ZIP_ERRORS as e:
            raise CorruptedDataError(hint or f"not a readable .tcm archive: {e}") from None
        try:
            members = _members(zf, "module archive")
        except BaseException:
            zf.close()
            raise
        self._zip = zf
        self._members = {i.filename: i for i in members}

    def names(self) -> list[str]:
        """The names of the module's files, sorted."""
        if self._zip is not None:
            return sorted(self._members)
        return sorted(n for n in os.listdir(self._dir) if os.path.isfile(os.path.join(self._dir, n)))

    def read(self, name: str, limit: int = MAX_METADATA_BYTES) -> bytes | None:
        """The file's bytes (at most ``limit``; more is an error unless ``limit`` is a prefix read)."""
        done = self._read.get(name)
        if done is not None:
            return done[:limit] if limit < len(done) else done
        data = self._read_file(name, limit)
        if data is not None and (limit >= MAX_METADATA_BYTES or len(data) < limit):  # the whole file
            self._read[name] = data
        return data

    def files(self, skip: str) -> ModuleFiles | None:
        """The folder's files' digests (:class:`ModuleFiles`), each file read once: those read already as they were
        read; None for an archive (its bytes are its digest) or a file past the size limit."""
        if self._zip is not None:
            return None
        import hashlib

        every, sealed = hashlib.sha256(), hashlib.sha256()
        contents: dict[str, bytes] = {}
        for name in module_file_names(self._dir):
            try:
                data = self.read(name)
            except CorruptedDataError:  # too large to hold: the module's digest is made from its files, later
                return None
            if data is None:  # a folder, or gone meanwhile
                continue
            contents[name] = data
            hash_file(every, name, data)
            if name != skip:
                hash_file(sealed, name, data)
        return ModuleFiles(every.hexdigest(), sealed.hexdigest(), contents)

    def _read_file(self, name: str, limit: int) -> bytes | None:
        try:
            if self._zip is not None:
                info = self._members.get(name)
                if info is None:
                    return None
                if info.file_size > MAX_METADATA_BYTES:
                    raise CorruptedDataError(f"{name} is too large to be metadata")
                with self._zip.open(info) as f:
                    return f.read(limit)
            p = os.path.join(self._dir, name)
            if not os.path.isfile(p):
                return None
            if os.path.getsize(p) > MAX_METADATA_BYTES:
                raise CorruptedDataError(f"{p} is too large to be metadata")
            with open(p, "rb") as f:
                return f.read(limit)
        except (*_ZIP_ERRORS, zlib_error) as e:
            raise CorruptedDataError(f"module file {name} cannot be read: {e}") from None

    def no_metadata(self) -> CorruptedDataError:
        """The error of a source without ``metadata.json``: what it holds, what a module holds, and, for a folder,
        the modules in it (a ``.tcm`` file or a folder with ``metadata.json``: one level down)."""
        what, held, found = "the .tcm archive", self.names(), []
        if self._zip is None:
            what = repr(self._dir)
            try:
                entries = sorted(os.listdir(self._dir))
            except OSError:
                entries = []
            held = [e + "/" if os.path.isdir(os.path.join(self._dir, e)) else e for e in entries]
            for e in entries:
                p = os.path.join(self._dir, e)
                if (e.endswith(".tcm") and os.path.isfile(p)) or os.path.isfile(os.path.join(p, "metadata.json")):
                    found.append(repr(p))
        holds = f"it holds {', '.join(held[:6])}{', ...' if len(held) > 6 else ''}" if held else "it is empty"
        there = f"; did you mean {' or '.join(found[:3])}?" if found else ""
        return CorruptedDataError(
            f"{what} is not a Taichi AOT module: it has no metadata.json ({holds}). A module, as `taichi_aot build` "
            "or Taichi's Module.save writes it, holds metadata.json, with metadata.tcb and a .ll file for each kernel "
            "(x64, CUDA) or a .spv file for each task (Vulkan), and graphs.tcb or graphs.json where it has graphs: "
            f"pass such a folder or a .tcm file{there}")

    def close(self) -> None:
        """Close the archive, if the source is one."""
        if self._zip is not None:
            self._zip.close()


def _members(zf: zipfile.ZipFile, what: str) -> list[zipfile.ZipInfo]:
    """The archive's members, as every reader of an archive sees them first (the library's included: a gfx
    backend reads a ``.tcm`` itself). Refuses too many members, two of one name (only one of them could be
    read), more than MAX_ARCHIVE_BYTES uncompressed, and (past SMALL_ARCHIVE_BYTES) more than
    MAX_EXPANSION_RATIO times the archive's compressed size."""
    members = zf.infolist()
    if len(members) > MAX_ARCHIVE_MEMBERS:
        raise CorruptedDataError(f"{what} has {len(members)} members (at most {MAX_ARCHIVE_MEMBERS})")
    names = [i.filename for i in members]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise CorruptedDataError(f"{what} holds more than one member named {', '.join(map(repr, twice))}")
    total = sum(i.file_size for i in members)
    if total > MAX_ARCHIVE_BYTES:
        raise CorruptedDataError(f"{what} expands to more than {MAX_ARCHIVE_BYTES} bytes")
    packed = sum(i.compress_size for i in members)
    if total > SMALL_ARCHIVE_BYTES and total > MAX_EXPANSION_RATIO * max(packed, 1):
        raise CorruptedDataError(
            f"{what} expands {total / max(packed, 1):.0f} times ({packed} bytes to {total}); "
            f"at most {MAX_EXPANSION_RATIO} times"
        )
    return members


def _check_member(what: str, info: zipfile.ZipInfo, root: str) -> None:
    """Refuse a member that would land outside ``root`` or is not a plain file or folder."""
    name = info.filename
    mode = info.external_attr >> 16
    if name.startswith(("/", "\\")) or ":" in name or any(p == ".." for p in name.replace("\\", "/").split("/")):
        raise CorruptedDataError(f"{what}: unsafe member path {name!r}")
    if stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # no type bits: a plain file
        raise CorruptedDataError(f"{what}: member {name!r} is not a regular file")
    target = os.path.realpath(os.path.join(root, name))
    if os.path.commonpath([root, target]) != root:
        raise CorruptedDataError(f"{what}: member {name!r} escapes the extraction folder")


def extract_archive(source: str | bytes, dest: str) -> None:
    """Safely extract a ``.tcm`` archive (path or bytes) into ``dest``.

    Refuses absolute paths, ``..`` components, links and special files, two members of one name, more
    than MAX_ARCHIVE_MEMBERS members, more than MAX_ARCHIVE_BYTES uncompressed, and (past
    SMALL_ARCHIVE_BYTES) more than MAX_EXPANSION_RATIO times the archive's compressed size.

    Raises:
        CorruptedDataError: the archive is not a zip file, breaks one of those rules, or is damaged.
    """
    what = "module archive"
    try:
        zf = zipfile.ZipFile(io.BytesIO(source) if isinstance(source, bytes) else source)
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise CorruptedDataError(f"{what} is not a valid .tcm (zip) archive: {e}") from None
    with zf:
        members = _members(zf, what)
        root = os.path.realpath(dest)
        for info in members:
            _check_member(what, info, root)
        try:
            for info in members:
                target = os.path.join(root, info.filename)
                if info.is_dir():
                    os.makedirs(target, exist_ok=True)
                    continue
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
        except (*_ZIP_ERRORS, zlib_error) as e:  # zlib: a member whose compressed data is damaged
            raise CorruptedDataError(f"{what} is damaged: {e}") from None


#: The date every member of an archive taichi_aot writes carries: the same bytes whatever day it is built.
_FIXED_TIME = (2000, 12, 1, 0, 0, 0)


def store_member(z: zipfile.ZipFile, name: str, data: bytes | str) -> None:
    """One archive member, stored as the same bytes whatever day it is built."""
    info = zipfile.ZipInfo(name, _FIXED_TIME)
    info.external_attr = 0o644 << 16
    z.writestr(info, data)


def zip_folder(folder: str, out: str) -> None:
    """A ``.tcm`` of the folder's files, as Taichi's ``Module.archive`` writes one (flat, uncompressed)."""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for name in sorted(os.listdir(folder)):
            with open(os.path.join(folder, name), "rb") as f:
                store_member(z, name, f.read())


def loadable(source: object) -> object:
    """``source`` as a module source the loaders take: a path, or ``.tcm`` bytes. An ``importlib.resources``
    resource that is no file on disk (a package imported from a zip archive) is read: a file's bytes, a folder's
    files as a ``.tcm`` archive in memory. Anything else is given back as it is (the loaders say what is wrong
    with it)."""
    if isinstance(source, (str, bytes, bytearray, memoryview, os.PathLike)) or not all(
            callable(getattr(source, name, None)) for name in ("is_file", "is_dir", "iterdir", "read_bytes")):
        return source
    what = f"load_module: the resource {source}"
    if source.is_file():  # type: ignore[attr-defined]  # a Traversable (checked above)
        return source.read_bytes()  # type: ignore[attr-defined]
    if not source.is_dir():  # type: ignore[attr-defined]
        raise MissingFileError(f"{what} does not exist")
    members = sorted((m for m in source.iterdir() if m.is_file()), key=lambda m: m.name)  # type: ignore[attr-defined]
    if len(members) > MAX_ARCHIVE_MEMBERS:
        raise CorruptedDataError(f"{what} holds more than {MAX_ARCHIVE_MEMBERS} files")
    out, total = io.BytesIO(), 0
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for member in members:
            data = member.read_bytes()
            total += len(data)
            if total > MAX_ARCHIVE_BYTES:
                raise CorruptedDataError(f"{what} holds more than {MAX_ARCHIVE_BYTES} bytes")
            store_member(z, member.name, data)
    return out.getvalue()
