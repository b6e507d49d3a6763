"""MkDocs hook: a warning for each public object of the API reference without a docstring.

mkdocstrings leaves an undocumented member out of the page without a word, so a new public
method without a docstring would quietly vanish from the reference. This hook reads every
``::: madohub_nb.NAME`` directive of a page, loads the package with griffe (statically, as
mkdocstrings does) and warns for the object itself and for each public method and property
defined on it (names without a leading ``_``, as the ``filters`` of mkdocs.yml show them).
Plain data attributes and dataclass fields are described by their class's docstring and are
not required to have their own. ``mkdocs build --strict`` (``make docs``, run by ``make test``)
turns each warning into a failed build. After the build it also warns for each name of
``madohub_nb.__all__`` that no page references, so the reference covers the whole public API.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import griffe

PACKAGE = "madohub_nb"
ROOT = Path(__file__).resolve().parents[2]
DIRECTIVE = re.compile(r"^:::\s+(\S+)\s*$", re.MULTILINE)
# The docstrings cite objects with Sphinx roles (:class:`Hub`); Markdown keeps the role's name.
SPHINX_ROLE = re.compile(r":(?:class|meth|attr|func|mod|exc|data|obj):(?=<code>)")

log = logging.getLogger("mkdocs.hooks.api_docstrings")
_loaded: dict[str, Any] = {}
_referenced: set[str] = set()


def _package() -> Any:
    """The package as griffe sees it, loaded once per build."""
    if PACKAGE not in _loaded:
        _loaded[PACKAGE] = griffe.load(PACKAGE, search_paths=[str(ROOT)], resolve_aliases=True)
    return _loaded[PACKAGE]


def _target(obj: Any) -> Any:
    return obj.final_target if obj.is_alias else obj


def _shown_members(obj: Any) -> list[Any]:
    """The public methods, properties and nested classes defined on a class (not inherited)."""
    members = []
    for name, member in obj.members.items():
        if name.startswith("_") or member.is_alias:
            continue
        if member.is_function or member.is_class or "property" in member.labels:
            members.append(member)
    return members


def undocumented(identifier: str) -> list[str]:
    """Paths of the objects ``::: identifier`` shows that have no docstring."""
    if not identifier.startswith(PACKAGE + "."):
        return [f"{identifier} (the API reference documents {PACKAGE}'s exports only)"]
    try:
        obj = _target(_package()[identifier.removeprefix(PACKAGE + ".")])
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return [f"{identifier} (no such object)"]
    missing = [] if obj.docstring else [identifier]
    if obj.is_class:
        for member in _shown_members(obj):
            if not member.docstring:
                missing.append(f"{identifier}.{member.name}")
            elif member.is_class:
                missing += undocumented(f"{identifier}.{member.name}")
    return missing


def on_pre_build(**_: Any) -> None:
    """Start each build (``mkdocs serve`` rebuilds) from the files as they are now."""
    _loaded.clear()
    _referenced.clear()


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Warn for each undocumented object the page's ``:::`` directives reference."""
    for identifier in DIRECTIVE.findall(markdown):
        _referenced.add(identifier)
        for path in undocumented(identifier):
            log.warning(
                "%s: %s has no docstring, so the API reference leaves it out; "
                "write one (what it is and why, a line or three)",
                page.file.src_uri,
                path,
            )
    return markdown


def on_page_content(html: str, **_: Any) -> str:
    """Show ``:meth:`Hub.tile``` as ``Hub.tile``, without the role's name."""
    return SPHINX_ROLE.sub("", html)


def on_post_build(**_: Any) -> None:
    """Warn for each export of the package that no page of the API reference shows."""
    for name in _package().exports or ():
        if f"{PACKAGE}.{name}" not in _referenced:
            log.warning(
                "%s.%s is exported (__all__) but no page shows it: add '::: %s.%s' to a "
                "page under docs/reference/",
                PACKAGE,
                name,
                PACKAGE,
                name,
            )
