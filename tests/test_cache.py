"""taichi_aot's cache folder is this user's alone, and what is kept there is used only as it was written: a user
without a home gets the private folder; a folder of another user, or one others may write, is ignored with a warning;
a planted, damaged or stale probe answer, module verdict or PTX folder is not used."""

from __future__ import annotations

import glob
import json
import os
import shutil
import tempfile

import pytest

from conftest import require_arch, require_extra
from taichi_aot import Arch, _cache, _firstload, _home, _library, _probe

#: A uid no test runs as (nobody's); changing an owner needs root.
OTHER_UID = 65534
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
PRIVATE = os.path.realpath(os.path.join(tempfile.gettempdir(), f"taichi_aot-cache-{os.getuid()}"))


@pytest.mark.parametrize("home", ["temporary folder", "/nonexistent", "no passwd entry"])
def test_a_user_without_a_usable_home_gets_the_private_folder(home, monkeypatch):
    """The temporary folder as HOME, a home that is no folder (``nobody``'s), or HOME unset for a uid with no passwd
    entry (the package then gives the process a private HOME): never a shared ``/tmp/.cache``, but
    ``taichi_aot-cache-<uid>``, 0700."""
    import pwd

    for name in ("XDG_CACHE_HOME", "TAICHI_AOT_CACHE"):
        monkeypatch.delenv(name, raising=False)
    if home == "no passwd entry":
        def no_entry(uid: int):
            raise KeyError(f"getpwuid(): uid not found: {uid}")

        monkeypatch.setattr(pwd, "getpwuid", no_entry)
        monkeypatch.delenv("HOME")
        for name in (_home.PRIVATE, "HOME"):
            monkeypatch.setenv(name, "")  # restored after the test, whatever ensure_home sets
        monkeypatch.delenv("HOME")
        assert "a private folder of this process" in _home.ensure_home()  # what libtaichi and its neighbours read
        given = os.environ["HOME"]
        assert os.path.dirname(given) == tempfile.gettempdir() and os.stat(given).st_mode & 0o777 == 0o700
        assert _home.private_home() == given
    else:
        monkeypatch.setenv("HOME", tempfile.gettempdir() if home == "temporary folder" else home)
    folder = _cache.cache_home()
    assert folder == PRIVATE
    assert os.stat(folder).st_mode & 0o777 == 0o700 and os.stat(folder).st_uid == os.getuid()


def _ignored(folder: str, monkeypatch, why: str) -> None:
    monkeypatch.setenv("TAICHI_AOT_CACHE", folder)
    with pytest.warns(RuntimeWarning, match=why):
        got = _cache.cache_home()
    assert got == PRIVATE or os.path.basename(got).startswith(f"taichi_aot-cache-{os.getuid()}-")


