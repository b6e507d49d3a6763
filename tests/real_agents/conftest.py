"""Run the REAL Claude Code and Codex CLIs in tmux panes, offline, against local fake APIs.

The CLIs come from npm, pinned, installed once into a cache (``install.py``); a missing npm or
a failed install FAILS the tests (CI must notice), it never skips them.

Layers, for the tests here and for later ones that route real agents through hubs:

- screen rules: :func:`claude_is_idle`, :func:`codex_is_idle`;
- files that skip first-run screens: :func:`write_claude_config`, :func:`write_codex_config`;
- environments: :func:`claude_env`, :func:`codex_env`;
- :func:`start_agent_pane` starts any command in a new tmux session on a private socket and
  returns a :class:`RealPane` (type, press, read the screen, find the agent's process, stop);
- fixtures: ``agent_bin`` (install-on-demand), ``fake_anthropic``, ``fake_openai``, and the
  factories ``real_claude_pane(version, ...)`` / ``real_codex_pane(version, ...)`` that start
  an agent, wait for its idle screen and clean everything up by pid afterwards
  (including the ``codex app-server`` daemon Codex leaves behind).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from conftest import kill_tree, wait_until

from madohub_nb.agents.profiles import PROFILES, screen_state
from madohub_nb.testing.fake_amp import FakeAmp
from madohub_nb.testing.fake_anthropic import FakeAnthropic, default_answer
from madohub_nb.testing.fake_gemini import FakeGemini
from madohub_nb.testing.fake_openai import FakeOpenAIResponses, prompt_text

from .install import TRAPPED_REGISTRY_ENV, AgentInstallError, config_deps_dir, ensure_agent

CLAUDE_VERSIONS = ("2.1.197", "2.1.332")
CODEX_VERSION = "0.171.0"

DEFAULT_API_KEY = "sk-test-madohub-real-agents-0123456789abcdefghij"
"""Long enough that its last 20 characters (what ``.claude.json`` approves) are unique."""

CODEX_KEY_ENV = "FAKE_OPENAI_KEY"
CODEX_MODEL = "fake-model"

PANE_WIDTH = 160
PANE_HEIGHT = 50
STARTUP_TIMEOUT_S = 60.0
REPLY_TIMEOUT_S = 60.0

CODEX_ENTER_DELAY_S = PROFILES["codex"].pre_submit_delay_ms / 1000
"""Codex swallows an Enter that follows typed text at once (a paste burst; REAL-AGENTS.md)."""
CODEX_SUBMIT_TRIES = 3
CODEX_SUBMIT_SEEN_S = 5.0
"""How often, and how long apart, the helper presses Enter while Codex's composer holds the text."""

CLAUDE_QUIET_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    # Otherwise it runs `git clone` of the official plugin marketplace (a public host).
    "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL": "1",
}

LEAKY_ENV = (
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "CLAUDE_CONFIG_DIR",
    "CLAUDECODE",
    "CLAUDE_CODE_ENTRYPOINT",
    "CLAUDE_CODE_SSE_PORT",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "TMUX",
    "TMUX_PANE",
)
"""Variables of the calling process that would point an agent somewhere else: removed."""

DAEMON_TERM_TIMEOUT_S = 1.0
"""The app-server daemon often ignores SIGTERM for seconds; then it gets SIGKILL."""

SUBMIT_PAUSE_KINDS = frozenset({"gemini", "copilot", "pi"})
"""Kinds whose helper ``submit`` waits the profile's ``pre_submit_delay_ms`` before Enter."""

SHELL_NAMES = frozenset({"bash", "sh", "dash", "zsh", "fish"})
RULE = "────"
BUSY_MARKER = "esc to interrupt"
CODEX_IDLE_MARKER = "› Ask Codex to do anything"


# --------------------------------------------------------------------------- screen rules


def claude_is_idle(screen: str) -> bool:
    """Claude Code's idle screen: a ``❯`` input line between two ``────`` rules, not busy.

    The footer differs between versions (REAL-AGENTS.md), so it is not used.
    """
    if BUSY_MARKER in screen:
        return False
    lines = screen.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("❯") or i == 0 or not lines[i - 1].startswith(RULE):
            continue
        if any(later.startswith(RULE) for later in lines[i + 1 : i + 6]):
            return True
    return False


def _composer_holds(screen: str, text: str) -> bool:
    """Codex's composer (the last ``›`` line above the footer) still shows ``text``."""
    lines = [line.strip() for line in screen.splitlines() if line.strip()]
    prompts = [line for line in lines[-6:] if line.startswith("›")]
    return bool(prompts) and prompts[-1] == f"› {text}"


