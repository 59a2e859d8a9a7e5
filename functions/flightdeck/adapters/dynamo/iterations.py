"""IterationsPort: a think's model reply, stored once with the state change it makes."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from flightdeck.adapters.dynamo.codec import attr_values, calls_tools, ddb_item, dumps, iteration_of, plain_item
from flightdeck.adapters.dynamo.keys import PK, SK, THINK_CLAIM, TTL, iter_sk, session_pk
from flightdeck.adapters.dynamo.ops import StateOps, with_route
from flightdeck.adapters.dynamo.table import is_condition_failure
from flightdeck.domain.records import Iteration, Session, TurnSeed


class IterationStore(StateOps):
    """The iterations port."""

    def get_iteration(self, session_id: str, turn: int) -> Iteration | None:
        item = self.read_item(session_pk(session_id), iter_sk(turn))
        return iteration_of(session_id, turn, item) if item is not None else None

    def claim_think(self, session_id: str, turn: int, run: str, lease_ms: int | None = None) -> bool:
        """One conditional PutItem of the session's claim item (1 write unit): taken when there is none, it is
        an earlier turn's, its lease is over, or it is this run's already."""
        now = self.now_ms()
        lease = self.owed_think_grace_ms if lease_ms is None else min(max(0, lease_ms), self.owed_think_grace_ms)
        try:
            self.client.put_item(
                TableName=self.table,
                Item=ddb_item(
                    **{
                        PK: session_pk(session_id),
                        SK: THINK_CLAIM,
                        "turn": turn,
                        "run": run,
                        "until": now + lease,
                        TTL: self.expiry(self.owed_think_grace_ms),
                    }
                ),
                ConditionExpression="attribute_not_exists(#pk) OR #turn < :turn OR #until < :now OR #run = :run",
                ExpressionAttributeNames={"#pk": PK, "#turn": "turn", "#until": "until", "#run": "run"},
                ExpressionAttributeValues=attr_values(turn=turn, now=now, run=run),
            )
            return True
        except ClientError as exc:
            if is_condition_failure(exc):
                return False
            raise

    def release_think(self, session_id: str, turn: int, run: str) -> None:
        try:
            self.client.delete_item(
                TableName=self.table,
                Key=ddb_item(**{PK: session_pk(session_id), SK: THINK_CLAIM}),
                ConditionExpression="#turn = :turn AND #run = :run",
                ExpressionAttributeNames={"#turn": "turn", "#run": "run"},
                ExpressionAttributeValues=attr_values(turn=turn, run=run),
            )
        except ClientError as exc:
            if not is_condition_failure(exc):
                raise

    def save_iteration(
        self,
        session_id: str,
        turn: int,
        reply: dict[str, Any],
        retention_ms: int,
        *,
        seed: TurnSeed | None = None,
        ends_turn: bool = False,
        retires_route: bool = False,
        session: Session | None = None,
    ) -> Iteration:
        """Store a model reply once (it is also the conversation's assistant message: no second copy)
        with the state change it makes, in one transaction; a second writer gets the first one back,
        from the failed condition, without a read.

        Always: the session's owed-think mark goes (the think has happened). seed: the reply calls
        tools, and their turn's aggregation opens on the session item. ends_turn: the turn is over: the session
        goes idle, or, when a message waits in its inbox, the same write starts the next turn with it
        (Iteration.next_input; its think is owed from this write on). retires_route: the reply answers
        the session's reply route, which retires at this turn (a redelivery of this think re-sends the
        answer, which its caller deduplicates). session: the session as read for this think (its inbox
        and route).
        Raises LookupError when the session is no longer busy at this turn (a stale think).
        """
        pk = session_pk(session_id)
        now = self.now_ms()
        iteration_put = {
            "Put": {
                "TableName": self.table,
                "Item": ddb_item(
                    **{
                        PK: pk,
                        SK: iter_sk(turn),
                        "reply": dumps(reply),
                        "turn": turn,
                        # Only where it tells something: a reply that called tools, yet ended its turn.
                        "ends_turn": True if ends_turn and calls_tools(reply) else None,
                        # The timeline's dispatch time of its calls: the turn opens in this same write.
                        "dispatched": now if seed is not None else None,
                        TTL: self.expiry(retention_ms),
                    }
                ),
                "ConditionExpression": "attribute_not_exists(#pk)",
                "ExpressionAttributeNames": {"#pk": PK},
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }
        if ends_turn:
            reasons, started = self._end_turn(
                session_id,
                turn,
                [iteration_put],
                session,
                retire=retires_route,
                retention_ms=retention_ms,
            )
            if reasons is None:
                return Iteration(session_id, turn, reply, fresh=True, next_input=started)
        else:
            think_op = self._think_started_op(pk, turn)
            if seed is not None:  # the listing's count of delegations, in the META update made anyway
                update = think_op["Update"]
                update["UpdateExpression"] = update["UpdateExpression"].replace(
                    "SET updated_at = :now", "SET updated_at = :now, calls = if_not_exists(calls, :zero) + :calls", 1
                )
                update["ExpressionAttributeValues"].update(attr_values(zero=0, calls=len(seed.tool_use_ids)))
            if seed is not None:  # the turn's aggregation opens on META, in the same update
                think_op = self._with_seed(
                    think_op,
                    session_id,
                    turn,
                    list(seed.tool_use_ids),
                    seed.deadline_ms,
                    now,
                    seed.deadlines,
                    listed_at_ms=session.listed_at_ms if session is not None else 0,
                )
            if retires_route:
                think_op = with_route(think_op, *self._route_retire(turn, now))
            ops = [iteration_put, think_op]
            reasons = self.transact(ops)
            if reasons is None:
                return Iteration(session_id, turn, reply, fresh=True)
        first = reasons[0] if reasons else {}
        if first.get("Code") == "ConditionalCheckFailed":
            if first.get("Item"):
                return iteration_of(session_id, turn, plain_item(first["Item"]))
            stored = self.get_iteration(session_id, turn)
            assert stored is not None
            return stored
        raise LookupError(f"session {session_id} is not at turn {turn}")
