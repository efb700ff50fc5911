"""scripts/package.sh's summary of a repaired wheel, and its checks: the glibc each shared object needs, the tag,
abi3audit's verdict.

Usage: python scripts/wheel_report.py WHEEL [--extensions-glibc 2.28] [--abi3audit REPORT.json] [--glibc-log FILE]
[--compiler TEXT]

The glibc an object needs is the newest ``GLIBC_x.y`` among its version needs (``.gnu.version_r``, what the dynamic
loader checks and ``objdump -T`` shows beside each undefined symbol), read with pyelftools (auditwheel's own
dependency: the package extra). Exits 1 where an extension (``*.abi3.so``) needs a glibc newer than
``--extensions-glibc``, the manylinux tag is not the newest glibc any object needs, or abi3audit found a call outside
the stable ABI.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import zipfile

from elftools.elf.elffile import ELFFile  # type: ignore[import-untyped]

GLIBC = re.compile(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?$")
TAG = re.compile(r"-manylinux_(\d+)_(\d+)_x86_64\.whl$")


def glibc_needed(data: bytes) -> tuple[int, int]:
    """The newest glibc (major, minor) an ELF shared object's version needs name; (0, 0) for none."""
    elf = ELFFile(io.BytesIO(data))
    section = elf.get_section_by_name(".gnu.version_r")
    found = [(0, 0)]
    if section is not None:
        for _need, auxes in section.iter_versions():
            for aux in auxes:
                m = GLIBC.match(aux.name)
                if m:
                    found.append((int(m.group(1)), int(m.group(2))))
    return max(found)


def objects(wheel: str) -> dict[str, tuple[int, int]]:
    """Every shared object in the wheel: its path there and the glibc it needs."""
    with zipfile.ZipFile(wheel) as z:
        return {name: glibc_needed(z.read(name)) for name in sorted(z.namelist())
                if name.endswith(".so") or ".so." in os.path.basename(name)}


def version(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def abi3_verdict(report: str) -> tuple[bool, str]:
    """abi3audit's --report JSON in one line: (all abi3 and no call outside the stable ABI, the line)."""
    with open(report, encoding="utf-8") as f:
        audit = json.loads(f.read().strip().splitlines()[-1])
    [(_, spec)] = audit["specs"].items()
    results = spec["wheel"]
    bad = [f"{r['name']}: {', '.join(map(str, r['result']['non_abi3_symbols'])) or 'not abi3'}" for r in results
           if not r["result"]["is_abi3"] or r["result"]["non_abi3_symbols"]]
    extensions = [r for r in results if r["name"].endswith(".abi3.so")]
    computed = sorted({r["result"]["computed"] for r in extensions if r["result"].get("computed")})
    if bad:
        return False, f"abi3audit: outside the stable ABI: {'; '.join(bad)}"
    return True, (f"abi3audit: {len(results)} objects audited, all abi3; the {len(extensions)} extensions use the "
                  f"stable ABI of {', '.join(computed) or '?'} and nothing outside it")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheel")
    parser.add_argument("--extensions-glibc", default="2.28", help="the newest glibc an extension may need")
    parser.add_argument("--abi3audit", help="abi3audit --report's JSON")
    parser.add_argument("--glibc-log", help="write each object's glibc here")
    parser.add_argument("--compiler", default="", help="what compiled the extensions (for the summary)")
    args = parser.parse_args(argv)
    limit = tuple(int(p) for p in args.extensions_glibc.split("."))
    found = objects(args.wheel)
    if args.glibc_log:
        with open(args.glibc_log, "w", encoding="utf-8") as f:
            f.writelines(f"GLIBC_{version(v)}\t{name}\n" for name, v in found.items())
    ok = True
    name = os.path.basename(args.wheel)
    print(f"package: wheel {name} ({os.path.getsize(args.wheel) / 1e6:.1f} MB)")
    extensions = {n: v for n, v in found.items() if n.endswith(".abi3.so")}
    libraries = {n: v for n, v in found.items() if n not in extensions}
    newest = max(found.values(), default=(0, 0))
    m = TAG.search(name)
    tag = (int(m.group(1)), int(m.group(2))) if m else None
    setters = ", ".join(os.path.basename(n) for n, v in found.items() if v == newest)
    built = f" (built for {args.extensions_glibc}: {args.compiler})" if args.compiler else ""
    print(f"package: tag manylinux_{version(tag).replace('.', '_') if tag else '?'}_x86_64: needs glibc "
          f"{version(newest)}, set by {setters}; the extensions need at most "
          f"{version(max(extensions.values(), default=(0, 0)))}{built}")
    print("package: glibc needed: " + ", ".join(f"{os.path.basename(n)} {version(v)}"
                                                  for n, v in {**extensions, **libraries}.items()))
    if tag != newest:
        print(f"package: error: the tag says glibc {version(tag) if tag else '?'}, the objects need "
              f"{version(newest)}", file=sys.stderr)
        ok = False
    over = [f"{n} (GLIBC_{version(v)})" for n, v in extensions.items() if v > limit]
    if over:
        print(f"package: error: extensions need a glibc newer than {args.extensions_glibc}: {', '.join(over)}",
              file=sys.stderr)
        ok = False
    if not extensions:
        print("package: error: no extension in the wheel", file=sys.stderr)
        ok = False
    if args.abi3audit:
        good, line = abi3_verdict(args.abi3audit)
        print(f"package: {line}")
        ok = ok and good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