def codex_is_idle(screen: str) -> bool:
    """Codex's idle screen: the ``› Ask Codex to do anything`` placeholder and no busy line.

    At start-up the placeholder shows while the header still says ``loading`` (in
    place of the cwd): that is not ready yet.
    """
    if CODEX_IDLE_MARKER not in screen or BUSY_MARKER in screen:
        return False
    return not any(line.strip() == "loading" for line in screen.splitlines()[:6])


# --------------------------------------------------------------------------- config files


def write_claude_config(home: Path, cwd: Path, api_key: str, version: str) -> Path:
    """Write (or extend) ``$HOME/.claude.json`` so Claude Code starts straight at its prompt.

    Onboarding done, the API key's last 20 characters approved, and the project's
    trust dialog accepted (compare fixtures/real/claude/claude.json_after_run.json).
    """
    path = home / ".claude.json"
    data: dict[str, object] = json.loads(path.read_text()) if path.is_file() else {}
    approved = data.setdefault("customApiKeyResponses", {"approved": [], "rejected": []})
    assert isinstance(approved, dict)
    keys = approved.setdefault("approved", [])
    if api_key[-20:] not in keys:
        keys.append(api_key[-20:])
    projects = data.setdefault("projects", {})
    assert isinstance(projects, dict)
    projects[os.path.realpath(cwd)] = {
        "hasTrustDialogAccepted": True,
        "hasCompletedProjectOnboarding": True,
        "allowedTools": [],
    }
    data.update(
        hasCompletedOnboarding=True,
        lastOnboardingVersion=version,
        theme="dark",
        officialMarketplaceAutoInstallAttempted=True,
        officialMarketplaceAutoInstalled=False,
    )
    path.write_text(json.dumps(data, indent=2))
    return path


def write_codex_config(
    codex_home: Path,
    cwds: list[Path],
    base_url: str,
    *,
    model: str = CODEX_MODEL,
    daemon: bool = True,
) -> Path:
    """Write ``$CODEX_HOME/config.toml``: the fake provider, a model, trusted project folders.

    ``daemon=False`` sets ``features.daemon_auto_start = false``: Codex then runs its
    app server inside the TUI and leaves no ``codex app-server`` daemon behind (and does
    not copy its ~400 MB binary into ``$CODEX_HOME/packages``).
    """
    codex_home.mkdir(parents=True, exist_ok=True)
    lines = [f"model = {json.dumps(model)}", 'model_provider = "fake"', ""]
    if not daemon:
        lines += ["[features]", "daemon_auto_start = false", ""]
    lines += [
        "[model_providers.fake]",
        'name = "Fake OpenAI"',
        f"base_url = {json.dumps(base_url)}",
        'wire_api = "responses"',
        f"env_key = {json.dumps(CODEX_KEY_ENV)}",
        "",
    ]
    for cwd in cwds:
        lines += [f"[projects.{json.dumps(os.path.realpath(cwd))}]", 'trust_level = "trusted"', ""]
    path = codex_home / "config.toml"
    path.write_text("\n".join(lines))
    return path


def claude_env(home: Path, base_url: str, api_key: str = DEFAULT_API_KEY) -> dict[str, str]:
    """The environment Claude Code needs to run offline against ``base_url``."""
    return {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": api_key,
        **CLAUDE_QUIET_ENV,
    }


def write_key_helper(home: Path, api_key: str = DEFAULT_API_KEY) -> Path:
    """Claude Code's ``apiKeyHelper`` (``~/.claude/settings.json``): the key comes from a
    command, as a user's login would, never from a workflow (it refuses keys) or tmux (the
    hub keeps keys out of its panes' environment)."""
    helper = home / "api-key.sh"
    helper.write_text(f"#!/bin/sh\necho {api_key}\n")
    helper.chmod(0o700)
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir(exist_ok=True)
    settings.write_text(json.dumps({"apiKeyHelper": str(helper)}))
    return settings


def codex_env(home: Path, codex_home: Path, api_key: str = DEFAULT_API_KEY) -> dict[str, str]:
    """The environment Codex needs to run offline (its provider's key and its home)."""
    return {"HOME": str(home), "CODEX_HOME": str(codex_home), CODEX_KEY_ENV: api_key}


# --------------------------------------------------------------------------- processes


