"""Whole answers, end-of-turn evidence and usage from other agents' own records.

The fixtures in ``tests/fixtures/agent_records`` were written by the real
agents (README there); the bad inputs are made from them in temporary dirs:
real files, real FIFOs, a real SQLite lock.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES as SHARED_FIXTURES

import madohub_nb as mh
from madohub_nb.errors import MadohubValueError
from madohub_nb.io import agent_records as ar
from madohub_nb.io.agent_records import aider, copilot, gemini, opencode, pi, qwen, turn_finished
from madohub_nb.io.agent_records.base import ReadStats
from madohub_nb.io.agent_records.common import (
    ANSWER_SCAN_BYTES,
    SQLITE_DEADLINE_S,
    open_foreign_sqlite,
)

HERE = Path(__file__).resolve().parent / "fixtures" / "agent_records"
EXPECTED: dict[str, dict[str, Any]] = json.loads((HERE / "expected.json").read_text())
LONG_ANSWER = (HERE / "long_answer.md").read_text().strip()

READERS: dict[str, Any] = {
    "gemini": gemini,
    "qwen": qwen,
    "copilot": copilot,
    "opencode": opencode,
    "pi": pi,
    "aider": aider,
}
LINE_FORMATS = ("gemini", "qwen", "copilot", "pi", "aider")
"""Formats whose records are appended lines (all but OpenCode's database)."""

FIXTURE_OF = {fmt: next(n for n, e in EXPECTED.items() if e["format"] == fmt) for fmt in READERS}

HUGE_BYTES = 200 * 1024 * 1024
BOUNDED_BYTES = 2 * 1024 * 1024
"""What a reader may read of a 200 MB record whose answer is at the end."""


def expected_answer(name: str) -> str:
    return (HERE / EXPECTED[name]["answer"]).read_text().strip()


def copy_fixture(fmt: str, tmp_path: Path) -> Path:
    src = HERE / FIXTURE_OF[fmt]
    dst = tmp_path / src.name
    shutil.copyfile(src, dst)
    return dst


def read(fmt: str, path: Path, stats: ReadStats | None = None) -> mh.Extraction | None:
    if fmt == "opencode":
        return opencode.read_last_response(path)
    return READERS[fmt].read_last_response(path, stats=stats)  # type: ignore[no-any-return]


def finished(fmt: str, path: Path) -> bool | None:
    return READERS[fmt].turn_finished(path)  # type: ignore[no-any-return]


def append(path: Path, *lines: str | dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")


# ----------------------------------------------------------------- real records, whole answers


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_reader_gives_the_whole_answer_of_its_real_record(name: str) -> None:
    exp = EXPECTED[name]
    path = HERE / name
    assert ar.detect_format(path) == exp["format"]
    got = read(exp["format"], path)
    assert got is not None
    want = expected_answer(name)
    assert got.text == want
    assert got.text.split("\n") == want.split("\n")  # every line, in order, exactly
    assert (got.method, got.path) == ("session", path)
    if "message_id" in exp:
        assert got.message_id == exp["message_id"]
    assert got.usage is not None and got.usage.complete
    for key in ("model", "input_tokens", "output_tokens"):
        if key in exp:
            assert getattr(got.usage, key) == exp[key], key
    assert finished(exp["format"], path) is exp["finished"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_read_last_response_tells_each_format_from_its_content(name: str, tmp_path: Path) -> None:
    exp = EXPECTED[name]
    renamed = tmp_path / "record.bin"  # the name says nothing
    shutil.copyfile(HERE / name, renamed)
    got = mh.read_last_response(renamed)
    assert got is not None and got.method == "session"
    assert got.text == expected_answer(name)
    assert ar.read_record(renamed) == got
    assert turn_finished(renamed) is exp["finished"]
    assert ar.record_turn_finished(renamed) is exp["finished"]
    usage = mh.read_turn_usage(renamed)
    assert usage is not None and usage.output_tokens == exp["output_tokens"]


def test_the_long_answer_keeps_quotes_tables_code_and_non_ascii() -> None:
    for line in ('> A line starting with "> " is a quote, kept exactly.', "    indented code block line one",
                 "| opencode | opencode.db        | session |", '    return f"hello, {name}"  # ← non-ASCII in code',
                 "## Résumé — ünïcödé, 日本語, emoji 🚀"):  # fmt: skip
        assert line in LONG_ANSWER.split("\n")
    for name, exp in EXPECTED.items():
        if exp["answer"] == "long_answer.md":
            got = read(exp["format"], HERE / name)
            assert got is not None and got.text.startswith("FIRST-LINE-7f3a")
            assert got.text.endswith("LAST-LINE-9c2e: done.")


def test_claude_and_codex_files_are_told_apart_from_the_others() -> None:
    claude = SHARED_FIXTURES / "real" / "claude" / "transcript_2.1.332_minimal.jsonl"
    codex = SHARED_FIXTURES / "real" / "codex" / "codex_rollout_tui.jsonl"
    assert ar.detect_format(claude) == "claude"
    assert ar.detect_format(codex) == "codex"
    assert ar.read_record(claude) is None  # read_last_response reads those
    assert mh.read_last_response(claude) is not None
    assert mh.read_last_response(claude).method == "jsonl"  # type: ignore[union-attr]


def test_an_unknown_format_name_is_refused_naming_the_allowed_ones() -> None:
    with pytest.raises(MadohubValueError, match="'cursor'.*gemini, qwen, copilot"):
        ar.read_record(HERE / "long_answer.md", fmt="cursor")


# ----------------------------------------------------------------- bad input


@pytest.mark.parametrize("fmt", LINE_FORMATS)
def test_a_half_written_last_line_is_skipped(fmt: str, tmp_path: Path) -> None:
    path = copy_fixture(fmt, tmp_path)
    want = read(fmt, HERE / FIXTURE_OF[fmt])
    assert want is not None
    half = (
        '{"type": "assistant", "id": "x", "message": {"role": "assist'
        if fmt != "aider"
        else "> Tok"
    )
    with path.open("a", encoding="utf-8") as f:
        f.write(half)  # no newline: the agent is still writing it
    got = read(fmt, path)
    assert got is not None and got.text == want.text


@pytest.mark.parametrize("fmt", sorted(READERS))
def test_an_empty_file_has_no_answer(fmt: str, tmp_path: Path) -> None:
    path = tmp_path / "empty"
    path.write_bytes(b"")
    assert read(fmt, path) is None
    assert finished(fmt, path) is None
    assert ar.detect_format(path) is None
    assert mh.read_last_response(path) is None


@pytest.mark.parametrize("fmt", sorted(READERS))
def test_a_fifo_is_refused_without_blocking(fmt: str, tmp_path: Path) -> None:
    fifo = tmp_path / "record.fifo"
    os.mkfifo(fifo)
    results: list[object] = []

    def run() -> None:
        results.extend([read(fmt, fifo), finished(fmt, fifo), ar.detect_format(fifo)])
        results.append(mh.read_last_response(fifo))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # unblock it before failing: a writer end opens the FIFO
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        pytest.fail(f"the {fmt} reader blocked on a FIFO")
    assert results == [None, None, None, None]


@pytest.mark.parametrize("fmt", LINE_FORMATS)
def test_a_huge_record_costs_only_its_tail(fmt: str, tmp_path: Path) -> None:
    """A 200 MB sparse prefix before the real record: the answer comes from reading the tail."""
    path = tmp_path / "huge"
    with path.open("wb") as f:
        f.truncate(HUGE_BYTES)  # 200 MB of NUL bytes, one "line" without a newline
        f.seek(HUGE_BYTES)
        f.write(b"\n" + (HERE / FIXTURE_OF[fmt]).read_bytes())
    stats = ReadStats()
    got = read(fmt, path, stats)
    want = read(fmt, HERE / FIXTURE_OF[fmt])
    assert got is not None and want is not None and got.text == want.text
    assert stats.bytes_read < BOUNDED_BYTES, stats
    stats = ReadStats()
    assert READERS[fmt].turn_finished(path, stats=stats) is True
    assert stats.bytes_read < BOUNDED_BYTES, stats


@pytest.mark.parametrize("fmt", LINE_FORMATS)
def test_one_huge_line_is_read_no_further_than_the_budget(fmt: str, tmp_path: Path) -> None:
    """A 200 MB record that is a single line (no newline at all): None, after a bounded read."""
    path = tmp_path / "one-line"
    with path.open("wb") as f:
        f.truncate(HUGE_BYTES)
    stats = ReadStats()
    assert read(fmt, path, stats) is None
    assert stats.bytes_read <= ANSWER_SCAN_BYTES, stats
    assert ar.detect_format(path) is None
    stats = ReadStats()
    assert mh.read_last_response(path, stats=stats) is None


@pytest.mark.parametrize("fmt", ("gemini", "qwen", "copilot", "pi"))
def test_malformed_lines_are_skipped(fmt: str, tmp_path: Path) -> None:
    path = copy_fixture(fmt, tmp_path)
    want = read(fmt, HERE / FIXTURE_OF[fmt])
    assert want is not None
    junk = ["not json", "[1, 2, 3]", "{", '"a string"', "null", "{}", '{"type": 5, "data": 7}',
            '{"type": "gemini", "content": 5, "id": 1}', '{"type": "assistant", "message": "x"}',
            '{"type": "assistant.message", "data": {"content": ["x"]}}', "\x00\xff garbage"]  # fmt: skip
    append(path, *junk)
    got = read(fmt, path)
    assert got is not None and got.text == want.text
    assert finished(fmt, path) is True


def test_malformed_usage_leaves_those_counts_unknown_not_the_answer(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    append(
        path,
        {"id": "u1", "type": "user", "content": [{"text": "hi"}]},
        {"id": "g1", "type": "gemini", "content": "hello", "model": "m", "tokens": {"input": "x"}},
    )
    got = gemini.read_last_response(path)
    assert got is not None and got.text == "hello"
    assert got.usage is not None and got.usage.input_tokens is None and got.usage.model == "m"


# ----------------------------------------------------------------- OpenCode's database


def opencode_copy(tmp_path: Path) -> Path:
    path = tmp_path / "opencode.db"
    shutil.copyfile(HERE / FIXTURE_OF["opencode"], path)
    return path


def test_a_locked_opencode_database_gives_none_at_once(tmp_path: Path) -> None:
    path = opencode_copy(tmp_path)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        assert holder.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        holder.execute("BEGIN EXCLUSIVE")  # a writer holds the lock: readers get SQLITE_BUSY
        start = time.monotonic()
        assert opencode.read_last_response(path) is None
        assert opencode.turn_finished(path) is None
        assert mh.read_last_response(path) is None
        assert time.monotonic() - start < 5 * 3 * opencode.BUSY_TIMEOUT_S + 2
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert opencode.read_last_response(path) is not None  # the lock gone, the answer is back


def test_a_wal_writer_does_not_hide_the_committed_answer(tmp_path: Path) -> None:
    path = opencode_copy(tmp_path)
    writer = sqlite3.connect(path, isolation_level=None)
    try:
        writer.execute("PRAGMA journal_mode=wal")  # what OpenCode runs in
        writer.execute("BEGIN IMMEDIATE")
        writer.execute(
            "INSERT INTO message VALUES ('msg_zzzz', 'ses_x', 9, 9, ?)",
            (json.dumps({"role": "user"}),),
        )
        got = opencode.read_last_response(path)
        assert got is not None and got.text == LONG_ANSWER  # the uncommitted row is not seen
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_a_half_written_or_foreign_database_gives_none(tmp_path: Path) -> None:
    path = opencode_copy(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    got = opencode.read_last_response(path)  # never raises or hangs
    assert got is None or got.text == LONG_ANSWER, got
    assert opencode.turn_finished(path) in (None, True)
    foreign = tmp_path / "other.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    assert ar.detect_format(foreign) == "opencode"
    assert opencode.read_last_response(foreign) is None
    assert opencode.turn_finished(foreign) is None
    text = tmp_path / "not.db"
    text.write_text("hello")
    assert opencode.read_last_response(text) is None


ENDLESS_ROWS = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r)"
"""A query with no end: the body of the crafted views below."""
CRAFTED_OPENCODE = {
    # The attack of issue 38 item 7: `message` is a view that never finishes.
    "message is an endless view": [
        "ALTER TABLE message RENAME TO message_real",
        f"CREATE VIEW message AS {ENDLESS_ROWS} SELECT 'msg_' || i AS id, 'ses' AS session_id,"
        " i AS time_created, i AS time_updated, '{}' AS data FROM r WHERE i < 0",
    ],
    "part is an endless view": [
        "ALTER TABLE part RENAME TO part_real",
        f"CREATE VIEW part AS {ENDLESS_ROWS} SELECT 'prt' AS id, message_id, session_id,"
        " 0 AS time_created, 0 AS time_updated, data FROM part_real, r WHERE i < 0",
    ],
    "an unexpected view and trigger": [
        f"CREATE VIEW spin AS {ENDLESS_ROWS} SELECT i FROM r",
        "CREATE TRIGGER t AFTER INSERT ON todo BEGIN SELECT 1; END",
    ],
}


def crafted_opencode(tmp_path: Path, statements: list[str]) -> Path:
    path = opencode_copy(tmp_path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA legacy_alter_table = ON")  # a rename keeps the views' text as written
    for sql in statements:
        conn.execute(sql)
    conn.close()
    return path


def read_in_a_child(path: Path, timeout_s: float) -> dict[str, Any]:
    """Both OpenCode readers and ``mh.read_last_response`` run in a real child process:
    a reader that hangs fails the test at ``timeout_s`` instead of hanging it."""
    code = (
        "import json, logging, sys, time\n"
        "logging.basicConfig(level=logging.WARNING, stream=sys.stderr)\n"
        "import madohub_nb as mh\n"
        "from madohub_nb.io.agent_records import opencode\n"
        "p = sys.argv[1]; t0 = time.monotonic()\n"
        "a = opencode.read_last_response(p); f = opencode.turn_finished(p)\n"
        "s = opencode.session_for_directory(p, '/tmp/ar/home-opencode/proj')\n"
        "m = mh.read_last_response(p)\n"
        "print(json.dumps({'answer': a and a.text, 'finished': f, 'session': s,"
        " 'mh': m and m.text, 'took_s': time.monotonic() - t0}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(mh.__file__).resolve().parents[1])}
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(path)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:  # (subprocess.run kills the child by its pid)
        pytest.fail(f"reading {path.name} did not return within {timeout_s} s")
    assert done.returncode == 0, done.stderr
    return {**json.loads(done.stdout), "log": done.stderr}


@pytest.mark.parametrize("craft", list(CRAFTED_OPENCODE))
def test_a_crafted_opencode_database_is_refused_within_its_deadline(
    craft: str, tmp_path: Path
) -> None:
    path = crafted_opencode(tmp_path, CRAFTED_OPENCODE[craft])
    got = read_in_a_child(path, timeout_s=30)
    assert got["answer"] is None and got["finished"] is None and got["session"] is None
    assert got["mh"] is None
    assert got["took_s"] < 4 * SQLITE_DEADLINE_S + 2
    assert "not reading" in got["log"] and str(path) in got["log"], got["log"]


def test_every_read_of_a_foreign_database_stops_at_its_deadline(tmp_path: Path) -> None:
    path = opencode_copy(tmp_path)
    conn = open_foreign_sqlite(path, opencode.TABLES, deadline_s=0.3)
    assert conn is not None  # the real database passes the schema check
    start = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="interrupted"):
        conn.execute(f"{ENDLESS_ROWS} SELECT max(i) FROM r").fetchone()
    conn.close()
    assert time.monotonic() - start < 2
    with pytest.raises(sqlite3.OperationalError):  # read-only: nothing is ever written
        fresh = open_foreign_sqlite(path, opencode.TABLES)
        assert fresh is not None
        fresh.execute("DELETE FROM message")


def test_opencode_reads_one_session_and_says_when_its_turn_is_not_over(tmp_path: Path) -> None:
    path = opencode_copy(tmp_path)
    session = "ses_dcd448da0ffedjdIBuS5DYweKY"
    assert opencode.read_last_response(path, session_id="ses_other") is None
    got = opencode.read_last_response(path, session_id=session)
    assert got is not None and got.text == LONG_ANSWER
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO message VALUES ('msg_zzzz', ?, 9999999999999, 9999999999999, ?)",
        (session, json.dumps({"role": "user", "time": {"created": 1}})),
    )
    conn.commit()
    conn.close()
    assert opencode.turn_finished(path) is False
    assert opencode.turn_finished(path, session_id=session) is False
    assert opencode.read_last_response(path) == got  # the answer stays the last one


def test_opencode_panes_sharing_one_database_each_get_their_own_session(tmp_path: Path) -> None:
    path = opencode_copy(tmp_path)
    mine = "/tmp/ar/home-opencode/proj"  # where the fixture's OpenCode ran
    assert opencode.session_for_directory(path, mine) == "ses_dcd448da0ffedjdIBuS5DYweKY"
    assert opencode.session_for_directory(path, "/elsewhere") is None
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO session (id, project_id, slug, directory, title, version, time_created,"
        " time_updated) VALUES ('ses_zz', 'p', 's', '/other/pane', 't', '1', 1, 9999999999999)"
    )
    conn.execute(
        "INSERT INTO message VALUES ('msg_zzzz', 'ses_zz', 9999999999999, 9999999999999, ?)",
        (json.dumps({"role": "assistant", "parentID": "x"}),),
    )
    conn.execute(
        "INSERT INTO part VALUES ('prt_zzzz', 'msg_zzzz', 'ses_zz', 1, 1, ?)",
        (json.dumps({"type": "text", "text": "the other pane's answer"}),),
    )
    conn.commit()
    conn.close()
    newest = opencode.read_last_response(path)
    assert newest is not None and newest.text == "the other pane's answer"
    got = ar.read_record(path, cwd=mine)
    assert got is not None and got.text == LONG_ANSWER
    assert ar.record_turn_finished(path, cwd=mine) is True
    assert opencode.turn_finished(path) is False  # the other pane's message is not completed
    assert opencode.read_last_response(path, directory="/elsewhere") is None
    assert opencode.turn_finished(path, directory="/elsewhere") is None


def test_opencode_answers_come_from_indexed_queries() -> None:
    conn = sqlite3.connect(HERE / FIXTURE_OF["opencode"])
    try:
        for session in (None, "ses_x"):
            where, order, params = opencode._session_filter(session)
            for sql in (
                opencode._ANSWER_SQL.format(session=where, order=order, limit=8),
                opencode._STATE_SQL.format(where=where.replace("AND", "WHERE", 1), order=order),
            ):
                plan = " | ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
                for step in plan.split(" | "):
                    if step.startswith(("SCAN message", "SEARCH message", "SEARCH p")):
                        assert "USING INDEX" in step, plan
    finally:
        conn.close()


def test_a_large_opencode_database_answers_from_its_newest_rows(tmp_path: Path) -> None:
    path = opencode_copy(tmp_path)
    conn = sqlite3.connect(path)
    rows = [
        (f"msg_{i:012d}", "ses_old", i, i, json.dumps({"role": "assistant", "parentID": "p"}))
        for i in range(50_000)
    ]
    conn.executemany("INSERT INTO message VALUES (?, ?, ?, ?, ?)", rows)
    parts = [(f"prt_{i:012d}", f"msg_{i:012d}", "ses_old", i, i, json.dumps({"type": "text", "text": f"old {i}"})) for i in range(50_000)]  # fmt: skip
    conn.executemany("INSERT INTO part VALUES (?, ?, ?, ?, ?, ?)", parts)
    conn.commit()
    conn.close()
    # "msg_0…" sorts before the real "msg_2…" ids: the newest is still the fixture's answer.
    got = opencode.read_last_response(path)
    assert got is not None and got.text == LONG_ANSWER
    got = opencode.read_last_response(path, session_id="ses_old")
    assert got is not None and got.text == "old 49999"


# ----------------------------------------------------------------- end of turn, per format


def cut_after_last(path: Path, is_prompt: Callable[[str], bool]) -> None:
    """Keep the record up to its last prompt line: the agent is working on that prompt."""
    lines = [line for line in lines_of(path) if line]
    last = max(i for i, line in enumerate(lines) if is_prompt(line))
    path.write_text("\n".join(lines[: last + 1]) + "\n", encoding="utf-8")


PROMPT_LINE: dict[str, Callable[[str], bool]] = {
    "gemini": lambda line: '"type":"user"' in line,
    "qwen": lambda line: '"type": "user"' in line or '"type":"user"' in line,
    "copilot": lambda line: '"type":"user.message"' in line,
    "pi": lambda line: '"role":"user"' in line,
    "aider": lambda line: line.startswith("#### "),
}


@pytest.mark.parametrize("fmt", LINE_FORMATS)
def test_a_record_ending_in_a_prompt_says_the_turn_is_not_over(fmt: str, tmp_path: Path) -> None:
    path = copy_fixture(fmt, tmp_path)
    cut_after_last(path, PROMPT_LINE[fmt])
    assert finished(fmt, path) is False
    got = read(fmt, path)
    assert got is not None and got.text != LONG_ANSWER  # the previous turn's answer
    assert got.text.startswith("Done: ")


def test_tool_calls_mean_the_turn_goes_on(tmp_path: Path) -> None:
    g = tmp_path / "g.jsonl"
    append(g, {"id": "1", "type": "user", "content": "x"}, {"id": "2", "type": "gemini", "content": "", "toolCalls": [{"id": "t"}]})  # fmt: skip
    assert gemini.turn_finished(g) is False
    q = tmp_path / "q.jsonl"
    append(q, {"uuid": "a", "sessionId": "s", "type": "assistant", "message": {"role": "model", "parts": [{"functionCall": {"name": "ls"}}]}})  # fmt: skip
    assert qwen.turn_finished(q) is False
    c = copy_fixture("copilot", tmp_path)
    append(c, {"type": "user.message", "data": {"content": "go"}}, {"type": "assistant.turn_start", "data": {}},
           {"type": "assistant.message", "data": {"content": "", "toolRequests": [{"name": "bash"}]}},
           {"type": "assistant.turn_end", "data": {}})  # fmt: skip
    assert copilot.turn_finished(c) is False
    p = copy_fixture("pi", tmp_path)
    append(p, {"type": "message", "id": "n1", "parentId": "5a1221fb", "message": {"role": "user", "content": "go"}},
           {"type": "message", "id": "n2", "parentId": "n1", "message": {"role": "assistant", "content": [{"type": "toolCall"}], "stopReason": "toolUse"}})  # fmt: skip
    assert pi.turn_finished(p) is False


def test_pi_follows_the_newest_leaf_not_the_newest_answer(tmp_path: Path) -> None:
    path = copy_fixture("pi", tmp_path)
    # Back to the first answer ("298ddad1") and prompted again: a second branch.
    append(
        path,
        {"type": "message", "id": "b1", "parentId": "298ddad1", "message": {"role": "user", "content": [{"type": "text", "text": "again"}]}},
    )  # fmt: skip
    got = pi.read_last_response(path)
    assert got is not None and (got.text, got.message_id) == ("Done: Say hi", "298ddad1")
    assert pi.turn_finished(path) is False
    append(
        path,
        {"type": "message", "id": "b2", "parentId": "b1", "message": {"role": "assistant", "content": [{"type": "text", "text": "branch answer"}], "stopReason": "stop", "usage": {"input": 5, "output": 2}}},
    )  # fmt: skip
    got = pi.read_last_response(path)
    assert got is not None and (got.text, got.message_id) == ("branch answer", "b2")
    assert got.usage is not None and (got.usage.input_tokens, got.usage.output_tokens) == (5, 2)
    assert pi.turn_finished(path) is True


def test_gemini_reads_a_rewritten_history(tmp_path: Path) -> None:
    path = copy_fixture("gemini", tmp_path)
    rewritten = [{"id": "u", "type": "user", "content": "x"}, {"id": "g9", "type": "gemini", "content": "after rewind"}]  # fmt: skip
    append(path, {"$set": {"messages": rewritten}})
    got = gemini.read_last_response(path)
    assert got is not None and (got.text, got.message_id) == ("after rewind", "g9")


def test_aider_keeps_headings_quotes_and_code_and_drops_its_own_notes(tmp_path: Path) -> None:
    path = tmp_path / ".aider.chat.history.md"
    answer = [
        "#### Not a prompt: a heading in the answer",
        "> a quote in the answer",
        "```",
        "> inside code, even with two spaces  ",
        "```",
        "last line",
    ]
    path.write_text(
        "\n# aider chat started at 2026-12-01 10:00:00\n\n> Model: gpt-x with diff edit format  \n\n"
        "#### first line of the prompt  \n#### second line  \n\n" + "\n".join(answer) + "\n\n"
        "> Tokens: 2.5k sent, 1.2k cache write, 3k cache hit, 300 received. Cost: $0.01 message, $0.02 session.  \n",
        encoding="utf-8",
    )
    got = aider.read_last_response(path)
    assert got is not None and got.text == "\n".join(answer)
    u = got.usage
    assert u is not None and u.model == "gpt-x"
    assert (u.input_tokens, u.output_tokens, u.cache_write_tokens, u.cache_read_tokens) == (
        2500,
        300,
        1200,
        3000,
    )
    assert aider.turn_finished(path) is True
    append(path, "#### next prompt  ")
    assert aider.turn_finished(path) is False
    got = aider.read_last_response(path)  # nothing answered the newest prompt yet
    assert got is not None and got.text == "\n".join(answer)


# ----------------------------------------------------------------- older versions, errors

ERROR_TURNS = {
    "errors/.aider.chat.history.md": "aider",
    "errors/gemini-session-2026-12-04T17-36-b823ab54.json": "gemini",
    "errors/gemini-session-2026-12-04T17-37-699a0e57.jsonl": "gemini",
    "errors/pi-2026-12-04T17-38-11-115Z_01a24222-8ff1-7465-a463-a93e70293be1.jsonl": "pi",
    "errors/qwen-c1cbafcf-0f86-4887-a666-00747e33651c.jsonl": "qwen",
}
"""Real records whose last turn ended in an API error (README.md): each answered
``Say hi`` first, so an older answer is there to be wrongly taken."""


@pytest.mark.parametrize("name", sorted(ERROR_TURNS))
def test_a_turn_that_ended_in_an_error_has_no_answer(name: str, tmp_path: Path) -> None:
    path = HERE / name
    fmt = ERROR_TURNS[name]
    assert ar.detect_format(path) == fmt
    assert "Done: Say hi" in path.read_text(encoding="utf-8")  # the previous turn's answer
    assert read(fmt, path) is None
    assert mh.read_last_response(path) is None
    renamed = tmp_path / "record.bin"
    shutil.copyfile(path, renamed)
    assert mh.read_last_response(renamed) is None


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("gemini/session-2026-12-04T17-28-f76f590b.json", "Gemini CLI 0.38.2"),
        ("gemini/session-2026-12-04T17-31-0950c6c8.json", "Gemini CLI 0.6.1"),
        ("pi/v1/2026-12-04T17-29-25-177Z_815edffc-1c44-4b65-8794-9aee02d62228.jsonl", "Pi 0.30.2"),
        ("pi/v2/2026-12-04T17-30-05-647Z_af516a9e-6c24-4eb3-ad16-59816b9b2f5b.jsonl", "Pi 0.32.3"),
    ],
)
def test_older_record_versions_give_the_whole_answer(name: str, version: str) -> None:
    # (test_each_reader_gives_the_whole_answer_of_its_real_record checks them all; this
    # one names the versions whose format differs from the newest)
    got = mh.read_last_response(HERE / name)
    assert got is not None and got.text == LONG_ANSWER, version


def test_a_gemini_json_document_is_read_from_its_tail(tmp_path: Path) -> None:
    src = HERE / "gemini/session-2026-12-04T17-28-f76f590b.json"
    doc = json.loads(src.read_text(encoding="utf-8"))
    filler = {"id": "f", "timestamp": "t", "type": "info", "content": "x" * 1000}
    doc["messages"][:0] = [filler] * 40_000  # ~40 MB of older messages before the turns
    path = tmp_path / "session-big.json"
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False), encoding="utf-8")
    stats = ReadStats()
    got = gemini.read_last_response(path, stats=stats)
    assert got is not None and got.text == LONG_ANSWER
    assert stats.bytes_read < BOUNDED_BYTES
    assert gemini.turn_finished(path) is True
    doc["messages"].append({"id": "u", "timestamp": "t", "type": "user", "content": "next"})
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False), encoding="utf-8")
    assert gemini.turn_finished(path) is False
    got = gemini.read_last_response(path)
    assert got is not None and got.text == LONG_ANSWER  # still working: the last answer stands
    cut = path.read_bytes()[:-200]  # being rewritten: the newest messages are not there yet
    path.write_bytes(cut)
    assert gemini.read_last_response(path) is None  # never an older answer as the newest
    assert gemini.turn_finished(path) is None


