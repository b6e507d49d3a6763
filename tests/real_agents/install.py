"""Install pinned real agent CLIs from npm (or PyPI) into a cache folder, once.

Each ``(name, version)`` goes into ``<cache>/<name>-<version>`` with the npm client as set up
on this machine; a Python agent (Aider) gets a virtual environment of its own there
(``<cache>/<name>-<version>/venv``, never the project's), filled by its pip. A marker file
written after a verified install makes later calls free. The cache is
``$MADOHUB_AGENT_CACHE`` or ``~/.cache/madohub_nb/agents``.

Run ``python tests/real_agents/install.py`` to install every pinned version ahead of a test run.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from madohub_nb.errors import MadohubError, MadohubValueError

#: Short agent name -> npm package and the executable name it puts in ``node_modules/.bin``.
AGENT_PACKAGES: dict[str, tuple[str, str]] = {
    "claude": ("@anthropic-ai/claude-code", "claude"),
    "codex": ("@openai/codex", "codex"),
    "opencode": ("opencode-ai", "opencode"),
    "qwen": ("@qwen-code/qwen-code", "qwen"),
    "gemini": ("@google/gemini-cli", "gemini"),
    "copilot": ("@github/copilot", "copilot"),
    "pi": ("@mariozechner/pi-coding-agent", "pi"),
    # (its postinstall only links the native binary of @ampcode/cli-linux-x64)
    "amp": ("@ampcode/cli", "amp"),
}

#: Short agent name -> PyPI package and the executable its venv puts in ``venv/bin``.
PIP_AGENT_PACKAGES: dict[str, tuple[str, str]] = {
    "aider": ("aider-chat", "aider"),
}

#: Packages an agent would otherwise fetch from the registry each time it starts in a fresh
#: HOME: short name -> ``(folder under its prefix, npm package)``; the package is pinned to the
#: agent's own version. OpenCode installs ``@opencode-ai/plugin`` into its config folder at
#: start unless that folder's ``node_modules``, ``package.json`` and ``package-lock.json``
#: already name it (``config_deps_dir``; tests seed a HOME from it).
AGENT_EXTRAS: dict[str, tuple[tuple[str, str], ...]] = {
    "opencode": (("config-deps", "@opencode-ai/plugin"),),
}

#: The versions the real-agent tier runs against (REAL-AGENTS.md observed these).
PINNED_AGENTS: tuple[tuple[str, str], ...] = (
    ("claude", "2.1.197"),
    ("claude", "2.1.332"),
    ("codex", "0.171.0"),
    ("opencode", "1.18.33"),
    ("qwen", "0.24.4"),
    ("aider", "0.86.2"),
    ("gemini", "0.61.0"),
    ("copilot", "1.0.102"),
    ("pi", "0.73.1"),
    # The newest @ampcode/cli ships no Linux binary; this one does (REAL-AGENTS.md).
    ("amp", "0.0.1790142911-g7618fb"),
)

DEFAULT_CACHE_DIR = Path.home() / ".cache" / "madohub_nb" / "agents"
"""Taken when this module is imported, so a test's temporary HOME does not move the cache."""

MARKER_NAME = ".madohub-installed"
NPM_TIMEOUT_S = 600.0
PIP_TIMEOUT_S = 900.0
VERSION_TIMEOUT_S = 60.0


TRAPPED_REGISTRY_ENV = "MADOHUB_TRAPPED_NPM_REGISTRY"
"""Set (by the real-agent tests' registry trap) while ``npm_config_registry`` points at a
registry that answers nothing: its value is the ``npm_config_registry`` from before ("" for
none), which the install step uses instead."""


class AgentInstallError(MadohubError):
    """npm is missing, or installing or starting a pinned agent CLI failed."""


def agent_cache_dir() -> Path:
    """The folder holding one npm prefix per installed agent version."""
    env = os.environ.get("MADOHUB_AGENT_CACHE")
    return Path(env).expanduser() if env else DEFAULT_CACHE_DIR


