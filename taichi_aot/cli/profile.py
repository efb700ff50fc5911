"""``taichi-aot profile [--trace FILE] [--plot FILE] [--] SCRIPT.py [ARGS ...]``: run a Python script under a profile of
every runtime it makes (taichi_aot.profile), then print each kernel's device time as a table; ``--trace FILE`` writes
the Chrome trace, ``--plot FILE`` the chart.

Profile's options come before the script, as ``python -m cProfile -o FILE SCRIPT`` takes them: everything after
SCRIPT is the script's. ``--trace`` or ``--plot`` after SCRIPT is refused before the script runs (the usual slip of
the order), unless a ``--`` before SCRIPT says the script takes them itself."""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from typing import Any

#: profile's own options that take a value (a slip puts them after the script)
OWN_OPTIONS = ("--trace", "--plot")


def script_command(argv: list[str]) -> tuple[list[str], bool]:
    """The script's command line (SCRIPT and its arguments, exactly as given: argparse drops a ``--`` among them)
    from the whole command line ``argv``, and whether a ``--`` before SCRIPT marked it as the script's."""
    tokens = argv[argv.index("profile") + 1:]
    i = 0
    while i < len(tokens):
        if tokens[i] == "--":
            return tokens[i + 1:], True
        if tokens[i] in OWN_OPTIONS:
            i += 2
        elif tokens[i].startswith(tuple(f"{o}=" for o in OWN_OPTIONS)):
            i += 1
        else:
            return tokens[i:], False
    return [], False


def check_profile(args: argparse.Namespace) -> str | None:
    """What is wrong with profile's command line (checked before the script runs), or None; sets ``args.script`` and
    ``args.script_args`` from the command line as given, and ``args.plot`` to the file the chart goes to."""
    from ..errors import TaichiError
    from ..profile import plot_target
    from .paths import unwritable

    command, marked = script_command(args.argv)
    if command:
        args.script, args.script_args = command[0], command[1:]
    slips = [] if marked else [a for a in args.script_args if a.split("=", 1)[0] in OWN_OPTIONS]
    if slips:
        option = slips[0].split("=", 1)[0]
        return (f"{option} after the script goes to the script, not to profile: profile's options come before it "
                f"(python -m taichi_aot profile {option} FILE {args.script} ...); where the script itself takes "
                f"{option}, put -- before the script (python -m taichi_aot profile -- {args.script} ... {option} ...)")
    if not os.path.isfile(args.script):
        return f"no such script: {args.script!r}"
    if args.plot:
        try:
            args.plot = plot_target(args.plot, "--plot")[0]  # no matplotlib: refused before the script runs
        except TaichiError as e:
            return str(e)
    return unwritable(args.trace, "--trace") or unwritable(args.plot, "--plot")


def cmd_profile(args: argparse.Namespace) -> int:
    """Run the script under a profile of every runtime (the module docstring); its exit status (1 where it raised:
    its traceback from its own frame, the profile printed all the same)."""
    from ..profile import Profile

    prof = Profile(every=True).open()
    argv, path = sys.argv, list(sys.path)
    sys.argv = [args.script, *args.script_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))  # as python SCRIPT.py puts its folder first
    status = 0
    try:
        runpy.run_path(args.script, run_name="__main__")
    except SystemExit as e:  # the script's own exit: its status kept, the profile still printed
        status = _exit_status(e.code)
    except Exception as e:  # as python SCRIPT.py: the traceback (from the script's frame), status 1
        tb = _from_script(e.__traceback__, args.script)
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        status = 1
    finally:  # after Ctrl-C too: the profile of what ran
        sys.argv, sys.path[:] = argv, path
        prof.close()
        _report(prof, args)
    return status


def _exit_status(code: Any) -> int:
    """The status ``sys.exit(code)`` ends a process with: a message printed as Python prints it, status 1."""
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def _from_script(tb: Any, script: str) -> Any:
    """The traceback ``tb`` from the script's first frame on (runpy's and ours left out); None where no frame is the
    script's (it did not compile: the error says where)."""
    where = os.path.abspath(script)
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != where:
        tb = tb.tb_next
    return tb


def _report(prof: Any, args: argparse.Namespace) -> None:
    """The table (and each pool's workers'), and the trace and chart asked for (of this process's launches and the
    workers'), on standard error."""
    from ..errors import TaichiError
    from ..profile import nested, plot_rows, trace_of, write_trace

    print(f"\n-- taichi_aot profile of {args.script} --", file=sys.stderr)
    print(prof.table(), file=sys.stderr)
    pools = [p for p in prof.pools if p.kernels()]
    events = [(e.device, e) for e in prof.launches]
    rows = prof.kernels()
    for i, pool in enumerate(pools):
        which = f"pool {i} " if len(pools) > 1 else ""
        print(f"\n-- the workers of {which or 'its pool '}(each task inside pool.profile()) --", file=sys.stderr)
        print(pool.table(), file=sys.stderr)
        events += [(f"{which}worker {slot} {e.device}", e) for slot, e in pool.launches]
        rows += pool.kernels()
    if args.trace:
        try:
            written = write_trace(trace_of(events), args.trace, "--trace")
            print(f"trace: {written}" + (" (open it in https://ui.perfetto.dev or chrome://tracing)" if events
                                         else " (no launches in it)"), file=sys.stderr)
        except TaichiError as e:
            print(f"taichi-aot: --trace not written: {e}", file=sys.stderr)
    if args.plot and not rows:
        print(f"taichi-aot: --plot not written: no launch was profiled, nothing to draw ({args.plot})",
              file=sys.stderr)
    elif args.plot:
        try:
            print(f"plot: {plot_rows(nested(rows), args.plot, 20, '--plot')}", file=sys.stderr)
        except TaichiError as e:
            print(f"taichi-aot: --plot not written: {e}", file=sys.stderr)
