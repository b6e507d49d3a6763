"""Agent detection from real process trees in real tmux panes; Claude and Codex files of real processes.

Stand-in agents are tiny Python scripts named ``claude``, ``codex``… with an
absolute shebang: the kernel names the process after the script, so psutil
sees the command name ``claude`` as it would for the real program.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import kill_tree, wait_until

from madohub_nb.agents import (
    UNKNOWN_KIND,
    AgentProcess,
    claude_config_dir,
    codex_home,
    detect_kind,
    find_agent,
    newest_rollout,
    read_session_file,
    session_status,
)
from madohub_nb.agents.claude import CONFIG_ENV
from madohub_nb.agents.codex import HOME_ENV, ROLLOUT_GLOB
from madohub_nb.agents.detect import kind_from_command
from madohub_nb.agents.kinds import claude as claude_kind
from madohub_nb.errors import MadohubValueError
from madohub_nb.io.machine import LocalMachine

LOCAL = LocalMachine()
"""This machine's processes and files, as a tile here reads them."""

# Holds every file named on its command line open, then sleeps.
STAND_IN = f"""#!{sys.executable}
import sys, time
held = [open(path, "a") for path in sys.argv[1:]]
time.sleep(60)
"""


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """Stand-in agents, plus ``sample`` and ``amp_tool.py`` (names that merely contain "amp")."""
    d = tmp_path / "bin"
    d.mkdir()
    for name in (
        "claude",
        "codex",
        "amp",
        "opencode",
        "qwen",
        "aider",
        "sample",
        "codex.js",
        "amp_tool.py",
    ):
        script = d / name
        script.write_text(STAND_IN)
        script.chmod(0o755)
    return d


