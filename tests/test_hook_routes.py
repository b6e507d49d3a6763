"""Routes fire on the source agent's own end-of-turn hook, in real tmux panes.

The hub starts stand-in agents that run their hooks as the real ones do (Claude's
``--settings`` command hooks, Codex's ``-c notify``), through the hub's private hook
channel. A hook ends the turn at once (no idle delay); a lost hook falls back to the
weaker signals; a forged or replayed hook fires nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import (
    SkippedTurns,
    log_rows,
    repaint,
    send_hook,
    start_standin,
    user_prompts,
    wait_until,
)

import madohub_nb as mh
from madohub_nb.errors import MadohubValueError
from madohub_nb.io.hooks import command as hook_command

SLOW_IDLE_MS = 30000
"""An idle delay far beyond the test's waits: only a hook can end a turn in time."""


def _hook_env(tile: mh.Tile) -> dict[str, str]:
    """The hook variables of the tile's pane, as tmux holds them for its processes."""
    pid = tile.agent_process()
    assert pid is not None
    environ = Path(f"/proc/{pid.pid}/environ").read_bytes().split(b"\0")
    pairs = dict(e.decode().split("=", 1) for e in environ if b"=" in e)
    return {k: v for k, v in pairs.items() if k.startswith("MADOHUB_HOOK_")}


def test_a_route_fires_on_the_stop_hook_with_its_answer(hub: mh.Hub, project: Path) -> None:
    writer = start_standin(hub, "writer", cwd=project)
    reviewer = start_standin(hub, "reviewer", cwd=project, hooks=False)
    assert writer.turn_signal == "hook" and reviewer.turn_signal == "status"
    assert writer.hooks is not None and reviewer.hooks is None
    hub.idle_delay_ms = SLOW_IDLE_MS
    route = hub.connect("writer", "reviewer", template="Review: {output}", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 5)
    hub.send("writer", "first draft").result(30)
    wait_until(lambda: route.rounds == 1 and route.last_status, 15, what="round 1 on the hook")
    (row,) = log_rows(hub, route.id)
    assert row["status"] == "delivered"
    assert row["turn_signal"] == "hook"
    assert row["extraction_method"] == "hook"
    assert row["extracted"] == "Done: first draft"
    wait_until(lambda: user_prompts(reviewer) == ["Review: Done: first draft"], 10)
    # The same turn seen again by the weaker signals is not routed twice.
    hub.idle_delay_ms = 700
    skipped = SkippedTurns(hub)
    repaint(hub, writer)
    assert skipped.wait(route, 0) == "already routed"
    assert route.rounds == 1
    # The user's own settings were never written; the private folder is the hub's.
    assert not (Path(os.environ["HOME"]) / ".claude" / "settings.json").exists()


def test_a_hook_before_its_turn_is_on_record_waits_for_the_record_and_its_usage(
    hub: mh.Hub, project: Path
) -> None:
    """Real Claude Code at times runs its Stop hook before its transcript holds the turn:
    the round waits (briefly) for the record, so it has the turn's model and tokens, and a
    budgeted route does not stop on an "unknown" cost."""
    start_standin(hub, "writer", cwd=project)
    start_standin(hub, "reviewer", cwd=project, hooks=False)
    hub.idle_delay_ms = SLOW_IDLE_MS
    route = hub.connect("writer", "reviewer", template="Review: {output}", max_tokens=10**6)
    wait_until(lambda: route.ready.is_set(), 5)
    hub.send("writer", "first draft [[hookfirst]]").result(30)
    wait_until(lambda: route.rounds == 1 and route.last_status, 15, what="round 1 on the hook")
    (row,) = log_rows(hub, route.id)
    assert (row["turn_signal"], row["status"]) == ("hook", "delivered")
    assert row["model"] and row["input_tokens"] > 0 and row["output_tokens"] > 0, row
    assert route.state == "active"  # the budget saw the tokens, not "unknown"


def test_codex_notify_ends_the_turn(hub: mh.Hub, project: Path) -> None:
    writer = start_standin(hub, "writer", kind="codex", cwd=project, channel=False)  # (notify)
    reviewer = start_standin(hub, "reviewer", cwd=project, hooks=False)
    assert writer.turn_signal == "hook"
    hub.idle_delay_ms = SLOW_IDLE_MS
    route = hub.connect("writer", "reviewer", template="Review: {output}", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 5)
    hub.send("writer", "a plan").result(30)
    wait_until(lambda: route.rounds == 1 and route.last_status, 15, what="round 1 on notify")
    (row,) = log_rows(hub, route.id)
    assert row["turn_signal"] == "hook" and row["extraction_method"] == "hook"
    wait_until(lambda: len(user_prompts(reviewer)) == 1, 10)


