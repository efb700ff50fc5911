"""Shared fixtures: real modules compiled by Taichi 1.7.4, and the archs to run on.

A backend the machine lacks skips its tests locally but fails them under CI
(``CI=true``): CI must run x64 and Vulkan for real. So does a promised extra (ray, interop).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from taichi_aot import Arch, Runtime, capi

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = os.path.join(HERE, "kernels.py")
ARCHS = {"x64": Arch.X64, "vulkan": Arch.VULKAN}
IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def _declined() -> dict[str, str]:
    """Extras the test command decided not to install here, with its reason (scripts/setup.sh writes them)."""
    path = os.path.join(sys.prefix, "taichi_aot-extras")
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return dict(line.strip().partition(": ")[::2] for line in f if ": " in line)


#: The launcher choices the behaviour suites run under (``load_module(launcher=)``): taichi_aot's own launches where
#: they take a kernel ("auto"), and libtaichi's for every kernel it can launch ("taichi").
LAUNCHER_CHOICES = ("auto", "taichi")


@pytest.fixture(autouse=True)
def _cuda_context_kept():
    """The CUDA context current on the test's thread before it, current again after it: what runs on every GPU of a
    host leaves another GPU's current (XLA leaves the last it ran on), which later tests' torch and CuPy arrays made
    on "the" GPU would follow. Nothing where this process has not loaded libcuda."""
    import ctypes

    try:
        cu = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)
    except OSError:
        yield
        return
    before = ctypes.c_void_p()
    if cu.cuCtxGetCurrent(ctypes.byref(before)) != 0:
        yield
        return
    yield
    cu.cuCtxSetCurrent(before)


# ---------------------------------------------------------------------------
# A skip is one short line in the summary (-ra): what is missing, not the whole of why (a backend's reason names
# its probe's cache and how to ask again). ``pytest -v`` keeps each reason whole.

#: The longest skip reason the summary shows whole.
SKIP_REASON_CHARS = 100


def short_reason(reason: str) -> str:
    """``reason`` as one line of at most SKIP_REASON_CHARS: its first line, less what follows its first
    parenthesis, bracket or semicolon, where it is longer; cut with "..." where that still is."""
    line = reason.strip().splitlines()[0] if reason.strip() else reason
    if len(line) <= SKIP_REASON_CHARS:
        return line
    cuts = [i for i in (line.find(" ("), line.find(" ["), line.find("; ")) if i >= 20]
    if cuts:
        line = line[:min(cuts)]
    return line if len(line) <= SKIP_REASON_CHARS else line[:SKIP_REASON_CHARS - 3].rstrip() + "..."


def shorten_skip(report, config):
    """A skipped test's or module's report with its reason shortened (short_reason), unless -v was given."""
    if report.skipped and isinstance(report.longrepr, tuple) and config.get_verbosity() < 1:
        path, lineno, reason = report.longrepr
        prefix = "Skipped: " if reason.startswith("Skipped: ") else ""
        report.longrepr = (path, lineno, prefix + short_reason(reason[len(prefix):]))
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    return shorten_skip((yield), item.config)


# ---------------------------------------------------------------------------
# No test module leaves a process-wide setting behind: the suite's files run in one process (several GPU files
# together on a GPU host), where one module's JAX default device or environment variable would decide what later
# modules run on. Warnings filters need no check here: pytest restores them after every test.

#: os.environ names (or their starts) that libraries set themselves as they load or start, which no test can take
#: back: JAX's import (TF_CPP_MIN_LOG_LEVEL, TPU_SKIP_MDS_QUERY), torch.compile's (TORCHINDUCTOR_,
#: _TORCHINDUCTOR_; on a GPU its Triton's TRITON_CACHE_DIR and TRITON_PTXAS_PATH), Ray's start (RAY_,
#: PYTHONBREAKPOINT), torch's CUDA start (CUDA_MODULE_LOADING)
LIBRARY_VARIABLES = ("TF_CPP_MIN_LOG_LEVEL", "TPU_SKIP_MDS_QUERY", "TORCHINDUCTOR_", "_TORCHINDUCTOR_", "TRITON_",
                     "RAY_", "PYTHONBREAKPOINT", "CUDA_MODULE_LOADING")


def _guarded(variable: str) -> bool:
    """Whether a test module must leave ``variable`` as it found it (pytest sets PYTEST_CURRENT_TEST itself)."""
    return not variable.startswith(LIBRARY_VARIABLES) and variable != "PYTEST_CURRENT_TEST"


def _open_runtimes() -> int:
    """Runtimes made and not closed (a closed one whose objects live on in a framework's op is closed), less those
    kept for the process by design: the JAX ops' twins' runtimes, one a GPU and thread (taichi_aot.jax)."""
    from taichi_aot import runtime

    jax_ops = sys.modules.get("taichi_aot.jax")
    kept = {id(rt) for rt in getattr(jax_ops, "_twin_runtimes", {}).values()}
    return sum(1 for rt in list(runtime._open_runtimes) if not rt.closed and id(rt) not in kept)


def process_state() -> dict[str, object]:
    """What a test module must leave as it found it, read cheaply: the environment (less LIBRARY_VARIABLES),
    sys.path (less the folders of installed libraries, which some add as they load), the working directory, the
    root logger, SIGINT's handler (the one tests set; Ray's start sets SIGTERM's for its session), the runtimes
    open; and numpy's error handling, torch's defaults and JAX's config (its default device among them) where the
    process has imported them (nothing is imported here)."""
    import logging

    root = logging.getLogger()
    state: dict[str, object] = {
        "os.environ": {k: v for k, v in os.environ.items() if _guarded(k)},
        # as a set: pytest puts a test module's folder first again when something else went first
        "sys.path": sorted({p for p in sys.path if not p.startswith((sys.prefix, sys.base_prefix))}),
        "the working directory": os.getcwd(),
        # pytest's own capture handlers come and go with each test's phases
        "the root logger": (root.level, [h for h in root.handlers if not type(h).__module__.startswith("_pytest")]),
        "SIGINT's handler": signal.getsignal(signal.SIGINT),
        "open runtimes": _open_runtimes(),
    }
    np = sys.modules.get("numpy")
    if np is not None:
        state["numpy's error handling"] = np.geterr()
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_default_dtype"):
        state["torch's defaults"] = (torch.get_default_dtype(), torch.is_grad_enabled())
    jax = sys.modules.get("jax")
    if jax is not None and hasattr(jax, "config"):
        state["JAX's config"] = dict(jax.config.values)
    return state


def state_changes(before: dict[str, object], after: dict[str, object]) -> list[str]:
    """Each difference between two process_state()s, one line each (what JAX or torch had not imported before is
    not compared)."""
    said = []
    for what, old in before.items():
        new = after.get(what, old)
        if what == "open runtimes" and isinstance(new, int) and isinstance(old, int) and new > old:
            import gc

            gc.collect()  # a runtime only its reference cycle holds is no setting left behind
            new = _open_runtimes()
            if new <= old:
                continue
        if new == old:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            for key in sorted(set(old) | set(new)):
                if old.get(key, "(unset)") != new.get(key, "(unset)"):
                    said.append(f"{what}[{key!r}]: {old.get(key, '(unset)')!r} -> {new.get(key, '(unset)')!r}")
        else:
            said.append(f"{what}: {old!r} -> {new!r}")
    return said


def restore_state(before: dict[str, object]) -> None:
    """Put back what process_state() recorded and can be set again (the environment, sys.path, the working
    directory, JAX's config): the module after the one that changed it runs as it would have."""
    environ = before["os.environ"]
    assert isinstance(environ, dict)
    for key in [k for k in os.environ if k not in environ and _guarded(k)]:
        del os.environ[key]
    os.environ.update(environ)
    kept = before["sys.path"]
    assert isinstance(kept, list)
    sys.path[:] = [p for p in sys.path if p in kept or p.startswith((sys.prefix, sys.base_prefix))]
    os.chdir(str(before["the working directory"]))
    jax = sys.modules.get("jax")
    config = before.get("JAX's config")
    if jax is not None and isinstance(config, dict):
        for name, value in config.items():
            if jax.config.values.get(name) != value:
                jax.config.update(name, value)


#: test module's path -> what importing it changed (pytest imports every module before the first test runs)
_IMPORT_CHANGES: dict[str, list[str]] = {}


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    if not isinstance(collector, pytest.Module):
        return shorten_skip((yield), collector.config)
    before = process_state()
    report = yield
    changes = state_changes(before, process_state())
    if changes:
        _IMPORT_CHANGES[str(collector.path)] = changes
    return shorten_skip(report, collector.config)


@pytest.fixture(scope="module", autouse=True)
def _no_process_wide_change(request):
    """Fails the test module (an error at its last test's teardown) that changed process_state(), by its import or
    its tests and fixtures, and puts back what it can: a change must be scoped (monkeypatch, a context manager such
    as ``jax.default_device``, a fixture that restores)."""
    before = process_state()
    yield
    changes = [f"when imported: {c}" for c in _IMPORT_CHANGES.pop(str(request.path), [])]
    changes += state_changes(before, process_state())
    if changes:
        restore_state(before)
        pytest.fail(f"{request.path.name} left process-wide changes behind:\n  " + "\n  ".join(changes),
                    pytrace=False)


@pytest.fixture(params=LAUNCHER_CHOICES)
def launcher(request) -> str:
    """A behaviour test taking ``launcher`` runs once per launcher choice (as warp's ``add_function_test(devices=)``
    runs a test per device): it loads its module with ``launcher=launcher``. A new backend joins by its choice."""
    return request.param


def module_at(path: str, name: str):
    """The Python file at ``path`` run as module ``name`` (a script or a room not importable as a package's)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def require_extra(module: str, extra: str):
    """Import ``module`` of a promised extra: skip (locally) or fail (under CI) where it is not installed. An
    extra the test command declined here (the interop extra where pip has only torch's CUDA build) skips with
    the reason it recorded, under CI too: nothing was promised there."""
    try:
        return importlib.import_module(module)
    except ImportError:
        declined = _declined().get(extra)
        if declined:  # at a test module's top too (allow_module_level): the whole file skips, no collection error
            pytest.skip(f"the {extra} extra: {declined}", allow_module_level=True)
        message = f"{module} is not installed (the {extra} extra: pip install -e '.[{extra}]')"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message, allow_module_level=True)


@pytest.fixture
def slow_calls(monkeypatch):
    """How many kernel calls went through Python (``calls[0]``): the C call hands the rest straight to the library."""
    from taichi_aot.launch import Kernel

    calls = [0]
    python_call = Kernel._slow_call

    def counted(self, *args, **kwargs):
        calls[0] += 1
        return python_call(self, *args, **kwargs)

    monkeypatch.setattr(Kernel, "_slow_call", counted)
    return calls


def raised_in_thread(expected: type[BaseException], *calls) -> list[BaseException]:
    """Make each of ``calls`` in another thread: the ``expected`` exceptions they raised (an empty list: none)."""
    errors: list[BaseException] = []

    def other() -> None:
        for call in calls:
            try:
                call()
            except expected as e:
                errors.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    return errors


@contextlib.contextmanager
def interruptible():
    """Children started inside get SIGINT as a terminal gives it: a pytest started with SIGINT ignored (in the
    background of a shell, or by some CI runners) would pass that on, and a Python started so never raises
    KeyboardInterrupt. A handled signal is set back to its default in a child when it starts a program."""
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)


def taichi_cuda_abort(proc: subprocess.CompletedProcess) -> bool:
    """Whether a Taichi compiler child died of Taichi 1.7.4's CUDA abort (see ``taichi_aot.cli.build``)."""
    from taichi_aot.cli.build import taichi_cuda_abort as died

    return died(proc)


def taichi_env() -> dict[str, str]:
    """This process's environment for a child that runs Taichi's compiler, less what torch sets for its own CUDA
    use when it starts CUDA here (CUDA_MODULE_LOADING=LAZY), with one GPU visible (as ``build`` runs it): under the
    first, and on a host of several GPUs, Taichi 1.7.4's CUDA compiler process aborts (cuMemFreeAsync:
    CUDA_ERROR_INVALID_CONTEXT)."""
    from taichi_aot.cli.build import compiler_env

    env = compiler_env("cuda") or {}
    return {k: v for k, v in env.items() if k != "CUDA_MODULE_LOADING"}


def require_arch(arch: Arch) -> None:
    """Skip (locally) or fail (under CI) when ``arch`` cannot create a runtime here."""
    status = capi.arch_status()[arch]
    if not status.available:
        message = f"backend {arch.name} is not available here: {status.reason}"
        if IN_CI:
            pytest.fail(message + " (CI requires x64 and Vulkan)")
        pytest.skip(message)


def check_tool(name: str) -> str:
    """The path of a checker of the check extra (mypy, pyright) beside this Python; skip or fail without it."""
    path = os.path.join(os.path.dirname(sys.executable), name)
    found = path if os.path.exists(path) else shutil.which(name)
    if not found:
        if IN_CI:
            pytest.fail(f"{name} is not installed (the check extra: pip install -e '.[check]')")
        pytest.skip(f"{name} is not installed (pip install -e '.[check]')")
    return found


class Modules:
    """Paths of the compiled test modules: ``modules.path(arch, tcm=False)``."""

    def __init__(self, root: str):
        self.root = root
        self._built: dict[tuple[str, bool], str] = {}
        self._errors: dict[tuple[str, bool], str] = {}
        self._caps: list[str] = []

    def build_all(self) -> None:
        # the Vulkan module takes this machine's device's capabilities, as `build` does (a module built without
        # the float atomics its device has warns at its load)
        from taichi_aot.cli.build import device_caps

        self._caps = device_caps("vulkan")[0] if "vulkan" in ARCHS else []
        jobs = [(name, tcm) for name in ARCHS for tcm in (False, True)]
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda job: self._build(*job), jobs))

    def _build(self, name: str, tcm: bool) -> None:
        out = os.path.join(self.root, name + (".tcm" if tcm else ""))
        proc = subprocess.run(
            [sys.executable, KERNELS, "--arch", name, "--out", out] + (["--caps", *self._caps] if name == "vulkan"
                                                                      else []),
            capture_output=True, text=True, timeout=300,
            env=taichi_env())
        if proc.returncode == 0 and os.path.exists(out):
            self._built[(name, tcm)] = out
        else:
            self._errors[(name, tcm)] = (proc.stdout + proc.stderr)[-3000:]

    def path(self, arch: Arch, tcm: bool = False) -> str:
        name = arch.name.lower()
        key = (name, tcm)
        if key not in self._built:
            pytest.fail(f"Taichi could not compile the {name} test module:\n{self._errors.get(key, 'not built')}")
        return self._built[key]


@pytest.fixture(scope="session")
def modules(tmp_path_factory) -> Modules:
    mods = Modules(str(tmp_path_factory.mktemp("modules")))
    mods.build_all()
    return mods


@pytest.fixture(params=list(ARCHS.values()), ids=list(ARCHS))
def arch(request) -> Arch:
    require_arch(request.param)
    return request.param


@pytest.fixture
def rt(arch: Arch):
    """A runtime on each arch of the ``arch`` fixture, closed after the test."""
    with Runtime(arch) as runtime:
        yield runtime


@pytest.fixture
def flat_rt(arch: Arch):
    """A runtime of the flat API (``capi``) on each arch of the ``arch`` fixture, destroyed after the test."""
    runtime = capi.create_runtime(arch)
    yield runtime
    if capi.handles.is_live("runtime", runtime):
        capi.destroy_runtime(runtime)


@pytest.fixture
def env(arch: Arch, modules: Modules):
    """A runtime on each arch of the ``arch`` fixture and the test module loaded on it: ``rt, mod = env``."""
    with Runtime(arch) as runtime:
        yield runtime, runtime.load_module(modules.path(arch))


def named_module(arch: Arch, modules: Modules, tmp_path) -> str:
    """The test module with its kernels' argument names: Taichi's own x64 and CUDA modules record none, so a copy gets
    the ``taichi_aot.json`` that ``taichi_aot build`` writes (Vulkan modules record them already)."""
    import json

    path = modules.path(arch)
    if arch == Arch.VULKAN:
        return path
    named = str(tmp_path / "named")
    shutil.copytree(path, named)
    with open(os.path.join(named, "taichi_aot.json"), "w", encoding="utf-8") as f:
        json.dump({"taichi_aot": 1, "kernels": {"add": {"args": ["x", "y", "a"]}}}, f)
    return named


@pytest.fixture(scope="session")
def vulkan() -> Arch:
    require_arch(Arch.VULKAN)
    return Arch.VULKAN


@pytest.fixture
def device_policy(vulkan, monkeypatch):
    """A Vulkan runtime under the discrete GPU's policy, whatever the device."""
    from taichi_aot.placement import vulkan as vk

    monkeypatch.setenv(vk.MEMORY_VARIABLE, "device")
    with Runtime(Arch.VULKAN) as rt:
        yield rt


# ---------------------------------------------------------------------------
# The package as a user installs it: a wheel of this checkout, in fresh virtual environments without Taichi

ROOT = os.path.dirname(HERE)


def find_python(version: str, required: bool = True) -> str:
    """A CPython ``version`` ("3.9") of this machine (pyenv, a prefix install, PATH); skip without one, or fail
    under CI where ``required``."""
    candidates = []
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    versions = os.path.join(pyenv_root, "versions")
    if os.path.isdir(versions):
        for name in sorted(os.listdir(versions), reverse=True):
            if name == version or name.startswith(version + "."):
                candidates.append(os.path.join(versions, name, "bin", "python"))
    for root in ("/opt/cpython", "/opt/python", "/usr/local/opt/python"):  # prefix installs of newer releases
        candidates.append(os.path.join(root, version, "bin", f"python{version}"))
    on_path = shutil.which(f"python{version}")
    if on_path and os.sep + "shims" + os.sep not in on_path:  # a pyenv shim runs only the selected version
        candidates.append(on_path)
    for path in candidates:
        if os.path.isfile(path):
            return path
    message = f"no Python {version} on this machine (PATH or pyenv)"
    if IN_CI and required:
        pytest.fail(message + ": the install tests run on 3.9 and 3.13")
    pytest.skip(message)


class Packaged:
    """What ``scripts/package.sh`` made: ``out`` (its folder) and ``proc`` (its run, checked by test_packaging)."""

    def __init__(self, out: str, proc: subprocess.CompletedProcess):
        self.out, self.proc = out, proc


@pytest.fixture(scope="session")
def packaged(tmp_path_factory) -> Packaged:
    """The distributions built, repaired, audited and installed by ``scripts/package.sh``, once a session."""
    out = str(tmp_path_factory.mktemp("dist"))
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "package.sh"), out], capture_output=True,
                          text=True, timeout=900, cwd=ROOT)
    return Packaged(out, proc)


