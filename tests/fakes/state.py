"""The agent's state in memory: every state port of flightdeck.domain.ports, as the DynamoDB store keeps them.

MemoryState mirrors flightdeck.adapters.dynamo.store.StateStore condition for condition: each method
checks what that store's write puts in its ConditionExpression (on the item as it is, expired or not,
as DynamoDB does), then applies all of the write or none of it; reads drop what is past its TTL, as
the store's reads do. Nothing runs concurrently here, so where the store retries after a lost race
(a transaction conflict, a message queued since the session was read) this takes the state as it is
now, which is what the store's retry reads. tests/contract runs the same behaviour against both.

Not modelled: A2A task records (a message that continues a task finds none, so it is refused with
TaskNotOpenError, as the store refuses one whose task is gone), the live relay's items (a session is
never watched here), and the deadline index's per-shard paging (list_overdue lists up to `limit` per
shard in due order, as the store's queries do, but every item is in one dict).
"""

from __future__ import annotations

import json
import uuid
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from flightdeck import topology
from flightdeck.domain.liveness import Overdue
from flightdeck.domain.peers import PeerProof, PeerRecord, PeerRefusedError, judge
from flightdeck.domain.records import (
    SESSION_CANCELED,
    AgentBusyError,
    Completion,
    Expiry,
    InboxFullError,
    Intake,
    ItemTooLargeError,
    Iteration,
    MessageSlot,
    QueuedMessage,
    RecordOutcome,
    ReplyRoute,
    ResultSource,
    Session,
    SessionBusyError,
    SessionNotFoundError,
    TaskNotOpenError,
    ToolResult,
    TurnAggregation,
    TurnEnd,
    TurnSeed,
)

# As flightdeck.adapters.dynamo.table.OWED_THINK_GRACE_MS (tests/contract checks they agree).
OWED_THINK_GRACE_MS = topology.WORKER_TIMEOUT_S * 1000 + 5_000
# DynamoDB's item size limit: what would not fit in one item is refused, as the store refuses it.
MAX_ITEM_BYTES = 400_000


def _stored(value: Any) -> Any:
    """What reading back a stored JSON value gives: a copy, shaped as JSON (tuples become lists)."""
    text = json.dumps(value, ensure_ascii=False)
    if len(text.encode("utf-8", "surrogatepass")) > MAX_ITEM_BYTES:
        raise ItemTooLargeError(f"item size has exceeded the maximum allowed size ({MAX_ITEM_BYTES} bytes)")
    return json.loads(text)


def deadline_shard(session_id: str) -> int:
    return zlib.crc32(session_id.encode()) % topology.DEADLINE_SHARDS


@dataclass
class _Meta:
    status: str
    turn: int
    msg_count: int
    created_at: int
    updated_at: int
    expires_s: int
    parent: dict[str, Any] = field(default_factory=dict)
    owner: str = ""
    # The owed think and its place in the deadline index (the store's owed_think, due_shard, due_at).
    owed: int | None = None
    due: int | None = None
    inbox_count: int = 0
    inbox_consumed: int = 0
    # It holds a slot of the agent's load (the store's holds_load).
    holds_load: bool = False


@dataclass
class _InboxItem:
    key: str
    seq: int
    message: dict[str, Any]
    turn: int = 0
    msg_no: int = 0
    route: tuple[str, str, int] | None = None  # (service, token, expires epoch s)
    task_key: str = ""
    message_id: str = ""

    def view(self) -> QueuedMessage:
        return QueuedMessage(
            self.key, self.seq, _stored(self.message), self.turn, self.route, self.task_key, self.message_id
        )


@dataclass
class _Route:
    callback_service: str
    bearer_token: str
    status: str
    expires_s: int
    from_turn: int
    retired_turn: int = 0
    answered: ReplyRoute | None = None


@dataclass
class _Turn:
    expected: frozenset[str]
    total: int
    received: int
    status: str
    deadline_ms: int
    deadlines: dict[str, int] | None
    # Its time in the deadline index while waiting (the store's DUE on META): its earliest open deadline, or a
    # later time the owed think's listing had when the think that opened the turn kept it (store _seed_update).
    due: int | None
    expires_s: int
    completed_by: str = ""
    # The ids not yet counted (the store's agg_open): a result stored but not counted is counted once, later.
    open: set[str] = field(default_factory=set)


