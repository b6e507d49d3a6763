"""Tab completion for ``%madohub``: sub-commands, options, tile names, route ids, key names.

Registered at ``%load_ext madohub_nb`` as an IPython ``complete_command`` hook
for ``%madohub`` and ``%%madohub``. It reads the kernel's hub if one is open
and never makes one.
"""

from __future__ import annotations

from typing import Any, Final

from ..pipeline.keys import NAMED_KEYS, SINGLE_KEYS
from .parsing import SUBCOMMANDS, option_strings

MAGIC_KEYS: Final = ("%madohub", "%%madohub")
TILE_COMMANDS: Final = ("connect", "gather", "send", "keys", "watch")
ROUTE_COMMANDS: Final = ("pause", "resume", "stop")
KEY_WORDS: Final = sorted({*NAMED_KEYS.values(), *sorted(SINGLE_KEYS)})


def _hub() -> Any:
    from .registry import registry

    return registry.current


def candidates(text_until_cursor: str) -> list[str]:
    """What may come next in ``%madohub …`` typed up to the cursor (the word being typed last)."""
    words = text_until_cursor.split()
    if words and words[0] in MAGIC_KEYS:
        words = words[1:]
    if text_until_cursor.endswith((" ", "\t")) or not text_until_cursor.strip():
        words.append("")
    words = [w for w in words if w != "--debug"] or [""]
    current, before = words[-1], words[:-1]
    if not before:
        return [c for c in SUBCOMMANDS if c.startswith(current)]
    command = before[0]
    if current.startswith("-"):
        return [o for o in [*option_strings(command), "--debug"] if o.startswith(current)]
    hub = _hub()
    tiles = list(hub.tiles) if hub is not None else []
    positional = [w for w in before[1:] if not w.startswith("-")]
    if command in TILE_COMMANDS and (command in ("connect", "gather") or not positional):
        found = tiles
    elif command == "keys":
        found = KEY_WORDS
    elif command in ROUTE_COMMANDS and not positional:
        found = ["all", *(r.id for r in hub.routes)] if hub is not None else ["all"]
    elif command in ("connect", "gather") and current == "-":
        found = ["->"]
    else:
        found = []
    return [c for c in found if c.startswith(current)]


def _complete(shell: Any, event: Any) -> list[str]:
    return candidates(event.text_until_cursor)


def register_completer(ip: Any) -> None:
    """Complete ``%madohub`` and ``%%madohub`` lines in ``ip`` (once)."""
    dispatcher = ip.strdispatchers.get("complete_command")
    for key in MAGIC_KEYS:
        if dispatcher is not None and key in dispatcher.strs:
            continue
        ip.set_hook("complete_command", _complete, str_key=key)


def unregister_completer(ip: Any) -> None:
    """Take the ``%madohub`` completion off ``ip``."""
    dispatcher = ip.strdispatchers.get("complete_command")
    if dispatcher is not None:
        for key in MAGIC_KEYS:
            dispatcher.strs.pop(key, None)
