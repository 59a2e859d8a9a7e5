"""DynamoDB adapter for A2A: tasks, push-notification configs, peer tasks (A side).

Same table as flightdeck.adapters.dynamo, same partition as the session
(pk "S#<session_id>"), new sort-key prefixes:

  A2A#TASK#<key>                       one A2A task (task id "<session_id>~<key>"); `last_input_turn`:
                                       the latest turn a message continuing it started
  A2A#CURRENT                          the session's latest A2A task: key, start turn, open?
  A2A#PUSH#<key>#<config_id>           a push-notification config of a task
  A2A#REMOTE#<turn>#<tool_use_id>      a task this agent gave to an A2A peer

Invariants are conditions, as in the rest of the table: a context holds one open
A2A task (the CURRENT put), a task leaves submitted/working exactly once (the
winner alone sends its push notifications).
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

# The same item codec and key layout as the state stores: one table.
from flightdeck.adapters.dynamo.codec import attr_values, ddb_item, queued_message, stored_items
from flightdeck.adapters.dynamo.keys import (
    A2A_CURRENT,
    A2A_TASK,
    DUE,
    INBOX,
    META,
    PK,
    SHARD,
    SK,
    TTL,
    deadline_shard,
    session_pk,
)
from flightdeck.adapters.dynamo.table import OWED_THINK_GRACE_MS, Table, is_condition_failure
from flightdeck.domain.a2a.ports import CurrentTask, RemoteTask, StoredMessage, TaskRecord

CURRENT = A2A_CURRENT
# A task's message not handed to its session this long after the task was stored (or its question answered)
# is the sweep's to recover: longer than a function runs (as the owed think's grace).
HANDOFF_GRACE_MS = OWED_THINK_GRACE_MS
OPEN_STATES = ("submitted", "working", "input-required")


def _task_sk(key: str) -> str:
    return A2A_TASK + key


def _push_prefix(key: str) -> str:
    return f"A2A#PUSH#{key}#"


def _remote_sk(turn: int, tool_use_id: str) -> str:
    return f"A2A#REMOTE#{turn:06d}#{tool_use_id}"


class A2AStore:
    """A2A records in the agent's table. Shares the state's table: client, clock, reads and transactions."""

    def __init__(self, state: Table) -> None:
        self._state = state

    @property
    def client(self) -> Any:
        return self._state.client

    @property
    def table(self) -> str:
        return self._state.table

    def now_ms(self) -> int:
        return self._state.now_ms()

    # Reads and transactions go through the shared Table: one place filters expired
    # items and retries transaction conflicts.
    def _expiry(self, ttl_ms: int) -> int:
        return self._state.expiry(ttl_ms)

    def _get(self, pk: str, sk: str) -> dict[str, Any] | None:
        return self._state.read_item(pk, sk)

    def _query_prefix(self, pk: str, prefix: str) -> list[dict[str, Any]]:
        return self._state.query_prefix(pk, prefix)

    def _transact(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        return self._state.transact(ops)

    # --- tasks (server side) -------------------------------------------------------------
    def create_task(self, task: TaskRecord, push: dict[str, Any] | None, retention_ms: int) -> str:
        """Store a submitted task as its context's open task: "created", "exists" (a task with this key is
        stored already: the same message again), or "busy" (the context has another open task, or is busy)."""
        pk = session_pk(task.session_id)
        now_s = self.now_ms() // 1000
        expires = self._expiry(retention_ms)
        # The context is new (or expired), or idle and, when the task has an owner, the owner's.
        meta_condition = "attribute_not_exists(#pk) OR #status = :idle OR #ttl < :nows"
        meta_names = {"#pk": PK, "#status": "status", "#ttl": TTL}
        meta_values = attr_values(idle="idle", nows=now_s)
        if task.owner:
            meta_condition = "attribute_not_exists(#pk) OR #ttl < :nows OR (#status = :idle AND #owner = :owner)"
            meta_names["#owner"] = "owner"
            meta_values.update(attr_values(owner=task.owner))
        ops: list[dict[str, Any]] = [
            {
                "ConditionCheck": {
                    "TableName": self.table,
                    "Key": ddb_item(**{PK: pk, SK: META}),
                    "ConditionExpression": meta_condition,
                    "ExpressionAttributeNames": meta_names,
                    "ExpressionAttributeValues": meta_values,
                }
            },
            {
                "Put": {
                    "TableName": self.table,
                    "Item": ddb_item(
                        **{
                            PK: pk,
                            SK: _task_sk(task.key),
                            "state": task.state,
                            "start_turn": task.start_turn,
                            "user_message": json.dumps(task.user_message),
                            "created_ms": task.created_ms,
                            "updated_ms": task.updated_ms,
                            "end_turn": 0,
                            "answer": "",
                            "status_text": "",
                            "notified": False,
                            "owner": task.owner or None,
                            "contract": json.dumps(task.contract) if task.contract else None,
                            TTL: expires,
                            # Due in the deadline index until its message is handed to the session (start_task
                            # clears it): the sweep's owner of a hand-off that died (flightdeck.domain.a2a.tasks).
                            SHARD: deadline_shard(task.session_id),
                            DUE: self.now_ms() + HANDOFF_GRACE_MS,
                        }
                    ),
                    "ConditionExpression": "attribute_not_exists(#pk)",
                    "ExpressionAttributeNames": {"#pk": PK},
                }
            },
            {
                "Put": {
                    "TableName": self.table,
                    "Item": ddb_item(
                        **{
                            PK: pk,
                            SK: CURRENT,
                            "key": task.key,
                            "start_turn": task.start_turn,
                            "open": True,
                            "state": task.state,
                            "closed_turn": 0,
                            TTL: expires,
                        }
                    ),
                    "ConditionExpression": "attribute_not_exists(#pk) OR #open = :f OR #ttl < :nows",
                    "ExpressionAttributeNames": {"#pk": PK, "#open": "open", "#ttl": TTL},
                    "ExpressionAttributeValues": attr_values(f=False, nows=now_s),
                }
            },
        ]
        if push is not None:
            ops.append({"Put": {"TableName": self.table, "Item": self._push_item(pk, task.key, push, expires)}})
        reasons = self._transact(ops)
        if reasons is None:
            return "created"
        exists = len(reasons) > 1 and reasons[1].get("Code") == "ConditionalCheckFailed"
        return "exists" if exists else "busy"

    def start_task(self, session_id: str, key: str, start_turn: int) -> bool:
        """submitted -> working at the turn the session gave it; False if it already finished."""
        pk = session_pk(session_id)
        ops = [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": ddb_item(**{PK: pk, SK: _task_sk(key)}),
                    "UpdateExpression": "SET #state = :working, start_turn = :turn, updated_ms = :now "
                    "REMOVE #shard, #due",
                    "ConditionExpression": "#state = :submitted",
                    "ExpressionAttributeNames": {"#state": "state", "#shard": SHARD, "#due": DUE},
                    "ExpressionAttributeValues": attr_values(
                        working="working", submitted="submitted", turn=start_turn, now=self.now_ms()
                    ),
                }
            },
            {
                "Update": {
                    "TableName": self.table,
                    "Key": ddb_item(**{PK: pk, SK: CURRENT}),
                    "UpdateExpression": "SET start_turn = :turn, #state = :working",
                    "ConditionExpression": "#key = :key AND #open = :t",
                    "ExpressionAttributeNames": {"#key": "key", "#open": "open", "#state": "state"},
                    "ExpressionAttributeValues": attr_values(turn=start_turn, key=key, t=True, working="working"),
                }
            },
        ]
        return self._transact(ops) is None

    def get_task(self, session_id: str, key: str) -> TaskRecord | None:
        item = self._get(session_pk(session_id), _task_sk(key))
        if item is None:
            return None
        return TaskRecord(
            session_id=session_id,
            key=key,
            state=item["state"],
            start_turn=int(item["start_turn"]),
            user_message=json.loads(item["user_message"]),
            created_ms=int(item["created_ms"]),
            updated_ms=int(item["updated_ms"]),
            end_turn=int(item.get("end_turn", 0)),
            answer=item.get("answer", ""),
            status_text=item.get("status_text", ""),
            notified=bool(item.get("notified", False)),
            owner=item.get("owner", ""),
            contract=json.loads(item["contract"]) if item.get("contract") else None,
            asked_text=item.get("asked_text", ""),
            asked_turn=int(item.get("asked_turn", 0)),
            handoff_due=DUE in item,
        )

    def finish_task(
        self,
        session_id: str,
        key: str,
        state: str,
        *,
        answer: str = "",
        status_text: str = "",
        end_turn: int = 0,
        only_from: str = "",
        closed_turn: int = 0,
        unless_continued: bool = False,
    ) -> bool:
        """submitted|working|input-required (only_from: that state alone) -> a terminal state, once; True
        only for the winner, who notifies (a question's notification is behind it: the mark is cleared).
        closed_turn: the turn its session stopped at, when that is known now (a task waiting for input).
        unless_continued: the end of turn `end_turn` ends the task only if no message continuing the task
        started a later turn (`last_input_turn`, written with that start): otherwise it goes on."""
        pk = session_pk(session_id)
        condition = "#state = :from" if only_from else "#state IN (:submitted, :working, :input)"
        if unless_continued:
            condition += " AND (attribute_not_exists(last_input_turn) OR last_input_turn <= :end)"
        values = attr_values(state=state, answer=answer, text=status_text, end=end_turn, now=self.now_ms(), f=False)
        values.update(
            attr_values(**{"from": only_from})
            if only_from
            else attr_values(submitted="submitted", working="working", input="input-required")
        )
        task_op = {
            "Update": {
                "TableName": self.table,
                "Key": ddb_item(**{PK: pk, SK: _task_sk(key)}),
                "UpdateExpression": "SET #state = :state, answer = :answer, status_text = :text, "
                "end_turn = :end, updated_ms = :now, notified = :f REMOVE #shard, #due",
                "ConditionExpression": condition,
                "ExpressionAttributeNames": {"#state": "state", "#shard": SHARD, "#due": DUE},
                "ExpressionAttributeValues": values,
            }
        }
        current_op = {
            "Update": {
                "TableName": self.table,
                "Key": ddb_item(**{PK: pk, SK: CURRENT}),
                "UpdateExpression": "SET #open = :f, #state = :state"
                + (", closed_turn = :closed" if closed_turn else ""),
                "ConditionExpression": "#key = :key",
                "ExpressionAttributeNames": {"#key": "key", "#open": "open", "#state": "state"},
                "ExpressionAttributeValues": attr_values(
                    f=False, state=state, key=key, **({"closed": closed_turn} if closed_turn else {})
                ),
            }
        }
        reasons = self._transact([task_op, current_op])
        if reasons is None:
            return True
        if reasons and reasons[0].get("Code") == "ConditionalCheckFailed":
            return False
        # The context's pointer names another task (cannot happen while this one is open): the task alone.
        return self._transact([task_op]) is None

    def _current_state_op(self, pk: str, key: str, state: str) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self.table,
                "Key": ddb_item(**{PK: pk, SK: CURRENT}),
                "UpdateExpression": "SET #state = :state",
                "ConditionExpression": "#key = :key AND #open = :t",
                "ExpressionAttributeNames": {"#key": "key", "#open": "open", "#state": "state"},
                "ExpressionAttributeValues": attr_values(state=state, key=key, t=True),
            }
        }

    def ask_input(self, session_id: str, key: str, question: str, end_turn: int, *, notified: bool = False) -> bool:
        """submitted or working (or input-required at an earlier turn) -> input-required at `end_turn`, with
        the question; True only for the winner, who notifies. The task stays its context's open task.
        submitted: the task's first turn can end before message/send marks it working (start_task comes
        after the write that queues the think), and the question must not be lost to that race.
        Unless a message continuing the task started a later turn (`last_input_turn`, written with that
        start, as finish_task's unless_continued): that message is the question's answer, and the task
        goes on working into its turn (False)."""
        pk = session_pk(session_id)
        ops = [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": ddb_item(**{PK: pk, SK: _task_sk(key)}),
                    "UpdateExpression": "SET #state = :input, status_text = :text, end_turn = :end, updated_ms = :now, "
                    "notified = :notified REMOVE #shard, #due",
                    "ConditionExpression": "#state IN (:submitted, :working, :input) AND end_turn <> :end"
                    " AND (attribute_not_exists(last_input_turn) OR last_input_turn <= :end)",
                    "ExpressionAttributeNames": {"#state": "state", "#shard": SHARD, "#due": DUE},
                    "ExpressionAttributeValues": attr_values(
                        input="input-required",
                        submitted="submitted",
                        working="working",
                        text=question,
                        end=end_turn,
                        now=self.now_ms(),
                        notified=notified,
                    ),
                }
            },
            self._current_state_op(pk, key, "input-required"),
        ]
        return self._transact(ops) is None

    def resume_task(self, session_id: str, key: str) -> bool:
        """input-required -> working: the next message answers the question; True only for the winner."""
        pk = session_pk(session_id)
        ops = [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": ddb_item(**{PK: pk, SK: _task_sk(key)}),
                    # The question is kept (asked_text, asked_turn) and the task is due in the deadline index
                    # until the answer is handed to the session (take_message's task op clears it): should
                    # the function die in between, the sweep asks the question again (recover_task).
                    "UpdateExpression": "SET asked_text = status_text, asked_turn = end_turn, #state = :working, "
                    "status_text = :empty, end_turn = :zero, updated_ms = :now, notified = :f, #shard = :shard, "
                    "#due = :due",
                    "ConditionExpression": "#state = :input",
                    "ExpressionAttributeNames": {"#state": "state", "#shard": SHARD, "#due": DUE},
                    "ExpressionAttributeValues": attr_values(
                        working="working",
                        input="input-required",
                        empty="",
                        zero=0,
                        now=self.now_ms(),
                        f=False,
                        shard=deadline_shard(session_id),
                        due=self.now_ms() + HANDOFF_GRACE_MS,
                    ),
                }
            },
            self._current_state_op(pk, key, "working"),
        ]
        return self._transact(ops) is None

    def mark_notified(self, session_id: str, key: str) -> None:
        self.client.update_item(
            TableName=self.table,
            Key=ddb_item(**{PK: session_pk(session_id), SK: _task_sk(key)}),
            UpdateExpression="SET notified = :t",
            ExpressionAttributeValues=attr_values(t=True),
        )

    def get_current(self, session_id: str) -> CurrentTask | None:
        item = self._get(session_pk(session_id), CURRENT)
        if item is None:
            return None
        return CurrentTask(
            session_id,
            item["key"],
            int(item["start_turn"]),
            bool(item["open"]),
            item["state"],
            int(item.get("closed_turn", 0)),
        )

    def set_closed_turn(self, session_id: str, key: str, turn: int) -> None:
        try:
            self.client.update_item(
                TableName=self.table,
                Key=ddb_item(**{PK: session_pk(session_id), SK: CURRENT}),
                UpdateExpression="SET closed_turn = :turn",
                ConditionExpression="#key = :key AND (closed_turn = :zero OR closed_turn = :turn)",
                ExpressionAttributeNames={"#key": "key"},
                ExpressionAttributeValues=attr_values(turn=turn, key=key, zero=0),
            )
        except ClientError as exc:
            if not is_condition_failure(exc):
                raise

    # --- push-notification configs ---------------------------------------------------------
    def _push_item(self, pk: str, key: str, config: dict[str, Any], expires: int) -> dict[str, Any]:
        return ddb_item(**{PK: pk, SK: _push_prefix(key) + config["id"], "config": json.dumps(config), TTL: expires})

    def put_push(self, session_id: str, key: str, config: dict[str, Any], retention_ms: int) -> None:
        self.client.put_item(
            TableName=self.table, Item=self._push_item(session_pk(session_id), key, config, self._expiry(retention_ms))
        )

    def get_push(self, session_id: str, key: str, config_id: str) -> dict[str, Any] | None:
        item = self._get(session_pk(session_id), _push_prefix(key) + config_id)
        return json.loads(item["config"]) if item else None

    def list_push(self, session_id: str, key: str) -> list[dict[str, Any]]:
        return [json.loads(i["config"]) for i in self._query_prefix(session_pk(session_id), _push_prefix(key))]

    def delete_push(self, session_id: str, key: str, config_id: str) -> None:
        self.client.delete_item(
            TableName=self.table, Key=ddb_item(**{PK: session_pk(session_id), SK: _push_prefix(key) + config_id})
        )

    # --- the session's messages, with the turn each was stored at ---------------------------
    def task_messages(
        self, session_id: str, start_turn: int, end_turn: int = 0, task_key: str = ""
    ) -> list[StoredMessage]:
        """The session's messages of turns start_turn..end_turn (0: to now), then the messages waiting in
        its inbox to continue task `task_key` (queued: True), in order of arrival."""
        items = self._query_prefix(session_pk(session_id), "")
        out = [
            StoredMessage(turn, message, item.get("message_id", "") if item[SK].startswith(INBOX) else "")
            for turn, _slot, message, item in stored_items(items)
            if turn >= start_turn and (not end_turn or turn <= end_turn)
        ]
        if task_key:
            waiting = sorted(
                (
                    queued_message(i)
                    for i in items
                    if i[SK].startswith(INBOX) and not int(i.get("turn", 0)) and i.get("task_key") == task_key
                ),
                key=lambda q: q.seq,
            )
            out.extend(StoredMessage(0, q.message, q.message_id, queued=True) for q in waiting)
        return out

    # --- tasks given to A2A peers (client side) --------------------------------------------
    def put_remote(self, remote: RemoteTask, retention_ms: int) -> None:
        self.client.put_item(
            TableName=self.table,
            Item=ddb_item(
                **{
                    PK: session_pk(remote.session_id),
                    SK: _remote_sk(remote.turn, remote.tool_use_id),
                    "agent": remote.agent,
                    "rpc_url": remote.rpc_url,
                    "remote_task_id": remote.remote_task_id,
                    "mode": remote.mode,
                    "deadline_ms": remote.deadline_ms,
                    "extra": json.dumps(remote.extra),
                    TTL: self._expiry(retention_ms),
                }
            ),
        )

    def get_remote(self, session_id: str, turn: int, tool_use_id: str) -> RemoteTask | None:
        item = self._get(session_pk(session_id), _remote_sk(turn, tool_use_id))
        if item is None:
            return None
        return RemoteTask(
            session_id,
            turn,
            tool_use_id,
            item["agent"],
            item["rpc_url"],
            item["remote_task_id"],
            item["mode"],
            int(item["deadline_ms"]),
            json.loads(item.get("extra", "{}")),
        )
