"""Stand-in Codex CLI: a process named ``codex`` that looks and files like Codex 0.171.0.

It draws the Codex TUI (``fixtures/real/screens/codex_0*.txt``): history at
the top, the composer ``›`` pinned to the bottom, ``• Working (Ns • esc to
interrupt)`` while busy. It has Codex's paste-burst quirk (REAL-AGENTS.md): an
Enter that follows typed text within 0.3 s inserts a newline instead of
submitting, so routers must pause before Enter. It writes a rollout file with
the real record shapes (``fixtures/real/codex/codex_rollout_tui.jsonl``) and
keeps it open while running, as the real one does. No network.

As the real one, ``codex app-server --listen unix://PATH`` serves the app-server protocol
(the scripted :mod:`madohub_nb.testing.fake_codex_app_server`; a turn takes
``$MADOHUB_STANDIN_THINK_S``), and ``codex --remote unix://PATH`` is that server's TUI
(:class:`RemoteCodexStandin`): it starts the thread, shows its turns (prompts from any
client), asks the approvals the server asks (``y`` accepts, ``n`` or Escape cancels) and
stays up, saying so, when the server is gone, as Codex 0.171.0 does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import secrets
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Final

from . import personas
from .standin_tui import (
    AgentStandin,
    Key,
    Turn,
    agent_home,
    build_parser,
    indent_rows,
    iso_utc,
    launch,
    plan_turn,
    style,
)

VERSION: Final = "0.171.0"
PASTE_BURST_S: Final = 0.3
"""An Enter this soon after typed text is part of a paste burst: it inserts a newline."""

CONTEXT_WINDOW: Final = 258400
_DIM = "2"


def codex_home(env: dict[str, str] | None = None) -> Path:
    """``$CODEX_HOME``, else ``$HOME/.codex``."""
    return agent_home("CODEX_HOME", ".codex", env)


def uuid7() -> str:
    """A time-ordered UUID (version 7), the kind Codex uses for sessions and turns."""
    ms = int(time.time() * 1000)
    rand = int.from_bytes(secrets.token_bytes(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | (rand >> 68 & 0xFFF) << 64
    value |= 0b10 << 62 | rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


def _usage(total_in: int, total_out: int) -> dict[str, int]:
    return {
        "input_tokens": total_in,
        "cached_input_tokens": 0,
        "cache_write_input_tokens": 0,
        "output_tokens": total_out,
        "reasoning_output_tokens": 0,
        "total_tokens": total_in + total_out,
    }


class CodexRollout:
    """The rollout file of one Codex session, created at the first prompt and kept open."""

    def __init__(self, home: Path, cwd: str, persona: str) -> None:
        self.session_id = uuid7()
        self.started = time.time()
        self.cwd = cwd
        self.model = f"standin-{persona}"
        local = datetime.fromtimestamp(self.started)
        self.path = (
            home
            / "sessions"
            / local.strftime("%Y/%m/%d")
            / f"rollout-{local.strftime('%Y-%m-%dT%H-%M-%S')}-{self.session_id}.jsonl"
        )
        self._file: IO[str] | None = None
        self._ordinal = 0
        self._history = 0
        self._inputs = 0
        self._tokens_in = 0
        self._tokens_out = 0

    def _write(
        self, kind: str, payload: dict[str, Any], metadata: dict[str, Any] | None = None
    ) -> None:
        if self._file is None:
            self._open()
        assert self._file is not None
        record: dict[str, Any] = {
            "timestamp": iso_utc(),
            "ordinal": self._ordinal,
            "type": kind,
            "payload": payload,
        }
        if metadata is not None:
            record["metadata"] = metadata
        self._ordinal += 1
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")
        self._write(
            "session_meta",
            {
                "account_scoped": False,
                "session_id": self.session_id,
                "id": self.session_id,
                "timestamp": iso_utc(self.started),
                "cwd": self.cwd,
                "runtime_workspace_roots": [self.cwd],
                "originator": "codex-tui",
                "cli_version": VERSION,
                "source": "cli",
                "thread_source": "user",
                "model_provider": "standin",
                "base_instructions": {"text": "You are a stand-in for the Codex CLI (madohub_nb)."},
                "history_mode": "paginated",
                "context_window": {"window_id": uuid7()},
                "git": {},
            },
        )

    def _message(self, role: str, text: str, turn_id: str, kind: str, provenance: str) -> None:
        message_id = f"msg_{uuid7()}"
        self._history += 1
        self._write(
            "response_item",
            {
                "type": "message",
                "id": message_id,
                "role": role,
                "content": [{"type": "input_text", "text": text}],
                "internal_chat_message_metadata_passthrough": {
                    "turn_id": turn_id,
                    "create_time": time.time(),
                    "content_item_kinds": [kind],
                    "content_item_metadata": [{"provenance": {"type": provenance}}],
                },
            },
            {
                "history_sequence": self._history,
                "sampled_through_sequence": 0,
                "client_authored": False,
                "model_search_state": "unused",
            },
        )

    def _settings(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "model_provider_id": "standin",
            "approval_policy": "on-request",
            "approvals_reviewer": "user",
            "requested_approvals_reviewer": "user",
            "permission_profile": {"type": "managed", "network": "restricted"},
            "active_permission_profile": {"id": ":workspace"},
            "cwd": self.cwd,
            "runtime_workspace_roots": [self.cwd],
            "collaboration_mode": {"mode": "default"},
            "disabled_plugin_ids": [],
        }

    def turn_started(self, prompt: str) -> str:
        """The records of a submitted prompt; returns the turn id."""
        turn_id = uuid7()
        first = self._file is None
        self._write(
            "event_msg",
            {
                "type": "thread_settings_applied",
                "thread_id": self.session_id,
                "thread_settings": self._settings(),
            },
        )
        self._write(
            "event_msg",
            {
                "type": "task_started",
                "turn_attribution": {
                    "turn_id": turn_id,
                    "turn_trigger": "user",
                    "parent_turn_id": None,
                    "initiating_agent_path": None,
                    "root_turn_id": turn_id,
                },
                "turn_id": turn_id,
                "root_turn_id": turn_id,
                "started_at": int(time.time()),
                "model_context_window": CONTEXT_WINDOW,
                "collaboration_mode_kind": "default",
            },
        )
        if first:
            self._message(
                "developer",
                "<permissions instructions>stand-in</permissions instructions>",
                turn_id,
                "permissions.instructions",
                "harness",
            )
            self._message(
                "user",
                f"<environment_context>\n  <cwd>{self.cwd}</cwd>\n  <shell>bash</shell>\n</environment_context>",
                turn_id,
                "environments.environment_context",
                "harness",
            )
            self._write(
                "world_state", {"full": True, "state": {"model": self.model, "agents_md": {}}}
            )
        self._write(
            "turn_context",
            {
                "turn_id": turn_id,
                "root_turn_id": turn_id,
                "disabled_plugin_ids": [],
                "cwd": self.cwd,
                "approval_policy": "on-request",
                "approvals_reviewer": "user",
                "permission_profile": {"type": "managed", "network": "restricted"},
                "active_permission_profile": {"id": ":workspace"},
                "model": self.model,
                "collaboration_mode": {"mode": "default", "settings": {"model": self.model}},
                "multi_agent_version": "v1",
                "realtime_active": False,
                "summary": "none",
                "sandbox_policy": {"type": "workspace-write", "network_access": False},
                "file_system_sandbox_policy": {"kind": "restricted", "entries": []},
            },
        )
        self._message("user", prompt, turn_id, "user.text", "user")
        now_ms = int(time.time() * 1000)
        user_message = {
            "type": "UserMessage",
            "id": uuid7(),
            "client_id": str(uuid.uuid4()),
            "content": [{"type": "text", "text": prompt, "text_elements": []}],
        }
        self._item_completed(turn_id, user_message, now_ms, now_ms)
        return turn_id

    def _item_completed(
        self, turn_id: str, item: dict[str, Any], started_ms: int, completed_ms: int
    ) -> None:
        """The event that says a message of the turn is final."""
        self._write(
            "event_msg",
            {
                "type": "item_completed",
                "thread_id": self.session_id,
                "turn_id": turn_id,
                "item": item,
                "started_at_ms": started_ms,
                "completed_at_ms": completed_ms,
            },
        )

    def turn_completed(self, turn_id: str, text: str, started: float) -> None:
        """The answer and the ``task_complete`` end-of-turn marker."""
        message_id = f"msg_standin_{uuid.uuid4().hex[:16]}"
        now = time.time()
        agent_message = {
            "type": "AgentMessage",
            "id": message_id,
            "content": [{"type": "Text", "text": text}],
        }
        self._item_completed(turn_id, agent_message, int(started * 1000), int(now * 1000))
        self._history += 1
        self._write(
            "response_item",
            {
                "type": "message",
                "status": "completed",
                "id": message_id,
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
                "internal_chat_message_metadata_passthrough": {
                    "turn_id": turn_id,
                    "content_item_kinds": ["unknown"],
                },
            },
            {
                "history_sequence": self._history,
                "sampled_through_sequence": self._history - 1,
                "client_authored": False,
                "model_search_state": "unused",
            },
        )
        turn_in, turn_out = 10, max(1, len(text) // 4)
        self._tokens_in += turn_in
        self._tokens_out += turn_out
        self._write(
            "token_usage_record",
            {
                "thread_id": self.session_id,
                "turn_id": turn_id,
                "session_id": self.session_id,
                "root_turn_id": turn_id,
                "response_id": f"resp_standin_{uuid.uuid4().hex[:16]}",
                "usage": _usage(turn_in, turn_out),
                "turn_token_usage": _usage(turn_in, turn_out),
                "thread_token_usage": _usage(self._tokens_in, self._tokens_out),
            },
        )
        self._write(
            "event_msg",
            {
                "type": "token_count",
                "info": {
                    "total_token_usage": _usage(self._tokens_in, self._tokens_out),
                    "last_token_usage": _usage(turn_in, turn_out),
                    "last_usage_includes_reasoning": False,
                    "model_context_window": CONTEXT_WINDOW,
                },
                "rate_limits": None,
            },
        )
        self._write(
            "event_msg",
            {
                "type": "task_complete",
                "root_turn_id": turn_id,
                "turn_id": turn_id,
                "last_agent_message": text,
                "started_at": int(started),
                "completed_at": int(now),
                "duration_ms": int((now - started) * 1000),
                "time_to_first_token_ms": int((now - started) * 1000),
            },
        )

    def turn_aborted(self, turn_id: str) -> None:
        self._write(
            "event_msg", {"type": "turn_aborted", "turn_id": turn_id, "reason": "interrupted"}
        )

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


@dataclass
class _Turn(Turn):
    turn_id: str
    started_wall: float


def _codex_paste_label(n: int, text: str) -> str | None:
    return f"[Pasted Content {len(text)} chars]" if len(text) > 1000 else None


def _worked_for(seconds: float) -> str:
    if seconds < 1:
        return "<1s"
    if seconds < 60:
        return f"{int(seconds)}s"
    return f"{int(seconds) // 60}m {int(seconds) % 60:02d}s"


class CodexStandin(AgentStandin[_Turn]):
    """The stand-in Codex TUI."""

    def __init__(
        self, persona: str, think_s: float, cwd: str, home: Path, notify: list[str] | None = None
    ) -> None:
        super().__init__(persona, think_s, cwd, paste_label=_codex_paste_label)
        self.notify = notify or []
        """``-c notify=[...]``: run once per finished turn, its JSON as the last argument."""
        self.rollout = CodexRollout(home, cwd, persona)
        self.history: list[tuple[str, str]] = []
        self.last_typed = float("-inf")

    def stop(self) -> None:
        self.rollout.close()

    def farewell(self) -> str:
        if self.turns == 0:
            return ""
        return f"To continue this session, run codex resume {self.rollout.session_id}\r\n"

    # Keys -----------------------------------------------------------------
    def on_key(self, key: Key, now: float) -> None:
        super().on_key(key, now)
        if key.name in ("text", "paste"):
            self.last_typed = now

    def on_enter(self, now: float) -> None:
        if self.input.is_blank():
            return
        if now - self.last_typed < PASTE_BURST_S:
            # Codex's paste-burst detection (REAL-AGENTS.md): Enter right after text is a newline.
            self.input.insert("\n")
            return
        prompt = self.input.text.strip()
        self.input.clear()
        if self.state == "busy":
            self.queued.append(prompt)
        else:
            self._submit(prompt, now)

    # Turns ----------------------------------------------------------------
    def _submit(self, prompt: str, now: float) -> None:
        self.turns += 1
        self.history.append(("prompt", prompt))
        turn = _Turn(
            prompt=prompt,
            started=now,
            due=now + plan_turn(prompt).think_s(self.think_s),
            turn_id=self.rollout.turn_started(prompt),
            started_wall=time.time(),
        )
        self.begin_turn(turn, now)

    def on_turn_due(self, now: float) -> None:
        turn = self.turn
        assert turn is not None
        text = personas.reply(self.persona, turn.prompt, self.turns)
        self.rollout.turn_completed(turn.turn_id, text, turn.started_wall)
        if self.notify and "[[nohook]]" not in turn.prompt:
            payload = {
                "type": "agent-turn-complete",
                "thread-id": self.rollout.session_id,
                "turn-id": turn.turn_id,
                "cwd": self.cwd,
                "input-messages": [turn.prompt],
                "last-assistant-message": text,
            }
            _notify(self.notify, payload, self.cwd)
        self.history.append(("answer", text))
        self.history.append(
            ("worked", f"Worked for {_worked_for(now - turn.started)} • {datetime.now():%H:%M}")
        )
        self.turn = None
        self.state = "idle"
        if self.queued:
            self._submit(self.take_queued(), now)

    def interrupt(self) -> None:
        if self.turn is not None:
            self.rollout.turn_aborted(self.turn.turn_id)
        self.history.append(
            ("note", "Conversation interrupted - tell the model what to do differently.")
        )
        super().interrupt()

    # Screen ---------------------------------------------------------------
    def conversation_rows(self, cols: int) -> list[str]:
        rows = [
            "",
            "  " + style("38;5;75", ">_ ") + style("1", "OpenAI Codex") + f" (v{VERSION})",
            "     " + style(_DIM, self.cwd),
            "",
            "",
        ]
        for kind, text in self.history:
            if kind == "prompt":
                rows += indent_rows(text, cols, "› ", "  ") + ["", ""]
            elif kind == "answer":
                rows += indent_rows(text, cols, "• ", "  ") + [""]
            elif kind == "worked":
                rows += [style(_DIM, "  " + text), "", ""]
            else:
                rows += indent_rows(text, cols, "■ ", "  ") + [""]
        return rows

    def frame(self) -> list[str]:
        cols, lines = self.painter.size()
        top = self.conversation_rows(cols)
        bottom: list[str] = []
        if self.state == "busy" and self.turn is not None:
            secs = int(time.monotonic() - self.turn.started)
            # The word shimmers in the real TUI; alternating its weight keeps a busy pane talking.
            word = style("1" if self.spin % 2 else _DIM, "Working")
            bottom += [f"• {word} ({secs}s • esc to interrupt)", ""]
            for q in self.queued:
                bottom += indent_rows(q, cols, "  ↳ ", "    ")
            bottom.append("")
        if self.input.parts:
            composer = self.prompt_rows(cols, "› ")[-max(3, lines // 3) :]
            footer = ""
        else:
            composer = ["› " + style(_DIM, "Ask Codex to do anything")]
            footer = "  ← for agents · ? for shortcuts"
            if self.quit_hint_until:
                footer = "  ctrl + c again to quit"
        bottom += composer + ["", f"  {self.rollout.model} default · {self.cwd}", footer]
        room = max(lines - len(bottom), 0)
        top = top[-room:] if room else []
        return top + [""] * (room - len(top)) + bottom


_notified: list[subprocess.Popen[bytes]] = []


def _notify(argv: list[str], payload: dict[str, Any], cwd: str) -> None:
    """Run the ``notify`` program as Codex does (not waited for)."""
    try:
        _notified.append(
            subprocess.Popen(
                [*argv, json.dumps(payload)], cwd=cwd, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        )  # fmt: skip
    except OSError:
        pass
    _notified[:] = [p for p in _notified if p.poll() is None]


def read_notify(overrides: list[str] | None) -> list[str]:
    """``notify`` from ``-c key=value`` overrides (a TOML array of strings; JSON strings are
    TOML strings, as madohub_nb writes them); other keys are taken and ignored."""
    for item in overrides or ():
        key, _, value = item.partition("=")
        if key.strip() == "notify":
            try:
                argv = json.loads(value)
            except ValueError:
                raise SystemExit(f"-c notify=: not an array of strings: {value!r}") from None
            if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
                return argv
            raise SystemExit(f"-c notify=: not an array of strings: {value!r}")
    return []


APPROVAL_QUESTION: Final = "Would you like to run the following command?"
NO_SERVER_ENV: Final = "MADOHUB_STANDIN_NO_APP_SERVER"
"""Set: ``codex app-server`` exits at once (a server that fails to start, for tests)."""


class RemoteCodexStandin(CodexStandin):
    """``codex --remote unix://PATH``: the TUI of an app-server, a WebSocket client of it.

    Prompts typed here go in with ``turn/start`` (queued here while a turn runs, sent when
    it ends); every turn of the thread is shown, whoever sent its prompt."""

    def __init__(self, persona: str, think_s: float, cwd: str, home: Path, socket: str) -> None:
        super().__init__(persona, think_s, cwd, home)
        self.socket = socket
        self.inbox: queue.Queue[dict[str, Any] | str] = queue.Queue()
        """The server's messages, or why the connection ended."""
        self.loop = asyncio.new_event_loop()
        self.ws: Any = None
        self.thread_id: str | None = None
        self.asking: dict[str, Any] | None = None
        """The approval request shown (its id, its command), until answered."""
        self.gone = False
        self.next_id = 0
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    # the connection (its own thread and loop) ------------------------------------------
    def start(self) -> None:
        asyncio.run_coroutine_threadsafe(self._connect(), self.loop)

    async def _connect(self) -> None:
        from ..io.agent_channels.websocket import UnixWebSocket

        deadline = time.monotonic() + 10
        while True:
            try:
                self.ws = await UnixWebSocket.connect(self.socket)
                break
            except Exception as exc:  # noqa: BLE001 (the server is still starting)
                if time.monotonic() > deadline:
                    self.inbox.put(f"no app-server on {self.socket}: {exc}")
                    return
                await asyncio.sleep(0.05)
        await self._send({"id": self._id(), "method": "initialize", "params": {"clientInfo": {"name": "codex-tui"}}})  # fmt: skip
        await self._send({"method": "initialized"})
        await self._send({"id": "start", "method": "thread/start", "params": {}})
        try:
            while True:
                self.inbox.put(json.loads(await self.ws.recv()))
        except Exception as exc:  # noqa: BLE001 (closed: the server is gone)
            self.inbox.put(str(exc) or type(exc).__name__)

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id

    async def _send(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(Exception):
            await self.ws.send(json.dumps(message))

    def send(self, message: dict[str, Any]) -> None:
        """Send ``message`` to the server (from the TUI's thread)."""
        if self.ws is not None and not self.gone:
            asyncio.run_coroutine_threadsafe(self._send(message), self.loop)

    # the TUI ---------------------------------------------------------------------------
    def deadline(self, now: float) -> float | None:
        return now + 0.05  # (messages are read between keys)

    def on_tick(self, now: float) -> None:
        while True:
            try:
                message = self.inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(message, str):
                self.gone = True
                self.state, self.turn = "idle", None
                self.history.append(("note", f"Disconnected from the app-server ({message})."))
            else:
                self.on_message(message, now)
        super().on_tick(now)

    def on_message(self, message: dict[str, Any], now: float) -> None:
        """One message from the server."""
        method, params = message.get("method"), message.get("params") or {}
        if message.get("id") == "start":
            self.thread_id = ((message.get("result") or {}).get("thread") or {}).get("id")
        elif method == "turn/started":
            self.turns += 1
            turn = _Turn("", now, float("inf"), str(params["turn"]["id"]), time.time())
            self.begin_turn(turn, now)
        elif method == "item/completed":
            item = params.get("item") or {}
            if item.get("type") == "userMessage":
                text = "".join(str(c.get("text", "")) for c in item.get("content") or [])
                self.history.append(("prompt", text))
            elif item.get("type") == "agentMessage":
                self.history.append(("answer", str(item.get("text", ""))))
        elif method == "turn/completed" and self.turn is not None:
            secs = now - self.turn.started
            self.history.append(("worked", f"Worked for {_worked_for(secs)} • {datetime.now():%H:%M}"))  # fmt: skip
            self.turn, self.state = None, "idle"
            if self.queued:
                self._turn_start(self.take_queued())
        elif method == "item/commandExecution/requestApproval":
            self.asking = {"id": message.get("id"), "command": params.get("command", "")}
        elif method == "serverRequest/resolved" and self.asking is not None:
            if params.get("requestId") == self.asking["id"]:
                self.asking = None

    def on_key(self, key: Key, now: float) -> None:
        if self.asking is not None and key.name in ("text", "escape"):
            answer = {"y": "accept", "n": "cancel"}.get(key.text, "cancel" if key.name == "escape" else None)  # fmt: skip
            if answer is not None:
                self.send({"id": self.asking["id"], "result": {"decision": answer}})
                self.asking = None
            return
        if key.name in ("escape", "ctrl_c") and self.state == "busy":
            return  # (interrupting a remote turn: not played)
        super().on_key(key, now)

    def _submit(self, prompt: str, now: float) -> None:
        """A prompt the person submits (Enter as the local TUI takes it) goes to the server."""
        self._turn_start(prompt)

    def _turn_start(self, prompt: str) -> None:
        self.send({"id": self._id(), "method": "turn/start", "params": {
            "threadId": self.thread_id, "input": [{"type": "text", "text": prompt}]}})  # fmt: skip

    def on_turn_due(self, now: float) -> None:
        """(The server ends turns.)"""

    def frame(self) -> list[str]:
        rows = super().frame()
        if self.asking is None:
            return rows
        cols, lines = self.painter.size()
        dialog = [
            "", f"  {APPROVAL_QUESTION}", "", f"  $ {self.asking['command']}", "",
            "› 1. Yes, proceed (y)", "  2. No, and tell Codex what to do differently (esc)", "",
            "  Press enter to confirm or esc to cancel",
        ]  # fmt: skip
        top = rows[: max(lines - len(dialog), 0)]
        return top[-max(lines - len(dialog), 0) :] + dialog if lines > len(dialog) else dialog

    def stop(self) -> None:
        super().stop()
        self.loop.call_soon_threadsafe(self.loop.stop)


def app_server(argv: list[str]) -> int:
    """``codex app-server --listen unix://PATH``: the scripted stand-in server, a program
    of its own (:mod:`madohub_nb.testing.fake_codex_app_server`) this process becomes."""
    import argparse
    import os
    import sys

    from .standin_tui import think_seconds

    parser = argparse.ArgumentParser(prog="codex app-server")
    parser.add_argument("--listen", required=True, help="unix://PATH")
    parser.add_argument("-c", action="append", default=[], help="(taken, ignored)")
    args = parser.parse_args(argv)
    if os.environ.get(NO_SERVER_ENV):
        print(f"codex app-server: not started (${NO_SERVER_ENV})", file=sys.stderr)
        return 1
    think_s = think_seconds(None) if os.environ.get("MADOHUB_STANDIN_THINK_S") else 0.3
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = root + (os.pathsep + path if path else "")
    server = "madohub_nb.testing.fake_codex_app_server"
    os.execv(sys.executable, [
        sys.executable, "-m", server, "app-server", "--listen", args.listen, "--tui-thread",
        "--think-s", str(think_s),
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run the stand-in Codex CLI in this terminal (or its app-server: ``app-server``)."""
    import sys

    words = sys.argv[1:] if argv is None else argv
    if words[:1] == ["app-server"]:
        return app_server(words[1:])
    parser = build_parser("codex")
    parser.add_argument(
        "-c", dest="config", action="append", metavar="KEY=VALUE",
        help="a config override, as the real one takes it (notify=[...] is run per turn)",
    )  # fmt: skip
    parser.add_argument("--remote", metavar="unix://PATH", help="be the TUI of this app-server")
    run = launch("codex", argv, parser)
    if run.args.remote:
        socket = str(run.args.remote).removeprefix("unix://")
        return RemoteCodexStandin(run.persona, run.think_s, run.cwd, codex_home(), socket).run()
    notify = read_notify(run.args.config)
    return CodexStandin(run.persona, run.think_s, run.cwd, home=codex_home(), notify=notify).run()


if __name__ == "__main__":
    raise SystemExit(main())
