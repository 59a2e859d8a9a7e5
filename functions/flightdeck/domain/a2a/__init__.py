"""A2A v0.3, the protocol add-on: it plugs into the core through ports (Deps.turn_hooks, Deps.transports,
Deps.a2a), registered in flightdeck.wiring; the core imports none of it.

tasks: the server side (message/send, tasks/get, tasks/cancel, the turn hooks); client: delegating to an
A2A peer; stream: message/stream and tasks/resubscribe; wire: the A2A objects and JSON-RPC envelopes;
ports: what it needs from the outside; constants: the few names other code shares.
"""
