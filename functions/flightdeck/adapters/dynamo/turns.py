"""TurnsPort: a turn's aggregation (A side): its results, each recorded once, and its one completion.

The aggregation lives on the session's META item (ARCHITECTURE §2): `agg_open` is the set of expected ids
not yet counted. A result is a PutItem conditioned on absence (first result wins), then one UpdateItem of
META that counts it (removes its id from `agg_open`) and, for the last one, completes the turn and claims
the next think. A crash between the two leaves a result stored, not counted: the caller's retry counts it
(a duplicate put still counts), else the timer and the sweep complete the turn from the stored results.
Counting is idempotent (a set's DELETE), so a result is never counted twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, cast

from botocore.exceptions import ClientError

from flightdeck.adapters.dynamo.codec import aggregation_of, attr_values, ddb_item, plain_item, result_of
from flightdeck.adapters.dynamo.keys import (
    AGG_BY,
    AGG_EXPECTED,
    AGG_OPEN,
    AGG_STATUS,
    AGG_TTL,
    AGG_TURN,
    DUE,
    META,
    OWED,
    PK,
    SHARD,
    SK,
    TTL,
    legacy_turn_sk,
    result_sk,
    session_pk,
)
from flightdeck.adapters.dynamo.ops import StateOps
from flightdeck.adapters.dynamo.table import is_condition_failure
from flightdeck.domain.records import Completion, Expiry, RecordOutcome, ToolResult, TurnAggregation

# META's aggregation of turn :a_turn still waits (the names and values each update below carries).
WAITING = f"{AGG_TURN} = :a_turn AND {AGG_STATUS} = :a_waiting"


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
        """Open a turn's aggregation on its own (one UpdateItem of META); False if that turn's is open or
        done already, or the session is elsewhere. (A think opens its turn in the write that stores its
        reply: save_iteration(seed=...).) deadline_ms: the latest of its calls' deadlines; deadlines:
        each call's, when they differ."""
        clause, values, names = self._seed_update(session_id, turn, tool_use_ids, deadline_ms, self.now_ms(), deadlines)
        try:
            self.client.update_item(
                TableName=self.table,
                Key=ddb_item(**{PK: session_pk(session_id), SK: META}),
                UpdateExpression="SET " + clause,
                ConditionExpression=f"attribute_exists(#pk) AND turn = :a_turn AND "
                f"(attribute_not_exists({AGG_TURN}) OR {AGG_TURN} <> :a_turn)",
                ExpressionAttributeNames={**names, "#pk": PK},
                ExpressionAttributeValues=values,
            )
            return True
        except ClientError as exc:
            if is_condition_failure(exc):
                return False
            raise

    def get_turn(self, session_id: str, turn: int) -> TurnAggregation | None:
        meta = self.read_item(session_pk(session_id), META)
        agg = aggregation_of(session_id, turn, meta, self.now_ms())
        if agg is None and self._adopt_legacy(session_id, turn, meta):
            agg = aggregation_of(session_id, turn, self.read_item(session_pk(session_id), META), self.now_ms())
        return agg

    def _adopt_legacy(self, session_id: str, turn: int, meta: dict[str, Any] | None) -> bool:
        """A waiting turn of a session stored before the aggregation moved onto META has a TURN item: its
        aggregation goes onto META (the ids with a stored result counted, as they were in the write that
        stored them) and the item leaves the deadline index, in one transaction; from then on the turn is
        served as any other. Only for the session's current turn, and only while META holds no other
        aggregation of it. True when META holds it now."""
        if not meta or int(meta.get("turn", -1)) != turn or int(meta.get(AGG_TURN, -1)) >= turn:
            return False
        pk = session_pk(session_id)
        item = self.read_item(pk, legacy_turn_sk(turn))
        if item is None or item.get("status") != "waiting":
            return False
        expected = sorted(item["expected"])
        open_ids = set(expected) - {r.tool_use_id for r in self.get_results(session_id, turn)}
        clause, values, names = self._seed_update(
            session_id, turn, expected, int(item["deadline_ms"]), int(item.get("created_at", 0)), item.get("deadlines")
        )
        values.update(attr_values(a_open=open_ids or {"-"}, a_due=int(item.get(DUE, item["deadline_ms"]))))
        if not open_ids:  # every result stored: nothing open (a set cannot be empty)
            clause = clause.replace(f"{AGG_OPEN} = :a_open, ", "")
            del values[":a_open"]
        reasons = self.transact(
            [
                {
                    "Update": {
                        "TableName": self.table,
                        "Key": ddb_item(**{PK: pk, SK: META}),
                        "UpdateExpression": "SET " + clause,
                        "ConditionExpression": f"turn = :a_turn AND "
                        f"(attribute_not_exists({AGG_TURN}) OR {AGG_TURN} <> :a_turn)",
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": values,
                    }
                },
                {
                    "Update": {
                        "TableName": self.table,
                        "Key": ddb_item(**{PK: pk, SK: legacy_turn_sk(turn)}),
                        "UpdateExpression": "REMOVE #shard, #due",
                        "ConditionExpression": "#status = :waiting",
                        "ExpressionAttributeNames": {**names, "#status": "status"},
                        "ExpressionAttributeValues": attr_values(waiting="waiting"),
                    }
                },
            ]
        )
        if reasons is None:
            return True
        current = self.read_item(pk, META) or {}
        return int(current.get(AGG_TURN, -1)) == turn  # another writer took it over first

    def get_results(self, session_id: str, turn: int) -> list[ToolResult]:
        return [
            result_of(i, i["tool_use_id"]) for i in self.query_prefix(session_pk(session_id), f"RESULT#{turn:06d}#")
        ]

    def _result_put(
        self, session_id: str, turn: int, result: ToolResult, now: int, retention_ms: int, attempt: str = ""
    ) -> dict[str, Any]:
        item = {
            PK: session_pk(session_id),
            SK: result_sk(turn, result.tool_use_id),
            "tool_use_id": result.tool_use_id,
            "result_status": result.status,
            "text": result.text,
            "source": result.source.value,
            "recorded_at": now,
            TTL: self.expiry(retention_ms),
        }
        if attempt:
            item["attempt"] = attempt
        return {
            "TableName": self.table,
            "Item": ddb_item(**item),
            "ConditionExpression": "attribute_not_exists(#pk)",
            "ExpressionAttributeNames": {"#pk": PK},
        }

    def record_result(
        self, session_id: str, turn: int, result: ToolResult, retention_ms: int, completion: Completion | None = None
    ) -> tuple[RecordOutcome, bool]:
        """Write one result at most once (a PutItem, first result wins), then count it toward its waiting
        turn on META (an UpdateItem); with `completion`, the count of the last expected result also
        completes the turn and claims the next think (two requests for a result, whether or not it is the
        last). A duplicate of a stored result is counted too, if the first attempt died before counting it.

        Returns (outcome, completed): completed is True only for the one write that completed it.
        Which count to try first follows the turn's size (a one-call turn: the completing one); a failed
        condition returns META, which says which one holds.
        """
        now = self.now_ms()
        # This call's mark on its put: when the SDK re-sends the put (its first attempt applied, the answer
        # lost on the way back), the item it then finds is its own, not a duplicate of another call's.
        attempt = uuid.uuid4().hex[:16]
        put = self._result_put(session_id, turn, result, now, retention_ms, attempt)
        duplicate = False
        try:
            self.client.put_item(**put, ReturnValuesOnConditionCheckFailure="ALL_OLD")
        except ClientError as exc:
            if not is_condition_failure(exc):
                raise
            old = plain_item(cast(dict[str, Any], exc.response.get("Item") or {})) or self._stored_result(
                session_id, turn, result
            )
            # The same kind of result again is a retry of an accepted one; anything else (a callback
            # after a synthesized timeout) arrived too late.
            if old.get("source") != result.source.value:
                return RecordOutcome.LATE, False
            duplicate = old.get("attempt") != attempt
        last = completion is not None and completion.total <= 1
        meta: dict[str, Any] = {}
        for _ in range(4):
            counted, meta = self._count(session_id, turn, result.tool_use_id, completion, last, now)
            if counted:
                return (RecordOutcome.DUPLICATE if duplicate else RecordOutcome.ACCEPTED), last
            if not self._open(meta, turn, result.tool_use_id):
                if self._adopt_legacy(session_id, turn, meta):
                    continue  # its turn was a TURN item: now on META, count it there
                break
            last = completion is not None and len(meta[AGG_OPEN]) == 1  # the guess of its size was wrong
        if duplicate:
            return RecordOutcome.DUPLICATE, False
        if int(meta.get(AGG_TURN, -1)) == turn and result.tool_use_id in meta.get(AGG_EXPECTED, ()):
            # Expected, and its put won: stored before the turn completed (every completion stores a result
            # for each id), or counted by an expiry that found it stored. Either way it is the turn's.
            return RecordOutcome.ACCEPTED, False
        self._drop_result(session_id, turn, result, now)  # not expected: the put changes nothing in the end
        return RecordOutcome.LATE, False

    @staticmethod
    def _open(meta: dict[str, Any], turn: int, tool_use_id: str) -> bool:
        return (
            int(meta.get(AGG_TURN, -1)) == turn
            and meta.get(AGG_STATUS) == "waiting"
            and tool_use_id in meta.get(AGG_OPEN, ())
        )

    def _count(
        self, session_id: str, turn: int, tool_use_id: str, completion: Completion | None, last: bool, now: int
    ) -> tuple[bool, dict[str, Any]]:
        """Count one stored result on META: (True, {}) when counted, else (False, META as it is)."""
        condition = f"{WAITING} AND contains({AGG_OPEN}, :id)"
        values = attr_values(a_turn=turn, a_waiting="waiting", id=tool_use_id)
        if last and completion is not None:
            # contains() first: it requires the set, and size() of a missing attribute is an error in moto
            # (DynamoDB: false), once another count has emptied it; AND stops at the first false.
            op = self._complete_op(
                session_id,
                turn,
                completion.by,
                completion.tombstone_ms,
                now,
                f" AND contains({AGG_OPEN}, :id) AND size({AGG_OPEN}) = :one",
                keep_listed=True,  # the round trip's completion: no index write (ARCHITECTURE §3)
            )["Update"]
            op["ExpressionAttributeValues"].update(attr_values(id=tool_use_id, one=1))
        else:
            if completion is not None:  # not the last: the last one's count is the completing one
                condition += f" AND size({AGG_OPEN}) > :one"
                values.update(attr_values(one=1))
            op = {
                "TableName": self.table,
                "Key": ddb_item(**{PK: session_pk(session_id), SK: META}),
                "UpdateExpression": f"DELETE {AGG_OPEN} :ids",
                "ConditionExpression": condition,
                "ExpressionAttributeValues": {**values, **attr_values(ids={tool_use_id})},
            }
        try:
            self.client.update_item(**op, ReturnValuesOnConditionCheckFailure="ALL_OLD")
            return True, {}
        except ClientError as exc:
            if not is_condition_failure(exc):
                raise
            return False, plain_item(cast(dict[str, Any], exc.response.get("Item") or {}))

    def _stored_result(self, session_id: str, turn: int, result: ToolResult) -> dict[str, Any]:
        return self.read_item(session_pk(session_id), result_sk(turn, result.tool_use_id)) or {}

    def _drop_result(self, session_id: str, turn: int, result: ToolResult, recorded_at: int) -> None:
        """Delete the result this call put (and only it: its time and source), which no turn expects."""
        try:
            self.client.delete_item(
                TableName=self.table,
                Key=ddb_item(**{PK: session_pk(session_id), SK: result_sk(turn, result.tool_use_id)}),
                ConditionExpression="recorded_at = :at AND #source = :source",
                ExpressionAttributeNames={"#source": "source"},
                ExpressionAttributeValues=attr_values(at=recorded_at, source=result.source.value),
            )
        except ClientError as exc:
            if not is_condition_failure(exc):
                raise

    def complete_turn(self, session_id: str, turn: int, completed_by: str, tombstone_ms: int) -> bool:
        """waiting -> complete once every expected result is counted; True only for the winner.

        The same update claims the next turn on the session, so exactly one next-think is ever allocated.
        """
        op = self._complete_op(
            session_id, turn, completed_by, tombstone_ms, self.now_ms(), f" AND attribute_not_exists({AGG_OPEN})"
        )
        try:
            self.client.update_item(**op["Update"])
            return True
        except ClientError as exc:
            if is_condition_failure(exc):
                return False
            raise

    def _complete_op(
        self,
        session_id: str,
        turn: int,
        completed_by: str,
        tombstone_ms: int,
        now: int,
        extra_condition: str = "",
        keep_listed: bool = False,
    ) -> dict[str, Any]:
        """META's one update that completes turn `turn` and claims the next think: the session moves on to
        turn+1, owed from this commit on (the sweep re-sends it if it never starts); the index attributes
        move from the turn's deadline to the owed think's (keep_listed: they stay as listed, see
        StateOps._owed_actions)."""
        values = {
            **attr_values(
                a_turn=turn,
                a_waiting="waiting",
                a_done="complete",
                by=completed_by,
                next=turn + 1,
                now=now,
                exp=(now + tombstone_ms) // 1000,
            ),
            **self._owed_values(session_id, turn + 1, now),
        }
        owed_set, owed_remove = self._owed_actions(keep_listed=keep_listed)
        return {
            "Update": {
                "TableName": self.table,
                "Key": ddb_item(**{PK: session_pk(session_id), SK: META}),
                "UpdateExpression": f"SET {AGG_STATUS} = :a_done, {AGG_BY} = :by, {AGG_TTL} = :exp, turn = :next, "
                f"updated_at = :now, {owed_set} REMOVE {', '.join(filter(None, [AGG_OPEN, owed_remove]))}",
                "ConditionExpression": f"{WAITING} AND turn = :a_turn" + extra_condition,
                "ExpressionAttributeNames": {"#owed": OWED, "#shard": SHARD, "#due": DUE},
                "ExpressionAttributeValues": values,
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

        Missing: no result stored (a result stored but not counted, its callback having died between
        its two writes, is the turn's: it is counted here). due_by_ms: only the missing ids whose
        deadline is at or before it (a timeout; None: every missing id, a cancel). When other ids stay
        open, the due ones' results are written and counted in one transaction that moves the turn, in
        the deadline index, to the earliest deadline still open; the last of them completes the turn.
        won is True only for the completer. A callback that commits first fails a put's condition; we
        then re-read and try again.
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
            ops: list[dict[str, Any]] = [
                {"Put": self._result_put(session_id, turn, reason_results(i), now, retention_ms)} for i in due
            ]
            if next_due is None:
                ops.append(self._complete_op(session_id, turn, completed_by, tombstone_ms, now))
            else:
                ops.append(
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": ddb_item(**{PK: session_pk(session_id), SK: META}),
                            "UpdateExpression": f"DELETE {AGG_OPEN} :ids SET #due = :next",
                            "ConditionExpression": WAITING,
                            "ExpressionAttributeNames": {"#due": DUE},
                            "ExpressionAttributeValues": attr_values(
                                ids=set(due) | (have & agg.expected), next=next_due, a_turn=turn, a_waiting="waiting"
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
                Key=ddb_item(**{PK: session_pk(session_id), SK: META}),
                UpdateExpression="SET #due = :next",
                ConditionExpression=WAITING,
                ExpressionAttributeNames={"#due": DUE},
                ExpressionAttributeValues=attr_values(next=next_due_ms, a_turn=turn, a_waiting="waiting"),
            )
        except ClientError as exc:
            if not is_condition_failure(exc):
                raise
