"""Inbound peer authentication: who may call POST /api/chat, POST /a2a and GET /api/sessions/{id}.

Each calling peer has its own bearer token. The token names its peer,

    fdp_<peer_id>_<secret>          e.g. fdp_orchestrator_3q2-7bWc...   (secret: 32 random bytes, base64url)

so one GetItem finds the peer's record, which holds only the token's SHA-256
(never the token); or the write that commits the request checks that record in
its own transaction (PeerProof), and the happy path reads nothing. The hash is compared in constant time (hmac.compare_digest).
A rotation may keep the previous hash valid until a grace deadline, so a peer
can switch tokens without a refused call. A revoked peer is refused at once:
nothing is cached.

Outcomes: a missing or malformed token is 401 (the caller must authenticate);
a well-formed token that is unknown, wrong or revoked is 403, one answer for all
three (the log says which). No AWS here: the registry is a port.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Protocol

TOKEN_PREFIX = "fdp_"
# Lowercase letters, digits and hyphens: no underscore, so the first "_" after the id ends it.
PEER_ID_PATTERN = r"[a-z0-9][a-z0-9-]{0,62}"
SECRET_PATTERN = r"[A-Za-z0-9_-]{32,256}"
_TOKEN = re.compile(rf"^{TOKEN_PREFIX}({PEER_ID_PATTERN})_({SECRET_PATTERN})$")
_PEER_ID = re.compile(rf"^{PEER_ID_PATTERN}$")
SECRET_BYTES = 32
MAX_TOKEN_CHARS = len(TOKEN_PREFIX) + 63 + 1 + 256

ACTIVE = "active"
REVOKED = "revoked"

# The channels a token opens (its record's scope), each a role (flightdeck.topology.TOKEN_ROLES; which routes
# each opens: docs/PEERS.md): "a2a", a peer agent's (POST /api/chat, /a2a, the sessions routes); "user", the
# agent's own user's (those, every skill, and the console's routes); "mcp", an MCP client's (POST /mcp). A record
# stored before scopes existed has none and opens "a2a" alone, as it always did.
A2A_CHANNEL = "a2a"
MCP_CHANNEL = "mcp"
USER_CHANNEL = "user"
TOKEN_CHANNELS: tuple[str, ...] = (A2A_CHANNEL, MCP_CHANNEL, USER_CHANNEL)
DEFAULT_CHANNELS: tuple[str, ...] = (A2A_CHANNEL,)

# Compared against when there is no record, so a refusal costs about the same either way.
_NO_HASH = "0" * 64


class PeerTokenError(ValueError):
    """A token or peer id that does not have the documented shape."""


def valid_peer_id(peer_id: str) -> bool:
    return bool(_PEER_ID.match(peer_id or ""))


def check_peer_id(peer_id: str) -> str:
    if not valid_peer_id(peer_id):
        raise PeerTokenError(
            f"peer id {peer_id!r}: 1-63 of a-z 0-9 and '-', starting with a letter or digit "
            "(no '_': it separates the id from the secret in a token)"
        )
    return peer_id


def new_token(peer_id: str) -> str:
    """A fresh token for peer_id (shown once; only its hash is stored)."""
    check_peer_id(peer_id)
    secret = base64.urlsafe_b64encode(secrets.token_bytes(SECRET_BYTES)).rstrip(b"=").decode()
    return f"{TOKEN_PREFIX}{peer_id}_{secret}"


def peer_of(token: str) -> str | None:
    """The peer id a well-formed token names, or None."""
    if not token or len(token) > MAX_TOKEN_CHARS:
        return None
    match = _TOKEN.match(token)
    return match.group(1) if match else None


def check_token(token: str, peer_id: str | None = None) -> str:
    """The token's peer id; PeerTokenError unless well-formed (and naming peer_id, when given)."""
    named = peer_of(token)
    if named is None:
        raise PeerTokenError(
            f"a peer token looks like {TOKEN_PREFIX}<peer_id>_<secret>: peer id of a-z 0-9 '-', "
            "secret of 32-256 characters A-Z a-z 0-9 '_' '-'"
        )
    if peer_id is not None and named != peer_id:
        raise PeerTokenError(f"the token names peer {named!r}, not {peer_id!r}")
    return named


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class PeerRecord:
    peer_id: str
    token_sha256: str
    status: str  # active | revoked
    created_at: int  # epoch ms
    rotated_at: int = 0
    # After a rotation with a grace period: the previous token's hash, accepted until previous_valid_until (ms).
    previous_sha256: str = ""
    previous_valid_until: int = 0
    revoked_at: int = 0
    # The channels this peer's token opens (TOKEN_CHANNELS).
    channels: tuple[str, ...] = DEFAULT_CHANNELS


class PeerRegistryPort(Protocol):
    def get_peer(self, peer_id: str) -> PeerRecord | None: ...


