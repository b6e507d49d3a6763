"""Transcript reading: last answers, end-of-turn evidence, finding the files.

Real agent files from ``shared/fixtures`` plus synthetic files in tmp dirs.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES

from madohub_nb.errors import MadohubValueError
from madohub_nb.io.agent_records import read_last_response, turn_finished
from madohub_nb.io.agent_records.base import Extraction, ReadStats, iter_lines_backwards
from madohub_nb.io.agent_records.claude import (
    claude_project_dir_name,
    cwd_to_project_dir,
    find_claude_transcript,
    java_string_hash,
)
from madohub_nb.io.agent_records.codex import (
    codex_session_meta,
    find_codex_rollout,
    find_codex_rollouts,
)

EXPECTED: dict[str, str | None] = json.loads((FIXTURES / "expected.json").read_text())
CODEX_FIXTURE = FIXTURES / "real" / "codex" / "codex_rollout_tui.jsonl"


# ---------------------------------------------------------------- helpers: Claude lines


def assistant(
    mid: str | None, *blocks: dict[str, Any], sidechain: bool = False, uuid: str = "u"
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": list(blocks)}
    if mid is not None:
        message["id"] = mid
    return {"type": "assistant", "isSidechain": sidechain, "uuid": uuid, "message": message}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def thinking(t: str = "hmm") -> dict[str, Any]:
    return {"type": "thinking", "thinking": t, "signature": "sig"}


def tool_use(name: str = "Bash") -> dict[str, Any]:
    return {"type": "tool_use", "id": "toolu_1", "name": name, "input": {"command": "ls"}}


def prompt(t: str) -> dict[str, Any]:
    return {"type": "user", "isSidechain": False, "message": {"role": "user", "content": t}}


def tool_result(out: str = "ok") -> dict[str, Any]:
    return {
        "type": "user",
        "isSidechain": False,
        "message": {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": out}],
        },
    }


def system(subtype: str) -> dict[str, Any]:
    return {"type": "system", "subtype": subtype, "isSidechain": False, "durationMs": 10}


def other(kind: str) -> dict[str, Any]:
    return {"type": kind, "sessionId": "s"}


def write_jsonl(path: Path, records: list[dict[str, Any]], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def answer(path: Path) -> str | None:
    ext = read_last_response(path)
    return ext.text if ext is not None else None


def codex_lines() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CODEX_FIXTURE.read_text().splitlines()]


def codex_index(lines: list[dict[str, Any]], kind: str, ptype: str, nth: int = -1) -> int:
    hits = [
        i for i, r in enumerate(lines) if r["type"] == kind and r["payload"].get("type") == ptype
    ]
    return hits[nth]


# ---------------------------------------------------------------- real fixtures


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_real_transcripts_give_the_expected_last_response(rel: str) -> None:
    ext = read_last_response(FIXTURES / rel)
    if EXPECTED[rel] is None:
        assert ext is None
        return
    assert ext is not None
    assert ext.text == EXPECTED[rel]
    assert ext.path == FIXTURES / rel
    assert ext.method == ("rollout" if "/codex/" in rel else "jsonl")
    assert ext.message_id


def test_claude_answer_identity_is_the_message_id() -> None:
    rel = "public/claude/03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl"
    records = [json.loads(line) for line in (FIXTURES / rel).read_text().splitlines()]
    last_text_ids = [
        r["message"]["id"]
        for r in records
        if r.get("type") == "assistant"
        and any(b.get("type") == "text" and b["text"].strip() for b in r["message"]["content"])
    ]
    ext = read_last_response(FIXTURES / rel)
    assert ext is not None and ext.message_id == last_text_ids[-1]


def test_codex_answer_identity_is_the_turn_id() -> None:
    lines = codex_lines()
    complete = lines[codex_index(lines, "event_msg", "task_complete")]
    ext = read_last_response(CODEX_FIXTURE)
    assert ext is not None and ext.message_id == complete["payload"]["turn_id"]


def test_the_prompt_of_the_answers_turn_is_read_with_its_usage(tmp_path: Path) -> None:
    """Claude: the user line that started the answer's turn (tool results are not prompts);
    a turn still in progress after it does not count. Codex: the turn's user_message."""
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            prompt("older task"),
            assistant("m0", text("older answer")),
            system("turn_duration"),
            prompt("review  the\ndiff"),
            assistant("m1", tool_use()),
            tool_result(),
            assistant("m2", text("looks fine")),
            system("turn_duration"),
            prompt("a newer task, still running"),
        ],
    )
    ext = read_last_response(path, usage=True)
    assert ext is not None and (ext.text, ext.prompt) == ("looks fine", "review  the\ndiff")
    assert read_last_response(path).prompt is None  # (without usage the turn is not read)
    lines = codex_lines()
    said = [
        r["payload"]["item"]["content"][0]["text"]
        for r in lines
        if r["payload"].get("type") == "item_completed"
        and r["payload"]["item"].get("type") == "UserMessage"
    ]
    ext = read_last_response(CODEX_FIXTURE, usage=True)
    assert ext is not None and said and ext.prompt == said[-1] == "Slow codex [[sleep 5]]"


