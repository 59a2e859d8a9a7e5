"""The owed-think mark out of the deadline index, when the table's stream starts owed thinks.

With `THINK_START = "stream"` (ARCHITECTURE §3) the consumer of the table's stream starts a think the
moment a write marks it owed, so the mark no longer needs the deadline index on the normal path: a
write that sets `owed_think` keeps the mark on META (the think's conditions read it) without the index's
keys (`due_shard`, `due_at`: removed, so an item a waiting turn had put in the index leaves it). That is
about 2 index write units per think. Only the recovery paths put a mark there (LivenessStore.defer_owed_think:
a think given up, a failed start, a throttled model's retry), for the sweep.

Why a request hook and not the builders: the mark is written by five builders in three modules (ingest,
completion, a queued turn's start, a cancel); the hook sees every write on the store's client, so no
builder can put a mark into the index by mistake, and each builder stays as the index mode needs it.
"""

from __future__ import annotations

import re
from typing import Any

from flightdeck.adapters.dynamo.keys import DUE, OWED, SHARD

INDEX_KEYS = (SHARD, DUE)

_CLAUSE = re.compile(r"(?:^|(?<=\s))(SET|REMOVE|ADD|DELETE)\s+", re.IGNORECASE)
_PLACEHOLDER = re.compile(r":[A-Za-z0-9_]+")


def _split_top(body: str) -> list[str]:
    """An action list split at its top-level commas (a function's arguments keep theirs)."""
    actions, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            actions.append(body[start:i].strip())
            start = i + 1
    actions.append(body[start:].strip())
    return [a for a in actions if a]


def _clauses(expression: str) -> list[tuple[str, list[str]]]:
    parts = _CLAUSE.split(expression)
    return [(parts[i].upper(), _split_top(parts[i + 1])) for i in range(1, len(parts) - 1, 2)]


def unindex_update(update: dict[str, Any]) -> None:
    """An Update (UpdateItem's parameters, or a transaction's Update) that sets the owed mark: its index
    keys' assignments become a REMOVE (the item leaves the index if a waiting turn had put it there)."""
    expression = update.get("UpdateExpression", "")
    names = update.get("ExpressionAttributeNames") or {}
    clauses = _clauses(expression)
    sets = [a for kw, actions in clauses if kw == "SET" for a in actions]

    def target(action: str) -> str:
        path = action.split("=", 1)[0].strip()
        return str(names.get(path, path))

    if not any(target(a) == OWED for a in sets):
        return
    shard = [a for a in sets if target(a) in INDEX_KEYS]
    if not shard:
        return
    removed = [a.split("=", 1)[0].strip() for a in shard]
    rebuilt: list[str] = []
    remove_done = False
    for kw, actions in clauses:
        kept = [a for a in actions if a not in shard] if kw == "SET" else list(actions)
        if kw == "REMOVE":
            kept += [r for r in removed if r not in kept]
            remove_done = True
        if kept:
            rebuilt.append(f"{kw} {', '.join(kept)}")
    if not remove_done:
        rebuilt.append(f"REMOVE {', '.join(removed)}")
    update["UpdateExpression"] = " ".join(rebuilt)
    # A value only the shard's assignment used is unused now, which DynamoDB refuses.
    used = set(_PLACEHOLDER.findall(update["UpdateExpression"] + " " + update.get("ConditionExpression", "")))
    values = update.get("ExpressionAttributeValues")
    if values:
        for placeholder in [p for a in shard for p in _PLACEHOLDER.findall(a.split("=", 1)[1])]:
            if placeholder not in used:
                values.pop(placeholder, None)


def unindex_put(put: dict[str, Any]) -> None:
    """A Put of an item with the owed mark (a new session): without the index's keys."""
    item = put.get("Item") or {}
    if OWED in item:
        for key in INDEX_KEYS:
            item.pop(key, None)


def _rewrite(params: dict[str, Any], model: Any, **_: Any) -> None:
    operation = getattr(model, "name", "")
    if operation == "UpdateItem":
        unindex_update(params)
    elif operation == "PutItem":
        unindex_put(params)
    elif operation == "TransactWriteItems":
        for entry in params.get("TransactItems", []):
            if "Update" in entry:
                unindex_update(entry["Update"])
            elif "Put" in entry:
                unindex_put(entry["Put"])


def keep_owed_marks_out_of_index(client: Any) -> None:
    """Rewrite, on this DynamoDB client, every write that marks a think owed (see the module's doc)."""
    for operation in ("UpdateItem", "PutItem", "TransactWriteItems"):
        client.meta.events.register(f"before-parameter-build.dynamodb.{operation}", _rewrite)