class AuthStatus(str, enum.Enum):
    OK = "ok"
    MALFORMED = "malformed"  # 401
    UNKNOWN = "unknown"  # 403: no such peer, or the secret does not match
    REVOKED = "revoked"  # 403
    OUT_OF_SCOPE = "out_of_scope"  # 403: a valid token, not issued for this channel


@dataclass(frozen=True)
class AuthResult:
    status: AuthStatus
    # The authenticated peer (OK), else the id the token claims (None if malformed).
    peer_id: str | None = None
    via_previous: bool = False  # accepted with the previous token, during a rotation's grace period
    channels: tuple[str, ...] = ()  # OK: the channels the token opens (the caller's roles)

    @property
    def ok(self) -> bool:
        return self.status is AuthStatus.OK


def authenticate(registry: PeerRegistryPort, token: str, now_ms: int) -> AuthResult:
    proof = proof_of(token, now_ms)
    if proof is None:
        return AuthResult(AuthStatus.MALFORMED)
    return judge(registry.get_peer(proof.peer_id), proof)


def judge(record: PeerRecord | None, proof: PeerProof) -> AuthResult:
    """What the registry's record says of the proof's token. A store that checks a PeerProof in its
    write states the same rule as a condition (flightdeck.adapters.peer_registry)."""
    peer_id, presented, now_ms = proof.peer_id, proof.token_sha256, proof.now_ms
    current = hmac.compare_digest(presented, record.token_sha256 if record else _NO_HASH)
    previous = bool(record and record.previous_sha256) and hmac.compare_digest(
        presented, record.previous_sha256 if record else _NO_HASH
    )
    if record is None:
        return AuthResult(AuthStatus.UNKNOWN, peer_id)
    if record.status != ACTIVE:
        return AuthResult(AuthStatus.REVOKED, peer_id)
    via_previous = not current and previous and now_ms < record.previous_valid_until
    if not (current or via_previous):
        return AuthResult(AuthStatus.UNKNOWN, peer_id)
    # Scope only once the token is proven: a guess learns nothing of which channels a peer has.
    if proof.channels and not set(proof.channels) & set(record.channels):
        return AuthResult(AuthStatus.OUT_OF_SCOPE, peer_id)
    return AuthResult(AuthStatus.OK, peer_id, via_previous=via_previous, channels=record.channels)


@dataclass(frozen=True)
class PeerProof:
    """A caller's token, to be checked by the write that commits its request rather than by a read
    before it: the store's transaction requires the registry record to accept `token_sha256` (the
    rule of `judge`), so a revocation that lands before the write refuses it, and the happy path
    pays no read. A request that commits nothing is checked by a read before it is answered
    (flightdeck.api.auth)."""

    peer_id: str
    token_sha256: str
    now_ms: int
    # The channels the request's route admits (TOKEN_CHANNELS): the token must open one; (): any (the
    # authorizer, which only meters).
    channels: tuple[str, ...] = ()


class PeerRefusedError(Exception):
    """The registry refused the caller's token in the write that carried its PeerProof: nothing was stored."""

    def __init__(self, result: AuthResult):
        super().__init__(f"peer {result.peer_id!r}: {result.status.value}")
        self.result = result


def proof_of(token: str, now_ms: int, channels: tuple[str, ...] = ()) -> PeerProof | None:
    """The proof a well-formed token offers for a route admitting `channels` (None: malformed, a 401)."""
    peer_id = peer_of(token)
    return None if peer_id is None else PeerProof(peer_id, token_sha256(token), now_ms, channels)


def check_channels(channels: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The channels of a token as given to `flightdeck peers add --channel`: known ones, sorted, at least one."""
    unknown = sorted(set(channels) - set(TOKEN_CHANNELS))
    if unknown or not channels:
        raise PeerTokenError(f"channels: {', '.join(unknown) or 'none'}: each is one of {', '.join(TOKEN_CHANNELS)}")
    return tuple(sorted(set(channels)))


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None when absent or not Bearer."""
    scheme, _, token = (header or "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        return None
    return token


class CallerRequiredError(RuntimeError):
    """A use case was asked to act for nobody while inbound authentication is required: a wiring bug.
    Failing here keeps a route that forgot to pass its caller from serving everyone."""


def require_caller(inbound_auth: str, caller: str | None) -> None:
    if caller is None and inbound_auth != "off":
        raise CallerRequiredError("no authenticated caller, and INBOUND_AUTH is not 'off'")


def visible_to(owner: str, caller: str | None) -> bool:
    """Whether a session or task owned by `owner` exists for `caller`.

    caller None: inbound authentication is off (INBOUND_AUTH=off, isolated test rigs): no owners.
    Anything owned by someone else, or by nobody (made while authentication was off), is not visible.
    """
    return caller is None or owner == caller
