"""The A2A add-on at the turn loop's boundaries (A2ATurnHooks, Deps.turn_hooks, registered in flightdeck.wiring).

* `on_end_turn`: a turn ended with a final answer (the task completes, or fails on an error) or a question (the
  task waits in `input-required`, the question its status message; flightdeck.domain.asking), unless a message
  continuing the task already started the next turn: that is its answer;
* `stop_if_canceled`, before a think: a canceled task thinks no more (`close_canceled` ends its session);
* `on_session_canceled`: a session canceled through the REST API ends its open task canceled too.

Every terminal transition is one conditional write; its winner notifies (flightdeck.domain.a2a.push).
"""

from __future__ import annotations

from typing import Any

from flightdeck.domain.a2a.ports import CurrentTask, ports, task_id_of
from flightdeck.domain.a2a.protocol import TERMINAL_STATES
from flightdeck.domain.a2a.push import notify
from flightdeck.domain.ports import Deps
from flightdeck.domain.records import MessageSlot, ResultSource, ToolResult, error_result
from flightdeck.observability import count, logger, timeline

CANCELED_TEXT = "The task was canceled by the client; no further work was done."


def canceled_result(tool_use_id: str) -> ToolResult:
    return error_result(tool_use_id, "canceled", ResultSource.TIMEOUT, "the A2A task was canceled by its client")


def close_canceled(deps: Deps, session_id: str, turn: int, key: str) -> None:
    """End a canceled task's session at `turn`: results for any open tool calls, a closing line, idle."""
    sessions, retention = deps.sessions, deps.settings.session_retention_ms
    session = sessions.get_session(session_id)
    if session is None:
        return
    last = session.messages[-1] if session.messages else {}
    uses = [b["toolUse"] for b in last.get("content", []) if "toolUse" in b] if last.get("role") == "assistant" else []
    closing: list[tuple[int, dict[str, Any]]] = []
    if uses:
        # A conversation never leaves a tool call without its result (Converse requires one).
        results = {r.tool_use_id: r for t in (turn - 1, turn) for r in deps.turns.get_results(session_id, t)}
        blocks = [results.get(u["toolUseId"], canceled_result(u["toolUseId"])).as_block() for u in uses]
        closing.append((int(MessageSlot.CLOSING_RESULTS), {"role": "user", "content": blocks}))
    closing.append((int(MessageSlot.CLOSING_TEXT), {"role": "assistant", "content": [{"text": CANCELED_TEXT}]}))
    a2a = ports(deps).store
    # Before the session ends: once it is idle, a later turn of it is not this task's (stop_if_canceled).
    a2a.set_closed_turn(session_id, key, turn)
    # The closing messages and the turn's end in one write (an append would clear the owed mark): until
    # it commits, the session is busy at this turn with the mark the cancel's completion wrote, so the
    # sweep's think redoes the close; a think that closes is redone by its invocation's retry.
    end = sessions.finish_session_turn(session_id, turn, retention, messages=closing)
    rec = a2a.get_task(session_id, key)
    if rec is not None and rec.state in TERMINAL_STATES and not rec.notified:
        notify(deps, rec)  # the cancel may have died before its own notification
    timeline("a2a_session_stopped", f"canceled task: session stopped at turn {turn}", session_id=session_id, turn=turn)
    if end.next_input is not None:
        # The inbox had a message: its turn started in the write that closed this one (and is owed).
        try:
            deps.thinks.start(session_id, turn + 1)
        except Exception:  # noqa: BLE001 - owed: the sweep re-sends it after its grace
            logger.exception(
                "the next think was not sent; the sweep will send it",
                extra={"session_id": session_id, "turn": turn + 1},
            )


def stop_if_canceled(deps: Deps, session_id: str, turn: int, input_task: str = "") -> bool:
    """True (and the session closed) when this turn belongs to an A2A task that was canceled.

    input_task: the task the message that started this turn continued (a message queued for a task
    that was canceled before its turn came gets no think: its turn is closed at once)."""
    if getattr(deps, "a2a", None) is None:
        return False
    current = ports(deps).store.get_current(session_id)
    if current is None or current.open or current.state != "canceled":
        return False
    if input_task and input_task == current.key:
        close_canceled(deps, session_id, turn, current.key)
        return True
    if turn < current.start_turn or (current.closed_turn and turn > current.closed_turn):
        return False
    close_canceled(deps, session_id, turn, current.key)
    return True


