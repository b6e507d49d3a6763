"""An approval route's hand-off to the inbox: each prompt waits for a person.

With ``approve=True`` a round's prompt waits in ``hub.inbox`` to be approved, edited or
rejected (or to expire after ``approve_timeout_s``) before anything is typed. The route
reads no new turn meanwhile; once decided, its next round routes the source's newest
finished turn (turns in between are not routed one by one).
"""

from __future__ import annotations

from ..io.log import RoundRecord
from .inbox import Approval
from .route_context import RouteContext
from .route_state import RouteStates


class RouteApprovals:
    """The prompts of one route that wait for a person (engine loop)."""

    def __init__(
        self,
        context: RouteContext,
        route_id: str,
        target: str,
        states: RouteStates,
        *,
        approve: bool,
        timeout_s: float | None,
    ) -> None:
        self._context = context
        self._route_id = route_id
        self._target = target
        self._states = states
        self.approve = approve
        """Every prompt waits in ``hub.inbox`` for a person to approve, edit or reject it."""
        self.timeout_s = timeout_s
        """An unanswered prompt expires after this long (nothing typed); None: it waits."""
        self._waiting: Approval | None = None
        """The prompt waiting for a person now."""

    async def wait_for_person(self, prompt: str) -> tuple[str, str]:
        """The prompt waits in the inbox: the person's decision and the text to type."""
        approval = self._context.inbox.open_approval(self._route_id, self._target, prompt)
        self._waiting = approval
        if self._states.state == "stopped":
            approval.expire(f"route {self._route_id} was stopped")
        verdict = await approval.verdict(self.timeout_s)
        return verdict.decision, verdict.text

    def expire(self, reason: str) -> None:
        """The route stopped: the prompt waiting now (if any) expires, nothing typed."""
        if self._waiting is not None:
            self._waiting.expire(reason)

    def round_over(self) -> Approval | None:
        """The round's approval, if it had one (an unanswered one is abandoned: the round
        ended without its answer, as when the hub closes)."""
        approval, self._waiting = self._waiting, None
        if approval is not None and approval.ask.open:  # (cancelled: the hub closed)
            approval.abandon("its round ended before anyone answered (the hub closed)")
        return approval

    def done(self, approval: Approval, rec: RoundRecord) -> None:
        """Tell the inbox how the approved (or rejected) prompt's round ended."""
        self._context.inbox.approval_done(approval, rec)
