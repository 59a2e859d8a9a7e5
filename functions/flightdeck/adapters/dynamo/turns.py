"""TurnsPort: a turn's aggregation (A side): its results, each recorded once, and its one completion."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from flightdeck.adapters.dynamo.codec import aggregation_of, attr_values, ddb_item, plain_item, result_of
from flightdeck.adapters.dynamo.keys import DUE, META, OWED, PK, SHARD, SK, TTL, result_sk, session_pk, turn_sk
from flightdeck.adapters.dynamo.ops import StateOps
from flightdeck.adapters.dynamo.table import is_condition_failure
from flightdeck.domain.records import Completion, Expiry, RecordOutcome, ToolResult, TurnAggregation


class TurnStore(StateOps):
    """The turns port."""

    def seed_turn(
        self,
        session_id: str,
        turn: int,
        tool_use_ids: list[str],
        deadline_ms: int,
        retention_ms: int,
        deadlines: dict[str, int] | None = None,
    ) -> bool:
        """Create a turn's aggregation record on its own; False if it already exists. (A think
        seeds its turn in the write that stores its reply: save_iteration(seed=...).)
        deadline_ms: the latest of its calls' deadlines; deadlines: each call's, when they differ."""
        put = self._seed_op(session_id, turn, tool_use_ids, deadline_ms, retention_ms, self.now_ms(), deadlines)["Put"]
        try:
            self.client.put_item(**put)
            return True
        except ClientError as exc:
            if is_condition_failure(exc):
                return False
            raise

    def get_turn(self, session_id: str, turn: int) -> TurnAggregation | None:
        item = self.read_item(session_pk(session_id), turn_sk(turn))
        return aggregation_of(session_id, turn, item) if item is not None else None

    def get_results(self, session_id: str, turn: int) -> list[ToolResult]:
        return [
            result_of(i, i["tool_use_id"]) for i in self.query_prefix(session_pk(session_id), f"RESULT#{turn:06d}#")
        ]

    def record_result(
        self, session_id: str, turn: int, result: ToolResult, retention_ms: int, completion: Completion | None = None
    ) -> tuple[RecordOutcome, bool]:
        """Write one result at most once and count it toward its waiting turn, atomically; with
        `completion`, the last expected result also completes the turn and claims the next think
        in the same transaction (one request for a result, whether or not it is the last).

        Returns (outcome, completed): completed is True only for the one write that completed it.
        Which variant to try first follows the turn's size (a one-call turn: the completing one);
        a failed count condition returns the turn item, which says which variant holds.
        """
        pk = session_pk(session_id)
        put = {
            "Put": {
                "TableName": self.table,
                "Item": ddb_item(
                    **{
                        PK: pk,
                        SK: result_sk(turn, result.tool_use_id),
                        "tool_use_id": result.tool_use_id,
                        "result_status": result.status,
                        "text": result.text,
                        "source": result.source.value,
                        "recorded_at": self.now_ms(),
                        TTL: self.expiry(retention_ms),
                    }
                ),
                "ConditionExpression": "attribute_not_exists(#pk)",
                "ExpressionAttributeNames": {"#pk": PK},
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

        def count_op(below: int | None = None) -> dict[str, Any]:
            """Count the result toward its waiting turn; below: only while fewer than that are in."""
            condition = "#status = :waiting AND contains(expected, :id)"
            values = attr_values(one=1, waiting="waiting", id=result.tool_use_id)
            if below is not None:
                condition += " AND received < :before"
                values.update(attr_values(before=below))
            return {
                "Update": {
                    "TableName": self.table,
                    "Key": ddb_item(**{PK: pk, SK: turn_sk(turn)}),
                    "UpdateExpression": "ADD received :one",
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": {"#status": "status"},
                    "ExpressionAttributeValues": values,
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            }

        last: bool | None = None
        if completion is not None:
            last = completion.total <= 1
        for _ in range(4):
            if last is None or completion is None:  # (last is None exactly when completion is)
                ops = [put, count_op()]
            elif last:
                now = self.now_ms()
                complete = self._complete_op(
                    session_id,
                    turn,
                    completion.by,
                    completion.tombstone_ms,
                    now,
                    extra_condition=" AND contains(expected, :id) AND received = :before",
                    set_received=completion.total,
                )
                complete["Update"]["ExpressionAttributeValues"].update(
                    attr_values(id=result.tool_use_id, before=completion.total - 1)
                )
                complete["Update"]["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
                ops = [put, complete, self._advance_session_op(session_id, turn, now)]
            else:
                ops = [put, count_op(below=completion.total - 1)]
            reasons = self.transact(ops)
            if reasons is None:
                return RecordOutcome.ACCEPTED, bool(last)
            put_reason = reasons[0] if reasons else {}
            if put_reason.get("Code") == "ConditionalCheckFailed":
                old = plain_item(put_reason.get("Item") or {})
                # The same kind of result again is a retry of an accepted one; anything
                # else (a callback after a synthesized timeout) arrived too late.
                return (
                    RecordOutcome.DUPLICATE if old.get("source") == result.source.value else RecordOutcome.LATE,
                    False,
                )
            turn_reason = reasons[1] if len(reasons) > 1 else {}
            agg = plain_item(turn_reason.get("Item") or {})
            if (
                last is None
                or completion is None
                or turn_reason.get("Code") != "ConditionalCheckFailed"
                or agg.get("status") != "waiting"
                or result.tool_use_id not in agg.get("expected", ())
            ):
                return RecordOutcome.LATE, False
            # Only the count was wrong: the turn's item says whether this result is the last.
            completion = Completion(completion.by, int(agg["total_tools"]), completion.tombstone_ms)
            last = int(agg["received"]) >= completion.total - 1
        return RecordOutcome.LATE, False

    def complete_turn(self, session_id: str, turn: int, completed_by: str, tombstone_ms: int) -> bool:
        """waiting -> complete once every expected result is in; True only for the winner.

        The same transaction claims the next turn on the session, so exactly one
        next-think is ever allocated for it.
        """
        now = self.now_ms()
        ops = [
            self._complete_op(
                session_id, turn, completed_by, tombstone_ms, now, extra_condition=" AND received >= total_tools"
            ),
            self._advance_session_op(session_id, turn, now),
        ]
        return self.transact(ops) is None

    def _complete_op(
        self,
        session_id: str,
        turn: int,
        completed_by: str,
        tombstone_ms: int,
        now: int,
        extra_condition: str = "",
        set_received: int | None = None,
    ) -> dict[str, Any]:
        values = attr_values(
            complete="complete", waiting="waiting", by=completed_by, now=now, exp=(now + tombstone_ms) // 1000
        )
        update = "SET #status = :complete, completed_by = :by, completed_at = :now, #ttl = :exp"
        if set_received is not None:
            update += ", received = :received"
            values.update(attr_values(received=set_received))
        return {
            "Update": {
                "TableName": self.table,
                "Key": ddb_item(**{PK: session_pk(session_id), SK: turn_sk(turn)}),
                # Leaving the sparse deadline index is part of completing.
                "UpdateExpression": update + f" REMOVE {SHARD}, {DUE}",
                "ConditionExpression": "#status = :waiting" + extra_condition,
                "ExpressionAttributeNames": {"#status": "status", "#ttl": TTL},
                "ExpressionAttributeValues": values,
            }
        }

    def _advance_session_op(self, session_id: str, turn: int, now: int) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self.table,
                "Key": ddb_item(**{PK: session_pk(session_id), SK: META}),
                # The next think is owed from this commit on: the sweep re-sends it if it never starts.
                "UpdateExpression": "SET turn = :next, updated_at = :now, #owed = :owed, #shard = :shard, #due = :due",
                "ConditionExpression": "turn = :turn",
                "ExpressionAttributeNames": {"#owed": OWED, "#shard": SHARD, "#due": DUE},
                "ExpressionAttributeValues": {
                    **attr_values(next=turn + 1, turn=turn, now=now),
                    **self._owed_values(session_id, turn + 1, now),
                },
            }
        }

    def complete_with_errors(
        self,
        session_id: str,
        turn: int,
        reason_results: Callable[[str], ToolResult],
        completed_by: str,
        tombstone_ms: int,
        retention_ms: int,
        due_by_ms: int | None = None,
    ) -> Expiry:
        """Synthesize a result for every missing id and complete the turn, all in one transaction.

        due_by_ms: only the missing ids whose deadline is at or before it (a timeout; None: every
        missing id, a cancel). When other ids stay open, the due ones' results are written and
        counted in one transaction that moves the turn, in the deadline index, to the earliest
        deadline still open; the last of them completes the turn. won is True only for the
        completer. A callback that commits first fails a condition (a put, or the count read
        before); we then re-read and try again.
        """
        for _ in range(10):
            agg = self.get_turn(session_id, turn)
            if agg is None or agg.status != "waiting":
                return Expiry(False)
            have = {r.tool_use_id for r in self.get_results(session_id, turn)}
            missing = sorted(agg.expected - have)
            due = missing if due_by_ms is None else [i for i in missing if agg.deadline_of(i) <= due_by_ms]
            still_open = [i for i in missing if i not in due]
            next_due = min((agg.deadline_of(i) for i in still_open), default=None)
            if next_due is not None and not due:
                self._move_due(session_id, turn, agg.due_ms, next_due)
                return Expiry(False, (), next_due)
            now = self.now_ms()
            pk = session_pk(session_id)
            ops: list[dict[str, Any]] = []
            for tool_use_id in due:
                r = reason_results(tool_use_id)
                ops.append(
                    {
                        "Put": {
                            "TableName": self.table,
                            "Item": ddb_item(
                                **{
                                    PK: pk,
                                    SK: result_sk(turn, tool_use_id),
                                    "tool_use_id": tool_use_id,
                                    "result_status": r.status,
                                    "text": r.text,
                                    "source": r.source.value,
                                    "recorded_at": now,
                                    TTL: self.expiry(retention_ms),
                                }
                            ),
                            "ConditionExpression": "attribute_not_exists(#pk)",
                            "ExpressionAttributeNames": {"#pk": PK},
                        }
                    }
                )
            if next_due is None:
                ops.append(self._complete_op(session_id, turn, completed_by, tombstone_ms, now, set_received=agg.total))
                ops.append(self._advance_session_op(session_id, turn, now))
            else:
                ops.append(
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": ddb_item(**{PK: pk, SK: turn_sk(turn)}),
                            "UpdateExpression": f"ADD received :n SET {DUE} = :next",
                            "ConditionExpression": "#status = :waiting AND received = :seen",
                            "ExpressionAttributeNames": {"#status": "status"},
                            "ExpressionAttributeValues": attr_values(
                                n=len(due), next=next_due, waiting="waiting", seen=agg.received
                            ),
                        }
                    }
                )
            reasons = self.transact(ops)
            if reasons is None:
                return Expiry(next_due is None, tuple(due), next_due)
            if (
                next_due is None
                and len(reasons) > len(due)
                and reasons[len(due)].get("Code") == "ConditionalCheckFailed"
            ):
                return Expiry(False)  # someone else completed it
        return Expiry(False)

    def _move_due(self, session_id: str, turn: int, listed_ms: int, next_due_ms: int) -> None:
        """Nothing is due yet (the earliest call answered in time): the index lists the turn at the next deadline."""
        if listed_ms == next_due_ms:
            return
        try:
            self.client.update_item(
                TableName=self.table,
                Key=ddb_item(**{PK: session_pk(session_id), SK: turn_sk(turn)}),
                UpdateExpression=f"SET {DUE} = :next",
                ConditionExpression="#status = :waiting",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues=attr_values(next=next_due_ms, waiting="waiting"),
            )
        except ClientError as exc:
            if not is_condition_failure(exc):
                raise
