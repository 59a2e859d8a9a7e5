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
                     received/total (read with the session, less the results read that are not answers),
                     each count once; when it completed, after its results, the answers of all ("1 of 2
                     delegations answered (1 timed out)", as the answer counts them; a replay has only that
                     one: the counts before were live)
  answer             the model ended its turn: the answer
  question           the model ended its turn asking for input (ask_user): the question
  idle               the session is idle again (the last event of a stream), with its last turn's outcome
                     (flightdeck.domain.session_outcome)

Every event has `at`, when it happened (ISO 8601 UTC, ms), from the times the session's items carry
anyway (records.Stamp; absent for an item stored before they were): a message's arrival, a think's
start (`thinking`, with `duration_ms`, `tokens_in`, `tokens_out`, `tokens_cache_read`, `tokens_cache_write`
once its reply is stored; `answer` carries its turn's `tokens` summed, `idle` the session's: a replay has
them, a live stream sends the event as the think starts; with tokens, the `model` they are priced as and,
when flightdeck.domain.model_prices has it, their list-price `cost_usd` and the `price` it used), a call's dispatch (`delegating`, with the
delegate's `peer_session_id` for one of our agents, its `context_id` when continued, and the session's
`trace_id`), a result's record (with `latency_ms` from the dispatch), a reply's storing (`answer`,
`question`), the session's last update (`idle`).

Each event has an id that stays the same however often (and however late) the timeline is
derived: a result has the same id while its turn waits (read from the result items) and
after (read from the conversation). A stream sends each id once; a client that reconnects
gets the timeline again from the start and may drop the ids it has seen. Replayed, a
completed turn's results come in the order of the calls (live, as they were recorded).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from flightdeck.domain.agent import AgentDefinition
from flightdeck.domain.asking import asks, pending_question
from flightdeck.domain.model_prices import price_of, priced_model
from flightdeck.domain.records import Session, Stamp, ToolResult, peer_session_id
from flightdeck.domain.session_outcome import OUTCOMES, outcome
from flightdeck.domain.token_use import TokenUse

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


