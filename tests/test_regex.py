"""The agent tables' patterns compile on first use and then behave as re.Pattern."""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterator
from types import ModuleType

import pytest

from madohub_nb.agents import permission, profiles, screen
from madohub_nb.agents.regex import LazyPattern, compiled, lazy_compile
from madohub_nb.io import log_redact, remote, tmux
from madohub_nb.io.agent_records import aider, transcript
from madohub_nb.pipeline import tile, transforms, workflow


def test_a_lazy_pattern_compiles_on_first_use_and_matches_like_re() -> None:
    lazy = lazy_compile(r"(?P<word>ab+)c", re.IGNORECASE)
    assert "compiled" not in vars(lazy)  # nothing compiled yet
    m = lazy.search("xxABBC")
    assert m is not None and m.group("word") == "ABB"
    assert "compiled" in vars(lazy)
    assert lazy.sub("-", "abc abbc") == "- -"
    assert lazy.groupindex["word"] == 1 and lazy.flags & re.IGNORECASE
    assert lazy == re.compile(r"(?P<word>ab+)c", re.IGNORECASE)
    assert hash(lazy) == hash(re.compile(r"(?P<word>ab+)c", re.IGNORECASE))
    assert lazy != lazy_compile(r"(?P<word>ab+)c")  # other flags
    assert pickle.loads(pickle.dumps(lazy)) == compiled(lazy)
    assert isinstance(compiled(lazy), re.Pattern) and compiled(compiled(lazy)) is compiled(lazy)


def test_a_bad_pattern_fails_at_first_use_with_res_error() -> None:
    bad = lazy_compile(r"(unclosed")
    with pytest.raises(re.error, match="missing \\)"):
        bad.search("x")
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        bad.nope  # noqa: B018 - an unknown name is not a pattern's


def _patterns(value: object) -> Iterator[LazyPattern]:
    if isinstance(value, LazyPattern):
        yield value
    elif isinstance(value, tuple | list | frozenset | set):
        for item in value:
            yield from _patterns(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _patterns(item)
    elif hasattr(value, "__dataclass_fields__") and not isinstance(value, type):
        for name in value.__dataclass_fields__:
            yield from _patterns(getattr(value, name))


MODULES = [profiles, permission, screen, tmux, aider, workflow, tile, transforms, transcript]
MODULES += [remote, log_redact]  # the log's text scrubbing holds its pattern


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_every_lazy_pattern_of_the_package_compiles(module: ModuleType) -> None:
    found = [rx for value in vars(module).values() for rx in _patterns(value)]
    assert found, f"no lazy pattern found in {module.__name__}"
    for rx in found:
        assert isinstance(compiled(rx), re.Pattern), rx.pattern
