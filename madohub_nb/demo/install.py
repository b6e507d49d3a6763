"""Launchers for the stand-in agents: executable files named ``claude`` and ``codex``.

A launcher is a script whose ``#!`` line is this interpreter's absolute path,
so the kernel names the process after the script (``claude``), exactly what a
router's process-tree walk looks for. Tiles start stand-ins with
``standin_command(...)``.
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
import threading
from pathlib import Path
from typing import Final

from ..defaults import check_choice
from ..errors import MadohubValueError
from .personas import DEFAULT_PERSONA, PERSONAS

STANDIN_KINDS: Final = ("claude", "codex")
_MODULES: Final = {
    "claude": "madohub_nb.demo.standin_claude",
    "codex": "madohub_nb.demo.standin_codex",
}
# Options standin_command accepts, and the stand-ins that understand each.
_OPTIONS: Final = {
    "think_s": ("claude", "codex"),
    "allow_bash": ("claude",),
    "skip_permissions": ("claude",),
}
CONFIG_ENV: Final = {"claude": "CLAUDE_CONFIG_DIR", "codex": "CODEX_HOME"}
"""The variable naming each stand-in's config directory (as for the real agents)."""
CONFIG_DIR_FLAG: Final = "--config-dir"
"""Launcher option: use this config dir unless the environment already names one."""
_FLAGS: Final = {
    "think_s": "--think-s",
    "allow_bash": "--allow-bash",
    "skip_permissions": "--dangerously-skip-permissions",
}


SETENV_NAME: Final = "mh-setenv"
"""The launcher that gives a stand-in its private config dir in its environment, then execs it.

A stand-in's own launcher is named like the agent (``codex``); were it to set the variable
and exec itself, a router that read its environment before that exec (same pid, same start
time, same name) would keep the environment without it. Under this name nobody takes it
for an agent."""

_SETENV_TEXT: Final = (
    f"#!{sys.executable}\n"
    '"""madohub_nb: run a stand-in with its config dir in the environment (unless named)."""\n'
    "import os\n"
    "import sys\n"
    "\n"
    "variable, config, command = sys.argv[1], sys.argv[2], sys.argv[3:]\n"
    "if not os.environ.get(variable):\n"
    "    os.makedirs(config, exist_ok=True)\n"
    "    os.environ[variable] = config\n"
    "os.execv(command[0], command)\n"
)


def _launcher_text(kind: str) -> str:
    package_dir = Path(__file__).resolve().parents[1]
    return (
        f"#!{sys.executable}\n"
        f'"""madohub_nb stand-in {kind} (no API, no network)."""\n'
        "import os\n"
        "import sys\n"
        "import types\n"
        "\n"
        f"if sys.argv[1:2] == [{CONFIG_DIR_FLAG!r}] and len(sys.argv) > 2:\n"
        "    # A private config dir unless the environment names one; start again with it in\n"
        "    # the environment, where a router reading /proc/PID/environ will find it.\n"
        "    config, rest = sys.argv[2], sys.argv[3:]\n"
        f"    if not os.environ.get({CONFIG_ENV[kind]!r}):\n"
        "        os.makedirs(config, exist_ok=True)\n"
        f"        os.environ[{CONFIG_ENV[kind]!r}] = config\n"
        "    os.execv(sys.argv[0], [sys.argv[0], *rest])\n"
        "\n"
        "# Load only the stand-in's own modules: the package __init__ loads the hub,\n"
        "# pandas and anthropic (seconds of start-up a stand-in does not need).\n"
        'package = types.ModuleType("madohub_nb")\n'
        f"package.__path__ = [{str(package_dir)!r}]\n"
        'sys.modules.setdefault("madohub_nb", package)\n'
        f"from {_MODULES[kind]} import main\n"
        "\n"
        "sys.exit(main())\n"
    )


_PRIVATE_ROOTS: dict[str, Path] = {}
_PRIVATE_LOCK = threading.Lock()


