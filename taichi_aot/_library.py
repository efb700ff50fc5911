"""Find and load libtaichi_c_api, prepare what its backends need, check its version.

Search order:

1. ``TAICHI_C_API_INSTALL_DIR`` when set (and then nothing else: an explicit
   choice that does not work is an error, not a reason to pick another library);
2. the copy bundled in this package (``taichi_aot/_lib``, put there by the build: ``_bundle.py``);
3. the ``c_api`` folder of every installed ``taichi`` wheel on ``sys.path``
   (``taichi/_lib/c_api``), found without importing ``taichi``.

The first library that loads and reports a compatible C-API version wins.
Anything else raises ``ImportError`` naming every place searched and what was
seen there.

What the library prints: it logs a warning for every error it records. Its logger
is pointed at a file of ours at import (nothing of the process's own output is
redirected); :class:`Quiet` collects what it logged during a call, and
:func:`check_quiet` attaches that to the exception when the call fails. Its Vulkan
layer reports a pipeline the driver refused only on ``std::cerr``: :class:`Cerr`
points file descriptor 2 at a file of ours for the one call that makes pipelines
(a kernel's or graph's look-up).
"""

from __future__ import annotations

import faulthandler
import importlib.util
import logging
import os
import sys
import threading
from typing import NamedTuple

from . import _home
from ._bundle import BUNDLE_DIR
from ._native import ffi, lib
from ._trust import untrusted_file
from .enums import Error
from .errors import make_error, take_last_error

#: C-API version of the vendored headers this extension was compiled against.
HEADER_VERSION: int = lib.TI_C_API_VERSION
#: The Taichi release the vendored headers come from (every 1.7.x reports C-API 1007000).
TAICHI_RELEASE = "1.7.4"

if sys.platform == "win32":  # pragma: no cover - Linux is what we build and test
    _LIB_NAMES = (os.path.join("bin", "taichi_c_api.dll"), os.path.join("lib", "taichi_c_api.dll"))
elif sys.platform == "darwin":  # pragma: no cover
    _LIB_NAMES = (os.path.join("lib", "libtaichi_c_api.dylib"),)
else:
    _LIB_NAMES = (os.path.join("lib", "libtaichi_c_api.so"),)


class LibraryInfo(NamedTuple):
    """The libtaichi_c_api in use."""

    path: str  # the shared library file
    install_dir: str  # the folder holding lib/, include/, runtime/
    version: int  # what ti_get_version() reported
    source: str  # where it was found: "TAICHI_C_API_INSTALL_DIR", "bundled" or "taichi wheel"


def format_version(version: int) -> str:
    """1007000 -> '1.7.0'."""
    return f"{version // 1000000}.{version // 1000 % 1000}.{version % 1000}"


def is_compatible(version: int) -> bool:
    """Same major and minor C-API version as the vendored headers."""
    return version // 1000 == HEADER_VERSION // 1000


def candidate_dirs() -> list[tuple[str, str]]:
    """``(source, install_dir)`` pairs, in search order."""
    explicit = os.environ.get("TAICHI_C_API_INSTALL_DIR")
    if explicit:
        return [("TAICHI_C_API_INSTALL_DIR", os.path.abspath(os.path.expanduser(explicit)))]
    found: list[tuple[str, str]] = []
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), BUNDLE_DIR)
    if os.path.isdir(bundled):
        found.append(("bundled", bundled))
    try:
        spec = importlib.util.find_spec("taichi")  # locates the package without running it
    except (ImportError, ValueError):
        spec = None
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    for entry in sys.path:
        if entry and os.path.isdir(os.path.join(entry, "taichi")):
            roots.append(os.path.join(entry, "taichi"))
    seen = set()
    for root in roots:
        install_dir = os.path.realpath(os.path.join(root, "_lib", "c_api"))
        if install_dir not in seen:
            seen.add(install_dir)
            found.append(("taichi wheel", install_dir))
    return found


def library_file(install_dir: str) -> str | None:
    """The shared library inside an install folder, or None."""
    for name in _LIB_NAMES:
        path = os.path.join(install_dir, name)
        if os.path.isfile(path):
            return path
    return None