# ---------------------------------------------------------------- Claude edge cases


def test_split_message_joins_text_blocks_of_every_line_with_its_id(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            prompt("do it"),
            assistant("m1", text("\n\n")),
            assistant("m1", thinking()),
            assistant("m1", text("First part.")),
            assistant("m1", tool_use()),
            tool_result(),
            assistant("m1", text("Second part."), tool_use()),
            other("progress"),
            system("turn_duration"),
        ],
    )
    ext = read_last_response(path)
    assert ext is not None
    assert ext.text == "First part.\n\nSecond part."
    assert ext.message_id == "m1"


def test_earlier_message_and_prompt_are_not_joined(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            prompt("one"),
            assistant("m0", text("Old answer.")),
            prompt("two"),
            assistant("m1", text("New answer.")),
        ],
    )
    assert answer(path) == "New answer."


def test_sidechain_lines_after_the_main_answer_are_ignored(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            prompt("go"),
            assistant("m1", text("Main answer.")),
            assistant("s1", text("Subagent chatter."), sidechain=True),
            assistant("m1", text("Subagent with a colliding id."), sidechain=True),
        ],
    )
    assert answer(path) == "Main answer."


def test_half_written_last_line_is_skipped(tmp_path: Path) -> None:
    half = '{"type":"assistant","isSidechain":false,"message":{"id":"m2","content":[{"type":"text","text":"Half wri'
    path = write_jsonl(
        tmp_path / "t.jsonl", [prompt("go"), assistant("m1", text("Complete answer."))], tail=half
    )
    assert answer(path) == "Complete answer."


def test_trailing_non_reply_records_are_ignored(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            prompt("go"),
            assistant("m1", text("The answer.")),
            system("turn_duration"),
            other("file-history-snapshot"),
            other("ai-title"),
            other("last-prompt"),
            other("summary"),
            prompt("<command-name>/exit</command-name>"),
            prompt("<local-command-stdout>See ya!</local-command-stdout>"),
        ],
    )
    assert answer(path) == "The answer."


def test_message_content_may_be_a_plain_string(tmp_path: Path) -> None:
    record = {
        "type": "assistant",
        "uuid": "u7",
        "message": {"id": "m1", "role": "assistant", "content": "Plain string answer."},
    }
    path = write_jsonl(tmp_path / "t.jsonl", [prompt("go"), record])
    ext = read_last_response(path)
    assert ext is not None and ext.text == "Plain string answer." and ext.message_id == "m1"


def test_line_without_message_id_is_identified_by_its_uuid(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [assistant(None, text("No id."), uuid="uuid-42")])
    ext = read_last_response(path)
    assert ext is not None and ext.text == "No id." and ext.message_id == "uuid-42"


def test_last_assistant_line_with_only_tool_use_falls_back_to_earlier_text(tmp_path: Path) -> None:
    same_id = write_jsonl(
        tmp_path / "same.jsonl",
        [prompt("go"), assistant("m1", text("Let me check.")), assistant("m1", tool_use())],
    )
    other_id = write_jsonl(
        tmp_path / "other.jsonl",
        [
            prompt("go"),
            assistant("m1", text("Looking.")),
            tool_result(),
            assistant("m2", thinking(), tool_use()),
        ],
    )
    assert answer(same_id) == "Let me check."
    assert answer(other_id) == "Looking."


