"""A scored experiment on REAL Claude Code (issue 40): two templates, code that passes or fails.

The writer is the real Claude Code in a worktree tile (a fresh worktree per run, from one
commit of a repository whose ``test_slug.py`` wants ``slug("Hello World") == "hello-world"``);
the reviewer is a stand-in (the demo reviewer). The fake Anthropic API scripts the writer's
tool calls from the prompt text alone: a prompt naming ``slug.py`` gets a ``Write`` of
``slug.py`` in the writer's working folder, lowercasing the words only when the prompt says
``lowercase``. The kickoff asks for a draft (it joins words, keeps the case: the test fails);
the reviewer's notes go back to the writer through the route the variants change:

- ``told``: the template tells the writer to lowercase the words (the rewrite passes);
- ``vague``: the template passes the notes on and says to tidy slug.py (the rewrite fails).

``mh.score.command("python -m pytest -q", tile="writer")`` runs in each run's own worktree
after the run: 1.0 for every ``told`` run, 0.0 for every ``vague`` one, pytest's counts in
``meta``. With two runs each, ``exp.summary()`` gives Wilson intervals and ``exp.compare``
cannot tell which is better. A broken scorer (NaN, or the wrong folder: the main checkout
has no ``slug.py``) or runs sharing a worktree (the last write wins) fail the test.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import git

import madohub_nb as mh
from madohub_nb.demo import standin_command
from madohub_nb.pipeline.workflow import RouteSpec, Workflow
from madohub_nb.stats import wilson_interval
from madohub_nb.testing.fake_anthropic import FakeAnthropic, prompt_text, tool_result

from .conftest import (
    DEFAULT_API_KEY,
    LEAKY_ENV,
    claude_env,
    write_claude_config,
    write_key_helper,
)

pytestmark = pytest.mark.real_agents

VERSION = "2.1.332"
KICKOFF = "Write slug.py: slug(title) joins the words of a title with '-'."
TEST_SLUG = (
    "from slug import slug\n\n\ndef test_slug():\n    assert slug('Hello World') == 'hello-world'\n"
)
VARIANTS = {
    "told": {"reviewer->writer": {"template": "Rewrite slug.py and lowercase the words. {output}"}},
    "vague": {"reviewer->writer": {"template": "Tidy slug.py as the review says. {output}"}},
}
CWD_RE = re.compile(r"Primary working directory: (\S+?)(?:\\n|\s)")
"""Where Claude Code says it works (its environment block, in every conversation request)."""


def _code(prompt: str) -> str:
    """The slug.py the scripted writer writes for ``prompt``: lowercased only when told."""
    words = "title.lower().split()" if "lowercase" in prompt.lower() else "title.split()"
    return f"def slug(title):\n    return '-'.join({words})\n"


def _writer_api(body: dict[str, Any]) -> str | dict[str, Any] | None:
    """The fake API's script: a ``Write`` of slug.py for a prompt that names it, from the
    prompt's text alone (never the variant's name); text after the tool's result."""
    if tool_result(body) is not None:
        return "Wrote slug.py."
    prompt = prompt_text(body) or ""
    found = CWD_RE.search(str(body))
    if "slug.py" not in prompt or found is None:
        return None  # the default answer (``Done: …``)
    tool_use = {
        "type": "tool_use",
        "id": "toolu_fake_write_" + os.urandom(4).hex(),
        "name": "Write",
        "input": {"file_path": f"{found.group(1)}/slug.py", "content": _code(prompt)},
    }
    return {"content": [{"type": "text", "text": "Writing slug.py."}, tool_use],
            "stop_reason": "tool_use"}  # fmt: skip


def _workflow(exe: Path, home: Path, base_url: str, repo: Path) -> Workflow:
    env = {k: v for k, v in claude_env(home, base_url).items() if k != "ANTHROPIC_API_KEY"}
    unset = [a for var in LEAKY_ENV if var not in ("TMUX", "TMUX_PANE") for a in ("-u", var)]
    writer = shlex.join(["env", *unset, str(exe), "--permission-mode", "acceptEdits"])
    reviewer = standin_command("claude", persona="reviewer", think_s=0.2)
    return Workflow(
        "scored-review",
        {
            "writer": {
                "agent": "claude",
                "command": writer,
                "cwd": str(repo),
                "env": env,
                "worktree": True,
            },
            "reviewer": {
                "agent": "claude",
                "command": reviewer,
                "cwd": str(repo),
                "env": {"CLAUDE_CONFIG_DIR": str(home / "standin")},
            },
        },  # fmt: skip
        [
            RouteSpec(["writer"], "reviewer", {"template": "Review: {output}", "max_rounds": 1}),
            RouteSpec(["reviewer"], "writer", {"template": "{output}", "max_rounds": 1}),
        ],
    )


