"""DispatchPort: claims of delegations (A side), so one to a peer that may not deduplicate is sent once."""

from __future__ import annotations

from botocore.exceptions import ClientError

from flightdeck.adapters.dynamo.codec import attr_values, ddb_item
from flightdeck.adapters.dynamo.keys import PK, SK, TTL, dispatch_sk, session_pk
from flightdeck.adapters.dynamo.table import Table, is_condition_failure


class DispatchStore(Table):
    """The dispatch port."""

    def claim_dispatch(
        self, session_id: str, turn: int, tool_use_id: str, retention_ms: int, status: str = "sending"
    ) -> bool:
        """True if this delegation still needs sending (new, or a previous attempt did not finish); a claim under
        another status than "sending" is final at once."""
        try:
            self.client.put_item(
                TableName=self.table,
                Item=ddb_item(
                    **{
                        PK: session_pk(session_id),
                        SK: dispatch_sk(turn, tool_use_id),
                        "status": status,
                        "updated_at": self.now_ms(),
                        TTL: self.expiry(retention_ms),
                    }
                ),
                ConditionExpression="attribute_not_exists(#pk) OR #status = :sending",
                ExpressionAttributeNames={"#pk": PK, "#status": "status"},
                ExpressionAttributeValues=attr_values(sending="sending"),
            )
            return True
        except ClientError as exc:
            if is_condition_failure(exc):
                return False
            raise

    def finish_dispatch(self, session_id: str, turn: int, tool_use_id: str, status: str) -> None:
        self.client.update_item(
            TableName=self.table,
            Key=ddb_item(**{PK: session_pk(session_id), SK: dispatch_sk(turn, tool_use_id)}),
            UpdateExpression="SET #status = :s, updated_at = :now",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues=attr_values(s=status, now=self.now_ms()),
        )
