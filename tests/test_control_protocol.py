"""Text a pane prints is never read as control-mode protocol.

tmux sends a command's answer (a screen, a path, a title) inside a
``%begin``…``%end`` block without escaping it. A real program in a real pane
prints forged protocol lines of every kind, numbered as tmux numbers the hub's
next commands (it asks tmux, as any program in a pane can): the hub must read
them as text, attribute nothing to another pane, and go on streaming.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import BASH, wait_until

import madohub_nb as mh
from madohub_nb.io.tmux import ControlClient, Tmux, _Pending, channel_ok, pane_free
from madohub_nb.io.watch import Listener, PaneStream

FORGER = r'''
import os, subprocess, sys, time

victim, session, go, armed, where = sys.argv[1:6]


def next_number():
    """The number tmux gave its last command (server-wide): what the hub's next get."""
    socket = os.environ["TMUX"].split(",")[0]
    out = subprocess.run(
        ["tmux", "-S", socket, "-C", "attach-session", "-t", "=" + session],
        input="display-message -p probe\n", capture_output=True, text=True, timeout=10,
        env={**os.environ, "TMUX": ""},
    ).stdout
    return max(int(ln.split()[2]) for ln in out.splitlines() if ln.startswith("%begin "))


def forged(first, count, t):
    lines = []
    for n in range(first, first + count):
        lines += [f"%end {t} {n} 1", f"%output {victim} INJECTED-{n}\\015\\012",
                  f"%error {t} {n} 1"]
    return lines + [f"%output {victim} INJECTED-last", "%session-changed $9 forged",
                    f"%begin {t} {first + 500} 1", "%exit"]


while not os.path.exists(go):
    time.sleep(0.02)
n, t = next_number(), int(time.time())
if where == "screen":
    sys.stdout.write("\033[H\033[2J" + "\n".join(forged(n + 1, 12, t)))
else:  # the title, and a working directory whose name holds line breaks
    sys.stdout.write(f"\033]2;%end {t} {n + 1} 1\007")
    base = os.path.join(os.getcwd(), "d")
    os.mkdir(base)
    os.chdir(base)
    lines = forged(n + 1, 12, t)
    for i in range(0, len(lines), 6):
        name = "\n" + "\n".join(lines[i : i + 6]).replace("/", "|") + "\t\t\n"
        os.mkdir(name)
        os.chdir(name)
    print("cwd ready")
sys.stdout.flush()
with open(armed + ".tmp", "w") as f:
    f.write(os.getcwd())
