"""AOT modules: loading a folder, a ``.tcm`` file or ``.tcm`` bytes on every backend, and their kernels
and compute graphs by name.

Before C sees a module, its metadata is read (:mod:`taichi_aot.metadata`): corrupt
input raises :class:`~taichi_aot.errors.CorruptedDataError`, and a module built for
another backend family, another LLVM arch or another Taichi minor version raises
:class:`~taichi_aot.errors.IncompatibleModuleError`. Kernels and graphs are
:class:`~taichi_aot.launch.Kernel` and :class:`~taichi_aot.launch.ComputeGraph`.
"""

from __future__ import annotations

import functools
import os
import shutil
import threading
import weakref
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Callable, Generic, Literal, NamedTuple, TypeVar

from . import _firstload, _probe, capi, metadata
from ._lifetime import Child, Owned, Parent, unpicklable
from .backends import ModuleBackends
from .backends import launchers as launcher_choice
from .enums import CPU_ARCHS, LLVM_ARCHS
from .errors import (
    ArgumentTypeError,
    CorruptedDataError,
    InvalidArgumentError,
    MissingFileError,
    NameNotFoundError,
)
from .launch import ComputeGraph, Kernel, ReturningKernel
from .metadata.model import GraphInfo, KernelInfo
from .metadata.private import copy_module, copy_reason, private_folder
from .metadata.source import ModuleSource, extract_archive, is_zip

if TYPE_CHECKING:  # pragma: no cover

    from .metadata import ModuleInfo

__all__ = ["AotModule", "ModuleSource"]

_E = TypeVar("_E", Kernel, ComputeGraph)


def _release_module(module: Any, temp_dir: str | None, backends: ModuleBackends | None = None,
                    inside: Callable[[], AbstractContextManager[None]] = nullcontext) -> None:
    try:
        if backends is not None:
            backends.unload()
        if module is not None:  # None: the own CUDA runtime's, which libtaichi never loaded
            with inside():  # the runtime's device's context for libtaichi (CUDA: device 0's, whatever is current)
                capi.destroy_aot_module(module)
    finally:
        if temp_dir:
            shutil.rmtree(temp_dir, ignore_errors=True)


class _Source(NamedTuple):
    """A module source checked and read (``_open``): what C loads, and the key its loaded module is shared by."""

    data: bytes | None  # .tcm bytes (of the part for this arch), or None for a path
    path: str | None
    what: str  # for messages
    meta: ModuleInfo
    key: str  # the content's digest


def _digest(data: bytes | None, path: str | None) -> str:
    """The digest of a module's content: its bytes, a folder's files (names and contents) or a file's bytes."""
    import hashlib

    h = hashlib.sha256()
    if data is not None:
        h.update(data)
    elif path is not None and os.path.isdir(path):
        _firstload.hash_module_files(h, path)
    elif path is not None:
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def _open(runtime: Parent, source: object) -> _Source:
    """Check ``source`` and read its metadata (corrupt input raises here, before C sees it)."""
    data: bytes | None = None
    path: str | None = None
    source = metadata.loadable(source)  # an importlib.resources file of a zipped package: its bytes
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        if not data:
            raise CorruptedDataError("load_module: empty module data")
        if not is_zip(data):
            raise CorruptedDataError("load_module: the bytes are not a .tcm archive")
    elif isinstance(source, (str, os.PathLike)):
        path = os.fsdecode(os.fspath(source))
        if not os.path.exists(path):
            raise MissingFileError(f"load_module: no module at {path!r}{metadata.nearest_module(path)}")
        if os.path.isfile(path) and os.path.getsize(path) == 0:
            raise CorruptedDataError(f"load_module: {path!r} is an empty file")
    else:
        raise ArgumentTypeError(f"load_module: expected a path or bytes, got {type(source).__name__}")
    what = path if path is not None else f"<{len(data or b'')} bytes>"
    # a multi-arch module gives the bytes of the part for this runtime's arch
    loadable, meta, part = metadata.open_module(data if data is not None else path, runtime.arch, what,  # type: ignore[arg-type]
                                                files=True)
    if part is not None:
        data, path, what = loadable, None, f"{what} ({part} part)"  # type: ignore[assignment]
    metadata.check_compatible(meta, runtime.arch, capi.library.version, _probe.host_cpu_arch(), what)
    # a folder's digest from its files as metadata/ read them: none is read again
    return _Source(data, path, what, meta, meta.files.digest if meta.files is not None else _digest(data, path))


