"""A tile answers from its agent's own record: OpenCode, Qwen Code, Aider, Gemini CLI, Copilot, Pi.

Each agent is a real process in a real tmux pane (a copy of ``sleep`` named
like the agent, so the tile finds it as it finds the real one) with a real
HOME and cwd; the records are the files the real agents wrote
(``tests/fixtures/agent_records``), put where each agent keeps them
(``madohub_nb/agents/kinds/<kind>.py``). The screen is empty: an answer can only
come from the record.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from conftest import log_rows, start_recorder, wait_until

import madohub_nb as mh
from madohub_nb.agents.detect import AgentProcess
from madohub_nb.agents.kinds.aider import aider_history_candidates
from madohub_nb.agents.kinds.copilot import copilot_session_state
from madohub_nb.agents.kinds.gemini import gemini_chats
from madohub_nb.agents.kinds.opencode import opencode_database
from madohub_nb.agents.kinds.pi import pi_sessions
from madohub_nb.agents.kinds.qwen import qwen_session
from madohub_nb.pipeline import extract as extraction
from madohub_nb.pipeline.tile import Tile

RECORDS = Path(__file__).parent / "fixtures" / "agent_records"
LONG = (RECORDS / "long_answer.md").read_text().rstrip()
SAY_HI = (RECORDS / "busy" / "say_hi.md").read_text().rstrip()
QWEN_SESSION = "9e37d5f9-3d64-4ded-b508-37a8775f6628"
QWEN_BUSY_SESSION = "75254fc4-0323-4b67-9d13-6c2c71677501"


STAND_IN = """#!/bin/sh
# Prints (then removes) the file named by $1 whenever it appears, as an agent repaints.
while :; do
  if [ -f "$1" ]; then cat "$1"; rm -f "$1"; fi
  sleep 0.1
done
"""


def fake_agent(tmp_path: Path, name: str) -> str:
    """A shell command running a script called ``name`` (its process reads as that agent);
    it prints what is put in ``tmp_path/say``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / name
    exe.write_text(STAND_IN)
    exe.chmod(0o755)
    return f"exec {exe} {tmp_path / 'say'}"


def agent_tile(hub: mh.Hub, tmp_path: Path, home: Path, kind: str, cwd: Path) -> Tile:
    cwd.mkdir(parents=True, exist_ok=True)
    command = fake_agent(tmp_path, kind)
    # (A shell stand-in serves no native channel: these tests read the agent's own record.)
    tile = hub.tile(
        kind, agent=kind, command=command, cwd=cwd, env={"HOME": str(home)}, channel=False
    )
    wait_until(lambda: tile.agent_process() is not None, 10, what=f"{kind} process")
    return tile


def plain_tile(hub: mh.Hub, tmp_path: Path, home: Path, cwd: Path) -> Tile:
    """A ``terminal`` tile whose pane runs the stand-in ``agentx`` (as its own process)."""
    cwd.mkdir(parents=True, exist_ok=True)
    command = fake_agent(tmp_path, "agentx")
    tile = hub.tile("plain", agent="terminal", command=command, cwd=cwd, env={"HOME": str(home)})

    def comm() -> str | None:
        st = tile.machine.stats([tile.pane_pid or 0]).get(tile.pane_pid or 0)
        return st.comm if st is not None else None

    wait_until(lambda: comm() == "agentx", 10, what="agentx running")
    return tile


def running(tile: Tile) -> AgentProcess:
    proc = tile.agent_process()
    assert proc is not None
    return proc


def as_kind(tile: Tile, kind: str) -> AgentProcess:
    """The tile's process taken for an agent of ``kind`` (one whose profile is another
    helper's: Gemini CLI, Copilot CLI, Pi)."""
    st = tile.machine.stats([tile.pane_pid or 0]).get(tile.pane_pid or 0)
    assert st is not None
    return AgentProcess(kind, st.pid, st.start_ticks, st.comm)


def opencode_db(home: Path, directory: Path, busy: bool = False) -> Path:
    """The real OpenCode database, its session moved to ``directory`` (the test's cwd)."""
    db = Path(opencode_database({"HOME": str(home)}) or "")
    db.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(RECORDS / ("busy/opencode.db" if busy else "opencode/opencode.db"), db)
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("UPDATE session SET directory = ?", (str(directory),))
    return db


# --------------------------------------------------------------------------- each agent


def test_opencode_answers_from_its_database_narrowed_to_its_cwd(
    hub: mh.Hub, tmp_path: Path, home: Path
) -> None:
    cwd = tmp_path / "proj"
    tile = agent_tile(hub, tmp_path, home, "opencode", cwd)
    db = opencode_db(home, cwd)
    got = tile.last_response()
    assert got is not None and got.method == "session", got
    assert got.text == LONG
    assert str(got.path) == str(db) and got.message_id == "msg_232bbaefc001x4QOWbmuJKcKW0"
    assert got.usage is not None and got.usage.model == "fake-model"
    assert got.usage.input_tokens == 8400 and got.usage.output_tokens == 231
    # Another folder's session is not this tile's answer (one database serves every OpenCode).
    opencode_db(home, tmp_path / "elsewhere")
    assert tile.last_response() is None


