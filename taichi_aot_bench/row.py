"""One row of the benchmark's results (the run and its sections share it)."""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field

#: The bench's sections, in the order a run makes them (run.py), named by the command's help (command.py).
SECTIONS = ("launch", "simulation", "graph", "throughput", "transfers", "memory", "interop", "scaling", "launcher",
            "validation", "ops", "autodiff", "startup", "placement", "gpus", "cores",
            "profiler", "sharing")


#: A target a figure meets by a comparison with one number: ``<= 1.05``, ``>= 2``.
_BOUND = re.compile(r"(<=|>=)\s*([-+]?[0-9.]+(?:e[-+]?[0-9]+)?)")


def as_shown(value: float) -> float:
    """``value`` as the report prints it (``report.format_figure``): three significant digits, whole numbers from
    100 on."""
    if not math.isfinite(value):
        return value
    return float(round(value)) if abs(value) >= 100 else float(f"{value:.3g}")


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
            "met": self.verdict(), "note": self.note, "params": self.params,
        }

    def verdict(self) -> bool | None:
        """Whether the row meets its target, as the report shows it: a ``<= N`` or ``>= N`` target is met by a figure
        (its ratio, else its median) that prints as N (a median of 50.04 ms prints 50.0: ``<= 50`` is met), whatever
        finer comparison set ``met``."""
        bound = _BOUND.fullmatch(self.target.strip()) if self.met is False and self.target else None
        figure = self.ratio if self.ratio is not None else self.median
        if bound is None or not math.isfinite(figure):
            return self.met
        limit, shown = float(bound.group(2)), as_shown(figure)
        return shown <= limit if bound.group(1) == "<=" else shown >= limit
