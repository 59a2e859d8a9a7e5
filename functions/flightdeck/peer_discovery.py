"""`flightdeck peers discover URL`: read a peer's agent card, check it, and say how to add the peer.

It fetches the card (no redirects, bounded size and time), checks what a delegating agent relies on:
the A2A protocol version, a JSON-RPC endpoint, the skills and their JSON Schemas (the skill-contracts
extension, docs/SKILLS.md), the security schemes; checks the URL against an agent's allowlist when a
deployment file names one; and prints the `[[agents.<name>.delegates]]` snippet that would add it.
Discovery is not trust: nothing is added, and only the allowlist decides what an agent may call.
A CLI tool: it never ships to Lambda.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from flightdeck.domain.allowlist import Allowlist, normalise_url
from flightdeck.domain.skills.contract import SKILL_CONTRACTS_URI
from flightdeck.domain.skills.schemas import SchemaError, check_schema

CARD_PATH = "/.well-known/agent-card.json"
MAX_CARD_BYTES = 256_000
SUPPORTED_VERSIONS = ("0.3", "1.0")
TIMEOUT_S = 10.0


@dataclass
class Discovery:
    url: str
    card: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)  # the card cannot be used as it is
    notes: list[str] = field(default_factory=list)  # worth knowing, not blocking
    skills: list[dict[str, Any]] = field(default_factory=list)
    security: list[str] = field(default_factory=list)
    allowed: bool | None = None  # None: no allowlist was given to check against

    @property
    def ok(self) -> bool:
        return not self.problems and self.allowed is not False


def card_url_of(url: str) -> str:
    """The card's URL: as given when it names a .json document, else the well-known path under it."""
    return url if urlsplit(url).path.endswith(".json") else url.rstrip("/") + CARD_PATH


def fetch(url: str) -> tuple[int, Any, str]:
    """(HTTP status, parsed body, error): 0 and why when it could not be read."""
    import requests

    try:
        resp = requests.get(url, headers={"Accept": "application/json"}, timeout=TIMEOUT_S, allow_redirects=False)
    except requests.RequestException as exc:
        return 0, None, f"{type(exc).__name__}: {exc}"[:300]
    if 300 <= resp.status_code < 400:
        return resp.status_code, None, f"redirects to {resp.headers.get('Location', '?')}: a card is read where it is"
    if len(resp.content) > MAX_CARD_BYTES:
        return resp.status_code, None, f"larger than {MAX_CARD_BYTES} bytes"
    try:
        return resp.status_code, resp.json(), ""
    except ValueError:
        return resp.status_code, None, "not JSON"


def check_card(url: str, card: Any) -> Discovery:
    """Everything a delegating agent relies on in a card, as problems (blocking) and notes."""
    found = Discovery(url, card if isinstance(card, dict) else None)
    if not isinstance(card, dict):
        found.problems.append("the card is not a JSON object")
        return found
    version = str(card.get("protocolVersion") or "")
    interfaces = _list(card.get("supportedInterfaces"))
    versions = [version] + [str(i.get("protocolVersion", "")) for i in interfaces if isinstance(i, dict)]
    if not any(v.startswith(SUPPORTED_VERSIONS) for v in versions if v):
        found.problems.append(f"protocol version {version or 'missing'}: this agent speaks A2A 0.3 (and 1.0)")
    rpc_url = card.get("url") if (card.get("preferredTransport") or "JSONRPC") == "JSONRPC" else None
    rpc_url = rpc_url or next(
        (i.get("url") for i in interfaces if isinstance(i, dict) and i.get("protocolBinding") == "JSONRPC"), None
    )
    if not isinstance(rpc_url, str) or normalise_url(rpc_url) is None:
        found.problems.append("no JSON-RPC endpoint (url) that is an http(s) URL")
    if not isinstance(card.get("name"), str) or not card["name"].strip():
        found.problems.append("no name")
    skills = card.get("skills")
    if not isinstance(skills, list) or not skills:
        found.problems.append("no skills: a card says what the agent does")
        skills = []
    contracts: dict[str, Any] = {}
    for extension in _list(_obj(card.get("capabilities")).get("extensions")):
        if isinstance(extension, dict) and extension.get("uri") == SKILL_CONTRACTS_URI:
            contracts = _obj(_obj(extension.get("params")).get("skills"))
    for index, skill in enumerate(skills):
        if not isinstance(skill, dict) or not isinstance(skill.get("id"), str) or not skill.get("id"):
            found.problems.append(f"skills[{index}] has no id")
            continue
        entry: dict[str, Any] = {
            "id": skill["id"],
            "name": skill.get("name", ""),
            "description": skill.get("description", ""),
        }
        contract = _obj(contracts.get(skill["id"]))
        for key in ("inputSchema", "outputSchema"):
            if key in contract:
                try:
                    check_schema(contract[key])
                    entry[key] = contract[key]
                except SchemaError as exc:
                    found.problems.append(f"skill {skill['id']!r}: {key} {exc}")
        found.skills.append(entry)
    for extra in set(contracts) - {s["id"] for s in found.skills}:
        found.notes.append(f"the extension gives schemas for {extra!r}, which the card's skills do not list")
    if not contracts:
        found.notes.append("no skill declares schemas: the peer is reached through the free-text tool only")
    for name, scheme in _obj(card.get("securitySchemes")).items():
        if isinstance(scheme, dict):
            found.security.append(f"{name}: {scheme.get('type', '?')} {scheme.get('scheme', '')}".strip())
    if not card.get("security") and not card.get("securityRequirements"):
        found.notes.append("the card requires no credentials of its callers")
    return found


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def allowlist_of(config: Path, agent: str) -> Allowlist:
    from flightdeck import config_file

    deployment = config_file.load(config)
    spec = deployment.agents.get(agent)
    if spec is None:
        raise SystemExit(f"{config}: no agent {agent!r} (agents: {', '.join(deployment.agents)})")
    return Allowlist.parse(",".join(f"{n}:{u}" for n, u in spec.allowed_hosts.items()))


