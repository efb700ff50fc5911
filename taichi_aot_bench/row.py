"""One row of the benchmark's results (the run and its sections share it)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

#: The bench's sections, in the order a run makes them (run.py), named by the command's help (command.py).
SECTIONS = ("launch", "simulation", "graph", "throughput", "transfers", "memory", "interop", "scaling", "launcher",
            "validation", "ops", "autodiff", "startup", "placement", "gpus", "cores",
            "profiler", "sharing")


@dataclass
class Row:
    """One measured figure: samples (per unit) and how it compares with its limit."""

    section: str
    arch: str
    name: str
    unit: str  # "us/launch", "GB/s", ...
    samples: list[float]
    limit: str | None = None  # the row this one is compared with
    ratio: float | None = None
    target: str | None = None  # e.g. "<= 1.05"
    met: bool | None = None
    note: str = ""
    params: dict = field(default_factory=dict)
    min_ratio: float | None = None  # best against best: what noise on shared CPUs sways least
    spread: float | None = None  # paired ratios (measure.py): half their interquartile range, relative

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")

    def to_dict(self) -> dict:
        return {
            "section": self.section, "arch": self.arch, "name": self.name, "unit": self.unit,
            "median": self.median, "min": min(self.samples) if self.samples else None,
            "max": max(self.samples) if self.samples else None, "samples": self.samples,
            "limit": self.limit, "ratio": self.ratio, "min_ratio": self.min_ratio, "spread": self.spread,
            "target": self.target,
            "met": self.met, "note": self.note, "params": self.params,
        }
