"""Callback tokens: `b64url(payload_json) "." b64url(HMAC_SHA256(secret, payload_json))`.

Unpadded base64url; the HMAC covers the exact transmitted payload bytes. Only
the delegating agent (A) can mint or verify them. Every failure raises
TokenError with the check that failed (for logs); callers answer one
indistinguishable 401.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, ValidationError

MAX_TOKEN_LENGTH = 2048
CLOCK_SKEW_S = 30


class TokenError(Exception):
    """The token is not acceptable; `reason` says which check failed."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class CallbackClaims(BaseModel):
    # defer_build: built by the first token minted or read, not when every function starts.
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    session_id: str = Field(min_length=1, max_length=128)
    # The think iteration whose aggregation awaits this result.
    turn: int = Field(ge=1)
    tool_use_id: str = Field(min_length=1, max_length=128)
    tool_id: str = Field(min_length=1, max_length=128)
    name: str = Field(min_length=1, max_length=128)
    total_tools: int = Field(ge=1)
    agent: str = Field(min_length=1, max_length=64)
    iat: int
    exp: int
    # Key id: which secret signed the token, so rotation can accept two.
    kid: str = ""


@dataclass(frozen=True)
class SigningKey:
    secret: bytes

    @property
    def kid(self) -> str:
        # Derived, not configured: rotating the secret rotates the id.
        return hashlib.sha256(b"flightdeck-kid:" + self.secret).hexdigest()[:12]


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    if not text or any(c not in _B64URL for c in text) or len(text) % 4 == 1:
        raise TokenError("malformed base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise TokenError("malformed base64url") from exc


_B64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def mint(claims: CallbackClaims, key: SigningKey) -> str:
    body = claims.model_copy(update={"kid": key.kid}).model_dump()
    payload = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    signature = hmac.new(key.secret, payload, hashlib.sha256).digest()
    return f"{b64url_encode(payload)}.{b64url_encode(signature)}"


def verify(token: str, keys: Sequence[SigningKey], *, agent: str, now: float) -> CallbackClaims:
    """Check the token and return its claims, or raise TokenError.

    keys: the current secret first, then the previous one (rotation).
    """
    if not isinstance(token, str) or not token:
        raise TokenError("missing token")
    if len(token) > MAX_TOKEN_LENGTH:
        raise TokenError("token too long")
    payload_b64, dot, signature_b64 = token.partition(".")
    if not dot or "." in signature_b64:
        raise TokenError("not two dot-separated parts")
    payload = b64url_decode(payload_b64)
    signature = b64url_decode(signature_b64)
    # Canonical encoding only: no second spelling of the same bytes.
    if b64url_encode(payload) != payload_b64 or b64url_encode(signature) != signature_b64:
        raise TokenError("non-canonical base64url")
    if not any(hmac.compare_digest(hmac.new(k.secret, payload, hashlib.sha256).digest(), signature) for k in keys):
        raise TokenError("bad signature")
    try:
        claims = CallbackClaims.model_validate(json.loads(payload))
    except (ValueError, ValidationError) as exc:
        raise TokenError("malformed claims") from exc
    if claims.kid and claims.kid not in {k.kid for k in keys}:
        raise TokenError("unknown key id")
    if claims.exp + CLOCK_SKEW_S <= now:
        raise TokenError("expired")
    if claims.iat - CLOCK_SKEW_S > now:
        raise TokenError("issued in the future")
    if claims.agent != agent:
        raise TokenError("token is for another agent")
    return claims
