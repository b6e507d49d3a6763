"""Extraction: the last answer of a huge transcript, and finding a session among 1,000 projects.

Run: ``.venv/bin/python benchmarks/bench_extraction.py [--quick]``.

- A 300 MB Claude transcript (30 MB with ``--quick``) is written in a temporary
  folder from the real lines of ``fixtures/real/claude/transcript_with_tool_use.jsonl``
  (turn after turn, message ids made unique per turn), ending with the fixture
  itself, so the expected answer is the fixture's. ``read_last_response`` is
  timed (median of many calls, page cache warm) against the plainest way: a
  full parse, ``json.loads`` of every line, keeping the last assistant text.
  The same read with ``usage=True`` (the answer's turn: model, tokens,
  duration, tool calls; one backwards pass to the turn's prompt) is timed
  beside it and must stay under the same target.
- Session resolution: 1,000 project folders of three sessions each;
  ``find_claude_transcript`` (by session id) plus ``cwd_to_project_dir`` (by
  working directory), against ``glob('projects/*/<id>.jsonl')``.

The temporary files are deleted afterwards.
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import FIXTURES, CouldNotMeasure, Report, Stopwatch, run_main  # noqa: E402

FIXTURE = "real/claude/transcript_with_tool_use.jsonl"
EXTRACT_TARGET_MS = 5.0
SPEEDUP_TARGET = 500.0
RESOLVE_TARGET_MS = 20.0
PROJECTS = 1000
SESSIONS_PER_PROJECT = 3


def write_transcript(path: Path, size_bytes: int) -> int:
    """A transcript of about ``size_bytes``: the fixture's turns repeated, then the fixture. Returns lines."""
    lines = (FIXTURES / FIXTURE).read_bytes().splitlines(keepends=True)
    header, body = lines[:2], lines[2:]
    block = b"".join(body)
    written = 0
    count = 0
    with path.open("wb") as f:
        f.write(b"".join(header))
        buffer: list[bytes] = []
        buffered = 0
        turn = 0
        while written + buffered < size_bytes - len(block):
            buffer.append(block.replace(b"msg_fake_", b"msg_t%06d_" % turn))
            buffered += len(block)
            count += len(body)
            turn += 1
            if buffered > 8 * 1024 * 1024:
                f.write(b"".join(buffer))
                written += buffered
                buffer, buffered = [], 0
        f.write(b"".join(buffer))
        f.write(block)
        written += buffered + len(block)
    return count + len(lines)


def full_parse(path: Path) -> str | None:
    """The plainest way: parse every line, keep the last assistant message's text."""
    last = None
    with path.open("rb") as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("type") == "assistant" and not rec.get("isSidechain"):
                last = rec
    if last is None:
        return None
    content = last["message"]["content"]
    return "\n".join(b["text"] for b in content if b.get("type") == "text")


