"""Paused runs (human-in-the-loop approvals) stored versioned in the conversation.

A run that stops on a tool needing approval (``result.interruptions``) is saved as the conversation's
``paused_run`` state document (``RunState.to_json()``), and the conversation's status becomes
``awaiting_approval``. Any process can later :meth:`PausedRuns.claim` it — a compare-and-swap on the
document's version, so two approvers clicking at once cannot both resume it — approve or reject the tool
calls, run it to the end with the same session, and :meth:`PausedRuns.finish` it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from agents import Agent, RunState
from agents.items import ToolApprovalItem
from agents.result import RunResult, RunResultStreaming
from agents.run_state import ContextDeserializer, ContextOverride, ContextSerializer

from pgagentstate import AsyncStateStore, StateRef
from pgagentstate.errors import NotFound, VersionConflict
from pgagentstate.models import StateDoc

from .session import FRAMEWORK

PAUSED = "paused"
RESUMING = "resuming"
FINISHED = "finished"


@dataclass(frozen=True, slots=True)
class PausedRun:
    """A paused run loaded back: ``state`` is ready for ``approve``/``reject`` and ``Runner.run``."""

    conversation_id: str
    state: RunState[Any, Agent[Any]]
    version: int
    status: str

    @property
    def interruptions(self) -> list[ToolApprovalItem]:
        """The tool calls waiting for a decision."""
        return self.state.get_interruptions()


class PausedRuns:
    """Save, claim and finish paused runs of conversations.

    Args:
        store: The store (its tenant applies).
        name: Name of the conversation state document holding the run.
        app: App recorded on conversations created by :meth:`save`.
    """

    def __init__(self, store: AsyncStateStore, *, name: str = "paused_run", app: str = "") -> None:
        self.store = store
        self.name = name
        self.app = app

    def ref(self, conversation_id: str) -> StateRef:
        """Where the paused run of ``conversation_id`` is stored."""
        return StateRef.conversation(conversation_id, name=self.name)

    async def save(
        self,
        conversation_id: str,
        run: RunResult | RunResultStreaming | RunState[Any, Any],
        *,
        expected_version: int | None = None,
        user_id: str = "",
        context_serializer: ContextSerializer | None = None,
        strict_context: bool = False,
    ) -> int:
        """Store a paused run (a result with ``interruptions`` or its ``RunState``); return its version.

        ``expected_version``: None overwrites, 0 requires that no run was ever paused here, n requires the
        stored document to be at version n (else ``VersionConflict``).
        """
        state = run if isinstance(run, RunState) else run.to_state()
        if not state.get_interruptions():
            raise ValueError("the run is not paused: it has no interruptions waiting for approval")
        data = {
            "status": PAUSED,
            "run_state": state.to_json(context_serializer=context_serializer, strict_context=strict_context),
            # Enough for an approval screen, without loading the run (which needs the Agent objects).
            "pending": [_describe(item) for item in state.get_interruptions()],
            "paused_at": time.time(),
        }
        await self.store.ensure_conversation(conversation_id, app=self.app, framework=FRAMEWORK,
                                             user_id=user_id)
        doc = await self.store.put_state(self.ref(conversation_id), data, expected_version=expected_version)
        await self.store.update_conversation(conversation_id, status="awaiting_approval")
        return doc.version

    async def pending(self, conversation_id: str) -> list[dict[str, Any]]:
        """The tool calls awaiting approval in ``conversation_id`` (empty when nothing is paused)."""
        doc = await self.store.get_state(self.ref(conversation_id))
        if doc is None or doc.data.get("status") != PAUSED:
            return []
        return list(doc.data.get("pending") or [])

    async def load(
        self,
        conversation_id: str,
        agent: Agent[Any],
        *,
        context_override: ContextOverride | None = None,
        context_deserializer: ContextDeserializer | None = None,
        strict_context: bool = False,
    ) -> PausedRun | None:
        """The paused run of ``conversation_id``, or None when no run is waiting for approval."""
        doc = await self.store.get_state(self.ref(conversation_id))
        if doc is None or doc.data.get("status") != PAUSED:
            return None
        return await self._restore(conversation_id, doc, agent, context_override, context_deserializer,
                                   strict_context)

    async def claim(
        self,
        conversation_id: str,
        agent: Agent[Any],
        *,
        reclaim_after: float | None = None,
        context_override: ContextOverride | None = None,
        context_deserializer: ContextDeserializer | None = None,
        strict_context: bool = False,
    ) -> PausedRun:
        """Take the paused run for resuming, so no other process resumes it too.

        Raises ``NotFound`` when nothing is paused, ``VersionConflict`` when another process claimed or
        changed it first. A claim older than ``reclaim_after`` seconds (its process presumably died) may be
        taken over.
        """
        doc = await self.store.get_state(self.ref(conversation_id))
        status = doc.data.get("status") if doc else None
        stale = (
            doc is not None and status == RESUMING and reclaim_after is not None
            and time.time() - float(doc.data.get("claimed_at") or 0) >= reclaim_after
        )
        if doc is None or (status != PAUSED and not stale):
            if doc is not None and status == RESUMING:
                raise VersionConflict(doc.version, doc.version, what=f"paused run of {conversation_id!r} "
                                      "(already claimed by another process)")
            raise NotFound(f"conversation {conversation_id!r} has no paused run")
        claimed = await self.store.put_state(
            self.ref(conversation_id), {**doc.data, "status": RESUMING, "claimed_at": time.time()},
            expected_version=doc.version,
        )
        return await self._restore(conversation_id, claimed, agent, context_override, context_deserializer,
                                   strict_context)

    async def finish(
        self,
        conversation_id: str,
        result: RunResult | RunResultStreaming,
        *,
        version: int,
        context_serializer: ContextSerializer | None = None,
        strict_context: bool = False,
    ) -> int:
        """Record how a claimed run ended; return the document's new version.

        A result that paused again (new interruptions) is saved as the next paused run; otherwise the run is
        marked finished and the conversation is active again. ``version`` is :attr:`PausedRun.version`.
        """
        if result.interruptions:
            return await self.save(conversation_id, result, expected_version=version,
                                   context_serializer=context_serializer, strict_context=strict_context)
        doc = await self.store.put_state(
            self.ref(conversation_id), {"status": FINISHED, "finished_at": time.time()}, expected_version=version
        )
        await self.store.update_conversation(conversation_id, status="active")
        return doc.version

    async def _restore(
        self, conversation_id: str, doc: StateDoc, agent: Agent[Any], context_override: ContextOverride | None,
        context_deserializer: ContextDeserializer | None, strict_context: bool,
    ) -> PausedRun:
        state = await RunState.from_json(agent, doc.data["run_state"], context_override=context_override,
                                         context_deserializer=context_deserializer, strict_context=strict_context)
        return PausedRun(conversation_id, state, doc.version, str(doc.data.get("status")))


def _describe(item: ToolApprovalItem) -> dict[str, Any]:
    raw = item.raw_item
    get = raw.get if isinstance(raw, dict) else lambda k, d=None: getattr(raw, k, d)
    return {"tool_name": item.tool_name, "call_id": get("call_id"), "arguments": get("arguments"),
            "agent": item.agent.name if item.agent else None}
