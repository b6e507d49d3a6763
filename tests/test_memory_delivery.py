"""Delivery's decisions, fast, on an in-memory machine (madohub_nb.testing.memory).

The same promises are tested on real tmux with real processes elsewhere
(test_routing.py, test_foreground.py, test_hostile.py); these are the unit layer
beside them: what is typed, in which order, and what is refused, without tmux.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from madohub_nb.agents.profiles import get_profile, submit_keys_for
from madohub_nb.errors import DeliveryError, MadohubValueError
from madohub_nb.io.tmux import key_name
from madohub_nb.pipeline.deliver import (
    ECHO_POLL_S,
    ECHO_TIMEOUT_S,
    Deliverer,
    Delivery,
    TypingStopped,
    input_pending,
)
from madohub_nb.pipeline.round import hand_send_plan
from madohub_nb.pipeline.tile import Tile
from madohub_nb.testing.memory import MemoryMachine, MemoryPane, MemoryProcess

CONFIG = "/mem/claude"


async def _no_wait(_s: float) -> None:
    await asyncio.sleep(0)  # a turn of the loop: other deliveries may run now


def _deliverer() -> Deliverer:
    return Deliverer(sleep=_no_wait)


def _ready(tile: Tile) -> Tile:
    tile.ready.set_result(tile)
    return tile


def _claude(machine: MemoryMachine, status: str = "idle") -> tuple[Tile, MemoryPane, MemoryProcess]:
    """A Claude started from the pane's bash, in the terminal's foreground, saying ``status``."""
    pane = machine.add_pane(screen="> ", comm="bash")
    agent = machine.add_process(
        "claude", ["claude"], parent=pane.pid, environ={"CLAUDE_CONFIG_DIR": CONFIG}
    )
    machine.foreground(pane, agent.pgrp)
    machine.files[f"{CONFIG}/sessions/{agent.pid}.json"] = json.dumps(
        {"sessionId": "s-1", "status": status}
    ).encode()
    return (
        _ready(Tile("cl", pane.pane_id, "claude", machine, session="s", created=False)),
        pane,
        agent,
    )


def _shell(machine: MemoryMachine) -> tuple[Tile, MemoryPane]:
    pane = machine.add_pane(screen="$ ", comm="bash")
    return _ready(Tile("sh", pane.pane_id, "shell", machine, session="s", created=False)), pane


def _keys(profile_kind: str, text: str) -> list[str]:
    return [f"<{key_name(k)}>" for k in submit_keys_for(get_profile(profile_kind), text)]


def test_a_claude_prompt_is_typed_line_by_line_and_submitted_by_its_profiles_keys() -> None:
    machine = MemoryMachine()
    tile, pane, _ = _claude(machine)
    result = asyncio.run(_deliverer().deliver(tile, "first line\nsecond line"))
    newline = f"<{get_profile('claude').newline_key}>"
    assert pane.typed == ["first line", newline, "second line", *_keys("claude", "x")]
    assert result.lines == 2 and result.verified


@pytest.mark.parametrize(
    ("kind", "text", "keys"),
    [
        ("claude", "hello", ["<C-m>", "<C-m>"]),  # Enter twice (REAL-AGENTS.md)
        ("claude", "/compact", ["<C-m>"]),  # a slash command: once, or it runs twice
        ("shell", "echo hi", ["<C-j>"]),
    ],
)
def test_submit_keys_come_from_the_targets_profile(kind: str, text: str, keys: list[str]) -> None:
    machine = MemoryMachine()
    tile, pane = _claude(machine)[:2] if kind == "claude" else _shell(machine)
    asyncio.run(_deliverer().deliver(tile, text, allow_shell=kind == "shell"))
    assert pane.typed == [text, *keys]
    assert keys == _keys(kind, text)


def test_control_characters_and_escapes_never_reach_the_pane() -> None:
    machine = MemoryMachine()
    tile, pane, _ = _claude(machine)
    asyncio.run(_deliverer().deliver(tile, "red \x1b[31mtext\x1b[0m\x07 and\x00 a\ttab\rend"))
    typed = "".join(p for p in pane.typed if not p.startswith("<"))
    assert not any(ord(c) < 0x20 and c != "\t" for c in typed), typed
    assert "\x1b" not in typed and "[31m" not in typed
    assert "text" in typed and "end" in typed


def test_deliveries_into_one_target_are_serialised() -> None:
    machine = MemoryMachine()
    tile, pane, _ = _claude(machine)
    deliverer = _deliverer()

    async def both() -> None:
        await asyncio.gather(
            deliverer.deliver(tile, "a1\na2\na3"), deliverer.deliver(tile, "b1\nb2\nb3")
        )

    asyncio.run(both())
    words = [p for p in pane.typed if not p.startswith("<")]
    assert words in (["a1", "a2", "a3", "b1", "b2", "b3"], ["b1", "b2", "b3", "a1", "a2", "a3"])
    # The first prompt is submitted (both Enters) before the second one's first line.
    assert pane.typed[5:7] == ["<C-m>", "<C-m>"] and pane.typed[7] in ("a1", "b1")


RULE = "─" * 100


def _copilot_box(*lines: str) -> str:
    """A Copilot CLI screen's bottom (tests/fixtures/screens/copilot/05_*): its input box."""
    rows = [f"❯ {lines[0]}" if lines else "❯ ", *(f"  {line}" for line in lines[1:])]
    return "\n".join([" ~/proj", RULE, *rows, RULE, " Interactive · Manual Approval"])


