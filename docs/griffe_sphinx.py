"""A Griffe extension for the API reference (mkdocs.yml loads it): the package's docstrings are read as Google
style, but their cross-references are Sphinx roles and some attributes are documented by ``#:`` comments.

* ``:class:`Arch```, ``:func:`~taichi_aot.capi.wait``` and the like become code spans (``Arch``, ``wait``),
  not the role's raw text;
* an attribute without a docstring takes the ``#:`` comment lines right above it (Sphinx's convention), so
  ``ArrayArgument`` or ``capi.library`` is described as in the source.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Docstring, Extension, Object

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|exc|data|obj|const):`(~?)([^`]+)`")


def _plain(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


class SphinxRoles(Extension):
    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is None and obj.is_attribute:
            self._doc_comment(obj)
        if obj.docstring is not None and ":`" in obj.docstring.value:
            obj.docstring.value = ROLE.sub(_plain, obj.docstring.value)

    @staticmethod
    def _doc_comment(obj: Object) -> None:
        path = obj.filepath
        if isinstance(path, list) or path not in obj.lines_collection or not obj.lineno:
            return
        lines = obj.lines_collection[path]
        found: list[str] = []
        i = obj.lineno - 2  # the line above the assignment (lineno counts from 1)
        while i >= 0 and lines[i].lstrip().startswith("#:"):
            found.insert(0, lines[i].lstrip()[2:].strip())
            i -= 1
        if found:
            obj.docstring = Docstring("\n".join(found), lineno=i + 2, endlineno=obj.lineno - 1, parent=obj)
