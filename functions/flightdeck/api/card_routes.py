"""GET /.well-known/agent-card.json: the A2A agent card for v1.0 and v0.3 (both on POST /a2a), built from settings:
v1.0's exact AgentCard for a request that says A2A-Version 1.0, the merged card otherwise."""

from __future__ import annotations

import hashlib
import json
from typing import Any, cast

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

from flightdeck import __version__
from flightdeck.api.a2a_version import version_asked, wire_version
from flightdeck.api.auth import PEER_TOKEN_SCHEME
from flightdeck.domain.a2a import reliable, resumption
from flightdeck.domain.a2a.constants import INPUT_MODES
from flightdeck.domain.skills.contract import SKILL_CONTRACTS_URI, Skill, SkillCall
from flightdeck.domain.skills.schemas import SCHEMA_VERSION
from flightdeck.settings import get_settings

router = Router()  # type: ignore[no-untyped-call]  # Powertools' Router.__init__ has no annotations

A2A_PROTOCOL_VERSION = "0.3.0"
A2A_V1_PROTOCOL_VERSION = "1.0"
# The card changes with a deployment, not per request: a client may keep it five minutes, then revalidate (ETag).
CARD_CACHE_CONTROL = "public, max-age=300"
# What a streaming client should know (the card's description ends with it when streaming is on).
STREAMING_NOTE = (
    "Streams (message/stream, tasks/resubscribe) follow a task to its final event; a dropped "
    "connection does not cancel the task: tasks/resubscribe or tasks/get finds it again."
)


def _base_url() -> str:
    settings = get_settings()
    if settings.public_base_url:
        return settings.public_base_url.rstrip("/")
    # The routers are served by APIGatewayRestResolver, whose events are API Gateway proxy events.
    event = cast(APIGatewayProxyEvent, router.current_event)
    headers = event.headers
    ctx = event.request_context
    host = headers.get("host") or ctx.domain_name or "localhost"
    proto = headers.get("x-forwarded-proto") or "https"
    # Behind API Gateway's default endpoint the stage is part of the path.
    stage = f"/{ctx.stage}" if host.endswith(".amazonaws.com") and ctx.stage else ""
    return f"{proto}://{host}{stage}"


def build_agent_card(base_url: str, version: str = "") -> dict[str, Any]:
    """The agent card: with version "1.0" exactly a2a.proto's AgentCard (a strict v1.0 client parses it), else
    the merged card both SDKs' parsers accept."""
    settings = get_settings()
    agent = settings.agent
    exposed = [skill for skill in agent.skills if skill.exposed_to("a2a")]
    skills = [
        {
            "id": skill.id,
            "name": skill.title,
            "description": skill.description or skill.title,
            "tags": skill.tags or [skill.id],
            **({"examples": [_example(skill.id, e) for e in skill.examples]} if skill.examples else {}),
            **({"inputModes": ["application/json", "text/plain"]} if skill.input_schema is not None else {}),
            **({"outputModes": ["application/json"]} if skill.output_schema is not None else {}),
        }
        for skill in exposed
    ] or [{"id": "general", "name": "General tasks", "description": agent.description, "tags": ["general"]}]
    schemes: dict[str, Any] = {
        "callbackToken": {
            "type": "http",
            "scheme": "bearer",
            "description": "Answers to delegated tasks are POSTed to /api/tools/response with the HMAC "
            "token this agent issued with the task.",
        }
    }
    inbound_auth = settings.inbound_auth != "off"
    if inbound_auth:
        schemes[PEER_TOKEN_SCHEME] = {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "fdp_<peer id>_<secret>",
            "description": "POST /a2a (and /api/chat) need the peer token this agent's operator issued to the "
            "caller (flightdeck peers add): Authorization: Bearer fdp_<peer id>_<secret>.",
        }
    description = settings.agent_description if settings.agent_config is None else agent.description
    streaming = settings.streaming == "on"
    if streaming:
        description = f"{description.rstrip()} {STREAMING_NOTE}".strip()
    # On the lean front door /a2a is served by the a2a function's own URL, not under the HTTP API's.
    rpc_url = f"{(settings.public_endpoints.get('a2a') or base_url).rstrip('/')}/a2a"
    security: list[dict[str, list[str]]] = [{PEER_TOKEN_SCHEME: []}] if inbound_auth else []
    # Only what is implemented (flightdeck.domain.a2a.tasks): push notifications yes; SSE streaming where the
    # deployment's HTTP front streams (STREAMING: the local gateway, the stack's STREAM integrations).
    capabilities: dict[str, Any] = {
        "streaming": streaming,
        "pushNotifications": True,
        "extendedAgentCard": False,
        "extensions": [skill_contracts_extension(exposed, agent.max_concurrent_tasks), reliable.extension_entry()]
        + ([resumption.extension_entry()] if streaming else []),
    }
    v1_card = {
        # Both versions on one URL: v1.0 reads supportedInterfaces, v0.3 the url of the merged card.
        "supportedInterfaces": [
            {"url": rpc_url, "protocolBinding": "JSONRPC", "protocolVersion": A2A_V1_PROTOCOL_VERSION},
            {"url": rpc_url, "protocolBinding": "JSONRPC", "protocolVersion": A2A_PROTOCOL_VERSION},
        ],
        "name": settings.agent_name,
        "description": description,
        "version": settings.agent_version or __version__,
        "capabilities": capabilities,
        "defaultInputModes": list(INPUT_MODES),
        "defaultOutputModes": ["text/plain"],
        "skills": skills,
        "securitySchemes": {name: {"httpAuthSecurityScheme": _typed(scheme)} for name, scheme in schemes.items()},
        # Each entry is one way to be let in; the card itself stays public.
        "securityRequirements": [{"schemes": {n: {"list": scopes} for n, scopes in r.items()}} for r in security],
    }
    if version == A2A_V1_PROTOCOL_VERSION:
        return v1_card
    # The card a request without A2A-Version gets (a v0.3 client, as the spec reads it): v1.0's with v0.3's
    # members merged in, as a2a-sdk 1.x serves it: url, preferredTransport, protocolVersion, security, each
    # scheme's `type` beside its typed member, and stateTransitionHistory (false).
    return {
        **v1_card,
        "protocolVersion": A2A_PROTOCOL_VERSION,
        "url": rpc_url,
        "preferredTransport": "JSONRPC",
        "capabilities": {**capabilities, "stateTransitionHistory": False},
        "securitySchemes": {
            name: {**scheme, "httpAuthSecurityScheme": _typed(scheme)} for name, scheme in schemes.items()
        },
        "security": security,
    }