def codex_daemons(codex_home: Path) -> list[psutil.Process]:
    """Running ``codex app-server`` processes that belong to ``codex_home``.

    Codex copies its binary into ``$CODEX_HOME/packages/app-server-daemon/`` and starts
    the daemon from there in a session of its own, so it is not in the pane's tree:
    it is found by that path or by ``CODEX_HOME`` in its environment.
    """
    home = os.path.realpath(codex_home)
    found: list[psutil.Process] = []
    for proc in psutil.process_iter(["name", "exe", "cmdline"]):
        try:
            cmdline = proc.info["cmdline"] or []
            if "app-server" not in cmdline:
                continue
            exe = proc.info["exe"] or (cmdline[0] if cmdline else "")
            if exe.startswith(home + os.sep) or proc.environ().get("CODEX_HOME") in (
                home,
                str(codex_home),
            ):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def end_codex_daemons(codex_home: Path, timeout_s: float = 5.0) -> list[int]:
    """End every ``codex app-server`` of ``codex_home`` by pid; return the pids ended.

    All get SIGTERM together, then SIGKILL after ``DAEMON_TERM_TIMEOUT_S``; repeated
    until none is left (one may have started another on its way out).
    """
    ended: list[int] = []
    deadline = time.monotonic() + timeout_s
    while daemons := codex_daemons(codex_home):
        if time.monotonic() > deadline:
            raise AssertionError(f"codex app-server daemons still running: {daemons}")
        for proc in daemons:
            ended.append(proc.pid)
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.terminate()
        _, alive = psutil.wait_procs(daemons, timeout=DAEMON_TERM_TIMEOUT_S)
        for proc in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        psutil.wait_procs(alive, timeout=DAEMON_TERM_TIMEOUT_S)
    return ended


