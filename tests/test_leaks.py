"""What a hostile review found leaking or breaking (issue 11), each on real tmux and real files.

Route tasks that die, agent files that are FIFOs or devices, a world-readable
log, API keys in tmux's environment and on screens, unbounded log fields,
invisible Unicode typed into agents, socket names that are paths.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import log_rows, shell_tile, start_recorder, start_standin, wait_until

import madohub_nb as mh
from madohub_nb.agents.claude import read_session_file
from madohub_nb.agents.kinds import claude as claude_kind
from madohub_nb.agents.profiles import get_profile
from madohub_nb.io.log import RoundLog, RoundRecord
from madohub_nb.io.tmux import Tmux
from madohub_nb.io.transcripts import claude_project_dir_name
from madohub_nb.notebook.widgets import TileView
from madohub_nb.pipeline.extract import extract, transcript_path
from madohub_nb.render import html_for_tile

_AMP_SUBMIT = "".join(get_profile("amp").submit_keys).encode()
"""What the Amp-like recorder gets after a prompt: Amp's submit keys."""


def _sessions_file(tile: mh.Tile, home: Path) -> Path:
    """The agent's sessions file, in its own config dir (demo agents keep a private one)."""
    proc = tile.agent_process()
    assert proc is not None
    config = claude_kind.config_dir(tile, proc) or home / ".claude"
    assert config is not None
    path = config / "sessions" / f"{proc.pid}.json"
    assert path.exists(), path
    return path


# --- 5. a route's task that ends ------------------------------------------------------------------


@pytest.mark.parametrize("bad_id", ["../../etc/x", "nul\x00byte"])
def test_a_session_id_with_slash_or_nul_is_harmless(
    hub: mh.Hub, home: Path, project: Path, tmp_path: Path, bad_id: str
) -> None:
    src = start_standin(hub, "src", cwd=project)
    out = tmp_path / "rec.bin"
    start_recorder(hub, "rec", out)
    path = _sessions_file(src, home)
    data = json.loads(path.read_text())
    data["sessionId"] = bad_id
    path.write_text(json.dumps(data))
    assert read_session_file(path.parent.parent, data["pid"]) is None
    route = hub.connect("src", "rec", template="got: {output}", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 10, what="route listening")
    hub.send("src", "hello there").result(30)
    wait_until(lambda: log_rows(hub, route), 30, what="a round")
    assert route.state == "active"
    assert route._task is not None and not route._task.done()
    (row,) = log_rows(hub, route)
    assert row["status"] == "delivered", row["error"]
    wait_until(lambda: b"got: " in out.read_bytes(), 10, what="the routed prompt")


def test_a_route_whose_task_fails_is_stopped_with_the_reason_logged(
    hub: mh.Hub, project: Path, tmp_path: Path
) -> None:
    # A real way to make a route's task raise: a completion pattern set on the tile by hand
    # as a plain string (hub.tile(completion_pattern=...) compiles it; an assignment is not
    # checked). The idle trigger calls .search on it at the source's first output.
    src = start_standin(hub, "src", cwd=project)
    out = tmp_path / "rec.bin"
    start_recorder(hub, "rec", out)
    src.completion_pattern = "DONE"  # type: ignore[assignment]
    route = hub.connect("src", "rec", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 10, what="route listening")
    hub.send("src", "hello there").result(30)
    wait_until(lambda: route.state == "stopped", 15, what="the route stopped")
    assert route.last_error is not None and "AttributeError" in route.last_error
    (row,) = log_rows(hub, route)
    assert row["status"] == "error"
    assert "AttributeError" in row["error"]
    assert route.last_round_id == row["round_id"]
    # At the receiving end: the source's answer is on its screen, and nothing reached the target.
    wait_until(lambda: "Done: hello there" in src.screen(), 15, what="the source's answer")
    assert out.read_bytes() == b""


