"""``python -m taichi_aot`` (or ``taichi-aot``, which calls ``main``): the command line of taichi_aot.cli, with the
bench's command added from its own room above it (taichi_aot_bench)."""

from __future__ import annotations

import sys

from .cli import main as cli_main

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the command, return its exit status."""
    from taichi_aot_bench.command import add_bench

    return cli_main(argv, extra=(add_bench,))


if __name__ == "__main__":
    sys.exit(main())
