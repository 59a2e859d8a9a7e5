"""DynamoDB adapter of the agent's state: one table per agent (flightdeck.topology), one module per port.

Every invariant of docs/ARCHITECTURE.md §2 is a condition expression evaluated by DynamoDB, never a
read-then-write:
  - a result item is put with attribute_not_exists (first writer wins);
  - a result counts only while its turn is waiting and expects that id, in the
    same transaction as the put;
  - waiting -> complete is a conditional update; the winner alone gets True;
  - a message queued in a busy session's inbox counts on META in the same transaction, and a turn
    ends idle only while that count equals the consumed one (else it starts the next turn).
moto does not delete expired items (nor does AWS promptly): reads filter on the TTL attribute.

Layout: `table` (client, clock, reads, transactions), `conflicts` (the client's retry of a write that
collided with a transaction), `keys` (key layout, attribute names), `codec`
(item <-> record), `ops` (the transaction items several stores put in one write), a store per port
(`sessions` with `intake`, `iterations`, `turns`, `liveness`, `dispatch`), and `store.StateStore`, the
one object that serves them all. Writes that cross aggregates stay one transaction: the code is split,
not the writes.
"""
