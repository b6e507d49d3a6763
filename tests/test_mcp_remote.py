"""MCP across a remote host (issue 25 item 4), over a real OpenSSH server on 127.0.0.1.

A tile started on host ``box`` with ``mcp=`` reaches the hub's server through a port of
the host's 127.0.0.1 that the host's ssh master carries back (``ssh -O forward -R``); its
private config is written on the host. Local callers reach remote tiles as any other.
The "host" is this machine behind a private sshd (HOME of its own, tmux server of its
own), so the test can look at the host's files and listening sockets directly.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import FAST_IDLE_MS, log_rows, start_standin, user_prompts, wait_until
from test_mcp import call, mcp_rows

import madohub_nb as mh
from madohub_nb.demo import standin_command


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
        mcp_cooldown_ms=1000,
    )
    yield h
    h.close()


def _listens(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


def _argv(tile: mh.Tile) -> list[str]:
    agent = tile.agent_process()
    assert agent is not None
    return psutil.Process(agent.pid).cmdline()


def _answer(tile: mh.Tile) -> str:
    found = tile.last_response()
    return found.text if found is not None else ""


def _remote_lead(hub: mh.Hub, host: str = "box", **kwargs: object) -> mh.Tile:
    lead = hub.tile(
        "lead", agent="claude", command=standin_command("claude"), host=host,
        env={"MADOHUB_STANDIN_THINK_S": "0.3"}, mcp=["near"], **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip
    wait_until(lambda: lead.state == "idle", 20, what="the remote lead idle")
    return lead


def test_a_remote_claude_asks_a_local_tile_over_the_hosts_forwarded_port(
    rhub: mh.Hub, sshd: object, home: Path, project: Path
) -> None:
    near = start_standin(rhub, "near", cwd=project)
    lead = _remote_lead(rhub)
    argv = _argv(lead)
    config = Path(argv[argv.index("--mcp-config") + 1])
    # The config is on the host (its HOME), 0600 in a 0700 folder of the hub's; the token is
    # in it and on no command line; its URL is a port of the host's loopback, not the hub's.
    host_home = Path(sshd.home)  # type: ignore[attr-defined]
    assert config.is_relative_to(host_home / ".cache" / "madohub_nb" / "mcp")
    assert oct(config.stat().st_mode & 0o777) == "0o600"
    assert oct(config.parent.stat().st_mode & 0o777) == "0o700"
    server = json.loads(config.read_text())["mcpServers"]["madohub"]
    token = rhub.mcp.token("lead")
    assert token is not None and server["headers"] == {"Authorization": f"Bearer {token}"}
    assert token not in " ".join(argv)
    host, _, rest = server["url"].removeprefix("http://").partition(":")
    there = int(rest.split("/")[0])
    assert host == "127.0.0.1" and there != rhub.mcp._endpoint.port
    assert server["url"] == f"http://127.0.0.1:{there}/mcp"
    assert rhub.mcp.client_config("lead")["mcpServers"]["madohub"]["url"] == server["url"]
    # The host's end listens on 127.0.0.1 only (the sshd serving the link holds it).
    listening = [
        c.laddr
        for c in psutil.net_connections("tcp")
        if c.status == "LISTEN" and c.laddr.port == there
    ]
    assert listening and all(addr.ip == "127.0.0.1" for addr in listening), listening
    rhub.send("lead", "[[mcp ask near: is this right?]]").result(30)
    wait_until(
        lambda: _answer(lead) == "Done: is this right?", 30, what="the answer, as the tool result"
    )
    assert user_prompts(near) == ["is this right?"]
    rows = mcp_rows(rhub)
    assert [(r["route_id"], r["source"]) for r in rows] == [
        ("mcp:lead->near", "lead"),
        ("mcp:lead->near", "near"),
    ]
    rhub.close()  # the forward and the host's config folder go with the hub
    assert not _listens(there)
    assert not config.parent.exists()


def test_a_local_caller_asks_and_sends_to_a_remote_tile(rhub: mh.Hub, project: Path) -> None:
    start_standin(rhub, "lead", cwd=project)
    far = start_standin(rhub, "far", host="box")
    token = rhub.mcp.grant("lead")
    is_error, text = call(rhub, token, "list_agents")
    assert not is_error and '"name": "far"' in text, text
    assert call(rhub, token, "ask", to="far", text="over there?", timeout_s=60) == (
        False,
        "Done: over there?",
    )
    assert call(rhub, token, "send", to="far", text="and this") == (False, "delivered")
    wait_until(lambda: _answer(far) == "Done: and this", 20, what="the remote tile's answer")
    rows = mcp_rows(rhub)
    assert [(r["source"], r["target"], r["status"]) for r in rows] == [
        ("lead", "far", "delivered"),
        ("far", "lead", "delivered"),
        ("lead", "far", "delivered"),
    ]
    assert rows[1]["extracted"] == "Done: over there?"


def test_a_remote_codex_gets_the_hosts_url_and_its_token_in_its_pane_env(
    rhub: mh.Hub, project: Path
) -> None:
    start_standin(rhub, "near", cwd=project)
    cx = rhub.tile("cx", agent="codex", command=standin_command("codex"), host="box", mcp=True)
    wait_until(lambda: cx.state == "idle", 20, what="the remote codex idle")
    agent = cx.agent_process()
    assert agent is not None
    proc = psutil.Process(agent.pid)
    argv = proc.cmdline()
    overrides = [argv[i + 1] for i, word in enumerate(argv) if word == "-c"]
    (url,) = [o.split("=", 1)[1] for o in overrides if o.startswith("mcp_servers.madohub.url=")]
    url = json.loads(url)
    assert url.startswith("http://127.0.0.1:") and url != rhub.mcp.url
    token = rhub.mcp.token("cx")
    assert token is not None and token not in " ".join(argv)
    assert proc.environ()["MADOHUB_MCP_TOKEN"] == token
    # A call to the host's port with that token is cx's (over the forward, to the hub).
    import asyncio

    from test_mcp import _call, _session

    is_error, text = asyncio.run(_session(url, token, lambda c: _call(c, "list_agents", {})))
    assert not is_error and '"name": "near"' in text, text


def test_a_host_that_refuses_the_forward_is_a_clear_error(rhub: mh.Hub) -> None:
    with pytest.raises(mh.MadohubError) as caught:
        _remote_lead(rhub, host="noforward")
    said = str(caught.value)
    assert "host 'noforward' did not carry the hub's MCP port back" in said
    assert "remote port forwarding failed" in said and "AllowTcpForwarding" in said
    assert "lead" not in rhub.tiles and rhub.mcp.token("lead") is None


@pytest.mark.parametrize("agent", ["gemini", "qwen", "copilot", "opencode"])
def test_mcp_on_a_host_for_an_agent_the_hub_sets_up_only_here_is_a_clear_error(
    rhub: mh.Hub, agent: str
) -> None:
    with pytest.raises(mh.MadohubValueError) as caught:
        rhub.tile("far", agent=agent, command=agent, host="box", mcp=True)
    said = str(caught.value)
    assert f"{agent!r}" in said and "mcp= on a host starts claude, codex" in said
    assert "far" not in rhub.tiles and rhub.mcp.token("far") is None
    assert not rhub.mcp._hosts  # (nothing was forwarded for it)


def test_the_forward_goes_with_the_link_and_comes_back_on_the_same_port(
    rhub: mh.Hub, sshd: object, project: Path
) -> None:
    near = start_standin(rhub, "near", cwd=project)
    lead = _remote_lead(rhub)
    url = rhub.mcp.client_config("lead")["mcpServers"]["madohub"]["url"]
    there = int(url.rsplit(":", 1)[1].split("/")[0])
    assert _listens(there)
    keys = Path(str(sshd.config)).parent / "authorized_keys"  # type: ignore[attr-defined]
    saved = keys.read_text()
    keys.write_text("")  # the link stays down until the hub has seen it go
    assert sshd.drop_sessions()  # type: ignore[attr-defined]
    wait_until(lambda: lead.state == "unreachable", 20, what="lead unreachable")
    assert not _listens(there)  # the host's end went with the connection
    keys.write_text(saved)
    link = rhub.hosts["box"]
    wait_until(lambda: link.reachable, 40, what="host back")
    wait_until(lambda: _listens(there), 10, what="the same port forwarded again")
    wait_until(lambda: lead.state == "idle", 20, what="lead idle again")
    rhub.send("lead", "[[mcp send near: after the drop]]").result(30)
    wait_until(lambda: _answer(lead) == "delivered", 30, what="the send's result")
    wait_until(lambda: user_prompts(near) == ["after the drop"], 15, what="the prompt")
    assert [r["status"] for r in log_rows(rhub) if r["route_id"] == "mcp:lead->near"] == [
        "delivered"
    ]
