"""Tiles on a remote host over a real OpenSSH server on 127.0.0.1 (issue 15).

The "host" is this machine reached through a private sshd (tests/conftest.py
``sshd``) with a pinned host key and a throwaway user key; its tmux server is
another one than the hub's (``remote_socket``). Routes run across it with the
stand-in agents; the link is dropped by killing the sshd session processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import FAST_IDLE_MS, log_rows, start_standin, wait_until

import madohub_nb as mh
from madohub_nb.agents.foreground import Reader
from madohub_nb.defaults import parse_ssh_command
from madohub_nb.io.machine import PaneRef
from madohub_nb.io.remote import CONNECT_TIMEOUT_S, TAIL_MAX_BYTES, SshHost
from madohub_nb.pipeline.events import HostStateChanged, TileStateChanged


@pytest.fixture
def rhub(
    tmux_socket: str, remote_socket: str, sshd: object, home: Path, tmp_path: Path
) -> Iterator[mh.Hub]:
    """A hub whose ``ssh_command`` reaches the private sshd as host ``box``."""
    h = mh.Hub(
        socket_name=tmux_socket,
        idle_delay_ms=FAST_IDLE_MS,
        log_path=tmp_path / "rounds.sqlite3",
        ssh_command=sshd.ssh_command,  # type: ignore[attr-defined]
        remote_socket_name=remote_socket,
    )
    yield h
    h.close()


def _panes(socket: str) -> list[str]:
    out = subprocess.run(
        ["tmux", "-L", socket, "list-panes", "-a", "-F", "#{pane_id} #{window_name}"],
        capture_output=True,
        text=True,
    )
    return out.stdout.split("\n") if out.returncode == 0 else []


def _prompts(tile: mh.Tile) -> list[str]:
    """The prompts a stand-in Claude received, from the transcript its last answer is in
    (the host is this machine, so the test may open the file the tile names)."""
    found = tile.last_response()
    if found is None or found.path is None:
        return []
    prompts = []
    for line in Path(str(found.path)).read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") == "user" and isinstance(rec.get("message", {}).get("content"), str):
            prompts.append(rec["message"]["content"])
    return prompts


# --- the test server itself --------------------------------------------------------------
def test_the_test_sshd_checks_the_pinned_host_key(sshd: object, tmp_path: Path) -> None:
    config = Path(str(sshd.config))  # type: ignore[attr-defined]
    ok = subprocess.run(
        ["ssh", "-F", str(config), "box", "echo", "reached"], capture_output=True, text=True
    )
    assert ok.stdout.strip() == "reached"
    # Another host key for the same address: ssh refuses (StrictHostKeyChecking yes).
    known = config.parent / "known_hosts"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k2")], check=True
    )
    first = known.read_text().split("\n")[0]
    known.write_text(first.rsplit(" ", 2)[0] + " " + (tmp_path / "k2.pub").read_text())
    bad = subprocess.run(
        ["ssh", "-F", str(config), "box", "echo", "reached"], capture_output=True, text=True
    )
    assert bad.returncode == 255 and "reached" not in bad.stdout


# --- tiles on the host ---------------------------------------------------------------
def test_a_remote_tile_lives_on_the_hosts_tmux_not_the_hubs(
    rhub: mh.Hub, tmux_socket: str, remote_socket: str, project: Path
) -> None:
    tile = start_standin(rhub, "far", cwd=project, host="box")
    assert tile.ref == PaneRef("box", tile.pane_id) and tile.machine.name == "box"
    assert any(line.endswith(" far") for line in _panes(remote_socket))
    assert not any(line.endswith(" far") for line in _panes(tmux_socket))
    # Output comes over one control connection per host: an ssh process running tmux -C.
    link = rhub.hosts["box"]
    (client,) = link.watcher.client_pids()
    cmd = psutil.Process(client).cmdline()
    assert cmd[0] == "ssh" and "box" in cmd and "-C" in cmd[-1] and remote_socket in cmd[-1]
    assert link.tmux.channel_commands > 0  # commands went over it too
    reads = link.ssh.reads
    assert tile.state == "idle" and link.ssh.reads > reads  # the state was read on the host
    master = link.ssh._master
    assert master is not None and master.poll() is None  # the shared connection, our child
    rhub.close()  # ends the panes it made on the host, and its ssh processes
    assert not any(line.endswith(" far") for line in _panes(remote_socket))
    assert master.poll() is not None and not link.watcher.client_pids()


def test_a_remote_agent_routes_on_its_own_hook_carried_back_over_the_hosts_link(
    rhub: mh.Hub, sshd: object, home: Path, project: Path
) -> None:
    far = start_standin(rhub, "far", cwd=project, host="box", hooks=True)
    near = start_standin(rhub, "near", cwd=project, hooks=False)
    assert far.turn_signal == "hook" and far.hooks is not None
    # Its hook command and files live on the host (its own HOME), the socket it writes to
    # is there too: the host's ssh master carries each connection back to the hub.
    host_home = Path(sshd.home)  # type: ignore[attr-defined]
    (place,) = (host_home / ".cache" / "madohub_nb" / "hooks").iterdir()
    assert (place / "hookcall.py").is_file() and (place.stat().st_mode & 0o777) == 0o700
    agent = far.agent_process()
    assert agent is not None
    environ = dict(
        e.split("=", 1)
        for e in Path(f"/proc/{agent.pid}/environ").read_text().split("\0")
        if "=" in e
    )
    sock = Path(environ["MADOHUB_HOOK_SOCKET"])
    assert sock.is_socket() and sock.stat().st_mode & 0o077 == 0
    assert (sock.parent.stat().st_mode & 0o777) == 0o700
    assert sock != Path(rhub.runtime.tiles.hook_channel().socket_path)  # the host's own socket
    assert not (home / ".cache" / "madohub_nb" / "hooks").exists() or not any(
        (home / ".cache" / "madohub_nb" / "hooks").iterdir()
    )
    rhub.idle_delay_ms = 30000  # far beyond the waits below: only the hook ends the turn
    route = rhub.connect("far", "near", template="Review: {output}", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 5)
    rhub.send("far", "first draft").result(30)
    wait_until(lambda: route.rounds == 1 and route.last_status, 15, what="a round on the hook")
    (row,) = log_rows(rhub, route.id)
    assert row["status"] == "delivered", row
    assert row["turn_signal"] == "hook" and row["extraction_method"] == "hook"
    assert row["extracted"] == "Done: first draft"
    wait_until(lambda: _prompts(near) == ["Review: Done: first draft"], 10)
    assert far.hooks.received >= 1
    rhub.close()  # the host's hook place goes with the hub
    assert not place.exists() and not sock.parent.exists()


def test_a_remote_turn_is_read_from_a_bounded_tail_of_the_transcript(
    rhub: mh.Hub, project: Path
) -> None:
    tile = start_standin(rhub, "far", cwd=project, host="box", hooks=False)
    rhub.send("far", "hello there").result(60)
    wait_until(lambda: tile.last_response() is not None, 20, what="an answer")
    found = tile.last_response()
    assert found is not None and found.method == "jsonl" and found.text == "Done: hello there"
    assert found.usage is not None and found.usage.output_tokens
    assert _prompts(tile) == ["hello there"]


def test_adopting_a_pane_on_the_host_detects_its_agent(
    rhub: mh.Hub, remote_socket: str, project: Path
) -> None:
    from madohub_nb.demo import standin_command

    out = subprocess.run(
        ["tmux", "-L", remote_socket, "new-session", "-d", "-P", "-F", "#{pane_id}",
         "-x", "200", "-y", "50", standin_command("claude")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    pane = out.stdout.strip()
    tile = rhub.tile("adopted", pane=pane, host="box")
    assert tile.agent == "claude" and tile.machine.name == "box"
    wait_until(lambda: tile.state == "idle", 20, what="adopted idle")


def test_a_session_ending_on_the_host_exits_its_tiles_and_leaves_the_host_reachable(
    rhub: mh.Hub, remote_socket: str, project: Path
) -> None:
    """Issue 22.2: the end of one tmux session on a host is not the host going away."""
    out = subprocess.run(
        ["tmux", "-L", remote_socket, "new-session", "-d", "-s", "far", "-P", "-F",
         "#{pane_id}", "env PS1='$ ' bash --norc"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    adopted = rhub.tile("adopted", pane=out.stdout.strip(), agent="shell", host="box")
    made = start_standin(rhub, "made", cwd=project, host="box")  # the hub's own session
    wait_until(lambda: adopted.state == "idle", 20, what="the adopted shell idle")
    link = rhub.hosts["box"]
    wait_until(lambda: len(link.watcher.client_pids()) == 2, 10, what="a client per session")
    master = link.ssh._master
    assert master is not None and master.poll() is None
    route = rhub.connect("adopted", "made", trigger="on-keyword", pattern="DONE", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 10)
    states: list[tuple[str, str]] = []

    def on_event(e: object) -> None:
        if isinstance(e, TileStateChanged):
            states.append((e.name, e.state))
        elif isinstance(e, HostStateChanged):
            states.append((e.host, e.state))

    rhub.events.subscribe(on_event)
    subprocess.run(["tmux", "-L", remote_socket, "kill-session", "-t", "far"], check=True)
    wait_until(lambda: adopted.state == "exited", 10, what="the adopted tile exited")
    time.sleep(3)  # time for any reconnect loop to show itself
    assert link.reachable and link.reconnects == 0
    assert made.state == "idle" and ("made", "unreachable") not in states
    assert not any(kind == "box" for kind, _ in states)  # no host_state event at all
    assert link.ssh._master is master and master.poll() is None  # the master never restarted
    assert len(link.watcher.client_pids()) == 1  # the dead session is not watched again
    wait_until(lambda: route.state == "stopped", 10, what="the route from the ended pane stopped")
    assert "exited" in (route.last_error or "")


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.mark.parametrize("keep_panes", [False, True])
def test_the_ssh_master_ends_with_the_interpreter_without_close(
    sshd: object, tmux_socket: str, remote_socket: str, tmp_path: Path, keep_panes: bool
) -> None:
    """Issue 22.3: a hub that only adopted a pane on a host, in an interpreter that exits
    without close(), leaves no ssh master (a reusable authenticated socket) behind."""
    out = subprocess.run(
        ["tmux", "-L", remote_socket, "new-session", "-d", "-P", "-F", "#{pane_id}",
         "env PS1='$ ' bash --norc"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    ssh_command = sshd.ssh_command  # type: ignore[attr-defined]
    script = f"""
