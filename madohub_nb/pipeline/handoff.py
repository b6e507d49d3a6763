"""Agents that hand off themselves: the MCP tools' work (``list_agents``, ``send``, ``ask``).

A tile the hub gives a bearer token (:meth:`Handoff.grant`) may call the tools;
the token is who the caller is. Every call goes through the hub's own path: the
target is checked as ``hub.send`` checks it, typed by the deliverer (one lock per
pane, the foreground check, submit verified) and logged as a round
(``trigger = "mcp"``, ``route_id`` ``mcp:<caller>-><target>``, source = the
caller). ``ask`` listens to the target as a route listens to its source (the
same turn detector, hooks and extraction: it *is* a route, whose rounds are
caught instead of typed) and returns its next whole answer; that answer is a
second row of the same route id, source = the target, target = the caller.

Loop protection holds per pair: ``mcp_max_rounds`` calls, ``mcp_cooldown_ms`` apart
(the hub's settings, or the caller's own limits: :meth:`Handoff.set_limits`); an
``ask`` that would wait on its own caller (through any of the asks in flight) is
refused at once, naming the cycle; asks of one target go one at a time, each
answered by the turn its own prompt started; a burst of calls is refused beyond
:data:`CALLS_PER_S` a second per caller. A refused call is a row whose fields the
caller controls are bounded, and a caller past :data:`REFUSED_PER_WINDOW` refusals
has its calls refused at once, unlogged, for the rest of the window.
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Final

from ..agents.screen import sanitize_for_typing
from ..defaults import CUT_MARKER
from ..engine import spawn
from ..errors import DeliveryError
from ..io.agent_records.base import Extraction
from ..io.log import RoundRecord
from ..io.mcp import ToolRefused
from .events import HubEvent
from .inbox import Inbox
from .round import DISPATCHES, RoundPlan, run_round
from .route import Route, build_route
from .route_context import OutputStream, RouteContext, RouteServices, route_context
from .tile import McpLimits, Tile
from .triggers import Turn

TEXT_MAX_CHARS: Final = 100_000
"""The longest text ``send``/``ask`` types (a long prompt belongs in a file the agent reads)."""
CALLS_PER_S: Final = 20
"""More calls than this in one second from one caller are refused (a loop gone wild)."""
ASK_TIMEOUT_S_MAX: Final = 3600.0
LATE_ANSWER_WAIT_S: Final = 3600.0
"""After an ``ask`` timed out, the target's answer is still awaited this long and logged."""
TRIGGER: Final = "mcp"
SHOWN_MAX_CHARS: Final = 80
"""The most of a caller's value (a ``to`` that is no agent, a bad ``timeout_s``) a refusal
echoes, in its message and its row; a longer one is cut with a visible mark."""
LOGGED_ERROR_MAX_CHARS: Final = 2000
"""The most of a refusal's reason its row keeps (cut with a visible mark)."""
REFUSED_PER_WINDOW: Final = 10
REFUSED_WINDOW_S: Final = 60.0
"""A caller with ``REFUSED_PER_WINDOW`` refused calls within ``REFUSED_WINDOW_S`` has every
call refused at once, unlogged (one row says so), until the oldest is that old: a loop of
bad calls cannot fill the log."""
EAR_START_TIMEOUT_S: Final = 10.0
"""How long an ``ask`` waits to start listening to its target before it types nothing."""


def pair_id(caller: str, target: str) -> str:
    """The route id of a pair's rounds: ``mcp:<caller>-><target>``."""
    return f"mcp:{caller}->{target}"


@dataclass
class Grant:
    """What one tile may do with the tools: reach every agent tile (``reach`` None) or those
    named; ``allow_shell`` lets a named shell or terminal be typed into."""

    caller: str
    token: str
    reach: frozenset[str] | None
    allow_shell: bool = False
    calls: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=64))
    refused: collections.deque[float] = field(
        default_factory=lambda: collections.deque(maxlen=4 * REFUSED_PER_WINDOW)
    )
    """When its logged refusals were (the last ``REFUSED_WINDOW_S``; bounded even when many
    calls in flight at once are refused together)."""
    muted: bool = False
    """Over the refusal limit: its calls are refused unlogged (one row said so)."""

    def refusals(self, now: float) -> int:
        """Its logged refusals within the last ``REFUSED_WINDOW_S`` (older ones forgotten)."""
        while self.refused and now - self.refused[0] >= REFUSED_WINDOW_S:
            self.refused.popleft()
        if len(self.refused) < REFUSED_PER_WINDOW:
            self.muted = False
        return len(self.refused)