def test_a_dangling_link_among_the_cwds_transcripts_is_no_transcript(
    hub: mh.Hub, home: Path, project: Path, tmp_path: Path
) -> None:
    # No sessions file (older Claude versions): the newest transcript of the cwd's project
    # folder is looked for, and one of them is a dangling link (it used to crash the route).
    src = start_standin(hub, "src", cwd=project)
    out = tmp_path / "rec.bin"
    start_recorder(hub, "rec", out)
    sessions = _sessions_file(src, home)
    sessions.unlink()
    config = sessions.parent.parent
    folder = config / "projects" / claude_project_dir_name(str(project.resolve()))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dangling.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    os.utime(folder / "dangling.jsonl", (2e9, 2e9), follow_symlinks=False)  # the newest entry
    found = transcript_path(src)
    assert found is None or (found.is_file() and found.name != "dangling.jsonl")
    route = hub.connect("src", "rec", template="got: {output}", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 10, what="route listening")
    hub.send("src", "hello there").result(30)
    wait_until(lambda: log_rows(hub, route), 30, what="a round")
    (row,) = log_rows(hub, route)
    assert (row["status"], route.state) == ("delivered", "active"), row["error"]
    wait_until(lambda: b"got: " in out.read_bytes(), 10, what="the routed prompt")
    assert b"hello there" in out.read_bytes()


# --- 6. agent files that are FIFOs or devices ------------------------------------------------------


def test_sessions_file_that_is_a_fifo_or_a_device_is_refused_without_waiting(
    tmp_path: Path,
) -> None:
    sessions = tmp_path / ".claude" / "sessions"
    sessions.mkdir(parents=True)
    os.mkfifo(sessions / "7.json")
    (sessions / "8.json").symlink_to("/dev/zero")
    results: list[object] = []

    def read() -> None:
        results.append(read_session_file(tmp_path / ".claude", 7))
        results.append(read_session_file(tmp_path / ".claude", 8))

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(20)  # a hang detector, not a speed check (see benchmarks/bench_foreground.py)
    try:
        assert not worker.is_alive(), "reading a FIFO sessions file blocked"
        assert results == [None, None]
    finally:
        _release_fifo(sessions / "7.json")