import madohub_nb as mh
hub = mh.Hub(socket_name={tmux_socket!r}, ssh_command={ssh_command!r},
             remote_socket_name={remote_socket!r}, log_path={str(tmp_path / "r.db")!r},
             keep_panes={keep_panes!r})
hub.tile("far", pane={out.stdout.strip()!r}, agent="shell", host="box").ready.result(30)
ssh = hub.hosts["box"].ssh
print(ssh._master.pid, ssh._control_dir, flush=True)
"""
    root = Path(mh.__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    pid_text, folder = done.stdout.split()
    try:
        wait_until(lambda: not _running(int(pid_text)), 10, what="the ssh master ended")
    finally:
        if _running(int(pid_text)):
            os.kill(int(pid_text), signal.SIGTERM)
    assert not os.path.exists(folder)  # its socket folder is removed too


def test_after_close_no_probe_starts_an_ssh_master_again(rhub: mh.Hub) -> None:
    rhub.tile("sh", agent="shell", command="env PS1='$ ' bash --norc", host="box")
    link = rhub.hosts["box"]
    folder = link.ssh._control_dir
    assert folder is not None and os.path.isdir(folder)
    rhub.close()
    link.probe()  # what a reconnect does: the host answers, but no master is made
    assert link.ssh.control_path is None and link.ssh._master is None
    assert not os.path.exists(folder)


def test_a_close_that_runs_out_of_time_still_ends_the_hosts_master_and_session(
    sshd: object, tmux_socket: str, remote_socket: str, tmp_path: Path, project: Path
) -> None:
    """A host slow to remove the hub's hook folders holds the shutdown past its budget:
    close() still ends the host's session and our ssh master by pid, its folder removed,
    before it returns (it left them to a cancelled task: the master outlived the hub)."""
    hub, flag = _flaky_hub(
        sshd, tmux_socket, remote_socket, tmp_path, '*"rm -rf"*', "exec sleep 30"
    )
    try:
        start_standin(hub, "far", cwd=project, host="box", hooks=True)
        link = hub.hosts["box"]
        master, folder = link.ssh._master, link.ssh._control_dir
        assert master is not None and folder is not None and os.path.isdir(folder)
        flag.touch()
        started = time.monotonic()
        hub.close()
        took = time.monotonic() - started
    finally:
        hub.close()
    assert took < 10, f"close() waited on the slow host ({took:.1f} s)"
    assert not _running(master.pid), "our ssh master outlived close()"
    assert not os.path.exists(folder)
    alive = subprocess.run(
        ["tmux", "-L", remote_socket, "has-session", "-t", hub.session_name],
        capture_output=True,
    )
    assert alive.returncode != 0, "the hub's session still runs on the host"


def _flaky_ssh(sshd: object, tmp_path: Path, when: str, then: str) -> tuple[str, Path]:
    """An ssh_command that, while its flag file exists, answers remote commands matching the
    shell pattern ``when`` by running ``then`` here instead (a host misbehaving on one read)."""
    flag = tmp_path / "flaky-on"
    wrapper = tmp_path / "flaky-ssh"
    ssh_command = sshd.ssh_command  # type: ignore[attr-defined]
    wrapper.write_text(
        f'#!/bin/sh\ncase "$*" in {when}) if [ -e {flag} ]; then {then}; fi;; esac\n'
        f'exec {ssh_command} "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper), flag


def _flaky_hub(
    sshd: object, tmux_socket: str, remote_socket: str, tmp_path: Path, when: str, then: str
) -> tuple[mh.Hub, Path]:
    """A hub whose host ``box`` is reached through :func:`_flaky_ssh`, and its flag file."""
    ssh_command, flag = _flaky_ssh(sshd, tmp_path, when, then)
    hub = mh.Hub(
        socket_name=tmux_socket, idle_delay_ms=FAST_IDLE_MS, log_path=tmp_path / "r.sqlite3",
        ssh_command=ssh_command, remote_socket_name=remote_socket,
    )  # fmt: skip
    return hub, flag


def test_a_failed_read_of_process_stats_on_the_host_is_not_an_exit(
    sshd: object, tmux_socket: str, remote_socket: str, tmp_path: Path, project: Path
) -> None:
    """Issue 22.11: a stats read the host did not answer reads unreachable, not exited (then
    deliveries would fail with "has exited"), and the tile is itself again once it answers."""
    hub, flag = _flaky_hub(
        sshd, tmux_socket, remote_socket, tmp_path, '*"/proc/"*"/stat "*', "exit 255"
    )
    try:
        tile = start_standin(hub, "far", cwd=project, host="box")
        flag.touch()
        seen = set()
        for _ in range(5):
            seen.add(tile.state)
            time.sleep(0.1)
        assert seen == {"unreachable"}
        assert "did not answer" in str(tile.reader()) or "cannot reach" in str(tile.reader())
        flag.unlink()
        wait_until(lambda: tile.state == "idle", 10, what="the tile idle again")
        rec = hub.send("far", "hello").result(60)
        assert rec.status == "delivered", rec.error
    finally:
        hub.close()


def test_the_hubs_secrets_do_not_reach_the_host_unless_a_tile_names_them(
    rhub: mh.Hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-ant-test-remote-" + "x" * 24
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)  # the test ssh config SendEnv's it
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    plain = rhub.tile("plain", command="sleep 600", host="box")
    named = rhub.tile("named", command="sleep 600", host="box", env={"OPENAI_API_KEY": secret})
    plain.ready.result(30)
    named.ready.result(30)

    def environ(tile: mh.Tile) -> dict[str, str]:
        info = tile.pane_info()
        assert info is not None
        return psutil.Process(info.pid).environ()

    assert "ANTHROPIC_API_KEY" not in environ(plain) and "OPENAI_API_KEY" not in environ(plain)
    assert environ(named).get("OPENAI_API_KEY") == secret
    assert "ANTHROPIC_API_KEY" not in environ(named)


# --- foreground checks on the host ----------------------------------------------------
def _claude_from_bash_on_box(hub: mh.Hub, remote_socket: str, name: str) -> mh.Tile:
    """A stand-in Claude started from a bash prompt on the host, adopted over ssh, idle."""
    from madohub_nb.demo import standin_command

    bash = "env PS1='$ ' bash --norc --noprofile"
    out = subprocess.run(
        ["tmux", "-L", remote_socket, "new-session", "-d", "-P", "-F", "#{pane_id}",
         "-x", "200", "-y", "50", bash],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    pane = out.stdout.strip()
    command = f"MADOHUB_STANDIN_THINK_S=0.2 {standin_command('claude', persona='echo')}"
    keys = ["tmux", "-L", remote_socket, "send-keys", "-t", pane]
    subprocess.run([*keys, "-l", "--", command], check=True)
    subprocess.run([*keys, "Enter"], check=True)
    wait_until(
        lambda: psutil.Process(int(_pane_pid(remote_socket, pane))).children(), 15, what="child"
    )
    tile = wait_until(lambda: _adopt(hub, name, pane), 15, what="claude detected on box")
    wait_until(lambda: tile.state == "idle", 15, what=f"{name} idle")  # type: ignore[attr-defined]
    return tile  # type: ignore[return-value]


def _pane_pid(socket: str, pane: str) -> str:
    return subprocess.run(
        ["tmux", "-L", socket, "display-message", "-p", "-t", pane, "#{pane_pid}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def _adopt(hub: mh.Hub, name: str, pane: str) -> mh.Tile | None:
    try:
        return hub.tile(name, pane=pane, host="box", agent=None)
    except mh.MadohubError:
        return None  # not detected yet (the shell has not started it)


def test_a_suspended_agent_on_the_host_gets_nothing_typed(
    rhub: mh.Hub, remote_socket: str, tmp_path: Path
) -> None:
    tile = _claude_from_bash_on_box(rhub, remote_socket, "tgt")
    proc = tile.agent_process()
    assert proc is not None and tile.agent == "claude"
    os.kill(proc.pid, signal.SIGTSTP)  # Ctrl-Z (the host is this machine)
    wait_until(lambda: "Stopped" in tile.screen(), 10, what="bash saw the job stop")
    assert tile.state != "idle"  # its sessions file still says idle: the process state wins
    marker = tmp_path / "MARKER"
    rec = rhub.send("tgt", f"touch {marker}").result(60)
    assert rec.status == "error"
    assert "stopped" in (rec.error or "") and "nothing was typed" in (rec.error or "")
    assert not marker.exists() and f"touch {marker}" not in tile.screen()
    os.kill(proc.pid, signal.SIGCONT)


def test_an_agent_on_the_host_suspended_while_typing_gets_no_more_lines(
    rhub: mh.Hub, remote_socket: str
) -> None:
    from test_foreground import _signal_during_typing

    tile = _claude_from_bash_on_box(rhub, remote_socket, "tgt")
    proc = tile.agent_process()
    assert proc is not None
    _signal_during_typing(rhub, proc.pid, signal.SIGTSTP, after_lines=3)
    text = "\n".join(f"line {i}" for i in range(8))
    rec = rhub.send("tgt", text).result(60)
    assert rec.status == "error"
    assert "stopped (suspended" in (rec.error or "") and "on box" in (rec.error or "")
    assert "after 3 of 8 lines" in (rec.error or "")
    os.kill(proc.pid, signal.SIGCONT)


# --- routes across the host ------------------------------------------------------------
@pytest.mark.parametrize(
    ("source_host", "target_host"),
    [("box", None), (None, "box"), ("box", "box")],
    ids=["remote-to-local", "local-to-remote", "remote-to-remote"],
)
def test_routes_cross_the_host(
    rhub: mh.Hub, project: Path, source_host: str | None, target_host: str | None
) -> None:
    src_kw = {"host": source_host} if source_host else {}
    dst_kw = {"host": target_host} if target_host else {}
    writer = start_standin(rhub, "writer", cwd=project, **src_kw)
    reviewer = start_standin(rhub, "reviewer", cwd=project, **dst_kw)
    route = rhub.connect("writer", "reviewer", template="Review: {output}", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 10)
    rhub.send("writer", "first draft").result(60)
    wait_until(lambda: route.rounds == 1 and route.last_status, 40, what="round 1")
    (row,) = log_rows(rhub, route)
    assert row["status"] == "delivered", row["error"]
    # A pane the hub starts has its Stop hook (issue 23), here or on the host (the hook's
    # message comes back over the host's ssh master).
    assert row["extraction_method"] == "hook" and row["turn_signal"] == "hook"
    assert row["prompt"] == "Review: Done: first draft"
    wait_until(lambda: _prompts(reviewer) == ["Review: Done: first draft"], 20, what="prompt")
    assert writer.state == "idle"


def test_a_remote_codex_is_read_from_a_bounded_tail_of_the_rollout_it_holds_open(
    rhub: mh.Hub, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No hooks: this is about reading the rollout on the host (what an adopted Codex gets).
    writer = start_standin(rhub, "writer", kind="codex", cwd=project, host="box", hooks=False)
    reviewer = start_standin(rhub, "reviewer", cwd=project)
    assert writer.machine.name == "box" and writer.profile.extractor == "rollout"
    before = writer.last_response()  # no prompt yet: no rollout is open, the screen answers
    assert before is None or before.method == "terminal"
    route = rhub.connect("writer", "reviewer", template="Review: {output}", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 10)
    rhub.send("writer", "first draft").result(60)
    wait_until(lambda: route.rounds == 1 and route.last_status, 40, what="round 1")
    (row,) = log_rows(rhub, route)
    assert row["status"] == "delivered", row["error"]
    assert row["extraction_method"] == "rollout"
    assert row["prompt"] == "Review: Done: first draft"
    wait_until(lambda: _prompts(reviewer) == ["Review: Done: first draft"], 20, what="prompt")
    found = writer.last_response()
    assert found is not None and found.method == "rollout" and found.path is not None
    rollout = Path(str(found.path))
    assert rollout.name.startswith("rollout-") and "sessions" in rollout.parts
    # The rollout grows past the tail's bound (records appended as Codex appends them: the
    # stand-in holds it open in append mode): the next answer still comes from its last
    # megabyte, and no read over ssh brings back more than that.
    pad = {"timestamp": "2026-01-01T00:00:00.000Z", "type": "event_msg"}
    with rollout.open("a") as f:
        for _ in range(3000):
            f.write(json.dumps({**pad, "payload": {"type": "mh_pad", "x": "x" * 1000}}) + "\n")
    assert rollout.stat().st_size > 2 * TAIL_MAX_BYTES
    ssh = rhub.hosts["box"].ssh
    sizes: list[int] = []
    run = ssh.run

    def measured(shell: str, *args: float, **kwargs: float) -> subprocess.CompletedProcess[bytes]:
        proc = run(shell, *args, **kwargs)
        sizes.append(len(proc.stdout))
        return proc

    monkeypatch.setattr(ssh, "run", measured)  # observes the real reads, changes nothing
    rhub.send("writer", "second draft").result(60)
    wait_until(lambda: len(log_rows(rhub, route)) == 2, 40, what="round 2 logged")
    last = log_rows(rhub, route)[-1]
    assert (last["status"], last["extraction_method"], last["prompt"]) == (
        "delivered",
        "rollout",
        "Review: Done: second draft",
    ), last["error"]
    assert sizes and max(sizes) <= TAIL_MAX_BYTES + 4096


def test_typing_into_a_shell_on_the_host_checks_its_foreground_there(
    rhub: mh.Hub, tmp_path: Path
) -> None:
    sh = rhub.tile("sh", agent="shell", command="env PS1='$ ' bash --norc", host="box")
    wait_until(lambda: sh.state == "idle", 20, what="the remote shell's prompt")
    reader = sh.reader()
    assert isinstance(reader, Reader) and "on box" in reader.what
    marker = tmp_path / "made-on-box"
    rec = rhub.send("sh", f"touch {marker}", allow_shell=True).result(60)
    assert rec.status == "delivered", rec.error
    wait_until(marker.exists, 10, what="the command to run on the host")
    # A program in the shell's foreground is who reads now (found on the host).
    rhub.send("sh", "sleep 30", allow_shell=True).result(60)
    wait_until(
        lambda: "'sleep'" in getattr(sh.reader(), "what", ""), 10, what="sleep in the foreground"
    )
    assert sh.state != "idle"
    rhub.keys("sh", "C-c").result(30)
    wait_until(lambda: "bash" in getattr(sh.reader(), "what", ""), 10, what="the shell back")


def test_a_tile_view_of_a_shell_on_the_host_shows_new_output(
    rhub: mh.Hub, remote_socket: str
) -> None:
    """The view follows the output of the pane's own machine (the host's watcher), as it
    does for a pane here: it used to ask the local watcher and never redrew."""
    from madohub_nb.notebook.widgets import TileView

    sh = rhub.tile("sh", agent="shell", command="env PS1='$ ' bash --norc", host="box")
    wait_until(lambda: sh.state == "idle", 20, what="the remote shell's prompt")
    view = TileView(rhub, "sh", min_interval_s=0.05)
    try:
        wait_until(lambda: view.redraws >= 1 and not view._drawing, 15, what="the first redraw")
        # Typed on the host's tmux directly: no route or delivery of the hub listens to it.
        subprocess.run(
            ["tmux", "-L", remote_socket, "send-keys", "-t", sh.pane_id, "echo MARK-$((40+2))"]
            + ["Enter"],
            check=True,
        )
        wait_until(lambda: "MARK-42" in view.screen_value, 5, what="the new output in the view")
        assert (
            sh.pane_id not in rhub.runtime.tiles.watcher.streams
        )  # no stray stream on this machine's tmux
    finally:
        view.close()


def test_a_remote_shell_target_is_refused_without_allow_shell(rhub: mh.Hub) -> None:
    rhub.tile("sh", command="bash --norc", host="box").ready.result(30)
    writer = rhub.tile("w", command="bash --norc")
    writer.ready.result(30)
    with pytest.raises(mh.MadohubValueError, match="allow_shell"):
        rhub.connect("w", "sh")


# --- faults -----------------------------------------------------------------------------
def test_a_dropped_link_reads_unreachable_holds_routes_and_resumes_without_loss(
    rhub: mh.Hub, sshd: object, project: Path
) -> None:
    writer = start_standin(rhub, "writer", cwd=project, host="box")
    reviewer = start_standin(rhub, "reviewer", cwd=project)
    route = rhub.connect("writer", "reviewer", template="Review: {output}", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 10)
    host_events: list[tuple[str, str]] = []
    rhub.events.subscribe(
        lambda e: host_events.append((e.host, e.state)) if isinstance(e, HostStateChanged) else None
    )
    # A 4 s turn; the link drops during it and stays down (the key is refused) until after
    # the turn has ended: the finished turn must be routed once the host is back.
    rhub.send("writer", "slow draft [[sleep 4]]").result(60)
    keys = Path(str(sshd.config)).parent / "authorized_keys"  # type: ignore[attr-defined]
    saved = keys.read_text()
    keys.write_text("")
    assert sshd.drop_sessions()  # type: ignore[attr-defined]
    wait_until(lambda: writer.state == "unreachable", 20, what="writer unreachable")
    wait_until(lambda: route.state == "paused", 10, what="route held")
    assert route.last_error and "unreachable" in route.last_error
    assert rhub.hosts["box"].reachable is False
    time.sleep(5)  # the writer's turn ends while its host cannot be reached
    assert route.rounds == 0
    keys.write_text(saved)
    wait_until(lambda: rhub.hosts["box"].reachable, 40, what="host back")
    wait_until(lambda: route.state == "active", 10, what="route resumed")
    wait_until(lambda: route.rounds == 1 and route.last_status, 40, what="the held turn routed")
    rows = log_rows(rhub, route)
    assert [(r["status"], r["prompt"], r["error"]) for r in rows] == [
        ("delivered", "Review: Done: slow draft [[sleep 4]]", None)
    ]
    wait_until(lambda: _prompts(reviewer) == ["Review: Done: slow draft [[sleep 4]]"], 20)
    assert route.last_error is None and writer.state == "idle"
    # The link said so as events (the route registry held and released the route on them).
    assert host_events[0] == ("box", "unreachable") and host_events[-1] == ("box", "reachable")
    # Nothing is routed twice: a repaint after the reconnect is no new turn.
    rhub.hosts["box"].tmux.run("send-keys", "-t", writer.pane_id, "-l", "--", "x")
    rhub.hosts["box"].tmux.run("send-keys", "-t", writer.pane_id, "BSpace")
    time.sleep(FAST_IDLE_MS / 1000 * 3)
    assert route.rounds == 1 and _prompts(reviewer) == ["Review: Done: slow draft [[sleep 4]]"]


def test_a_turn_for_an_unreachable_target_waits_and_is_typed_once_it_is_back(
    rhub: mh.Hub, sshd: object, project: Path
) -> None:
    writer = start_standin(rhub, "writer", cwd=project)
    reviewer = start_standin(rhub, "reviewer", cwd=project, host="box")
    route = rhub.connect("writer", "reviewer", template="Review: {output}", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 10)
    keys = Path(str(sshd.config)).parent / "authorized_keys"  # type: ignore[attr-defined]
    saved = keys.read_text()
    keys.write_text("")
    assert sshd.drop_sessions()  # type: ignore[attr-defined]
    wait_until(lambda: reviewer.state == "unreachable", 20, what="reviewer unreachable")
    wait_until(lambda: route.state == "paused", 10, what="route held")
    rhub.send("writer", "local draft").result(60)  # the local source finishes a turn
    wait_until(lambda: writer.state == "idle", 20)
    time.sleep(FAST_IDLE_MS / 1000 * 3)  # past the idle delay: the trigger has seen it
    assert route.rounds == 0 and route.state == "paused"
    keys.write_text(saved)
    wait_until(lambda: route.rounds == 1 and route.last_status, 60, what="the waiting turn")
    assert [(r["status"], r["prompt"]) for r in log_rows(rhub, route)] == [
        ("delivered", "Review: Done: local draft")
    ]
    wait_until(lambda: _prompts(reviewer) == ["Review: Done: local draft"], 20)
    assert route.state == "active" and rhub.hosts["box"].reconnects == 1


@pytest.mark.parametrize("fault", ["hung", "gone"])
def test_close_does_not_hang_on_a_host_that_stopped_answering(
    rhub: mh.Hub, sshd: object, fault: str
) -> None:
    tile = rhub.tile("far", command="sleep 600", host="box")
    tile.ready.result(30)
    stopped: list[psutil.Process] = []
    if fault == "hung":  # connections stay open, nothing answers
        procs = [sshd.proc.pid, *sshd.session_pids()]  # type: ignore[attr-defined]
        stopped = [psutil.Process(p) for p in procs]
        for p in stopped:
            p.suspend()
    else:  # the server is gone: the link drops and reconnecting is refused
        sshd.stop()  # type: ignore[attr-defined]
        wait_until(lambda: tile.state == "unreachable", 20, what="far unreachable")
    try:
        done = threading.Event()
        threading.Thread(target=lambda: (rhub.close(), done.set()), daemon=True).start()
        assert done.wait(CONNECT_TIMEOUT_S + 5), "close() hung on a host that does not answer"
    finally:
        for p in stopped:
            p.resume()


@pytest.mark.parametrize(
    ("host", "said"),
    [
        ("nohost", "no such host"),
        ("refused", "refused the key"),
        ("notmux", "has no tmux"),
        ("hang", "did not answer"),
        ("-oProxyCommand=touch", "is not an ssh destination"),
        ("two words", "is not an ssh destination"),
    ],
)
def test_a_bad_host_is_a_one_line_error_in_bounded_time(rhub: mh.Hub, host: str, said: str) -> None:
    started = time.monotonic()
    with pytest.raises(mh.MadohubError) as info:
        rhub.tile("far", command="sleep 600", host=host)
    message = str(info.value)
    assert said in message and "\n" not in message
    assert repr(host) in message
    assert time.monotonic() - started < CONNECT_TIMEOUT_S + 5  # the bound, with slack
    assert "far" not in rhub.tiles
    assert threading.active_count() < 50  # no thread left waiting per attempt


def test_ssh_command_is_checked(rhub: mh.Hub) -> None:
    with pytest.raises(ValueError, match="ssh_command"):
        rhub.ssh_command = ""
    with pytest.raises(ValueError, match="cannot be split"):
        rhub.ssh_command = "ssh -F 'unclosed"


# --- bounded reads on the host ------------------------------------------------------------
@pytest.fixture
def box(sshd: object) -> Iterator[SshHost]:
    host = SshHost("box", parse_ssh_command(sshd.ssh_command))  # type: ignore[attr-defined]
    yield host
    host.stop_master()


def test_a_host_streaming_without_end_into_a_bounded_read_is_cut_off(
    sshd: object, tmp_path: Path
) -> None:
    """Issue 22.11: a hostile host answering a tail read with endless bytes is stopped at
    the read's bound, at once (not after the 10 s timeout, with all of it in memory)."""
    flood = "while :; do head -c 65536 /dev/zero; sleep 0.01; done"
    ssh_command, flag = _flaky_ssh(sshd, tmp_path, '*"tail -c"*', flood)
    host = SshHost("box", parse_ssh_command(ssh_command))
    flag.touch()
    try:
        started = time.monotonic()
        with pytest.raises(mh.MadohubError, match="more than"):
            host.read_tail("/etc/hostname")
        assert time.monotonic() - started < 5
    finally:
        host.close()