@pytest.fixture(scope="session")
def wheel(packaged) -> str:
    """The wheel of this checkout as a user gets it (an isolated build, the library bundled, repaired to a
    manylinux tag): package.sh's, so the suite builds it once."""
    assert packaged.proc.returncode == 0, (packaged.proc.stdout + packaged.proc.stderr)[-4000:]
    [built] = [os.path.join(packaged.out, n) for n in os.listdir(packaged.out) if n.endswith(".whl")]
    return built


class Venv:
    """A fresh virtual environment with the wheel installed: ``.python``, ``.run(args, cwd)``, ``.install``."""

    def __init__(self, root: str, python: str, wheel: str):
        self.root = root
        subprocess.run([python, "-m", "venv", root], check=True, capture_output=True, timeout=300)
        self.python = os.path.join(root, "bin", "python")
        self.install(wheel)

    def install(self, *what: str) -> None:
        proc = subprocess.run([self.python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *what],
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    def link(self, name: str, into: str | None = None) -> None:
        """Make the distribution ``name`` installed here (and what it requires, markers of this Python applied)
        importable in the venv without copying it: its top-level files are linked into a folder a ``.pth`` file
        names, after the venv's own packages (so the wheel's own dependencies stay the venv's). ``into``: another
        folder, which no ``.pth`` file names (a run that puts it on PYTHONPATH sees them; the venv does not)."""
        import importlib.metadata

        from packaging.requirements import Requirement

        folder = into or os.path.join(self.root, "linked")
        os.makedirs(folder, exist_ok=True)
        todo, seen = [name], set()
        while todo:
            dist = importlib.metadata.distribution(todo.pop())
            key = dist.metadata["Name"].lower().replace("_", "-")
            if key in seen:
                continue
            seen.add(key)
            for top in {f.parts[0] for f in dist.files or () if f.parts and f.parts[0] != ".."}:
                target, source = os.path.join(folder, top), str(dist.locate_file(top))
                if not os.path.lexists(target) and os.path.exists(source):
                    os.symlink(source, target)
            for text in dist.requires or ():
                req = Requirement(text)
                if req.marker is None or req.marker.evaluate({"extra": ""}):
                    todo.append(req.name)
        if into is not None:
            return
        site = subprocess.run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        with open(os.path.join(site, "linked.pth"), "w") as f:
            f.write(folder + "\n")

    def run(self, args: list[str], cwd: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """``python *args`` in the venv, in ``cwd``, importing the installed package (never this checkout's)."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TAICHI_C_API_INSTALL_DIR")}
        env["PYTHONSAFEPATH"] = "1"
        return subprocess.run([self.python, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                              env=env)


@pytest.fixture(scope="session")
def fresh_venv(tmp_path_factory, wheel) -> Venv:
    """This Python's fresh venv with only the wheel and its dependencies (numpy, cffi): no Taichi."""
    return Venv(str(tmp_path_factory.mktemp("venv") / "venv"), sys.executable, wheel)


def graphs_tcb(graphs: list) -> bytes:
    """graphs.tcb as Taichi's binary serializer writes it, made by hand (not with the reader's own schema):
    ``[(graph, [(kernel, [(name, dtype id, field dim, tag, element shape)])])]``, each num_channels 0."""
    def text(value: str) -> bytes:
        return struct.pack("<Q", len(value)) + value.encode()

    body = struct.pack("<Q", len(graphs))
    for name, dispatches in graphs:
        body += text(name) + struct.pack("<Q", len(dispatches))
        for kernel, args in dispatches:
            body += text(kernel) + struct.pack("<Q", len(args))
            for arg, dtype, dim, tag, shape in args:
                body += text(arg) + struct.pack("<iQiQ", dtype, dim, tag, len(shape))
                body += struct.pack(f"<{len(shape)}i", *shape) + struct.pack("<Q", 0)
    return struct.pack("<Q", len(body) + 8) + body


@pytest.fixture(scope="session")
def cuda_modules(tmp_path_factory) -> str:
    """tests/data/cuda-modules.tar.xz unpacked (read-only by convention: copy a module before changing it): the
    suite's CUDA modules, which Taichi compiles only where a GPU is."""
    root = str(tmp_path_factory.mktemp("cuda-modules"))
    with tarfile.open(os.path.join(HERE, "data", "cuda-modules.tar.xz")) as t:
        t.extractall(root, filter="data") if sys.version_info >= (3, 12) else t.extractall(root)
    return root


def build_beside_taichi(source: str, archs: list[str], out: str, expect: str) -> tuple[dict, str]:
    """``taichi_aot build source --arch archs -o out`` and, beside it, ``python source expect`` (the kernels' file
    run as a script: Taichi's own JIT writes what they give to ``expect``, an .npz); both checked. Returns what
    Taichi's JIT gave, and what the build printed."""
    import numpy as np

    procs = [subprocess.Popen([sys.executable, "-m", "taichi_aot", "build", source, "--arch", *archs, "-o", out],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=taichi_env()),
             subprocess.Popen([sys.executable, source, expect], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=taichi_env())]
    said = [proc.communicate(timeout=600)[0] for proc in procs]
    for proc, text in zip(procs, said):
        assert proc.returncode == 0, text[-3000:]
    with np.load(expect) as f:
        return dict(f), said[0]


def with_ptx_copies(root: str, names: list[str], tmp_path_factory) -> dict[str, str]:
    """name -> a copy of the CUDA module ``root/name`` with its PTX made (``taichi_aot.ptx.add_to_folder``; the
    ``ptx`` extra's llvmlite required): the unpacked test data stays as it is."""
    require_extra("llvmlite.binding", "ptx")
    from taichi_aot.ptx import add_to_folder

    out = {}
    for name in names:
        folder = str(tmp_path_factory.mktemp(name) / name)
        shutil.copytree(os.path.join(root, name), folder)
        add_to_folder(folder)
        out[name] = folder
    return out


def ptx_manifest(folder: str) -> dict:
    """The PTX manifest (``ptx.json``) the PTX step wrote into ``folder``."""
    from taichi_aot.ptx import MANIFEST

    with open(os.path.join(folder, MANIFEST), encoding="utf-8") as f:
        return json.load(f)
