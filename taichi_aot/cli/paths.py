"""The command line's check of an output path, before any long work (every command that writes a file, the
profile's too)."""

from __future__ import annotations

import os

__all__ = ["unwritable"]


def unwritable(path: str | None, option: str, folder: bool = False, makes_folders: bool = False) -> str | None:
    """Why ``path`` cannot be written (checked before any long work), or None. ``folder``: it may be a folder;
    ``makes_folders``: the command creates missing folders (then the nearest existing one must be writable)."""
    if not path or path == "-":
        return None
    if os.path.isdir(path) and not folder:
        return f"{option} {path!r} is a folder"
    parent = os.path.dirname(os.path.abspath(path))
    while makes_folders and not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"{option} {path!r}: no folder {parent!r}"
    if not os.access(parent, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return f"{option} {path!r} cannot be written"
    return None
