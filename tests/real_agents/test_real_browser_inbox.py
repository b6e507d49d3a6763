"""The inbox widget in the real browser, with the REAL Claude Code (both pinned versions).

JupyterLab and chromium as in ``tests/test_browser.py`` (its fixtures and in-page helpers);
the notebook's hub starts the real Claude Code, offline against a fake API on 127.0.0.1,
in ``--permission-mode default`` (2.1.332 starts in ``auto`` mode and would not ask:
REAL-AGENTS.md "Hooks"). A Bash call shows Claude's own permission dialog; ``%madohub
inbox`` lists it with the choices Claude draws; a click on "1. Yes" in the browser
answers it, the tool runs (its file appears), its result reaches the fake API, and the
round is logged once as an ``inbox`` row.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import wait_until

# The browser tier's fixtures and in-page helpers (fixtures imported by name are used).
from test_browser import (  # noqa: F401
    KERNEL_PRINT_JS,
    NOTEBOOK_STATE_JS,
    OUTPUTS_JS,
    RUN_ALL_JS,
    RUN_TIMEOUT_MS,
    Lab,
    _open_notebook,
    _write_notebook,
    chromium,
    lab,
)

from madohub_nb.testing.fake_anthropic import FakeAnthropic

from .conftest import (
    CLAUDE_VERSIONS,
    DEFAULT_API_KEY,
    LEAKY_ENV,
    REPLY_TIMEOUT_S,
    claude_env,
    write_claude_config,
)
from .test_real_inbox import _tool_results

pytestmark = [pytest.mark.real_agents, pytest.mark.browser]


def _cells(command: str, cwd: Path, env: dict[str, str], log: Path) -> tuple[str, ...]:
    """The notebook: a hub whose tile runs the real Claude Code, the inbox, one Bash request."""
    return (
        f"""import os, time
import madohub_nb as mh
%load_ext madohub_nb
socket = f"madohub-blocking-{{os.getpid()}}"  # (the lab fixture ends this server if we fail)
%config MadoHub.idle_delay_ms = 1000
%config MadoHub.socket_name = socket
%config MadoHub.log_path = {str(log)!r}
hub = mh.get_hub()
tile = hub.tile("w", agent="claude", command={command!r}, cwd={str(cwd)!r},
                env={json.dumps(env)}, hooks=True)
deadline = time.monotonic() + 90
while tile.state != "idle" and time.monotonic() < deadline:
    time.sleep(0.2)
print("claude", tile.state)""",
        "%madohub inbox",
        """hub.send("w", "run it [[bash touch made_in_browser]]").result(60)
print("prompt-sent")""",
    )


@pytest.mark.timeout(600)
@pytest.mark.parametrize("version", CLAUDE_VERSIONS)
def test_real_claude_permission_prompt_answered_from_the_inbox_in_the_browser(
    lab: Lab,  # noqa: F811
    chromium: str,  # noqa: F811
    home: Path,
    tmp_path: Path,
    version: str,
    agent_bin: Callable[[str, str], Path],
    fake_anthropic: FakeAnthropic,
) -> None:
    from playwright.sync_api import sync_playwright

    cwd = tmp_path / "proj"
    cwd.mkdir()
    cwd = cwd.resolve()
    write_claude_config(home, cwd, DEFAULT_API_KEY, version)
    unset = [a for var in LEAKY_ENV if var not in ("TMUX", "TMUX_PANE") for a in ("-u", var)]
    exe = str(agent_bin("claude", version))
    command = shlex.join(["env", *unset, exe, "--permission-mode", "default"])
    env = claude_env(home, fake_anthropic.base_url, DEFAULT_API_KEY)
    _write_notebook(lab.root / "real_inbox.ipynb", _cells(command, cwd, env, tmp_path / "r.db"))
    with sync_playwright() as pw:
        browser, page = _open_notebook(pw, chromium, lab, "real_inbox")
        page.evaluate(RUN_ALL_JS)
        page.wait_for_function(
            f"() => ({OUTPUTS_JS})().includes('prompt-sent')", timeout=RUN_TIMEOUT_MS
        )
        outputs = page.evaluate(OUTPUTS_JS)
        assert "claude idle" in outputs, outputs
        yes = page.locator(".madohub-inbox button", has_text="1. Yes")
        yes.wait_for(state="visible", timeout=int(REPLY_TIMEOUT_S * 1000))
        listed = page.locator(".madohub-inbox").first.inner_text()
        # Claude's own dialog, as the widget shows it: its question and its choices.
        assert "Do you want to proceed?" in listed, listed
        assert "always allow access to" in listed and "No" in listed, listed
        assert not (cwd / "made_in_browser").exists() and _tool_results(fake_anthropic) == []
        yes.click()
        yes.wait_for(state="detached", timeout=30_000)  # answered: it left the list
        wait_until((cwd / "made_in_browser").exists, REPLY_TIMEOUT_S, what="the tool ran")
        wait_until(
            lambda: _tool_results(fake_anthropic),
            REPLY_TIMEOUT_S,
            what="the tool result at the API",
        )
        row = page.evaluate(
            KERNEL_PRINT_JS,
            "deadline = time.monotonic() + 60\n"
            "while tile.state != 'idle' and time.monotonic() < deadline:\n"
            "    time.sleep(0.2)\n"
            "rows = hub.log.df[hub.log.df.route_id == 'inbox']\n"
            "print(tile.state, len(hub.inbox), len(rows), rows.iloc[-1].status,"
            " rows.iloc[-1].decision, rows.iloc[-1].prompt)\n"
            "hub.close()",
        )
        state = page.evaluate(NOTEBOOK_STATE_JS)
        browser.close()
    assert state["errors"] == []
    assert row.split() == ["idle", "0", "1", "delivered", "approved", "1"], row
    (result,) = _tool_results(fake_anthropic)
    assert not result.get("is_error"), result