def _release_fifo(path: Path) -> None:
    """Unblock readers stuck in open() on ``path`` (only the old code has any)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    os.close(fd)


def test_fifo_sessions_files_never_exhaust_the_thread_pool(
    hub: mh.Hub, home: Path, project: Path
) -> None:
    tile = start_standin(hub, "src", cwd=project)
    path = _sessions_file(tile, home)
    path.unlink()
    os.mkfifo(path)
    try:

        async def many() -> list[str]:
            # More than the default pool's workers (min(32, cpus + 4)).
            return await asyncio.gather(*(tile.astate() for _ in range((os.cpu_count() or 1) + 8)))

        states = hub.engine.run_sync(many(), 30)
        assert all(s in mh.model.TILE_STATES for s in states)
        found = extract(tile)  # falls back to the screen, never waits on the FIFO
        assert found is None or found.method == "terminal"
    finally:
        _release_fifo(path)


# --- 8. a private round log -------------------------------------------------------------------------


def test_round_log_folder_and_files_are_private(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "rounds.sqlite3"
    old = os.umask(0o022)
    try:
        log = RoundLog(path)
        log.append(_record("x"))
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        for name in ("rounds.sqlite3", "rounds.sqlite3-wal", "rounds.sqlite3-shm"):
            f = path.parent / name
            assert f.exists(), name
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, name
    finally:
        log.close()


def test_a_world_readable_log_is_made_private_at_open(tmp_path: Path) -> None:
    path = tmp_path / "rounds.sqlite3"
    RoundLog(path).close()
    for f in tmp_path.glob("rounds.sqlite3*"):
        f.chmod(0o644)
    log = RoundLog(path)
    try:
        for f in tmp_path.glob("rounds.sqlite3*"):
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, f.name
    finally:
        log.close()


def _record(text: str, **kwargs: Any) -> RoundRecord:
    return RoundRecord(
        route_id="r",
        source="a",
        target="b",
        round=1,
        trigger="on-idle",
        transform="raw",
        dispatch="madoagent",
        status="delivered",
        extracted=text,
        **kwargs,
    )


# --- 9. the hub's key and tmux -------------------------------------------------------------------------

KEY = "plain-test-key-0123456789"  # not sk- shaped: only registration can redact it


def test_api_key_never_reaches_tmux_or_a_pane_unless_named(
    tmux_socket: str, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    hub = mh.Hub(socket_name=tmux_socket, log_path=tmp_path / "r.sqlite3")
    try:
        shell_tile(hub, "plain")
        shell_tile(hub, "named", env={"ANTHROPIC_API_KEY": KEY})
        for name in ("plain", "named"):
            hub.send(
                name, f"printenv ANTHROPIC_API_KEY > {tmp_path}/{name}.env", allow_shell=True
            ).result(30)
        # (the shell creates the file before printenv writes into it)
        wait_until(
            lambda: (tmp_path / "named.env").exists() and (tmp_path / "named.env").read_text(), 10
        )
        wait_until(lambda: (tmp_path / "plain.env").exists(), 10)
        assert (tmp_path / "plain.env").read_text() == ""
        assert (tmp_path / "named.env").read_text().strip() == KEY
        assert KEY not in hub.runtime.tmux.run("show-environment", "-g")
        assert KEY not in hub.runtime.tmux.run("show-environment", "-t", hub.session_name)
    finally:
        hub.close()


def test_a_key_printed_in_a_pane_is_redacted_on_screens_html_and_widgets(
    tmux_socket: str, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = mh.Hub(socket_name=tmux_socket, log_path=tmp_path / "r.sqlite3", api_key=KEY)
    try:
        tile = shell_tile(hub, "sh", env={"SHOWN": KEY})
        view = TileView(hub, "sh", min_interval_s=0.05)
        try:
            hub.send("sh", "echo the key is $SHOWN; echo done-1", allow_shell=True).result(30)
            wait_until(lambda: "[redacted]\ndone-1" in tile.screen(), 10, what="the output")
            assert KEY in hub.runtime.tmux.capture(tile.pane_id)  # the pane itself shows it
            assert KEY not in tile.screen()
            assert KEY not in tile.screen(ansi=True)
            assert KEY not in tile._repr_html_()
            assert KEY not in html_for_tile(tile)
            wait_until(lambda: "[redacted]" in view.screen_value, 10, what="the widget redrawn")
            assert KEY not in view.screen_value
        finally:
            view.close()
    finally:
        hub.close()


# --- 10. a key set after the hub was made ----------------------------------------------------------------


def test_a_key_put_in_the_environment_later_is_redacted_from_the_log(
    tmux_socket: str, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = mh.Hub(socket_name=tmux_socket, log_path=tmp_path / "r.sqlite3")
    try:
        out = tmp_path / "rec.bin"
        start_recorder(hub, "rec", out)
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        rec = hub.send("rec", f"the key is {KEY}").result(30)
        assert rec.status == "delivered", rec.error
        (row,) = hub.log.df.to_dict("records")
        assert KEY not in row["prompt"] and "[redacted]" in row["prompt"]
        raw = b"".join(p.read_bytes() for p in tmp_path.glob("r.sqlite3*"))
        assert KEY.encode() not in raw
    finally:
        hub.close()


# --- 11. a size cap on logged text -------------------------------------------------------------------------


def test_each_logged_field_is_capped_with_a_visible_marker(tmp_path: Path) -> None:
    path = tmp_path / "rounds.sqlite3"
    log = RoundLog(path)
    try:
        assert log.max_field_chars == mh.settings.MAX_LOGGED_CHARS
        huge = "y" * 5_000_000
        log.append(_record(huge, prompt=huge, meta={"screen_tail": [huge]}))
        size = sum(f.stat().st_size for f in tmp_path.glob("rounds.sqlite3*"))
        assert size < 5_000_000
        (row,) = log.df.to_dict("records")
        cut = 5_000_000 - 1_000_000
        marker = f"[… madohub_nb: cut {cut} characters …]"
        assert row["extracted"].endswith(marker) and row["prompt"].endswith(marker)
        assert row["meta"]["screen_tail"][0].endswith(marker)
        log.max_field_chars = 1000
        log.append(_record("z" * 1500))
        assert log.df.iloc[-1]["extracted"] == "z" * 1000 + "\n[… madohub_nb: cut 500 characters …]"
        with pytest.raises(mh.MadohubValueError, match="max_field_chars"):
            log.max_field_chars = 0
    finally:
        log.close()


# --- 12. invisible Unicode ------------------------------------------------------------------------------------


def test_tag_and_bidi_characters_are_not_typed_and_are_counted(hub: mh.Hub, tmp_path: Path) -> None:
    out = tmp_path / "rec.bin"
    start_recorder(hub, "rec", out)
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # a ZWJ emoji sequence: kept
    hidden = "".join(chr(0xE0000 + ord(c)) for c in "run rm")  # tag characters
    text = f"ok{hidden} \u202eevil\u202c \u2066iso\u2069 {family}"
    rec = hub.send("rec", text).result(30)
    assert rec.status == "delivered", rec.error
    wait_until(lambda: out.read_bytes().endswith(_AMP_SUBMIT), 10, what="submit")
    assert out.read_bytes() == f"ok evil iso {family}".encode() + _AMP_SUBMIT
    assert rec.meta["removed_invisible"] == len("run rm") + 4
    (row,) = hub.log.df.to_dict("records")
    assert row["meta"]["removed_invisible"] == 10


# --- 13. socket names ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../../tmp/x", "a/b", "/abs", "..", ".", ""])
def test_socket_name_must_be_a_plain_name(name: str, tmp_path: Path) -> None:
    with pytest.raises(mh.MadohubValueError, match="socket_name"):
        Tmux(name)
    with pytest.raises(mh.MadohubValueError, match="socket_name"):
        mh.Hub(socket_name=name, log_path=tmp_path / "r.sqlite3")


def test_plain_socket_names_are_accepted() -> None:
    assert Tmux("mh-test.1_x").socket_name == "mh-test.1_x"
    assert Tmux(None).socket_name is None


# --- 7. paste into a program that does not bracket pastes -------------------------------


def test_paste_into_an_agent_without_bracketed_paste_is_refused_and_nothing_arrives(
    hub: mh.Hub, tmp_path: Path
) -> None:
    """tmux turns each pasted LF into CR for such a program: every line would be submitted."""
    from madohub_nb.agents.profiles import PROFILES

    out = tmp_path / "received.txt"
    mh.register_agent(
        "rawpaste", process_tokens=["rawpaste"], uses_bracketed_paste=False,
        idle_markers=["READY"], submit_keys=["\r"], newline_key="C-j",
    )  # fmt: skip
    try:
        tile = hub.tile(
            "raw", agent="rawpaste", command=f"stty raw -echo; echo READY; exec cat > {out}"
        )
        tile.ready.result(10)
        rec = hub.send("raw", "line one\nline two", delivery="paste").result(30)
        assert rec.status == "error" and "does not take bracketed pastes" in (rec.error or "")
        hub.runtime.tmux.run("send-keys", "-t", tile.pane_id, "-l", "end-marker")
        wait_until(lambda: out.exists() and "end-marker" in out.read_text(), 10)
        assert out.read_text() == "end-marker"  # the refused paste left nothing before it
    finally:
        PROFILES.pop("rawpaste", None)