def test_stats_of_several_processes_are_one_read(box: SshHost) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        before = box.reads
        stats = box.read_stats([sleeper.pid, 1, 4_000_000])
        assert box.reads == before + 1
        st = stats[sleeper.pid]
        assert st is not None and st.comm == "sleep" and st.pid == sleeper.pid
        assert stats[4_000_000] is None  # gone: None, not an error
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_transcript_tail_is_bounded_and_cut_at_a_whole_line(box: SshHost, tmp_path: Path) -> None:
    big = tmp_path / "t.jsonl"
    line = json.dumps({"type": "user", "pad": "x" * 1000}) + "\n"
    big.write_text(line * 3000)  # about 3 MB
    got = box.read_tail(str(big), 64 * 1024)
    assert got is not None
    path, data, whole = got
    assert path == str(big) and not whole and len(data) == 64 * 1024
    small = tmp_path / "s.jsonl"
    small.write_text(line)
    assert box.read_tail(str(small), 64 * 1024) == (str(small), line.encode(), True)
    assert box.read_tail(str(tmp_path / "missing.jsonl")) is None
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    assert box.read_tail(str(fifo)) is None  # not a regular file: never opened


def test_open_files_of_a_process_tree_are_one_bounded_read(box: SshHost, tmp_path: Path) -> None:
    rollout = tmp_path / "rollout-2026-01-01T00-00-00-abc.jsonl"
    rollout.write_text("")
    other = tmp_path / "notes.jsonl"
    other.write_text("")
    # A parent (the node of Codex's TUI) whose child (the native codex) holds the rollout.
    child = (
        f"import time; f = open({str(rollout)!r}); g = open({str(other)!r}); "
        "print('open', flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen(
        [
            "python3",
            "-c",
            f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}])",
        ],
        stdout=subprocess.PIPE,
    )
    kids: list[psutil.Process] = []
    try:
        assert parent.stdout is not None and parent.stdout.readline() == b"open\n"
        kids = psutil.Process(parent.pid).children()
        (kid,) = kids
        before = box.reads
        assert box.read_open_files([parent.pid], "*/rollout-*.jsonl") == [(kid.pid, str(rollout))]
        assert box.reads == before + 1
        # Bounded: only the first fds of each process are resolved (the rollout is past 2).
        assert box.read_open_files([parent.pid], "*/rollout-*.jsonl", max_fds=2) == []
        assert box.read_open_files([parent.pid], "*/rollout-*.jsonl", max_procs=1) == []
        assert box.read_open_files([4_000_000], "*/rollout-*.jsonl") == []  # gone: nothing
    finally:
        for p in kids:
            p.kill()
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


