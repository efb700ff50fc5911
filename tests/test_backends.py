"""The launch backends' registry, as a contributor meets it: a new backend written by the steps of
``docs/contributing.md`` ("Adding a backend") into a copy of the package, with a module compiled by Taichi launched
through it; and each backend reading its own launches' error codes."""

import filecmp
import os
import re
import shutil
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

import taichi_aot
from conftest import ARCHS, require_arch
from taichi_aot import Arch, Runtime
from taichi_aot._native import lib
from taichi_aot.backends import BackendModule, ContractError, launch_error, registered
from taichi_aot.backends.choice import needed
from taichi_aot.errors import InvalidArgumentError, InvalidStateError, NotSupportedError

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

#: A toy backend's room, as step 1 asks: the x64 kernels named add*, launched by libtaichi's kind under the name
#: "toy", with a record per runtime (how many modules it took).
TOY = '''
"""A toy launch backend (the contributor page's steps, followed by tests/test_backends.py)."""

from . import libtaichi
from .choice import Choice

NAME = "toy"


class ToyState:
    def __init__(self):
        self.modules = 0
        self.streams = []

    def select(self, stream):
        self.streams.append(stream)

    def xla_record(self):
        return None

    def keep_for_graphs(self):
        pass


class ToyBackend:
    name = NAME

    def kernel(self, name, info, library):
        if not self.takes(name, info):
            return None
        handle = library()
        return Choice(NAME, libtaichi.KERNEL, handle, handle), info.args

    def graph(self, info, library):
        return None

    def takes(self, name, info):
        return info is not None and name.startswith("add") and not info.returns and not info.reverse

    def why_not(self, name):
        return None if name.startswith("add") else "the toy takes add* only"

    def reverse(self, module, name, grad, threads):
        return None

    def unload(self):
        pass


def load(runtime, state, what, folder, choice, meta):
    toy = state.get(NAME)
    if toy is None:
        toy = state[NAME] = ToyState()
    toy.modules += 1
    return ToyBackend()


def launch_error(code, what):
    return libtaichi.launch_error(code, what)
'''

#: Step 2: its registration, one line in backends/__init__.py.
REGISTRATION = 'register("toy", ".toy", (), frozenset({Arch.X64}), priority=100)\n'

#: What the copy runs: the toy takes add, libtaichi the rest, the values right.
RUN = textwrap.dedent('''
    import sys
    import numpy as np
    import taichi_aot
    from taichi_aot import Arch, Runtime
    from taichi_aot.backends import registered

    assert taichi_aot.__file__.startswith(sys.argv[2]), taichi_aot.__file__
    print("order", [r.name for r in registered()])
    with Runtime(Arch.X64) as rt:
        mod = rt.load_module(sys.argv[1])
        said = mod.launchers()
        print("add", said["add"], "fill_i32", said["fill_i32"].split(":")[0])
        x = rt.ndarray((8,), np.float32)
        y = rt.ndarray((8,), np.float32)
        x.from_numpy(np.arange(8, dtype=np.float32))
        y.from_numpy(np.ones(8, dtype=np.float32))
        mod.kernels["add"](x, y, 2.0)
        z = rt.ndarray((2, 3), np.int32)
        mod.kernels["fill_i32"](z, 7)
        rt.wait()
        print("kernel", mod.kernels["add"].launcher, x.to_numpy().tolist(), z.to_numpy().tolist())
        print("modules", rt.backends.get("toy").modules)
''')


def _steps() -> str:
    with open(os.path.join(ROOT, "docs", "contributing.md"), encoding="utf-8") as f:
        return f.read().split("### Adding a backend", 1)[1].split("\n## ", 1)[0]


def changed_files(old: str, new: str, at: str = "") -> list[str]:
    """Files added or changed in tree ``new`` against ``old`` (compiled files and caches left out)."""
    out = []
    cmp = filecmp.dircmp(old, new, ignore=["__pycache__", "_lib"])
    out += [at + n for n in cmp.right_only]
    out += [at + n for n in cmp.diff_files]
    for sub in cmp.common_dirs:
        out += changed_files(os.path.join(old, sub), os.path.join(new, sub), f"{at}{sub}/")
    return out


