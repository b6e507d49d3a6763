"""Deliver: type a prompt into the target pane the way its agent wants it.

- content is cleaned first: escape sequences and control characters go, only
  newline and tab survive, and huge content is cut with a visible marker;
- ``typed`` (default): line by line with 50–80 ms pauses, line breaks sent as
  the agent's newline key (Claude/Codex: Ctrl-J, which does not submit), tabs as
  the profile's ``typed_tab`` (the Tab key is a command there);
  ``paste``: one bracketed paste through a uniquely named tmux buffer;
- then the agent's submit keys after its pre-delay, and a check that the
  prompt really left the input line (the submit keys are retried if not);
- one delivery at a time per target; a busy target is waited for.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from ..agents.profiles import AgentProfile, submit_keys_for
from ..agents.screen import cap_text, input_text, sanitize_for_typing
from ..errors import DeliveryError
from ..io.tmux import key_name
from ..settings import MAX_ROUTED_CHARS, TYPING_DELAY_MS

if TYPE_CHECKING:
    from .tile import Tile

READY_TIMEOUT_S = 600.0
"""How long a delivery waits for a busy target to become idle before giving up."""
READY_POLL_S = 0.25
VERIFY_TIMEOUT_S = 3.0
"""How long to look for evidence that the prompt was submitted, per attempt."""
SUBMIT_RETRIES = 2
SEND_KEYS_MAX_BYTES = 4096
"""Most UTF-8 bytes one ``send-keys`` call types (tmux refuses commands over ~16 KB)."""

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class DeliveryResult:
    """What happened when a prompt was typed."""

    started_at: datetime
    delivered_at: datetime
    mode: str
    lines: int
    submit_attempts: int
    verified: bool


def prepare_content(text: str, max_chars: int = MAX_ROUTED_CHARS) -> str:
    """Routed content made safe to type: no control input, bounded size, no trailing blank lines."""
    return cap_text(sanitize_for_typing(text), max_chars).strip("\n")


def input_pending(profile: AgentProfile, screen: str, text: str) -> bool:
    """Is (the end of) ``text`` still sitting in the agent's input line?"""
    probe = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")[-24:]
    if not probe:
        return False
    typed = input_text(screen, profile)
    return typed is not None and probe in typed


