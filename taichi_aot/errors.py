"""Exceptions: one class per ``TiError`` code, and the funnel every C call goes through.

Every class derives from :class:`TaichiError` and from the builtin exception a
Python user would expect (``ValueError``, ``KeyError``, ``MemoryError``, ...), so
``except KeyError`` catches an unknown kernel name as naturally as
``except NameNotFoundError`` does.
"""

from __future__ import annotations

import threading

from ._native import ffi, lib
from .enums import Error


class TaichiError(Exception):
    """Base of every taichi_aot error. Never raised bare.

    Attributes:
        code: the ``TiError`` value (negative), or 0 for errors raised by taichi_aot itself.
        message: the text, without the class name.
    """

    code: int = 0

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:  # KeyError would otherwise repr() its argument
        return self.message


class NotSupportedError(TaichiError, NotImplementedError):
    """The operation is not supported by this backend or library build (TI_ERROR_NOT_SUPPORTED)."""

    code = Error.NOT_SUPPORTED


class CorruptedDataError(TaichiError, ValueError):
    """A module or other input is malformed (TI_ERROR_CORRUPTED_DATA)."""

    code = Error.CORRUPTED_DATA


class NameNotFoundError(TaichiError, KeyError):
    """No kernel, graph or other object of that name (TI_ERROR_NAME_NOT_FOUND)."""

    code = Error.NAME_NOT_FOUND


class InvalidArgumentError(TaichiError, ValueError):
    """An argument has a wrong value (TI_ERROR_INVALID_ARGUMENT)."""

    code = Error.INVALID_ARGUMENT


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument has the wrong Python type (raised by taichi_aot before calling C)."""


class ReadOnlyArrayError(InvalidArgumentError):
    """An array its owner made immutable (a read-only numpy array or export, a JAX array) was passed for a kernel
    argument the kernel may write: it would be written behind its owner's back, or its writes dropped."""


class ArgumentNullError(TaichiError, ValueError):
    """A required handle or pointer is null (TI_ERROR_ARGUMENT_NULL)."""

    code = Error.ARGUMENT_NULL


class ArgumentOutOfRangeError(InvalidArgumentError):
    """An argument is outside its valid range (TI_ERROR_ARGUMENT_OUT_OF_RANGE): a device that does not exist, an
    image larger than the device takes. An :class:`InvalidArgumentError` too (so a ``ValueError``)."""

    code = Error.ARGUMENT_OUT_OF_RANGE


class ArgumentNotFoundError(TaichiError, KeyError):
    """A required (named) argument is missing (TI_ERROR_ARGUMENT_NOT_FOUND)."""

    code = Error.ARGUMENT_NOT_FOUND


class InvalidInteropError(TaichiError, ValueError):
    """An interop structure does not describe a usable object (TI_ERROR_INVALID_INTEROP)."""

    code = Error.INVALID_INTEROP


class InvalidStateError(TaichiError, RuntimeError):
    """The object or library is in a state that forbids the call (TI_ERROR_INVALID_STATE)."""

    code = Error.INVALID_STATE


class ExportError(InvalidStateError, BufferError, ValueError):
    """An ndarray cannot be handed to another library as asked: its memory cannot be shared without a copy
    and no copy is allowed, or the consumer cannot be given what it asks for. A ``BufferError`` too (what the
    DLPack protocol raises) and a ``ValueError`` (what numpy's ``copy=False`` raises)."""


class ClosedError(InvalidStateError):
    """The object (or its runtime) has been closed."""


class WrongThreadError(InvalidStateError):
    """A runtime (or one of its objects) was used from a thread other than the one that created it."""


class WrongProcessError(InvalidStateError):
    """A runtime (or one of its objects) was used in a process other than the one that created it (os.fork)."""


class MissingFileError(TaichiError, FileNotFoundError):
    """A module path does not exist."""


class IncompatibleModuleError(TaichiError, ValueError):
    """The module was built for another arch or an incompatible Taichi (TI_ERROR_INCOMPATIBLE_MODULE)."""

    code = Error.INCOMPATIBLE_MODULE


class OutOfMemoryError(TaichiError, MemoryError):
    """The device or host ran out of memory (TI_ERROR_OUT_OF_MEMORY)."""

    code = Error.OUT_OF_MEMORY


class UnknownError(TaichiError, RuntimeError):
    """The library reported an error code this version of taichi_aot does not know."""