def _task_of_turn(deps: Deps, session_id: str, turn: int) -> CurrentTask | None:
    """The session's latest A2A task, if this turn is one of its (None on a deployment without A2A)."""
    if getattr(deps, "a2a", None) is None:
        return None
    current = ports(deps).store.get_current(session_id)
    return None if current is None or turn < current.start_turn else current


def on_session_canceled(deps: Deps, session_id: str, turn: int, text: str) -> None:
    """The session was canceled through the REST API (flightdeck.domain.session_cancel) and closed at
    `turn`: its open A2A task, if any, ends canceled too (once), and is notified."""
    current = _task_of_turn(deps, session_id, turn)
    if current is None:
        return
    a2a = ports(deps).store
    if current.open and a2a.finish_task(session_id, current.key, "canceled", status_text=text, end_turn=turn):
        count("A2ATasksCanceled")
        a2a.set_closed_turn(session_id, current.key, turn)
    rec = a2a.get_task(session_id, current.key)
    if rec is not None and rec.state in TERMINAL_STATES and not rec.notified:
        notify(deps, rec)


def on_end_turn(
    deps: Deps, session_id: str, turn: int, answer: str, failed: bool = False, question: str | None = None
) -> None:
    """The session's turn ended with a final answer: its open A2A task completes (once), or fails
    when the answer is an error (the model could not answer); or with a question: the task waits in
    input-required, the question its status message (once per turn).

    Either way, unless a message continuing the task (sent with its taskId while it worked) started the
    next turn in the write that ended this one: the task goes on working into that turn. After a
    question, that message is its answer (the model is given it as the answer, as it would be given
    the client's reply), so the task does not wait for another: it never shows input-required for a
    question already answered, and a message the client sends next continues the task as any other."""
    current = _task_of_turn(deps, session_id, turn)
    if current is None:
        return
    a2a = ports(deps).store
    if current.open and question is not None:
        if a2a.ask_input(session_id, current.key, question, turn):
            count("A2ATasksInputRequired")
            timeline(
                "a2a_task_input_required",
                f"A2A task {task_id_of(session_id, current.key)} input-required",
                session_id=session_id,
                turn=turn,
            )
    elif current.open:
        state = "failed" if failed else "completed"
        # Unless a message continuing the task started the next turn: the task goes on into it.
        if a2a.finish_task(
            session_id,
            current.key,
            state,
            answer=answer,
            end_turn=turn,
            status_text=answer if failed else "",
            unless_continued=True,
        ):
            count("A2ATasksFailed" if failed else "A2ATasksCompleted")
            timeline(
                f"a2a_task_{state}",
                f"A2A task {task_id_of(session_id, current.key)} {state}",
                session_id=session_id,
                turn=turn,
            )
    elif current.state == "canceled" and not current.closed_turn:
        a2a.set_closed_turn(session_id, current.key, turn)  # a think that was under way when it was canceled
    rec = a2a.get_task(session_id, current.key)
    if rec is not None and (rec.state in TERMINAL_STATES or rec.state == "input-required") and not rec.notified:
        notify(deps, rec)


class A2ATurnHooks:
    """The A2A add-on at the turn loop's boundaries (Deps.turn_hooks, registered in flightdeck.wiring)."""

    def stop_if_canceled(self, deps: Deps, session_id: str, turn: int, input_task: str = "") -> bool:
        return stop_if_canceled(deps, session_id, turn, input_task)

    def on_session_canceled(self, deps: Deps, session_id: str, turn: int, text: str) -> None:
        on_session_canceled(deps, session_id, turn, text)

    def on_end_turn(
        self, deps: Deps, session_id: str, turn: int, answer: str, failed: bool = False, question: str | None = None
    ) -> None:
        on_end_turn(deps, session_id, turn, answer, failed=failed, question=question)
