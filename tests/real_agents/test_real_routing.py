"""Routing between the REAL Claude Code and Codex CLIs, offline, through a hub.

Each test starts real agents in panes of a private tmux server (``real_claude_pane`` /
``real_codex_pane``), ADOPTS them into a :class:`madohub_nb.Hub` on that server, and checks
at the fake APIs what each agent really received. Screens are saved to
``$MADOHUB_REAL_SCREENS`` (or the test's tmp folder) for comparison with the fixtures.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_until

import madohub_nb as mh
from madohub_nb.agents.claude import read_session_file
from madohub_nb.agents.profiles import screen_state
from madohub_nb.testing.fake_anthropic import FakeAnthropic, default_answer
from madohub_nb.testing.fake_openai import FakeOpenAIResponses

from .conftest import CLAUDE_VERSIONS, REPLY_TIMEOUT_S, RealPane

pytestmark = pytest.mark.real_agents

IDLE_DELAY_MS = 1500
"""Short, but longer than the 0.5 s between two spinner repaints of a busy Claude."""

QUIET_WAIT_S = 3 * IDLE_DELAY_MS / 1000
"""How long "no round fires" is watched for: well past the idle delay."""

ROUND_TIMEOUT_S = 60.0

MULTILINE_PROMPT = (
    "First line of a routed prompt\n"
    "second line names src/app.py and @reviewer mid-line\n"
    "\tthird line, indented by a tab, ends it."
)
"""Three lines, a ``/`` and an ``@`` mid-line (pickers), a tab: must arrive as one prompt."""


@pytest.fixture
def screens_dir(tmp_path: Path) -> Path:
    """Where this test saves the screens it sees."""
    env = os.environ.get("MADOHUB_REAL_SCREENS")
    return Path(env) if env else tmp_path / "screens"


@pytest.fixture
def real_hub(tmux_socket: str, tmp_path: Path) -> Iterator[mh.Hub]:
    """A hub on the real agents' tmux server, with a short idle delay; closed afterwards."""
    hub = mh.Hub(
        socket_name=tmux_socket, idle_delay_ms=IDLE_DELAY_MS, log_path=tmp_path / "rounds.sqlite3"
    )
    yield hub
    hub.close()


@pytest.fixture
def second_fake_anthropic() -> Iterator[FakeAnthropic]:
    """Another FakeAnthropic, so each of two Claude panes has an API of its own."""
    with FakeAnthropic() as fake:
        yield fake


def _rows(hub: mh.Hub, route: mh.Route | None = None) -> list[dict[str, Any]]:
    df = hub.log.df
    if route is not None:
        df = df[df["route_id"] == route.id]
    return list(df.to_dict("records"))


def _sink(hub: mh.Hub) -> mh.Tile:
    """A plain shell tile as the target of ``shadow`` routes (nothing is ever typed into it)."""
    tile = hub.tile("sink", agent="shell", command="bash --norc --noprofile")
    wait_until(lambda: tile.state == "idle", 15, what="the sink shell's prompt")
    return tile


def _session_id(pane: RealPane) -> str | None:
    """The ``sessionId`` in the Claude process's ``sessions/<pid>.json``."""
    session = read_session_file(pane.home / ".claude", pane.agent_pid())
    return session.session_id if session is not None else None


def _turn_ends(path: Path) -> list[datetime]:
    """When each turn of a Claude transcript ended (its ``turn_duration`` records)."""
    ends = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("type") == "system" and rec.get("subtype") == "turn_duration":
            ends.append(datetime.fromisoformat(rec["timestamp"].replace("Z", "+00:00")))
    return ends


def _answered(tile: mh.Tile, text: str) -> Callable[[], mh.Extraction | None]:
    def check() -> mh.Extraction | None:
        found = tile.last_response()
        return found if found is not None and found.text == text else None

    return check


# --------------------------------------------------------------------------- 1. claude -> claude


