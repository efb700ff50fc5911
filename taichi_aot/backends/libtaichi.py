"""libtaichi_c_api as a launch backend: every kernel and graph a module holds, launched by ``ti_launch_kernel`` and
``ti_launch_compute_graph`` (``_csrc/launch.c``), the reference and the fallback of the others.

What differs from the own launches: arguments are ``TiArgument``s whose ndarrays are the library's ``TiMemory``
(foreign arrays are imported), scalars only of the widths the C-API carries (i32, f32; others go as their nearest,
checked by the packers), errors are the library's last error (thread-local, read once), and on CUDA it launches on a
stream of its own: it cannot run on a non-blocking stream nor be captured into a CUDA graph (launch.c refuses it,
``TAICHI_AOT_REFUSED``).
"""

from __future__ import annotations

from .._native import lib
from ..errors import make_error, take_last_error

__all__ = ["NAME", "launch_error"]

#: The backend's name, as ``Kernel.launcher`` and ``AotModule.launchers()`` say it.
NAME = "taichi"
KERNEL, GRAPH = lib.TAICHI_AOT_KIND_KERNEL, lib.TAICHI_AOT_KIND_GRAPH


def launch_error(code: int, what: str) -> Exception:
    """The exception of a launch's error ``code``: the library's own, with its last message."""
    c, message = take_last_error()
    return make_error(c or code, message, what)