def test_file_of_only_summaries_has_no_answer(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [{"type": "summary", "summary": f"s{i}", "leafUuid": "x"} for i in range(5)],
    )
    assert read_last_response(path) is None


def test_empty_file_has_no_answer(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    assert read_last_response(path) is None
    assert turn_finished(path) is None


def test_binary_file_has_no_answer(tmp_path: Path) -> None:
    rng = random.Random(7)
    path = tmp_path / "blob.jsonl"
    path.write_bytes(bytes(rng.getrandbits(8) for _ in range(300_000)) + b"\n{\x00\xff}\n")
    assert read_last_response(path) is None
    assert turn_finished(path) is None


def test_directory_missing_and_unreadable_paths_have_no_answer(tmp_path: Path) -> None:
    assert read_last_response(tmp_path) is None
    assert read_last_response(tmp_path / "does-not-exist.jsonl") is None
    assert turn_finished(tmp_path / "does-not-exist.jsonl") is None
    locked = write_jsonl(tmp_path / "locked.jsonl", [assistant("m1", text("Secret."))])
    locked.chmod(0)
    try:
        if os.geteuid() != 0:  # root reads through chmod 000
            assert read_last_response(locked) is None
            assert turn_finished(locked) is None
    finally:
        locked.chmod(0o600)


def test_fifo_is_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    assert read_last_response(fifo) is None
    assert turn_finished(fifo) is None


@pytest.mark.parametrize(
    "bad", [None, 42, b"/tmp/x.jsonl", ["a"]], ids=["none", "int", "bytes", "list"]
)
def test_path_of_wrong_type_is_refused(bad: object) -> None:
    with pytest.raises(MadohubValueError, match="str or os.PathLike"):
        read_last_response(bad)  # type: ignore[arg-type]
    with pytest.raises(MadohubValueError, match="str or os.PathLike"):
        turn_finished(bad)  # type: ignore[arg-type]


def test_multi_megabyte_single_lines_are_read_whole(tmp_path: Path) -> None:
    big = "x" * 5_000_000 + " end"
    last_is_big = write_jsonl(tmp_path / "a.jsonl", [prompt("go"), assistant("m1", text(big))])
    big_after = write_jsonl(
        tmp_path / "b.jsonl",
        [
            prompt("go"),
            assistant("m1", text("Short answer."), tool_use()),
            tool_result("y" * 6_000_000),
        ],
    )
    assert answer(last_is_big) == big
    assert answer(big_after) == "Short answer."


def test_extraction_refuses_an_unknown_method() -> None:
    with pytest.raises(MadohubValueError, match="jsonl, rollout, session, terminal"):
        Extraction(text="x", method="screen", path=None)


# ---------------------------------------------------------------- backwards reader


@pytest.mark.parametrize("chunk_bytes", [1, 3, 7, 64, 65536])
@pytest.mark.parametrize("trailing_newline", [True, False])
def test_backwards_reader_yields_every_line_in_reverse(
    tmp_path: Path, chunk_bytes: int, trailing_newline: bool
) -> None:
    rng = random.Random(chunk_bytes)
    lines = [
        ("".join(rng.choice('ab{}"') for _ in range(rng.randrange(0, 40)))).encode()
        for _ in range(60)
    ]
    data = b"\n".join(lines) + (b"\n" if trailing_newline else b"")
    path = tmp_path / "lines.txt"
    path.write_bytes(data)
    with path.open("rb") as f:
        got = list(iter_lines_backwards(f, chunk_bytes=chunk_bytes))
    assert got == list(reversed(data.split(b"\n")))


def test_backwards_reader_drops_lines_over_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "lines.txt"
    path.write_bytes(b"first\n" + b"z" * 5000 + b"\nlast\n")
    with path.open("rb") as f:
        got = list(iter_lines_backwards(f, chunk_bytes=16, max_line_bytes=1000))
    assert got == [b"", b"last", b"first"]


def test_backwards_reader_stopped_early_reads_only_the_tail(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    path.write_bytes(b"line of text\n" * 400_000)  # 5.2 MB
    stats = ReadStats()
    with path.open("rb") as f:
        lines = iter_lines_backwards(f, stats=stats)
        assert next(lines) == b""
        assert next(lines) == b"line of text"
    assert 0 < stats.bytes_read <= 64 * 1024


@pytest.fixture(scope="module")
def huge_transcript(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """~50 MB of real Claude lines (a fixture session repeated), ending in a known turn."""
    real = (FIXTURES / "real/claude/transcript_with_tool_use.jsonl").read_bytes()
    if not real.endswith(b"\n"):
        real += b"\n"
    path = tmp_path_factory.mktemp("huge") / "huge.jsonl"
    with path.open("wb") as f:
        for _ in range(50_000_000 // len(real) + 1):
            f.write(real)
        for rec in [
            prompt("final"),
            assistant("m-final", text("Final answer.")),
            tool_result(),
            system("turn_duration"),
        ]:
            f.write(json.dumps(rec).encode() + b"\n")
    return path


def test_last_response_of_a_50mb_transcript_reads_under_1mb(huge_transcript: Path) -> None:
    assert huge_transcript.stat().st_size > 50_000_000
    stats = ReadStats()
    ext = read_last_response(huge_transcript, stats=stats)
    assert ext is not None and ext.text == "Final answer."
    assert 0 < stats.bytes_read < 1_000_000


def test_turn_finished_of_a_50mb_transcript_reads_under_1mb(huge_transcript: Path) -> None:
    stats = ReadStats()
    assert turn_finished(huge_transcript, stats=stats) is True
    assert 0 < stats.bytes_read < 1_000_000


# ---------------------------------------------------------------- Codex rollouts


def test_codex_reply_written_twice_is_returned_once(tmp_path: Path) -> None:
    lines = codex_lines()
    item = codex_index(lines, "response_item", "message", nth=-1)
    mid_turn = write_jsonl(
        tmp_path / "mid.jsonl", lines[: item + 1]
    )  # reply written, no task_complete yet
    ext_mid = read_last_response(mid_turn)
    ext_full = read_last_response(CODEX_FIXTURE)
    assert ext_mid is not None and ext_full is not None
    assert ext_mid.text == ext_full.text == lines[item]["payload"]["content"][0]["text"]
    assert ext_mid.message_id == ext_full.message_id
    assert ext_mid.method == "rollout"


def older_rollout(turn_id: str | None) -> list[dict[str, Any]]:
    started: dict[str, Any] = {"type": "task_started"}
    if turn_id is not None:
        started["turn_id"] = turn_id
    reply = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Hi there."}],
    }
    return [
        {"timestamp": "t1", "type": "session_meta", "payload": {"id": "s", "cwd": "/w"}},
        {"timestamp": "t2", "type": "event_msg", "payload": started},
        {
            "timestamp": "t3",
            "type": "event_msg",
            "payload": {"type": "agent_message", "message": "Hi there."},
        },
        {"timestamp": "t3", "type": "response_item", "payload": reply},
        {"timestamp": "t4", "type": "event_msg", "payload": {"type": "token_count"}},
    ]


@pytest.mark.parametrize("turn_id", ["turn-9", None])
def test_codex_older_rollouts_keep_one_identity_per_turn(
    tmp_path: Path, turn_id: str | None
) -> None:
    records = older_rollout(turn_id)
    done = {
        "timestamp": "t5",
        "type": "event_msg",
        "payload": {"type": "task_complete", "last_agent_message": "Hi there."},
    }
    mid_turn = read_last_response(write_jsonl(tmp_path / "mid.jsonl", records))
    finished = read_last_response(write_jsonl(tmp_path / "done.jsonl", [*records, done]))
    assert mid_turn is not None and finished is not None
    assert mid_turn.text == finished.text == "Hi there."
    assert mid_turn.message_id == finished.message_id
    assert mid_turn.message_id is not None
    if turn_id is not None:
        assert mid_turn.message_id == turn_id


def test_codex_task_complete_without_message_falls_back_to_the_reply_item(tmp_path: Path) -> None:
    lines = codex_lines()
    done = codex_index(lines, "event_msg", "task_complete")
    lines[done]["payload"]["last_agent_message"] = None
    path = write_jsonl(tmp_path / "r.jsonl", lines)
    assert answer(path) == EXPECTED["real/codex/codex_rollout_tui.jsonl"]


def test_codex_rollout_before_any_reply_has_no_answer(tmp_path: Path) -> None:
    lines = codex_lines()
    first_reply = codex_index(lines, "event_msg", "item_completed", nth=0)
    path = write_jsonl(tmp_path / "r.jsonl", lines[: first_reply + 1])  # the user message only
    assert read_last_response(path) is None


# ---------------------------------------------------------------- turn_finished


REAL_TRANSCRIPTS = sorted(
    str(p.relative_to(FIXTURES))
    for p in (FIXTURES / "real").rglob("*.jsonl")
    if not p.name.startswith("hooks_")  # (what hooks received on stdin: no transcript)
)


@pytest.mark.parametrize("rel", REAL_TRANSCRIPTS)
def test_real_transcripts_end_with_a_finished_turn(rel: str) -> None:
    assert turn_finished(FIXTURES / rel) is True


def test_stop_hook_summary_then_local_commands_count_as_finished() -> None:
    assert (
        turn_finished(FIXTURES / "public/claude/03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl") is True
    )


def test_old_transcript_without_turn_duration_is_not_called_finished() -> None:
    assert (
        turn_finished(FIXTURES / "public/claude/a7da6a22-facc-4fcd-8bab-f83c87862004.jsonl")
        is False
    )


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        ([prompt("go"), assistant("m1", text("A")), system("turn_duration")], True),
        (
            [
                prompt("go"),
                assistant("m1", text("A")),
                system("turn_duration"),
                other("file-history-snapshot"),
                other("ai-title"),
                other("last-prompt"),
                other("permission-mode"),
                other("attachment"),
                other("queue-operation"),
            ],
            True,
        ),
        (
            [prompt("go"), assistant("m1", text("A")), system("turn_duration"), prompt("next")],
            False,
        ),
        ([system("turn_duration"), assistant("m1", text("streaming"))], False),
        ([prompt("go"), assistant("m1", tool_use()), tool_result()], False),
        (
            [
                prompt("go"),
                assistant("m1", tool_use()),
                prompt("[Request interrupted by user for tool use]"),
            ],
            True,
        ),
        (
            [
                assistant("m1", text("A")),
                system("turn_duration"),
                assistant("s", text("side"), sidechain=True),
            ],
            True,
        ),
        ([other("summary"), other("summary")], None),
    ],
    ids=[
        "duration",
        "trailing-records",
        "new-prompt",
        "reply-after",
        "tool-step",
        "interrupted",
        "sidechain",
        "no-conversation",
    ],
)
def test_claude_turn_finished_from_synthetic_tails(
    tmp_path: Path, records: list[dict[str, Any]], expected: bool | None
) -> None:
    assert turn_finished(write_jsonl(tmp_path / "t.jsonl", records)) is expected


def test_codex_turn_finished_follows_task_events(tmp_path: Path) -> None:
    lines = codex_lines()
    started = codex_index(lines, "event_msg", "task_started")
    busy = write_jsonl(tmp_path / "busy.jsonl", lines[: started + 3])
    aborted = write_jsonl(
        tmp_path / "aborted.jsonl",
        [
            *lines[: started + 3],
            {
                "timestamp": "t",
                "type": "event_msg",
                "payload": {"type": "turn_aborted", "reason": "interrupted"},
            },
        ],
    )
    meta_only = write_jsonl(tmp_path / "meta.jsonl", lines[:1])
    assert turn_finished(busy) is False
    assert turn_finished(aborted) is True
    assert turn_finished(meta_only) is None


# ---------------------------------------------------------------- Claude project directories


def java_hash_by_definition(s: str) -> int:
    h = 0
    for unit in (
        int.from_bytes(s.encode("utf-16-le")[i : i + 2], "little")
        for i in range(0, len(s.encode("utf-16-le")), 2)
    ):
        h = (31 * h + unit) % 2**32
    return h - 2**32 if h >= 2**31 else h


def test_java_string_hash_gives_javas_values() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0


@pytest.mark.parametrize(
    "s", ["/home/me/proj", "x" * 300, "/tmp/文档/😀"], ids=["path", "long", "non-bmp"]
)
def test_java_string_hash_matches_the_definition(s: str) -> None:
    assert java_string_hash(s) == java_hash_by_definition(s)


def test_project_dir_name_replaces_every_non_alphanumeric() -> None:
    assert claude_project_dir_name("/a/my_proj.v2") == "-a-my-proj-v2"
    assert claude_project_dir_name("/srv/demo/work/proj-c") == "-srv-demo-work-proj-c"
    assert claude_project_dir_name("/tmp/é/😀") == "-tmp----" + "-"  # one dash per UTF-16 code unit


def test_long_project_dir_name_is_cut_and_hashed() -> None:
    cwd = "/home/user/" + "/".join(f"segment_{i:03d}.dir" for i in range(25))
    sanitized = "".join(c if c.isascii() and c.isalnum() else "-" for c in cwd)
    assert len(sanitized) > 200
    name = claude_project_dir_name(cwd)
    assert name[:200] == sanitized[:200]
    assert name[200] == "-"
    suffix = name[201:]
    assert suffix == suffix.lower() and suffix.isalnum()
    assert int(suffix, 36) == abs(java_hash_by_definition(cwd))
    exactly_200 = "/" + "a" * 199
    assert claude_project_dir_name(exactly_200) == "-" + "a" * 199


def test_cwd_maps_to_claude_named_project_dir(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    cwd = tmp_path / "work" / "my_proj.v2"
    cwd.mkdir(parents=True)
    target = projects / claude_project_dir_name(str(cwd.resolve()))
    target.mkdir(parents=True)
    (projects / str(cwd).replace("/", "-")).mkdir()  # the seed's name exists too: Claude's wins
    assert cwd_to_project_dir(cwd, projects) == target
    assert cwd_to_project_dir(str(cwd) + "/", projects) == target


def test_cwd_through_a_symlink_maps_to_the_real_paths_dir(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    real = tmp_path / "real" / "proj"
    real.mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(real)
    target = projects / claude_project_dir_name(str(real.resolve()))
    target.mkdir(parents=True)
    assert claude_project_dir_name(str(link)) != target.name
    assert cwd_to_project_dir(link, projects) == target


def test_cwd_maps_to_seed_named_project_dir(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    projects.mkdir()
    cwd = "/opt/space/my_proj.v2"
    seed = projects / "-opt-space-my_proj.v2"
    seed.mkdir()
    assert cwd_to_project_dir(cwd, projects) == seed


def test_long_cwd_maps_to_a_dir_with_another_hash(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    cwd = "/data/" + "/".join(f"deep_{i:02d}" for i in range(40))
    other_hash = projects / (claude_project_dir_name(cwd)[:200] + "-zzzz")
    other_hash.mkdir(parents=True)
    assert cwd_to_project_dir(cwd, projects) == other_hash


def test_cwd_falls_back_to_last_components_most_then_newest(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    two = projects / "-mnt-old-clients-acme-my-proj-v2"
    one_old = projects / "-home-x-my-proj-v2"
    one_new = projects / "-home-y-my-proj-v2"
    for d in (two, one_old, one_new):
        d.mkdir(parents=True)
    os.utime(two, (500_000, 500_000))
    os.utime(one_old, (1_000_000, 1_000_000))
    os.utime(one_new, (2_000_000, 2_000_000))
    assert cwd_to_project_dir("/srv/acme/my_proj.v2", projects) == two
    assert cwd_to_project_dir("/srv/other/my_proj.v2", projects) == one_new
    os.utime(one_old, (3_000_000, 3_000_000))
    assert cwd_to_project_dir("/srv/other/my_proj.v2", projects) == one_old


def test_cwd_without_any_match_gives_none(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    (projects / "-home-x-unrelated").mkdir(parents=True)
    assert cwd_to_project_dir("/srv/nothing/like/it", projects) is None
    assert cwd_to_project_dir("/srv/x", tmp_path / "no-projects-dir") is None


def test_cwd_to_project_dir_refuses_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(MadohubValueError, match="cwd"):
        cwd_to_project_dir(None, tmp_path)  # type: ignore[arg-type]
    with pytest.raises(MadohubValueError, match="cwd must not be empty"):
        cwd_to_project_dir("", tmp_path)
    with pytest.raises(MadohubValueError, match="projects_dir"):
        cwd_to_project_dir("/x", 3)  # type: ignore[arg-type]


def test_find_claude_transcript_among_1000_project_folders(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    session = "6c1f2a4e-0000-4000-8000-000000000737"
    for i in range(1000):
        (projects / f"-home-user-proj-{i:04d}").mkdir(parents=True)
        (projects / f"-home-user-proj-{i:04d}" / f"other-{i}.jsonl").write_text("{}\n")
    wanted = projects / "-home-user-proj-0737" / f"{session}.jsonl"
    wanted.write_text("{}\n")
    (projects / "-home-user-proj-0001" / "decoy.jsonl").mkdir()  # a directory is not a transcript
    assert find_claude_transcript(projects, session) == wanted
    assert find_claude_transcript(projects, "decoy") is None
    assert find_claude_transcript(projects, "no-such-session") is None
    assert find_claude_transcript(tmp_path / "missing", session) is None


@pytest.mark.parametrize(
    "bad", ["", "../etc/passwd", "a/b", None], ids=["empty", "parent", "slash", "none"]
)
def test_find_claude_transcript_refuses_ids_that_are_not_file_names(
    tmp_path: Path, bad: str | None
) -> None:
    with pytest.raises(MadohubValueError, match="session_id"):
        find_claude_transcript(tmp_path, bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------- Codex rollout files


def make_rollout(
    home: Path, day: str, session_id: str, cwd: str, mtime: float, *, id_in_name: bool = True
) -> Path:
    """A rollout built from the real fixture's lines, with its own session id and cwd."""
    lines = codex_lines()
    lines[0]["payload"].update(id=session_id, session_id=session_id, cwd=cwd)
    folder = home / "sessions" / day
    folder.mkdir(parents=True, exist_ok=True)
    stamp = day.replace("/", "-") + "T10-00-00"
    name = f"rollout-{stamp}-{session_id}.jsonl" if id_in_name else f"rollout-{stamp}.jsonl"
    path = write_jsonl(folder / name, lines)
    os.utime(path, (mtime, mtime))
    return path


@pytest.fixture
def codex_home(tmp_path: Path) -> dict[str, Any]:
    home = tmp_path / "codex"
    work = tmp_path / "work"
    (work / "a").mkdir(parents=True)
    (work / "b").mkdir()
    old = make_rollout(home, "2026/11/28", "id-old", str(work / "a"), 1_000)
    mid = make_rollout(home, "2026/11/29", "id-mid", str(work / "b"), 2_000)
    new = make_rollout(home, "2026/11/29", "id-new", str(work / "a"), 3_000, id_in_name=False)
    (home / "sessions" / "2026" / "11" / "29" / "notes.txt").write_text("not a rollout")
    return {"home": home, "work": work, "old": old, "mid": mid, "new": new}


def test_codex_rollouts_are_listed_newest_first(codex_home: dict[str, Any]) -> None:
    assert find_codex_rollouts(codex_home["home"]) == [
        codex_home["new"],
        codex_home["mid"],
        codex_home["old"],
    ]
    assert find_codex_rollouts(codex_home["work"]) == []


def test_codex_session_meta_comes_from_the_first_line(codex_home: dict[str, Any]) -> None:
    meta = codex_session_meta(codex_home["mid"])
    assert meta is not None
    assert meta["id"] == "id-mid"
    assert meta["cwd"] == str(codex_home["work"] / "b")
    assert codex_session_meta(CODEX_FIXTURE)["id"] == codex_lines()[0]["payload"]["id"]  # type: ignore[index]
    assert codex_session_meta(codex_home["home"]) is None


def test_codex_rollout_found_by_session_id_in_name_or_meta(codex_home: dict[str, Any]) -> None:
    home = codex_home["home"]
    assert find_codex_rollout(home, session_id="id-old") == codex_home["old"]
    assert (
        find_codex_rollout(home, session_id="id-new") == codex_home["new"]
    )  # only in session_meta
    assert find_codex_rollout(home, session_id="id-none") is None


def test_codex_rollout_found_by_cwd_and_start_time(codex_home: dict[str, Any]) -> None:
    home, work = codex_home["home"], codex_home["work"]
    assert find_codex_rollout(home, cwd=work / "a") == codex_home["new"]
    assert find_codex_rollout(home, cwd=str(work / "b"), started_after=1_500) == codex_home["mid"]
    assert find_codex_rollout(home, cwd=work / "b", started_after=2_500) is None
    assert find_codex_rollout(home, cwd=work / "c") is None
    assert find_codex_rollout(home, started_after=2_500) == codex_home["new"]
    ext = read_last_response(find_codex_rollout(home, cwd=work / "b"))  # type: ignore[arg-type]
    assert ext is not None and ext.text == EXPECTED["real/codex/codex_rollout_tui.jsonl"]


def test_codex_rollout_refuses_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(MadohubValueError, match="session_id"):
        find_codex_rollout(tmp_path, session_id="")
    with pytest.raises(MadohubValueError, match="started_after"):
        find_codex_rollout(tmp_path, started_after="yesterday")  # type: ignore[arg-type]
    with pytest.raises(MadohubValueError, match="codex_home"):
        find_codex_rollouts(7)  # type: ignore[arg-type]


# ---------------------------------------------------------------- subagent files

SUBAGENT_SOURCE = FIXTURES / "public" / "claude" / "fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"


def first_subagent_lines() -> list[str]:
    """The raw lines of the fixture's first subagent run: its prompt up to its next prompt."""
    lines = SUBAGENT_SOURCE.read_text().splitlines()
    side = [(i, json.loads(line)) for i, line in enumerate(lines) if '"isSidechain":true' in line]
    prompts = [
        i for i, rec in side if rec["type"] == "user" and isinstance(rec["message"]["content"], str)
    ]
    first, second = prompts[0], prompts[1]
    return [lines[i] for i, _ in side if first <= i < second]


def test_a_subagent_file_of_only_sidechain_lines_yields_its_last_answer(tmp_path: Path) -> None:
    raw = first_subagent_lines()
    assert len(raw) > 5 and all(json.loads(line)["isSidechain"] is True for line in raw)
    answers = [
        json.loads(line)
        for line in raw
        if json.loads(line)["type"] == "assistant"
        and any(b.get("type") == "text" for b in json.loads(line)["message"]["content"])
    ]
    last = answers[-1]["message"]
    expected = "\n".join(b["text"] for b in last["content"] if b["type"] == "text").strip()
    path = tmp_path / "proj" / "sess" / "subagents" / "agent-a1b2c3.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(raw) + "\n")
    ext = read_last_response(path)
    assert ext is not None
    assert ext.text == expected and ext.text.startswith("## Component Summary")
    assert ext.message_id == last["id"]
    assert ext.method == "jsonl"


def test_main_thread_answer_still_wins_over_later_sidechain_lines(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            assistant("s0", text("Subagent before."), sidechain=True),
            prompt("go"),
            assistant("m1", tool_use()),
            assistant("s1", text("Subagent chatter."), sidechain=True),
        ],
    )
    # A main-thread assistant line exists (tool use only): no fallback to the sidechain.
    assert read_last_response(path) is None


# ---------------------------------------------------------------- ~ in paths


def test_tilde_paths_are_expanded(home: Path) -> None:
    projects = home / ".claude" / "projects"
    project = projects / claude_project_dir_name(str(home / "proj"))
    project.mkdir(parents=True)
    (home / "proj").mkdir()
    transcript = write_jsonl(project / "s.jsonl", [prompt("go"), assistant("m1", text("Hi."))])
    ext = read_last_response("~/.claude/projects/" + project.name + "/s.jsonl")
    assert ext is not None and ext.text == "Hi." and ext.path == transcript
    assert cwd_to_project_dir("~/proj", "~/.claude/projects") == project
    assert cwd_to_project_dir(str(home / "proj"), "~/.claude/projects") == project
    assert find_claude_transcript("~/.claude/projects", "s") == transcript
