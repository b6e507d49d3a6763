"""Where each agent keeps its own record of the conversation, from its environment, cwd and pid.

Pure rules over plain data (no file is read here): the tile asks its machine
for the files these name (``agents/kinds/<kind>.py``). Observed on 2026-12-01
with the versions in ``tests/fixtures/agent_records/README.md``:

- OpenCode: one SQLite database per user, ``$XDG_DATA_HOME/opencode/opencode.db``
  (``~/.local/share``), narrowed to the newest session of the agent's cwd;
- Qwen Code: ``~/.qwen/sessions/<pid>.json`` names the ``sessionId`` of the
  process (its innermost ``node``), whose chat is
  ``~/.qwen/projects/<cwd as a name>/chats/<sessionId>.jsonl``;
- Aider: ``<cwd>/.aider.chat.history.md`` (its git root's, in a repository),
  or its ``--chat-history-file`` / ``AIDER_CHAT_HISTORY_FILE``;
- Gemini CLI: the newest ``~/.gemini/tmp/<project>/chats/session-*.jsonl``, the
  project named for the cwd in ``~/.gemini/projects.json`` (its basename at first);
- Copilot CLI: ``$COPILOT_HOME/session-state/<uuid>/events.jsonl`` (``~/.copilot``),
  the folder holding ``inuse.<pid>.lock`` of the agent's process;
- Pi: the newest ``~/.pi/agent/sessions/--<cwd, / as ->--/<time>_<uuid>.jsonl``.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping, Sequence
from typing import Final

ENV_NAMES: Final[tuple[str, ...]] = (
    "HOME",
    "XDG_DATA_HOME",
    "COPILOT_HOME",
    "PI_CODING_AGENT_DIR",
    "AIDER_CHAT_HISTORY_FILE",
)
"""The variables of an agent's environment that move its record."""

AIDER_HISTORY: Final = ".aider.chat.history.md"
AIDER_HISTORY_FLAG: Final = "--chat-history-file"
AIDER_PARENT_LOOKUPS: Final = 8
"""How many folders above its cwd Aider's history is looked for (its git root's)."""
QWEN_POINTER_MAX_BYTES: Final = 64 * 1024


def _home(env: Mapping[str, str]) -> str | None:
    home = env.get("HOME", "")
    return home if home.startswith("/") else None


def opencode_database(env: Mapping[str, str]) -> str | None:
    """OpenCode's database for the user whose environment this is."""
    data = env.get("XDG_DATA_HOME", "")
    if data.startswith("/"):
        return posixpath.join(data, "opencode", "opencode.db")
    home = _home(env)
    return posixpath.join(home, ".local", "share", "opencode", "opencode.db") if home else None


def qwen_pointer_files(env: Mapping[str, str], pids: Sequence[int]) -> list[str]:
    """``~/.qwen/sessions/<pid>.json`` for each pid (the agent's and its descendants')."""
    home = _home(env)
    if home is None:
        return []
    return [posixpath.join(home, ".qwen", "sessions", f"{pid}.json") for pid in pids]


def qwen_session(raw: bytes | None, pid: int) -> str | None:
    """The ``sessionId`` in a Qwen ``sessions/<pid>.json``, if it is this pid's and readable."""
    if not raw or len(raw) > QWEN_POINTER_MAX_BYTES:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("pid") not in (pid, None):
        return None
    sid = data.get("sessionId")
    return sid if isinstance(sid, str) and _safe_name(sid) else None


def qwen_projects(env: Mapping[str, str]) -> str | None:
    """The folder of Qwen's per-project folders (each holding ``chats/<session>.jsonl``)."""
    home = _home(env)
    return posixpath.join(home, ".qwen", "projects") if home else None


def qwen_chat_name(session_id: str) -> str:
    """The chat file of a session, relative to its project folder."""
    return f"chats/{session_id}.jsonl"


def _safe_name(name: str) -> bool:
    """A file name as agents write them: no separators, no dots leading up."""
    return bool(name) and "/" not in name and "\x00" not in name and not name.startswith(".")