def iso_ms(ms: int) -> str:
    """Epoch ms as ISO 8601 UTC with milliseconds (2025-01-31T12:00:00.123Z)."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _at(ms: int) -> dict[str, Any]:
    return {"at": iso_ms(ms)} if ms > 0 else {}


def _trace_id(parent: dict[str, Any]) -> str:
    """The trace id of the session's W3C traceparent (version-traceid-parentid-flags), "" without one."""
    parts = str(parent.get("traceparent", "")).split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else ""


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
    def __init__(self, agent: AgentDefinition, session_id: str = "", trace_id: str = ""):
        self.agent = agent
        self.session_id, self.trace_id = session_id, trace_id
        self.dispatched: dict[str, int] = {}  # toolUseId -> when the call was handed out (epoch ms)
        self.last_ms = 0  # the latest time seen: when a think under way became due
        self.events: list[TimelineEvent] = []
        self.seen: set[str] = set()
        self.calls: dict[str, dict[str, Any]] = {}  # toolUseId -> the toolUse block
        self.inputs = 0
        self.thinks = 0
        self.uses: list[dict[str, Any]] = []  # the tool calls of the latest think that made any
        self.turn_tokens = self.session_tokens = TokenUse()  # the model's tokens: this turn's (one task), all
        self.model = priced_model(agent.model)
        self.price = price_of(self.model)

    def cost(self, used: TokenUse) -> dict[str, Any]:
        """The tokens' model and, when the price table has it, their list-price cost and which prices."""
        if self.price is None:
            return {"model": self.model}
        return {"model": self.model, "cost_usd": self.price.usd(used), "price": self.price.basis()}

    def add(self, event: TimelineEvent) -> None:
        if event.id not in self.seen:
            self.seen.add(event.id)
            self.events.append(event)

    def user(self, message: dict[str, Any], stamp: Stamp = Stamp()) -> None:
        self.last_ms = max(self.last_ms, stamp.at)
        results = [b["toolResult"] for b in message.get("content", []) if "toolResult" in b]
        kinds = []
        for result in results:
            text = "".join(c.get("text", "") for c in result.get("content", []) if isinstance(c, dict))
            tool_use_id = str(result.get("toolUseId", ""))
            status = str(result.get("status", "success"))
            kinds.append(self.result(tool_use_id, status, text, stamp.results.get(tool_use_id, stamp.at)))
        if results:
            # The turn complete: every call has its result, but only its answers are answered (as the answer
            # counts them); the rest are counted by what became of them.
            self.progress(kinds.count("answered"), len(results), stamp.at, fates=kinds)
        if not results:
            self.inputs += 1
            self.turn_tokens = TokenUse()
            data = {"text": _preview(_texts(message)), **_at(stamp.at)}
            self.add(TimelineEvent(f"input.{self.inputs}", "message", data))

    def assistant(self, message: dict[str, Any], stamp: Stamp = Stamp()) -> None:
        self.thinks += 1
        think: dict[str, Any] = {"think": self.thinks, **_at(stamp.started)}
        if stamp.started and stamp.at:
            think.update(duration_ms=stamp.at - stamp.started, tokens_in=stamp.tokens_in, tokens_out=stamp.tokens_out)
            think.update(tokens_cache_read=stamp.cache_read, tokens_cache_write=stamp.cache_write)
            think.update(self.cost(TokenUse.of(stamp)))
        self.turn_tokens += TokenUse.of(stamp)
        self.session_tokens += TokenUse.of(stamp)
        self.add(TimelineEvent(f"think.{self.thinks}", "thinking", think))
        self.last_ms = max(self.last_ms, stamp.at)
        if asks(message):
            self.add(
                TimelineEvent(
                    f"question.{self.thinks}",
                    "question",
                    {"think": self.thinks, "text": pending_question([message]) or "", **_at(stamp.at)},
                )
            )
            return
        uses = [b["toolUse"] for b in message.get("content", []) if "toolUse" in b]
        if uses:
            self.uses = uses
        sent = stamp.dispatched or stamp.at
        for use in uses:
            tool_use_id = str(use.get("toolUseId", ""))
            self.calls[tool_use_id] = use
            self.dispatched[tool_use_id] = sent
            name = str(use.get("name", ""))
            args = use.get("input") or {}
            delegate = self.agent.delegate_for_tool(name)
            if delegate is not None:
                context = args["context_id"] if isinstance(args.get("context_id"), str) else None
                # One of our agents runs the task in the session this call names, or one derived from it
                # (flightdeck.domain.dispatch): readable there with our token.
                peer = context or peer_session_id(self.agent.name, self.session_id, tool_use_id)
                self.add(
                    TimelineEvent(
                        f"tool.{tool_use_id}",
                        "delegating",
                        {
                            "tool_use_id": tool_use_id,
                            "tool": name,
                            "agent": delegate.agent,
                            "protocol": delegate.protocol,
                            "task": _preview(str(args.get("task", ""))),
                            # A call of one of its skills (`<agent>__<skill id>`): the skill and its arguments.
                            **(_skill_call(name, delegate.name, args)),
                            # A delegation that continues the delegate's session (answering its question).
                            **({"context_id": context} if context else {}),
                            **({"peer_session_id": peer} if delegate.protocol == "flightdeck" else {}),
                            **({"trace_id": self.trace_id} if self.trace_id else {}),
                            **_at(sent),
                        },
                    )
                )
            else:
                data = {"tool_use_id": tool_use_id, "tool": name, **_at(sent)}
                self.add(TimelineEvent(f"tool.{tool_use_id}", "tool_call", data))
        if not uses:
            data = {
                "think": self.thinks,
                "text": _texts(message),
                "tokens": self.turn_tokens.as_dict(),
                **self.cost(self.turn_tokens),
                **_at(stamp.at),
            }
            self.add(TimelineEvent(f"answer.{self.thinks}", "answer", data))

    def progress(self, answered: int, total: int, at_ms: int = 0, fates: list[str] | None = None) -> None:
        """How many of the latest think's calls are answered, when it delegated and made several calls;
        fates: what each result became (a completed turn: progress_of)."""
        delegations = sum(1 for u in self.uses if self.agent.delegate_for_tool(str(u.get("name", ""))) is not None)
        if total < PROGRESS_MIN_CALLS or not delegations or (answered < 1 and fates is None):
            return
        what = "delegations" if delegations == len(self.uses) else "calls"
        event_id, data = progress_of(self.thinks, what, total, answered, fates)
        self.add(TimelineEvent(event_id, "progress", {**data, **_at(at_ms)}))

    def result(self, tool_use_id: str, status: str, text: str, at_ms: int = 0) -> str:
        """Adds the result's event; what became of the call: answered, asked, or its result's kind."""
        use = self.calls.get(tool_use_id, {})
        name = str(use.get("name", ""))
        delegate = self.agent.delegate_for_tool(name)
        data: dict[str, Any] = {"tool_use_id": tool_use_id, "tool": name, "status": status, "text": _preview(text)}
        self.last_ms = max(self.last_ms, at_ms)
        data.update(_at(at_ms))
        sent = self.dispatched.get(tool_use_id, 0)
        if at_ms and sent:
            data["latency_ms"] = max(0, at_ms - sent)
        if delegate is not None:
            data["agent"] = delegate.agent
            data.update(_asked(text))
        kind = _result_kind(status, text, delegate is not None)
        self.add(TimelineEvent(f"result.{tool_use_id}", kind, data))
        return became(status, text)


