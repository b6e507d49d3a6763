"""Conditions on a route: ``when`` / ``unless`` regexes over the extracted answer.

A route with a condition routes only the turns whose answer passes it; any other
turn is skipped (a ``turn_skipped`` event saying why), before the transform and
before loop protection counts anything. Pure: no tmux, no clock.

Conditions make graphs of routes (a reviewer's LGTM to a shipper, the rest back
to the writer), and a graph can loop. :func:`endless_cycles` finds the loops
that nothing on them can ever end but ``max_rounds``: see its docstring for
exactly which.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..defaults import check_regex


@dataclass(frozen=True)
class Condition:
    """``when``: the answer must match; ``unless``: it must not. Either, both or neither."""

    when: re.Pattern[str] | None = None
    unless: re.Pattern[str] | None = None

    @property
    def conditional(self) -> bool:
        """The route has a condition at all."""
        return self.when is not None or self.unless is not None

    @property
    def passes_everything(self) -> bool:
        """Every answer passes: no ``unless``, and no ``when`` or one matching the empty string
        (a regex that matches ``""`` is found in any text, e.g. ``.*`` or ``x?``)."""
        return self.unless is None and (self.when is None or self.when.search("") is not None)

    def why_not(self, answer: str | None) -> str | None:
        """Why ``answer`` does not pass (the ``turn_skipped`` reason), or None when it does."""
        text = answer or ""
        if self.when is not None and self.when.search(text) is None:
            return f"when={self.when.pattern!r} did not match the answer"
        if self.unless is not None and (found := self.unless.search(text)) is not None:
            return f"unless={self.unless.pattern!r} matched the answer ({found.group(0)!r})"
        return None

    def describe(self) -> str:
        """``when=/…/ unless=/…/`` for reprs and cards ('' without a condition)."""
        parts = [
            f"{name}={pattern.pattern!r}"
            for name, pattern in (("when", self.when), ("unless", self.unless))
            if pattern is not None
        ]
        return " ".join(parts)


def make_condition(when: str | None, unless: str | None) -> Condition:
    """The condition of ``when=`` / ``unless=``, each compiled (a bad regex is a ValueError
    naming it)."""
    return Condition(
        when=check_regex("when", when) if when is not None else None,
        unless=check_regex("unless", unless) if unless is not None else None,
    )


@dataclass(frozen=True)
class Edge:
    """One hop of a route as the cycle check sees it: ``source`` → ``target``, and what
    can end it (its condition, its stop keyword)."""

    route_id: str
    source: str
    target: str
    condition: Condition
    stop_keyword: str | None


def endless_cycles(edges: Sequence[Edge], new: Iterable[Edge]) -> list[list[Edge]]:
    """The cycles through a ``new`` edge that can never stop but by ``max_rounds``.

    A cycle of routes stops when one of its hops lets a turn go (a condition that
    does not pass) or ends (a stop keyword). It *can never stop* when it has at
    least one conditional route (a cycle without any is today's plain ping-pong,
    bounded by ``max_rounds`` as always) and yet no hop can let a turn go: no stop
    keyword anywhere on it, and every condition on it passes every answer
    (:attr:`Condition.passes_everything`: no ``unless``, a ``when`` that matches
    the empty string). Each such cycle is returned once, as its edges in order.
    """
    out: list[list[Edge]] = []
    by_source: dict[str, list[Edge]] = {}
    for edge in edges:
        by_source.setdefault(edge.source, []).append(edge)

    def endless(cycle: list[Edge]) -> bool:
        return (
            any(e.condition.conditional for e in cycle)
            and all(e.stop_keyword is None for e in cycle)
            and all(e.condition.passes_everything for e in cycle)
        )

    seen: set[tuple[str, ...]] = set()
    for start in new:
        # Depth-first from the new edge's target back to its source, each tile once.
        stack: list[tuple[Edge, list[Edge], set[str]]] = [
            (start, [start], {start.source, start.target})
        ]
        while stack:
            edge, path, visited = stack.pop()
            if edge.target == start.source:
                key = tuple(sorted(e.route_id for e in path))
                if key not in seen and endless(path):
                    seen.add(key)
                    out.append(path)
                continue
            for nxt in by_source.get(edge.target, []):
                if nxt.target == start.source or nxt.target not in visited:
                    stack.append((nxt, [*path, nxt], visited | {nxt.target}))
    return out


def describe_cycle(cycle: Sequence[Edge]) -> str:
    """``writer → reviewer → writer (routes writer->reviewer#1, reviewer->writer#2)``."""
    tiles = " → ".join([cycle[0].source, *(e.target for e in cycle)])
    ids = ", ".join(dict.fromkeys(e.route_id for e in cycle))
    return f"{tiles} (routes {ids})"
