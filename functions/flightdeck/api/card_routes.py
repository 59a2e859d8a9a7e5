"""GET /.well-known/agent-card.json: one A2A agent card for v1.0 and v0.3 (both on POST /a2a), built from settings."""

from __future__ import annotations

from typing import Any, cast

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

from flightdeck import __version__
from flightdeck.api.auth import PEER_TOKEN_SCHEME
from flightdeck.domain.a2a.constants import INPUT_MODES
from flightdeck.domain.skills.contract import SKILL_CONTRACTS_URI, Skill, SkillCall
from flightdeck.domain.skills.schemas import SCHEMA_VERSION
from flightdeck.settings import get_settings

router = Router()  # type: ignore[no-untyped-call]  # Powertools' Router.__init__ has no annotations

A2A_PROTOCOL_VERSION = "0.3.0"
A2A_V1_PROTOCOL_VERSION = "1.0"
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


def build_agent_card(base_url: str) -> dict[str, Any]:
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
    return {
        # One card for both versions on the same URL (as a2a-sdk 1.x serves its v1.0 card with v0.3's fields
        # merged in): v1.0 reads supportedInterfaces, securityRequirements and each scheme's typed member;
        # v0.3 reads url, preferredTransport, protocolVersion, security and each scheme's `type`.
        "supportedInterfaces": [
            {"url": rpc_url, "protocolBinding": "JSONRPC", "protocolVersion": A2A_V1_PROTOCOL_VERSION},
            {"url": rpc_url, "protocolBinding": "JSONRPC", "protocolVersion": A2A_PROTOCOL_VERSION},
        ],
        "protocolVersion": A2A_PROTOCOL_VERSION,
        "name": settings.agent_name,
        "description": description,
        "url": rpc_url,
        "preferredTransport": "JSONRPC",
        "version": settings.agent_version or __version__,
        # Only what is implemented (flightdeck.domain.a2a.tasks): push notifications yes; SSE streaming where
        # the deployment's HTTP front streams (STREAMING: the local gateway, the stack's STREAM
        # integrations); no state-transition history.
        "capabilities": {
            "streaming": streaming,
            "pushNotifications": True,
            "stateTransitionHistory": False,
            "extendedAgentCard": False,
            "extensions": [skill_contracts_extension(exposed, agent.max_concurrent_tasks)],
        },
        "defaultInputModes": list(INPUT_MODES),
        "defaultOutputModes": ["text/plain"],
        "skills": skills,
        "securitySchemes": {name: _both_shapes(scheme) for name, scheme in schemes.items()},
        # Each entry is one way to be let in; the card itself stays public.
        "security": security,
        "securityRequirements": [{"schemes": {n: {"list": scopes} for n, scopes in r.items()}} for r in security],
    }


def _both_shapes(scheme: dict[str, Any]) -> dict[str, Any]:
    """An http scheme in v0.3's shape (`type`) with v1.0's (a oneof member, httpAuthSecurityScheme) beside it."""
    typed = {k: v for k, v in scheme.items() if k in ("scheme", "bearerFormat", "description")}
    return {**scheme, "httpAuthSecurityScheme": typed} if scheme.get("type") == "http" else scheme


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


@router.get("/.well-known/agent-card.json", summary="A2A agent card")
def get_agent_card() -> dict[str, Any]:
    return build_agent_card(_base_url())
