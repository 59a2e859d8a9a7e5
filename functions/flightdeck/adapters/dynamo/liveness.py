"""LivenessPort: the sparse deadline index (overdue turns and owed thinks, both on META) and the agent's load counter."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from flightdeck import topology
from flightdeck.adapters.dynamo.codec import aggregation_of, attr_values, ddb_item, plain_item
from flightdeck.adapters.dynamo.keys import (
    A2A_TASK,
    AGG_OPEN,
    AGG_STATUS,
    AGG_TURN,
    CANCELED,
    DUE,
    HOLDS_LOAD,
    LOAD_BUSY,
    LOAD_PK,
    LOAD_RECOUNTED,
    LOAD_SEQ,
    LOAD_SK,
    META,
    OWED,
    OWED_AT,
    PK,
    SHARD,
    SK,
    deadline_shard,
    session_pk,
)
from flightdeck.adapters.dynamo.table import Table, is_condition_failure
from flightdeck.domain.liveness import Overdue


class LivenessStore(Table):
    """The liveness port."""

    def list_overdue(self, now_ms: int, limit: int = 100) -> list[Overdue]:
        """What the sparse index lists as due by now: sessions (META) with a waiting turn or an owed think, and
        A2A tasks whose message was not handed over. Reads only those items, never the table.

        The index holds keys only (an update that keeps a session listed writes no index entry), so each
        listed session is read (one consistent BatchGetItem a page) for what is due and when: an owed think a
        grace after it was marked (owed_at), a waiting turn at its earliest open deadline. A session may be
        listed before either (a write kept its listed time, ARCHITECTURE §3): it comes back with that later
        due time, which the sweep acts on by looking again then."""
        overdue: list[Overdue] = []
        for shard in range(topology.DEADLINE_SHARDS):
            resp = self.client.query(
                TableName=self.table,
                IndexName=topology.DEADLINE_INDEX,
                KeyConditionExpression="#shard = :shard AND #due <= :now",
                ExpressionAttributeNames={"#shard": SHARD, "#due": DUE},
                ExpressionAttributeValues=attr_values(shard=f"open#{shard}", now=now_ms),
                Limit=limit,
            )
            listed = list(map(plain_item, resp.get("Items", [])))
            sessions = self._read_all([i[PK] for i in listed if i[SK] == META])
            for item in listed:
                sid = item[PK][2:]
                if item[SK] == META:
                    meta = sessions.get(item[PK])
                    if meta is not None:
                        overdue.append(self._due_on(sid, meta, int(item[DUE])))
                elif item[SK].startswith("TURN#"):  # a turn opened before its aggregation moved onto META
                    overdue.append(Overdue(sid, int(item[SK].split("#")[1]), "deadline", int(item[DUE])))
                elif item[SK].startswith(A2A_TASK):  # a task whose message was not handed over in time
                    overdue.append(Overdue(sid, 0, "handoff", int(item[DUE]), key=item[SK][len(A2A_TASK) :]))
        return overdue

    def _due_on(self, session_id: str, meta: dict[str, Any], listed_ms: int) -> Overdue:
        """What a listed session is due for, and when (listed_ms: its time in the index)."""
        if OWED not in meta and meta.get(AGG_STATUS) == "waiting":
            # No think owed: the turn's aggregation waits, due at its earliest open deadline.
            agg = aggregation_of(session_id, int(meta[AGG_TURN]), meta, self.now_ms())
            open_ids = meta.get(AGG_OPEN) or ()
            due = min((agg.deadline_of(i) for i in open_ids), default=listed_ms) if agg is not None else listed_ms
            return Overdue(session_id, int(meta[AGG_TURN]), "deadline", due)
        # An owed think (or a stale mark, which the sweep clears): at its listed time, and never before a grace
        # after it was marked (a write kept an earlier listing; a deferral lists it later). A mark written before
        # owed_at existed was listed exactly then.
        marked = meta.get(OWED_AT)
        due = max(listed_ms, int(marked) + self.owed_think_grace_ms) if marked is not None else listed_ms
        return Overdue(session_id, int(meta.get(OWED, meta.get("turn", 0))), "think", due)

    def _read_all(self, partitions: list[str]) -> dict[str, dict[str, Any]]:
        """The live META items of these sessions, read consistently in batches, by partition key."""
        found: dict[str, dict[str, Any]] = {}
        keys = [ddb_item(**{PK: pk, SK: META}) for pk in dict.fromkeys(partitions)]
        for start in range(0, len(keys), 100):  # BatchGetItem takes at most 100 keys
            request: dict[str, Any] = {self.table: {"Keys": keys[start : start + 100], "ConsistentRead": True}}
            while request:
                resp = self.client.batch_get_item(RequestItems=request)
                for item in map(plain_item, resp.get("Responses", {}).get(self.table, [])):
                    if self.alive(item):
                        found[item[PK]] = item
                request = resp.get("UnprocessedKeys") or {}
        return found

    def owed_think(self, session_id: str) -> int | None:
        """The think iteration a session is owed (committed as due, not yet started), or None."""
        meta = self.read_item(session_pk(session_id), META)
        # A canceled session is owed the think that closes it (flightdeck.domain.session_cancel).
        if meta is None or meta.get("status") not in ("busy", CANCELED) or OWED not in meta:
            return None
        return int(meta[OWED]) if int(meta[OWED]) == int(meta["turn"]) else None

    def clear_owed_think(self, session_id: str, turn: int) -> None:
        """Drop a stale owed mark (the session moved on without clearing it)."""
        try:
            self.client.update_item(
                TableName=self.table,
                Key=ddb_item(**{PK: session_pk(session_id), SK: META}),
                UpdateExpression="REMOVE #owed, #shard, #due",
                ConditionExpression="#owed = :turn",
                ExpressionAttributeNames={"#owed": OWED, "#shard": SHARD, "#due": DUE},
                ExpressionAttributeValues=attr_values(turn=turn),
            )
        except ClientError as exc:
            if not is_condition_failure(exc):
                raise

    def defer_owed_think(self, session_id: str, turn: int, delay_ms: int = 0, due_by_ms: int | None = None) -> bool:
        """Move the owed mark of `turn` to delay_ms + the grace from now (one UpdateItem, only on the
        recovery and throttled paths): the sweep must not start a think a run of it may still overlap.
        Conditioned on the mark (a session that moved on keeps its own) and, given due_by_ms, on it
        being due by then, so of two sweeps listing it only one re-sends."""
        condition = "#owed = :turn"
        # The shard too: with the stream as the think's starter the mark was out of the index, and this
        # recovery path hands it to the sweep (StateOps._owed_actions).
        values = attr_values(
            turn=turn,
            due=self.now_ms() + max(0, delay_ms) + self.owed_think_grace_ms,
            shard=deadline_shard(session_id),
        )
        if due_by_ms is not None:
            condition += " AND #due <= :by"
            values.update(attr_values(by=due_by_ms))
        try:
            self.client.update_item(
                TableName=self.table,
                Key=ddb_item(**{PK: session_pk(session_id), SK: META}),
                UpdateExpression="SET #due = :due, #shard = :shard",
                ConditionExpression=condition,
                ExpressionAttributeNames={"#owed": OWED, "#due": DUE, "#shard": SHARD},
                ExpressionAttributeValues=values,
            )
            return True
        except ClientError as exc:
            if not is_condition_failure(exc):
                raise
            return False

    # --- the agent's load (max_concurrent_tasks) ----------------------------------------------
    def busy_count(self) -> int:
        """How many sessions hold a slot of the agent's load, as its counter says."""
        item = self.read_item(LOAD_PK, LOAD_SK)
        return int(item.get(LOAD_BUSY, 0)) if item is not None else 0

    def recount_load(self, every_ms: int) -> int | None:
        """Repair the load counter from the sessions that hold a slot (a busy session deleted by TTL never
        gave its slot back): at most once per every_ms (the first sweep to claim the interval does it),
        one Scan of the table for the marked sessions, and the count written only if no slot was taken or
        given back meanwhile (the counter's seq as read before; else the next interval tries again).
        Returns the count written, or None when it did not recount (no counter: no slot was ever taken)."""
        now = self.now_ms()
        counter = self.read_item(LOAD_PK, LOAD_SK)
        if counter is None or now - int(counter.get(LOAD_RECOUNTED, 0)) < every_ms:
            return None
        key = ddb_item(**{PK: LOAD_PK, SK: LOAD_SK})
        last = counter.get(LOAD_RECOUNTED)
        try:
            self.client.update_item(
                TableName=self.table,
                Key=key,
                UpdateExpression="SET #at = :now",
                ConditionExpression="attribute_not_exists(#at)" if last is None else "#at = :last",
                ExpressionAttributeNames={"#at": LOAD_RECOUNTED},
                ExpressionAttributeValues=attr_values(now=now, **({} if last is None else {"last": int(last)})),
            )
        except ClientError as exc:
            if not is_condition_failure(exc):
                raise
            return None  # another sweep recounts this interval
        held = 0
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "FilterExpression": f"#sk = :meta AND attribute_exists({HOLDS_LOAD})",
            "ProjectionExpression": "#sk",
            "ExpressionAttributeNames": {"#sk": SK},
            "ExpressionAttributeValues": attr_values(meta=META),
            "ConsistentRead": True,
        }
        while True:
            page = self.client.scan(**kwargs)
            held += len(page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        seq = int(counter.get(LOAD_SEQ, 0))
        try:
            self.client.update_item(
                TableName=self.table,
                Key=key,
                UpdateExpression="SET #busy = :held",
                ConditionExpression="#seq = :seq" if seq else "attribute_not_exists(#seq)",
                ExpressionAttributeNames={"#busy": LOAD_BUSY, "#seq": LOAD_SEQ},
                ExpressionAttributeValues=attr_values(held=held, **({"seq": seq} if seq else {})),
            )
        except ClientError as exc:
            if not is_condition_failure(exc):
                raise
            return None
        return held
