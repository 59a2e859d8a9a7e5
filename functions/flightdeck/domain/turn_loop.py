"""One think iteration of an agent: call the model, then act on what it said.

A turn message may be delivered twice (SQS): the model's reply is stored once per
iteration and every effect is idempotent, so a redelivery has the effect of one.
"""

from __future__ import annotations

import json
import math
from typing import Any

from flightdeck.domain import a2a as a2a_tasks
from flightdeck.domain import local_tools
from flightdeck.domain.aggregation import record_and_advance
from flightdeck.domain.dispatch import backoff_s
from flightdeck.domain.model import ModelError, ModelReply, ToolSpec, delegate_tool_spec, error_reply
from flightdeck.domain.outbox import deliver_now, dispatch_now
from flightdeck.domain.ports import Deps
from flightdeck.domain.time_budget import TimeBudget
from flightdeck.domain.records import ResultSource, Session, ToolResult, error_result
from flightdeck.observability import bind, child_traceparent, count, logger, timeline, trace_id_of

# One TransactWriteItems (100 items) holds a turn's timeout results plus its completion
# and the session's advance: no turn may expect more ids than this.
HARD_MAX_TOOLS_PER_TURN = 98


def tool_specs(deps: Deps) -> list[ToolSpec]:
    agent = deps.settings.agent
    specs = [delegate_tool_spec(d.name, d.agent, d.description) for d in agent.delegates]
    return specs + local_tools.specs_for(agent.local_tools)


class ThinkRetry(Exception):
    """A retryable model failure within the budget: think again after `delay_s`."""

    def __init__(self, delay_s: int, detail: str):
        super().__init__(detail)
        self.delay_s = delay_s


# A model reply is stored twice at most (the iteration and its message): past this many
# bytes it could not be stored, so the turn ends with an error answer instead.
MAX_REPLY_BYTES = 180_000


def run_turn(deps: Deps, session_id: str, turn: int, traceparent: str = "", attempt: int = 1,
             budget: TimeBudget | None = None) -> str:
    """Returns what happened, for logs and tests: skipped | tool_use | end_turn | canceled | error.

    attempt: the model attempt this think is (its event says so: 2, 3... after a throttled model). A
    retryable model error below the model's attempt budget raises ThinkRetry; past it, or for any other model error,
    the turn ends with an error answer, so the session is released and the caller is told.
    budget: the invocation's time, for the dispatches and the delivery it runs inline.
    """
    store, s = deps.store, deps.settings
    session = store.get_session(session_id)
    if session is None or session.turn != turn:
        logger.info("turn message is stale or unknown; ignoring", extra={"session_id": session_id, "turn": turn})
        return "skipped"
    # Later turns carry no header: the session keeps the trace it was started in.
    traceparent = traceparent or session.parent.get("traceparent", "")
    if traceparent:
        bind(trace_id=trace_id_of(traceparent))
    if session.status != "busy":
        return "skipped"  # the turn already ended (a redelivery)
    # A redelivery after the reply was stored re-runs the effects: each is idempotent.
    iteration = session.iteration
    a2a_session = session.has_a2a_task  # a task starts only on an idle session: none can appear mid-think
    if a2a_session and a2a_tasks.stop_if_canceled(deps, session_id, turn):  # canceled: think no more
        return "canceled"
    if iteration is None:
        timeline("turn_started" if turn == 1 else "thinking", f"thinking (turn {turn})", session_id=session_id, turn=turn)
        reply = _think(deps, session.messages, attempt)
        try:
            # The reply is stored once: the iteration is also the conversation's assistant message.
            iteration = store.save_iteration(session_id, turn, reply.model_dump(), s.session_retention_ms)
        except LookupError:
            logger.info("the session moved on while the model thought; ignoring", extra={"session_id": session_id})
            return "skipped"
    reply = ModelReply.model_validate(iteration.reply)
    if reply.error:
        _end_turn(deps, session, turn, reply.text, traceparent, budget, status="error")
        outcome = "error"
    elif (reply.stop_reason == "tool_use" and reply.tool_uses and a2a_session
          and a2a_tasks.stop_if_canceled(deps, session_id, turn)):
        outcome = "canceled"  # canceled while the model thought: its tool calls are not started
    elif reply.stop_reason == "tool_use" and reply.tool_uses:
        _start_tools(deps, session_id, turn, reply.tool_uses, traceparent, budget)
        outcome = "tool_use"
    else:
        _end_turn(deps, session, turn, reply.text, traceparent, budget)
        outcome = "end_turn"
    return outcome