def test_qwen_answers_from_the_chat_its_pid_file_names(
    hub: mh.Hub, tmp_path: Path, home: Path
) -> None:
    cwd = tmp_path / "proj"
    tile = agent_tile(hub, tmp_path, home, "qwen", cwd)
    chats = home / ".qwen" / "projects" / "-proj" / "chats"
    chats.mkdir(parents=True)
    shutil.copy(RECORDS / "qwen" / f"{QWEN_SESSION}.jsonl", chats / f"{QWEN_SESSION}.jsonl")
    busy = f"qwen-{QWEN_BUSY_SESSION}.jsonl"
    shutil.copy(RECORDS / "busy" / busy, chats / f"{QWEN_BUSY_SESSION}.jsonl")
    assert tile.last_response() is None  # no sessions/<pid>.json: which chat is unknown
    pid = running(tile).pid
    pointer = home / ".qwen" / "sessions" / f"{pid}.json"
    pointer.parent.mkdir(parents=True)
    pointer.write_text(json.dumps({"pid": pid, "sessionId": QWEN_SESSION, "cwd": str(cwd)}))
    got = tile.last_response()
    assert got is not None and got.method == "session", got
    assert got.text == LONG and got.message_id == "d157d077-5c78-4790-b85d-583c6aa1c3c4"
    assert got.usage is not None and got.usage.input_tokens == 21551
    # The other session in the same folder (another Qwen in this cwd) is read only when named.
    pointer.write_text(json.dumps({"pid": pid, "sessionId": QWEN_BUSY_SESSION}))
    got = tile.last_response()
    assert got is not None and got.text == SAY_HI


def test_aider_answers_from_the_history_in_its_cwd_or_its_git_root(
    hub: mh.Hub, tmp_path: Path, home: Path
) -> None:
    root = tmp_path / "repo"
    tile = agent_tile(hub, tmp_path, home, "aider", root / "sub")
    assert tile.last_response() is None
    shutil.copy(RECORDS / "aider" / ".aider.chat.history.md", root / ".aider.chat.history.md")
    got = tile.last_response()
    assert got is not None and got.method == "session", got
    assert got.text == LONG and str(got.path) == str(root / ".aider.chat.history.md")
    assert got.usage is not None and got.usage.model == "openai/fake-model"
    shutil.copy(
        RECORDS / "aider" / "reflected.aider.chat.history.md",
        root / "sub" / ".aider.chat.history.md",
    )
    got = tile.last_response()  # its cwd's own history comes first
    assert got is not None
    assert got.text == (RECORDS / "aider" / "reflected.expected.md").read_text().rstrip()


def _read(tile: Tile, proc: AgentProcess) -> str | None:
    ref = extraction.agent_record(tile, proc)
    if ref is None:
        return None
    found = mh.read_last_response(ref.path)
    return found.text if found is not None else None


def test_gemini_copilot_and_pi_records_are_found_where_each_keeps_it(
    hub: mh.Hub, tmp_path: Path, home: Path
) -> None:
    cwd = tmp_path / "proj"
    tile = plain_tile(hub, tmp_path, home, cwd)
    env = {"HOME": str(home)}

    gemini = as_kind(tile, "gemini")
    assert _read(tile, gemini) is None
    chats = Path(gemini_chats(env, str(cwd)) or "")
    chats.mkdir(parents=True)
    shutil.copy(
        next((RECORDS / "gemini").glob("*.jsonl")), chats / "session-2026-12-01T17-53-5e.jsonl"
    )
    assert _read(tile, gemini) == LONG
    # A second project of the same basename gets another folder name, in projects.json.
    (home / ".gemini" / "projects.json").write_text(json.dumps({"projects": {str(cwd): "proj-1"}}))
    assert _read(tile, gemini) is None
    chats.parent.rename(chats.parent.with_name("proj-1"))
    assert _read(tile, gemini) == LONG
    # Gemini CLI up to 0.38 wrote one JSON document per session, ``session-*.json``.
    for old in chats.parent.with_name("proj-1").glob("chats/*"):
        old.unlink()
    assert _read(tile, gemini) is None
    shutil.copy(
        next((RECORDS / "gemini").glob("*-f76f590b.json")),
        chats.parent.with_name("proj-1") / "chats" / "session-2026-12-04T17-28-f7.json",
    )
    assert _read(tile, gemini) == LONG
    # Early versions (0.6.1) named the project's folder by the SHA-256 of its root.
    for old in chats.parent.with_name("proj-1").glob("chats/*"):
        old.unlink()
    hashed = home / ".gemini" / "tmp" / hashlib.sha256(str(cwd).encode()).hexdigest() / "chats"
    hashed.mkdir(parents=True)
    shutil.copy(next((RECORDS / "gemini").glob("*-0950c6c8.json")), hashed / "session-a.json")
    assert _read(tile, gemini) == LONG

    copilot = as_kind(tile, "copilot")
    assert _read(tile, copilot) is None
    state = Path(copilot_session_state(env) or "")
    other, mine = state / "0d8e-other", state / "e2e0-mine"
    for folder, events in ((other, "busy/copilot-events.jsonl"), (mine, "copilot/events.jsonl")):
        folder.mkdir(parents=True)
        shutil.copy(RECORDS / events, folder / "events.jsonl")
    (other / "inuse.1.lock").write_text("1")
    assert _read(tile, copilot) is None  # only another process's session
    (mine / f"inuse.{copilot.pid}.lock").write_text(str(copilot.pid))
    assert _read(tile, copilot) == LONG

    pi = as_kind(tile, "pi")
    assert _read(tile, pi) is None
    sessions = Path(pi_sessions(env, str(cwd)) or "")
    assert sessions.name == "--" + str(cwd).lstrip("/").replace("/", "-") + "--"
    sessions.mkdir(parents=True)
    src = next((RECORDS / "pi").glob("*.jsonl"))
    shutil.copy(src, sessions / src.name)
    assert _read(tile, pi) == LONG