def _typed(scheme: dict[str, Any]) -> dict[str, Any]:
    """An http scheme's members as v1.0's HTTPAuthSecurityScheme holds them (v0.3 adds `type` beside them)."""
    return {k: v for k, v in scheme.items() if k in ("scheme", "bearerFormat", "description")}


def _example(skill_id: str, example: str | dict[str, Any]) -> str:
    # A2A's examples are strings: an arguments example is shown as the call that sends it.
    return example if isinstance(example, str) else SkillCall(skill=skill_id, arguments=example).as_text()


def skill_contracts_extension(skills: list[Skill], max_concurrent_tasks: int | None) -> dict[str, Any]:
    """The data-only extension that carries what A2A v0.3's AgentSkill has no field for (docs/SKILLS.md):
    each skill's input and output JSON Schemas, and how much work the agent takes at once."""
    params: dict[str, Any] = {
        "schemaVersion": SCHEMA_VERSION,
        "skills": {
            s.id: {
                **({"inputSchema": s.input_schema} if s.input_schema is not None else {}),
                **({"outputSchema": s.output_schema} if s.output_schema is not None else {}),
                "structured": s.input_schema is not None,
                **({"handler": True} if s.handler else {}),
            }
            for s in skills
        },
        "responseSchema": True,
    }
    if max_concurrent_tasks is not None:
        params["maxConcurrentTasks"] = max_concurrent_tasks
    return {
        "uri": SKILL_CONTRACTS_URI,
        "description": "Skill contracts: each skill's input and output JSON Schemas; a structured call is a "
        'data part {"skill", "arguments"} or the text skill:<id> {json}; metadata.responseSchema shapes the answer.',
        "required": False,
        "params": params,
    }


@router.get(
    "/.well-known/agent-card.json",
    summary="A2A agent card",
    description=(
        "The agent card. With A2A-Version: 1.0 (header, or the A2A-Version query parameter) exactly v1.0's "
        "AgentCard; without it (a v0.3 client) v1.0's card with v0.3's members merged in. Cache-Control and a "
        "strong ETag; If-None-Match with the current ETag answers 304."
    ),
    responses={
        200: {
            "description": "The agent card (ETag, Cache-Control, Vary: A2A-Version)",
            "content": {"application/json": {"schema": {"type": "object"}}},
        },
        304: {"description": "Not modified: the card the client holds is current (no body)", "content": {}},
    },
)
def get_agent_card() -> Response[str]:
    event = router.current_event
    version = wire_version(version_asked(event.headers, event.query_string_parameters)) or ""
    body = json.dumps(build_agent_card(_base_url(), version), separators=(",", ":"), sort_keys=True)
    headers = {
        "ETag": f'"{hashlib.sha256(body.encode()).hexdigest()[:32]}"',
        "Cache-Control": CARD_CACHE_CONTROL,
        "Vary": "A2A-Version",
    }
    held = next((v for k, v in (event.headers or {}).items() if k.lower() == "if-none-match"), None)
    if isinstance(held, str) and _names(held, headers["ETag"]):
        return Response(status_code=304, body="", headers=headers)
    return Response(status_code=200, content_type=content_types.APPLICATION_JSON, body=body, headers=headers)


def _names(if_none_match: str, etag: str) -> bool:
    """If-None-Match selects this card (RFC 9110 13.1.2: `*`, or a tag in the list, compared weakly)."""
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags
