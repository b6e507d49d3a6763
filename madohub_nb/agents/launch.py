"""How an agent is started: one plan composed from layers, each adding to its command line,
its pane's environment and the files it reads.

A layer is what one feature needs from the agent's start: its hooks (``agents/hooks.py``),
the hub's MCP tools (``agents/mcp_setup.py``), a git worktree to work in, and (next) a
native channel. Each kind says what its layers hold (``agents/kinds/<kind>.py``); the
hub composes them into one :class:`LaunchPlan`, so no one joins command lines by hand.
Pure data (no I/O): the hub writes the files, the pane gets the rest.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final

SYSTEM_DEFAULTS_NAME: Final = "system-defaults.json"


@dataclass(frozen=True)
class SystemLayers:
    """The two system settings files of Gemini CLI or Qwen Code: the hub's MCP settings
    take the place of the *system settings* one for the pane, so it carries the machine's
    own over (merged); and the *system defaults* one, found beside the system settings
    unless its variable names it, is copied beside the hub's file."""

    settings_env: str
    defaults_env: str
    settings_path: str
    """Where the agent looks for its system settings on Linux when the variable is unset."""

    def paths(self, environ: Mapping[str, str]) -> tuple[str, str]:
        """The machine's system settings and system defaults files the agent would read."""
        settings = environ.get(self.settings_env) or self.settings_path
        defaults = environ.get(self.defaults_env) or posixpath.join(
            posixpath.dirname(settings), SYSTEM_DEFAULTS_NAME
        )
        return settings, defaults


@dataclass(frozen=True)
class LaunchLayer:
    """What one layer adds to an agent's start (its hooks, the hub's MCP tools, a worktree).

    ``args`` go at the end of the agent's command line; ``env`` into the pane's environment;
    ``files`` maps absolute paths (inside the private folder the layer was given) to their
    text, for the hub to write (mode 0600) before the agent starts; ``cwd``: the folder the
    agent starts in (a worktree's). ``private_home`` says the layer replaces the agent's own
    config home (Copilot's and Amp's hooks), which also hides the user's login there.
    ``secure_dir`` says the agent refuses the files unless no folder above them is writable
    by group or others (Gemini CLI 0.61.0 skips such a settings file: "Parent directory
    '/tmp' is insecure"), so the private folder must not be under ``/tmp``.
    """

    agent: str
    kinds: tuple[str, ...] = ()
    """Hooks: what they report (``agents/hooks.py``'s ``HOOK_KINDS``)."""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    """(Left out of the repr: it may hold a token or a server password.)"""
    files: Mapping[str, str] = field(default_factory=dict, repr=False)
    private_home: bool = False
    secure_dir: bool = False
    tool_names: tuple[str, ...] = ()
    """MCP: what the agent's model calls the hub's tools."""
    system_layers: SystemLayers | None = None
    """MCP on Gemini CLI, Qwen Code: the machine's system files the hub's file stands in for."""
    cwd: str | None = None
    how: str = ""


@dataclass(frozen=True)
class LaunchPlan:
    """A new pane's start: the user's command, env and folder, and the layers over them.

    The layers apply in a fixed order: MCP, hooks, channel (their words follow the command
    in that order; a later layer's variable wins), then the worktree (its folder).
    """

    command: str | None
    """The user's command line (a shell line, as ``command=`` gave it); None: a shell."""
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    """(Left out of the repr: it may hold a token or a server password.)"""
    cwd: str | None = None
    mcp: LaunchLayer | None = None
    hooks: LaunchLayer | None = None
    channel: LaunchLayer | None = None
    """The agent's native channel to the hub (a slot for the next issue; none fills it yet)."""
    worktree: LaunchLayer | None = None
    folders: tuple[str, ...] = ()
    """The private folders made for the layers' files (removed with the tile)."""

    @property
    def layers(self) -> tuple[LaunchLayer, ...]:
        """The layers there are, in the order they apply."""
        slots = (self.mcp, self.hooks, self.channel, self.worktree)
        return tuple(layer for layer in slots if layer is not None)

    @property
    def args(self) -> tuple[str, ...]:
        """The words the layers put after the command."""
        return tuple(word for layer in self.layers for word in layer.args)

    def command_line(self) -> str | None:
        """The line the pane runs: the command, then each layer's words, quoted."""
        if self.command is None or not self.args:
            return self.command
        return f"{self.command} {shlex.join(self.args)}"

    def environment(self) -> dict[str, str]:
        """The pane's environment: the user's ``env=``, then each layer's variables."""
        merged = dict(self.env)
        for layer in self.layers:
            merged.update(layer.env)
        return merged

    @property
    def workdir(self) -> str | None:
        """Where the agent starts: the worktree's folder if it has one, else ``cwd``."""
        for layer in reversed(self.layers):
            if layer.cwd is not None:
                return layer.cwd
        return self.cwd

    def with_layers(self, **layers: LaunchLayer | None) -> LaunchPlan:
        """This plan with the named slots (``mcp``, ``hooks``, ``channel``, ``worktree``) set."""
        return replace(self, **layers)  # type: ignore[arg-type]
