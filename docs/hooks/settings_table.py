"""MkDocs hook: the settings and option tables of the docs, made from the one table in the code.

A page that holds the marker ``<!-- settings-table … -->`` gets, in its place, the Markdown
table of :data:`madohub_nb.hub_settings.SETTINGS` (name, default, live or fixed, help); the
markers ``<!-- route-options-table … -->`` and ``<!-- tile-options-table … -->`` get the
tables of :data:`madohub_nb.pipeline.options.ROUTE` and ``TILE`` (name, default, where it
applies, the ``%madohub`` flag, help). The docs never restate a default or a range that the
code could change without them.
"""

from __future__ import annotations

import re
from typing import Any

from madohub_nb.hub_settings import settings_markdown
from madohub_nb.pipeline.options import options_markdown

MARKER = re.compile(r"<!-- settings-table:[^>]*-->")
OPTIONS_MARKER = re.compile(r"<!-- (route|tile)-options-table:[^>]*-->")


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace each marker with its table."""
    markdown = MARKER.sub(lambda _m: settings_markdown(), markdown)
    return OPTIONS_MARKER.sub(lambda m: options_markdown(m[1]), markdown)