@dataclass
class _Partition:
    """One session's items (the store's partition S#<session_id>)."""

    meta: _Meta | None = None
    messages: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)  # MSG#<turn>#<slot>
    inbox: dict[str, _InboxItem] = field(default_factory=dict)  # INBOX#<key>
    route: _Route | None = None  # ROUTE
    iterations: dict[int, tuple[dict[str, Any], bool]] = field(default_factory=dict)  # ITER#: (reply, ends_turn)
    # The current turn's aggregation (the store's agg_* attributes on META): one at a time, a new one replaces it.
    turns: dict[int, _Turn] = field(default_factory=dict)
    results: dict[tuple[int, str], ToolResult] = field(default_factory=dict)  # RESULT#<turn>#<id>
    dispatches: dict[tuple[int, str], str] = field(default_factory=dict)  # DISPATCH#<turn>#<id>: status
    claim: tuple[int, str, int] | None = None  # THINK: (turn, run, until ms)


def _calls_tools(reply: dict[str, Any]) -> bool:
    return any("toolUse" in b for b in (reply.get("message") or {}).get("content", []))


def _missing_result(tool_use_id: str) -> ToolResult:
    # As the store: an id with no result item (past the hard limit) reads as a "missing" error result.
    return ToolResult(tool_use_id, "error", json.dumps({"status": "error", "reason": "missing"}), ResultSource.TIMEOUT)


