"""A tile's command never appears in any process's argv, at any time (issue 22 item 6).

Every process's cmdline is read (psutil, real processes) over and over while tiles
start and run; a secret in the command (``export MY_TOKEN=…``), in a command of
several lines, or in an ``env`` value with a line break must never show. The
command still runs in its cwd with its env, ``exec``\\ s its last program as
``bash -c`` did, and a failed start is reported as before.
"""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import FAST_IDLE_MS, start_standin, wait_until

import madohub_nb as mh
from madohub_nb.demo import standin_command
from madohub_nb.errors import TileError
from madohub_nb.io.launch import LAUNCH_BUFFER_PREFIX, with_exec
from madohub_nb.io.tmux import command_line


class ArgvWatch:
    """Reads every process's cmdline until stopped; keeps those that hold ``needles``."""

    def __init__(self, *needles: str) -> None:
        self.needles = needles
        self.found: list[tuple[int, list[str]]] = []
        self.passes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for proc in psutil.process_iter(["cmdline"]):
                words = " ".join(proc.info["cmdline"] or [])
                if any(n in words for n in self.needles):
                    self.found.append((proc.pid, proc.info["cmdline"]))
            self.passes += 1

    def stop(self) -> list[tuple[int, list[str]]]:
        self._stop.set()
        self._thread.join(10)
        return self.found