@dataclass
class _Pair:
    rounds: int = 0
    last_ms: float | None = None


class Handoff:
    """The tools' work for one hub: tokens, checks, loop protection, rounds and answers."""

    def __init__(
        self,
        services: RouteServices,
        tiles: Callable[[], Mapping[str, Tile]],
        setting: Callable[[str], Any],
        context: RouteContext | None = None,
    ) -> None:
        self._services = services
        self._tiles = tiles
        self._setting = setting
        self._context = context if context is not None else route_context(services)
        self._grants: dict[str, Grant] = {}
        self._by_token: dict[str, Grant] = {}
        self._pairs: dict[tuple[str, str], _Pair] = {}
        self._limits: dict[str, McpLimits] = {}
        """Callers whose loop protection is not the hub's settings (None in it: the setting)."""
        self._asking: collections.Counter[tuple[str, str]] = collections.Counter()
        """Every ``ask`` in flight, queued ones too, as (caller, target) edges counted (a
        caller may wait on several targets at once): the cycle check walks them all."""
        self._ask_locks: dict[str, asyncio.Lock] = {}
        """One per target: its asks go one at a time, each waiting for its own answer."""
        self.late: set[asyncio.Task[None]] = set()
        """Ears still listening for an answer that came after its ask timed out."""

    # who may call --------------------------------------------------------------------
    def grant(
        self,
        caller: str,
        reach: bool | list[str] | tuple[str, ...] = True,
        *,
        allow_shell: bool = False,
        known: bool = True,
    ) -> str:
        """Give tile ``caller`` a token for the tools (a new one each time; the old one ends).

        ``reach``: True for every agent tile but shells and terminals; or the names it may
        reach (a shell among them only with ``allow_shell``). ``known=False``: the tile is
        about to be made (its agent starts with the token)."""
        import secrets

        if known and caller not in self._tiles():
            raise ToolRefused(
                f"{caller!r} is not a tile of this hub; tiles: {sorted(self._tiles())}"
            )
        if reach is True:
            names = None
        elif isinstance(reach, (list, tuple)) and all(isinstance(n, str) for n in reach):
            names = frozenset(reach)
        else:
            raise ToolRefused(f"mcp must be True or a list of tile names, got {reach!r}")
        self.revoke(caller)
        grant = Grant(caller, secrets.token_urlsafe(24), names, bool(allow_shell))
        self._grants[caller], self._by_token[grant.token] = grant, grant
        return grant.token

    def revoke(self, caller: str) -> None:
        """``caller``'s token no longer works (its tile was closed)."""
        old = self._grants.pop(caller, None)
        if old is not None:
            self._by_token.pop(old.token, None)

    def knows(self, token: str) -> bool:
        """``token`` is one this hub gave and has not ended (checked before any session)."""
        return token in self._by_token

    def token(self, caller: str) -> str | None:
        """``caller``'s token now (None: it has none)."""
        grant = self._grants.get(caller)
        return grant.token if grant is not None else None

    @property
    def callers(self) -> list[str]:
        """The tiles that hold a token now."""
        return sorted(self._grants)

    def reset(self) -> None:
        """A new conversation: every pair's round count starts again."""
        self._pairs.clear()

    def set_limits(self, caller: str, limits: McpLimits) -> None:
        """``caller``'s own loop protection from its next call on (checked by the caller)."""
        if limits == McpLimits():
            self._limits.pop(caller, None)
        else:
            self._limits[caller] = limits

    def limits(self, caller: str) -> McpLimits:
        """``caller``'s loop protection now (both values): its own, else the hub's settings."""
        return McpLimits(*self._limits_of(caller))

    def _limits_of(self, caller: str) -> tuple[int, int]:
        own = self._limits.get(caller, McpLimits())
        rounds = own.max_rounds if own.max_rounds is not None else self._setting("mcp_max_rounds")
        cooldown = (
            own.cooldown_ms if own.cooldown_ms is not None else self._setting("mcp_cooldown_ms")
        )
        return int(rounds), int(cooldown)

    def rounds(self, caller: str, target: str) -> int:
        """The calls ``caller`` made to ``target`` in this conversation (of ``mcp_max_rounds``)."""
        pair = self._pairs.get((caller, target))
        return pair.rounds if pair is not None else 0

    async def _caller(self, token: str | None) -> Grant:
        if token is None:
            raise ToolRefused(
                "this call carries no bearer token (an 'Authorization: Bearer <token>' header); "
                "the hub gives each tile it starts with mcp= its own; nothing was typed"
            )
        grant = self._by_token.get(token)
        if grant is None:
            raise ToolRefused(
                "the bearer token is not one this hub gave (or its tile was closed and "
                "the token ended); nothing was typed"
            )
        if grant.caller not in self._tiles():
            raise ToolRefused(
                f"the bearer token is {grant.caller!r}'s, which is no tile of this hub now; "
                "nothing was typed"
            )
        now = time.monotonic()
        if grant.refusals(now) >= REFUSED_PER_WINDOW:
            wait_s = REFUSED_WINDOW_S - (now - grant.refused[0])
            why = (
                f"{grant.caller!r} made {REFUSED_PER_WINDOW} refused calls within "
                f"{REFUSED_WINDOW_S:g} s; every call of it is refused for {wait_s:.0f} s more "
                "(read the refusals' reasons and fix the calls rather than retrying); "
                "nothing was typed"
            )
            if not grant.muted:  # one row says so; the calls refused meanwhile are not logged
                grant.muted = True
                await self._record_refusal(grant, "*", "any", f"{why}; not logged until then")
            raise ToolRefused(why)
        grant.calls.append(now)
        recent = [t for t in grant.calls if now - t < 1.0]
        if len(recent) > CALLS_PER_S:
            raise ToolRefused(
                f"{grant.caller!r} made more than {CALLS_PER_S} calls within a second; "
                "refused (wait for answers instead of calling in a loop); nothing was typed"
            )
        return grant

    def _reachable(self, grant: Grant, tile: Tile) -> bool:
        if tile.name == grant.caller:
            return False
        if grant.reach is None:
            return not tile.profile.executes_input
        return tile.name in grant.reach and (grant.allow_shell or not tile.profile.executes_input)

    # the checks of one call ----------------------------------------------------------
    async def _target(self, grant: Grant, to: object) -> Tile:
        tiles = self._tiles()
        allowed = sorted(t.name for t in tiles.values() if self._reachable(grant, t))
        if not isinstance(to, str) or not to.strip():
            raise ToolRefused(f"'to' must be the name of an agent; you may reach {allowed}")
        if to == grant.caller:
            raise ToolRefused(f"{to!r} is you; you may reach {allowed}")
        tile = tiles.get(to)
        if tile is None:
            raise ToolRefused(f"there is no agent {shown(to)}; you may reach {allowed}")
        if tile.profile.executes_input and not (
            grant.allow_shell and grant.reach is not None and to in grant.reach
        ):
            raise ToolRefused(
                f"{to!r} is a {tile.agent}: whatever is typed there runs as a command; the hub "
                "types there only when its user allowed it (mcp=[...] with allow_shell=True)"
            )
        if not self._reachable(grant, tile):
            raise ToolRefused(f"you may not reach {to!r}; you may reach {allowed}")
        if await tile.astate() == "exited":
            raise ToolRefused(f"{to!r} has exited; nothing was typed")
        return tile

    @staticmethod
    def _text(text: object) -> str:
        if not isinstance(text, str) or not text.strip():
            raise ToolRefused("'text' must be a non-empty string")
        if len(text) > TEXT_MAX_CHARS:
            raise ToolRefused(
                f"'text' is {len(text)} characters; at most {TEXT_MAX_CHARS} are typed "
                "(put a long text in a file and send its path)"
            )
        return text

    async def _turn_of(self, caller: str, target: str) -> int:
        """Loop protection: the pair's next round number (after its cooldown), or refused."""
        pair = self._pairs.setdefault((caller, target), _Pair())
        max_rounds, cooldown_ms = self._limits_of(caller)
        if pair.rounds >= max_rounds:
            raise ToolRefused(
                f"{pair_id(caller, target)} reached mcp_max_rounds={max_rounds}: the hub's loop "
                "protection ends this conversation (its user can allow more); nothing was typed"
            )
        pair.rounds += 1
        if pair.last_ms is not None:
            left = pair.last_ms + cooldown_ms - time.monotonic() * 1000
            if left > 0:
                await asyncio.sleep(left / 1000)
        pair.last_ms = time.monotonic() * 1000
        return pair.rounds

    def _plan(self, grant: Grant, tile: Tile, text: str, number: int, tool: str) -> RoundPlan:
        return RoundPlan(
            route_id=pair_id(grant.caller, tile.name), source=grant.caller, target=tile,
            round=number, max_rounds=self._limits_of(grant.caller)[0], trigger=TRIGGER,
            spec=None, dispatch=DISPATCHES["madoagent"], delivery=str(self._setting("delivery")),
            extraction=None, prompt=text, allow_shell=grant.allow_shell,
            target_wait_s=float(self._setting("target_wait_s")), meta={"tool": tool},
        )  # fmt: skip

    async def _refused(self, grant: Grant, to: object, tool: str, why: str) -> None:
        """A refused call of a known caller is a row too (nothing lost from the log), its
        fields bounded; it counts towards the caller's ``REFUSED_PER_WINDOW``."""
        grant.refused.append(time.monotonic())
        await self._record_refusal(grant, to, tool, why)

    async def _record_refusal(self, grant: Grant, to: object, tool: str, why: str) -> None:
        target = cut(to, SHOWN_MAX_CHARS) if isinstance(to, str) else shown(to)
        await self._services.record(
            RoundRecord(
                route_id=pair_id(grant.caller, target), source=grant.caller, target=target,
                round=0, trigger=TRIGGER, transform="none", dispatch="madoagent",
                status="error", error=cut(f"refused: {why}", LOGGED_ERROR_MAX_CHARS),
                session_id=self._services.session_id, meta={"tool": tool},
            )
        )  # fmt: skip

    # the tools -----------------------------------------------------------------------
    async def list_agents(self, token: str | None) -> list[dict[str, str]]:
        grant = await self._caller(token)
        found = []
        for tile in self._tiles().values():
            if self._reachable(grant, tile):
                found.append({"name": tile.name, "agent": tile.agent, "state": await tile.astate()})
        return found

    async def send(self, token: str | None, to: str, text: str) -> str:
        grant = await self._caller(token)
        try:
            tile, text = await self._target(grant, to), self._text(text)
            number = await self._turn_of(grant.caller, tile.name)
        except ToolRefused as exc:
            await self._refused(grant, to, "send", str(exc))
            raise
        rec = await run_round(self._services, self._plan(grant, tile, text, number, "send"))
        if rec.status != "delivered":
            raise ToolRefused(f"not delivered to {to!r}: {rec.error}")
        return "delivered"

    async def ask(self, token: str | None, to: str, text: str, timeout_s: float) -> str:
        grant = await self._caller(token)
        try:
            tile, text = await self._target(grant, to), self._text(text)
            wait_s = _check_timeout(timeout_s)
            edge = self._start_asking(grant.caller, tile.name)
        except ToolRefused as exc:
            await self._refused(grant, to, "ask", str(exc))
            raise
        try:  # (in flight from here, its cooldown and its queue included)
            try:
                number = await self._turn_of(grant.caller, tile.name)
            except ToolRefused as exc:
                await self._refused(grant, to, "ask", str(exc))
                raise
            return await self._ask_in_turn(grant, tile, text, number, wait_s)
        finally:
            self._stop_asking(edge)

    def _start_asking(self, caller: str, target: str) -> tuple[str, str]:
        """Check that the ask would not wait on its own caller, and count it in flight (in
        one step: two asks that would close a ring cannot both pass)."""
        ring = self._ring(caller, target)
        if ring is not None:
            raise ToolRefused(
                f"asking {target!r} would wait on you: {' -> '.join(ring)} (each waits "
                "for the next's answer); answer the ask you are in first; nothing was typed"
            )
        edge = (caller, target)
        self._asking[edge] += 1
        return edge

    def _stop_asking(self, edge: tuple[str, str]) -> None:
        self._asking[edge] -= 1
        if self._asking[edge] <= 0:
            del self._asking[edge]

    def _ring(self, caller: str, target: str) -> list[str] | None:
        """The chain ``caller -> target -> ... -> caller`` through the asks in flight, if any."""
        waits_on: dict[str, set[str]] = collections.defaultdict(set)
        for asker, asked in self._asking:
            waits_on[asker].add(asked)
        paths, seen = [[caller, target]], {target}
        while paths:
            path = paths.pop(0)
            for nxt in sorted(waits_on.get(path[-1], ())):
                if nxt == caller:
                    return [*path, nxt]
                if nxt not in seen:
                    seen.add(nxt)
                    paths.append([*path, nxt])
        return None

    async def _ask_in_turn(
        self, grant: Grant, tile: Tile, text: str, number: int, wait_s: float
    ) -> str:
        """Asks of one target go one at a time (queued up to the hub's ``target_wait_s``):
        each one's answer is the turn its own prompt started."""
        lock = self._ask_locks.setdefault(tile.name, asyncio.Lock())
        queue_s = float(self._setting("target_wait_s"))
        try:
            await asyncio.wait_for(lock.acquire(), queue_s)
        except asyncio.TimeoutError:
            why = (
                f"{tile.name!r} was still answering other asks after target_wait_s="
                f"{queue_s:g} s; nothing was typed"
            )
            await self._refused(grant, tile.name, "ask", why)
            raise ToolRefused(why) from None
        try:
            return await self._ask(grant, tile, text, number, wait_s)
        finally:
            lock.release()

    async def _ask(self, grant: Grant, tile: Tile, text: str, number: int, wait_s: float) -> str:
        answers: asyncio.Queue[Turn] = asyncio.Queue()
        ear: Route | None = None

        async def listen() -> None:
            # Under the target's pane lock, once it is ready, just before the prompt is typed:
            # a turn in progress has ended and no other delivery can start one, so the next
            # turn the ear hears is the one this prompt starts.
            nonlocal ear
            ear = _ear(self._context, tile, self._tiles()[grant.caller], answers)
            ear.start()
            try:
                await asyncio.wait_for(ear.ready.wait(), EAR_START_TIMEOUT_S)
            except asyncio.TimeoutError:
                raise DeliveryError(
                    f"the hub could not listen to {tile.name!r} within "
                    f"{EAR_START_TIMEOUT_S:g} s; nothing was typed"
                ) from None

        late = False
        plan = self._plan(grant, tile, text, number, "ask")
        plan.when_ready = listen
        try:
            sent = await run_round(self._services, plan)
            if sent.status != "delivered":
                raise ToolRefused(f"not delivered to {tile.name!r}: {sent.error}")
            assert ear is not None
            try:
                turn = await _own_answer(answers, text, wait_s, self._reread(tile))
            except asyncio.TimeoutError:
                late = True  # the ear listens on; the answer is logged when it comes
                self._await_late(ear, answers, grant, tile, number, sent, wait_s, text)
                raise ToolRefused(
                    f"{tile.name!r} did not finish its answer within timeout_s={wait_s:g}; "
                    "its answer will be in the hub's round log when it comes"
                ) from None
        finally:
            if not late and ear is not None:
                ear.cancel()
        await self._answered(grant, tile, number, sent, turn)
        if turn.found is None or not turn.found.text.strip():
            raise ToolRefused(
                f"{tile.name!r} finished its turn but gave no answer the hub could read"
            )
        return turn.found.text

    def _await_late(
        self, ear: Route, answers: asyncio.Queue[Turn], grant: Grant, tile: Tile,
        number: int, sent: RoundRecord, wait_s: float, prompt: str,
    ) -> None:  # fmt: skip
        async def late() -> None:
            try:
                turn = await _own_answer(answers, prompt, LATE_ANSWER_WAIT_S, self._reread(tile))
                await self._answered(grant, tile, number, sent, turn, late_after_s=wait_s)
            except asyncio.TimeoutError:
                pass
            finally:
                ear.cancel()

        task = spawn(late(), name=f"late answer {tile.name}")
        self.late.add(task)
        task.add_done_callback(self.late.discard)

    def _reread(self, tile: Tile) -> Callable[[], Awaitable[Extraction | None]]:
        """How an ask reads ``tile``'s record again after it passed over a turn."""
        return lambda: self._context.answer(tile, transcript=True)

    async def _answered(
        self, grant: Grant, tile: Tile, number: int, sent: RoundRecord, turn: Turn,
        late_after_s: float | None = None,
    ) -> RoundRecord:  # fmt: skip
        """The answer's row: the same route id, from the target back to the caller. Its
        ``fired_at`` is when the question reached the target (the turn that answers it began)
        and its ``delivered_at`` when the answer went back to the caller (not for a late one),
        so the pair's timeline lane shows the ask, then the wait for its answer."""
        found: Extraction | None = turn.found
        now = datetime.now(timezone.utc)
        rec = RoundRecord(
            fired_at=sent.delivered_at or now,
            delivered_at=now if late_after_s is None else None,
            route_id=pair_id(grant.caller, tile.name), source=tile.name, target=grant.caller,
            round=number, trigger=TRIGGER, transform="none", dispatch="madoagent",
            extracted=found.text if found else None,
            extraction_method=found.method if found else None,
            extraction_path=str(found.path) if found and found.path else None,
            turn_signal=turn.signal or None, status="delivered",
            extract_ms=round(turn.extract_ms, 3), session_id=self._services.session_id,
            latency_ms=round((time.monotonic() - _mono(sent)) * 1000, 3),
            meta={"tool": "ask", "answer_to": sent.round_id},
        )  # fmt: skip
        if late_after_s is not None:
            rec.status = "error"
            rec.error = (
                f"answered after the ask timed out (timeout_s={late_after_s:g}); not returned"
            )
            rec.meta["late"] = True
        return await self._services.record(rec)