def literal_chunks(line: str, max_bytes: int = SEND_KEYS_MAX_BYTES) -> list[tuple[str, str]]:
    """Split a line into ``send-keys`` calls that tmux cannot misread.

    tmux takes an argument ending in ``;`` as a command separator (seen with
    tmux 3.3a: ``send-keys -l 'foo;'`` types ``foo``, ``';;'`` types ``;``), so
    the trailing semicolons of each piece are sent as hex keys (``-H 3b 3b``).
    tmux refuses a command over about 16 KB ("command too long"), so a long
    line goes in pieces of at most ``max_bytes`` bytes of UTF-8.
    """
    step = max(1, max_bytes // 4)  # a character is at most 4 bytes of UTF-8
    chunks: list[tuple[str, str]] = []
    for start in range(0, len(line), step):
        piece = line[start : start + step]
        text = piece.rstrip(";")
        if text:
            chunks.append(("l", text))
        if len(text) < len(piece):
            chunks.append(("H", " ".join(["3b"] * (len(piece) - len(text)))))
    return chunks


def _batches(commands: list[list[str]], max_bytes: int) -> list[list[list[str]]]:
    """``commands`` grouped into tmux invocations of about ``max_bytes`` at most.

    tmux refuses one invocation over ~16 KB, however it is split into commands.
    """
    batches: list[list[list[str]]] = []
    size = max_bytes
    for cmd in commands:
        cost = sum(len(arg.encode()) + 1 for arg in cmd)
        if size + cost > max_bytes:
            batches.append([])
            size = 0
        batches[-1].append(cmd)
        size += cost
    return batches


class Deliverer:
    """Types prompts into panes; one delivery at a time per target pane."""

    def __init__(self, rng: random.Random | None = None, sleep: Sleep = asyncio.sleep) -> None:
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._locks: dict[str, asyncio.Lock] = {}

    def lock_for(self, pane_id: str) -> asyncio.Lock:
        lock = self._locks.get(pane_id)
        if lock is None:
            lock = self._locks[pane_id] = asyncio.Lock()
        return lock

    async def wait_ready(self, tile: Tile, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until the target is idle; raise DeliveryError if it exits or stays busy."""
        deadline = time.monotonic() + timeout_s
        state = "unknown"
        while time.monotonic() < deadline:
            state = await tile.astate()
            if state == "idle":
                return
            if state == "exited":
                raise DeliveryError(f"target {tile.name!r} has exited; nothing was typed")
            await self._sleep(READY_POLL_S)
        raise DeliveryError(
            f"target {tile.name!r} was not idle after {timeout_s:.0f} s (state: {state}); nothing was typed"
        )

    async def deliver(
        self,
        tile: Tile,
        text: str,
        *,
        mode: str = "typed",
        legacy: bool = False,
        ready_timeout_s: float = READY_TIMEOUT_S,
        before_typing: Callable[[], None] | None = None,
    ) -> DeliveryResult:
        """Type ``text`` into ``tile`` and submit it. Serialised per target pane."""
        content = prepare_content(text)
        if not content.strip():
            raise DeliveryError("nothing to deliver: the prompt is empty after cleaning")
        async with self.lock_for(tile.pane_id):
            if not legacy:
                await self.wait_ready(tile, ready_timeout_s)
            if before_typing is not None:
                before_typing()
            info = await asyncio.to_thread(tile.pane_info)
            if info is None or info.dead:
                raise DeliveryError(f"target {tile.name!r} has exited; nothing was typed")
            tmux = tile._tmux
            if info.in_mode:
                await asyncio.to_thread(tmux.cancel_copy_mode, tile.pane_id)
            if tile.active_profile.answer_after_input:
                # Its answer will be what follows this input on screen: note where it starts.
                await asyncio.to_thread(tile.note_input, content)
            started = datetime.now(timezone.utc)
            profile = tile.profile
            lines = content.split("\n")
            typed = content.replace("\t", profile.typed_tab).split("\n")
            try:
                if legacy:
                    await self._type_lines(
                        tile, typed, newline_key=profile.newline_key, pause=False
                    )
                    await self._check_alive(tile)
                    await tmux.arun("send-keys", "-t", tile.pane_id, "Enter")
                    return DeliveryResult(
                        started, datetime.now(timezone.utc), "legacy", len(lines), 1, False
                    )
                if mode == "paste":
                    await asyncio.to_thread(tmux.paste, tile.pane_id, content, True)
                    sent = content
                else:
                    await self._type_lines(tile, typed, newline_key=profile.newline_key, pause=True)
                    sent = "\n".join(typed)
                await self._check_alive(tile)
                attempts, verified = await self._submit(tile, profile, sent)
            except DeliveryError:
                raise
            except Exception as exc:  # tmux gone, pane killed mid-way
                raise DeliveryError(f"typing into {tile.name!r} failed: {exc}") from exc
            return DeliveryResult(
                started, datetime.now(timezone.utc), mode, len(lines), attempts, verified
            )

    async def _check_alive(self, tile: Tile) -> None:
        """Refuse to submit into a pane whose program died while the prompt was typed.

        tmux takes keys for a dead pane (remain-on-exit) without complaint.
        """
        info = await asyncio.to_thread(tile.pane_info)
        if info is None or info.dead:
            raise DeliveryError(
                f"target {tile.name!r} exited while the prompt was typed; nothing was submitted"
            )

    async def _type_lines(
        self, tile: Tile, lines: list[str], newline_key: str | None, pause: bool
    ) -> None:
        tmux = tile._tmux
        low, high = TYPING_DELAY_MS
        for i, line in enumerate(lines):
            # One tmux call per line: its chunks and the line break, as ";"-separated
            # commands (a ";" argument of its own separates tmux commands).
            commands: list[list[str]] = []
            for kind, chunk in literal_chunks(line):
                keys = ["-l", "--", chunk] if kind == "l" else ["-H", *chunk.split()]
                commands.append(["send-keys", "-t", tile.pane_id, *keys])
            if i < len(lines) - 1:
                # A line break that does not submit (Claude Code: a literal LF, Ctrl-J).
                commands.append(["send-keys", "-t", tile.pane_id, key_name(newline_key or "\r")])
            for batch in _batches(commands, SEND_KEYS_MAX_BYTES):
                await tmux.arun(
                    *[arg for j, cmd in enumerate(batch) for arg in ([";"] if j else []) + cmd]
                )
            if pause:
                await self._sleep(self._rng.uniform(low, high) / 1000)

    async def _press_submit(self, tile: Tile, profile: AgentProfile, content: str) -> None:
        tmux = tile._tmux
        await self._sleep(profile.pre_submit_delay_ms / 1000)
        keys = [key_name(k) for k in submit_keys_for(profile, content)]
        if profile.between_submit_keys_ms == 0:
            await tmux.arun("send-keys", "-t", tile.pane_id, *keys)
            return
        for i, key in enumerate(keys):
            if i:
                await self._sleep(profile.between_submit_keys_ms / 1000)
            await tmux.arun("send-keys", "-t", tile.pane_id, key)

    async def _submit(self, tile: Tile, profile: AgentProfile, content: str) -> tuple[int, bool]:
        """Press submit, then check the prompt left the input line; retry a bounded number of times."""
        await self._press_submit(tile, profile, content)
        if profile.executes_input:
            return 1, True  # a shell runs the line at once; there is nothing to check
        for attempt in range(1, SUBMIT_RETRIES + 2):
            deadline = time.monotonic() + VERIFY_TIMEOUT_S
            while time.monotonic() < deadline:
                state = await tile.astate()
                if state in ("busy", "waiting", "exited"):
                    return attempt, state != "exited"
                screen = await asyncio.to_thread(tile.screen)
                if not input_pending(profile, screen, content):
                    return attempt, True
                await self._sleep(0.1)
            if attempt <= SUBMIT_RETRIES:
                await tile._tmux.arun(
                    "send-keys", "-t", tile.pane_id, key_name(profile.submit_keys[-1])
                )
        return SUBMIT_RETRIES + 1, False
