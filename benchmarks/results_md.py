"""Render ``taichi-aot bench --json`` results as Markdown tables (for RESULTS.md).

    python benchmarks/results_md.py RESULTS.json [MORE.json ...] > section.md
"""

from __future__ import annotations

import json
import sys

from taichi_aot_bench.report import format_figure

# typographic marks of the tables, by name (a plain "-" or "x" would read as a minus or a letter)
DASH = "\N{EN DASH}"
TIMES = "\N{MULTIPLICATION SIGN}"


def render(results: dict) -> str:
    """The Markdown of one results file: a table a section, for each arch."""
    out = []
    for arch, info in results["archs"].items():
        out.append(f"### {arch}: {info['device']}\n")
        out.append(f"{results['date']}, {results['machine']}, Python {results['python']}, numpy {results['numpy']}, "
                   f"C-API {results['c_api_version']}{', quick mode' if results['quick'] else ''}.\n")
        section = None
        for r in results["rows"]:
            if r["arch"] != arch:
                continue
            if r["section"] != section:
                section = r["section"]
                out.append(f"\n**{section}** ({r['unit']})\n")
                out.append(f"| figure | median | min{DASH}max | ratio | ratio of mins | target | against |")
                out.append("|---|---:|---:|---:|---:|---|---|")
            rng = f"{format_figure(r['min'])}{DASH}{format_figure(r['max'])}" if r["min"] != r["max"] else ""
            ratio = f"{r['ratio']:.2f}{TIMES}" if r["ratio"] is not None else ""
            mins = f"{r['min_ratio']:.2f}{TIMES}" if r.get("min_ratio") is not None else ""
            target = (r["target"] or "") + ("" if r["met"] is None else (" ✔" if r["met"] else " ✘ missed"))
            against = (r["limit"] or "") + (f" ({r['note']})" if r["note"] else "")
            median = format_figure(r["median"])
            out.append(f"| {r['name']} | {median} | {rng} | {ratio} | {mins} | {target} | {against} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    for path in sys.argv[1:]:
        with open(path) as f:
            print(render(json.load(f)))
