"""The playground's view: one recorded round's prompts side by side, differences marked.

A round selector above one column per variant; the first variant is the reference, and
in every other column the words it adds are ``<ins>`` (green) and the reference's words
it drops are ``<del>`` (red, struck through), word by word (``difflib``). A variant that
failed shows its error in its column. The view has no logic of its own: it draws
:class:`madohub_nb.playground.Playground`'s table.
"""

from __future__ import annotations

import difflib
import html
import re
from typing import Any, Final

import ipywidgets as widgets

from ..playground import Playground

PLAYGROUND_CLASS: Final = "madohub-playground"
ADDED_STYLE: Final = "background:#d4f7d4;text-decoration:none"
REMOVED_STYLE: Final = "background:#fbd4d4"
_WORDS = re.compile(r"\s+|[^\s]+")


def diff_html(reference: str, prompt: str) -> str:
    """``prompt`` as HTML, word by word against ``reference``: what it adds in ``<ins>``,
    what it drops of the reference in ``<del>``; the rest as is (escaped)."""
    old, new = _WORDS.findall(reference), _WORDS.findall(prompt)
    parts: list[str] = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op in ("replace", "delete"):
            parts.append(f'<del style="{REMOVED_STYLE}">{html.escape("".join(old[i1:i2]))}</del>')
        if op in ("replace", "insert"):
            parts.append(f'<ins style="{ADDED_STYLE}">{html.escape("".join(new[j1:j2]))}</ins>')
        if op == "equal":
            parts.append(html.escape("".join(new[j1:j2])))
    return "".join(parts)


def round_html(played: Playground, round_id: str) -> str:
    """One round: the recorded answer, then each variant's prompt in a column of its own."""
    prompts = played.prompts(round_id)
    reference = next((p for p, _ in prompts.values() if p is not None), None)
    first = next(iter(prompts))
    columns = []
    for variant, (prompt, error) in prompts.items():
        meta = played.df[(played.df["round"] == round_id) & (played.df["variant"] == variant)]
        tokens = meta["tokens"].iloc[0]
        cost = meta["cost_usd"].iloc[0]
        if prompt is None:
            body = f'<div class="madohub-error" style="color:#b00">error: {html.escape(error or "")}</div>'
        elif variant == first or reference is None:
            body = html.escape(prompt)
        else:
            body = diff_html(reference, prompt)
        said = f"{tokens:g} tokens" if tokens == tokens else ""
        if cost == cost and cost > 0:
            said += f", ${cost:.6f}"
        columns.append(
            f'<td style="vertical-align:top;padding:4px"><b>{html.escape(variant)}</b>'
            f'<div style="color:#666;font-size:small">{said}</div>'
            f'<pre style="white-space:pre-wrap">{body}</pre></td>'
        )
    answer = html.escape(played.answers.get(round_id, ""))
    return (
        f'<div class="{PLAYGROUND_CLASS}"><details><summary>round {html.escape(round_id)}: '
        f'the recorded answer</summary><pre style="white-space:pre-wrap">{answer}</pre>'
        f'</details><table style="width:100%;table-layout:fixed"><tr>{"".join(columns)}</tr>'
        "</table></div>"
    )


class PlaygroundView(widgets.VBox):
    """A round selector and that round's prompts side by side (see the module)."""

    def __init__(self, played: Playground) -> None:
        self.played = played
        rounds = list(played.answers)
        self.selector = widgets.Dropdown(
            options=[
                (f"{i}: {r[:12]}  {played.answers[r][:40]!r}", r) for i, r in enumerate(rounds)
            ],
            description="round",
        )
        self.prompts = widgets.HTML(round_html(played, rounds[0]))
        self.selector.observe(self._on_round, names="value")
        children: list[Any] = [self.selector, self.prompts]
        if played.ranking is not None:
            table = played.ranking.to_html(index=False)
            children.append(widgets.HTML(f"<b>judge's ranking</b>{table}"))
        super().__init__(children)
        self.add_class(PLAYGROUND_CLASS)

    def _on_round(self, change: dict[str, Any]) -> None:
        self.prompts.value = round_html(self.played, change["new"])

    def snapshot_html(self) -> str:
        """The view as static HTML (the round shown, the ranking)."""
        ranking = self.played.ranking
        extra = "" if ranking is None else ranking.to_html(index=False)
        return self.prompts.value + extra

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is not None:  # the widget where widgets run, this HTML where they do not
            bundle["text/html"] = self.snapshot_html()
        return bundle