def package_copy(tmp_path, room: str, text: str, registry: str, before: str, line: str) -> list[str]:
    """A copy of the package in ``tmp_path`` (the one imported: a checkout's, or an installed build's; its library
    linked), with file ``room`` (``text``) added and ``line`` written into ``registry`` before ``before``, as a
    contributor's steps do; the files that differ from the package's, sorted."""
    package = os.path.dirname(os.path.abspath(taichi_aot.__file__))
    copy = tmp_path / "taichi_aot"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__", "_lib"))
    os.symlink(os.path.join(package, "_lib"), copy / "_lib")
    (copy / room).write_text(text)
    written = (copy / registry).read_text()
    at = written.index(before)
    (copy / registry).write_text(written[:at] + line + written[at:])
    return sorted(changed_files(package, str(copy)))


def test_a_toy_backend_by_the_contributor_steps_touches_only_the_files_they_list(modules, tmp_path):
    """The page's steps, followed for a backend that launches through an existing kind (steps 1 and 2): a module of
    its own in ``backends/`` and its registration; in a copy of the package, the toy launches a Taichi-compiled
    module's add kernel, libtaichi the others, with the right values, and keeps a record per runtime; the files
    touched are those the page names."""
    require_arch(Arch.X64)
    touched = package_copy(tmp_path, "backends/toy.py", TOY, "backends/__init__.py", "register(LIBTAICHI", REGISTRATION)
    assert touched == ["backends/__init__.py", "backends/toy.py"]
    steps = _steps()
    named = set(re.findall(r"`([\w./<>]+)`", steps))
    assert "backends/__init__.py" in named and "taichi_aot/backends/" in named, named

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", RUN, modules.path(Arch.X64), str(tmp_path)], capture_output=True,
                          text=True, timeout=300, env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines["order"] == "['cuda', 'vulkan', 'x64', 'toy', 'taichi']"
    assert lines["add"] == "toy fill_i32 taichi"
    filled = [[7 + 100 * i + j for j in range(3)] for i in range(2)]  # fill_i32: v + 100 i + j
    assert lines["kernel"] == f"toy {[float(k + 2) for k in range(8)]} {filled}"
    assert lines["modules"] == "1"


def test_the_registry_asks_the_own_launches_first_and_libtaichi_last():
    names = [r.name for r in registered()]
    assert names == ["cuda", "vulkan", "x64", "taichi"]
    by_name = {r.name: r for r in registered()}
    assert by_name["cuda"].choosable and not by_name["x64"].choosable
    assert by_name["taichi"].loads_on(Arch.VULKAN) and not by_name["cuda"].loads_on(Arch.X64)


def test_launchers_docstrings_name_every_backend():
    """``AotModule.launchers()`` and the room's own ``launchers`` name each registered backend it may answer (before,
    both left out "vulkan")."""
    from taichi_aot.backends import ModuleBackends
    from taichi_aot.module import AotModule

    for doc in (AotModule.launchers.__doc__, ModuleBackends.launchers.__doc__):
        assert doc is not None
        missing = [r.name for r in registered() if f'"{r.name}"' not in doc]
        assert not missing, (missing, doc)


def test_each_backend_reads_its_own_error_codes():
    """A launch's code is read by the backend whose kind of launch gave it: the same plan code says which launch's
    plan; libtaichi's refusal on a non-blocking stream is libtaichi's; an unknown kind is the dispatcher's."""
    bad = lib.TAICHI_AOT_PLAN_BAD_ARGS
    x64 = launch_error(bad, "kernel 'k'", lib.TAICHI_AOT_KIND_CPU_CALL)
    cuda = launch_error(bad, "kernel 'k'", lib.TAICHI_AOT_KIND_CUDA_KERNEL)
    assert isinstance(x64, InvalidArgumentError) and "x64 kernel's argument plan" in str(x64)
    assert isinstance(cuda, InvalidArgumentError) and "the kernel's argument plan" in str(cuda)
    refused = launch_error(lib.TAICHI_AOT_REFUSED, "kernel 'k'", lib.TAICHI_AOT_KIND_KERNEL)
    assert isinstance(refused, NotSupportedError) and "non-blocking CUDA stream" in str(refused)
    elsewhere = launch_error(lib.TAICHI_AOT_REFUSED, "kernel 'k'", lib.TAICHI_AOT_KIND_CUDA_KERNEL)
    assert isinstance(elsewhere, InvalidStateError) and "record" in str(elsewhere)
    unknown = launch_error(lib.TAICHI_AOT_UNKNOWN_KIND, "kernel 'k'", 99)
    assert isinstance(unknown, InvalidStateError) and "does not know" in str(unknown)


