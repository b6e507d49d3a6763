"""The real agent CLIs for benchmarks: found in the real-agent tier's cache, set up offline.

The CLIs are the ones ``tests/real_agents/install.py`` puts in its cache (pinned); nothing
is installed here. Each is set up as the real-agent tests set it up (their helpers are
reused: ``tests/real_agents/conftest.py``), against the local fakes of
``madohub_nb.testing``: the command line and environment a hub tile starts it with.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shlex
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from _common import REPO

sys.path.insert(0, str(REPO / "tests"))

HOOKED_KINDS = ("claude", "codex", "gemini", "copilot", "opencode", "qwen", "pi")
"""The real CLIs with hooks that the benchmark measures, when installed."""


@dataclass
class RealAgent:
    """How to start one real CLI in a hub tile: its command, environment, first-run keys."""

    kind: str
    version: str
    command: str
    env: dict[str, str]
    ready_text: str | None = None
    """Text on its screen once it has started (waited for before its idle state)."""
    first_keys: tuple[str, ...] = ()
    """Keys for a first-run question (Copilot's folder trust), pressed once ``ask_text`` shows."""
    ask_text: str | None = None
    api: Any = None
    """The fake API it talks to (``responses`` gives the end of each of its turns)."""


def installed(kind: str) -> tuple[str, Path] | None:
    """``(version, executable)`` of the pinned ``kind`` in the agent cache, or None."""
    from real_agents import install

    versions = [v for k, v in install.PINNED_AGENTS if k == kind]
    if not versions:
        return None
    version = versions[-1]
    exe = install.agent_cache_dir() / f"{kind}-{version}" / "node_modules" / ".bin" / kind
    marker = install.agent_cache_dir() / f"{kind}-{version}" / ".madohub-installed"
    return (version, exe) if exe.exists() and marker.exists() else None


def _command(exe: Path, *args: str, keep: Iterable[str] = ()) -> str:
    """The CLI's command line without the caller's leaky variables but those in ``keep``
    (its own settings); the pane's own ``$TMUX_PANE`` stays: the hooks need it."""
    from real_agents.conftest import LEAKY_ENV

    kept = {"TMUX", "TMUX_PANE", *keep}
    unset = [a for var in LEAKY_ENV if var not in kept for a in ("-u", var)]
    return shlex.join(["env", *unset, str(exe), *args])


def setup(kind: str, home: Path, cwds: list[Path], fakes: dict[str, Any]) -> RealAgent:
    """The real ``kind`` set up in ``home`` for the project folders ``cwds`` (one per tile),
    talking to ``fakes`` (``anthropic``, ``openai``, ``gemini``, ``copilot``)."""
    found = installed(kind)
    if found is None:
        raise LookupError(f"{kind} is not installed (tests/real_agents/install.py)")
    version, exe = found
    return _SETUPS[kind](version, exe, home, cwds, fakes)


def _claude(version: str, exe: Path, home: Path, cwds: list[Path], f: dict[str, Any]) -> RealAgent:
    from real_agents.conftest import DEFAULT_API_KEY, claude_env, write_claude_config

    for cwd in cwds:  # all trusted before any Claude starts (it rewrites the file)
        write_claude_config(home, cwd, DEFAULT_API_KEY, version)
    env = claude_env(home, f["anthropic"].base_url, DEFAULT_API_KEY)
    return RealAgent(kind="claude", version=version, command=_command(exe), env=env,
                     api=f["anthropic"])  # fmt: skip


def _codex(version: str, exe: Path, home: Path, cwds: list[Path], f: dict[str, Any]) -> RealAgent:
    from real_agents.conftest import codex_env, write_codex_config

    codex_home = home / ".codex"
    write_codex_config(codex_home, cwds, f["openai"].base_url, daemon=False)
    return RealAgent(kind="codex", version=version, command=_command(exe),
                     env=codex_env(home, codex_home), api=f["openai"])  # fmt: skip


def _gemini(version: str, exe: Path, home: Path, cwds: list[Path], f: dict[str, Any]) -> RealAgent:
    from real_agents.conftest import GEMINI_MODEL, gemini_env, write_gemini_settings

    write_gemini_settings(home)
    return RealAgent(kind="gemini", version=version, command=_command(exe, "--model", GEMINI_MODEL),
                     env=gemini_env(home, f["gemini"].base_url), api=f["gemini"])  # fmt: skip


def _copilot(version: str, exe: Path, home: Path, cwds: list[Path], f: dict[str, Any]) -> RealAgent:
    from real_agents.conftest import COPILOT_TRUST_QUESTION, copilot_env

    return RealAgent(kind="copilot", version=version, command=_command(exe),
                     env=copilot_env(home, f["copilot"].base_url), api=f["copilot"],
                     first_keys=("1",), ask_text=COPILOT_TRUST_QUESTION)  # fmt: skip


def _opencode(
    version: str, exe: Path, home: Path, cwds: list[Path], f: dict[str, Any]
) -> RealAgent:
    from real_agents.test_real_routing import OPENCODE_QUIET_ENV, write_opencode_config

    write_opencode_config(home, f["openai"].base_url)
    return RealAgent(kind="opencode", version=version, command=_command(exe),
                     env={"HOME": str(home), **OPENCODE_QUIET_ENV}, ready_text="Ask anything",
                     api=f["openai"])  # fmt: skip


def _qwen(version: str, exe: Path, home: Path, cwds: list[Path], f: dict[str, Any]) -> RealAgent:
    from real_agents.conftest import QWEN_NO_UPDATE_SETTINGS

    settings = home / ".qwen" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({
        "security": {"auth": {"selectedType": "openai"}},
        "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
        "ui": {"hideTips": True}, **QWEN_NO_UPDATE_SETTINGS,
    }))  # fmt: skip
    env = {"HOME": str(home), "OPENAI_API_KEY": "sk-fake-qwen",
           "OPENAI_BASE_URL": f["openai"].base_url, "OPENAI_MODEL": "fake-model"}  # fmt: skip
    return RealAgent(kind="qwen", version=version, command=_command(exe, keep=env), env=env,
                     api=f["openai"])  # fmt: skip


