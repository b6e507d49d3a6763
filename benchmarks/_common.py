"""Shared pieces of the benchmarks: private tmux servers, a temporary HOME, CPU accounting, output.

Every benchmark prints one line per target, ``name: value (target …) baseline …``
(the baseline is the plainest way to do the same job, measured in the same run),
with ``MISSED`` appended when the target was not met, then ``targets met`` or
``TARGET MISSED: …``. The exit code is 1 when a target was missed (so
``make bench`` fails), 2 when the benchmark could not measure at all.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("MADOHUB_SHARED", REPO.parent / "shared"))
FIXTURES = SHARED / "fixtures"
CLOCK_TICK_S = 1 / os.sysconf("SC_CLK_TCK")
"""Resolution of the kernel's CPU time accounting (10 ms on most Linux systems)."""

_ENV_CLEARED = ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "ANTHROPIC_API_KEY", "TMUX", "TMUX_PANE")


class CouldNotMeasure(Exception):
    """The benchmark could not take its measurement (not: a target was missed)."""


class NegativeDuration(CouldNotMeasure):
    """A duration came out below zero: its two ends were read from different clocks or
    origins, so the figure says nothing and is neither printed nor checked."""


# --------------------------------------------------------------------------- output


_NEGATIVE_FIGURE = re.compile(r"(?<![\w.)\]])-\s?\d[\d,]*(?:\.\d+)?\s?(?:ms|s|µs|us|min)\b")
"""A signed negative number with a time unit (``p95 -863 ms``); not a range's dash (``10-20 ms``)."""


def refuse_negative_figures(text: str) -> str:
    """``text`` as it is, unless it shows a negative duration: then a :class:`NegativeDuration`
    quoting it (exit 2). Every line a :class:`Report` prints goes through here, so a figure whose
    ends came from two clocks is refused even where a benchmark forgot :func:`elapsed_ms`. A
    difference of two figures is not a duration: print it with :func:`gap_ms_text`."""
    found = _NEGATIVE_FIGURE.search(text)
    if found:
        raise NegativeDuration(
            f"the line {text!r} shows {found.group()!r}, a duration below zero: its two ends were "
            "read from different clocks or origins. Measure both ends on one clock (see "
            "elapsed_ms and Stopwatch in benchmarks/_common.py); the line was not printed"
        )
    return text


def gap_ms_text(gap_ms: float, more: str = "over", less: str = "under", digits: int = 0) -> str:
    """A difference of two figures (which may go either way), as ``12 ms over`` / ``3 ms under``:
    never a negative number a reader (or :func:`refuse_negative_figures`) would take for a
    duration."""
    return f"{abs(gap_ms):.{digits}f} ms {more if gap_ms >= 0 else less}"


@dataclass
class Report:
    """Collects target lines and prints them as they come; refuses a line with a negative
    duration in it (:func:`refuse_negative_figures`: exit 2, nothing checked)."""

    title: str
    missed: list[str] = field(default_factory=list)

    def target(self, name: str, value: str, target: str, baseline: str, ok: bool) -> None:
        line = f"{name}: {value} (target {target}) baseline {baseline}"
        refuse_negative_figures(line)
        if not ok:
            self.missed.append(name)
        print(line + ("" if ok else "  MISSED"), flush=True)

    def info(self, text: str) -> None:
        """A line that is not a target (what ran, a secondary figure)."""
        print(f"  {refuse_negative_figures(text)}", flush=True)

    def finish(self) -> int:
        print(
            "targets met" if not self.missed else f"TARGET MISSED: {', '.join(self.missed)}",
            flush=True,
        )
        return 1 if self.missed else 0


