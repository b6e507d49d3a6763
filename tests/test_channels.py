"""Native channels (issue 39): Qwen Code's file channel read from what the real Qwen Code
0.24.4 wrote (tests/fixtures/channels), and the channel plumbing on a real tmux server."""

from __future__ import annotations

import json
from pathlib import Path

from madohub_nb.io.agent_channels.base import (
    ChannelAsk,
    ChannelAskResolved,
    ChannelBroken,
    ChannelTurn,
    ChannelTurnStarted,
)
from madohub_nb.io.agent_channels.qwen import QwenReader

FIXTURES = Path(__file__).parent / "fixtures" / "channels"


def _events(reader: QwenReader, lines: list[str]) -> list[object]:
    return [e for raw in lines for e in reader.line(raw, 1.0)]


def test_qwen_reader_turns_real_out_lines_into_turns_with_answer_and_usage() -> None:
    lines = (FIXTURES / "qwen-0.24.4-out.jsonl").read_text().splitlines()
    reader = QwenReader(expected=[("Third long", "p3")])
    events = _events(reader, lines)
    assert reader.started
    started = [e for e in events if isinstance(e, ChannelTurnStarted)]
    turns = [e for e in events if isinstance(e, ChannelTurn)]
    assert [s.prompt for s in started] == ["First prompt [[sleep 3]]", "Third long"]
    assert [s.prompt_id for s in started] == [None, "p3"]  # the first: not one the hub wrote
    # Qwen glued the answer of a prompt submitted while busy to the running turn's (why the
    # channel writes a prompt only once the turn ended).
    assert turns[0].answer == "Done: First prompt [[sleep 3]]Done: Second while busy"
    assert turns[1].answer == "\n".join(f"Answer line {i}" for i in range(30))
    assert turns[1].prompt_id == "p3" and turns[1].model == "fake-model"
    assert (turns[1].input_tokens, turns[1].output_tokens) == (21582, 109)
    assert isinstance(events[-1], ChannelBroken) and not reader.busy


def test_qwen_reader_a_tool_call_does_not_end_the_turn_and_asks_carry_choices() -> None:
    def line(**msg: object) -> str:
        return json.dumps(msg)

    reader = QwenReader()
    stop = line(type="stream_event", event={"type": "message_stop"})
    ask = line(
        type="control_request", request_id="r1",
        request={"subtype": "can_use_tool", "tool_name": "run_shell_command",
                 "input": {"command": "touch x", "description": "make x"}},
    )  # fmt: skip
    events = _events(reader, [
        line(type="user", uuid="u1", message={"role": "user", "content": [{"type": "text", "text": "go"}]}),
        line(type="assistant", message={"content": [{"type": "tool_use", "name": "run_shell_command"}],
                                        "usage": {"input_tokens": 10, "output_tokens": 2}}),
        stop, ask, line(type="control_response", request_id="r1"),
        line(type="assistant", message={"content": [{"type": "text", "text": "made"}],
                                        "usage": {"input_tokens": 12, "output_tokens": 3}}),
        stop,
    ])  # fmt: skip
    asks = [e for e in events if isinstance(e, ChannelAsk)]
    assert asks and asks[0].command == "touch x" and asks[0].choices == ("allow", "deny")
    assert any(isinstance(e, ChannelAskResolved) for e in events)
    (turn,) = [e for e in events if isinstance(e, ChannelTurn)]
    assert (turn.answer, turn.input_tokens, turn.output_tokens) == ("made", 22, 5)
