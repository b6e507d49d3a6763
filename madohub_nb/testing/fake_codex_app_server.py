"""A stand-in ``codex app-server --listen unix://PATH``: the same WebSocket and JSON-RPC
messages as Codex 0.171.0 (``tests/fixtures/codex_app_server/``), with scripted turns.

Run it as a process (``python -m madohub_nb.testing.fake_codex_app_server --listen
unix://PATH``) so a test can kill it by pid. What it does, as the real one did:

- a thread (the "TUI's") appears ``--thread-after-s`` after start (``thread/started``), or
  when a client (the stand-in TUI, ``codex --remote``) asks ``thread/start``;
  ``thread/resume`` fails with -32600 "no rollout found" until its first turn ran;
- ``thread/queue/add`` starts a turn on an idle thread, queues it on a busy one;
  ``turn/start`` on a busy thread steers the running turn (its text joins that turn);
- ``thread/status/changed`` goes to every client, turn and item events only to the ones
  that resumed the thread; a running turn is listed without its items;
- prompt markers: ``[[sleep N]]`` (the turn takes N s), ``[[lines N]]`` (an answer of N
  numbered lines), ``PERM`` (asks ``item/commandExecution/requestApproval`` first;
  ``fake/answerInPane`` {decision} answers it as a ``y`` in the TUI would);
- ``fake/typeInPane`` {text}: a prompt the person typed in the TUI; ``fake/hold`` {held}:
  queued prompts wait while held (a turn that does not start).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..io.agent_channels.websocket import (
    OP_CLOSE,
    OP_CONT,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    accept_key,
    encode_frame,
    read_frame,
)

COMMAND = "/bin/bash -lc 'touch made_by_tool'"
REASON = "Create the file made_by_tool"
DECISIONS: list[Any] = [
    "accept",
    {"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["touch", "made_by_tool"]}},
    "cancel",
]
"""What Codex 0.171.0 offered for an escalated ``touch made_by_tool`` (no ``decline``)."""
_SLEEP = re.compile(r"\[\[sleep (\d+(?:\.\d+)?)\]\]")
_LINES = re.compile(r"\[\[lines (\d+)\]\]")


def answer_for(prompt: str, decision: str | None = None) -> str:
    """The stand-in's answer to ``prompt``."""
    lines = _LINES.search(prompt)
    if lines:
        count = int(lines.group(1))
        return "\n".join(f"line {i:03d} of {count}: the long answer" for i in range(1, count + 1))
    if decision is not None and decision != "accept" and not decision.startswith("accept"):
        return f"Declined: {prompt}"
    return f"Done: {prompt}"


def usage_for(prompt: str, answer: str) -> dict[str, int]:
    """The ``last`` token usage reported for a turn (deterministic)."""
    inputs, cached, outputs = 1000 + len(prompt), 900, len(answer) // 4 + 1
    return {
        "totalTokens": inputs + outputs, "inputTokens": inputs, "cachedInputTokens": cached,
        "cacheWriteInputTokens": 0, "outputTokens": outputs, "reasoningOutputTokens": 0,
    }  # fmt: skip


