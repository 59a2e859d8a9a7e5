"""SessionsPort: sessions, their messages, their reply route (B side), cancellation (intake: .intake)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from botocore.exceptions import ClientError

from flightdeck.adapters.dynamo.codec import attr_values, ddb_item, plain_item, reply_route
from flightdeck.adapters.dynamo.intake import IntakeStore
from flightdeck.adapters.dynamo.keys import (
    CANCELED,
    DUE,
    META,
    OWED,
    PK,
    ROUTE,
    ROUTE_ATTR,
    SHARD,
    SK,
    deadline_shard,
    session_pk,
)
from flightdeck.adapters.dynamo.table import is_condition_failure
from flightdeck.domain.records import MessageSlot, ReplyRoute, Session, SessionNotFoundError, TurnEnd


class SessionStore(IntakeStore):
    """The sessions port (its intake inherited from IntakeStore)."""

    def get_session(self, session_id: str, snapshot: str = "") -> Session | None:
        """The session as stored: one Query of its partition. snapshot: what the write that created the
        session put (Intake.snapshot), which is the whole partition then: read from it, no request."""
        return self.read_session(session_id, snapshot)

    def append_message(
        self, session_id: str, message: dict[str, Any], turn: int, retention_ms: int, slot: int = MessageSlot.REPLY
    ) -> bool:
        """Store a message at its place in think iteration `turn`; False if that place is taken (a redelivery).

        One transaction and no read, whatever the conversation's length: the message's key is
        (turn, slot), and the same write clears the session's owed-think mark (the think has started).
        """
        pk = session_pk(session_id)
        ops = [
            self._put_message_op(pk, turn, slot, message, self.expiry(retention_ms)),
            self._think_started_op(pk, turn),
        ]
        reasons = self.transact(ops)
        if reasons is None:
            return True
        if reasons and reasons[0].get("Code") == "ConditionalCheckFailed":
            return False
        raise LookupError(f"session {session_id} is not at turn {turn}")

    def finish_session_turn(
        self,
        session_id: str,
        turn: int,
        retention_ms: int = 0,
        messages: Sequence[tuple[int, dict[str, Any]]] = (),
    ) -> TurnEnd:
        """End turn `turn` of a busy session: idle, or the next turn started with the first message of its
        inbox (as save_iteration(ends_turn=True) does). ended is False if the session is not busy at
        this turn (already done). messages: (slot, message) stored at `turn` in the same write (a
        canceled A2A task's closing ones): the owed mark that brought its closer stays until then."""
        view = self.get_session(session_id)
        if view is None or view.status != "busy" or view.turn != turn:
            return TurnEnd(False)
        pk, expires = session_pk(session_id), self.expiry(retention_ms)
        lead = [self._put_message_op(pk, turn, slot, message, expires) for slot, message in messages]
        reasons, started = self._end_turn(session_id, turn, lead, view, retire=False, retention_ms=retention_ms)
        return TurnEnd(reasons is None, started)

    # --- cancellation (B side: the caller stopped waiting) --------------------------------------
    def cancel_session(self, session_id: str, owner: str | None) -> tuple[str, int]:
        """busy -> canceled, one conditional write: whatever the session was about to write (the reply
        of a think under way, refused by save_iteration's `#status = :busy`) is written no more.

        The same write marks the closing think owed, so the sweep sends it if the canceller dies
        before closing (close_canceled_session clears it). owner: the authenticated caller, who must
        own the session (a condition of the write); None: authentication is off.
        Returns (outcome, turn): "canceled" (by this call, or earlier and not closed yet) or "idle"
        (nothing to cancel). Raises SessionNotFoundError: none, or another peer's.
        """
        pk, now = session_pk(session_id), self.now_ms()
        condition = "#status = :busy"
        names = {"#status": "status", "#owed": OWED, "#shard": SHARD, "#due": DUE}
        values = attr_values(busy="busy", canceled=CANCELED, now=now, owed_at=now)
        if self.owed_in_index:
            values.update(attr_values(shard=deadline_shard(session_id), due=now + self.owed_think_grace_ms))
        owed_set, owed_remove = self._owed_actions(owed="turn")
        if owner is not None:
            condition += " AND #owner = :owner"
            names["#owner"] = "owner"
            values.update(attr_values(owner=owner))
        try:
            resp = self.client.update_item(
                TableName=self.table,
                Key=ddb_item(**{PK: pk, SK: META}),
                UpdateExpression=f"SET #status = :canceled, updated_at = :now, canceled_at = :now, {owed_set}"
                + (f" REMOVE {owed_remove}" if owed_remove else ""),
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
            )
            return CANCELED, int(plain_item(resp["Attributes"])["turn"])
        except ClientError as exc:
            if not is_condition_failure(exc):
                raise
        meta = self.read_item(pk, META)  # why it was refused (rare: the happy path reads nothing)
        if meta is None or (owner is not None and meta.get("owner", "") != owner):
            raise SessionNotFoundError(session_id)
        return ("idle" if meta["status"] == "idle" else CANCELED), int(meta["turn"])

    def close_canceled_session(
        self,
        session_id: str,
        turn: int,
        messages: list[tuple[int, dict[str, Any]]],
        retention_ms: int,
        session: Session | None = None,
    ) -> TurnEnd:
        """Close a canceled session at `turn` with the closing messages ((slot, message): results for
        calls left open, the closing line), in one transaction that ends the turn as any turn ends: idle
        when nothing waits in the inbox, else the first waiting message starts the next turn (its think
        owed) in the same write; a reply route still waiting for its answer is retired (a canceled task
        answers nothing). session: the session as read (its inbox and route). ended False: closed already.
        """
        pk, expires = session_pk(session_id), self.expiry(retention_ms)
        lead = [self._put_message_op(pk, turn, slot, message, expires) for slot, message in messages]
        session = session or self.get_session(session_id)
        route = session.route if session is not None else None
        waiting = route is not None and route.status == "active" and route.expires_at > self.now_ms() // 1000
        reasons, started = self._end_turn(
            session_id, turn, lead, session, retire=waiting, retention_ms=retention_ms, status=CANCELED
        )
        return TurnEnd(reasons is None, started)

    def close_question(
        self, session: Session, closing: list[tuple[int, dict[str, Any]]], retention_ms: int, owner: str | None
    ) -> bool:
        """Close the question the idle session (as read) ended its turn with, its caller having stopped waiting
        for the answer: the closing messages ((slot, message)) stored at that turn, in one transaction
        conditioned on the session still idle at that turn (and owned by owner), so that an answer taken first
        wins and this writes nothing. False then, or when the question is closed already (its slots are taken)."""
        turn, pk, expires = session.turn, session_pk(session.session_id), self.expiry(retention_ms)
        ops = [self._put_message_op(pk, turn, slot, message, expires) for slot, message in closing]
        condition = "attribute_exists(#pk) AND turn = :turn AND #status = :idle"
        names = {"#pk": PK, "#status": "status"}
        values = attr_values(turn=turn, idle="idle", now=self.now_ms())
        if owner is not None:
            condition += " AND #owner = :owner"
            names["#owner"] = "owner"
            values.update(attr_values(owner=owner))
        meta = {
            "TableName": self.table,
            "Key": ddb_item(**{PK: pk, SK: META}),
            "UpdateExpression": "SET updated_at = :now",
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        return self.transact([*ops, {"Update": meta}]) is None

    # --- reply routes (B side) -----------------------------------------------------------
    def get_route(self, session_id: str) -> ReplyRoute | None:
        meta = self.read_item(session_pk(session_id), META)
        if meta is not None and ROUTE_ATTR in meta:
            route = self._route_of(meta)
            return reply_route(session_id, route) if route is not None else None
        item = self.read_item(session_pk(session_id), ROUTE)  # a session stored before the route moved into META
        return reply_route(session_id, item) if item is not None else None

    def retire_route(self, session_id: str, bearer_token: str | None = None) -> bool:
        """active -> retired; the tombstone keeps a replayed request from re-arming it. bearer_token: only
        that route (not one a queued delegation has put in its place since)."""
        now = self.now_ms()
        for sk, path in ((META, "#route."), (ROUTE, "")):  # META's map; else a ROUTE item stored before it
            condition = f"{path}#status = :active"
            values = attr_values(retired="retired", active="active", now=now)
            if bearer_token is not None:
                condition += f" AND {path}bearer_token = :token"
                values.update(attr_values(token=bearer_token))
            names = {"#status": "status", **({"#route": ROUTE_ATTR} if path else {})}
            try:
                self.client.update_item(
                    TableName=self.table,
                    Key=ddb_item(**{PK: session_pk(session_id), SK: sk}),
                    UpdateExpression=f"SET {path}#status = :retired, {path}retired_at = :now",
                    ConditionExpression=condition,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
                return True
            except ClientError as exc:
                if not is_condition_failure(exc):
                    raise
                found = cast(dict[str, Any], exc.response).get("Item") or {}  # the failed condition's item
                if ROUTE_ATTR in found:
                    return False  # META holds the route, and it is not (or no longer) that waiting one
        return False
