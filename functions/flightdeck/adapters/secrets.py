"""Where the callback HMAC keys come from: the environment locally, Secrets Manager on AWS."""

from __future__ import annotations

import functools

from aws_lambda_powertools.utilities import parameters

from flightdeck.domain.tokens import SigningKey
from flightdeck.settings import Settings

# Cached by Powertools for this long; a rotation reaches warm functions within it.
SECRET_CACHE_S = 300


@functools.lru_cache(maxsize=2)
def _provider(stage: str) -> parameters.SecretsProvider:
    # One provider per version stage: Powertools' cache key ignores VersionStage.
    return parameters.SecretsProvider()


def signing_keys(settings: Settings) -> list[SigningKey]:
    """Current key first, then the previous one (accepted during rotation)."""
    if settings.tool_callback_secret_arn:
        arn = settings.tool_callback_secret_arn
        keys = [SigningKey(str(_provider("AWSCURRENT").get(arn, max_age=SECRET_CACHE_S)).encode())]
        try:
            previous = _provider("AWSPREVIOUS").get(arn, max_age=SECRET_CACHE_S, VersionStage="AWSPREVIOUS")
            keys.append(SigningKey(str(previous).encode()))
        except parameters.exceptions.GetParameterError:
            pass  # never rotated: there is no previous version
        return keys
    keys = [SigningKey(settings.tool_callback_secret.encode())]
    if settings.tool_callback_secret_previous:
        keys.append(SigningKey(settings.tool_callback_secret_previous.encode()))
    return keys