def aider_history_candidates(
    cwd: str | None, argv: Sequence[str], env: Mapping[str, str]
) -> list[str]:
    """Where Aider's chat history may be, most likely first (the first existing one is it).

    Its own option or variable when given (relative to its cwd), else the cwd's
    ``.aider.chat.history.md``, then the folders above (Aider writes it in its
    git root when it runs in a repository).
    """
    named = _aider_option(argv) or env.get("AIDER_CHAT_HISTORY_FILE")
    if named:
        if named.startswith("/"):
            return [named]
        return [posixpath.normpath(posixpath.join(cwd, named))] if cwd else []
    if not cwd or not cwd.startswith("/"):
        return []
    found: list[str] = []
    folder = posixpath.normpath(cwd)
    for _ in range(AIDER_PARENT_LOOKUPS + 1):
        found.append(posixpath.join(folder, AIDER_HISTORY))
        parent = posixpath.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return found


def _aider_option(argv: Sequence[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == AIDER_HISTORY_FLAG and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(AIDER_HISTORY_FLAG + "="):
            return arg.partition("=")[2]
    return None


def gemini_projects_file(env: Mapping[str, str]) -> str | None:
    """``~/.gemini/projects.json``: which folder name Gemini CLI gave each project's cwd."""
    home = _home(env)
    return posixpath.join(home, ".gemini", "projects.json") if home else None


def gemini_project_name(raw: bytes | None, cwd: str) -> str:
    """The name ``projects.json`` gives ``cwd`` (``{"projects": {cwd: name}}``), else its
    basename (what Gemini CLI names a project first)."""
    try:
        data = json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, ValueError, RecursionError):
        data = None
    projects = data.get("projects") if isinstance(data, dict) else None
    name = projects.get(posixpath.normpath(cwd)) if isinstance(projects, dict) else None
    return name if isinstance(name, str) else posixpath.basename(posixpath.normpath(cwd))


def gemini_chats(env: Mapping[str, str], cwd: str | None, name: str | None = None) -> str | None:
    """Gemini CLI's chats folder for a project run in ``cwd`` (``name``: its folder's name,
    from :func:`gemini_project_name`; its basename by default)."""
    home = _home(env)
    if home is None or not cwd:
        return None
    name = name or posixpath.basename(posixpath.normpath(cwd))
    return posixpath.join(home, ".gemini", "tmp", name, "chats") if _safe_name(name) else None


GEMINI_CHAT_GLOB: Final = "session-*.jsonl"


def copilot_session_state(env: Mapping[str, str]) -> str | None:
    """Copilot CLI's ``session-state`` folder (one sub-folder per session)."""
    base = env.get("COPILOT_HOME", "")
    if not base.startswith("/"):
        home = _home(env)
        if home is None:
            return None
        base = posixpath.join(home, ".copilot")
    return posixpath.join(base, "session-state")


def copilot_lock_name(pid: int) -> str:
    """The lock file a running Copilot CLI keeps in its session's folder."""
    return f"inuse.{pid}.lock"


def copilot_events(lock_path: str) -> str:
    """The events record beside a session's lock file."""
    return posixpath.join(posixpath.dirname(lock_path), "events.jsonl")


def pi_sessions(env: Mapping[str, str], cwd: str | None) -> str | None:
    """Pi's sessions folder for ``cwd``: ``--`` + the path without its first ``/``, ``/`` as ``-``."""
    base = env.get("PI_CODING_AGENT_DIR", "")
    if not base.startswith("/"):
        home = _home(env)
        if home is None:
            return None
        base = posixpath.join(home, ".pi", "agent")
    if not cwd or not cwd.startswith("/"):
        return None
    encoded = "--" + posixpath.normpath(cwd).lstrip("/").replace("/", "-") + "--"
    return posixpath.join(base, "sessions", encoded)


PI_SESSION_GLOB: Final = "*.jsonl"