def run_main(
    main: Callable[[argparse.Namespace, Report], None],
    parser: argparse.ArgumentParser,
    argv: list[str] | None = None,
) -> int:
    """Parse arguments (``argv``, else the command line's), run ``main`` and turn "could not
    measure" into exit code 2."""
    args = parser.parse_args(argv)
    report = Report(parser.description or "")
    print(f"# {report.title} — {machine()}", flush=True)
    try:
        main(args, report)
    except CouldNotMeasure as exc:
        print(f"COULD NOT MEASURE: {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 2
    except Exception:
        traceback.print_exc()
        print(
            "COULD NOT MEASURE: the benchmark failed (traceback above)", file=sys.stderr, flush=True
        )
        return 2
    return report.finish()


def machine() -> str:
    """nproc, CPU model, Python and tmux versions: what a figure depends on."""
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    tmux = (
        subprocess.run(["tmux", "-V"], capture_output=True, text=True).stdout.strip() or "no tmux"
    )
    return f"{os.cpu_count()} cores, {model}, Python {platform.python_version()}, {tmux}"


def elapsed_ms(start: float | datetime, end: float | datetime, what: str) -> float:
    """``end - start`` in ms, both seconds on one clock or both datetimes (a log's ``fired_at``
    and a record's stamp: wall clock); a :class:`NegativeDuration` naming ``what`` when the end
    comes before the start. The one place a benchmark subtracts two timestamps
    (tests/test_bench_helpers.py checks that no bench_*.py does it by hand)."""
    if isinstance(start, datetime) and isinstance(end, datetime):
        if (start.tzinfo is None) != (end.tzinfo is None):
            raise CouldNotMeasure(
                f"{what}: one end ({start!r}) and the other ({end!r}) differ in having a time "
                "zone; read both from one clock"
            )
        return durations_ms([(end - start).total_seconds() * 1000], what)[0]
    if isinstance(start, datetime) or isinstance(end, datetime):
        raise CouldNotMeasure(
            f"{what}: one end is a datetime, the other a number of seconds ({start!r}, {end!r}): "
            "two clocks or origins. Read both ends from one clock"
        )
    return durations_ms([(end - start) * 1000], what)[0]


class Stopwatch:
    """Time from its creation on :func:`time.perf_counter` (one clock for both ends, by
    construction): ``watch = Stopwatch(); ...; took_ms = watch.ms("what")``."""

    def __init__(self) -> None:
        self.start_s = time.perf_counter()

    def ms(self, what: str) -> float:
        """Milliseconds since the start (checked by :func:`elapsed_ms`)."""
        return elapsed_ms(self.start_s, time.perf_counter(), what)

    def s(self, what: str) -> float:
        """Seconds since the start (checked by :func:`elapsed_ms`)."""
        return self.ms(what) / 1000


def durations_ms(values_ms: list[float], what: str) -> list[float]:
    """``values_ms`` as they are, once each is checked to be a duration (>= 0): a benchmark
    prints and checks only durations that passed here. A negative one raises
    :class:`NegativeDuration` (exit 2, "could not measure") naming ``what`` and the value."""
    for i, value in enumerate(values_ms):
        if not value >= 0:  # (NaN too)
            raise NegativeDuration(
                f"{what}: sample {i + 1} of {len(values_ms)} is {value:.1f} ms, not a duration; "
                "its two ends were read from different clocks or origins. Measure both ends on "
                "one clock (one process's time.monotonic(), or two stamps of one recorder) and "
                "from the moment the figure means; nothing was printed or checked"
            )
    return values_ms


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1), the same rule as bench_log.py."""
    if not values:
        raise CouldNotMeasure("no samples were collected")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# --------------------------------------------------------------------------- processes


def kill_tree(pid: int, timeout_s: float = 3.0) -> None:
    """End ``pid`` and all its descendants (by pid; never by name)."""
    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()


def cpu_seconds(pid: int) -> float:
    """CPU time of a process and everything it started: its own, its reaped children's, its live descendants'.

    Counting a live child's time and, once it is reaped, the parent's
    cumulative children time gives consistent differences between two
    readings (a child reaped in between is counted once).
    """
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess as exc:
        raise CouldNotMeasure(f"process {pid} is gone") from exc
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def server_pid(socket: str) -> int | None:
    out = subprocess.run(
        ["tmux", "-L", socket, "display-message", "-p", "#{pid}"], capture_output=True, text=True
    )
    text = out.stdout.strip()
    return int(text) if out.returncode == 0 and text.isdigit() else None


def tmux_server_cpu_seconds(pid: int) -> float:
    """The tmux server's own CPU time plus its reaped children's (not its live panes' programs)."""
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.NoSuchProcess as exc:
        raise CouldNotMeasure(f"the tmux server (pid {pid}) is gone") from exc
    return t.user + t.system + t.children_user + t.children_system


def stop_tmux_server(socket: str) -> None:
    """Kill a private tmux server and the programs in its panes (by pid)."""
    pid = server_pid(socket)
    panes: list[int] = []
    if pid is not None:
        with contextlib.suppress(psutil.NoSuchProcess):
            panes = [p.pid for p in psutil.Process(pid).children(recursive=True)]
    subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
    for child in panes:
        kill_tree(child, 1.0)
    if pid is not None:
        kill_tree(pid, 1.0)
    # tmux 3.3a leaves its socket file behind when the server exits.
    path = Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / socket
    if path.is_socket() and server_pid(socket) is None:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def private_tmux(tag: str) -> Iterator[str]:
    """A private tmux socket name (``mhbench-<tag>-<pid>``); the server is killed afterwards."""
    name = f"mhbench-{tag}-{os.getpid()}"
    stop_tmux_server(name)
    try:
        yield name
    finally:
        stop_tmux_server(name)


@contextlib.contextmanager
def temp_home(tag: str) -> Iterator[Path]:
    """A temporary folder with ``home/`` set as HOME (agent settings cleared); removed afterwards.

    Yields the folder (HOME is ``folder / "home"``), for logs and scratch files.
    """
    root = Path(tempfile.mkdtemp(prefix=f"mhbench-{tag}-"))
    home = root / "home"
    home.mkdir()
    saved = {k: os.environ.get(k) for k in ("HOME", *_ENV_CLEARED)}
    os.environ["HOME"] = str(home)
    for key in _ENV_CLEARED:
        os.environ.pop(key, None)
    try:
        yield root
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(root, ignore_errors=True)


def wait_for(
    cond: Callable[[], object], timeout_s: float, what: str, interval_s: float = 0.05
) -> object:
    """Poll ``cond`` until truthy; CouldNotMeasure after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(interval_s)
    raise CouldNotMeasure(f"timed out after {timeout_s:.0f} s waiting for {what}")


# --------------------------------------------------------------------------- pane programs

SHELL_COMMAND = "bash --norc --noprofile"

CLAUDE_LIKE_SOURCE = r'''#!{python}
"""A quiet Claude-like pane program for benchmarks: draws Claude's input box, records input.

Its file is named ``claude`` (run through its #! line, so the process is named
``claude`` too): the toolkit finds it as the agent process.
Every message typed into it (up to a CR outside a bracketed paste) is appended
to the log as a JSON line: {"first": <wall time of its first byte>, "end": ..., "text": ...}.
Like Claude it shows the draft in its box (the last line; a long paste as "[Pasted text #N
+L lines]") and empties the box on submit. It redraws only when typed into, so an idle tile
of it is silent; like Claude's renderer it draws at most once per 20 ms of typing.
"""
import json, os, re, select, sys, time, tty

TOKEN = re.compile(rb"\x1b\[20[01]~|\r")
log = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
tty.setraw(0)
rule = "\u2500" * 60
os.write(1, ("\x1b[?2004h\x1b[2J\x1b[H" + rule + "\r\n\u276f \r\n" + rule + "\r\n").encode())
first = None
text = bytearray()
pending = b""
in_paste = False
shown, pasted_at, pastes = "", 0, 0  # the draft as the box shows it
dirty = False
while True:
    if dirty and not select.select([0], [], [], 0.02)[0]:
        os.write(1, ("\x1b[2;1H\x1b[2K\u276f " + shown.rsplit("\n", 1)[-1][-55:]).encode())
        dirty = False
        continue
    data = os.read(0, 65536)
    if not data:
        break
    now = time.time()
    data, pending = pending + data, b""
    cut = data.rfind(b"\x1b")
    if cut != -1 and len(data) - cut < 6:
        data, pending = data[:cut], data[cut:]  # maybe half a paste marker: wait for the rest
    pos = 0
    for m in TOKEN.finditer(data):
        if m.start() > pos:
            first = first or now
            text += data[pos:m.start()]
            if not in_paste:
                shown += data[pos:m.start()].decode("utf-8", "replace")
        pos = m.end()
        token = m.group()
        if token == b"\x1b[200~":
            in_paste, first, pasted_at = True, first or now, len(text)
        elif token == b"\x1b[201~":
            in_paste = False
            paste = text[pasted_at:].decode("utf-8", "replace")
            lines = paste.count("\n")
            if lines > 2 or len(paste) > 800:
                pastes += 1
                paste = f"[Pasted text #{pastes} +{lines} lines]"
            shown += paste
        elif in_paste:
            text += b"\n"  # tmux turns a pasted LF into CR
        elif first is not None:
            record = {"first": first, "end": now, "text": text.decode("utf-8", "replace")}
            os.write(log, (json.dumps(record) + "\n").encode())  # one write: readers never see half
            first, text, shown = None, bytearray(), ""
    if pos < len(data):
        first = first or now
        text += data[pos:]
        if not in_paste:
            shown += data[pos:].decode("utf-8", "replace")
    dirty = True
'''


def write_claude_like(folder: Path) -> Path:
    """Write the Claude-like recorder program as ``folder/bin/claude`` and return its path."""
    path = folder / "bin" / "claude"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(CLAUDE_LIKE_SOURCE.replace("{python}", sys.executable, 1))
    path.chmod(0o755)
    return path


def claude_like_command(program: Path, log: Path) -> str:
    return f"{program} {log}"


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """The complete JSON lines of a file another process appends to (a partial last line is left)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in data[: data.rfind(b"\n") + 1].splitlines() if line.strip()]


