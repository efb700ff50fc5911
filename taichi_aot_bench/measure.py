"""How the launch and simulation sections of ``taichi-aot bench`` measure: ratios that two runs on the same machine
reproduce.

A ratio of two medians taken minutes apart moves with everything that changes in between (clock speeds, another
process, a GPU's power state). So every method is compared with its reference *round by round*:

* a warm-up call of every method first (caches, lazy setup, the GPU's clocks);
* then ``rounds`` rounds; in each, every method runs ``reps`` times, the methods interleaved and their order
  rotated from round to round (none always follows another), and the round keeps each method's best time:
  the minimum is what interruptions cannot raise;
* a method's ratio is the median over rounds of (its round best / the reference's round best): both figures of
  a pair were taken within the same fraction of a second, so a drift between rounds cancels;
* the spread of those ratios (half their interquartile range, relative) is reported beside each ratio; and, as
  pyperf does, the run warns where the machine is a poor place to measure (a CPU governor that is not
  ``performance``, a load already on the cores, rounds whose best times wander).
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from typing import Callable

#: A round's best times may wander this much (relative spread) before the run warns.
UNSTABLE = 0.10


@dataclass
class Measured:
    """Round bests per method and paired ratios against the reference."""

    bests: dict[str, list[float]]
    ratios: dict[str, list[float]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def ratio(self, name: str) -> float | None:
        """The median of ``name``'s paired ratios (None for the reference or an unmeasured method)."""
        r = self.ratios.get(name)
        return statistics.median(r) if r else None

    def spread(self, name: str) -> float | None:
        """Half the interquartile range of ``name``'s paired ratios, relative to their median."""
        return _spread(self.ratios.get(name))

    def pair(self, name: str, reference: str) -> tuple[float, float | None] | None:
        """``name`` against another method of the rounds, round by round: the median ratio and its spread."""
        a, b = self.bests.get(name), self.bests.get(reference)
        if not a or not b:
            return None
        r = [x / y for x, y in zip(a, b)]
        return statistics.median(r), _spread(r)


def _spread(r: list[float] | None) -> float | None:
    if not r or len(r) < 4:
        return None
    q = statistics.quantiles(r, n=4)
    return (q[2] - q[0]) / 2 / statistics.median(r)


def measure(methods: dict[str, Callable[[], float]], reference: str | None, rounds: int, reps: int = 3
            ) -> Measured:
    """Time every method (each returns its own figure, lower is better) as the module docstring says."""
    names = list(methods)
    for name in names:
        methods[name]()
    bests: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        best = {name: float("inf") for name in names}
        for _ in range(reps):
            for name in order:
                best[name] = min(best[name], methods[name]())
        for name in names:
            bests[name].append(best[name])
    out = Measured(bests)
    if reference is not None and reference in bests:
        ref = bests[reference]
        out.ratios = {name: [a / b for a, b in zip(bests[name], ref)] for name in names if name != reference}
    wandering = _wandering(bests)
    if wandering:
        out.warnings.append(f"round bests wander (interquartile range over median): {', '.join(wandering)}: a busy "
                            "or throttling machine")
    return out


def _wandering(bests: dict[str, list[float]]) -> list[str]:
    """The methods whose round bests wander by more than UNSTABLE (interquartile range over median), with it."""
    wandering = []
    for name, values in bests.items():
        if len(values) >= 4:
            q = statistics.quantiles(values, n=4)
            wander = (q[2] - q[0]) / statistics.median(values)
            if wander > UNSTABLE:
                wandering.append(f"{name} {wander:.0%}")
    return wandering


def machine_warnings() -> list[str]:
    """What makes this machine a poor place to measure, as pyperf's checks say it (empty: nothing found)."""
    warnings = []
    governors = set()
    for cpu in range(os.cpu_count() or 1):
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor") as f:
                governors.add(f.read().strip())
        except OSError:
            break
    if governors - {"performance"}:
        warnings.append(f"CPU frequency governor {'/'.join(sorted(governors))} (not 'performance'): clock speeds "
                        "move with load")
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    cores = usable_cores()
    if load > 0.5 * cores:
        warnings.append(f"load average {load:.1f} on {cores} usable cores: other work shares the machine")
    return warnings


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity and CPU quota: taichi_aot._cpus)."""
    from taichi_aot._cpus import usable_cpus

    return usable_cpus()
