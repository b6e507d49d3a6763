"""In a real Jupyter kernel the engine runs beside the kernel, never on it.

Each test runs a small notebook with nbclient: a route delivers while a cell
blocks in ``time.sleep``; replays (delivered, AI, and ``%madohub replay
--deliver``) work from plain cells. The prompts are read back from the
receiving stand-in's own transcript, and the AI prompt from the local fake API.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import kill_tree
from nbclient import NotebookClient

from madohub_nb.testing.fake_anthropic import FakeAnthropic

pytestmark = pytest.mark.notebooks

KEY = "sk-ant-kernel-test-0123456789abcdef"

SETUP = """
import json, os, tempfile, time
from pathlib import Path
import madohub_nb as mh
from madohub_nb.pipeline.extract import transcript_path
%load_ext madohub_nb
work = Path(tempfile.mkdtemp(prefix="mh-kernel-"))
claude_dir = work / "claude"
%config MadoHub.socket_name = {socket!r}
%config MadoHub.log_path = {log!r}
%config MadoHub.idle_delay_ms = 1000
{extra_config}
%madohub tile writer --demo echo --cwd $work --env CLAUDE_CONFIG_DIR=$claude_dir
%madohub tile reviewer --demo echo --cwd $work --env CLAUDE_CONFIG_DIR=$claude_dir
hub = mh.get_hub()
route = hub.connect("writer", "reviewer", template="Review: {{output}}", cooldown_ms=1000)
for tile in hub.tiles.values():
    tile.ready.result(30)
deadline = time.time() + 30
while time.time() < deadline and not (
    route.ready.is_set() and all(t.state == "idle" for t in hub.tiles.values())
):
    time.sleep(0.1)

def prompts(name):
    path = transcript_path(hub.tiles[name])
    if path is None:
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r["message"]["content"] for r in lines
            if r.get("type") == "user" and isinstance(r.get("message", {{}}).get("content"), str)]
"""


def _run(cells: list[str], tmp_path: Path, socket: str) -> dict[str, Any]:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    client = NotebookClient(nb, timeout=120, kernel_name="python3")
    try:
        client.execute(cwd=str(tmp_path))
    finally:
        out = subprocess.run(
            ["tmux", "-L", socket, "display-message", "-p", "#{pid}"],
            capture_output=True,
            text=True,
        )
        if out.stdout.strip().isdigit():
            kill_tree(int(out.stdout.strip()))
    texts = [o.text for o in nb.cells[-1].outputs if o.output_type == "stream"]
    line = next(ln for t in texts for ln in t.splitlines() if ln.startswith("REPORT"))
    return json.loads(line[len("REPORT") :])


def test_a_route_delivers_while_a_cell_blocks_in_time_sleep(
    home: Path, tmp_path: Path, tmux_socket: str
) -> None:
    setup = SETUP.format(socket=tmux_socket, log=str(tmp_path / "log.sqlite3"), extra_config="")
    block = """
hub.send("writer", "hello from the kernel")
t0 = time.time()
time.sleep(12)  # the kernel's thread is busy: nothing here drives routing
t1 = time.time()
"""
    report = """
rows = hub.log.df
routed = rows[rows.route_id == route.id]
print("REPORT" + json.dumps({
    "t0": t0, "t1": t1,
    "status": list(routed.status),
    "delivered_at": [d.timestamp() for d in routed.delivered_at],
    "reviewer": prompts("reviewer"),
}))
hub.close()
"""
    got = _run([setup, block, report], tmp_path, tmux_socket)
    assert got["status"] == ["delivered"]
    (delivered_at,) = got["delivered_at"]
    # Delivered while the cell slept, well before it ended (the seed's loop waited for it).
    assert got["t0"] < delivered_at < got["t1"] - 4, got
    assert got["reviewer"] == ["Review: Done: hello from the kernel"]


def test_replays_deliver_and_call_the_api_from_plain_cells(
    home: Path, tmp_path: Path, tmux_socket: str
) -> None:
    with FakeAnthropic(reply="Please look at the greeting.", api_key=KEY) as fake:
        setup = SETUP.format(
            socket=tmux_socket,
            log=str(tmp_path / "log.sqlite3"),
            extra_config=f"%config MadoHub.base_url = {fake.base_url!r}\n"
            f"%config MadoHub.api_key = {KEY!r}",
        )
        first = """
hub.send("writer", "greet me").result(30)
hub.wait_rounds(2, timeout_s=60).result(70)
rid = hub.log.df[hub.log.df.route_id == route.id].round_id.iloc[0]
"""
        replays = """
ai = hub.replay(rid, transform="ai-routing").result(60)
typed = hub.replay(rid, template="Replayed: {output}", deliver=True).result(60)
"""
        magic = """magic = %madohub replay $rid --deliver --template "Magic: {output}"
"""
        awaited = """awaited = await hub.replay(rid, transform="summary")
"""
        report = """
print("REPORT" + json.dumps({
    "ai": [ai.status, ai.prompt, ai.error],
    "typed": [typed.status, typed.error],
    "magic": [magic.status, magic.error],
    "awaited": [awaited.status, awaited.prompt],
    "reviewer": prompts("reviewer"),
}))
hub.close()
"""
        got = _run([setup, first, replays, magic, awaited, report], tmp_path, tmux_socket)
        api_bodies = [str(r["body"]) for r in fake.requests if r["path"].startswith("/v1/messages")]
    assert got["ai"][:2] == ["shadow", "Please look at the greeting."], got["ai"]
    assert got["awaited"] == ["shadow", "Please look at the greeting."]
    assert len(api_bodies) == 2 and all("Done: greet me" in b for b in api_bodies)
    assert got["typed"] == ["delivered", None]
    assert got["magic"] == ["delivered", None]
    assert got["reviewer"] == [
        "Review: Done: greet me",
        "Replayed: Done: greet me",
        "Magic: Done: greet me",
    ]
