"""What every A2A version shares and the core speaks: task states, JSON-RPC and A2A error codes, A2AError.

No wire shape here: v0.3's (flightdeck.domain.a2a.wire) and v1.0's (flightdeck.domain.a2a.wire_v1) are the
versions' own; the core imports neither (tests/unit/test_import_graph.py).
"""

from __future__ import annotations

from typing import Any, Literal

TaskState = Literal[
    "submitted", "working", "input-required", "completed", "canceled", "failed", "rejected", "auth-required", "unknown"
]
TERMINAL_STATES: frozenset[str] = frozenset({"completed", "canceled", "failed", "rejected"})
# States in which a task waits on its client: for a delegating agent, an answer it cannot give.
INTERRUPTED_STATES: frozenset[str] = frozenset({"input-required", "auth-required"})

ACCEPTED_PARTS = (
    "text parts, data parts (a structured call {skill, arguments}, else given to the model as JSON text), "
    "and file parts with inline bytes of text/* or application/json"
)

# --- JSON-RPC and A2A error codes ------------------------------------------------------
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005
EXTENDED_CARD_NOT_CONFIGURED = -32007
# Ours, in JSON-RPC's server-error range (-32000 to -32099; A2A's own codes start at -32001): the agent is at
# its max_concurrent_tasks, and the message would have started a task; send it again later.
AGENT_BUSY = -32000


class A2AError(Exception):
    """A JSON-RPC error a method answers with (HTTP 200, an `error` member; each version's edge shapes it)."""

    def __init__(self, code: int, message: str, data: Any = None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data
