"""Where secrets come from: the environment locally, Secrets Manager on AWS.

- the callback HMAC keys (TOOL_CALLBACK_SECRET / TOOL_CALLBACK_SECRET_ARN);
- the bearer tokens this agent presents to the peers it calls (PEER_TOKENS / PEER_TOKENS_SECRET_ARN).
"""

from __future__ import annotations

import functools
import time

from aws_lambda_powertools.utilities import parameters

from flightdeck.domain.tokens import SigningKey
from flightdeck.settings import Settings, parse_peer_tokens

# Cached by Powertools for this long; a rotation reaches warm functions within it.
SECRET_CACHE_S = 300


_no_previous_until: dict[str, float] = {}


@functools.lru_cache(maxsize=2)
def _provider(stage: str) -> parameters.SecretsProvider:
    # One provider per version stage: Powertools' cache key ignores VersionStage.
    return parameters.SecretsProvider()


def signing_keys(settings: Settings) -> list[SigningKey]:
    """Current key first, then the previous one (accepted during rotation)."""
    if settings.tool_callback_secret_arn:
        arn = settings.tool_callback_secret_arn
        keys = [SigningKey(str(_provider("AWSCURRENT").get(arn, max_age=SECRET_CACHE_S)).encode())]
        # Powertools caches values, not failures: remember "never rotated" for as long, so an
        # unrotated secret does not cost a Secrets Manager call per request.
        if time.monotonic() >= _no_previous_until.get(arn, 0.0):
            try:
                previous = _provider("AWSPREVIOUS").get(arn, max_age=SECRET_CACHE_S, VersionStage="AWSPREVIOUS")
                keys.append(SigningKey(str(previous).encode()))
            except parameters.exceptions.GetParameterError:
                _no_previous_until[arn] = time.monotonic() + SECRET_CACHE_S
        return keys
    keys = [SigningKey(settings.tool_callback_secret.encode())]
    if settings.tool_callback_secret_previous:
        keys.append(SigningKey(settings.tool_callback_secret_previous.encode()))
    return keys


def outbound_peer_tokens(settings: Settings) -> dict[str, str]:
    """service name -> the bearer token we present to it. On AWS: the JSON secret PEER_TOKENS_SECRET_ARN
    names, cached like the keys (a changed token reaches warm functions within SECRET_CACHE_S)."""
    if settings.peer_tokens_secret_arn:
        value = _provider("AWSCURRENT").get(settings.peer_tokens_secret_arn, max_age=SECRET_CACHE_S, transform="json")
        try:
            return parse_peer_tokens(value)
        except ValueError as exc:
            raise ValueError(f"the secret PEER_TOKENS_SECRET_ARN names: {exc}") from None
    return dict(settings.peer_tokens)


def mcp_credential(reference: str) -> str | None:
    """An MCP server's bearer token from its reference (flightdeck.domain.agent.McpServer.credential):
    "env:NAME", the function's environment (locally); "secret:NAME", a Secrets Manager secret (name or ARN),
    cached like the peer tokens: a rotated or revoked value reaches warm functions within SECRET_CACHE_S."""
    kind, _, name = reference.partition(":")
    if kind == "env":
        import os

        return os.environ.get(name) or None
    if kind == "secret":
        return str(_provider("AWSCURRENT").get(name, max_age=SECRET_CACHE_S)) or None
    return None
