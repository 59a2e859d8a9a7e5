"""One think iteration of an agent: call the model, then act on what it said.

A turn message may be delivered twice (SQS): the model's reply is stored once per
iteration and every effect is idempotent, so a redelivery has the effect of one.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from flightdeck import tracing
from flightdeck.domain import asking, builtin_tools, live, mcp_tools, think_claim
from flightdeck.domain.aggregation import record_and_advance
from flightdeck.domain.dispatch import backoff_s
from flightdeck.domain.history_budget import within_budget
from flightdeck.domain.limits import MAX_REPLY_BYTES
from flightdeck.domain.model import ModelError, ModelReply, error_reply
from flightdeck.domain.outbox import deliver_now, dispatch_now
from flightdeck.domain.ports import Deps
from flightdeck.domain.records import (
    SESSION_CANCELED,
    QueuedMessage,
    ReplyRoute,
    ResultSource,
    Session,
    ToolResult,
    TurnSeed,
    error_result,
)
from flightdeck.domain.session_cancel import close_canceled
from flightdeck.domain.skills.contract import Contract, for_model, turn_contract
from flightdeck.domain.skills.handlers import handler_reply
from flightdeck.domain.skills.peers import card_url, mark_results, peer_card, skill_tool_spec, structured_call
from flightdeck.domain.time_budget import TimeBudget
from flightdeck.domain.toolbox import tool_specs
from flightdeck.observability import bind, child_traceparent, count, logger, timeline, trace_id_of

# One TransactWriteItems (100 items) holds a turn's timeout results plus its completion
# and the session's advance: no turn may expect more ids than this.
HARD_MAX_TOOLS_PER_TURN = 98


class ThinkRetry(Exception):
    """A retryable model failure within the budget: think again after `delay_s`."""

    def __init__(self, delay_s: int, detail: str):
        super().__init__(detail)
        self.delay_s = delay_s


@tracing.scoped  # the think's span (invoke_agent, begun once the session says its trace) ends with it
def run_turn(
    deps: Deps,
    session_id: str,
    turn: int,
    traceparent: str = "",
    attempt: int = 1,
    budget: TimeBudget | None = None,
    snapshot: str = "",
    run: str = "",
    first_start: bool = False,
) -> str:
    """Returns what happened, for logs and tests: skipped | tool_use | end_turn | input_required | canceled |
    error, resent (a redelivery after the turn ended re-sent what follows its answer), or fenced (another run
    of this think holds its claim: this one stops, having asked nothing and written nothing).

    attempt: the model attempt this think is (its event says so: 2, 3... after a throttled model). A
    retryable model error below the model's attempt budget raises ThinkRetry; past it, or for any other model error,
    the turn ends with an error answer, so the session is released and the caller is told.
    budget: the invocation's time, for the dispatches and the delivery it runs inline.
    snapshot: a new session's first think: the session as its ingest wrote it, read instead of the
    store. A change since (a cancel) fails the reply's conditional write, and the think starts over
    from the store; so does a second run of this think (Lambda retrying it), once its write finds the
    first run's reply stored: it has asked the model once more, for nothing (a retry is rare; the
    read it saves is on every new session).
    run, first_start: this run's id, for its think claim, and whether the write that owed the think started it
    (flightdeck.domain.think_claim; a new id when not given).
    """
    s = deps.settings
    run = run or think_claim.new_run()
    session = deps.sessions.get_session(session_id, snapshot)
    if session is not None and session.turn == turn + 1 and session.input is not None and session.input.seq:
        # This think's answer ended its turn and, in the same write, started the next one with a queued
        # message: a redelivery re-runs what follows that write (each step idempotent).
        return _resend_after_queued_start(deps, session, turn, traceparent, budget)
    if session is None or session.turn != turn:
        logger.info("turn message is stale or unknown; ignoring", extra={"session_id": session_id, "turn": turn})
        return "skipped"
    # Later turns carry no header: the session keeps the trace it was started in.
    traceparent = traceparent or session.parent.get("traceparent", "")
    if traceparent:
        bind(trace_id=trace_id_of(traceparent))
    tracing.begin(
        tracing.invoke_agent(s.agent_name, session_id, traceparent, s.agent.model.provider, s.agent.model.model_id)
    )
    iteration = session.iteration
    if session.status == SESSION_CANCELED:
        # Its caller stopped waiting: this think closes the session instead (the canceller's own close
        # did not happen, or raced this one; flightdeck.domain.session_cancel).
        close_canceled(deps, session)
        return "canceled"
    if session.status != "busy":
        # The turn already ended. When it ended with this think's answer, a redelivery re-runs
        # what follows that write (the answer's delivery, the A2A task's end): each is idempotent.
        final = iteration is not None and not _runs_tools(deps, ModelReply.model_validate(iteration.reply))
        route = _answer_route(deps, session, turn)
        if final and iteration is not None and (route is not None or session.has_a2a_task):
            _end_turn(deps, session, turn, ModelReply.model_validate(iteration.reply), traceparent, budget, route)
            return "resent"
        return "skipped"
    # A redelivery after the reply was stored re-runs the effects: each is idempotent.
    a2a_session = session.has_a2a_task  # a task starts only on an idle session: none can appear mid-think
    input_task = session.input.task_key if session.input is not None else ""
    if a2a_session and deps.turn_hooks.stop_if_canceled(deps, session_id, turn, input_task):  # canceled: think no more
        return "canceled"
    seed: TurnSeed | None = None
    if iteration is None:
        contract = turn_contract(session.messages)
        handler = _handler_of(deps, contract)
        if not handler and not think_claim.claimed(deps, session, run, budget, first_start):
            return "fenced"  # another run of this think asks the model
        timeline(
            "turn_started" if turn == 1 else "thinking", f"thinking (turn {turn})", session_id=session_id, turn=turn
        )
        started_ms = deps.clock.now_ms()
        if handler:
            # A structured call to a skill bound to a handler: answered without the model.
            assert contract is not None and contract.arguments is not None
            reply = handler_reply(handler, contract.arguments)
            count("HandlerSkillRuns")
        else:
            output_schema = contract.output_schema if contract is not None else None
            reply = _think(deps, session.messages, attempt, live.relay_for(deps, session, attempt), output_schema)
        calls = _runs_tools(deps, reply)  # a reply that asks for input ends the turn instead
        if calls and not a2a_session:
            # The calls' aggregation opens in the write that stores the reply. (An A2A session's
            # opens after its cancel check, which must see the reply stored.)
            deadlines = call_deadlines(
                deps, reply.tool_uses[:HARD_MAX_TOOLS_PER_TURN], deps.clock.now_ms(), _request_deadline(contract)
            )
            seed = TurnSeed(tuple(deadlines), max(deadlines.values()), deadlines)
        route = None if calls else _answer_route(deps, session, turn)
        try:
            # The reply is stored once: the iteration is also the conversation's assistant message. A
            # final one ends the turn in the same write, which starts the next turn when a message waits.
            iteration = deps.iterations.save_iteration(
                session_id,
                turn,
                # The think's times go in the reply's item, in the write that stores it (the timeline's).
                {**reply.model_dump(), "think": {"started_ms": started_ms, "ended_ms": deps.clock.now_ms()}},
                s.session_retention_ms,
                seed=seed,
                ends_turn=not calls,
                retires_route=route is not None,
                session=session,
            )
        except LookupError:
            logger.info("the session moved on while the model thought; ignoring", extra={"session_id": session_id})
            if snapshot:  # it changed after its ingest (a cancel): what is stored decides what follows
                return run_turn(deps, session_id, turn, traceparent, attempt, budget, run=run, first_start=first_start)
            return "skipped"
        if snapshot and not iteration.fresh:
            # A second run of this think: the first one's reply is stored, and what followed its write
            # is re-run from the session as stored now (not from the ingest's snapshot).
            return run_turn(deps, session_id, turn, traceparent, attempt, budget, run=run, first_start=first_start)
        if not iteration.fresh:
            seed = None  # another delivery of this think stored its reply first
        elif not calls:
            # That write ended the turn (and retired the route it answers), or moved on to the next one.
            ended = dataclasses.replace(
                session, status="idle" if iteration.next_input is None else "busy", route=_retired(route, turn)
            )
            return _end_turn(
                deps,
                ended,
                turn,
                reply,
                traceparent,
                budget,
                _retired(route, turn),
                started=iteration.next_input,
                ended=True,
            )
    reply = ModelReply.model_validate(iteration.reply)
    if not _runs_tools(deps, reply):
        return _end_turn(deps, session, turn, reply, traceparent, budget, _answer_route(deps, session, turn))
    if a2a_session and deps.turn_hooks.stop_if_canceled(deps, session_id, turn, input_task):
        return "canceled"  # canceled while the model thought: its tool calls are not started
    _start_tools(deps, session, turn, reply.tool_uses, traceparent, budget, seed)
    return "tool_use"


def _calls_tools(reply: ModelReply) -> bool:
    return not reply.error and reply.stop_reason == "tool_use" and bool(reply.tool_uses)


def _question(deps: Deps, reply: ModelReply) -> str | None:
    """The question the reply ends its turn with (flightdeck.domain.asking), or None."""
    return asking.question_of(reply) if deps.settings.agent.ask_user else None


def _runs_tools(deps: Deps, reply: ModelReply) -> bool:
    """The reply calls tools to run (and so the turn goes on): not an answer, nor a question."""
    return _calls_tools(reply) and _question(deps, reply) is None


def _answer_route(deps: Deps, session: Session, turn: int) -> ReplyRoute | None:
    """The reply route this turn's answer goes to: the session's live route (when it answers this
    turn: a queued delegation's route answers from the turn its message started), or the one this
    turn's answer already retired, possibly replaced since by the next message's route (a redelivery
    re-sends the answer; the caller deduplicates)."""
    route = session.route
    if route is None:
        return None
    if route.answered is not None and route.answered.retired_turn == turn:
        return route.answered
    if route.status == "active":
        live = route.expires_at > deps.clock.now_ms() // 1000 and route.from_turn <= turn
        return route if live else None
    return route if route.retired_turn == turn else None


def _retired(route: ReplyRoute | None, turn: int) -> ReplyRoute | None:
    return dataclasses.replace(route, status="retired", retired_turn=turn) if route is not None else None


def _handler_of(deps: Deps, contract: Contract | None) -> str:
    """The handler that answers this turn's structured call, if its skill is bound to one."""
    if contract is None or not contract.skill or contract.arguments is None:
        return ""
    skill = deps.settings.agent.skill(contract.skill)
    return skill.handler if skill is not None else ""


def _think(
    deps: Deps,
    messages: list[dict[str, Any]],
    attempt: int,
    relay: live.LiveRelay | None = None,
    output_schema: dict[str, Any] | None = None,
) -> ModelReply:
    """The model's reply, or an error reply that ends the turn (never an exception that strands it).

    relay: a stream watches the session, so the model streams and its text is relayed as it comes.
    output_schema: the turn's contract: the model's final answer is held to it (Bedrock: forced through a
    tool whose input schema it is; flightdeck.adapters.bedrock).
    """
    s = deps.settings
    try:
        # A message that answers the model's question is given to it as its ask_user call's result.
        tools = tool_specs(s.agent) + _peer_skill_tools(deps) + mcp_tools.tool_specs(deps)
        given = asking.answers_as_results(mark_results(for_model(messages)))
        ask: dict[str, Any] = {
            "system": s.agent.system_prompt,
            # The agent's history budget (off by default) leaves out the oldest turns (flightdeck.domain.history_budget).
            "messages": within_budget(s.agent.system_prompt, tools, given, s.agent.model.history_budget_tokens),
            "tools": tools,
        }
        if output_schema is not None:
            ask["output_schema"] = output_schema
        with tracing.chat(s.agent.model.provider, s.agent.model.model_id) as call:
            reply = relay.think(deps.model(), **ask) if relay is not None else deps.model().converse(**ask)
            tracing.record_usage(call, reply.usage, reply.stop_reason)
    except ModelError as exc:
        retryable = bool(getattr(exc, "retryable", False))
        if retryable and attempt < s.model_max_attempts:
            count("ModelRetries")
            delay = backoff_s(attempt)
            logger.warning(
                "model error; the think will be retried",
                extra={"detail": str(exc)[:300], "attempt": attempt, "retry_in_s": delay},
            )
            raise ThinkRetry(delay, str(exc)) from exc
        count("ModelFailures")
        logger.error(
            "model error; the turn ends with an error answer",
            extra={"detail": str(exc)[:300], "attempt": attempt, "retryable": retryable},
        )
        why = "retries exhausted" if retryable else "not retryable"
        return error_reply("model_error", f"{str(exc)[:500]} ({why} after {attempt} attempt(s))")
    if reply.stop_reason == "max_tokens" and reply.tool_uses:
        # A tool call cut off mid-way cannot be run or answered: the turn ends instead.
        count("ModelFailures")
        return error_reply("model_truncated", "the model reply was cut off (max_tokens) in the middle of a tool call")
    size = len(json.dumps(reply.message, ensure_ascii=False).encode("utf-8"))
    if size > MAX_REPLY_BYTES:
        count("ModelFailures")
        return error_reply(
            "reply_too_large", f"the model reply is {size} bytes; at most {MAX_REPLY_BYTES} can be stored"
        )
    return reply


def _peer_skill_tools(deps: Deps) -> list[dict[str, Any]]:
    """A tool for each skill a delegate's card publishes with a schema (flightdeck.domain.skills.peers)."""
    cards = getattr(deps, "cards", None)  # deps a test builds by hand may have none
    if cards is None:
        return []
    s, specs = deps.settings, list[dict[str, Any]]()
    for delegate in s.agent.delegates:
        try:
            url = (
                s.allowed_host_mapping.check_url(delegate.card_url)
                if delegate.protocol == "a2a"
                else card_url(delegate, s.allowed_host_mapping.resolve)
            )
        except Exception:  # noqa: BLE001 - a delegate whose URL is unknown keeps its free-text tool
            continue
        if url:
            specs.extend(skill_tool_spec(k) for k in peer_card(cards, delegate, url).skills)
    return specs


def call_deadlines(deps: Deps, uses: list[dict[str, Any]], now_ms: int, cap_ms: int | None = None) -> dict[str, int]:
    """Each call's deadline: a delegation's own timeout (its delegate's timeout_ms, else
    ASYNC_TOOL_TIMEOUT_MS); any other call, answered inline, the turn's latest delegation's (or the
    default's), so the turn waits no longer than its longest delegation.

    cap_ms: the request's own deadline (its contract's, from timeout_seconds): no call of the turn is
    waited for past it, whatever its delegate's timeout (one already past times out at once)."""
    s = deps.settings
    own = {}
    for use in uses:
        delegate = s.agent.delegate_for_tool(use["name"])
        if delegate is not None:
            own[use["toolUseId"]] = now_ms + delegate.timeout_or(s.async_tool_timeout_ms)
        mcp_deadline = mcp_tools.call_deadline_ms(s.agent, use["name"], now_ms)
        if mcp_deadline is not None:  # an MCP tool's call: its own timeout (flightdeck.domain.mcp_tools)
            own[use["toolUseId"]] = mcp_deadline
    latest = max(own.values(), default=now_ms + s.async_tool_timeout_ms)
    deadlines = {use["toolUseId"]: own.get(use["toolUseId"], latest) for use in uses}
    return deadlines if cap_ms is None else {i: min(d, cap_ms) for i, d in deadlines.items()}


def _request_deadline(contract: Contract | None) -> int | None:
    return contract.deadline_ms if contract is not None else None


def _start_tools(
    deps: Deps,
    session: Session,
    turn: int,
    uses: list[dict[str, Any]],
    traceparent: str,
    budget: TimeBudget | None,
    seed: TurnSeed | None,
) -> None:
    """seed: the aggregation the reply's own write opened (None: a redelivery, or an A2A session)."""
    s, turns, session_id = deps.settings, deps.turns, session.session_id
    uses = uses[:HARD_MAX_TOOLS_PER_TURN]
    ids = [u["toolUseId"] for u in uses]
    # Past the configured limit a call gets an immediate error result instead of running:
    # the model still hears about every call it made, and a session (one turn at a time)
    # never has more than MAX_TOOLS_PER_TURN delegations in flight.
    allowed, refused = uses[: s.max_tools_per_turn], uses[s.max_tools_per_turn :]
    now = deps.clock.now_ms()
    agg = session.aggregation
    if seed is not None:
        deadlines, arm_timer = seed.deadlines or dict.fromkeys(ids, seed.deadline_ms), True
    elif agg is not None:
        # A redelivery: the first run may have died before arming the timer (a second one is harmless).
        deadlines, arm_timer = {i: agg.deadline_of(i) for i in ids}, agg.status == "waiting"
    else:
        deadlines = call_deadlines(deps, uses, now, _request_deadline(turn_contract(session.messages)))
        arm_timer = turns.seed_turn(
            session_id, turn, ids, max(deadlines.values()), s.session_retention_ms, deadlines=deadlines
        )
        if not arm_timer:
            existing = turns.get_turn(session_id, turn)
            deadlines = {i: existing.deadline_of(i) for i in ids} if existing else deadlines
    if arm_timer:
        # One timer, at the earliest deadline: it re-arms itself for the next one still open
        # (flightdeck.domain.deadlines), so a turn whose deadlines are all one costs one timer.
        first = min(deadlines.values())
        deps.queues.send_timer(
            {"session_id": session_id, "turn": turn, "deadline_ms": first}, math.ceil((first - now) / 1000)
        )
    agent = s.agent
    dispatches: list[dict[str, Any]] = []
    # A redelivered think does not call an MCP tool again whose result is in (a tool may not be idempotent).
    answered = (
        {r.tool_use_id for r in turns.get_results(session_id, turn)}
        if seed is None and any(mcp_tools.split_tool_name(agent, u["name"]) for u in allowed)
        else set()
    )
    for use in refused:
        record_and_advance(
            deps,
            session_id,
            turn,
            error_result(
                use["toolUseId"],
                "too_many_tools",
                ResultSource.LOCAL,
                f"at most {s.max_tools_per_turn} tool calls per turn",
            ),
            by="limit",
            total=len(ids),
        )
    for use in allowed:
        name, tool_use_id, args = use["name"], use["toolUseId"], use.get("input") or {}
        ids_log = {"session_id": session_id, "turn": turn, "tool_use_id": tool_use_id}
        delegate = agent.delegate_for_tool(name)
        # A built-in runs here ("function"); a delegation or an MCP tool calls out ("extension").
        tracing.next_tool(name, tool_use_id, "function" if name in agent.builtin_tools else "extension")
        if delegate is not None:
            try:
                context_id, task_id = asking.continued_context(session, delegate, s.agent_name, args)
            except ValueError as exc:
                record_and_advance(
                    deps,
                    session_id,
                    turn,
                    error_result(tool_use_id, "invalid_context_id", ResultSource.LOCAL, str(exc)),
                    by="local",
                    total=len(ids),
                )
                continue
            timeline(
                "tool_use",
                f"delegating to {delegate.agent}"
                + (f" (continuing {context_id})" if context_id else "")
                + f": {str(args.get('task') or _structured(name, args).get('task', ''))[:80]}",
                **ids_log,
            )
            deadline_ms = deadlines[tool_use_id]
            dispatches.append(
                {
                    "session_id": session_id,
                    "turn": turn,
                    "tool_use_id": tool_use_id,
                    "tool_name": name,
                    "task": str(args.get("task", "")),
                    "total_tools": len(ids),
                    "deadline_ms": deadline_ms,
                    "traceparent": tracing.traceparent(child_traceparent(traceparent)),
                    # The same on every run of this think (its deadline, less its timeout): the same token.
                    "issued_ms": deadline_ms - delegate.timeout_or(s.async_tool_timeout_ms),
                    **({"context_id": context_id} if context_id else {}),
                    **({"task_id": task_id, "question": asking.answered_question(session, task_id)} if task_id else {}),
                    **_structured(name, args),
                }
            )
            continue
        if mcp_tools.split_tool_name(agent, name) is not None:
            if tool_use_id not in answered:
                _call_mcp_tool(deps, use, deadlines[tool_use_id], len(ids), budget, ids_log)
            continue
        if agent.ask_user and name == asking.ASK_USER:
            # Asking ends a turn only when it is all the reply does: here it came with other calls, or
            # without a question. The model hears why, with the other results.
            problem = asking.question_problem(args)
            result = error_result(
                tool_use_id,
                "invalid_input" if problem else "ask_user_not_alone",
                ResultSource.LOCAL,
                f"ask_user: {problem}"
                if problem
                else "ask_user must be the only tool call of its reply: ask again, alone, once these results are in",
            )
        elif name in agent.builtin_tools:
            status, text = builtin_tools.run_builtin_tool(name, args)
            result = ToolResult(tool_use_id, status, text, ResultSource.LOCAL)
        else:
            result = error_result(tool_use_id, "unknown_tool", ResultSource.LOCAL, f"no tool named {name!r}")
        count("LocalToolRuns")
        record_and_advance(deps, session_id, turn, result, by="local", total=len(ids))
    tracing.end_tool()
    dispatch_now(deps, dispatches, budget)


def _call_mcp_tool(
    deps: Deps,
    use: dict[str, Any],
    deadline_ms: int,
    total: int,
    budget: TimeBudget | None,
    ids: dict[str, Any],
) -> None:
    """An MCP tool's call: inline when its timeout fits this think (and what is left of the invocation), else handed
    to the dispatch worker like a delegation, the turn waiting on it until its deadline."""
    agent, name, args = deps.settings.agent, use["name"], use.get("input") or {}
    server, tool = mcp_tools.split_tool_name(agent, name) or (None, "")
    assert server is not None
    timeout_s = server.timeout_of(tool) / 1000
    fits = budget is None or budget.call_timeout_s(timeout_s) >= timeout_s
    timeline("tool_use", f"calling {name}: {json.dumps(args, ensure_ascii=False)[:80]}", mcp_server=server.name, **ids)
    if mcp_tools.is_deferred(agent, name) or not fits:
        count("McpToolCallsDeferred")
        deps.queues.send_dispatch(
            mcp_tools.deferred_message(ids["session_id"], ids["turn"], use["toolUseId"], name, args, total, deadline_ms)
        )
        return
    result = mcp_tools.call(deps, use["toolUseId"], name, args, budget, ids)
    record_and_advance(deps, ids["session_id"], ids["turn"], result, by="mcp", total=total)


def _structured(tool_name: str, args: dict[str, Any]) -> dict[str, Any]:
    """What a delegation carries beyond its task: a structured call (a tool built from the peer's card:
    its arguments are the call's input), and the response_schema the call gave, for the peer to hold to."""
    out: dict[str, Any] = {}
    call = structured_call(tool_name, args)
    if call is not None:
        out.update(skill=call.skill, arguments=call.arguments, task=call.as_text())
    elif args.get("response_schema") is not None:
        out["response_schema"] = args["response_schema"]
    return out


def _resend_after_queued_start(
    deps: Deps, session: Session, turn: int, traceparent: str, budget: TimeBudget | None
) -> str:
    """A redelivered think whose final answer started the next turn with a queued message: what
    follows that write again (the answer's delivery, the A2A task's end, the next think's send)."""
    iteration = deps.iterations.get_iteration(session.session_id, turn)
    if iteration is None:
        return "skipped"
    reply = ModelReply.model_validate(iteration.reply)
    if _runs_tools(deps, reply):
        return "skipped"
    _end_turn(
        deps,
        session,
        turn,
        reply,
        traceparent or session.parent.get("traceparent", ""),
        budget,
        _answer_route(deps, session, turn),
        started=session.input,
        ended=True,
    )
    return "resent"


def _end_turn(
    deps: Deps,
    session: Session,
    turn: int,
    reply: ModelReply,
    traceparent: str,
    budget: TimeBudget | None,
    route: ReplyRoute | None,
    started: QueuedMessage | None = None,
    ended: bool = False,
) -> str:
    """What follows a final answer: its delivery on the reply route it answers, the A2A task's end,
    and, when the write that ended the turn started the next one with a queued message (`started`),
    that think's send. ended: that write ended the turn; otherwise (state written before that was so)
    the session is ended now, if it is still busy at this turn."""
    sessions, session_id = deps.sessions, session.session_id
    question = _question(deps, reply)
    answer = question if question is not None else reply.text
    status = "error" if reply.error else asking.INPUT_REQUIRED if question is not None else "success"
    if route is not None:
        # The delivery message carries all delivery needs; a question names the session to continue.
        deliver_now(
            deps,
            {
                "session_id": session_id,
                "callback_service": route.callback_service,
                "bearer_token": route.bearer_token,
                "result": answer,
                "traceparent": tracing.traceparent(traceparent),  # the callback: this think's child
                "created_ms": deps.clock.now_ms(),
                "status": status,
                **({"context_id": session_id} if question is not None else {}),
            },
            budget,
        )
        if route.status == "active":
            sessions.retire_route(session_id, route.bearer_token)
        timeline(
            "answer_ready",
            f"{'question' if question is not None else 'answer'} ready for {route.callback_service}",
            session_id=session_id,
            turn=turn,
        )
    elif question is not None:
        timeline("input_required", question[:500], session_id=session_id, turn=turn)
    else:
        timeline("final_answer", answer[:500], session_id=session_id, turn=turn)
    if not ended and session.status == "busy":
        started = sessions.finish_session_turn(session_id, turn, deps.settings.session_retention_ms).next_input
    if (
        session.has_a2a_task
    ):  # its A2A task completes, fails with the error answer, or waits for input (unless it goes on)
        deps.turn_hooks.on_end_turn(deps, session_id, turn, answer, failed=status == "error", question=question)
    if started is not None:
        _send_next_think(deps, session_id, turn + 1)
    return "error" if reply.error else status if question is not None else "end_turn"


def _send_next_think(deps: Deps, session_id: str, turn: int) -> None:
    """The think of a turn a queued message started. Its owed mark was written with that start, so a
    failed start is the sweep's to redo (as at ingest), not a reason to fail what came before."""
    timeline("queued_turn_started", f"the next queued message starts turn {turn}", session_id=session_id, turn=turn)
    try:
        deps.thinks.start(session_id, turn)
    except Exception:  # noqa: BLE001 - owed: the sweep re-sends it after its grace
        logger.exception(
            "the next think was not started after a queued message started its turn; the sweep will",
            extra={"session_id": session_id, "turn": turn},
        )
        count("ThinkSendsDeferred")
