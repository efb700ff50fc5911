"""The guide's table of errors (``docs/guide/errors.md``, "What each error means") and the code agree: every class it
lists derives from what its row says, and each row's case, made here on real runtimes with the test module, raises
that very class (so ``except TypeError`` catches a wrong dtype on every backend, ``except ValueError`` an argument out
of range). A row without a case here, or a case without a row, fails."""

from __future__ import annotations

import builtins
import os
import re
import shutil
import threading

import numpy as np
import pool_tasks as tasks
import pytest

import taichi_aot.errors as errors
from conftest import HERE
from taichi_aot import Arch, Runtime, capi
from taichi_aot.pool import Pool

GUIDE = os.path.join(os.path.dirname(HERE), "docs", "guide", "errors.md")


def _rows() -> list[tuple[list[str], list[str]]]:
    """The table's rows: (the error classes named, the classes each also is)."""
    with open(GUIDE, encoding="utf-8") as f:
        text = f.read()
    table = text.split("What each error means", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows.append((re.findall(r"`(\w+)`", cells[0]), re.findall(r"`(\w+)`", cells[1])))
    return rows


def _class(name: str) -> type:
    return getattr(errors, name, None) or getattr(builtins, name)


def _case_name(error: str) -> str:
    """The method of :class:`Cases` that holds the row of ``error`` ("ClosedError": ``case_closed_error``)."""
    return "case_" + re.sub(r"(?<!^)(?=[A-Z])", "_", error).lower()


def _on_another_thread(call) -> BaseException | None:
    caught: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as e:  # the test reads it
            caught.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return caught[0] if caught else None


class Cases:
    """One case a row: ``case_<error_name>(self)`` raises that error (or returns it, made elsewhere)."""

    def __init__(self, vk: Runtime, cpu: Runtime, modules, tmp_path):
        self.vk, self.cpu, self.modules, self.tmp = vk, cpu, modules, tmp_path
        self.vmod = vk.load_module(modules.path(Arch.VULKAN))
        self.cmod = cpu.load_module(modules.path(Arch.X64))
        self.y = vk.ndarray((4,), np.float32)

    def case_invalid_argument_error(self):
        self.vmod.kernels["add"](self.vk.ndarray((4,), np.float32), self.y, 1e300)  # out of f32's range

    def case_argument_type_error(self):
        for rt, mod in ((self.cpu, self.cmod), (self.vk, self.vmod)):  # a wrong dtype, on every backend
            with pytest.raises(TypeError, match=r"float64 numpy array .*convert it with \.astype\(np\.float32\)"):
                mod.kernels["add"](np.zeros(4), rt.ndarray((4,), np.float32), 1.0)
            with pytest.raises(TypeError, match=r"shape \(n,\)"):  # wrong dimensions
                mod.kernels["add"](np.zeros((2, 2), np.float32), rt.ndarray((4,), np.float32), 1.0)
        self.vmod.kernels["add"](self.y, self.y)  # a wrong argument count

    def case_read_only_array_error(self):
        a = np.zeros(4, np.float32)
        a.setflags(write=False)
        self.vmod.kernels["add"](a, self.y, 1.0)

    def case_argument_out_of_range_error(self):
        Runtime(Arch.VULKAN, device_index=64)

    def case_name_not_found_error(self):
        return self.vmod.kernels["no_such_kernel"]

    def case_incompatible_module_error(self):
        self.vk.load_module(self.modules.path(Arch.X64))

    def case_corrupted_data_error(self):
        bad = self.tmp / "bad"
        shutil.copytree(self.modules.path(Arch.VULKAN), bad)
        (bad / "metadata.json").write_text("{")
        self.vk.load_module(str(bad))

    def case_not_supported_error(self):
        x = self.vk.ndarray((4,), np.float32)
        self.vmod.kernels["add"].grad(x, self.y, 1.0, grads=(x, self.y))  # no reverse kernel on Vulkan

    def case_missing_file_error(self):
        self.vk.load_module(str(self.tmp / "nothing-here"))

    def case_out_of_memory_error(self):
        self.vk.ndarray((1 << 30, 1 << 8), np.float32)  # 1 TiB

    def case_invalid_state_error(self):
        rt = capi.create_runtime(Arch.VULKAN)
        try:
            mem = capi.allocate_memory(rt, {"size": 64, "usage": 1}, host_read=1, host_write=1)
            capi.map_memory(rt, mem)
            capi.free_memory(rt, mem)  # mapped
        finally:
            capi.destroy_runtime(rt)

    def case_closed_error(self):
        x = self.vk.ndarray((4,), np.float32)
        x.close()
        self.vmod.kernels["add"](x, self.y, 1.0)

    def case_wrong_thread_error(self):
        # any thread may launch on a CPU runtime; its close belongs to its thread while that runs
        raise _on_another_thread(self.cpu.close)

    def case_wrong_process_error(self):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: the parent's runtime refused, its error's name sent back
            try:
                self.vmod.kernels["add"](self.y, self.y, 1.0)
                name = "none"
            except BaseException as e:
                name = type(e).__name__
            os.write(write, name.encode())
            os._exit(0)
        os.close(write)
        os.waitpid(pid, 0)
        with os.fdopen(read) as f:
            name = f.read()
        return _class(name)("in the child") if hasattr(errors, name) else AssertionError(name)

    def case_export_error(self):
        np.asarray(self.vk.ndarray((4,), np.float32, host_access="none"), copy=False)

    def case_worker_start_error(self):
        bad = self.tmp / "bad.tcm"
        bad.write_bytes(b"not a module")
        Pool(str(bad), arch="x64", workers=1)

    def case_worker_task_error(self):
        with Pool(self.modules.path(Arch.X64), arch="x64", workers=1) as pool:
            pool.submit(tasks.fails_oddly, 0).result(timeout=120)

    def case_worker_crashed_error(self):
        with Pool(self.modules.path(Arch.X64), arch="x64", workers=1, retries=0) as pool:
            pool.submit(tasks.crashes, 0).result(timeout=120)


def test_every_row_of_the_guides_table_holds(vulkan, modules, tmp_path):
    rows = _rows()
    named = [name for names, _ in rows for name in names]
    cases = sorted(n for n in vars(Cases) if n.startswith("case_"))
    assert sorted(map(_case_name, named)) == cases, "the guide's table and this test's cases name other errors"
    with Runtime(Arch.VULKAN) as vk, Runtime(Arch.X64) as cpu:
        held = Cases(vk, cpu, modules, tmp_path)
        for names, bases in rows:
            for name in names:
                cls = _class(name)
                assert issubclass(cls, errors.TaichiError), name
                for base in bases:
                    assert issubclass(cls, _class(base)), f"{name} is no {base}, as the guide says"
                try:
                    got = getattr(held, _case_name(name))()
                except BaseException as e:  # the case's error
                    got = e
                assert type(got) is cls, f"{name}'s case raised {type(got).__name__}: {got}"