def _prepare_environment(install_dir: str) -> None:
    # libtaichi_c_api 1.7.4 aborts where HOME is unset (env -i, systemd units, some containers), and every library
    # of the process reads it: one that is this user's alone, never a shared folder (_home)
    _home.ensure_home()
    # The LLVM backends (x64, CUDA) read their runtime bitcode from TI_LIB_DIR
    # and fail to create a runtime without it; respect a user's own setting, unless another user could have
    # written what it holds (the bitcode becomes code this process runs)
    runtime_dir = os.path.join(install_dir, "runtime")
    given = os.environ.get("TI_LIB_DIR")
    if given:
        why = untrusted_file(given, folder=True)
        if not why:
            return
        import warnings

        warnings.warn(f"taichi_aot: TI_LIB_DIR={given} is ignored: {why}; another user could plant the code the "
                      f"LLVM backends run there (chmod go-w it, or unset TI_LIB_DIR)", RuntimeWarning, stacklevel=2)
    if os.path.isdir(runtime_dir):
        os.environ["TI_LIB_DIR"] = runtime_dir
    elif given:
        del os.environ["TI_LIB_DIR"]


def _left_out(bundled: str | None) -> str:
    """In a frozen app, what its freezer left out of the package's bundle (``bundled``: the folder it kept without
    the library; None: no folder at all) and how to put it in; "" elsewhere."""
    from ._child import frozen_executable

    app = frozen_executable()
    if app is None:
        return ""
    how = (f"PyInstaller's hook (in the wheel) collects it; Nuitka: --include-package-data=taichi_aot, then copy "
           f"the installed taichi_aot/{BUNDLE_DIR}/lib folder into the app's taichi_aot/{BUNDLE_DIR}/ (Nuitka leaves "
           f"shared libraries out of package data); cx_Freeze: include taichi_aot/{BUNDLE_DIR} (include_files)")
    if bundled is None:
        return (f"the freezer that made this app ({app}) left out taichi_aot/{BUNDLE_DIR}, the bundled library and "
                f"its runtime files: {how}")
    return f": the freezer that made this app ({app}) left out the bundled library's shared libraries: {how}"


def load() -> LibraryInfo:
    """Load the first compatible library; raise ImportError describing every attempt."""
    attempts: list[str] = []
    candidates = candidate_dirs()
    if not candidates:
        attempts.append(_left_out(None) or f"no bundled copy (this build was made with TAICHI_AOT_BUNDLE=0) and no "
                        f"taichi wheel on sys.path (pip install taichi=={TAICHI_RELEASE})")
    error = ffi.new("char[]", 1024)
    for source, install_dir in candidates:
        path = library_file(install_dir)
        if path is None:
            attempts.append(f"{source}: {install_dir}: no {' or '.join(_LIB_NAMES)} there"
                            + (_left_out(install_dir) if source == "bundled" else ""))
            continue
        if source != "bundled":  # a folder a variable or sys.path names: refused where another user could write it
            why = untrusted_file(path) or (untrusted_file(os.path.join(install_dir, "runtime"), folder=True)
                                           if os.path.isdir(os.path.join(install_dir, "runtime")) else "")
            if why:
                attempts.append(f"{source}: {path}: not loaded: {why}, so another user could plant code this "
                                f"process would run (chmod go-w, or copy the library to a folder of your own)")
                continue
        _prepare_environment(install_dir)
        missing = lib.taichi_aot_load(os.fsencode(path), error, len(error))
        if missing < 0:
            said = ffi.string(error).decode("utf-8", "replace")
            hint = ""
            if "libX11" in said:
                hint = " (the library needs libX11: apt-get install libx11-6, dnf install libX11)"
            attempts.append(f"{source}: {path}: cannot be loaded: {said}{hint}")
            continue
        if not lib.taichi_aot_has_symbol(b"ti_get_version"):
            attempts.append(f"{source}: {path}: not a Taichi C-API library (no ti_get_version)")
            lib.taichi_aot_unload()
            continue
        version = int(lib.ti_get_version())
        if not is_compatible(version):
            attempts.append(
                f"{source}: {path}: C-API version {version} ({format_version(version)}), "
                f"need {HEADER_VERSION // 1000000}.{HEADER_VERSION // 1000 % 1000}.x"
            )
            lib.taichi_aot_unload()
            continue
        return LibraryInfo(path, install_dir, version, source)
    raise ImportError(
        "taichi_aot could not load a compatible libtaichi_c_api "
        f"(built against C-API {HEADER_VERSION}, the headers of Taichi {TAICHI_RELEASE}). Searched:\n  "
        + "\n  ".join(attempts)
        + "\nReinstall taichi_aot from a wheel that bundles the library, install the taichi wheel "
        f"(pip install taichi=={TAICHI_RELEASE}), or set TAICHI_C_API_INSTALL_DIR to a Taichi C-API install folder "
        "(the one holding lib/ and runtime/)."
    )