def test_pi_joins_an_answers_text_blocks_as_its_own_copy_command(tmp_path: Path) -> None:
    path = copy_fixture("pi", tmp_path)
    blocks = [
        {"type": "thinking", "thinking": "hidden"},
        {"type": "text", "text": "  first part,"},
        {"type": "toolCall", "id": "t", "name": "ls", "arguments": {}},
        {"type": "text", "text": " second part\n"},
    ]
    append(
        path,
        {"type": "message", "id": "n1", "parentId": "5a1221fb", "message": {"role": "user", "content": "go"}},
        {"type": "message", "id": "n2", "parentId": "n1", "message": {"role": "assistant", "content": blocks, "stopReason": "stop"}},
    )  # fmt: skip
    got = pi.read_last_response(path)
    # getLastAssistantText (pi-mono core/agent-session.ts): text blocks joined with "", trimmed.
    assert got is not None and got.text == "first part, second part"
    # An answer aborted before any content is passed over, as Pi's own command does.
    append(path, {"type": "message", "id": "n3", "parentId": "n2", "message": {"role": "assistant", "content": [], "stopReason": "aborted"}})  # fmt: skip
    got = pi.read_last_response(path)
    assert got is not None and got.text == "first part, second part"


def test_a_pi_version_1_record_is_one_linear_branch(tmp_path: Path) -> None:
    path = tmp_path / "v1.jsonl"
    shutil.copyfile(HERE / "pi/v1/2026-12-04T17-29-25-177Z_815edffc-1c44-4b65-8794-9aee02d62228.jsonl", path)  # fmt: skip
    append(path, {"type": "message", "timestamp": "2026-12-04T17:30:00.000Z", "message": {"role": "user", "content": [{"type": "text", "text": "more"}]}})  # fmt: skip
    assert pi.turn_finished(path) is False
    got = pi.read_last_response(path)
    assert got is not None and got.text == LONG_ANSWER
    append(path, {"type": "message", "timestamp": "2026-12-04T17:30:01.000Z", "message": {"role": "assistant", "content": [{"type": "text", "text": "v1 answer"}], "stopReason": "stop"}})  # fmt: skip
    got = pi.read_last_response(path)
    assert got is not None and (got.text, got.message_id) == (
        "v1 answer",
        "2026-12-04T17:30:01.000Z",
    )
    assert pi.turn_finished(path) is True


