"""Triggers: when does a route fire? Pure state machines, time passed in (ms).

- ``on-idle`` / ``on-complete``: the source shows completion evidence (its
  profile's idle marker or its own status signal, or a match of the route's or
  tile's ``completion_pattern`` in new output) and has been silent for
  ``idle_delay_ms``; a finished turn fires once (its turn key must be new).
- ``on-keyword``: a regex matches output that arrived since the last firing.
- ``always``: every batch of new output (ANSI stripped) is streamed.

The engine feeds output and state in; these classes say fire, check or wait.
Each trigger is also a *turn detector* (:class:`TurnDetector`) behind one
method a route asks, :meth:`~TurnDetector.next_turn` ("is there a finished
turn now?"), made from the trigger's name by :func:`make_detector`. A detector
reaches the source only through the :class:`TurnSource` it is given (its answer,
its state, the clock), so it runs without tmux.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from ..defaults import TRIGGERS, check_choice, check_regex
from ..errors import MadohubValueError
from ..io.agent_channels.base import ChannelTurn
from ..io.agent_records.base import Extraction, TurnUsage
from ..io.hooks.channel import HookEvent

RECHECK_MS = 2000
"""How soon to look at the state again when silence held but the agent was not idle."""

HOOK_RECORD_WAIT_MS = 1500
HOOK_RECORD_POLL_MS = 100
"""How long a hook's round waits for the agent's record to hold the hook's answer (its
usage comes from there) and, where the record writes one, the turn's duration; read again
this often; then it goes on without them (the duration is then measured from the record's
times: ``TurnUsage.measured_turn_ms``)."""

RECORD_LAG_CHECKS = 3
"""Times an idle source whose record still shows the turn routed before is read again
(RECHECK_MS apart) with no new output: Qwen Code 0.24.4 draws its answer and goes idle
before its chat file holds it (seen here: no later output would wake the route)."""

FIRED_KEYS_KEPT = 1000
"""Transcript turn keys an on-idle route remembers, so that no turn fires twice."""

KEYWORD_WINDOW_CHARS = 4096
"""Output kept for keyword matching across chunk boundaries."""

IDLE_TRIGGERS = ("on-idle", "on-complete")
"""The triggers that wait for a finished turn: completion evidence, then silence."""


@dataclass(frozen=True)
class Decision:
    """What the engine should do next: ``fire``, ``check`` the state at ``at_ms``, or ``wait`` for output."""

    action: Literal["fire", "check", "wait"]
    at_ms: float | None = None
    text: str = ""


class IdleTrigger:
    """``on-idle``/``on-complete``: completion evidence, then ``idle_delay_ms`` of silence.

    The evidence is the source's idle state, or, when a ``completion_pattern`` is
    given, a match of it in output that arrived since the last firing (the seed's
    completion keyword): then only the silence after the match is waited for.
    """

    def __init__(
        self, idle_delay_ms: int, completion_pattern: re.Pattern[str] | None = None
    ) -> None:
        self.idle_delay_ms = idle_delay_ms
        self.completion_pattern = completion_pattern
        self.completed = False
        """The completion pattern matched output since the last firing."""
        self._window = ""
        self.last_output_ms: float | None = None
        self.last_turn_key: str | None = None
        self.last_text_key: str | None = None
        self._recheck_at_ms: float | None = None
        self._fired: dict[str, None] = {}  # unique keys fired so far, oldest first
        self.skip_reason = ""
        """Why the last :meth:`accept` refused: ``no answer``, ``already routed`` or ``not new``."""

    def baseline(self, turn_key: str | None, text_key: str | None = None) -> None:
        """The turn already finished when the route was made: never fire for it."""
        self.last_turn_key = turn_key
        self.last_text_key = text_key

    def output(self, now_ms: float, text: str = "") -> None:
        self.last_output_ms = now_ms
        self._recheck_at_ms = None
        if self.completion_pattern is not None and not self.completed and text:
            # Terminal lines end in CRLF: make "$" work at a line's end.
            text = text.replace("\r\n", "\n").replace("\r", "\n")
            # The whole chunk is searched (a flood arrives in chunks far over the window).
            window = self._window + text
            if self.completion_pattern.search(window):
                self.completed, self._window = True, ""
            else:
                self._window = window[-KEYWORD_WINDOW_CHARS:]

    def check_again(self, now_ms: float, after_ms: float) -> None:
        """Look again ``after_ms`` from now though no output comes (a record that lags)."""
        self.last_output_ms = now_ms - self.idle_delay_ms
        self._recheck_at_ms = now_ms + after_ms

    def next_check_ms(self) -> float | None:
        """When silence will have lasted ``idle_delay_ms`` (or a recheck is due); None: wait for output."""
        if self.last_output_ms is None:
            return None
        if self.completion_pattern is not None and not self.completed:
            return None
        due = self.last_output_ms + self.idle_delay_ms
        return max(due, self._recheck_at_ms) if self._recheck_at_ms is not None else due

    def evaluate(self, now_ms: float, state: str) -> Decision:
        """Called at or after :meth:`next_check_ms` with the source's state."""
        due = self.next_check_ms()
        if due is None:
            return Decision("wait")
        if now_ms < due:
            return Decision("check", due)
        if self.completion_pattern is not None:
            return Decision("fire")  # the keyword is the evidence; the silence followed it
        if state != "idle":
            # Silent but not idle (thinking silently, a permission prompt): look again later.
            self._recheck_at_ms = now_ms + RECHECK_MS
            return Decision("check", self._recheck_at_ms)
        return Decision("fire")

    def accept(
        self, turn_key: str | None, *, unique: bool = False, text_key: str | None = None
    ) -> bool:
        """After a ``fire`` decision: is this a new turn? Records it; one turn fires once.

        A ``unique`` key (a transcript's message id) names one turn for good: it never
        fires again, even when its turn shows up as the latest once more (a transcript
        cut back). A screen key (a hash of the text) only has to differ from the last,
        and also from the text of the last turn read from a transcript (``text_key``),
        so a turn whose transcript vanished is not routed again from the screen.
        """
        self.completed = False
        seen = turn_key is None or turn_key == self.last_turn_key or turn_key in self._fired
        if seen or (not unique and text_key is not None and text_key == self.last_text_key):
            self.skip_reason = (
                "no answer" if turn_key is None else "already routed" if seen else "not new"
            )
            self.last_output_ms = None  # nothing new: wait for the next output
            self._recheck_at_ms = None
            return False
        self.last_turn_key = turn_key
        self.last_text_key = text_key
        if unique:
            self._fired[turn_key] = None  # type: ignore[index]
            if len(self._fired) > FIRED_KEYS_KEPT:
                del self._fired[next(iter(self._fired))]
        self.last_output_ms = None
        self._recheck_at_ms = None
        return True