class EveryArgv:
    """Every distinct cmdline of every process seen until stopped (psutil, in a thread):
    for secrets not known before the processes start (a token the hub makes)."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, ...]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for proc in psutil.process_iter(["cmdline"]):
                self.seen.add(tuple(proc.info["cmdline"] or ()))

    def stop(self) -> set[tuple[str, ...]]:
        self._stop.set()
        self._thread.join(10)
        return self.seen


WRAPPED = ("ssh", "sh", "bash", "tmux", "git", "python3")
"""Programs the hub (or the host's shell) starts by name: each one's argv is logged."""


def argv_wrappers(folder: Path, log: Path) -> str:
    """A folder of scripts, one per :data:`WRAPPED` program, that append their argv to
    ``log`` and exec the real program: even a process that lives a millisecond is seen.
    The PATH to give the hub (the folder first)."""
    folder.mkdir()
    for name in WRAPPED:
        real = shutil.which(name)
        if real is None:
            continue
        script = folder / name
        script.write_text(
            f"#!/bin/sh\nprintf '%s\\n' '--- {name}' \"$@\" >> '{log}'\nexec '{real}' \"$@\"\n"
        )
        script.chmod(0o755)
    return f"{folder}:{os.environ.get('PATH', '')}"


def encoded_forms(secret: str) -> list[str]:
    """``secret`` and the base64 text that holds it at any of the three alignments (its
    edges dropped, which depend on the bytes around it): a secret hidden in an encoded
    file is still on the command line."""
    forms = [secret]
    for shift in range(3):
        text = base64.b64encode(b"x" * shift + secret.encode()).decode()
        forms.append(text[4 if shift else 0 : -4])
    return forms


@pytest.fixture
def token() -> str:
    return f"tok-{secrets.token_hex(8)}"


@pytest.fixture
def watch(token: str) -> Iterator[ArgvWatch]:
    w = ArgvWatch(token)
    yield w
    w.stop()


def _buffers(socket: str) -> list[str]:
    out = subprocess.run(
        ["tmux", "-L", socket, "list-buffers", "-F", "#{buffer_name}"],
        capture_output=True, text=True,
    )  # fmt: skip
    return out.stdout.split()


def test_a_tiles_command_and_env_are_in_no_argv_while_it_starts_and_runs(
    hub: mh.Hub, tmux_socket: str, project: Path, token: str, watch: ArgvWatch
) -> None:
    out = project / "ran.txt"
    # Several lines, a line break in an env value, a builtin last (the shell stays).
    first = hub.tile(
        "first", cwd=project, env={"MY_NOTE": f"line\n{token}-env"},
        command=f"export MY_TOKEN={token}\necho \"$MY_TOKEN $(pwd)\" > {out}; sleep 600; true",
    )  # fmt: skip
    second = hub.tile("second", command=f"export MY_TOKEN={token}; sleep 600")
    first.ready.result(10)
    second.ready.result(10)
    wait_until(lambda: out.exists() and out.read_text().strip(), 10, what="the command's file")
    assert out.read_text().split() == [token, str(project)]  # its env, its cwd
    info = first.pane_info()
    assert info is not None
    pane = psutil.Process(info.pid)
    assert pane.environ().get("MY_NOTE") == f"line\n{token}-env"
    assert [c.name() for c in pane.children()] == ["sleep"]
    # The last program is exec'd, as bash -c did: it is the pane's own process.
    info = second.pane_info()
    assert info is not None and info.current_command == "sleep"
    assert psutil.Process(info.pid).cmdline() == ["sleep", "600"]
    assert psutil.Process(info.pid).environ().get("MY_TOKEN") == token
    passes = watch.passes
    wait_until(lambda: watch.passes > passes + 2, 10, what="more reads of every argv")
    assert watch.stop() == []
    assert not [b for b in _buffers(tmux_socket) if b.startswith(LAUNCH_BUFFER_PREFIX)]


def test_a_command_that_fails_at_start_is_reported_and_leaves_no_buffer(
    hub: mh.Hub, tmux_socket: str, token: str, watch: ArgvWatch
) -> None:
    tile = hub.tile("t", command=f"export MY_TOKEN={token}; echo boom; exit 3")
    with pytest.raises(TileError, match="exited at once with status 3; it printed: boom"):
        tile.ready.result(15)
    assert watch.stop() == []
    assert not [b for b in _buffers(tmux_socket) if b.startswith(LAUNCH_BUFFER_PREFIX)]


def test_a_remote_tiles_command_is_in_no_argv_on_the_host(
    tmux_socket: str, remote_socket: str, sshd: object, tmp_path: Path, token: str,
    watch: ArgvWatch,
) -> None:  # fmt: skip
    hub = mh.Hub(
        socket_name=tmux_socket,
        log_path=tmp_path / "rounds.sqlite3",
        ssh_command=sshd.ssh_command,  # type: ignore[attr-defined]
        remote_socket_name=remote_socket,
    )
    try:
        tile = hub.tile(
            "far", host="box", command=f'export MY_TOKEN={token}\necho "$MY_TOKEN"; sleep 600'
        )
        tile.ready.result(30)
        wait_until(lambda: token in tile.screen(), 15, what="the remote command ran")
        info = tile.pane_info()
        assert info is not None and psutil.Process(info.pid).cmdline() == ["sleep", "600"]
        passes = watch.passes
        wait_until(lambda: watch.passes > passes + 2, 10, what="more reads of every argv")
        assert watch.stop() == []
        assert not [b for b in _buffers(remote_socket) if b.startswith(LAUNCH_BUFFER_PREFIX)]
    finally:
        hub.close()


@pytest.mark.parametrize(
    ("command", "launched"),
    [
        ("claude", "exec claude"),
        ("export K=v; sleep 9", "export K=v; exec sleep 9"),
        ('cd /x && claude --a "b c"', 'cd /x && exec claude --a "b c"'),
        ("a\nb > out 2>&1", "a\nexec b > out 2>&1"),
        ("sh -c 'echo boom; exit 3'", "exec sh -c 'echo boom; exit 3'"),
        ("a || b", "a || exec b"),
        ("exec claude", "exec claude"),
        # the shell must stay, or the reading is not sure: unchanged
        ("a; exit 3", "a; exit 3"),
        ("echo hi", "echo hi"),
        ("FOO=1 claude", "FOO=1 claude"),
        ("a | b", "a | b"),
        ("sleep 1 &", "sleep 1 &"),
        ("if a; then b; fi", "if a; then b; fi"),
        ("trap 'x' EXIT; claude", "trap 'x' EXIT; claude"),
        ('echo "$(date)"; claude', 'echo "$(date)"; claude'),
        ("claude # note", "claude # note"),
        ("claude;", "claude;"),
        ("cat <<EOF\nx\nEOF", "cat <<EOF\nx\nEOF"),
    ],
)
def test_the_last_program_of_a_plain_list_is_execd(command: str, launched: str) -> None:
    assert with_exec(command) == launched


def test_any_argument_fits_one_tmux_command_line(tmux_socket: str) -> None:
    text = 'it\'s\n$HOME ~ #{pane_id} \\ "q"\r\t\x01 ; end'
    line, _ = command_line(["set-buffer", "-b", "x", "--", text])
    assert "\n" not in line and "\r" not in line
    subprocess.run(
        ["tmux", "-L", tmux_socket, "new-session", "-d", "-s", "s", "sleep 60"], check=True
    )
    subprocess.run(
        ["tmux", "-L", tmux_socket, "source-file", "-"], input=line + "\n", text=True, check=True
    )
    shown = subprocess.run(
        ["tmux", "-L", tmux_socket, "show-buffer", "-b", "x"], capture_output=True, check=True
    )
    assert shown.stdout == text.encode()


def _tokens(hub: mh.Hub, tile: mh.Tile) -> list[str]:
    """The tile's MCP token and its pane's hook token (from the pane's environment)."""
    info = tile.pane_info()
    token = hub.mcp.token(tile.name)
    assert token is not None and info is not None
    hook_token = psutil.Process(info.pid).environ().get("MADOHUB_HOOK_TOKEN")
    assert hook_token, f"{tile.name} runs with hooks (their token in its pane's env)"
    return [token, hook_token]


def test_no_token_is_on_any_command_line_while_mcp_tiles_are_set_up(
    tmux_socket: str, remote_socket: str, sshd: object, home: Path, project: Path,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Issue 38 item 2: a remote Claude tile's MCP config file (and the hook files) reach
    the host through ssh's stdin; the tokens of it, of a remote Codex tile and of a local
    Claude tile are in no argv of the hub's processes, here or on the host, plain or
    base64-encoded."""
    log = tmp_path / "argv.log"
    log.touch()
    monkeypatch.setenv("PATH", argv_wrappers(tmp_path / "wrappers", log))
    every = EveryArgv()
    hub = mh.Hub(
        socket_name=tmux_socket,
        idle_delay_ms=FAST_IDLE_MS,
        log_path=tmp_path / "rounds.sqlite3",
        ssh_command=sshd.ssh_command,  # type: ignore[attr-defined]
        remote_socket_name=remote_socket,
    )
    try:
        start_standin(hub, "near", cwd=project)
        tiles = [
            hub.tile(name, agent=kind, command=standin_command(kind), host=host, mcp=["near"])
            for name, kind, host in [
                ("lead", "claude", "box"), ("cx", "codex", "box"), ("here", "claude", None)
            ]
        ]  # fmt: skip
        for tile in tiles:
            wait_until(lambda t=tile: t.state == "idle", 30, what=f"{tile.name} idle")
        needles = [form for tile in tiles for t in _tokens(hub, tile) for form in encoded_forms(t)]
        agent = tiles[0].agent_process()
        assert agent is not None
        argv = psutil.Process(agent.pid).cmdline()
        config = argv[argv.index("--mcp-config") + 1]
    finally:
        hub.close()
        seen = every.stop()
    logged = log.read_text()
    # The wrappers saw the hub's ssh calls, the one that wrote the token's file among them.
    assert "--- ssh" in logged and "--- tmux" in logged and config in logged
    assert [n for n in needles if n in logged] == []
    leaked = [argv for argv in seen if any(n in " ".join(argv) for n in needles)]
    assert leaked == []
