"""Skills as contracts (docs/SKILLS.md): what an agent offers, with the JSON Schemas of what each skill
takes and returns, which channels may call it, and how a call is made and answered.

A call is *structured* (a skill and its arguments, checked against the skill's input schema before
anything is stored) or *conversational* (text for the model). Either may carry the caller's own
`responseSchema`. What the turn's answer must match travels with the turn's input message as its
`contract` (stored with it, never shown to the model), and the answer is checked against it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from flightdeck.domain.invalid_value import InvalidValue
from flightdeck.domain.skills.schemas import SCHEMA_VERSION, SchemaError, check_schema, errors

Channel = Literal["a2a", "mcp", "internal"]
CHANNELS: tuple[str, ...] = ("a2a", "mcp", "internal")
SKILL_ID = r"^[a-z0-9][a-z0-9_-]{0,63}$"
# The text form of a structured call: `skill:get_quote {"product": "x"}` (arguments optional).
_TEXT_CALL = re.compile(r"^\s*skill:([A-Za-z0-9_-]{1,64})(?:\s+(.*))?$", re.DOTALL)
# The A2A extension that publishes skill contracts in the card (flightdeck.api.card_routes, docs/SKILLS.md).
SKILL_CONTRACTS_URI = "urn:flightdeck:a2a:ext:skill-contracts:v1"
# The key of a stored user message that holds its contract (flightdeck.domain.turn_loop strips it
# before the model sees the conversation).
CONTRACT_KEY = "contract"


class Skill(BaseModel):
    """One skill of an agent, as the deployment file declares it (`[[agents.NAME.skills]]`)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=SKILL_ID, description="The skill's id: in the card, in structured calls, in tool names.")
    name: str = Field("", max_length=200, description="Its title (empty: the id).")
    description: str = Field("", max_length=2000, description="What it does, for callers and their models.")
    # Lambdas, not `list`: pydantic reads a factory's signature, and reading a builtin's compiles the tokenizer's
    # regex, about a millisecond at every function's start.
    tags: list[str] = Field(default_factory=lambda: [], max_length=20, description="The card's tags.")
    # Prompts (text) or arguments (objects, checked against input_schema) that show how it is called.
    examples: list[str | dict[str, Any]] = Field(
        default_factory=lambda: [], max_length=20, description="Prompts, or arguments checked against input_schema."
    )
    input_schema: dict[str, Any] | None = Field(
        None, description="The JSON Schema of its arguments (a structured call)."
    )
    output_schema: dict[str, Any] | None = Field(
        None, description="The JSON Schema its answer is held to (a mismatch is marked schema_mismatch)."
    )
    # The channels that may call it: A2A peers, MCP clients, or only this agent's own users ("internal").
    expose: list[Channel] = Field(
        default_factory=lambda: list[Channel](["a2a"]),
        description="The channels that may call it (internal: only its own users).",
    )
    # A deterministic handler (flightdeck.domain.skills.handlers): a structured call needs no model.
    handler: str = Field("", description="A deterministic handler that answers without a model (empty: the model).")

    @model_validator(mode="after")
    def _contracts_hold(self) -> Skill:
        for key in ("input_schema", "output_schema"):
            schema = getattr(self, key)
            if schema is not None:
                try:
                    check_schema(schema)
                except SchemaError as exc:
                    raise InvalidValue(
                        str(exc), "correct the schema (JSON Schema 2020-12; docs/SKILLS.md)", (key,)
                    ) from None
        for index, example in enumerate(self.examples):
            if isinstance(example, dict) and self.input_schema is not None:
                wrong = errors(self.input_schema, example)
                if wrong:
                    raise InvalidValue(
                        f"does not match input_schema: {'; '.join(wrong)}",
                        "make the example match input_schema, or remove it",
                        ("examples", index),
                    )
        return self

    @property
    def title(self) -> str:
        return self.name or self.id

    def exposed_to(self, channel: str) -> bool:
        return channel in self.expose


def skill_of(value: str | dict[str, Any] | Skill) -> Skill:
    """A skill from the deployment file: an object, or (the older form, still read) a bare name."""
    if isinstance(value, Skill):
        return value
    if isinstance(value, str):
        slug = re.sub(r"[^a-z0-9_-]+", "-", value.strip().lower()).strip("-")[:64] or "skill"
        return Skill(id=slug, name=value, description=value, tags=[value])
    return Skill.model_validate(value)


class SkillCall(BaseModel):
    """A structured call: the skill to run and its arguments."""

    # defer_build (here, Contract, Checked): built by the first request that uses one, not at every start.
    model_config = ConfigDict(extra="forbid", defer_build=True)

    skill: str = Field(min_length=1, max_length=64)
    arguments: dict[str, Any] = Field(default_factory=dict)

    def as_text(self) -> str:
        """How the call reads in the conversation (and to a model that runs the skill)."""
        return f"skill:{self.skill} {json.dumps(self.arguments, ensure_ascii=False, separators=(',', ':'))}"


