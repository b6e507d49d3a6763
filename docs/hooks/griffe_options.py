"""Griffe extension: the API reference shows ``Hub.tile`` / ``connect`` / ``gather`` with the
keywords of the one table of options, as ``help()`` and Jupyter's ``?`` do.

In the source those methods take ``*args, **options`` and get their ``__signature__`` from
:mod:`madohub_nb.pipeline.options`; griffe reads the source, so this extension gives their
documented parameters the same table (names, annotations, defaults, which are keyword-only).
"""

from __future__ import annotations

import inspect
from typing import Any

import griffe

from madohub_nb.hub import Hub

METHODS = ("tile", "connect", "gather")
_KINDS = {
    inspect.Parameter.POSITIONAL_OR_KEYWORD: griffe.ParameterKind.positional_or_keyword,
    inspect.Parameter.KEYWORD_ONLY: griffe.ParameterKind.keyword_only,
}


class TableSignatures(griffe.Extension):
    """Replace the parameters of ``madohub_nb.hub.Hub.<METHODS>`` with their table's."""

    def on_function_instance(self, *, func: griffe.Function, **_: Any) -> None:
        """Give each of the three methods the parameters of its generated signature."""
        owner = func.parent
        if owner is None or owner.path != "madohub_nb.hub.Hub" or func.name not in METHODS:
            return
        shown = inspect.signature(getattr(Hub, func.name))
        func.parameters = griffe.Parameters(
            *(
                griffe.Parameter(
                    p.name,
                    annotation=None if p.annotation is p.empty else str(p.annotation),
                    kind=_KINDS[p.kind],
                    default=None if p.default is p.empty else repr(p.default),
                )
                for p in shown.parameters.values()
            )
        )