def cut(text: str, max_chars: int) -> str:
    """``text`` bounded to about ``max_chars`` characters, a visible mark where it was cut."""
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + CUT_MARKER.format(cut=len(text) - max_chars)


def shown(value: object) -> str:
    """A caller's value as a refusal echoes it: its ``repr``, bounded (``SHOWN_MAX_CHARS``)."""
    if isinstance(value, str):
        return repr(cut(value, SHOWN_MAX_CHARS))
    try:
        return cut(repr(value), SHOWN_MAX_CHARS)
    except ValueError:  # (an int too long to print)
        return f"a {type(value).__name__}"


def _mono(rec: RoundRecord) -> float:
    """``rec.fired_at`` on the monotonic clock (for the answer's latency)."""
    return time.monotonic() - (time.time() - rec.fired_at.timestamp())


def _check_timeout(timeout_s: object) -> float:
    if (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, (int, float))
        or not math.isfinite(timeout_s)
        or not 0 < timeout_s <= ASK_TIMEOUT_S_MAX
    ):
        raise ToolRefused(
            f"timeout_s must be a number of seconds > 0 and <= {ASK_TIMEOUT_S_MAX:g}, "
            f"got {shown(timeout_s)}"
        )
    return float(timeout_s)


PROMPT_KEY_CHARS: Final = 2000
"""How much of an ask's prompt (normalised) must be in the user message of the turn that
answers it, where the target's record says that message (a long prompt may be cut)."""


