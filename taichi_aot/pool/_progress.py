"""The progress of a pool's map: a bar on standard error, or the caller's own function."""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable


class Progress:
    """A one-line progress bar on standard error, redrawn at most ten times a second."""

    def __init__(self, total: int, workers: int, report: Callable[[int, int], object] | None = None):
        self.total, self.workers, self.done = total, workers, 0
        self.started = self.drawn = time.perf_counter()
        self.lock = threading.Lock()
        self.report = report  # the caller's own function instead of the bar

    def step(self, _future: object) -> None:
        with self.lock:
            self.done += 1
            if self.report is not None:
                try:
                    self.report(self.done, self.total)
                except Exception:  # the caller's function: its failure is no task's
                    pass
                return
            now = time.perf_counter()
            if now - self.drawn >= 0.1 or self.done == self.total:
                self.drawn = now
                self._draw(now)

    def _draw(self, now: float) -> None:
        width = 30
        filled = int(width * self.done / self.total)
        rate = self.done / max(now - self.started, 1e-9)
        sys.stderr.write(f"\r  [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} tasks, "
                         f"{rate:,.1f}/s on {self.workers} workers ")
        sys.stderr.flush()

    def finish(self) -> None:
        with self.lock:
            if self.done and self.report is None:
                sys.stderr.write("\n")
                sys.stderr.flush()
            self.done = self.total  # no more frames from late callbacks