def private_config_dir(kind: str) -> Path:
    """This process's private config dir for ``kind`` stand-ins under the current HOME (temporary).

    Demo agents write their sessions and transcripts there, never into the
    user's ``~/.claude`` or ``~/.codex``. It is left in place at exit (a kept
    pane's agent may still use it); the system's temporary-file cleaning removes it.
    """
    check_choice("stand-in kind", kind, STANDIN_KINDS)
    home = os.environ.get("HOME", "")  # one per HOME: runs with separate homes never share
    with _PRIVATE_LOCK:
        if home not in _PRIVATE_ROOTS:
            _PRIVATE_ROOTS[home] = Path(tempfile.mkdtemp(prefix="madohub-demo-"))
    path = _PRIVATE_ROOTS[home] / kind
    path.mkdir(exist_ok=True)
    return path


def install_standins(bin_dir: Path) -> dict[str, Path]:
    """Write executable ``claude``, ``codex`` and ``mh-setenv`` launchers into ``bin_dir``."""
    bin_dir = Path(bin_dir).expanduser()
    bin_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for name, text in [(k, _launcher_text(k)) for k in STANDIN_KINDS] + [
        (SETENV_NAME, _SETENV_TEXT)
    ]:
        path = bin_dir / name
        if not path.is_file() or path.read_text() != text:
            tmp = bin_dir / f".{name}.tmp{os.getpid()}-{threading.get_ident()}"
            tmp.write_text(text)
            tmp.chmod(0o755)
            os.replace(tmp, path)
        paths[name] = path
    return paths


def default_bin_dir() -> Path:
    """Where ``standin_command`` keeps launchers: ``$XDG_CACHE_HOME`` or ``~/.cache``, ``madohub_nb/bin``."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "madohub_nb" / "bin"


def standin_command(
    kind: str,
    persona: str = DEFAULT_PERSONA,
    *,
    bin_dir: Path | None = None,
    config_dir: str | os.PathLike[str] | None = None,
    private_config: bool = True,
    **opts: object,
) -> str:
    """A shell command that starts a stand-in, e.g. ``'/…/bin/claude' --persona writer``.

    The stand-in keeps its files in ``config_dir`` (default: :func:`private_config_dir`)
    unless its environment names one (``CLAUDE_CONFIG_DIR`` / ``CODEX_HOME``, e.g. a
    tile's ``env=``), so a demo never writes the user's ``~/.claude``.
    ``private_config=False``: behave like the real agent (``$HOME/.claude``).
    ``opts``: ``think_s`` (seconds per turn), and for ``claude`` ``allow_bash``
    (really run ``[[bash CMD]]``) and ``skip_permissions`` (no permission prompt).
    Launchers are written to ``bin_dir`` (default ``default_bin_dir()``) when needed.
    """
    check_choice("stand-in kind", kind, STANDIN_KINDS)
    check_choice("persona", persona, PERSONAS)
    launchers = install_standins(bin_dir or default_bin_dir())
    words = [str(launchers[kind])]
    if private_config:
        config = str(config_dir or private_config_dir(kind))
        words = [str(launchers[SETENV_NAME]), CONFIG_ENV[kind], config, *words]
    words += ["--persona", persona]
    for name, value in opts.items():
        if name not in _OPTIONS:
            raise MadohubValueError(
                f"unknown stand-in option {name!r}; allowed: {', '.join(_OPTIONS)}"
            )
        if kind not in _OPTIONS[name]:
            raise MadohubValueError(
                f"option {name!r} is for the {' and '.join(_OPTIONS[name])} stand-in only"
            )
        if name == "think_s":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise MadohubValueError(f"think_s must be 0 or more seconds, got {value!r}")
            words += [_FLAGS[name], str(float(value))]
        elif value:
            words.append(_FLAGS[name])
    return shlex.join(words)