def prompt_key(text: str) -> str:
    """``text`` as compared with a record's user message: control characters cleaned as
    they are before typing, whitespace folded to single spaces."""
    return " ".join(sanitize_for_typing(text).split())


def answers_prompt(found: Extraction | None, prompt: str) -> bool:
    """Whether ``found`` may be the answer to ``prompt``: its record says its turn's user
    message and that holds the prompt, or the record says no user message (screen-only
    agents, readers that cannot tell: then the first turn to end after the prompt counts)."""
    if found is None or found.prompt is None:
        return True
    key = prompt_key(prompt)[:PROMPT_KEY_CHARS]
    return bool(key) and key in prompt_key(found.prompt)


REREAD_S: Final = 0.5
REREAD_MAX_S: Final = 5.0
"""After an ask passed over a turn, its target's record is read again ``REREAD_S`` later
(the screen may already be idle while the record's next answer, the ask's own, lags), each
fruitless read waiting twice as long, up to ``REREAD_MAX_S`` (a late answer's ear listens
for up to an hour)."""


async def _own_answer(
    answers: asyncio.Queue[Turn], prompt: str, wait_s: float,
    reread: Callable[[], Awaitable[Extraction | None]],
) -> Turn:  # fmt: skip
    """The first finished turn whose record says it answers ``prompt`` (see
    :func:`answers_prompt`): a turn somebody else's prompt started (a person typing in the
    pane, a busy turn whose answer reached its record only after the ask was typed) is passed
    over. Once one was, the record is also read again every ``REREAD_S``: the turn detector
    has fired for the record's newest answer and may not look again, so the ask's own answer,
    landing there late, is taken when the record says its prompt. Raises
    ``asyncio.TimeoutError`` after ``wait_s`` in all."""
    deadline_s = time.monotonic() + wait_s
    passed_over, reread_s = False, REREAD_S
    while True:
        left_s = deadline_s - time.monotonic()
        if left_s <= 0:
            raise asyncio.TimeoutError
        try:
            turn = await asyncio.wait_for(
                answers.get(), min(left_s, reread_s) if passed_over else left_s
            )
        except asyncio.TimeoutError:
            if not passed_over:
                raise
            started_s = time.monotonic()
            found = await reread()
            if found is not None and found.prompt is not None and answers_prompt(found, prompt):
                took_ms = (time.monotonic() - started_s) * 1000
                return Turn(found, took_ms, signal="transcript")
            reread_s = min(reread_s * 2, REREAD_MAX_S)
            continue
        if answers_prompt(turn.found, prompt):
            return turn
        passed_over = True