def test_only_the_named_environment_variables_come_back(box: SshHost) -> None:
    proc = subprocess.Popen(
        ["sleep", "60"], env={"CLAUDE_CONFIG_DIR": "/x/cfg", "OTHER_SECRET": "s3cret"}
    )
    try:
        assert box.read_environ(proc.pid, ["CLAUDE_CONFIG_DIR", "HOME"]) == {
            "CLAUDE_CONFIG_DIR": "/x/cfg"
        }
    finally:
        proc.kill()
        proc.wait()


def test_the_shared_connection_is_our_child_and_ends_by_pid(box: SshHost) -> None:
    assert box.start_master()
    path = box.control_path
    assert path is not None and os.path.exists(path)
    assert "-S" in box.argv(["true"])  # later commands share it
    box.stop_master()
    assert box.control_path is None and "-S" not in box.argv(["true"])


def test_a_hosts_clock_is_read_from_its_own_tmux_not_ours(rhub: mh.Hub, project: Path) -> None:
    """Quiet time of a paused pane on a host compares tmux's ``#{window_activity}`` with
    the host's clock (the ``%begin`` stamp of its answers), never with this machine's:
    a host whose clock is behind would otherwise read quiet while it floods."""
    start_standin(rhub, "far", cwd=project, host="box")
    link = rhub.hosts["box"]
    client = link.tmux._channel
    assert client is not None and client.server_clock is not None  # stamped by its answers
    link.tmux.run("display-message", "-p", "x")
    seconds, mono = client.server_clock
    assert time.monotonic() - mono < 5  # the stamp is the last answer's, not the first's
    # The host is this machine here, so its clock can be checked against ours: the
    # reading is the floor of the host's time, never ahead of it.
    now = time.time()
    assert now - 2.0 < link.tmux.server_wall_time() <= now
    # With no stamp yet (no control connection), nothing may look old on the host.
    link.tmux.drop_channel(client)
    assert link.tmux.server_wall_time() == 0.0


