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
import hashlib
import os
import shutil
import stat
import tempfile
import warnings

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
    """The first choice, or None for a user without a usable home."""
    explicit = os.environ.get("TAICHI_AOT_CACHE")
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        home = os.path.expanduser("~")
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
    where it cannot be made or written (quietly: a read-only home) or is not this user's alone (with a warning)."""
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError:
        return None
    real = os.path.realpath(folder)
    why = untrusted_folder(real)
    if why:
        warnings.warn(f"taichi_aot: the cache folder {folder} is ignored: {why}; another user could plant what this "
                      f"process runs there (chmod go-w the folder, or remove it and let taichi_aot make it again)",
                      RuntimeWarning, stacklevel=3)
        return None
    return real if os.access(real, os.W_OK | os.X_OK) else None


def untrusted_folder(folder: str) -> str:
    """Why ``folder`` (a real path) is not this user's alone ("" where it is): itself not this user's, or writable
    by others; a folder above it not this user's or root's, or writable by others (not as /tmp is)."""
    uid = _uid()
    try:
        st = os.lstat(folder)
    except OSError as e:
        return f"it cannot be read ({e.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return "it is no folder"
    if st.st_uid != uid:
        return f"it belongs to uid {st.st_uid}, not to this user (uid {uid})"
    if st.st_mode & 0o022:
        return f"others may write it (mode {stat.S_IMODE(st.st_mode):o})"
    above = os.path.dirname(folder)
    while True:
        try:
            st = os.stat(above)
        except OSError as e:
            return f"{above} cannot be read ({e.strerror})"
        if st.st_uid not in (uid, 0):
            return f"{above} belongs to uid {st.st_uid}"
        sticky = st.st_mode & stat.S_ISVTX and st.st_uid == 0
        if not sticky and (st.st_mode & 0o002 or (st.st_mode & 0o020 and st.st_gid != os.getgid())):
            return f"others may write {above} (mode {stat.S_IMODE(st.st_mode):o})"
        if above == os.path.dirname(above):
            return ""
        above = os.path.dirname(above)


def _private() -> str:
    """``taichi_aot-cache-<uid>`` in the temporary folder, made private to this user; where another user's folder
    has that name, a private folder of this process's own (removed at exit: then nothing is kept between starts)."""
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
    atexit.register(shutil.rmtree, own, True)
    if why:
        warnings.warn(f"taichi_aot: the cache folder {folder} is ignored: {why}; this process keeps its cache in "
                      f"{own}, removed at its exit", RuntimeWarning, stacklevel=3)
    return own


def _digest(key: str, content: bytes) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape") + b"\0" + content).hexdigest()


def write_entry(path: str, key: str, content: str) -> bool:
    """Keep ``content`` at ``path`` (made whole or not at all, readable by this user alone) under ``key``, what it
    was found for; False where it could not be written (a read-only cache: found again next time)."""
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