@pytest.mark.parametrize("version", CLAUDE_VERSIONS)
def test_claude_to_claude_route_delivers_exactly_the_wrapped_answer(
    version: str,
    real_hub: mh.Hub,
    real_claude_pane: Callable[..., RealPane],
    fake_anthropic: FakeAnthropic,
    second_fake_anthropic: FakeAnthropic,
) -> None:
    a = real_claude_pane(version)
    b = real_claude_pane(version, base_url=second_fake_anthropic.base_url)
    writer = real_hub.tile("writer", pane=a.pane_id)
    reviewer = real_hub.tile("reviewer", pane=b.pane_id)
    assert (writer.agent, reviewer.agent) == ("claude", "claude")
    template = "Please check:\n{output}"
    route = real_hub.connect("writer", "reviewer", template=template, cooldown_ms=1000)
    wait_until(route.ready.is_set, 20, what="the route to listen")

    a.submit(f"Write a haiku about tmux on {version}")
    answer = default_answer(f"Write a haiku about tmux on {version}")
    wrapped = template.format(output=answer)
    assert second_fake_anthropic.wait_for_prompts(1, REPLY_TIMEOUT_S) == [wrapped]
    real_hub.wait_rounds_sync(1, ROUND_TIMEOUT_S)
    (row,) = _rows(real_hub, route)
    assert row["extracted"] == answer
    assert row["extraction_method"] == "jsonl"
    assert row["prompt"] == wrapped
    assert row["status"] == "delivered", row["error"]
    assert row["meta"]["submit_verified"] is True
    # The reviewer's own transcript holds its answer to the routed prompt.
    reply = wait_until(_answered(reviewer, default_answer(wrapped)), REPLY_TIMEOUT_S)
    assert isinstance(reply, mh.Extraction) and reply.method == "jsonl"
    assert fake_anthropic.prompts == [f"Write a haiku about tmux on {version}"]


# --------------------------------------------------------------------------- 2. adoption


@pytest.mark.parametrize("via_shell", [False, True], ids=["own-process", "shell-child"])
def test_adopted_claude_pane_is_detected_and_tracks_busy_idle_and_its_answer(
    via_shell: bool,
    real_hub: mh.Hub,
    real_claude_pane: Callable[..., RealPane],
    fake_anthropic: FakeAnthropic,
    screens_dir: Path,
) -> None:
    pane = real_claude_pane(via_shell=via_shell)
    tile = real_hub.tile("agent", pane=pane.pane_id)
    assert tile.agent == "claude"
    proc = tile.agent_process()
    assert proc is not None and proc.pid == pane.agent_pid()
    assert (proc.pid != pane.pane_pid) is via_shell
    assert tile.state == "idle"
    assert screen_state(tile.profile, tile.screen()) == "idle"
    assert tile.last_response() is None  # no turn yet

    prompt = "Adopt me [[sleep 3]]"
    pane.submit(prompt)
    wait_until(lambda: tile.state == "busy", REPLY_TIMEOUT_S, what="tile state busy")
    # The profile's screen markers read the real busy screen the same way.
    busy = wait_until(
        lambda: (s := tile.screen()) if screen_state(tile.profile, s) == "busy" else None,
        REPLY_TIMEOUT_S,
        what="a busy screen",
    )
    (screens_dir / f"adopt_{'shell' if via_shell else 'own'}_busy.txt").parent.mkdir(
        parents=True, exist_ok=True
    )
    (screens_dir / f"adopt_{'shell' if via_shell else 'own'}_busy.txt").write_text(str(busy))
    answer = default_answer(prompt)
    found = wait_until(_answered(tile, answer), REPLY_TIMEOUT_S, what="the answer in the jsonl")
    assert isinstance(found, mh.Extraction) and found.method == "jsonl"
    assert found.path is not None and found.path.stem == _session_id(pane)
    wait_until(lambda: tile.state == "idle", REPLY_TIMEOUT_S, what="tile state idle")
    wait_until(
        lambda: screen_state(tile.profile, tile.screen()) == "idle", 10, what="an idle screen"
    )
    assert fake_anthropic.prompts == [prompt]


# --------------------------------------------------------------------------- 3. codex <-> claude


