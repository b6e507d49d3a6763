"""The MadohubError family: every error the toolkit raises on purpose.

Messages name the bad value, what is allowed, and what to do next.
"""

from __future__ import annotations


class MadohubError(Exception):
    """Base class of every error madohub_nb raises on purpose."""


class MadohubValueError(MadohubError, ValueError):
    """A bad argument: an unknown name, a value out of range, a duplicate."""


class TmuxError(MadohubError):
    """tmux is missing, its server is gone, or a tmux command failed."""


class TileError(MadohubError):
    """A tile's pane or agent is not usable (exited, killed, never started)."""


class DeliveryError(MadohubError):
    """Typing into a target failed or the prompt was not seen submitted."""


class TransformError(MadohubError):
    """A transform could not produce a prompt (API error, timeout, bad template)."""


class LogError(MadohubError):
    """The round log cannot be written or read (read-only, disk full, corrupt)."""


class MadohubWarning(UserWarning):
    """Something works but probably not as meant (a template slot that is almost a placeholder)."""
