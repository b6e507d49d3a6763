"""The transform stage: turn a source agent's output into the target's prompt.

Five transforms (``defaults.TRANSFORMS``):

- ``prompt-wrap``: a user template with ``{output}``, ``{round}``, ``{maxRounds}``,
  ``{source}``, ``{target}`` and ``{answers}`` (each answer under its source's name: a
  gather's answers, or a route's one); any other brace text is kept as written.
- ``full-output`` / ``raw``: the last 30 / 10 lines of the terminal, as they are.
- ``ai-routing``: an Anthropic model writes a context-aware prompt for the target.
- ``summary``: an Anthropic model summarises the output; the summary is the prompt.

Templates are checked when the spec is made (a route is created): only the six
placeholders are filled, every other brace text (JSON, code) stays verbatim, and a
slot that is almost a placeholder (``{ouput}``, ``{Round}``) is a ``MadohubWarning``
then, not a puzzling round later. Rendering substitutes placeholders in
one pass and never interprets what it inserts: an agent's output containing
``{round}`` or ``{__class__}`` comes out verbatim.

The AI transforms call the real ``anthropic.AsyncAnthropic`` client. Every API
failure becomes a ``TransformError`` naming the reason; the API key never
appears in a message or a repr.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from .. import defaults
from ..agents.regex import lazy_compile
from ..errors import MadohubValueError, MadohubWarning, TransformError
from ..secrets import scrub_secrets

API_KEY_ENV = "ANTHROPIC_API_KEY"

DEFAULT_TEMPLATE = (
    "Here is the latest output from {source} (round {round} of {maxRounds}):\n"
    "\n"
    "{output}\n"
    "\n"
    "Please review it and reply."
)
"""What ``prompt-wrap`` uses when no template is given."""

ROUTING_INSTRUCTION = (
    "Write the next prompt for {target} so that it can act on this output from {source}."
)
SUMMARY_INSTRUCTION = "Summarise this output from {source} for {target}."

ROUTING_SYSTEM = (
    "You relay work between AI coding agents that run in terminals. The agent "
    "{source!r} has just finished a turn; its output is given below. Your reply is "
    "typed verbatim into the agent {target!r} (a {target_kind} agent) as its next "
    "prompt. This is hand-off {round} of at most {max_rounds}. Write a clear, "
    "self-contained prompt that tells {target!r} what to do next, keeping file names, "
    "commands, errors and decisions it needs. Reply with the prompt only: no preamble, "
    "no quotes, no commentary about the hand-off."
)
SUMMARY_SYSTEM = (
    "You summarise the output of the AI coding agent {source!r} so that the agent "
    "{target!r} (a {target_kind} agent) can act on it; your reply is typed into "
    "{target!r} verbatim (hand-off {round} of at most {max_rounds}). Keep results, "
    "decisions, file names, commands, errors and open questions; drop chatter. "
    "Reply with the summary only."
)

_CUT_MARKER = "[… {count} earlier characters cut …]\n"


# Templates --------------------------------------------------------------------


@dataclass(frozen=True)
class Placeholder:
    """A ``{name}`` slot in a template."""

    name: str


@dataclass(frozen=True)
class Template:
    """A template parsed once into literal text and placeholders."""

    text: str
    parts: tuple[str | Placeholder, ...]
    near_misses: tuple[tuple[str, str], ...] = ()
    """``(slot, meant placeholder)`` for slots that look like a mistyped placeholder."""

    @property
    def placeholders(self) -> frozenset[str]:
        """The placeholder names the template uses."""
        return frozenset(p.name for p in self.parts if isinstance(p, Placeholder))

    def render(self, values: Mapping[str, str]) -> str:
        """Substitute every placeholder once; inserted values are never re-read."""
        return "".join(p if isinstance(p, str) else values[p.name] for p in self.parts)


def _allowed_text() -> str:
    return "placeholders: " + ", ".join("{" + n + "}" for n in defaults.TEMPLATE_PLACEHOLDERS)


# One token at a time, tried in order: a placeholder wrapped in an escape pair
# ("{{{output}}}": literal braces around the value), an escape pair around brace-free text
# ("{{x}}" -> "{x}"), a "{name}" slot, a "{name...}" slot with a conversion, format spec,
# attribute or index (left verbatim, but checked for near misses).
_TOKEN = lazy_compile(
    r"\{\{\{(?P<wrapped>" + "|".join(defaults.TEMPLATE_PLACEHOLDERS) + r")\}\}\}"
    r"|\{\{(?P<escaped>[^{}]*)\}\}"
    r"|\{(?P<name>\w+)\}"
    r"|\{(?P<fancy>\w+)[!:.\[][^{}]*\}"
)


def near_miss(slot: str) -> str | None:
    """The known placeholder ``slot`` was probably meant to be, or None.

    ``{ouput}``, ``{Round}``, ``{max_rounds}`` are near misses (edit distance or
    case); so is a known name with a format spec (``{round:>3}``), which is not filled.
    """
    import difflib

    name = re.match(r"\{(\w+)", slot)
    if name is None:
        return None
    word = name.group(1)
    if word in defaults.TEMPLATE_PLACEHOLDERS:
        return word if slot != "{" + word + "}" else None
    folded = {n.lower().replace("_", ""): n for n in defaults.TEMPLATE_PLACEHOLDERS}
    key = word.lower().replace("_", "")
    if key in folded:
        return folded[key]
    close = difflib.get_close_matches(key, list(folded), n=1, cutoff=0.8)
    return folded[close[0]] if close else None


def parse_template(text: str) -> Template:
    """Parse ``text`` into a ``Template``: known ``{name}`` slots are filled, all else is verbatim.

    Only ``{output}``, ``{round}``, ``{maxRounds}``, ``{source}``,
    ``{target}`` and ``{answers}`` are placeholders. Other brace text (JSON, code, ``{round:>3}``)
    stays as written; ``{{text}}`` around brace-free text is the literal
    ``{text}`` (as in ``str.format``), so ``{{output}}`` writes ``{output}``.
    Slots that look like a mistyped placeholder are listed in
    ``Template.near_misses`` (see :func:`warn_near_misses`).
    """
    if not isinstance(text, str):
        raise MadohubValueError(f"template must be a string, got {type(text).__name__}")
    parts: list[str | Placeholder] = []
    literal: list[str] = []
    misses: list[tuple[str, str]] = []

    def slot(name: str) -> None:
        if literal:
            parts.append("".join(literal))
            literal.clear()
        parts.append(Placeholder(name))

    i = 0
    while i < len(text):
        match = _TOKEN.match(text, i) if text[i] == "{" else None
        if match is None:
            literal.append(text[i])
            i += 1
            continue
        i = match.end()
        token = match.group(0)
        wrapped, name = match.group("wrapped"), match.group("name")
        if wrapped is not None:
            literal.append("{")
            slot(wrapped)
            literal.append("}")
        elif match.group("escaped") is not None:
            literal.append("{" + match.group("escaped") + "}")
        elif name is not None and name in defaults.TEMPLATE_PLACEHOLDERS:
            slot(name)
        else:
            literal.append(token)
            meant = near_miss(token)
            if meant is not None:
                misses.append((token, meant))
    if literal:
        parts.append("".join(literal))
    return Template(text, tuple(parts), tuple(misses))


def user_stacklevel() -> int:
    """The ``stacklevel`` of the first caller outside madohub_nb (the user's cell or script)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    level, frame = 1, sys._getframe(1)
    # "<string>": the __init__ that dataclasses generate.
    while frame is not None and (
        frame.f_code.co_filename.startswith(package) or frame.f_code.co_filename == "<string>"
    ):
        level, frame = level + 1, frame.f_back  # type: ignore[assignment]
    return level


def warn_near_misses(template: Template) -> None:
    """Warn (``MadohubWarning``) once per slot that is almost a placeholder; it stays verbatim.

    The warning points at the user's line (``hub.connect(...)``), not at the toolkit.
    """
    for token, meant in template.near_misses:
        warnings.warn(
            f"template slot {token} is not a placeholder and is kept verbatim "
            f"(did you mean {{{meant}}}?); {_allowed_text()}",
            MadohubWarning,
            stacklevel=user_stacklevel(),
        )


# Specs and contexts -----------------------------------------------------------


@dataclass(frozen=True)
class Transform:
    """What one transform does, as data: the route and the round ask it, never its name.

    ``needs_ai``: it calls the Anthropic API (a key is needed when the route is made).
    ``screen_lines``: it passes the last that many lines of the source's terminal as
    they are (``full-output``, ``raw``), so the round reads the scrollback and there
    is no template. ``default_template``: what ``prompt-wrap`` renders without one.
    ``system`` / ``instruction``: an AI transform's system prompt and default request.
    """

    name: str
    needs_ai: bool = False
    screen_lines: int | None = None
    default_template: str | None = None
    system: str | None = None
    instruction: str | None = None

    @property
    def reads_screen(self) -> bool:
        """It needs the source's terminal lines (the round reads the scrollback for it)."""
        return self.screen_lines is not None

    @property
    def takes_template(self) -> bool:
        return not self.reads_screen

    def render(self, spec: TransformSpec, ctx: TransformContext) -> str:
        """The prompt of a transform that calls no API (``prompt-wrap``, ``full-output``, ``raw``)."""
        if self.needs_ai:
            raise MadohubValueError(
                f"transform {self.name!r} calls the Anthropic API; "
                "use 'await apply(spec, ctx, ai=...)'"
            )
        if self.screen_lines is not None:
            return _terminal_tail(ctx, self.screen_lines, self.name)
        assert spec.parsed is not None  # set by TransformSpec for a templated transform
        return spec.parsed.render(ctx.values())

    async def apply(
        self, spec: TransformSpec, ctx: TransformContext, ai: AIClientConfig | None
    ) -> TransformResult:
        """The prompt for the target, and what an AI call cost."""
        if not self.needs_ai:
            return TransformResult(self.render(spec, ctx))
        if not ctx.output.strip():
            raise TransformError(
                f"nothing to transform: the output of {ctx.source!r} is empty ({self.name})"
            )
        return await _call_model(spec, ctx, ai or AIClientConfig())


TRANSFORM_TYPES: Final[Mapping[str, Transform]] = {
    t.name: t
    for t in (
        Transform("ai-routing", needs_ai=True, system=ROUTING_SYSTEM, instruction=ROUTING_INSTRUCTION),
        Transform("prompt-wrap", default_template=DEFAULT_TEMPLATE),
        Transform("full-output", screen_lines=defaults.FULL_OUTPUT_LINES),
        Transform("raw", screen_lines=defaults.RAW_LINES),
        Transform("summary", needs_ai=True, system=SUMMARY_SYSTEM, instruction=SUMMARY_INSTRUCTION),
    )
}  # fmt: skip
"""Every transform by name, in the order of ``defaults.TRANSFORMS``."""


def transform_named(name: object) -> Transform:
    """The transform called ``name``, or a teaching error listing the transforms."""
    found = TRANSFORM_TYPES.get(name) if isinstance(name, str) else None
    if found is None:
        raise MadohubValueError(
            f"unknown transform {name!r}; allowed: {', '.join(defaults.TRANSFORMS)}"
        )
    return found


@dataclass(frozen=True)
class TransformSpec:
    """A validated transform choice: its name, template and (for AI transforms) model.

    ``template`` is the prompt-wrap template, or the custom instruction of an AI
    transform; ``full-output`` and ``raw`` take none. ``model`` only matters to
    AI transforms (None: the client config's model).
    """

    name: str
    template: str | None = None
    model: str | None = None
    parsed: Template | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kind = transform_named(self.name)
        if self.model is not None and (not isinstance(self.model, str) or not self.model.strip()):
            raise MadohubValueError(f"model must be a non-empty string or None, got {self.model!r}")
        text = self.template if self.template is not None else kind.default_template
        if text is None:
            return
        if not kind.takes_template:
            raise MadohubValueError(
                f"transform {self.name!r} takes no template (it passes terminal lines as they are); "
                "use transform='prompt-wrap' to wrap the output in a template"
            )
        parsed = parse_template(text)
        warn_near_misses(parsed)
        if not text.strip():
            raise MadohubValueError(
                f"template for {self.name!r} is empty; give some text or leave it out for the default"
            )
        object.__setattr__(self, "parsed", parsed)

    @property
    def transform(self) -> Transform:
        """What this transform does (its name was checked when the spec was made)."""
        return TRANSFORM_TYPES[self.name]

    @property
    def is_ai(self) -> bool:
        """Whether this transform calls the Anthropic API."""
        return self.transform.needs_ai


def make_transform_spec(
    name: str, template: str | None = None, model: str | None = None
) -> TransformSpec:
    """Validate and build a ``TransformSpec`` (MadohubValueError on a bad name or template)."""
    return TransformSpec(name, template, model)


def answer_heading(source: str) -> str:
    """The line that puts an answer under its source's name in ``{answers}``."""
    return f"--- {source} ---"


@dataclass
class TransformContext:
    """What a transform may use for one round.

    ``output`` is the extracted answer; ``screen_lines`` the terminal output
    (ANSI already stripped), used by ``full-output`` and ``raw``.
    """

    output: str
    screen_lines: list[str]
    round: int
    max_rounds: int
    source: str
    target: str
    target_kind: str
    answers: str | None = None
    """A gather's answers, each under its source's name (None: a route's one answer)."""

    def values(self) -> dict[str, str]:
        """Placeholder values for template rendering."""
        answers = self.answers
        if answers is None:  # (the one answer under its source's name, as a gather writes it)
            answers = f"{answer_heading(self.source)}\n{self.output.strip()}"
        return {
            "answers": answers,
            "output": self.output,
            "round": str(self.round),
            "maxRounds": str(self.max_rounds),
            "source": self.source,
            "target": self.target,
        }


# API key and client config ------------------------------------------------------


def resolve_api_key(explicit: str | None) -> str | None:
    """The API key to use: ``explicit`` if set, else ``$ANTHROPIC_API_KEY``, else None."""
    if explicit is not None and explicit.strip():
        return explicit.strip()
    env = os.environ.get(API_KEY_ENV, "").strip()
    return env or None


def _missing_key_hint() -> str:
    return (
        "set one with Hub(api_key=...), %config MadoHub.api_key = '...', "
        f"or the {API_KEY_ENV} environment variable"
    )


def require_ai_key(transform_name: str, api_key: str | None) -> str | None:
    """Refuse an AI transform with no API key anywhere; return the key that will be used.

    Called when a route is made, so the missing key is reported then rather
    than as a failed round. Non-AI transforms need no key (returns the key or None).
    """
    key = resolve_api_key(api_key)
    if transform_named(transform_name).needs_ai and key is None:
        raise MadohubValueError(
            f"transform {transform_name!r} calls the Anthropic API but no API key is set; "
            + _missing_key_hint()
        )
    return key


@dataclass(frozen=True)
class AIClientConfig:
    """How to reach the Anthropic API. The key is resolved (env fallback) at call time.

    ``base_url`` None means the SDK's default (which honours ``ANTHROPIC_BASE_URL``).
    """

    api_key: str | None = None
    base_url: str | None = None
    model: str = defaults.DEFAULT_MODEL
    timeout_s: float = defaults.AI_TIMEOUT_S
    max_retries: int = defaults.AI_MAX_RETRIES

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model.strip():
            raise MadohubValueError(f"model must be a non-empty string, got {self.model!r}")
        if (
            isinstance(self.timeout_s, bool)
            or not isinstance(self.timeout_s, int | float)
            or not self.timeout_s > 0
        ):
            raise MadohubValueError(
                f"timeout_s must be a number of seconds above 0, got {self.timeout_s!r}"
            )
        defaults.check_range("max_retries", self.max_retries, defaults.AI_MAX_RETRIES_RANGE)

    def __repr__(self) -> str:
        key = "set" if resolve_api_key(self.api_key) else "unset"
        return (
            f"AIClientConfig(api_key={key}, base_url={self.base_url!r}, model={self.model!r}, "
            f"timeout_s={self.timeout_s!r}, max_retries={self.max_retries!r})"
        )

    __str__ = __repr__


# Running transforms --------------------------------------------------------------


def _tail(lines: list[str], count: int) -> list[str]:
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    return lines[max(0, end - count) : end]


def _terminal_tail(ctx: TransformContext, count: int, name: str) -> str:
    lines = ctx.screen_lines or ctx.output.splitlines()
    tail = _tail(lines, count)
    if not tail:
        raise TransformError(
            f"nothing to transform: the terminal output of {ctx.source!r} is empty ({name})"
        )
    return "\n".join(tail)


def apply_sync(spec: TransformSpec, ctx: TransformContext) -> str:
    """Run a non-AI transform (``prompt-wrap``, ``full-output``, ``raw``) and return the prompt.

    An empty output still renders through ``prompt-wrap``; ``full-output`` and
    ``raw`` fall back to the output's lines when there are no screen lines, and
    raise TransformError when there is nothing at all.
    """
    return spec.transform.render(spec, ctx)


def _cut(text: str, limit: int = defaults.MAX_ROUTED_CHARS) -> str:
    """Keep the last ``limit`` characters (the end of an answer matters most)."""
    if len(text) <= limit:
        return text
    return _CUT_MARKER.format(count=len(text) - limit) + text[-limit:]


def build_ai_request(spec: TransformSpec, ctx: TransformContext) -> tuple[str, str]:
    """The ``(system, user message)`` an AI transform sends, without calling anything.

    The instruction is the rendered custom template, or a default one. When the
    template places ``{output}`` itself, the rendered template is the whole
    message; otherwise the output follows it in a ``<source_output>`` block.
    """
    kind = spec.transform
    if kind.system is None or kind.instruction is None:
        raise MadohubValueError(f"transform {spec.name!r} calls no model; it has no AI request")
    system = kind.system.format(
        source=ctx.source,
        target=ctx.target,
        target_kind=ctx.target_kind,
        round=ctx.round,
        max_rounds=ctx.max_rounds,
    )
    values = {**ctx.values(), "output": _cut(ctx.output)}
    template = spec.parsed
    if template is None:
        template = parse_template(kind.instruction)
    message = template.render(values)
    if "output" not in template.placeholders:
        message = f"{message}\n\n<source_output>\n{values['output']}\n</source_output>"
    return system, message


def scrub(text: str, api_key: str | None) -> str:
    """``text`` with the API key (and anything key-shaped) replaced by ``[api key]``."""
    return scrub_secrets(text, [api_key] if api_key else (), marker="[api key]")


def _has_cause(err: BaseException, kind: type[BaseException]) -> bool:
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _describe_api_error(err: Exception, config: AIClientConfig, base_url: str) -> str:
    import anthropic

    attempts = f"{config.max_retries + 1} attempt{'s' if config.max_retries else ''}"
    if isinstance(err, anthropic.APITimeoutError):
        return f"timed out after {config.timeout_s:g}s ({attempts}) waiting for {base_url}"
    if isinstance(err, anthropic.APIConnectionError):
        if _has_cause(err, ConnectionRefusedError):
            return f"connection refused to {base_url} ({attempts})"
        cause = err.__cause__
        return f"could not reach {base_url} ({attempts}): {cause or err}"
    if isinstance(err, anthropic.APIStatusError):
        kind = f" {err.type}" if isinstance(err.type, str) else ""
        detail = err.api_message if isinstance(err.api_message, str) else str(err.body)[:300]
        hint = {
            401: "; check the API key",
            403: "; the API key may not have access to this model",
            404: f"; check the model name {config.model!r} and the base URL",
            429: f"; still rate limited after {attempts}",
            529: f"; the API is overloaded (after {attempts})",
        }.get(err.status_code, f" (after {attempts})" if err.status_code >= 500 else "")
        return f"API error {err.status_code}{kind}: {detail}{hint}"
    if isinstance(err, anthropic.APIResponseValidationError | ValueError):
        return f"malformed response from {base_url}: {err}"
    return f"{type(err).__name__}: {err}"


def _reply_text(message: object) -> str:
    content = getattr(message, "content", None)
    if not isinstance(content, list):
        raise TypeError("the response has no content list")
    return "".join(
        str(getattr(block, "text", "")) for block in content if getattr(block, "type", "") == "text"
    )


@dataclass(frozen=True)
class AIUsage:
    """What one AI transform call cost, as the API's ``usage`` reported it (None: not reported)."""

    model: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None


@dataclass(frozen=True)
class TransformResult:
    """A transform's prompt, and the AI call's usage (None for the non-AI transforms)."""

    prompt: str
    usage: AIUsage | None = None


def _usage_count(usage: object, name: str) -> int | None:
    value = getattr(usage, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _ai_usage(response: object, requested_model: str) -> AIUsage:
    """The SDK response's ``usage`` and model; malformed or missing counts become None."""
    model = getattr(response, "model", None)
    usage = getattr(response, "usage", None)
    return AIUsage(
        model=model if isinstance(model, str) and model else requested_model,
        input_tokens=_usage_count(usage, "input_tokens"),
        output_tokens=_usage_count(usage, "output_tokens"),
        cache_read_tokens=_usage_count(usage, "cache_read_input_tokens"),
        cache_write_tokens=_usage_count(usage, "cache_creation_input_tokens"),
    )


async def _call_model(
    spec: TransformSpec, ctx: TransformContext, config: AIClientConfig
) -> TransformResult:
    api_key = resolve_api_key(config.api_key)
    if api_key is None:
        raise TransformError(
            f"transform {spec.name!r} needs an Anthropic API key; " + _missing_key_hint()
        )
    # Imported here: the SDK takes seconds to import and only AI transforms need it.
    import anthropic

    system, message = build_ai_request(spec, ctx)
    model = spec.model or config.model
    client = anthropic.AsyncAnthropic(
        api_key=api_key,
        base_url=config.base_url,
        timeout=config.timeout_s,
        max_retries=config.max_retries,
    )
    base_url = str(client.base_url).rstrip("/")
    try:
        async with client:
            response = await client.messages.create(
                model=model,
                max_tokens=defaults.AI_MAX_TOKENS,
                system=system,
                messages=[{"role": "user", "content": message}],
            )
            text = _reply_text(response)
    except (anthropic.AnthropicError, ValueError, TypeError) as err:
        reason = scrub(_describe_api_error(err, config, base_url), api_key)
        # "from None": the SDK's exception chain may carry request headers.
        raise TransformError(f"{spec.name} transform failed (model {model}): {reason}") from None
    if not text.strip():
        stop = getattr(response, "stop_reason", None)
        raise TransformError(
            f"{spec.name} transform failed (model {model}): the model returned no text "
            f"(stop_reason {stop!r})"
        )
    return TransformResult(text.strip(), _ai_usage(response, model))


async def apply(
    spec: TransformSpec, ctx: TransformContext, *, ai: AIClientConfig | None = None
) -> str:
    """Run any transform and return the prompt for the target.

    AI transforms use ``ai`` (None: defaults, key from the environment) and
    refuse an empty output with TransformError ("nothing to transform").
    """
    return (await apply_with_usage(spec, ctx, ai=ai)).prompt


async def apply_with_usage(
    spec: TransformSpec, ctx: TransformContext, *, ai: AIClientConfig | None = None
) -> TransformResult:
    """``apply``, also returning what the AI call cost (the SDK's ``usage``)."""
    return await spec.transform.apply(spec, ctx, ai)