def test_codex_and_claude_route_to_each_other_with_rollout_and_jsonl_extraction(
    real_hub: mh.Hub,
    real_claude_pane: Callable[..., RealPane],
    real_codex_pane: Callable[..., RealPane],
    fake_anthropic: FakeAnthropic,
    fake_openai: FakeOpenAIResponses,
    screens_dir: Path,
) -> None:
    cx = real_codex_pane()
    cl = real_claude_pane()
    codex = real_hub.tile("codex", pane=cx.pane_id)
    claude = real_hub.tile("claude", pane=cl.pane_id)
    assert (codex.agent, claude.agent) == ("codex", "claude")
    to_claude = real_hub.connect(
        "codex", "claude", template="From Codex:\n{output}", max_rounds=1, cooldown_ms=1000
    )
    to_codex = real_hub.connect(
        "claude", "codex", template="From Claude:\n{output}", max_rounds=1, cooldown_ms=1000
    )
    wait_until(lambda: to_claude.ready.is_set() and to_codex.ready.is_set(), 20)

    cx.submit("Start the relay")
    codex_answer = default_answer("Start the relay")
    for_claude = f"From Codex:\n{codex_answer}"
    assert fake_anthropic.wait_for_prompts(1, ROUND_TIMEOUT_S) == [for_claude]
    for_codex = f"From Claude:\n{default_answer(for_claude)}"
    # Codex got the two-line prompt whole: its paste-burst guard did not eat the Enter.
    assert fake_openai.wait_for_prompts(2, ROUND_TIMEOUT_S) == ["Start the relay", for_codex]
    real_hub.wait_rounds_sync(2, ROUND_TIMEOUT_S)
    cx.save_screen(screens_dir / "relay_codex.txt")

    (a,) = [r for r in _rows(real_hub, to_claude) if r["status"] != "exhausted"]
    assert (a["extraction_method"], a["extracted"], a["status"]) == (
        "rollout",
        codex_answer,
        "delivered",
    ), a["error"]
    assert a["extraction_path"] and Path(a["extraction_path"]).name.startswith("rollout-")
    (b,) = _rows(real_hub, to_codex)
    assert (b["extraction_method"], b["prompt"], b["status"]) == ("jsonl", for_codex, "delivered")
    assert b["meta"]["submit_verified"] is True
    # Codex's answer to the relayed prompt ends the relay (route exhausted, logged, not typed).
    wait_until(
        lambda: [r["status"] for r in _rows(real_hub, to_claude)] == ["delivered", "exhausted"],
        ROUND_TIMEOUT_S,
        what="the exhausted row of codex->claude",
    )
    assert _rows(real_hub, to_claude)[1]["extracted"] == default_answer(for_codex)
    assert fake_anthropic.prompts == [for_claude]


# --------------------------------------------------------------------------- 4. on-idle waits


def test_on_idle_never_fires_while_claude_is_busy_or_waiting_for_permission(
    real_hub: mh.Hub,
    real_claude_pane: Callable[..., RealPane],
    fake_anthropic: FakeAnthropic,
    screens_dir: Path,
) -> None:
    pane = real_claude_pane()
    src = real_hub.tile("src", pane=pane.pane_id)
    route = real_hub.connect("src", _sink(real_hub), dispatch="shadow", cooldown_ms=1000)
    wait_until(route.ready.is_set, 20)

    # A 4 s turn: silence never lasts the idle delay while the spinner turns.
    slow = "Think slowly [[sleep 4]]"
    pane.submit(slow)
    wait_until(lambda: src.state == "busy", REPLY_TIMEOUT_S, what="busy")
    assert route.rounds == 0
    real_hub.wait_rounds_sync(1, ROUND_TIMEOUT_S)
    (first,) = _rows(real_hub, route)
    assert first["extracted"] == default_answer(slow)
    transcript = Path(first["extraction_path"])
    (turn_end,) = _turn_ends(transcript)
    assert first["fired_at"].to_pydatetime() > turn_end

    # A tool call waits on Claude's permission prompt: no round however long it waits.
    target = pane.cwd / "made_by_tool"
    pane.submit(f"Make a file [[bash touch {target}]]")
    wait_until(lambda: src.state == "waiting", REPLY_TIMEOUT_S, what="waiting for permission")
    waiting = pane.save_screen(screens_dir / "permission_prompt.txt").read_text()
    assert "Do you want to proceed?" in waiting
    assert screen_state(src.profile, waiting) == "waiting"
    time.sleep(QUIET_WAIT_S)
    assert src.state == "waiting"
    assert route.rounds == 1 and not target.exists()

    pane.press("Enter")  # "❯ 1. Yes" is selected
    wait_until(target.exists, REPLY_TIMEOUT_S, what="the tool to run")
    real_hub.wait_rounds_sync(2, ROUND_TIMEOUT_S)
    second = _rows(real_hub, route)[1]
    assert second["status"] == "shadow" and second["extraction_method"] == "jsonl"
    assert second["fired_at"].to_pydatetime() > _turn_ends(transcript)[1]
    found = src.last_response()
    assert found is not None and second["extracted"] == found.text
    assert found.text.startswith("Done:")
    # The finished turn fired once; silence afterwards fires nothing more.
    time.sleep(QUIET_WAIT_S)
    assert route.rounds == 2 and len(_rows(real_hub, route)) == 2


