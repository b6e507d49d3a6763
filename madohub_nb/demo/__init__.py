"""Built-in demo agents: stand-ins for Claude Code and Codex (no API key, no network).

``standin_command("claude", persona="writer")`` gives the command a tile runs;
the personas are in ``PERSONAS``.
"""

from __future__ import annotations

from .install import install_standins, private_config_dir, standin_command
from .personas import PERSONAS

__all__ = ["PERSONAS", "install_standins", "private_config_dir", "standin_command"]
