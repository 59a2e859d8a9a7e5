"""GET /health and GET /openapi.json: what a person or a load balancer asks an agent first. Public."""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router

from flightdeck import __version__
from flightdeck.api.payloads import Health
from flightdeck.settings import get_settings

router = Router()  # type: ignore[no-untyped-call]  # Powertools' Router.__init__ has no annotations

# The committed document (python -m flightdeck.api.openapi > openapi.json), shipped in the package.
OPENAPI_RESOURCE = "openapi.json"


@functools.lru_cache(maxsize=1)
def openapi_document() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        resources.files("flightdeck.api").joinpath(OPENAPI_RESOURCE).read_text(encoding="utf-8")
    )
    return doc


@router.get(
    "/health",
    summary="Liveness: the agent's name and version",
    responses={
        200: {
            "description": "The agent answers (nothing else is checked, nothing secret is said)",
            "content": {"application/json": {"model": Health}},
        },
    },
)
def get_health() -> Health:
    settings = get_settings()
    return Health(status="ok", agent=settings.agent_name, version=settings.agent_version or __version__)


@router.get(
    "/openapi.json",
    summary="This API's OpenAPI 3.1 document",
    responses={
        200: {"description": "The document", "content": {"application/json": {"schema": {"type": "object"}}}},
    },
)
def get_openapi() -> Response[dict[str, Any]]:
    return Response(status_code=200, content_type=content_types.APPLICATION_JSON, body=openapi_document())
