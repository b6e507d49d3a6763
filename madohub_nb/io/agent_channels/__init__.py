"""Agents' native channels: a prompt goes in through the agent's own protocol while its TUI
stays live in the pane, and its turns, answers, usage and approvals come back the same way.

One module per protocol (Codex's app-server, OpenCode's server, Qwen Code's input/JSON
files); ``base.py`` has what they share. The kinds say which one they speak
(``agents/kinds/<kind>.py``, ``AgentKind.channel``).
"""