class KeywordTrigger:
    """``on-keyword``: fire when ``pattern`` matches output that arrived since the last firing."""

    def __init__(self, pattern: str) -> None:
        self.regex = compile_pattern(pattern)
        self._window = ""

    def output(self, now_ms: float, text: str) -> Decision:
        # The whole chunk is searched (a flood arrives in chunks far over the window);
        # only the window's worth is kept for a match split across two chunks.
        window = self._window + text
        match = self.regex.search(window)
        if match is None:
            self._window = window[-KEYWORD_WINDOW_CHARS:]
            return Decision("wait")
        self._window = window[match.end() :][-KEYWORD_WINDOW_CHARS:]
        return Decision("fire", text=match.group(0))


class StreamTrigger:
    """``always``: every batch of new output is a round (batched while cooldown runs)."""

    def __init__(self, max_chars: int = 200_000) -> None:
        self.max_chars = max_chars
        self._pending = ""

    def output(self, now_ms: float, text: str) -> Decision:
        if text:
            self._pending = (self._pending + text)[-self.max_chars :]
        return Decision("fire") if self._pending.strip() else Decision("wait")

    def take(self) -> str:
        text, self._pending = self._pending, ""
        return text


def compile_pattern(pattern: str | None) -> re.Pattern[str]:
    """Compile an ``on-keyword`` pattern, or say what is wrong with it."""
    if not pattern:
        raise MadohubValueError(
            "trigger 'on-keyword' needs pattern=<regex>, e.g. pattern=r'DONE|LGTM'"
        )
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise MadohubValueError(
            f"pattern {pattern!r} is not a valid regular expression: {exc}"
        ) from exc