def _load(runtime: Parent, src: _Source) -> tuple[Any, str | None]:
    """Load a checked source in C: ``(handle, temp dir)``; the files of a ``.tcm`` unpacked for an LLVM arch's."""
    rt, data, what, meta = runtime.handle, src.data, src.what, src.meta
    own = not runtime.device.traits.library_native  # the own CUDA runtime: its PTX is loaded, libtaichi loads nothing
    temp_dir = None
    try:
        if runtime.arch in LLVM_ARCHS:
            data, what, temp_dir = _llvm_folder(data, what, meta)
        files = meta.files  # the folder's files as metadata/ read them, while `what` holds them as they are
        if runtime.arch in CPU_ARCHS and runtime.cpu_threads and data is None:
            what, temp_dir, retargeted = _on_threads(what, temp_dir, runtime.cpu_threads, meta)
            files = None if retargeted else files  # the private copy's own
        if own:
            return None, temp_dir
        # as the device loads it (placement), from the files read where it changes them
        data, what = runtime.device.module_source(data, what, files.contents if files is not None else None)
        # the metadata was read and checked above: capi's loads by that metadata do not read it again
        with runtime.device.library.context():  # CUDA: device 0's context, whatever is current
            handle = capi.create_checked(rt, data, meta) if data is not None else capi.load_checked(
                rt, what, meta, files, meta.sealed)
        return handle, temp_dir
    except BaseException:
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
        raise


def _llvm_folder(data: bytes | None, what: str, meta: ModuleInfo) -> tuple[None, str, str | None]:
    """An LLVM module as libtaichi_c_api 1.7.4 loads it: a folder (``(None, folder, private copy or None)``): it
    segfaults loading a .tcm path on LLVM backends and refuses .tcm bytes (the archive extracted to a private folder),
    and where it cannot make its lock file beside the module, or finds one there (the folder copied, from the files
    read)."""
    archive = data is not None or os.path.isfile(what)
    if not archive and not copy_reason(what):
        return None, what, None
    temp_dir = private_folder()
    try:
        if archive:
            extract_archive(data if data is not None else what, temp_dir)
        else:
            copy_module(what, temp_dir, _files_read(meta))
    except BaseException:
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    return None, temp_dir, temp_dir


def _files_read(meta: ModuleInfo) -> dict[str, bytes]:
    """The files of a module metadata/ read and holds, by name (a folder's every file: ``ModuleInfo.files``; an LLVM
    module's IR and metadata: :meth:`.LlvmCode.files`)."""
    return {**(meta.files.contents if meta.files is not None else {}), **(meta.llvm.files() if meta.llvm else {})}


def _on_threads(folder: str, temp_dir: str | None, threads: int, meta: ModuleInfo) -> tuple[str, str | None, bool]:
    """A CPU module's folder with its parallel loops on ``threads`` chunks, the runtime's threads (at most the cap
    ``build --max-cpu-threads`` recorded), whatever the machine that built it had (metadata.retarget, on the IR
    metadata/ read: ``meta.llvm``): the folder as it is where none needs a change, else the private copy
    (``temp_dir``, or one made now, written from what metadata/ read), changed there (never the user's files). A
    sealed module's copy is sealed anew: the change is the package's own. ``(folder, temp_dir, whether changed)``."""
    code = meta.llvm
    if code is None:  # not an LLVM module's
        return folder, temp_dir, False
    todo: dict[str, bytes] = {}  # file -> its text retargeted
    for name, raw in code.ir.items():
        ir = code.kernel(name, threads)
        if ir is not None and ir is not code.kernel(name) and _text(raw):  # IR this cannot read is left to the load
            todo[f"{name}.ll"] = ir.text.encode()
    if not todo:
        return folder, temp_dir, False
    was_sealed = meta.sealed if meta.files is not None else _firstload.sealed(folder)  # an archive's: its copy's
    made = temp_dir is None
    copy = private_folder() if made else temp_dir
    assert copy is not None
    try:
        if made:
            copy_module(folder, copy, {**_files_read(meta), **todo})
        else:
            for name, raw in todo.items():
                with open(os.path.join(copy, name), "wb") as f:
                    f.write(raw)
        if was_sealed:
            _firstload.seal(copy)
    except BaseException:
        if made:  # the caller knows only the folder it made
            shutil.rmtree(copy, ignore_errors=True)
        raise
    return copy, copy, True


