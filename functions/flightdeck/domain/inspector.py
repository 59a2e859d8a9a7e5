"""The console's A2A inspector: which agents it may open, and what their cards say.

A browser cannot read another origin's card or post to its JSON-RPC endpoint without that agent's CORS
headers, so the agent relays both for its own peers, and only to URLs under its ALLOWED_HOST_MAPPING (the
same allowlist its delegations obey): the inspector opens no URL the operator did not allow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

V1, V03 = "1.0", "0.3"
CARD_PATH = "/.well-known/agent-card.json"
# Where an A2A agent serves its card, at its base URL (which may have a path): v0.3 and v1.0's, and A2A 0.2's.
CARD_PATHS = (CARD_PATH, "/.well-known/agent.json")
# What a card of either version must have (A2A v0.3 AgentCard and v1.0 AgentCard, JSON names).
_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "description": str,
    "version": str,
    "capabilities": dict,
    "defaultInputModes": list,
    "defaultOutputModes": list,
    "skills": list,
}
_SKILL_REQUIRED: dict[str, type] = {"id": str, "name": str, "description": str, "tags": list}


@dataclass(frozen=True)
class CardCheck:
    version: str  # "1.0", "0.3", or "" when the card offers neither over JSON-RPC
    rpc_url: str  # where its JSON-RPC endpoint is ("" with no version)
    problems: list[str] = field(default_factory=list)


def check_card(card: Any) -> CardCheck:
    """Validate a card and choose the version to talk: v1.0 when a JSONRPC 1.0 interface is listed, else v0.3
    (the card's `url`, over JSON-RPC), as our own delegations choose."""
    if not isinstance(card, dict):
        return CardCheck("", "", ["the card is not a JSON object"])
    problems = [
        f"`{name}` is missing" if name not in card else f"`{name}` is not a {_kind(kind)}"
        for name, kind in _REQUIRED.items()
        if not isinstance(card.get(name), kind)
    ]
    for index, skill in enumerate(card.get("skills") or []):
        if not isinstance(skill, dict):
            problems.append(f"skills[{index}] is not an object")
            continue
        problems += [
            f"skills[{index}].`{name}` is missing or not a {_kind(kind)}"
            for name, kind in _SKILL_REQUIRED.items()
            if not isinstance(skill.get(name), kind)
        ]
    interfaces = card.get("supportedInterfaces")
    for item in interfaces if isinstance(interfaces, list) else []:
        if (
            isinstance(item, dict)
            and item.get("protocolBinding") == "JSONRPC"
            and str(item.get("protocolVersion", "")).startswith(V1)
            and isinstance(item.get("url"), str)
        ):
            return CardCheck(V1, item["url"], problems)
    url = card.get("url")
    transport = card.get("preferredTransport", "JSONRPC")
    if isinstance(url, str) and url and transport == "JSONRPC":
        return CardCheck(V03, url, problems)
    return CardCheck("", "", [*problems, "no JSON-RPC interface of A2A v1.0 or v0.3 is offered"])


def _kind(kind: type | tuple[type, ...]) -> str:
    names: dict[type, str] = {str: "string", dict: "object", list: "list"}
    return names.get(kind, "value") if isinstance(kind, type) else "value"


def card_url_of(url: str) -> str:
    """The card's URL for what a user gives (the console's inspector, `flightdeck chat --a2a`): a host's root gets
    /.well-known/agent-card.json appended; anything else is taken as the card's own URL."""
    parts = urlsplit(url)
    return url.rstrip("/") + CARD_PATH if parts.path in ("", "/") and not (parts.query or parts.fragment) else url


def is_card_url(url: str) -> bool:
    """Whether `url` names an agent card (a card path under a base URL, nothing after it): the inspector's card
    read fetches cards, not whatever else an allowlisted host serves. No escapes, parameters or dot segments,
    which a server may read as another path."""
    parts = urlsplit(url)
    path = parts.path
    plain = not (parts.query or parts.fragment or "%" in path or ";" in path or "/../" in path or "/./" in path)
    return plain and path.endswith(CARD_PATHS)
