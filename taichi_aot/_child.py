"""The package's child processes: each runs the package's code, never the program's own script.

``python -c CODE`` where the executable is Python. In a frozen app (PyInstaller, Nuitka, cx_Freeze), whose
executable is the app, the app itself, handed CODE through an inherited pipe, which the package's PyInstaller
run-time hook (``taichi_aot/_pyinstaller``) or ``taichi_aot.freeze_support()`` runs in place of the app.
:data:`CHILD_VARIABLE` names the pipe and a random token made for that child alone, which the pipe's content must
begin with: the variable set from outside (with no such pipe, or another token) runs nothing, and the app runs as it
is. An app that serves children says so in :data:`ENTRY_VARIABLE` (its executable); where none does, the package
starts no child (its questions are answered in the process, and not kept).

Nothing of the package is imported here.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import subprocess

#: The folder holding the taichi_aot in use: the children start there, so they import this same package
#: whatever the caller's working directory holds (a checkout's unbuilt copy there shadowed an installed one,
#: and its import error was kept as the probe's answer, or as a module's crash).
_PACKAGE_HOME = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


#: ``FD:TOKEN`` for a child of a frozen app: the inherited pipe holding ``TOKEN``, a newline and the code the child
#: runs in place of the app (:func:`serve_child`).
CHILD_VARIABLE = "TAICHI_AOT_CHILD"
#: The executable of the frozen app that serves CHILD_VARIABLE (set by the run-time hook or freeze_support()).
ENTRY_VARIABLE = "TAICHI_AOT_CHILD_ENTRY"
#: The child's first line: the package's code runs there (not, say, a frozen app's own script).
_STARTED = "taichi_aot-child:started"


class NoChildError(Exception):
    """A frozen app that runs no child of the package (neither the run-time hook nor freeze_support())."""


def frozen_executable() -> str | None:
    """The executable of the frozen app this process is (PyInstaller: ``sys.frozen``; Nuitka: ``__compiled__``),
    else None."""
    if getattr(sys, "frozen", False):
        return sys.executable
    if "__compiled__" in globals() and sys.argv and sys.argv[0]:  # Nuitka: sys.executable names no real file
        return os.path.abspath(sys.argv[0])
    return None


def app_identity() -> str | None:
    """What names this frozen app from one start to the next (None unfrozen): Nuitka's one-file binary (the
    process itself runs from a folder unpacked anew at every start, where its ``sys.executable`` lies), as its
    bootstrap names it (``NUITKA_ONEFILE_BINARY``) or as it was started (``__compiled__.original_argv0``), else
    :func:`frozen_executable`."""
    import shutil

    compiled = globals().get("__compiled__")
    if compiled is not None:
        started = getattr(compiled, "original_argv0", None) or ""
        for found in (os.environ.get("NUITKA_ONEFILE_BINARY", ""),
                      started if os.sep in started else shutil.which(started) if started else ""):
            if found and os.path.isfile(found):
                return os.path.abspath(found)
    return frozen_executable()


def child_code(handed: str | None) -> str | None:
    """The code a child of the package is to run, from CHILD_VARIABLE's value ``handed``: read from the pipe it
    names (closed after), where that pipe's content begins with its token; else None (not a child the package
    started: the variable came from elsewhere). The package's parent wrote the whole content and closed the pipe
    before the child started: a pipe still open for writing is another's, and is not waited on."""
    fd_text, _, token = (handed or "").partition(":")
    if not fd_text.isdigit() or int(fd_text) < 3 or len(token) < 32:
        return None
    fd = int(fd_text)
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return None
        os.set_blocking(fd, False)
        with os.fdopen(fd, "rb", buffering=0) as pipe:
            chunks = [pipe.read(1 << 16)]
            while chunks[-1]:
                chunks.append(pipe.read(1 << 16))
    except (OSError, ValueError):
        return None
    if chunks[-1] is None:  # no end yet: its writer is still there
        return None
    given, _, code = b"".join(chunks).partition(b"\n")
    return code.decode("utf-8") if given == token.encode() else None


def serve_child() -> None:
    """In a frozen app, first thing (``taichi_aot.freeze_support()``): where this process is a child the package
    started, run its code and exit; else note that the app serves the package's children."""
    code = child_code(os.environ.pop(CHILD_VARIABLE, None))
    app = frozen_executable()
    if app is not None:
        os.environ[ENTRY_VARIABLE] = app
    if code is None:
        return
    status: Any = 0
    try:
        exec(compile(code, "<taichi_aot child>", "exec"), {"__name__": "__taichi_aot_child__"})
    except SystemExit as e:
        status = e.code
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status if isinstance(status, int) else 1)


def run_child(code: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``code`` run with ``args`` (``sys.argv[1:]``) in a child process of this environment, its first line
    _STARTED; TimeoutExpired past ``timeout``; NoChildError in a frozen app that serves none."""
    import secrets
    import subprocess

    code = f"print({_STARTED!r}, flush=True)\n{code}"
    env = os.environ.copy()
    app = frozen_executable()
    if app is None:
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                              env=env, cwd=_PACKAGE_HOME)
    if env.get(ENTRY_VARIABLE) != app:
        raise NoChildError
    token = secrets.token_hex(16)
    read, write = os.pipe()
    try:
        with os.fdopen(write, "wb") as pipe:  # the pipe's buffer (64 KiB) holds it: the child reads it at its start
            pipe.write(f"{token}\n{code}".encode())
        env[CHILD_VARIABLE] = f"{read}:{token}"
        return subprocess.run([app, *args], capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=_PACKAGE_HOME, pass_fds=(read,))
    finally:
        os.close(read)


def started(proc: subprocess.CompletedProcess[str]) -> bool:
    """Whether the child ran the package's code (a frozen app that ran its own script instead did not)."""
    return proc.stdout.startswith(_STARTED)