def process_tree(pid: int) -> list[tuple[int, int, str]]:
    """``(pid, parent pid, name)`` of ``pid`` and its descendants (threads left out)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    tree = []
    for proc in procs:
        try:
            tree.append((proc.pid, proc.ppid(), proc.name()))
        except psutil.NoSuchProcess:
            continue
    return tree


# --------------------------------------------------------------------------- panes


@dataclass
class RealPane:
    """A real agent CLI in a tmux pane on a private server (``tmux -L socket``)."""

    kind: str
    version: str
    socket: str
    session: str
    pane_id: str
    pane_pid: int
    cwd: Path
    home: Path
    env: dict[str, str]
    codex_home: Path | None = None
    startup_s: float | None = None

    def tmux(self, *args: str) -> str:
        """Run a tmux command on this pane's server; return its stdout."""
        out = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10
        )
        if out.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)} failed: {out.stderr.strip()}")
        return out.stdout

    def screen(self, *, ansi: bool = False) -> str:
        """The visible screen as text (``ansi=True`` keeps colour escapes)."""
        return self.tmux("capture-pane", "-p", *(["-e"] if ansi else []), "-t", self.pane_id)

    def save_screen(self, path: Path, *, ansi: bool = False) -> Path:
        """Write the current screen to ``path`` (for reports and debugging)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.screen(ansi=ansi))
        return path

    def type(self, text: str) -> None:
        """Type ``text`` literally (``send-keys -l``); it is not submitted."""
        self.tmux("send-keys", "-t", self.pane_id, "-l", text)

    def press(self, *keys: str) -> None:
        """Press tmux keys (``Enter``, ``Escape``, ``C-c``…)."""
        self.tmux("send-keys", "-t", self.pane_id, *keys)

    def submit(self, text: str) -> None:
        """Type ``text`` then press Enter separately (after Codex's paste-burst delay).

        Codex can still swallow that Enter right after start-up (its composer keeps the
        text, nothing is sent): as a person would, Enter is pressed again while the
        composer still holds the text and neither the busy line nor the emptied
        composer has shown. An Enter on an empty composer sends nothing.
        """
        self.type(text)
        if self.kind in SUBMIT_PAUSE_KINDS:  # Gemini takes an Enter at once as part of a paste
            time.sleep(PROFILES[self.kind].pre_submit_delay_ms / 1000)
        if self.kind != "codex":
            self.press("Enter")
            return
        # Keys that wait while Codex is still starting arrive in one burst: see the text
        # drawn first, so the Enter comes after it.
        self.wait_screen(lambda s: _composer_holds(s, text), what="the typed prompt")
        for _ in range(CODEX_SUBMIT_TRIES):
            time.sleep(CODEX_ENTER_DELAY_S)
            self.press("Enter")
            try:
                self.wait_screen(
                    lambda s: BUSY_MARKER in s or not _composer_holds(s, text),
                    CODEX_SUBMIT_SEEN_S, what="Codex taking the prompt",
                )  # fmt: skip
                return
            except AssertionError:
                continue

    def wait_screen(
        self, cond: Callable[[str], object], timeout_s: float = REPLY_TIMEOUT_S, what: str = ""
    ) -> str:
        """Poll the screen until ``cond(screen)`` holds; return that screen."""
        seen: list[str] = []

        def check() -> bool:
            seen[:] = [self.screen()]
            return bool(cond(seen[0]))

        try:
            wait_until(check, timeout_s, interval_s=0.1, what=what or "the screen")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- last screen ---\n{seen[0] if seen else ''}") from None
        return seen[0]

    def wait_idle(self, timeout_s: float = REPLY_TIMEOUT_S) -> str:
        """Wait for the agent's idle screen; return it."""
        rule: Callable[[str], bool] = {"claude": claude_is_idle, "codex": codex_is_idle}.get(
            self.kind, lambda s: screen_state(PROFILES[self.kind], s) == "idle"
        )
        return self.wait_screen(rule, timeout_s, what=f"{self.kind} idle screen")

    def agent_process(self) -> psutil.Process | None:
        """The agent's top process: the pane's own process, or the shell's child."""
        try:
            proc = psutil.Process(self.pane_pid)
            if proc.name() not in SHELL_NAMES:
                return proc
            children = proc.children()
            return children[0] if children else None
        except psutil.NoSuchProcess:
            return None

    def agent_pid(self) -> int:
        """The pid of the agent's top process (fails when it is not running)."""
        proc = self.agent_process()
        if proc is None:
            raise AssertionError(f"no {self.kind} process in pane {self.pane_id}")
        return proc.pid

    def stop(self) -> None:
        """End the pane's processes by pid (a Codex daemon is ended with ``end_codex_daemons``).

        While the Codex TUI runs, its daemon is still its child and goes with it; after
        the TUI exits, the daemon lives on under init.
        """
        kill_tree(self.pane_pid)


def start_agent_pane(
    socket: str,
    command: list[str],
    *,
    kind: str,
    version: str,
    cwd: Path,
    home: Path,
    env: dict[str, str],
    via_shell: bool = False,
    session: str | None = None,
) -> RealPane:
    """Start ``command`` in a new tmux session on ``socket`` with ``env``; do not wait.

    The command runs through ``env -u …`` (so the pane's process becomes the agent
    itself), or, with ``via_shell``, a plain bash is the pane's process and the
    command is typed into it, the agent's folder first on PATH (as a person starts it).
    """
    name = session or f"{kind}-{version.replace('.', '-')}-{os.urandom(3).hex()}"
    unset = [arg for var in LEAKY_ENV for arg in ("-u", var)]
    assignments = [f"{k}={v}" for k, v in env.items()]
    if via_shell:
        path = f"{Path(command[0]).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        argv = ["env", *unset, *assignments, f"PATH={path}", "PS1=$ ", "bash", "--norc", "-i"]
    else:
        argv = ["env", *unset, *assignments, *command]
    conf = home / ".tmux.conf"
    if not conf.exists():
        conf.write_text("set -g focus-events on\n")
    out = subprocess.run(
        [
            "tmux", "-L", socket, "-f", str(conf),
            "new-session", "-d", "-s", name, "-x", str(PANE_WIDTH), "-y", str(PANE_HEIGHT),
            "-c", str(cwd), "-P", "-F", "#{pane_id} #{pane_pid}", "--", *argv,
        ],
        capture_output=True,
        text=True,
        timeout=10,
    )  # fmt: skip
    if out.returncode != 0:
        raise AssertionError(f"tmux new-session failed: {out.stderr.strip()}")
    pane_id, pane_pid = out.stdout.split()
    pane = RealPane(kind, version, socket, name, pane_id, int(pane_pid), cwd, home, env)
    if via_shell:
        pane.type(shlex.join([Path(command[0]).name, *command[1:]]))
        pane.press("Enter")
    return pane


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def agent_bin() -> Callable[[str, str], Path]:
    """``agent_bin(name, version)``: the installed executable, installed now if missing.

    Fails the test (never skips) when npm is missing or the install fails.
    """

    def get(name: str, version: str) -> Path:
        try:
            return ensure_agent(name, version)
        except AgentInstallError as exc:
            pytest.fail(f"cannot install the real {name} {version} CLI: {exc}", pytrace=False)

    return get


@pytest.fixture
def fake_anthropic() -> Iterator[FakeAnthropic]:
    """A started FakeAnthropic (Claude Code's API) for this test."""
    with FakeAnthropic() as fake:
        yield fake


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAIResponses]:
    """A started FakeOpenAIResponses (Codex's API) for this test."""
    with FakeOpenAIResponses() as fake:
        yield fake


