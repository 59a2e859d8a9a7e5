"""Skills with contracts over A2A (docs/SKILLS.md): what a message/send or message/stream asks of its answer.

A message makes a structured call with a data part `{"skill": id, "arguments": {...}}` or a text part
`skill:<id> {json}`; its arguments are checked against the skill's input schema (skills exposed to "a2a"
only) before anything is stored. The caller's responseSchema comes in the request's metadata or the
message's (`responseSchema` or `response_schema`, JSON Schema or the shorthand), a bound on the request as
`timeout_seconds` beside it. Anything wrong is -32602 listing what, and nothing is written.

The task keeps its contract in the write that stores it (TaskRecord.contract), so its answer renders with
no read more: a data part with the JSON beside the text, or the text with the mismatch marked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from flightdeck.domain.a2a.core_models import SendMessageRequest
from flightdeck.domain.a2a.ports import TaskRecord
from flightdeck.domain.a2a.protocol import INVALID_PARAMS, A2AError
from flightdeck.domain.ports import Deps
from flightdeck.domain.skills.contract import CallError, Contract, SkillCall, bind, check_answer, data_call, text_call
from flightdeck.domain.skills.schemas import SchemaError
from flightdeck.domain.skills.schemas import response_schema as response_schema_of

SCHEMA_KEYS = ("responseSchema", "response_schema")
TIMEOUT_KEYS = ("timeout_seconds", "timeoutSeconds")
# As /api/chat's timeout_seconds: a week at most (the agent's own ASYNC_TOOL_TIMEOUT_MS caps it anyway).
MAX_TIMEOUT_S = 7 * 86_400


@dataclass(frozen=True)
class PartCall:
    """The structured call a message's part makes: which part, and the call."""

    index: int
    call: SkillCall


def _call_error(index: int, problem: str, problems: list[str] | None = None) -> A2AError:
    data: dict[str, Any] = {"part": index}
    if problems:
        data["problems"] = problems
    return A2AError(INVALID_PARAMS, f"Invalid params: message.parts.{index}: {problem}", data)


def call_of(parts: list[Any]) -> PartCall | None:
    """The message's structured call, if a part makes one (a data part of exactly {skill, arguments}, or
    the text `skill:<id> {json}`); other data parts are data for the model. Raises A2AError for a call
    that is malformed, or for more than one."""
    found: list[PartCall] = []
    for index, part in enumerate(parts):
        try:
            # Any message's parts (the core's, or v0.3's the client reads): a data part's data, a text part's text.
            data, text = getattr(part, "data", None), getattr(part, "text", None)
            if isinstance(data, dict):
                call = data_call(data)
            elif isinstance(text, str):
                call = text_call(text)
            else:
                continue
        except CallError as exc:
            raise _call_error(index, str(exc)) from None
        except ValidationError as exc:  # a skill id of no allowed length
            raise _call_error(index, f"skill: {exc.errors()[0].get('msg', 'invalid')}") from None
        if call is not None:
            found.append(PartCall(index, call))
    if len(found) > 1:
        raise A2AError(
            INVALID_PARAMS,
            "Invalid params: message.parts: one structured call per message "
            f"(parts {', '.join(str(f.index) for f in found)} each make one)",
        )
    return found[0] if found else None


def _given(params: SendMessageRequest, keys: tuple[str, ...]) -> tuple[str, Any] | None:
    """(where, value) of the one value the request's or the message's metadata gives under `keys`."""
    found: list[tuple[str, Any]] = []
    for where, metadata in (("params.metadata", params.metadata), ("params.message.metadata", params.message.metadata)):
        for key in keys:
            if isinstance(metadata, dict) and metadata.get(key) is not None:
                found.append((f"{where}.{key}", metadata[key]))
    for other in found[1:]:
        if other[1] != found[0][1]:
            raise A2AError(INVALID_PARAMS, f"Invalid params: {found[0][0]} and {other[0]} differ: give one")
    return found[0] if found else None


