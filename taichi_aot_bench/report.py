"""What a run of ``taichi-aot bench`` prints and draws: the tables of rows, the target lines, the picture."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .row import Row


def format_rows(rows: Sequence[Row | dict]) -> str:
    """A readable table: median, min-max, ratio to the limit, target and whether it is met."""
    lines = []
    head = f"  {'':52} {'median':>10} {'min-max':>19} {'ratio':>7} {'(mins/±)':>8}  {'target':<8} vs"
    section = None
    for r in rows:
        d = r.to_dict() if isinstance(r, Row) else r
        if d["section"] != section:
            section = d["section"]
            lines.append(f"-- {d['arch']}: {section} ({d['unit']})")
            lines.append(head)
        lo, hi = d["min"], d["max"]
        rng = f"{format_figure(lo)}-{format_figure(hi)}" if lo is not None and hi is not None and lo != hi else ""
        ratio = f"{format_figure(d['ratio'])}x" if d["ratio"] is not None else ""  # as compared (row.as_shown)
        if d.get("spread") is not None:  # paired rounds (measure.py): the ratios' spread
            mins = f"±{d['spread']:.1%}"
        else:
            mins = f"{d['min_ratio']:.2f}x" if d.get("min_ratio") is not None else ""
        target = d["target"] or ""
        mark = "" if d["met"] is None else (" ok" if d["met"] else " MISSED")
        target = target.replace(" ", "")
        vs = (d["limit"] or "") + (f"; {d['note']}" if d["note"] else "")
        lines.append(f"  {d['name'][:52]:52} {format_figure(d['median']):>10} {rng:>19} {ratio:>7} {mins:>8}  "
                     f"{target + mark:<8} {vs}")
    return "\n".join(lines)


def format_figure(v: float | None) -> str:
    """A figure to three significant digits, whole numbers from 100 on (thousands grouped): what a row's target is
    compared with (:func:`.row.as_shown`); "" for None."""
    if v is None:
        return ""
    if v != v:
        return "nan"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}"


def summary(results: dict) -> str:
    """The target lines only: what the issue asks to see."""
    out = [f"errors: {e}" for e in results.get("errors", [])] + ["targets:"]
    missed = 0
    for d in results["rows"]:
        if d["target"]:
            state = "met" if d["met"] else "MISSED"
            missed += not d["met"]
            value = d["ratio"] if d["ratio"] is not None else d["median"]
            out.append(f"  [{state:6}] {d['arch']:7} {d['name']}: {format_figure(value)} ({d['target']})"
                       f"{' vs ' + d['limit'] if d['limit'] else ''}")
    cores = results.get("cores")
    if missed and cores is not None and cores < SET_ON_CORES:
        out.append(f"note: this host gives the bench {cores} usable CPU core{'s' if cores != 1 else ''}; the targets "
                   f"were set on GPU hosts of {SET_ON_CORES} or more (benchmarks/RESULTS.md). Rows that time "
                   "threads, processes, host copies, torch or start-up share those cores with the bench itself "
                   f"here, so some of the {missed} MISSED may be the host's, not the package's: compare the ratios "
                   "on such a host")
    return "\n".join(out)


#: The fewest usable cores of the hosts the bench's targets were set on (the device hosts: 16).
SET_ON_CORES = 8


def _empty(ax: Any, title: str, what: str) -> None:
    ax.set_title(title, fontsize=9)
    ax.text(0.5, 0.5, f"no {what} in this run", ha="center", va="center", transform=ax.transAxes, color="grey")
    ax.set_axis_off()


def _plot_launch(ax: Any, launch: list[dict], title: str) -> None:
    """One arch's launch costs: a bar per path, log scale, the min-max as error bars."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator

    if not launch:
        return _empty(ax, title, "launch figures")
    ax.barh([d["name"] for d in launch], [d["median"] for d in launch],
            xerr=[[d["median"] - d["min"] for d in launch], [d["max"] - d["median"] for d in launch]])
    ax.set_xscale("log")
    # plain numbers at 1, 2 and 5 of each decade (matplotlib's own minor labels overlap on a short range)
    ax.xaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
    for axis_format in (ax.xaxis.set_major_formatter, ax.xaxis.set_minor_formatter):
        axis_format(FormatStrFormatter("%g"))
    ax.invert_yaxis()  # in the order the section ran them, top down
    ax.set_xlabel("µs per launch (median, min-max; log scale)")
    ax.set_title(title, fontsize=9)
    ax.tick_params(axis="y", labelsize=7)


def _plot_throughput(ax: Any, rows: list[dict], title: str) -> None:
    """One arch's throughput curves: GB/s against the element count, both on log scales (the kernels span
    orders of magnitude, and on a linear scale the small sizes lie on top of each other at the bottom)."""
    series: dict[str, list] = {}
    for d in rows:
        series.setdefault(d["name"].rsplit(" @", 1)[0], []).append((d["params"]["elements"], d["median"]))
    if not series:
        return _empty(ax, title, "throughput figures")
    for name, pts in series.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("f32 elements (log scale)")
    ax.set_ylabel("GB/s, bytes read + written (log scale)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="best")


def plot(results: dict, path: str) -> None:
    """Write a PNG of the launch costs and throughput (needs matplotlib)."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    archs = list(results["archs"])
    fig, axes = plt.subplots(2, max(len(archs), 1), figsize=(6.5 * max(len(archs), 1), 9.5), squeeze=False)
    for i, arch in enumerate(archs):
        rows = [d for d in results["rows"] if d["arch"] == arch]
        device = textwrap.fill(str(results["archs"][arch]["device"]), 64)  # a long device name on lines of its own
        _plot_launch(axes[0][i], [d for d in rows if d["section"] == "launch" and d["unit"] == "us/launch"],
                     f"{arch}: launch cost of a trivial kernel\n{device}")
        _plot_throughput(axes[1][i], [d for d in rows if d["section"] == "throughput"],
                         f"{arch}: memory-bound kernels\n{device}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
