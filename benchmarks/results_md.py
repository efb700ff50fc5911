"""Render ``taichi-aot bench --json`` results as Markdown tables (for RESULTS.md).

    python benchmarks/results_md.py RESULTS.json [MORE.json ...] > section.md
"""

import json
import sys

from taichi_aot._bench import _fmt as fmt


def render(results: dict) -> str:
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
                out.append("| figure | median | min–max | ratio | ratio of mins | target | against |")
                out.append("|---|---:|---:|---:|---:|---|---|")
            rng = f"{fmt(r['min'])}–{fmt(r['max'])}" if r["min"] != r["max"] else ""
            ratio = f"{r['ratio']:.2f}×" if r["ratio"] is not None else ""
            mins = f"{r['min_ratio']:.2f}×" if r.get("min_ratio") is not None else ""
            target = (r["target"] or "") + ("" if r["met"] is None else (" ✔" if r["met"] else " ✘ missed"))
            against = (r["limit"] or "") + (f" ({r['note']})" if r["note"] else "")
            out.append(f"| {r['name']} | {fmt(r['median'])} | {rng} | {ratio} | {mins} | {target} | {against} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    for path in sys.argv[1:]:
        with open(path) as f:
            print(render(json.load(f)))
