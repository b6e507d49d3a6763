"""The hook channel on a real Unix socket, fed by real hook-command processes.

Every hook here is ``io/hooks/command.py`` run as its own process (as an agent runs it), with
the environment the hub puts in a pane and the payloads real Claude Code wrote
(fixtures/real/claude/hooks_*.jsonl); bad input is sent by real socket clients. After
each bad input a good hook must still get through.
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import FIXTURES, wait_until

from madohub_nb.agents import hooks as agent_hooks
from madohub_nb.agents.kinds import claude as claude_kind
from madohub_nb.engine import Engine
from madohub_nb.io.hooks import command as hook_command
from madohub_nb.io.hooks.channel import HookChannel, HookEvent, HookLimits

PANE = "%7"
LIMITS = HookLimits(read_timeout_s=0.5, max_connections=16)
EVENT_KINDS = {"Stop": "stop", "Notification": "notification", "SessionStart": "session_start"}
WAIT_S = 10.0


@dataclass
class Hub:
    """A channel on a real engine loop, with what its callback received."""

    engine: Engine
    channel: HookChannel
    events: queue.Queue[HookEvent]
    token: str

    def env(self, token: str | None = None, pane: str = PANE) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MADOHUB_")}
        env.update(self.channel.env(token or self.token), TMUX_PANE=pane)
        return env

    def hook(
        self, kind: str, payload: bytes = b"{}", *, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        """Run the hook command as an agent does: payload on stdin."""
        return subprocess.run(
            [*hook_command.command_argv(), kind],
            input=payload,
            env=env or self.env(),
            capture_output=True,
            timeout=15,
        )

    def next_event(self, timeout_s: float = WAIT_S) -> HookEvent:
        return self.events.get(timeout=timeout_s)

    def no_event(self, wait_s: float = 0.3) -> None:
        with pytest.raises(queue.Empty):
            got = self.events.get(timeout=wait_s)
            pytest.fail(f"expected no event, got {got!r}")

    def send_raw(self, data: bytes) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(self.channel.socket_path)
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)

    def refused(self, reason: str, before: int) -> bool:
        return self.channel.counts[reason] > before

    def assert_still_serving(self) -> None:
        result = self.hook("stop", b'{"last_assistant_message": "still here"}')
        assert result.returncode == 0
        event = self.next_event()
        assert event.answer == "still here"


@pytest.fixture
def hub() -> Iterator[Hub]:
    engine = Engine("test-hooks")
    events: queue.Queue[HookEvent] = queue.Queue()
    channel = HookChannel(events.put, limits=LIMITS)
    engine.run_sync(channel.start(), timeout_s=10)
    token = channel.register(PANE, "claude")
    try:
        yield Hub(engine, channel, events, token)
    finally:
        engine.run_sync(channel.close(), timeout_s=10)
        engine.close()


def claude_payloads(fixtures: Path) -> list[tuple[str, dict[str, object]]]:
    out = []
    for path in sorted((fixtures / "real" / "claude").glob("hooks_*.jsonl")):
        for line in path.read_text().splitlines():
            payload = json.loads(line)
            if payload["hook_event_name"] in EVENT_KINDS:
                out.append((f"{path.stem}:{len(out)}", payload))
    return out


CLAUDE_PAYLOADS = claude_payloads(FIXTURES)


# --------------------------------------------------------------------------- accepted


@pytest.mark.parametrize(
    "payload", [p for _, p in CLAUDE_PAYLOADS], ids=[i for i, _ in CLAUDE_PAYLOADS]
)
def test_real_claude_payloads_arrive_parsed(hub: Hub, payload: dict[str, object]) -> None:
    kind = EVENT_KINDS[str(payload["hook_event_name"])]
    result = hub.hook(kind, json.dumps(payload).encode())
    assert (result.returncode, result.stdout) == (0, b"")
    event = hub.next_event()
    assert (event.pane, event.agent, event.kind, event.token) == (PANE, "claude", kind, hub.token)
    assert event.payload == payload
    assert event.answer == (payload.get("last_assistant_message") if kind == "stop" else None)
    assert event.message == (payload.get("message") if kind == "notification" else None)
    assert event.session_id == payload["session_id"]
    assert event.transcript_path == payload["transcript_path"]
    assert event.turn_id == payload.get("prompt_id")
    assert not event.truncated
    assert abs(event.received_at - time.time()) < 30
    assert event.peer_pid is not None and event.peer_pid > 0


def test_folder_is_0700_socket_0600_and_close_removes_them() -> None:
    engine = Engine("test-hooks-modes")
    channel = HookChannel(lambda e: None)
    try:
        engine.run_sync(channel.start(), timeout_s=10)
        folder, path = channel.folder, channel.socket_path
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        assert stat.S_ISSOCK(os.stat(path).st_mode)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert channel.serving
        engine.run_sync(channel.close(), timeout_s=10)
        assert not os.path.exists(folder)
        assert not channel.serving
    finally:
        engine.close()


def test_each_tile_gets_its_own_token_and_an_unregistered_one_is_refused(hub: Hub) -> None:
    other = hub.channel.register("%8", "codex")
    assert other != hub.token and len(other) >= 32
    hub.channel.unregister(other)
    before = hub.channel.counts["token"]
    hub.hook("stop", env=hub.env(other, pane="%8"))
    wait_until(lambda: hub.refused("token", before), WAIT_S, what="the token refusal")
    hub.no_event()
    hub.assert_still_serving()


def test_a_token_registered_before_its_pane_exists_counts_once_bound(hub: Hub) -> None:
    token = hub.channel.register(None, "claude")
    before = hub.channel.counts["pane"]
    hub.hook("stop", env=hub.env(token, pane="%9"))
    wait_until(lambda: hub.refused("pane", before), WAIT_S, what="the unbound refusal")
    hub.no_event()
    hub.channel.bind(token, "%9")
    hub.hook("stop", b'{"last_assistant_message": "bound"}', env=hub.env(token, pane="%9"))
    assert hub.next_event().answer == "bound"


def test_codex_notify_payload_comes_as_the_last_argument(hub: Hub) -> None:
    token = hub.channel.register("%4", "codex")
    payload = {
        "type": "agent-turn-complete",
        "thread-id": "t-1",
        "turn-id": "u-2",
        "cwd": "/w",
        "input-messages": ["hi"],
        "last-assistant-message": "codex says hi",
    }
    result = subprocess.run(
        [*hook_command.command_argv(), "stop", json.dumps(payload)],
        env=hub.env(token, pane="%4"),
        stdin=subprocess.DEVNULL,
        timeout=15,
    )
    assert result.returncode == 0
    event = hub.next_event()
    assert (event.agent, event.answer, event.session_id, event.turn_id) == (
        "codex",
        "codex says hi",
        "t-1",
        "u-2",
    )


def test_a_payload_over_the_cap_arrives_as_a_bare_signal(hub: Hub) -> None:
    big = json.dumps({"last_assistant_message": "x" * hook_command.MAX_PAYLOAD_BYTES}).encode()
    assert hub.hook("stop", big).returncode == 0
    event = hub.next_event()
    assert (event.kind, event.truncated, event.payload, event.answer) == ("stop", True, {}, None)


def test_payload_text_is_data_never_a_command(hub: Hub, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = f"$(touch {marker}); `touch {marker}`; touch {marker}"
    payload = {"last_assistant_message": evil, "message": evil, "command": f"touch {marker}"}
    hub.hook("stop", json.dumps(payload).encode())
    event = hub.next_event()
    assert event.answer == evil and event.payload == payload
    assert not marker.exists()


def test_a_listener_that_raises_does_not_break_the_channel() -> None:
    engine = Engine("test-hooks-listener")
    seen: queue.Queue[HookEvent] = queue.Queue()

    def listener(event: HookEvent) -> None:
        seen.put(event)
        raise RuntimeError("listener bug")

    channel = HookChannel(listener, limits=LIMITS)
    try:
        engine.run_sync(channel.start(), timeout_s=10)
        token = channel.register(PANE, "claude")
        env = dict(os.environ, TMUX_PANE=PANE, **channel.env(token))
        for answer in ("one", "two"):
            subprocess.run(
                [*hook_command.command_argv(), "stop"],
                input=json.dumps({"last_assistant_message": answer}).encode(),
                env=env,
                timeout=15,
            )
            assert seen.get(timeout=WAIT_S).answer == answer
    finally:
        engine.run_sync(channel.close(), timeout_s=10)
        engine.close()


def test_a_hook_in_a_real_tmux_pane_counts_only_from_the_pane_its_token_is_for(
    hub: Hub, tmux_socket: str, tmp_path: Path
) -> None:
    """tmux sets ``$TMUX_PANE``; the same token from another pane is refused."""
    stop = next(p for _, p in CLAUDE_PAYLOADS if p["hook_event_name"] == "Stop")
    payload_file = tmp_path / "stop.json"
    payload_file.write_text(json.dumps(stop))
    token = hub.channel.register(None, "claude")
    pane_env = [f"{k}={v}" for k, v in hub.channel.env(token).items()]
    env_args = [arg for kv in pane_env for arg in ("-e", kv)]

    def tmux(*args: str) -> str:
        out = subprocess.run(["tmux", "-L", tmux_socket, *args], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    pane_a = tmux("new-session", "-d", "-s", "h", "-P", "-F", "#{pane_id}", *env_args, "sh")
    pane_b = tmux("new-window", "-t", "h", "-P", "-F", "#{pane_id}", *env_args, "sh")
    hub.channel.bind(token, pane_a)
    line = agent_hooks.shell_command(hook_command.command_argv(), "stop")
    line += f" < {shlex.quote(str(payload_file))}"
    tmux("send-keys", "-t", pane_a, "-l", line)
    tmux("send-keys", "-t", pane_a, "Enter")
    event = hub.next_event()
    assert (event.pane, event.answer) == (pane_a, stop["last_assistant_message"])
    before = hub.channel.counts["pane"]
    tmux("send-keys", "-t", pane_b, "-l", line)
    tmux("send-keys", "-t", pane_b, "Enter")
    wait_until(lambda: hub.refused("pane", before), WAIT_S, what="the other pane's refusal")
    hub.no_event()


# --------------------------------------------------------------------------- bad input


def header(hub: Hub, **over: object) -> dict[str, object]:
    h: dict[str, object] = {
        "v": 1,
        "token": hub.token,
        "pane": PANE,
        "event": "stop",
        "nonce": os.urandom(16).hex(),
        "sent_at": time.time(),
        "size": 2,
        "truncated": False,
    }
    h.update(over)
    return h


def framed(h: dict[str, object], payload: bytes) -> bytes:
    return json.dumps(h).encode() + b"\n" + payload


BAD_RAW = {
    "header not JSON": ("malformed", lambda hub: b"{not json\n{}"),
    "header a list": ("malformed", lambda hub: b"[1, 2]\n{}"),
    "header missing token": (
        "malformed",
        lambda hub: framed({k: v for k, v in header(hub).items() if k != "token"}, b"{}"),
    ),
    "wrong protocol version": ("malformed", lambda hub: framed(header(hub, v=99), b"{}")),
    "negative size": ("malformed", lambda hub: framed(header(hub, size=-1), b"{}")),
    "header over the cap": (
        "oversize",
        lambda hub: b"{" + b" " * (2 * hook_command.MAX_HEADER_BYTES),
    ),
    "declared payload over the cap": (
        "oversize",
        lambda hub: framed(header(hub, size=hook_command.MAX_PAYLOAD_BYTES + 1), b"{}"),
    ),
    "unknown token": ("token", lambda hub: framed(header(hub, token="guessed"), b"{}")),
    "wrong pane": ("pane", lambda hub: framed(header(hub, pane="%99"), b"{}")),
    "unknown event kind": ("kind", lambda hub: framed(header(hub, event="run_command"), b"{}")),
    "stale message": ("stale", lambda hub: framed(header(hub, sent_at=time.time() - 3600), b"{}")),
    "payload not JSON": ("payload", lambda hub: framed(header(hub, size=8), b"not json")),
    "payload a JSON list": ("payload", lambda hub: framed(header(hub, size=2), b"[]")),
    "payload nested to blow the stack": (
        "payload",
        lambda hub: framed(header(hub, size=200_000), b"[" * 200_000),
    ),
    "payload shorter than declared": (
        "incomplete",
        lambda hub: framed(header(hub, size=100), b"{}"),
    ),
}


@pytest.mark.parametrize("case", list(BAD_RAW))
def test_bad_input_is_ignored_and_the_channel_keeps_serving(hub: Hub, case: str) -> None:
    reason, make = BAD_RAW[case]
    before = hub.channel.counts[reason]
    hub.send_raw(make(hub))
    wait_until(lambda: hub.refused(reason, before), WAIT_S, what=f"refusal {reason!r}")
    hub.no_event()
    assert hub.channel.counts["accepted"] == 0
    hub.assert_still_serving()


@pytest.mark.parametrize(
    ("case", "reason"),
    [("unknown token", "token"), ("wrong pane", "pane"), ("malformed payload", "payload")],
)
def test_bad_hooks_from_real_hook_processes_are_ignored(hub: Hub, case: str, reason: str) -> None:
    env, payload = hub.env(), b"{}"
    if case == "unknown token":
        env = hub.env("not-a-token")
    elif case == "wrong pane":
        env = hub.env(pane="%1")
    else:
        payload = b'{"last_assistant_message": '  # cut short
    before = hub.channel.counts[reason]
    result = hub.hook("stop", payload, env=env)
    assert (result.returncode, result.stdout) == (0, b"")
    wait_until(lambda: hub.refused(reason, before), WAIT_S, what=f"refusal {reason!r}")
    hub.no_event()
    hub.assert_still_serving()


def test_a_replayed_message_is_ignored(hub: Hub) -> None:
    message = hook_command.build_message(
        token=hub.token, pane=PANE, kind="stop", payload=b'{"last_assistant_message": "once"}'
    )
    hub.send_raw(message)
    assert hub.next_event().answer == "once"
    before = hub.channel.counts["replay"]
    hub.send_raw(message)
    wait_until(lambda: hub.refused("replay", before), WAIT_S, what="the replay refusal")
    hub.no_event()
    hub.assert_still_serving()


def test_a_client_that_never_writes_is_dropped_after_the_timeout(hub: Hub) -> None:
    before = hub.channel.counts["timeout"]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(hub.channel.socket_path)
        started = time.monotonic()
        sock.settimeout(10)
        assert sock.recv(1) == b""  # the hub hangs up on it
        waited = time.monotonic() - started
    assert LIMITS.read_timeout_s * 0.8 <= waited < LIMITS.read_timeout_s + 3
    assert hub.refused("timeout", before)
    hub.assert_still_serving()


def test_a_flood_of_junk_leaves_the_channel_up_for_a_good_hook(hub: Hub) -> None:
    """2,000 local connections: most hold a slot and say nothing, some write junk."""
    socks: list[socket.socket] = []
    failed = 0
    try:
        for i in range(2000):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(2)
            try:
                sock.connect(hub.channel.socket_path)
                if i % 3 == 0:
                    sock.sendall(os.urandom(64))
            except OSError:
                failed += 1
            socks.append(sock)
        assert failed < 2000, "the channel took no connection at all"
        assert hub.channel.counts["busy"] > 0, "the concurrency bound never applied"
    finally:
        for sock in socks:
            sock.close()
    hub.no_event()
    assert hub.channel.serving
    # Slots free up as the hub sees the junk connections close.
    wait_until(lambda: hub.channel.reading == 0, WAIT_S, what="the junk connections to end")
    hub.assert_still_serving()


# --------------------------------------------------------------------------- the hook command


def test_the_hook_command_exits_zero_at_once_without_a_hub(tmp_path: Path) -> None:
    env = dict(os.environ, MADOHUB_HOOK_TOKEN="t", MADOHUB_HOOK_SOCKET=str(tmp_path / "none"))
    for environ in (env, {k: v for k, v in os.environ.items() if not k.startswith("MADOHUB_")}):
        started = time.monotonic()
        result = subprocess.run(
            [*hook_command.command_argv(), "stop"], input=b"{}", env=environ, capture_output=True
        )
        assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
        assert time.monotonic() - started < 3


def test_the_hook_command_does_not_wait_for_a_stdin_that_never_closes(hub: Hub) -> None:
    proc = subprocess.Popen(
        [*hook_command.command_argv(), "stop"], stdin=subprocess.PIPE, env=hub.env()
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(b'{"last_assistant_message": "open stdin"}')
        proc.stdin.flush()
        started = time.monotonic()
        assert proc.wait(timeout=hook_command.STDIN_TIMEOUT_S + 5) == 0
        assert time.monotonic() - started < hook_command.STDIN_TIMEOUT_S + 3
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()
    assert hub.next_event().answer == "open stdin"


def test_the_hook_command_runs_as_a_module_too(hub: Hub) -> None:
    repo = str(Path(__file__).resolve().parent.parent)
    env = dict(hub.env(), PYTHONPATH=repo)
    result = subprocess.run(
        [sys.executable, "-m", "madohub_nb.io.hooks.command", "notification"],
        input=b'{"message": "Claude needs your permission"}',
        env=env,
        timeout=30,
    )
    assert result.returncode == 0
    event = hub.next_event(timeout_s=30)
    assert (event.kind, event.message) == ("notification", "Claude needs your permission")


# --------------------------------------------------------------------------- agents' setups


def test_claude_settings_hooks_run_through_a_shell_reach_the_channel(hub: Hub) -> None:
    """Claude runs each ``command`` with ``sh -c`` and the payload on stdin."""
    setup = agent_hooks.hook_setup("claude", hook_command.command_argv(), "/unused")
    assert setup is not None and setup.args[0] == "--settings"
    settings = json.loads(setup.args[1])
    for name, kind in EVENT_KINDS.items():
        (group,) = settings["hooks"][name]
        (hook,) = group["hooks"]
        assert hook["type"] == "command" and hook["timeout"] == claude_kind.HOOK_TIMEOUT_S
        payload = {"hook_event_name": name, "last_assistant_message": f"via {name}"}
        subprocess.run(
            ["sh", "-c", hook["command"]],
            input=json.dumps(payload).encode(),
            env=hub.env(),
            timeout=15,
        )
        event = hub.next_event()
        assert event.kind == kind and event.payload == payload


def test_codex_notify_override_is_toml_and_runs(hub: Hub) -> None:
    token = hub.channel.register("%5", "codex")
    setup = agent_hooks.hook_setup("codex", hook_command.command_argv(), "/unused")
    assert setup is not None and setup.args[0] == "-c"
    key, _, value = setup.args[1].partition("=")
    try:
        import tomllib  # Python 3.11+

        notify = tomllib.loads(setup.args[1])["notify"]
    except ModuleNotFoundError:  # a TOML array of basic strings is JSON too
        notify = json.loads(value)
    assert key == "notify"
    assert notify == [*hook_command.command_argv(), "stop"]
    payload = {"type": "agent-turn-complete", "last-assistant-message": "toml ok"}
    subprocess.run([*notify, json.dumps(payload)], env=hub.env(token, pane="%5"), timeout=15)
    assert hub.next_event().answer == "toml ok"


@pytest.mark.parametrize("agent", agent_hooks.HOOK_AGENTS)
def test_every_setup_keeps_to_the_private_folder(agent: str) -> None:
    private = "/run/hub/tile-1"
    setup = agent_hooks.hook_setup(agent, ["/py", "-I", "-S", "/pkg/hookcall.py"], private)
    assert setup is not None and setup.agent == agent
    assert setup.kinds and set(setup.kinds) <= set(agent_hooks.HOOK_KINDS)
    assert agent_hooks.STOP in setup.kinds
    for path in setup.files:
        assert path.startswith(private + "/")
    for value in setup.env.values():  # a path there, or inline config naming one
        assert value.startswith(private + "/") or f"file://{private}/" in value
    text = "".join(setup.args) + "".join(setup.files.values())
    assert "/pkg/hookcall.py" in text
    assert setup.how


def test_agents_without_hooks_have_no_setup() -> None:
    assert agent_hooks.hook_setup("aider", ["x"], "/d") is None
    assert "no hooks" in agent_hooks.opt_in_snippet("aider", ["x"])


@pytest.mark.parametrize("agent", agent_hooks.HOOK_AGENTS)
def test_opt_in_snippet_names_the_command_and_the_pane_variables(agent: str) -> None:
    base = ["/py", "-I", "-S", "/pkg/hookcall.py"]
    env = {"MADOHUB_HOOK_TOKEN": "tok123", "MADOHUB_HOOK_SOCKET": "/tmp/x/hooks.sock"}
    text = agent_hooks.opt_in_snippet(agent, base, env)
    assert "/pkg/hookcall.py" in text
    assert "MADOHUB_HOOK_TOKEN=tok123" in text and "MADOHUB_HOOK_SOCKET=/tmp/x/hooks.sock" in text


def test_opencode_plugin_and_pi_extension_send_through_node(hub: Hub, tmp_path: Path) -> None:
    """The JavaScript the hub writes, run by a real node, reaches the channel."""
    node = subprocess.run(["sh", "-c", "command -v node"], capture_output=True, text=True)
    if node.returncode != 0:
        pytest.fail("node is needed for this test (the agents that load these files run on it)")
    base = hook_command.command_argv()
    oc = agent_hooks.hook_setup("opencode", base, str(tmp_path / "oc"))
    pi = agent_hooks.hook_setup("pi", base, str(tmp_path / "pi"))
    assert oc is not None and pi is not None
    (oc_text,) = oc.files.values()
    (pi_text,) = pi.files.values()
    (tmp_path / "plugin.mjs").write_text(oc_text)
    (tmp_path / "ext.mjs").write_text(pi_text)
    driver = tmp_path / "drive.mjs"
    driver.write_text(
        'import { MadohubHooks } from "./plugin.mjs";\n'
        'import ext from "./ext.mjs";\n'
        "const hooks = await MadohubHooks({});\n"
        'await hooks.event({ event: { type: "session.idle", properties: { sessionID: "ses_1" } } });\n'
        "const handlers = {};\n"
        "ext({ on: (name, fn) => { handlers[name] = fn; } });\n"
        'await handlers["agent_end"]({ messages: [{ role: "user", content: "q" },'
        ' { role: "assistant", content: [{ type: "text", text: "pi answer" }] }] },'
        ' { sessionManager: { getSessionFile: () => "/s.jsonl" } });\n'
    )
    oc_token = hub.channel.register("%11", "opencode")
    result = subprocess.run(
        ["node", str(driver)], env=hub.env(oc_token, pane="%11"), timeout=30, capture_output=True
    )
    assert result.returncode == 0, result.stderr
    events = sorted(
        (hub.next_event(), hub.next_event()), key=lambda e: e.payload["hook_event_name"]
    )
    assert [e.payload["hook_event_name"] for e in events] == ["agent_end", "session.idle"]
    assert events[0].answer == "pi answer" and events[0].transcript_path == "/s.jsonl"
    assert events[1].session_id == "ses_1" and events[1].answer is None


def test_amp_plugin_sends_agent_end_with_its_answer_through_node(hub: Hub, tmp_path: Path) -> None:
    """Amp's plugin, run by a real node with an ``amp.on`` as Amp's plugin API has it, sends
    the turn's last assistant text, its thread and message ids, and answers ``done``."""
    node = subprocess.run(["sh", "-c", "command -v node"], capture_output=True, text=True)
    if node.returncode != 0:
        pytest.fail("node is needed for this test (Amp runs its plugins on Bun, node-compatible)")
    setup = agent_hooks.hook_setup("amp", hook_command.command_argv(), str(tmp_path / "amp"))
    assert setup is not None and setup.private_home
    ((path, text),) = setup.files.items()
    assert path == f"{setup.env['XDG_CONFIG_HOME']}/amp/plugins/madohub.ts"
    (tmp_path / "plugin.mjs").write_text(text)
    driver = tmp_path / "drive.mjs"
    driver.write_text(
        'import plugin from "./plugin.mjs";\n'
        "const handlers = {};\n"
        "plugin({ on: (name, fn) => { handlers[name] = fn; } });\n"
        'const result = await handlers["agent.end"]({ thread: { id: "T-1" }, message: "q",'
        ' id: "M-1", status: "done", messages: [{ role: "user", content: [{ type: "text",'
        ' text: "q" }] }, { role: "assistant", content: [{ type: "text", text: "amp " },'
        ' { type: "thinking", thinking: "no" }, { type: "text", text: "answer" }] }] }, {});\n'
        'if (result.action !== "done") process.exit(3);\n'
    )
    token = hub.channel.register("%12", "amp")
    result = subprocess.run(
        ["node", str(driver)], env=hub.env(token, pane="%12"), timeout=30, capture_output=True
    )
    assert result.returncode == 0, result.stderr
    event = hub.next_event()
    assert (event.kind, event.agent, event.payload["hook_event_name"]) == (
        "stop", "amp", "agent.end",
    )  # fmt: skip
    assert (event.answer, event.session_id, event.turn_id) == ("amp answer", "T-1", "M-1")


def test_describe_reads_each_agents_payload() -> None:
    d = agent_hooks.describe
    assert d("gemini", "stop", {"prompt_response": "a a", "transcript_path": "/t"}) == (
        agent_hooks.HookFacts(transcript_path="/t")
    )
    copilot = d("copilot", "stop", {"sessionId": "s", "transcriptPath": "/e.jsonl"})
    assert (copilot.session_id, copilot.transcript_path, copilot.answer) == ("s", "/e.jsonl", None)
    assert (
        d("claude", "notification", {"message": "m", "last_assistant_message": "x"}).answer is None
    )
    assert d("claude", "stop", {"last_assistant_message": ["not", "text"]}).answer is None


def test_hook_command_argv_is_isolated_and_quoted() -> None:
    argv = hook_command.command_argv("/opt/py thon/bin/python")
    assert argv[:3] == ["/opt/py thon/bin/python", "-I", "-S"]
    assert shlex.split(agent_hooks.shell_command(argv, "stop")) == [*argv, "stop"]