class MemoryState:
    """Sessions, iterations, turns, the deadline index and dispatch claims of one agent. `clock`: epoch ms."""

    def __init__(self, clock: Callable[[], int], owed_think_grace_ms: int = OWED_THINK_GRACE_MS):
        self._clock = clock
        self.owed_think_grace_ms = owed_think_grace_ms
        self._partitions: dict[str, _Partition] = {}
        # The peer registry's records, as the store's PeerProof check sees them (the table's PEER items).
        self.peers: dict[str, PeerRecord] = {}
        # The agent's load counter (the store's AGENT#load item; None: never written): busy, seq, recounted_at.
        self.load: dict[str, int] | None = None

    # --- the clock and TTLs ---------------------------------------------------------------
    def now_ms(self) -> int:
        return self._clock()

    def _expiry(self, ttl_ms: int) -> int:
        return (self.now_ms() + ttl_ms) // 1000

    def _alive(self, expires_s: int | None) -> bool:
        return expires_s is None or expires_s > self.now_ms() // 1000

    def _part(self, session_id: str) -> _Partition:
        return self._partitions.setdefault(session_id, _Partition())

    def _owe(self, meta: _Meta, turn: int, now: int) -> None:
        meta.owed, meta.due = turn, now + self.owed_think_grace_ms

    # --- SessionsPort -----------------------------------------------------------------------
    def get_session(self, session_id: str, snapshot: str = "") -> Session | None:
        # The fake makes no snapshot (Intake.snapshot stays empty): it always reads its partition.
        p = self._partitions.get(session_id)
        if p is None or p.meta is None or not self._alive(p.meta.expires_s):
            return None
        meta, turn = p.meta, p.meta.turn
        iteration = p.iterations.get(turn)
        agg = p.turns.get(turn)
        return Session(
            session_id=session_id,
            status=meta.status,
            turn=turn,
            messages=self._conversation(p, turn),
            created_at=meta.created_at,
            updated_at=meta.updated_at,
            parent=_stored(meta.parent),
            owner=meta.owner,
            user_messages=meta.msg_count,
            iteration=Iteration(session_id, turn, _stored(iteration[0])) if iteration else None,
            route=self._route_view(session_id, p),
            has_a2a_task=False,
            aggregation=self._turn_view(session_id, turn, agg) if agg and self._alive(agg.expires_s) else None,
            queued=tuple(sorted((i.view() for i in p.inbox.values() if not i.turn), key=lambda q: q.seq)),
            inbox_accepted=meta.inbox_count,
            inbox_consumed=meta.inbox_consumed,
            input=next((i.view() for i in p.inbox.values() if i.turn == turn), None),
            holds_load=meta.holds_load,
            listed_at_ms=self._listed_at(meta, agg),
        )

    @staticmethod
    def _listed_at(meta: _Meta, agg: _Turn | None) -> int:
        """The session's time in the deadline index (0: not listed): its owed think's, else its waiting turn's."""
        if meta.due is not None:
            return meta.due
        return agg.due or 0 if agg is not None and agg.status == "waiting" else 0

    def _route_view(self, session_id: str, p: _Partition) -> ReplyRoute | None:
        r = p.route
        if r is None or not self._alive(r.expires_s):
            return None
        return ReplyRoute(
            session_id,
            r.callback_service,
            r.bearer_token,
            r.status,
            r.expires_s,
            r.retired_turn,
            r.from_turn,
            r.answered,
        )

    @staticmethod
    def _turn_view(session_id: str, turn: int, t: _Turn) -> TurnAggregation:
        return TurnAggregation(
            session_id=session_id,
            turn=turn,
            expected=t.expected,
            total=t.total,
            received=t.received,
            status=t.status,
            deadline_ms=t.deadline_ms,
            completed_by=t.completed_by,
            deadlines=dict(t.deadlines or {}),
            due_ms=t.due or 0,
        )

    def _conversation(self, p: _Partition, current_turn: int) -> list[dict[str, Any]]:
        """As the store rebuilds it: the stored messages in (turn, slot) order, and after an assistant
        message that called tools in a turn that has moved on, the user message of their results."""
        # Listed in the store's key order (INBOX#, ITER#, MSG#), which a stable sort keeps among equals.
        stored = sorted(
            [(i.turn, int(MessageSlot.INPUT), i.message) for _, i in sorted(p.inbox.items()) if i.turn]
            + [(t, int(MessageSlot.REPLY), reply["message"]) for t, (reply, _) in sorted(p.iterations.items())]
            + [(t, s, m) for (t, s), m in sorted(p.messages.items())],
            key=lambda x: (x[0], x[1]),
        )
        answered_by_message = {t for t, (_, ends_turn) in p.iterations.items() if ends_turn}
        messages: list[dict[str, Any]] = []
        for index, (turn, _slot, message) in enumerate(stored):
            messages.append(_stored(message))
            uses = [b["toolUse"] for b in message.get("content", []) if "toolUse" in b]
            if message.get("role") != "assistant" or not uses or turn >= current_turn or turn in answered_by_message:
                continue
            following = stored[index + 1][2] if index + 1 < len(stored) else {}
            if any("toolResult" in b for b in following.get("content", [])):
                continue
            blocks = [p.results.get((turn, u["toolUseId"]), _missing_result(u["toolUseId"])).as_block() for u in uses]
            messages.append({"role": "user", "content": blocks})
        return messages

    def take_message(
        self,
        session_id: str,
        message: dict[str, Any],
        retention_ms: int,
        *,
        route: tuple[str, str, int] | None = None,
        parent: dict[str, Any] | None = None,
        owner: str | None = None,
        likely_new: bool = False,
        key: str | None = None,
        queue_limit: int = 0,
        continues_task: str = "",
        message_id: str = "",
        must_exist: bool = False,
        proof: PeerProof | None = None,
        max_busy: int | None = None,
    ) -> Intake:
        if proof is not None:
            # The store checks it in the write's transaction, where a refusal outranks any other failure.
            result = judge(self.peers.get(proof.peer_id), proof)
            if not result.ok:
                raise PeerRefusedError(result)
        intake = self._take(
            session_id, message, retention_ms, route, parent, owner, likely_new, key, queue_limit,
            continues_task, message_id, must_exist, max_busy,
        )  # fmt: skip
        # A write took it (a repeat is answered from what is stored, as the store answers it from a read).
        return replace(intake, caller_verified=proof is not None and not intake.replayed)

    def _take(
        self,
        session_id: str,
        message: dict[str, Any],
        retention_ms: int,
        route: tuple[str, str, int] | None,
        parent: dict[str, Any] | None,
        owner: str | None,
        likely_new: bool,
        key: str | None,
        queue_limit: int,
        continues_task: str,
        message_id: str,
        must_exist: bool,
        max_busy: int | None = None,
    ) -> Intake:
        p = self._part(session_id)
        meta = p.meta
        if must_exist and (meta is None or not self._alive(meta.expires_s)):
            raise SessionNotFoundError(session_id)
        base_turn, inherits = 0, False
        if meta is not None and not self._alive(meta.expires_s):
            # Past its retention, not deleted yet: a new session over it, its turns counting on (and the slot
            # of the agent's load it held, if it did).
            base_turn, inherits, meta = meta.turn, meta.holds_load, None
            p = self._partitions[session_id] = _Partition()
        if meta is not None:
            if owner is not None and meta.owner != owner:
                raise SessionNotFoundError(session_id)
            current = self._route_view(session_id, p)
            if route is not None and current is not None and current.bearer_token == route[1]:
                return Intake("started", meta.turn, meta.msg_count or 1, replayed=True)
        if meta is None or meta.status == "idle":
            return self._start(
                session_id, p, message, retention_ms, route, parent, owner, key, continues_task, message_id, base_turn,
                max_busy, inherits,
            )  # fmt: skip
        if queue_limit <= 0:
            if key and key in p.inbox:
                return self._repeat(p.inbox[key], meta)
            raise SessionBusyError(session_id)
        waiting = meta.inbox_count - meta.inbox_consumed
        if waiting >= queue_limit:
            if key and key in p.inbox:
                return self._repeat(p.inbox[key], meta)
            raise InboxFullError(session_id, waiting)
        return self._queue(session_id, p, meta, message, retention_ms, route, key, continues_task, message_id)

    def _repeat(self, item: _InboxItem, meta: _Meta | None) -> Intake:
        if item.turn:
            return Intake("started", item.turn, item.msg_no, replayed=True)
        consumed, count = (meta.inbox_consumed, meta.msg_count) if meta is not None else (0, 0)
        position = max(1, item.seq - consumed)
        return Intake("queued", 0, count + position, position, replayed=True)

    def _route_free(self, p: _Partition, now: int) -> bool:
        """A route may be put: none, a retired one, or one past its TTL (a live route is never overwritten)."""
        r = p.route
        return r is None or r.status == "retired" or r.expires_s < now // 1000

    def _start(
        self,
        session_id: str,
        p: _Partition,
        message: dict[str, Any],
        retention_ms: int,
        route: tuple[str, str, int] | None,
        parent: dict[str, Any] | None,
        owner: str | None,
        key: str | None,
        continues_task: str,
        message_id: str,
        base_turn: int = 0,
        max_busy: int | None = None,
        inherits: bool = False,
    ) -> Intake:
        now, meta = self.now_ms(), p.meta
        turn, seq = (base_turn + 1, 1) if meta is None else (meta.turn + 1, meta.msg_count + 1)
        # The transaction's conditions, in the order the store reads their failures.
        if key is not None and key in p.inbox:
            return self._repeat(p.inbox[key], meta)
        if continues_task:
            raise TaskNotOpenError(continues_task)  # no A2A task is ever working here
        if route is not None and not self._route_free(p, now):
            raise SessionBusyError(session_id)
        takes_slot = max_busy is not None and not inherits
        if takes_slot and self.load is not None and self.load["busy"] >= (max_busy or 0):
            raise AgentBusyError(max_busy or 0)
        stored = _stored(message)
        expires = self._expiry(retention_ms)
        if meta is None:
            meta = p.meta = _Meta("busy", turn, 1, now, now, expires, parent=_stored(parent or {}), owner=owner or "")
        else:
            meta.status, meta.turn, meta.msg_count, meta.updated_at, meta.expires_s = "busy", turn, seq, now, expires
        self._owe(meta, turn, now)
        if takes_slot:
            self._move_load(+1)
        meta.holds_load = takes_slot or inherits
        if key is None:
            p.messages[(turn, int(MessageSlot.INPUT))] = stored
        else:
            p.inbox[key] = _InboxItem(key, 0, stored, turn=turn, msg_no=seq, message_id=message_id)
        if route is not None:
            p.route = _Route(route[0], route[1], "active", self._expiry(route[2]), from_turn=turn)
        return Intake("started", turn, seq)

    def _queue(
        self,
        session_id: str,
        p: _Partition,
        meta: _Meta,
        message: dict[str, Any],
        retention_ms: int,
        route: tuple[str, str, int] | None,
        key: str | None,
        continues_task: str,
        message_id: str,
    ) -> Intake:
        key = key or uuid.uuid4().hex
        if key in p.inbox:
            return self._repeat(p.inbox[key], meta)
        if continues_task:
            raise TaskNotOpenError(continues_task)
        if meta.status != "busy":
            raise SessionBusyError(session_id)  # canceled: not idle, and its inbox takes nothing
        count, consumed = meta.inbox_count, meta.inbox_consumed
        reply = (route[0], route[1], self._expiry(route[2])) if route is not None else None
        p.inbox[key] = _InboxItem(key, count + 1, _stored(message), route=reply, message_id=message_id)
        meta.inbox_count = count + 1
        position = count + 1 - consumed
        return Intake("queued", 0, meta.msg_count + position, position)

    def append_message(
        self, session_id: str, message: dict[str, Any], turn: int, retention_ms: int, slot: int = MessageSlot.REPLY
    ) -> bool:
        p = self._part(session_id)
        if (turn, int(slot)) in p.messages:
            return False
        meta = p.meta
        if meta is None or meta.turn != turn or meta.status != "busy":
            raise LookupError(f"session {session_id} is not at turn {turn}")
        p.messages[(turn, int(slot))] = _stored(message)
        meta.updated_at, meta.owed, meta.due = self.now_ms(), None, None
        return True

    def _end_turn(
        self, session_id: str, turn: int, retire: bool, retention_ms: int, status: str = "busy"
    ) -> Callable[[], QueuedMessage | None] | None:
        """The end of turn `turn` as the store writes it, if its conditions hold: idle, or the first queued
        message started as turn+1 (its route the session's, answering the route this turn retires). Returns
        the write to apply (which returns the message it started, as read), or None when it would fail."""
        p = self._part(session_id)
        meta = p.meta
        if meta is None or meta.turn != turn or meta.status != status:
            return None
        waiting = sorted((i for i in p.inbox.values() if not i.turn), key=lambda i: i.seq)
        entry = waiting[0] if waiting else None
        now = self.now_ms()
        alive_active = p.route is not None and p.route.status == "active" and p.route.expires_s > now // 1000
        answered = None
        if entry is not None and entry.route is not None:
            if retire and alive_active:
                answered = self._route_view(session_id, p)
            elif not self._route_free(p, now):
                return None  # a live route the turn does not answer is never overwritten
        retire = retire and alive_active  # a route expired or retired meanwhile: nothing to answer

        def write() -> QueuedMessage | None:
            assert meta is not None
            started = entry.view() if entry is not None else None
            meta.updated_at = now
            if entry is None:
                meta.status, meta.owed, meta.due = "idle", None, None
                if meta.holds_load:  # its slot given back in the write that makes it idle
                    meta.holds_load = False
                    self._move_load(-1)
            else:
                meta.status = "busy"  # a canceled session's close starts the waiting message's turn
                meta.turn, meta.inbox_consumed, meta.msg_count = turn + 1, meta.inbox_consumed + 1, meta.msg_count + 1
                self._owe(meta, turn + 1, now)
                entry.turn, entry.msg_no = turn + 1, meta.msg_count
                if retention_ms:
                    meta.expires_s = self._expiry(retention_ms)
            if entry is not None and entry.route is not None:
                service, token, expires = entry.route
                answered_route = (
                    replace(answered, status="retired", retired_turn=turn, from_turn=0, answered=None)
                    if answered is not None
                    else None
                )
                p.route = _Route(service, token, "active", expires, from_turn=turn + 1, answered=answered_route)
            elif retire and p.route is not None:
                p.route.status, p.route.retired_turn = "retired", turn
            return started

        return write

    def finish_session_turn(
        self,
        session_id: str,
        turn: int,
        retention_ms: int = 0,
        messages: Sequence[tuple[int, dict[str, Any]]] = (),
    ) -> TurnEnd:
        view = self.get_session(session_id)
        if view is None or view.status != "busy" or view.turn != turn:
            return TurnEnd(False)
        p = self._part(session_id)
        if any((turn, int(slot)) in p.messages for slot, _ in messages):
            return TurnEnd(False)
        write = self._end_turn(session_id, turn, False, retention_ms)
        if write is None:
            return TurnEnd(False)
        for slot, message in messages:
            p.messages[(turn, int(slot))] = _stored(message)
        return TurnEnd(True, write())

    def retire_route(self, session_id: str, bearer_token: str | None = None) -> bool:
        r = self._part(session_id).route
        if r is None or r.status != "active" or (bearer_token is not None and r.bearer_token != bearer_token):
            return False
        r.status = "retired"
        return True

    def cancel_session(self, session_id: str, owner: str | None) -> tuple[str, int]:
        meta = self._part(session_id).meta
        now = self.now_ms()
        if meta is not None and meta.status == "busy" and (owner is None or meta.owner == owner):
            meta.status, meta.updated_at = SESSION_CANCELED, now
            self._owe(meta, meta.turn, now)
            return SESSION_CANCELED, meta.turn
        if meta is None or not self._alive(meta.expires_s) or (owner is not None and meta.owner != owner):
            raise SessionNotFoundError(session_id)
        return ("idle" if meta.status == "idle" else SESSION_CANCELED), meta.turn

    def close_canceled_session(
        self,
        session_id: str,
        turn: int,
        messages: list[tuple[int, dict[str, Any]]],
        retention_ms: int,
        session: Session | None = None,
    ) -> TurnEnd:
        p = self._part(session_id)
        if any((turn, int(slot)) in p.messages for slot, _ in messages):
            return TurnEnd(False)
        write = self._end_turn(session_id, turn, True, retention_ms, status=SESSION_CANCELED)
        if write is None:
            return TurnEnd(False)
        for slot, message in messages:
            p.messages[(turn, int(slot))] = _stored(message)
        return TurnEnd(True, write())

    def close_question(
        self, session: Session, closing: list[tuple[int, dict[str, Any]]], retention_ms: int, owner: str | None
    ) -> bool:
        p, turn = self._part(session.session_id), session.turn
        meta = p.meta
        if meta is None or (meta.status, meta.turn) != ("idle", turn) or (owner is not None and meta.owner != owner):
            return False
        if any((turn, int(slot)) in p.messages for slot, _ in closing):
            return False
        for slot, message in closing:
            p.messages[(turn, int(slot))] = _stored(message)
        meta.updated_at = self.now_ms()
        return True

    # --- IterationsPort ----------------------------------------------------------------------
    def get_iteration(self, session_id: str, turn: int) -> Iteration | None:
        stored = self._part(session_id).iterations.get(turn)
        return Iteration(session_id, turn, _stored(stored[0])) if stored else None

    def claim_think(self, session_id: str, turn: int, run: str, lease_ms: int | None = None) -> bool:
        p, now = self._part(session_id), self.now_ms()
        lease = self.owed_think_grace_ms if lease_ms is None else min(max(0, lease_ms), self.owed_think_grace_ms)
        if p.claim is not None and not (p.claim[0] < turn or p.claim[2] < now or p.claim[1] == run):
            return False
        p.claim = (turn, run, now + lease)
        return True

    def release_think(self, session_id: str, turn: int, run: str) -> None:
        p = self._part(session_id)
        if p.claim is not None and p.claim[:2] == (turn, run):
            p.claim = None

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
        p = self._part(session_id)
        seeded = (
            self._seed(seed.tool_use_ids, seed.deadline_ms, retention_ms, seed.deadlines) if seed is not None else None
        )
        if turn in p.iterations:  # another run of this think stored its reply first
            return Iteration(session_id, turn, _stored(p.iterations[turn][0]))
        if seeded is not None and turn in p.turns:
            raise LookupError(f"session {session_id} is not at turn {turn}")
        stored = _stored(reply)
        now = self.now_ms()
        if ends_turn:
            write = self._end_turn(session_id, turn, retires_route, retention_ms)
            if write is None:
                raise LookupError(f"session {session_id} is not at turn {turn}")
            p.iterations[turn] = (stored, _calls_tools(reply))
            if seeded is not None:
                p.turns = {turn: seeded}
            return Iteration(session_id, turn, reply, fresh=True, next_input=write())
        meta, route = p.meta, p.route
        if meta is None or meta.turn != turn or meta.status != "busy":
            raise LookupError(f"session {session_id} is not at turn {turn}")
        if retires_route and not (route is not None and route.status == "active" and route.expires_s > now // 1000):
            raise LookupError(f"session {session_id} is not at turn {turn}")
        p.iterations[turn] = (stored, False)
        listed = meta.due
        meta.updated_at, meta.owed, meta.due = now, None, None
        if seeded is not None:
            # As the store: the session stays listed where the think read it listed when that is as late as
            # the turn's earliest deadline (no index write); the sweep then looks at most a grace late.
            if session is not None and listed is not None and session.listed_at_ms >= (seeded.due or 0):
                seeded.due = listed
            p.turns = {turn: seeded}
        if retires_route and route is not None:
            route.status, route.retired_turn = "retired", turn
        return Iteration(session_id, turn, reply, fresh=True)

    # --- TurnsPort ------------------------------------------------------------------------------
    def _seed(self, tool_use_ids: Any, deadline_ms: int, retention_ms: int, deadlines: dict[str, int] | None) -> _Turn:
        ids = list(tool_use_ids)
        if not ids or len(set(ids)) != len(ids):
            raise ValueError("tool_use_ids must be non-empty and distinct")
        own = {i: int(deadlines[i]) for i in ids if deadlines and i in deadlines}
        per_call = own if len(set(own.values()) | {deadline_ms}) > 1 else None
        return _Turn(
            frozenset(ids),
            len(ids),
            0,
            "waiting",
            deadline_ms,
            per_call,
            min([deadline_ms, *own.values()]),
            self._expiry(retention_ms),
            open=set(ids),
        )

    def seed_turn(
        self,
        session_id: str,
        turn: int,
        tool_use_ids: list[str],
        deadline_ms: int,
        retention_ms: int,
        deadlines: dict[str, int] | None = None,
    ) -> bool:
        seeded = self._seed(tool_use_ids, deadline_ms, retention_ms, deadlines)
        p = self._part(session_id)
        if turn in p.turns or p.meta is None or p.meta.turn != turn:
            return False
        p.turns = {turn: seeded}
        return True

    def get_turn(self, session_id: str, turn: int) -> TurnAggregation | None:
        t = self._part(session_id).turns.get(turn)
        return self._turn_view(session_id, turn, t) if t is not None and self._alive(t.expires_s) else None

    def get_results(self, session_id: str, turn: int) -> list[ToolResult]:
        results = self._part(session_id).results
        return [results[k] for k in sorted(k for k in results if k[0] == turn)]

    def _complete(self, t: _Turn, by: str, tombstone_ms: int, now: int, received: int | None = None) -> None:
        t.status, t.completed_by, t.expires_s, t.due = "complete", by, (now + tombstone_ms) // 1000, None
        t.open = set()
        if received is not None:
            t.received = received

    def _advance(self, meta: _Meta, turn: int, now: int) -> None:
        """The session moves on to the next think, owed from this write on."""
        meta.turn, meta.updated_at = turn + 1, now
        self._owe(meta, turn + 1, now)

    def _put_result(self, p: _Partition, turn: int, result: ToolResult) -> None:
        _stored(result.text)  # as large as it may be stored
        p.results[(turn, result.tool_use_id)] = result

    def record_result(
        self, session_id: str, turn: int, result: ToolResult, retention_ms: int, completion: Completion | None = None
    ) -> tuple[RecordOutcome, bool]:
        # As the store: the result is put once (first wins), then counted once; a duplicate of a stored
        # result counts it if it was not counted yet (its first attempt died between the two writes).
        p = self._part(session_id)
        key = (turn, result.tool_use_id)
        t, meta = p.turns.get(turn), p.meta
        duplicate = key in p.results
        if duplicate and p.results[key].source is not result.source:
            return RecordOutcome.LATE, False  # another kind of result came first
        outcome = RecordOutcome.DUPLICATE if duplicate else RecordOutcome.ACCEPTED
        if t is None or t.status != "waiting" or result.tool_use_id not in t.open:
            return (outcome if duplicate else RecordOutcome.LATE), False
        if not duplicate:
            self._put_result(p, turn, result)
        t.open.discard(result.tool_use_id)
        t.received = t.total - len(t.open)
        if completion is None or t.open or meta is None or meta.turn != turn:
            return outcome, False
        now = self.now_ms()
        self._complete(t, completion.by, completion.tombstone_ms, now, received=t.total)
        self._advance(meta, turn, now)
        return outcome, True

    def complete_turn(self, session_id: str, turn: int, completed_by: str, tombstone_ms: int) -> bool:
        p = self._part(session_id)
        t, meta = p.turns.get(turn), p.meta
        if t is None or t.status != "waiting" or t.open or meta is None or meta.turn != turn:
            return False
        now = self.now_ms()
        self._complete(t, completed_by, tombstone_ms, now)
        self._advance(meta, turn, now)
        return True

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
        agg = self.get_turn(session_id, turn)
        if agg is None or agg.status != "waiting":
            return Expiry(False)
        p = self._part(session_id)
        t, meta = p.turns[turn], p.meta
        have = {r.tool_use_id for r in self.get_results(session_id, turn)}
        missing = sorted(agg.expected - have)
        due = missing if due_by_ms is None else [i for i in missing if agg.deadline_of(i) <= due_by_ms]
        still_open = [i for i in missing if i not in due]
        next_due = min((agg.deadline_of(i) for i in still_open), default=None)
        if next_due is not None and not due:
            t.due = next_due  # nothing due yet: the index lists the turn at its next deadline
            return Expiry(False, (), next_due)
        if next_due is None and (meta is None or meta.turn != turn):
            return Expiry(False)  # the session moved on: its advance would fail, and with it the write
        now = self.now_ms()
        results = [reason_results(i) for i in due]
        for r in results:
            _stored(r.text)
        for i, r in zip(due, results):
            p.results[(turn, i)] = replace(r, tool_use_id=i)
        if next_due is None:
            assert meta is not None
            self._complete(t, completed_by, tombstone_ms, now, received=agg.total)
            self._advance(meta, turn, now)
        else:
            t.open -= set(due) | have  # what is stored counts, the due ones with it
            t.received = t.total - len(t.open)
            t.due = next_due
        return Expiry(next_due is None, tuple(due), next_due)

    # --- LivenessPort --------------------------------------------------------------------------
    def list_overdue(self, now_ms: int, limit: int = 100) -> list[Overdue]:
        shards: dict[int, list[Overdue]] = {}
        for sid, p in self._partitions.items():
            listed = shards.setdefault(deadline_shard(sid), [])
            # As the store: one place in the index per session (its META), an owed think's or else its
            # waiting turn's.
            if p.meta is not None and p.meta.due is not None and p.meta.due <= now_ms:
                owed = p.meta.owed if p.meta.owed is not None else p.meta.turn
                listed.append(Overdue(sid, owed, "think", p.meta.due))
            elif p.meta is None or p.meta.due is None:
                for turn, t in p.turns.items():
                    if t.due is not None and t.due <= now_ms:
                        # As the store: due at its earliest open deadline, which a kept listing may follow.
                        agg = self._turn_view(sid, turn, t)
                        due = min((agg.deadline_of(i) for i in t.open), default=t.due)
                        listed.append(Overdue(sid, turn, "deadline", due))
        return [o for shard in sorted(shards) for o in sorted(shards[shard], key=lambda o: o.due_ms)[:limit]]

    def _move_load(self, delta: int) -> None:
        load = self.load = self.load or {"busy": 0, "seq": 0}
        load["busy"] += delta
        load["seq"] += 1

    def busy_count(self) -> int:
        return self.load["busy"] if self.load is not None else 0

    def recount_load(self, every_ms: int) -> int | None:
        now = self.now_ms()
        if self.load is None or now - self.load.get("recounted_at", 0) < every_ms:
            return None
        self.load["recounted_at"] = now
        # Every stored session that holds a slot (one past its retention, not deleted yet, still does).
        held = sum(1 for p in self._partitions.values() if p.meta is not None and p.meta.holds_load)
        self.load["busy"] = held
        return held

    def owed_think(self, session_id: str) -> int | None:
        meta = self._part(session_id).meta
        if meta is None or not self._alive(meta.expires_s) or meta.status not in ("busy", SESSION_CANCELED):
            return None
        return meta.owed if meta.owed is not None and meta.owed == meta.turn else None

    def clear_owed_think(self, session_id: str, turn: int) -> None:
        meta = self._part(session_id).meta
        if meta is not None and meta.owed == turn:
            meta.owed, meta.due = None, None

    def defer_owed_think(self, session_id: str, turn: int, delay_ms: int = 0, due_by_ms: int | None = None) -> bool:
        meta = self._part(session_id).meta
        if meta is None or meta.owed != turn or (due_by_ms is not None and (meta.due is None or meta.due > due_by_ms)):
            return False
        meta.due = self.now_ms() + max(0, delay_ms) + self.owed_think_grace_ms
        return True

    # --- DispatchPort ----------------------------------------------------------------------------
    def claim_dispatch(
        self, session_id: str, turn: int, tool_use_id: str, retention_ms: int, status: str = "sending"
    ) -> bool:
        claims = self._part(session_id).dispatches
        if claims.get((turn, tool_use_id), "sending") != "sending":
            return False
        claims[(turn, tool_use_id)] = status
        return True

    def finish_dispatch(self, session_id: str, turn: int, tool_use_id: str, status: str) -> None:
        self._part(session_id).dispatches[(turn, tool_use_id)] = status