def _ear(context: RouteContext, target: Tile, caller: Tile, answers: asyncio.Queue[Turn]) -> Route:
    """A route target → caller whose rounds are caught, not typed: each finished turn of the
    target (by the usual signals, extracted as usual) goes to ``answers``."""
    return build_route(
        _CaughtRounds(context, answers), 0, target, caller, trigger="on-idle",
        transform="prompt-wrap", template=None, max_rounds=20, cooldown_ms=1000,
        stop_keyword=None, dispatch="madoagent", pattern=None, allow_shell=True,
        delivery="typed", model=None, api_key=None,
    )  # fmt: skip


class _CaughtRounds:
    """A :class:`RouteContext` that hands each round's turn to a queue and tells no one."""

    def __init__(self, context: RouteContext, answers: asyncio.Queue[Turn]) -> None:
        self._context = context
        self._answers = answers

    @property
    def session_id(self) -> str:
        return self._context.session_id

    @property
    def idle_delay_ms(self) -> int:
        return self._context.idle_delay_ms

    @property
    def target_wait_s(self) -> float:
        return self._context.target_wait_s

    @property
    def inbox(self) -> Inbox:
        return self._context.inbox  # (its route never approves: nothing of it waits there)

    def now_ms(self) -> float:
        return time.monotonic() * 1000  # (no cooldown: the ear's guard is never waited on)

    async def sleep(self, seconds: float) -> None:
        return None

    async def watch(self, tile: Tile) -> OutputStream:
        return await self._context.watch(tile)

    async def answer(self, tile: Tile, *, transcript: bool) -> Extraction | None:
        return await self._context.answer(tile, transcript=transcript)

    async def state(self, tile: Tile) -> Any:
        return await self._context.state(tile)

    async def pane_gone(self, tile: Tile) -> bool:
        return await self._context.pane_gone(tile)

    async def history(self, tile: Tile) -> str:
        return await self._context.history(tile)

    async def run_round(self, plan: RoundPlan) -> RoundRecord:
        turn = Turn(
            found=plan.extraction, extract_ms=plan.extract_ms or 0.0, signal=plan.turn_signal or ""
        )
        self._answers.put_nowait(turn)
        return RoundRecord(
            route_id=plan.route_id, source=plan.source, target="", round=plan.round,
            trigger=TRIGGER, transform="none", dispatch="shadow", status="shadow",
        )  # fmt: skip

    def record_now(self, rec: RoundRecord) -> RoundRecord:
        return self._context.record_now(rec)

    def emit(self, event: HubEvent) -> None:
        return None

    def call_soon(self, fn: Callable[..., object], *args: object) -> None:
        self._context.call_soon(fn, *args)
