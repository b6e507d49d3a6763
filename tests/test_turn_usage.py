"""What the answer's turn cost: model, tokens, duration, tool calls, read backwards.

Real agent files from ``shared/fixtures`` (numbers checked by hand and by a plain
forward parse written here), plus synthetic files for every kind of bad input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES

from madohub_nb.io.transcripts import (
    CHUNK_BYTES,
    TURN_SCAN_LINES,
    ReadStats,
    TurnUsage,
    read_last_response,
    read_turn_usage,
)

CODEX_FIXTURE = FIXTURES / "real" / "codex" / "codex_rollout_tui.jsonl"
CLAUDE_FIXTURES = sorted((FIXTURES / "real" / "claude").glob("transcript_*.jsonl")) + sorted(
    p for p in (FIXTURES / "public" / "claude").glob("*.jsonl") if p.stat().st_size
)

# Read off the fixture lines by hand (line numbers are 0-based):
HAND_CHECKED: dict[str, TurnUsage] = {
    # line 7: one message, usage 10 in / 10 out; line 8 turn_duration 414.
    "real/claude/transcript_minimal.jsonl": TurnUsage(
        "claude-opus-4-8", 10, 10, 0, 0, 414.0, 0, 1, True
    ),
    # prompt line 21; msg_fake_1740… (lines 22 text + 23 tool_use, 10/20), tool result,
    # msg_fake_490a… (line 25, 10/9); turn_duration 578 → 20 in, 29 out, 1 tool call.
    "real/claude/transcript_with_tool_use.jsonl": TurnUsage(
        "claude-opus-4-8", 20, 29, 0, 0, 578.0, 1, 2, True
    ),
    # prompt line 83; msg_fake_e031… (10/20, tool_use on line 85), msg_fake_c5e5… (10/9); 664 ms.
    "real/claude/transcript_long_session_submit_tests.jsonl": TurnUsage(
        "claude-opus-4-8", 20, 29, 0, 0, 664.0, 1, 2, True
    ),
    # Claude Code 2.1.332: line 23 (10/9), line 25 turn_duration 1611.
    "real/claude/transcript_2.1.332_minimal.jsonl": TurnUsage(
        "claude-opus-5-5", 10, 9, 0, 0, 1611.0, 0, 1, True
    ),
    # 2.1.42 writes stop_hook_summary, no turn_duration: turn_ms unknown. Prompt line 51,
    # msg_01EfSS… on lines 52-54 (3 in, 1 out, 28242 cache read, 75 cache write).
    "public/claude/03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl": TurnUsage(
        "claude-opus-4-6", 3, 1, 28242, 75, None, 0, 1, True
    ),
    # Prompt line 433; msg_01SrNF… lines 434 (output 1) and 435 (output 976, tool_use): its
    # newest line counts, once; msg_01UHc2… line 437 (6/10/20542/1004).
    # 3+6=9 in, 976+10=986 out, 20121+20542=40663 read, 421+1004=1425 write.
    "public/claude/fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl": TurnUsage(
        "claude-sonnet-4-20250514", 9, 986, 40663, 1425, None, 1, 2, True
    ),
    # Codex: last turn lines 45-53; one token_count (last_token_usage 10 in, 0 cached, 5 out),
    # turn_context model fake-model, task_complete duration_ms 5251.
    "real/codex/codex_rollout_tui.jsonl": TurnUsage("fake-model", 10, 5, 0, 0, 5251.0, 0, 1, True),
}


def forward_claude_usage(path: Path) -> dict[str, Any]:
    """The plain way, independent of the reader: parse every line forwards, then sum."""
    recs = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("isSidechain") is not True:
            recs.append(rec)

    def has_text(r: dict[str, Any]) -> bool:
        content = r["message"].get("content")
        return isinstance(content, list) and any(
            b.get("type") == "text" and b.get("text", "").strip() for b in content
        )

    def is_prompt(r: dict[str, Any]) -> bool:
        if r.get("type") != "user" or r.get("isMeta"):
            return False
        c = r["message"].get("content")
        if isinstance(c, list) and any(b.get("type") == "tool_result" for b in c):
            return False
        first = c if isinstance(c, str) else (c[0].get("text", "") if c else "")
        return not first.lstrip().startswith(("<", "Caveat:", "[Request interrupted"))

    answer = max(i for i, r in enumerate(recs) if r.get("type") == "assistant" and has_text(r))
    start = max((i for i in range(answer) if is_prompt(recs[i])), default=-1)
    end = next(
        (i for i in range(answer, len(recs)) if is_prompt(recs[i]) or _is_duration(recs[i])),
        len(recs),
    )
    per_message: dict[str, dict[str, int]] = {}
    tools = 0
    for r in recs[start + 1 : end]:
        if r.get("type") != "assistant":
            continue
        per_message[r["message"]["id"]] = r["message"]["usage"]  # the newest line wins
        tools += sum(b.get("type") == "tool_use" for b in r["message"]["content"])
    duration = recs[end]["durationMs"] if end < len(recs) and _is_duration(recs[end]) else None
    return {
        "input_tokens": sum(u["input_tokens"] for u in per_message.values()),
        "output_tokens": sum(u["output_tokens"] for u in per_message.values()),
        "cache_read_tokens": sum(u["cache_read_input_tokens"] for u in per_message.values()),
        "cache_write_tokens": sum(u["cache_creation_input_tokens"] for u in per_message.values()),
        "tool_calls": tools,
        "turn_ms": None if duration is None else float(duration),
        "model": recs[answer]["message"]["model"],
    }


def _is_duration(r: dict[str, Any]) -> bool:
    return r.get("type") == "system" and r.get("subtype") == "turn_duration"


# --------------------------------------------------------------------------- fixtures


def test_a_turn_without_its_duration_record_is_measured_from_its_record_times(
    tmp_path: Path,
) -> None:
    # Claude Code 2.1.197 writes turn_duration after its Stop hook (issue 38 item 12): read
    # before it, the turn's span comes from its own records' times, and says so.
    src = FIXTURES / "real/claude/transcript_minimal.jsonl"
    lines = src.read_text().splitlines()
    recs = [json.loads(line) for line in lines]
    path = tmp_path / "t.jsonl"
    path.write_text(
        "\n".join(line for line, r in zip(lines, recs, strict=True) if not _is_duration(r)) + "\n"
    )
    found = read_last_response(path, usage=True)
    assert found is not None and found.usage is not None
    assert found.usage.turn_ms is None  # the record's own duration is not there (yet)
    from datetime import datetime

    def at(r: dict[str, Any]) -> float:
        return datetime.fromisoformat(r["timestamp"].replace("Z", "+00:00")).timestamp()

    prompt = max(i for i, r in enumerate(recs) if r.get("type") == "user")
    answer = max(i for i, r in enumerate(recs) if r.get("type") == "assistant")
    want = round((at(recs[answer]) - at(recs[prompt])) * 1000, 3)
    assert found.usage.measured_turn_ms == want > 0
    whole = read_last_response(src, usage=True)
    assert whole is not None and whole.usage is not None and whole.usage.turn_ms == 414.0


def test_a_first_prompt_written_after_its_answer_keeps_the_turn_duration(tmp_path: Path) -> None:
    # Claude Code 2.1.197 at times writes a session's first prompt line after the answer's
    # line (seen with the real CLI in tests/real_agents/test_real_hook_routes.py): the
    # turn_duration that follows still belongs to that turn.
    lines = (FIXTURES / "real/claude/transcript_minimal.jsonl").read_text().splitlines()
    kinds = [json.loads(line).get("type") for line in lines]
    prompt, answer = kinds.index("user"), kinds.index("assistant")
    moved = lines[:prompt] + lines[prompt + 1 : answer + 1] + [lines[prompt]] + lines[answer + 1 :]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(moved) + "\n")
    found = read_last_response(path, usage=True)
    assert found is not None and found.usage is not None
    assert (found.usage.turn_ms, found.usage.input_tokens, found.usage.complete) == (
        414.0,
        10,
        True,
    )


@pytest.mark.parametrize("name", sorted(HAND_CHECKED))
def test_turn_usage_of_real_files_matches_the_hand_checked_numbers(name: str) -> None:
    found = read_last_response(FIXTURES / name, usage=True)
    assert found is not None
    assert found.usage == HAND_CHECKED[name]
    assert read_turn_usage(FIXTURES / name) == HAND_CHECKED[name]


@pytest.mark.parametrize("path", CLAUDE_FIXTURES, ids=lambda p: p.name)
def test_claude_turn_usage_equals_a_plain_forward_parse(path: Path) -> None:
    usage = read_turn_usage(path)
    if not path.read_text().count('"type":"assistant"'):
        assert usage is None
        return
    assert usage is not None and usage.complete
    expected = forward_claude_usage(path)
    assert {k: getattr(usage, k) for k in expected} == expected


@pytest.mark.parametrize("path", [*CLAUDE_FIXTURES, CODEX_FIXTURE], ids=lambda p: p.name)
def test_the_answer_is_the_same_with_and_without_usage(path: Path) -> None:
    plain, with_usage = read_last_response(path), read_last_response(path, usage=True)
    if plain is None:
        assert with_usage is None
        return
    assert with_usage is not None
    assert (with_usage.text, with_usage.message_id, with_usage.method) == (
        plain.text,
        plain.message_id,
        plain.method,
    )
    assert plain.usage is None and with_usage.usage is not None


def test_usage_read_stops_at_the_turn_start_not_the_file_start(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    old_turns = [line for i in range(5000) for line in turn(f"p{i}", f"m{i}", 1000, 10)]
    write(path, *old_turns, *turn("last", "final", 7, 3))
    stats = ReadStats()
    usage = read_turn_usage(path, stats=stats)
    assert usage is not None and (usage.input_tokens, usage.output_tokens) == (7, 3)
    assert stats.lines < 10 and stats.bytes_read <= CHUNK_BYTES < path.stat().st_size / 30


# --------------------------------------------------------------------------- synthetic Claude


def prompt(text: str) -> dict[str, Any]:
    return {"type": "user", "isSidechain": False, "message": {"role": "user", "content": text}}


def result() -> dict[str, Any]:
    content = [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]
    return {"type": "user", "message": {"role": "user", "content": content}}


def line(
    mid: str | None,
    block: dict[str, Any],
    usage: object = None,
    model: object = "claude-sonnet-4-5-20250929",
    sidechain: bool = False,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "model": model, "content": [block]}
    if mid is not None:
        message["id"] = mid
    if usage is not None:
        message["usage"] = usage
    return {"type": "assistant", "isSidechain": sidechain, "message": message}


def usage(i: object = 1, o: object = 2, r: object = 3, w: object = 4) -> dict[str, object]:
    return {
        "input_tokens": i,
        "output_tokens": o,
        "cache_read_input_tokens": r,
        "cache_creation_input_tokens": w,
    }


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def tool(tid: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": "Bash", "input": {}}


def duration(ms: object) -> dict[str, Any]:
    return {"type": "system", "subtype": "turn_duration", "durationMs": ms}


def turn(p: str, mid: str, i: int, o: int) -> list[dict[str, Any]]:
    return [prompt(p), line(mid, text(f"answer {mid}"), usage(i, o, 0, 0)), duration(100)]


def write(path: Path, *records: dict[str, Any] | str) -> Path:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records),
    )
    return path


def test_a_message_written_over_several_lines_counts_once_with_its_newest_usage(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path / "t.jsonl",
        prompt("go"),
        line("m1", text("Looking."), usage(5, 1, 100, 10)),
        line("m1", tool("t1"), usage(5, 40, 100, 10)),
        result(),
        line("m2", tool("t2"), usage(2, 30, 200, 20)),
        result(),
        line("m3", text("Done."), usage(1, 8, 300, 30)),
        duration(4321),
    )
    u = read_turn_usage(path)
    assert u == TurnUsage("claude-sonnet-4-5-20250929", 8, 78, 600, 60, 4321.0, 2, 3, True)


def test_sidechain_lines_and_earlier_turns_are_not_counted(tmp_path: Path) -> None:
    path = write(
        tmp_path / "t.jsonl",
        *turn("first", "m0", 1000, 1000),
        prompt("second"),
        line("s1", tool("ts"), usage(900, 900, 900, 900), sidechain=True),
        line("m1", text("Answer."), usage(3, 4, 5, 6)),
        duration(10),
    )
    u = read_turn_usage(path)
    assert u is not None and (u.input_tokens, u.output_tokens, u.tool_calls) == (3, 4, 0)


def test_a_later_turn_still_running_is_not_mixed_into_the_answers_turn(tmp_path: Path) -> None:
    path = write(
        tmp_path / "t.jsonl",
        prompt("first"),
        line("m1", text("Answer one."), usage(3, 4, 5, 6)),
        duration(777),
        prompt("second, busy"),
        line("m2", tool("t9"), usage(50, 50, 50, 50), model="claude-opus-4-1"),
    )
    found = read_last_response(path, usage=True)
    assert found is not None and found.text == "Answer one."
    assert found.usage == TurnUsage("claude-sonnet-4-5-20250929", 3, 4, 5, 6, 777.0, 0, 1, True)


def test_local_commands_and_meta_lines_after_the_answer_do_not_start_a_turn(
    tmp_path: Path,
) -> None:
    caveat = {**prompt("Caveat: The messages below were generated by the user"), "isMeta": True}
    path = write(
        tmp_path / "t.jsonl",
        prompt("go"),
        line("m1", text("Answer."), usage(3, 4, 5, 6)),
        duration(12),
        caveat,
        prompt("<command-name>/exit</command-name>"),
        prompt("<local-command-stdout>Bye</local-command-stdout>"),
    )
    u = read_turn_usage(path)
    assert u is not None and (u.input_tokens, u.turn_ms) == (3, 12.0)


# --------------------------------------------------------------------------- bad input


def test_missing_usage_leaves_the_tokens_empty_and_keeps_the_rest(tmp_path: Path) -> None:
    path = write(
        tmp_path / "t.jsonl",
        prompt("go"),
        line("m1", tool("t1"), None),
        result(),
        line("m2", text("Answer."), usage(3, 4, 5, 6)),
        duration(99),
    )
    found = read_last_response(path, usage=True)
    assert found is not None and found.text == "Answer."
    assert found.usage == TurnUsage(
        "claude-sonnet-4-5-20250929", None, None, None, None, 99.0, 1, 2, True
    )


@pytest.mark.parametrize(
    "bad",
    [-5, "12x", None, True, [3], {"n": 1}, 1.5, float("nan")],
    ids=["negative", "text", "null", "bool", "list", "dict", "fraction", "nan"],
)
def test_a_malformed_token_count_empties_only_that_column(tmp_path: Path, bad: object) -> None:
    bad_usage = usage(3, bad, 5, 6)
    path = tmp_path / "t.jsonl"
    path.write_text(
        "\n".join(
            json.dumps(r)
            for r in (
                prompt("go"),
                line("m1", text("Answer."), bad_usage),
                duration(10),
            )
        )
        + "\n"
    )
    found = read_last_response(path, usage=True)
    assert found is not None and found.text == "Answer."
    assert found.usage is not None
    assert (found.usage.input_tokens, found.usage.output_tokens) == (3, None)
    assert (found.usage.cache_read_tokens, found.usage.cache_write_tokens) == (5, 6)


@pytest.mark.parametrize("bad_usage", ["lots", 42, [1, 2], None])
def test_a_usage_that_is_not_an_object_gives_empty_tokens(
    tmp_path: Path, bad_usage: object
) -> None:
    message = line("m1", text("Answer."))
    message["message"]["usage"] = bad_usage
    path = write(tmp_path / "t.jsonl", prompt("go"), message, duration(10))
    found = read_last_response(path, usage=True)
    assert found is not None and found.text == "Answer." and found.usage is not None
    assert found.usage.input_tokens is None and found.usage.turn_ms == 10.0


@pytest.mark.parametrize(
    ("bad_ms", "bad_model"), [(-1, -1), ("soon", ""), (None, None), ([1], [1])]
)
def test_a_malformed_duration_or_model_is_left_empty(
    tmp_path: Path, bad_ms: object, bad_model: object
) -> None:
    path = write(
        tmp_path / "t.jsonl",
        prompt("go"),
        line("m1", text("Answer."), usage(), model=bad_model),
        duration(bad_ms),
    )
    u = read_turn_usage(path)
    assert u is not None and (u.model, u.turn_ms, u.input_tokens) == (None, None, 1)


def test_a_message_and_content_that_are_not_objects_never_cost_the_answer(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path / "t.jsonl",
        prompt("go"),
        {"type": "assistant", "message": "garbage"},
        {"type": "assistant", "message": {"id": "m0", "content": "x", "usage": usage()}},
        {"type": "system", "subtype": "turn_duration"},
        line("m1", text("Answer."), usage()),
        '{"type": "assistant", "message": {"id": "half-writ',
    )
    found = read_last_response(path, usage=True)
    assert found is not None and found.text == "Answer." and found.usage is not None


def test_a_turn_whose_start_is_beyond_the_window_keeps_model_and_duration_only(
    tmp_path: Path,
) -> None:
    steps = []
    for i in range(TURN_SCAN_LINES // 2 + 10):
        steps += [line(f"m{i}", tool(f"t{i}"), usage(1, 1, 1, 1)), result()]
    path = write(
        tmp_path / "t.jsonl",
        prompt("a very long turn"),
        *steps,
        line("last", text("Finally done."), usage(1, 1, 1, 1)),
        duration(86_400_000),
    )
    found = read_last_response(path, usage=True)
    assert found is not None and found.text == "Finally done."
    assert found.usage == TurnUsage(
        model="claude-sonnet-4-5-20250929", turn_ms=86_400_000.0, complete=False
    )


def test_a_turn_just_inside_the_window_is_complete(tmp_path: Path) -> None:
    steps = []
    for i in range(TURN_SCAN_LINES // 2 - 10):
        steps += [line(f"m{i}", tool(f"t{i}"), usage(1, 1, 1, 1)), result()]
    path = write(
        tmp_path / "t.jsonl",
        prompt("a long turn"),
        *steps,
        line("last", text("Done."), usage(1, 1, 1, 1)),
    )
    u = read_turn_usage(path)
    n = TURN_SCAN_LINES // 2 - 10 + 1
    assert u == TurnUsage("claude-sonnet-4-5-20250929", n, n, n, n, None, n - 1, n, True)


def test_a_file_that_starts_inside_the_turn_counts_what_it_holds(tmp_path: Path) -> None:
    path = write(
        tmp_path / "t.jsonl",
        line("m1", tool("t1"), usage(2, 2, 2, 2)),
        result(),
        line("m2", text("Answer."), usage(3, 3, 3, 3)),
    )
    u = read_turn_usage(path)
    assert u is not None and u.complete and (u.input_tokens, u.tool_calls) == (5, 1)


def test_no_answer_means_no_usage(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", prompt("go"), line("m1", tool("t1"), usage()))
    assert read_last_response(path, usage=True) is None
    assert read_turn_usage(path) is None
    assert read_turn_usage(tmp_path / "missing.jsonl") is None


# --------------------------------------------------------------------------- Codex


def rollout(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"timestamp": "2026-11-29T23:04:17.179Z", "type": kind, "payload": payload}


def token_count(total_in: int, last: dict[str, object] | None) -> dict[str, Any]:
    info = (
        None
        if last is None
        else {"total_token_usage": {"input_tokens": total_in}, "last_token_usage": last}
    )
    return rollout("event_msg", {"type": "token_count", "info": info})


def codex_turn(tid: str, model: str, *middle: dict[str, Any], ms: object = 250) -> list[Any]:
    return [
        rollout("event_msg", {"type": "task_started", "turn_id": tid}),
        rollout("turn_context", {"turn_id": tid, "model": model}),
        *middle,
        rollout(
            "event_msg",
            {
                "type": "task_complete",
                "turn_id": tid,
                "last_agent_message": f"answer {tid}",
                "duration_ms": ms,
            },
        ),
    ]


def test_codex_tokens_are_summed_per_call_with_cached_input_split_out(tmp_path: Path) -> None:
    def last(i: int, c: int, o: int) -> dict[str, object]:
        return {"input_tokens": i, "cached_input_tokens": c, "output_tokens": o}

    path = write(
        tmp_path / "r.jsonl",
        rollout("session_meta", {"id": "s"}),
        *codex_turn("t1", "gpt-old", token_count(500, last(500, 0, 500))),
        *codex_turn(
            "t2",
            "gpt-5.1-codex",
            rollout("response_item", {"type": "function_call", "call_id": "c1"}),
            token_count(1100, last(600, 200, 40)),
            token_count(1100, last(600, 200, 40)),  # a repeated event: counted once
            token_count(0, None),  # rate limits only
            rollout("response_item", {"type": "custom_tool_call", "call_id": "c2"}),
            token_count(1800, last(700, 650, 60)),
            ms="1234",
        ),
    )
    found = read_last_response(path, usage=True)
    assert found is not None and found.text == "answer t2"
    # input: (600-200) + (700-650) = 450; cached 200 + 650 = 850; output 40 + 60 = 100.
    # No cache_write_input_tokens in these events (older Codex): no cache writes.
    assert found.usage == TurnUsage("gpt-5.1-codex", 450, 100, 850, 0, 1234.0, 2, 2, True)


def test_codex_cached_above_input_is_malformed(tmp_path: Path) -> None:
    bad = {
        "input_tokens": 5,
        "cached_input_tokens": 9,
        "output_tokens": 1,
        "cache_write_input_tokens": -3,
    }
    path = write(tmp_path / "r.jsonl", *codex_turn("t1", "m", token_count(5, bad)))
    u = read_turn_usage(path)
    assert u is not None and (u.input_tokens, u.output_tokens, u.cache_read_tokens) == (None, 1, 9)
    assert u.cache_write_tokens is None


# --------------------------------------------------------------------------- lines out of order


def chained(rec: dict[str, Any], uuid: str, parent: str | None) -> dict[str, Any]:
    return {**rec, "uuid": uuid, "parentUuid": parent}


def test_a_prompt_written_after_its_tool_call_still_counts_the_tool_call(tmp_path: Path) -> None:
    # The layout real Claude Code 2.1.197 wrote for a session's first turn whose tool waited
    # for permission: the tool-call message's lines come BEFORE the prompt line in the file.
    path = write(
        tmp_path / "t.jsonl",
        {"type": "ai-title", "aiTitle": "x"},
        chained(line("m1", text("Running it."), usage(3, 67, 20677, 1690)), "a1", "att2"),
        chained(line("m1", tool("t1"), usage(3, 67, 20677, 1690)), "a2", "a1"),
        {"type": "file-history-snapshot"},
        chained(prompt("Make a file"), "p", None),
        chained({"type": "attachment"}, "att1", "p"),
        chained({"type": "attachment"}, "att2", "att1"),
        chained(result(), "r", "a2"),
        chained(line("m2", text("Done: made it"), usage(3, 16, 22434, 51)), "a3", "r"),
        chained(duration(230), "d", "a3"),
    )
    found = read_last_response(path, usage=True)
    assert found is not None and found.text == "Done: made it"
    # 3+3 in, 67+16 out, 20677+22434 read, 1690+51 written, one tool call, two messages.
    assert found.usage == TurnUsage(
        "claude-sonnet-4-5-20250929", 6, 83, 43111, 1741, 230.0, 1, 2, True
    )


def test_an_earlier_turn_before_a_late_prompt_is_not_counted(tmp_path: Path) -> None:
    path = write(
        tmp_path / "t.jsonl",
        chained(prompt("first"), "p0", None),
        chained(line("m0", text("First answer."), usage(100, 100, 100, 100)), "a0", "p0"),
        chained(duration(5), "d0", "a0"),
        chained(line("m1", tool("t1"), usage(1, 2, 3, 4)), "a1", "p1"),
        chained(prompt("second"), "p1", "d0"),
        chained(result(), "r", "a1"),
        chained(line("m2", text("Second answer."), usage(1, 2, 3, 4)), "a2", "r"),
    )
    u = read_turn_usage(path)
    assert u is not None and (u.input_tokens, u.output_tokens, u.tool_calls) == (2, 4, 1)


def test_a_broken_chain_keeps_the_in_order_part_of_the_turn(tmp_path: Path) -> None:
    path = write(
        tmp_path / "t.jsonl",
        chained(prompt("first"), "p0", None),
        chained(line("m0", text("First answer."), usage(100, 100, 100, 100)), "a0", "p0"),
        chained(duration(5), "d0", "a0"),
        chained(prompt("second"), "p1", "d0"),
        chained(result(), "r", "missing-uuid"),
        chained(line("m2", text("Second answer."), usage(1, 2, 3, 4)), "a2", "r"),
    )
    u = read_turn_usage(path)
    assert u is not None and u.complete and (u.input_tokens, u.output_tokens) == (1, 2)
