"""taichi_aot's cache folder, and what of it is trusted.

The folder is ``TAICHI_AOT_CACHE``, else ``$XDG_CACHE_HOME/taichi_aot``, else ``~/.cache/taichi_aot``. A user without
a usable home (none, one that is no folder, or the temporary folder as home, as a service's user often has) gets
``taichi_aot-cache-<uid>`` in the temporary folder instead, made private (0700); so does a user whose first choice
cannot be written.

Another local user must not decide what this process runs: the cache holds the probe's answers (which archs work),
module verdicts (which modules load without a check) and PTX made at a module's load (code the GPU runs). So a folder
is used only where it is this user's and no one else may write it, and every folder above it is this user's or
root's and writable by no other user (a shared folder such as ``/tmp`` passes where it is root's and sticky; a
group-writable one where its group is this user's own). A folder that fails is ignored with a warning (the private
folder stands in; where even that is not this user's, a private folder of this process's own, removed at its exit).

Each entry whose content decides what runs is written with a digest of its key and its content (:func:`write_entry`,
:func:`seal_folder`) and read only where the file is this user's, no one else may write it, and the digest holds
(:func:`read_entry`, :func:`sealed_folder`): a planted, damaged or stale entry is never used.

Nothing of the package is imported here (the build runs ``_bundle.py``, which uses this file, on its own).
"""

from __future__ import annotations

import atexit
import os
import stat
import warnings

try:
    from ._trust import resolve, untrusted_folder
except ImportError:  # run by its path by the build (_bundle.cache_home), which hands in _trust's functions
    pass

#: The first line of an entry: this mark, then the digest of its key and content.
_MARK = "taichi_aot-entry "
#: The file in a sealed folder that holds the digest of its key and files.
SEAL = ".taichi_aot-seal"


def _uid() -> int:
    return os.getuid() if hasattr(os, "getuid") else 0


def cache_home() -> str:
    """taichi_aot's cache folder (module docstring): the first choice where it is this user's alone, else the
    private folder in the temporary folder. The probe's answers, module verdicts, PTX made at load, modules compiled
    on first use and the libraries builds fetch are kept there (``python -m taichi_aot cache clear`` empties it)."""
    preferred = _preferred()
    found = _resolved.get(preferred or "")
    if found is None:
        found = _resolved[preferred or ""] = (preferred and _usable(preferred)) or _private()
    return found


#: The cache folder each first choice resolved to in this process ("": the user has no usable home).
_resolved: dict[str, str] = {}


def _preferred() -> str | None:
    """The first choice, or None for a user without a usable home (none, or the private one the package gave this
    process: ``_home``)."""
    import tempfile

    explicit = os.environ.get("TAICHI_AOT_CACHE")
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    base = os.environ.get("XDG_CACHE_HOME")
    if not base or not os.path.isabs(base):  # the XDG base directory rules: a relative path is to be ignored
        home = os.path.expanduser("~")
        given = os.environ.get("TAICHI_AOT_PRIVATE_HOME")
        if given and given == os.environ.get("HOME"):
            return None
        if home in ("", "~", "/") or not os.path.isdir(home) or _same(home, tempfile.gettempdir()):
            return None
        base = os.path.join(home, ".cache")
    return os.path.join(base, "taichi_aot")


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _usable(folder: str) -> str | None:
    """``folder`` (made where missing, private) by its real path where it is this user's alone and writable; None
    where it cannot be made or written (quietly: a read-only home) or is not this user's alone (with a warning).
    Its links are followed only where this user or root made them (``_trust.resolve``): a link another user made
    would have the package write, and ``cache clear`` delete, in the folder it points at."""
    real, why = resolve(folder)
    if not why:
        try:
            os.makedirs(real, mode=0o700, exist_ok=True)
        except OSError:
            return None
        again, why = resolve(folder)
        why = why or ("it changed while it was made" if again != real else "") or untrusted_folder(real)
    if why:
        warnings.warn(f"taichi_aot: the cache folder {folder} is ignored: {why}; another user could plant what this "
                      f"process runs there, or have it write where they choose (chmod go-w the folder, or remove it "
                      f"and let taichi_aot make it again)", RuntimeWarning, stacklevel=3)
        return None
    return real if os.access(real, os.W_OK | os.X_OK) else None


