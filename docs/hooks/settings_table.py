"""MkDocs hook: the settings table of the docs, made from the one table in the code.

A page that holds the marker ``<!-- settings-table … -->`` gets, in its place, the Markdown
table of :data:`madohub_nb.hub_settings.SETTINGS` (name, default, live or fixed, help), so the
docs never restate a default or a range that the code could change without them.
"""

from __future__ import annotations

import re
from typing import Any

from madohub_nb.hub_settings import settings_markdown

MARKER = re.compile(r"<!-- settings-table:[^>]*-->")


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace the marker with the table."""
    return MARKER.sub(lambda _m: settings_markdown(), markdown)