class CallError(ValueError):
    """A structured call that cannot be taken: `problems` lists what is wrong (nothing was stored)."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message + (": " + "; ".join(problems) if problems else ""))
        self.problems = problems or []


def text_call(text: str) -> SkillCall | None:
    """The structured call a text message makes (`skill:<id> {json}`), or None for plain text. Raises
    CallError for a `skill:` prefix whose arguments are not a JSON object."""
    match = _TEXT_CALL.match(text)
    if match is None:
        return None
    raw = (match.group(2) or "").strip()
    try:
        arguments = json.loads(raw) if raw else {}
    except ValueError:
        raise CallError(f"skill:{match.group(1)}: the arguments after the skill id are not JSON") from None
    if not isinstance(arguments, dict):
        raise CallError(f"skill:{match.group(1)}: the arguments are a JSON object, not {type(arguments).__name__}")
    return SkillCall(skill=match.group(1), arguments=arguments)


def data_call(data: dict[str, Any]) -> SkillCall | None:
    """The structured call a data part makes ({"skill", "arguments"}), or None for other data."""
    if not isinstance(data.get("skill"), str) or not set(data) <= {"skill", "arguments"}:
        return None
    arguments = data.get("arguments", {})
    if not isinstance(arguments, dict):
        raise CallError(f"skill {data['skill'][:64]!r}: arguments must be a JSON object")
    return SkillCall(skill=data["skill"], arguments=arguments)


class Contract(BaseModel):
    """What a turn's answer must match, stored with the turn's input message."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    skill: str = ""
    arguments: dict[str, Any] | None = None
    # The schema the answer is held to: the caller's responseSchema, else the skill's output_schema.
    output_schema: dict[str, Any] | None = None
    # Where output_schema came from: "caller" (responseSchema) or "skill".
    source: Literal["caller", "skill", ""] = ""
    schema_version: str = SCHEMA_VERSION
    # The caller's bound on this request (timeout_seconds, capped by the agent's own): when the turn's
    # delegations stop being waited for (epoch ms).
    deadline_ms: int | None = None


def bind(
    skills: list[Skill],
    channel: str,
    call: SkillCall | None,
    response_schema: dict[str, Any] | None,
    deadline_ms: int | None = None,
) -> Contract | None:
    """The contract of one request, checked: the call names a skill exposed to `channel` and its
    arguments match the skill's input schema. Raises CallError listing what is wrong."""
    skill = None
    if call is not None:
        skill = next((s for s in skills if s.id == call.skill), None)
        if skill is None or not (skill.exposed_to(channel) or channel == "internal"):
            offered = ", ".join(s.id for s in skills if s.exposed_to(channel) or channel == "internal") or "none"
            raise CallError(f"no skill {call.skill[:64]!r} is offered here (skills: {offered})")
        if skill.input_schema is not None:
            wrong = errors(skill.input_schema, call.arguments)
            if wrong:
                raise CallError(f"the arguments of skill {skill.id!r} do not match its input_schema", wrong)
    output = response_schema if response_schema is not None else (skill.output_schema if skill else None)
    if skill is None and output is None and deadline_ms is None:
        return None
    return Contract(
        skill=skill.id if skill else "",
        arguments=call.arguments if call is not None else None,
        output_schema=output,
        source="caller" if response_schema is not None else ("skill" if output is not None else ""),
        deadline_ms=deadline_ms,
    )


class Checked(BaseModel):
    """An answer held to its contract: the JSON it parsed to, or what is wrong with it."""

    model_config = ConfigDict(defer_build=True)
    data: Any = None
    valid: bool = True
    errors: list[str] = Field(default_factory=lambda: [])
    schema_version: str = SCHEMA_VERSION

    def marked(self, raw: str) -> dict[str, Any]:
        """The answer as a caller receives it: the data, or the raw text with `schema_mismatch` and the
        errors beside it (never dropped, never a crash)."""
        if self.valid:
            return {"data": self.data, "schema_version": self.schema_version}
        return {"schema_mismatch": True, "errors": self.errors, "raw": raw, "schema_version": self.schema_version}


def check_answer(schema: dict[str, Any] | None, text: str) -> Checked:
    """Hold a final answer's text to `schema`: it must be JSON that matches."""
    try:
        data = json.loads(text)
    except ValueError:
        return Checked(valid=False, errors=["the answer is not JSON"])
    if schema is None:
        return Checked(data=data)
    wrong = errors(schema, data)
    return Checked(data=data, valid=not wrong, errors=wrong)


def contract_of(message: dict[str, Any]) -> Contract | None:
    stored = message.get(CONTRACT_KEY)
    return Contract.model_validate(stored) if isinstance(stored, dict) else None


def for_model(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as the model is given it: contracts are ours, not Converse's."""
    return [{k: v for k, v in m.items() if k != CONTRACT_KEY} if CONTRACT_KEY in m else m for m in messages]


def turn_contract(messages: list[dict[str, Any]]) -> Contract | None:
    """The contract of the turn under way: the one its input message (the latest user message that is
    not a message of tool results) carries."""
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        if any("toolResult" in b for b in message.get("content", [])):
            continue
        return contract_of(message)
    return None


def checked_result(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last turn's answer held to that turn's contract (Checked.marked), when it ended with one."""
    if not messages or messages[-1].get("role") != "assistant":
        return None
    content = messages[-1].get("content", [])
    if any("toolUse" in b for b in content):
        return None
    contract = turn_contract(messages[:-1])
    if contract is None or contract.output_schema is None:
        return None
    raw = "".join(b.get("text", "") for b in content)
    return check_answer(contract.output_schema, raw).marked(raw)
