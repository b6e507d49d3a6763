"""The API key never leaves the hub: not in the log, the DataFrame, reprs, widgets or errors.

A real hub routes through the AI transforms against the local fake API, with
the key given explicitly or taken from ``ANTHROPIC_API_KEY``. The fake is
made hostile: one answer carries the key, one error body echoes it. Then every
surface a notebook user can see is collected and searched for the key, and
for a distinctive piece of it (a leak may be cut short).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import shutil
import stat
import threading
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import ipywidgets
import psutil
import pytest
from conftest import FAST_IDLE_MS, start_standin, wait_until, write_lock_held
from IPython.core.formatters import DisplayFormatter
from IPython.core.interactiveshell import InteractiveShell

import madohub_nb as mh
from madohub_nb.errors import LogError
from madohub_nb.io.log import RoundRecord
from madohub_nb.notebook.config import MadoHub
from madohub_nb.notebook.widgets import Dashboard, RoundLogTable, RouteCard, TileView
from madohub_nb.testing.fake_anthropic import FakeAnthropic


def _new_key() -> str:
    return f"sk-ant-api03-{secrets.token_hex(24)}-{secrets.token_hex(4)}AA"


def _pieces(key: str) -> list[str]:
    """The key and distinctive parts of it: a leak may be cut or wrapped."""
    body = key.removeprefix("sk-ant-api03-")
    return [key, body[:16], body[16:32], body[-12:]]


def _leaks(key: str, surfaces: dict[str, str]) -> list[str]:
    return [name for name, text in surfaces.items() if any(p in text for p in _pieces(key))]


def test_leak_finder_finds_a_cut_key() -> None:
    key = _new_key()
    assert _leaks(key, {"ok": "nothing here", "cut": f"... {key[:30]}"}) == ["cut"]


def _widget_states(widget: ipywidgets.Widget) -> Iterator[dict[str, Any]]:
    """The synced state of a widget and of every widget below it."""
    yield widget.get_state()
    for child in getattr(widget, "children", ()):
        yield from _widget_states(child)


def _display_data(obj: object) -> str:
    """What a notebook shows for ``obj``: every mime type IPython's formatter produces."""
    data, metadata = DisplayFormatter().format(obj)
    return json.dumps([data, metadata], default=str)


def _log_bytes(path: Path) -> str:
    """The log's files as stored on disk (WAL and index included), decoded leniently."""
    parts = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
    return "".join(p.read_bytes().decode("utf-8", "replace") for p in parts if p.exists())