def _text(raw: bytes) -> bool:
    """Whether a file's bytes are text (UTF-8)."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _load_library(runtime: Parent, src: _Source, folder: str | None, backends: ModuleBackends) -> Any:
    """libtaichi's load of a module on taichi_aot's own CUDA runtime, whose kernels it launches where the own launcher
    does not (its runtime made beside the own on the first such module); the own backends unloaded where it fails."""
    try:
        library = runtime.library_runtime()
        with runtime.device.library.context():  # device 0's context, whatever is current
            # a CUDA module's folder holds the files read (copied, not retargeted: that is a CPU module's)
            return capi.load_checked(library, folder if folder is not None else src.what, src.meta, src.meta.files,
                                     src.meta.sealed)
    except BaseException:
        backends.unload()
        raise


#: How many loaded modules no AotModule uses a runtime keeps, for a load of the same content to reuse.
KEEP_IDLE = 8


class _Shared:
    """A module loaded once in a runtime, shared by every :class:`AotModule` of the same content there.

    libtaichi_c_api keeps what a kernel's look-up makes (on Mesa's Vulkan, its pipelines) after its module is
    destroyed, so loading the same content again, looking a kernel up and closing it grew the process without
    end. The loaded module (and each kernel and graph looked up in it) is kept while an AotModule uses it, and
    while idle among the runtime's last ``KEEP_IDLE`` such modules; the runtime's close releases them all. Idle
    ones are let go only on the runtime's own thread (a finalizer may run on any), under one lock.
    """

    __slots__ = ("__weakref__", "backends", "folder", "handle", "handles", "idle", "key", "owned", "runtime",
                 "temp_dir", "users")
    _lock = threading.Lock()
    _clock = 0  # when each was last left, for the least recently used

    def __init__(self, runtime: Parent, key: tuple, handle: Any, temp_dir: str | None, backends: ModuleBackends,
                 folder: str | None):
        self.runtime, self.key, self.handle, self.temp_dir = weakref.ref(runtime), key, handle, temp_dir
        self.backends = backends  # which backend launches each kernel and graph; reverse-mode kernels
        self.folder = folder  # its files' folder (its own, or the archive's extracted), where it has one
        self.handles: dict[tuple[str, str], Any] = {}  # (kind, name) -> the kernel's or graph's native handle
        self.users = 0
        self.idle = 0
        inside = runtime.device.library.context
        self.owned = Owned(lambda: _release_module(handle, temp_dir, backends, inside), runtime.owned)
        runtime.foreign.unmaps[id(self)] = self.owned.close  # the runtime's close releases it first

    @classmethod
    def take(cls, runtime: Parent, key: tuple) -> tuple[_Shared | None, Owned | None]:
        """The runtime's open module of ``key`` and one more user's record of it (pinning it at once), or
        ``(None, None)``."""
        with cls._lock:
            shared = runtime.modules.get(key)
            if shared is None or shared.owned.closed:
                return None, None
            return shared, shared._user()

    def add(self, runtime: Parent) -> Owned:
        """Make it the runtime's module of its key; its first user's record."""
        with self._lock:
            runtime.modules[self.key] = self
            return self._user()

    def _user(self) -> Owned:
        self.users += 1
        return Owned(self._left, self.owned)

    def _left(self) -> None:
        runtime = self.runtime()
        with self._lock:
            self.users -= 1
            _Shared._clock += 1
            self.idle = _Shared._clock
            if self.users or runtime is None or runtime.closed or not runtime.on_its_thread():
                return
            idle = sorted((s for s in runtime.modules.values() if not s.users), key=lambda s: s.idle)
            old = idle[:max(len(idle) - KEEP_IDLE, 0)]
            for s in old:
                runtime.modules.pop(s.key, None)
                runtime.foreign.unmaps.pop(id(s), None)
        for s in old:  # no later load reuses them; released now (nothing uses them)
            s.owned.close()


def _launchers(launcher: str | None, cuda_launcher: str | None) -> str:
    """The launchers asked for by ``load_module(launcher=)`` or its old name ``cuda_launcher=`` (not both, unless they
    agree), checked: "auto" or "taichi"."""
    for name, given in (("launcher", launcher), ("cuda_launcher", cuda_launcher)):
        if given is not None and not isinstance(given, str):
            raise ArgumentTypeError(f"{name} is 'auto' or 'taichi', got {given!r}")
    chosen = launcher_choice(launcher) if launcher is not None else launcher_choice(cuda_launcher, "cuda_launcher")
    if launcher is not None and cuda_launcher is not None and launcher_choice(cuda_launcher, "cuda_launcher") != chosen:
        raise InvalidArgumentError(f"launcher={launcher!r} and its old name cuda_launcher={cuda_launcher!r} disagree: "
                                   "give launcher= only")
    return chosen


class AotModule(Child):
    """A loaded AOT module: ``AotModule(rt, source)`` or :meth:`Runtime.load_module`.

    ``source`` is a folder, a ``.tcm`` file or ``.tcm`` bytes, on every backend.
    ``module.kernels["name"]`` and ``module.graphs["name"]`` are mappings by name;
    an unknown name raises :class:`NameNotFoundError` (a KeyError) listing the names the module has.

    Raises:
        MissingFileError: no file or folder at the path (a FileNotFoundError).
        CorruptedDataError: empty, truncated or malformed module data or metadata.
        IncompatibleModuleError: built for another backend or Taichi version.
        ArgumentTypeError: ``source`` is neither a path nor bytes.
    """

    __reduce_ex__ = unpicklable("send the module's path and load it there (rt.load_module)")

    _kind = "module"

    def __init__(self, runtime: Parent, source: ModuleSource, *, launcher: str | None = None,
                 cuda_launcher: str | None = None):
        runtime.ensure_open()
        choice = _launchers(launcher, cuda_launcher)  # checked on every arch
        src = _open(runtime, source)
        key = (src.key, choice if ModuleBackends.by_choice(runtime) else "")
        shared, owned = _Shared.take(runtime, key)  # pinned from here on
        if shared is None or owned is None:
            handle, temp_dir = _load(runtime, src)
            folder = temp_dir or (src.path if src.path is not None and os.path.isdir(src.path) else None)
            try:
                backends = ModuleBackends.load(runtime, runtime.backends, src.what, folder, choice, src.meta)
                if handle is None and runtime.device.library.beside() and backends.needs_library(src.meta):
                    # the own CUDA runtime: libtaichi's runtime beside it (device 0), for the kernels only it launches;
                    # on another device they are refused when looked up, the module's others run
                    handle = _load_library(runtime, src, folder, backends)
            except BaseException:
                _release_module(handle, temp_dir, None, runtime.device.library.context)
                raise
            shared = _Shared(runtime, key, handle, temp_dir, backends, folder)
            owned = shared.add(runtime)
        if src.meta.files is not None:  # loaded: the files' bytes are not held for the module's life
            src.meta.files = src.meta.files._replace(contents={})
        self._shared = shared
        self._handle: Any = shared.handle
        self._source = src.what
        self._meta = src.meta
        self._backends = shared.backends
        self._kernels: dict[str, Kernel] = {}
        self._graphs: dict[str, ComputeGraph] = {}
        self._attach(runtime, owned)

    def kernel_info(self, name: str) -> KernelInfo | None:
        """What the module's metadata says of kernel ``name`` (its arguments; ``reverse``: a reverse-mode kernel),
        or None."""
        return self._meta.kernels.get(name)

    def _reverse(self, name: str) -> Any:
        """The reverse-mode kernel of kernel ``name`` (``<name>_grad``) as its ``grad`` call, made by its launch backend
        once (:meth:`backends.ModuleBackends.reverse`); NotSupportedError saying why where there is none or it cannot
        run here. Once made, it is returned on any thread (torch's autograd calls it from its own): its call checks
        the rest."""
        return self._backends.reverse(self, name, self._meta, self._runtime.cpu_threads)

    def launchers(self) -> dict[str, str]:
        """Which backend launches each kernel: "cuda" (taichi_aot's own CUDA launcher, from the module's PTX),
        "vulkan" (taichi_aot's own Vulkan launch, on libtaichi's device and queue), "x64" (taichi_aot's own x64
        launch, for kernels that return values or take scalars libtaichi cannot pass) or "taichi" (libtaichi), with
        the reason after a colon where the own launches leave a kernel to libtaichi; "refused: ..." for a kernel that
        returns values no backend here gives (looking it up raises NotSupportedError). A graph whose every kernel is
        "cuda" is launched by the own launcher too (``graph.launcher``)."""
        return self._backends.launchers(self.kernel_names(), self._meta)

    @property
    def handle(self) -> Any:
        """The native ``TiAotModule`` (for the flat API): every AotModule of the same content in a runtime shares
        one."""
        return self._handle

    @property
    def source(self) -> str:
        """Where the module came from (path, or a byte count)."""
        return self._source

    @property
    def files(self) -> str | None:
        """The folder its files are read from on LLVM backends (x64, CUDA): the module's own folder, or the one its
        archive (or the bytes given) was extracted to, removed with the module; None elsewhere. Another runtime may
        load it from there while this module is open (taichi_aot.jax's ops load it on every GPU)."""
        return self._shared.folder

    @property
    def metadata(self) -> ModuleInfo:
        """What the module's metadata says (arch, Taichi version, kernels and graphs with their arguments)."""
        return self._meta

    @property
    def kernels(self) -> Mapping[str, Kernel]:
        """Kernels by name."""
        return _ByName(self, "kernel")

    @property
    def graphs(self) -> Mapping[str, ComputeGraph]:
        """Compute graphs by name."""
        return _ByName(self, "graph")

    def kernel_names(self) -> list[str]:
        """The names of the kernels the module exports."""
        names = self._meta.content
        exported = [k.name for k in self._meta.exported_kernels()]  # a kernel template's instances: unlisted
        return [*names[0], *(k for k in exported if k not in names[0])] if names else exported

    def graph_names(self) -> list[str]:
        """The names of the module's compute graphs."""
        names = self._meta.content
        return list(names[1]) if names else list(self._meta.graphs)

    def _get(self, kind: Literal["kernel", "graph"], name: object) -> Kernel | ComputeGraph:
        self.ensure_open()
        cache: dict[str, Any] = self._kernels if kind == "kernel" else self._graphs
        obj = cache.get(name) if isinstance(name, str) else None
        if obj is not None:
            return obj
        name, info = self._described(kind, name)
        if isinstance(info, KernelInfo):
            choice, args = self._backends.kernel(name, info, lambda: self._library_handle("kernel", name))
            obj = (Kernel if choice.results is None else ReturningKernel)(self, name, choice, args,
                                                                          functools.partial(self._reverse, name))
        else:
            choice = self._backends.graph(info, self._library_handle("graph", name))
            obj = ComputeGraph(self, name, choice, info.args)
        cache[name] = obj
        return obj

    def _described(self, kind: Literal["kernel", "graph"], name: object) -> tuple[str, KernelInfo | GraphInfo]:
        """``name`` and what the metadata says of its kernel or graph; the errors of a name that is no str, that the
        module does not list, or whose arguments its metadata does not describe (no unchecked launch path)."""
        if not isinstance(name, str):
            raise ArgumentTypeError(f"{kind} names are str, got {type(name).__name__}")
        known = self.kernel_names() if kind == "kernel" else self.graph_names()
        listing = f"; the module has {kind}s: {', '.join(known) if known else '(none)'}"
        if name not in known:
            other: Literal["kernel", "graph"] = "graph" if kind == "kernel" else "kernel"
            if name in (self.graph_names() if other == "graph" else self.kernel_names()):
                raise NameNotFoundError(f"{name!r} is a {other} of module {self._source}, not a {kind}: use "
                                        f"module.{other}s[{name!r}]")
            raise NameNotFoundError(f"no {kind} named {name!r} in module {self._source}{listing}")
        info = self._meta.kernels.get(name) if kind == "kernel" else self._meta.graphs.get(name)
        if info is None:
            raise CorruptedDataError(
                f"module {self._source} lists {kind} {name!r}, but its metadata does not describe its arguments"
            )
        return name, info

    def _library_handle(self, kind: Literal["kernel", "graph"], name: str) -> Any:
        """libtaichi's handle of the kernel or graph ``name``, got once for every AotModule of this content."""
        handles = self._shared.handles
        if self._handle is None:  # the own CUDA runtime's module: libtaichi has none
            return None
        try:
            handle = handles.get((kind, name))
            if handle is None:
                get = capi.get_aot_module_kernel if kind == "kernel" else capi.get_aot_module_compute_graph
                handle = handles[(kind, name)] = get(self._handle, name).cdata
        except NameNotFoundError:
            self.ensure_open()  # closed meanwhile (on another thread): the look-up was refused, ClosedError says so
            raise CorruptedDataError(
                f"module {self._source} lists {kind} {name!r}, but the library cannot load it: its compiled "
                f"code is missing or damaged" + (f" ({name}.ll)" if self._meta.format == "llvm" else "")
            ) from None
        return handle

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<AotModule {self._source} on {self._runtime.arch.name} ({state})>"


class _ByName(Mapping[str, _E], Generic[_E]):
    """``module.kernels`` / ``module.graphs``: a read-only mapping of name to Kernel or ComputeGraph."""

    def __init__(self, module: AotModule, kind: Literal["kernel", "graph"]):
        self._module = module
        self._kind: Literal["kernel", "graph"] = kind

    def _names(self) -> list[str]:
        m = self._module
        return m.kernel_names() if self._kind == "kernel" else m.graph_names()

    def __getitem__(self, name: str) -> _E:
        return self._module._get(self._kind, name)  # type: ignore[return-value]  # the kind decides the class

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __repr__(self) -> str:
        return f"<{self._kind}s of {self._module!r}: {', '.join(self._names())}>"
