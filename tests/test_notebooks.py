"""The tutorial notebooks run top to bottom on a fresh kernel with the demo agents."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest
from conftest import REPO, kill_tree, tmux_server_pid, wait_until
from nbclient import NotebookClient

pytestmark = pytest.mark.notebooks

NOTEBOOKS = REPO / "notebooks"
NAMES = ("quickstart", "transform-tuning", "round-analysis", "inbox", "experiments")

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

MIN_ROUNDS = {
    "quickstart": 3, "transform-tuning": 4, "round-analysis": 6, "inbox": 4,
    "experiments": 6 + 4 * 5,  # the run by hand, then 2 variants x 2 repeats of it
}  # fmt: skip
MIN_PRICED = {"round-analysis": 5}
"""Rounds with a cost_usd: every hand-off of round-analysis (its price table knows the demo models)."""


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
        wait_until(lambda: tmux_server_pid(socket) is None, 15, what="the tmux server to exit")
    finally:
        if socket is not None and (pid := tmux_server_pid(socket)) is not None:
            kill_tree(pid)
        shutil.rmtree(run_dir, ignore_errors=True)


# Issue 13: failing cells, answers you can keep, a dashboard that survives saving -----------


def _notebook(*sources: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    return nb


def _setup(socket: str, tmp_path: Path) -> str:
    return (
        "%load_ext madohub_nb\n"
        f"%config MadoHub.socket_name = {socket!r}\n"
        f"%config MadoHub.log_path = {str(tmp_path / 'rounds.db')!r}\n"
        "%config MadoHub.idle_delay_ms = 300\n"
        "import madohub_nb as mh\n"
        "hub = mh.get_hub()"
    )


def test_a_failed_madohub_command_stops_the_notebook_with_one_line(
    home: Path, tmp_path: Path, tmux_socket: str
) -> None:
    from nbclient.exceptions import CellExecutionError

    nb = _notebook(
        _setup(tmux_socket, tmp_path),
        "%madohub connect a -> b --max-rounds 99",
        "print('after the failure')",
    )
    client = NotebookClient(nb, timeout=60, kernel_name="python3")
    with pytest.raises(CellExecutionError, match="from 1 to 20"):
        client.execute()
    # IPython shows a UsageError as one stderr line, no traceback; the reply still says error.
    shown = "".join(o.get("text", "") for o in nb.cells[1].outputs)
    assert shown.startswith("UsageError: madohub: ") and "from 1 to 20" in shown
    assert len(shown.strip().splitlines()) == 1 and "Traceback" not in shown
    assert not [o for o in nb.cells[1].outputs if o.output_type == "error"]
    assert nb.cells[2].outputs == [] and nb.cells[2].execution_count is None


def test_a_saved_notebook_keeps_the_dashboard_as_html_and_send_futures_resolve(
    home: Path, tmp_path: Path, tmux_socket: str
) -> None:
    shell = "env PS1='$ ' bash --norc --noprofile"
    nb = _notebook(
        _setup(tmux_socket, tmp_path),
        f'%madohub tile sh --agent shell --cmd "{shell}"\nhub.tiles["sh"].ready.result(15)',
        "fut = %madohub send sh --allow-shell echo saved-$((40+2))\nprint('ROUND', fut.result(30).status)",
        "%madohub dashboard",
        "hub.close()",
    )
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    path = tmp_path / "saved.ipynb"
    nbformat.write(nb, path)
    saved = nbformat.read(path, as_version=4)
    printed = "".join(o.get("text", "") for o in saved.cells[2].outputs)
    assert "ROUND delivered" in printed
    (shown,) = [o for o in saved.cells[3].outputs if o.output_type == "execute_result"]
    assert "application/vnd.jupyter.widget-view+json" in shown.data
    html = shown.data["text/html"]
    assert html.startswith('<div class="madohub-dashboard">')
    assert "<b>sh</b>" in html and "<svg" in html and "madohub-rounds" in html