def _project_dir(tmp_path: Path, kind: str, count: int) -> Path:
    cwd = tmp_path / f"proj-{kind}-{count}"
    cwd.mkdir(parents=True, exist_ok=True)
    return Path(os.path.realpath(cwd))


@pytest.fixture
def real_claude_pane(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_anthropic: FakeAnthropic,
) -> Iterator[Callable[..., RealPane]]:
    """Factory ``start(version="2.1.197", *, via_shell=False, cwd=None, base_url=None,
    api_key=DEFAULT_API_KEY, wait=True, socket=None) -> RealPane``: real Claude Code, idle,
    in a pane (of another tmux server with ``socket``: the remote-host tests' "host").

    It talks to ``fake_anthropic`` unless ``base_url`` is given; ``HOME`` is the test's
    ``home``. Every pane is ended by pid at teardown.
    """
    panes: list[RealPane] = []

    def start(
        version: str = CLAUDE_VERSIONS[0],
        *,
        via_shell: bool = False,
        cwd: Path | None = None,
        base_url: str | None = None,
        api_key: str = DEFAULT_API_KEY,
        wait: bool = True,
        socket: str | None = None,
    ) -> RealPane:
        exe = agent_bin("claude", version)
        workdir = cwd or _project_dir(tmp_path, "claude", len(panes))
        write_claude_config(home, workdir, api_key, version)
        env = claude_env(home, base_url or fake_anthropic.base_url, api_key)
        began = time.monotonic()
        pane = start_agent_pane(
            socket or tmux_socket, [str(exe)], kind="claude", version=version, cwd=workdir,
            home=home, env=env, via_shell=via_shell,
        )  # fmt: skip
        panes.append(pane)
        if wait:
            pane.wait_screen(claude_is_idle, STARTUP_TIMEOUT_S, what="Claude Code's idle screen")
            pane.startup_s = time.monotonic() - began
        return pane

    yield start
    for pane in panes:
        pane.stop()


@pytest.fixture
def real_codex_pane(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_openai: FakeOpenAIResponses,
) -> Iterator[Callable[..., RealPane]]:
    """Factory ``start(version="0.171.0", *, via_shell=False, cwd=None, base_url=None,
    daemon=True, wait=True) -> RealPane``: the real Codex CLI, idle, in a pane.

    ``CODEX_HOME`` is ``home/.codex`` (shared by every Codex pane of the test, each
    cwd trusted); it talks to ``fake_openai`` unless ``base_url`` is given. At teardown
    every pane and every ``codex app-server`` daemon of that home is ended by pid.
    """
    panes: list[RealPane] = []
    codex_home = home / ".codex"
    trusted: list[Path] = []

    def start(
        version: str = CODEX_VERSION,
        *,
        via_shell: bool = False,
        cwd: Path | None = None,
        base_url: str | None = None,
        daemon: bool = True,
        wait: bool = True,
    ) -> RealPane:
        exe = agent_bin("codex", version)
        workdir = cwd or _project_dir(tmp_path, "codex", len(panes))
        trusted.append(workdir)
        write_codex_config(codex_home, trusted, base_url or fake_openai.base_url, daemon=daemon)
        env = codex_env(home, codex_home)
        began = time.monotonic()
        pane = start_agent_pane(
            tmux_socket, [str(exe)], kind="codex", version=version, cwd=workdir,
            home=home, env=env, via_shell=via_shell,
        )  # fmt: skip
        pane.codex_home = codex_home
        panes.append(pane)
        if wait:
            pane.wait_screen(codex_is_idle, STARTUP_TIMEOUT_S, what="Codex's idle screen")
            pane.startup_s = time.monotonic() - began
        return pane

    yield start
    for pane in panes:
        pane.stop()
    end_codex_daemons(codex_home)


# --------------------------------------------------------------------------- Gemini, Copilot, Pi

GEMINI_VERSION = "0.61.0"
COPILOT_VERSION = "1.0.102"
PI_VERSION = "0.73.1"

GEMINI_MODEL = "gemini-2.5-flash"
"""Pinned: the default "Auto" model adds a ``generateContent`` routing call (REAL-AGENTS.md)."""
COPILOT_MODEL = "gpt-4.1"
PI_MODEL = "fake-model"

NEW_AGENT_WIDTH = 100
"""The width the fixtures in tests/fixtures/screens/ were captured at."""

COPILOT_TRUST_QUESTION = "Do you trust the files in this folder?"


