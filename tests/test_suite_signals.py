"""The suite answers Ctrl-C even when started in the background (`make pytest`'s first tier).

A shell without job control starts a background command with SIGINT ignored; Python keeps
it ignored, and a test that interrupts a call (an experiment's Ctrl-C) then sees nothing.
``conftest.pytest_configure`` puts Python's handler back; this runs a pytest the way such a
shell would, once with the suite's conftest and once without it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

INTERRUPTED = """
import os, signal, time

import pytest


def test_ctrl_c_interrupts() -> None:
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
"""


def _pytest_with_sigint_ignored(tmp_path: Path, *plugin: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_interrupted.py").write_text(INTERRUPTED)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin]
    script = 'trap "" INT; exec "$@"'  # what a shell does to a command it starts with &
    return subprocess.run(
        ["bash", "-c", script, "bash", *argv, str(tmp_path / "test_interrupted.py")],
        cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(TESTS)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("with_conftest", [True, False], ids=["conftest", "bare"])
def test_a_suite_started_with_sigint_ignored_still_answers_ctrl_c(
    tmp_path: Path, with_conftest: bool
) -> None:
    done = _pytest_with_sigint_ignored(tmp_path, *(["-p", "conftest"] if with_conftest else []))
    if with_conftest:
        assert done.returncode == 0, done.stdout + done.stderr
    else:  # the bare pytest shows the trap is real: SIGINT did nothing, nothing was raised
        assert done.returncode == 1 and "DID NOT RAISE" in done.stdout, done.stdout