def _pi(version: str, exe: Path, home: Path, cwds: list[Path], f: dict[str, Any]) -> RealAgent:
    from real_agents.conftest import PI_MODEL, pi_env, write_pi_models

    write_pi_models(home, f["openai"].base_url)
    return RealAgent(kind="pi", version=version,
                     command=_command(exe, "--provider", "fake", "--model", PI_MODEL),
                     env=pi_env(home), api=f["openai"])  # fmt: skip


_SETUPS: dict[str, Callable[[str, Path, Path, list[Path], dict[str, Any]], RealAgent]] = {
    "claude": _claude, "codex": _codex, "gemini": _gemini, "copilot": _copilot,
    "opencode": _opencode, "qwen": _qwen, "pi": _pi,
}  # fmt: skip


def fakes() -> dict[str, Any]:
    """The local fake APIs the real CLIs talk to (not started)."""
    from real_agents.conftest import copilot_prompt

    from madohub_nb.testing.fake_anthropic import FakeAnthropic, default_answer
    from madohub_nb.testing.fake_gemini import FakeGemini
    from madohub_nb.testing.fake_openai import FakeOpenAIResponses, prompt_text

    def copilot_reply(body: dict[str, object]) -> str:
        return default_answer(copilot_prompt(prompt_text(body)) or "")

    return {
        "anthropic": FakeAnthropic(),
        "openai": FakeOpenAIResponses(),
        "gemini": FakeGemini(),
        "copilot": FakeOpenAIResponses(copilot_reply),
    }


RACE_S = 0.25
"""A hook can reach the hub before the fake has stamped the answer it just wrote."""


def api_turn_end(api: Any, prompt: str, later: str | None, fired: datetime) -> Any:
    """When the last answer to a request holding ``prompt`` was written in full, up to the
    trigger (side requests an agent makes after its turn do not count), and not for the
    ``later`` turn (whose requests repeat this prompt in their history)."""
    ends = []
    for at, body in list(api.responses):
        text = json.dumps(body, ensure_ascii=False)
        if prompt in text and (later is None or later not in text):
            if at <= fired + timedelta(seconds=RACE_S):
                ends.append(at)
    return max(ends) if ends else None


@contextlib.contextmanager
def private_runtime_dir() -> Iterator[None]:
    """A 0700 ``$XDG_RUNTIME_DIR`` outside ``/tmp`` while the CLIs run, when none is set:
    Gemini CLI refuses hook files under a world-writable folder (``agents/hooks.py``)."""
    if os.environ.get("XDG_RUNTIME_DIR"):
        yield
        return
    user_home = Path(pwd.getpwuid(os.getuid()).pw_dir)  # (HOME is the bench's temporary one)
    folder = user_home / ".cache" / "madohub_nb" / f"bench-runtime-{os.getpid()}"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.environ["XDG_RUNTIME_DIR"] = str(folder)
    try:
        yield
    finally:
        del os.environ["XDG_RUNTIME_DIR"]
        shutil.rmtree(folder, ignore_errors=True)


def project(root: Path, name: str) -> Path:
    cwd = root / name
    cwd.mkdir(parents=True, exist_ok=True)
    return Path(os.path.realpath(cwd))