def test_a_cache_folder_others_may_write_is_ignored(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    _ignored(str(shared), monkeypatch, "others may write it")
    above = tmp_path / "open"
    above.mkdir()
    above.chmod(0o777)  # not sticky: another user could put a folder of theirs in its place
    _ignored(str(above / "cache"), monkeypatch, "others may write")
    mine = tmp_path / "mine"
    monkeypatch.setenv("TAICHI_AOT_CACHE", str(mine))
    assert _cache.cache_home() == os.path.realpath(mine) and os.stat(mine).st_mode & 0o777 == 0o700


@pytest.mark.skipif(not IS_ROOT, reason="giving a folder to another user needs root")
def test_a_cache_folder_of_another_user_is_ignored(tmp_path, monkeypatch):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    _ignored(str(theirs), monkeypatch, f"belongs to uid {OTHER_UID}")


def _library_path() -> str:
    assert _library.info is not None
    return _library.info.path


def test_a_planted_probe_answer_is_not_used(tmp_path, monkeypatch):
    """A probe answer that says no arch works, under the right name: as plain JSON, with a digest of another key,
    or written right but another user's: each is not read, and the real answer (x64 works) replaces it."""
    require_arch(Arch.X64)
    from taichi_aot._probe import ArchStatus, _to_json

    monkeypatch.setenv("TAICHI_AOT_CACHE", str(tmp_path / "cache"))
    key = _probe._cache_key(_library_path())
    path = os.path.join(_cache.cache_home(), f"probe-{key}.json")
    none = json.dumps(_to_json({a: ArchStatus(a, False, 0, "planted") for a in (Arch.X64, Arch.VULKAN)}))
    plants = [lambda: _write(path, none), lambda: _cache.write_entry(path, "probe-another", none)]
    if IS_ROOT:
        plants.append(lambda: (_cache.write_entry(path, f"probe-{key}", none), os.chown(path, OTHER_UID, 0)))
    for plant in plants:
        plant()
        assert _probe.cached_probe(_library_path())[Arch.X64].available
        assert _cache.read_entry(path, f"probe-{key}") is not None  # the real answer, kept in its place


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _damaged(modules, tmp_path, name: str) -> str:
    """A copy of the x64 test module whose metadata.tcb crashes libtaichi_c_api at load."""
    bad = tmp_path / name
    shutil.copytree(modules.path(Arch.X64), bad)
    tcb = bad / "metadata.tcb"
    tcb.write_bytes(tcb.read_bytes()[: len(tcb.read_bytes()) // 2])
    return str(bad)


def test_a_planted_module_verdict_is_not_used(modules, tmp_path, monkeypatch):
    """A verdict "" ("loads without a crash") planted for a damaged module, as plain text, with a digest of another
    module, or written right but another user's: not read; the child finds the crash. One written right by this user
    is read (no child)."""
    require_arch(Arch.X64)
    monkeypatch.setenv("TAICHI_AOT_CACHE", str(tmp_path / "cache"))
    library = _library_path()
    identity = _probe.library_identity(library)
    plants = [lambda path, key: _write(path, ""), lambda path, key: _cache.write_entry(path, "module 0", "")]
    if IS_ROOT:
        plants.append(lambda path, key: (_cache.write_entry(path, key, ""), os.chown(path, OTHER_UID, 0)))
    for i, plant in enumerate(plants):
        bad = _damaged(modules, tmp_path, f"bad{i}")
        digest = _firstload._module_digest(bad, Arch.X64, identity)
        path = os.path.join(_cache.cache_home(), "modules", f"{digest[:32]}.txt")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        plant(path, f"module {digest}")
        assert "crashed loading it" in _firstload.module_crash(bad, Arch.X64, ["add"], [], library)
        assert "crashed loading it" in (_cache.read_entry(path, f"module {digest}") or "")
    bad = _damaged(modules, tmp_path, "kept")
    digest = _firstload._module_digest(bad, Arch.X64, identity)
    path = os.path.join(_cache.cache_home(), "modules", f"{digest[:32]}.txt")
    assert _cache.write_entry(path, f"module {digest}", "as kept")
    said = _firstload.module_crash(bad, Arch.X64, ["add"], [], library)
    assert said.startswith("as kept [a verdict kept in the cache: ") and "python -m taichi_aot cache clear" in said


def test_a_planted_ptx_folder_is_not_used(cuda_modules, tmp_path, monkeypatch):
    """PTX made at a module's load is sealed with the digest of its key and files: a changed PTX file, a folder of
    another user's or one planted without the seal is made again, never run."""
    require_extra("llvmlite.binding", "ptx")
    from taichi_aot.ptx import ptx_folder

    monkeypatch.setenv("TAICHI_AOT_CACHE", str(tmp_path / "cache"))
    module = str(tmp_path / "sim")
    shutil.copytree(os.path.join(cuda_modules, "sim"), module)
    made, why = ptx_folder(module)
    assert made is not None and why == "", why
    ptx = sorted(n for n in os.listdir(made) if n.endswith(".ptx"))
    assert ptx
    with open(os.path.join(made, ptx[0]), "rb") as f:
        right = f.read()

    def tamper() -> None:
        with open(os.path.join(made, ptx[0]), "ab") as f:
            f.write(b"\n// planted\n")

    def unsealed() -> None:
        shutil.rmtree(made)
        shutil.copytree(os.path.join(cuda_modules, "sim"), made)
        tamper()

    plants = [tamper, unsealed]
    if IS_ROOT:
        plants.append(lambda: os.chown(made, OTHER_UID, 0))
    for plant in plants:
        plant()
        assert ptx_folder(module) == (made, "")
        with open(os.path.join(made, ptx[0]), "rb") as f:
            assert f.read() == right
        assert os.stat(made).st_uid == os.getuid()


def test_a_named_arch_probes_that_arch_alone(vulkan, tmp_path):
    """``Runtime("vulkan")`` in a fresh cache probes Vulkan alone and keeps that answer on its own; the next process
    takes it from there where it says available, and asks again where it says unavailable (a driver may have been
    installed since); ``for_module`` probes the module's archs alone."""
    import subprocess
    import sys

    from conftest import ROOT

    env = {**os.environ, "TAICHI_AOT_CACHE": str(tmp_path / "cache")}
    code = "import sys; from taichi_aot import Runtime; Runtime(sys.argv[1]).close(); print('made')"
    first = subprocess.run([sys.executable, "-c", code, "vulkan"], capture_output=True, text=True, timeout=300,
                           env=env)
    assert first.returncode == 0 and "made" in first.stdout, first.stderr[-2000:]
    [kept] = glob.glob(str(tmp_path / "cache" / "probe-*.json"))
    assert kept.endswith("-vulkan.json")
    name = os.path.basename(kept)[:-len(".json")]
    status = _probe._from_json(json.loads(_cache.read_entry(kept, name) or "null")["rows"])
    assert list(status) == [Arch.VULKAN] and status[Arch.VULKAN].available
    _cache.write_entry(kept, name, json.dumps(_probe._to_json({Arch.VULKAN: status[Arch.VULKAN]._replace(
        available=False, reason="doctored")})))
    second = subprocess.run([sys.executable, "-c", code, "vulkan"], capture_output=True, text=True, timeout=300,
                            env=env)
    assert second.returncode == 0 and "made" in second.stdout, second.stderr[-2000:]
    again = _probe._from_json(json.loads(_cache.read_entry(kept, name) or "null")["rows"])
    assert again[Arch.VULKAN].available  # asked again, and kept so
    module = os.path.join(ROOT, "examples", "physics.tcm")  # x64 and Vulkan parts
    code = "import sys; from taichi_aot import Runtime; print(Runtime.for_module(sys.argv[1]).arch.name)"
    third = subprocess.run([sys.executable, "-c", code, module], capture_output=True, text=True, timeout=300,
                           env=env)
    assert third.returncode == 0 and third.stdout.split()[-1] in ("X64", "VULKAN"), third.stderr[-2000:]
    kept_now = sorted(os.path.basename(p) for p in glob.glob(str(tmp_path / "cache" / "probe-*.json")))
    assert [p.rsplit("-", 1)[1] for p in kept_now] == ["vulkan.json", "x64.json"]


def test_an_unavailable_arch_kept_in_the_cache_is_asked_again(vulkan, tmp_path, monkeypatch):
    """The answer for every arch, kept with Vulkan "unavailable" (as a probe made while its driver or a library the
    driver needs was missing would keep it): an unnamed question takes it from the cache while it is young and says
    so (where it was kept, how to ask again); naming Vulkan asks again, as does any question once the answer is older
    than NEGATIVE_LIFE."""
    monkeypatch.setenv("TAICHI_AOT_CACHE", str(tmp_path / "cache"))
    library = _library_path()
    found = _probe.cached_probe(library)
    assert found[Arch.VULKAN].available
    [kept] = glob.glob(str(tmp_path / "cache" / "probe-*.json"))
    name = os.path.basename(kept)[:-len(".json")]

    def doctor(age: float) -> None:
        entry = _probe._to_json({**found, Arch.VULKAN: found[Arch.VULKAN]._replace(available=False,
                                                                                    reason="Error loading vulkan")})
        entry["time"] -= age
        assert _cache.write_entry(kept, name, json.dumps(entry))

    doctor(0)
    said = _probe.cached_probe(library)[Arch.VULKAN]
    assert not said.available and said.reason.startswith("Error loading vulkan [an answer kept in the cache (")
    assert kept in said.reason and "Runtime(arch), python -m taichi_aot archs) asks again" in said.reason
    assert _probe.cached_probe(library, named=frozenset({Arch.VULKAN}))[Arch.VULKAN].available
    assert _probe.cached_probe(library)[Arch.VULKAN].available  # the answer asked again was kept
    doctor(_probe.NEGATIVE_LIFE + 60)
    assert _probe.cached_probe(library)[Arch.VULKAN].available