@pytest.mark.parametrize("given", ["explicit", "environment"])
def test_api_key_appears_nowhere_a_user_can_see(
    tmux_socket: str,
    home: Path,
    project: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    given: str,
) -> None:
    key = _new_key()

    def reply(body: dict[str, Any]) -> str:
        # A model (or a proxy) that repeats the key: the prompt it writes holds it.
        return f"Next step. (debug: key={key})" if "relay" in str(body.get("system")) else "ok"

    log_path = tmp_path / "rounds.sqlite3"
    with FakeAnthropic(reply=reply, api_key=key) as fake:
        if given == "environment":
            monkeypatch.setenv("ANTHROPIC_API_KEY", key)
            hub = mh.Hub(tmux_socket, FAST_IDLE_MS, log_path, base_url=fake.base_url)
        else:
            hub = mh.Hub(tmux_socket, FAST_IDLE_MS, log_path, api_key=key, base_url=fake.base_url)
        views: list[Any] = []
        try:
            start_standin(hub, "w", cwd=project, think_s=0.1)
            start_standin(hub, "sink", cwd=project)
            leaky = hub.connect("w", "sink", transform="ai-routing", dispatch="shadow")
            summary = hub.connect("w", "sink", transform="summary", cooldown_ms=1000)
            wait_until(lambda: leaky.ready.is_set() and summary.ready.is_set(), 10)
            views = [Dashboard(hub, min_interval_s=0.05), RoundLogTable(hub, rows=20)]
            hub.send("w", "plan the work").result(30)
            wait_until(lambda: leaky.rounds == summary.rounds == 1, 30)
            wait_until(lambda: len(hub.log.df) == 3, 30, what="three rows")
            # The next request fails with an error body that quotes the key.
            echo = json.dumps({"type": "error", "error": {"type": "x", "message": f"bad {key}"}})
            fake.fail_next(400, body=echo)
            hub.send("w", "next turn").result(30)
            wait_until(lambda: len(hub.log.df) == 6, 30, what="six rows")
            df = hub.log.df
            assert fake.api_key_seen(key)  # the key was really used
            assert (df["status"] == "error").sum() == 1
            assert "API error 400" in df[df["status"] == "error"]["error"].iloc[0]
            assert "[api key]" in df[df["status"] == "error"]["error"].iloc[0]
            assert df[df["route_id"] == leaky.id]["prompt"].str.contains(r"\[redacted\]").any()
            replayed = hub.replay(df[df["route_id"] == leaky.id].iloc[0]["round_id"]).result(30)
            wait_until(lambda: "round" in views[1]._table.value, 10)
            views += [RouteCard(hub, r) for r in hub.routes]
            views += [TileView(hub, name, min_interval_s=0.05) for name in hub.tiles]
            wait_until(lambda: all(v.redraws for v in views[-2:]), 10, what="tile views drawn")

            surfaces: dict[str, str] = {
                "log file": _log_bytes(log_path),
                "df csv": hub.log.df.to_csv(),
                "df repr": repr(hub.log.df) + hub.log.df.to_html(),
                "df json": hub.log.df.to_json(default_handler=str, date_format="iso"),
                "records": repr(hub.log.tail(20)) + repr(replayed),
                "hub": repr(hub) + str(hub) + hub._repr_html_(),
                "routes": "".join(
                    repr(r) + r._repr_html_() + str(r.last_error) for r in hub.routes
                ),
                "tiles": "".join(repr(t) + t._repr_html_() for t in hub.tiles.values()),
                "ai config": repr(hub.ai_config()) + str(hub.ai_config()),
                "round log": repr(hub.log),
                "display": "".join(
                    _display_data(o)
                    for o in [hub, *hub.routes, *hub.tiles.values(), hub.log.df, hub.log]
                ),
                "widgets": json.dumps([s for v in views for s in _widget_states(v)], default=str),
            }
        finally:
            for view in views:
                view.close()
            hub.close()
    surfaces["config"] = repr(MadoHub(api_key=key)) + MadoHub.class_get_trait_help(
        MadoHub.api_key, MadoHub(api_key=key)
    )
    surfaces["captured output"] = "".join(capsys.readouterr())
    assert _leaks(key, surfaces) == []
    # The searches could have hit: the key was in the model's answer and the error body.
    assert "[redacted]" in surfaces["log file"] and "[api key]" in surfaces["df csv"]
    # The key goes to the API as a header only, never inside a request body.
    assert not any(_leaks(key, {"body": json.dumps(r["body"])}) for r in fake.requests)


def test_config_magic_never_prints_the_key(home: Path) -> None:
    key = _new_key()
    shell = InteractiveShell.instance()
    MadoHub.clear_instance()
    shell.run_line_magic("load_ext", "madohub_nb")
    out = io.StringIO()
    try:
        with redirect_stdout(out):
            shell.run_line_magic("config", f"MadoHub.api_key = {key!r}")
            shell.run_line_magic("config", "MadoHub")
            shell.run_line_magic("config", "MadoHub.api_key")
        shown = out.getvalue()
    finally:
        from madohub_nb.notebook.registry import registry

        registry.reset()
        shell.run_line_magic("unload_ext", "madohub_nb")
        MadoHub.clear_instance()
        shell.config.pop("MadoHub", None)
    assert "MadoHub.api_key" in shown  # the help was printed
    assert _leaks(key, {"%config": shown}) == []


