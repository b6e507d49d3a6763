"""The tutorial notebooks run top to bottom on a fresh kernel with the demo agents."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
from conftest import REPO, kill_tree, wait_until
from nbclient import NotebookClient

pytestmark = pytest.mark.notebooks

NOTEBOOKS = REPO / "notebooks"
NAMES = ("quickstart", "transform-tuning", "round-analysis")

# Appended to each run (not saved): what the notebook used, for the checks below.
REPORT = """
import json as _json
print("REPORT" + _json.dumps({
    "socket": hub.socket_name,
    "log_path": log_path,
    "closed": hub.closed,
    "rounds": len(mh.RoundLog(log_path).df),
    "statuses": sorted(set(mh.RoundLog(log_path).df.status)),
    "priced": int(mh.RoundLog(log_path).df.cost_usd.notna().sum()),
}))
"""

MIN_ROUNDS = {"quickstart": 3, "transform-tuning": 4, "round-analysis": 6}
MIN_PRICED = {"round-analysis": 5}
"""Rounds with a cost_usd: every hand-off of round-analysis (its price table knows the demo models)."""


def _tmux_server_pid(socket: str) -> int | None:
    out = subprocess.run(
        ["tmux", "-L", socket, "display-message", "-p", "#{pid}"], capture_output=True, text=True
    )
    text = out.stdout.strip()
    return int(text) if out.returncode == 0 and text.isdigit() else None


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_tidy_for_a_fresh_kernel(name: str) -> None:
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    sources = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "%config MadoHub.idle_delay_ms = 1500" in sources
    assert "%config MadoHub.socket_name" in sources
    assert "%config MadoHub.log_path" in sources
    assert "wait_rounds(" in sources
    assert nb.cells[-1].source.strip().endswith("hub.close()")
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "clear outputs"


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom(name: str, home: Path, tmp_path: Path) -> None:
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(REPORT))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    client = NotebookClient(
        nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(run_dir)}}
    )
    socket = None
    try:
        client.execute()
        lines = [
            line
            for out in nb.cells[-1].outputs
            if out.output_type == "stream"
            for line in out.text.splitlines()
            if line.startswith("REPORT")
        ]
        report = json.loads(lines[0][len("REPORT") :])
        socket = report["socket"]
        assert socket.startswith("madohub-")
        assert report["closed"] is True
        assert report["rounds"] >= MIN_ROUNDS[name]
        assert "error" not in report["statuses"]
        assert report["priced"] >= MIN_PRICED.get(name, 0)
        assert not Path(report["log_path"]).is_relative_to(home), "the log is not a temporary one"
        assert not (home / ".claude").exists(), "the demo agents wrote into the user's ~/.claude"
        # hub.close() killed the panes it made, so the private tmux server has exited.
        wait_until(lambda: _tmux_server_pid(socket) is None, 15, what="the tmux server to exit")
    finally:
        if socket is not None and (pid := _tmux_server_pid(socket)) is not None:
            kill_tree(pid)
        shutil.rmtree(run_dir, ignore_errors=True)
