"""Delegation tools built from a peer's card: each skill a delegate publishes with an input schema becomes a
tool of its own for this agent's model (`<agent>__<skill>`), called as a structured call; its answer is
held to the skill's output schema when it comes back.

A delegate's card is read on first use and again after CARD_TTL_S (in this process: a function reads it
once per warm container and TTL, never per think). A card that cannot be read or checked is reported
with its URL and why, and that delegate keeps its free-text tool only: it never fails the turn. Reading
a card is discovery, not trust: the delegate and the card's URL are the ones the deployment's allowlist
names, as for every delegation.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Protocol

from flightdeck.domain.agent import DelegateTool
from flightdeck.domain.http_ports import PeerAnswer
from flightdeck.domain.skills.contract import SKILL_CONTRACTS_URI, SkillCall, check_answer
from flightdeck.domain.skills.schemas import SchemaError, check_schema, response_schema
from flightdeck.observability import count, logger

CARD_PATH = "/.well-known/agent-card.json"
CARD_TTL_S = 300.0
# A card that could not be read is tried again this much later (not on every think).
CARD_RETRY_S = 30.0
# Converse (Bedrock) tool names: ^[a-zA-Z0-9_-]{1,64}$.
MAX_TOOL_NAME = 64
SEPARATOR = "__"


class CardPort(Protocol):
    """An HTTP GET of a JSON document (an agent card); never follows redirects."""

    def get_json(self, url: str, headers: dict[str, str] | None = None) -> PeerAnswer: ...


@dataclass(frozen=True)
class RemoteSkill:
    agent: str
    id: str
    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None

    @property
    def tool_name(self) -> str:
        return f"{self.agent}{SEPARATOR}{self.id}"


@dataclass(frozen=True)
class PeerCard:
    """What a delegate's card says of its skills, or why it could not be read."""

    url: str
    skills: tuple[RemoteSkill, ...] = ()
    problem: str = ""
    # The card as read: an A2A delegate's dispatch finds the peer's endpoint in it (card_body), no GET more.
    body: dict[str, Any] | None = None


_cards: dict[str, tuple[float, PeerCard]] = {}


def clear_cache() -> None:
    _cards.clear()


def card_url(delegate: DelegateTool, resolve: Any) -> str:
    """Where a delegate's card is: an A2A delegate's card_url, else its service's well-known path."""
    if delegate.protocol == "a2a":
        return delegate.card_url
    return f"{resolve(delegate.peer_service).rstrip('/')}{CARD_PATH}"


