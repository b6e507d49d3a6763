"""The quickstart in a real browser: JupyterLab driven by Playwright over Debian's chromium.

JupyterLab runs on 127.0.0.1 with a token, a temporary root, HOME and Jupyter
dirs; chromium is started by this test (never downloaded by Playwright) and
Playwright attaches to it over the DevTools protocol, so both are ended by pid.
``tests/browser/install.sh`` installs chromium when it is missing.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import FAST_IDLE_MS, REPO, kill_tree, wait_until

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("MADOHUB_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("MADOHUB_ARTIFACTS", REPO / "tests" / "artifacts"))
DASHBOARD_PNG_ENV = "MADOHUB_DASHBOARD_PNG"
"""Where to save the dashboard picture; unset, it goes to the test's temporary folder.

``make docs-shots`` sets it to ``docs/dashboard.png`` to refresh the picture of README.md and
the docs site; a plain test run leaves the tracked file (and ``git status``) alone.
"""
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
)
RUN_TIMEOUT_MS = 150_000


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Lab:
    """A running JupyterLab: where it listens and what it serves."""

    url: str
    token: str
    root: Path
    process: subprocess.Popen[bytes]
    log: Path


def _lab_env(base: Path, home: Path) -> dict[str, str]:
    dirs = {
        "JUPYTER_CONFIG_DIR": base / "jupyter-config",
        "JUPYTER_DATA_DIR": base / "jupyter-data",
        "JUPYTER_RUNTIME_DIR": base / "jupyter-runtime",
        "JUPYTERLAB_SETTINGS_DIR": base / "lab-settings",
        "JUPYTERLAB_WORKSPACES_DIR": base / "lab-workspaces",
        "IPYTHONDIR": base / "ipython",
    }
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    # No announcements or update checks (they would reach out to the network).
    (dirs["JUPYTER_CONFIG_DIR"] / "jupyter_server_config.py").write_text(
        "c.LabApp.news_url = None\n"
        "c.LabApp.check_for_updates_class = 'jupyterlab.handlers.announcements.NeverCheckForUpdate'\n"
    )
    settings = {
        # Every cell stays in the DOM, so the tile view can be read wherever it is.
        ("notebook-extension", "tracker"): {"windowingMode": "none"},
        # No news toast over the dashboard, and no news fetched.
        ("apputils-extension", "notification"): {"fetchNews": "false", "checkForUpdates": False},
    }
    for (extension, plugin), values in settings.items():
        folder = dirs["JUPYTERLAB_SETTINGS_DIR"] / "@jupyterlab" / extension
        folder.mkdir(parents=True)
        (folder / f"{plugin}.jupyterlab-settings").write_text(json.dumps(values))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "TMUX"))}
    env.update({k: str(v) for k, v in dirs.items()})
    env["HOME"] = str(home)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.fixture
def lab(tmp_path: Path, home: Path) -> Iterator[Lab]:
    """JupyterLab on 127.0.0.1 with a copy of the quickstart; ended by pid afterwards."""
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(REPO / "notebooks" / "quickstart.ipynb", root / "quickstart.ipynb")
    port, token = _free_port(), secrets.token_hex(16)
    log = tmp_path / "jupyterlab.log"
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.expose_app_in_browser=True",
    ]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=root,
            env=_lab_env(tmp_path, home),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    kernels: set[int] = set()
    try:
        wait_until(
            lambda: proc.poll() is not None or _status_ok(url, token),
            60,
            what=f"JupyterLab to answer (log: {log})",
        )
        assert proc.poll() is None, log.read_text()
        yield Lab(url, token, root, proc, log)
        kernels = {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
    finally:
        kill_tree(proc.pid)
        for pid in kernels:  # a kernel killed before hub.close() leaves its tmux server
            for prefix in ("madohub-quickstart", "madohub-blocking"):
                _kill_tmux_server(f"{prefix}-{pid}")


def _status_ok(url: str, token: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _kill_tmux_server(name: str) -> None:
    out = subprocess.run(
        ["tmux", "-L", name, "display-message", "-p", "#{pid}"], capture_output=True, text=True
    )
    if out.returncode == 0 and out.stdout.strip().isdigit():
        kill_tree(int(out.stdout.strip()))


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[str]:
    """Debian's chromium, headless, started here; yields its DevTools endpoint."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run tests/browser/install.sh (make test does)")
    profile = tmp_path / "chromium-profile"
    proc = subprocess.Popen(
        [
            CHROMIUM,
            *CHROMIUM_ARGS,
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    port_file = profile / "DevToolsActivePort"
    try:
        wait_until(
            lambda: (
                proc.poll() is not None or (port_file.exists() and port_file.read_text().strip())
            ),
            30,
            what="chromium's DevTools port",
        )
        assert proc.poll() is None, f"chromium exited with {proc.returncode}"
        port = port_file.read_text().split()[0]
        yield f"http://127.0.0.1:{port}"
    finally:
        kill_tree(proc.pid)


# In-page helpers -----------------------------------------------------------------------

KERNEL_READY_JS = """
async () => {
  const panel = window.jupyterapp.shell.currentWidget;
  await panel.context.ready;
  await panel.sessionContext.ready;
  const kernel = panel.sessionContext.session.kernel;
  await kernel.info;  // the kernel_info reply: the kernel really answers
  let text = "";
  const future = kernel.requestExecute({code: "print('kernel', 6 * 7)"});
  future.onIOPub = (msg) => {
    if (msg.header.msg_type === "stream") { text += msg.content.text; }
  };
  await future.done;
  return text;
}
"""

WATCH_TILE_JS = """
() => {
  window.__madohub = {texts: []};
  setInterval(() => {
    const el = document.querySelector(".madohub-tile-screen");
    if (!el) { return; }
    const texts = window.__madohub.texts;
    const text = el.innerText;
    if (texts.length === 0 || texts[texts.length - 1] !== text) { texts.push(text); }
  }, 50);
}
"""

RUN_ALL_JS = """
async () => {
  const commands = window.jupyterapp.commands;
  const id = commands.hasCommand("runmenu:run-all") ? "runmenu:run-all" : "notebook:run-all-cells";
  await commands.execute(id);
  return id;
}
"""

NOTEBOOK_STATE_JS = """
() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cells = panel.content.widgets.filter((c) => c.model.type === "code");
  const errors = [];
  for (const cell of cells) {
    for (const out of cell.model.outputs.toJSON()) {
      if (out.output_type === "error") { errors.push(out.ename + ": " + out.evalue); }
    }
  }
  return {
    executed: cells.filter((c) => c.model.executionCount !== null).length,
    running: cells.filter((c) => c.promptNode && c.promptNode.textContent.includes("*")).length,
    total: cells.length,
    status: panel.sessionContext.kernelDisplayStatus,
    errors: errors,
  };
}
"""


def test_quickstart_runs_in_jupyterlab_and_the_tile_view_goes_live(
    lab: Lab, chromium: str, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    dashboard_png = Path(os.environ.get(DASHBOARD_PNG_ENV) or tmp_path / "dashboard.png")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.connect_over_cdp(chromium)
        context = browser.contexts[0] if browser.contexts else browser.new_context()
        page = context.new_page()
        page.set_viewport_size({"width": 1400, "height": 1000})
        page.set_default_timeout(60_000)
        page.goto(f"{lab.url}/lab/tree/quickstart.ipynb?token={lab.token}")
        page.wait_for_function(
            "() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
            " && window.jupyterapp.shell.currentWidget.sessionContext"
        )
        page.wait_for_selector(".jp-Notebook .jp-Cell", state="attached")
        # The status indicator says idle first; the kernel really answers only later.
        page.wait_for_function(
            "() => window.jupyterapp.shell.currentWidget.sessionContext.kernelDisplayStatus"
            " === 'idle'"
        )
        assert page.evaluate(KERNEL_READY_JS).strip() == "kernel 42"

        page.evaluate(WATCH_TILE_JS)
        assert page.evaluate(RUN_ALL_JS) in ("runmenu:run-all", "notebook:run-all-cells")

        # The writer's tile view is live: its text changes at least twice.
        page.wait_for_function("() => window.__madohub.texts.length >= 3", timeout=RUN_TIMEOUT_MS)
        texts = page.evaluate("() => window.__madohub.texts")
        assert len(set(texts)) >= 3

        # The dashboard shows logged rounds; take its picture for README.md and the docs.
        dashboard = page.locator(".madohub-dashboard").first
        page.wait_for_selector(
            ".madohub-dashboard .madohub-rounds tr[data-round-id]", timeout=RUN_TIMEOUT_MS
        )
        dashboard_png.parent.mkdir(parents=True, exist_ok=True)
        dashboard.screenshot(path=str(dashboard_png))
        page.screenshot(path=str(ARTIFACTS / "quickstart-live.png"))

        # Run all finishes (the last cell closes the hub) with no error anywhere.
        page.wait_for_function(
            f"() => {{ const s = ({NOTEBOOK_STATE_JS})();"
            " return s.executed === s.total && s.running === 0 && s.status === 'idle'; }",
            timeout=RUN_TIMEOUT_MS,
        )
        state = page.evaluate(NOTEBOOK_STATE_JS)
        page.screenshot(path=str(ARTIFACTS / "quickstart-done.png"), full_page=True)
        assert state["errors"] == []
        assert any("Draft v1" in t for t in texts), "the writer's answer never showed live"
        browser.close()


def _write_notebook(path: Path, cells: tuple[str, ...]) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)


def _open_notebook(pw: Any, chromium: str, lab: Lab, name: str) -> tuple[Any, Any]:
    """The notebook ``name`` open in JupyterLab, its kernel answering: (browser, page)."""
    browser = pw.chromium.connect_over_cdp(chromium)
    context = browser.contexts[0] if browser.contexts else browser.new_context()
    page = context.new_page()
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(f"{lab.url}/lab/tree/{name}.ipynb?token={lab.token}")
    page.wait_for_function(
        "() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
        " && window.jupyterapp.shell.currentWidget.sessionContext"
    )
    page.wait_for_selector(".jp-Notebook .jp-Cell", state="attached")
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.kernelDisplayStatus === 'idle'"
    )
    assert page.evaluate(KERNEL_READY_JS).strip() == "kernel 42"
    return browser, page


# While a cell blocks -----------------------------------------------------------------

BLOCKING_CELLS = (
    """import os, tempfile, time
from pathlib import Path
import madohub_nb as mh
%load_ext madohub_nb
work = Path(tempfile.mkdtemp(prefix="madohub-blocking-"))
socket = f"madohub-blocking-{os.getpid()}"
log_path = str(work / "rounds.sqlite3")
claude_dir = work / "claude"
%config MadoHub.idle_delay_ms = 1000
%config MadoHub.socket_name = socket
%config MadoHub.log_path = log_path
%madohub tile writer --demo echo --cwd $work --env CLAUDE_CONFIG_DIR=$claude_dir
%madohub tile reviewer --demo echo --cwd $work --env CLAUDE_CONFIG_DIR=$claude_dir
hub = mh.get_hub()
route = hub.connect("writer", "reviewer", template="Review: {output}", cooldown_ms=1000)
for tile in hub.tiles.values():
    tile.ready.result(30)
while not (route.ready.is_set() and all(t.state == "idle" for t in hub.tiles.values())):
    time.sleep(0.1)""",
    "%madohub dashboard",
    """print("blocking-now")
hub.send("writer", "hello while the kernel sleeps")
time.sleep(15)
print("blocking-done")""",
    "hub.close()",
)

OUTPUTS_JS = """() => Array.from(document.querySelectorAll(".jp-OutputArea-output"))
  .map((e) => e.innerText).join("\\n")"""

WATCH_DASHBOARD_JS = (
    """
() => {
  const OUTPUTS_TEXT = """
    + OUTPUTS_JS
    + """;
  window.__blocking = [];
  setInterval(() => {
    const text = OUTPUTS_TEXT();
    const dash = document.querySelector(".madohub-dashboard");
    window.__blocking.push({
      blocking: text.includes("blocking-now") && !text.includes("blocking-done"),
      rows: dash ? dash.querySelectorAll(".madohub-rounds tr[data-round-id]").length : 0,
      tiles: dash ? Array.from(dash.querySelectorAll(".madohub-tile-screen"))
        .map((e) => e.innerText).join("|") : "",
    });
  }, 100);
}
"""
)


def test_the_dashboard_keeps_changing_while_a_cell_blocks(
    lab: Lab, chromium: str, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    _write_notebook(lab.root / "blocking.ipynb", BLOCKING_CELLS)
    with sync_playwright() as pw:
        browser, page = _open_notebook(pw, chromium, lab, "blocking")
        page.evaluate(WATCH_DASHBOARD_JS)
        page.evaluate(RUN_ALL_JS)
        page.wait_for_function(
            f"() => ({OUTPUTS_JS})().includes('blocking-done')", timeout=RUN_TIMEOUT_MS
        )
        page.screenshot(path=str(tmp_path / "blocking.png"))
        samples = page.evaluate("() => window.__blocking")
        state = page.evaluate(NOTEBOOK_STATE_JS)
        browser.close()
    assert state["errors"] == []
    during = [s for s in samples if s["blocking"]]
    assert len(during) > 50, "the sleeping cell was not seen running"
    # While the kernel's thread slept, the dashboard got the round and the tiles redrew.
    assert during[0]["rows"] == 0 and during[-1]["rows"] >= 2, (during[0], during[-1])
    assert len({s["tiles"] for s in during}) >= 3
    assert "Review: Done: hello while the kernel sleeps" in during[-1]["tiles"]


# The timeline and the key buttons (issue 13) -------------------------------------------

SHOTS = Path(os.environ["MADOHUB_DOCS_SHOTS"]) if os.environ.get("MADOHUB_DOCS_SHOTS") else None
"""``make docs-shots`` sets MADOHUB_DOCS_SHOTS=docs to keep this test's pictures for the docs site."""

KEYS_CELLS = (
    """import os, tempfile, time
from pathlib import Path
import madohub_nb as mh
%load_ext madohub_nb
work = Path(tempfile.mkdtemp(prefix="madohub-keys-"))
socket = f"madohub-blocking-{os.getpid()}"  # (the lab fixture ends this server if we fail)
%config MadoHub.idle_delay_ms = 1000
%config MadoHub.socket_name = socket
%config MadoHub.log_path = str(work / "rounds.sqlite3")
%madohub tile writer --demo echo --cwd $work --env MADOHUB_STANDIN_THINK_S=0.2
hub = mh.get_hub()
hub.tiles["writer"].ready.result(30)
while hub.tiles["writer"].state != "idle":
    time.sleep(0.1)
print("SOCKET", socket)""",
    "%madohub dashboard",
    """hub.send("writer", "Permission test [[bash touch made_by_tool]]").result(30)
print("prompt-sent")""",
)

DASHBOARD_HTML_JS = """(selector) => {
  const el = document.querySelector(".madohub-dashboard " + selector);
  return el ? el.innerHTML : "";
}"""


def _save_shot(locator: object, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    locator.screenshot(path=str(path))  # type: ignore[attr-defined]
    if SHOTS is not None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, SHOTS / name)
    return path


def test_the_dashboard_shows_the_timeline_and_a_key_button_answers_a_prompt(
    lab: Lab, chromium: str, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    _write_notebook(lab.root / "keys.ipynb", KEYS_CELLS)
    with sync_playwright() as pw:
        browser, page = _open_notebook(pw, chromium, lab, "keys")
        page.evaluate(RUN_ALL_JS)
        page.wait_for_function(
            f"() => ({OUTPUTS_JS})().includes('prompt-sent')", timeout=RUN_TIMEOUT_MS
        )
        # The stand-in asks permission: the tile view shows its answer buttons; press "1 / Yes"
        # (the kernel is idle, so the click reaches it at once).
        yes = page.locator(".madohub-dashboard .madohub-tile-keys button", has_text="1 / Yes")
        yes.wait_for(state="visible", timeout=30_000)
        waiting = _save_shot(
            page.locator(".madohub-dashboard .madohub-tile").first, tmp_path, "tile-keys.png"
        )
        yes.click()
        page.wait_for_function(
            "() => Array.from(document.querySelectorAll('.madohub-dashboard .madohub-tile-screen'))"
            ".some((e) => e.innerText.includes('Bash completed'))",
            timeout=30_000,
        )
        # The timeline redrew with the hand send and the key press as lanes (SVG text is
        # drawn as paths; matplotlib keeps each label in a comment).
        page.wait_for_function(
            f"() => {{ const h = ({DASHBOARD_HTML_JS})('.madohub-timeline');"
            " return h.includes('<svg') && h.includes('keys') && h.includes('send'); }",
            timeout=30_000,
        )
        page.locator(".madohub-dashboard .madohub-timeline").first.scroll_into_view_if_needed()
        timeline = _save_shot(
            page.locator(".madohub-dashboard").first, tmp_path, "dashboard-timeline.png"
        )
        header = page.evaluate(f"() => ({DASHBOARD_HTML_JS})('.madohub-tile-header')")
        state = page.evaluate(NOTEBOOK_STATE_JS)
        closed = page.evaluate(
            """async () => {
              const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
              let text = "";
              const f = kernel.requestExecute({code: "print(hub.log.df['transform'].tolist()); hub.close()"});
              f.onIOPub = (m) => { if (m.header.msg_type === "stream") { text += m.content.text; } };
              await f.done;
              return text;
            }"""
        )
        browser.close()
    assert state["errors"] == []
    assert "attach -r -t" in header
    assert "'keys'" in closed, closed
    assert waiting.stat().st_size > 5_000 and timeline.stat().st_size > 10_000


# The inbox (issue 24) -------------------------------------------------------------------

INBOX_CELLS = (
    """import os, tempfile, time
from pathlib import Path
import madohub_nb as mh
%load_ext madohub_nb
work = Path(tempfile.mkdtemp(prefix="madohub-inbox-"))
socket = f"madohub-blocking-{os.getpid()}"  # (the lab fixture ends this server if we fail)
%config MadoHub.idle_delay_ms = 1000
%config MadoHub.socket_name = socket
%config MadoHub.log_path = str(work / "rounds.sqlite3")
%madohub tile writer --demo echo --cwd $work --env MADOHUB_STANDIN_THINK_S=0.2 --env MADOHUB_STANDIN_ALLOW_BASH=1
%madohub tile reviewer --demo echo --cwd $work --env MADOHUB_STANDIN_THINK_S=0.2
hub = mh.get_hub()
for tile in hub.tiles.values():
    tile.ready.result(30)
while not all(t.state == "idle" for t in hub.tiles.values()):
    time.sleep(0.1)""",
    "%madohub inbox",
    """hub.send("writer", "Permission test [[bash touch made_by_inbox]]").result(30)
print("prompt-sent")""",
)

KERNEL_PRINT_JS = """async (code) => {
  const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  let text = "";
  const f = kernel.requestExecute({code});
  f.onIOPub = (m) => { if (m.header.msg_type === "stream") { text += m.content.text; } };
  await f.done;
  return text;
}"""


def test_the_inbox_answers_a_permission_and_delivers_an_approval_edited_in_the_browser(
    lab: Lab, chromium: str, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    _write_notebook(lab.root / "inbox.ipynb", INBOX_CELLS)
    with sync_playwright() as pw:
        browser, page = _open_notebook(pw, chromium, lab, "inbox")
        page.evaluate(RUN_ALL_JS)
        page.wait_for_function(
            f"() => ({OUTPUTS_JS})().includes('prompt-sent')", timeout=RUN_TIMEOUT_MS
        )
        yes = page.locator(".madohub-inbox button", has_text="1. Yes")
        yes.wait_for(state="visible", timeout=30_000)
        assert "Do you want to proceed?" in page.locator(".madohub-inbox").first.inner_text()
        yes.click()
        yes.wait_for(state="detached", timeout=30_000)  # answered: it left the list
        made = page.evaluate(
            KERNEL_PRINT_JS,
            "deadline = time.monotonic() + 15\n"
            "while not (work / 'made_by_inbox').exists() and time.monotonic() < deadline:\n"
            "    time.sleep(0.1)\n"
            "print((work / 'made_by_inbox').exists())",
        )
        assert made.strip() == "True", made
        page.evaluate(
            KERNEL_PRINT_JS,
            "route = hub.connect('writer', 'reviewer', template='Review: {output}', approve=True)\n"
            "while not route.ready.is_set(): time.sleep(0.05)\n"
            "hub.send('writer', 'a draft').result(30)",
        )
        box = page.locator(".madohub-inbox textarea")
        box.wait_for(state="visible", timeout=30_000)
        assert box.input_value().startswith("Review: ")
        box.fill("Edited in the browser")
        page.locator(".madohub-inbox button", has_text="approve").click()
        box.wait_for(state="detached", timeout=30_000)
        row = page.evaluate(
            KERNEL_PRINT_JS,
            "hub.wait_rounds(4).result(30)\n"
            "r = hub.log.df[hub.log.df.route_id == route.id].iloc[-1]\n"
            "print(r.status, r.decision, r.prompt, '|', r.proposed_prompt)\n"
            "hub.close()",
        )
        state = page.evaluate(NOTEBOOK_STATE_JS)
        browser.close()
    assert state["errors"] == []
    assert row.startswith("delivered edited Edited in the browser | Review: "), row


# An experiment's report (issue 40, item 6) -----------------------------------------------

REPORT_DOM_JS = """() => ({
  rows: [...document.querySelectorAll(".madohub-summary tbody tr")].map(
    (tr) => [...tr.querySelectorAll("td")].map((td) => td.innerText.trim())),
  head: [...document.querySelectorAll(".madohub-summary thead th")].map((th) => th.innerText),
  comparison: document.querySelector(".madohub-comparison").innerText,
  images: [...document.images].map((img) => [img.complete, img.naturalWidth]),
  runs: document.querySelectorAll("details.madohub-run").length,
})"""

OPEN_FIRST_RUN_JS = """() => {
  const run = document.querySelector("details.madohub-run");
  run.open = true;
  run.querySelector("details.madohub-run-diff").open = true;
  return run.querySelector(".madohub-diff-text").getBoundingClientRect().height;
}"""


def test_an_experiments_report_renders_offline_in_chromium(
    chromium: str, project: Path, repo: Path, tmp_path: Path, tmux_socket: str
) -> None:
    """Two templates × 3 runs of stand-ins in worktrees, scored; the report file opened in
    chromium: its summary, comparison, plot and runs are there, and nothing was fetched but
    the file itself (``make docs-shots`` keeps the picture as docs/experiment-report.png)."""
    from playwright.sync_api import sync_playwright
    from test_experiment import VARIANTS, _worktree_workflow

    import madohub_nb as mh

    def short(run: Any) -> float:  # fewer rounds score higher
        return 1 / max(1, len(run.rounds))

    exp = mh.experiment(
        _worktree_workflow(project, repo), VARIANTS, {"writer": "Write a slug function."},
        repeats=3, timeout_s=60, log_path=tmp_path / "exp.sqlite3", socket_name=tmux_socket,
        idle_delay_ms=FAST_IDLE_MS, score=[mh.score.regex(r"\bLGTM\b", name="approved"), short],
    )  # fmt: skip
    assert exp.df["error"].isna().all(), exp.df["error"].tolist()
    report = Path(exp.report(tmp_path / "report.html"))
    fetched: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.connect_over_cdp(chromium)
        context = browser.contexts[0] if browser.contexts else browser.new_context()
        page = context.new_page()
        page.set_viewport_size({"width": 1400, "height": 1000})
        page.on("request", lambda request: fetched.append(request.url))
        page.goto(report.as_uri())
        page.wait_for_load_state("load")
        dom = page.evaluate(REPORT_DOM_JS)
        diff_px = page.evaluate(OPEN_FIRST_RUN_JS)
        shot = _save_shot(page, tmp_path, "experiment-report.png")
        browser.close()
    assert [u for u in fetched if not u.startswith(("file:", "data:"))] == []
    summary = exp.summary()
    assert [row[0] for row in dom["rows"]] == ["approve", "plain"]
    approved = summary.loc["approve"]
    assert dom["rows"][0][2] == (
        f"1 [{approved['approved_ci_low']:.3g}, {approved['approved_ci_high']:.3g}]"
    )
    assert "approved (mean [95% CI])" in dom["head"]
    assert dom["comparison"] == str(exp.compare("approve", "plain", score="approved"))
    assert len(dom["images"]) == 1 + 6 and all(done and w > 0 for done, w in dom["images"])
    assert dom["runs"] == 6 and diff_px > 0
    assert shot.stat().st_size > 20_000  # a picture, not a blank page
    if SHOTS is not None:  # the plot alone, for docs/experiments.md
        from madohub_nb.plot import figure_bytes

        (SHOTS / "experiment-scores.png").write_bytes(figure_bytes(exp.plot()))
