"""Local workers: one spawned process each, spoken to through a pipe (no dependency beyond the standard library);
large results come back through shared memory (_arena.py).

A handle runs one task at a time. While it waits for the answer it also watches the process's
sentinel, so a worker that dies (segfault, abort, ``kill -9``) is seen at once, not by a timeout.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import sys
from multiprocessing.connection import wait
from typing import Any, Callable

from .._child import frozen_executable
from ..errors import ArgumentTypeError, WorkerStartError
from ._arena import Arena
from ._worker import Reply, Started, WorkerConfig, WorkerDiedError, serve, start_error

_context = multiprocessing.get_context("spawn")  # never fork: a forked runtime is unusable (and CUDA forbids it)

#: The exit status of a frozen app's process that multiprocessing started (a worker, its resource tracker) but that
#: ran the app's own script, the app calling no multiprocessing.freeze_support(): it makes no pool of its own.
UNSERVED_EXIT = 86
#: What the pool of such an app says.
UNSERVED = ("this frozen app's pool workers ran the app itself, not the worker: call multiprocessing.freeze_support() "
            "first thing in the app (under if __name__ == '__main__':), before it makes a Pool, as every frozen app "
            "that starts processes with multiprocessing must")


def exit_if_unserved() -> None:
    """In a frozen app's process that multiprocessing started but that runs the app's script, as the app called no
    ``multiprocessing.freeze_support()``: a worker (``--multiprocessing-fork``) exits at once with UNSERVED_EXIT,
    quietly (the parent's pool says why), instead of making a pool whose workers would run the app again; the
    resource tracker (its ``-c`` line) is served as freeze_support() would, so that the parent's tracker stays."""
    from multiprocessing import spawn

    argv = sys.argv
    if frozen_executable() is None:
        return
    if len(argv) >= 2 and argv[-2] == "-c" and argv[-1].startswith("from multiprocessing.resource_tracker import"):
        exec(argv[-1])
        os._exit(0)
    if spawn.is_forking(argv):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(UNSERVED_EXIT)


class LocalHandle:
    """One local worker process."""

    backend = "local"

    def __init__(self, config: WorkerConfig):
        self.config = config
        self._conn, child = _context.Pipe(duplex=True)
        self._arena = Arena()  # large results come back through it (_arena.py)
        self.process = _context.Process(target=serve, args=(child, config, os.getpid(), self._arena.where),
                                        daemon=True, name=f"taichi_aot-worker-{config.slot}")
        self.process.start()
        self.pid = self.process.pid
        child.close()
        self.info: dict[str, Any] = {}

    def ready(self, timeout: float | None) -> None:
        """Wait for the worker's hello; WorkerStartError when it failed or died, TimeoutError when late."""
        ready = wait([self._conn, self.process.sentinel], timeout)
        if not ready:
            raise TimeoutError(f"worker {self.config.slot} did not start within {timeout:g} s")
        reply = None
        if self._conn in ready:
            try:
                reply = self._conn.recv()
            except (EOFError, OSError):
                reply = None
        if not isinstance(reply, Started):
            self.process.join(5)
            if self.process.exitcode == UNSERVED_EXIT and frozen_executable() is not None:
                raise WorkerStartError(UNSERVED)
            raise start_error(self.config.slot, reply, self.process.exitcode, _detail(self.config))
        self._arena.attached()  # the worker mapped it (or went without it) before it said hello
        self.info = reply.info

    def run(self, fn: Callable[..., Any], item: Any) -> Reply:
        """Run one task; its reply. WorkerDiedError when the process ends first; ArgumentTypeError (nothing sent)
        when the function or the item cannot be pickled."""
        try:
            data = pickle.dumps((fn, item), pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            raise ArgumentTypeError(f"the task cannot be pickled for a worker process ({type(e).__name__}: {e}); a "
                                    "local pool needs a function defined at module level and picklable items") from None
        try:
            self._conn.send_bytes(data)
        except (EOFError, OSError):
            self.process.join(5)
            raise WorkerDiedError(self.process.exitcode) from None
        ready = wait([self._conn, self.process.sentinel])
        if self._conn in ready:
            try:
                return self._arena.loads(self._conn.recv_bytes())
            except (EOFError, OSError):
                pass
        self.process.join(5)
        raise WorkerDiedError(self.process.exitcode)

    def kill(self) -> None:
        """Kill the process now (any thread may call this; the owner then sees WorkerDiedError)."""
        try:
            self.process.kill()
        except (ValueError, AttributeError):  # already closed
            pass

    def stop(self, timeout: float) -> None:
        """Ask the worker to stop and wait up to ``timeout`` s (then kill it); the process is gone and reaped after.
        Called by the handle's owner only."""
        try:
            self._conn.send_bytes(pickle.dumps(None))
        except (EOFError, OSError):
            pass
        self.process.join(timeout)
        self.release()

    def release(self) -> None:
        """Make sure the process is gone, reap it and close the pipe."""
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(2)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self._conn.close()
        self._arena.close()


def _detail(config: WorkerConfig) -> dict[str, Any]:
    out: dict[str, Any] = {"arch": (config.arch or "best").lower()}
    if config.device is not None:
        out["device"] = config.device
    return out