def test_a_remote_tiles_env_and_command_reach_no_argv_here_or_on_the_host(
    tmux_socket: str, remote_socket: str, sshd: object, tmp_path: Path
) -> None:
    """ssh runs through a recorder of its argv: the tile's ``env`` and command go over the
    connection as text, never in ssh's argv here, the remote shell's, or the host's tmux server's."""
    record = tmp_path / "ssh-argv.txt"
    recorder = tmp_path / "bin" / "ssh"
    recorder.parent.mkdir()
    recorder.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{record}"\nexec ssh "$@"\n')
    recorder.chmod(0o700)
    _, options = sshd.ssh_command.split(maxsplit=1)  # type: ignore[attr-defined]
    ssh_command = f"{recorder} {options}"
    token, word = f"tok-{os.urandom(8).hex()}", f"word-{os.urandom(8).hex()}"
    hub = mh.Hub(
        socket_name=tmux_socket,
        log_path=tmp_path / "rounds.sqlite3",
        ssh_command=ssh_command,
        remote_socket_name=remote_socket,
    )
    try:
        tile = hub.tile(
            "far", command=f"sh -c 'echo {word}; sleep 600'", host="box", env={"MY_TOKEN": token}
        )
        tile.ready.result(30)
        info = tile.pane_info()
        assert info is not None
        assert psutil.Process(info.pid).environ().get("MY_TOKEN") == token
        wait_until(lambda: word in tile.screen(), 15, what="the remote tile's command ran")
        argvs = record.read_text()
        assert "source-file" in argvs and "new-session" not in argvs  # the path was taken
        assert token not in argvs and word not in argvs
        out = subprocess.run(
            ["tmux", "-L", remote_socket, "display-message", "-p", "#{pid}"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        server = " ".join(psutil.Process(int(out.stdout)).cmdline())
        assert token not in server and word not in server
    finally:
        hub.close()


def test_a_remote_hook_comes_back_over_the_new_master_after_the_link_drops(
    rhub: mh.Hub, sshd: object, project: Path
) -> None:
    far = start_standin(rhub, "far", cwd=project, host="box", hooks=True)
    near = start_standin(rhub, "near", cwd=project, hooks=False)
    route = rhub.connect("far", "near", template="Review: {output}", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 10)
    link = rhub.hosts["box"]
    master = link.ssh._master
    assert master is not None
    # The link drops and stays down (the key refused) until the hub has seen it go.
    keys = Path(str(sshd.config)).parent / "authorized_keys"  # type: ignore[attr-defined]
    saved = keys.read_text()
    keys.write_text("")
    assert sshd.drop_sessions()  # type: ignore[attr-defined]
    wait_until(lambda: far.state == "unreachable", 20, what="far unreachable")
    keys.write_text(saved)
    wait_until(lambda: link.reachable, 40, what="host back")
    wait_until(lambda: route.state == "active", 10, what="route resumed")

    def new_master() -> bool:
        now = link.ssh._master
        return now is not None and now is not master and now.poll() is None

    # (The link may read reachable again before the old master's end is seen: then a new
    # master follows once it is. Each is seen within the link's own checks.)
    wait_until(new_master, 40, what="a new ssh master")
    rhub.idle_delay_ms = 30000  # only the hook can end the turn in time
    rhub.send("far", "after the drop").result(60)
    wait_until(lambda: route.rounds == 1 and route.last_status, 15, what="a round on the hook")
    (row,) = log_rows(rhub, route)
    assert row["status"] == "delivered" and row["turn_signal"] == "hook", row
    wait_until(lambda: _prompts(near) == ["Review: Done: after the drop"], 10)