@pytest.mark.parametrize("registration", registered(), ids=lambda r: r.name)
def test_every_registered_module_gives_the_contract(registration):
    """Each registered backend's module (the registry walked, not a hand list) keeps the contract it was checked
    against when it was imported (``choice.BackendModule``): ``load`` and ``launch_error``, and every refusal, either
    the contract's default (None: the room's own sentence) or a sentence of its own words."""
    module = registration.imported()
    assert isinstance(module, BackendModule) and module is registration.imported()  # read once
    assert needed(BackendModule) == ("load", "launch_error")
    assert all(callable(getattr(module, a)) for a in needed(BackendModule))
    for question, arg in (("returns_refused", None), ("returns_refused", "no PTX for it"), ("reverse_refused", "k"),
                          ("unowned_refused", None), ("unowned_refused", "no PTX for it"), ("graph_refused", "'k'")):
        answer = getattr(module, question)(arg)
        assert answer is None or (isinstance(answer, str) and len(answer.split()) >= 5), (registration.name, question)


class _ToyModule:
    """A backend's module as an object: load and launch_error, no refusal of its own."""

    def __init__(self, backend=None):
        self.backend = backend

    def load(self, runtime, state, what, folder, choice, meta):
        return self.backend

    def launch_error(self, code, what):
        return InvalidStateError(f"{what}: toy code {code}")


@pytest.fixture
def registry(monkeypatch):
    """The room's registry, restored after the test (what a test registers stays in it)."""
    import taichi_aot.backends as room

    monkeypatch.setattr(room, "_registered", list(room._registered))
    monkeypatch.setattr(room, "_read", dict(room._read))
    return room


def test_a_name_registered_twice_is_refused(registry):
    """A second registration of a name is refused (before, it silently replaced the first), and changes nothing."""
    before = registered()
    with pytest.raises(ContractError, match="'taichi' is registered already"):
        registry.register("taichi", _ToyModule(), (), frozenset({Arch.X64}), priority=100)
    assert registered() == before
    registry.register("toy", _ToyModule(), ())
    with pytest.raises(ContractError, match="'toy' is registered already"):
        registry.register("toy", ".toy", ())


def test_a_module_missing_the_contract_is_refused_naming_what_it_lacks(registry):
    """A backend's module without ``launch_error`` (or ``load``) is refused when it registers, naming the attribute;
    one named by its path, when it is first imported; a refusal that is no function is named too."""
    class NoError:
        def load(self, *args):
            return None

    class BadRefusal(_ToyModule):
        returns_refused = "no"

    with pytest.raises(ContractError, match=r"'toy'.*lacks launch_error") as raised:
        registry.register("toy", NoError(), ())
    assert isinstance(raised.value, TypeError)
    with pytest.raises(ContractError, match=r"lacks load, launch_error"):
        registry.register("toy", object(), ())
    with pytest.raises(ContractError, match=r"returns_refused \(not a function\)"):
        registry.register("toy", BadRefusal(), ())
    assert "toy" not in [r.name for r in registered()]
    registry.register("toy", ".libtaichi.NAME", ())  # a path: checked at its import (here: no such module)
    with pytest.raises(ModuleNotFoundError):
        next(r for r in registered() if r.name == "toy").imported()
    registry._registered[:] = [r for r in registry._registered if r.name != "toy"]
    registry.register("toy", ".choice", ())  # a module that is no backend's
    with pytest.raises(ContractError, match=r"'toy'.*lacks load, launch_error"):
        next(r for r in registered() if r.name == "toy").imported()


def test_a_backend_a_module_loads_is_checked_naming_what_it_lacks(registry):
    """What a backend's ``load`` returns keeps ``choice.Backend``'s contract, checked when a module loads it."""
    class Partial:
        name = "toy"

        def kernel(self, name, info, library):
            return None

    registry.register("toy", _ToyModule(Partial()), (), frozenset({Arch.OPENGL}), priority=100)  # asked first there
    runtime = types.SimpleNamespace(arch=Arch.OPENGL)
    with pytest.raises(ContractError, match=r"'toy'.*lacks graph, takes, why_not, reverse, unload"):
        registry.ModuleBackends.load(runtime, None, "m", None, "taichi", None)


