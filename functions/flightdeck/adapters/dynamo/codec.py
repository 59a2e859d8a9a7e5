"""Items <-> records: DynamoDB's attribute values, and the domain's records rebuilt from stored items."""

from __future__ import annotations

import json
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from flightdeck.adapters.dynamo.keys import (
    AGG_AT,
    AGG_BY,
    AGG_DEADLINE,
    AGG_DEADLINES,
    AGG_EXPECTED,
    AGG_OPEN,
    AGG_STATUS,
    AGG_TOTAL,
    AGG_TTL,
    AGG_TURN,
    DUE,
    FIRST_KEY,
    FIRST_MSG,
    FIRST_TURN,
    INBOX,
    LIVE,
    META,
    SK,
    TTL,
    WATCH,
)
from flightdeck.domain.numerals import parse_nonneg_int
from flightdeck.domain.records import (
    Iteration,
    LiveText,
    MessageSlot,
    QueuedMessage,
    ReplyRoute,
    ResultSource,
    Stamp,
    ToolResult,
    TurnAggregation,
)

SERIALIZER = TypeSerializer()
DESERIALIZER = TypeDeserializer()


def dumps(value: Any) -> str:
    # Stored as UTF-8 without escaping: the stored size is the text's own size (an escaped
    # non-ASCII character would take up to 6 bytes against DynamoDB's 400 KB item limit).
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def queued_message(item: dict[str, Any]) -> QueuedMessage:
    route = None
    if item.get("reply_service"):
        route = (item["reply_service"], item["reply_token"], int(item.get("reply_expires", 0)))
    return QueuedMessage(
        key=item[SK][len(INBOX) :],
        seq=int(item.get("seq", 0)),
        message=json.loads(item["content"]),
        turn=int(item.get("turn", 0)),
        route=route,
        task_key=item.get("task_key", ""),
        message_id=item.get("message_id", ""),
    )


def ddb_item(**attrs: Any) -> dict[str, Any]:
    return {k: SERIALIZER.serialize(v) for k, v in attrs.items() if v is not None}


def plain_item(item: dict[str, Any]) -> dict[str, Any]:
    return {k: DESERIALIZER.deserialize(v) for k, v in item.items()}


def attr_values(**values: Any) -> dict[str, Any]:
    return {f":{k}": SERIALIZER.serialize(v) for k, v in values.items()}


def route_live(route: dict[str, Any] | None, now_ms: int) -> bool:
    """Whether a stored route (META's map, or a ROUTE item) still waits for its answer."""
    if not route:
        return False
    return route.get("status") == "active" and int(route.get(TTL, 0)) > now_ms // 1000


def stored_messages(items: list[dict[str, Any]]) -> list[tuple[int, int, dict[str, Any]]]:
    """(turn, slot, message) of every stored message, in conversation order: the message items, each
    inbox item whose turn started as that turn's input, and each iteration's model reply as the
    assistant message of its turn (stored once, never copied)."""
    return [(turn, slot, message) for turn, slot, message, _ in stored_items(items)]


def stored_items(items: list[dict[str, Any]]) -> list[tuple[int, int, dict[str, Any], dict[str, Any]]]:
    """stored_messages, each with the item it was read from."""
    out = []
    for i in items:
        parts = i[SK].split("#")
        if parts[0] == "ITER":
            out.append((int(parts[1]), int(MessageSlot.REPLY), json.loads(i["reply"])["message"], i))
        elif parts[0] == "MSG":
            out.append((int(parts[1]), int(parts[2]), json.loads(i["content"]), i))
        elif parts[0] == "INBOX" and int(i.get("turn", 0)):
            out.append((int(i["turn"]), int(MessageSlot.INPUT), json.loads(i["content"]), i))
        elif parts[0] == META and FIRST_MSG in i:  # a new session's first message, stored on its META
            out.append((int(i[FIRST_TURN]), int(MessageSlot.INPUT), json.loads(i[FIRST_MSG]), i))
    return sorted(out, key=lambda t: (t[0], t[1]))


