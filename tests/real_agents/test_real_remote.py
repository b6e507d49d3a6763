"""The REAL Claude Code on a remote host: routes across a private OpenSSH server (issue 15).

Claude Code runs in panes of the "host" ``box`` (this machine through a private sshd
on 127.0.0.1, its own tmux server) and of the hub's own tmux, against local fake
APIs; the hub adopts the host's panes over ssh and routes both ways. The fake APIs
count what each agent really received.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import log_rows, wait_until

import madohub_nb as mh
from madohub_nb.testing.fake_anthropic import FakeAnthropic, default_answer

from .conftest import (
    CLAUDE_VERSIONS,
    DEFAULT_API_KEY,
    LEAKY_ENV,
    REPLY_TIMEOUT_S,
    RealPane,
    claude_env,
    write_claude_config,
)

pytestmark = pytest.mark.real_agents

VERSION = CLAUDE_VERSIONS[-1]


@pytest.fixture
def second_fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


@pytest.fixture
def rhub(tmux_socket: str, remote_socket: str, sshd: object, tmp_path: Path) -> Iterator[mh.Hub]:
    hub = mh.Hub(
        socket_name=tmux_socket,
        idle_delay_ms=1500,
        log_path=tmp_path / "rounds.sqlite3",
        ssh_command=sshd.ssh_command,  # type: ignore[attr-defined]
        remote_socket_name=remote_socket,
    )
    yield hub
    hub.close()


def _trusted_cwds(home: Path, tmp_path: Path, n: int = 2) -> list[Path]:
    """``n`` project folders that Claude Code trusts (its config in ``home`` says so)."""
    cwds = []
    for i in range(n):
        cwd = tmp_path / f"trusted-{i}"
        cwd.mkdir()
        cwds.append(Path(os.path.realpath(cwd)))
        write_claude_config(home, cwds[-1], DEFAULT_API_KEY, VERSION)
    return cwds


def test_real_claude_routes_from_a_host_and_back(
    rhub: mh.Hub,
    remote_socket: str,
    real_claude_pane: Callable[..., RealPane],
    fake_anthropic: FakeAnthropic,
    second_fake: FakeAnthropic,
    home: Path,
    tmp_path: Path,
) -> None:
    cwds = _trusted_cwds(home, tmp_path)
    far = real_claude_pane(VERSION, cwd=cwds[0], socket=remote_socket)
    near = real_claude_pane(VERSION, cwd=cwds[1], base_url=second_fake.base_url)
    writer = rhub.tile("writer", pane=far.pane_id, host="box")
    reviewer = rhub.tile("reviewer", pane=near.pane_id)
    assert reviewer.agent == "claude"
    assert writer.machine.name is not None and writer.agent == "claude"
    wait_until(lambda: writer.state == "idle", 30, what="the remote Claude idle")
    template = "Please check:\n{output}"
    route = rhub.connect("writer", "reviewer", template=template, cooldown_ms=1000)
    wait_until(route.ready.is_set, 20, what="the route to listen")

    rhub.send("writer", "Write a haiku about ssh").result(REPLY_TIMEOUT_S)
    answer = default_answer("Write a haiku about ssh")
    wrapped = template.format(output=answer)
    assert second_fake.wait_for_prompts(1, REPLY_TIMEOUT_S) == [wrapped]
    rhub.wait_rounds_sync(2, REPLY_TIMEOUT_S)
    df = rhub.log.df
    (row,) = df[df["route_id"] == route.id].to_dict("records")
    assert row["status"] == "delivered", row["error"]
    assert row["extraction_method"] == "jsonl"  # read from a bounded tail over ssh
    assert row["extracted"] == answer and row["prompt"] == wrapped
    assert fake_anthropic.prompts == ["Write a haiku about ssh"]  # typed over ssh, once

    # And back: the local reviewer's answer typed into Claude on the host.
    back = rhub.connect("reviewer", "writer", template="Thanks:\n{output}", cooldown_ms=1000)
    wait_until(back.ready.is_set, 20, what="the route back to listen")
    rhub.send("reviewer", "One more line please").result(REPLY_TIMEOUT_S)
    expected = "Thanks:\n" + default_answer("One more line please")
    wait_until(lambda: expected in fake_anthropic.prompts, REPLY_TIMEOUT_S, what="routed back")
    assert fake_anthropic.prompts.count(expected) == 1


def test_real_claude_made_by_the_hub_on_a_host_routes_on_its_stop_hook(
    rhub: mh.Hub,
    agent_bin: Callable[[str, str], Path],
    fake_anthropic: FakeAnthropic,
    second_fake: FakeAnthropic,
    real_claude_pane: Callable[..., RealPane],
    home: Path,
    tmp_path: Path,
) -> None:
    """Claude Code started by the hub on the host gets its Stop hook there; the hook's
    message comes back over the host's ssh master and ends the turn, answer and all."""
    exe = agent_bin("claude", VERSION)
    cwds = _trusted_cwds(home, tmp_path)
    unset = [a for var in LEAKY_ENV if var not in ("TMUX", "TMUX_PANE") for a in ("-u", var)]
    writer = rhub.tile(
        "writer", agent="claude", command=shlex.join(["env", *unset, str(exe)]), cwd=cwds[0],
        env=claude_env(home, fake_anthropic.base_url), host="box",
    )  # fmt: skip
    assert writer.turn_signal == "hook" and writer.machine.name == "box"
    near = real_claude_pane(VERSION, cwd=cwds[1], base_url=second_fake.base_url)
    reviewer = rhub.tile("reviewer", pane=near.pane_id)
    wait_until(lambda: writer.state == "idle", 60, what="Claude Code on the host idle")
    rhub.idle_delay_ms = 30000  # only the hook can end the turn within the waits below
    template = "Please check:\n{output}"
    route = rhub.connect("writer", "reviewer", template=template, cooldown_ms=1000)
    wait_until(route.ready.is_set, 20, what="the route to listen")
    rhub.send("writer", "Write a haiku about hooks").result(REPLY_TIMEOUT_S)
    answer = default_answer("Write a haiku about hooks")
    assert second_fake.wait_for_prompts(1, REPLY_TIMEOUT_S) == [template.format(output=answer)]
    (row,) = log_rows(rhub, route.id)
    assert row["status"] == "delivered", row["error"]
    assert row["turn_signal"] == "hook" and row["extraction_method"] == "hook"
    assert row["extracted"] == answer
    assert fake_anthropic.prompts == ["Write a haiku about hooks"]
    assert reviewer.agent == "claude"