def _private() -> str:
    """``taichi_aot-cache-<uid>`` in the temporary folder, made private to this user; where another user's folder
    has that name, a private folder of this process's own (removed at exit: then nothing is kept between starts)."""
    import shutil
    import tempfile

    uid = _uid()
    folder = os.path.join(tempfile.gettempdir(), f"taichi_aot-cache-{uid}")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError:
        pass
    real = os.path.realpath(folder)
    why = untrusted_folder(real) if os.path.isdir(folder) and not os.path.islink(folder) else "it is no folder"
    if not why and os.access(real, os.W_OK | os.X_OK):
        return real
    own = tempfile.mkdtemp(prefix=f"taichi_aot-cache-{uid}-")
    creator = os.getpid()

    def remove() -> None:
        if os.getpid() == creator:  # not in a forked child, whose parent still keeps its cache there
            shutil.rmtree(own, True)

    atexit.register(remove)
    if why:
        warnings.warn(f"taichi_aot: the cache folder {folder} is ignored: {why}; this process keeps its cache in "
                      f"{own}, removed at its exit", RuntimeWarning, stacklevel=3)
    return own


def _digest(key: str, content: bytes) -> str:
    import hashlib

    return hashlib.sha256(key.encode("utf-8", "surrogateescape") + b"\0" + content).hexdigest()


def write_entry(path: str, key: str, content: str) -> bool:
    """Keep ``content`` at ``path`` (made whole or not at all, readable by this user alone) under ``key``, what it
    was found for; False where it could not be written (a read-only cache: found again next time)."""
    import tempfile

    data = content.encode("utf-8")
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(f"{_MARK}{_digest(key, data)}\n".encode() + data)
        os.replace(tmp, path)
    except OSError:
        return False
    return True


def read_entry(path: str, key: str) -> str | None:
    """What :func:`write_entry` kept at ``path`` under ``key``; None where there is none, or the file is not this
    user's alone, or it was not written for ``key``, or it changed since."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != _uid() or st.st_mode & 0o022:
            return None
        head, _, data = f.read().partition(b"\n")
    if head.decode("ascii", "replace") != _MARK + _digest(key, data):
        return None
    return data.decode("utf-8", "replace")


def _folder_digest(folder: str, key: str) -> str | None:
    """The digest of ``key`` and the names and contents of ``folder``'s files (not the seal); None where a file
    there is not a plain file of this user's."""
    import hashlib

    h = hashlib.sha256(key.encode("utf-8", "surrogateescape") + b"\0")
    for name in sorted(os.listdir(folder)):
        if name == SEAL:
            continue
        try:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != _uid():
                return None
            h.update(name.encode("utf-8", "surrogateescape") + b"\0" + st.st_size.to_bytes(8, "little"))
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def seal_folder(folder: str, key: str) -> None:
    """Record in ``folder`` the digest of ``key`` and its files as they are now (before it is moved into place)."""
    digest = _folder_digest(folder, key)
    with open(os.path.join(folder, SEAL), "w", encoding="ascii") as f:
        f.write(digest or "")


def sealed_folder(folder: str, key: str) -> bool:
    """Whether ``folder`` is a folder of this user's alone whose files are those :func:`seal_folder` sealed under
    ``key``."""
    try:
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != _uid() or st.st_mode & 0o022:
            return False
        with open(os.path.join(folder, SEAL), encoding="ascii") as f:
            seal = f.read().strip()
        return bool(seal) and seal == _folder_digest(folder, key)
    except OSError:
        return False