def write_gemini_settings(home: Path) -> Path:
    """``~/.gemini/settings.json``: API-key auth chosen, folder trust, updates and telemetry off.

    Without it Gemini CLI asks about trust, auth and the key, and looks things up outside.
    """
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
    }  # fmt: skip
    path = home / ".gemini" / "settings.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2))
    return path


def gemini_env(home: Path, base_url: str, api_key: str = DEFAULT_API_KEY) -> dict[str, str]:
    """The environment Gemini CLI needs to talk to a local Gemini API at ``base_url``."""
    return {"HOME": str(home), "GOOGLE_GEMINI_BASE_URL": base_url, "GEMINI_API_KEY": api_key}


def copilot_env(home: Path, base_url: str, api_key: str = DEFAULT_API_KEY) -> dict[str, str]:
    """The environment Copilot CLI needs to run offline against an OpenAI-compatible API."""
    return {
        "HOME": str(home),
        "COPILOT_OFFLINE": "true",  # no GitHub login, no lookups
        "COPILOT_PROVIDER_BASE_URL": base_url,
        "COPILOT_PROVIDER_TYPE": "openai",
        "COPILOT_PROVIDER_API_KEY": api_key,
        "COPILOT_MODEL": COPILOT_MODEL,
    }


def write_pi_models(home: Path, base_url: str, api_key: str = DEFAULT_API_KEY) -> Path:
    """``~/.pi/agent/models.json``: one ``fake`` provider speaking chat completions at ``base_url``."""
    models = {
        "providers": {
            "fake": {
                "baseUrl": base_url,
                "api": "openai-completions",
                "apiKey": api_key,
                "models": [{"id": PI_MODEL, "contextWindow": 128000, "maxTokens": 4096}],
            }
        }
    }
    path = home / ".pi" / "agent" / "models.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(models, indent=2))
    return path


def pi_env(home: Path) -> dict[str, str]:
    """Pi's environment: offline (else it downloads fd and ripgrep and checks for updates)."""
    return {"HOME": str(home), "PI_OFFLINE": "1"}


def copilot_prompt(text: str | None) -> str | None:
    """A Copilot prompt without the ``<current_datetime>…</current_datetime>`` it puts first."""
    if text is None:
        return None
    head, sep, rest = text.partition("</current_datetime>\n\n")
    return rest if sep and head.startswith("<current_datetime>") else text


@pytest.fixture
def fake_gemini() -> Iterator[FakeGemini]:
    """A started FakeGemini (Gemini CLI's API) for this test."""
    with FakeGemini() as fake:
        yield fake


@pytest.fixture
def fake_copilot_api() -> Iterator[FakeOpenAIResponses]:
    """A FakeOpenAIResponses for Copilot: its answers quote the prompt without the date prefix."""

    def reply(body: dict[str, object]) -> str:
        return default_answer(copilot_prompt(prompt_text(body)) or "")

    with FakeOpenAIResponses(reply) as fake:
        yield fake


def _start_new_agent(
    panes: list[RealPane],
    socket: str,
    exe: Path,
    args: list[str],
    *,
    kind: str,
    version: str,
    cwd: Path,
    home: Path,
    env: dict[str, str],
    via_shell: bool,
) -> RealPane:
    pane = start_agent_pane(
        socket, [str(exe), *args], kind=kind, version=version, cwd=cwd, home=home, env=env,
        via_shell=via_shell,
    )  # fmt: skip
    panes.append(pane)
    pane.tmux("resize-window", "-t", pane.pane_id, "-x", str(NEW_AGENT_WIDTH))
    return pane


def _wait_profile_idle(pane: RealPane, what: str) -> None:
    """Wait until the agent's profile reads its real screen as idle."""
    profile = PROFILES[pane.kind]
    began = time.monotonic()
    pane.wait_screen(lambda s: screen_state(profile, s) == "idle", STARTUP_TIMEOUT_S, what=what)
    pane.startup_s = time.monotonic() - began


@pytest.fixture
def real_gemini_pane(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_gemini: FakeGemini,
) -> Iterator[Callable[..., RealPane]]:
    """Factory ``start(*, via_shell=False, wait=True) -> RealPane``: the real Gemini CLI,
    talking to ``fake_gemini``, in a 100-column pane; ended by pid (both its node processes)."""
    panes: list[RealPane] = []

    def start(*, via_shell: bool = False, wait: bool = True) -> RealPane:
        exe = agent_bin("gemini", GEMINI_VERSION)
        write_gemini_settings(home)
        pane = _start_new_agent(
            panes, tmux_socket, exe, ["--model", GEMINI_MODEL], kind="gemini",
            version=GEMINI_VERSION, cwd=_project_dir(tmp_path, "gemini", len(panes)), home=home,
            env=gemini_env(home, fake_gemini.base_url), via_shell=via_shell,
        )  # fmt: skip
        if wait:
            _wait_profile_idle(pane, "Gemini CLI's idle screen")
        return pane

    yield start
    for pane in panes:
        pane.stop()