def agent_prefix(name: str, version: str) -> Path:
    """The npm prefix for one agent version: ``<cache>/<name>-<version>``."""
    _check_name(name)
    if not version or "/" in version or version.startswith("."):
        raise MadohubValueError(
            f"bad agent version {version!r}: give an exact version like 2.1.197"
        )
    return agent_cache_dir() / f"{name}-{version}"


def agent_executable(name: str, version: str) -> Path:
    """Where the executable of an installed agent lives (it may not exist yet)."""
    if _check_name(name) in PIP_AGENT_PACKAGES:
        _, exe = PIP_AGENT_PACKAGES[name]
        return agent_prefix(name, version) / "venv" / "bin" / exe
    _, exe = AGENT_PACKAGES[name]
    return agent_prefix(name, version) / "node_modules" / ".bin" / exe


def is_installed(name: str, version: str) -> bool:
    """True when a verified install of this version, with its extras, is in the cache."""
    return (
        (agent_prefix(name, version) / MARKER_NAME).is_file()
        and agent_executable(name, version).exists()
        and all(_extra_installed(name, version, folder) for folder, _ in AGENT_EXTRAS.get(name, ()))
    )


def config_deps_dir(name: str, version: str) -> Path:
    """The folder holding what an agent installs into its config folder at start (OpenCode's
    ``@opencode-ai/plugin``): ``node_modules``, ``package.json``, ``package-lock.json``."""
    return agent_prefix(name, version) / "config-deps"


def _extra_installed(name: str, version: str, folder: str) -> bool:
    return (agent_prefix(name, version) / folder / MARKER_NAME).is_file()


def ensure_agent(name: str, version: str) -> Path:
    """Install ``name@version`` into the cache unless already there; return its executable.

    For ``claude`` this is the native binary (through ``node_modules/.bin/claude``, so its
    process is named ``claude``); for ``codex`` the node launcher. Raises AgentInstallError
    when npm is missing or the install cannot be verified.
    """
    prefix = agent_prefix(name, version)
    exe = agent_executable(name, version)
    if is_installed(name, version):
        return exe
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with _locked(prefix.parent / f".{prefix.name}.lock"):
        if is_installed(name, version):  # another process finished it while we waited
            return exe
        if (prefix / MARKER_NAME).is_file() and exe.exists():  # the agent is there: extras only
            _install_extras(name, version, prefix)
            return exe
        if name in PIP_AGENT_PACKAGES:
            _pip_install(name, version, prefix)
        else:
            _npm_install(name, version, prefix)
        if not _version_matches(exe, version) and name == "claude":
            _run_claude_postinstall(prefix)
        if not _version_matches(exe, version):
            raise AgentInstallError(
                f"{exe} was installed but `--version` does not report {version}; "
                f"remove {prefix} and try again"
            )
        package, _ = PIP_AGENT_PACKAGES.get(name) or AGENT_PACKAGES[name]
        (prefix / MARKER_NAME).write_text(f"{package}@{version}\n")
        _install_extras(name, version, prefix)
    return exe


def _install_extras(name: str, version: str, prefix: Path) -> None:
    """Install the agent's :data:`AGENT_EXTRAS` (each at the agent's version) under ``prefix``."""
    for folder, package in AGENT_EXTRAS.get(name, ()):
        target = prefix / folder
        if (target / MARKER_NAME).is_file():
            continue
        target.mkdir(parents=True, exist_ok=True)
        # A package.json of its own, so npm installs here and not in a parent folder.
        (target / "package.json").write_text('{"name": "madohub-agent-extras", "private": true}\n')
        _npm_install(name, version, target, spec=f"{package}@{version}", exact=True)
        (target / MARKER_NAME).write_text(f"{package}@{version}\n")


def ensure_pinned_agents() -> dict[tuple[str, str], Path]:
    """Install every pinned agent version; return their executables."""
    return {(n, v): ensure_agent(n, v) for n, v in PINNED_AGENTS}