def check_completion_pattern(
    trigger: str, completion_pattern: str | None
) -> re.Pattern[str] | None:
    """Compile a route's ``completion_pattern`` (on-idle/on-complete only); one-line errors."""
    if completion_pattern is None:
        return None
    if trigger not in IDLE_TRIGGERS:
        raise MadohubValueError(
            f"completion_pattern= is used by triggers 'on-idle' and 'on-complete', not {trigger!r}"
        )
    return check_regex("completion_pattern", completion_pattern)


def check_trigger(trigger: str, pattern: str | None) -> str:
    """Validate a trigger name (and its pattern) when a route is made."""
    check_choice("trigger", trigger, TRIGGERS)
    if trigger == "on-keyword":
        compile_pattern(pattern)
    elif pattern is not None:
        raise MadohubValueError(f"pattern= is only used by trigger 'on-keyword', not {trigger!r}")
    return trigger


# Turn detectors: what a route asks its trigger ------------------------------------------


@dataclass(frozen=True)
class Heard:
    """What the route's listener brought since the last question.

    ``text``: the new output, decoded and ANSI stripped (``""``: none, e.g. the wait
    timed out). ``spoke_ms``: when a flooding source was seen speaking by polling
    (no bytes), or when a turn may have ended unseen (the stream was re-opened).
    """

    now_ms: float
    text: str = ""
    spoke_ms: float | None = None
    hook: HookEvent | None = None
    """The source agent's own end-of-turn hook, when one came (accepted by the channel)."""
    channel_turn: ChannelTurn | None = None
    """A turn the source's native channel reported ended, with its whole answer."""

    @property
    def quiet(self) -> bool:
        """Nothing was heard (the wait timed out, or the stream ended)."""
        return (
            not self.text and self.spoke_ms is None and self.hook is None
            and self.channel_turn is None
        )  # fmt: skip


@dataclass(frozen=True)
class Turn:
    """A finished turn of the source, as a detector found it.

    ``skipped``: the detector saw a finished turn and lets it go (``already routed``,
    ``not new``, ``no answer``); the route tells listeners and routes nothing.
    """

    found: Extraction | None
    extract_ms: float = 0.0
    skipped: str = ""
    signal: str = ""
    """Which evidence ended the turn (``hook``, ``status``, ``transcript``, ``screen``,
    ``quiet``); empty when the trigger is not about turns (keyword, always)."""


class TurnSource(Protocol):
    """The source as a detector sees it: its answer, its state, the clock, the route's timing."""

    def now_ms(self) -> float:
        """The route's clock (ms)."""

    async def answer(self) -> Extraction | None:
        """The source's last answer now (its agent's record, else its screen)."""

    async def state(self) -> str:
        """The source's state now (``idle``, ``busy``, ...)."""

    def cooldown_left_ms(self) -> float:
        """How long the route must still wait before a round (0 when it is not active)."""

    async def output_after(self, delay_s: float) -> str:
        """Wait ``delay_s`` seconds, then the output that arrived meanwhile (decoded)."""

    def signal(self) -> str:
        """Which evidence the source's last state read came from (``status``, ``screen``…)."""

    @property
    def reads_records(self) -> bool:
        """Answers may come from the agent's own words (its records, its hook's payload);
        False: from its screen only (``legacy`` dispatch)."""

    @property
    def keeps_record(self) -> bool:
        """The source's agent keeps a record of its turns (a transcript, a session file):
        an answer read from its screen means the record does not hold the turn yet."""

    @property
    def records_turn_ms(self) -> bool:
        """The source's record ends each turn with its duration, possibly after its hook."""

    @property
    def channel_ends_turns(self) -> bool:
        """The source has a live native channel: its turns end when it says (nothing else)."""