def read_card(agent: str, url: str, answer: PeerAnswer) -> PeerCard:
    """A card's skills with schemas, each schema checked; a skill whose schema is unusable is left out."""
    if not 200 <= answer.status < 300:
        why = f"HTTP {answer.status}" if answer.status else f"unreachable: {answer.error}"
        return PeerCard(url, problem=why)
    card = answer.body
    if not isinstance(card, dict) or not isinstance(card.get("skills"), list):
        return PeerCard(url, problem="not an agent card (no skills list)")
    contracts: dict[str, Any] = {}
    extensions = (
        (card.get("capabilities") or {}).get("extensions") if isinstance(card.get("capabilities"), dict) else []
    )
    for extension in extensions or []:
        if isinstance(extension, dict) and extension.get("uri") == SKILL_CONTRACTS_URI:
            params = extension.get("params") or {}
            found = params.get("skills")
            contracts = found if isinstance(found, dict) else {}
    skills = []
    for entry in card["skills"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            continue
        contract = contracts.get(entry["id"])
        if not isinstance(contract, dict) or not isinstance(contract.get("inputSchema"), dict):
            continue  # no input schema: the free-text tool reaches it
        output = contract.get("outputSchema")
        try:
            check_schema(contract["inputSchema"])
            if output is not None:
                check_schema(output)
        except SchemaError as exc:
            logger.warning(
                "a peer skill's schema is unusable; left out",
                extra={"url": url, "skill": entry["id"], "detail": str(exc)},
            )
            continue
        skill = RemoteSkill(
            agent=agent,
            id=entry["id"],
            name=str(entry.get("name") or entry["id"])[:200],
            description=str(entry.get("description") or "")[:1000],
            input_schema=contract["inputSchema"],
            output_schema=output if isinstance(output, dict) else None,
        )
        if len(skill.tool_name) <= MAX_TOOL_NAME and all(c.isalnum() or c in "_-" for c in skill.tool_name):
            skills.append(skill)
    return PeerCard(url, tuple(skills), body=card)


def peer_card(cards: CardPort, delegate: DelegateTool, url: str, headers: dict[str, str] | None = None) -> PeerCard:
    """The delegate's card as last read, read again when older than its TTL."""
    now = time.monotonic()
    cached = _cards.get(delegate.agent)
    if cached is not None and cached[0] > now and cached[1].url == url:
        return cached[1]
    card = read_card(delegate.agent, url, cards.get_json(url, headers))
    if card.problem:
        count("PeerCardsUnreadable")
        logger.warning(
            "a delegate's card could not be read: its skills are not offered as tools until it is",
            extra={"agent": delegate.agent, "url": url, "detail": card.problem},
        )
    _cards[delegate.agent] = (now + (CARD_RETRY_S if card.problem else CARD_TTL_S), card)
    return card


def card_body(url: str) -> dict[str, Any] | None:
    """The card last read at `url`, while it is fresh: the think that offered its tools read it, and the
    dispatch that follows in the same invocation reads it from here (flightdeck.domain.a2a.client)."""
    now = time.monotonic()
    for expires, card in list(_cards.values()):
        if card.url == url and expires > now and card.body is not None:
            return card.body
    return None


def skill_tool_spec(skill: RemoteSkill) -> dict[str, Any]:
    about = skill.description or skill.name
    return {
        "toolSpec": {
            "name": skill.tool_name,
            "description": f"{about} (skill {skill.id!r} of the agent {skill.agent!r}: a structured call, "
            "answered asynchronously as JSON).",
            "inputSchema": {"json": skill.input_schema},
        }
    }


def split_tool_name(tool_name: str) -> tuple[str, str] | None:
    agent, sep, skill = tool_name.partition(SEPARATOR)
    return (agent, skill) if sep and agent and skill else None


def known_skill(tool_name: str) -> RemoteSkill | None:
    """The peer skill a tool name calls, as its card was last read (None: not read, or no such skill)."""
    parts = split_tool_name(tool_name)
    if parts is None:
        return None
    cached = _cards.get(parts[0])
    if cached is None:
        return None
    return next((s for s in cached[1].skills if s.id == parts[1]), None)


def structured_call(tool_name: str, tool_input: dict[str, Any]) -> SkillCall | None:
    """The structured call a tool use makes when its tool is a peer's skill."""
    parts = split_tool_name(tool_name)
    return SkillCall(skill=parts[1], arguments=tool_input) if parts is not None else None


def held_to_schema(tool_name: str, tool_input: dict[str, Any], text: str) -> str:
    """A delegation's answer as this agent's model is given it: held to the schema the call expects (the
    caller's response_schema, else the peer skill's output schema); a mismatch is marked, never dropped."""
    schema = None
    if tool_input.get("response_schema") is not None:
        try:
            schema = response_schema(tool_input["response_schema"])
        except SchemaError:
            schema = None  # refused when the call was made: it went out without one
    if schema is None:
        skill = known_skill(tool_name)
        schema = skill.output_schema if skill is not None else None
    if schema is None:
        return text
    checked = check_answer(schema, text)
    if checked.valid:
        return text
    return json.dumps(checked.marked(text), ensure_ascii=False)


def mark_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with every successful delegation result held to the schema its call expects
    (held_to_schema): what the model reads. The stored results are left as they came."""
    calls: dict[str, dict[str, Any]] = {}
    out = []
    for message in messages:
        content = message.get("content", [])
        for block in content:
            if "toolUse" in block:
                calls[block["toolUse"].get("toolUseId", "")] = block["toolUse"]
        if message.get("role") != "user" or not any("toolResult" in b for b in content):
            out.append(message)
            continue
        blocks = []
        for block in content:
            result = block.get("toolResult")
            use = calls.get(result.get("toolUseId", "")) if result else None
            if result is None or use is None or result.get("status") == "error" or not _expects_schema(use):
                blocks.append(block)
                continue
            text = "".join(c.get("text", "") for c in result.get("content", []))
            held = held_to_schema(use.get("name", ""), use.get("input") or {}, text)
            blocks.append({"toolResult": {**result, "content": [{"text": held}]}})
        out.append({**message, "content": blocks})
    return out


def _expects_schema(use: dict[str, Any]) -> bool:
    return split_tool_name(use.get("name", "")) is not None or "response_schema" in (use.get("input") or {})