# What became of a call that was not answered, as a progress event counts it.
UNANSWERED = {
    "asked": "asked a question",
    "timeout": "timed out",
    "dispatch_failed": "refused",
    "canceled": "canceled",
    "failed": "failed",
}


def became(status: str, text: str) -> str:
    """What became of a call, by its result, as the answer counts it: answered, or one of UNANSWERED."""
    if status == "success":
        return "asked" if _asked(text) else "answered"
    kind = _result_kind(status, text, True)
    return kind if kind in UNANSWERED else "failed"


def progress_of(
    think: int, what: str, total: int, answered: int, fates: list[str] | None = None
) -> tuple[str, dict[str, Any]]:
    """A progress event's id and data: `answered` of `total` calls. fates: what each result became, once the
    turn has them all; the ones not answered are counted by it, and the id is then not a live count's (a stream
    that sent "1 of 2" live sends "1 of 2 (1 timed out)" too)."""
    others = {k: fates.count(k) for k in UNANSWERED if k in fates} if fates else {}
    told = ", ".join(f"{n} {UNANSWERED[k]}" for k, n in others.items())
    data = {
        "think": think,
        "answered": answered,
        "total": total,
        **({"unanswered": others} if others else {}),
        "text": f"{answered} of {total} {what} answered" + (f" ({told})" if told else ""),
    }
    return f"progress.{think}.{answered}" + (".done" if others else ""), data


def _skill_call(tool: str, free_text_tool: str, args: dict[str, Any]) -> dict[str, Any]:
    if tool == free_text_tool or "__" not in tool:
        return {}
    shown = {k: v for k, v in args.items() if k != "context_id"}
    return {"skill": tool.partition("__")[2], "arguments": _preview(json.dumps(shown, ensure_ascii=False))}


def _asked(text: str) -> dict[str, Any]:
    """A delegate's question (its result is {status: input_required, question, context_id, task_id?}): those
    fields, so a reader shows a question, not JSON; {} for any other result."""
    try:
        body = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(body, dict) or body.get("status") != "input_required":
        return {}
    keep = ("question", "context_id", "task_id")
    return {k: str(body[k]) for k in keep if isinstance(body.get(k), str)}


def derive(session: Session, pending: list[ToolResult], agent: AgentDefinition) -> list[TimelineEvent]:
    """The session's timeline. pending: the results recorded so far for the turn it waits on
    (TurnsPort.get_results of its current turn), in the order of the calls that asked for them."""
    build = _Builder(agent, session.session_id, _trace_id(session.parent))
    stamps = session.stamps
    for index, message in enumerate(session.messages):
        stamp = stamps[index] if index < len(stamps) else Stamp()
        if message.get("role") == "assistant":
            build.assistant(message, stamp)
        else:
            build.user(message, stamp)
    last = session.messages[-1] if session.messages else {}
    waiting = last.get("role") == "assistant" and any("toolUse" in b for b in last.get("content", []))
    if session.status == "busy" and waiting:
        order = [b["toolUse"].get("toolUseId") for b in last.get("content", []) if "toolUse" in b]
        for result in sorted(pending, key=lambda r: order.index(r.tool_use_id) if r.tool_use_id in order else 0):
            build.result(result.tool_use_id, result.status, result.text, result.recorded_ms)
        agg = session.aggregation
        if agg is not None and agg.turn == session.turn and agg.status == "waiting":
            # The turn's own count (its TURN item, read with the session): no read or write more; a timeout or
            # an error among the results read is received, not answered.
            unanswered = sum(1 for r in pending if r.status != "success")
            build.progress(agg.received - unanswered, agg.total, max((r.recorded_ms for r in pending), default=0))
    elif session.status == "busy" and last.get("role") != "assistant":
        # A message or the results are in and the next think is under way (or owed): due since the last of them.
        data = {"think": build.thinks + 1, **_at(build.last_ms)}
        build.add(TimelineEvent(f"think.{build.thinks + 1}", "thinking", data))
    if session.status == "idle":
        data = {
            "turn": session.user_messages,
            "iteration": session.turn,
            "tokens": build.session_tokens.as_dict(),
            **build.cost(build.session_tokens),
            "outcome": outcome(session),
            **_at(session.updated_at),
        }
        build.add(TimelineEvent(f"idle.{session.user_messages}", "idle", data))
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


