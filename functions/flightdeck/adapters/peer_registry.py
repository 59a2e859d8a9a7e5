"""The peer registry in the agent's own table: one item per calling peer, hashes only.

    pk "PEER#<peer_id>"   sk "PEER"
    peer_id, token_sha256, status (active | revoked), created_at, rotated_at, revoked_at (epoch ms),
    previous_sha256 + previous_valid_until (epoch ms): the token replaced by the last rotation,
    accepted until then (absent: no grace); channels (a string set: "a2a", "mcp", "user"): what the token
    opens (absent: "a2a" alone, as before scopes existed).

No expiry attribute: a peer stays until revoked. The handlers read it (GetItem,
strongly consistent: a revocation applies to the next request), or check it inside
the transaction that commits the request (`proof_check`: a ConditionCheck, billed as
a transactional read, in place of the GetItem); `flightdeck peers`
writes it (add, rotate, revoke, list), locally or on AWS, without a redeploy.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import boto3
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from flightdeck import topology
from flightdeck.domain.peers import (
    A2A_CHANNEL,
    ACTIVE,
    DEFAULT_CHANNELS,
    REVOKED,
    AuthResult,
    AuthStatus,
    PeerProof,
    PeerRecord,
    check_peer_id,
    judge,
    token_sha256,
)

_ser = TypeSerializer()
_de = TypeDeserializer()
PK, SK = topology.PARTITION_KEY, topology.SORT_KEY
PEER_SK = "PEER"
PEER_PK_PREFIX = "PEER#"


class PeerExistsError(Exception):
    """add: the peer is already registered and active (rotate or revoke it instead)."""


class PeerNotFoundError(LookupError):
    pass


def _key(peer_id: str) -> dict[str, Any]:
    return {PK: {"S": PEER_PK_PREFIX + peer_id}, SK: {"S": PEER_SK}}


def _vals(**values: Any) -> dict[str, Any]:
    return {f":{k}": _ser.serialize(v) for k, v in values.items()}


def _condition_failed(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


def _record(item: dict[str, Any]) -> PeerRecord:
    plain = {k: _de.deserialize(v) for k, v in item.items()}
    return PeerRecord(
        peer_id=plain["peer_id"],
        token_sha256=plain["token_sha256"],
        status=plain["status"],
        created_at=int(plain.get("created_at", 0)),
        rotated_at=int(plain.get("rotated_at", 0)),
        previous_sha256=plain.get("previous_sha256", ""),
        previous_valid_until=int(plain.get("previous_valid_until", 0)),
        revoked_at=int(plain.get("revoked_at", 0)),
        channels=tuple(sorted(plain["channels"])) if plain.get("channels") else DEFAULT_CHANNELS,
    )


def proof_check(table: str, proof: PeerProof) -> dict[str, Any]:
    """A TransactWriteItems ConditionCheck that holds when the registry accepts the proof's token:
    `flightdeck.domain.peers.judge` as a condition (active; the current hash, or the previous one
    before its grace ends; and, for a proof of a channel, issued for it). On failure it returns the
    record, for `refusal`."""
    condition = (
        "#status = :active AND (token_sha256 = :sha OR (previous_sha256 = :sha AND previous_valid_until > :now))"
    )
    values = _vals(active=ACTIVE, sha=proof.token_sha256, now=proof.now_ms)
    if proof.channels:
        # One of the route's channels; a record without channels predates scopes: it opens the a2a channel alone.
        scopes = [f"contains(channels, :channel{i})" for i in range(len(proof.channels))]
        if A2A_CHANNEL in proof.channels:
            scopes.insert(0, "attribute_not_exists(channels)")
        condition += f" AND ({' OR '.join(scopes)})"
        values.update(_vals(**{f"channel{i}": c for i, c in enumerate(proof.channels)}))
    return {
        "ConditionCheck": {
            "TableName": table,
            "Key": _key(proof.peer_id),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {"#status": "status"},
            "ExpressionAttributeValues": values,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    }


def refusal(proof: PeerProof, reason: dict[str, Any]) -> AuthResult:
    """Why a proof_check failed (its cancellation reason): unknown, wrong or revoked."""
    item = reason.get("Item")
    result = judge(_record(item) if item else None, proof)
    # The condition refused it: fail closed even if the record as returned would pass (a rotation since).
    return result if not result.ok else AuthResult(AuthStatus.UNKNOWN, proof.peer_id)


class PeerRegistry:
    """Peers of one agent. client_factory: where the DynamoDB client comes from (default: boto3's),
    e.g. the StateStore's, so the handlers keep one client."""

    def __init__(
        self,
        table_name: str,
        client: Any = None,
        clock: Callable[[], int] | None = None,
        client_factory: Callable[[], Any] | None = None,
    ):
        self.table = table_name
        self._client = client
        self._client_factory = client_factory or (lambda: boto3.client("dynamodb"))
        self._clock = clock or (lambda: int(time.time() * 1000))

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    # --- read (the handlers) -------------------------------------------------------------
    def get_peer(self, peer_id: str) -> PeerRecord | None:
        resp = self.client.get_item(TableName=self.table, Key=_key(peer_id), ConsistentRead=True)
        item = resp.get("Item")
        return _record(item) if item else None

    def list_peers(self) -> list[PeerRecord]:
        """Every peer. A Scan (filtered to registry items): an operator command, not a request path."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "FilterExpression": "begins_with(#pk, :prefix) AND #sk = :peer",
            "ExpressionAttributeNames": {"#pk": PK, "#sk": SK},
            "ExpressionAttributeValues": _vals(prefix=PEER_PK_PREFIX, peer=PEER_SK),
            "ConsistentRead": True,
        }
        found: list[PeerRecord] = []
        while True:
            resp = self.client.scan(**kwargs)
            found.extend(_record(i) for i in resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                return sorted(found, key=lambda r: r.peer_id)
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    # --- write (flightdeck peers, flightdeck local up) -----------------------------------------
    def add(
        self,
        peer_id: str,
        token: str,
        *,
        replace: bool = False,
        channels: tuple[str, ...] = DEFAULT_CHANNELS,
    ) -> PeerRecord:
        """Register peer_id with this token's hash, opening `channels`. Refused (PeerExistsError) if the peer
        is active, unless replace (used to seed a local stack from its file); a revoked peer may be added again."""
        check_peer_id(peer_id)
        now = self._clock()
        item = {
            PK: {"S": PEER_PK_PREFIX + peer_id},
            SK: {"S": PEER_SK},
            "peer_id": {"S": peer_id},
            "token_sha256": {"S": token_sha256(token)},
            "status": {"S": ACTIVE},
            "created_at": {"N": str(now)},
            "rotated_at": {"N": "0"},
            "channels": {"SS": sorted(set(channels or DEFAULT_CHANNELS))},
        }
        kwargs: dict[str, Any] = {"TableName": self.table, "Item": item}
        if not replace:
            kwargs.update(
                ConditionExpression="attribute_not_exists(#pk) OR #status = :revoked",
                ExpressionAttributeNames={"#pk": PK, "#status": "status"},
                ExpressionAttributeValues=_vals(revoked=REVOKED),
            )
        try:
            self.client.put_item(**kwargs)
        except ClientError as exc:
            if _condition_failed(exc):
                raise PeerExistsError(peer_id) from None
            raise
        return _record(item)

    def rotate(self, peer_id: str, token: str, grace_ms: int = 0) -> PeerRecord:
        """Replace an active peer's hash; with grace_ms > 0 the previous token stays valid that long."""
        now = self._clock()
        update = "SET token_sha256 = :new, rotated_at = :now"
        values = _vals(new=token_sha256(token), now=now, active=ACTIVE)
        if grace_ms > 0:
            update += ", previous_sha256 = token_sha256, previous_valid_until = :until"
            values.update(_vals(until=now + grace_ms))
        else:
            update += " REMOVE previous_sha256, previous_valid_until"
        try:
            resp = self.client.update_item(
                TableName=self.table,
                Key=_key(peer_id),
                UpdateExpression=update,
                ConditionExpression="attribute_exists(#pk) AND #status = :active",
                ExpressionAttributeNames={"#pk": PK, "#status": "status"},
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if _condition_failed(exc):
                raise PeerNotFoundError(f"no active peer {peer_id!r}") from None
            raise
        return _record(resp["Attributes"])

    def revoke(self, peer_id: str) -> PeerRecord:
        """active -> revoked (any grace ends too); refused at the next request."""
        try:
            resp = self.client.update_item(
                TableName=self.table,
                Key=_key(peer_id),
                UpdateExpression="SET #status = :revoked, revoked_at = :now REMOVE previous_sha256, previous_valid_until",
                ConditionExpression="attribute_exists(#pk)",
                ExpressionAttributeNames={"#pk": PK, "#status": "status"},
                ExpressionAttributeValues=_vals(revoked=REVOKED, now=self._clock()),
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if _condition_failed(exc):
                raise PeerNotFoundError(f"no peer {peer_id!r}") from None
            raise
        return _record(resp["Attributes"])