#: The library loaded at import.
info: LibraryInfo = load()

#: Whether libtaichi's calls on a CPU runtime are made one at a time (``_csrc/backends/cpucalls.c``: its trampolines'
#: wrappers, in place before any runtime), so that any thread may use a CPU runtime (``placement/host.py``).
cpu_calls: bool = bool(lib.taichi_aot_cpu_calls_hook())

#: The variable that turns off the reuse of libtaichi's Vulkan fences (``0``): the library then reaches Vulkan
#: untouched.
FENCES_VARIABLE = "TAICHI_AOT_VULKAN_FENCES"


def _hook_fences() -> tuple[bool, str]:
    """Point libtaichi's Vulkan fences at a pool (``_csrc/vkfence.c``) before its first Vulkan runtime: whether
    it is on, and why not."""
    if os.environ.get(FENCES_VARIABLE, "").strip() == "0":
        return False, f"{FENCES_VARIABLE}=0"
    patched = lib.taichi_aot_hook_vulkan_fences(1)
    if patched <= 0:
        return False, "the library's calls of dlsym could not be redirected here" if patched < 0 else \
            "the library calls no dlsym"
    return True, ""


#: Whether libtaichi's Vulkan fences are reused (``_csrc/vkfence.c``), and why not.
fences, fences_why_not = _hook_fences()

#: Held while the library creates or destroys a runtime or loads a module (LLVM compiles code then, and the
#: library takes locks of its own). A fork waits for it (os.register_at_fork), so a child never starts with
#: such a call half done in another thread, whose locks it would inherit held: creating a runtime there hung.
busy = threading.RLock()


def _fork_before() -> None:
    busy.acquire()


def _fork_after_in_parent() -> None:
    busy.release()


def _fork_after_in_child() -> None:
    global busy
    busy = threading.RLock()  # the parent's is held by the forking thread, which the child does not have


os.register_at_fork(before=_fork_before, after_in_parent=_fork_after_in_parent,
                    after_in_child=_fork_after_in_child)


# ---------------------------------------------------------------------------
# What the library prints. libtaichi_c_api logs a warning line for every error it records (and for
# some it only reports, such as an unreadable metadata file) through a logger that holds on to the C
# ``stderr`` stream it found when it was created. So the logger is created once, at import, while the C
# library's ``stderr`` variable points at a file of ours: from then on the library's log lines go to
# that file, and nothing else is touched. Python's own sys.stdout/sys.stderr, the application's threads
# and its logging write to the file descriptors, which are never redirected.

_VERBOSE_LEVELS = {"trace", "debug", "info", "warn", "warning"}
_SINK_LIMIT = 1 << 20  # the log file is emptied when it grows past this


def library_output_enabled() -> bool:
    """Whether libtaichi_c_api's own log lines reach stderr (``TI_LOG_LEVEL`` or ``TAICHI_AOT_VERBOSE``)."""
    if os.environ.get("TAICHI_AOT_VERBOSE", "") not in ("", "0"):
        return True
    return os.environ.get("TI_LOG_LEVEL", "").lower() in _VERBOSE_LEVELS