# --------------------------------------------------------------------------- turn signal, routes


def test_the_record_ends_the_turn_when_the_screen_cannot_tell(
    hub: mh.Hub, tmp_path: Path, home: Path
) -> None:
    """OpenCode's screen (here: empty) shows no marker; its database's completed message is
    the transcript turn signal, as Claude's ``turn_duration`` is."""
    cwd = tmp_path / "proj"
    tile = agent_tile(hub, tmp_path, home, "opencode", cwd)
    assert tile.state == "unknown"
    opencode_db(home, cwd, busy=True)
    assert tile.turn_finished() is False
    assert tile.state == "unknown"
    opencode_db(home, cwd)
    assert tile.turn_finished() is True
    assert tile.state == "idle"


def test_an_on_idle_route_sends_the_whole_record_answer_and_logs_its_usage(
    hub: mh.Hub, tmp_path: Path, home: Path
) -> None:
    cwd = tmp_path / "proj"
    opencode_db(home, cwd, busy=True)  # mid-turn when the route is made
    tile = agent_tile(hub, tmp_path, home, "opencode", cwd)
    hub.prices = {
        "fake-model": {"input": 1.0, "output": 10.0, "cache_read": 0.1, "cache_write": 1.0}
    }
    out = tmp_path / "rec.bin"
    start_recorder(hub, "rec", out, paste=True)
    route = hub.connect("opencode", "rec", template="{output}", max_rounds=1)
    wait_until(lambda: route.ready.is_set(), 10)
    assert tile.state == "unknown"
    opencode_db(home, cwd)  # the turn ends, and the agent repaints
    (tmp_path / "say").write_text("(repainted)\n")
    wait_until(lambda: route.last_status == "delivered", 30, what="opencode -> rec")
    typed = out.read_bytes().decode("utf-8", "replace")
    for line in LONG.splitlines():
        assert line in typed, line
    (row,) = log_rows(hub, route)
    assert row["extraction_method"] == "session"
    assert row["model"] == "fake-model" and row["input_tokens"] == 8400
    assert row["cost_usd"] is not None and row["cost_usd"] > 0


# --------------------------------------------------------------------------- the rules


def test_qwen_pid_file_must_be_this_pids_and_name_a_plain_session() -> None:
    good = json.dumps({"pid": 7, "sessionId": "abc"}).encode()
    assert qwen_session(good, 7) == "abc"
    assert qwen_session(good, 8) is None
    assert qwen_session(json.dumps({"pid": 7, "sessionId": "../x"}).encode(), 7) is None
    assert qwen_session(b"{half", 7) is None
    assert qwen_session(None, 7) is None


@pytest.mark.parametrize(
    ("argv", "env", "want"),
    [
        ([], {}, ["/a/b/.aider.chat.history.md", "/a/.aider.chat.history.md"]),
        (["aider", "--chat-history-file", "h.md"], {}, ["/a/b/h.md"]),
        (["aider", "--chat-history-file=/x/h.md"], {}, ["/x/h.md"]),
        ([], {"AIDER_CHAT_HISTORY_FILE": "../h.md"}, ["/a/h.md"]),
    ],
)
def test_aider_history_candidates(argv: list[str], env: dict[str, str], want: list[str]) -> None:
    assert aider_history_candidates("/a/b", argv, env)[: len(want)] == want


def test_record_places_follow_the_agents_variables() -> None:
    assert opencode_database({"HOME": "/h"}) == "/h/.local/share/opencode/opencode.db"
    assert opencode_database({"HOME": "/h", "XDG_DATA_HOME": "/d"}) == "/d/opencode/opencode.db"
    assert copilot_session_state({"HOME": "/h"}) == "/h/.copilot/session-state"
    assert copilot_session_state({"COPILOT_HOME": "/c"}) == "/c/session-state"
    assert pi_sessions({"HOME": "/h"}, "/w/p") == "/h/.pi/agent/sessions/--w-p--"
    assert gemini_chats({"HOME": "/h"}, "/w/proj") == "/h/.gemini/tmp/proj/chats"
    assert opencode_database({"HOME": "relative"}) is None
