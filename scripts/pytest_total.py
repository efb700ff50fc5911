"""The total of several pytest runs, from their logs: scripts/test.sh's last line.

Usage: python scripts/pytest_total.py LOG...   (one log a run)

Each log's last summary line (``824 passed, 59 skipped in 512.30s (0:08:32)``, with or without ``=`` around it, as
``-q`` or not prints it) is read; the counts are summed into one line:
``total: 824 passed, 0 failed, 59 skipped, 0 errors`` (xfailed and xpassed follow where there are any). A log with
no summary line (a run that crashed or was killed) counts as one error, and a line on stderr says which.
"""

from __future__ import annotations

import re
import sys

ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: pytest's closing line: counts (``N word`` joined by ``, ``) or ``no tests ran``, then the time
SUMMARY = re.compile(r"^=*\s*(?P<counts>\d+ \w+(?:, \d+ \w+)*|no tests ran)(?: in [\d.]+s(?: \([\d:.]+\))?)\s*=*$")
#: pytest's words, as the total names them (warnings and deselected tests are not results)
KINDS = {"passed": "passed", "failed": "failed", "skipped": "skipped", "error": "errors", "errors": "errors",
         "xfailed": "xfailed", "xpassed": "xpassed"}


def summary(text: str) -> dict[str, int] | None:
    """The counts of the last pytest summary line in ``text``, by the total's names; None without one."""
    found = None
    for line in text.splitlines():
        m = SUMMARY.match(ANSI.sub("", line).strip())
        if m:
            found = m.group("counts")
    if found is None:
        return None
    counts: dict[str, int] = {}
    if found != "no tests ran":
        for item in found.split(", "):
            n, word = item.split(" ", 1)
            if word in KINDS:
                counts[KINDS[word]] = counts.get(KINDS[word], 0) + int(n)
    return counts


def total(texts: list[str]) -> tuple[str, list[int]]:
    """The total line of the runs' outputs, and the indices of those without a summary line."""
    sums = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0, "xfailed": 0, "xpassed": 0}
    missing = []
    for i, text in enumerate(texts):
        counts = summary(text)
        if counts is None:
            missing.append(i)
            counts = {"errors": 1}
        for kind, n in counts.items():
            sums[kind] += n
    errors = f"{sums['errors']} error{'' if sums['errors'] == 1 else 's'}"  # as pytest says it
    line = f"total: {sums['passed']} passed, {sums['failed']} failed, {sums['skipped']} skipped, {errors}"
    line += "".join(f", {sums[k]} {k}" for k in ("xfailed", "xpassed") if sums[k])
    return line, missing


def main(paths: list[str]) -> int:
    texts = []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                texts.append(f.read())
        except OSError:
            texts.append("")
    line, missing = total(texts)
    for i in missing:
        print(f"test: {paths[i]}: no pytest summary line (the run crashed or was stopped): counted as 1 error",
              file=sys.stderr)
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