def conversation(
    items: list[dict[str, Any]], current_turn: int, created_at: int = 0
) -> tuple[list[dict[str, Any]], list[Stamp]]:
    """The Converse messages, rebuilt from what is stored once: the message items in key order,
    and after an assistant message that called tools in a turn that has completed, the user
    message of their results, built from the turn's result items in call order. With each, its
    Stamp: the times its items carry anyway (created_at: the session's, the first message's time
    when its item has none)."""
    results: dict[int, dict[str, dict[str, Any]]] = {}
    # Iterations whose reply ended their turn although it called tools (it asked for input: the next
    # message answers its calls, flightdeck.domain.asking): they have no results to rebuild.
    answered_by_message: set[int] = set()
    for i in items:
        if i[SK].startswith("RESULT#"):
            results.setdefault(int(i[SK].split("#")[1]), {})[i["tool_use_id"]] = i
        elif i[SK].startswith("ITER#") and i.get("ends_turn"):
            answered_by_message.add(int(i[SK].split("#")[1]))
    stored = stored_items(items)
    # When each turn's calls were handed out: its reply's item says (put in the write that opened them).
    dispatched = {
        int(i["turn"]): int(i["dispatched"]) for i in items if i[SK].startswith("ITER#") and "dispatched" in i
    }
    meta = next((i for i in items if i[SK] == META), {})
    if AGG_AT in meta:  # a turn opened on its own (an A2A session's): its aggregation on META says
        dispatched.setdefault(int(meta[AGG_TURN]), int(meta[AGG_AT]))
    messages: list[dict[str, Any]] = []
    stamps: list[Stamp] = []
    for index, (turn, _slot, message, item) in enumerate(stored):
        messages.append(message)
        stamps.append(stamp_of(item, dispatched.get(turn, 0), created_at if index == 0 else 0))
        uses = [b["toolUse"] for b in message.get("content", []) if "toolUse" in b]
        if message.get("role") != "assistant" or not uses or turn >= current_turn or turn in answered_by_message:
            continue
        following = stored[index + 1][2] if index + 1 < len(stored) else {}
        if any("toolResult" in b for b in following.get("content", [])):
            continue  # the results were stored with the message (a canceled turn's closing)
        got = results.get(turn, {})
        messages.append(
            {"role": "user", "content": [result_of(got.get(u["toolUseId"]), u["toolUseId"]).as_block() for u in uses]}
        )
        recorded = {k: int(v.get("recorded_at", 0)) for k, v in got.items()}
        stamps.append(Stamp(at=max(recorded.values(), default=0), results=recorded))
    return messages, stamps


def stamp_of(item: dict[str, Any], dispatched: int, fallback: int) -> Stamp:
    """A stored message's times: a reply's think (stored in its ITER item's reply), a message's arrival."""
    if item[SK].startswith("ITER#"):
        reply = json.loads(item["reply"])
        think, usage = reply.get("think") or {}, reply.get("usage") or {}
        return Stamp(
            at=int(think.get("ended_ms", 0)),
            started=int(think.get("started_ms", 0)),
            tokens_in=int(usage.get("inputTokens", 0)),
            tokens_out=int(usage.get("outputTokens", 0)),
            dispatched=dispatched,
        )
    return Stamp(at=int(item.get("at") or item.get("accepted_at") or fallback))


def this_life(items: list[dict[str, Any]], base_turn: int, created_at: int) -> list[dict[str, Any]]:
    """The items of a session put over an expired one (take_message): its turns count from base_turn,
    so an item of an earlier turn, or a message queued before it began, is the old session's."""

    def turn_of(item: dict[str, Any]) -> int | None:
        head = item[SK].split("#")
        turn = parse_nonneg_int(head[1]) if len(head) > 1 else None
        if head[0] in ("ITER", "MSG", "TURN", "RESULT", "DISPATCH") and turn is not None:
            return turn
        if head[0] == "INBOX":
            return int(item["turn"]) if int(item.get("turn", 0)) else None
        return None

    kept = []
    for item in items:
        turn = turn_of(item)
        if turn is not None and turn < base_turn:
            continue
        if item[SK].startswith(INBOX) and turn is None and int(item.get("accepted_at", 0)) < created_at:
            continue
        kept.append(item)
    return kept


