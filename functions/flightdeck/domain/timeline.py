"""A session's timeline, derived from what its state already holds: nothing is written for it.

From the session (its messages, status and turn) and the results recorded so far for the
turn it waits on, in order:

  message            a user message (a chat message, or a task from a caller)
  thinking           a think of the model: one per assistant message, and the one under way
  delegating         a delegating tool call: the agent and the task
  tool_call          a local tool call
  callback_accepted  a delegate's answer recorded (its status: success or error)
  timeout            no answer before the turn's deadline: a timeout result was synthesized
  dispatch_failed    the task could not be handed to the delegate
  canceled           the call's A2A task was canceled
  tool_result        a local tool's result
  progress           how many of the turn's calls are answered ("2 of 3 delegations answered") in a turn
                     that delegated and made at least two calls: while it waits, from its TURN item's
                     received/total (read with the session), each count once; when it completed, "n of n"
                     after its results (a replay has only that one: the counts before were live)
  answer             the model ended its turn: the answer
  question           the model ended its turn asking for input (ask_user): the question
  idle               the session is idle again (the last event of a stream)

Each event has an id that stays the same however often (and however late) the timeline is
derived: a result has the same id while its turn waits (read from the result items) and
after (read from the conversation). A stream sends each id once; a client that reconnects
gets the timeline again from the start and may drop the ids it has seen. Replayed, a
completed turn's results come in the order of the calls (live, as they were recorded).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from flightdeck.domain.agent import AgentDefinition
from flightdeck.domain.asking import asks, pending_question
from flightdeck.domain.records import Session, ToolResult

PREVIEW_CHARS = 1_000
KINDS = [
    "message",
    "thinking",
    "delegating",
    "tool_call",
    "callback_accepted",
    "timeout",
    "dispatch_failed",
    "canceled",
    "tool_result",
    "progress",
    "answer",
    "question",
    "idle",
]

# The kinds that tell a follower of an A2A task what the agent is doing (flightdeck.domain.a2a.stream).
PROGRESS_KINDS = frozenset(
    {
        "thinking",
        "delegating",
        "tool_call",
        "callback_accepted",
        "timeout",
        "dispatch_failed",
        "canceled",
        "tool_result",
        "progress",
    }
)
# A turn's progress is told once it waits on at least this many calls, delegations among them (with one, its
# answer is the progress).
PROGRESS_MIN_CALLS = 2


@dataclass(frozen=True)
class TimelineEvent:
    id: str
    kind: str
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self, session_id: str) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "session_id": session_id, **self.data}


def _preview(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _texts(message: dict[str, Any]) -> str:
    return "".join(b["text"] for b in message.get("content", []) if isinstance(b.get("text"), str))


def _result_kind(status: str, text: str, delegated: bool) -> str:
    if not delegated:
        return "tool_result"
    if status == "error":
        try:
            reason = json.loads(text).get("reason")
        except (ValueError, TypeError, AttributeError):
            reason = None
        if reason in ("timeout", "dispatch_failed", "canceled"):
            return str(reason)
    return "callback_accepted"


class _Builder:
    def __init__(self, agent: AgentDefinition):
        self.agent = agent
        self.events: list[TimelineEvent] = []
        self.seen: set[str] = set()
        self.calls: dict[str, dict[str, Any]] = {}  # toolUseId -> the toolUse block
        self.inputs = 0
        self.thinks = 0
        self.uses: list[dict[str, Any]] = []  # the tool calls of the latest think that made any

    def add(self, event: TimelineEvent) -> None:
        if event.id not in self.seen:
            self.seen.add(event.id)
            self.events.append(event)

    def user(self, message: dict[str, Any]) -> None:
        results = [b["toolResult"] for b in message.get("content", []) if "toolResult" in b]
        for result in results:
            text = "".join(c.get("text", "") for c in result.get("content", []) if isinstance(c, dict))
            self.result(str(result.get("toolUseId", "")), str(result.get("status", "success")), text)
        if results:
            self.progress(len(results), len(results))  # the turn complete: all of them
        if not results:
            self.inputs += 1
            self.add(TimelineEvent(f"input.{self.inputs}", "message", {"text": _preview(_texts(message))}))

    def assistant(self, message: dict[str, Any]) -> None:
        self.thinks += 1
        self.add(TimelineEvent(f"think.{self.thinks}", "thinking", {"think": self.thinks}))
        if asks(message):
            self.add(
                TimelineEvent(
                    f"question.{self.thinks}",
                    "question",
                    {"think": self.thinks, "text": pending_question([message]) or ""},
                )
            )
            return
        uses = [b["toolUse"] for b in message.get("content", []) if "toolUse" in b]
        if uses:
            self.uses = uses
        for use in uses:
            tool_use_id = str(use.get("toolUseId", ""))
            self.calls[tool_use_id] = use
            name = str(use.get("name", ""))
            args = use.get("input") or {}
            delegate = self.agent.delegate_for_tool(name)
            if delegate is not None:
                self.add(
                    TimelineEvent(
                        f"tool.{tool_use_id}",
                        "delegating",
                        {
                            "tool_use_id": tool_use_id,
                            "tool": name,
                            "agent": delegate.agent,
                            "task": _preview(str(args.get("task", ""))),
                            # A delegation that continues the delegate's session (answering its question).
                            **({"context_id": args["context_id"]} if isinstance(args.get("context_id"), str) else {}),
                        },
                    )
                )
            else:
                self.add(TimelineEvent(f"tool.{tool_use_id}", "tool_call", {"tool_use_id": tool_use_id, "tool": name}))
        if not uses:
            self.add(TimelineEvent(f"answer.{self.thinks}", "answer", {"think": self.thinks, "text": _texts(message)}))

    def progress(self, answered: int, total: int) -> None:
        """How many of the latest think's calls are answered, when it delegated and made several calls."""
        delegations = sum(1 for u in self.uses if self.agent.delegate_for_tool(str(u.get("name", ""))) is not None)
        if total < PROGRESS_MIN_CALLS or not delegations or answered < 1:
            return
        what = "delegations" if delegations == len(self.uses) else "calls"
        self.add(
            TimelineEvent(
                f"progress.{self.thinks}.{answered}",
                "progress",
                {
                    "think": self.thinks,
                    "answered": answered,
                    "total": total,
                    "text": f"{answered} of {total} {what} answered",
                },
            )
        )

    def result(self, tool_use_id: str, status: str, text: str) -> None:
        use = self.calls.get(tool_use_id, {})
        name = str(use.get("name", ""))
        delegate = self.agent.delegate_for_tool(name)
        data: dict[str, Any] = {"tool_use_id": tool_use_id, "tool": name, "status": status, "text": _preview(text)}
        if delegate is not None:
            data["agent"] = delegate.agent
        self.add(TimelineEvent(f"result.{tool_use_id}", _result_kind(status, text, delegate is not None), data))