class Client:
    """One WebSocket connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.subscribed = False
        self.lock = asyncio.Lock()

    async def send(self, message: dict[str, Any]) -> None:
        async with self.lock:
            with contextlib.suppress(OSError, RuntimeError):
                data = json.dumps(message).encode()
                if len(data) > 4096:  # big messages go in fragments, as a server may send them
                    half = len(data) // 2
                    self.writer.write(encode_frame(OP_TEXT, data[:half], mask=False, fin=False))
                    self.writer.write(encode_frame(OP_CONT, data[half:], mask=False))
                else:
                    self.writer.write(encode_frame(OP_TEXT, data, mask=False))
                await self.writer.drain()


@dataclass
class Turn:
    turn_id: str
    prompt: str
    client_id: str | None
    status: str = "inProgress"
    items: list[dict[str, Any]] = field(default_factory=list)


class FakeCodexAppServer:
    """The server's state: one thread, its turns and queue, the connected clients."""

    def __init__(self, thread_after_s: float | None, think_s: float = 0.0) -> None:
        self.thread_after_s = thread_after_s
        """None: the thread appears at a client's ``thread/start`` only."""
        self.think_s = think_s
        """How long a turn without ``[[sleep N]]`` takes."""
        self.thread_id: str | None = None
        self.clients: list[Client] = []
        self.turns: list[Turn] = []
        self.running: Turn | None = None
        self.queue: list[dict[str, Any]] = []
        self.next_request = 0
        self.approvals: dict[int, asyncio.Future[Any]] = {}
        self.held = False
        """``fake/hold``: queued prompts wait (a turn that does not start)."""

    # --- the connection ----------------------------------------------------------------
    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)
        }
        key = headers.get("sec-websocket-key")
        if not lines[0].startswith("GET / ") or key is None:
            writer.close()  # raw JSON lines get EOF, as from the real server
            return
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + f"Sec-WebSocket-Accept: {accept_key(key)}\r\n\r\n".encode()
        )
        client = Client(reader, writer)
        self.clients.append(client)
        try:
            await self._read(client)
        finally:
            self.clients.remove(client)
            writer.close()

    async def _read(self, client: Client) -> None:
        parts: list[bytes] = []
        while True:
            try:
                fin, op, payload = await read_frame(client.reader)
            except (asyncio.IncompleteReadError, OSError):
                return
            if op == OP_CLOSE:
                with contextlib.suppress(OSError):
                    client.writer.write(encode_frame(OP_CLOSE, payload[:2], mask=False))
                return
            if op == OP_PING:
                client.writer.write(encode_frame(OP_PONG, payload, mask=False))
                continue
            parts.append(payload)
            if not fin:
                continue
            message = json.loads(b"".join(parts))
            parts = []
            asyncio.ensure_future(self._handle(client, message))

    async def _handle(self, client: Client, message: dict[str, Any]) -> None:
        method, rid, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method is None:  # a response: an approval answered
            future = self.approvals.pop(rid, None)  # type: ignore[arg-type]
            if future is not None and not future.done():
                future.set_result((message.get("result") or {}).get("decision"))
            return
        if rid is None:
            return  # initialized
        try:
            result = await self._call(client, str(method), params)
        except RpcError as exc:
            await client.send({"error": {"code": exc.code, "message": exc.message}, "id": rid})
            return
        await client.send({"id": rid, "result": result})
        if method in ("thread/queue/add", "turn/start", "fake/typeInPane", "fake/hold"):
            self._start_next()

    async def _call(self, client: Client, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "initialize":
            return {
                "userAgent": "fake-codex/0.171.0",
                "platformFamily": "unix",
                "platformOs": "linux",
            }
        if method == "thread/start":  # the TUI's own thread: it gets all its events
            client.subscribed = True
            if self.thread_id is None:
                await self._new_thread()
            return {"thread": self._thread_view()}
        if method == "thread/loaded/list":
            return {"data": [self.thread_id] if self.thread_id else [], "nextCursor": None}
        self._check_thread(params)
        if method == "thread/resume":
            if not self.turns:
                raise RpcError(-32600, f"no rollout found for thread id {self.thread_id}")
            client.subscribed = True
            done = [t for t in self.turns if t.status != "inProgress"]
            if done:  # Codex replays the last usage on resume
                last = done[-1]
                await client.send(self._usage_note(last))
            return {"thread": self._thread_view()}
        if method == "thread/queue/add":
            entry = {"id": str(uuid.uuid4()), "input": params["input"],
                     "clientUserMessageId": params["clientUserMessageId"]}  # fmt: skip
            self.queue.append(entry)
            if self.running is not None:
                await self._broadcast({"method": "thread/queue/changed", "params": {"threadId": self.thread_id}}, subscribed=True)  # fmt: skip
            return {"queuedSubmission": entry}
        if method == "thread/queue/list":
            return {"data": list(self.queue), "nextCursor": None}
        if method == "thread/queue/delete":
            before = len(self.queue)
            self.queue = [q for q in self.queue if q["id"] != params["queuedSubmissionId"]]
            if len(self.queue) == before:
                raise RpcError(-32600, "no such queued submission")
            return {}
        if method == "turn/start":
            text = _text(params["input"])
            if self.running is not None:  # steers the running turn
                self.running.prompt += "\n" + text
                return {"turn": {"id": self.running.turn_id, "items": [], "status": "inProgress"}}
            entry = {"id": str(uuid.uuid4()), "input": params["input"], "clientUserMessageId": None}
            self.queue.insert(0, entry)
            return {"turn": {"id": "pending", "items": [], "status": "inProgress"}}
        if method == "fake/typeInPane":  # the person's prompt, typed in the TUI
            self.queue.append({"id": str(uuid.uuid4()), "clientUserMessageId": None,
                               "input": [{"type": "text", "text": params["text"]}]})  # fmt: skip
            return {}
        if method == "fake/hold":
            self.held = bool(params.get("held", True))
            return {}
        if method == "fake/answerInPane":
            for request_id, future in list(self.approvals.items()):
                if not future.done():
                    future.set_result(params.get("decision", "accept"))
                    self.approvals.pop(request_id, None)
            return {}
        raise RpcError(-32601, f"unknown method {method}")

    def _check_thread(self, params: dict[str, Any]) -> None:
        if params.get("threadId") != self.thread_id or self.thread_id is None:
            raise RpcError(-32600, f"thread not found: {params.get('threadId')}")

    def _thread_view(self) -> dict[str, Any]:
        status = {"type": "active", "activeFlags": []} if self.running else {"type": "idle"}
        turns = [
            {
                "id": t.turn_id,
                "status": t.status,
                "items": [] if t.status == "inProgress" else t.items,
            }
            for t in self.turns
        ]
        return {"id": self.thread_id, "ephemeral": False, "status": status, "turns": turns}

    # --- turns ---------------------------------------------------------------------------
    def _start_next(self) -> None:
        if self.running is None and self.queue and not self.held:
            entry = self.queue.pop(0)
            turn = Turn(str(uuid.uuid4()), _text(entry["input"]), entry.get("clientUserMessageId"))
            self.running = turn
            self.turns.append(turn)
            asyncio.ensure_future(self._run(turn))

    async def _run(self, turn: Turn) -> None:
        tid = self.thread_id
        await self._broadcast(_status(tid, "active"), subscribed=False)
        await self._note(
            "turn/started", {"turn": {"id": turn.turn_id, "items": [], "status": "inProgress"}}
        )
        user = {"type": "userMessage", "id": str(uuid.uuid4()), "clientId": turn.client_id,
                "content": [{"type": "text", "text": turn.prompt, "text_elements": []}]}  # fmt: skip
        turn.items.append(user)
        await self._item("item/started", turn, user)
        await self._item("item/completed", turn, user)
        sleep = _SLEEP.search(turn.prompt)
        await asyncio.sleep(float(sleep.group(1)) if sleep else self.think_s)
        decision = None
        if "PERM" in turn.prompt:
            decision = await self._ask(turn)
        text = answer_for(turn.prompt, decision)
        message = {
            "type": "agentMessage",
            "id": f"msg_{uuid.uuid4().hex}",
            "text": "",
            "phase": None,
        }
        await self._item("item/started", turn, message)
        for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
            await self._note("item/agentMessage/delta", {"turnId": turn.turn_id, "itemId": message["id"], "delta": piece})  # fmt: skip
        message = {**message, "text": text}
        turn.items.append(message)
        await self._item("item/completed", turn, message)
        await self._broadcast(self._usage_note(turn), subscribed=True)
        turn.status = "completed"
        self.running = None
        await self._broadcast(_status(tid, "idle"), subscribed=False)
        await self._note("turn/completed", {"turn": {"id": turn.turn_id, "status": "completed",
                          "items": [message], "itemsView": "summary"}})  # fmt: skip
        self._start_next()

    async def _ask(self, turn: Turn) -> str:
        request_id = self.next_request
        self.next_request += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.approvals[request_id] = future
        await self._broadcast(
            _status(self.thread_id, "active", ["waitingOnApproval"]), subscribed=False
        )
        await self._broadcast({"method": "item/commandExecution/requestApproval", "id": request_id,
            "params": {"kind": "command", "threadId": self.thread_id, "turnId": turn.turn_id,
                       "itemId": f"call_{uuid.uuid4().hex}", "reason": REASON, "command": COMMAND,
                       "availableDecisions": DECISIONS}}, subscribed=True)  # fmt: skip
        decision = await future
        await self._note("serverRequest/resolved", {"requestId": request_id})
        await self._broadcast(_status(self.thread_id, "active"), subscribed=False)
        return str(decision if isinstance(decision, str) else next(iter(decision)))

    def _usage_note(self, turn: Turn) -> dict[str, Any]:
        answer = next((i["text"] for i in turn.items if i["type"] == "agentMessage"), "")
        last = usage_for(turn.prompt, answer)
        return {"method": "thread/tokenUsage/updated", "params": {"threadId": self.thread_id,
                "turnId": turn.turn_id, "tokenUsage": {"total": last, "last": last}}}  # fmt: skip

    async def _item(self, method: str, turn: Turn, item: dict[str, Any]) -> None:
        await self._note(method, {"item": item, "turnId": turn.turn_id})

    async def _note(self, method: str, params: dict[str, Any]) -> None:
        await self._broadcast({"method": method, "params": {"threadId": self.thread_id, **params}}, subscribed=True)  # fmt: skip

    async def _broadcast(self, message: dict[str, Any], *, subscribed: bool) -> None:
        for client in list(self.clients):
            if client.subscribed or not subscribed:
                await client.send(message)

    async def make_thread(self) -> None:
        if self.thread_after_s is None:
            return
        await asyncio.sleep(self.thread_after_s)
        if self.thread_id is None:
            await self._new_thread()

    async def _new_thread(self) -> None:
        self.thread_id = str(uuid.uuid4())
        await self._broadcast({"method": "thread/started", "params": {"thread": {"id": self.thread_id, "ephemeral": False}}}, subscribed=False)  # fmt: skip


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _status(thread_id: str | None, kind: str, flags: list[str] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"type": kind}
    if kind == "active":
        status["activeFlags"] = flags or []
    return {"method": "thread/status/changed", "params": {"threadId": thread_id, "status": status}}


def _text(items: list[dict[str, Any]]) -> str:
    return "".join(str(i.get("text", "")) for i in items if i.get("type") == "text")


async def main(socket_path: str, thread_after_s: float | None, think_s: float = 0.0) -> None:
    """Serve on ``socket_path`` until killed."""
    fake = FakeCodexAppServer(thread_after_s, think_s)
    server = await asyncio.start_unix_server(fake.serve, socket_path, limit=1 << 24)
    asyncio.ensure_future(fake.make_thread())
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("app_server", nargs="?", help="(as `codex app-server`)")
    parser.add_argument("--listen", required=True, help="unix://PATH")
    parser.add_argument("--thread-after-s", type=float, default=0.3)
    parser.add_argument(
        "--tui-thread", action="store_true",
        help="no thread of its own: the TUI's thread/start makes it (the stand-in codex --remote)",
    )  # fmt: skip
    parser.add_argument("--think-s", type=float, default=0.0, help="a turn without [[sleep N]]")
    parser.add_argument("-c", action="append", default=[], help="(ignored, as codex -c)")
    args = parser.parse_args()
    path = args.listen.removeprefix("unix://")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(path, None if args.tui_thread else args.thread_after_s, args.think_s))