@pytest.fixture
def real_copilot_pane(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_copilot_api: FakeOpenAIResponses,
) -> Iterator[Callable[..., RealPane]]:
    """Factory ``start(*, via_shell=False, trust=True) -> RealPane``: the real Copilot CLI,
    talking to ``fake_copilot_api``, in a 100-column pane; ended by pid.

    With ``trust`` its first-run folder-trust dialog is waited for and answered ``1. Yes``
    (for this session), and the pane returned at the idle screen; else at the dialog.
    """
    panes: list[RealPane] = []

    def start(*, via_shell: bool = False, trust: bool = True) -> RealPane:
        exe = agent_bin("copilot", COPILOT_VERSION)
        pane = _start_new_agent(
            panes, tmux_socket, exe, [], kind="copilot", version=COPILOT_VERSION,
            cwd=_project_dir(tmp_path, "copilot", len(panes)), home=home,
            env=copilot_env(home, fake_copilot_api.base_url), via_shell=via_shell,
        )  # fmt: skip
        pane.wait_screen(
            lambda s: COPILOT_TRUST_QUESTION in s, STARTUP_TIMEOUT_S, what="the trust dialog"
        )
        if trust:
            pane.press("1")
            _wait_profile_idle(pane, "Copilot CLI's idle screen")
        return pane

    yield start
    for pane in panes:
        pane.stop()


@pytest.fixture
def real_pi_pane(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_openai: FakeOpenAIResponses,
) -> Iterator[Callable[..., RealPane]]:
    """Factory ``start(*, via_shell=False, wait=True) -> RealPane``: the real Pi, talking to
    ``fake_openai``'s chat completions, in a 100-column pane; ended by pid."""
    panes: list[RealPane] = []

    def start(*, via_shell: bool = False, wait: bool = True) -> RealPane:
        exe = agent_bin("pi", PI_VERSION)
        write_pi_models(home, fake_openai.base_url)
        pane = _start_new_agent(
            panes, tmux_socket, exe, ["--provider", "fake", "--model", PI_MODEL], kind="pi",
            version=PI_VERSION, cwd=_project_dir(tmp_path, "pi", len(panes)), home=home,
            env=pi_env(home), via_shell=via_shell,
        )  # fmt: skip
        if wait:
            _wait_profile_idle(pane, "Pi's idle screen")
        return pane

    yield start
    for pane in panes:
        pane.stop()


# --------------------------------------------------------------------------- no registry at run time

QWEN_NO_UPDATE_SETTINGS = {"general": {"enableAutoUpdate": False}}
"""Qwen Code settings that turn off its update check (a registry lookup at every start)."""


def seed_opencode_config_deps(home: Path, version: str) -> Path:
    """Give ``home``'s OpenCode config folder the ``@opencode-ai/plugin`` install.py put in the
    cache, so OpenCode does not install it from the registry when it starts.

    OpenCode 1.18.33 installs into its config folder unless ``node_modules`` is there and
    ``package-lock.json`` names every dependency ``package.json`` (and it) asks for. The
    folder's ``node_modules`` becomes a link to the cache's (read, never written: nothing is
    missing); the two JSON files are copied.
    """
    deps = config_deps_dir("opencode", version)
    if not (deps / "node_modules").is_dir():
        raise AssertionError(f"{deps} has no node_modules: run tests/real_agents/install.py")
    folder = home / ".config" / "opencode"
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "node_modules"
    if not link.is_symlink() and not link.exists():
        link.symlink_to(deps / "node_modules", target_is_directory=True)
    for name in ("package.json", "package-lock.json"):
        (folder / name).write_text((deps / name).read_text())
    return folder


class RegistryTrap:
    """A stand-in package registry on 127.0.0.1 that answers every request 503 and records it.

    Every real-agent test points ``npm_config_registry`` at one (``registry_trap``), so an
    agent that looks something up in a registry at run time finds none, and a test can
    assert that none was asked (``requests``). The install step (install.py) is not trapped.
    """

    def __init__(self) -> None:
        self.requests: list[str] = []
        trap = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _refuse(self) -> None:
                trap.requests.append(f"{self.command} {self.path}")
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_PUT = do_HEAD = _refuse

            def log_message(self, format: str, *args: object) -> None:
                """Quiet: tests read ``requests``."""

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="registry-trap", daemon=True
        )

    def __enter__(self) -> RegistryTrap:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