class _LogSink:
    """The file the library's logger writes to, and the C stream over it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # Quiet sections may nest
        self._fd = -1  # a file with no name (_unnamed_file), open for the life of the process
        self._stream: object = None
        self._forwarded = 0  # where the lines not yet given to Python's logging begin

    def route(self) -> None:
        """Create the library's logger with its stream pointing here (once, at import)."""
        if library_output_enabled():
            return
        fd = _unnamed_file()
        stream = lib.taichi_aot_stdio_open(os.dup(fd))
        if stream == ffi.NULL:
            os.close(fd)
            return
        saved = lib.taichi_aot_stdio_swap(2, stream)
        try:
            # the first log line creates the logger, which keeps the stream it finds now
            lib.ti_set_last_error(Error.INVALID_STATE, b"taichi_aot: the library's log goes to a file from here")
            lib.ti_set_last_error(Error.SUCCESS, ffi.NULL)
        finally:
            lib.taichi_aot_stdio_swap(2, saved)
        self._stream, self._fd = stream, fd
        self._forwarded = self.position()  # the line above is ours: not the library's to forward

    def divert_stdout(self) -> object:
        """Point the C ``stdout`` stream here (the library printf()s blank lines on some errors); returns what
        to give :meth:`restore_stdout`. Only C stdio output of the calling moment is diverted: Python's own
        output goes to the file descriptors, which stay where they are."""
        if self._fd < 0:
            return None
        self._lock.acquire()
        return lib.taichi_aot_stdio_swap(1, self._stream)

    def restore_stdout(self, saved: object) -> None:
        """Undo :meth:`divert_stdout`."""
        if saved is None:
            return
        lib.taichi_aot_stdio_flush(self._stream)
        lib.taichi_aot_stdio_swap(1, saved)
        self._lock.release()

    def position(self) -> int:
        """Where the next line will be written."""
        if self._fd < 0:
            return 0
        lib.taichi_aot_stdio_flush(self._stream)
        return os.lseek(self._fd, 0, os.SEEK_END)

    def since(self, start: int) -> str:
        """What the library logged from ``start`` on (the log is emptied once it is large); everything it logged
        since the last look also goes to Python's logging (:func:`forward`)."""
        if self._fd < 0:
            return ""
        with self._lock:
            end = self.position()
            fd = self._fd
            text = os.pread(fd, min(max(end - start, 0), 65536), start).decode("utf-8", "replace")
            if self._forwarded < end:
                new = os.pread(fd, min(end - self._forwarded, 65536), self._forwarded).decode("utf-8", "replace")
                self._forwarded = end
                forward(new)
            if end > _SINK_LIMIT:
                os.ftruncate(fd, 0)  # the stream appends: its next line starts the file again
                self._forwarded = 0
        return text


def _unnamed_file() -> int:
    """A file with no name, open for reading and writing: memory of this process's own (``memfd_create``: no
    folder another user can write is touched), else an unlinked temporary file; tempfile is imported only there."""
    if hasattr(os, "memfd_create"):
        try:
            return os.memfd_create("taichi_aot-log", getattr(os, "MFD_CLOEXEC", 0))
        except OSError:
            pass
    import tempfile

    with tempfile.TemporaryFile() as file:
        return os.dup(file.fileno())


#: Where the library's log lines go in Python: ``logging.getLogger("taichi_aot")``, with a NullHandler, so that
#: nothing is printed unless the application configures logging (``logging.basicConfig(level=logging.DEBUG)``).
logger = logging.getLogger("taichi_aot")
logger.addHandler(logging.NullHandler())
# spdlog's level letters, as the library's lines begin ("[W 11/23/26 17:02:01.123 42] [file:line@fn] ...")
_LEVELS = {"T": logging.DEBUG, "D": logging.DEBUG, "I": logging.INFO, "W": logging.WARNING, "E": logging.ERROR,
           "C": logging.CRITICAL}


def forward(text: str) -> None:
    """Give lines the library logged to Python's logging, at their own level; a "C-API error" line, which the call
    that caused it raises as an exception, at DEBUG."""
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        level = _LEVELS.get(line[1:2], logging.INFO) if line.startswith("[") else logging.INFO
        if "C-API error:" in line:
            level = logging.DEBUG
        logger.log(level, "libtaichi_c_api: %s", line)


