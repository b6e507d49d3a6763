"""An experiment on REAL Claude Code (issue 27): two templates, whole conversations, offline.

Each run starts two real Claude Code tiles (writer, reviewer) from a workflow, in projects of
its own, against the fake Anthropic API on 127.0.0.1. The fake answers ``Done: <prompt>``, so
a template saying ``LGTM`` ends the loop at the reviewer's first answer (the stop keyword)
while a plain one goes on until both routes are out of rounds (``max_rounds``). ``exp.df``'s
usage and cost must be numbers, the sums of the run's rows in the log (each row priced from
its own tokens), and what the fake API reported for the runs' turns.

It runs with the hub's hooks on (turn ends from Claude Code's Stop hook) and off (from its
status file and screen). A Stop hook can come before the transcript holds its turn, on a
session's first turn with the answer already on screen: the round waits for the record, so
every row has its model, tokens and cost either way.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

import madohub_nb as mh
from madohub_nb.defaults import PRICES_USD_PER_MTOK
from madohub_nb.pipeline.workflow import RouteSpec, Workflow
from madohub_nb.testing.fake_anthropic import FakeAnthropic, default_answer

from .conftest import (
    CLAUDE_VERSIONS,
    DEFAULT_API_KEY,
    LEAKY_ENV,
    claude_env,
    write_claude_config,
    write_key_helper,
)

pytestmark = pytest.mark.real_agents

VERSION = CLAUDE_VERSIONS[-1]
KICKOFF = "Write a slug function."
VARIANTS = {
    "approve": {"writer->reviewer": {"template": "LGTM {output}"}},
    "plain": {},
}


def _workflow(exe: Path, home: Path, base_url: str, cwds: dict[str, Path], hooks: bool) -> Workflow:
    env = {k: v for k, v in claude_env(home, base_url).items() if k != "ANTHROPIC_API_KEY"}
    unset = [a for var in LEAKY_ENV if var not in ("TMUX", "TMUX_PANE") for a in ("-u", var)]
    command = shlex.join(["env", *unset, str(exe)])
    tiles = {
        name: {"agent": "claude", "command": command, "cwd": str(cwd), "env": env, "hooks": hooks}
        for name, cwd in cwds.items()
    }
    return Workflow(
        "real-review",
        tiles,
        [
            RouteSpec(["writer"], "reviewer", {"template": "Review: {output}", "max_rounds": 2}),
            RouteSpec(
                ["reviewer"],
                "writer",
                {"template": "Fix: {output}", "max_rounds": 1, "stop_keyword": "LGTM"},
            ),
        ],
    )


def _priced(row: dict[str, object]) -> float:
    """A round's cost from its token columns and the default price table."""
    price = PRICES_USD_PER_MTOK[str(row["model"])]
    return (
        float(row["input_tokens"]) * price["input"]  # type: ignore[arg-type]
        + float(row["output_tokens"]) * price["output"]  # type: ignore[arg-type]
        + float(row["cache_read_tokens"] or 0) * price["cache_read"]  # type: ignore[arg-type]
        + float(row["cache_write_tokens"] or 0) * price["cache_write"]  # type: ignore[arg-type]
    ) / 1e6


@pytest.mark.parametrize("hooks", [True, False], ids=["hooks", "no-hooks"])
def test_two_templates_on_real_claude_fill_usage_and_cost_from_the_log(
    hooks: bool,
    home: Path,
    tmux_socket: str,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_anthropic: FakeAnthropic,
) -> None:
    exe = agent_bin("claude", VERSION)
    # Each run's tiles in projects of their own (a variant's tile settings), all trusted
    # before any Claude starts: a fresh run never shares a project with the last one.
    cwds: dict[str, dict[str, Path]] = {}
    for variant in VARIANTS:
        for name in ("writer", "reviewer"):
            cwd = (tmp_path / variant / name).resolve()
            cwd.mkdir(parents=True)
            write_claude_config(home, cwd, DEFAULT_API_KEY, VERSION)
            cwds.setdefault(variant, {})[name] = cwd
    write_key_helper(home)
    wf = _workflow(exe, home, fake_anthropic.base_url, cwds["plain"], hooks=hooks)
    variants = {
        v: {**routes, **{t: {"cwd": str(c)} for t, c in cwds[v].items()}}
        for v, routes in VARIANTS.items()
    }

    exp = mh.experiment(
        wf, variants, {"writer": KICKOFF}, repeats=1, timeout_s=180,
        log_path=tmp_path / "exp.sqlite3", socket_name=tmux_socket, idle_delay_ms=1500,
    )  # fmt: skip

    df = exp.df
    rounds = exp.rounds
    seen = rounds[
        [
            "session_id",
            "route_id",
            "round",
            "status",
            "turn_signal",
            "extraction_method",
            "model",
            "cost_usd",
            "error",
        ]
    ].to_string()
    assert df["error"].isna().all(), f"{df['error'].tolist()}\n{seen}"
    assert list(df["variant"]) == ["approve", "plain"]
    assert list(df["stopped_by"]) == ["stop keyword", "max rounds"], (
        f"{fake_anthropic.prompts}\n{seen}"
    )
    assert list(df["rounds"]) == [1, 3]
    # The conversations the fake API saw: each run's prompts, in order.
    said = default_answer(KICKOFF)
    noted = default_answer(f"Review: {said}")
    assert fake_anthropic.prompts == [
        KICKOFF, f"LGTM {said}",  # approve: the reviewer's answer holds LGTM, the loop ends
        # plain: writer, reviewer, writer, reviewer; then both routes are out of rounds
        KICKOFF, f"Review: {said}", f"Fix: {noted}", f"Review: {default_answer(f'Fix: {noted}')}",
    ]  # fmt: skip
    for run in df.to_dict("records"):
        rows = rounds[(rounds["session_id"] == run["session_id"]) & (rounds["round"] > 0)]
        for column in ("input_tokens", "output_tokens", "cost_usd"):
            value = run[column]
            assert isinstance(value, (int, float)) and not math.isnan(value), f"{column}\n{seen}"
            assert value > 0, (column, run)
        assert run["input_tokens"] == int(rows["input_tokens"].sum())
        assert run["output_tokens"] == int(rows["output_tokens"].sum())
        assert run["cost_usd"] == pytest.approx(float(rows["cost_usd"].sum()))
        for row in rows.to_dict("records"):  # each round priced from its own tokens
            assert row["cost_usd"] == pytest.approx(_priced(row)), row
        assert set(rows["workflow"]) == {f"real-review[{run['variant']}]"}
        assert set(rows["turn_signal"]) <= (
            {"hook"} if hooks else {"status", "transcript", "screen"}
        )
    # Every conversation turn the fake answered is counted once, in one routed round.
    billed = [r for r in fake_anthropic.reported if not r["title"]]
    assert int(df["output_tokens"].sum()) == sum(m["usage"]["output_tokens"] for m in billed)
    assert set(rounds.loc[rounds["round"] > 0, "model"]) == {m["model"] for m in billed}
