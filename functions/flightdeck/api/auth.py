"""Who is calling, and the audit line of each inbound delegation call.

Every API function's entry point (flightdeck.api.resolver.http_handler) runs, per request:

1. `authenticate`: on a route whose topology auth is "peer" (POST /api/chat, POST /a2a,
   GET /api/sessions/{id}) the `Authorization: Bearer fdp_<peer>_<secret>` header is checked
   against the peer registry before anything else (size, JSON, schema): missing or malformed
   is 401 with `WWW-Authenticate: Bearer realm="flightdeck"`, unknown, wrong or revoked is 403, and so is
   a token issued for none of the route's roles (topology Route.roles: the one route x role table). A
   console route (Route.console) where the console is off (CONSOLE) is 404, whoever asks.
   The routes read the caller with `current_peer()` and hand it to the domain, which
   enforces ownership. On a route that commits its request in one write (topology
   `checked_by_write`: POST /api/chat) only the token's shape is checked here: the write
   carries it as a PeerProof and the registry is checked inside that transaction (no read on
   the happy path; a refusal is the same 403, nothing stored). An answer given without such a
   write (a 4xx, a replay) is checked against the registry before it goes out (`settle`), so a
   refused token still gets 403 and never learns more. On a callback route whose token travels
   in a header (topology `token_header`: POST /api/tools/response, POST /api/a2a/push) the HMAC
   token is verified here too, before the body is read: a caller without a valid token cannot
   make the function parse a megabyte. The batch route's tokens are in its items, so its route checks them.
2. `audit_inbound`: one audit line per call on a route with an audit operation, whatever the
   outcome (202, 401, 413, 500...), with the SHA-256 of the body bytes as received.

What a request learned is module state: an execution environment serves one request at a time.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from flightdeck import topology
from flightdeck.domain.peers import AuthResult, PeerProof, bearer_token, judge, peer_of, proof_of
from flightdeck.observability import audit, count, logger, payload_sha256
from flightdeck.settings import get_settings

if TYPE_CHECKING:
    from flightdeck.domain.tokens import CallbackClaims

REALM = 'Bearer realm="flightdeck"'
# The name of the peer bearer scheme in the OpenAPI document and the agent card.
PEER_TOKEN_SCHEME = "peerToken"


@dataclass
class _Request:
    peer: str | None = None  # the authenticated caller
    claimed: str | None = None  # the peer a refused token claimed to be
    operation: str = ""  # a finer audit operation than the route's (a2a:<method>)
    proof: PeerProof | None = None  # a token no write has checked yet (checked_by_write routes)
    route: topology.Route | None = None
    channels: tuple[str, ...] = ()  # the channels the caller's checked token opens (its roles)
    refusal: dict[str, Any] | None = None  # the registry refused the token mid-route: the answer, whatever the route's
    callback: CallbackClaims | None = None  # a callback route's header token, verified


_request = _Request()


def _json_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json", **(headers or {})},
        "body": json.dumps({"error": {"code": code, "message": message}}),
        "isBase64Encoded": False,
    }


def begin(event: dict[str, Any], handlers: frozenset[str] = frozenset()) -> topology.Route | None:
    """Start a request: forget the previous one's caller; the event's route (None: no such route).

    A payload 2.0 event (a Lambda function URL's, on the lean front door) names no resource: its route is
    found from the path as sent, and only among `handlers`' routes, since a function URL takes any path and
    a route this function does not serve must be its 404, not a token check against a registry it may not read.
    """
    global _request
    if event.get("version") == "2.0":
        http = (event.get("requestContext") or {}).get("http") or {}
        route = topology.route_at(http.get("method"), event.get("rawPath"))
        route = route if route is not None and route.handler in handlers else None
    else:
        route = topology.route_for(event.get("httpMethod"), event.get("resource"))
    _request = _Request(route=route)
    return route


def current_peer() -> str | None:
    """The authenticated peer of this request; None when INBOUND_AUTH is off."""
    return _request.peer


def note(*, peer: str | None = None, operation: str = "") -> None:
    """What a route learned for the audit line: the verified peer (callbacks), a finer operation (a2a:<method>)."""
    if peer:
        _request.peer = peer
    if operation:
        _request.operation = operation


def caller_is(role: str) -> bool:
    """Whether the caller holds `role` (flightdeck.topology.TOKEN_ROLES), which its route admits. A token the
    request's write was to check is read now (one GetItem): ask only off the happy path. INBOUND_AUTH off:
    everyone holds every role its route admits. A token the registry refuses holds none, and the request is
    answered that refusal (403, 503: settle), whatever the route answers."""
    from flightdeck.wiring import deps

    route = _request.route
    if route is None or role not in route.roles:
        return False
    if deps().settings.inbound_auth == "off":
        return True
    if _request.proof is not None:
        _request.refusal = _check(_request.proof)
    return _request.refusal is None and role in _request.channels


def pending_proof() -> PeerProof | None:
    """The caller's token for the request's write to check (None: checked already, or auth off)."""
    return _request.proof


def proof_checked() -> None:
    """The request's write checked the caller's token (and accepted it)."""
    _request.proof = None


def refused(result: AuthResult) -> None:
    """Log and count a well-formed token the registry refused; the caller is nobody."""
    _request.proof = None
    _request.peer = None
    _request.claimed = result.peer_id
    count("InboundAuthRefused")
    logger.warning("inbound call refused", extra={"auth_check": result.status.value, "claimed_peer": result.peer_id})


REFUSED_MESSAGE = "this token is not accepted"


def settle(response: Any) -> Any:
    """The answer to send: `response`, unless the caller's token is still unchecked (no write took it), or was
    read by caller_is, and the registry refuses it (403) or cannot be read (503)."""
    if _request.refusal is not None:
        return _request.refusal
    if _request.proof is None:
        return response
    return _check(_request.proof) or response


def _check(proof: PeerProof) -> dict[str, Any] | None:
    """The registry's word on the caller's token: None when accepted (the caller is then its peer),
    else the 403 (unknown, wrong or revoked: one answer, the log says which) or the 503."""
    from flightdeck.wiring import deps

    registry = deps().registry
    if registry is None:
        raise RuntimeError("the peer registry is not wired (Deps.registry)")
    try:
        result = judge(registry.get_peer(proof.peer_id), proof)
    except (BotoCoreError, ClientError):
        logger.exception("peer registry unavailable")
        return _unavailable()
    if not result.ok:
        refused(result)
        return _json_response(403, "forbidden", REFUSED_MESSAGE)
    _request.peer, _request.proof, _request.channels = result.peer_id, None, result.channels
    if result.via_previous:
        logger.info("peer authenticated with its previous token (rotation grace)", extra={"peer": result.peer_id})
    return None


def _unavailable() -> dict[str, Any]:
    return _json_response(503, "service_unavailable", "a dependency is unavailable; retry later", {"Retry-After": "1"})


def _headers(event: dict[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items() if v is not None}


CALLBACK_WWW_AUTHENTICATE = {"WWW-Authenticate": 'Bearer realm="flightdeck", error="invalid_token"'}


def _callback_token(event: dict[str, Any], route: topology.Route) -> dict[str, Any] | None:
    """The header token of a callback route checked (HMAC, expiry): None, or the 401/503 response.

    The route checks it again when it records the result (one more HMAC, microseconds): this is
    the cheap refusal before parsing, not the authority."""
    from flightdeck.domain.callbacks import verified_claims
    from flightdeck.wiring import deps

    value = _headers(event).get(route.token_header, "").strip()
    if route.token_header == "authorization":
        scheme, _, value = value.partition(" ")
        value = value.strip() if scheme.lower() == "bearer" else ""
        missing, invalid = "missing bearer token", "invalid or expired callback token"
    else:
        missing, invalid = "missing X-A2A-Notification-Token", "invalid or expired notification token"
    if not value:
        return _json_response(401, "unauthorized", missing, CALLBACK_WWW_AUTHENTICATE)
    try:
        claims = verified_claims(deps(), value, route.audit or "callback")
    except (BotoCoreError, ClientError):
        logger.exception("callback signing keys unavailable")
        return _unavailable()
    if claims is None:
        return _json_response(401, "unauthorized", invalid, CALLBACK_WWW_AUTHENTICATE)
    note(peer=claims.name)
    _request.callback = claims
    return None


def callback_claims() -> CallbackClaims | None:
    """The claims of this request's callback header token, verified before the body was read (else None)."""
    return _request.callback


def _authorizer_vouches(event: dict[str, Any], peer_id: str) -> bool:
    """Whether the request's write may check the token: no authorizer in front, or one that named this
    peer. A token API Gateway's authorizer already found wanting (its context names no peer: the
    shared "unidentified" plan) is read at once: a refusal then costs a read, not a failed write."""
    authorizer = (event.get("requestContext") or {}).get("authorizer")
    return not isinstance(authorizer, dict) or authorizer.get("peer") == peer_id


def authenticate(event: dict[str, Any], route: topology.Route | None) -> dict[str, Any] | None:
    """None when the request may proceed (current_peer() then names the caller), else the 401/403/503 response."""
    from flightdeck.wiring import deps

    if route is not None and route.auth == topology.CALLBACK_AUTH and route.token_header:
        return _callback_token(event, route)
    if route is None or route.auth != topology.PEER_AUTH:
        return None
    d = deps()
    if route.console and get_settings().console != "on":
        # The console's routes exist only where the console is on (the stack has no method for them either).
        return _json_response(404, "not_found", f"no route for {route.path}")
    if d.settings.inbound_auth == "off":
        return None
    token = bearer_token(_headers(event).get("authorization"))
    if token is None:
        count("InboundAuthRefused")
        logger.warning("inbound call refused: no bearer token", extra={"auth_check": "missing"})
        return _json_response(
            401,
            "unauthorized",
            "a peer bearer token is required (Authorization: Bearer <token>)",
            {"WWW-Authenticate": REALM},
        )
    proof = proof_of(token, d.clock.now_ms(), route.roles)
    if proof is None:
        count("InboundAuthRefused")
        logger.warning("inbound call refused: malformed token", extra={"auth_check": "malformed"})
        return _json_response(
            401,
            "unauthorized",
            "the bearer token is not a peer token",
            {"WWW-Authenticate": f'{REALM}, error="invalid_token"'},
        )
    if route.checked_by_write and _authorizer_vouches(event, proof.peer_id):
        # Checked by the request's write, or by settle() before any other answer goes out.
        _request.peer, _request.proof = proof.peer_id, proof
        return None
    return _check(proof)


def _body_bytes(event: dict[str, Any]) -> bytes:
    body = event.get("body") or ""
    if event.get("isBase64Encoded"):
        try:
            return base64.b64decode(body)
        except ValueError:
            return body.encode("utf-8", "surrogatepass")
    return body.encode("utf-8", "surrogatepass")


def _outcome(response: Any) -> tuple[str, dict[str, Any]]:
    """A short word for the audit line, from the proxy response, and any extra fields."""
    status = int(response.get("statusCode", 0)) if isinstance(response, dict) else 0
    extra: dict[str, Any] = {"http_status": status}
    try:
        body = json.loads(response.get("body") or "null") if isinstance(response, dict) else None
    except (TypeError, ValueError):
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("code"), str):
            return error["code"], extra  # the REST error shape
        if isinstance(error, dict) and isinstance(error.get("code"), int):
            extra["rpc_error"] = error["code"]  # JSON-RPC (HTTP 200)
            return "rpc_error", extra
        if isinstance(body.get("results"), list):  # a batch of callbacks: each item's own outcome
            extra["items"] = [r.get("status") for r in body["results"] if isinstance(r, dict)]
            return "batch", extra
        if isinstance(body.get("status"), str):
            return body["status"], extra
    return ("ok" if 200 <= status < 300 else f"http_{status}"), extra


def audit_inbound(event: dict[str, Any], route: topology.Route | None, response: Any) -> None:
    if route is None or not route.audit:
        return
    outcome, extra = _outcome(response)
    peer = _request.peer
    claimed = _request.claimed
    if peer is None and claimed is None and route.auth == topology.PEER_AUTH:
        claimed = peer_of(bearer_token(_headers(event).get("authorization")) or "")
    audit(
        "inbound",
        _request.operation or route.audit,
        peer,
        payload_sha256(_body_bytes(event)),
        outcome,
        claimed_peer=claimed if peer is None else None,
        **extra,
    )