# ----------------------------------------------------------------- usage makes cost_usd


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_usage_of_each_record_prices_a_round(name: str) -> None:
    from madohub_nb.io.agent_records.base import USAGE_FIELDS
    from madohub_nb.io.log import RoundRecord
    from madohub_nb.pipeline.round import round_cost_usd

    got = read(EXPECTED[name]["format"], HERE / name)
    assert got is not None and got.usage is not None
    fields = {f: getattr(got.usage, f) for f in USAGE_FIELDS}
    rec = RoundRecord(route_id="r", source="a", target="b", round=1, trigger="on-idle",
                      transform="raw", dispatch="madoagent", status="delivered",
                      extracted=got.text, extraction_method=got.method, **fields)  # fmt: skip
    model = EXPECTED[name]["model"]
    prices = {model: {"input": 1.0, "output": 10.0, "cache_read": 0.1, "cache_write": 1.25}}
    u = got.usage
    want = (u.input_tokens * 1.0 + u.output_tokens * 10.0) / 1_000_000  # no cache in these turns
    assert round_cost_usd(rec, prices) == pytest.approx(want)
    assert want > 0


def test_the_backwards_reader_stops_at_its_floor_and_drops_the_line_cut_there(
    tmp_path: Path,
) -> None:
    from madohub_nb.io.agent_records.base import iter_lines_backwards

    path = tmp_path / "lines"
    path.write_bytes(b"first line\nsecond\nthird\n")
    with path.open("rb") as f:
        assert list(iter_lines_backwards(f)) == [b"", b"third", b"second", b"first line"]
        stats = ReadStats()
        # floor 3 cuts "first line": it is not yielded, and nothing before byte 3 is read.
        assert list(iter_lines_backwards(f, stats=stats, floor=3)) == [b"", b"third", b"second"]
        assert stats.bytes_read == path.stat().st_size - 3
        # A line starting right at the floor cannot be told from a cut one: dropped too.
        assert list(iter_lines_backwards(f, floor=11)) == [b"", b"third"]
        assert list(iter_lines_backwards(f, floor=10)) == [b"", b"third", b"second"]
        assert list(iter_lines_backwards(f, floor=100)) == []


@pytest.mark.parametrize(
    "rel",
    [
        "copilot/events.jsonl",
        "gemini/session-2026-12-01T17-53-5e293c07.jsonl",
        "gemini/session-2026-12-04T17-28-f76f590b.json",
        "qwen/9e37d5f9-3d64-4ded-b508-37a8775f6628.jsonl",
        "pi/2026-12-01T17-54-29-576Z_01a232be-6a48-743b-b5df-180f6618be62.jsonl",
        "pi/v1/2026-12-04T17-29-25-177Z_815edffc-1c44-4b65-8794-9aee02d62228.jsonl",
        "pi/v2/2026-12-04T17-30-05-647Z_af516a9e-6c24-4eb3-ad16-59816b9b2f5b.jsonl",
    ],
)
def test_each_reader_says_the_prompt_of_its_answers_turn(rel: str) -> None:
    """The user message that started the answer's turn (an MCP ask checks it is its own)."""
    found = mh.read_last_response(HERE / rel)
    assert found is not None and found.text.startswith("FIRST-LINE-7f3a")
    assert found.prompt == "LONGANSWER please write the long markdown answer"