def _field(kind: str, description: str, **more: Any) -> dict[str, Any]:
    return {"type": kind, "description": description, **more}


# The JSON of one event's data line (the OpenAPI document's contentSchema of the events route): the fields
# each kind may carry. Times are ISO 8601 UTC with milliseconds; durations and latencies in ms.
DATA_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "kind", "session_id"],
    "properties": {
        "id": _field("string", "stable: the same however often the timeline is derived"),
        "kind": _field("string", "the event's kind, as its `event` field"),
        "session_id": _field("string", "the session"),
        "at": _field(
            "string",
            "when it happened (ISO 8601 UTC, ms): a message's arrival, a think's start, a call's dispatch, a "
            "result's record, a reply's storing, the session's last update (idle); absent for what was stored "
            "before times were kept, and on text_delta",
            format="date-time",
        ),
        "think": _field("integer", "thinking, answer, question, progress: the think's number in the session"),
        "duration_ms": _field("integer", "thinking, once its reply is stored: how long the think took"),
        "tokens_in": _field("integer", "thinking, once its reply is stored: the model's input tokens"),
        "tokens_out": _field("integer", "thinking, once its reply is stored: the model's output tokens"),
        "tokens_cache_read": _field("integer", "thinking, once its reply is stored: input tokens read from the cache"),
        "tokens_cache_write": _field("integer", "thinking, once its reply is stored: input tokens written to it"),
        "tokens": _field(
            "object",
            "answer: the model's tokens of the turn (one task); idle: of the session: input (not cached), output, "
            "cache_read, cache_write, thinks",
        ),
        "model": _field(
            "string", "thinking (with its tokens), answer, idle: the model id the tokens are priced as (the agent's)"
        ),
        "cost_usd": _field(
            "number",
            "thinking (with its tokens), answer (the turn's), idle (the session's): the tokens at the model's list "
            "price, an estimate (absent when the price table has no such model)",
        ),
        "price": _field("object", "with cost_usd: the prices it used: model, region, recorded (a date)"),
        "tool_use_id": _field("string", "delegating, tool_call and results: the call"),
        "tool": _field("string", "delegating, tool_call and results: the tool's name"),
        "agent": _field("string", "delegating and its results: the delegate"),
        "protocol": _field("string", "delegating: how the delegate is reached", enum=["flightdeck", "a2a"]),
        "task": _field("string", "delegating: the task given (first 1,000 characters)"),
        "peer_session_id": _field(
            "string", "delegating to one of our agents: the delegate's session for this call (readable there)"
        ),
        "context_id": _field(
            "string", "delegating: the delegate's session or context it continues; a result: the one its question is in"
        ),
        "task_id": _field("string", "a result asking a question: the A2A delegate's task"),
        "trace_id": _field("string", "delegating: the session's W3C trace id"),
        "status": _field("string", "results: success or error"),
        "text": _field("string", "message, answer, question, results (first 1,000 characters), progress"),
        "question": _field("string", "a delegate's result asking for input: its question"),
        "latency_ms": _field("integer", "results (callback_accepted, timeout, ...): from the call's dispatch"),
        "answered": _field("integer", "progress: calls answered (an answer; not a timeout, refusal or error)"),
        "total": _field("integer", "progress: calls made"),
        "unanswered": _field(
            "object",
            "progress, once the turn has every result: the calls not answered, counted by what became of them",
            additionalProperties={"type": "integer"},
            propertyNames={"enum": list(UNANSWERED)},
        ),
        "skill": _field("string", "delegating to one of the delegate's skills: its id"),
        "arguments": _field("string", "delegating to a skill: its arguments as JSON (first 1,000 characters)"),
        "outcome": _field(
            "string",
            "idle: what became of the session's last turn (flightdeck.domain.session_outcome)",
            enum=list(OUTCOMES),
        ),
        "turn": _field("integer", "idle: the session's user messages"),
        "iteration": _field("integer", "idle: the latest think iteration; text_delta: its think"),
        "attempt": _field("integer", "text_delta: the model attempt"),
        "offset": _field("integer", "text_delta: where `text` goes in the think's text"),
    },
}