@pytest.fixture(autouse=True)
def not_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """Agents run as a person runs them, not as a CI job: Gemini CLI 0.61.0 takes the ``CI``
    variable (which CI sets for ``.ci/run``) to mean "no terminal", says "No input provided via
    stdin" and exits, even in a tmux pane. The tmux servers these tests start inherit this."""
    monkeypatch.delenv("CI", raising=False)


@pytest.fixture(autouse=True)
def registry_trap(monkeypatch: pytest.MonkeyPatch) -> Iterator[RegistryTrap]:
    """Every agent a real-agent test starts sees a package registry that answers nothing.

    ``npm_config_registry`` (read by npm, and by OpenCode's and Qwen Code's own lookups) goes
    to a :class:`RegistryTrap`; ``TRAPPED_REGISTRY_ENV`` tells install.py to install from the
    registry set up on this machine all the same.
    """
    with RegistryTrap() as trap:
        monkeypatch.setenv(TRAPPED_REGISTRY_ENV, os.environ.get("npm_config_registry", ""))
        monkeypatch.setenv("npm_config_registry", trap.url)
        yield trap


REAL_AGENT_RERUNS = 1
"""A real-agent test that fails is run once more, and fails the suite if it fails again.

These tests drive other people's programs (and tmux 3.3a, whose server now and then exits
while a pane's program ends: "server exited unexpectedly", seen once in two fresh-clone
runs of ``.ci/run`` in a test that passed in the other run and in every run alone). A
failure that is real fails twice; every rerun is reported by pytest (``R`` in the output).
"""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test of this tier gets its one rerun (see :data:`REAL_AGENT_RERUNS`)."""
    for item in items:
        if item.get_closest_marker("real_agents") is not None:
            item.add_marker(pytest.mark.flaky(reruns=REAL_AGENT_RERUNS, reruns_delay=1))


AMP_VERSION = "0.0.1790142911-g7618fb"
AMP_API_KEY = "fake-amp-key"


def write_amp_config(home: Path, base_url: str) -> Path:
    """``~/.config/amp/settings.json`` pointing Amp at ``base_url`` (updates and notifications
    off) and ``~/.local/share/amp/session.json`` with its welcome slideshow dismissed."""
    settings = home / ".config" / "amp" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(
        json.dumps(
            {
                "amp.url": base_url,
                "amp.updates.mode": "disabled",
                "amp.notifications.enabled": False,
                "amp.notifications.system.enabled": False,
            }
        )
    )
    session = home / ".local" / "share" / "amp" / "session.json"
    session.parent.mkdir(parents=True, exist_ok=True)
    session.write_text(json.dumps({"neoWelcomeDismissed": True}))
    return settings


def amp_env(home: Path, base_url: str) -> dict[str, str]:
    """Amp's environment: its backend is the local fake."""
    return {"HOME": str(home), "AMP_URL": base_url, "AMP_API_KEY": AMP_API_KEY}


@pytest.fixture
def fake_amp() -> Iterator[FakeAmp]:
    """A started FakeAmp (Amp's backend: HTTP routes and the thread WebSocket) for this test."""
    with FakeAmp() as fake:
        yield fake


@pytest.fixture
def real_amp_pane(
    tmux_socket: str,
    home: Path,
    tmp_path: Path,
    agent_bin: Callable[[str, str], Path],
    fake_amp: FakeAmp,
) -> Iterator[Callable[..., RealPane]]:
    """Factory ``start(*, via_shell=False, wait=True) -> RealPane``: the real Amp, talking to
    ``fake_amp``, in a 100-column pane; ended by pid."""
    panes: list[RealPane] = []

    def start(*, via_shell: bool = False, wait: bool = True) -> RealPane:
        exe = agent_bin("amp", AMP_VERSION)
        write_amp_config(home, fake_amp.base_url)
        pane = _start_new_agent(
            panes, tmux_socket, exe, [], kind="amp", version=AMP_VERSION,
            cwd=_project_dir(tmp_path, "amp", len(panes)), home=home,
            env=amp_env(home, fake_amp.base_url), via_shell=via_shell,
        )  # fmt: skip
        if wait:
            _wait_profile_idle(pane, "Amp's idle screen")
            pane.wait_screen(lambda s: "Welcome to Amp" in s, STARTUP_TIMEOUT_S, what="Amp ready")
        return pane

    yield start
    for pane in panes:
        pane.stop()