def snippet(agent: str, found: Discovery, service: str) -> str:
    name = str((found.card or {}).get("name") or "peer")
    slug = "".join(c if c.isalnum() or c in "-_" else "-" for c in name.lower()).strip("-_") or "peer"
    base = found.url[: -len(CARD_PATH)] if found.url.endswith(CARD_PATH) else found.url.rsplit("/", 1)[0]
    return "\n".join(
        [
            f"[agents.{agent}.allowed_hosts]",
            f'{service} = "{base}"',
            "",
            f"[[agents.{agent}.delegates]]",
            f'agent = "{slug}"',
            'protocol = "a2a"',
            f'service = "{service}"',
            f'card_url = "{found.url}"',
        ]
    )


def discover(url: str, allowlist: Allowlist | None) -> Discovery:
    target = card_url_of(url)
    if normalise_url(target) is None:
        return Discovery(target, problems=[f"{url!r} is not an http(s) URL"])
    status, body, error = fetch(target)
    if error or not 200 <= status < 300:
        return Discovery(target, problems=[f"the card could not be read: {error or f'HTTP {status}'}"])
    found = check_card(target, body)
    if allowlist is not None:
        found.allowed = allowlist.check_url(target) is not None
    return found


def render(found: Discovery, agent: str | None) -> str:
    lines = [f"card: {found.url}"]
    if found.card:
        lines.append(f"agent: {found.card.get('name')} (protocol {found.card.get('protocolVersion', '?')})")
    for skill in found.skills:
        kind = "structured" if "inputSchema" in skill else "free text"
        lines.append(f"  skill {skill['id']} ({kind}): {skill['description'] or skill['name']}")
        for key in ("inputSchema", "outputSchema"):
            if key in skill:
                lines.append(f"    {key}: {json.dumps(skill[key], sort_keys=True)}")
    lines += [f"  security: {s}" for s in found.security] or ["  security: none declared"]
    lines += [f"problem: {p}" for p in found.problems]
    lines += [f"note: {n}" for n in found.notes]
    if found.allowed is False:
        lines.append(
            f"not allowed: {found.url} is under none of agent {agent}'s allowed_hosts; add its base URL there "
            "(the snippet below does) before it can be a delegate"
        )
    elif found.allowed:
        lines.append(f"allowed: under agent {agent}'s allowed_hosts")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if bool(args.config) != bool(args.agent):
        print("flightdeck peers discover: --config and --agent go together (the agent whose allowlist to check)")
        return 2
    allowlist = allowlist_of(Path(args.config), args.agent) if args.config else None
    found = discover(args.url, allowlist)
    if args.json:
        print(
            json.dumps(
                {
                    "url": found.url,
                    "ok": found.ok,
                    "problems": found.problems,
                    "notes": found.notes,
                    "skills": found.skills,
                    "security": found.security,
                    "allowed": found.allowed,
                },
                indent=2,
            )
        )
    else:
        print(render(found, args.agent))
        if not found.problems:
            print("\nTo add it as a delegate, in the deployment file:\n")
            print(snippet(args.agent or "<your agent>", found, args.service))
    return 0 if found.ok else 1


def add_discover_command(actions: Any) -> None:
    sub = actions.add_parser(
        "discover",
        help="read a peer's agent card, check it (version, skills and schemas, security, allowlist) and print "
        "the deployment-file snippet that adds it",
    )
    sub.add_argument("url", help="the peer's base URL or its card's URL")
    sub.add_argument("--config", help="a deployment file: check the URL against --agent's allowed_hosts")
    sub.add_argument("--agent", help="the agent of --config that would delegate to the peer")
    sub.add_argument("--service", default="partner", help="the service name to give the peer (default: partner)")
    sub.add_argument("--json", action="store_true", help="as JSON")
    sub.set_defaults(run=run)
