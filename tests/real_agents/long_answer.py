"""A long markdown answer (issue 23.4): what a screen cannot hold, and every way it mangles text.

About 120 lines: a unique first and last line, a 260-character line, a
30-line indented code block, a table, a line starting ``> ``, non-ASCII text.
The fake API answers it to a prompt holding :data:`MARKER` (and only to the
conversation's request, not an agent's side requests).
"""

from __future__ import annotations

from typing import Any

from madohub_nb.testing.fake_openai import prompt_text

MARKER = "LONGANSWER"
FIRST = "FIRST-LINE-5c1e: the whole answer must arrive."
LAST = "LAST-LINE-9d2b: nothing was lost."


def _text() -> str:
    long_line = ("A long line that a pane of 120 columns wraps three times over, " * 5)[:259]
    lines = [
        FIRST,
        "",
        "# Résumé — ünïcödé, 日本語, emoji 🚀",
        "",
        f"{long_line}.",
        "",
        "> A quoted line: Aider takes lines starting like this for its own notes.",
        "",
        "| column | value | note |",
        "|---|---|---|",
        *(f"| row {i} | {i * i} | naïve café {i} |" for i in range(1, 9)),
        "",
        "An indented code block follows:",
        "",
        *(f"    step_{i:02d} = compute({i}, 'ß')  # line {i} of 30" for i in range(1, 31)),
        "",
        "Some paragraphs, numbered so each line is unique:",
        "",
    ]
    n = 1
    while len(lines) < 117:
        lines.append(f"Paragraph line {n}: ordinary prose, with a trailing period.")
        if n % 6 == 0:
            lines.append("")
        n += 1
    lines += ["- a list item", "- another, with `inline code`", "", LAST]
    return "\n".join(lines)


LONG = _text()
LINES = [line for line in LONG.splitlines() if line.strip()]
"""The answer's non-blank lines: each must arrive at the target."""


def long_reply(body: dict[str, Any]) -> str | None:
    """The long answer for the marked prompt's conversation request (None: the fake's default)."""
    wants = MARKER in (prompt_text(body) or "")
    return LONG if wants and (body.get("tools") or "tools" not in body) else None


def missing_lines(received: str) -> list[str]:
    """The answer's lines not found whole in ``received`` (what the target got)."""
    return [line for line in LINES if line not in received]