def message_contract(deps: Deps, params: SendMessageRequest) -> Contract | None:
    """The contract of a message to this agent over A2A, checked before anything is stored: its structured
    call (bound to a skill exposed to "a2a"), the caller's responseSchema, its timeout_seconds. Raises
    A2AError (-32602) saying what is wrong."""
    part = call_of(params.message.parts)
    schema = None
    given = _given(params, SCHEMA_KEYS)
    if given is not None:
        try:
            schema = response_schema_of(given[1])
        except SchemaError as exc:
            raise A2AError(INVALID_PARAMS, f"Invalid params: {given[0]}: {exc}", {"field": given[0]}) from None
    deadline_ms = None
    bound = _given(params, TIMEOUT_KEYS)
    if bound is not None:
        seconds = bound[1]
        if isinstance(seconds, bool) or not isinstance(seconds, int) or not 0 < seconds <= MAX_TIMEOUT_S:
            raise A2AError(
                INVALID_PARAMS, f"Invalid params: {bound[0]}: a whole number of seconds, 1 to {MAX_TIMEOUT_S}"
            )
        # Capped by the agent's own bound, as /api/chat's is (flightdeck.domain.chat.chat_contract).
        deadline_ms = deps.clock.now_ms() + min(seconds * 1000, deps.settings.async_tool_timeout_ms)
    try:
        return bind(deps.settings.agent.skills, "a2a", part.call if part else None, schema, deadline_ms)
    except CallError as exc:
        raise _call_error(part.index if part else 0, str(exc), exc.problems) from None


def stored_contract(contract: Contract | None) -> dict[str, Any] | None:
    """The contract as the task record keeps it."""
    return contract.model_dump(exclude_none=True) if contract is not None else None


def record_contract(stored: dict[str, Any] | None) -> Contract | None:
    return Contract.model_validate(stored) if stored else None


def continuing_contract(contract: Contract | None, task: TaskRecord) -> Contract | None:
    """The contract of a message that continues a task (or answers its question): its own, else the schema
    the task's answer is held to, so the turn that answers is held to it too. Not the task's call (its
    handler answered it already) nor its deadline (the bound was on that request)."""
    if contract is not None:
        return contract
    first = record_contract(task.contract)
    if first is None or first.output_schema is None:
        return None
    return Contract(output_schema=first.output_schema, source=first.source, schema_version=first.schema_version)


def answer_parts(answer: str, contract: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A completed task's answer as its artifact's parts. Held to a schema: a data part (the JSON) and the
    text; an answer that does not match: the text, and a data part marking the mismatch with its errors
    (Checked.marked: never dropped). Without a schema: the text alone, as before."""
    text = {"kind": "text", "text": answer}
    schema = (contract or {}).get("output_schema")
    if schema is None:
        return [text]
    checked = check_answer(schema, answer)
    if checked.valid:
        # A2A's data part holds an object: an answer that is other JSON (a list, a number) is its text alone.
        return [{"kind": "data", "data": checked.data}, text] if isinstance(checked.data, dict) else [text]
    return [text, {"kind": "data", "data": checked.marked(answer)}]


def answer_text(parts: list[Any]) -> str | None:
    """The JSON text of an answer's data (an A2A peer's parts: plain dicts or wire models): the data of its
    first data part; for an answer the peer marked as not matching its schema, the raw text it gave (held
    to our own schema again: flightdeck.domain.skills.peers.mark_results). None when no part holds any."""
    for part in parts or []:
        kind = part.get("kind") if isinstance(part, dict) else getattr(part, "kind", None)
        data = part.get("data") if isinstance(part, dict) else getattr(part, "data", None)
        if kind != "data" or not isinstance(data, dict) or not data:
            continue  # an empty data part says nothing: the text is the answer
        if data.get("schema_mismatch") is True and isinstance(data.get("raw"), str):
            return str(data["raw"])
        return json.dumps(data, ensure_ascii=False)
    return None
