"""FakeAmp: its HTTP routes and the thread WebSocket, spoken to as the Amp CLI does.

A client here writes masked RFC 6455 frames over a plain socket (no WebSocket library).
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import struct
import urllib.request
from collections.abc import Iterator

import pytest

from madohub_nb.testing.fake_amp import FakeAmp, accept_key, message_id


def _post(fake: FakeAmp, path: str, body: dict[str, object]) -> dict[str, object]:
    req = urllib.request.Request(
        fake.base_url + path, data=json.dumps(body).encode(), method="POST",
        headers={"content-type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=5) as resp:
        return json.loads(resp.read())


class Client:
    """A minimal WebSocket client: handshake, masked text frames out, server frames in."""

    def __init__(self, fake: FakeAmp, thread_id: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", fake.port), timeout=5)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET /actors/gateway/threadActor/websocket/?rvt-key={thread_id} HTTP/1.1\r\n"
                "Host: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                "Sec-WebSocket-Protocol: rivet\r\n\r\n"
            ).encode()
        )
        self.file = self.sock.makefile("rb")
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += self.file.read(1)
        self.head = head.decode()
        assert self.head.startswith("HTTP/1.1 101"), self.head
        assert f"sec-websocket-accept: {accept_key(key)}\r\n" in self.head

    def send_text(self, text: str) -> None:
        data, mask = text.encode(), os.urandom(4)
        size = len(data)
        head = bytes([0x81]) + (
            bytes([0x80 | size]) if size < 126 else bytes([0x80 | 126]) + struct.pack("!H", size)
        )
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv_text(self) -> str:
        b0, b1 = self.file.read(2)
        size = b1 & 0x7F
        if size == 126:
            size = struct.unpack("!H", self.file.read(2))[0]
        elif size == 127:
            size = struct.unpack("!Q", self.file.read(8))[0]
        assert b0 & 0x0F == 1, f"opcode {b0 & 0x0F}"
        return self.file.read(size).decode()

    def recv_json(self) -> dict[str, object]:
        return json.loads(self.recv_text())

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def fake() -> Iterator[FakeAmp]:
    with FakeAmp() as f:
        yield f


def test_internal_routes_answer_what_amp_requires(fake: FakeAmp) -> None:
    user = _post(fake, "/api/internal?getUserInfo", {"method": "getUserInfo", "params": {}})
    assert user["ok"] is True
    result = user["result"]
    assert isinstance(result, dict) and result["features"] == [] and result["team"] is None
    assert _post(fake, "/api/internal?loadPlugins", {"method": "loadPlugins"})["result"] == {
        "plugins": []
    }
    assert _post(fake, "/api/internal?anythingElse", {"method": "anythingElse"})["result"] == {}
    thread = _post(fake, "/api/thread-actors", {})
    assert re.fullmatch(r"T-[0-9a-f-]{36}", str(thread["threadId"]))
    assert thread["usesThreadActors"] is True and fake.threads == [thread["threadId"]]
    assert set(_post(fake, "/api/user-actor-credentials", {})) == {"userId", "wsToken", "poolName"}
    assert fake.internal_methods == ["getUserInfo", "loadPlugins", "anythingElse"]


def test_unknown_route_is_a_404_and_recorded(fake: FakeAmp) -> None:
    with pytest.raises(urllib.error.HTTPError) as err:
        _post(fake, "/api/nothing", {})
    assert err.value.code == 404 and fake.unknown_paths == ["/api/nothing"]


def test_a_turn_over_the_thread_websocket(fake: FakeAmp) -> None:
    fake.queue("Queued answer")
    client = Client(fake, "T-test")
    try:
        assert "sec-websocket-protocol: rivet" in client.head.lower()
        client.send_text("ping")
        assert client.recv_text() == "pong"
        client.send_text(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "executor_connect"}))
        assert client.recv_json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
        connected = client.recv_json()
        assert connected["method"] == "executor_connected"
        assert client.recv_json()["params"] == {"state": "idle"}
        user_id = message_id()
        content = [{"type": "text", "text": "hello amp"}]
        msg = {"content": content, "messageId": user_id}
        client.send_text(
            json.dumps(
                {"jsonrpc": "2.0", "id": 2, "method": "client_append_user_msg", "params": msg}
            )
        )
        assert client.recv_json()["id"] == 2
        events = [client.recv_json() for _ in range(5)]
        kinds = [(e["method"], e["params"].get("state")) for e in events]  # type: ignore[union-attr]
        assert kinds == [
            ("message_added", None),
            ("agent_state", "working"),
            ("message_added", None),
            ("plugin_message", None),
            ("agent_state", "idle"),
        ]
        # The turn's end as Amp's backend asks the CLI's plugins: agent.end with its messages.
        request = events[3]["params"]["message"]  # type: ignore[index]
        assert (request["type"], request["method"]) == ("request", "agent.end")
        end = request["params"]["event"]
        assert (end["thread"], end["message"], end["id"], end["status"]) == (
            {"id": "T-test"}, "hello amp", user_id, "done",
        )  # fmt: skip
        assert [m["role"] for m in end["messages"]] == ["user", "assistant"]
        assert end["messages"][1]["content"] == [{"type": "text", "text": "Queued answer"}]
        echoed, answer = events[0]["params"]["message"], events[2]["params"]["message"]  # type: ignore[index]
        assert echoed["messageId"] == user_id and echoed["role"] == "user"
        assert answer["role"] == "assistant" and answer["state"] == {
            "type": "complete",
            "stopReason": "end_turn",
        }
        assert answer["content"] == [{"type": "text", "text": "Queued answer"}]
        assert re.fullmatch(r"M-[0-9A-Za-z]{22}", answer["messageId"])
        assert answer["threadId"] == "T-test"
        # The queue is used up: the next turn gets the default answer.
        client.send_text(
            json.dumps({"jsonrpc": "2.0", "id": 3, "method": "client_append_user_msg",
                        "params": {"content": [{"type": "text", "text": "again"}]}})
        )  # fmt: skip
        client.recv_json()
        later = [client.recv_json() for _ in range(5)]
        assert later[2]["params"]["message"]["content"][0]["text"] == "Done: again"  # type: ignore[index]
    finally:
        client.close()
    assert fake.prompts == ["hello amp", "again"]
    assert [r["method"] for r in fake.rpc] == [
        "executor_connect", "client_append_user_msg", "client_append_user_msg",
    ]  # fmt: skip


def test_queue_takes_only_text(fake: FakeAmp) -> None:
    with pytest.raises(TypeError, match="queue takes answer texts"):
        fake.queue(42)  # type: ignore[arg-type]


def test_websocket_without_a_key_is_refused(fake: FakeAmp) -> None:
    sock = socket.create_connection(("127.0.0.1", fake.port), timeout=5)
    try:
        sock.sendall(
            b"GET /actors/gateway/threadActor/websocket/ HTTP/1.1\r\nHost: x\r\n"
            b"Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
        )
        assert sock.recv(64).startswith(b"HTTP/1.1 400")
    finally:
        sock.close()