def test_the_contract_defaults_speak_where_a_backend_gives_no_refusal_of_its_own(registry):
    """A backend that gives none of the refusals is read with the contract's defaults (None), and the room says its
    own sentences for it: a kernel returning values, a reverse kernel, a graph where libtaichi is absent."""
    registry.register("toy", _ToyModule(), (), frozenset({Arch.OPENGL}), priority=100)
    toy = next(r for r in registered() if r.name == "toy").imported()
    assert [toy.returns_refused(None), toy.reverse_refused("k"), toy.unowned_refused(None),
            toy.graph_refused("'k'")] == [None] * 4
    assert isinstance(toy.launch_error(3, "kernel 'k'"), InvalidStateError)  # its own, not a default
    room = registry.ModuleBackends(Arch.OPENGL, [])
    meta = types.SimpleNamespace(kernels={"k": types.SimpleNamespace(returns=True, reverse=False)})
    said = room.launchers(["k"], meta)["k"]
    assert said.startswith("refused: returns values, which libtaichi_c_api 1.7.4 does not give back on OPENGL"), said
    with pytest.raises(NotSupportedError, match="no launch backend on this OPENGL runtime runs its reverse-mode"):
        room.reverse(types.SimpleNamespace(ensure_open=lambda: None), "k", types.SimpleNamespace(
            kernels={"k_grad": types.SimpleNamespace(reverse=True)}), None)
    absent = registry.ModuleBackends(Arch.OPENGL, [registry.libtaichi.Absent("libtaichi has no runtime here")])
    with pytest.raises(NotSupportedError, match=r"takes all of its kernels \('k'\), and libtaichi has no runtime"):
        absent.graph(types.SimpleNamespace(name="g", dispatches=["k"]), None)


def test_the_registration_says_which_launches_are_libtaichis_calls():
    """``Registration.library_any_thread`` (libtaichi's kinds): what ``launch.thread_flag`` asks, with no list of
    kinds of its own."""
    from taichi_aot.backends import library_kind

    assert [r.name for r in registered() if r.library_any_thread] == ["taichi"]
    assert library_kind(lib.TAICHI_AOT_KIND_KERNEL) and library_kind(lib.TAICHI_AOT_KIND_GRAPH)
    assert not any(library_kind(k) for k in (lib.TAICHI_AOT_KIND_CPU_CALL, lib.TAICHI_AOT_KIND_VULKAN_KERNEL,
                                             lib.TAICHI_AOT_KIND_CUDA_KERNEL))


@pytest.mark.parametrize(("registration", "arch"), [(r, a) for r in registered() if r.choosable
                                                    for a in ARCHS.values() if r.loads_on(a)],
                         ids=lambda v: getattr(v, "name", str(v)).lower())
def test_every_chosen_backend_gives_what_libtaichi_gives(registration, arch, modules):
    """Conformance: the test module's kernels and graphs (ndarrays of every dtype and element shape, scalars of every
    width, vectors and matrices, 0-D arrays, atomics, graphs) on each registered backend a module may be loaded with
    (``launcher=``), on every arch the suite builds modules for, give libtaichi's launch's bytes."""
    from test_vulkan_launch import run_all

    require_arch(arch)
    with Runtime(arch) as rt:
        own = rt.load_module(modules.path(arch), launcher=registration.name)
        assert own.kernels["add"].launcher == registration.name
        got = run_all(rt, own)
        expect = run_all(rt, rt.load_module(modules.path(arch), launcher="taichi"))
    assert got.keys() == expect.keys()
    for name in got:  # a float sum by atomics, in another order on another grid: its last bits may differ
        np.testing.assert_allclose(got[name], expect[name], rtol=1e-6 if name == "total" else 0, err_msg=name)
    assert got["summed"][0] == 3 * sum(range(1000)) and got["u8"][299] == 299 % 256


def test_generic_code_decides_by_no_arch():
    """``backends/__init__.py`` (the registry and ModuleBackends) compares no arch: the refusal sentences of an arch
    come from its backend's module; only the registrations name arches."""
    import ast

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "taichi_aot", "backends", "__init__.py")

    def arch_compares(tree: ast.AST) -> list[int]:
        return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Compare)
                and any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "Arch"
                        for side in [node.left, *node.comparators] for n in ast.walk(side))]

    with open(path, encoding="utf-8") as f:
        assert arch_compares(ast.parse(f.read())) == []
    assert arch_compares(ast.parse("if self._arch in (Arch.X64, Arch.CUDA):\n    pass\n")) == [1]  # it sees one