def derive(session: Session, pending: list[ToolResult], agent: AgentDefinition) -> list[TimelineEvent]:
    """The session's timeline. pending: the results recorded so far for the turn it waits on
    (TurnsPort.get_results of its current turn), in the order of the calls that asked for them."""
    build = _Builder(agent)
    for message in session.messages:
        if message.get("role") == "assistant":
            build.assistant(message)
        else:
            build.user(message)
    last = session.messages[-1] if session.messages else {}
    waiting = last.get("role") == "assistant" and any("toolUse" in b for b in last.get("content", []))
    if session.status == "busy" and waiting:
        order = [b["toolUse"].get("toolUseId") for b in last.get("content", []) if "toolUse" in b]
        for result in sorted(pending, key=lambda r: order.index(r.tool_use_id) if r.tool_use_id in order else 0):
            build.result(result.tool_use_id, result.status, result.text)
        agg = session.aggregation
        if agg is not None and agg.turn == session.turn and agg.status == "waiting":
            # The turn's own count (its TURN item, read with the session): no read or write more.
            build.progress(agg.received, agg.total)
    elif session.status == "busy" and last.get("role") != "assistant":
        # A message or the results are in and the next think is under way (or owed).
        build.add(TimelineEvent(f"think.{build.thinks + 1}", "thinking", {"think": build.thinks + 1}))
    if session.status == "idle":
        build.add(
            TimelineEvent(
                f"idle.{session.user_messages}", "idle", {"turn": session.user_messages, "iteration": session.turn}
            )
        )
    return build.events


def waits_on_results(session: Session) -> bool:
    """Whether the session's current turn waits on tool results (then its recorded results are worth a read)."""
    last = session.messages[-1] if session.messages else {}
    return (
        session.status == "busy"
        and last.get("role") == "assistant"
        and any("toolUse" in b for b in last.get("content", []))
    )


def describe(event: TimelineEvent) -> str:
    """One line a person can read, for an A2A status message."""
    d = event.data
    agent = d.get("agent") or d.get("tool") or "the tool"
    return {
        "thinking": f"thinking (think {d.get('think')})",
        "delegating": f"delegating to {d.get('agent')}: {d.get('task', '')}",
        "tool_call": f"running {d.get('tool')}",
        "callback_accepted": f"{agent} answered" + (" with an error" if d.get("status") == "error" else ""),
        "timeout": f"no answer from {agent} in time: timed out",
        "dispatch_failed": f"the task could not be handed to {agent}",
        "canceled": f"the call to {agent} was canceled",
        "tool_result": f"{agent} finished" + (" with an error" if d.get("status") == "error" else ""),
        "progress": str(d.get("text", "")),
    }.get(event.kind, event.kind)