def text_key(found: Extraction | None) -> str | None:
    """The identity of an answer's text, whichever way it was read (transcript or screen)."""
    if found is None:
        return None
    return _text_key_of(found.text)


def _text_key_of(text: str) -> str:
    import hashlib

    return hashlib.sha1(" ".join(text.split()).encode("utf-8", "replace")).hexdigest()


class TurnDetector(Protocol):
    """A trigger as a route sees it: one question, asked whenever something was heard."""

    name: str
    """The trigger's name as the API and the round log spell it (``on-idle``, ...)."""
    pollable: bool
    """The detector can do without the bytes (a flooding source may be polled instead)."""

    async def start(self, source: TurnSource) -> None:
        """The route begins listening: note what already happened (never fire for it)."""

    def wait_s(self, now_ms: float) -> float | None:
        """How long to wait for output before asking again (None: until output comes)."""

    async def next_turn(self, heard: Heard, source: TurnSource) -> Turn | None:
        """The next finished turn, if what was heard (or the silence) makes one."""


async def _timed_answer(source: TurnSource) -> tuple[Extraction | None, float]:
    started = source.now_ms()
    found = await source.answer()
    return found, source.now_ms() - started


class IdleDetector:
    """``on-idle`` / ``on-complete``: completion evidence, silence, then a new answer."""

    def __init__(
        self,
        name: str,
        idle_delay_ms: Callable[[], int],
        completion_pattern: re.Pattern[str] | None = None,
    ) -> None:
        self.name = name
        self._idle_delay_ms = idle_delay_ms
        self.trigger = IdleTrigger(idle_delay_ms(), completion_pattern)
        # Without a completion pattern the bytes are not needed, only when the source spoke.
        self.pollable = completion_pattern is None
        self._completion = completion_pattern is not None
        self._hooked: OrderedDict[str, None] = OrderedDict()
        """Text keys of answers routed on a hook: the same turn read later is not new."""
        self._routed: OrderedDict[str, None] = OrderedDict()
        """Text keys of every turn this detector fired: a hook that arrives late (or twice)
        with an older turn's answer, which the record no longer shows last, is not new."""
        self._lag_checks = 0
        """Rereads of a record that still showed the last routed turn (RECORD_LAG_CHECKS)."""

    async def start(self, source: TurnSource) -> None:
        first = await source.answer()
        self.trigger.baseline(first.message_id if first else None, text_key(first))

    def wait_s(self, now_ms: float) -> float | None:
        self.trigger.idle_delay_ms = self._idle_delay_ms()  # a live setting
        due = self.trigger.next_check_ms()
        return None if due is None else max(0.0, (due - now_ms) / 1000)

    async def next_turn(self, heard: Heard, source: TurnSource) -> Turn | None:
        if heard.channel_turn is not None:
            return self._on_channel_turn(heard.channel_turn)
        by_channel = source.channel_ends_turns
        if heard.hook is not None:
            return None if by_channel else await self._on_hook(heard.hook, source)
        idle, now = self.trigger, heard.now_ms
        if by_channel:  # its channel says when a turn ends: the screen and silence do not
            return None
        rereading = self._lag_checks > 0
        if heard.text or heard.spoke_ms is not None:
            self._lag_checks, rereading = 0, False
        if heard.text:
            idle.output(now, heard.text)
        elif heard.spoke_ms is not None:
            idle.output(min(now, heard.spoke_ms))
        due = idle.next_check_ms()
        if due is None or now < due:
            return None
        if idle.evaluate(now, await source.state()).action != "fire":
            return None
        signal = "screen" if self._completion else source.signal()
        found, took_ms = await _timed_answer(source)
        unique = found is not None and found.method != "terminal"
        key = found.message_id if found else None
        if found is not None and self._hooked.pop(text_key(found) or "", False) is None:
            # The turn a hook routed already, now in its record: known by its key from now on.
            idle.accept(key, unique=unique, text_key=text_key(found))
            idle.skip_reason = "already routed"
            return Turn(found, took_ms, skipped="already routed", signal=signal)
        if not idle.accept(key, unique=unique, text_key=text_key(found)):
            if unique and idle.skip_reason == "already routed":
                # The screen said the turn is over; its record may not hold it yet.
                if self._lag_checks < RECORD_LAG_CHECKS:
                    self._lag_checks += 1
                    idle.check_again(now, RECHECK_MS)
                if rereading:
                    return None  # still the routed turn: said once already
            return Turn(found, took_ms, skipped=idle.skip_reason, signal=signal)
        self._lag_checks = 0
        self._remember(text_key(found))
        return Turn(found, took_ms, signal=signal)

    def _on_channel_turn(self, turn: ChannelTurn) -> Turn:
        """The source's channel reported a finished turn: its answer whole, its usage."""
        if turn.status != "completed" or not turn.answer.strip():
            why = "no answer" if turn.status == "completed" else f"turn {turn.status}"
            return Turn(None, skipped=why, signal="channel")
        usage = TurnUsage(
            model=turn.model, input_tokens=turn.input_tokens, output_tokens=turn.output_tokens,
            cache_read_tokens=turn.cache_read_tokens, complete=True, cost_usd=turn.cost_usd,
            measured_turn_ms=turn.turn_ms,
        )  # fmt: skip
        found = Extraction(
            turn.answer, "channel", None, message_id=f"channel:{turn.turn_id}", usage=usage,
            prompt=turn.prompt,
        )  # fmt: skip
        tkey = text_key(found)
        if not self.trigger.accept(found.message_id, unique=True, text_key=tkey):
            return Turn(found, skipped=self.trigger.skip_reason, signal="channel")
        self._remember(tkey)
        return Turn(found, signal="channel")

    def _remember(self, tkey: str | None) -> None:
        if tkey is None:
            return
        self._routed[tkey] = None
        self._routed.move_to_end(tkey)
        while len(self._routed) > FIRED_KEYS_KEPT:
            self._routed.popitem(last=False)

    async def _on_hook(self, hook: HookEvent, source: TurnSource) -> Turn | None:
        """The agent said its turn is over: fire now (no silence to wait for), once per turn.

        The answer is the hook's own (method ``hook``) where its payload carries one,
        else the agent's record (or screen) as read now. The record is read either way,
        so that the turn is known by its record's key too: the same turn seen later by
        the weaker signals (or hooked again) is ``already routed``.
        """
        if hook.kind != "stop":
            return None
        idle = self.trigger
        record, took_ms = await _timed_answer(source)
        found = record
        if hook.answer and hook.answer.strip() and source.reads_records:
            said = _text_key_of(hook.answer)
            waited_ms = 0
            while waited_ms < HOOK_RECORD_WAIT_MS and (
                _lacks_turn(record, said, source) or _lacks_duration(record, source)
            ):
                # The hook can come before the record holds its turn (Claude Code writes the
                # turn's usage after running its Stop hook, at times; on a session's first
                # turn its record has no answer yet, so the answer is read from the screen):
                # wait a little for it, so that the round has its model and tokens (a budget
                # must not see "unknown"). An agent that keeps no record: nothing to wait for.
                # Claude Code 2.1.197 always writes the turn's turn_duration after its Stop
                # hook: wait for that too, so that the round's turn_ms is the agent's own.
                heard = await source.output_after(HOOK_RECORD_POLL_MS / 1000)
                if heard:
                    idle.output(source.now_ms(), heard)
                waited_ms += HOOK_RECORD_POLL_MS
                record, more_ms = await _timed_answer(source)
                took_ms += more_ms
            same = record is not None and text_key(record) == said
            path = Path(hook.transcript_path) if hook.transcript_path else None
            found = Extraction(
                hook.answer,
                "hook",
                path or (record.path if record is not None else None),
                message_id=record.message_id if same and record is not None else None,
                usage=record.usage if same and record is not None else None,
                prompt=record.prompt if same and record is not None else None,
            )
        if found is None:
            return Turn(None, took_ms, skipped="no answer", signal="hook")
        tkey = text_key(found)
        assert tkey is not None
        key = found.message_id or f"hook:{tkey}"
        if found.message_id is None and (
            tkey in self._hooked or tkey == idle.last_text_key or tkey in self._routed
        ):
            # Not the record's last answer, and an answer routed before: a hook that came
            # again, or late (a newer turn is on record), never a new turn.
            return Turn(found, took_ms, skipped="already routed", signal="hook")
        if not idle.accept(key, unique=found.method != "terminal", text_key=tkey):
            return Turn(found, took_ms, skipped=idle.skip_reason, signal="hook")
        if found.message_id is None:  # the record lags (or differs): it may show this turn later
            self._hooked[tkey] = None
            while len(self._hooked) > FIRED_KEYS_KEPT:
                self._hooked.popitem(last=False)
        self._remember(tkey)
        return Turn(found, took_ms, signal="hook")


