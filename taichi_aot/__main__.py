"""``python -m taichi_aot``: the command line, which lives in taichi_aot.cli (``taichi-aot`` calls ``main``)."""

from __future__ import annotations

import sys

from .cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