def test_two_templates_on_real_claude_score_passing_and_failing_code(
    home: Path,
    tmux_socket: str,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_anthropic: FakeAnthropic,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exe = agent_bin("claude", VERSION)
    repo = Path(os.path.realpath(tmp_path)) / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.invalid")
    git(repo, "config", "user.name", "t")
    (repo / "test_slug.py").write_text(TEST_SLUG)
    git(repo, "add", "test_slug.py")
    git(repo, "commit", "-q", "-m", "the test slug.py must pass")
    # Claude Code counts a worktree as its repository's project: trusting it is enough.
    write_claude_config(home, repo, DEFAULT_API_KEY, VERSION)
    write_key_helper(home)
    # The scorer's `python` is this interpreter (it has pytest), as in an activated venv.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    fake_anthropic.reply = _writer_api

    exp = mh.experiment(
        _workflow(exe, home, fake_anthropic.base_url, repo), VARIANTS, {"writer": KICKOFF},
        repeats=2, parallel=4, timeout_s=150, log_path=tmp_path / "exp.sqlite3",
        socket_name=tmux_socket, idle_delay_ms=1000,
        score=[mh.score.command("python -m pytest -q -p no:cacheprovider", tile="writer")],
    )  # fmt: skip

    df = exp.df
    seen = df[["variant", "repeat", "stopped_by", "rounds", "files_changed", "error"]].to_string()
    rows = exp.rounds.assign(answer=exp.rounds["extracted"].str[:30])
    seen += (
        "\n"
        + rows[["session_id", "route_id", "round", "status", "turn_signal", "answer"]].to_string()
    )
    assert df["error"].isna().all(), f"{seen}\n{fake_anthropic.prompts}"
    assert list(df["variant"]) == ["told", "told", "vague", "vague"]
    # The writer's first answer, routed when its turn was over (never its start-up screen,
    # seen routed while its kickoff was typed on a loaded machine).
    first = rows[rows["route_id"].str.startswith("writer->") & (rows["round"] == 1)]
    assert list(first["extracted"]) == ["Wrote slug.py."] * 4, seen
    # The writer was told what the variant's template said, after the reviewer's notes.
    told = [p for p in fake_anthropic.prompts if p.startswith(("Rewrite", "Tidy"))]
    assert sorted(p.split(" ", 1)[0] for p in told) == ["Rewrite", "Rewrite", "Tidy", "Tidy"], (
        f"{seen}\n{fake_anthropic.prompts}"
    )
    assert list(df["command"]) == [1.0, 1.0, 0.0, 0.0], f"{seen}\n{df['meta'].tolist()}"
    assert [m["command"]["passed"] for m in df["meta"]] == [1, 1, 0, 0]
    assert [m["command"]["failed"] for m in df["meta"]] == [0, 0, 1, 1]
    # Each run wrote slug.py in a worktree of its own; the main checkout never got one.
    assert list(df["files_changed"]) == [1, 1, 1, 1], seen
    assert not (repo / "slug.py").exists()
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1  # all removed

    summary = exp.summary()
    assert list(summary.index) == ["told", "vague"]
    assert list(summary["n"]) == [2, 2]
    assert list(summary["command_mean"]) == [1.0, 0.0]
    low, high = wilson_interval(2, 2)
    assert (summary.loc["told", "command_ci_low"], summary.loc["told", "command_ci_high"]) == (
        pytest.approx(low), 1.0,
    )  # fmt: skip
    low, high = wilson_interval(0, 2)
    assert (summary.loc["vague", "command_ci_low"], summary.loc["vague", "command_ci_high"]) == (
        0.0, pytest.approx(high),
    )  # fmt: skip
    assert math.isclose(low, 0.0) and 0.6 < high < 0.7  # 0/2 still allows a 66% pass rate
    assert summary.loc["vague", "cost_per_success"] != summary.loc["vague", "cost_per_success"]

    verdict = exp.compare("told", "vague")
    assert (verdict.diff, verdict.paired, verdict.better) == (1.0, True, None)
    assert verdict.p_value >= 0.05
    assert "cannot tell" in verdict.sentence and "(2/2)" in verdict.sentence, verdict.sentence