def _lacks_duration(record: Extraction | None, source: TurnSource) -> bool:
    """The record holds the turn but not yet the duration it writes at the turn's end."""
    if record is None or record.usage is None or not source.records_turn_ms:
        return False
    return record.method != "terminal" and record.usage.turn_ms is None


def _lacks_turn(record: Extraction | None, said: str, source: TurnSource) -> bool:
    """The source's record does not hold the hooked answer (text key ``said``) yet: nothing
    read, a screen read of an agent that keeps a record, or another answer."""
    if record is None:
        return True
    if record.method == "terminal":
        return source.keeps_record
    return text_key(record) != said


class KeywordDetector:
    """``on-keyword``: a match in new output ends a turn; its answer is routed, else the match."""

    name = "on-keyword"
    pollable = False

    def __init__(self, pattern: str) -> None:
        self.trigger = KeywordTrigger(pattern)

    async def start(self, source: TurnSource) -> None:
        return None

    def wait_s(self, now_ms: float) -> float | None:
        return None

    async def next_turn(self, heard: Heard, source: TurnSource) -> Turn | None:
        if not heard.text:
            return None
        decision = self.trigger.output(heard.now_ms, heard.text)
        if decision.action != "fire":
            return None
        found, took_ms = await _timed_answer(source)
        # No answer yet (the match is mid-turn): route what matched.
        return Turn(found or Extraction(decision.text, "terminal", None), took_ms)


