"""Private folders of this process's own for modules libtaichi_c_api cannot be handed as they are.

libtaichi_c_api 1.7.4 makes a lock file (``metadata.lock``) beside an LLVM module's files while it reads them, and
segfaults where it cannot: a module in a folder this user cannot write (one installed by root, inside a package in a
system site-packages), or one where a ``metadata.lock`` already lies (planted by another user in a folder others may
write). Such a module, and a ``.tcm`` archive (which the LLVM backends cannot load at all), is loaded from a private
copy: a folder made for this process (:func:`private_folder`), removed when the module is; folders that ended
processes left behind are removed by the next process's first.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile

from .._trust import untrusted_folder

__all__ = ["LOCK", "copy_module", "copy_reason", "private_folder"]

#: The lock file libtaichi_c_api makes beside an LLVM module's files while it loads them.
LOCK = "metadata.lock"
_FOLDER_PREFIX = "taichi_aot_module_"  # then the owner's pid and "_"
_swept: list[bool] = []


def private_folder() -> str:
    """A private folder for a module's copy, named for this process. The first one a process makes removes the
    folders that processes which ended without removing theirs (``os._exit``, a kill, a crash) left behind."""
    if not _swept:
        _swept.append(True)
        _sweep(tempfile.gettempdir())
    return tempfile.mkdtemp(prefix=f"{_FOLDER_PREFIX}{os.getpid()}_")


def _sweep(root: str) -> None:
    """Remove this user's module folders in ``root`` whose process has ended."""
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        match = re.fullmatch(rf"{_FOLDER_PREFIX}(\d+)_\w+", name)
        if match is None or _alive(int(match.group(1))):
            continue
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # another user's, or no pid at all: left alone
    return True


def copy_reason(folder: str) -> str:
    """Why the LLVM module ``folder`` is loaded from a private copy ("" where it is loaded where it lies): the
    library could not make its lock file there, or one lies there already, or another user could plant one."""
    if os.path.lexists(os.path.join(folder, LOCK)):
        return f"a {LOCK} lies beside its files"
    if not os.access(folder, os.W_OK | os.X_OK):
        return "this user cannot write its folder"
    why = untrusted_folder(os.path.realpath(folder))
    return f"another user could plant a {LOCK} there ({why})" if why else ""


def copy_module(folder: str, dest: str, read: dict[str, bytes] | None = None) -> None:
    """Copy the plain files of the module ``folder`` (not a lock file) into the private folder ``dest``; those
    metadata/ read already (``read``: each one's bytes, by name) are written from what it read, not read again."""
    read = read or {}
    for name, raw in read.items():
        with open(os.path.join(dest, name), "xb") as out:
            out.write(raw)
    for name in os.listdir(folder):
        if name.endswith(".lock") or name in read:
            continue
        try:
            f = open(os.path.join(folder, name), "rb")
        except OSError:
            continue  # a folder, or something unreadable: no file of the module
        with f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                continue
            with open(os.path.join(dest, name), "xb") as out:
                shutil.copyfileobj(f, out)
