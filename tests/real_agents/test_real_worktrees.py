"""Real Claude Code tiles in their own git worktrees (issue 26, item 3), offline.

Three real Claude Code tiles made by the hub with ``worktree=True`` in one repository; the
fake Anthropic API answers two of them with a ``Write`` tool call for the same file name
(``notes.md``) and the third with text only. Each write lands in its own worktree, none in
the main checkout or the other worktree (checked with git), the writer's round records what
its turn changed, and ``close()`` keeps exactly the two changed worktrees.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import log_rows, wait_until

import madohub_nb as mh
from madohub_nb.testing.fake_anthropic import FakeAnthropic, prompt_text, tool_result

from .conftest import (
    DEFAULT_API_KEY,
    LEAKY_ENV,
    REPLY_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    claude_env,
    write_claude_config,
)

pytestmark = pytest.mark.real_agents

CLAUDE_VERSION = "2.1.332"
WRITE_RE = re.compile(r"WRITE (\S+) SAYING (.+)$")
"""A prompt the fake answers with a Write tool call: ``WRITE <path> SAYING <text>``."""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def _reply(body: dict[str, Any]) -> str | dict[str, Any]:
    """A Write tool call for a ``WRITE`` prompt, a short text after its result, else text."""
    if tool_result(body) is not None:
        return "Wrote the file."
    found = WRITE_RE.search(prompt_text(body) or "")
    if found is None:
        return "Nothing to write; I changed no file."
    path, text = found.groups()
    tool_use = {
        "type": "tool_use",
        "id": "toolu_fake_write_" + os.urandom(4).hex(),
        "name": "Write",
        "input": {"file_path": path, "content": text + "\n"},
    }
    return {"content": [{"type": "text", "text": "Writing it."}, tool_use],
            "stop_reason": "tool_use"}  # fmt: skip


def test_two_real_claude_tiles_write_one_file_name_in_their_own_worktrees(
    home: Path,
    tmux_socket: str,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_anthropic: FakeAnthropic,
) -> None:
    exe = agent_bin("claude", CLAUDE_VERSION)
    repo = Path(os.path.realpath(tmp_path)) / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "t@example.invalid")
    _git(repo, "config", "user.name", "t")
    (repo / "README").write_text("a project\n")
    _git(repo, "add", "README")
    _git(repo, "commit", "-q", "-m", "first")
    names = ("a", "b", "quiet")
    for name in names:  # trust every worktree before any Claude starts (one shared HOME)
        write_claude_config(home, repo.parent / "repo.worktrees" / name, DEFAULT_API_KEY,
                            CLAUDE_VERSION)  # fmt: skip
    fake_anthropic.reply = _reply
    unset = [a for var in LEAKY_ENV if var not in ("TMUX", "TMUX_PANE") for a in ("-u", var)]
    command = shlex.join(["env", *unset, str(exe), "--permission-mode", "acceptEdits"])
    env = claude_env(home, fake_anthropic.base_url, DEFAULT_API_KEY)
    hub = mh.Hub(socket_name=tmux_socket, idle_delay_ms=1500, log_path=tmp_path / "rounds.db")
    try:
        tiles = {
            n: hub.tile(n, agent="claude", command=command, cwd=repo, env=env, worktree=True)
            for n in names
        }
        sink = hub.tile("sink", agent="shell", command="bash --norc --noprofile")
        for tile in tiles.values():
            wait_until(lambda t=tile: t.state == "idle", STARTUP_TIMEOUT_S, what="Claude idle")
        wait_until(lambda: sink.state == "idle", 15, what="the sink's prompt")
        route = hub.connect("a", "sink", dispatch="shadow", cooldown_ms=1000)
        wait_until(route.ready.is_set, 20)
        a, b, quiet = (Path(str(tiles[n].worktree)) for n in names)
        hub.send("a", f"WRITE {a}/notes.md SAYING from a").result(REPLY_TIMEOUT_S)
        hub.send("b", f"WRITE {b}/notes.md SAYING from b").result(REPLY_TIMEOUT_S)
        hub.send("quiet", "Say hello, write nothing.").result(REPLY_TIMEOUT_S)
        for path, text in ((a, "from a\n"), (b, "from b\n")):
            wait_until(
                lambda p=path: (p / "notes.md").exists(), REPLY_TIMEOUT_S, what=f"{path}/notes.md"
            )
            assert (path / "notes.md").read_text() == text
        wait_until(lambda: route.rounds == 1 and route.last_status, 60, what="a's round")
        (row,) = log_rows(hub, route.id)
        assert (row["files_changed"], row["lines_added"], row["meta"]["changed_paths"]) == (
            1, 1, ["notes.md"],
        ), row  # fmt: skip
        wait_until(lambda: tiles["quiet"].state == "idle" and len(fake_anthropic.prompts) == 3,
                   REPLY_TIMEOUT_S, what="the quiet tile's answer")  # fmt: skip
        assert _git(repo, "status", "--porcelain") == ""  # the main checkout untouched
        assert _git(a, "status", "--porcelain", "-uall") == "?? notes.md\n"
        assert _git(b, "status", "--porcelain", "-uall") == "?? notes.md\n"
        assert _git(quiet, "status", "--porcelain", "-uall") == ""
        summary = hub.close()
    finally:
        hub.close()
    assert summary is not None
    assert sorted(e.tile for e in summary.worktrees_kept) == ["a", "b"]
    assert [e.tile for e in summary.worktrees_removed] == ["quiet"]
    listed = _git(repo, "worktree", "list", "--porcelain")
    assert f"worktree {a}\n" in listed and f"worktree {b}\n" in listed
    assert str(quiet) not in listed and not quiet.exists()
    assert _git(repo, "branch", "--format=%(refname:short)").split() == [
        "madohub/a", "madohub/b", "main",
    ]  # fmt: skip
