"""`flightdeck chat`: a terminal client for one of our agents (POST /api/chat, GET /api/sessions/{id}/events)
or for any A2A v0.3 agent (its card, message/send or message/stream, tasks/get, tasks/cancel).

A tool (infra.bundling.TOOLS): it only speaks HTTP to an agent and is never imported by Lambda code.
"""

TOKEN_ENV = "FLIGHTDECK_TOKEN"  # where the bearer token is read from without --token
DEFAULT_WAIT_S = 600.0  # how long one message waits for its answer, unless --wait says otherwise
