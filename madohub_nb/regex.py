"""Regexes compiled on first use, for the agent tables' screen patterns.

The profiles, permission dialogs and screen cleaning hold about 130 patterns; compiling
them all took about 15 ms of every ``import madohub_nb`` (a third of the package's own
import), though a kernel uses the patterns of the kinds it has tiles of. A
:class:`LazyPattern` keeps the source and flags and compiles on the first search, match,
substitution or attribute read; from then on those are the compiled pattern's own bound
methods, with no indirection. Its ``.compiled`` is the :class:`re.Pattern` itself.

``tests/test_profiles.py`` compiles every pattern of the table, so a typo in one still
fails the suite, not a user's first screen.
"""

from __future__ import annotations

import re
from typing import Any, cast

_FORWARDED = (
    "search",
    "match",
    "fullmatch",
    "sub",
    "subn",
    "split",
    "findall",
    "finditer",
    "scanner",
    "flags",
    "groups",
    "groupindex",
)


class LazyPattern:
    """A :class:`re.Pattern` in all but its type, compiled when it is first used."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self._flags = flags

    def __getattr__(self, name: str) -> Any:
        """Compile on the first read of ``compiled`` or of a forwarded attribute."""
        if name != "compiled" and name not in _FORWARDED:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        compiled = re.compile(self.pattern, self._flags)
        attributes = self.__dict__  # found by later lookups, before __getattr__ is asked
        attributes.update((forwarded, getattr(compiled, forwarded)) for forwarded in _FORWARDED)
        attributes["compiled"] = compiled
        return attributes[name]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyPattern):
            other = other.compiled
        if isinstance(other, re.Pattern):
            return bool(self.compiled == other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.compiled)  # equal to an equal re.Pattern's hash

    def __repr__(self) -> str:
        return repr(self.compiled)

    def __reduce__(self) -> tuple[Any, ...]:
        return (re.compile, (self.pattern, self._flags))


def lazy_compile(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """``re.compile(pattern, flags)``, done when the pattern is first used."""
    return cast("re.Pattern[str]", LazyPattern(pattern, flags))


def compiled(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """The :class:`re.Pattern` behind ``pattern`` (itself when already compiled)."""
    return pattern.compiled if isinstance(pattern, LazyPattern) else pattern
