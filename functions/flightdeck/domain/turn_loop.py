"""One think iteration of an agent: call the model, then act on what it said.

A turn message may be delivered twice (SQS): the model's reply is stored once per
iteration and every effect is idempotent, so a redelivery has the effect of one.
"""

from __future__ import annotations

import math
from typing import Any

from flightdeck.domain import a2a as a2a_tasks
from flightdeck.domain import local_tools
from flightdeck.domain.aggregation import record_and_advance
from flightdeck.domain.model import ModelReply, ToolSpec, delegate_tool_spec
from flightdeck.domain.ports import Deps
from flightdeck.domain.records import ResultSource, ToolResult, error_result
from flightdeck.observability import bind, child_traceparent, count, logger, timeline, trace_id_of

# One TransactWriteItems (100 items) holds a turn's timeout results plus its completion
# and the session's advance: no turn may expect more ids than this.
HARD_MAX_TOOLS_PER_TURN = 98


def tool_specs(deps: Deps) -> list[ToolSpec]:
    agent = deps.settings.agent
    specs = [delegate_tool_spec(d.name, d.agent, d.description) for d in agent.delegates]
    return specs + local_tools.specs_for(agent.local_tools)


def run_turn(deps: Deps, session_id: str, turn: int, traceparent: str = "") -> str:
    """Returns what happened, for logs and tests: skipped | tool_use | end_turn | canceled."""
    store, s = deps.store, deps.settings
    session = store.get_session(session_id)
    if session is None or session.turn != turn:
        logger.info("turn message is stale or unknown; ignoring", extra={"session_id": session_id, "turn": turn})
        return "skipped"
    # Later turns carry no header: the session keeps the trace it was started in.
    traceparent = traceparent or session.parent.get("traceparent", "")
    if traceparent:
        bind(trace_id=trace_id_of(traceparent))
    iteration = store.get_iteration(session_id, turn)
    if iteration is not None and iteration.effects_done:
        return "skipped"
    if a2a_tasks.stop_if_canceled(deps, session_id, turn):  # its A2A task was canceled: think no more
        return "canceled"
    if iteration is None:
        messages = _with_previous_results(deps, session_id, session.messages, turn)
        timeline("turn_started" if turn == 1 else "thinking", f"thinking (turn {turn})", session_id=session_id, turn=turn)
        agent = s.agent
        reply = deps.model().converse(system=agent.system_prompt, messages=messages, tools=tool_specs(deps))
        iteration = store.save_iteration(session_id, turn, reply.model_dump(), s.session_retention_ms)
    reply = ModelReply.model_validate(iteration.reply)
    store.append_message(session_id, reply.message, turn, s.session_retention_ms)
    if reply.stop_reason == "tool_use" and reply.tool_uses and a2a_tasks.stop_if_canceled(deps, session_id, turn):
        outcome = "canceled"  # canceled while the model thought: its tool calls are not started
    elif reply.stop_reason == "tool_use" and reply.tool_uses:
        _start_tools(deps, session_id, turn, reply.tool_uses, traceparent)
        outcome = "tool_use"
    else:
        _end_turn(deps, session_id, turn, reply.text, traceparent)
        outcome = "end_turn"
    store.mark_iteration_done(session_id, turn)
    return outcome


def _with_previous_results(deps: Deps, session_id: str, messages: list[dict[str, Any]], turn: int) -> list[dict[str, Any]]:
    """After a tool-use iteration, the model's next input ends with the results, in call order."""
    if turn == 1 or not messages or messages[-1].get("role") != "assistant":
        return messages
    uses = [b["toolUse"] for b in messages[-1].get("content", []) if "toolUse" in b]
    if not uses:
        return messages
    results = {r.tool_use_id: r for r in deps.store.get_results(session_id, turn - 1)}
    blocks = [
        results.get(u["toolUseId"], error_result(u["toolUseId"], "missing", ResultSource.TIMEOUT)).as_block()
        for u in uses
    ]
    message = {"role": "user", "content": blocks}
    deps.store.append_message(session_id, message, turn, deps.settings.session_retention_ms)
    return [*messages, message]


def _start_tools(deps: Deps, session_id: str, turn: int, uses: list[dict[str, Any]], traceparent: str) -> None:
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
            deps.queues.send_dispatch({
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


def _end_turn(deps: Deps, session_id: str, turn: int, answer: str, traceparent: str) -> None:
    store = deps.store
    route = store.get_route(session_id)
    if route is not None and route.status == "active":
        # The delivery message carries all delivery needs, so the route retires here.
        deps.queues.send_delivery({
            "session_id": session_id, "callback_service": route.callback_service,
            "bearer_token": route.bearer_token, "result": answer, "traceparent": traceparent,
            "created_ms": store.now_ms(),
        })
        store.retire_route(session_id)
        timeline("answer_ready", f"answer ready for {route.callback_service}", session_id=session_id, turn=turn)
    else:
        timeline("final_answer", answer[:500], session_id=session_id, turn=turn)
    store.finish_session_turn(session_id, turn)
    a2a_tasks.on_end_turn(deps, session_id, turn, answer)  # the session's A2A task (if any) completes