def _check_name(name: str) -> str:
    if name not in AGENT_PACKAGES and name not in PIP_AGENT_PACKAGES:
        known = sorted([*AGENT_PACKAGES, *PIP_AGENT_PACKAGES])
        raise MadohubValueError(f"unknown agent {name!r}; installable agents: {', '.join(known)}")
    return name


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive file lock so parallel test runs do not install into one prefix."""
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _npm_install(
    name: str, version: str, prefix: Path, *, spec: str | None = None, exact: bool = False
) -> None:
    """``npm install --prefix PREFIX SPEC`` (default: the agent's own package at ``version``)."""
    npm = shutil.which("npm")
    if npm is None:
        raise AgentInstallError(
            f"npm is not on PATH, so {name} {version} cannot be installed; install Node.js "
            "and npm (e.g. `apt-get install -y nodejs npm`) or pre-fill $MADOHUB_AGENT_CACHE"
        )
    package, _ = AGENT_PACKAGES[name]
    cmd = [
        npm,
        "install",
        "--prefix",
        str(prefix),
        spec or f"{package}@{version}",
        *(["--save-exact"] if exact else []),
        "--no-audit",
        "--no-fund",
        "--no-update-notifier",
        "--loglevel=error",
    ]
    try:
        out = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=NPM_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            env=install_env(),
        )
    except subprocess.TimeoutExpired as exc:
        raise AgentInstallError(
            f"`{' '.join(cmd)}` did not finish in {NPM_TIMEOUT_S:.0f}s"
        ) from exc
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip()[-2000:]
        raise AgentInstallError(
            f"`{' '.join(cmd)}` failed with exit code {out.returncode}:\n{tail}"
        )


def install_env() -> dict[str, str]:
    """The environment of the install step: the registry of this machine, never the trap."""
    env = dict(os.environ)
    if TRAPPED_REGISTRY_ENV in env:
        before = env.pop(TRAPPED_REGISTRY_ENV)
        env.pop("npm_config_registry", None)
        if before:
            env["npm_config_registry"] = before
    return env


def _pip_install(name: str, version: str, prefix: Path) -> None:
    """A venv at ``<prefix>/venv`` (from this Python) with ``package==version`` installed by its pip."""
    package, _ = PIP_AGENT_PACKAGES[name]
    venv = prefix / "venv"
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--quiet",
            f"{package}=={version}",
        ],
    ]
    for cmd in steps:
        try:
            out = subprocess.run(
                cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired as exc:
            raise AgentInstallError(
                f"`{' '.join(cmd)}` did not finish in {PIP_TIMEOUT_S:.0f}s"
            ) from exc
        if out.returncode != 0:
            tail = (out.stderr or out.stdout).strip()[-2000:]
            raise AgentInstallError(
                f"`{' '.join(cmd)}` failed with exit code {out.returncode}:\n{tail}"
            )


def _run_claude_postinstall(prefix: Path) -> None:
    """Copy the native binary over the placeholder when npm skipped the package's postinstall."""
    script = prefix / "node_modules" / "@anthropic-ai" / "claude-code" / "install.cjs"
    node = shutil.which("node")
    if node is None or not script.is_file():
        return
    subprocess.run(
        [node, str(script)],
        cwd=script.parent,
        capture_output=True,
        timeout=NPM_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )


def _version_matches(exe: Path, version: str) -> bool:
    """Run ``exe --version`` in a throw-away HOME (so it writes nowhere real)."""
    if not exe.exists():
        return False
    with tempfile.TemporaryDirectory(prefix="mh-agent-version-") as tmp:
        env = {
            **os.environ,
            "HOME": tmp,
            "CODEX_HOME": tmp,
            "CLAUDE_CONFIG_DIR": tmp,
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "PI_OFFLINE": "1",  # (else Pi fetches fd and ripgrep at each start)
        }
        try:
            out = subprocess.run(
                [str(exe), "--version"],
                capture_output=True,
                text=True,
                env=env,
                timeout=VERSION_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
    return out.returncode == 0 and version in out.stdout + out.stderr  # (Pi prints to stderr)


def main() -> int:
    """Install every pinned agent version and print where each executable is."""
    try:
        for (name, version), exe in ensure_pinned_agents().items():
            print(f"{name} {version}: {exe}")
    except MadohubError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