def calls_tools(reply: dict[str, Any]) -> bool:
    return any("toolUse" in b for b in (reply.get("message") or {}).get("content", []))


def iteration_of(session_id: str, turn: int, item: dict[str, Any]) -> Iteration:
    return Iteration(session_id, turn, json.loads(item["reply"]))


def reply_route(session_id: str, item: dict[str, Any]) -> ReplyRoute:
    answered = None
    if item.get("answered_service"):
        answered = ReplyRoute(
            session_id,
            item["answered_service"],
            item["answered_token"],
            "retired",
            int(item.get("answered_expires", 0)),
            int(item.get("answered_turn", 0)),
        )
    return ReplyRoute(
        session_id,
        item["callback_service"],
        item["bearer_token"],
        item["status"],
        int(item[TTL]),
        int(item.get("retired_turn", 0)),
        int(item.get("from_turn", 0)),
        answered,
    )


def aggregation_of(session_id: str, turn: int, meta: dict[str, Any] | None, now_ms: int) -> TurnAggregation | None:
    """Turn `turn`'s aggregation as META holds it: None when META holds another turn's (or none), or a
    completed one past its tombstone."""
    if not meta or AGG_TURN not in meta or int(meta[AGG_TURN]) != turn:
        return None
    waiting = meta[AGG_STATUS] == "waiting"
    if not waiting and int(meta.get(AGG_TTL, 0)) <= now_ms // 1000:
        return None
    total = int(meta[AGG_TOTAL])
    return TurnAggregation(
        session_id=session_id,
        turn=turn,
        expected=frozenset(meta.get(AGG_EXPECTED, ())),
        total=total,
        received=total - len(meta.get(AGG_OPEN, ())) if waiting else total,
        status=meta[AGG_STATUS],
        deadline_ms=int(meta[AGG_DEADLINE]),
        completed_by=meta.get(AGG_BY, ""),
        deadlines={k: int(v) for k, v in (meta.get(AGG_DEADLINES) or {}).items()},
        # META is in the deadline index for the turn only while it waits (after, for the owed think).
        due_ms=int(meta.get(DUE, 0)) if waiting else 0,
    )


def first_input(meta: dict[str, Any], turn: int) -> QueuedMessage | None:
    """A new session's first message with an identity, stored on its META, as the inbox item it stands for
    (the input of its turn)."""
    if FIRST_KEY not in meta or int(meta.get(FIRST_TURN, -1)) != turn:
        return None
    return QueuedMessage(key=meta[FIRST_KEY], seq=0, message=json.loads(meta[FIRST_MSG]), turn=turn)


def legacy_aggregation_of(session_id: str, turn: int, item: dict[str, Any]) -> TurnAggregation:
    """A TURN item's aggregation (a session stored before it moved onto META), read as it was."""
    return TurnAggregation(
        session_id=session_id,
        turn=turn,
        expected=frozenset(item.get("expected", ())),
        total=int(item["total_tools"]),
        received=int(item["received"]),
        status=item["status"],
        deadline_ms=int(item["deadline_ms"]),
        completed_by=item.get("completed_by", ""),
        deadlines={k: int(v) for k, v in (item.get("deadlines") or {}).items()},
        due_ms=int(item.get(DUE, 0)),
    )


def result_of(item: dict[str, Any] | None, tool_use_id: str) -> ToolResult:
    if item is None:
        # Every completion writes a result for each expected id: this is an id past the hard limit.
        return ToolResult(
            tool_use_id, "error", json.dumps({"status": "error", "reason": "missing"}), ResultSource.TIMEOUT
        )
    return ToolResult(
        item["tool_use_id"],
        item["result_status"],
        item["text"],
        ResultSource(item["source"]),
        int(item.get("recorded_at", 0)),
    )


def live_fields(by_sk: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The live relay's Session fields (flightdeck.adapters.live_state writes the items)."""
    watch, live = by_sk.get(WATCH), by_sk.get(LIVE)
    return {
        "watched_until_ms": int(watch["until"]) if watch else 0,
        "live": LiveText(int(live["turn"]), int(live["attempt"]), str(live["text"])) if live else None,
    }