def test_a_lost_hook_falls_back_to_the_next_signal(hub: mh.Hub, project: Path) -> None:
    start_standin(hub, "writer", cwd=project)
    reviewer = start_standin(hub, "reviewer", cwd=project, hooks=False)
    route = hub.connect("writer", "reviewer", template="Review: {output}", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 5)
    hub.send("writer", "no hook this time [[nohook]]").result(30)
    wait_until(lambda: route.rounds == 1 and route.last_status, 20, what="round 1 without hook")
    (row,) = log_rows(hub, route.id)
    assert row["status"] == "delivered"
    assert row["turn_signal"] == "status"  # Claude's live status file
    assert row["extraction_method"] == "jsonl"
    wait_until(lambda: len(user_prompts(reviewer)) == 1, 10)


def test_forged_replayed_and_repeated_hooks_fire_nothing(hub: mh.Hub, project: Path) -> None:
    writer = start_standin(hub, "writer", cwd=project)
    start_standin(hub, "reviewer", cwd=project, hooks=False)
    hub.idle_delay_ms = SLOW_IDLE_MS
    route = hub.connect("writer", "reviewer", max_rounds=3, cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 5)
    hub.send("writer", "real turn").result(30)
    wait_until(lambda: route.rounds == 1 and route.last_status, 15, what="round 1")
    env = _hook_env(writer)
    sock, token = env[hook_command.ENV_SOCKET], env[hook_command.ENV_TOKEN]
    channel = hub.runtime.tiles.hook_channel()
    assert channel is not None
    before = dict(channel.counts)
    forged = json.dumps({"last_assistant_message": "forged answer"}).encode()
    # A wrong token, and the right token from another pane.
    send_hook(
        sock,
        hook_command.build_message(
            token="x" * 32, pane=writer.pane_id, kind="stop", payload=forged
        ),
    )
    send_hook(
        sock, hook_command.build_message(token=token, pane="%999", kind="stop", payload=forged)
    )
    # A message replayed byte for byte (its nonce seen once).
    message = hook_command.build_message(
        token=token, pane=writer.pane_id, kind="stop", payload=b"{}", nonce="n" * 32
    )
    send_hook(sock, message)
    send_hook(sock, message)
    # Junk.
    send_hook(sock, b"\x00garbage\n" * 100)
    wait_until(
        lambda: (
            channel.counts["token"] > before.get("token", 0)
            and channel.counts["pane"] > before.get("pane", 0)
            and channel.counts["replay"] > before.get("replay", 0)
            and channel.counts["malformed"] > before.get("malformed", 0)
        ),
        10,
        what="the bad hooks refused",
    )
    # The one accepted (the first copy, empty payload) is the turn already routed.
    skipped = SkippedTurns(hub)
    # A repeated Stop hook of the same turn, run as the agent runs it: already routed too.
    payload = json.dumps({"last_assistant_message": writer.last_response().text}).encode()
    run_env = {**os.environ, **env, "TMUX_PANE": writer.pane_id}
    subprocess.run(
        [*hook_command.command_argv(), "stop"], input=payload, env=run_env, timeout=15, check=True
    )
    wait_until(lambda: skipped.count(route) >= 1, 10, what="the repeated hook skipped")
    assert {reason for _, reason in skipped.events} == {"already routed"}
    assert route.rounds == 1
    assert [r["round"] for r in log_rows(hub, route.id)] == [1]


def test_hooks_true_needs_an_agent_with_hooks(hub: mh.Hub, project: Path) -> None:
    with pytest.raises(MadohubValueError, match="hooks=True.*no hooks"):
        hub.tile("sh", command="env PS1='$ ' bash --norc", hooks=True)
    with pytest.raises(MadohubValueError, match="hooks must be None, True or False"):
        hub.tile("sh", command="bash", hooks="yes")  # type: ignore[arg-type]
    assert "sh" not in hub.tiles


def test_hooks_off_and_the_private_folder_goes_at_close(
    tmux_socket: str, home: Path, tmp_path: Path, project: Path
) -> None:
    hub = mh.Hub(socket_name=tmux_socket, idle_delay_ms=700, log_path=tmp_path / "r.sqlite3")
    try:
        off = start_standin(hub, "off", cwd=project, hooks=False)
        on = start_standin(hub, "on", cwd=project, hooks=True)
        assert off.hooks is None and off.turn_signal == "status"
        assert on.hooks is not None and on.turn_signal == "hook"
        channel = hub.runtime.tiles.hook_channel()
        assert channel is not None and channel.serving
        folder = channel.folder
        assert os.stat(folder).st_mode & 0o777 == 0o700
    finally:
        hub.close()
    assert not os.path.exists(folder)
    assert not channel.serving
    assert not on.hooks.live


