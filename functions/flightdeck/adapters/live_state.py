"""DynamoDB adapter for the live relay (flightdeck.domain.live): two items in the session's partition.

Same table and partition as flightdeck.adapters.dynamo (pk "S#<session_id>"), which reads
both in the session's one query (SessionStore.get_session: Session.watched_until_ms and .live):

  WATCH   until (epoch ms) a stream watches the session; TTL at that time
  LIVE    the text of the think under way so far: turn, attempt, text; deleted when the think ends

Neither is an invariant of the session: a lost write costs a relay, never state.
"""

from __future__ import annotations

from botocore.exceptions import ClientError

# The same item codec and key layout as the state stores: one table.
from flightdeck.adapters.dynamo.codec import attr_values, ddb_item
from flightdeck.adapters.dynamo.keys import LIVE, PK, SK, TTL, WATCH, session_pk
from flightdeck.adapters.dynamo.table import Table, is_condition_failure
from flightdeck.domain.records import LiveText


class LiveStore:
    """The live relay's writes. Shares the state's table: client, table name and clock."""

    def __init__(self, state: Table):
        self._state = state

    def watch(self, session_id: str, until_ms: int) -> None:
        """Watched until `until_ms`, unless a mark lasts longer already (then nothing changes)."""
        try:
            self._state.client.update_item(
                TableName=self._state.table,
                Key=ddb_item(**{PK: session_pk(session_id), SK: WATCH}),
                UpdateExpression="SET #until = :until, #ttl = :exp",
                ConditionExpression="attribute_not_exists(#until) OR #until < :until",
                ExpressionAttributeNames={"#until": "until", "#ttl": TTL},
                ExpressionAttributeValues=attr_values(until=until_ms, exp=-(-until_ms // 1000)),
            )
        except ClientError as exc:
            if not is_condition_failure(exc):
                raise

    def put_text(self, session_id: str, live: LiveText, ttl_ms: int) -> None:
        self._state.client.put_item(
            TableName=self._state.table,
            Item=ddb_item(
                **{
                    PK: session_pk(session_id),
                    SK: LIVE,
                    "turn": live.turn,
                    "attempt": live.attempt,
                    "text": live.text,
                    TTL: self._state.expiry(ttl_ms),
                }
            ),
        )

    def clear_text(self, session_id: str, turn: int, attempt: int) -> None:
        """Delete the think's live text (not another attempt's, should two overlap)."""
        try:
            self._state.client.delete_item(
                TableName=self._state.table,
                Key=ddb_item(**{PK: session_pk(session_id), SK: LIVE}),
                ConditionExpression="turn = :turn AND attempt = :attempt",
                ExpressionAttributeValues=attr_values(turn=turn, attempt=attempt),
            )
        except ClientError as exc:
            if not is_condition_failure(exc):
                raise
