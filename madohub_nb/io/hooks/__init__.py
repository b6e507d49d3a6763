"""Agents' own hooks, pushed to the hub: the channel it listens on and the command agents run.

``channel.py`` is the hub's side (a private Unix socket, tokens, checks, events);
``command.py`` is the agent's side, run by path as ``python -I -S …/command.py KIND``
(on a host, a copy of that one file): it imports only the standard library.
"""