_BY_CODE: dict[int, type[TaichiError]] = {
    cls.code: cls
    for cls in (
        NotSupportedError,
        CorruptedDataError,
        NameNotFoundError,
        InvalidArgumentError,
        ArgumentNullError,
        ArgumentOutOfRangeError,
        ArgumentNotFoundError,
        InvalidInteropError,
        InvalidStateError,
        IncompatibleModuleError,
        OutOfMemoryError,
    )
}


def error_class(code: int) -> type[TaichiError]:
    """The exception class for a ``TiError`` code."""
    return _BY_CODE.get(code, UnknownError)


def make_error(code: int, message: str, what: str) -> TaichiError:
    """Build the exception for ``code``, its message prefixed by the call that failed."""
    cls = error_class(code)
    if code == InvalidStateError.code and message.rstrip().endswith("Not supported."):
        # 1.7.4 reports unimplemented backend operations (d2d copy and images
        # on x64, .tcm bytes on LLVM) as INVALID_STATE "...Not supported."
        cls = NotSupportedError
    text = f"{what}: {message}" if message else what
    if cls is UnknownError:
        text = f"{text} (unknown TiError code {code})"
    return cls(text, code)


_NULL = ffi.NULL
_get_last_error = lib.ti_get_last_error
_set_last_error = lib.ti_set_last_error


class _Taken(threading.local):
    """The last error this thread took from the library: ``(code, message)`` (what ``get_last_error`` reads)."""

    code = 0
    message = ""


taken = _Taken()


def take_last_error() -> tuple[int, str]:
    """Read and clear the calling thread's last error: ``(code, message)``.

    The error stays readable afterwards through ``taken`` (``capi.get_last_error()``)."""
    code = _get_last_error(_NULL, _NULL)
    if code == 0:
        return 0, ""
    size = ffi.new("uint64_t *", 0)
    _get_last_error(size, _NULL)
    buf = ffi.new("char[]", int(size[0]) + 1)
    size[0] = len(buf)
    _get_last_error(size, buf)
    _set_last_error(0, _NULL)
    message = ffi.string(buf).decode("utf-8", "replace")
    taken.code, taken.message = int(code), message
    return int(code), message


def clear_last_error() -> None:
    """Reset the calling thread's last error (the C-API keeps it until then), and what was taken of it."""
    _set_last_error(0, _NULL)
    taken.code, taken.message = 0, ""


def check(what: str) -> None:
    """The funnel: after a C call, raise the pending error of this thread, if any.

    The C-API error slot is thread-local and sticky; reading it here and clearing
    it means an old error can never be blamed on a later call.
    """
    if _get_last_error(_NULL, _NULL) != 0:
        code, message = take_last_error()
        raise make_error(code, message, what)


class PoolError(TaichiError, RuntimeError):
    """Base of the errors of a :class:`taichi_aot.pool.Pool` (its workers are processes or Ray actors)."""


class WorkerStartError(PoolError):
    """A worker could not start (a module that does not load, a backend that is missing, a failing ``setup``).

    Attributes:
        remote_traceback: the worker's traceback text, or "" when it died before it could send one.
    """

    def __init__(self, message: str, remote_traceback: str = ""):
        super().__init__(message)
        self.remote_traceback = remote_traceback


class WorkerCrashedError(PoolError):
    """A task's worker died (segfault, abort, ``kill -9``) on every attempt the pool allowed.

    Attributes:
        item: the task's item; index: its position in ``map``'s items (None for ``submit``);
        attempts: how many workers it was given; exitcodes: how each of them ended (negative: a signal).
    """

    def __init__(self, message: str, item: object = None, index: int | None = None, attempts: int = 0,
                 exitcodes: tuple[int | None, ...] = ()):
        super().__init__(message)
        self.item, self.index, self.attempts, self.exitcodes = item, index, attempts, exitcodes


class WorkerTaskError(PoolError):
    """A task raised an exception that could not be sent back as itself (it cannot be pickled), or sent a
    result that cannot be pickled; the text names the exception type and its message.

    Attributes:
        type_name: the qualified name of the worker's exception type; remote_traceback: its traceback text.
    """

    def __init__(self, message: str, type_name: str = "", remote_traceback: str = ""):
        super().__init__(message)
        self.type_name, self.remote_traceback = type_name, remote_traceback


class PoolClosedError(PoolError):
    """The pool was closed (or a map interrupted) before the task could finish."""