@pytest.fixture
def started() -> Iterator[list[int]]:
    """Pids of processes a test starts outside tmux; their trees are ended afterwards."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        kill_tree(pid)


def tmux(socket: str, *args: str) -> str:
    out = subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def new_pane(socket: str, command: str, cwd: Path | None = None) -> tuple[str, int]:
    """A new detached session running ``command``; returns its pane id and pane pid."""
    extra = ["-c", str(cwd)] if cwd else []
    out = tmux(
        socket, "new-session", "-d", "-P", "-F", "#{pane_id} #{pane_pid}", "-x", "100", "-y", "30",
        *extra, command,
    )  # fmt: skip
    pane_id, pid = out.split()
    return pane_id, int(pid)


def _open_rollout(pid: int, codex_home: Path | None = None) -> Path | None:
    """The rollout a process tree holds open, as a Codex tile finds it (its home: $HOME/.codex)."""
    home = codex_home or Path(os.environ["HOME"]) / ".codex"
    found = newest_rollout([f.path for f in LOCAL.open_files([pid], ROLLOUT_GLOB)], home)
    return Path(found) if found is not None else None


def _name_is(pid: int, name: str) -> bool:
    try:
        return psutil.Process(pid).name() == name
    except psutil.Error:
        return False


# --- find_agent / detect_kind ---------------------------------------------


def test_stand_in_script_is_named_after_itself(bin_dir: Path, started: list[int]) -> None:
    proc = subprocess.Popen([bin_dir / "claude"])
    started.append(proc.pid)
    wait_until(lambda: _name_is(proc.pid, "claude"), what="the stand-in's name to be claude")


@pytest.mark.parametrize("kind", ["claude", "codex", "amp", "opencode", "qwen", "aider"])
def test_each_agent_kind_is_found_as_the_panes_own_process(
    tmux_socket: str, bin_dir: Path, kind: str
) -> None:
    pane_pid = new_pane(tmux_socket, f"exec {bin_dir / kind}")[1]
    wait_until(partial(_name_is, pane_pid, kind), what=f"{kind} to replace the shell")
    found = find_agent(LOCAL, pane_pid)
    assert found is not None
    assert found.kind == kind and found.pid == pane_pid
    assert detect_kind(LOCAL, pane_pid) == kind


def test_agent_started_from_the_panes_shell_is_found(tmux_socket: str, bin_dir: Path) -> None:
    pane_id, pane_pid = new_pane(tmux_socket, "bash --norc --noprofile")
    wait_until(lambda: detect_kind(LOCAL, pane_pid) == "shell", what="the pane's shell to start")
    tmux(tmux_socket, "send-keys", "-t", pane_id, "-l", f"{bin_dir / 'claude'}")
    tmux(tmux_socket, "send-keys", "-t", pane_id, "Enter")
    found = wait_until(lambda: find_agent(LOCAL, pane_pid), what="claude under the pane's shell")
    assert isinstance(found, AgentProcess)
    kind, proc = found.kind, psutil.Process(found.pid)
    assert kind == "claude"
    assert proc.pid != pane_pid and proc.ppid() == pane_pid
    assert detect_kind(LOCAL, pane_pid, "claude") == "claude"


def test_agent_deeper_in_the_tree_is_found_breadth_first(tmux_socket: str, bin_dir: Path) -> None:
    # pane shell -> bash -c -> { sample (depth 2), bash -c -> codex (depth 3) }
    inner = f"{bin_dir / 'codex'}; true"
    command = f"bash -c '{bin_dir / 'sample'} & bash -c \"{inner}\"; wait'"
    _, pane_pid = new_pane(tmux_socket, command)
    found = wait_until(lambda: find_agent(LOCAL, pane_pid), what="codex two levels down")
    assert isinstance(found, AgentProcess)
    assert found.kind == "codex" and found.comm == "codex"


def test_script_launched_by_an_interpreter_is_found_by_its_file_name(
    tmux_socket: str, bin_dir: Path
) -> None:
    # Like "node …/codex.js": the command name is the interpreter, argv[1] the agent.
    _, pane_pid = new_pane(tmux_socket, f"exec {sys.executable} {bin_dir / 'codex.js'}")
    wait_until(lambda: _name_is(pane_pid, Path(sys.executable).name), what="the interpreter")
    found = find_agent(LOCAL, pane_pid)
    assert found is not None and found.kind == "codex" and found.pid == pane_pid


def test_names_that_merely_contain_a_token_are_not_agents(
    tmux_socket: str, bin_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "claude.md").write_text("notes\n")
    _, sample_pid = new_pane(tmux_socket, f"exec {bin_dir / 'sample'}")
    wait_until(lambda: _name_is(sample_pid, "sample"), what="sample to start")
    assert find_agent(LOCAL, sample_pid) is None
    assert detect_kind(LOCAL, sample_pid) == UNKNOWN_KIND
    # A program that is not an interpreter, given a file whose name holds a token.
    _, tail_pid = new_pane(tmux_socket, "exec tail -f claude.md", cwd=tmp_path)
    wait_until(lambda: _name_is(tail_pid, "tail"), what="tail to start")
    assert find_agent(LOCAL, tail_pid) is None
    assert detect_kind(LOCAL, tail_pid, "tail") == UNKNOWN_KIND
    # An interpreter running a script whose name only starts with a token.
    _, script_pid = new_pane(tmux_socket, f"exec {sys.executable} {bin_dir / 'amp_tool.py'}")
    wait_until(lambda: _name_is(script_pid, Path(sys.executable).name), what="the script to start")
    assert find_agent(LOCAL, script_pid) is None


def test_plain_shell_pane_is_a_shell(tmux_socket: str) -> None:
    _, pane_pid = new_pane(tmux_socket, "bash --norc --noprofile")
    assert find_agent(LOCAL, pane_pid) is None
    assert detect_kind(LOCAL, pane_pid, "bash") == "shell"


def test_vanished_process_is_not_an_error() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert find_agent(LOCAL, proc.pid) is None
    assert detect_kind(LOCAL, proc.pid) == UNKNOWN_KIND
    assert detect_kind(LOCAL, proc.pid, "bash") == "shell"


@pytest.mark.parametrize("bad", [0, -1, True, "123", 1.5])
def test_bad_pane_pid_is_refused(bad: object) -> None:
    with pytest.raises(MadohubValueError, match="pane_pid"):
        find_agent(LOCAL, bad)  # type: ignore[arg-type]


# --- Claude: config dir and sessions/<pid>.json ------------------------------------


SLEEP_CODE = "import time; time.sleep(60)"


def _exec_done(proc: psutil.Process) -> bool:
    try:
        return proc.cmdline()[-1:] == [SLEEP_CODE]
    except psutil.Error:
        return False


def _sleeper(env: dict[str, str], started: list[int]) -> psutil.Process:
    """A process with exactly ``env``, once it runs (before exec it still has pytest's env)."""
    popen = subprocess.Popen([sys.executable, "-c", SLEEP_CODE], env=env)
    started.append(popen.pid)
    proc = psutil.Process(popen.pid)
    wait_until(lambda: _exec_done(proc), what="the sleeper to exec")
    return proc


def test_claude_config_dir_prefers_the_processes_claude_config_dir(
    home: Path, tmp_path: Path, started: list[int]
) -> None:
    proc = _sleeper({"HOME": str(home), "CLAUDE_CONFIG_DIR": str(tmp_path / "cfg")}, started)
    assert (
        claude_config_dir(LOCAL.environ(proc.pid, CONFIG_ENV), tmp_path / "fallback")
        == tmp_path / "cfg"
    )


def test_claude_config_dir_falls_back_to_the_processes_home(
    home: Path, tmp_path: Path, started: list[int]
) -> None:
    other_home = tmp_path / "agent-home"
    proc = _sleeper({"HOME": str(other_home)}, started)
    assert (
        claude_config_dir(LOCAL.environ(proc.pid, CONFIG_ENV), tmp_path / "fallback")
        == other_home / ".claude"
    )


def test_claude_config_dir_uses_the_hub_setting_when_the_process_says_nothing(
    tmp_path: Path, started: list[int]
) -> None:
    proc = _sleeper({"PATH": "/usr/bin:/bin"}, started)
    assert (
        claude_config_dir(LOCAL.environ(proc.pid, CONFIG_ENV), str(tmp_path / "hub-claude"))
        == tmp_path / "hub-claude"
    )
    assert claude_config_dir(LOCAL.environ(proc.pid, CONFIG_ENV), None) is None
    assert claude_config_dir(None, tmp_path / "x") == tmp_path / "x"


def test_claude_config_dir_of_a_vanished_process_is_the_fallback(tmp_path: Path) -> None:
    proc = subprocess.Popen(["true"])
    gone = psutil.Process(proc.pid)
    proc.wait()
    assert claude_config_dir(LOCAL.environ(gone.pid, CONFIG_ENV), tmp_path) == tmp_path


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    d = tmp_path / "claude-config"
    (d / "sessions").mkdir(parents=True)
    return d


@pytest.mark.parametrize(
    ("fixture", "status", "waiting_for"),
    [
        ("sessions_23811_idle.json", "idle", None),
        ("sessions_23811_busy.json", "busy", None),
        ("sessions_23811_waiting.json", "waiting", "permission prompt"),
        ("sessions_23811_idle_after.json", "idle", None),
    ],
)
def test_real_session_files_are_read(
    fixtures_dir: Path, config_dir: Path, fixture: str, status: str, waiting_for: str | None
) -> None:
    shutil.copy(fixtures_dir / "real" / "claude" / fixture, config_dir / "sessions" / "23811.json")
    session = read_session_file(config_dir, 23811)
    assert session is not None
    assert session.pid == 23811
    assert session.session_id == "fc483ff8-db59-400e-9cd4-743a9c02c9d4"
    assert session.cwd == "/srv/demo/work/proj-a"
    assert session.version == "2.1.197"
    assert session.status == status and session.waiting_for == waiting_for
    assert session.path == config_dir / "sessions" / "23811.json"
    assert session_status(session) == status


def test_a_session_file_names_the_process_start_it_was_written_for(
    fixtures_dir: Path, config_dir: Path
) -> None:
    """Real Claude Code writes ``procStart``, its ``/proc/<pid>/stat`` start time (field 22,
    seen equal on 2.1.332 here): a file left by a process whose pid was reused names another."""
    shutil.copy(fixtures_dir / "real" / "claude" / "sessions_23811_idle.json",
                config_dir / "sessions" / "23811.json")  # fmt: skip
    session = read_session_file(config_dir, 23811)
    assert session is not None and session.proc_start == "52427"
    assert session.is_for_process(52427) and not session.is_for_process(52428)


def test_a_stale_session_file_of_a_reused_pid_is_not_followed(
    hub: object, home: Path, tmp_path: Path
) -> None:
    """A Claude killed before it removed ``sessions/<pid>.json``, its pid since taken by the
    tile's agent: the hub must not read that other session's transcript as this tile's."""
    from conftest import start_standin

    tile: Any = start_standin(hub, "a", cwd=tmp_path)
    hub.send("a", "own question").result(30)  # type: ignore[attr-defined]
    wait_until(lambda: tile.last_response() is not None, 15, what="a's own answer")
    own = Path(str(tile.transcript_path()))
    proc = tile.agent_process()
    sessions = Path(str(claude_kind.config_dir(tile, proc))) / "sessions" / f"{proc.pid}.json"
    foreign_id = "0f0f0f0f-0000-4000-8000-000000000001"
    foreign = own.with_name(f"{foreign_id}.jsonl")
    foreign.write_text(own.read_text().replace("own question", "FOREIGN"))
    data = json.loads(sessions.read_text())
    sessions.write_text(json.dumps({**data, "sessionId": foreign_id, "procStart": "1"}))
    assert tile.transcript_path() != str(foreign)
    found = tile.last_response()
    assert found is None or "FOREIGN" not in found.text


def test_an_environment_read_during_an_exec_is_not_kept(
    hub: object, home: Path, tmp_path: Path
) -> None:
    """The soak's early stops: a new source's environment, read while its launcher was still
    exec'ing (the kernel shows none then), was kept for the process (same pid, same start),
    so its config dir, sessions file and transcript were never found. Here the agent's first
    program runs with no environment at all, then execs the stand-in with one."""
    from madohub_nb.demo import standin_command

    config = tmp_path / "claude-config"
    launcher = tmp_path / "bin" / "claude"
    launcher.parent.mkdir()
    path = os.environ.get("PATH", "/usr/bin:/bin")
    launcher.write_text(
        "#!/bin/sh\nsleep 2\n"
        f"exec /usr/bin/env CLAUDE_CONFIG_DIR={config} HOME={home} PATH={path} TERM=xterm "
        f"MADOHUB_STANDIN_THINK_S=0.05 {standin_command('claude', persona='echo')}\n"
    )
    launcher.chmod(0o755)
    tile: Any = hub.tile(  # type: ignore[attr-defined]
        "a", agent="claude", command=f"env -i {launcher}", cwd=tmp_path, hooks=False
    )
    first = wait_until(tile.agent_process, 10, what="the launcher, named claude")
    assert claude_kind.config_dir(tile, first) is None  # no environment yet: nothing to find
    wait_until(lambda: tile.state == "idle", 20, what="the stand-in idle")
    assert tile.agent_process() == first  # the same process: exec kept its pid and start
    hub.send("a", "own question").result(30)  # type: ignore[attr-defined]
    found = wait_until(tile.transcript_path, 15, what="its transcript")
    assert Path(str(found)).is_relative_to(config)
    answer = wait_until(tile.last_response, 15, what="its answer")
    assert answer.method == "jsonl" and answer.text == "Done: own question"


def test_session_file_with_only_a_session_id_is_enough(config_dir: Path) -> None:
    (config_dir / "sessions" / "42.json").write_text('{"sessionId": "abc", "tmux": "main:@1.%3"}')
    session = read_session_file(config_dir, 42)
    assert session is not None
    assert (session.pid, session.session_id, session.tmux) == (42, "abc", "main:@1.%3")
    assert session.cwd is None and session.status is None
    assert session_status(session) == "unknown"


@pytest.mark.parametrize(
    "content",
    [
        '{"pid":23811,"sessionId":"fc483ff8-db59',  # half-written
        "not json at all",
        "[1, 2, 3]",
        '{"pid": 23811, "status": "idle"}',  # no sessionId
        '{"sessionId": 17}',
        "",
    ],
)
def test_unusable_session_files_read_as_none(config_dir: Path, content: str) -> None:
    (config_dir / "sessions" / "7.json").write_text(content)
    assert read_session_file(config_dir, 7) is None


def test_missing_session_file_or_config_dir_reads_as_none(config_dir: Path) -> None:
    assert read_session_file(config_dir, 99999) is None
    assert read_session_file(config_dir / "nowhere", 1) is None
    assert read_session_file(None, 1) is None
    assert session_status(None) == "unknown"


def test_unknown_status_value_maps_to_unknown(config_dir: Path) -> None:
    data = {"sessionId": "s", "status": "compacting"}
    (config_dir / "sessions" / "5.json").write_text(json.dumps(data))
    assert session_status(read_session_file(config_dir, 5)) == "unknown"


# --- Codex: home and open rollout file -----------------------------------------------


def test_codex_home_from_the_processes_environment(
    home: Path, tmp_path: Path, started: list[int]
) -> None:
    with_codex_home = _sleeper({"HOME": str(home), "CODEX_HOME": str(tmp_path / "ch")}, started)
    assert codex_home(LOCAL.environ(with_codex_home.pid, HOME_ENV)) == tmp_path / "ch"
    with_home = _sleeper({"HOME": str(tmp_path / "h")}, started)
    assert (
        codex_home(LOCAL.environ(with_home.pid, HOME_ENV), tmp_path / "fb")
        == tmp_path / "h" / ".codex"
    )
    bare = _sleeper({"PATH": "/usr/bin:/bin"}, started)
    assert codex_home(LOCAL.environ(bare.pid, HOME_ENV), tmp_path / "fb") == tmp_path / "fb"
    assert codex_home(LOCAL.environ(bare.pid, HOME_ENV)) is None


def _rollout(home: Path, name: str = "rollout-2026-11-29T23-04-07-01a2298d.jsonl") -> Path:
    path = home / ".codex" / "sessions" / "2026" / "11" / "29" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    return path


def test_rollout_file_held_open_by_codex_is_found(
    home: Path, bin_dir: Path, started: list[int]
) -> None:
    rollout = _rollout(home)
    other = home / "other.jsonl"
    proc = subprocess.Popen([bin_dir / "codex", other, rollout])
    started.append(proc.pid)
    codex = psutil.Process(proc.pid)
    found = wait_until(lambda: _open_rollout(codex.pid), what="the rollout to be open")
    assert found == rollout


def test_rollout_file_held_by_a_descendant_is_found(
    home: Path, bin_dir: Path, started: list[int]
) -> None:
    # Codex's TUI is node with a native codex child; the child writes the rollout.
    rollout = _rollout(home)
    parent = subprocess.Popen(["bash", "-c", f"{bin_dir / 'codex'} {rollout}; true"])
    started.append(parent.pid)
    found = wait_until(lambda: _open_rollout(parent.pid), what="rollout")
    assert found == rollout


def test_no_open_rollout_file_is_none(home: Path, bin_dir: Path, started: list[int]) -> None:
    not_a_rollout = home / "notes-rollout.jsonl"
    proc = subprocess.Popen([bin_dir / "codex", not_a_rollout])
    started.append(proc.pid)
    codex = psutil.Process(proc.pid)
    wait_until(
        lambda: any(f.path == str(not_a_rollout) for f in codex.open_files()),
        what="the other file to be open",
    )
    assert _open_rollout(codex.pid) is None
    assert newest_rollout([], Path("/home/u/.codex")) is None


def test_a_rollout_a_child_holds_outside_the_agents_sessions_is_not_its_answer(
    home: Path, tmp_path: Path, bin_dir: Path, started: list[int]
) -> None:
    """Any program Codex runs is in its tree: a tool's own ``rollout-*.jsonl`` (newer by
    name, anywhere else) must not win over the agent's file under ``$CODEX_HOME/sessions``."""
    rollout = _rollout(home)
    forged = tmp_path / "tool" / "sessions" / "rollout-2099-01-01T00-00-00-ffffffff.jsonl"
    forged.parent.mkdir(parents=True)
    forged.write_text("")
    parent = subprocess.Popen(
        ["bash", "-c", f"{bin_dir / 'sample'} {forged} & {bin_dir / 'codex'} {rollout}; true"]
    )
    started.append(parent.pid)
    both = lambda: len(LOCAL.open_files([parent.pid], ROLLOUT_GLOB)) == 2  # noqa: E731
    wait_until(both, what="both files open")
    assert _open_rollout(parent.pid) == rollout
    assert _open_rollout(parent.pid, tmp_path / "elsewhere") is None  # not under its home


@pytest.mark.parametrize(
    ("paths", "expected"),
    [
        # the newest by name (its time), whatever the order or the folder of each
        (["/h/.codex/sessions/2026/12/01/rollout-2026-12-01T10-00-00-b.jsonl",
          "/h/.codex/sessions/2026/11/30/rollout-2026-11-30T10-00-00-a.jsonl"],
         "/h/.codex/sessions/2026/12/01/rollout-2026-12-01T10-00-00-b.jsonl"),
        (["/h/.codex/sessions/../../tmp/rollout-2099-x.jsonl"], None),  # climbs out
        (["/h/.codex/sessions-old/rollout-2099-x.jsonl"], None),  # a look-alike folder
        (["/h/.codex/sessions/2026/rollout-2026-x.jsonl.bak"], None),  # not a rollout name
    ],
)  # fmt: skip
def test_newest_rollout_takes_only_the_agents_own_by_name(
    paths: list[str], expected: str | None
) -> None:
    assert newest_rollout(paths, "/h/.codex") == expected


@pytest.mark.parametrize(
    ("command", "kind"),
    [
        ("claude", "claude"),
        ("/opt/bin/codex --full-auto", "codex"),
        ("'/x y/claude.exe'", "claude"),
        ("sample-server --port 1", None),  # 'amp' inside a word is not Amp
        ("campaign", None),
        ("opencode", "opencode"),
        ("aider --model openai/fake-model", "aider"),
        ("raider", None),
        ("bash --norc", None),
        ("", None),
    ],
)
def test_the_kind_a_command_names_is_a_whole_word(command: str, kind: str | None) -> None:
    assert kind_from_command(command) == kind