class StreamDetector:
    """``always``: every batch of new output is a turn; output during the cooldown joins it."""

    name = "always"
    pollable = False

    def __init__(self) -> None:
        self.trigger = StreamTrigger()

    async def start(self, source: TurnSource) -> None:
        return None

    def wait_s(self, now_ms: float) -> float | None:
        return None

    async def next_turn(self, heard: Heard, source: TurnSource) -> Turn | None:
        if not heard.text:
            return None
        self.trigger.output(heard.now_ms, heard.text)
        left = source.cooldown_left_ms()
        if left > 0:
            self.trigger.output(source.now_ms(), await source.output_after(left / 1000))
        chunk = self.trigger.take()
        return Turn(Extraction(chunk, "terminal", None)) if chunk.strip() else None


def make_detector(
    trigger: str,
    *,
    pattern: str | None,
    idle_delay_ms: Callable[[], int],
    completion_pattern: re.Pattern[str] | None = None,
) -> TurnDetector:
    """The detector of a trigger named as the API names it (checked by :func:`check_trigger`)."""
    check_trigger(trigger, pattern)
    if trigger in IDLE_TRIGGERS:
        return IdleDetector(trigger, idle_delay_ms, completion_pattern)
    if trigger == "on-keyword":
        return KeywordDetector(pattern or "")
    return StreamDetector()
