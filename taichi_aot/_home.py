"""The ``HOME`` the libraries the package loads read, and the environment its children get.

libtaichi_c_api 1.7.4 aborts where ``HOME`` is unset: its static initialisers, and each runtime it makes, read it
(``get_repo_dir``). Everything else in the process reads ``HOME`` too: the Vulkan loader looks for layers and drivers
under ``$HOME/.local/share/vulkan`` and ``$HOME/.config/vulkan``, GPU drivers keep shader caches under it, and a
Python started without a virtual environment runs the ``.pth`` files of ``$HOME/.local/lib/pythonX.Y/site-packages``.
So a ``HOME`` another local user may write (the temporary folder, as a service's user often has) would run their
code here. :func:`ensure_home`, before the library loads, keeps a ``HOME`` that is this user's alone (or root's),
takes the user's home from the password database where ``HOME`` is unset, and otherwise gives the process a private
folder of its own (``0700``, removed at its exit), never a shared one. Child processes inherit it: a Python child
given the shared folder back would run the ``.pth`` files planted in its user site before any code of the package.

Nothing of the package is imported here.
"""

from __future__ import annotations

import atexit
import os

from ._trust import untrusted_file

__all__ = ["PRIVATE", "ensure_home", "private_home"]

#: Set, with HOME, where this process (or the parent it was started by) gave itself a private HOME: that folder.
PRIVATE = "TAICHI_AOT_PRIVATE_HOME"


def _password_home() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_dir
    except (ImportError, KeyError, OSError):
        return ""


def _safe(home: str) -> str:
    """Why ``home`` may not serve as HOME ("" where it may): no folder, or one another user may write or own."""
    if not home or not os.path.isabs(home):
        return "it is no absolute path"
    return untrusted_file(home, folder=True)


def private_home() -> str | None:
    """The private HOME this process lives with (made by :func:`ensure_home`, here or in a parent), else None."""
    given = os.environ.get(PRIVATE)
    return given if given and given == os.environ.get("HOME") else None


def ensure_home() -> str:
    """Make ``HOME`` safe to hand the libraries before the first is loaded (module docstring); returns what was
    done ("" where HOME was kept as it was)."""
    home = os.environ.get("HOME", "")
    unsafe = _safe(home) if home else ""
    if home and not unsafe:
        return ""
    why = f"HOME={home} is not this user's alone ({unsafe})" if home else "HOME is unset"
    found = _password_home()
    if not home and found and not _safe(found):
        os.environ["HOME"] = found
        return f"{why}: the password database's home, {found}"
    import shutil
    import tempfile

    own = tempfile.mkdtemp(prefix="taichi_aot-home-")
    creator = os.getpid()

    def remove() -> None:
        if os.getpid() == creator:  # not in a forked child, whose parent still lives in it
            shutil.rmtree(own, ignore_errors=True)

    atexit.register(remove)
    os.environ[PRIVATE] = own
    os.environ["HOME"] = own
    return f"{why}: a private folder of this process, {own}"
