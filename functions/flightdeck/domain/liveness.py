"""Liveness: every busy session makes progress or is released within a bounded time.

A step that must follow a committed state change has an owner that retries it until done:

- a think made due by a commit (a new message, a completed turn) is marked owed in that same
  write; the think's first write clears the mark; the sweep re-sends an owed think whose
  grace has passed (the turn worker's idempotency makes a re-send harmless). With THINK_START =
  "stream" the table's stream starts it instead (flightdeck.domain.owed_thinks), and the mark is
  in the sweep's index only on the recovery paths (ARCHITECTURE §3);
- a turn waiting on results has its deadline timer, and the sweep as the backstop;
- effects of a think (timer, dispatches, delivery) are owned by the think's invocation itself:
  one that fails before they are all sent is run again by Lambda's asynchronous retries (a
  delayed retry message, by SQS redelivery), then its record goes to the turns queue, whose
  consumer hands the think to the sweep.

The bound: a session is released by its deadline + one sweep interval + the retry budget
(model attempts, owed grace). Anything the sweep finds past that is counted as SessionsOverdue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["deadline", "think", "handoff"]


@dataclass(frozen=True)
class Overdue:
    session_id: str
    turn: int
    # "deadline": a waiting turn past its deadline; "think": an owed think past its grace; "handoff": a
    # protocol task (A2A) whose message was not handed to its session in time (Deps.recoverers owns it).
    kind: Kind
    due_ms: int
    key: str = ""  # "handoff": the task's key