def test_a_prompt_wrapped_in_the_box_is_still_pending() -> None:
    """The box wraps a long line: the prompt's end, split over two rows, is still found, so a
    submit that did not take is pressed again rather than logged as taken."""
    copilot = get_profile("copilot")
    text = "Review this: the parser drops the last token of every line"
    wrapped = _copilot_box("Review this: the parser drops the last token of every l", "ine")
    assert input_pending(copilot, wrapped, text)
    assert not input_pending(copilot, _copilot_box(), text)


def test_a_box_that_shows_a_paste_its_own_way_is_submitted_once_it_settles() -> None:
    """An agent that shows a prompt as "[Pasted text #1 +2 lines]" never shows its text:
    delivery presses submit once the box holds still, not after waiting the whole bound."""
    machine = MemoryMachine()
    pane = machine.add_pane(screen=_copilot_box("[Pasted text #1 +2 lines]"), comm="copilot")
    tile = _ready(Tile("co", pane.pane_id, "copilot", machine, session="s", created=False))
    started = time.monotonic()
    result = asyncio.run(_deliverer().deliver(tile, "one\ntwo\nthree"))
    assert pane.typed[-1] == "<C-m>" and result.verified
    assert time.monotonic() - started < ECHO_TIMEOUT_S


def test_a_paste_the_agent_shows_as_a_label_is_submitted_without_waiting() -> None:
    """Claude shows a long paste as "[Pasted text #1 +3 lines]" (its profile's paste_labels):
    it has read the paste, so submit is pressed without polling for the text to show."""
    machine = MemoryMachine()
    tile, pane, _ = _claude(machine)
    pane.screen = "\n".join([RULE, "❯ [Pasted text #1 +3 lines]", RULE])
    slept: list[float] = []

    async def record(s: float) -> None:
        slept.append(s)
        await asyncio.sleep(0)

    result = asyncio.run(
        Deliverer(sleep=record).deliver(tile, "alpha\nbeta\ngamma\ndelta", delivery=Delivery.PASTE)
    )
    assert pane.typed[-2:] == _keys("claude", "x") and result.verified
    assert ECHO_POLL_S not in slept, slept