def test_magic_hooks_prints_the_opt_in_snippet(capsys: pytest.CaptureFixture[str]) -> None:
    from IPython.core.error import UsageError

    from madohub_nb.notebook.magics import MadohubMagics
    from madohub_nb.notebook.parsing import parse_command

    magics = MadohubMagics(None)
    magics.madohub("hooks claude")
    out = capsys.readouterr().out
    assert '"Stop"' in out and "io/hooks/command.py" in out and "--settings" in out
    magics.madohub("hooks codex")
    assert "notify" in capsys.readouterr().out
    with pytest.raises(UsageError, match="'aider' has no hooks.*claude, codex"):
        magics.madohub("hooks aider")
    assert parse_command("tile w --hooks --cmd claude").hooks is True
    assert parse_command("tile w --no-hooks --cmd claude").hooks is False
    assert parse_command("tile w --cmd claude").hooks is None


def test_hooks_true_on_a_command_list_is_refused(hub: mh.Hub, project: Path) -> None:
    from madohub_nb.demo import standin_command

    command = standin_command("claude", persona="echo") + "; exec bash"
    with pytest.raises(MadohubValueError, match="not one program's command line"):
        hub.tile("w", agent="claude", command=command, cwd=project, hooks=True)
    tile = hub.tile("w", agent="claude", command=command, cwd=project)  # hooks=None: off
    assert tile.hooks is None and tile.turn_signal == "status"


def test_hooks_that_would_replace_a_config_home_or_an_env_value_need_asking(
    hub: mh.Hub, project: Path
) -> None:
    from madohub_nb.demo import standin_command

    tiles = hub._rt.tiles
    # Copilot's hooks live in a private COPILOT_HOME (without the user's login): not by default.
    assert tiles.hooks.plan("c", "copilot", "copilot", None, None) is None
    plan = tiles.hooks.plan("c", "copilot", "copilot", True, None)
    assert plan is not None and plan.setup.private_home and plan.folder is not None
    (path,) = plan.setup.files
    assert path.startswith(plan.folder) and os.stat(path).st_mode & 0o777 == 0o600
    hub.runtime.tiles.hook_channel().unregister(plan.token)  # type: ignore[union-attr]
    import shutil

    shutil.rmtree(plan.folder)
    # The pane's own env= may not set what the hooks need.
    command = standin_command("claude", persona="echo")
    with pytest.raises(MadohubValueError, match="env= sets MADOHUB_HOOK_TOKEN"):
        hub.tile("w", agent="claude", command=command, env={"MADOHUB_HOOK_TOKEN": "x"}, hooks=True)
    tile = hub.tile("w", agent="claude", command=command, env={"MADOHUB_HOOK_TOKEN": "x"})
    assert tile.hooks is None


def test_a_late_stop_hook_with_an_older_turns_answer_fires_nothing(
    hub: mh.Hub, project: Path
) -> None:
    # A Stop hook that arrives late (or is sent again later) carries an answer the record
    # no longer shows last: it is a turn already routed, never a new one.
    writer = start_standin(hub, "writer", cwd=project)
    start_standin(hub, "reviewer", cwd=project, hooks=False)
    hub.idle_delay_ms = SLOW_IDLE_MS
    route = hub.connect("writer", "reviewer", max_rounds=5, cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 5)
    for n, prompt in enumerate(("first turn", "second turn"), start=1):
        hub.send("writer", prompt).result(30)
        wait_until(lambda n=n: route.rounds == n and route.last_status, 15, what=f"round {n}")
    env = _hook_env(writer)
    skipped = SkippedTurns(hub)
    late = json.dumps({"last_assistant_message": "Done: first turn"}).encode()
    send_hook(
        env[hook_command.ENV_SOCKET],
        hook_command.build_message(
            token=env[hook_command.ENV_TOKEN], pane=writer.pane_id, kind="stop", payload=late
        ),
    )
    assert skipped.wait(route, 0) == "already routed"
    assert route.rounds == 2
    assert [r["extracted"] for r in log_rows(hub, route.id)] == [
        "Done: first turn",
        "Done: second turn",
    ]
