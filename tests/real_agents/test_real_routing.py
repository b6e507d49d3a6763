"""Routing between the REAL Claude Code, Codex, OpenCode, Qwen Code and Aider CLIs, offline, through a hub.

Each test starts real agents in panes of a private tmux server (``real_claude_pane``,
``real_codex_pane``, ``real_opencode_pane``), ADOPTS them into a :class:`madohub_nb.Hub` on
that server, and checks at the fake APIs what each agent really received. Screens are
saved to ``$MADOHUB_REAL_SCREENS`` (or the test's tmp folder) for comparison with the
fixtures. OpenCode runs against the fake OpenAI server's chat-completions endpoint through
an ``@ai-sdk/openai-compatible`` provider in its config.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import SkippedTurns, log_rows, repaint, start_recorder, wait_until

import madohub_nb as mh
from madohub_nb.agents.kinds.claude import read_session_file
from madohub_nb.agents.profiles import screen_state
from madohub_nb.testing.fake_anthropic import FakeAnthropic, default_answer
from madohub_nb.testing.fake_anthropic import prompt_text as fake_anthropic_prompt
from madohub_nb.testing.fake_openai import FakeOpenAIResponses, prompt_text

from .conftest import (
    CLAUDE_VERSIONS,
    DEFAULT_API_KEY,
    QWEN_NO_UPDATE_SETTINGS,
    REPLY_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    RealPane,
    RegistryTrap,
    seed_opencode_config_deps,
    start_agent_pane,
    write_claude_config,
)
from .long_answer import MARKER, long_reply, missing_lines

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

OPENCODE_VERSION = "1.18.33"
OPENCODE_WIDTH = 100
"""Narrow enough that OpenCode draws no sidebar beside the conversation (it does at 160)."""

OPENCODE_QUIET_ENV = {
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    # The test's HOME is shared with Claude panes: do not read Claude Code's files.
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
}

PASTED_TAB = {"claude": "    ", "codex": "\t"}
"""What a pasted tab arrives as: Claude Code turns it into 4 spaces, Codex keeps it."""


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


def _trusted_projects(tmp_path: Path, home: Path, version: str, count: int) -> list[Path]:
    """Project folders, all trusted in ``~/.claude.json`` BEFORE any Claude starts.

    A running Claude Code rewrites ``~/.claude.json`` from its own copy, so a project
    trusted after the first Claude started can lose its entry and the next Claude stops
    at the "Do you trust this folder?" screen (seen with 2.1.332).
    """
    cwds = []
    for i in range(count):
        cwd = tmp_path / f"trusted-{i}"
        cwd.mkdir()
        cwds.append(Path(os.path.realpath(cwd)))
        write_claude_config(home, cwds[-1], DEFAULT_API_KEY, version)
    return cwds


def write_opencode_config(home: Path, base_url: str, api_key: str = DEFAULT_API_KEY) -> Path:
    """``~/.config/opencode/opencode.json``: one OpenAI-compatible provider at ``base_url``.

    OpenCode then calls only ``POST /v1/chat/completions`` (a title request without tools,
    then the conversation request with tools).
    """
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "Fake",
        "options": {"baseURL": base_url, "apiKey": api_key},
        "models": {"fake-model": {"name": "Fake model"}},
    }
    config = {
        "provider": {"fake": provider},
        "model": "fake/fake-model",
        "autoupdate": False,
        "share": "disabled",
    }
    path = home / ".config" / "opencode" / "opencode.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2))
    seed_opencode_config_deps(home, OPENCODE_VERSION)  # (else it installs from the registry)
    return path


@pytest.fixture
def real_opencode_pane(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_openai: FakeOpenAIResponses,
) -> Iterator[Callable[[], RealPane]]:
    """Factory: the real OpenCode TUI at its home screen, in a 100-column pane; ended by pid."""
    panes: list[RealPane] = []

    def start() -> RealPane:
        exe = agent_bin("opencode", OPENCODE_VERSION)
        cwd = tmp_path / f"proj-opencode-{len(panes)}"
        cwd.mkdir()
        write_opencode_config(home, fake_openai.base_url)
        pane = start_agent_pane(
            tmux_socket,
            [str(exe)],
            kind="opencode",
            version=OPENCODE_VERSION,
            cwd=Path(os.path.realpath(cwd)),
            home=home,
            env={"HOME": str(home), **OPENCODE_QUIET_ENV},
        )
        panes.append(pane)
        pane.tmux("resize-window", "-t", pane.pane_id, "-x", str(OPENCODE_WIDTH))
        pane.wait_screen(lambda s: "Ask anything" in s, STARTUP_TIMEOUT_S, what="OpenCode home")
        return pane

    yield start
    for pane in panes:
        pane.stop()


def _conversation_prompts(fake: FakeOpenAIResponses) -> list[str | None]:
    """Prompts of OpenCode's conversation requests (its title requests carry no tools)."""
    return [prompt_text(r["body"]) for r in fake.requests if r["body"].get("tools")]


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