def test_a_shell_target_needs_allow_shell() -> None:
    machine = MemoryMachine()
    shell, _ = _shell(machine)
    with pytest.raises(MadohubValueError, match="allow_shell=True"):
        hand_send_plan(shell, "rm -rf x", delivery="typed", allow_shell=False)
    assert hand_send_plan(shell, "ls", delivery="typed", allow_shell=True).target is shell
    claude, _, _ = _claude(machine)
    assert hand_send_plan(claude, "hi", delivery="typed", allow_shell=False).target is claude


def test_a_shell_reader_takes_nothing_without_allow_shell() -> None:
    """Also where a profile's process token names the shell (an agents.toml matching
    ``bash``): the reader's own program decides."""
    machine = MemoryMachine()
    shell, pane = _shell(machine)
    with pytest.raises(DeliveryError, match="allow_shell=True"):
        asyncio.run(_deliverer().deliver(shell, "rm -rf x"))
    assert pane.typed == []
    asyncio.run(_deliverer().deliver(shell, "ls", allow_shell=True))
    assert pane.typed == ["ls", "<C-j>"]
    # An "agent" whose process is a bash at its prompt is a shell all the same.
    fake = machine.add_pane(screen="> ", comm="bash", argv=["bash"])
    machine.processes[fake.pid].environ = {"CLAUDE_CONFIG_DIR": CONFIG}
    claude = _ready(Tile("cl", fake.pane_id, "claude", machine, session="s", created=False))
    machine.processes[fake.pid].argv = ["claude"]  # detected as claude by its argv[0] …
    machine.processes[fake.pid].comm = "bash"  # … but the program is bash
    with pytest.raises(DeliveryError, match="a shell or interpreter"):
        asyncio.run(_deliverer().deliver(claude, "touch y", delivery=Delivery.LEGACY))
    assert fake.typed == []


def test_a_suspended_agent_gets_nothing_typed_into_the_shell_behind_it() -> None:
    machine = MemoryMachine()
    tile, pane, agent = _claude(machine)
    assert tile.state == "idle"  # (its status file says so)
    agent.state = "T"  # Ctrl-Z: the shell takes the terminal back
    machine.foreground(pane, machine.processes[pane.pid].pgrp)
    with pytest.raises(DeliveryError, match="stopped") as err:
        asyncio.run(_deliverer().deliver(tile, "touch x", ready_timeout_s=5))
    assert "nothing was typed" in str(err.value)
    assert pane.typed == []


def test_an_agent_stopped_while_typing_gets_no_more_lines_and_no_submit() -> None:
    machine = MemoryMachine()
    tile, pane, agent = _claude(machine)
    lines = [f"line {i}" for i in range(6)]

    def stop_after_three(_pane: MemoryPane, text: str) -> None:
        if text == "line 2":
            agent.state = "T"

    machine.on_typed = stop_after_three
    with pytest.raises(TypingStopped, match="after 3 of 6 lines"):
        asyncio.run(_deliverer().deliver(tile, "\n".join(lines)))
    assert [p for p in pane.typed if not p.startswith("<")] == lines[:3]
    assert not any(p in _keys("claude", "x") for p in pane.typed[-1:])


def test_a_synchronized_window_gets_nothing_typed() -> None:
    machine = MemoryMachine()
    tile, pane, _ = _claude(machine)
    pane.synchronized = True
    with pytest.raises(DeliveryError, match="synchronize-panes"):
        asyncio.run(_deliverer().deliver(tile, "hello"))
    assert pane.typed == []


def test_output_pushed_on_the_memory_machine_reaches_a_listener() -> None:
    machine = MemoryMachine()
    tile, pane = _shell(machine)

    async def listen() -> bytes:
        stream = await machine.watch(pane.pane_id, "s")
        listener = stream.listen()
        machine.output(pane.pane_id, b"hello \\ world\n")
        return listener.take()

    assert asyncio.run(listen()) == b"hello \\ world\n"
    assert tile.state == "idle"  # a shell at its prompt
