"""The REAL Claude Code suspended or killed under a hub's typing (issue 11, cases 1 and 2).

Claude Code is started from a bash prompt (``via_shell``), as a person does, and
adopted. Its newline key C-j is accept-line in bash: if the hub typed on after
Claude stopped or died, bash would run each line. Checked where it would land:
files bash would create, and the prompts the fake API received.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import wait_until

import madohub_nb as mh
from madohub_nb.agents.foreground import read_stat
from madohub_nb.defaults import TYPING_DELAY_MS
from madohub_nb.pipeline.deliver import Deliverer
from madohub_nb.testing.fake_anthropic import FakeAnthropic

from .conftest import RealPane

pytestmark = pytest.mark.real_agents


@pytest.fixture
def hub(tmux_socket: str, tmp_path: Path) -> Iterator[mh.Hub]:
    hub = mh.Hub(socket_name=tmux_socket, idle_delay_ms=1500, log_path=tmp_path / "r.sqlite3")
    yield hub
    hub.close()


def _adopted_claude(hub: mh.Hub, pane: RealPane) -> tuple[mh.Tile, int]:
    """The real Claude adopted as a tile, idle; and its process group (the terminal's job)."""
    tile = hub.tile("claude", pane=pane.pane_id)
    assert tile.agent == "claude"
    wait_until(lambda: tile.state == "idle", 30, what="Claude idle")
    proc = tile.agent_process()
    assert proc is not None
    st = read_stat(proc.pid)
    assert st is not None and st.pgrp == st.tpgid, "Claude is not in the foreground"
    return tile, st.pgrp


def _marks(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("mark-*"))


def test_real_claude_suspended_reads_not_idle_and_gets_nothing_typed(
    hub: mh.Hub, real_claude_pane: object, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    pane = real_claude_pane(via_shell=True)  # type: ignore[operator]
    tile, pgrp = _adopted_claude(hub, pane)
    os.killpg(pgrp, signal.SIGTSTP)  # Ctrl-Z: the whole foreground job
    pane.wait_screen(lambda s: "Stopped" in s, 20, what="bash reports the stopped job")
    assert tile.state != "idle"
    marker = tmp_path / "MARKER"
    rec = hub.send("claude", f"touch {marker}").result(120)
    assert rec.status == "error"
    assert "stopped" in (rec.error or "")
    assert not marker.exists()
    os.killpg(pgrp, signal.SIGCONT)
    assert fake_anthropic.prompts == []


def test_real_claude_killed_while_a_long_prompt_is_typed_gets_no_line_run_by_bash(
    hub: mh.Hub, real_claude_pane: object, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    pane = real_claude_pane(via_shell=True)  # type: ignore[operator]
    _, pgrp = _adopted_claude(hub, pane)
    low, high = TYPING_DELAY_MS
    pauses = 0

    async def sleep(seconds: float) -> None:
        nonlocal pauses
        if low / 1000 <= seconds <= high / 1000:
            pauses += 1
            if pauses == 4:
                os.killpg(pgrp, signal.SIGKILL)
                for _ in range(300):
                    st = read_stat(pgrp)
                    if st is None or st.state in ("Z", "X"):
                        break
                    await asyncio.sleep(0.01)
        await asyncio.sleep(seconds)

    hub.runtime.deliverer = Deliverer(rng=random.Random(2), sleep=sleep)
    prompt = "\n".join(f"touch {tmp_path}/mark-{i:02d}" for i in range(30))
    rec = hub.send("claude", prompt).result(120)
    assert rec.status == "error"
    assert "exited" in (rec.error or "") and "not submitted" in (rec.error or "")
    pane.wait_screen(lambda s: "Killed" in s, 20, what="bash reports the killed job")
    # Text Claude had not read yet when it died may sit on bash's prompt line, never run.
    pane.press("C-c")
    pane.submit(f"touch {tmp_path}/probe")
    wait_until(lambda: (tmp_path / "probe").exists(), 10, what="bash runs commands")
    assert _marks(tmp_path) == []
    assert fake_anthropic.prompts == []
