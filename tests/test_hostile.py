"""Hostile routed content on real tmux: nothing reaches a target as control input.

Every test checks the receiving end: a recorder pane (raw mode) that writes
each byte it gets to a file, or a stand-in Claude whose transcript shows the
prompt it received. Hostile text enters the way it would in real use: typed by
hand, read from a source agent's transcript, written by the AI transform's
model, or printed by a shell.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from conftest import repaint, start_recorder, start_standin, user_prompts, wait_until

import madohub_nb as mh
from madohub_nb.agents.profiles import get_profile
from madohub_nb.defaults import MAX_ROUTED_CHARS
from madohub_nb.pipeline.extract import transcript_path
from madohub_nb.testing.fake_anthropic import FakeAnthropic

SUBMIT = "".join(get_profile("amp").submit_keys).encode()
"""What an Amp-like target gets after the content (Amp's submit keys: one ``\\r``)."""

# One line per kind of attack; the comment says what must survive of it.
HOSTILE = (
    "\x1b[31mred\x1b[0m plain\x07\n"  # CSI colours, BEL
    "\x1b]0;evil title\x07title gone\n"  # OSC window title
    "\x1b]52;c;ZWNobyBwd25lZA==\x07clip\x1b\\\n"  # OSC 52 clipboard write, a stray ST
    "\x1bP+q544e\x1b\\dcs\n"  # DCS (a terminfo query)
    "ctl\x03c\x04d\x1az\x1b\x00n\x7fb\n"  # Ctrl-C, Ctrl-D, Ctrl-Z, ESC, NUL, DEL
    "paste\x1b[201~end[201~ [20[201~1~x\n"  # bracketed-paste end markers, nested remnants
    "C-c\nEnter\nEscape\n"  # lines that are tmux key names
    "ends with;\ntwo;;\n\\;\n"  # tmux reads an argument ending in ';' as a separator
    "\x9b31mc1\x9d0;t\x9c c1\n"  # 8-bit C1 CSI and OSC
    "bad\udc9bsur\udcffrogate\ud800\n"  # lone surrogates: invalid UTF-8 from a transcript
    "cr\rline\r\n"  # CR would submit early
    "tab\there"
)
SAFE = (
    "red plain\ntitle gone\nclip\ndcs\nctlcdznb\npasteend x\nC-c\nEnter\nEscape\n"
    "ends with;\ntwo;;\n\\;\nc1 c1\nbad\ufffdsur\ufffdrogate\ufffd\ncr\nline\ntab\there"
)
"""HOSTILE as it must arrive: text, newlines and the tab; every control sequence gone."""


def _recorded(path: Path) -> bytes:
    return path.read_bytes() if path.exists() else b""


def _wait_bytes(path: Path, submits: int, timeout_s: float = 30) -> bytes:
    """The recorder's bytes once ``submits`` prompts were submitted (``SUBMIT`` each)."""
    wait_until(
        lambda: _recorded(path).count(SUBMIT) >= submits, timeout_s, what=f"{submits} submits"
    )
    return _recorded(path)


def control_input(data: bytes, allowed: bytes = b"\n\t") -> list[str]:
    """Every control character in ``data`` except ``allowed`` (C0, DEL, C1), as ``U+XXXX``."""
    text = data.decode("utf-8")  # strict: invalid UTF-8 must never be typed either
    return [
        f"U+{ord(c):04X}"
        for c in text
        if (ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F) and c not in allowed.decode()
    ]


def _inject_answer(tile: mh.Tile, text: str) -> None:
    """Append an assistant answer to a stand-in Claude's transcript, as Claude Code writes one."""
    path = transcript_path(tile)
    assert path is not None, "the source has no transcript yet"
    record = {
        "parentUuid": None,
        "isSidechain": False,
        "type": "assistant",
        "uuid": str(uuid.uuid4()),
        "timestamp": "2026-11-30T00:00:00.000Z",
        "message": {
            "id": f"msg_hostile_{uuid.uuid4().hex[:12]}",
            "type": "message",
            "role": "assistant",
            "model": "claude-standin",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
        },
    }
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")  # ensure_ascii: lone surrogates as \udcxx escapes


def test_control_input_finds_what_it_must() -> None:
    assert control_input(b"ok\n\tok") == []
    assert control_input(b"a\x03b\x1b[0m\x7f\xc2\x9b") == ["U+0003", "U+001B", "U+007F", "U+009B"]
    with pytest.raises(UnicodeDecodeError):
        control_input(b"bad \xff")


def test_hand_sent_hostile_text_is_typed_as_plain_text(hub: mh.Hub, tmp_path: Path) -> None:
    out = tmp_path / "typed.bin"
    start_recorder(hub, "rec", out)
    rec = hub.send("rec", HOSTILE).result(60)
    assert rec.status == "delivered", rec.error
    data = _wait_bytes(out, 1)
    # Line breaks arrive as Ctrl-J (0x0a), which does not submit; then the submit keys.
    assert data == SAFE.encode() + SUBMIT
    assert control_input(data[: -len(SUBMIT)]) == []


def test_pasted_hostile_text_cannot_end_the_bracketed_paste(hub: mh.Hub, tmp_path: Path) -> None:
    out = tmp_path / "pasted.bin"
    start_recorder(hub, "rec", out, paste=True)
    rec = hub.send("rec", HOSTILE, delivery="paste").result(60)
    assert rec.status == "delivered", rec.error
    data = _wait_bytes(out, 1)
    # tmux wraps the paste in the markers the app asked for and turns LF into CR inside it.
    body = SAFE.replace("\n", "\r").encode()
    assert data == b"\x1b[200~" + body + b"\x1b[201~" + SUBMIT
    assert data.count(b"\x1b[201~") == 1


def test_tmux_key_names_and_semicolons_are_typed_literally(hub: mh.Hub, tmp_path: Path) -> None:
    out = tmp_path / "keys.bin"
    start_recorder(hub, "rec", out)
    lines = [
        "C-c",
        "Enter",
        "C-d",
        "BSpace",
        "Escape",
        "a;",
        ";;",
        "end;;;",
        "\\;",
        "mid;dle",
        "{",
        "}",
        "#{pane_id}",
        "%1",
        "-l",
        "--",
        "\\",
        "$HOME `id` $(id)",
    ]
    text = "\n".join(lines)
    assert hub.send("rec", text).result(60).status == "delivered"
    assert _wait_bytes(out, 1) == text.encode() + SUBMIT


def test_routed_transcript_answer_is_sanitized_before_typing(
    hub: mh.Hub, project: Path, tmp_path: Path
) -> None:
    out = tmp_path / "routed.bin"
    source = start_standin(hub, "src", cwd=project)
    start_recorder(hub, "rec", out)
    route = hub.connect("src", "rec", template="From {source}:\n{output}", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 10)
    hub.send("src", "hello").result(30)
    assert _wait_bytes(out, 1) == b"From src:\nDone: hello" + SUBMIT

    _inject_answer(source, HOSTILE)
    repaint(hub, source)  # (the turn's output, seen: both keys at once may show nothing)
    data = _wait_bytes(out, 2)
    assert data == b"From src:\nDone: hello" + SUBMIT + b"From src:\n" + SAFE.encode() + SUBMIT
    wait_until(lambda: len(hub.log.df[hub.log.df.route_id == route.id]) == 2, 10)
    row = hub.log.df[hub.log.df.route_id == route.id].iloc[-1]
    assert row["status"] == "delivered", row["error"]
    assert row["extraction_method"] == "jsonl"
    # The log keeps what the agent said (lone surrogates made storable), escapes and all.
    assert row["extracted"].startswith("\x1b[31mred")
    assert "\ufffd" in row["extracted"]


def test_ai_written_prompt_with_escapes_is_sanitized(
    hub: mh.Hub, project: Path, tmp_path: Path
) -> None:
    out = tmp_path / "ai.bin"
    with FakeAnthropic(reply=HOSTILE) as fake:
        hub.base_url = fake.base_url
        hub.api_key = "sk-ant-test-hostile-0123456789"
        start_standin(hub, "src", cwd=project)
        sink = start_standin(hub, "sink", cwd=project)
        start_recorder(hub, "rec", out)
        to_rec = hub.connect("src", "rec", transform="ai-routing", cooldown_ms=1000)
        to_sink = hub.connect("src", "sink", transform="summary", cooldown_ms=1000)
        wait_until(lambda: to_rec.ready.is_set() and to_sink.ready.is_set(), 10)
        hub.send("src", "write the plan").result(30)
        # The model's reply is stripped of surrounding blanks, then sanitized.
        assert _wait_bytes(out, 1) == SAFE.encode() + SUBMIT
        # Claude Code takes the Tab key as a command: a tab is typed as its profile says.
        wait_until(lambda: len(user_prompts(sink)) == 1, 30)
        assert user_prompts(sink) == [SAFE.replace("\t", get_profile("claude").typed_tab)]
        assert len(fake.requests) == 2


def test_huge_output_is_capped_with_a_marker(hub: mh.Hub, tmp_path: Path) -> None:
    out = tmp_path / "huge.bin"
    start_recorder(hub, "rec", out)
    # 10 MB on one line, with two-byte characters and semicolons at chunk edges.
    huge = ("abcé;" * 2_000_001)[:10_000_000]
    rec = hub.send("rec", huge).result(120)
    assert rec.status == "delivered", rec.error
    data = _wait_bytes(out, 1, timeout_s=60)
    cut = len(huge) - MAX_ROUTED_CHARS
    marker = f"\n[… madohub_nb: cut {cut} characters …]"
    assert data == (huge[:MAX_ROUTED_CHARS] + marker).encode() + SUBMIT


def test_invalid_utf8_and_controls_printed_by_a_shell_are_not_typed(
    hub: mh.Hub, project: Path, tmp_path: Path
) -> None:
    out = tmp_path / "shell.bin"
    script = project / "evil.sh"
    # Printed by a program, so the command line echoed by the shell carries none of it.
    script.write_bytes(
        b"#!/bin/sh\nprintf 'A\\003B\\377\\376C\\033]52;c;aGk=\\007D\\033[201~E\\032F\\n'\n"
    )
    script.chmod(0o755)
    sh = hub.tile("sh", agent="shell", command="bash --norc --noprofile", cwd=project)
    wait_until(lambda: sh.state == "idle", 10, what="shell prompt")
    start_recorder(hub, "rec", out)
    # The output streamed from the pane itself, not a screen capture tmux has rendered.
    route = hub.connect("sh", "rec", trigger="always", template="{output}", cooldown_ms=1000)
    wait_until(lambda: route.ready.is_set(), 10)
    hub.send("sh", "./evil.sh", allow_shell=True).result(30)
    wait_until(lambda: b"CDEF" in _recorded(out) and _recorded(out).endswith(SUBMIT), 30)
    route.stop()
    data = _recorded(out)
    assert control_input(data.replace(SUBMIT, b"")) == []
    assert b"AB\xef\xbf\xbd\xef\xbf\xbdCDEF" in data  # 0xff 0xfe arrive as U+FFFD, no bytes


def test_template_is_filled_once_without_format_injection(hub: mh.Hub, project: Path) -> None:
    start_standin(hub, "src", cwd=project)
    sink = start_standin(hub, "sink", cwd=project)
    route = hub.connect(
        "src", "sink", template="R{round}/{maxRounds} {source}: {output}", cooldown_ms=1000
    )
    wait_until(lambda: route.ready.is_set(), 10)
    # The echo persona answers "Done: " + the first 40 characters of the prompt.
    bait = "{output}{round}{__class__}{0}%s{{x}}{!r}"
    hub.send("src", bait).result(30)
    expected = f"R1/5 src: Done: {bait[:40]}"
    wait_until(lambda: user_prompts(sink) == [expected], 30, what="the filled template")
    wait_until(lambda: route.last_status == "delivered", 10, what="the round logged")
    (row,) = hub.log.df[hub.log.df.route_id == route.id].to_dict("records")
    assert row["prompt"] == expected


def test_json_template_is_delivered_verbatim_and_a_near_miss_warns_at_connect(
    hub: mh.Hub, project: Path
) -> None:
    start_standin(hub, "src", cwd=project)
    sink = start_standin(hub, "sink", cwd=project)
    with pytest.warns(mh.MadohubWarning, match=r"\{ouput\}.*did you mean \{output\}") as caught:
        hub.connect("src", "sink", template="{ouput}", dispatch="shadow", cooldown_ms=1000)
    assert caught[0].filename == __file__  # the user's line, not the toolkit's
    route = hub.connect(
        "src",
        "sink",
        template='{"ok": true, "round": {round}, "text": "{output}"}',
        cooldown_ms=1000,
    )
    wait_until(lambda: route.ready.is_set(), 10)
    hub.send("src", "hi").result(30)
    expected = '{"ok": true, "round": 1, "text": "Done: hi"}'
    wait_until(lambda: expected in user_prompts(sink), 30, what="the JSON template delivered")


def test_typing_into_a_shell_needs_allow_shell(hub: mh.Hub, project: Path) -> None:
    marker = project / "pwned"
    sh = hub.tile("sh", agent="shell", command="bash --norc --noprofile", cwd=project)
    wait_until(lambda: sh.state == "idle", 10, what="shell prompt")
    start_standin(hub, "src", cwd=project)
    with pytest.raises(ValueError, match="allow_shell=True"):
        hub.send("sh", f"touch {marker}")
    with pytest.raises(ValueError, match="allow_shell=True"):
        hub.connect("src", "sh", template="touch " + str(marker) + " # {output}")
    # A shadow route may watch a shell target: it types nothing.
    route = hub.connect(
        "src", "sh", dispatch="shadow", template=f"touch {marker} # {{output}}", cooldown_ms=1000
    )
    wait_until(lambda: route.ready.is_set(), 10)
    hub.send("src", "go").result(30)
    wait_until(lambda: route.last_status == "shadow", 20)
    (row,) = hub.log.df[hub.log.df.route_id == route.id].to_dict("records")
    # Replaying a shadow round into the shell is typing into it: the same opt-in applies.
    with pytest.raises(ValueError, match="allow_shell=True"):
        hub.replay(row["round_id"], deliver=True)
    assert not marker.exists()
    # With the opt-in, typed text runs: the check above could have failed.
    hub.send("sh", f"touch {marker}", allow_shell=True).result(30)
    wait_until(marker.exists, 10, what="the opted-in command to run")
