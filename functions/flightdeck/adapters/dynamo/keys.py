"""The table's key layout and attribute names, shared by every store on it (and a2a_state, live_state)."""

from __future__ import annotations

import zlib

from flightdeck import topology
from flightdeck.domain.records import SESSION_CANCELED

PK, SK, TTL = topology.PARTITION_KEY, topology.SORT_KEY, topology.TTL_ATTRIBUTE
SHARD, DUE = topology.DEADLINE_SHARD_ATTRIBUTE, topology.DEADLINE_AT_ATTRIBUTE

META = "META"
ROUTE = "ROUTE"  # a session's reply route as its own item: sessions stored before the route moved into META
# The session's reply route (B side): a map on META with the attributes the ROUTE item had, changed in
# the writes that change META anyway (ingest, end of turn): no item, no transaction item, of its own.
ROUTE_ATTR = "route"
# The A2A store's pointer to a session's task, and its task items (flightdeck.adapters.a2a_state).
A2A_CURRENT = "A2A#CURRENT"
A2A_TASK = "A2A#TASK#"
# The session's inbox (ARCHITECTURE §2): one item per message that was queued or named by the client,
# keyed by its identity; META counts the messages queued (`inbox_count`) and those whose turn started
# (`inbox_consumed`), so "nothing waits" is a condition on META alone.
INBOX = "INBOX#"
INBOX_COUNT, INBOX_CONSUMED = "inbox_count", "inbox_consumed"
# The agent's load (max_concurrent_tasks, ARCHITECTURE §2): one counter item of sessions holding a slot, and
# on the META of each such session the mark HOLDS_LOAD. A slot is taken in the transaction that makes a
# session busy (conditioned on the count being below the limit) and given back in the one that makes it idle,
# so no crash between two writes can lose one; only a busy session deleted by TTL can, which recount_load
# repairs. No limit configured: none of this is written.
LOAD_PK, LOAD_SK = "AGENT#load", "COUNT"
LOAD_BUSY, LOAD_SEQ, LOAD_RECOUNTED = "busy", "seq", "recounted_at"
HOLDS_LOAD = "holds_load"
# On META: the think iteration owed, due in the deadline index (table.OWED_THINK_GRACE_MS).
OWED = "owed_think"
# When the think was marked owed (ms): the sweep re-sends it only a grace after this, whatever time the index
# lists the session at (a write that keeps the session in the index keeps its listed time: ARCHITECTURE §3).
OWED_AT = "owed_at"
# On META: the current turn's aggregation (ARCHITECTURE §2), so that a result's count, and the last one's
# completion with the next think's claim, is one UpdateItem of the session item. While it waits, META is in
# the deadline index at its earliest open deadline (no think is owed then: the think that opened it ran).
AGG_TURN, AGG_STATUS, AGG_EXPECTED, AGG_OPEN = "agg_turn", "agg_status", "agg_expected", "agg_open"
AGG_TOTAL, AGG_DEADLINE, AGG_DEADLINES, AGG_BY = "agg_total", "agg_deadline", "agg_deadlines", "agg_by"
AGG_AT, AGG_TTL = "agg_at", "agg_ttl"  # when it opened (the timeline's dispatch time); a completed one's end
# On META: a new session's first message, when it has no identity and is small (ARCHITECTURE §2): stored in
# the write that creates the session instead of as MSG#<turn>#0, one item fewer; its turn with it.
FIRST_MSG, FIRST_TURN = "first_msg", "first_turn"
# ...and its identity, when it has one (a delegation's reply token, a client's message id): a repeat is
# recognised on META, as an inbox item's would be (A2A messages keep their inbox item: its task and id).
FIRST_KEY = "first_key"
# Larger messages keep their own item: META is rewritten by every step of the session, and each of those
# writes is billed by META's size (1 unit per KB, 2 in a transaction).
FIRST_MSG_MAX_BYTES = 400
# A session's think claim (flightdeck.adapters.dynamo.iterations.claim_think): one small item, taken over by
# each think before it asks the model; not META, whose writes are billed by its size and start the stream's
# starter (ARCHITECTURE §3).
THINK_CLAIM = "THINK"
# The live relay's items (flightdeck.adapters.live_state), same partition: read with the session.
WATCH = "WATCH"
LIVE = "LIVE"
CANCELED = SESSION_CANCELED


def session_pk(session_id: str) -> str:
    return f"S#{session_id}"


def legacy_turn_sk(turn: int) -> str:
    # A turn's aggregation as its own item, as sessions stored before it moved onto META have it: taken
    # over onto META by the first writer that needs it (flightdeck.adapters.dynamo.turns).
    return f"TURN#{turn:06d}"


def result_sk(turn: int, tool_use_id: str) -> str:
    return f"RESULT#{turn:06d}#{tool_use_id}"


def msg_sk(turn: int, slot: int) -> str:
    # Ordered by think iteration, then by its place in it (flightdeck.domain.records.MessageSlot):
    # a message's key is known before it is written, so an append is one conditional put.
    return f"MSG#{turn:06d}#{int(slot)}"


def inbox_sk(key: str) -> str:
    return INBOX + key


def iter_sk(turn: int) -> str:
    return f"ITER#{turn:06d}"


def dispatch_sk(turn: int, tool_use_id: str) -> str:
    return f"DISPATCH#{turn:06d}#{tool_use_id}"


def deadline_shard(session_id: str) -> str:
    return f"open#{zlib.crc32(session_id.encode()) % topology.DEADLINE_SHARDS}"