def test_a_tiles_env_and_command_reach_no_process_argv(
    tmux_socket: str, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every tmux process is started through a recorder of its argv (then the real tmux).

    A process's argv is readable by every user of the machine, and the tmux server a
    client starts keeps that client's argv as its own for its whole life: a tile's
    ``env`` and command must go to tmux some other way.
    """
    real = shutil.which("tmux")
    assert real is not None
    record = tmp_path / "argv.txt"
    recorder = tmp_path / "bin" / "tmux"
    recorder.parent.mkdir()
    recorder.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{record}"\nexec "{real}" "$@"\n')
    recorder.chmod(recorder.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{recorder.parent}:{os.environ['PATH']}")
    token, word = f"tok-{secrets.token_hex(8)}", f"word-{secrets.token_hex(8)}"
    hub = mh.Hub(socket_name=tmux_socket, log_path=tmp_path / "rounds.sqlite3")
    try:
        first = hub.tile(
            "first", command=f"sh -c 'echo {word}; sleep 600'", env={"MY_TOKEN": token}
        )
        second = hub.tile("second", command="sleep 600", env={"MY_TOKEN": token})
        for tile in (first, second):
            info = tile.pane_info()
            assert info is not None
            wait_until(lambda i=info: psutil.Process(i.pid).environ().get("MY_TOKEN") == token)
        wait_until(lambda: word in first.screen(), what="the first tile's command ran")
        server = psutil.Process(
            int(hub.runtime.tmux.run("display-message", "-p", "#{pid}").strip())
        )
        argvs = record.read_text()
        assert "new-session" not in argvs and "source-file" in argvs  # the path was taken
        assert token not in argvs and word not in argvs
        assert token not in " ".join(server.cmdline()) and word not in " ".join(server.cmdline())
    finally:
        hub.close()


def test_screen_and_history_return_while_an_append_waits_on_a_locked_log(
    hub: mh.Hub, tmp_path: Path
) -> None:
    """A tile's views redact without the round log's lock (issue 22, item 13).

    Another process holds the log file's write lock and an append waits on it (up to
    the busy timeout) holding the log's own lock: ``screen()`` and ``history()`` of a
    tile, on another thread, return while that append is still waiting.
    """
    secret = f"secret-{secrets.token_hex(8)}"
    hub.log.register_secret(secret)
    tile = hub.tile("sh", agent="shell", command=f"sh -c 'echo word-{secret}; sleep 600'")
    wait_until(lambda: "word-" in tile.screen(), what="the tile's output")
    record = RoundRecord(
        route_id="r", source="a", target="b", round=1, trigger="on-idle",
        transform="raw", dispatch="madoagent", status="delivered",
    )  # fmt: skip
    with write_lock_held(hub.log.path):
        appender = threading.Thread(target=_append_quietly, args=(hub, record), daemon=True)
        appender.start()
        wait_until(lambda: hub.log._lock.locked(), what="the append waiting on the locked file")
        seen: dict[str, object] = {}

        def views() -> None:
            seen["screen"], seen["history"] = tile.screen(), tile.history(50)
            seen["append still waiting"] = hub.log._lock.locked() and appender.is_alive()

        viewer = threading.Thread(target=views, daemon=True)
        viewer.start()
        viewer.join(30)
        assert not viewer.is_alive(), "screen() waited for the append on the locked log"
        assert seen["append still waiting"] is True
        for text in (seen["screen"], seen["history"]):
            assert isinstance(text, str) and "word-[redacted]" in text and secret not in text
    appender.join(30)
    assert not appender.is_alive()


def _append_quietly(hub: mh.Hub, record: RoundRecord) -> None:
    """Append in a thread; the busy timeout may end it with LogError (that is fine here)."""
    with contextlib.suppress(LogError):
        hub.log.append(record)
