"""The invariants the explorer checks once the system has recovered (docs/ARCHITECTURE.md §3).

Each reads what is stored (the agent's table on moto, and each session's conversation rebuilt from it) and what the world saw go out (the caller's deliveries, the model's asks). Each returns
what breaks it, one line per finding; none is a finding.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from boto3.dynamodb.types import TypeDeserializer

from flightdeck import wiring
from flightdeck.domain.asking import ASK_USER
from tests.support.explorer.world import World

_de = TypeDeserializer()
OPEN_A2A = ("submitted", "working")  # input-required waits on an idle session by design
Views = dict[str, dict[str, Any]]


def _scan(world: World) -> list[dict[str, Any]]:
    """The table's items as DynamoDB stores them (one scan: each run has a table of its own)."""
    client, table = world.agent.dynamodb, world.agent.table
    out, start = [], None
    while True:
        page = client.scan(TableName=table, ConsistentRead=True, **({"ExclusiveStartKey": start} if start else {}))
        out += [i for i in page["Items"] if i["pk"]["S"].startswith("S#")]
        start = page.get("LastEvaluatedKey")
        if not start:
            return out


def _sid(item: dict[str, Any]) -> str:
    return str(item["pk"])[2:]


def _metas(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {_sid(i): i for i in items if i["sk"] == "META"}


def _views(world: World, raw: list[dict[str, Any]]) -> Views:
    """Each session's conversation as the model is given it (what GET /api/sessions/{id} shows), rebuilt by
    the store from the scanned items: its read of a snapshot, so no request more."""
    store = wiring.state_store()
    out = {}
    # Every session stored, not only those the scenario named (an MCP call's session is named by the agent).
    for sid in dict.fromkeys([*world.sessions, *sorted({i["pk"]["S"][2:] for i in raw})]):
        mine = [i for i in raw if i["pk"]["S"] == f"S#{sid}"]
        session = store.get_session(sid, json.dumps(mine)) if mine else None
        if session is not None:
            out[sid] = {"messages": session.messages}
    return out


def busy_past_bound(world: World, items: list[dict[str, Any]], views: Views) -> list[str]:
    """No session busy past its bound: with the clock past every bound and the sweeps run, all are idle."""
    return [
        f"{sid}: {m['status']} at turn {m.get('turn')} (owed think: {m.get('owed_think', 'none')})"
        for sid, m in _metas(items).items()
        if m.get("status") != "idle"
    ]


def inbox_unturned(world: World, items: list[dict[str, Any]], views: Views) -> list[str]:
    """No inbox message left unturned: each queued message started its turn, and the counts agree."""
    found = [
        f"{_sid(i)}: {i['sk'][:14]}… (seq {i.get('seq')}) never started a turn"
        for i in items
        if i["sk"].startswith("INBOX#") and i.get("turn") is None
    ]
    for sid, m in _metas(items).items():
        waiting = int(m.get("inbox_count", 0)) - int(m.get("inbox_consumed", 0))
        if waiting:
            found.append(f"{sid}: {m['status']} with queued {waiting}")
    return found


def a2a_open_on_idle(world: World, items: list[dict[str, Any]], views: Views) -> list[str]:
    """No A2A task submitted or working while its session is idle (or was never started)."""
    metas = _metas(items)
    return [
        f"{_sid(i)}: task {i['sk'][9:17]}… {i.get('state')} while the session is "
        + (metas[_sid(i)]["status"] if _sid(i) in metas else "absent")
        for i in items
        if i["sk"].startswith("A2A#TASK#")
        and i.get("state") in OPEN_A2A
        and (metas.get(_sid(i)) or {}).get("status", "idle") == "idle"
    ]


def delegations_settled(world: World, items: list[dict[str, Any]], views: Views) -> list[str]:
    """Every delegation settled exactly once: each turn that waited completed, each call has one
    result in the conversation; each delegation to us got its answer (unless its owner canceled)."""
    found = []
    results = {(_sid(i), i["sk"]) for i in items if i["sk"].startswith("RESULT#")}
    # A turn's aggregation is on its session's META (the latest one: each earlier turn completed to start it).
    for t in (i for i in items if i["sk"] == "META" and "agg_turn" in i):
        sid, turn = _sid(t), int(t["agg_turn"])
        if t.get("agg_status") != "complete":
            found.append(f"{sid}: turn {turn} still {t.get('agg_status')}")
        missing = [x for x in t.get("agg_expected", []) if (sid, f"RESULT#{turn:06d}#{x}") not in results]
        if missing:
            found.append(f"{sid}: turn {turn} has no result for {len(missing)} call(s)")
    for sid, view in views.items():
        calls = [
            b["toolUse"]["toolUseId"]
            for m in view["messages"]
            for b in m["content"]
            if "toolUse" in b and b["toolUse"]["name"] != ASK_USER
        ]
        answered = defaultdict(int)
        for m in view["messages"]:
            for b in m["content"]:
                if "toolResult" in b:
                    answered[b["toolResult"]["toolUseId"]] += 1
        found += [f"{sid}: call {c[-8:]} has {answered[c]} results" for c in calls if answered[c] != 1]
    for token, sid in world.reply_tokens.items():
        if not world.deliveries.get(token) and sid not in world.canceled:
            found.append(f"{sid}: the delegation with route …{token[-6:]} was never answered")
    return found


def answered_twice(world: World, items: list[dict[str, Any]], views: Views) -> list[str]:
    """No answer delivered twice: one answer per reply route (a re-send of the same one is the
    caller's to deduplicate, §4), and no message answered twice in a conversation."""
    found = [
        f"route …{token[-6:]} got {len(set(got))} different answers"
        for token, got in world.deliveries.items()
        if len(set(got)) > 1
    ]
    for sid, view in views.items():
        roles = [m["role"] for m in view["messages"]]
        twice = [n for n in range(1, len(roles)) if roles[n] == roles[n - 1] == "assistant"]
        if twice:
            found.append(f"{sid}: message {twice[0]} is a second answer in a row")
    return found


def model_asked_twice(world: World, items: list[dict[str, Any]], views: Views) -> list[str]:
    """No model asked twice for one think: never once its reply is stored, except a new session's
    first think run again from its snapshot (§6). A think that died before storing is asked again."""
    return [
        f"{a.session_id}: think {a.turn} asked again after its reply was stored"
        for a in world.asks
        if a.stored_already and not a.from_snapshot
    ]


def model_asked_beside(world: World, items: list[dict[str, Any]], views: Views) -> list[str]:
    """No two runs of one think ask the model at once: the second finds the first's claim and stops (§6)."""
    return [f"{a.session_id}: think {a.turn} asked by two runs at once" for a in world.asks if a.beside]


def mcp_called_twice(world: World, items: list[dict[str, Any]], views: Views) -> list[str]:
    """No deferred MCP call made twice: the dispatch worker calls a slow tool at most once, whatever it died
    after (flightdeck.domain.mcp_tools.run_deferred). An inline call is the think's: a think that died before
    storing its reply is run again, tools and all (docs/MCP.md)."""
    made: dict[tuple[str, str], int] = defaultdict(int)
    for function, tool, arguments in world.mcp_calls:
        if function.startswith("dispatch"):
            made[(tool, arguments)] += 1
    return [
        f"the deferred call {tool} {arguments} was made {n} times" for (tool, arguments), n in made.items() if n > 1
    ]


INVARIANTS: dict[str, Callable[[World, list[dict[str, Any]], Views], list[str]]] = {
    "no session busy past its bound": busy_past_bound,
    "no inbox message left unturned": inbox_unturned,
    "no A2A task open while its session is idle": a2a_open_on_idle,
    "every delegation settled exactly once": delegations_settled,
    "no answer delivered twice": answered_twice,
    "no model asked twice for one think": model_asked_twice,
    "no model asked by two runs of one think at once": model_asked_beside,
    "no deferred MCP call made twice": mcp_called_twice,
}


def check(world: World) -> list[tuple[str, str]]:
    """(invariant, what breaks it) for every finding."""
    raw = world.scanned = _scan(world)
    items, views = [{k: _de.deserialize(v) for k, v in i.items()} for i in raw], _views(world, raw)
    return [(name, detail) for name, test in INVARIANTS.items() for detail in test(world, items, views)]