# --------------------------------------------------------------------------- 5. multi-line


@pytest.mark.parametrize("kind", ["claude", "codex"])
def test_multiline_prompt_arrives_as_one_request_typed_and_pasted(
    kind: str,
    real_hub: mh.Hub,
    real_claude_pane: Callable[..., RealPane],
    real_codex_pane: Callable[..., RealPane],
    fake_anthropic: FakeAnthropic,
    fake_openai: FakeOpenAIResponses,
    screens_dir: Path,
) -> None:
    pane = real_claude_pane() if kind == "claude" else real_codex_pane()
    fake: FakeAnthropic | FakeOpenAIResponses = fake_anthropic if kind == "claude" else fake_openai
    tile = real_hub.tile("target", pane=pane.pane_id)
    assert tile.agent == kind
    sent: list[str] = []
    for mode in ("typed", "paste"):
        prompt = f"{MULTILINE_PROMPT}\n(delivered {mode})"
        rec = real_hub.send("target", prompt, delivery=mode).result(ROUND_TIMEOUT_S)
        assert rec.status == "delivered", rec.error
        assert rec.meta["submit_verified"] is True
        sent.append(prompt)
        assert fake.wait_for_prompts(len(sent), REPLY_TIMEOUT_S) == sent
        wait_until(_answered(tile, default_answer(prompt)), REPLY_TIMEOUT_S, what="its answer")
        pane.save_screen(screens_dir / f"multiline_{kind}_{mode}.txt")
    assert fake.prompts == sent


# --------------------------------------------------------------------------- 6. /clear


def test_extraction_follows_claude_to_its_new_session_after_clear(
    real_hub: mh.Hub,
    real_claude_pane: Callable[..., RealPane],
    fake_anthropic: FakeAnthropic,
    screens_dir: Path,
) -> None:
    pane = real_claude_pane()
    tile = real_hub.tile("agent", pane=pane.pane_id)
    route = real_hub.connect("agent", _sink(real_hub), dispatch="shadow", cooldown_ms=1000)
    wait_until(route.ready.is_set, 20)

    real_hub.send("agent", "Before the clear").result(ROUND_TIMEOUT_S)
    before = wait_until(_answered(tile, default_answer("Before the clear")), REPLY_TIMEOUT_S)
    assert isinstance(before, mh.Extraction) and before.path is not None
    old_session = _session_id(pane)
    assert before.path.stem == old_session
    real_hub.wait_rounds_sync(1, ROUND_TIMEOUT_S)

    real_hub.send("agent", "/clear").result(ROUND_TIMEOUT_S)
    new_session = wait_until(
        lambda: (sid := _session_id(pane)) != old_session and sid, 30, what="a new sessionId"
    )
    pane.save_screen(screens_dir / "after_clear.txt")
    real_hub.send("agent", "After the clear").result(ROUND_TIMEOUT_S)
    after = wait_until(_answered(tile, default_answer("After the clear")), REPLY_TIMEOUT_S)
    assert isinstance(after, mh.Extraction) and after.method == "jsonl"
    assert after.path is not None and after.path.stem == new_session != before.path.stem
    assert fake_anthropic.prompts == ["Before the clear", "After the clear"]

    real_hub.wait_rounds_sync(1 + 3 + 1, ROUND_TIMEOUT_S)  # 3 sends, 2 routed turns
    routed = [r for r in _rows(real_hub, route)]
    assert [(r["extracted"], r["extraction_method"]) for r in routed] == [
        (default_answer("Before the clear"), "jsonl"),
        (default_answer("After the clear"), "jsonl"),
    ]
    assert routed[1]["extraction_path"] == str(after.path)