def timed_ms(fn: object, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = Stopwatch()
        fn()  # type: ignore[operator]
        out.append(t0.ms("extraction out"))
    return out


# The fixture's last turn, read by hand: two API messages of 10 input tokens each, 20 + 9
# output tokens, one Bash tool call, turn_duration 578 ms (see tests/test_turn_usage.py).
EXPECTED_USAGE = {
    "model": "claude-opus-4-8",
    "input_tokens": 20,
    "output_tokens": 29,
    "tool_calls": 1,
    "turn_ms": 578.0,
}


def bench_last_response(report: Report, folder: Path, size_mb: int, runs: int) -> None:
    from madohub_nb.io.transcripts import ReadStats, read_last_response

    expected = json.loads((FIXTURES / "expected.json").read_text())[FIXTURE]
    path = folder / f"{uuid.uuid4()}.jsonl"
    t0 = Stopwatch()
    lines = write_transcript(path, size_mb * 1_000_000)
    size = path.stat().st_size
    report.info(
        f"transcript: {size / 1e6:.0f} MB, {lines} lines, written in {t0.s('extraction time'):.1f} s"
    )
    stats = ReadStats()
    found = read_last_response(path, stats=stats)
    if found is None or found.text != expected:
        raise CouldNotMeasure(f"read_last_response gave {found!r}, expected {expected!r}")
    ours = timed_ms(lambda: read_last_response(path), runs)
    usage_stats = ReadStats()
    with_usage = read_last_response(path, stats=usage_stats, usage=True)
    usage = with_usage.usage if with_usage is not None else None
    got = {k: getattr(usage, k) for k in EXPECTED_USAGE} if usage is not None else None
    if with_usage is None or with_usage.text != expected or got != EXPECTED_USAGE:
        raise CouldNotMeasure(
            f"read_last_response(usage=True) gave {got!r}, expected {EXPECTED_USAGE!r}"
        )
    ours_usage = timed_ms(lambda: read_last_response(path, usage=True), runs)
    t0 = Stopwatch()
    plain = full_parse(path)
    full_ms = t0.ms("extraction full_ms")
    if plain is None or expected not in plain:
        raise CouldNotMeasure(f"the full parse found {plain!r}, expected {expected!r}")
    path.unlink()
    median = statistics.median(ours)
    report.info(f"read_last_response read {stats.bytes_read} bytes ({stats.lines} lines) of {size}")
    report.target(
        f"last response of a {size / 1e6:.0f} MB transcript ({runs} calls)",
        f"median {median:.3f} ms (max {max(ours):.3f})",
        f"< {EXTRACT_TARGET_MS} ms",
        f"full parse (json.loads of every line) {full_ms:.0f} ms",
        median < EXTRACT_TARGET_MS,
    )
    speedup = full_ms / median
    median_usage = statistics.median(ours_usage)
    report.info(
        f"read_last_response(usage=True) read {usage_stats.bytes_read} bytes "
        f"({usage_stats.lines} lines) of {size}"
    )
    report.target(
        f"last response + its turn's usage, {size / 1e6:.0f} MB transcript ({runs} calls)",
        f"median {median_usage:.3f} ms (max {max(ours_usage):.3f})",
        f"< {EXTRACT_TARGET_MS} ms",
        f"answer alone {median:.3f} ms; full parse {full_ms:.0f} ms",
        median_usage < EXTRACT_TARGET_MS,
    )
    report.target(
        "extraction vs full parse",
        f"{speedup:.0f}x faster",
        f">= {SPEEDUP_TARGET:.0f}x",
        f"full parse {full_ms:.0f} ms vs {median:.3f} ms",
        speedup >= SPEEDUP_TARGET,
    )


def make_projects(projects: Path) -> tuple[str, str]:
    """1,000 project folders named the way Claude names them; returns (a session id, its cwd)."""
    from madohub_nb.io.transcripts import claude_project_dir_name

    chosen_sid = chosen_cwd = ""
    for i in range(PROJECTS):
        cwd = f"/home/dev/work/client-{i % 37}/project-{i:04d}"
        folder = projects / claude_project_dir_name(cwd)
        folder.mkdir(parents=True)
        for _ in range(SESSIONS_PER_PROJECT):
            sid = str(uuid.uuid4())
            (folder / f"{sid}.jsonl").write_text('{"type":"mode","mode":"normal"}\n')
            if i == PROJECTS * 7 // 10:
                chosen_sid, chosen_cwd = sid, cwd
    return chosen_sid, chosen_cwd


def bench_resolution(report: Report, folder: Path, runs: int) -> None:
    from madohub_nb.io.transcripts import cwd_to_project_dir, find_claude_transcript

    projects = folder / "projects"
    sid, cwd = make_projects(projects)
    found = find_claude_transcript(projects, sid)
    project = cwd_to_project_dir(cwd, projects)
    if found is None or project is None or found.parent != project:
        raise CouldNotMeasure(f"resolution went wrong: {found} vs {project}")
    by_id = timed_ms(lambda: find_claude_transcript(projects, sid), runs)
    by_cwd = timed_ms(lambda: cwd_to_project_dir(cwd, projects), runs)
    both = [a + b for a, b in zip(by_id, by_cwd, strict=True)]
    # A cwd whose exact folder name is not there: the substring fallback lists every folder.
    moved = cwd.replace("/home/dev/work", "/srv/elsewhere")
    fallback = timed_ms(lambda: cwd_to_project_dir(moved, projects), runs)
    if cwd_to_project_dir(moved, projects) != project:
        report.info("the fallback found another folder for the moved cwd")
    plain = timed_ms(lambda: glob.glob(f"{glob.escape(str(projects))}/*/{sid}.jsonl"), runs)
    median = statistics.median(both)
    report.info(
        f"find_claude_transcript median {statistics.median(by_id):.2f} ms, cwd_to_project_dir "
        f"median {statistics.median(by_cwd):.3f} ms (substring fallback {statistics.median(fallback):.2f} ms)"
    )
    report.target(
        f"session resolution ({PROJECTS} project folders, {runs} calls)",
        f"median {median:.2f} ms (max {max(both):.2f})",
        f"< {RESOLVE_TARGET_MS:.0f} ms",
        f"glob('projects/*/<id>.jsonl') {statistics.median(plain):.2f} ms",
        median < RESOLVE_TARGET_MS,
    )


def main(args: argparse.Namespace, report: Report) -> None:
    size_mb = args.size_mb or (30 if args.quick else 300)
    with tempfile.TemporaryDirectory(prefix="mhbench-extract-") as tmp:
        bench_last_response(report, Path(tmp), size_mb, runs=50 if args.quick else 200)
        bench_resolution(report, Path(tmp), runs=20 if args.quick else 50)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="extraction benchmark")
    p.add_argument("--quick", action="store_true", help="a 30 MB transcript instead of 300 MB")
    p.add_argument("--size-mb", type=int, help="transcript size in MB")
    return p


if __name__ == "__main__":
    sys.exit(run_main(main, parser()))
