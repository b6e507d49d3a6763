"""What the stand-in agents answer: small, deterministic personas.

``reply(persona, prompt, turn)`` is a pure function, so a demo run or a test
always sees the same conversation. The personas are built for routing demos:
``writer`` and ``reviewer`` hold a review loop that ends with ``LGTM`` at
draft v3 (the demo's stop keyword); ``echo`` answers like the fake API the
real-agent fixtures were recorded against; ``counter`` makes each turn
countable in tests.
"""

from __future__ import annotations

import re
import zlib
from typing import Final

from ..defaults import check_choice
from ..errors import MadohubValueError

PERSONAS: Final = ("echo", "writer", "reviewer", "counter")
DEFAULT_PERSONA: Final = "echo"
DEFAULT_THINK_S: Final = 1.0
"""Seconds a stand-in 'thinks' per turn unless told otherwise."""

LGTM_FROM_VERSION: Final = 3
"""The reviewer approves drafts from this version on."""

ECHO_CHARS: Final = 40

_TOPICS: Final = ("function", "haiku", "spec")

_DRAFTS: Final[dict[str, tuple[str, ...]]] = {
    "function": (
        "def slugify(title):\n    return title.lower().replace(' ', '-')",
        "def slugify(title: str) -> str:\n    return '-'.join(title.lower().split())",
        "import re\n\n"
        "def slugify(title: str) -> str:\n"
        '    """Turn a title into a URL slug: lowercase words joined by \'-\'."""\n'
        "    words = re.findall(r'[a-z0-9]+', title.lower())\n"
        "    return '-'.join(words)",
        "import re\n\n"
        "def slugify(title: str, max_len: int = 60) -> str:\n"
        '    """Turn a title into a URL slug: lowercase words joined by \'-\'."""\n'
        "    words = re.findall(r'[a-z0-9]+', title.lower())\n"
        "    return '-'.join(words)[:max_len].rstrip('-')",
    ),
    "haiku": (
        "panes glow in the dark\nagents trade their words all night\nthe cursor blinks on",
        "one pane writes a line\nthe other reads it and frowns\nenter, enter, wait",
        "the writer drafts code\nthe reviewer sends back notes\nsilence means it's done",
        "the writer drafts code\nthe reviewer marks three lines\nsilence means it's done",
    ),
    "spec": (
        "retry(fn, attempts): call fn until it succeeds.",
        "retry(fn, attempts=3, delay_s=1.0): call fn up to `attempts` times,\n"
        "sleeping delay_s seconds between tries; return fn's result.",
        "retry(fn, attempts=3, delay_s=1.0): call fn up to `attempts` times,\n"
        "sleeping delay_s seconds between tries; return fn's result.\n"
        "Only OSError is retried; after the last failure the error is re-raised.\n"
        "Example: retry(fetch, attempts=2) -> fetch() or the second OSError.",
        "retry(fn, attempts=3, delay_s=1.0, retry_on=(OSError,)): call fn up to\n"
        "`attempts` times, sleeping delay_s seconds between tries; return fn's result.\n"
        "After the last failure the error is re-raised.\n"
        "Example: retry(fetch, attempts=2) -> fetch() or the second OSError.",
    ),
}

_COMMENTS: Final[dict[str, tuple[str, ...]]] = {
    "function": (
        "Add type hints to the signature.",
        "Collapse repeated separators: 'a  b' should not become 'a--b'.",
        "Strip punctuation: 'Hello, world!' keeps the comma.",
        "Add a docstring that says what a slug is.",
        "Cover the empty string in a test.",
    ),
    "haiku": (
        "Line two runs past seven syllables.",
        "The image in line one is vague; name the thing.",
        "End on a concrete image, not an abstraction.",
        "Cut the filler word in line three.",
    ),
    "spec": (
        "Say what happens when every attempt fails.",
        "Name the unit of the delay (seconds?).",
        "Give one example call and its result.",
        "Say which exceptions are retried.",
    ),
}

_VERSION_RE: Final = re.compile(r"\bdraft v(\d+)", re.IGNORECASE)
_TOPIC_RE: Final = re.compile(r"\((function|haiku|spec)\)")


def reply(persona: str, prompt: str, turn: int) -> str:
    """The answer of ``persona`` to ``prompt`` on its ``turn``-th turn (from 1)."""
    check_choice("persona", persona, PERSONAS)
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
        raise MadohubValueError(f"turn must be a whole number from 1, got {turn!r}")
    if persona == "echo":
        return echo(prompt)
    if persona == "counter":
        return f"count {turn}"
    if persona == "writer":
        return _write(prompt, turn)
    return _review(prompt, turn)


def echo(text: str) -> str:
    """``Done: <first 40 characters>``, newlines shown as ``\\n``: the fixtures' fake API."""
    return "Done: " + text[:ECHO_CHARS].replace("\n", "\\n")


def _seed(prompt: str, turn: int) -> int:
    return zlib.crc32(f"{turn}:{prompt}".encode())


def _topic(prompt: str) -> str:
    named = _TOPIC_RE.search(prompt)
    if named:
        return named.group(1)
    lowered = prompt.lower()
    if "haiku" in lowered or "poem" in lowered:
        return "haiku"
    if "spec" in lowered:
        return "spec"
    return "function"


def _versions(prompt: str) -> list[int]:
    return [int(v) for v in _VERSION_RE.findall(prompt)]


def _write(prompt: str, turn: int) -> str:
    """A numbered draft; each review (naming ``draft vN``) gets version N+1."""
    topic = _topic(prompt)
    seen = _versions(prompt)
    version = max(seen) + 1 if seen else turn
    drafts = _DRAFTS[topic]
    body = drafts[min(version, len(drafts)) - 1]
    if version == 1:
        return f"Draft v1 ({topic}):\n{body}"
    bullets = [
        line.strip()[2:].strip()
        for line in prompt.splitlines()
        if line.strip().startswith("- ") and "LGTM" not in line
    ]
    note = f"addressing: {bullets[0][:80]}" if bullets else "revised"
    return f"Draft v{version} ({topic}), {note}\n{body}"


def _review(prompt: str, turn: int) -> str:
    """Two or three comments on the draft, or ``LGTM`` from draft v3 on."""
    topic = _topic(prompt)
    seen = _versions(prompt)
    version = max(seen) if seen else turn
    head = f"Review of draft v{version} ({topic}):"
    if version >= LGTM_FROM_VERSION:
        return f"{head}\nLGTM. The draft reads well and the earlier comments are addressed."
    comments = _COMMENTS[topic]
    seed = _seed(prompt, turn)
    count = 2 + seed % 2
    start = seed % len(comments)
    picked = [comments[(start + i) % len(comments)] for i in range(count)]
    bullets = "\n".join(f"- {c}" for c in picked)
    return f"{head}\n{bullets}\nPlease send a revised draft."
