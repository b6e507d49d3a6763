"""Regexes compiled on first use: :mod:`madohub_nb.regex`, named here for the agent tables.

The utility sits below every layer (adapters in ``io/`` use it too), so importing it never
loads the agents package and its kinds.
"""

from __future__ import annotations

from ..regex import LazyPattern, compiled, lazy_compile

__all__ = ["LazyPattern", "compiled", "lazy_compile"]