def _rounds_of(hub: mh.Hub, route: mh.Route, n: int) -> Callable[[], list[dict[str, Any]]]:
    """A condition: the route has logged at least ``n`` rows; returns them."""

    def check() -> list[dict[str, Any]]:
        rows = log_rows(hub, route)
        return rows if len(rows) >= n else []

    return check


def _screen_in(tile: mh.Tile, state: str) -> Callable[[], str | None]:
    """A condition: the profile's screen markers read ``state`` on the tile's real screen."""

    def check() -> str | None:
        screen = tile.screen()
        return screen if screen_state(tile.profile, screen) == state else None

    return check


def _save(path: Path, screen: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(screen)


def _answered(tile: mh.Tile, text: str, method: str = "jsonl") -> Callable[[], Any]:
    """A condition: the tile's last response is ``text``, read by ``method``.

    The screen can show an answer a moment before the transcript has it (then the
    extraction falls back to ``terminal``); transcript readers trim the text's ends.
    """

    def check() -> mh.Extraction | None:
        found = tile.last_response()
        if found is None or (found.text, found.method) != (text.strip(), method):
            return None
        return found

    return check


# --------------------------------------------------------------------------- 1. claude -> claude


@pytest.mark.parametrize("version", CLAUDE_VERSIONS)
def test_claude_to_claude_route_delivers_exactly_the_wrapped_answer(
    version: str,
    real_hub: mh.Hub,
    real_claude_pane: Callable[..., RealPane],
    fake_anthropic: FakeAnthropic,
    second_fake_anthropic: FakeAnthropic,
    home: Path,
    tmp_path: Path,
) -> None:
    cwd_a, cwd_b = _trusted_projects(tmp_path, home, version, 2)
    a = real_claude_pane(version, cwd=cwd_a)
    b = real_claude_pane(version, cwd=cwd_b, base_url=second_fake_anthropic.base_url)
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
    (row,) = log_rows(real_hub, route)
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
    busy = wait_until(_screen_in(tile, "busy"), REPLY_TIMEOUT_S, what="a busy screen")
    _save(screens_dir / f"adopt_{'shell' if via_shell else 'own'}_busy.txt", str(busy))
    answer = default_answer(prompt)
    found = wait_until(_answered(tile, answer), REPLY_TIMEOUT_S, what="the answer in the jsonl")
    assert isinstance(found, mh.Extraction) and found.method == "jsonl"
    assert found.path is not None and found.path.stem == _session_id(pane)
    wait_until(lambda: tile.state == "idle", REPLY_TIMEOUT_S, what="tile state idle")
    wait_until(_screen_in(tile, "idle"), 10, what="an idle screen")
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

    # Codex shows its composer seconds before it takes a submit: wait for the hub's "idle".
    wait_until(lambda: codex.state == "idle", REPLY_TIMEOUT_S, what="Codex ready")
    cx.submit("Start the relay")
    codex_answer = default_answer("Start the relay")
    for_claude = f"From Codex:\n{codex_answer}"
    assert fake_anthropic.wait_for_prompts(1, ROUND_TIMEOUT_S) == [for_claude]
    for_codex = f"From Claude:\n{default_answer(for_claude)}"
    # Codex got the two-line prompt whole: its paste-burst guard did not eat the Enter.
    assert fake_openai.wait_for_prompts(2, ROUND_TIMEOUT_S) == ["Start the relay", for_codex]
    real_hub.wait_rounds_sync(2, ROUND_TIMEOUT_S)
    cx.save_screen(screens_dir / "relay_codex.txt")

    (a,) = [r for r in log_rows(real_hub, to_claude) if r["status"] != "exhausted"]
    assert (a["extraction_method"], a["extracted"], a["status"]) == (
        "rollout",
        codex_answer,
        "delivered",
    ), a["error"]
    assert a["extraction_path"] and Path(a["extraction_path"]).name.startswith("rollout-")
    (b,) = log_rows(real_hub, to_codex)
    assert (b["extraction_method"], b["prompt"], b["status"]) == ("jsonl", for_codex, "delivered")
    assert b["meta"]["submit_verified"] is True
    # Codex's answer to the relayed prompt ends the relay (route exhausted, logged, not typed).
    wait_until(
        lambda: [r["status"] for r in log_rows(real_hub, to_claude)] == ["delivered", "exhausted"],
        ROUND_TIMEOUT_S,
        what="the exhausted row of codex->claude",
    )
    assert log_rows(real_hub, to_claude)[1]["extracted"] == default_answer(for_codex)
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
    (first,) = log_rows(real_hub, route)
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
    second = log_rows(real_hub, route)[1]
    assert second["status"] == "shadow" and second["extraction_method"] == "jsonl"
    assert second["fired_at"].to_pydatetime() > _turn_ends(transcript)[1]
    found = src.last_response()
    assert found is not None and second["extracted"] == found.text
    assert found.text.startswith("Done:")
    # The finished turn fired once; a repaint afterwards is seen and skipped.
    skipped = SkippedTurns(real_hub)
    repaint(real_hub, src)
    assert skipped.wait(route, 0, ROUND_TIMEOUT_S) == "already routed"
    assert route.rounds == 2 and len(log_rows(real_hub, route)) == 2


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
    received: list[str] = []
    for mode in ("typed", "paste"):
        prompt = f"{MULTILINE_PROMPT}\n(delivered {mode})"
        rec = real_hub.send("target", prompt, delivery=mode).result(ROUND_TIMEOUT_S)
        assert rec.status == "delivered", rec.error
        assert rec.meta["submit_verified"] is True
        tab = tile.profile.typed_tab if mode == "typed" else PASTED_TAB[kind]
        received.append(prompt.replace("\t", tab))
        assert fake.wait_for_prompts(len(received), REPLY_TIMEOUT_S) == received
        answer = default_answer(received[-1])
        wait_until(_answered(tile, answer, tile.profile.extractor), REPLY_TIMEOUT_S, what=answer)
        pane.save_screen(screens_dir / f"multiline_{kind}_{mode}.txt")
    assert fake.prompts == received


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
    # Typing /clear before the idle delay has passed would (rightly) keep the turn from firing.
    wait_until(_rounds_of(real_hub, route, 1), ROUND_TIMEOUT_S, what="round 1")

    skipped = SkippedTurns(real_hub)
    real_hub.send("agent", "/clear").result(ROUND_TIMEOUT_S)
    wait_until(lambda: _session_id(pane) not in (None, old_session), 30, what="a new sessionId")
    pane.save_screen(screens_dir / "after_clear.txt")
    # The new session has no transcript yet: no answer (neither the old one nor screen text).
    wait_until(lambda: tile.last_response() is None, 10, what="no answer after /clear")
    # /clear's own "turn" is seen by the route and skipped, not fired.
    assert skipped.wait(route, 0, ROUND_TIMEOUT_S) in ("no answer", "already routed")
    assert len(log_rows(real_hub, route)) == 1
    real_hub.send("agent", "After the clear").result(ROUND_TIMEOUT_S)
    after = wait_until(_answered(tile, default_answer("After the clear")), REPLY_TIMEOUT_S)
    assert isinstance(after, mh.Extraction) and after.method == "jsonl"
    # /clear may switch the sessionId twice in a row (see the slash-command test below).
    assert after.path is not None and after.path.stem == _session_id(pane) != old_session
    assert fake_anthropic.prompts == ["Before the clear", "After the clear"]

    routed = wait_until(_rounds_of(real_hub, route, 2), ROUND_TIMEOUT_S, what="round 2")
    assert isinstance(routed, list)
    assert [(r["extracted"], r["extraction_method"]) for r in routed] == [
        (default_answer("Before the clear"), "jsonl"),
        (default_answer("After the clear"), "jsonl"),
    ]
    assert routed[1]["extraction_path"] == str(after.path)


@pytest.mark.parametrize("version", CLAUDE_VERSIONS)
def test_a_slash_command_sent_to_claude_runs_once(
    version: str,
    real_hub: mh.Hub,
    real_claude_pane: Callable[..., RealPane],
    fake_anthropic: FakeAnthropic,
    home: Path,
) -> None:
    # A custom command reaches the model: each run of it is one request at the fake API.
    marker = "SLASH-COMMAND-BODY-7f3a"
    commands = home / ".claude" / "commands"
    commands.mkdir(parents=True, exist_ok=True)
    (commands / "shout.md").write_text(f"Reply with one word. {marker}\n")
    pane = real_claude_pane(version)
    tile = real_hub.tile("agent", pane=pane.pane_id)

    def runs_at_api() -> int:
        return sum(
            1 for r in fake_anthropic.requests if marker in json.dumps(r["body"].get("messages"))
        )

    rec = real_hub.send("agent", "/shout").result(ROUND_TIMEOUT_S)
    assert rec.status == "delivered", rec.error
    wait_until(lambda: runs_at_api() >= 1, REPLY_TIMEOUT_S, what="the command's request")
    wait_until(lambda: tile.state == "idle", REPLY_TIMEOUT_S, what="Claude idle after it")
    time.sleep(QUIET_WAIT_S)  # a second run would come within a fraction of a second
    # A request carries the whole conversation: a second run would be a second user turn
    # holding the command's body (two runs: 2).
    user_turns = max(
        sum(1 for m in r["body"]["messages"] if m.get("role") == "user" and marker in json.dumps(m))
        for r in fake_anthropic.requests
        if marker in json.dumps(r["body"].get("messages"))
    )
    assert user_turns == 1

    rec = real_hub.send("agent", "/clear").result(ROUND_TIMEOUT_S)
    assert rec.status == "delivered", rec.error
    projects = pane.home / ".claude" / "projects"
    time.sleep(QUIET_WAIT_S)
    runs = [
        line
        for path in projects.rglob("*.jsonl")
        for line in path.read_text().splitlines()
        if "<command-name>/clear</command-name>" in line
    ]
    assert len(runs) == 1


# --------------------------------------------------------------------------- OpenCode smoke


def test_opencode_tile_shows_busy_then_idle_and_its_database_answer_is_routed(
    registry_trap: RegistryTrap,
    real_hub: mh.Hub,
    real_opencode_pane: Callable[[], RealPane],
    real_claude_pane: Callable[..., RealPane],
    fake_openai: FakeOpenAIResponses,
    fake_anthropic: FakeAnthropic,
    screens_dir: Path,
) -> None:
    oc = real_opencode_pane()
    cl = real_claude_pane()
    src = real_hub.tile("opencode", pane=oc.pane_id)
    real_hub.tile("claude", pane=cl.pane_id)
    assert src.agent == "opencode"
    wait_until(lambda: src.state == "idle", REPLY_TIMEOUT_S, what="OpenCode idle")

    warm_up = "Warm up [[sleep 3]]"
    rec = real_hub.send("opencode", warm_up).result(ROUND_TIMEOUT_S)
    assert rec.status == "delivered" and rec.meta["submit_verified"] is True, rec.error
    busy = wait_until(_screen_in(src, "busy"), REPLY_TIMEOUT_S, what="OpenCode busy")
    _save(screens_dir / "opencode_busy.txt", str(busy))
    idle = wait_until(_screen_in(src, "idle"), REPLY_TIMEOUT_S, what="OpenCode idle again")
    _save(screens_dir / "opencode_idle_after_reply.txt", str(idle))
    # Its markdown renderer shows "[[sleep 3]]" as "[sleep 3]"; its database has the text.
    warm_answer = default_answer(warm_up)
    found = wait_until(_answered(src, warm_answer, "session"), 10, what=warm_answer)
    assert isinstance(found, mh.Extraction) and found.path is not None
    assert found.path.name == "opencode.db"

    route = real_hub.connect("opencode", "claude", template="From OpenCode:\n{output}")
    wait_until(route.ready.is_set, 20)
    relay = "Relay this\nover two lines"
    real_hub.send("opencode", relay).result(ROUND_TIMEOUT_S)
    for_claude = f"From OpenCode:\n{default_answer(relay)}"
    assert fake_anthropic.wait_for_prompts(1, ROUND_TIMEOUT_S) == [for_claude]
    wait_until(_rounds_of(real_hub, route, 1), ROUND_TIMEOUT_S, what="the routed round")
    (row,) = log_rows(real_hub, route)
    assert (row["extraction_method"], row["status"]) == ("session", "delivered"), row["error"]
    assert row["extracted"] == default_answer(relay)
    assert row["model"] == "fake-model" and row["output_tokens"] is not None
    assert _conversation_prompts(fake_openai) == [warm_up, relay]
    # Its @opencode-ai/plugin came from the install step: no registry was asked (issue 23.6).
    assert registry_trap.requests == []


# --------------------------------------------------------------------------- Qwen Code

QWEN_VERSION = "0.24.4"


@pytest.fixture
def real_qwen_pane(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_openai: FakeOpenAIResponses,
) -> Iterator[RealPane]:
    """Real Qwen Code, talking to ``fake_openai`` as an OpenAI-compatible API; ended by pid."""
    exe = agent_bin("qwen", QWEN_VERSION)
    settings_dir = home / ".qwen"
    settings_dir.mkdir(parents=True, exist_ok=True)
    (settings_dir / "settings.json").write_text(
        json.dumps(
            {
                "security": {"auth": {"selectedType": "openai"}},
                "privacy": {"usageStatisticsEnabled": False},
                "telemetry": {"enabled": False},
                "ui": {"hideTips": True},
                **QWEN_NO_UPDATE_SETTINGS,
            }
        )
    )
    cwd = tmp_path / "proj-qwen"
    cwd.mkdir()
    env = {
        "HOME": str(home),
        "OPENAI_API_KEY": "sk-fake-qwen",
        "OPENAI_BASE_URL": fake_openai.base_url,
        "OPENAI_MODEL": "fake-model",
    }
    pane = start_agent_pane(
        tmux_socket, [str(exe)], kind="qwen", version=QWEN_VERSION, cwd=cwd, home=home, env=env
    )
    yield pane
    pane.stop()


def test_qwen_code_routes_both_ways_with_claude(
    registry_trap: RegistryTrap,
    real_hub: mh.Hub,
    real_qwen_pane: RealPane,
    real_claude_pane: Callable[..., RealPane],
    fake_openai: FakeOpenAIResponses,
    fake_anthropic: FakeAnthropic,
) -> None:
    qwen = real_hub.tile("qwen", pane=real_qwen_pane.pane_id)
    assert qwen.agent == "qwen"  # detected from its process
    wait_until(lambda: qwen.state == "idle", STARTUP_TIMEOUT_S, what="Qwen Code idle")
    cl = real_claude_pane()
    real_hub.tile("claude", pane=cl.pane_id)

    # Qwen -> Claude: its chat record's answer, wrapped.
    out_route = real_hub.connect("qwen", "claude", template="From qwen: {output}", max_rounds=1)
    wait_until(lambda: out_route.ready.is_set(), 10)
    rec = real_hub.send("qwen", "Say hi [[sleep 2]]").result(ROUND_TIMEOUT_S)
    assert rec.status == "delivered" and rec.meta["submit_verified"] is True, rec.error
    wait_until(lambda: qwen.state == "busy", REPLY_TIMEOUT_S, what="Qwen Code busy")
    wait_until(lambda: out_route.last_status == "delivered", ROUND_TIMEOUT_S, what="qwen->claude")
    expected = "From qwen: " + default_answer("Say hi [[sleep 2]]")
    assert any(fake_anthropic_prompt(r["body"]) == expected for r in fake_anthropic.requests), [
        fake_anthropic_prompt(r["body"]) for r in fake_anthropic.requests
    ]
    (row,) = log_rows(real_hub, out_route)
    assert row["extraction_method"] == "session", row
    assert row["model"] == "fake-model" and row["input_tokens"] is not None
    out_route.stop()

    # Claude -> Qwen: its transcript answer, typed into Qwen's box (two lines, one prompt).
    wait_until(lambda: real_hub.tiles["claude"].state == "idle", REPLY_TIMEOUT_S)
    wait_until(lambda: qwen.state == "idle", REPLY_TIMEOUT_S)
    in_route = real_hub.connect("claude", "qwen", template="Claude says:\n{output}", max_rounds=1)
    wait_until(lambda: in_route.ready.is_set(), 10)
    rec = real_hub.send("claude", "Ping qwen").result(ROUND_TIMEOUT_S)
    assert rec.status == "delivered", rec.error
    wait_until(lambda: in_route.last_status == "delivered", ROUND_TIMEOUT_S, what="claude->qwen")
    routed = "Claude says:\n" + default_answer("Ping qwen")
    wait_until(
        lambda: routed in [prompt_text(r["body"]) for r in fake_openai.requests],
        REPLY_TIMEOUT_S,
        what="the routed prompt at Qwen's API",
    )
    wait_until(lambda: qwen.state == "idle", REPLY_TIMEOUT_S)
    # The first idle reading can come before Qwen has written its answer (the fake answers
    # at once); a route waits for quiet first, so the test waits for the answer.
    answer = default_answer(routed)
    found = wait_until(_answered(qwen, answer, "session"), 10, what="Qwen's answer in its chat")
    assert isinstance(found, mh.Extraction) and found.path is not None
    assert found.path.suffix == ".jsonl" and found.path.parent.name == "chats"
    assert registry_trap.requests == []  # its update check is off (issue 23.6)


# --------------------------------------------------------------------------- Aider

AIDER_VERSION = "0.86.2"
AIDER_MODEL = "openai/fake-model"


def write_aider_config(home: Path, base_url: str) -> None:
    """``~/.aider.*`` files that point Aider at ``base_url`` and skip every network call.

    The model metadata spares the download of litellm's price list; ``reminder: sys`` sends
    the edit-format reminder as a system message, so the user's message is the prompt alone.
    """
    (home / ".aider.conf.yml").write_text(
        "\n".join(
            [
                f"model: {AIDER_MODEL}",
                f"openai-api-base: {base_url}",
                "openai-api-key: sk-fake-aider",
                "check-update: false",
                "analytics-disable: true",
                "show-release-notes: false",
                "show-model-warnings: false",
                "git: false",
                "",
            ]
        )
    )
    metadata = {
        AIDER_MODEL: {
            "max_input_tokens": 128000,
            "max_output_tokens": 4096,
            "input_cost_per_token": 0,
            "output_cost_per_token": 0,
            "litellm_provider": "openai",
            "mode": "chat",
        }
    }
    (home / ".aider.model.metadata.json").write_text(json.dumps(metadata))
    # "ask": Aider answers without editing files, so an answer is kept whole (in "whole"
    # edit format a fenced code block is taken for a file, and the model is asked again).
    (home / ".aider.model.settings.yml").write_text(
        f"- name: {AIDER_MODEL}\n  edit_format: ask\n  reminder: sys\n  examples_as_sys_msg: true\n"
    )


@pytest.fixture
def real_aider_pane(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_openai: FakeOpenAIResponses,
) -> Iterator[RealPane]:
    """Real Aider (from PyPI, its own venv), talking to ``fake_openai``; ended by pid."""
    exe = agent_bin("aider", AIDER_VERSION)
    write_aider_config(home, fake_openai.base_url)
    cwd = tmp_path / "proj-aider"
    cwd.mkdir()
    pane = start_agent_pane(
        tmux_socket, [str(exe)], kind="aider", version=AIDER_VERSION, cwd=cwd, home=home,
        env={"HOME": str(home)},
    )  # fmt: skip
    # The pane starts `env HOME=… aider`: until env has exec'd, the pane runs `env`, which no
    # agent detection can name (a loaded CI caught that moment).
    wait_until(
        lambda: _current_command(tmux_socket, pane.pane_id) not in ("", "env"),
        STARTUP_TIMEOUT_S,
        what="aider started (env exec'd)",
    )
    yield pane
    pane.stop()


def _current_command(socket: str, pane_id: str) -> str:
    argv = ["tmux", "-L", socket, "display-message", "-p", "-t", pane_id]
    out = subprocess.run([*argv, "#{pane_current_command}"], capture_output=True, text=True)
    return out.stdout.strip()


def test_aider_routes_both_ways_with_claude(
    real_hub: mh.Hub,
    real_aider_pane: RealPane,
    real_claude_pane: Callable[..., RealPane],
    fake_openai: FakeOpenAIResponses,
    fake_anthropic: FakeAnthropic,
    screens_dir: Path,
) -> None:
    aider = real_hub.tile("aider", pane=real_aider_pane.pane_id)
    assert aider.agent == "aider"  # detected from its process (a venv's python running `aider`)
    wait_until(lambda: aider.state == "idle", STARTUP_TIMEOUT_S, what="Aider idle")
    _save(screens_dir / "aider_idle.txt", real_aider_pane.screen())
    cl = real_claude_pane()
    real_hub.tile("claude", pane=cl.pane_id)

    # Aider -> Claude: its chat history's answer, wrapped.
    out_route = real_hub.connect("aider", "claude", template="From aider: {output}", max_rounds=1)
    wait_until(lambda: out_route.ready.is_set(), 10)
    rec = real_hub.send("aider", "Say hi [[sleep 2]]").result(ROUND_TIMEOUT_S)
    assert rec.status == "delivered" and rec.meta["submit_verified"] is True, rec.error
    wait_until(lambda: aider.state == "busy", REPLY_TIMEOUT_S, what="Aider busy")
    _save(screens_dir / "aider_busy.txt", real_aider_pane.screen())
    wait_until(lambda: out_route.last_status == "delivered", ROUND_TIMEOUT_S, what="aider->claude")
    expected = "From aider: " + default_answer("Say hi [[sleep 2]]")
    assert any(fake_anthropic_prompt(r["body"]) == expected for r in fake_anthropic.requests), [
        fake_anthropic_prompt(r["body"]) for r in fake_anthropic.requests
    ]
    (row,) = log_rows(real_hub, out_route)
    assert (row["extraction_method"], row["extracted"]) == (
        "session",
        default_answer("Say hi [[sleep 2]]"),
    )
    out_route.stop()

    # Claude -> Aider: its transcript answer, typed into Aider's prompt (two lines joined by
    # Alt-Enter, one submit).
    wait_until(lambda: real_hub.tiles["claude"].state == "idle", REPLY_TIMEOUT_S)
    wait_until(lambda: aider.state == "idle", REPLY_TIMEOUT_S)
    in_route = real_hub.connect("claude", "aider", template="Claude says:\n{output}", max_rounds=1)
    wait_until(lambda: in_route.ready.is_set(), 10)
    rec = real_hub.send("claude", "Ping aider").result(ROUND_TIMEOUT_S)
    assert rec.status == "delivered", rec.error
    wait_until(lambda: in_route.last_status == "delivered", ROUND_TIMEOUT_S, what="claude->aider")
    routed = "Claude says:\n" + default_answer("Ping aider")
    wait_until(
        lambda: routed in [prompt_text(r["body"]) for r in fake_openai.requests],
        REPLY_TIMEOUT_S,
        what="the routed prompt at Aider's API",
    )
    assert fake_openai.prompts == ["Say hi [[sleep 2]]", routed]  # each prompt once, whole
    wait_until(lambda: aider.state == "idle", REPLY_TIMEOUT_S)
    _save(screens_dir / "aider_idle_after_route.txt", real_aider_pane.screen())
    found = wait_until(_answered(aider, default_answer(routed), "session"), 10, what="answer")
    assert isinstance(found, mh.Extraction) and found.path is not None
    assert found.path.name == ".aider.chat.history.md"


# --------------------------------------------------------------------------- long answers (23.4)


def _long_answer_arrives_whole(
    hub: mh.Hub, source: str, fake: FakeOpenAIResponses, out: Path
) -> None:
    """``source`` answers about 120 lines of markdown; the recorder tile gets every line."""
    fake.reply = long_reply
    start_recorder(hub, "rec", out, paste=True)
    route = hub.connect(source, "rec", template="{output}", max_rounds=1)
    wait_until(route.ready.is_set, 20)
    rec = hub.send(source, f"{MARKER} please write the long markdown answer").result(
        ROUND_TIMEOUT_S
    )
    assert rec.status == "delivered", rec.error
    wait_until(_rounds_of(hub, route, 1), 2 * ROUND_TIMEOUT_S, what=f"{source} -> rec")
    (row,) = log_rows(hub, route)
    assert row["status"] == "delivered", row["error"]
    with contextlib.suppress(AssertionError):  # typing 120 lines takes a moment
        wait_until(lambda: not missing_lines(out.read_bytes().decode("utf-8", "replace")), 10)
    missing = missing_lines(out.read_bytes().decode("utf-8", "replace"))
    assert (row["extraction_method"], missing) == ("session", [])


def test_a_long_opencode_answer_arrives_whole(
    real_hub: mh.Hub,
    real_opencode_pane: Callable[[], RealPane],
    fake_openai: FakeOpenAIResponses,
    tmp_path: Path,
) -> None:
    oc = real_opencode_pane()
    src = real_hub.tile("opencode", pane=oc.pane_id)
    wait_until(lambda: src.state == "idle", REPLY_TIMEOUT_S, what="OpenCode idle")
    _long_answer_arrives_whole(real_hub, "opencode", fake_openai, tmp_path / "rec.bin")


def test_a_long_qwen_answer_arrives_whole(
    real_hub: mh.Hub,
    real_qwen_pane: RealPane,
    fake_openai: FakeOpenAIResponses,
    tmp_path: Path,
) -> None:
    qwen = real_hub.tile("qwen", pane=real_qwen_pane.pane_id)
    wait_until(lambda: qwen.state == "idle", STARTUP_TIMEOUT_S, what="Qwen Code idle")
    _long_answer_arrives_whole(real_hub, "qwen", fake_openai, tmp_path / "rec.bin")


def test_a_long_aider_answer_arrives_whole(
    real_hub: mh.Hub,
    real_aider_pane: RealPane,
    fake_openai: FakeOpenAIResponses,
    tmp_path: Path,
) -> None:
    aider = real_hub.tile("aider", pane=real_aider_pane.pane_id)
    wait_until(lambda: aider.state == "idle", STARTUP_TIMEOUT_S, what="Aider idle")
    _long_answer_arrives_whole(real_hub, "aider", fake_openai, tmp_path / "rec.bin")
