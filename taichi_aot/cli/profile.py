"""``taichi-aot profile SCRIPT.py [ARGS ...]``: run a Python script under a profile of every runtime it makes
(taichi_aot.profile), then print each kernel's device time as a table; ``--trace FILE`` writes the Chrome trace,
``--plot FILE`` the chart."""

from __future__ import annotations

import argparse
import os
import runpy
import sys


def cmd_profile(args: argparse.Namespace) -> int:
    """Run the script under a profile of every runtime (the module docstring); its exit status."""
    from ..profile import Profile

    prof = Profile(every=True).open()
    argv, path = sys.argv, list(sys.path)
    sys.argv = [args.script, *args.script_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))  # as python SCRIPT.py puts its folder first
    status = 0
    try:
        runpy.run_path(args.script, run_name="__main__")
    except SystemExit as e:  # the script's own exit: its status kept, the profile still printed
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv, sys.path[:] = argv, path
        prof.close()
    print(f"\n-- taichi_aot profile of {args.script} --", file=sys.stderr)
    print(prof.table(), file=sys.stderr)
    if args.trace:
        print(f"trace: {prof.save(args.trace)} (open it in https://ui.perfetto.dev or chrome://tracing)",
              file=sys.stderr)
    if args.plot:
        print(f"plot: {prof.plot(args.plot)}", file=sys.stderr)
    return status