def standin_available() -> bool:
    """Is the package's stand-in agent (madohub_nb.demo.standin_command) importable?"""
    try:
        from madohub_nb.demo import standin_command  # noqa: F401
    except ImportError:
        return False
    return True


# --------------------------------------------------------------------------- profiling


def start_py_spy(pid: int, out: Path, duration_s: float) -> subprocess.Popen[bytes] | None:
    """Sample ``pid`` (all threads, C frames off) into a collapsed-stack file; None without py-spy."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        print("  (py-spy not installed: .venv/bin/pip install py-spy)", flush=True)
        return None
    return subprocess.Popen(
        [
            exe,
            "record",
            "--pid",
            str(pid),
            "--format",
            "raw",
            "--output",
            str(out),
            "--rate",
            "200",
            "--duration",
            str(max(1, round(duration_s))),
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


_WAITING_LEAVES = (
    "EpollSelector.select",
    "_PollLikeSelector.select",
    "Condition.wait",
    "Event.wait",
    "_worker",
)
"""Leaf frames of a thread that waits (py-spy's idle detection does not always drop them)."""


def summarize_collapsed(path: Path, top: int = 12) -> list[str]:
    """Where the non-waiting samples of a py-spy raw file went: by leaf, and by package function.

    py-spy samples wall time, so a thread blocked in ``subprocess.run`` (waiting
    for a tmux client to start and answer) counts: that is what we want to see.
    """
    leaves: Counter[str] = Counter()
    package: Counter[str] = Counter()
    total = busy = 0
    if not path.exists():
        return ["(no profile written)"]
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = [_frame(f) for f in stack.split(";") if f]
        if not frames:
            continue
        total += n
        if frames[-1].split(" (")[0] in _WAITING_LEAVES:
            continue
        busy += n
        leaves[frames[-1]] += n
        for f in dict.fromkeys(f for f in frames if f.endswith(".py)") and "madohub_nb" in f):
            package[f] += n
    if not busy:
        return [f"{total} samples, none busy: the process was idle"]
    out = [f"{total} samples, {busy} not waiting (the rest: event loops and idle workers)"]
    out += [f"leaf {100 * n / busy:5.1f}%  {f}" for f, n in leaves.most_common(top)]
    out += [f"in   {100 * n / busy:5.1f}%  {f}" for f, n in package.most_common(top)]
    return out


def _frame(frame: str) -> str:
    """``func (pkg/file.py:12)`` → ``func (pkg/file.py)`` so the lines of one function add up."""
    name, _, where = frame.partition(" (")
    file = where.rsplit(":", 1)[0]
    if "madohub_nb/" in file:
        file = "madohub_nb/" + file.rsplit("madohub_nb/", 1)[1]
    else:
        file = file.rsplit("/", 1)[-1]
    return f"{name} ({file})" if file else name


@contextlib.contextmanager
def counting_tmux_calls() -> Iterator[tuple[Counter[str], Counter[str]]]:
    """Count tmux commands by name, and state reads by their caller (profiling runs only).

    Wraps ``Tmux.run`` and ``Tile.astate`` in this process: the real call
    still runs, one counter step is added. Yields (commands, state-read callers).
    """
    from madohub_nb.io.tmux import Tmux
    from madohub_nb.pipeline.tile import Tile

    commands: Counter[str] = Counter()
    callers: Counter[str] = Counter()
    run, astate = Tmux.run, Tile.astate

    def counted_run(self: Tmux, *args: str, **kwargs: object) -> str:
        commands[args[0] if args else "?"] += 1
        return run(self, *args, **kwargs)  # type: ignore[arg-type]

    async def counted_astate(self: Tile) -> str:
        code = sys._getframe(1).f_code
        callers[getattr(code, "co_qualname", code.co_name)] += 1  # co_qualname: Python 3.11+
        return await astate(self)

    Tmux.run = counted_run  # type: ignore[method-assign]
    Tile.astate = counted_astate  # type: ignore[method-assign]
    try:
        yield commands, callers
    finally:
        Tmux.run = run  # type: ignore[method-assign]
        Tile.astate = astate  # type: ignore[method-assign]