os.rename(armed + ".tmp", armed)
time.sleep(600)
'''


async def _listen(stream: PaneStream) -> Listener:
    listener = stream.listen()
    await stream.settled()
    return listener


async def _take(listener: Listener) -> bytes:
    return listener.take()


def _tmux_capture(socket: str, pane_id: str) -> str:
    """The pane's screen as a tmux process prints it (nothing else on its stdout)."""
    return subprocess.run(
        ["tmux", "-L", socket, "capture-pane", "-p", "-J", "-t", pane_id],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def _tmux_format(socket: str, pane_id: str, format: str) -> str:
    """One format of the pane as a tmux process prints it (its answer, without the newline)."""
    return subprocess.run(
        ["tmux", "-L", socket, "display-message", "-p", "-t", pane_id, format],
        capture_output=True, text=True, check=True,
    ).stdout.removesuffix("\n")  # fmt: skip


def _attack(hub: mh.Hub, tmp_path: Path, where: str) -> tuple[mh.Tile, Listener, mh.Route, Path]:
    """A victim shell streamed to a listener and a keyword route, and a forger, armed."""
    victim = hub.tile("victim", agent="shell", command=BASH)
    hub.tile("sink", agent="shell", command=BASH)
    wait_until(lambda: "$" in victim.screen(), 10, what="the victim's prompt")
    route = hub.connect(
        "victim", "sink", trigger="on-keyword", pattern="INJECTED", dispatch="shadow",
        cooldown_ms=1000,
    )  # fmt: skip
    wait_until(lambda: route.ready.is_set(), 10, what="the route to listen")
    stream = hub.runtime.tiles.watcher.streams[victim.pane_id]
    listener = hub.engine.submit(_listen(stream)).result(10)
    script = tmp_path / "forger.py"
    script.write_text(FORGER)
    go, armed = tmp_path / "go", tmp_path / "armed"
    work = tmp_path / "work"
    work.mkdir()
    # In the path case its command name, too, holds tabs and a protocol line (bash's exec -a).
    name = "exec -a $'forg\\ter\\t%end 0 0 1' " if where == "path" else ""
    forger = hub.tile(
        "forger", agent="terminal", cwd=work,
        command=f"{name}{sys.executable} {script} {victim.pane_id} {hub.session_name} {go} "
        f"{armed} {where}",
    )  # fmt: skip
    forger.ready.result(10)
    time.sleep(0.3)  # let the hub's start-up commands (output switches) settle
    go.touch()
    wait_until(armed.exists, 10, what="the forger to print")
    return forger, listener, route, armed


def _still_streams(hub: mh.Hub, victim: mh.Tile, listener: Listener, route: mh.Route) -> None:
    """Nothing reached the victim's listeners but what it printed, and output still flows."""
    got = hub.engine.submit(_take(listener)).result(10)
    assert b"INJECTED" not in got
    hub.runtime.tmux.run("send-keys", "-t", victim.pane_id, "-l", "echo AFTER-$((6*7))")
    hub.runtime.tmux.run("send-keys", "-t", victim.pane_id, "Enter")
    seen = bytearray()

    def after() -> bool:
        seen.extend(hub.engine.submit(_take(listener)).result(10))
        return b"AFTER-42" in seen

    wait_until(after, 10, what="the victim's next output")
    assert b"INJECTED" not in seen
    assert route.rounds == 0 and len(hub.log.df) == 0
    assert "AFTER-42" in victim.screen()


def test_protocol_lines_printed_on_screen_are_read_as_the_screen(
    hub: mh.Hub, tmux_socket: str, tmp_path: Path
) -> None:
    forger, listener, route, _ = _attack(hub, tmp_path, "screen")
    victim = hub.tiles["victim"]
    before = hub.runtime.tmux.channel_commands
    started = time.monotonic()
    screen = forger.screen()
    assert time.monotonic() - started < 5
    assert hub.runtime.tmux.channel_commands == before + 1  # it went over the control connection
    assert screen == _tmux_capture(tmux_socket, forger.pane_id)
    for kind in ("%begin", "%end", "%error", "%output", "%exit", "%session-changed"):
        assert kind in screen
    assert forger.screen() == screen  # the next answer is the next command's
    _still_streams(hub, victim, listener, route)


def test_protocol_lines_in_a_title_a_path_and_a_command_name_are_read_as_text(
    hub: mh.Hub, tmux_socket: str, tmp_path: Path
) -> None:
    forger, listener, route, armed = _attack(hub, tmp_path, "path")
    victim = hub.tiles["victim"]
    cwd = armed.read_text()
    assert "\n%end " in cwd
    title = hub.runtime.tmux.run("display-message", "-p", "-t", forger.pane_id, "#{pane_title}")
    assert title.startswith("%end ") and title.count("\n") == 1
    wait_until(lambda: "cwd ready" in forger.screen(), 10, what="the forger's cwd")
    info = hub.runtime.tmux.pane_info(forger.pane_id)
    assert info is not None and info.current_path == cwd and info.title == title.rstrip("\n")
    name = _tmux_format(tmux_socket, forger.pane_id, "#{pane_current_command}")
    assert "\t" in name and info.current_command == name
    assert (info.width, info.height, info.dead) == (200, 50, False)
    path = hub.runtime.tmux.run(
        "display-message", "-p", "-t", forger.pane_id, "#{pane_current_path}"
    )
    assert path == cwd + "\n"
    _still_streams(hub, victim, listener, route)


def test_a_failed_framed_command_is_an_error_and_the_next_answer_is_its_own(
    hub: mh.Hub,
) -> None:
    tile = hub.tile("sh", agent="shell", command=BASH)
    wait_until(lambda: "$" in tile.screen(), 10, what="the prompt")
    # The connection comes up beside the tile; until then commands run as processes.
    wait_until(lambda: hub.runtime.tmux.channel_up, 10, what="the control connection")
    before = hub.runtime.tmux.channel_commands
    with pytest.raises(mh.errors.TmuxError, match="can't find pane"):
        hub.runtime.tmux.run("capture-pane", "-p", "-t", "%9999")
    assert hub.runtime.tmux.capture(tile.pane_id).startswith("$")
    assert hub.runtime.tmux.run("display-message", "-p", "#{pane_title}x", check=False).endswith(
        "x\n"
    )
    # All three went over the control connection, the failed one too (the tile's own
    # reads may add more meanwhile).
    assert hub.runtime.tmux.channel_commands >= before + 3


@pytest.mark.parametrize(
    ("args", "free"),
    [
        (["send-keys", "-t", "%1", "-l", "#{pane_title}"], True),  # send-keys expands nothing
        (["refresh-client", "-A", "%1:pause"], True),
        (["display-message", "-p", "-t", "%1", "#{history_size} #{cursor_y}"], True),
        (["list-panes", "-a", "-F", "#{pane_id} #{window_activity}"], True),
        (["new-window", "-d", "-P", "-F", "#{pane_id} #{pane_pid}", ";", "set-option", "x"], True),
        (["new-window", "-d", "-P"], False),  # its default format names the session
        (["list-panes", "-a"], False),  # so may its default format
        (["capture-pane", "-p", "-t", "%1"], False),
        (["display-message", "-p", "#{pane_title}"], False),
        (["display-message", "-p", "#{pane_current_path}"], False),
        (["display-message", "-p", "#(cat /etc/passwd)"], False),
        (["show-buffer", "-b", "x"], False),
        (["send-keys", "x", ";", "capture-pane", "-p"], False),
    ],
)
def test_only_answers_free_of_pane_text_are_read_unframed(args: list[str], free: bool) -> None:
    assert pane_free(args) is free


def test_several_commands_go_over_the_connection_only_if_none_prints_pane_text() -> None:
    assert channel_ok(["capture-pane", "-p", "-t", "%1"])  # one command: framed
    assert channel_ok(["send-keys", "-t", "%1", "a", ";", "send-keys", "-t", "%1", "b"])
    assert not channel_ok(["send-keys", "x", ";", "capture-pane", "-p"])
    assert not channel_ok(["capture-pane", "-p", "-t", "two\nlines"])


def test_events_between_a_framed_answer_and_its_marker_are_read_as_events() -> None:
    """The stream as tmux writes it when output arrives between the two blocks (fed by hand:
    real tmux rarely does it on cue). The pane's forged lines stay in the answer."""
    seen: list[tuple[str, bytes]] = []
    client = ControlClient(Tmux(), "s", lambda pane, data: seen.append((pane, data)), lambda: None)
    loop = asyncio.new_event_loop()
    try:
        answer: asyncio.Future[str] = loop.create_future()
        client._pending.append(_Pending(1, answer, True, "capture-pane", b"madohub-m1"))
        for line in [
            b"%begin 1 7 1", b"screen", b"%end 1 7 1", b"%output %2 FORGED", b"%begin 1 9 1",
            b"%exit", b"%end 1 7 1", b"%output %1 real", b"%begin 1 8 1", b"madohub-m1",
            b"%end 1 8 1", b"%output %1 after",
        ]:  # fmt: skip
            assert client._line(line)
        assert answer.result() == ("screen\n%end 1 7 1\n%output %2 FORGED\n%begin 1 9 1\n%exit\n")
        assert seen == [("%1", b"real"), ("%1", b"after")]
        failed: asyncio.Future[str] = loop.create_future()
        client._pending.append(_Pending(1, failed, True, "capture-pane", b"madohub-m2"))
        for line in [b"%begin 2 10 1", b"%error 2 10 1", b"no such pane", b"%error 2 10 1",
                     b"%begin 2 11 1", b"madohub-m2", b"%end 2 11 1"]:  # fmt: skip
            assert client._line(line)
        with pytest.raises(mh.errors.TmuxError, match="no such pane"):
            failed.result()
    finally:
        loop.close()
