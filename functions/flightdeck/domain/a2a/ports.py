"""What the A2A use cases need from the outside world: task records and an HTTP GET.

Records live in the agent's one table, in the session's partition (see
flightdeck.adapters.a2a_state for the key layout).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from flightdeck.domain.http_ports import PeerAnswer

# An A2A task id names its context (our session) and a random key: "<session_id>~<key>".
TASK_ID_SEPARATOR = "~"
# What code outside the A2A add-on needs of it, here so it need not import the add-on's larger modules:
# the kinds of its queue messages, a push notification (delivery queue) and a poll of a remote task
# (timers queue), and what a message to this agent may carry (the agent card's defaultInputModes).
PUSH_KIND = "a2a_push"
POLL_KIND = "a2a_poll"
INPUT_MODES = ("text/plain", "text/*", "application/json")


def task_id_of(session_id: str, key: str) -> str:
    return f"{session_id}{TASK_ID_SEPARATOR}{key}"


def parse_task_id(task_id: str) -> tuple[str, str] | None:
    session_id, sep, key = task_id.rpartition(TASK_ID_SEPARATOR)
    if not sep or not session_id or not key or len(key) > 64 or not key.isalnum():
        return None
    return session_id, key


@dataclass(frozen=True)
class TaskRecord:
    """One A2A task: the turns of one session from `start_turn` until the session is idle again."""

    session_id: str
    key: str
    state: str
    start_turn: int
    user_message: dict[str, Any]  # the A2A message that started it, as received
    created_ms: int
    updated_ms: int
    end_turn: int = 0
    answer: str = ""
    status_text: str = ""
    notified: bool = False
    # The peer that sent the task (its context's owner); "" when made while authentication was off.
    owner: str = ""
    # What its answer must match (flightdeck.domain.a2a.contracts): the contract its message made, stored
    # with it so the answer renders as data with no read more; None without one.
    contract: dict[str, Any] | None = None
    # The question an answer resumed it from (kept until that answer is in the session), and whether its
    # message is still to be handed to the session (due in the deadline index: recover_task owns it).
    asked_text: str = ""
    asked_turn: int = 0
    handoff_due: bool = False

    @property
    def task_id(self) -> str:
        return task_id_of(self.session_id, self.key)


@dataclass(frozen=True)
class CurrentTask:
    """The session's latest A2A task; `open` while it is not terminal."""

    session_id: str
    key: str
    start_turn: int
    open: bool
    state: str
    closed_turn: int = 0  # the turn at which a canceled task's session went idle


@dataclass(frozen=True)
class RemoteTask:
    """A's record of a task it gave to an A2A peer (one delegation)."""

    session_id: str
    turn: int
    tool_use_id: str
    agent: str
    rpc_url: str
    remote_task_id: str
    mode: str  # "push" | "poll"
    deadline_ms: int
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StoredMessage:
    turn: int
    message: dict[str, Any]  # Converse-shaped, as the session stores it
    message_id: str = ""  # the A2A messageId of a user message that continued a task
    queued: bool = False  # it waits in the session's inbox (its turn has not started)


class A2AStatePort(Protocol):
    def create_task(self, task: TaskRecord, push: dict[str, Any] | None, retention_ms: int) -> str: ...
    def start_task(self, session_id: str, key: str, start_turn: int) -> bool: ...
    def get_task(self, session_id: str, key: str) -> TaskRecord | None: ...
    def finish_task(
        self,
        session_id: str,
        key: str,
        state: str,
        *,
        answer: str = "",
        status_text: str = "",
        end_turn: int = 0,
        only_from: str = "",
        closed_turn: int = 0,
        unless_continued: bool = False,
    ) -> bool: ...
    def ask_input(self, session_id: str, key: str, question: str, end_turn: int, *, notified: bool = False) -> bool: ...
    def resume_task(self, session_id: str, key: str) -> bool: ...
    def mark_notified(self, session_id: str, key: str) -> None: ...
    def get_current(self, session_id: str) -> CurrentTask | None: ...
    def set_closed_turn(self, session_id: str, key: str, turn: int) -> None: ...
    def put_push(self, session_id: str, key: str, config: dict[str, Any], retention_ms: int) -> None: ...
    def get_push(self, session_id: str, key: str, config_id: str) -> dict[str, Any] | None: ...
    def list_push(self, session_id: str, key: str) -> list[dict[str, Any]]: ...
    def delete_push(self, session_id: str, key: str, config_id: str) -> None: ...
    def task_messages(
        self, session_id: str, start_turn: int, end_turn: int = 0, task_key: str = ""
    ) -> list[StoredMessage]: ...
    def put_remote(self, remote: RemoteTask, retention_ms: int) -> None: ...
    def get_remote(self, session_id: str, turn: int, tool_use_id: str) -> RemoteTask | None: ...


class A2AHttpPort(Protocol):
    def get_json(self, url: str, headers: dict[str, str] | None = None) -> PeerAnswer: ...


@dataclass
class A2APorts:
    store: A2AStatePort
    http: A2AHttpPort


def ports(deps: Any) -> A2APorts:
    """The A2A ports of a Deps (flightdeck.wiring sets them)."""
    a2a: A2APorts | None = getattr(deps, "a2a", None)
    if a2a is None:
        raise RuntimeError("A2A ports are not wired (Deps.a2a)")
    return a2a