def _think(deps: Deps, messages: list[dict[str, Any]], attempt: int) -> ModelReply:
    """The model's reply, or an error reply that ends the turn (never an exception that strands it)."""
    s = deps.settings
    try:
        reply = deps.model().converse(system=s.agent.system_prompt, messages=messages, tools=tool_specs(deps))
    except ModelError as exc:
        retryable = bool(getattr(exc, "retryable", False))
        if retryable and attempt < s.model_max_attempts:
            count("ModelRetries")
            delay = backoff_s(attempt)
            logger.warning("model error; the think will be retried",
                           extra={"detail": str(exc)[:300], "attempt": attempt, "retry_in_s": delay})
            raise ThinkRetry(delay, str(exc)) from exc
        count("ModelFailures")
        logger.error("model error; the turn ends with an error answer",
                     extra={"detail": str(exc)[:300], "attempt": attempt, "retryable": retryable})
        why = "retries exhausted" if retryable else "not retryable"
        return error_reply("model_error", f"{str(exc)[:500]} ({why} after {attempt} attempt(s))")
    if reply.stop_reason == "max_tokens" and reply.tool_uses:
        # A tool call cut off mid-way cannot be run or answered: the turn ends instead.
        count("ModelFailures")
        return error_reply("model_truncated", "the model reply was cut off (max_tokens) in the middle of a tool call")
    size = len(json.dumps(reply.message, ensure_ascii=False).encode("utf-8"))
    if size > MAX_REPLY_BYTES:
        count("ModelFailures")
        return error_reply("reply_too_large", f"the model reply is {size} bytes; at most {MAX_REPLY_BYTES} can be stored")
    return reply


def _start_tools(deps: Deps, session_id: str, turn: int, uses: list[dict[str, Any]], traceparent: str,
                 budget: TimeBudget | None) -> None:
    s, store = deps.settings, deps.store
    uses = uses[:HARD_MAX_TOOLS_PER_TURN]
    ids = [u["toolUseId"] for u in uses]
    # Past the configured limit a call gets an immediate error result instead of running:
    # the model still hears about every call it made, and a session (one turn at a time)
    # never has more than MAX_TOOLS_PER_TURN delegations in flight.
    allowed, refused = uses[:s.max_tools_per_turn], uses[s.max_tools_per_turn:]
    now = store.now_ms()
    deadline_ms = now + s.async_tool_timeout_ms
    if store.seed_turn(session_id, turn, ids, deadline_ms, s.session_retention_ms):
        deps.queues.send_timer({"session_id": session_id, "turn": turn, "deadline_ms": deadline_ms},
                               math.ceil((deadline_ms - now) / 1000))
    else:
        agg = store.get_turn(session_id, turn)
        deadline_ms = agg.deadline_ms if agg else deadline_ms
    agent = s.agent
    dispatches: list[dict[str, Any]] = []
    for use in refused:
        record_and_advance(deps, session_id, turn, error_result(
            use["toolUseId"], "too_many_tools", ResultSource.LOCAL,
            f"at most {s.max_tools_per_turn} tool calls per turn"), by="limit")
    for use in allowed:
        name, tool_use_id, args = use["name"], use["toolUseId"], use.get("input") or {}
        ids_log = {"session_id": session_id, "turn": turn, "tool_use_id": tool_use_id}
        delegate = agent.delegate_for_tool(name)
        if delegate is not None:
            timeline("tool_use", f"delegating to {delegate.agent}: {str(args.get('task', ''))[:80]}", **ids_log)
            dispatches.append({
                "session_id": session_id, "turn": turn, "tool_use_id": tool_use_id, "tool_name": name,
                "task": str(args.get("task", "")), "total_tools": len(ids), "deadline_ms": deadline_ms,
                "traceparent": child_traceparent(traceparent), "issued_ms": deadline_ms - s.async_tool_timeout_ms,
            })
            continue
        if name in agent.local_tools:
            status, text = local_tools.run_local_tool(name, args)
            result = ToolResult(tool_use_id, status, text, ResultSource.LOCAL)
        else:
            result = error_result(tool_use_id, "unknown_tool", ResultSource.LOCAL, f"no tool named {name!r}")
        count("LocalToolRuns")
        record_and_advance(deps, session_id, turn, result, by="local")
    dispatch_now(deps, dispatches, budget)


def _end_turn(deps: Deps, session: Session, turn: int, answer: str, traceparent: str, budget: TimeBudget | None,
              status: str = "success") -> None:
    store, session_id, route = deps.store, session.session_id, session.route
    if route is not None and route.status == "active" and route.expires_at > store.now_ms() // 1000:
        # The delivery message carries all delivery needs, so the route retires here.
        deliver_now(deps, {
            "session_id": session_id, "callback_service": route.callback_service,
            "bearer_token": route.bearer_token, "result": answer, "traceparent": traceparent,
            "created_ms": store.now_ms(), "status": status,
        }, budget)
        store.retire_route(session_id)
        timeline("answer_ready", f"answer ready for {route.callback_service}", session_id=session_id, turn=turn)
    else:
        timeline("final_answer", answer[:500], session_id=session_id, turn=turn)
    store.finish_session_turn(session_id, turn)
    if session.has_a2a_task:  # its A2A task completes, or fails with the error answer
        a2a_tasks.on_end_turn(deps, session_id, turn, answer, failed=status == "error")
