"""What another local user could have written, told from what only this user (or root) could.

The package reads and runs things found by path: its cache (the probe's answers, module verdicts, PTX the GPU runs),
libraries named by variables (``TAICHI_C_API_INSTALL_DIR``, ``TAICHI_AOT_SPIRV_TOOLS_LIB``, ``TI_LIB_DIR``) or found
on ``sys.path`` (NVIDIA's NVTX library, a ``taichi`` wheel's library), and the ``HOME`` the libraries it loads read.
A path is trusted where no other user could have put or changed what it leads to:

* every folder on the way is this user's or root's, and writable by no other user: not by others, and not by a
  group with a member besides this user; a folder that is root's and sticky (``/tmp``) passes, since there only the
  owner of an entry may replace it;
* a symbolic link on the way is followed only where it is this user's or root's (a link another user made in
  ``/tmp`` or in their own folder, pointing at this user's files, would have the package write or delete there);
* the file (or the folder) itself is this user's (or root's, for what is read), and writable by no one else.

:func:`resolve` walks a path a component at a time on those terms; :func:`untrusted_folder` and
:func:`untrusted_file` say why a path fails ("" where it passes).

Nothing of the package is imported here (the build runs ``_cache.py``, which uses this file, on its own).
"""

from __future__ import annotations

import os
import stat

__all__ = ["resolve", "untrusted_file", "untrusted_folder"]

#: How many links :func:`resolve` follows before it calls a path a loop (the kernel's own limit).
_MAX_LINKS = 40


def _uid() -> int:
    return os.getuid() if hasattr(os, "getuid") else 0


def _group_is_mine(gid: int) -> bool:
    """Whether group ``gid`` has no member but this user (a user's private group): another member could write
    where the group may."""
    try:
        import grp
        import pwd

        me = pwd.getpwuid(_uid()).pw_name
        group = grp.getgrgid(gid)
    except (ImportError, KeyError, OSError):
        return False
    if any(member != me for member in group.gr_mem):
        return False
    if gid != os.getgid():
        return False
    try:
        return not any(p.pw_gid == gid and p.pw_uid != _uid() for p in pwd.getpwall())
    except OSError:
        return False


def _others_write(st: os.stat_result) -> bool:
    """Whether a user other than the owner may write what ``st`` describes."""
    if st.st_mode & 0o002:
        return True
    return bool(st.st_mode & 0o020) and not _group_is_mine(st.st_gid)


def _folder_above_problem(folder: str, st: os.stat_result) -> str:
    """Why ``folder`` (a real folder on the way to a path) lets another user change what lies below it ("" where it
    does not)."""
    uid = _uid()
    if st.st_uid not in (uid, 0):
        return f"{folder} belongs to uid {st.st_uid}"
    if st.st_uid == 0 and st.st_mode & stat.S_ISVTX:
        return ""  # /tmp's kind: only an entry's owner may remove or rename it
    if _others_write(st):
        return f"others may write {folder} (mode {stat.S_IMODE(st.st_mode):o})"
    return ""


def _split(path: str) -> list[str]:
    return [part for part in path.split(os.sep) if part and part != "."]


def resolve(path: str) -> tuple[str, str]:
    """``(real path, why not trusted)`` of ``path`` (absolute, or from the working folder): its links followed
    one at a time, each only where it is this user's or root's and lies in a folder no other user may change.
    The real path's missing tail (folders still to be made) is kept as written. ``why`` is "" where every folder on
    the way passes; the path itself is for the caller to judge (:func:`untrusted_folder`, :func:`untrusted_file`)."""
    pending = _split(os.path.abspath(path))
    current = os.sep
    links = 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, part)
        try:
            st = os.lstat(candidate)
        except FileNotFoundError:
            return os.path.join(candidate, *pending), ""
        except OSError as e:
            return os.path.join(candidate, *pending), f"{candidate} cannot be read ({e.strerror})"
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > _MAX_LINKS:
                return candidate, f"{path} has too many links on its way"
            if st.st_uid not in (_uid(), 0):
                return candidate, f"{candidate} is a link made by uid {st.st_uid}, not by this user or root"
            try:
                target = os.readlink(candidate)
            except OSError as e:
                return candidate, f"{candidate} cannot be read ({e.strerror})"
            if os.path.isabs(target):
                current = os.sep
            pending = _split(target) + pending
            continue
        if pending:  # a folder on the way
            why = _folder_above_problem(candidate, st)
            if why:
                return os.path.join(candidate, *pending), why
        current = candidate
    return current, ""


def _above(real: str) -> str:
    """Why a folder above the real path ``real`` lets another user change it ("" where none does)."""
    above = os.path.dirname(real)
    while True:
        try:
            st = os.stat(above)
        except OSError as e:
            return f"{above} cannot be read ({e.strerror})"
        why = _folder_above_problem(above, st)
        if why:
            return why
        if above == os.path.dirname(above):
            return ""
        above = os.path.dirname(above)


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
    if _others_write(st):
        return f"others may write it (mode {stat.S_IMODE(st.st_mode):o})"
    return _above(folder)


def untrusted_file(path: str, *, folder: bool = False) -> str:
    """Why the file (``folder``: the folder) at ``path``, to be read or loaded, could hold what another user wrote
    ("" where it could not): a link on its way or a folder above it another's or writable by others, or itself not
    this user's or root's, or writable by others."""
    real, why = resolve(path)
    if why:
        return why
    try:
        st = os.stat(real)
    except OSError as e:
        return f"{real} cannot be read ({e.strerror})"
    if folder != stat.S_ISDIR(st.st_mode):
        return f"{real} is {'no folder' if folder else 'a folder'}"
    if st.st_uid not in (_uid(), 0):
        return f"{real} belongs to uid {st.st_uid}, not to this user or root"
    if _others_write(st):
        return f"others may write {real} (mode {stat.S_IMODE(st.st_mode):o})"
    return _above(real)