_sink = _LogSink()


class Quiet:
    """Context manager around a C call that may log: ``.output`` holds what the library logged meanwhile.

    The library's log never reaches the process's stderr (see above); this collects it, to attach to
    the exception when the call fails. For the call's duration the C ``stdout`` stream points at the
    same file too (the library printf()s blank lines on some errors); file descriptors are not moved (that is
    :class:`Cerr`'s, for the one call that needs it).
    """

    __slots__ = ("_saved", "_start", "output")

    def __init__(self) -> None:
        self._start = 0
        self._saved: object = None
        self.output = ""

    def __enter__(self) -> Quiet:
        self._start = _sink.position()
        self._saved = _sink.divert_stdout()
        return self

    def __exit__(self, *exc: object) -> None:
        _sink.restore_stdout(self._saved)
        self.output = _sink.since(self._start)


class Cerr:
    """Context manager around a C call whose C++ code may write to ``std::cerr`` (libtaichi_c_api's Vulkan layer
    reports a pipeline the driver refused only so): file descriptor 2 points at a file of ours for the call, and
    ``.text`` holds what was written. "RHI Error" lines are kept out of the process's stderr (the caller raises
    them; with ``TAICHI_AOT_VERBOSE`` they go there too); anything else written meanwhile (another thread's
    output) goes to stderr after the call. Python's fault handler, if enabled, writes to the real stderr for the
    call; should the process die inside it, what the library wrote stays in the file (its path: ``.path``).
    Calls under it are serialized. While the process runs other Python threads, nothing is captured: their
    output, held back for the call, would come out after lines they wrote later."""

    __slots__ = ("_fault", "_file", "_saved", "path", "text")
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.text, self.path, self._saved, self._fault = "", "", -1, False

    def __enter__(self) -> Cerr:
        self._lock.acquire()
        if threading.active_count() > 1:  # another thread's output would be held back and come out of order
            return self
        try:
            if sys.stderr is not None:
                sys.stderr.flush()
            import tempfile

            fd, self.path = tempfile.mkstemp(prefix=f"taichi_aot-{os.getpid()}-", suffix=".log")
            self._file = os.fdopen(fd, "w+b")
            self._saved = os.dup(2)
            self._fault = faulthandler.is_enabled()
            if self._fault:
                faulthandler.enable(file=self._saved)
            os.dup2(self._file.fileno(), 2)
        except OSError:  # no descriptor 2 (closed) or no temporary file: the call runs uncaptured
            self._restore()
            self._lock.acquire()  # released again by __exit__
            self.text = ""
        except BaseException:
            self._restore()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _restore(self) -> None:
        try:
            if self._saved >= 0:
                os.dup2(self._saved, 2)
                os.close(self._saved)
                self._saved = -1
            if self._fault and sys.stderr is not None:
                faulthandler.enable(file=sys.stderr)
            self._fault = False
            if self.path:
                self._file.seek(0)
                self.text = self._file.read().decode("utf-8", "replace")
                self._file.close()
                os.unlink(self.path)
                self.path = ""
        finally:
            self._lock.release()
        keep = library_output_enabled()
        others = "".join(line for line in self.text.splitlines(True) if keep or "RHI Error" not in line).encode()
        try:
            while others:
                others = others[os.write(2, others):]
        except OSError:
            pass  # no stderr to give it back to


def check_quiet(what: str, q: Quiet) -> None:
    """Like ``errors.check``, for a call made under :class:`Quiet`: the library's own words join the message."""
    if lib.ti_get_last_error(ffi.NULL, ffi.NULL) != 0:
        code, message = take_last_error()
        detail = _library_detail(q.output, message)
        raise make_error(code, message + detail, what)


def _library_detail(output: str, message: str) -> str:
    lines = []
    for line in output.splitlines():
        line = line.strip()
        if not line or "C-API error:" in line or (message and line.endswith(message)):
            continue
        lines.append(line)
    if not lines:
        return ""
    return " [library said: " + " | ".join(lines[-3:])[:600] + "]"


_sink.route()
